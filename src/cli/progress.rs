//! The progress bar `publish` draws on stderr while it stages files: bytes and files done,
//! rate and time left. Drawn only for a person watching a terminal, and only once staging
//! has run for a moment; with `--json`, or when stderr is a pipe or a file, nothing at
//! all, so scripts and logs never see it.

use crate::execute::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Staging shorter than this draws nothing: a bar that flashes by helps nobody.
const DELAY: Duration = Duration::from_millis(500);

/// Whether `publish` draws a progress bar: not when its output is JSON for a program, and
/// only when stderr is a terminal that can redraw a line (`TERM=dumb` cannot).
pub fn wants_progress(json: bool, stderr_is_terminal: bool, term: Option<&str>) -> bool {
    !json && stderr_is_terminal && term != Some("dumb")
}

/// A progress bar fed by the staging threads.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    shown: AtomicBool,
    files_total: AtomicU64,
    files_done: AtomicU64,
}

impl Bar {
    /// A bar that stays hidden until staging has run for a moment.
    pub fn new() -> Bar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template(
            "[{wide_bar}] {bytes}/{total_bytes}, {msg}, {binary_bytes_per_sec}, ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        Bar {
            bar,
            shown: AtomicBool::new(false),
            files_total: AtomicU64::new(0),
            files_done: AtomicU64::new(0),
        }
    }

    fn show_when_due(&self) {
        if !self.shown.load(Ordering::Relaxed)
            && self.bar.elapsed() >= DELAY
            && !self.shown.swap(true, Ordering::Relaxed)
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

impl Default for Bar {
    fn default() -> Self {
        Bar::new()
    }
}

impl Progress for Bar {
    fn start(&self, _destination: &str, files: u64, bytes: u64) {
        // Rate, time left and the delay count from here, not from when the command began.
        self.bar.reset();
        self.files_total.store(files, Ordering::Relaxed);
        self.bar.set_length(bytes);
        self.bar.set_message(format!("0/{files} files"));
    }

    fn bytes(&self, n: u64) {
        self.bar.inc(n);
        self.show_when_due();
    }

    fn file_done(&self) {
        let done = self.files_done.fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.files_total.load(Ordering::Relaxed);
        self.bar.set_message(format!("{done}/{total} files"));
        self.show_when_due();
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Progress as lines on a stderr that is not a terminal (a CI log, a file), at most one
/// every [`Lines::EVERY`]: `publish latest: 12,000/100,000 files, 1.2 GiB, 41 s`.
#[derive(Debug)]
pub struct Lines {
    command: &'static str,
    every: Duration,
    state: std::sync::Mutex<LinesState>,
}

#[derive(Debug)]
struct LinesState {
    destination: String,
    files_total: u64,
    files_done: u64,
    bytes_done: u64,
    started: std::time::Instant,
    last: std::time::Instant,
}

impl Lines {
    /// How often a line is printed at most (SPEC §20).
    pub const EVERY: Duration = Duration::from_secs(10);

    /// Lines for `command`; `DISTRIBUTOR_PROGRESS_EVERY_MS` shortens the interval (tests).
    pub fn new(command: &'static str) -> Lines {
        let every = std::env::var("DISTRIBUTOR_PROGRESS_EVERY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Self::EVERY, Duration::from_millis);
        let now = std::time::Instant::now();
        Lines {
            command,
            every,
            state: std::sync::Mutex::new(LinesState {
                destination: String::new(),
                files_total: 0,
                files_done: 0,
                bytes_done: 0,
                started: now,
                last: now,
            }),
        }
    }

    fn tick(&self, files: u64, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.files_done += files;
        s.bytes_done += bytes;
        let now = std::time::Instant::now();
        if now.duration_since(s.last) < self.every {
            return;
        }
        s.last = now;
        eprintln!(
            "{} {}: {}/{} files, {}, {} s",
            self.command,
            s.destination,
            thousands(s.files_done),
            thousands(s.files_total),
            crate::report::human_size(s.bytes_done),
            now.duration_since(s.started).as_secs()
        );
    }
}

/// `12000` as `12,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Progress for Lines {
    fn start(&self, destination: &str, files: u64, _bytes: u64) {
        let now = std::time::Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = LinesState {
            destination: destination.to_string(),
            files_total: files,
            files_done: 0,
            bytes_done: 0,
            started: now,
            last: now,
        };
    }

    fn bytes(&self, n: u64) {
        self.tick(0, n);
    }

    fn file_done(&self) {
        self.tick(1, 0);
    }

    fn finish(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12000), "12,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn progress_is_drawn_only_for_a_person_at_a_terminal() {
        assert!(wants_progress(false, true, Some("xterm-256color")));
        assert!(wants_progress(false, true, None));
        assert!(!wants_progress(true, true, Some("xterm")), "--json");
        assert!(
            !wants_progress(false, false, Some("xterm")),
            "stderr is a pipe or file"
        );
        assert!(
            !wants_progress(false, true, Some("dumb")),
            "cannot redraw a line"
        );
    }

    #[test]
    fn a_bar_counts_files_and_bytes_without_drawing_before_its_delay() {
        let b = Bar::new();
        b.start("latest", 2, 10);
        b.bytes(4);
        b.file_done();
        assert_eq!(b.bar.position(), 4);
        assert_eq!(b.files_done.load(Ordering::Relaxed), 1);
        assert!(!b.shown.load(Ordering::Relaxed));
        b.finish();
    }
}
