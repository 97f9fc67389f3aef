//! The staging record of the local backend (SPEC §13): written first, whole and
//! atomically (`.distributor/staging/.tmp-<op>/` renamed to `<op>/`), and read back only
//! from a staging entry that is a real directory tree the record describes.

use super::steps::fits;
use super::*;

impl Bundle {
    /// The staging record of operation `op` (its `plan.json`), after checking that its
    /// staging entry is a real directory tree the record describes: only the files
    /// distributor writes there, `new/` and `old/` real directories holding only what the
    /// record's actions stage and move aside, nothing reached through a symlink. `None`
    /// when the entry holds no `plan.json` (staging written before records were made
    /// first and atomically).
    pub fn read_record(&self, op: &str) -> Result<Option<StagedOperation>> {
        let rel = format!("{STAGING_DIR}/{op}");
        let op_path = self.path.join(&rel);
        let refuse = |what: String| {
            Error::Unsafe(format!(
                "{what}; distributor never makes that in a staging entry, so {} is not recovered: inspect it and remove it by hand",
                op_path.display()
            ))
        };
        // Every record in it is distributor's own (SPEC §17), checked on the handles read.
        let staging = self
            .staging_dir(false)?
            .ok_or_else(|| Error::Failed(format!("{} does not exist", op_path.display())))?;
        let op_dir = staging
            .open_record_dir(op)
            .map_err(|e| record_error(e, &op_path, "open"))?;
        let mut has_plan = false;
        for (name, kind) in op_dir.entries().ctx("list", &op_path)? {
            let want = match name.as_str() {
                NEW | OLD => FileType::Directory,
                PLAN_FILE | PRE_STATE_FILE | POST_STATE_FILE | STATE_TMP_FILE | RELEASE_FILE => {
                    FileType::RegularFile
                }
                n if n == format!("{PLAN_FILE}.tmp") => FileType::RegularFile,
                _ => {
                    return Err(refuse(format!(
                        "{} is {}",
                        op_path.join(&name).display(),
                        type_name(kind)
                    )));
                }
            };
            if kind != want {
                return Err(refuse(format!(
                    "{} is {}",
                    op_path.join(&name).display(),
                    type_name(kind)
                )));
            }
            let entry_path = op_path.join(&name);
            let st = op_dir.stat(&name).ctx("stat", &entry_path)?;
            let record_kind = match kind {
                FileType::Directory => records::Kind::Dir,
                _ => records::Kind::File,
            };
            records::check(&st, record_kind, &entry_path)
                .map_err(|u| Error::Untrusted(u.message()))?;
            has_plan |= name == PLAN_FILE;
        }
        if !has_plan {
            return Ok(None);
        }
        let plan_path = op_path.join(PLAN_FILE);
        let (mut f, _) = op_dir
            .open_record_file(PLAN_FILE)
            .map_err(|e| record_error(e, &plan_path, "open"))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).ctx("read", &plan_path)?;
        let record = StagedOperation::parse(&bytes, &plan_path, &self.record_path, op)?;
        if matches!(
            record.staging_layout,
            StagingLayout::Flat | StagingLayout::Trees
        ) {
            self.check_flat_staging(&record, &op_dir, &op_path)
                .map_err(|e| match e {
                    Error::Unsafe(what) => refuse(what),
                    e => e,
                })?;
        }
        Ok(Some(record))
    }

    /// `new/<bucket>/<i>` only for staged file writes, `old/<i>` only for moves aside, and
    /// what `old/` holds is a file or a symlink (moved-aside content never is a directory).
    fn check_flat_staging(
        &self,
        record: &StagedOperation,
        op_dir: &Dir,
        op_path: &Path,
    ) -> Result<()> {
        let index = |name: &str| name.parse::<usize>().ok().filter(|i| i.to_string() == name);
        if let Some(st) = op_dir.stat_opt(OLD).ctx("stat", op_path.join(OLD))? {
            debug_assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::Directory);
            let old = op_dir
                .open_dir(OLD)
                .map_err(|e| dir_error(op_path.join(OLD), e))?;
            for (name, kind) in old.entries().ctx("list", op_path.join(OLD))? {
                let action = index(&name).and_then(|i| record.actions.get(i));
                let fits = action.is_some_and(|a| a.kind.moves_aside() && fits(a.replaces, kind));
                if !fits {
                    return Err(Error::Unsafe(format!(
                        "{} is {}, which the record does not move aside",
                        op_path.join(OLD).join(&name).display(),
                        type_name(kind)
                    )));
                }
            }
        }
        if op_dir
            .stat_opt(NEW)
            .ctx("stat", op_path.join(NEW))?
            .is_some()
        {
            let new = op_dir
                .open_dir(NEW)
                .map_err(|e| dir_error(op_path.join(NEW), e))?;
            let buckets: BTreeSet<String> = record
                .new_buckets()
                .into_iter()
                .map(|b| b.trim_start_matches("new/").to_string())
                .collect();
            let trees = record.new_trees();
            for (bucket, kind) in new.entries().ctx("list", op_path.join(NEW))? {
                let path = op_path.join(NEW).join(&bucket);
                if bucket == NEW_TREES && kind == FileType::Directory && !trees.is_empty() {
                    let tree = new
                        .open_dir(&bucket)
                        .map_err(|e| dir_error(path.clone(), e))?;
                    check_trees(record, &trees, &tree, &path)?;
                    continue;
                }
                if kind != FileType::Directory || !buckets.contains(&bucket) {
                    return Err(Error::Unsafe(format!(
                        "{} is {}, which the record does not stage",
                        path.display(),
                        type_name(kind)
                    )));
                }
                let b = new
                    .open_dir(&bucket)
                    .map_err(|e| dir_error(path.clone(), e))?;
                for (name, kind) in b.entries().ctx("list", &path)? {
                    let staged = index(&name)
                        .and_then(|i| record.actions.get(i).map(|a| (i, a)))
                        .is_some_and(|(i, a)| {
                            a.kind.writes_file()
                                && record.staged_new(i) == format!("{NEW}/{bucket}/{name}")
                        });
                    if !staged || kind != FileType::RegularFile {
                        return Err(Error::Unsafe(format!(
                            "{} is {}, which the record does not stage",
                            path.join(&name).display(),
                            type_name(kind)
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// The staging record first (SPEC §13): builds `.distributor/staging/.tmp-<op>/` with
    /// `plan.json` and the pre- and post-state, fsyncs it, and renames it to `<op>/` before
    /// anything else in the destination changes; then makes the directories staging fills.
    pub fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        self.locked()?;
        if let Some(lock) = &self.lock {
            crate::backend::local::holder::record(
                lock,
                Some(op.operation_id.clone()),
                &op.origin.actor,
            );
        }
        let staging_path = self.path.join(STAGING_DIR);
        let staging = self
            .staging_dir(true)?
            .ok_or_else(|| Error::Failed(format!("{} was not created", staging_path.display())))?;
        let id = &op.operation_id;
        let tmp = format!("{TMP_PREFIX}{id}");
        if staging
            .stat_opt(&tmp)
            .ctx("stat", staging_path.join(&tmp))?
            .is_some()
        {
            return Err(StepError::Exists {
                path: staging_path.join(&tmp),
            }
            .into());
        }
        let t = staging
            .make_record_dir(&tmp)
            .map_err(|e| record_error(e, &staging_path.join(&tmp), "create staging"))?;
        let t_path = staging_path.join(&tmp);
        if let Some(pre) = pre {
            write_new(&t, &t_path, PRE_STATE_FILE, |f| f.write_all(pre))?;
        }
        write_new(&t, &t_path, POST_STATE_FILE, |f| f.write_all(post))?;
        // Written as it is serialized: at a million files it is hundreds of megabytes.
        write_new(&t, &t_path, PLAN_FILE, |f| {
            op.write_json(std::io::BufWriter::with_capacity(1 << 16, f))
        })?;
        // One barrier makes the record's files, its directory and `.distributor/staging`'s
        // own entry durable (three file fsyncs and two directory fsyncs cost one journal
        // commit each).
        self.dir
            .sync_filesystem()
            .ctx("sync filesystem of", &self.path)?;
        failpoint::hit("before_staging_record");
        staging
            .rename_new(&tmp, &staging, id)
            .ctx("rename staging record", staging_path.join(id))?;
        staging.sync().ctx("fsync", &staging_path)?;
        failpoint::hit("after_staging_record");
        let op_rel = format!("{STAGING_DIR}/{id}");
        let op_dir = self.sub(&op_rel)?;
        for d in [NEW, OLD] {
            op_dir
                .make_record_dir(d)
                .map_err(|e| record_error(e, &staging_path.join(id).join(d), "create staging"))?;
        }
        let new = self.sub(&format!("{op_rel}/{NEW}"))?;
        for b in op.new_buckets() {
            let name = b.trim_start_matches("new/");
            new.make_record_dir(name)
                .map_err(|e| record_error(e, &staging_path.join(id).join(&b), "create staging"))?;
        }
        let trees = op.new_trees();
        if !trees.is_empty() {
            let at = staging_path.join(id).join(NEW).join(NEW_TREES);
            let tree = new
                .make_record_dir(NEW_TREES)
                .map_err(|e| record_error(e, &at, "create staging"))?;
            make_trees(tree, &at, &trees)?;
        }
        Ok(())
    }
}

/// What `new/tree/` (`tree`, at `path`) holds is exactly the record's new trees: the
/// directories above and in each, and in them only the files the record stages there,
/// nothing reached through a symlink.
fn check_trees(
    record: &StagedOperation,
    trees: &[(String, Vec<String>)],
    tree: &Dir,
    path: &Path,
) -> Result<()> {
    let mut dirs: BTreeSet<&str> = BTreeSet::new();
    for (root, below) in trees {
        let mut d = root.as_str();
        while dirs.insert(d) {
            match d.rsplit_once('/') {
                Some((parent, _)) => d = parent,
                None => break,
            }
        }
        dirs.extend(below.iter().map(String::as_str));
    }
    let files: BTreeSet<&str> = record
        .file_writes()
        .filter(|(_, a)| record.new_tree_of(&a.path).is_some())
        .map(|(_, a)| a.path.as_str())
        .collect();
    // Directories to look into, by path: opened from `tree` when their turn comes (a
    // handle each held meanwhile could be thousands).
    let mut todo = vec![String::new()];
    while let Some(rel) = todo.pop() {
        let at = path.join(&rel);
        let dir = tree.open_dir(&rel).map_err(|e| dir_error(at.clone(), e))?;
        for (name, kind) in dir.entries().ctx("list", &at)? {
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let fits = match kind {
                FileType::Directory => dirs.contains(child.as_str()),
                FileType::RegularFile => files.contains(child.as_str()),
                _ => false,
            };
            if !fits {
                return Err(Error::Unsafe(format!(
                    "{} is {}, which the record does not stage",
                    at.join(&name).display(),
                    type_name(kind)
                )));
            }
            if kind == FileType::Directory {
                todo.push(child);
            }
        }
    }
    Ok(())
}

/// The directories of the new trees under `new/tree/` (`at`): the ones the bundle has
/// above each tree as records of distributor's own, the tree's own as the directories
/// they become once placed, exactly 0755 (SPEC §17).
fn make_trees(tree: Dir, at: &Path, trees: &[(String, Vec<String>)]) -> Result<()> {
    // Each directory made in its parent, opened again from `tree` (never through a
    // symlink): no handle is held per directory, a bundle may have as many as it likes.
    let parent_of = |d: &str| -> Result<Dir> {
        let parent = d.rsplit_once('/').map_or("", |(p, _)| p);
        tree.open_dir(parent)
            .map_err(|e| dir_error(at.join(parent), e))
    };
    let mut made: BTreeSet<&str> = BTreeSet::new();
    for (root, below) in trees {
        let mut above: Vec<&str> = Vec::new();
        let mut d = root.as_str();
        while let Some((parent, _)) = d.rsplit_once('/') {
            if made.contains(parent) {
                break;
            }
            above.push(parent);
            d = parent;
        }
        for d in above.into_iter().rev() {
            let (_, name) = split(d);
            parent_of(d)?
                .make_record_dir(name)
                .map_err(|e| record_error(e, &at.join(d), "create staging"))?;
            made.insert(d);
        }
        for d in std::iter::once(root).chain(below) {
            let (_, name) = split(d);
            let path = at.join(d);
            let p = parent_of(d)?;
            if !p.mkdir(name).ctx("create directory", &path)? {
                return Err(StepError::Exists { path }.into());
            }
            let dir = p.open_dir(name).ctx("open", &path)?;
            records::set_mode(dir.fd(), records::CONTENT_DIR_MODE).ctx("chmod", &path)?;
            made.insert(d);
        }
    }
    Ok(())
}

impl Bundle {
    /// Keeps, in the staging entry of operation `op`, the device and inode of the release
    /// directory it made ([`RELEASE_FILE`]): a record, written once.
    pub fn record_release(&self, op: &str, identity: Identity) -> Result<()> {
        self.locked()?;
        let rel = format!("{STAGING_DIR}/{op}");
        let dir = self.sub(&rel)?;
        let at = self.path.join(&rel);
        let bytes = serde_json::to_vec(&identity)?;
        // Made durable with the release itself: the `syncfs` before the commit point
        // covers this filesystem (a power cut before it may lose both; `recover` then
        // removes a release directory it has no identity for only when it is empty).
        write_new(&dir, &at, RELEASE_FILE, |f| f.write_all(&bytes))
    }

    /// The device and inode of the release directory operation `op` made, as its staging
    /// entry keeps them; `None` when it keeps none (the operation stopped between making
    /// the directory and recording it, or made none).
    pub fn recorded_release(&self, op: &str) -> Result<Option<Identity>> {
        let rel = format!("{STAGING_DIR}/{op}");
        let at = self.path.join(&rel).join(RELEASE_FILE);
        let Some(staging) = self.staging_dir(false)? else {
            return Ok(None);
        };
        let op_dir = match staging.open_record_dir(op) {
            Ok(d) => d,
            Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(record_error(e, &self.path.join(&rel), "open")),
        };
        let mut f = match op_dir.open_record_file(RELEASE_FILE) {
            Ok((f, _)) => f,
            Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(record_error(e, &at, "open")),
        };
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).ctx("read", &at)?;
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::Unsafe(format!(
                "{} is not a release identity record ({e}); distributor did not write it",
                at.display()
            ))
        })
    }
}

/// Creates `name` in `dir` (it must not exist) and fills it with `write`.
fn write_new(
    dir: &Dir,
    dir_path: &Path,
    name: &str,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<()> {
    let path = dir_path.join(name);
    let mut f = dir.create_record_file(name).ctx("create", &path)?;
    write(&mut f).ctx("write", &path)
}
