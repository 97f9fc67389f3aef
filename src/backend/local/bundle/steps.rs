//! The executor's steps in a locked bundle path (SPEC §6 steps 4-7, §13): stage, make
//! durable, move aside, place, link, and the commit point. Every step goes through
//! handles opened from the bundle path's handle without following a symlink.

use super::*;
use crate::backend::types::{Placed, Staged};

/// Most directories fsynced one by one before the commit point; more take one syncfs.
const DIR_FSYNC_MAX: usize = 8;

impl Bundle {
    /// Stages the file written by action `i`: copies `source` into `new/`, hashing the
    /// bytes as they are copied (every byte written is a byte hashed, from the same
    /// buffer). The source is opened without blocking and must be a regular file; it is
    /// opened in its directory's handle when `source` holds one ([`SourceFile`]). A file
    /// of a new tree is `fstat`ed once written: its fingerprint as staged, which it keeps
    /// when its tree is placed whole ([`Bundle::place`]).
    pub fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged> {
        self.locked()?;
        let path = &op.actions[i].path;
        let in_tree = op.new_tree_of(path).is_some();
        let (dir_rel, name): (String, std::borrow::Cow<'_, str>) = match in_tree {
            // In a new tree: created through `new/tree/`'s handle alone, so that staging
            // holds no handle per directory of the tree.
            true => (
                format!("{STAGING_DIR}/{}/{NEW}/{NEW_TREES}", op.operation_id),
                path.as_str().into(),
            ),
            false => {
                let (d, n) = split_owned(&format!(
                    "{STAGING_DIR}/{}/{}",
                    op.operation_id,
                    op.staged_new(i)
                ));
                (d, n.into())
            }
        };
        let dir = self.sub(&dir_rel)?;
        let (mut input, opened_size) = source.open()?;
        // Where the copy goes, named only in an error (built for each file, it was a
        // noticeable part of staging's own time at 100,000 files).
        let failed = |action: &'static str, e: std::io::Error| {
            Error::io(action, self.path.join(&dir_rel).join(&*name), e)
        };
        // Published content is exactly 0644, never a record's mode (SPEC §17): created so
        // where nothing takes bits of it, else `fchmod`ed.
        let mut output = dir
            .create_file_below(&name, records::CONTENT_FILE_MODE)
            .map_err(|e| failed("create", e))?;
        if !self.staged_exact(op)? {
            records::set_mode(&output, records::CONTENT_FILE_MODE)
                .map_err(|e| failed("chmod", e))?;
        }
        let mut h = Sha256::new();
        let size = crate::hash::read_to_end_of(&mut input, opened_size, buf, |chunk| {
            h.update(chunk);
            failpoint::io("io_stage_write")?;
            output.write_all(chunk)?;
            on_bytes(chunk.len() as u64);
            Ok(())
        })
        .map_err(|e| match e {
            crate::hash::ReadOrSink::Read(e) => Error::io("read", source.path(), e),
            crate::hash::ReadOrSink::Sink(e) => failed("write", e),
        })?;
        // After the last write (which set its mtime and ctime), nothing but placing
        // touches the file: as it is now, it stands in place once its tree is renamed.
        let as_staged = match in_tree {
            true => Some(placed(
                &rustix::fs::fstat(&output).map_err(|e| failed("stat", e.into()))?,
            )),
            false => None,
        };
        Ok(Staged {
            size,
            sha256: crate::hash::ContentHash::from(h),
            as_staged,
        })
    }

    /// Whether files staged for `op` are created with exactly the published mode
    /// ([`records::created_exact`] of its `new/`, below which every one is made), asked
    /// once per operation.
    fn staged_exact(&self, op: &StagedOperation) -> Result<bool> {
        if let Some((id, exact)) = self.staged_exact.get()
            && *id == op.operation_id
        {
            return Ok(*exact);
        }
        let new = self.sub(&format!("{STAGING_DIR}/{}/{NEW}", op.operation_id))?;
        let exact = records::created_exact(new.fd(), records::CONTENT_FILE_MODE);
        let _ = self.staged_exact.set((op.operation_id.clone(), exact));
        Ok(exact)
    }

    /// Makes everything staged durable before the first rename into the bundle path
    /// (SPEC §13): one `syncfs` of the destination's filesystem.
    pub fn make_staged_durable(&self) -> Result<()> {
        self.locked()?;
        failpoint::io("io_syncfs").ctx("sync filesystem of", &self.path)?;
        self.dir
            .sync_filesystem()
            .ctx("sync filesystem of", &self.path)
    }

    /// Moves what action `i` replaces or deletes to `old/<i>`, after checking (`fstat`)
    /// that it is the kind of entry the action recorded; nothing there is nothing to move.
    pub fn move_aside(&self, op: &StagedOperation, i: usize) -> Result<()> {
        self.locked()?;
        let a = &op.actions[i];
        let (dir_rel, name) = split(&a.path);
        let path = self.path.join(&a.path);
        let Some(parent) = self.sub_opt(dir_rel)? else {
            return Ok(());
        };
        let Some(before) = parent.stat_opt(name).ctx("stat", &path)? else {
            return Ok(());
        };
        // What moves is what planning saw there: a file or a link, never a directory or
        // a special file.
        let kind = FileType::from_raw_mode(before.st_mode);
        if !fits(a.replaces, kind) {
            return Err(StepError::ChangedAfterPlanning {
                path,
                now: type_name(kind),
            }
            .into());
        }
        let (old_rel, old_name) = split_owned(&format!(
            "{STAGING_DIR}/{}/{}",
            op.operation_id,
            op.staged_old(i)
        ));
        let old = self.sub(&old_rel)?;
        failpoint::hit("during_move_aside");
        failpoint::io("io_rename").ctx("move aside", &path)?;
        parent
            .rename_new(name, &old, &old_name)
            .ctx("move aside", &path)?;
        self.touch(dir_rel);
        let moved = old
            .stat(&old_name)
            .ctx("stat", self.path.join(&old_rel).join(&old_name))?;
        if Identity::of(&moved) != Identity::of(&before) {
            return Err(StepError::ReplacedWhileMovedAside { path }.into());
        }
        Ok(())
    }

    /// Where a file goes, a directory now holding only emptied directories (its recorded
    /// content was moved aside): removes them, deepest first. Anything else found there
    /// (somebody put it there after planning) stops the removal with an error.
    pub fn remove_emptied_dir(&self, rel: &str) -> Result<()> {
        self.locked()?;
        let (dir_rel, name) = split(rel);
        let Some(parent) = self.sub_opt(dir_rel)? else {
            return Ok(());
        };
        match parent.stat_opt(name).ctx("stat", self.path.join(rel))? {
            Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
            _ => return Ok(()),
        }
        self.remove_empty_tree(&parent, name, rel)?;
        self.forget(rel);
        self.touch(dir_rel);
        Ok(())
    }

    fn remove_empty_tree(&self, parent: &Dir, name: &str, rel: &str) -> Result<()> {
        let path = self.path.join(rel);
        let d = parent
            .open_dir(name)
            .map_err(|e| dir_error(path.clone(), e))?;
        for (child, kind) in d.entries().ctx("list", &path)? {
            if kind == FileType::Directory {
                self.remove_empty_tree(&d, &child, &format!("{rel}/{child}"))?;
            } else {
                return Err(StepError::AppearedWhereFileGoes {
                    path: path.join(&child),
                }
                .into());
            }
        }
        parent.rmdir(name).ctx("remove emptied directory", &path)
    }

    /// Places the file staged for action `i` at its path, which must be free
    /// (`RENAME_NOREPLACE`: a file that appeared there after planning is never replaced),
    /// creating missing directories. Returns its placement fingerprint, taken after the
    /// rename (which changes its ctime).
    pub fn place(
        &self,
        op: &StagedOperation,
        i: usize,
        as_staged: Option<Placed>,
    ) -> Result<Placed> {
        self.locked()?;
        let a = &op.actions[i];
        let (dir_rel, name) = split(&a.path);
        failpoint::hit("during_placement");
        if let Some(tree) = op.new_tree_of(&a.path)
            && self.place_tree(op, tree)?
        {
            // Placed with its tree: not renamed itself, so what it was staged as it is
            // (its fingerprint as staged, or where staging kept none, read now).
            if let Some(p) = as_staged {
                return Ok(p);
            }
            let st = (self.sub(dir_rel)?.stat(name)).ctx("stat", self.path.join(&a.path))?;
            return Ok(placed(&st));
        }
        let path = self.path.join(&a.path);
        let parent = self.make_dirs(dir_rel)?;
        let (staged_rel, staged_name) = split_owned(&format!(
            "{STAGING_DIR}/{}/{}",
            op.operation_id,
            op.staged_new(i)
        ));
        let staged = self.sub(&staged_rel)?;
        failpoint::io("io_rename").ctx("rename into place", &path)?;
        staged
            .rename_new(&staged_name, &parent, name)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    StepError::AppearedAfterPlanning { path: path.clone() }.into()
                }
                _ => Error::io("rename into place", &path, e),
            })?;
        self.touch(dir_rel);
        let st = parent.stat(name).ctx("stat", &path)?;
        Ok(placed(&st))
    }

    /// Places the new tree `tree` of `op` whole, with one rename from `new/tree/<tree>`
    /// that never replaces anything (the first time one of its files is placed; the
    /// answer is kept for the others). False when something stands at the tree's path
    /// already (a hand made it after planning) or the filesystem cannot rename without
    /// replacing: its files are then placed one by one, from where they are staged.
    fn place_tree(&self, op: &StagedOperation, tree: &str) -> Result<bool> {
        {
            // Asked once a file: looked up by the tree's own name, nothing allocated.
            let placed = self.trees.lock().unwrap_or_else(|p| p.into_inner());
            if placed.0 == op.operation_id
                && let Some(&whole) = placed.1.get(tree)
            {
                return Ok(whole);
            }
        }
        let (parent, name) = split(tree);
        let staged_rel = format!("{STAGING_DIR}/{}/{NEW}/{NEW_TREES}", op.operation_id);
        let staged_parent = match parent {
            "" => staged_rel.clone(),
            p => format!("{staged_rel}/{p}"),
        };
        let from = self.sub(&staged_parent)?;
        let to = self.make_dirs(parent)?;
        let path = self.path.join(tree);
        failpoint::io("io_rename").ctx("rename into place", &path)?;
        let whole = match from.rename_dir_new(name, &to, name) {
            Ok(()) => {
                // Its handles now reach into the bundle path: never again by this name.
                self.forget(&format!("{staged_rel}/{tree}"));
                self.touch(parent);
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => false,
            Err(e) => return Err(Error::io("rename into place", &path, e)),
        };
        let mut placed = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        if placed.0 != op.operation_id {
            *placed = (op.operation_id.clone(), Default::default());
        }
        placed.1.insert(tree.to_string(), whole);
        Ok(whole)
    }

    /// Creates the link of action `i` (it must not exist).
    pub fn link(&self, op: &StagedOperation, i: usize) -> Result<()> {
        self.locked()?;
        let a = &op.actions[i];
        let (dir_rel, name) = split(&a.path);
        let path = self.path.join(&a.path);
        failpoint::hit("during_links");
        let parent = self.make_dirs(dir_rel)?;
        let target = relative_link_target(&a.path, a.target.as_deref().unwrap_or_default());
        parent.symlink(&target, name).ctx("create link", &path)?;
        self.touch(dir_rel);
        Ok(())
    }

    /// The commit point (SPEC §6 step 7, §13): makes every directory that gained or lost
    /// entries durable, checks that the bundle path still names the directory locked,
    /// then writes the state to a temp file in staging, fsyncs it, renames it over
    /// `.distributor.json` and fsyncs the bundle directory.
    pub fn commit_state(&self, op: &StagedOperation) -> Result<Committed> {
        self.locked()?;
        let op_rel = format!("{STAGING_DIR}/{}", op.operation_id);
        let op_dir = self.sub(&op_rel)?;
        self.touch(&format!("{op_rel}/{OLD}"));
        let touched: Vec<String> = self
            .touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        // Directories that gained or lost entries: a fsync each where they are few, else
        // one syncfs (each fsync is a journal commit of its own; staged data is durable
        // already, so what a syncfs flushes now is these entries).
        if touched.len() > DIR_FSYNC_MAX {
            self.dir
                .sync_filesystem()
                .ctx("sync filesystem of", &self.path)?;
        } else {
            for rel in touched {
                if let Some(d) = self.sub_opt(&rel)? {
                    d.sync().ctx("fsync", self.dir.join(&rel))?;
                }
            }
        }
        self.check_still_in_place()?;
        let tmp_path = self.path.join(&op_rel).join(STATE_TMP_FILE);
        let _ = op_dir.unlink(STATE_TMP_FILE);
        // A record: the state file is exactly 0600, distributor's (SPEC §17).
        let mut f = op_dir
            .create_record_file(STATE_TMP_FILE)
            .ctx("create", &tmp_path)?;
        self.copy_post_state(op, &mut f, &tmp_path)?;
        failpoint::io("io_state_fsync").ctx("fsync", &tmp_path)?;
        op_dir
            .sync_file(&f, STATE_TMP_FILE)
            .ctx("fsync", &tmp_path)?;
        let dst = self.path.join(STATE_FILE);
        failpoint::io("io_state_rename").ctx("rename state into place", &dst)?;
        op_dir
            .rename_over(STATE_TMP_FILE, &self.dir, STATE_FILE)
            .ctx("rename state into place", &dst)?;
        self.dir.sync().ctx("fsync", &self.path)?;
        // Taken after the rename (which sets the ctime): the identity under which the
        // journal may vouch for these bytes (`BundleStore::state_file_id`).
        let st = rustix::fs::fstat(&f)
            .map_err(std::io::Error::from)
            .ctx("stat", &dst)?;
        Ok(Committed::passed_writing(super::state_file_id(&st)))
    }

    /// Copies operation `op`'s post-state from its staging record into `out` (`out_path`
    /// names it in errors), hashing it on the way: the state written at the commit point
    /// is the staged one, which must still be the planned post-state (the sha256 the record
    /// names). Streamed, so a million-file state is never held in memory; a staged copy
    /// changed since `begin` (by a hand inside the destination) fails the operation
    /// before its commit point.
    pub fn copy_post_state(
        &self,
        op: &StagedOperation,
        out: &mut std::fs::File,
        out_path: &Path,
    ) -> Result<()> {
        let op_rel = format!("{STAGING_DIR}/{}", op.operation_id);
        let staged_path = self.path.join(&op_rel).join(POST_STATE_FILE);
        let (mut staged, _) = self
            .sub(&op_rel)?
            .open_record_file(POST_STATE_FILE)
            .map_err(|e| record_error(e, &staged_path, "open"))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 18];
        loop {
            let n = staged.read(&mut buf).ctx("read", &staged_path)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            out.write_all(&buf[..n]).ctx("write", out_path)?;
        }
        let sha = crate::hash::ContentHash::from(h).hex();
        if sha != op.post_state_sha256 {
            return Err(Error::Failed(format!(
                "{} was changed after it was staged (sha256 {sha}, planned {}): the operation stops before its commit point",
                staged_path.display(),
                op.post_state_sha256
            )));
        }
        Ok(())
    }

    /// Fails when the bundle path no longer names the directory this handle holds, or a
    /// directory below it this operation opened is no longer at its path (it was moved
    /// away or replaced mid-run): nothing is committed then, and the rollback, through the
    /// same handles, takes back what was written into it.
    fn check_still_in_place(&self) -> Result<()> {
        let now = match walk(&self.base, &self.path, false)? {
            Walk::Reached(d) => Some(d.identity().ctx("stat", &self.path)?),
            _ => None,
        };
        if now != Some(self.identity) {
            return Err(Error::Unsafe(format!(
                "{} no longer names the directory distributor locked (it was replaced while the operation ran); nothing was committed",
                self.path.display()
            )));
        }
        let held: Vec<(String, Arc<Dir>)> = (self.dirs.lock().unwrap_or_else(|p| p.into_inner()))
            .iter()
            .filter(|(rel, _)| !rel.is_empty())
            .map(|(rel, d)| (rel.clone(), Arc::clone(d)))
            .collect();
        for (rel, d) in held {
            let was = d.identity().ctx("stat", self.dir.join(&rel))?;
            let is = self.dir.open_dir(&rel).ok().and_then(|n| n.identity().ok());
            if is != Some(was) {
                return Err(Error::Unsafe(format!(
                    "{} was moved or replaced while the operation ran; nothing was committed",
                    self.dir.join(&rel).display()
                )));
            }
        }
        Ok(())
    }
}

/// The placement fingerprint of a file from its `lstat`.
pub fn fingerprint(st: &rustix::fs::Stat, sha256: crate::hash::ContentHash) -> Fingerprint {
    let p = placed(st);
    Fingerprint {
        size: p.size,
        mtime_ns: p.mtime_ns,
        ino: p.ino,
        ctime_ns: p.ctime_ns,
        sha256,
    }
}

/// What a file's `lstat` says of it for a placement fingerprint (the hash is the
/// action's that placed it).
// The field types of `stat` differ between targets.
#[allow(clippy::unnecessary_cast)]
pub(super) fn placed(st: &rustix::fs::Stat) -> Placed {
    Placed {
        size: st.st_size as u64,
        mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
        ino: st.st_ino as u64,
        ctime_ns: Some(st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64),
    }
}

/// Whether an entry of type `kind` is what an action that moves aside `replaces` planned
/// to move (a record without it: a file or a link).
pub(super) fn fits(replaces: Option<Replaced>, kind: FileType) -> bool {
    match replaces {
        Some(Replaced::File) => kind == FileType::RegularFile,
        Some(Replaced::Link) => kind == FileType::Symlink,
        None => matches!(kind, FileType::RegularFile | FileType::Symlink),
    }
}
