//! Rolling an operation back, and the cleanup after its commit point: what this
//! operation placed is removed only where it provably placed it, what it moved aside goes
//! back only where nothing stands, and staging goes last.

use super::*;

impl Bundle {
    /// Rolls an operation back: removes what it placed, restores what it moved aside,
    /// removes directories it created and its staging. Idempotent: running it again after
    /// a crash in the middle reaches the same result. Decides per action from storage, not
    /// from how far the run got: content is removed only where this operation provably
    /// placed it (the path holds exactly the bytes or link text it wrote, and staging no
    /// longer holds them), and moved-aside content goes back exactly where it was, never
    /// over something else.
    pub fn undo(&self, op: &StagedOperation) -> Result<()> {
        self.locked()?;
        op.check(&self.record_path)?;
        let op_rel = format!("{STAGING_DIR}/{}", op.operation_id);
        if !self.dir_exists(&op_rel)? {
            // Stopped while its record was being written: only that is there.
            self.remove_unfinished(&op.operation_id)?;
            return self.remove_staging(&op.operation_id);
        }
        let tree_prefix = format!("{NEW}/{NEW_TREES}/");
        let staged_exists = |rel: String| -> Result<bool> {
            if let Some(below) = rel.strip_prefix(&tree_prefix) {
                // In a new tree: looked up through `new/tree/`'s handle, keeping no handle
                // per directory of the tree.
                let tree_rel = format!("{op_rel}/{NEW}/{NEW_TREES}");
                let Some(tree) = self.sub_opt(&tree_rel)? else {
                    return Ok(false);
                };
                let (d, n) = split(below);
                let at = self.path.join(&tree_rel).join(d);
                return match tree.open_dir(d) {
                    Ok(dir) => Ok(dir.stat_opt(n).ctx("stat", at.join(n))?.is_some()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(dir_error(at, e)),
                };
            }
            let (d, n) = split_owned(&format!("{op_rel}/{rel}"));
            Ok(match self.sub_opt(&d)? {
                Some(dir) => dir
                    .stat_opt(&n)
                    .ctx("stat", self.path.join(&d).join(&n))?
                    .is_some(),
                None => false,
            })
        };
        // 1. Remove new content this operation placed.
        for (i, a) in op.actions.iter().enumerate().rev() {
            if a.kind.deletes() {
                continue;
            }
            let (dir_rel, name) = split(&a.path);
            let path = self.path.join(&a.path);
            let Some(parent) = self.sub_opt(dir_rel)? else {
                continue;
            };
            let Some(st) = parent.stat_opt(name).ctx("stat", &path)? else {
                continue;
            };
            let placed = match a.kind {
                ActionKind::FileCreate => !staged_exists(op.staged_new(i))?,
                ActionKind::LinkCreate => true,
                ActionKind::FileOverwrite | ActionKind::LinkOverwrite => {
                    staged_exists(op.staged_old(i))?
                }
                ActionKind::FileDelete | ActionKind::LinkDelete => false,
            };
            if placed && holds_new_content(&parent, name, &st, a, &path)? {
                failpoint::hit("undo_remove_placed");
                parent.unlink(name).ctx("remove placed", &path)?;
                self.touch(dir_rel);
            }
        }
        // 2. Remove directories it created, deepest first, when empty.
        for d in op.new_dirs.iter().rev() {
            let (parent, name) = split(d);
            if let Ok(Some(p)) = self.sub_opt(parent)
                && p.rmdir(name).is_ok()
            {
                self.forget(d);
                self.touch(parent);
            }
        }
        // 3. Put moved-aside content back, never over something else.
        for (i, a) in op.moves() {
            let (old_rel, old_name) = split_owned(&format!("{op_rel}/{}", op.staged_old(i)));
            let Some(old) = self.sub_opt(&old_rel)? else {
                continue;
            };
            let old_path = self.path.join(&old_rel).join(&old_name);
            let Some(kept) = old.stat_opt(&old_name).ctx("stat", &old_path)? else {
                continue;
            };
            let kind = FileType::from_raw_mode(kept.st_mode);
            if !matches!(kind, FileType::RegularFile | FileType::Symlink) {
                return Err(Error::Unsafe(format!(
                    "{} is {}: moved-aside content never is; not restored",
                    old_path.display(),
                    type_name(kind)
                )));
            }
            let (dir_rel, name) = split(&a.path);
            let to = self.path.join(&a.path);
            let parent = self.make_dirs(dir_rel)?;
            if let Some(st) = parent.stat_opt(name).ctx("stat", &to)?
                && FileType::from_raw_mode(st.st_mode) == FileType::Directory
            {
                // A directory made for new content that step 1 emptied: remove it when empty.
                if parent.rmdir(name).is_ok() {
                    self.forget(&a.path);
                }
            }
            if parent.stat_opt(name).ctx("stat", &to)?.is_some() {
                return Err(Error::Failed(format!(
                    "cannot restore '{}': {} holds content this operation did not place; the original is kept at {}",
                    a.path,
                    to.display(),
                    old_path.display()
                )));
            }
            failpoint::hit("undo_restore");
            failpoint::io("io_rename").ctx("restore", &to)?;
            old.rename_new(&old_name, &parent, name)
                .ctx("restore", &to)?;
            self.touch(dir_rel);
        }
        self.make_staged_durable()?;
        failpoint::hit("undo_before_remove_staging");
        // 4. Drop staging.
        self.remove_staging(&op.operation_id)
    }

    /// Step 8's cleanup: prunes the directories deletions emptied, then drops moved-aside
    /// content and staging, last: an operation whose staging entry is gone is finished.
    pub fn clean_up(&self, op: &StagedOperation) -> Result<()> {
        self.locked()?;
        failpoint::hit("during_cleanup");
        let mut dirs: Vec<&str> = op
            .actions
            .iter()
            .filter(|a| a.kind.deletes())
            .filter_map(|a| a.path.rsplit_once('/').map(|(d, _)| d))
            .collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.len()));
        dirs.dedup();
        failpoint::hit("cleanup_before_prune");
        for d in dirs {
            self.prune_empty_dirs(d);
        }
        self.remove_staging(&op.operation_id)
    }

    /// Removes `rel` and its emptied ancestors up to, not including, the bundle path;
    /// stops at the first that is not an empty real directory.
    fn prune_empty_dirs(&self, rel: &str) {
        let mut rel = rel.to_string();
        while !rel.is_empty() {
            let (parent, name) = split(&rel);
            let Ok(Some(p)) = self.sub_opt(parent) else {
                return;
            };
            failpoint::hit("during_prune");
            match p.rmdir(name) {
                Ok(()) => {}
                // Already gone: a run stopped between two prunes removed it; its parent
                // may still be due.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Not empty (somebody's file), or not a directory: pruning stops here.
                Err(_) => return,
            }
            self.forget(&rel);
            rel = parent.to_string();
        }
    }

    /// Removes an operation's whole staging entry (`.distributor/staging/` itself stays).
    /// The files two levels down (`new/<bucket>/*`, `old/*`) go on several
    /// threads: deleting costs kernel work per inode.
    pub fn remove_staging(&self, op: &str) -> Result<()> {
        self.locked()?;
        let Some(staging) = self.staging_dir(false)? else {
            return Ok(());
        };
        let staging_path = self.path.join(STAGING_DIR);
        if staging
            .stat_opt(op)
            .ctx("stat", staging_path.join(op))?
            .is_some()
        {
            failpoint::io("io_remove_staging").ctx("remove staging", staging_path.join(op))?;
            self.remove_entry_tree(&staging, op)?;
            self.forget(&format!("{STAGING_DIR}/{op}"));
        }
        // `.distributor/staging/` stays, empty, like the lock file: removing it would leave
        // a window where a kill leaves an empty record directory that no record explains.
        Ok(())
    }

    /// Removes an unfinished staging record (`.tmp-<op>`): it never changed anything.
    pub fn remove_unfinished(&self, op: &str) -> Result<()> {
        self.remove_staging(&format!("{TMP_PREFIX}{op}"))
    }

    fn remove_entry_tree(&self, staging: &Dir, name: &str) -> Result<()> {
        let path = self.path.join(STAGING_DIR).join(name);
        let op_dir = match staging.open_dir(name) {
            Ok(d) => d,
            Err(e) if is_redirect(&e) => {
                return Err(Error::Unsafe(format!(
                    "{} is not a directory; not removed",
                    path.display()
                )));
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        let mut files: Vec<(Arc<Dir>, String)> = Vec::new();
        for top in [NEW, OLD] {
            let Ok(t) = op_dir.open_dir(top) else {
                continue;
            };
            let t = Arc::new(t);
            for (name, kind) in t.entries().ctx("list", path.join(top))? {
                if kind == FileType::Directory {
                    let b = Arc::new(t.open_dir(&name).ctx("open", path.join(top).join(&name))?);
                    for (f, kind) in b.entries().ctx("list", path.join(top).join(&name))? {
                        if kind != FileType::Directory {
                            files.push((Arc::clone(&b), f));
                        }
                    }
                } else {
                    files.push((Arc::clone(&t), name));
                }
            }
        }
        crate::parallel::try_map(
            &files,
            || (),
            |(d, f), _| d.unlink(f).ctx("remove staging", d.join(f)),
        )?;
        // The record last: an entry stopped half-way through its removal still holds
        // `plan.json`, so any journal, or none, can finish it.
        for (entry, _) in op_dir.entries().ctx("list", &path)? {
            if entry != PLAN_FILE {
                op_dir
                    .remove_tree(&entry)
                    .ctx("remove staging", path.join(&entry))?;
            }
        }
        staging.remove_tree(name).ctx("remove staging", &path)
    }

    /// Whether the staging entry of `op` holds anything but directories.
    pub fn staging_holds_files(&self, op: &str) -> Result<bool> {
        let rel = format!("{STAGING_DIR}/{op}");
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        list_tree(&self.dir, &rel, &self.path, &mut files, &mut dirs)?;
        Ok(!files.is_empty())
    }
}

/// True when `name` in `parent` holds exactly what action `a` writes: a regular file of
/// its size and sha256, or a symlink with its link text. Old records without size and
/// digest only check the type.
fn holds_new_content(
    parent: &Dir,
    name: &str,
    st: &rustix::fs::Stat,
    a: &StagedAction,
    path: &Path,
) -> Result<bool> {
    let kind = FileType::from_raw_mode(st.st_mode);
    if a.kind.is_link() {
        if kind != FileType::Symlink {
            return Ok(false);
        }
        return Ok(match &a.target {
            Some(t) => {
                parent.read_link(name).ctx("read link", path)? == relative_link_target(&a.path, t)
            }
            None => true,
        });
    }
    if kind != FileType::RegularFile || a.size.is_some_and(|s| s != st.st_size as u64) {
        return Ok(false);
    }
    let Some(want) = &a.sha256 else {
        return Ok(true);
    };
    let (f, _) = match parent.open_file(name) {
        Ok(x) => x,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput || is_redirect(&e) => {
            return Ok(false);
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    Ok(crate::hash::hash_reader(f, path)?.1 == *want)
}
