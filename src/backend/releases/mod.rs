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

mod activate;
mod build;
mod carry;
mod identity;
pub mod log;
mod records;
mod retention;
mod rollback;

pub(crate) use identity::{Expected, moved as release_moved};
use records::read_log_view;
pub use records::{LogView, staged_releases};
pub use retention::{PruneBy, stopped};
pub use rollback::Purpose;

use crate::backend::local::{Bundle, LOCK_FILE};
use crate::backend::types::{Proof, StagingEntry, StateBytes, Storage};
use crate::backend::{Backend, BundleStore, Verdict};
use crate::config::ReleaseSettings;
use crate::error::{Error, IoContext, Result};
use crate::fs::{Dir, is_redirect, type_name};
use crate::record::StagedOperation;
use rustix::fs::FileType;

use std::path::{Component, Path, PathBuf};

/// Mode of every file distributor writes into a release: read-only, so writing through
/// one release cannot change another that shares the file.
const READ_ONLY: u32 = crate::backend::local::records::RELEASE_FILE_MODE;

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
    /// Why `path` is not the symlink the last logged activation made (SPEC §17), as read
    /// when opened: `path_changed`.
    path_changed: Option<String>,
    /// Why the directory the active release's name holds is not that release
    /// (docs/operations.md, "Release identity"): `release_moved`. Set when opened, or when
    /// its state, read for planning, names another operation.
    release_moved: std::sync::Mutex<Option<String>>,
    /// The destination log as read when opened.
    view: LogView,
    /// What the journal in use made of the old records of `releases.dir`.
    legacy: records::Legacy,
}

impl ReleaseStore {
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
        let legacy = match &root {
            Some(r) => {
                records::judge_legacy(r, dir, path, lock.and_then(|l| l.history), lock.is_some())?
            }
            None => records::Legacy::None,
        };
        let view = match &root {
            Some(r) => read_log_view(r, dir, &legacy)?,
            None => LogView::default(),
        };
        let path_changed = path_changed(&link, &view, path);
        let mut release_moved = None;
        let active = match (&link, &root) {
            // A plain directory where the log says distributor's symlink was: the user's,
            // never locked or written.
            (Link::Plain, _) if path_changed.is_some() => None,
            (Link::Release(r), Some(root)) => match active_moved(root, r, &view, settings)? {
                // Never read as the release: what the name holds is not it.
                Some(why) => {
                    release_moved = Some(why);
                    None
                }
                None => Some(open_release(root, r, path)?),
            },
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
            path_changed,
            release_moved: std::sync::Mutex::new(release_moved),
            view,
            legacy,
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

    /// Why the active release's name does not hold the release the log activated (its
    /// device and inode, owner or state differ), if it does not: the conflict
    /// `release_moved`, and retention removes nothing.
    pub fn release_moved(&self) -> Option<String> {
        self.release_moved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Why the name `name` of the active release does not hold that release, if it does not
/// (docs/operations.md, "Release identity"): checked by the device and inode the log
/// records for it, or where it records none (an earlier version's entries) by its state,
/// which must name the release. A release the log never activated is not judged here
/// (`path_changed` says so).
fn active_moved(
    root: &Bundle,
    name: &str,
    view: &LogView,
    settings: &ReleaseSettings,
) -> Result<Option<String>> {
    if view.untrusted().is_some() || view.active() != Some(name) {
        return Ok(None);
    }
    let want = Expected::by(view.identity_of(name));
    Ok(
        identity::check_release(root, &settings.dir, name, want, view)?
            .err()
            .map(|why| moved_active(&settings.dir.join(name), &why)),
    )
}

/// The message of `release_moved` for the active release at `dir`: `why` it is not.
fn moved_active(dir: &Path, why: &str) -> String {
    format!(
        "{} is not the release the destination log activated: {why}; distributor activates, carries and removes nothing there until it is put back or `distributor rollback --to OP_ID` activates a release of your choice",
        dir.display()
    )
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

/// Why `link` is not what the last logged activation made, if it is not (SPEC §17).
fn path_changed(link: &Link, view: &LogView, path: &Path) -> Option<String> {
    if view.legacy_blocked().is_some() {
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
        let (state, sha) = match &self.active {
            Some(a) => a.read_state_parsed(outputs)?,
            None => return Ok((crate::state::StateFile::Absent, None)),
        };
        // Read for planning anyway: it must name the active release, and a release the
        // log activated is never without its state (docs/operations.md, "Release
        // identity"); else the directory under its name is not that release.
        let Link::Release(r) = &self.link else {
            return Ok((state, sha));
        };
        if self.view.active() != Some(r.as_str()) {
            return Ok((state, sha));
        }
        let why = match (&state, &sha) {
            (crate::state::StateFile::Valid(s), Some(sha))
                if !self.view.state_names(s, &sha.hex(), r) =>
            {
                let ops: Vec<&str> = s.owners.iter().map(|o| o.operation_id.as_str()).collect();
                Some(format!(
                    "its .distributor.json names operation {}, not release {r}",
                    ops.join(", ")
                ))
            }
            (crate::state::StateFile::Absent, _) => {
                Some("it holds no .distributor.json".to_string())
            }
            _ => None,
        };
        if let Some(why) = why {
            *self.release_moved.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(moved_active(&self.settings.dir.join(r), &why));
        }
        Ok((state, sha))
    }

    fn verdict(&self, op: &StagedOperation) -> Result<Verdict> {
        if op.releases.as_ref().is_some_and(|r| r.stages) {
            return self.stage_verdict(op);
        }
        let before = op.releases.as_ref().and_then(|r| r.active_before.clone());
        let target =
            (op.releases.as_ref()).map_or(op.operation_id.as_str(), |r| r.target(&op.operation_id));
        let built = op.releases.as_ref().is_none_or(|r| r.activates.is_none());
        Ok(match self.current()? {
            // `path` names the release this operation built, but only the release, whole,
            // holding its post-state, can have been activated by it: else someone pointed
            // `path` there (docs/operations.md, "Release identity").
            Link::Release(r) if r == target && built && !self.built_complete(op)? => {
                Verdict::Diverged
            }
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
        // Old records the journal in use does not corroborate (SPEC §17 "Upgrading").
        if storage.untrusted_record.is_none() {
            storage.untrusted_record = self.view.legacy_untrusted.clone();
        }
        if let Some(root) = &self.root
            && storage.untrusted_record.is_none()
        {
            storage.untrusted_record = crate::backend::local::untrusted_staging(root)?;
        }
        storage.path_changed = self.path_changed.clone();
        storage.release_moved = self.release_moved();
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
    fn record_dir(&self, create: bool) -> Result<Option<crate::record::RecordDir>> {
        match &self.root {
            Some(r) => r.record_dir(create),
            None => Ok(None),
        }
    }

    fn operation(&self) -> Box<dyn crate::backend::Steps + Sync + '_> {
        Box::new(build::ReleaseOperation {
            store: self,
            purpose: Purpose::Publish,
            building: Default::default(),
            post: None,
        })
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

impl BundleStore for ReleaseStore {
    /// The log in `releases.dir`: its cursor (`None` before `releases.dir` exists).
    fn log_cursor(&self) -> Option<&crate::backend::LogCursor> {
        self.root.as_ref().map(Bundle::log_cursor)
    }

    fn log_tail_now(&self) -> Result<Option<u64>> {
        match &self.root {
            Some(r) => crate::backend::local::log::tail_now(r.dir()).map(Some),
            None => Ok(Some(0)),
        }
    }
}

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
