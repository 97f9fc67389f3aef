//! Release directories (SPEC §15): a local destination whose `path` is a symlink that
//! distributor swaps, atomically, to a complete release directory built for each
//! publication in `releases.dir`.
//!
//! The steps are the local backend's, carried out elsewhere: the lock, the staging record
//! and staging live in `releases.dir` (a [`Bundle`] opened there, whose records name
//! `path` as their bundle path); reading the state, probing and listing read the active
//! release, reached by reading the `path` symlink and opening the release it names from
//! the `releases.dir` handle, never by following the link. A publication builds
//! `<releases.dir>/<op>/`: `begin` hard-links everything of the active release the
//! operation does not change into it, `place` and `link` put the new content there
//! (files read-only), `move_aside` has nothing to do (the active release is never
//! changed), and `commit_state` writes the release's `.distributor.json`, makes the
//! release durable and renames a symlink to it over `path`: the commit point. Whether an
//! operation passed it is read from `path`'s target.
//!
//! Must never: change the active release, follow the `path` symlink or any symlink below
//! `releases.dir`, remove a release `path` names, or write outside `path` itself and
//! `releases.dir`.

mod build;
pub mod log;

use crate::backend::local::{Bundle, LOCK_FILE};
use crate::backend::types::{Fingerprint, Placed, Proof, StagingEntry, StateBytes, Storage};
use crate::backend::{Backend, BundleStore, Committed, Verdict};
use crate::config::ReleaseSettings;
use crate::error::{Error, IoContext, ReleasesError, Result};
use crate::fs::{Dir, is_redirect, split, type_name};
use crate::record::StagedOperation;
use rustix::fs::FileType;

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// The prefix of the temporary symlink renamed over `path` at the commit point.
pub const ACTIVATE_PREFIX: &str = ".distributor-activate-";
/// The name an adopted plain directory takes in `releases.dir` until it is emptied.
pub const ADOPTED_PREFIX: &str = ".distributor-adopted-";

pub use crate::record::ReleasesRecord;

/// What a local destination with release directories can do.
pub const CAPABILITIES: crate::backend::Capabilities = crate::backend::Capabilities::RELEASES;

/// The releases backend of one destination.
#[derive(Debug, Clone)]
pub struct ReleasesBackend {
    settings: ReleaseSettings,
}

impl ReleasesBackend {
    /// The backend of a destination with these `releases` settings.
    pub fn new(settings: &ReleaseSettings) -> ReleasesBackend {
        ReleasesBackend {
            settings: settings.clone(),
        }
    }
}

impl Backend for ReleasesBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        CAPABILITIES
    }

    fn concurrency(&self) -> usize {
        crate::parallel::LOCAL_THREADS
    }

    fn bundle_unsafe(&self, base: &Path, _bundle: &Path) -> Option<String> {
        match ReleaseStore::open(base, &self.settings, None) {
            Err(Error::Unsafe(why)) => Some(why),
            Ok(Some(s)) if s.is_plain() => Some(plain_reason(base)),
            _ => None,
        }
    }

    fn open(&self, base: &Path, _bundle: &Path) -> Result<Option<Box<dyn BundleStore>>> {
        Ok(ReleaseStore::open(base, &self.settings, None)?
            .map(|s| Box::new(s) as Box<dyn BundleStore>))
    }

    fn lock(
        &self,
        base: &Path,
        _bundle: &Path,
        how: crate::backend::LockRequest<'_>,
    ) -> Result<Option<Box<dyn BundleStore>>> {
        Ok(ReleaseStore::open(base, &self.settings, Some(how))?
            .map(|s| Box::new(s) as Box<dyn BundleStore>))
    }

    fn bundle_paths(&self, base: &Path) -> Result<Vec<PathBuf>> {
        Ok(vec![base.to_path_buf()])
    }
}

/// What `path` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Link {
    /// Nothing: no release was activated yet.
    Absent,
    /// A symlink naming this release.
    Release(String),
    /// A plain directory: a destination published in place, not adopted yet.
    Plain,
}

/// Who a prune's log entry names: the actor, the pipeline and the journal that ran it.
#[derive(Debug, Clone, Copy)]
pub struct PruneBy<'a> {
    /// Who ran it.
    pub actor: &'a str,
    /// The pipeline.
    pub pipeline_id: &'a str,
    /// The journal that recorded it.
    pub journal_id: Option<&'a str>,
}

/// A releases destination, opened for reading or locked for an operation.
#[derive(Debug)]
pub struct ReleaseStore {
    /// `path`: the symlink, and the bundle path operations record.
    path: PathBuf,
    settings: ReleaseSettings,
    /// `path`'s parent directory.
    parent: Dir,
    /// `releases.dir`, locked for an operation; `None` when it does not exist (reading).
    root: Option<Bundle>,
    /// What `path` named when it was opened.
    link: Link,
    /// The active release, opened for reading.
    active: Option<Bundle>,
    /// The release an operation builds, and the directories below it opened so far.
    building: Mutex<Option<build::Building>>,
    /// A rollback: the earlier release it activates (single owner), and the release whose
    /// activation it undoes.
    rollback_to: Mutex<Option<(Option<String>, String)>>,
    /// The operation adopts the plain directory at `path`.
    adopting: std::sync::atomic::AtomicBool,
    /// The operation stages its release without activating it (`publish --stage`).
    staging_only: std::sync::atomic::AtomicBool,
    /// A promote: the staged release it activates.
    promoting: Mutex<Option<String>>,
    /// Why `path` is not the symlink the last logged activation made (SPEC §17), as read
    /// when opened: `path_changed`.
    path_changed: Option<String>,
}

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
}

impl LogView {
    /// The release the last logged activation made active.
    pub fn active(&self) -> Option<&str> {
        self.activations.last().map(|a| a.release.as_str())
    }

    /// Why the log cannot be trusted to order releases (bad entries, an old log that
    /// cannot be migrated), if it cannot.
    pub fn untrusted(&self) -> Option<String> {
        match (&self.legacy_error, self.log.bad_message()) {
            (Some(l), _) => Some(l.clone()),
            (None, Some(b)) => Some(b),
            (None, None) => None,
        }
    }
}

impl ReleaseStore {
    /// What the staging record keeps of this destination (SPEC §15): its settings, the
    /// release active before, and what the operation activates, stages, undoes or adopts.
    pub fn releases_record(&self) -> ReleasesRecord {
        let rollback = self
            .rollback_to
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let promoting = self
            .promoting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        ReleasesRecord {
            settings: self.settings.clone(),
            active_before: self.active_release().map(str::to_string),
            activates: rollback.as_ref().and_then(|r| r.0.clone()).or(promoting),
            stages: self.staging_only.load(std::sync::atomic::Ordering::Relaxed),
            undoes: rollback.map(|r| r.1),
            adopts: self.adopting.load(std::sync::atomic::Ordering::Relaxed),
            adopts_dir: self
                .adopting
                .load(std::sync::atomic::Ordering::Relaxed)
                .then(|| self.active.as_ref()?.dir().identity().ok())
                .flatten()
                .map(|i| [i.dev, i.ino]),
        }
    }

    /// The releases destination `store` is, for the steps only it has (retention, the
    /// fingerprints taken after it, rollback, promote); `None` for any other store.
    pub fn of(store: &dyn BundleStore) -> Option<&ReleaseStore> {
        store.as_any().downcast_ref()
    }

    /// Opens the destination at `path`; with `lock`, takes the lock in `releases.dir`
    /// (creating it and `path`'s parent when asked). `None` when neither `path` nor
    /// `releases.dir` exists (nothing was ever published), or when locking without
    /// `create` finds no `releases.dir`.
    pub fn open(
        path: &Path,
        settings: &ReleaseSettings,
        lock: Option<crate::backend::LockRequest<'_>>,
    ) -> Result<Option<ReleaseStore>> {
        let (parent_path, name) = parent_and_name(path)?;
        let parent = match Dir::open_path(&parent_path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match lock {
                Some(crate::backend::LockRequest { create: true, .. }) => {
                    std::fs::create_dir_all(&parent_path).ctx("create", &parent_path)?;
                    Dir::open_path(&parent_path).ctx("open", &parent_path)?
                }
                _ => return Ok(None),
            },
            Err(e) if is_redirect(&e) => {
                return Err(Error::Unsafe(format!(
                    "{} is not a directory",
                    parent_path.display()
                )));
            }
            Err(e) => return Err(Error::io("open", parent_path, e)),
        };
        let dir = &settings.dir;
        let root = match lock {
            Some(how) => Bundle::lock(dir, dir, how)?,
            None => Bundle::open(dir, dir)?,
        }
        .map(|b| b.recording_for(path));
        let link = read_link(&parent, &name, path, settings)?;
        if root.is_none() {
            match link {
                Link::Absent => return Ok(None),
                Link::Release(_) => {
                    return Err(Error::Unsafe(format!(
                        "{} names a release but {} does not exist",
                        path.display(),
                        dir.display()
                    )));
                }
                // Locking for recovery: nothing was ever staged there.
                Link::Plain if lock.is_some() => return Ok(None),
                Link::Plain => {}
            }
        }
        let view = match &root {
            Some(r) => read_log_view(r, dir)?,
            None => LogView::default(),
        };
        let path_changed = path_changed(&link, &view, path);
        let active = match (&link, &root) {
            // A plain directory where the log says distributor's symlink was: the user's,
            // never locked or written.
            (Link::Plain, _) if path_changed.is_some() => None,
            (Link::Release(r), Some(root)) => Some(open_release(root, r, path)?),
            // Not adopted yet: read (status, verify, adopt) as a plain bundle path, locked
            // as one for an operation (adopt) so no in-place publication runs meanwhile.
            (Link::Plain, _) => Some(
                match lock {
                    Some(how) => Bundle::lock(
                        path,
                        path,
                        crate::backend::LockRequest {
                            create: false,
                            ..how
                        },
                    )?,
                    None => Bundle::open(path, path)?,
                }
                .ok_or_else(|| Error::Failed(format!("{} vanished", path.display())))?,
            ),
            _ => None,
        };
        let store = ReleaseStore {
            path: path.to_path_buf(),
            settings: settings.clone(),
            parent,
            root,
            link,
            active,
            building: Mutex::new(None),
            rollback_to: Mutex::new(None),
            adopting: Default::default(),
            staging_only: Default::default(),
            promoting: Mutex::new(None),
            path_changed,
        };
        if lock.is_some() {
            store.migrate()?;
        }
        Ok(Some(store))
    }

    /// `releases.dir`, which an operation needs.
    fn root(&self) -> Result<&Bundle> {
        self.root
            .as_ref()
            .ok_or_else(|| Error::Failed(format!("{} does not exist", self.settings.dir.display())))
    }

    /// The directory holding the record directory `.distributor/` (`releases.dir`):
    /// where the destination log is.
    pub fn record_base(&self) -> Result<&Dir> {
        Ok(self.root()?.dir())
    }

    /// The name of `path` in its parent.
    fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The release `path` names now, read again from storage.
    fn current(&self) -> Result<Link> {
        read_link(&self.parent, &self.name(), &self.path, &self.settings)
    }

    /// The name of the active release when opened.
    pub fn active_release(&self) -> Option<&str> {
        match &self.link {
            Link::Release(r) => Some(r),
            Link::Absent | Link::Plain => None,
        }
    }

    /// Whether `path` is a plain directory, not adopted yet (a plain directory where the
    /// log says distributor's symlink was is [`ReleaseStore::path_changed`] instead).
    pub fn is_plain(&self) -> bool {
        self.link == Link::Plain && self.path_changed.is_none()
    }

    /// Why `path` is not the symlink the last logged activation made (missing, a
    /// directory, another target), if it is not: the conflict `path_changed`, and
    /// retention removes nothing.
    pub fn path_changed(&self) -> Option<&str> {
        self.path_changed.as_deref()
    }

    /// The destination log as it stands now.
    pub fn log_view(&self) -> Result<LogView> {
        match &self.root {
            Some(r) => read_log_view(r, &self.settings.dir),
            None => Ok(LogView::default()),
        }
    }

    /// Why retention removes nothing now, if it does not: `path_changed`, bad log
    /// entries, an old activation log that cannot be migrated.
    pub fn retention_blocked(&self, view: &LogView) -> Option<String> {
        if let Some(why) = &self.path_changed {
            return Some(format!("path_changed: {why}"));
        }
        view.untrusted()
    }

    /// Moves the old records to `.distributor/` (SPEC §18), idempotently: every line `i`
    /// of `.distributor-activations.log` whose entry `i` does not exist yet becomes that
    /// entry, then the settings go to `.distributor/releases.json` and the old settings
    /// record is replaced with `{"moved_to": ".distributor/"}`. Needs the lock. An old
    /// log that cannot be read whole is left as it is (retention removes nothing, and
    /// publications are refused, until an operator repairs it).
    fn migrate(&self) -> Result<()> {
        let root = self.root()?;
        let dir = root.dir();
        let Some(legacy) = read_legacy_settings(root, &self.settings.dir)? else {
            return Ok(());
        };
        let view = read_log_view(root, &self.settings.dir)?;
        if view.legacy_error.is_some() {
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
    fn write_settings(&self, record: &log::RecordedSettings) -> Result<()> {
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
        let mut f = dir.create_file(&tmp).ctx("create", &old)?;
        f.write_all(log::MOVED_TO.as_bytes()).ctx("write", &old)?;
        dir.sync_file(&f, &tmp).ctx("fsync", &old)?;
        dir.rename_over(&tmp, dir, log::SETTINGS_FILE)
            .ctx("write", &old)?;
        dir.sync().ctx("fsync", base)
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

    /// The settings recorded in `releases.dir`, if any: `.distributor/releases.json`, a
    /// trusted record; else the old `.distributor-releases.json` not migrated yet.
    fn recorded_settings(&self) -> Result<Option<log::RecordedSettings>> {
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

    /// The release directories `releases.dir` holds (operation ids), sorted.
    pub fn releases(&self) -> Result<std::collections::BTreeSet<String>> {
        let Some(root) = &self.root else {
            return Ok(Default::default());
        };
        Ok(root
            .dir()
            .entries()
            .ctx("list", &self.settings.dir)?
            .into_iter()
            .filter(|(n, k)| *k == FileType::Directory && uuid::Uuid::parse_str(n).is_ok())
            .map(|(n, _)| n)
            .collect())
    }

    /// Decides retention (SPEC §15) for every release, and unless `dry_run` removes the
    /// ones it does not keep. Needs the lock unless `dry_run`. The active release and the
    /// one before it come from the log; while `path` is not what the last logged
    /// activation made, or the log has bad entries, every release is kept. `progress`
    /// hears of each release removed.
    pub fn prune(
        &self,
        dry_run: bool,
        progress: crate::progress::Ticker<'_>,
    ) -> Result<Vec<log::Verdict>> {
        let root = self.root()?;
        let view = self.log_view()?;
        let mut in_use = std::collections::BTreeSet::new();
        for e in root.staging_entries()? {
            if let StagingEntry::Operation(op) | StagingEntry::Unfinished(op) = e {
                if let Ok(Some(r)) = root.read_record(&op)
                    && let Some(before) = r.releases.and_then(|r| r.active_before)
                {
                    in_use.insert(before);
                }
                in_use.insert(op);
            }
        }
        let present = self.releases()?;
        if let Some(why) = self.retention_blocked(&view) {
            if !dry_run {
                eprintln!(
                    "warning: {}: retention removed nothing: {why}",
                    self.path.display()
                );
            }
            return Ok(present
                .into_iter()
                .map(|r| log::Verdict {
                    activated_at: (view.activations.iter())
                        .rfind(|a| a.release == r)
                        .map(|a| a.activated_at.clone()),
                    release: r,
                    keep: true,
                    reason: format!("kept: retention removes nothing while {why}"),
                    staged_at: None,
                })
                .collect());
        }
        let verdicts = log::decide(
            &view.activations,
            &present,
            view.active(),
            &in_use,
            self.settings.keep,
            self.settings.max_age_seconds(),
            chrono::Utc::now().timestamp(),
        );
        let mut verdicts = verdicts;
        log::judge_staged(
            &mut verdicts,
            &staged_releases(&view),
            &in_use,
            self.settings.stage_max_age_seconds(),
            chrono::Utc::now().timestamp(),
        );
        if !dry_run {
            let doomed = verdicts.iter().filter(|v| !v.keep).count() as u64;
            progress.start(
                "releases removed",
                Some(doomed),
                crate::progress::Bytes::Uncounted,
            );
            let mut stopped: Option<String> = None;
            for v in verdicts.iter_mut().filter(|v| !v.keep) {
                crate::failpoint::hit("during_prune");
                // `path` again before each removal (SPEC §17): should it no longer be the
                // symlink the last logged activation made, nothing more is removed.
                if stopped.is_none() {
                    stopped = match self.current() {
                        Ok(link) => path_changed(&link, &view, &self.path),
                        Err(e) => Some(format!("{} cannot be read: {e}", self.path.display())),
                    };
                }
                if let Some(why) = &stopped {
                    v.keep = true;
                    v.reason = format!("{STOPPED}{why}");
                    continue;
                }
                build::remove_release(root.dir(), &v.release)?;
                progress.done(1);
            }
            if let Some(why) = stopped {
                eprintln!(
                    "warning: {}: retention stopped: path_changed: {why}",
                    self.path.display()
                );
            }
        }
        Ok(verdicts)
    }

    /// Adds the entry of prune operation `op` that removed `removed` to the log (SPEC
    /// §18: at most 50 named, and their count). Needs the lock.
    pub fn log_prune(
        &self,
        op: &str,
        by: &PruneBy<'_>,
        destination_id: &str,
        removed: &[String],
    ) -> Result<()> {
        use crate::backend::local::log::{self as dlog, Entry, MAX_REMOVED_NAMED};
        let mut e = Entry::new(op, "prune", "prune");
        e.actor = by.actor.to_string();
        e.journal_id = by.journal_id.map(str::to_string);
        let pipeline_id = by.pipeline_id;
        e.pipeline_id = pipeline_id.to_string();
        e.destination_id = destination_id.to_string();
        e.removed_releases = removed.iter().take(MAX_REMOVED_NAMED).cloned().collect();
        e.removed_count = Some(removed.len() as u64);
        e.counts.deleted = removed.len() as u64;
        dlog::append(self.root()?.dir(), e).map(|_| ())
    }

    /// Adds the entry of the retention that ran after operation `op`'s activation and
    /// removed `removed` (command `prune`, the activation's pipeline, destination and
    /// actor). Needs the lock.
    pub fn log_retention(&self, op: &str, removed: &[String]) -> Result<()> {
        let view = self.log_view()?;
        let Some(by) = view.log.entries.iter().rfind(|e| e.operation_id == op) else {
            return Ok(());
        };
        let who = PruneBy {
            actor: &by.actor,
            pipeline_id: &by.pipeline_id,
            journal_id: by.journal_id.as_deref(),
        };
        self.log_prune(op, &who, &by.destination_id, removed)
    }

    /// What retention would decide now for every release, oldest activation first
    /// (never-activated releases last): `status` and `prune --dry-run`.
    pub fn retention(&self) -> Result<Vec<log::Verdict>> {
        if self.root.is_none() {
            return Ok(Vec::new());
        }
        let verdicts = self.prune(true, crate::progress::Ticker::NONE)?;
        self.in_activation_order(verdicts)
    }

    /// `verdicts` ordered by last activation, oldest first; never-activated ones last.
    pub fn in_activation_order(&self, mut v: Vec<log::Verdict>) -> Result<Vec<log::Verdict>> {
        let log = self.activations()?;
        let last = |r: &str| log.iter().rposition(|a| a.release == r);
        v.sort_by_key(|x| (last(&x.release).is_none(), last(&x.release)));
        Ok(v)
    }

    /// Placement fingerprints of the active release's files, taken now (after the last
    /// link and unlink of the operation, pruning included: SPEC §13): `outputs` are the
    /// recorded outputs' paths and hashes.
    pub fn fingerprints(
        &self,
        outputs: &[(&str, crate::hash::ContentHash)],
    ) -> Result<Vec<(String, Fingerprint)>> {
        let root = self.root()?;
        let Link::Release(r) = self.current()? else {
            return Ok(Vec::new());
        };
        let release = root
            .dir()
            .open_dir(&r)
            .ctx("open", self.settings.dir.join(&r))?;
        // One lstat per file, on several threads (outputs come in path order: each thread
        // takes runs of one directory, opened once per run).
        let found = crate::parallel::try_map(
            outputs,
            foldhash::HashMap::<&str, Option<Dir>>::default,
            |&(rel, sha), dirs| {
                let (d, n) = split(rel);
                let dir = dirs.entry(d).or_insert_with(|| release.open_dir(d).ok());
                let Some(dir) = dir else { return Ok(None) };
                Ok(match dir.stat(n) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                        Some((
                            rel.to_string(),
                            crate::backend::local::bundle::fingerprint(&st, sha),
                        ))
                    }
                    _ => None,
                })
            },
        )?;
        Ok(found.into_iter().flatten().collect())
    }
}

impl ReleaseStore {
    /// Makes the operation about to run the adoption of the plain directory at `path`.
    pub fn set_adopt(&self) {
        self.adopting
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes the operation about to run a stage (`publish --stage`, SPEC §19): its release
    /// is built and verified, not activated.
    pub fn set_stage(&self) {
        self.staging_only
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes the operation about to run the promote of the staged release `release`
    /// (SPEC §19): an activation of it, like a rollback's of an earlier release.
    pub fn set_promote(&self, release: &str) {
        *self.promoting.lock().unwrap_or_else(|p| p.into_inner()) = Some(release.to_string());
    }

    /// Makes the operation about to run a rollback that undoes the activation of release
    /// `undoes`: activating the existing release `activate` (a single owner), or building
    /// a new one (`None`: a shared root).
    pub fn set_rollback(&self, activate: Option<&str>, undoes: &str) {
        *self.rollback_to.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((activate.map(str::to_string), undoes.to_string()));
    }

    /// The operation of the latest activation (of `owner`, in a shared root).
    pub fn latest_activation(&self, owner: Option<&str>) -> Result<Option<String>> {
        Ok(log::latest(&self.activations()?, owner))
    }

    /// What a rollback undoes by default ([`log::rollback_target`]): `(target, undone
    /// operation)`; `owner` for a shared root.
    pub fn rollback_target(&self, owner: Option<&str>) -> Result<(String, String)> {
        let current = self
            .active_release()
            .ok_or_else(|| ReleasesError::NoneActive {
                path: self.path.clone(),
            })?;
        log::rollback_target(&self.activations()?, owner).ok_or_else(|| {
            ReleasesError::NoneBefore {
                path: self.path.clone(),
                release: current.to_string(),
                owner: owner.map(str::to_string),
                log: self.settings.dir.join(crate::backend::local::records::LOG),
            }
            .into()
        })
    }

    /// The state file of release `name`, which must exist and hold valid state.
    pub fn release_state(&self, name: &str) -> Result<crate::state::State> {
        let root = self.root()?;
        let release = match root.dir().open_dir(name) {
            Ok(d) => Bundle::reading(&self.settings.dir.join(name), d)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReleasesError::Gone {
                    release: name.to_string(),
                    dir: self.settings.dir.clone(),
                }
                .into());
            }
            Err(e) => return Err(Error::io("open", self.settings.dir.join(name), e)),
        };
        match release.read_state()?.parse() {
            crate::state::StateFile::Valid(s) => Ok(s),
            crate::state::StateFile::Absent => Err(ReleasesError::TargetWithoutState {
                release: name.to_string(),
            }
            .into()),
            crate::state::StateFile::Invalid(why) => Err(ReleasesError::TargetInvalidState {
                release: name.to_string(),
                why,
            }
            .into()),
            crate::state::StateFile::Untrusted(why, _) => Err(Error::Untrusted(why)),
        }
    }

    /// Checks that release `name` holds exactly what `state` records: every output a
    /// regular file of its size and sha256 (read whole), every link its target. A failure
    /// lists the first paths that differ.
    pub fn verify_release(&self, name: &str, state: &crate::state::State) -> Result<()> {
        let root = self.root()?;
        let base = self.settings.dir.join(name);
        let release = root.dir().open_dir(name).ctx("open", &base)?;
        let mut bad = Vec::new();
        for o in &state.outputs {
            let (d, n) = split(&o.path);
            let ok = release
                .open_dir(d)
                .and_then(|dir| dir.open_file(n))
                .ok()
                .and_then(|(f, st)| {
                    let (size, sha) = crate::hash::hash_reader(f, &base.join(&o.path)).ok()?;
                    Some(size == o.size && st.st_size as u64 == o.size && sha == o.sha256)
                })
                .unwrap_or(false);
            if !ok {
                bad.push(o.path.clone());
            }
        }
        for l in &state.links {
            let (d, n) = split(&l.path);
            let want = crate::source::relative_link_target(&l.path, &l.target);
            let ok = release
                .open_dir(d)
                .and_then(|dir| dir.read_link(n))
                .is_ok_and(|t| t == want);
            if !ok {
                bad.push(l.path.clone());
            }
        }
        if bad.is_empty() {
            return Ok(());
        }
        Err(ReleasesError::FailsVerification {
            release: name.to_string(),
            paths: bad,
        }
        .into())
    }
}

/// `path`'s parent and name.
fn parent_and_name(path: &Path) -> Result<(PathBuf, String)> {
    match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => Ok((p.to_path_buf(), n.to_string_lossy().into_owned())),
        _ => Err(Error::Failed(format!(
            "{}: a releases destination needs a path below a directory",
            path.display()
        ))),
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
fn read_log_view(root: &Bundle, dir: &Path) -> Result<LogView> {
    let log = crate::backend::local::log::read(root.dir())?;
    let mut view = LogView {
        activations: log::activations(&log.entries),
        log,
        legacy_error: None,
    };
    if read_legacy_settings(root, dir)?.is_none() {
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

/// How a verdict kept because `path` changed while retention ran begins (the rest says
/// how `path` changed).
const STOPPED: &str = "kept: retention stopped, path_changed: ";

/// Why retention stopped before a removal, when `path` changed while it ran (SPEC §17):
/// from the verdicts [`ReleaseStore::prune`] returned.
pub fn stopped(verdicts: &[log::Verdict]) -> Option<String> {
    verdicts
        .iter()
        .find_map(|v| v.reason.strip_prefix(STOPPED).map(str::to_string))
}

/// Why `link` is not what the last logged activation made, if it is not (SPEC §17).
fn path_changed(link: &Link, view: &LogView, path: &Path) -> Option<String> {
    if view.legacy_error.is_some() {
        // Which activation was last is unknown: that error stands instead.
        return None;
    }
    let shows = match link {
        Link::Absent => "nothing".to_string(),
        Link::Plain => "a plain directory".to_string(),
        Link::Release(r) => format!("release {r}"),
    };
    match (view.active(), link) {
        (None, Link::Absent | Link::Plain) => None,
        (Some(a), Link::Release(r)) if a == r => None,
        (None, Link::Release(_)) => Some(format!(
            "{} shows {shows}, but the destination log records no activation; distributor removes and publishes nothing there until `distributor rollback --to OP_ID` activates a release of your choice",
            path.display()
        )),
        (Some(a), _) => Some(format!(
            "{} shows {shows}, not the symlink to release {a} the last logged activation made; distributor removes and publishes nothing there until it is put back or `distributor rollback --to OP_ID` activates a release of your choice",
            path.display()
        )),
    }
}

/// The link text `path` holds when it names release `name`: relative, from `path`'s
/// parent to `releases.dir`, then the release.
pub fn link_text(path: &Path, dir: &Path, name: &str) -> String {
    let from = path.parent().unwrap_or(Path::new("/"));
    let rel = relative(from, dir);
    if rel.as_os_str().is_empty() {
        name.to_string()
    } else {
        format!("{}/{name}", rel.display())
    }
}

/// The relative path from directory `from` to `to` (both absolute, normalised).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// Why a plain directory at `path` is not published to.
fn plain_reason(path: &Path) -> String {
    format!(
        "{} is a plain directory, not a release; a destination with releases publishes only where path is distributor's symlink: run `distributor releases adopt` to make its managed content a first release, or move it away",
        path.display()
    )
}

/// What `path` (`name` in `parent`) holds, as a releases destination accepts it.
fn read_link(parent: &Dir, name: &str, path: &Path, s: &ReleaseSettings) -> Result<Link> {
    let Some(st) = parent.stat_opt(name).ctx("stat", path)? else {
        return Ok(Link::Absent);
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {}
        FileType::Directory => return Ok(Link::Plain),
        kind => {
            return Err(Error::Unsafe(format!(
                "{} is {}, not a symlink to a release",
                path.display(),
                type_name(kind)
            )));
        }
    }
    let target = parent.read_link(name).ctx("read link", path)?;
    let prefix = link_text(path, &s.dir, "");
    let release = target
        .strip_prefix(&prefix)
        .filter(|r| uuid::Uuid::parse_str(r).is_ok() && !r.contains('/'));
    match release {
        Some(r) => Ok(Link::Release(r.to_string())),
        None => Err(Error::Unsafe(format!(
            "{} is a symlink to {target}, not to a release in {}; distributor swaps only a symlink it made",
            path.display(),
            s.dir.display()
        ))),
    }
}

/// The release `name` in `releases.dir`, opened for reading without following a symlink.
fn open_release(root: &Bundle, name: &str, path: &Path) -> Result<Bundle> {
    let dir_path = root.path().join(name);
    match root.dir().open_dir(name) {
        Ok(d) => Bundle::reading(&dir_path, d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::Unsafe(format!(
            "{} names release {name}, which {} does not hold",
            path.display(),
            root.path().display()
        ))),
        Err(e) if is_redirect(&e) => Err(Error::Unsafe(format!(
            "{} is not a real directory; distributor never goes through it",
            dir_path.display()
        ))),
        Err(e) => Err(Error::io("open", dir_path, e)),
    }
}

impl crate::backend::StoreRead for ReleaseStore {
    fn path(&self) -> &Path {
        &self.path
    }

    fn concurrency(&self) -> usize {
        crate::parallel::LOCAL_THREADS
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        CAPABILITIES
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn read_state(&self) -> Result<StateBytes> {
        match &self.active {
            Some(a) => a.read_state(),
            None => Ok(StateBytes::Absent),
        }
    }

    fn read_state_parsed(
        &self,
        outputs: usize,
    ) -> Result<(crate::state::StateFile, Option<crate::hash::ContentHash>)> {
        match &self.active {
            Some(a) => a.read_state_parsed(outputs),
            None => Ok((crate::state::StateFile::Absent, None)),
        }
    }

    fn verdict(&self, op: &StagedOperation) -> Result<Verdict> {
        if op.releases.as_ref().is_some_and(|r| r.stages) {
            return self.stage_verdict(op);
        }
        let before = op.releases.as_ref().and_then(|r| r.active_before.clone());
        let target =
            (op.releases.as_ref()).map_or(op.operation_id.as_str(), |r| r.target(&op.operation_id));
        Ok(match self.current()? {
            Link::Release(r) if r == target => Verdict::Forward,
            Link::Release(r) if Some(&r) == before.as_ref() => Verdict::Back,
            Link::Absent | Link::Plain if before.is_none() => Verdict::Back,
            _ => Verdict::Diverged,
        })
    }

    fn probe<'a>(
        &self,
        paths: &[(&'a str, Option<Proof<'a>>)],
        dirs_wanted: &foldhash::HashSet<&str>,
        progress: crate::progress::Ticker<'_>,
    ) -> Result<Storage<'a>> {
        let mut storage = match &self.active {
            Some(a) => crate::backend::local::probe_in(a, paths, dirs_wanted, progress)?,
            None => {
                progress.done(paths.len() as u64);
                Storage::default()
            }
        };
        // A settings record that is not distributor's (SPEC §17) is the planner's
        // `untrusted_record`, as an untrusted staging record is.
        storage.releases_mismatch = match self.mismatch() {
            Ok(m) => m,
            Err(Error::Untrusted(why)) => {
                storage.untrusted_record = Some(why);
                None
            }
            Err(e) => return Err(e),
        };
        storage.rolled_back = log::holds(&self.activations()?);
        if let Some(root) = &self.root
            && storage.untrusted_record.is_none()
        {
            storage.untrusted_record = crate::backend::local::untrusted_staging(root)?;
        }
        storage.path_changed = self.path_changed.clone();
        if self.is_plain() {
            // Probed for `verify`; the planner refuses to publish there.
            storage.bundle_unsafe = Some(plain_reason(&self.path));
        }
        Ok(storage)
    }

    fn list_files(&self) -> Result<Vec<String>> {
        match &self.active {
            Some(a) => a.list_files(),
            None => Ok(Vec::new()),
        }
    }

    fn dir_exists(&self, rel: &str) -> Result<bool> {
        match &self.active {
            Some(a) => a.dir_exists(rel),
            None => Ok(false),
        }
    }

    fn locked_before(&self) -> Result<bool> {
        match &self.root {
            Some(r) => Ok(r
                .dir()
                .stat_opt(LOCK_FILE)
                .ctx("stat", self.settings.dir.join(LOCK_FILE))?
                .is_some()),
            None => Ok(false),
        }
    }

    fn lock_holder(&self) -> Result<Option<String>> {
        // The lock of a destination with releases is in `releases.dir`.
        match &self.root {
            Some(r) => r.lock_holder(),
            None => Ok(None),
        }
    }

    fn staging_entries(&self) -> Result<Vec<StagingEntry>> {
        match &self.root {
            Some(r) => r.staging_entries(),
            None => Ok(Vec::new()),
        }
    }

    fn staging_holds_files(&self, op: &str) -> Result<bool> {
        self.root()?.staging_holds_files(op)
    }

    /// The last logged activation: the release it made active. A plain directory not
    /// adopted yet is a bundle path of its own, with its own log.
    fn last_logged_operation(&self) -> Result<Option<crate::backend::LoggedOperation>> {
        if self.is_plain() {
            return match &self.active {
                Some(plain) => plain.last_logged_operation(),
                None => Ok(None),
            };
        }
        let view = self.log_view()?;
        if view.untrusted().is_some() {
            return Ok(None);
        }
        let Some(last) = view.activations.last() else {
            return Ok(None);
        };
        let entry = (view.log.entries.iter())
            .rfind(|e| {
                e.operation_id == last.operation_id
                    && e.release_activated.as_deref() == Some(last.release.as_str())
            })
            .map_or_else(
                || {
                    format!(
                        "the last line of {} (operation {}, activated {})",
                        log::LOG_FILE,
                        last.operation_id,
                        last.activated_at
                    )
                },
                |e| e.describe(),
            );
        Ok(Some(crate::backend::LoggedOperation {
            operation_id: last.release.clone(),
            entry,
            logged: view.activations.iter().map(|a| a.release.clone()).collect(),
        }))
    }
}

impl crate::backend::RecordStore for ReleaseStore {
    fn describe(&self, staged: &mut StagedOperation) {
        staged.releases = Some(self.releases_record());
    }

    fn record_dir(&self, create: bool) -> Result<Option<crate::record::RecordDir>> {
        match &self.root {
            Some(r) => r.record_dir(create),
            None => Ok(None),
        }
    }

    fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        self.begin_release(op, pre, post)
    }

    fn read_record(&self, op: &str) -> Result<Option<StagedOperation>> {
        self.root()?.read_record(op)
    }

    fn remove_staging(&self, op: &str) -> Result<()> {
        self.root()?.remove_staging(op)
    }

    fn remove_unfinished(&self, op: &str) -> Result<()> {
        self.root()?.remove_unfinished(op)
    }

    fn adopt_legacy_staging(&self, op: &str) -> Result<()> {
        self.root()?.adopt_legacy_staging(op)
    }
}

impl crate::backend::Steps for ReleaseStore {
    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &Path,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<(u64, crate::hash::ContentHash)> {
        let source = crate::source::SourceFile::at_path(source.to_path_buf());
        self.root()?.stage(op, i, &source, buf, on_bytes)
    }

    fn stage_source(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<(u64, crate::hash::ContentHash)> {
        self.root()?.stage(op, i, source, buf, on_bytes)
    }

    fn make_staged_durable(&self) -> Result<()> {
        self.root()?.make_staged_durable()
    }

    fn move_aside(&self, _op: &StagedOperation, _i: usize) -> Result<()> {
        // The active release is never changed: what is overwritten or deleted is simply
        // not carried into the new one.
        Ok(())
    }

    fn remove_emptied_dir(&self, rel: &str) -> Result<()> {
        self.remove_emptied_dir_in_release(rel)
    }

    fn place(&self, op: &StagedOperation, i: usize) -> Result<Option<Placed>> {
        self.place_in_release(op, i).map(|()| None)
    }

    fn link(&self, op: &StagedOperation, i: usize) -> Result<()> {
        self.link_in_release(op, i)
    }

    fn commit_state(&self, op: &StagedOperation) -> Result<Committed> {
        self.activate(op)
    }

    fn undo(&self, op: &StagedOperation) -> Result<()> {
        self.undo_release(op)
    }

    fn clean_up(&self, op: &StagedOperation) -> Result<()> {
        self.finish_activation(op)
    }
}

impl BundleStore for ReleaseStore {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_text_is_relative_from_the_parent_of_path() {
        let p = Path::new("/srv/www/latest");
        assert_eq!(
            link_text(p, Path::new("/srv/www/.latest.releases"), "x"),
            ".latest.releases/x"
        );
        assert_eq!(link_text(p, Path::new("/srv/rel"), "x"), "../rel/x");
        assert_eq!(
            link_text(p, Path::new("/data/r/a"), "x"),
            "../../data/r/a/x"
        );
    }
}
