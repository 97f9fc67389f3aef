//! Building a release and activating it (SPEC §15): the staging record first, then
//! `<releases.dir>/<op>/` with everything the operation does not change hard-linked from
//! the active release (copied and verified where a link cannot be made), the new files
//! and links, its `.distributor.json`; then one `syncfs`, a symlink to it under a
//! temporary name, and the rename over `path` that is the commit point. The rollback
//! removes a release `path` does not name and no log entry names; the cleanup writes the
//! activation's entry in the destination log (SPEC §18) before the staging entry goes.

use super::log;
use super::{ACTIVATE_PREFIX, ADOPTED_PREFIX, Link, ReleaseStore, link_text};
use crate::backend::Committed;
use crate::backend::local::log::Entry;
use crate::backend::local::records::RECORD_DIR;
use crate::backend::local::{LEGACY_STAGING_DIR, LOCK_FILE};
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::fs::{Dir, Identity, split, type_name};
use crate::record::StagedOperation;
use crate::source::relative_link_target;
use crate::state::STATE_FILE;
use rustix::fs::{FileType, Mode};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

/// The release an operation builds: its handle and the directories below it opened so
/// far, by release-relative path.
#[derive(Debug)]
pub struct Building {
    op: String,
    dirs: foldhash::HashMap<String, Arc<Dir>>,
}

/// Mode of every file distributor writes into a release: read-only, so writing through
/// one release cannot change another that shares the file.
const READ_ONLY: u32 = 0o444;

/// One operation in a releases destination: the release it builds, made by
/// [`ReleaseStore`]'s `operation` and dropped with the operation. It reads and writes the
/// destination through its store.
#[derive(Debug)]
pub(super) struct ReleaseOperation<'s> {
    pub(super) store: &'s ReleaseStore,
    /// The release being built, and the directories below it opened so far.
    pub(super) building: std::sync::Mutex<Option<Building>>,
}

impl std::ops::Deref for ReleaseOperation<'_> {
    type Target = ReleaseStore;

    fn deref(&self) -> &ReleaseStore {
        self.store
    }
}

impl ReleaseOperation<'_> {
    /// `begin`: the staging record in `releases.dir`, the settings record when it is the
    /// first, then the release directory, filled with what the operation carries over.
    pub(super) fn begin_release(
        &self,
        op: &StagedOperation,
        pre: Option<&[u8]>,
        post: &[u8],
    ) -> Result<()> {
        let root = self.root()?;
        if let Some(why) = self.log_view()?.legacy_error {
            return Err(Error::Failed(format!("{why}; nothing was published")));
        }
        root.begin(op, pre, post)?;
        self.record_settings()?;
        if op.releases.as_ref().is_some_and(|r| r.activates.is_some()) {
            // A rollback builds nothing: the release it activates exists.
            return Ok(());
        }
        let id = &op.operation_id;
        let release_path = self.settings.dir.join(id);
        if !root.dir().mkdir(id).ctx("create release", &release_path)? {
            return Err(Error::Failed(format!(
                "{} exists already",
                release_path.display()
            )));
        }
        let release = Arc::new(root.dir().open_dir(id).ctx("open", &release_path)?);
        failpoint::hit("during_carry_over");
        if let Some(active) = &self.active {
            let skip: foldhash::HashSet<&str> =
                op.actions.iter().map(|a| a.path.as_str()).collect();
            // An adopted directory's files become read-only as they become a release's.
            carry(active.dir(), &release, &skip, ReleaseStore::adopts(op))?;
        }
        let mut dirs = foldhash::HashMap::default();
        dirs.insert(String::new(), release);
        *self.building.lock().unwrap_or_else(|p| p.into_inner()) = Some(Building {
            op: id.clone(),
            dirs,
        });
        Ok(())
    }

    /// The directory `rel` of the release being built for `op`, created (with its
    /// ancestors) when missing.
    fn release_dir(&self, op: &StagedOperation, rel: &str) -> Result<Arc<Dir>> {
        let mut guard = self.building.lock().unwrap_or_else(|p| p.into_inner());
        let b = match guard.as_mut() {
            Some(b) if b.op == op.operation_id => b,
            _ => {
                // After a restart (recover never builds), or a mix-up of operations.
                return Err(Error::Failed(format!(
                    "{}: release {} is not being built by this process",
                    self.settings.dir.display(),
                    op.operation_id
                )));
            }
        };
        make_dirs(b, rel, &self.settings.dir.join(&op.operation_id))
    }

    /// Where a file goes, a directory of the new release left empty because everything
    /// below it was not carried over: removes it (anything in it is an error).
    pub(super) fn remove_emptied_dir_in_release(&self, rel: &str) -> Result<()> {
        let guard = self.building.lock().unwrap_or_else(|p| p.into_inner());
        let Some(b) = guard.as_ref() else {
            return Ok(());
        };
        let (d, name) = split(rel);
        let base = self.settings.dir.join(&b.op);
        let Ok(parent) = b.dirs[""].open_dir(d) else {
            return Ok(());
        };
        match parent.stat_opt(name).ctx("stat", base.join(rel))? {
            Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                remove_empty_tree(&parent, name, &base.join(rel))
            }
            _ => Ok(()),
        }
    }

    /// `place`: the staged file, made read-only, renamed into the release (never over
    /// anything).
    pub(super) fn place_in_release(&self, op: &StagedOperation, i: usize) -> Result<()> {
        let root = self.root()?;
        let a = &op.actions[i];
        let (d, name) = split(&a.path);
        let path = self.settings.dir.join(&op.operation_id).join(&a.path);
        failpoint::hit("during_placement");
        let parent = self.release_dir(op, d)?;
        let (staged, staged_name) = root.staged_new(op, i)?;
        let (f, _) = staged
            .open_file(&staged_name)
            .ctx("open", staged.join(&staged_name))?;
        rustix::fs::fchmod(&f, Mode::from_raw_mode(READ_ONLY))
            .map_err(|e| Error::io("make read-only", staged.join(&staged_name), e.into()))?;
        drop(f);
        failpoint::io("io_rename").ctx("rename into place", &path)?;
        staged
            .rename_new(&staged_name, &parent, name)
            .ctx("rename into place", &path)
    }

    /// `link`: the symlink of action `i` in the release.
    pub(super) fn link_in_release(&self, op: &StagedOperation, i: usize) -> Result<()> {
        let a = &op.actions[i];
        let (d, name) = split(&a.path);
        failpoint::hit("during_links");
        let parent = self.release_dir(op, d)?;
        let target = relative_link_target(&a.path, a.target.as_deref().unwrap_or_default());
        parent.symlink(&target, name).ctx(
            "create link",
            self.settings.dir.join(&op.operation_id).join(&a.path),
        )
    }

    /// The commit point: the release's state file, one `syncfs` making the whole release
    /// durable, the checks that `releases.dir` and `path` are still what was locked and
    /// planned against, then a symlink to the release under a temporary name renamed over
    /// `path`, and an fsync of `path`'s parent.
    pub(super) fn activate(&self, op: &StagedOperation) -> Result<Committed> {
        let root = self.root()?;
        if self.link == Link::Plain && !ReleaseStore::adopts(op) {
            // `rollback --to` while path_changed: a directory someone put at `path` is
            // theirs; distributor never replaces it.
            return Err(Error::Failed(format!(
                "{} is a plain directory (path_changed); distributor never replaces one: move it away, then run the rollback again; nothing was activated",
                self.path.display()
            )));
        }
        if let Some(target) = op.releases.as_ref().and_then(|r| r.activates.as_deref()) {
            root.dir()
                .open_dir(target)
                .ctx("open", self.settings.dir.join(target))?;
            self.check_still_in_place(root)?;
            return self.swap(op, target);
        }
        let release = self.release_dir(op, "")?;
        let state_path = self.settings.dir.join(&op.operation_id).join(STATE_FILE);
        // The state file is a record: exactly 0600, distributor's (SPEC §17).
        let mut f = release
            .create_record_file(STATE_FILE)
            .ctx("create", &state_path)?;
        root.copy_post_state(op, &mut f, &state_path)?;
        drop(f);
        failpoint::io("io_state_fsync").ctx("fsync", &state_path)?;
        root.dir()
            .sync_filesystem()
            .ctx("sync filesystem of", &self.settings.dir)?;
        self.check_still_in_place(root)?;
        if ReleaseStore::stages(op) {
            // A stage (SPEC §19): the release is complete and durable, its state file its
            // commit point; `path` is left as it is for `distributor promote`.
            return Ok(Committed::passed());
        }
        self.swap(op, &op.operation_id)
    }

    /// `undo`: removes the release `op` was building (never one `path` names), its
    /// temporary symlink, then its staging. Idempotent.
    pub(super) fn undo_release(&self, op: &StagedOperation) -> Result<()> {
        let root = self.root()?;
        op.check(&self.path)?;
        let id = &op.operation_id;
        let rollback = op.releases.as_ref().and_then(|r| r.activates.clone());
        let target = rollback.clone().unwrap_or_else(|| id.clone());
        if self.current()? == Link::Release(target.clone()) {
            return Err(Error::Failed(format!(
                "{} names release {target}: the operation passed its commit point; it is rolled forward, not back",
                self.path.display()
            )));
        }
        self.remove_activation_links(id)?;
        failpoint::hit("undo_remove_placed");
        // Only retention removes a release the log names (SPEC §17): a replayed staging
        // record must not take a logged release with it.
        let logged = (self.log_view()?.log.entries.iter()).any(|e| {
            e.release_activated.as_deref() == Some(id)
                || e.release_deactivated.as_deref() == Some(id)
                || e.release_staged.as_deref() == Some(id)
        });
        if rollback.is_none() && !logged {
            root.dir()
                .remove_tree(id)
                .ctx("remove release", self.settings.dir.join(id))?;
        } else if rollback.is_none() {
            eprintln!(
                "warning: {} is named by the destination log; undoing operation {id} leaves it for retention",
                self.settings.dir.join(id).display()
            );
        }
        *self.building.lock().unwrap_or_else(|p| p.into_inner()) = None;
        failpoint::hit("undo_before_remove_staging");
        root.remove_unfinished(id)?;
        root.remove_staging(id)
    }
}

impl ReleaseStore {
    /// Records the settings in `.distributor/releases.json` when `releases.dir` has none
    /// yet (and leaves `{"moved_to": ".distributor/"}` at the old name, which Part II
    /// binaries refuse).
    fn record_settings(&self) -> Result<()> {
        if self.recorded_settings()?.is_some() {
            return Ok(());
        }
        self.write_settings(&log::RecordedSettings::of(&self.path, &self.settings))
    }

    /// Whether operation `op` stages its release without activating it.
    fn stages(op: &StagedOperation) -> bool {
        op.releases.as_ref().is_some_and(|r| r.stages)
    }

    /// Where a stage stands (SPEC §19): past its commit point when its release holds its
    /// post-state (written last, after every file, then made durable), else before it.
    pub(super) fn stage_verdict(&self, op: &StagedOperation) -> Result<crate::backend::Verdict> {
        use crate::backend::Verdict;
        let root = self.root()?;
        let id = &op.operation_id;
        let release_path = self.settings.dir.join(id);
        let release = match root.dir().open_dir(id) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Verdict::Back),
            Err(e) => return Err(Error::io("open", release_path, e)),
        };
        let state = crate::backend::local::Bundle::reading(&release_path, release)?.read_state()?;
        let sha = state.bytes().map(crate::hash::sha256_hex);
        Ok(match sha {
            Some(s) if s == op.post_state_sha256 => Verdict::Forward,
            _ => Verdict::Back,
        })
    }

    /// Whether operation `op` adopts the plain directory at `path`.
    fn adopts(op: &StagedOperation) -> bool {
        op.releases.as_ref().is_some_and(|r| r.adopts)
    }

    /// A symlink to `release` under a temporary name, renamed over `path`: the commit
    /// point; then `path`'s parent is fsynced.
    fn swap(&self, op: &StagedOperation, release: &str) -> Result<Committed> {
        let (tmp_dir, tmp) = self.activation_dir(&op.operation_id)?;
        let _ = tmp_dir.unlink(&tmp);
        let text = link_text(&self.path, &self.settings.dir, release);
        tmp_dir
            .symlink(&text, &tmp)
            .ctx("create link", tmp_dir.join(&tmp))?;
        failpoint::io("io_state_rename").ctx("activate", &self.path)?;
        if Self::adopts(op) {
            // The plain directory and the symlink change places: the directory, now
            // under the temporary name, is emptied of what the release took over by the
            // cleanup. Only the directory locked is exchanged (SPEC §17).
            self.exchange_locked(op, &tmp_dir, &tmp)?;
        } else {
            tmp_dir
                .rename_over(&tmp, &self.parent, &self.name())
                .ctx("activate", &self.path)?;
        }
        self.parent.sync().ctx("fsync", self.parent.path())?;
        Ok(Committed::passed())
    }

    /// The adoption's exchange: `path` must be the plain directory locked (its device and
    /// inode, kept in the staging record) right before the `RENAME_EXCHANGE`, and what
    /// landed under the temporary name must be it afterwards; otherwise a neighbour
    /// swapped another directory in, and it is exchanged back and nothing is deleted.
    fn exchange_locked(&self, op: &StagedOperation, tmp_dir: &Dir, tmp: &str) -> Result<()> {
        let want = locked_dir(op).ok_or_else(|| {
            Error::Failed(format!(
                "{}: the adoption's record does not name the directory it locked; nothing was activated",
                self.path.display()
            ))
        })?;
        let name = self.name();
        let at_path = self.parent.stat(&name).ctx("stat", &self.path)?;
        if Identity::of(&at_path) != want {
            return Err(Error::Unsafe(format!(
                "{} is no longer the directory distributor locked for the adoption (it was replaced while the run went on); nothing was exchanged",
                self.path.display()
            )));
        }
        // A neighbour may swap another directory in right here: checked again below.
        failpoint::hit("before_adopt_exchange");
        tmp_dir
            .exchange(tmp, &self.parent, &name)
            .ctx("exchange with the first release", &self.path)?;
        let landed = tmp_dir.stat(tmp).ctx("stat", tmp_dir.join(tmp))?;
        if Identity::of(&landed) != want {
            // Swapped in between the check and the exchange: put it back.
            tmp_dir
                .exchange(tmp, &self.parent, &name)
                .ctx("exchange back", &self.path)?;
            self.parent.sync().ctx("fsync", self.parent.path())?;
            tmp_dir.sync().ctx("fsync", tmp_dir.path())?;
            return Err(Error::Unsafe(format!(
                "{} was replaced by another directory during the adoption's exchange; it was exchanged back and nothing was deleted",
                self.path.display()
            )));
        }
        tmp_dir.sync().ctx("fsync", tmp_dir.path())
    }

    /// Where the temporary symlink goes: `releases.dir`, or beside `path` when
    /// `releases.dir` is on another filesystem (a rename cannot cross).
    fn activation_dir(&self, op: &str) -> Result<(Dir, String)> {
        let root = self.root()?;
        let name = format!("{ACTIVATE_PREFIX}{op}");
        let same_fs = root.dir().identity().ctx("stat", &self.settings.dir)?.dev
            == self.parent.identity().ctx("stat", self.parent.path())?.dev;
        let dir = if same_fs { root.dir() } else { &self.parent };
        Ok((dir.try_clone().ctx("open", dir.path())?, name))
    }

    /// Refuses the commit when `releases.dir` no longer names the directory locked, or
    /// `path` no longer names the release planned against.
    fn check_still_in_place(&self, root: &crate::backend::local::Bundle) -> Result<()> {
        let held = root.dir().identity().ctx("stat", &self.settings.dir)?;
        let now = Dir::open_path(&self.settings.dir)
            .ok()
            .and_then(|d| d.identity().ok());
        if now != Some(held) {
            return Err(Error::Unsafe(format!(
                "{} no longer names the directory distributor locked (it was replaced while the operation ran); nothing was activated",
                self.settings.dir.display()
            )));
        }
        if self.current()? != self.link {
            return Err(Error::Unsafe(format!(
                "{} changed while the operation ran (it no longer names the release planned against); nothing was activated",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Removes the temporary activation symlinks of `op` (only symlinks of that name).
    fn remove_activation_links(&self, op: &str) -> Result<()> {
        let name = format!("{ACTIVATE_PREFIX}{op}");
        for dir in [self.root()?.dir(), &self.parent] {
            if let Some(st) = dir.stat_opt(&name).ctx("stat", dir.join(&name))?
                && FileType::from_raw_mode(st.st_mode) == FileType::Symlink
            {
                dir.unlink(&name).ctx("remove", dir.join(&name))?;
            }
        }
        Ok(())
    }

    /// `clean_up` after the commit point: the temporary symlink goes, the activation is
    /// appended to the log (once), then the staging entry goes.
    pub(super) fn finish_activation(&self, op: &StagedOperation) -> Result<()> {
        let root = self.root()?;
        failpoint::hit("during_cleanup");
        self.remove_activation_links(&op.operation_id)?;
        if Self::adopts(op) {
            self.retire_adopted(op)?;
        }
        let view = self.log_view()?;
        if let Some(why) = &view.legacy_error {
            return Err(Error::Failed(format!(
                "{why}; operation {} is not logged yet (its staging entry stays for `distributor recover`)",
                op.operation_id
            )));
        }
        if view.log.names_operation(&op.operation_id) {
            crate::backend::local::log::tidy(root.dir(), &op.operation_id)?;
        } else if Self::stages(op) {
            // A stage's entry (command `stage`): the release it holds for promote, and the
            // release active when it was built, which a promote requires still to be.
            let mut entry = Entry::of_operation(op);
            entry.release_staged = Some(op.operation_id.clone());
            entry.staged_against = op.releases.as_ref().and_then(|r| r.active_before.clone());
            crate::backend::local::log::append(root.dir(), entry)?;
        } else {
            let owner = format!("{}/{}", op.origin.pipeline_id, op.destination_id);
            let rollback = op.releases.as_ref().and_then(|r| r.activates.clone());
            let undoes = op.releases.as_ref().and_then(|r| r.undoes.clone());
            let held = match (&undoes, &op.origin.previous_source) {
                (Some(_), Some(from)) => vec![crate::backend::types::Hold {
                    owner,
                    digest: from.digest.clone(),
                }],
                _ => Vec::new(),
            };
            let mut entry = Entry::of_operation(op);
            entry.release_activated = Some(rollback.unwrap_or_else(|| op.operation_id.clone()));
            entry.release_deactivated = view
                .active()
                .map(str::to_string)
                .or_else(|| op.releases.as_ref().and_then(|r| r.active_before.clone()));
            entry.undoes = undoes;
            entry.held = held;
            crate::backend::local::log::append(root.dir(), entry)?;
        }
        root.remove_staging(&op.operation_id)
    }

    /// After an adoption: the plain directory, exchanged into `releases.dir` under the
    /// temporary name, is renamed `.distributor-adopted-<op>` and emptied of what the
    /// first release took over: each recorded file only while it is the very inode the
    /// release holds, each link only while its text is the recorded one, the state and
    /// lock files, then the directories left empty. Anything else stays there, and is
    /// named in a warning.
    fn retire_adopted(&self, op: &StagedOperation) -> Result<()> {
        let root = self.root()?;
        let id = &op.operation_id;
        let tmp = format!("{ACTIVATE_PREFIX}{id}");
        let kept = format!("{ADOPTED_PREFIX}{id}");
        let tmp_is_dir = root
            .dir()
            .stat_opt(&tmp)
            .ctx("stat", self.settings.dir.join(&tmp))?
            .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory);
        if tmp_is_dir {
            root.dir()
                .rename_new(&tmp, root.dir(), &kept)
                .ctx("rename", self.settings.dir.join(&kept))?;
        }
        let old_path = self.settings.dir.join(&kept);
        let Ok(old) = root.dir().open_dir(&kept) else {
            return Ok(());
        };
        // Only the directory the adoption locked is emptied (SPEC §17): anything else
        // under that name stays, named in a warning.
        if let Some(want) = locked_dir(op)
            && old.identity().ctx("stat", &old_path)? != want
        {
            eprintln!(
                "warning: {} is not the directory the adoption locked; distributor leaves it as it is: inspect it",
                old_path.display()
            );
            return Ok(());
        }
        let release_path = self.settings.dir.join(id);
        let release = root.dir().open_dir(id).ctx("open", &release_path)?;
        let reading = release.try_clone().ctx("open", &release_path)?;
        let crate::state::StateFile::Valid(state) =
            crate::backend::local::Bundle::reading(&release_path, reading)?
                .read_state()?
                .parse()
        else {
            return Ok(());
        };
        for o in &state.outputs {
            let (d, n) = split(&o.path);
            let (Ok(od), Ok(rd)) = (old.open_dir(d), release.open_dir(d)) else {
                continue;
            };
            if let (Ok(a), Ok(b)) = (od.stat(n), rd.stat(n))
                && a.st_ino == b.st_ino
                && a.st_dev == b.st_dev
            {
                od.unlink(n).ctx("remove", old_path.join(&o.path))?;
            }
        }
        for l in &state.links {
            let (d, n) = split(&l.path);
            let want = relative_link_target(&l.path, &l.target);
            if let Ok(od) = old.open_dir(d)
                && od.read_link(n).is_ok_and(|t| t == want)
            {
                od.unlink(n).ctx("remove", old_path.join(&l.path))?;
            }
        }
        for own in [STATE_FILE, LOCK_FILE] {
            if old
                .stat_opt(own)
                .ok()
                .flatten()
                .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
            {
                old.unlink(own).ctx("remove", old_path.join(own))?;
            }
        }
        let _ = old.rmdir(LEGACY_STAGING_DIR);
        self.keep_adopted_records(&old, id)?;
        prune_empty(&old);
        if root.dir().rmdir(&kept).is_err() {
            eprintln!(
                "warning: {} keeps what was not distributor's to remove (it appeared after the adoption was checked); inspect it",
                old_path.display()
            );
        }
        Ok(())
    }
}

impl ReleaseStore {
    /// The adopted directory's own records (its destination log from the publications
    /// in place) are history: they move to `<releases.dir>/.distributor/adopted/<op>/`,
    /// never deleted. Only a trusted record directory moves.
    fn keep_adopted_records(&self, old: &Dir, id: &str) -> Result<()> {
        if old.open_record_dir(RECORD_DIR).is_err() {
            return Ok(());
        }
        let root = self.root()?;
        let base = &self.settings.dir;
        let rec = (root.dir().make_record_dir(RECORD_DIR))
            .and_then(|r| r.make_record_dir("adopted"))
            .map_err(|e| match e {
                crate::backend::local::records::RecordError::Untrusted(u) => {
                    Error::Unsafe(u.message())
                }
                crate::backend::local::records::RecordError::Io(e) => {
                    Error::io("create", base.join(RECORD_DIR).join("adopted"), e)
                }
            })?;
        old.rename_new(RECORD_DIR, &rec, id)
            .ctx("move", old.join(RECORD_DIR))?;
        rec.sync().ctx("fsync", rec.path())
    }
}

/// The device and inode of the plain directory an adoption locked, as its record keeps
/// them.
fn locked_dir(op: &StagedOperation) -> Option<Identity> {
    let [dev, ino] = op.releases.as_ref()?.adopts_dir?;
    Some(Identity { dev, ino })
}

/// Removes every empty directory below `dir`, deepest first (never one holding
/// anything).
fn prune_empty(dir: &Dir) {
    let Ok(entries) = dir.entries() else { return };
    for (name, kind) in entries {
        if kind == FileType::Directory
            && let Ok(sub) = dir.open_dir(&name)
        {
            prune_empty(&sub);
            let _ = dir.rmdir(&name);
        }
    }
}

/// Creates `rel` below the release (and its ancestors), never through a symlink.
fn make_dirs(b: &mut Building, rel: &str, base: &Path) -> Result<Arc<Dir>> {
    if let Some(d) = b.dirs.get(rel) {
        return Ok(Arc::clone(d));
    }
    let (parent, name) = split(rel);
    let p = make_dirs(b, parent, base)?;
    p.mkdir(name).ctx("create directory", base.join(rel))?;
    let d = Arc::new(p.open_dir(name).map_err(|e| {
        if crate::fs::is_redirect(&e) {
            Error::Unsafe(format!(
                "{} is not a real directory",
                base.join(rel).display()
            ))
        } else {
            Error::io("open", base.join(rel), e)
        }
    })?);
    b.dirs.insert(rel.to_string(), Arc::clone(&d));
    Ok(d)
}

/// One directory of the active release, as the carry-over scanned it.
struct Scanned {
    /// Release-relative path (`""` for the release itself).
    rel: String,
    /// Index of its parent in the scan (`None` for the release itself).
    parent: Option<usize>,
    /// Its identity in the active release, checked when it is opened again to link from.
    identity: Identity,
    /// Whether the new release gets it: something below it is carried, or it was empty.
    made: bool,
    /// The entries to link from it (files, symlinks, anything but directories).
    entries: Vec<(String, FileType)>,
}

/// Reads the directory `rel` of the active release (`dir`) and everything below it into
/// `out` (parents first): every entry not in `skip` (the paths the operation writes or
/// deletes) and not distributor's own. Returns whether the new release gets the
/// directory: a directory everything below which was skipped is not made (the deletions
/// emptied it); one that was empty stays.
fn scan(
    dir: &Dir,
    rel: &str,
    parent: Option<usize>,
    skip: &foldhash::HashSet<&str>,
    out: &mut Vec<Scanned>,
) -> Result<bool> {
    let list = dir.entries().ctx("list", dir.path())?;
    let here = out.len();
    out.push(Scanned {
        rel: rel.to_string(),
        parent,
        identity: dir.identity().ctx("stat", dir.path())?,
        made: list.is_empty(),
        entries: Vec::new(),
    });
    let mut made = list.is_empty();
    let mut entries = Vec::new();
    for (name, kind) in list {
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let own = [STATE_FILE, LOCK_FILE, RECORD_DIR, LEGACY_STAGING_DIR];
        if (rel.is_empty() && own.contains(&name.as_str())) || skip.contains(child.as_str()) {
            continue;
        }
        if kind == FileType::Directory {
            let sub = dir.open_dir(&name).ctx("open", dir.join(&name))?;
            made |= scan(&sub, &child, Some(here), skip, out)?;
        } else {
            entries.push((name, kind));
            made = true;
        }
    }
    out[here].made = made;
    out[here].entries = entries;
    Ok(made)
}

/// Opens `rel` below `root`, never through a symlink.
fn open_real(root: &Dir, rel: &str) -> Result<Dir> {
    root.open_dir(rel).map_err(|e| {
        if crate::fs::is_redirect(&e) {
            Error::Unsafe(format!(
                "{} is not a real directory",
                root.join(rel).display()
            ))
        } else {
            Error::io("open", root.join(rel), e)
        }
    })
}

/// [`open_real`], checked to be the directory `identity` names: one swapped in since it
/// was scanned or made is refused.
fn reopen(root: &Dir, rel: &str, identity: Identity) -> Result<Dir> {
    let d = open_real(root, rel)?;
    if d.identity().ctx("stat", root.join(rel))? != identity {
        return Err(Error::Unsafe(format!(
            "{} was replaced while the release was being built",
            root.join(rel).display()
        )));
    }
    Ok(d)
}

/// Carries the active release (`src`) into the new one (`dst`): every entry not in `skip`
/// (the paths the operation writes or deletes) and not the state file, hard-linked;
/// directories made again (see [`scan`] for which). The directories are scanned and made
/// first, on one thread; then the links are made directory by directory on several
/// (links into different directories do not wait on each other), each directory opened
/// again without following symlinks and checked to be the one scanned or made. With
/// `read_only`, carried regular files are made read-only (an adopted directory's files,
/// which no release made so yet).
fn carry(src: &Dir, dst: &Dir, skip: &foldhash::HashSet<&str>, read_only: bool) -> Result<()> {
    let mut dirs = Vec::new();
    scan(src, "", None, skip, &mut dirs)?;
    // The new release's directories, parents first; each one's identity once made.
    let mut made: Vec<Option<Identity>> = vec![None; dirs.len()];
    made[0] = Some(dst.identity().ctx("stat", dst.path())?);
    for i in 1..dirs.len() {
        let d = &dirs[i];
        let Some(parent) = d.parent.and_then(|p| made[p]) else {
            continue;
        };
        if !d.made {
            continue;
        }
        let (parent_rel, name) = split(&d.rel);
        let p = reopen(dst, parent_rel, parent)?;
        p.mkdir(name).ctx("create directory", p.join(name))?;
        let sub = open_real(&p, name)?;
        made[i] = Some(sub.identity().ctx("stat", sub.path())?);
    }
    let work: Vec<(&Scanned, Identity)> = dirs
        .iter()
        .zip(&made)
        .filter(|(d, _)| !d.entries.is_empty())
        .filter_map(|(d, m)| m.map(|m| (d, m)))
        .collect();
    let files: usize = work.iter().map(|(d, _)| d.entries.len()).sum();
    let threads = crate::parallel::threads_for(files);
    crate::parallel::try_map_on(
        threads,
        &work,
        || (),
        |(d, made), _| {
            let from = reopen(src, &d.rel, d.identity)?;
            let to = reopen(dst, &d.rel, *made)?;
            for (name, kind) in &d.entries {
                link_or_copy(&from, name, *kind, &to, &from.join(name), &to.join(name))?;
                if read_only && *kind == FileType::RegularFile {
                    let (f, _) = to.open_file(name).ctx("open", to.join(name))?;
                    rustix::fs::fchmod(&f, Mode::from_raw_mode(READ_ONLY))
                        .map_err(|e| Error::io("make read-only", to.join(name), e.into()))?;
                }
            }
            Ok(())
        },
    )?;
    Ok(())
}

/// Removes the release `name` of `parent` (retention): its files directory by directory
/// on several threads (each directory opened again without following symlinks and
/// checked to be the one listed), then the emptied directories. A release of 10,000
/// files is 10,000 `unlinkat`; on one thread they were most of what retention added to a
/// publication.
pub(super) fn remove_release(parent: &Dir, name: &str) -> Result<()> {
    let Some(st) = parent.stat_opt(name).ctx("stat", parent.join(name))? else {
        return Ok(());
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        let root = open_real(parent, name)?;
        let mut dirs = Vec::new();
        scan(&root, "", None, &Default::default(), &mut dirs)?;
        let files: usize = dirs.iter().map(|d| d.entries.len()).sum();
        let work: Vec<&Scanned> = dirs.iter().filter(|d| !d.entries.is_empty()).collect();
        crate::parallel::try_map_on(
            crate::parallel::threads_for(files),
            &work,
            || (),
            |d, _| {
                let dir = reopen(&root, &d.rel, d.identity)?;
                for (entry, _) in &d.entries {
                    dir.unlink(entry).ctx("remove", dir.join(entry))?;
                }
                Ok(())
            },
        )?;
    }
    // What is left: the emptied directories (or `name` itself, when not one).
    parent
        .remove_tree(name)
        .ctx("remove release", parent.join(name))
}

/// Hard-links `name` from `src` into `dst`; where the filesystem refuses (`EXDEV`,
/// `EPERM`, `EMLINK`), copies a regular file read-only and verifies the copy by reading it
/// back, and makes a symlink again with the same text.
fn link_or_copy(
    src: &Dir,
    name: &str,
    kind: FileType,
    dst: &Dir,
    from: &Path,
    to: &Path,
) -> Result<()> {
    let linked = match failpoint::io("io_link") {
        Err(_) => Err(std::io::Error::from(rustix::io::Errno::XDEV)),
        Ok(()) => src.hard_link(name, dst, name),
    };
    let err = match linked {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let refused = matches!(
        rustix::io::Errno::from_io_error(&err),
        Some(rustix::io::Errno::XDEV | rustix::io::Errno::PERM | rustix::io::Errno::MLINK)
    );
    if !refused {
        return Err(Error::io("link", to, err));
    }
    match kind {
        FileType::Symlink => {
            let text = src.read_link(name).ctx("read link", from)?;
            dst.symlink(&text, name).ctx("create link", to)
        }
        FileType::RegularFile => {
            let (mut input, _) = src.open_file(name).ctx("open", from)?;
            let mut out = dst.create_file(name).ctx("create", to)?;
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = input.read(&mut buf).ctx("read", from)?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                out.write_all(&buf[..n]).ctx("write", to)?;
            }
            rustix::fs::fchmod(&out, Mode::from_raw_mode(READ_ONLY))
                .map_err(|e| Error::io("make read-only", to, e.into()))?;
            drop(out);
            let (copy, _) = dst.open_file(name).ctx("open", to)?;
            let (_, again) = crate::hash::hash_reader(copy, to)?;
            if again != crate::hash::ContentHash::from(h) {
                return Err(Error::Failed(format!(
                    "{} does not read back as the {} it was copied from",
                    to.display(),
                    from.display()
                )));
            }
            Ok(())
        }
        other => Err(Error::Failed(format!(
            "{} is {} and cannot be hard-linked into the new release ({err})",
            from.display(),
            type_name(other)
        ))),
    }
}

/// Removes the directory `name` of `parent` and the empty directories below it; anything
/// else there is an error.
fn remove_empty_tree(parent: &Dir, name: &str, path: &Path) -> Result<()> {
    let d = parent.open_dir(name).ctx("open", path)?;
    for (child, kind) in d.entries().ctx("list", path)? {
        if kind == FileType::Directory {
            remove_empty_tree(&d, &child, &path.join(&child))?;
        } else {
            return Err(Error::Failed(format!(
                "{} is in a directory distributor is replacing with a file",
                path.join(&child).display()
            )));
        }
    }
    parent.rmdir(name).ctx("remove emptied directory", path)
}
