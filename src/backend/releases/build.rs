//! Building a release and activating it (SPEC §15): the staging record first, then
//! `<releases.dir>/<op>/` with everything the operation does not change hard-linked from
//! the active release (copied and verified where a link cannot be made), the new files
//! and links, its `.distributor.json`; then one `syncfs`, a symlink to it under a
//! temporary name, and the rename over `path` that is the commit point. The rollback
//! removes a release `path` does not name and no log entry names; the cleanup writes the
//! activation's entry in the destination log (SPEC §18) before the staging entry goes.

use super::carry::{Records, carry, content_dir_mode, open_real};
use super::{READ_ONLY, ReleaseStore, log};
use crate::backend::Committed;
use crate::backend::types::{Placed, Staged};
use crate::error::{Error, IoContext, Result, StepError};
use crate::failpoint;
use crate::fs::{Dir, Identity, split};
use crate::record::StagedOperation;
use crate::source::relative_link_target;
use rustix::fs::{FileType, Mode};
use std::path::Path;
use std::sync::Arc;

/// The release an operation builds: its handle and the directories below it opened so
/// far, by release-relative path.
#[derive(Debug)]
pub(super) struct Building {
    pub(super) op: String,
    dirs: foldhash::HashMap<String, Arc<Dir>>,
}

impl Building {
    /// The device and inode of the release being built.
    pub(super) fn identity(&self) -> Result<Identity> {
        let dir = &self.dirs[""];
        dir.identity().ctx("stat", dir.path())
    }
}

/// One operation in a releases destination: what it does and the release it builds,
/// made by [`ReleaseStore`]'s `operation` (a publication) or `operation_for` and dropped
/// with the operation. It reads and writes the destination through its store.
#[derive(Debug)]
pub(super) struct ReleaseOperation<'s> {
    pub(super) store: &'s ReleaseStore,
    /// What it does, as its caller said: written into its staging record by `describe`;
    /// every step after that reads the record.
    pub(super) purpose: super::Purpose,
    /// The release being built, and the directories below it opened so far.
    pub(super) building: std::sync::Mutex<Option<Building>>,
    /// The state the operation commits, where its caller holds it parsed: what a carried
    /// entry must be (else `begin` parses the post-state it is given).
    pub(super) post: Option<&'s crate::state::State>,
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
        if let Some(why) = self.log_view()?.legacy_blocked() {
            return Err(StepError::LogUnwritable {
                why,
                outcome: "nothing was published".to_string(),
            }
            .into());
        }
        root.begin(op, pre, post)?;
        self.record_settings()?;
        if op.releases.as_ref().is_some_and(|r| r.activates.is_some()) {
            // A rollback builds nothing: the release it activates exists.
            return Ok(());
        }
        let id = &op.operation_id;
        let release = Arc::new(self.make_release(op)?);
        failpoint::hit("during_carry_over");
        if let Some(active) = &self.active {
            let skip: foldhash::HashSet<&str> =
                op.actions.iter().map(|a| a.path.as_str()).collect();
            self.check_carry_source(active.dir())?;
            let parsed;
            let state = match self.post {
                Some(s) => s,
                None => match crate::state::StateFile::parse(post) {
                    crate::state::StateFile::Valid(s) => {
                        parsed = s;
                        &parsed
                    }
                    _ => {
                        return Err(Error::Failed(format!(
                            "the post-state of operation {id} does not parse; nothing carried"
                        )));
                    }
                },
            };
            // An adopted directory's files become read-only as they become a release's.
            let records = Records::of(state);
            carry(
                active.dir(),
                &release,
                &skip,
                &records,
                ReleaseStore::adopts(op),
            )?;
        }
        let mut dirs = foldhash::HashMap::default();
        dirs.insert(String::new(), release);
        *self.building.lock().unwrap_or_else(|p| p.into_inner()) = Some(Building {
            op: id.clone(),
            dirs,
        });
        Ok(())
    }

    /// Makes the release directory of `op`, checks that the handle opened is the new,
    /// empty directory of distributor's uid, and keeps its device and inode in the
    /// operation's staging entry before anything goes into it (docs/operations.md,
    /// "Release identity").
    fn make_release(&self, op: &StagedOperation) -> Result<Dir> {
        let root = self.root()?;
        let id = &op.operation_id;
        let release_path = self.settings.dir.join(id);
        if !root.dir().mkdir(id).ctx("create release", &release_path)? {
            return Err(StepError::Exists { path: release_path }.into());
        }
        let release = open_real(root.dir(), id)?;
        let st = release.fstat().ctx("stat", &release_path)?;
        let fresh = st.st_uid == crate::backend::local::records::euid()
            && release.entries().ctx("list", &release_path)?.is_empty();
        if !fresh {
            return Err(super::identity::moved(
                release_path,
                "it is not the empty directory distributor just made".to_string(),
                "nothing was built there",
            ));
        }
        root.record_release(id, Identity::of(&st))?;
        content_dir_mode(&release)?;
        Ok(release)
    }

    /// Before carrying from the active release (`src`, the handle opened when the
    /// destination was locked): its name must still hold that very directory, and the
    /// destination must not be `release_moved` (docs/operations.md, "Release identity").
    fn check_carry_source(&self, src: &Dir) -> Result<()> {
        let Some(name) = self.active_release() else {
            // Adopting a plain directory: `path` is checked by the adoption's exchange.
            return Ok(());
        };
        let path = self.settings.dir.join(name);
        if let Some(why) = self.release_moved() {
            return Err(super::identity::moved(path, why, "nothing was carried"));
        }
        let held = src.identity().ctx("stat", &path)?;
        let want = super::Expected {
            identity: Some(held),
            state: false,
        };
        self.checked_or_moved(name, want, &self.view, "nothing was carried")
            .map(drop)
    }

    /// The directory `rel` of the release being built for `op`, created (with its
    /// ancestors) when missing.
    pub(super) fn release_dir(&self, op: &StagedOperation, rel: &str) -> Result<Arc<Dir>> {
        let mut guard = self.building.lock().unwrap_or_else(|p| p.into_inner());
        let b = match guard.as_mut() {
            Some(b) if b.op == op.operation_id => b,
            _ => {
                // After a restart (recover never builds), or a mix-up of operations.
                return Err(StepError::NotBuilding {
                    dir: self.settings.dir.clone(),
                    op: op.operation_id.clone(),
                }
                .into());
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
}

impl crate::backend::Steps for ReleaseOperation<'_> {
    fn describe(&self, staged: &mut StagedOperation) {
        staged.releases = Some(self.releases_record(&self.purpose));
    }

    fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        self.begin_release(op, pre, post)
    }

    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged> {
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

    fn place(
        &self,
        op: &StagedOperation,
        i: usize,
        _as_staged: Option<Placed>,
    ) -> Result<Option<Placed>> {
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

impl ReleaseStore {
    /// Records the settings in `.distributor/releases.json` when `releases.dir` has none
    /// yet (and leaves `{"moved_to": ".distributor/"}` at the old name, which Part II
    /// binaries refuse).
    pub(super) fn record_settings(&self) -> Result<()> {
        if self.recorded_settings()?.is_some() {
            return Ok(());
        }
        self.write_settings(&log::RecordedSettings::of(&self.path, &self.settings))
    }
}

/// Creates `rel` below the release (and its ancestors), never through a symlink.
fn make_dirs(b: &mut Building, rel: &str, base: &Path) -> Result<Arc<Dir>> {
    if let Some(d) = b.dirs.get(rel) {
        return Ok(Arc::clone(d));
    }
    let (parent, name) = split(rel);
    let p = make_dirs(b, parent, base)?;
    let created = p.mkdir(name).ctx("create directory", base.join(rel))?;
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
    if created {
        content_dir_mode(&d)?;
    }
    b.dirs.insert(rel.to_string(), Arc::clone(&d));
    Ok(d)
}

/// Removes the directory `name` of `parent` and the empty directories below it; anything
/// else there is an error.
fn remove_empty_tree(parent: &Dir, name: &str, path: &Path) -> Result<()> {
    let d = parent.open_dir(name).ctx("open", path)?;
    for (child, kind) in d.entries().ctx("list", path)? {
        if kind == FileType::Directory {
            remove_empty_tree(&d, &child, &path.join(&child))?;
        } else {
            return Err(StepError::InDirectoryReplaced {
                path: path.join(&child),
            }
            .into());
        }
    }
    parent.rmdir(name).ctx("remove emptied directory", path)
}
