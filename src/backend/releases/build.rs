//! Building a release and activating it (SPEC §15): the staging record first, then
//! `<releases.dir>/<op>/` with everything the operation does not change hard-linked from
//! the active release (copied and verified where a link cannot be made), the new files
//! and links, its `.distributor.json`; then one `syncfs`, a symlink to it under a
//! temporary name, and the rename over `path` that is the commit point. The rollback
//! removes a release `path` does not name and no log entry names; the cleanup writes the
//! activation's entry in the destination log (SPEC §18) before the staging entry goes.

use super::ReleaseStore;
use super::log;
use crate::backend::Committed;
use crate::backend::local::records::RECORD_DIR;
use crate::backend::local::{LEGACY_STAGING_DIR, LOCK_FILE};
use crate::backend::types::{Placed, Staged};
use crate::error::{Error, IoContext, Result, StepError};
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
pub(super) struct Building {
    op: String,
    dirs: foldhash::HashMap<String, Arc<Dir>>,
}

/// Mode of every file distributor writes into a release: read-only, so writing through
/// one release cannot change another that shares the file.
const READ_ONLY: u32 = 0o444;

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
        let release_path = self.settings.dir.join(id);
        if !root.dir().mkdir(id).ctx("create release", &release_path)? {
            return Err(StepError::Exists { path: release_path }.into());
        }
        let release = Arc::new(root.dir().open_dir(id).ctx("open", &release_path)?);
        content_dir_mode(&release)?;
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
/// Gives a directory a release made exactly the published directories' mode, 0755
/// (SPEC §17), whatever the umask or a default ACL of `releases.dir` made of it.
fn content_dir_mode(d: &Dir) -> Result<()> {
    crate::backend::local::records::set_mode(
        d.fd(),
        crate::backend::local::records::CONTENT_DIR_MODE,
    )
    .ctx("chmod", d.path())
}

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
        let created = p.mkdir(name).ctx("create directory", p.join(name))?;
        let sub = open_real(&p, name)?;
        if created {
            content_dir_mode(&sub)?;
        }
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
                return Err(StepError::CopyDiffers {
                    to: to.to_path_buf(),
                    from: from.to_path_buf(),
                }
                .into());
            }
            Ok(())
        }
        other => Err(StepError::CannotCarry {
            from: from.to_path_buf(),
            kind: type_name(other),
            error: err,
        }
        .into()),
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
            return Err(StepError::InDirectoryReplaced {
                path: path.join(&child),
            }
            .into());
        }
    }
    parent.rmdir(name).ctx("remove emptied directory", path)
}
