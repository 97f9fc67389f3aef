//! `distributor log` (SPEC §18): prints each destination's own log, oldest first, or,
//! with `--quarantine SEQ`, moves a bad entry out of it under the destination lock and
//! logs the move. Reading never writes; a bad entry is an error naming its file (exit 1),
//! and the believed entries are still printed. An object store's log
//! (`<prefix>/.distributor/log/`) is read, and quarantined under its lease, through the
//! storage interface ([`crate::backend::BundleStore::read_log`]).
//!
//! Must never: change an entry, or write anything but the quarantine and its entry.

use crate::backend::local::log::{self, Bad, Entry};
use crate::config::{Config, Destination, PathMapping};
use crate::error::{Error, IoContext, Result};
use serde::Serialize;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

/// What to print.
#[derive(Debug, Clone)]
pub(crate) struct LogOptions {
    /// Destination ids; empty means every destination.
    pub destinations: Vec<String>,
    /// Only entries committed at or after this time (RFC 3339, or a date `YYYY-MM-DD`).
    pub since: Option<String>,
    /// Only the newest N entries of each destination (printed oldest first).
    pub limit: Option<usize>,
}

/// One destination's log.
#[derive(Debug, Serialize)]
pub(crate) struct DestinationLog {
    /// Destination id.
    pub destination_id: String,
    /// Where its log is (`.distributor/log` in the bundle path or `releases.dir`).
    pub log: String,
    /// The entries, oldest first.
    pub entries: Vec<Entry>,
    /// The bad entries.
    pub bad: Vec<Bad>,
    /// Why it could not be read at all.
    pub error: Option<String>,
}

/// Reads the logs of the selected destinations; the exit code is 1 when any has a bad
/// entry or could not be read.
pub(crate) fn read_logs(
    config: &Config,
    opts: &LogOptions,
) -> Result<(Vec<DestinationLog>, crate::error::ExitCode)> {
    let selected = select(config, &opts.destinations)?;
    let since = opts.since.as_deref().map(parse_since).transpose()?;
    let mut out = Vec::new();
    let mut code = crate::error::ExitCode::Success;
    for dest in selected {
        let behind_interface = crate::backend::capabilities(dest).log_behind_interface;
        let (bases, unlisted) = match log_bases(dest) {
            Ok(b) => (b, None),
            // A store that keeps its log behind the storage interface (an object store)
            // and cannot be listed is this destination's error; the others are still read.
            Err(e) if behind_interface => (Vec::new(), Some(e)),
            Err(e) => return Err(e),
        };
        if let Some(e) = unlisted {
            code = crate::error::ExitCode::Failed;
            out.push(DestinationLog {
                destination_id: dest.id.clone(),
                log: dest
                    .path
                    .join(crate::backend::local::records::LOG)
                    .display()
                    .to_string(),
                entries: Vec::new(),
                bad: Vec::new(),
                error: Some(e.to_string()),
            });
        }
        for base in bases {
            let mut d = DestinationLog {
                destination_id: dest.id.clone(),
                log: base
                    .join(crate::backend::local::records::LOG)
                    .display()
                    .to_string(),
                entries: Vec::new(),
                bad: Vec::new(),
                error: None,
            };
            let read = match behind_interface {
                true => read_stored(dest, &base),
                false => read_one(&base),
            };
            match read {
                Ok(l) => {
                    d.entries = l.entries;
                    d.bad = l.bad;
                }
                Err(e) => d.error = Some(e.to_string()),
            }
            if let Some(t) = since {
                d.entries
                    .retain(|e| parse_time(&e.committed_at).is_some_and(|c| c >= t));
            }
            if let Some(n) = opts.limit {
                let skip = d.entries.len().saturating_sub(n);
                d.entries.drain(..skip);
            }
            if d.error.is_some() || !d.bad.is_empty() {
                code = crate::error::ExitCode::Failed;
            }
            out.push(d);
        }
    }
    Ok((out, code))
}

/// The logs as text: per destination a header, one line per entry, and the errors.
pub(crate) fn to_text(logs: &[DestinationLog]) -> String {
    let mut out = String::new();
    for d in logs {
        let _ = writeln!(out, "destination {} ({}):", d.destination_id, d.log);
        for e in &d.entries {
            let what = match (&e.release_activated, &e.quarantined_seq, e.removed_count) {
                (Some(r), _, _) => format!(" release {r}"),
                (_, Some(q), _) => format!(" quarantined {q}"),
                (_, _, Some(n)) => format!(" removed {n} release(s)"),
                _ => String::new(),
            };
            let source = e.source.as_ref().map_or(String::new(), |s| {
                format!(" source {} {}", s.id, s.created_at)
            });
            let _ = writeln!(
                out,
                "  {:>5} {} {} {} {} by {} on {}{source}{what}{}",
                e.seq,
                e.committed_at,
                e.command,
                e.decision,
                e.operation_id,
                e.actor,
                e.host,
                if e.recovered_by.is_some() {
                    " (written by recover)"
                } else {
                    ""
                }
            );
        }
        for b in &d.bad {
            let _ = writeln!(out, "  error: {b}");
        }
        if let Some(e) = &d.error {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    out
}

/// The logs as JSON Lines: one entry object per line, oldest first per destination.
pub(crate) fn to_jsonl(logs: &[DestinationLog]) -> Result<String> {
    let mut out = String::new();
    for e in logs.iter().flat_map(|d| &d.entries) {
        out.push_str(&serde_json::to_string(e)?);
        out.push('\n');
    }
    Ok(out)
}

/// The errors of `logs`, one per line, for stderr.
pub(crate) fn errors(logs: &[DestinationLog]) -> String {
    let mut out = String::new();
    for d in logs {
        for b in &d.bad {
            let _ = writeln!(out, "error: destination {}: {b}", d.destination_id);
        }
        if let Some(e) = &d.error {
            let _ = writeln!(out, "error: destination {}: {e}", d.destination_id);
        }
    }
    out
}

/// What `log --quarantine` or `log --restart` does under the destination's lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LogRepair {
    /// Move entry SEQ into `.distributor/quarantine/` and log the move.
    Quarantine(u64),
    /// Log that the log is shorter than the journal in use saw it, and go on from there.
    Restart,
}

/// What a repair did: the destination, the entry that records it, and for a restart
/// the tail the journal knew.
#[derive(Debug, Clone)]
pub(crate) struct Repaired {
    /// The destination's id.
    pub destination: String,
    /// The seq of the entry that records the repair.
    pub seq: u64,
    /// `--restart`: the last seq the journal in use had seen (`None`: it had seen none).
    pub journal_knew: Option<u64>,
}

/// `log --quarantine SEQ` or `log --restart`: under the destination's lock, repairs its
/// log and adds an entry recording the repair; the journal in use then knows the log to
/// end at that entry (docs/operations.md, "The log's continuity").
pub(crate) fn repair(
    config: &Config,
    destinations: &[String],
    what: LogRepair,
    lock_timeout: Duration,
    (actor, reason): (&str, Option<&str>),
    journal: &crate::journal::Journal,
) -> Result<Repaired> {
    let selected = select(config, destinations)?;
    let flag = match what {
        LogRepair::Quarantine(_) => "--quarantine",
        LogRepair::Restart => "--restart",
    };
    let [dest] = selected.as_slice() else {
        return Err(Error::Usage(format!(
            "{flag} acts on one destination: name it with --destination (one of {})",
            config
                .destinations
                .iter()
                .map(|d| d.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let (command, decision) = match what {
        LogRepair::Quarantine(_) => ("quarantine", "quarantine"),
        LogRepair::Restart => ("restart", "restart"),
    };
    let mut by = Entry::new(&uuid::Uuid::new_v4().to_string(), command, decision);
    by.actor = actor.to_string();
    by.reason = reason.map(str::to_string);
    by.pipeline_id = config.pipeline_id.clone();
    by.destination_id = dest.id.clone();
    let mut journal_knew = None;
    let act = |log: crate::backend::LockedLog<'_>| -> Result<u64> {
        let seq = match what {
            LogRepair::Quarantine(seq) => log.quarantine(seq, by)?,
            LogRepair::Restart => {
                let knew = journal.log_tail(log.location())?;
                journal_knew = knew;
                by.restarted_after = Some(knew.unwrap_or(0));
                log.restart(knew.unwrap_or(0), by)?
            }
        };
        journal.record_log_tail(log.location(), seq)?;
        Ok(seq)
    };
    let seq = under_lock(dest, lock_timeout, actor, act)?;
    Ok(Repaired {
        destination: dest.id.clone(),
        seq,
        journal_knew,
    })
}

/// Runs `act` on the log of `dest`, locked.
fn under_lock(
    dest: &Destination,
    lock_timeout: Duration,
    actor: &str,
    act: impl FnOnce(crate::backend::LockedLog<'_>) -> Result<u64>,
) -> Result<u64> {
    let behind_interface = crate::backend::capabilities(dest).log_behind_interface;
    let how = crate::backend::LockRequest {
        timeout: lock_timeout,
        create: false,
        actor,
        history: None,
    };
    match &dest.releases {
        Some(r) => {
            let store = crate::backend::releases::ReleaseStore::open(&dest.path, r, Some(how))?
                .ok_or_else(|| nothing_there(dest))?;
            let cursor = crate::backend::BundleStore::log_cursor(&store)
                .ok_or_else(|| nothing_there(dest))?;
            act(crate::backend::LockedLog::Dir(store.record_base()?, cursor))
        }
        None if dest.path_mapping == PathMapping::Fixed && !behind_interface => {
            let b = crate::backend::local::Bundle::lock(&dest.path, &dest.path, how)?
                .ok_or_else(|| nothing_there(dest))?;
            act(crate::backend::LockedLog::Dir(b.dir(), b.log_cursor()))
        }
        // An object store: under its lease (SPEC §14), through the storage interface.
        None if dest.path_mapping == PathMapping::Fixed && behind_interface => {
            let backend = crate::backend::for_destination(dest)?;
            let store = backend
                .lock(&dest.path, &dest.path, how)?
                .ok_or_else(|| nothing_there(dest))?;
            match store.log() {
                Some(log) => act(crate::backend::LockedLog::Store(log)),
                None => Err(Error::Failed(format!(
                    "{}: its log is not kept through the storage interface",
                    store.path().display()
                ))),
            }
        }
        None => Err(unsupported(dest)),
    }
}

fn nothing_there(dest: &Destination) -> Error {
    Error::Failed(format!(
        "destination '{}': nothing was published at {}; it has no log",
        dest.id,
        dest.path.display()
    ))
}

fn unsupported(dest: &Destination) -> Error {
    Error::Failed(format!(
        "destination '{}': `distributor log --quarantine` and `--restart` act on a destination with a fixed path (local, s3) or on a releases destination; this one maps its path (path_mapping), so move the entry by hand under its lock",
        dest.id
    ))
}

fn select<'a>(config: &'a Config, ids: &[String]) -> Result<Vec<&'a Destination>> {
    if ids.is_empty() {
        Ok(config.destinations.iter().collect())
    } else {
        config.select(ids)
    }
}

/// Where a destination's log lives: `releases.dir`, or the bundle path (each bundle path
/// below a mapped destination; an object store's key prefixes alike).
fn log_bases(dest: &Destination) -> Result<Vec<PathBuf>> {
    if let Some(r) = &dest.releases {
        return Ok(vec![r.dir.clone()]);
    }
    if dest.path_mapping == PathMapping::Fixed {
        return Ok(vec![dest.path.clone()]);
    }
    crate::backend::for_destination(dest)?.bundle_paths(&dest.path)
}

/// Reads the log of the bundle path `bundle` of a destination whose store keeps it
/// behind the storage interface (an object store's `<prefix>/.distributor/log/`).
fn read_stored(dest: &Destination, bundle: &std::path::Path) -> Result<log::Log> {
    let backend = crate::backend::for_destination(dest)?;
    let store = backend.open(&dest.path, bundle)?;
    Ok(match store {
        Some(s) => s
            .log()
            .map(|l| l.read_log())
            .transpose()?
            .unwrap_or_default(),
        None => log::Log::default(),
    })
}

/// Reads the log below `base`; an absent `base` has an empty log.
fn read_one(base: &std::path::Path) -> Result<log::Log> {
    match log::read_below(base) {
        Ok(log) => log,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(log::Log::default()),
        Err(e) => Err(e).ctx("open", base),
    }
}

fn parse_time(t: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.with_timezone(&chrono::Utc))
}

/// `--since`: RFC 3339, or a date (midnight UTC).
fn parse_since(t: &str) -> Result<chrono::DateTime<chrono::Utc>> {
    if let Some(d) = parse_time(t) {
        return Ok(d);
    }
    chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
        .ok_or_else(|| {
            Error::Usage(format!(
                "--since {t}: accepted is an RFC 3339 time (2026-12-01T06:00:00Z) or a date (2026-12-01)"
            ))
        })
}
