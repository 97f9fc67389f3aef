//! Hooks (SPEC §19): programs an operator configures to run after an operation finished
//! and its lock was released: `after_commit` after a committed publication, promote or
//! rollback, `after_failure` after one that failed or was rolled back. Each runs at most
//! once; `recover` and dry runs never run hooks.
//!
//! A hook runs without a shell, from `/`, with a minimal environment (`PATH=/usr/bin:/bin`,
//! `LANG`, `DISTRIBUTOR_OPERATION_ID`, `DISTRIBUTOR_DESTINATION_ID`,
//! `DISTRIBUTOR_DECISION`, `DISTRIBUTOR_CHANGED_PATHS`, `DISTRIBUTOR_REASON`) plus the
//! names in its `pass_env`,
//! never distributor's credentials. Its stdin is the destination's report (the run's §11
//! report with only that destination), written by a thread of its own so a hook that does
//! not read it blocks nothing. At its timeout its process group gets SIGTERM, SIGKILL 5 s
//! later, and its pipes are closed without waiting for descendants. A hook's failure never
//! changes the run's outcome or exit code: it is a warning in the report and the journal
//! event `hook_failed` (exit status, duration, the last 4 KiB of stderr); success is
//! `hook_ok`.
//!
//! Must never: run a hook for a dry run or from `recover`, give a hook distributor's
//! credentials, or wait on a hook past its timeout and the 5 s grace.

mod program;

use crate::config::{Config, Hook};
use crate::model::FileOp;
use crate::report::{DestinationReport, HookOutcome, Report, Status};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How much of a hook's stderr the journal keeps: the last 4 KiB.
pub(crate) const STDERR_TAIL: usize = 4096;
/// Between SIGTERM and SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);

/// Which hooks an operation's outcome calls for.
fn trigger(d: &DestinationReport) -> Option<&'static str> {
    // Applied with an operation: committed (an unchanged publication has none, a refused
    // one is not applied).
    match d.status {
        Status::Applied if d.operation_id.is_some() => Some("after_commit"),
        Status::Failed => Some("after_failure"),
        _ => None,
    }
}

/// Checks every hook's program of `config` (the pipeline's and each destination's) as
/// [`program::check`] does: the config error naming the hook's key, the program, the path
/// refused and what is accepted, else nothing. `validate`, `plan`, `publish`, `promote`,
/// `rollback` and `serve` call it before anything is locked (docs/config.md, "Hooks").
pub(crate) fn check_programs(config: &Config) -> crate::error::Result<()> {
    let hooks = (config.destinations.iter())
        .flat_map(|d| d.hooks.after_commit.iter().chain(&d.hooks.after_failure));
    let mut seen = std::collections::BTreeSet::new();
    for hook in hooks.filter(|h| seen.insert(h.key.as_str())) {
        if let Err(why) = program::check(std::path::Path::new(&hook.run[0])) {
            return Err(crate::error::ConfigError::Key {
                file: config.file.clone(),
                key: format!("{}.run[0]", hook.key),
                message: format!(
                    "'{}' may not be run: {why}; accepted: {}",
                    hook.run[0],
                    program::ACCEPTED
                ),
                at: String::new(),
            }
            .into());
        }
    }
    Ok(())
}

/// Runs the hooks `report` calls for (one report of `publish` or `rollback`, not a dry
/// run), destination by destination, and records each result in its destination's entry
/// (`hooks`) and, where the destination has an operation, as a journal event through
/// `journal` (opened only when a hook ran). `recover` never calls this.
pub(crate) fn run_for(config: &Config, report: &mut Report, journal: &std::path::Path) {
    if report.dry_run {
        return;
    }
    let mut journal_handle: Option<crate::journal::Journal> = None;
    for i in 0..report.destinations.len() {
        let d = &report.destinations[i];
        let Some(when) = trigger(d) else { continue };
        let Some(dest) = config
            .destinations
            .iter()
            .find(|c| c.id == d.destination_id)
        else {
            continue;
        };
        let hooks = match when {
            "after_commit" => &dest.hooks.after_commit,
            _ => &dest.hooks.after_failure,
        };
        if hooks.is_empty() {
            continue;
        }
        let stdin = one_destination(report, i);
        let changed = changed_paths(d, dest.s3.as_ref().map(|s| s.prefix.as_str()));
        let mut outcomes = Vec::new();
        for hook in hooks {
            let outcome = run_one(hook, when, report.reason.as_deref(), d, &stdin, &changed);
            if let Some(op) = &d.operation_id {
                if journal_handle.is_none() {
                    journal_handle = crate::journal::Journal::open(journal).ok();
                }
                if let Some(j) = &journal_handle {
                    let ev = if outcome.ok {
                        crate::journal::Event::HookOk
                    } else {
                        crate::journal::Event::HookFailed
                    };
                    if let Err(e) = j.event(op, ev, Some(&outcome.detail())) {
                        eprintln!("warning: the journal did not take the hook's result: {e}");
                    }
                }
            }
            outcomes.push(outcome);
        }
        report.destinations[i].hooks = outcomes;
    }
}

/// The run's report with only destination `i` in `destinations`, as JSON.
fn one_destination(report: &Report, i: usize) -> Vec<u8> {
    let one = Report {
        destinations: vec![report.destinations[i].clone()],
        ..report.clone()
    };
    let mut bytes = serde_json::to_vec(&one).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Every path the operation wrote or deleted, one per line: bundle-relative on a local
/// destination, full object keys (`<prefix>/<path>`) on an object store.
fn changed_paths(d: &DestinationReport, prefix: Option<&str>) -> Vec<u8> {
    let changes = |op: FileOp| matches!(op, FileOp::Create | FileOp::Overwrite | FileOp::Delete);
    let mut out = Vec::new();
    let mut line = |path: &str| {
        if let Some(p) = prefix {
            out.extend_from_slice(p.as_bytes());
            out.push(b'/');
        }
        out.extend_from_slice(path.as_bytes());
        out.push(b'\n');
    };
    for f in d.files.iter().filter(|f| changes(f.op)) {
        line(f.path);
    }
    for l in d.links.iter().filter(|l| changes(l.op)) {
        line(&l.path);
    }
    out
}

/// Runs one hook to its end or its timeout.
fn run_one(
    hook: &Hook,
    when: &'static str,
    reason: Option<&str>,
    d: &DestinationReport,
    stdin: &[u8],
    changed: &[u8],
) -> HookOutcome {
    let start = Instant::now();
    let mut outcome = HookOutcome {
        when: when.to_string(),
        run: hook.run.clone(),
        ok: false,
        exit_code: None,
        signal: None,
        timed_out: false,
        duration_ms: 0,
        stderr: String::new(),
        error: None,
    };
    // Checked again as it is about to run: the config was checked before the lock, and
    // `serve` runs hooks for as long as it serves.
    if let Err(why) = program::check(std::path::Path::new(&hook.run[0])) {
        outcome.error = Some(format!("not run: {why}; accepted: {}", program::ACCEPTED));
        return outcome;
    }
    let list = match ChangedPaths::write(changed) {
        Ok(l) => l,
        Err(e) => {
            outcome.error = Some(format!("the changed-paths file could not be written: {e}"));
            return outcome;
        }
    };
    let mut child = match command(hook, d, &list.path, reason).spawn() {
        Ok(c) => c,
        Err(e) => {
            outcome.error = Some(format!("could not be started: {e}"));
            outcome.duration_ms = start.elapsed().as_millis() as u64;
            return outcome;
        }
    };
    feed_stdin(&mut child, stdin);
    let tail = keep_stderr_tail(&mut child);
    let status = wait(child, hook.timeout_secs, &mut outcome.timed_out);
    outcome.duration_ms = start.elapsed().as_millis() as u64;
    outcome.stderr = stderr_tail(tail);
    match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            outcome.exit_code = s.code();
            outcome.signal = s.signal();
            outcome.ok = s.success() && !outcome.timed_out;
        }
        Err(e) => outcome.error = Some(format!("could not be waited for: {e}")),
    }
    drop(list);
    outcome
}

/// The hook's command: its argv, a cleared environment (PATH, LANG, what `pass_env`
/// names, and the `DISTRIBUTOR_*` variables), `/` as working directory, its own process
/// group (the timeout signals the hook and what it started).
fn command(
    hook: &Hook,
    d: &DestinationReport,
    changed_paths: &std::path::Path,
    reason: Option<&str>,
) -> Command {
    let mut cmd = Command::new(&hook.run[0]);
    cmd.args(&hook.run[1..])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(lang) = std::env::var_os("LANG") {
        cmd.env("LANG", lang);
    }
    for name in &hook.pass_env {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.env(
        "DISTRIBUTOR_OPERATION_ID",
        d.operation_id.as_deref().unwrap_or(""),
    )
    .env("DISTRIBUTOR_DESTINATION_ID", &d.destination_id)
    .env(
        "DISTRIBUTOR_DECISION",
        d.decision.map(|x| x.to_string()).unwrap_or_default(),
    )
    .env("DISTRIBUTOR_CHANGED_PATHS", changed_paths)
    .env("DISTRIBUTOR_REASON", reason.unwrap_or(""));
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    cmd
}

/// Stdin from a thread of its own: a hook that never reads it blocks nothing, and one
/// that exits early only makes the write fail (EPIPE), which is no failure.
fn feed_stdin(child: &mut std::process::Child, stdin: &[u8]) {
    if let Some(mut pipe) = child.stdin.take() {
        let bytes = stdin.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
}

/// The last 4 KiB of stderr, kept as it comes by a thread of its own: a descendant that
/// keeps the pipe open after the hook ends is not waited for.
fn keep_stderr_tail(child: &mut std::process::Child) -> Arc<Mutex<Vec<u8>>> {
    let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
    if let Some(mut pipe) = child.stderr.take() {
        let tail = Arc::clone(&tail);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                t.extend_from_slice(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_TAIL);
                t.drain(..excess);
            }
        });
    }
    tail
}

/// Waits for the hook at most `timeout_secs`; past it (`timed_out` set) its process group
/// gets SIGTERM, and SIGKILL after [`KILL_GRACE`].
fn wait(
    mut child: std::process::Child,
    timeout_secs: u64,
    timed_out: &mut bool,
) -> std::io::Result<std::process::ExitStatus> {
    let pgid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let timeout = Duration::from_secs(timeout_secs);
    match rx.recv_timeout(timeout) {
        Ok(s) => s,
        Err(_) => {
            *timed_out = true;
            signal_group(pgid, rustix::process::Signal::TERM);
            match rx.recv_timeout(KILL_GRACE) {
                Ok(s) => s,
                Err(_) => {
                    signal_group(pgid, rustix::process::Signal::KILL);
                    rx.recv().unwrap_or_else(|_| {
                        Err(std::io::Error::other("the hook's waiter vanished"))
                    })
                }
            }
        }
    }
}

/// The stderr tail as text. The reader gets a moment to take what the hook wrote last; a
/// descendant holding the pipe is not waited for.
fn stderr_tail(tail: Arc<Mutex<Vec<u8>>>) -> String {
    let deadline = Instant::now() + Duration::from_millis(200);
    while Arc::strong_count(&tail) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    String::from_utf8_lossy(&tail.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}

/// Sends `sig` to process group `pgid` (the hook's own, made at spawn).
fn signal_group(pgid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

/// The changed-paths file of one hook run: a private temporary file, removed afterwards.
struct ChangedPaths {
    path: std::path::PathBuf,
}

impl ChangedPaths {
    fn write(bytes: &[u8]) -> std::io::Result<ChangedPaths> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = std::env::temp_dir().join(format!(
            "distributor-changed-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(bytes)?;
        Ok(ChangedPaths { path })
    }
}

impl Drop for ChangedPaths {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl HookOutcome {
    /// The journal event's detail: what ran, how it ended, how long it took, and the
    /// tail of its stderr.
    pub(crate) fn detail(&self) -> String {
        let mut m = format!(
            "{} {}: {} after {} ms",
            self.when,
            self.run[0],
            self.ending(),
            self.duration_ms
        );
        if !self.stderr.is_empty() {
            m.push_str("; stderr: ");
            m.push_str(self.stderr.trim_end());
        }
        m
    }

    /// How it ended, in words.
    pub(crate) fn ending(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let how = match (self.exit_code, self.signal) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            (None, None) => "ended".to_string(),
        };
        if self.timed_out {
            format!("timed out, stopped ({how})")
        } else {
            how
        }
    }
}
