//! Activating a release (SPEC §15): the commit point (the release's state file, one
//! `syncfs`, a symlink to it renamed over `path`, or for an adoption exchanged with the
//! plain directory locked), a stage's verdict, the undo that removes a release `path`
//! does not name and no log entry names, and the cleanup that logs the activation and
//! retires an adopted directory.

use super::build::ReleaseOperation;
use super::{ACTIVATE_PREFIX, ADOPTED_PREFIX, Expected, Link, ReleaseStore, link_text};
use crate::backend::Committed;
use crate::backend::local::log::Entry;
use crate::backend::local::records::RECORD_DIR;
use crate::backend::local::{LEGACY_STAGING_DIR, LOCK_FILE};
use crate::error::{Error, IoContext, Result, StepError};
use crate::failpoint;
use crate::fs::{Dir, Identity, split};
use crate::record::StagedOperation;
use crate::source::relative_link_target;
use crate::state::STATE_FILE;
use rustix::fs::FileType;

impl ReleaseOperation<'_> {
    /// The commit point: the release's state file, one `syncfs` making the whole release
    /// durable, the checks that `releases.dir` and `path` are still what was locked and
    /// planned against, then a symlink to the release under a temporary name renamed over
    /// `path`, and an fsync of `path`'s parent.
    pub(super) fn activate(&self, op: &StagedOperation) -> Result<Committed> {
        let root = self.root()?;
        if self.link == Link::Plain && !ReleaseStore::adopts(op) {
            // `rollback --to` while path_changed: a directory someone put at `path` is
            // theirs; distributor never replaces it.
            return Err(StepError::PlainDirectory {
                path: self.path.clone(),
            }
            .into());
        }
        if let Some(rec) = op.releases.as_ref().filter(|r| r.activates.is_some()) {
            let target = rec.target(&op.operation_id);
            root.dir()
                .open_dir(target)
                .ctx("open", self.settings.dir.join(target))?;
            self.check_still_in_place(root)?;
            return self.swap(
                op,
                target,
                Expected::by(rec.activates_identity.map(Into::into)),
            );
        }
        let release = self.release_dir(op, "")?;
        let built = Expected {
            identity: Some(release.identity().ctx("stat", release.path())?),
            state: false,
        };
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
            // commit point; `path` is left as it is for `distributor promote`. Its name
            // must hold it, or the stage's log entry would name another directory.
            self.checked_or_moved(&op.operation_id, built, &self.view, "nothing was staged")?;
            return Ok(Committed::passed());
        }
        self.swap(op, &op.operation_id, built)
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
            return Err(StepError::PassedCommit {
                path: self.path.clone(),
                release: target,
            }
            .into());
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
            self.remove_half_built(id)?;
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

impl ReleaseOperation<'_> {
    /// Removes the release operation `id` was building, and nothing else: what its name
    /// holds must be the directory it made (the handle this process holds, else the
    /// device and inode its staging entry keeps); where neither is known (stopped between
    /// making the directory and recording it), only an empty directory is removed. A name
    /// holding another directory is `release_moved`: nothing is removed, the staging
    /// stays. Nothing there is an undo done before.
    fn remove_half_built(&self, id: &str) -> Result<()> {
        let root = self.root()?;
        let path = self.settings.dir.join(id);
        let held = (self.building.lock().unwrap_or_else(|p| p.into_inner()))
            .as_ref()
            .filter(|b| b.op == id)
            .map(|b| b.identity())
            .transpose()?;
        let outcome =
            "nothing was removed; the operation's staging stays for `distributor recover`";
        let Some(made) = held.map_or_else(|| root.recorded_release(id), |h| Ok(Some(h)))? else {
            return match root.dir().rmdir(id) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(_) => Err(super::release_moved(
                    path,
                    "its operation recorded no release directory, and the name holds something that is not an empty directory".to_string(),
                    outcome,
                )),
            };
        };
        let want = Expected {
            identity: Some(made),
            state: false,
        };
        match self.open_release_checked(id, want, &self.view)? {
            Ok(dir) => super::carry::remove_release(root.dir(), id, &dir),
            Err(_) if root.dir().stat_opt(id).ctx("stat", &path)?.is_none() => Ok(()),
            Err(why) => Err(super::release_moved(path, why, outcome)),
        }
    }
}

impl ReleaseStore {
    /// Whether operation `op` stages its release without activating it.
    pub(super) fn stages(op: &StagedOperation) -> bool {
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
        // Only the directory the stage made counts (docs/operations.md, "Release
        // identity"); the undo then refuses to remove another.
        if let Some(made) = root.recorded_release(id)?
            && release.identity().ctx("stat", &release_path)? != made
        {
            return Ok(Verdict::Back);
        }
        let state = crate::backend::local::Bundle::reading(&release_path, release)?.read_state()?;
        let sha = state.bytes().map(crate::hash::sha256_hex);
        Ok(match sha {
            Some(s) if s == op.post_state_sha256 => Verdict::Forward,
            _ => Verdict::Back,
        })
    }

    /// Whether the release operation `op` built is complete: its name holds the directory
    /// the operation made (the device and inode its staging entry keeps), and its state
    /// file, written before the commit point, is the operation's post-state.
    pub(super) fn built_complete(&self, op: &StagedOperation) -> Result<bool> {
        let root = self.root()?;
        let id = &op.operation_id;
        let want = Expected {
            identity: root.recorded_release(id)?,
            state: false,
        };
        let Ok(dir) = self.open_release_checked(id, want, &self.view)? else {
            return Ok(false);
        };
        let path = self.settings.dir.join(id);
        let bytes = crate::backend::local::Bundle::reading(&path, dir)?.read_state()?;
        Ok(bytes.bytes().map(crate::hash::sha256_hex).as_deref()
            == Some(op.post_state_sha256.as_str()))
    }

    /// Whether operation `op` adopts the plain directory at `path`.
    pub(super) fn adopts(op: &StagedOperation) -> bool {
        op.releases.as_ref().is_some_and(|r| r.adopts)
    }

    /// A symlink to `release` under a temporary name, renamed over `path`: the commit
    /// point, made only while the name `release` holds the release `want` describes;
    /// then `path`'s parent is fsynced.
    fn swap(&self, op: &StagedOperation, release: &str, want: Expected) -> Result<Committed> {
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
            self.exchange_locked(op, &tmp_dir, &tmp, (release, want))?;
        } else {
            // The release's name must hold the very directory distributor built or
            // verified, right before `path` is pointed at it (docs/operations.md,
            // "Release identity").
            self.checked_or_moved(release, want, &self.view, "nothing was activated")?;
            tmp_dir
                .rename_over(&tmp, &self.parent, &self.name())
                .ctx("activate", &self.path)?;
        }
        self.parent.sync().ctx("fsync", self.parent.path())?;
        Ok(Committed::passed())
    }

    /// The adoption's exchange: `path` must be the plain directory locked (its device and
    /// inode, kept in the staging record) and the name `release` the release built
    /// (`built`) right before the `RENAME_EXCHANGE`, and what landed under the temporary
    /// name must be the directory afterwards; otherwise a neighbour swapped another
    /// directory in, and it is exchanged back and nothing is deleted.
    fn exchange_locked(
        &self,
        op: &StagedOperation,
        tmp_dir: &Dir,
        tmp: &str,
        (release, built): (&str, Expected),
    ) -> Result<()> {
        let want = locked_dir(op).ok_or_else(|| StepError::AdoptionWithoutDirectory {
            path: self.path.clone(),
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
        // The release's name must hold the release built, right before `path` is
        // exchanged with the symlink to it (docs/operations.md, "Release identity").
        self.checked_or_moved(release, built, &self.view, "nothing was exchanged")?;
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
        if let Some(why) = &view.legacy_blocked() {
            return Err(StepError::LogUnwritable {
                why: why.clone(),
                outcome: format!(
                    "operation {} is not logged yet (its staging entry stays for `distributor recover`)",
                    op.operation_id
                ),
            }
            .into());
        }
        if view.log.names_operation(&op.operation_id) {
            crate::backend::local::log::tidy(root.dir(), &op.operation_id)?;
        } else if Self::stages(op) {
            // A stage's entry (command `stage`): the release it holds for promote, and the
            // release active when it was built, which a promote requires still to be.
            let mut entry = Entry::of_operation(op);
            entry.release_identity = self.identity_of_target(op)?;
            entry.release_staged = Some(op.operation_id.clone());
            entry.staged_against = op.releases.as_ref().and_then(|r| r.active_before.clone());
            crate::backend::local::log::append_for(
                root.dir(),
                entry,
                crate::record::paths::of_operation(op),
                root.log_cursor(),
            )?;
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
            entry.release_identity = self.identity_of_target(op)?;
            entry.release_activated = Some(rollback.unwrap_or_else(|| op.operation_id.clone()));
            entry.release_deactivated = view
                .active()
                .map(str::to_string)
                .or_else(|| op.releases.as_ref().and_then(|r| r.active_before.clone()));
            entry.undoes = undoes;
            entry.held = held;
            crate::backend::local::log::append_for(
                root.dir(),
                entry,
                crate::record::paths::of_operation(op),
                root.log_cursor(),
            )?;
        }
        root.remove_staging(&op.operation_id)
    }

    /// The device and inode of the release operation `op` activates or stages, as kept
    /// with its records: a rollback's or promote's as verified (its staging record), a
    /// built release's as made (its staging entry's `release.json`). `None` for a record
    /// written before they were kept.
    fn identity_of_target(&self, op: &StagedOperation) -> Result<Option<Identity>> {
        match op.releases.as_ref().filter(|r| r.activates.is_some()) {
            Some(rec) => Ok(rec.activates_identity.map(Into::into)),
            None => self.root()?.recorded_release(&op.operation_id),
        }
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
