//! Failpoints for crash and fault-injection tests. Compiled to nothing unless the
//! `failpoints` cargo feature is on (tests build the binary with it; release builds never
//! have it).
//!
//! `DISTRIBUTOR_FAILPOINT` holds one or more comma-separated specs `<name>[:<k>][=<action>]`:
//!
//! | action        | effect                                                                 |
//! |---------------|------------------------------------------------------------------------|
//! | (none)        | abort the process (no unwinding, no cleanup, like `kill -9`) the k-th time |
//! | `error`       | from the k-th time on, every hit returns an injected I/O error         |
//! | `error-once`  | only the k-th hit returns an injected I/O error                        |
//! | `pause`       | the k-th time, stop until the test says to go on (below)               |
//! | `powercut`    | the k-th time, lose every change not yet durable, then abort (below)  |
//!
//! `pause` is how the hostile-neighbour tests make a race deterministic: at the k-th hit the
//! process creates `$DISTRIBUTOR_FAILPOINT_PAUSE/<name>.paused` and waits, polling, until
//! `$DISTRIBUTOR_FAILPOINT_PAUSE/<name>.resume` exists; meanwhile the test swaps a directory
//! for a symlink (or anything else a neighbour could do) at exactly that step. Any
//! failpoint can pause.
//!
//! `powercut` simulates a power cut at that moment: the local backend undoes every change
//! to the destination not yet made durable by an fsync or syncfs
//! ([`crate::fs::crashsim`]), and the process aborts.
//!
//! `k` defaults to 1. Error actions only act on I/O failpoints ([`io`]); crash points
//! ([`hit`]) have no error path to take. `DISTRIBUTOR_FAILPOINT_LOG=<file>` appends the name
//! of every failpoint reached, one per line, so a test can prove that every entry of
//! [`ALL`] is exercised.

/// Every failpoint compiled in, in execution order. Tests check that this equals the names
/// used in the sources and the names the binary actually reaches, so a new step cannot go
/// untested.
pub const ALL: &[&str] = &[
    // planning: the probe hashes a file no placement fingerprint vouches for
    "probe_hash",
    // publish (SPEC §6 steps 3-8)
    "after_journal_append",
    "before_staging_record",
    "after_staging_record",
    "during_staging",
    "after_staging",
    "during_move_aside",
    "after_move_aside",
    "during_placement",
    "after_placement",
    "during_links",
    "after_links",
    "after_state_write",
    "after_journal_commit",
    // the destination log's entry (SPEC §18), written before staging goes
    "io_log_write",
    "before_log_link",
    "during_cleanup",
    "cleanup_before_prune",
    "during_prune",
    // rollback (in-process after an error, and `recover`)
    "undo_remove_placed",
    "undo_restore",
    "undo_before_remove_staging",
    // recover
    "recover_after_lock",
    "recover_after_adopt",
    "recover_before_event",
    // I/O primitives: can abort, or fail with an injected error
    "io_stage_write",
    "io_rename",
    "io_syncfs",
    "io_state_fsync",
    "io_state_rename",
    "io_remove_staging",
];

/// The s3 backend's failpoints, reached only on s3 destinations: before every request is
/// sent and after every response arrives, so a test can kill the process at each request
/// of a publication in turn (`tests/test_s3.rs`); and after the destination log's tail was
/// listed, just before its entry is created (SPEC §18: `tests/test_s3_log.rs`).
pub const S3: &[&str] = &["s3_request", "s3_response", "s3_before_log_entry"];

/// The releases backend's own failpoints, reached only on destinations with `releases`
/// (`tests/test_releases.rs`): while the new release is filled with what it carries over,
/// and each hard link it makes there (an injected error stands for `EXDEV`: the link
/// cannot be made, and the file is copied and verified instead); the moment before an
/// adoption exchanges the plain directory it locked; the moment a stage, logged and its
/// staging entry gone, is about to be journaled `held_for_promote` (SPEC §19).
pub const RELEASES: &[&str] = &[
    "during_carry_over",
    "io_link",
    "before_adopt_exchange",
    "before_held_for_promote",
];

/// The server's failpoints, reached only in `distributor serve`: an upload that finds every
/// `--max-concurrent-uploads` slot taken and starts to wait for one, so a test sees it
/// waiting (`tests/test_server_uploads.rs`).
pub const SERVER: &[&str] = &["upload_waits_for_slot"];

/// `--metrics-file`'s failpoint: the new file written and fsynced under its unpredictable
/// name, not yet renamed into place, so a test sees that name (`tests/test_trust_inputs.rs`).
pub const METRICS: &[&str] = &["metrics_file_written"];

/// The I/O failpoints of [`ALL`]: the ones an `error` action applies to.
pub const IO: &[&str] = &[
    "io_stage_write",
    "io_rename",
    "io_syncfs",
    "io_state_fsync",
    "io_state_rename",
    "io_remove_staging",
    "io_link",
    "io_log_write",
];

#[cfg(feature = "failpoints")]
mod imp {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Action {
        Abort,
        Error,
        ErrorOnce,
        Pause,
        PowerCut,
    }

    struct Spec {
        name: String,
        k: u64,
        action: Action,
    }

    fn specs() -> &'static [Spec] {
        static SPECS: OnceLock<Vec<Spec>> = OnceLock::new();
        SPECS.get_or_init(|| {
            let Ok(text) = std::env::var("DISTRIBUTOR_FAILPOINT") else {
                return Vec::new();
            };
            text.split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| parse(s.trim()))
                .collect()
        })
    }

    fn parse(s: &str) -> Spec {
        let (head, action) = match s.split_once('=') {
            Some((h, "error")) => (h, Action::Error),
            Some((h, "error-once")) => (h, Action::ErrorOnce),
            Some((h, "pause")) => (h, Action::Pause),
            Some((h, "powercut")) => (h, Action::PowerCut),
            Some((_, other)) => {
                // A typo must not silently turn a crash test into a passing no-op.
                eprintln!("DISTRIBUTOR_FAILPOINT: unknown action '{other}' in '{s}'");
                std::process::abort();
            }
            None => (s, Action::Abort),
        };
        let (name, k) = match head.split_once(':') {
            Some((n, k)) => match k.parse::<u64>() {
                Ok(k) if k >= 1 => (n, k),
                _ => {
                    eprintln!("DISTRIBUTOR_FAILPOINT: bad count '{k}' in '{s}'");
                    std::process::abort();
                }
            },
            None => (head, 1),
        };
        if !super::ALL.contains(&name)
            && !super::S3.contains(&name)
            && !super::RELEASES.contains(&name)
            && !super::SERVER.contains(&name)
            && !super::METRICS.contains(&name)
        {
            eprintln!("DISTRIBUTOR_FAILPOINT: unknown failpoint '{name}'");
            std::process::abort();
        }
        if matches!(action, Action::Error | Action::ErrorOnce) && !super::IO.contains(&name) {
            eprintln!("DISTRIBUTOR_FAILPOINT: '{name}' is not an I/O failpoint; it can only abort");
            std::process::abort();
        }
        Spec {
            name: name.to_string(),
            k,
            action,
        }
    }

    fn log(name: &str) {
        if let Some(path) = std::env::var_os("DISTRIBUTOR_FAILPOINT_LOG") {
            use std::io::Write;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                // One write per line: staging threads log concurrently, and a single
                // O_APPEND write is never interleaved with another.
                let _ = f.write_all(format!("{name}\n").as_bytes());
            }
        }
    }

    /// Announces the pause and waits until the test lets the process go on.
    fn pause(name: &str) {
        let Some(dir) = std::env::var_os("DISTRIBUTOR_FAILPOINT_PAUSE") else {
            eprintln!("DISTRIBUTOR_FAILPOINT: '{name}=pause' needs DISTRIBUTOR_FAILPOINT_PAUSE");
            std::process::abort();
        };
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::write(dir.join(format!("{name}.paused")), b"");
        let resume = dir.join(format!("{name}.resume"));
        while !resume.exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Counts the hit; returns the action due now, if any.
    pub(super) fn reach(name: &str) -> Option<String> {
        log(name);
        if !specs().iter().any(|s| s.name == name) {
            return None;
        }
        static COUNTS: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);
        let n = {
            let mut guard = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
            let n = guard
                .get_or_insert_with(HashMap::new)
                .entry(name.to_string())
                .or_insert(0);
            *n += 1;
            *n
        };
        let mut due = None;
        for s in specs().iter().filter(|s| s.name == name) {
            let fire = match s.action {
                Action::Abort | Action::ErrorOnce | Action::Pause | Action::PowerCut => n == s.k,
                Action::Error => n >= s.k,
            };
            if !fire {
                continue;
            }
            if s.action == Action::Abort {
                eprintln!("failpoint {name} hit: aborting");
                std::process::abort();
            }
            if s.action == Action::PowerCut {
                crate::fs::crashsim::power_cut();
                eprintln!("failpoint {name} hit: power cut, aborting");
                std::process::abort();
            }
            if s.action == Action::Pause {
                pause(name);
                continue;
            }
            due = Some(format!("injected I/O error at failpoint {name}"));
        }
        due
    }
}

/// Marks that execution reached crash point `name`.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) {
    let _ = imp::reach(name);
}

/// Marks that execution reached I/O point `name`: may abort, or return an injected error.
#[cfg(feature = "failpoints")]
pub fn io(name: &str) -> std::io::Result<()> {
    match imp::reach(name) {
        Some(msg) if IO.contains(&name) => Err(std::io::Error::other(msg)),
        _ => Ok(()),
    }
}

/// Marks that execution reached crash point `name` (no-op without the `failpoints` feature).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) {}

/// Marks that execution reached I/O point `name` (no-op without the `failpoints` feature).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn io(_name: &str) -> std::io::Result<()> {
    Ok(())
}

/// A limit or age a test build reads from the environment variable `var` (bytes, seconds)
/// so its tests need not upload gigabytes or wait minutes; `None` when unset or not a
/// number, and always in a release build.
pub fn test_setting<T: std::str::FromStr>(var: &str) -> Option<T> {
    if cfg!(feature = "failpoints") {
        std::env::var(var).ok().and_then(|v| v.parse().ok())
    } else {
        None
    }
}
