//! The records `releases.dir` keeps of itself (SPEC §15, §18): the settings it was
//! published with (`.distributor/releases.json`, and the old `.distributor-releases.json`
//! until it is migrated), and the destination log read as activations (`LogView`),
//! with the old activation log moved into it.

use super::{ReleaseStore, log};
use crate::backend::local::Bundle;
use crate::backend::types::StagingEntry;
use crate::error::{Error, IoContext, Result};
use std::path::Path;

/// The destination log of a releases directory, read (SPEC §18): its entries, the
/// activations they and the not yet migrated old activation log record, and what makes
/// retention remove nothing.
#[derive(Debug, Default)]
pub struct LogView {
    /// The log as read.
    pub log: crate::backend::local::log::Log,
    /// Every activation, oldest first.
    pub activations: Vec<log::Activation>,
    /// Why the old activation log cannot be migrated, if it cannot.
    pub legacy_error: Option<String>,
    /// Why the old records (`.distributor-releases.json`, `.distributor-activations.log`)
    /// are not believed, if the journal in use does not corroborate them (SPEC §17
    /// "Upgrading"): the conflict `untrusted_record`; nothing is migrated.
    pub legacy_untrusted: Option<String>,
}

/// What the journal in use made of the old records of `releases.dir` (SPEC §17
/// "Upgrading"; docs/operations.md, "Release identity").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Legacy {
    /// There are none (or they were moved: the settings record is the `moved_to` marker).
    #[default]
    None,
    /// Not judged: opened without the lock, for reading only; read as they stand, never
    /// acted on.
    Unjudged,
    /// Every activation line the log does not hold yet is an operation the journal in
    /// use committed here: believed, and migrated under the lock.
    Believed,
    /// Not corroborated: why.
    Untrusted(String),
}

impl LogView {
    /// The release the last logged activation made active.
    pub fn active(&self) -> Option<&str> {
        self.activations.last().map(|a| a.release.as_str())
    }

    /// Why the log cannot be trusted to order releases (bad entries, an old log that
    /// cannot be migrated or is not believed), if it cannot.
    pub fn untrusted(&self) -> Option<String> {
        match (self.legacy_blocked(), self.log.bad_message()) {
            (Some(l), _) => Some(l),
            (None, Some(b)) => Some(b),
            (None, None) => None,
        }
    }

    /// Why the old activation log stands in the way of writing the log, if it does: it
    /// cannot be read whole, or it is not believed.
    pub fn legacy_blocked(&self) -> Option<String> {
        self.legacy_error.clone().or(self.legacy_untrusted.clone())
    }
}

impl ReleaseStore {
    /// The destination log as it stands now.
    pub fn log_view(&self) -> Result<LogView> {
        match &self.root {
            Some(r) => read_log_view(r, &self.settings.dir, &self.legacy),
            None => Ok(LogView::default()),
        }
    }

    /// Moves the old records to `.distributor/` (SPEC §18), idempotently: every line `i`
    /// of `.distributor-activations.log` whose entry `i` does not exist yet becomes that
    /// entry, then the settings go to `.distributor/releases.json` and the old settings
    /// record is replaced with `{"moved_to": ".distributor/"}`. Needs the lock. An old
    /// log that cannot be read whole is left as it is (retention removes nothing, and
    /// publications are refused, until an operator repairs it).
    pub(super) fn migrate(&self) -> Result<()> {
        let root = self.root()?;
        let dir = root.dir();
        if self.legacy != Legacy::Believed {
            return Ok(());
        }
        let Some(legacy) = read_legacy_settings(root, &self.settings.dir)? else {
            return Ok(());
        };
        let view = read_log_view(root, &self.settings.dir, &self.legacy)?;
        if view.legacy_blocked().is_some() {
            return Ok(());
        }
        let lines = match read_legacy_log(root, &self.settings.dir)? {
            Some(Ok(lines)) => lines,
            // Reported through the view; never reached.
            Some(Err(_)) => return Ok(()),
            None => Vec::new(),
        };
        for (i, a) in lines.iter().enumerate() {
            let seq = i as u64 + 1;
            if !view.log.entries.iter().any(|e| e.seq == seq) {
                crate::backend::local::log::append_at(dir, a.to_entry(), seq)?;
            }
        }
        self.write_settings(&legacy)
    }

    /// Records this config's settings over the recorded ones (`distributor releases
    /// settings`); needs the lock. Returns the settings it replaced.
    pub fn replace_settings(&self) -> Result<Option<log::RecordedSettings>> {
        let before = self.recorded_settings()?;
        let record = log::RecordedSettings::of(&self.path, &self.settings);
        self.write_settings_as(&record, true)?;
        Ok(before)
    }

    /// The settings recorded in `releases.dir`, if any.
    pub fn settings_recorded(&self) -> Result<Option<log::RecordedSettings>> {
        self.recorded_settings()
    }

    /// Writes `.distributor/releases.json` (when it is missing) and replaces the old
    /// settings record with `{"moved_to": ".distributor/"}`.
    pub(super) fn write_settings(&self, record: &log::RecordedSettings) -> Result<()> {
        self.write_settings_as(record, false)
    }

    /// [`Self::write_settings`]; with `replace`, over a `releases.json` already there.
    fn write_settings_as(&self, record: &log::RecordedSettings, replace: bool) -> Result<()> {
        use crate::backend::local::records::{RECORD_DIR, RELEASES_SETTINGS};
        use std::io::Write;
        let root = self.root()?;
        let dir = root.dir();
        let base = &self.settings.dir;
        let rec = dir
            .make_record_dir(RECORD_DIR)
            .map_err(|e| record_error(e, base))?;
        let path = base.join(RELEASES_SETTINGS);
        if replace || rec.stat_opt("releases.json").ctx("stat", &path)?.is_none() {
            let bytes = serde_json::to_vec_pretty(record)?;
            let tmp = "releases.json.tmp";
            let _ = rec.unlink(tmp);
            let mut f = rec.create_record_file(tmp).ctx("create", &path)?;
            f.write_all(&bytes).ctx("write", &path)?;
            rec.sync_file(&f, tmp).ctx("fsync", &path)?;
            if replace {
                rec.rename_over(tmp, &rec, "releases.json")
            } else {
                rec.rename_new(tmp, &rec, "releases.json")
            }
            .ctx("write", &path)?;
            rec.sync().ctx("fsync", rec.path())?;
        }
        let old = base.join(log::SETTINGS_FILE);
        let tmp = format!("{}.tmp", log::SETTINGS_FILE);
        let _ = dir.unlink(&tmp);
        // A record (0600, distributor's uid), as every file distributor keeps there.
        let mut f = dir.create_record_file(&tmp).ctx("create", &old)?;
        f.write_all(log::MOVED_TO.as_bytes()).ctx("write", &old)?;
        dir.sync_file(&f, &tmp).ctx("fsync", &old)?;
        dir.rename_over(&tmp, dir, log::SETTINGS_FILE)
            .ctx("write", &old)?;
        dir.sync().ctx("fsync", base)
    }

    /// The settings recorded in `releases.dir`, if any: `.distributor/releases.json`, a
    /// trusted record; else the old `.distributor-releases.json` not migrated yet.
    pub(super) fn recorded_settings(&self) -> Result<Option<log::RecordedSettings>> {
        let Some(root) = &self.root else {
            return Ok(None);
        };
        use crate::backend::local::records::{RECORD_DIR, RELEASES_SETTINGS, RecordError};
        let path = self.settings.dir.join(RELEASES_SETTINGS);
        let rec = match root.dir().open_record_dir(RECORD_DIR) {
            Ok(d) => Some(d),
            Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(record_error(e, &self.settings.dir)),
        };
        let file = match rec.as_ref().map(|r| r.open_record_file("releases.json")) {
            None => None,
            Some(Ok((f, _))) => Some(f),
            Some(Err(RecordError::Io(e))) if e.kind() == std::io::ErrorKind::NotFound => None,
            Some(Err(e)) => return Err(record_error(e, &self.settings.dir)),
        };
        let Some(mut f) = file else {
            return read_legacy_settings(root, &self.settings.dir);
        };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut bytes).ctx("read", &path)?;
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::Unsafe(format!(
                "{} is not a releases settings record ({e}); distributor did not write it",
                path.display()
            ))
        })
    }

    /// Why this config's releases settings differ from the recorded ones, if they do.
    pub fn mismatch(&self) -> Result<Option<String>> {
        let config = log::RecordedSettings::of(&self.path, &self.settings);
        Ok(self
            .recorded_settings()?
            .and_then(|r| r.mismatch(&config, &self.settings.dir)))
    }

    /// Every activation the log records, oldest first.
    pub fn activations(&self) -> Result<Vec<log::Activation>> {
        Ok(self.log_view()?.activations)
    }

    /// What the plain directory at `path` holds in its own staging (an in-place
    /// publication that needs `recover` first).
    pub fn plain_staging(&self) -> Result<Vec<StagingEntry>> {
        match (&self.active, self.is_plain()) {
            (Some(p), true) => p.staging_entries(),
            _ => Ok(Vec::new()),
        }
    }

    /// Whether `releases.dir` and `path`'s parent are one filesystem (an adoption
    /// exchanges entries between them).
    pub fn same_filesystem(&self) -> Result<bool> {
        let root = self.root()?;
        Ok(root.dir().identity().ctx("stat", &self.settings.dir)?.dev
            == self.parent.identity().ctx("stat", self.parent.path())?.dev)
    }
}

/// A record error as distributor's error (an untrusted record is unsafe storage).
fn record_error(e: crate::backend::local::records::RecordError, dir: &Path) -> Error {
    match e {
        crate::backend::local::records::RecordError::Untrusted(u) => Error::Untrusted(u.message()),
        crate::backend::local::records::RecordError::Io(e) => Error::io("open", dir, e),
    }
}

/// The old settings record, when it is one and was not migrated (`None`: absent, or
/// already `{"moved_to": ".distributor/"}`).
fn read_legacy_settings(root: &Bundle, dir: &Path) -> Result<Option<log::RecordedSettings>> {
    let path = dir.join(log::SETTINGS_FILE);
    let (mut f, _) = match root.dir().open_file(log::SETTINGS_FILE) {
        Ok(x) => x,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut bytes).ctx("read", &path)?;
    if serde_json::from_slice::<log::MovedTo>(&bytes).is_ok() {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::Unsafe(format!(
            "{} is not a releases settings record ({e}); distributor did not write it",
            path.display()
        ))
    })
}

/// The old activation log's activations, `None` when there is none; an error says which
/// line cannot be read.
fn read_legacy_log(
    root: &Bundle,
    dir: &Path,
) -> Result<Option<std::result::Result<Vec<log::Activation>, String>>> {
    let path = dir.join(log::LOG_FILE);
    match root.dir().open_file(log::LOG_FILE) {
        Ok((mut f, _)) => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut bytes).ctx("read", &path)?;
            Ok(Some(log::parse_log(&bytes)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("open", path, e)),
    }
}

/// The releases `publish --stage` built, as the log's `stage` entries name them, with
/// when each was staged (SPEC §19).
pub fn staged_releases(view: &LogView) -> std::collections::BTreeMap<String, String> {
    (view.log.entries.iter())
        .filter_map(|e| Some((e.release_staged.clone()?, e.committed_at.clone())))
        .collect()
}

/// The destination log of `releases.dir` with the activations it records; while the old
/// activation log is not migrated, line `i` stands for entry `i` where that is missing.
pub(super) fn read_log_view(root: &Bundle, dir: &Path, legacy: &Legacy) -> Result<LogView> {
    let log = crate::backend::local::log::read(root.dir())?;
    let mut view = LogView {
        activations: log::activations(&log.entries),
        log,
        legacy_error: None,
        legacy_untrusted: None,
    };
    if read_legacy_settings(root, dir)?.is_none() {
        return Ok(view);
    }
    if let Legacy::Untrusted(why) = legacy {
        view.legacy_untrusted = Some(why.clone());
        return Ok(view);
    }
    match read_legacy_log(root, dir)? {
        None => {}
        Some(Err(why)) => {
            view.legacy_error = Some(format!(
                "{}: {why}; it cannot be moved into {}: repair or remove that line (`distributor rollback --to` and `prune` read the releases it names from the log)",
                dir.join(log::LOG_FILE).display(),
                dir.join(crate::backend::local::records::LOG).display()
            ));
        }
        Some(Ok(lines)) => {
            let mut merged: Vec<(u64, log::Activation)> = (view.log.entries.iter())
                .filter_map(|e| Some((e.seq, log::Activation::of_entry(e)?)))
                .collect();
            for (i, a) in lines.into_iter().enumerate() {
                let seq = i as u64 + 1;
                if !view.log.entries.iter().any(|e| e.seq == seq) {
                    merged.push((seq, a));
                }
            }
            merged.sort_by_key(|m| m.0);
            view.activations = merged.into_iter().map(|m| m.1).collect();
        }
    }
    Ok(view)
}

/// Judges the old records of `releases.dir` (`root`, at `dir`) against the journal in
/// use, `history` (SPEC §17 "Upgrading"), for the releases destination at `path`: each
/// line of `.distributor-activations.log` whose log entry exists must be that entry's
/// activation; each other line must name an operation the journal committed at `path`,
/// activating that line's release, that no log entry names, the lines in the order the
/// journal committed them. `None` (opened for reading only): not judged.
pub(super) fn judge_legacy(
    root: &Bundle,
    dir: &Path,
    path: &Path,
    history: Option<&dyn crate::backend::History>,
    locked: bool,
) -> Result<Legacy> {
    if read_legacy_settings(root, dir)?.is_none() {
        return Ok(Legacy::None);
    }
    let Some(Ok(lines)) = read_legacy_log(root, dir)? else {
        // No activation log: the settings alone, compared with every config (an unreadable
        // log is reported as such through the view).
        return Ok(Legacy::Believed);
    };
    let Some(history) = history else {
        return Ok(if locked {
            Legacy::Untrusted(not_corroborated(
                dir,
                "no journal is in use to corroborate them",
            ))
        } else {
            Legacy::Unjudged
        });
    };
    let log = crate::backend::local::log::read(root.dir())?;
    let bundle = path.to_string_lossy();
    let mut last = i64::MIN;
    for (i, a) in lines.iter().enumerate() {
        let seq = i as u64 + 1;
        let n = i + 1;
        if let Some(e) = log.entries.iter().find(|e| e.seq == seq) {
            if e.operation_id != a.operation_id
                || e.release_activated.as_deref() != Some(a.release.as_str())
            {
                return Ok(Legacy::Untrusted(not_corroborated(
                    dir,
                    &format!(
                        "line {n} names the activation of release {} by operation {}, but entry {seq} of the destination log is {} of operation {}",
                        a.release, a.operation_id, e.command, e.operation_id
                    ),
                )));
            }
            continue;
        }
        let why = match history.committed_release(&bundle, &a.operation_id)? {
            None => Some(format!(
                "line {n}: the journal in use did not commit operation {} at {}",
                a.operation_id,
                path.display()
            )),
            Some((_, release)) if release != a.release => Some(format!(
                "line {n}: operation {} activated release {release}, not {}",
                a.operation_id, a.release
            )),
            Some(_) if log.names_operation(&a.operation_id) => Some(format!(
                "line {n}: operation {} has a log entry already",
                a.operation_id
            )),
            Some((order, _)) if order <= last => Some(format!(
                "line {n}: the journal committed operation {} before the line above it",
                a.operation_id
            )),
            Some((order, _)) => {
                last = order;
                None
            }
        };
        if let Some(why) = why {
            return Ok(Legacy::Untrusted(not_corroborated(dir, &why)));
        }
    }
    Ok(Legacy::Believed)
}

/// The message of old records the journal in use does not corroborate.
fn not_corroborated(dir: &Path, why: &str) -> String {
    format!(
        "{} and {} were written by an earlier version of distributor, and the journal in use does not corroborate them ({why}); distributor believes, migrates and prunes by nothing there: migrate them with the journal that recorded them (--journal), or remove both files",
        dir.join(log::SETTINGS_FILE).display(),
        dir.join(log::LOG_FILE).display()
    )
}
