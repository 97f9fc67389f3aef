//! Progress on stderr (SPEC §20) for `publish`, `plan`, `verify`, `recover`, `prune` and
//! `manifest`: a bar for a person watching a terminal, drawn only once the work has run
//! for a moment; when stderr is a pipe or a file (a CI log), a line at most every 10 s
//! (`publish latest: 12,000/100,000 files, 1.2 GiB, 41 s`). Nothing with `--quiet`. Never
//! a byte on stdout, so `--json` output is the same with or without it.
//!
//! The library counts through [`crate::progress`]; this module only shows the counts.

use crate::progress::{Bytes, Progress, Task, Ticker};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Work shorter than this draws nothing: a bar that flashes by helps nobody.
const DELAY: Duration = Duration::from_millis(500);

/// How often a bar's text (its counts beside the bar) is formatted again at most.
const REWORD: Duration = Duration::from_millis(100);

/// Whether a bar is drawn: not when the output is JSON for a program, and only when
/// stderr is a terminal that can redraw a line (`TERM=dumb` cannot).
pub(super) fn wants_progress(json: bool, stderr_is_terminal: bool, term: Option<&str>) -> bool {
    !json && stderr_is_terminal && term != Some("dumb")
}

/// What a command shows of its progress: a bar, lines, or nothing.
#[derive(Debug)]
pub(super) enum Shown {
    /// A bar on a terminal.
    Bar(Bar),
    /// Lines in a log.
    Lines(Lines),
    /// Nothing (`--quiet`, or nothing worth showing).
    Off,
}

impl Shown {
    /// What `command` shows on this process's stderr: a bar on a terminal (not with
    /// `--json`), lines when stderr is not one; nothing with `--quiet`.
    pub(super) fn on_stderr(command: &'static str, json: bool, quiet: bool) -> Shown {
        let terminal = std::io::stderr().is_terminal();
        let term = std::env::var("TERM").ok();
        if quiet {
            Shown::Off
        } else if wants_progress(json, terminal, term.as_deref()) {
            Shown::Bar(Bar::new(command))
        } else if !terminal {
            Shown::Lines(Lines::new(command))
        } else {
            Shown::Off
        }
    }

    /// Where the library reports to.
    pub(super) fn ticker(&self) -> Ticker<'_> {
        Ticker::to(self.progress())
    }

    /// The [`Progress`] shown, if any.
    pub(super) fn progress(&self) -> Option<&dyn Progress> {
        match self {
            Shown::Bar(b) => Some(b),
            Shown::Lines(l) => Some(l),
            Shown::Off => None,
        }
    }

    /// The command is done: clear the bar before its report is printed.
    pub(super) fn finish(&self) {
        self.ticker().finish();
    }
}

/// A progress bar on stderr, fed from the working threads.
#[derive(Debug)]
pub(super) struct Bar {
    command: &'static str,
    bar: ProgressBar,
    shown: AtomicBool,
    /// The bar's length is bytes (staging), not items.
    by_bytes: AtomicBool,
    /// The task's shape, read when the counts beside the bar are formatted again.
    task: Mutex<Shape>,
    done: AtomicU64,
    bytes: AtomicU64,
    /// Milliseconds since the bar's start when its text was last formatted.
    worded_ms: AtomicU64,
}

/// What a bar or a line says besides its counts.
#[derive(Debug, Clone, Default)]
struct Shape {
    label: String,
    unit: &'static str,
    total: Option<u64>,
    bytes: Option<Bytes>,
}

impl Shape {
    fn of(task: &Task<'_>) -> Shape {
        Shape {
            label: task.label.to_string(),
            unit: task.unit,
            total: task.total,
            bytes: Some(task.bytes),
        }
    }

    fn counts_bytes(&self) -> bool {
        !matches!(self.bytes, None | Some(Bytes::Uncounted))
    }
}

impl Bar {
    /// A bar for `command` that stays hidden until work has run for a moment.
    pub(super) fn new(command: &'static str) -> Bar {
        Bar {
            command,
            bar: ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
            shown: AtomicBool::new(false),
            by_bytes: AtomicBool::new(false),
            task: Mutex::new(Shape::default()),
            done: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            worded_ms: AtomicU64::new(0),
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

    /// Formats the counts beside the bar again, at most every [`REWORD`].
    fn reword(&self, force: bool) {
        let now = self.bar.elapsed().as_millis() as u64;
        let last = self.worded_ms.load(Ordering::Relaxed);
        if !force
            && (now < last + REWORD.as_millis() as u64
                || self
                    .worded_ms
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err())
        {
            return;
        }
        let shape = self.task.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let done = self.done.load(Ordering::Relaxed);
        let msg = match shape.bytes {
            // The bar counts bytes; the items beside it.
            Some(Bytes::Of(_)) => counted(done, shape.total, shape.unit),
            _ if shape.counts_bytes() => format!(
                "{}, {}",
                shape.unit,
                crate::units::human_size(self.bytes.load(Ordering::Relaxed))
            ),
            _ => shape.unit.to_string(),
        };
        self.bar.set_message(msg);
    }
}

impl Progress for Bar {
    fn start(&self, task: &Task<'_>) {
        // Rate, time left and the delay count from here, not from when the command began.
        self.bar.reset();
        self.done.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        self.worded_ms.store(0, Ordering::Relaxed);
        let (template, length) = match (task.bytes, task.total) {
            (Bytes::Of(bytes), _) => (
                "{prefix}: [{wide_bar}] {bytes}/{total_bytes}, {msg}, {binary_bytes_per_sec}, ETA {eta}",
                Some(bytes),
            ),
            (_, Some(total)) => (
                "{prefix}: [{wide_bar}] {human_pos}/{human_len} {msg}, ETA {eta}",
                Some(total),
            ),
            (_, None) => ("{prefix}: {spinner} {human_pos} {msg}, {elapsed}", None),
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        self.bar.set_style(style);
        match length {
            Some(n) => self.bar.set_length(n),
            None => self.bar.unset_length(),
        }
        self.bar.set_prefix(labelled(self.command, task.label));
        (self.by_bytes).store(matches!(task.bytes, Bytes::Of(_)), Ordering::Relaxed);
        *self.task.lock().unwrap_or_else(|p| p.into_inner()) = Shape::of(task);
        self.reword(true);
    }

    fn bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        if self.by_bytes.load(Ordering::Relaxed) {
            self.bar.inc(n);
        }
        self.show_when_due();
    }

    fn done(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
        if !self.by_bytes.load(Ordering::Relaxed) {
            self.bar.inc(n);
        }
        self.reword(false);
        self.show_when_due();
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// `verify latest`, or `manifest` for work on no destination.
fn labelled(command: &str, label: &str) -> String {
    if label.is_empty() {
        command.to_string()
    } else {
        format!("{command} {label}")
    }
}

/// `12,000/100,000 files`, or `8,000 files` when the total is not known.
fn counted(done: u64, total: Option<u64>, unit: &str) -> String {
    match total {
        Some(t) => format!("{}/{} {unit}", thousands(done), thousands(t)),
        None => format!("{} {unit}", thousands(done)),
    }
}

/// Progress as lines on a stderr that is not a terminal (a CI log, a file), at most one
/// every [`Lines::EVERY`]: `publish latest: 12,000/100,000 files, 1.2 GiB, 41 s`,
/// `verify latest: 3,000/20,000 files, 12 s`, `manifest: 8,000/20,000 files, 1.1 GiB, 10 s`.
#[derive(Debug)]
pub(super) struct Lines {
    command: &'static str,
    every: Duration,
    /// The task's counts, added to by the working threads without a lock (staging counts
    /// twice a file, on several threads).
    done: AtomicU64,
    bytes: AtomicU64,
    /// When this was made: the clock of `last_ms`.
    epoch: Instant,
    /// Milliseconds since `epoch` when the last line was printed or the task started.
    last_ms: AtomicU64,
    /// What a line says besides the counts, taken only to print one.
    state: Mutex<LinesState>,
}

/// The task a line speaks of: what it is, and since when.
#[derive(Debug)]
struct LinesState {
    shape: Shape,
    started: Instant,
}

impl Lines {
    /// How often a line is printed at most (SPEC §20).
    pub(super) const EVERY: Duration = Duration::from_secs(10);

    /// Lines for `command`; `DISTRIBUTOR_PROGRESS_EVERY_MS` shortens the interval (tests:
    /// at 0, every count prints a line).
    pub(super) fn new(command: &'static str) -> Lines {
        let every = std::env::var("DISTRIBUTOR_PROGRESS_EVERY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Self::EVERY, Duration::from_millis);
        let now = Instant::now();
        Lines {
            command,
            every,
            done: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            epoch: now,
            last_ms: AtomicU64::new(0),
            state: Mutex::new(LinesState {
                shape: Shape::default(),
                started: now,
            }),
        }
    }

    fn tick(&self, done: u64, bytes: u64) {
        self.done.fetch_add(done, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let now = Instant::now();
        let now_ms = now.duration_since(self.epoch).as_millis() as u64;
        let last_ms = self.last_ms.load(Ordering::Relaxed);
        if !self.every.is_zero() {
            // One thread prints when a line is due; the others go on.
            if now_ms.saturating_sub(last_ms) < self.every.as_millis() as u64
                || (self.last_ms)
                    .compare_exchange(last_ms, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return;
            }
        }
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (done, bytes) = (
            self.done.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        );
        eprintln!("{}", line(self.command, &s, done, bytes, now));
    }
}

/// One progress line: `done` items and `bytes` of the task `s`.
fn line(command: &str, s: &LinesState, done: u64, bytes: u64, now: Instant) -> String {
    let bytes = match s.shape.counts_bytes() {
        true => format!(", {}", crate::units::human_size(bytes)),
        false => String::new(),
    };
    format!(
        "{}: {}{bytes}, {} s",
        labelled(command, &s.shape.label),
        counted(done, s.shape.total, s.shape.unit),
        now.duration_since(s.started).as_secs()
    )
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
    fn start(&self, task: &Task<'_>) {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = LinesState {
            shape: Shape::of(task),
            started: now,
        };
        self.done.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        let now_ms = now.duration_since(self.epoch).as_millis() as u64;
        self.last_ms.store(now_ms, Ordering::Relaxed);
    }

    fn bytes(&self, n: u64) {
        self.tick(0, n);
    }

    fn done(&self, n: u64) {
        self.tick(n, 0);
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

    fn state(task: &Task<'_>, now: Instant) -> LinesState {
        LinesState {
            shape: Shape::of(task),
            started: now - Duration::from_secs(41),
        }
    }

    #[test]
    fn lines_take_the_spec_form_for_each_kind_of_work() {
        let now = Instant::now();
        let staging = Task {
            label: "latest",
            unit: "files",
            total: Some(100_000),
            bytes: Bytes::Of(2 << 30),
        };
        let s = state(&staging, now);
        let got = line("publish", &s, 12_000, 1288490189, now);
        assert_eq!(got, "publish latest: 12,000/100,000 files, 1.2 GiB, 41 s");
        let checking = Task {
            label: "latest",
            unit: "files",
            total: Some(20_000),
            bytes: Bytes::Uncounted,
        };
        let got = line("verify", &state(&checking, now), 3_000, 0, now);
        assert_eq!(got, "verify latest: 3,000/20,000 files, 41 s");
        let walking = Task {
            label: "",
            unit: "files found",
            total: None,
            bytes: Bytes::Uncounted,
        };
        let got = line("manifest", &state(&walking, now), 8_000, 0, now);
        assert_eq!(got, "manifest: 8,000 files found, 41 s");
    }

    #[test]
    fn a_bar_counts_without_drawing_before_its_delay() {
        let b = Bar::new("publish");
        b.start(&Task {
            label: "latest",
            unit: "files",
            total: Some(2),
            bytes: Bytes::Of(10),
        });
        b.bytes(4);
        b.done(1);
        assert_eq!(b.bar.position(), 4, "a bar of bytes");
        assert_eq!(b.done.load(Ordering::Relaxed), 1);
        b.start(&Task {
            label: "latest",
            unit: "files",
            total: Some(3),
            bytes: Bytes::Counted,
        });
        b.bytes(4);
        b.done(2);
        assert_eq!(b.bar.position(), 2, "a bar of files, started again");
        assert!(!b.shown.load(Ordering::Relaxed));
        b.finish();
    }
}
