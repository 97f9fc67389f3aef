//! One bundle path of the local backend, opened: the bundle directory's handle, held from
//! the lock to the cleanup, and every step the executor, `recover`, `status` and `verify`
//! take there (SPEC §13), each made through handles opened from it without following a
//! symlink ([`super::handle`]).
//!
//! The bundle path's handle is opened once, by a no-follow walk from the configured
//! destination path. Directories below it are opened from it (and kept for the rest of the
//! operation), so replacing a directory with a symlink mid-run redirects nothing: what is
//! written lands in the directory that was opened, or the open refuses. Before the commit
//! point the bundle path is walked again and must still name the directory held.
//!
//! Must never: remove an entry it did not check is its own (a moved-aside entry is checked
//! by `fstat` before it moves and after; placed content is removed by undo only where it
//! holds exactly what the operation wrote), replace an entry when placing, or read a
//! staging record that is not a real directory tree its own record describes.

use super::handle::{Dir, Identity, is_redirect, split, type_name};
use super::{Fingerprint, LOCK_FILE, STAGING_DIR};
use crate::backend::Committed;
use crate::error::{Error, IoContext, Result};
use crate::execute::{
    ActionKind, NEW, OLD, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, STATE_TMP_FILE, StagedAction,
    StagedOperation, StagingLayout,
};
use crate::failpoint;
use crate::hash::hex;
use crate::plan::Replaced;
use crate::source::relative_link_target;
use crate::state::STATE_FILE;
use rustix::fs::FileType;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The prefix of a staging record being built (`.distributor-staging/.tmp-<op>/`): it is
/// renamed to `<op>/` once complete, so an entry without it is always whole.
pub const TMP_PREFIX: &str = ".tmp-";

/// A bundle path opened for reading, or locked for an operation.
#[derive(Debug)]
pub struct Bundle {
    base: PathBuf,
    path: PathBuf,
    dir: Dir,
    identity: Identity,
    /// The `flock`ed `.distributor.lock`, when locked.
    lock: Option<File>,
    /// Directories below the bundle path opened this operation, by bundle-relative path.
    dirs: Mutex<foldhash::HashMap<String, Arc<Dir>>>,
    /// Directories that gained or lost entries: fsynced before the commit point.
    touched: Mutex<BTreeSet<String>>,
}

/// What stands at the state file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateBytes {
    /// Nothing.
    Absent,
    /// Something that is not a regular file: why.
    NotAFile(String),
    /// A regular file's bytes.
    Bytes(Vec<u8>),
}

impl StateBytes {
    /// The bytes, when a regular file holds them.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            StateBytes::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// Parsed (SPEC §4).
    pub fn parse(&self) -> crate::state::StateFile {
        use crate::state::StateFile;
        match self {
            StateBytes::Absent => StateFile::Absent,
            StateBytes::NotAFile(why) => StateFile::Invalid(why.clone()),
            StateBytes::Bytes(b) => StateFile::parse(b),
        }
    }
}

/// An entry of `.distributor-staging/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StagingEntry {
    /// `<op>/`: an operation's staging, its record complete.
    Operation(String),
    /// `.tmp-<op>/`: a record never completed; the operation changed nothing.
    Unfinished(String),
    /// Anything else (a file, a symlink, a name distributor never uses): the name and what
    /// it is. Never touched.
    Foreign(String, String),
}

fn unsafe_dir(path: &Path) -> Error {
    Error::Unsafe(format!(
        "{} is not a real directory (a symlink or something else took its place); distributor never goes through it",
        path.display()
    ))
}

/// Maps an error of opening a directory below the bundle path.
fn dir_error(path: PathBuf, e: std::io::Error) -> Error {
    if is_redirect(&e) {
        unsafe_dir(&path)
    } else {
        Error::io("open", path, e)
    }
}

fn lock_timeout(bundle: &Path, timeout: Duration) -> Error {
    Error::Lock(format!(
        "destination {} is locked by another distributor process; gave up after {}s (--lock-timeout)",
        bundle.display(),
        timeout.as_secs_f64()
    ))
}

/// An exclusive `flock` on the bundle directory's own handle, waiting until `timeout` from
/// `start`; released when the handle closes.
fn lock_dir(dir: &Dir, bundle: &Path, start: Instant, timeout: Duration) -> Result<()> {
    loop {
        match rustix::fs::flock(
            dir.fd(),
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(Error::io("lock", bundle, e.into())),
        }
        if start.elapsed() >= timeout {
            return Err(lock_timeout(bundle, timeout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why the walk from `base` to `bundle` stopped, when it did not reach a directory.
enum Walk {
    Reached(Dir),
    Missing,
    Unsafe(String),
}

/// Walks from the configured destination path `base` down to `bundle`, one no-follow open
/// per segment; creates what is missing when `create`.
fn walk(base: &Path, bundle: &Path, create: bool) -> Result<Walk> {
    let describe = |p: &Path| -> String {
        match std::fs::symlink_metadata(p) {
            Ok(md) if md.file_type().is_symlink() => format!(
                "{} is a symlink; distributor never publishes through a symlink",
                p.display()
            ),
            _ => format!("{} is not a directory", p.display()),
        }
    };
    let mut dir = match Dir::open_path(base) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            std::fs::create_dir_all(base).ctx("create", base)?;
            match Dir::open_path(base) {
                Ok(d) => d,
                Err(e) if is_redirect(&e) => return Ok(Walk::Unsafe(describe(base))),
                Err(e) => return Err(Error::io("open", base, e)),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Walk::Missing),
        Err(e) if is_redirect(&e) => return Ok(Walk::Unsafe(describe(base))),
        Err(e) => return Err(Error::io("open", base, e)),
    };
    let rel = bundle.strip_prefix(base).unwrap_or(Path::new(""));
    for seg in rel.components() {
        let seg = seg.as_os_str().to_string_lossy();
        let mut next = dir.open_dir(&seg);
        if create && matches!(&next, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
            dir.mkdir(&seg).ctx("create", dir.join(&seg))?;
            next = dir.open_dir(&seg);
        }
        dir = match next {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Walk::Missing),
            Err(e) if is_redirect(&e) => return Ok(Walk::Unsafe(describe(&dir.join(&seg)))),
            Err(e) => return Err(Error::io("open", dir.join(&seg), e)),
        };
    }
    Ok(Walk::Reached(dir))
}

/// Why the bundle path cannot be used, if it cannot: `base` and everything from it down to
/// `bundle` must be real directories (or not exist yet).
pub fn bundle_unsafe(base: &Path, bundle: &Path) -> Option<String> {
    match walk(base, bundle, false) {
        Ok(Walk::Unsafe(why)) => Some(why),
        _ => None,
    }
}

impl Bundle {
    /// Opens the bundle path for reading; `None` when it does not exist.
    pub fn open(base: &Path, bundle: &Path) -> Result<Option<Bundle>> {
        match walk(base, bundle, false)? {
            Walk::Reached(dir) => Ok(Some(Bundle::new(base, bundle, dir, None)?)),
            Walk::Missing => Ok(None),
            Walk::Unsafe(why) => Err(Error::Unsafe(why)),
        }
    }

    fn new(base: &Path, bundle: &Path, dir: Dir, lock: Option<File>) -> Result<Bundle> {
        let identity = dir.identity().ctx("stat", bundle)?;
        Ok(Bundle {
            base: base.to_path_buf(),
            path: bundle.to_path_buf(),
            dir,
            identity,
            lock,
            dirs: Mutex::default(),
            touched: Mutex::default(),
        })
    }

    /// Takes the destination lock (SPEC §6 step 1, §13): an exclusive `flock` on
    /// `.distributor.lock` in the bundle directory, waiting up to `timeout`, then checks
    /// that the locked file is still the one of that name (someone may have unlinked or
    /// replaced it), else tries again. With `create`, the bundle path and missing parents
    /// are created first (real directories only); without, a missing one is `None`.
    pub fn lock(
        base: &Path,
        bundle: &Path,
        timeout: Duration,
        create: bool,
    ) -> Result<Option<Bundle>> {
        let dir = match walk(base, bundle, create)? {
            Walk::Reached(dir) => dir,
            Walk::Missing => return Ok(None),
            Walk::Unsafe(why) => return Err(Error::Unsafe(why)),
        };
        let lock_path = bundle.join(LOCK_FILE);
        let start = Instant::now();
        loop {
            let file = dir
                .open_or_create(LOCK_FILE)
                .ctx("open lock file", &lock_path)?;
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    let held = rustix::fs::fstat(&file)
                        .map_err(|e| Error::io("stat", &lock_path, e.into()))?;
                    let named = dir.stat_opt(LOCK_FILE).ctx("stat", &lock_path)?;
                    if named.is_some_and(|n| Identity::of(&n) == Identity::of(&held)) {
                        // The bundle directory itself too: a process that holds a lock file
                        // somebody unlinked since still holds the directory, so a new lock
                        // file under the name does not let a second operation in.
                        lock_dir(&dir, bundle, start, timeout)?;
                        return Ok(Some(Bundle::new(base, bundle, dir, Some(file))?));
                    }
                    // Unlinked or replaced while it was being locked: lock the file the
                    // name holds now.
                }
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(Error::io("lock", lock_path, e.into())),
            }
            if start.elapsed() >= timeout {
                return Err(lock_timeout(bundle, timeout));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The bundle path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bundle directory's handle.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The directory `rel` below the bundle path (`""`: the bundle directory), opened once
    /// per operation without following a symlink.
    fn sub(&self, rel: &str) -> Result<Arc<Dir>> {
        self.sub_io(rel)
            .map_err(|e| dir_error(self.dir.join(rel), e))
    }

    fn sub_io(&self, rel: &str) -> std::io::Result<Arc<Dir>> {
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = dirs.get(rel) {
            return Ok(Arc::clone(d));
        }
        let d = Arc::new(self.dir.open_dir(rel)?);
        dirs.insert(rel.to_string(), Arc::clone(&d));
        Ok(d)
    }

    /// [`Bundle::sub`], `None` when it does not exist: missing, or a file on the way (a
    /// symlink on the way is an error: what it stands for is not looked at).
    fn sub_opt(&self, rel: &str) -> Result<Option<Arc<Dir>>> {
        match self.sub_io(rel) {
            Ok(d) => Ok(Some(d)),
            Err(e)
                if matches!(
                    rustix::io::Errno::from_io_error(&e),
                    Some(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR)
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(dir_error(self.dir.join(rel), e)),
        }
    }

    /// Creates the directory `rel` and its missing ancestors (never through a symlink) and
    /// returns its handle.
    fn make_dirs(&self, rel: &str) -> Result<Arc<Dir>> {
        if rel.is_empty() {
            return self.sub("");
        }
        if let Some(d) = self.sub_opt(rel)? {
            return Ok(d);
        }
        let (parent, name) = split(rel);
        let p = self.make_dirs(parent)?;
        if p.mkdir(name).ctx("create directory", self.dir.join(rel))? {
            self.touch(parent);
        }
        self.sub(rel)
    }

    /// Forgets the handles of `rel` and everything below it (it was removed): nothing is
    /// looked up through them, and they need no fsync.
    fn forget(&self, rel: &str) {
        let prefix = format!("{rel}/");
        let gone = |k: &String| k == rel || k.starts_with(&prefix);
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.retain(|k, _| !gone(k));
        let mut touched = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        touched.retain(|k| !gone(k));
    }

    fn touch(&self, rel: &str) {
        let mut t = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        if !t.contains(rel) {
            t.insert(rel.to_string());
        }
    }

    fn locked(&self) -> Result<()> {
        match self.lock {
            Some(_) => Ok(()),
            None => Err(Error::Failed(format!(
                "{}: a write without the destination lock",
                self.path.display()
            ))),
        }
    }

    /// What stands at `.distributor.json`.
    pub fn read_state(&self) -> Result<StateBytes> {
        let path = self.path.join(STATE_FILE);
        match self.dir.stat_opt(STATE_FILE).ctx("stat", &path)? {
            None => Ok(StateBytes::Absent),
            Some(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => Ok(
                StateBytes::NotAFile(format!("{} is not a regular file", path.display())),
            ),
            Some(_) => {
                let (mut f, _) = match self.dir.open_file(STATE_FILE) {
                    Ok(x) => x,
                    // Replaced by something else since the stat.
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                        return Ok(StateBytes::NotAFile(format!(
                            "{} is not a regular file",
                            path.display()
                        )));
                    }
                    Err(e) => return Err(Error::io("read", path, e)),
                };
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).ctx("read", &path)?;
                Ok(StateBytes::Bytes(bytes))
            }
        }
    }

    /// Whether the directory `rel` exists (as a real directory reached without symlinks).
    pub fn dir_exists(&self, rel: &str) -> Result<bool> {
        match self.dir.open_dir(rel) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || is_redirect(&e) => Ok(false),
            Err(e) => Err(Error::io("open", self.dir.join(rel), e)),
        }
    }

    /// The entries of `.distributor-staging/`, sorted by name.
    pub fn staging_entries(&self) -> Result<Vec<StagingEntry>> {
        let path = self.path.join(STAGING_DIR);
        let Some(st) = self.dir.stat_opt(STAGING_DIR).ctx("stat", &path)? else {
            return Ok(Vec::new());
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::Directory {
            return Ok(vec![StagingEntry::Foreign(
                STAGING_DIR.to_string(),
                format!(
                    "{} is {}, not a directory; distributor did not make it",
                    path.display(),
                    type_name(kind)
                ),
            )]);
        }
        let staging = self.sub(STAGING_DIR)?;
        let mut out = Vec::new();
        for (name, kind) in staging.entries().ctx("list", &path)? {
            let op = name.strip_prefix(TMP_PREFIX).unwrap_or(&name);
            let is_op = uuid::Uuid::parse_str(op).is_ok();
            out.push(match (is_op, kind) {
                (true, FileType::Directory) if op.len() < name.len() => {
                    StagingEntry::Unfinished(op.to_string())
                }
                (true, FileType::Directory) => StagingEntry::Operation(name),
                _ => {
                    let why = format!(
                        "{} is {}, not an operation's staging directory; distributor did not make it",
                        path.join(&name).display(),
                        type_name(kind)
                    );
                    StagingEntry::Foreign(name, why)
                }
            });
        }
        out.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
        Ok(out)
    }

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
        let op_dir = self.sub(&rel)?;
        let mut has_plan = false;
        for (name, kind) in op_dir.entries().ctx("list", &op_path)? {
            let want = match name.as_str() {
                NEW | OLD => FileType::Directory,
                PLAN_FILE | PRE_STATE_FILE | POST_STATE_FILE | STATE_TMP_FILE => {
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
            has_plan |= name == PLAN_FILE;
        }
        if !has_plan {
            return Ok(None);
        }
        let plan_path = op_path.join(PLAN_FILE);
        let (mut f, _) = op_dir.open_file(PLAN_FILE).ctx("open", &plan_path)?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).ctx("read", &plan_path)?;
        let record = StagedOperation::parse(&bytes, &plan_path, &self.path, op)?;
        if record.staging_layout == StagingLayout::Flat {
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
            for (bucket, kind) in new.entries().ctx("list", op_path.join(NEW))? {
                let path = op_path.join(NEW).join(&bucket);
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

    /// The staging record first (SPEC §13): builds `.distributor-staging/.tmp-<op>/` with
    /// `plan.json` and the pre- and post-state, fsyncs it, and renames it to `<op>/` before
    /// anything else in the destination changes; then makes the directories staging fills.
    pub fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        self.locked()?;
        let staging_path = self.path.join(STAGING_DIR);
        if self
            .dir
            .mkdir(STAGING_DIR)
            .ctx("create staging", &staging_path)?
        {
            // The staging directory's own entry is durable before the record in it is.
            self.dir.sync().ctx("fsync", &self.path)?;
        }
        let staging = self.sub(STAGING_DIR)?;
        let id = &op.operation_id;
        let tmp = format!("{TMP_PREFIX}{id}");
        if !staging
            .mkdir(&tmp)
            .ctx("create staging", staging_path.join(&tmp))?
        {
            return Err(Error::Failed(format!(
                "{} exists already",
                staging_path.join(&tmp).display()
            )));
        }
        let t = staging
            .open_dir(&tmp)
            .map_err(|e| dir_error(staging_path.join(&tmp), e))?;
        let t_path = staging_path.join(&tmp);
        if let Some(pre) = pre {
            write_synced(&t, &t_path, PRE_STATE_FILE, pre)?;
        }
        write_synced(&t, &t_path, POST_STATE_FILE, post)?;
        write_synced(&t, &t_path, PLAN_FILE, &op.to_json()?)?;
        t.sync().ctx("fsync", &t_path)?;
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
                .mkdir(d)
                .ctx("create staging", staging_path.join(id).join(d))?;
        }
        let new = self.sub(&format!("{op_rel}/{NEW}"))?;
        for b in op.new_buckets() {
            let name = b.trim_start_matches("new/");
            new.mkdir(name)
                .ctx("create staging", staging_path.join(id).join(&b))?;
        }
        Ok(())
    }

    /// Stages the file written by action `i`: copies `source` into `new/`, hashing the
    /// bytes as they are copied (every byte written is a byte hashed, from the same
    /// buffer). The source is opened without blocking and must be a regular file.
    pub fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &Path,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<(u64, String)> {
        let (dir_rel, name) = split_owned(&format!(
            "{STAGING_DIR}/{}/{}",
            op.operation_id,
            op.staged_new(i)
        ));
        let bucket = self.sub(&dir_rel)?;
        let mut input = open_source(source)?;
        let dst = self.path.join(&dir_rel).join(&name);
        let mut output = bucket.create_file(&name).ctx("create", &dst)?;
        let mut h = Sha256::new();
        let mut size = 0u64;
        loop {
            let n = input.read(buf).ctx("read", source)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            failpoint::io("io_stage_write").ctx("write", &dst)?;
            output.write_all(&buf[..n]).ctx("write", &dst)?;
            size += n as u64;
            on_bytes(n as u64);
        }
        Ok((size, hex(&h.finalize())))
    }

    /// Makes everything staged durable before the first rename into the bundle path
    /// (SPEC §13): one `syncfs` of the destination's filesystem.
    pub fn make_staged_durable(&self) -> Result<()> {
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
            return Err(Error::Failed(format!(
                "{} changed after planning (it is {} now); distributor moves aside only the content it planned to",
                path.display(),
                type_name(kind)
            )));
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
            return Err(Error::Failed(format!(
                "{} was replaced while distributor moved it aside; what was moved is kept in staging and put back by the rollback",
                path.display()
            )));
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
                return Err(Error::Failed(format!(
                    "{} appeared in a directory distributor is replacing with a file; only empty directories were removed there",
                    path.join(&child).display()
                )));
            }
        }
        parent.rmdir(name).ctx("remove emptied directory", &path)
    }

    /// Places the file staged for action `i` at its path, which must be free
    /// (`RENAME_NOREPLACE`: a file that appeared there after planning is never replaced),
    /// creating missing directories. Returns its placement fingerprint, taken after the
    /// rename (which changes its ctime).
    pub fn place(&self, op: &StagedOperation, i: usize) -> Result<Fingerprint> {
        self.locked()?;
        let a = &op.actions[i];
        let (dir_rel, name) = split(&a.path);
        let path = self.path.join(&a.path);
        failpoint::hit("during_placement");
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
                std::io::ErrorKind::AlreadyExists => Error::Failed(format!(
                    "{} appeared after planning; distributor does not replace it",
                    path.display()
                )),
                _ => Error::io("rename into place", &path, e),
            })?;
        self.touch(dir_rel);
        let st = parent.stat(name).ctx("stat", &path)?;
        Ok(fingerprint(&st, a.sha256.as_deref().unwrap_or_default()))
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
    pub fn commit_state(&self, op: &StagedOperation, post: &[u8]) -> Result<Committed> {
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
        for rel in touched {
            if let Some(d) = self.sub_opt(&rel)? {
                d.sync().ctx("fsync", self.dir.join(&rel))?;
            }
        }
        self.check_still_named()?;
        let tmp_path = self.path.join(&op_rel).join(STATE_TMP_FILE);
        let _ = op_dir.unlink(STATE_TMP_FILE);
        let mut f = op_dir
            .create_file(STATE_TMP_FILE)
            .ctx("create", &tmp_path)?;
        f.write_all(post).ctx("write", &tmp_path)?;
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
        Ok(Committed::passed())
    }

    /// Fails when the bundle path no longer names the directory this handle holds (it was
    /// replaced mid-run): nothing is committed then.
    fn check_still_named(&self) -> Result<()> {
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
        Ok(())
    }

    /// Rolls an operation back: removes what it placed, restores what it moved aside,
    /// removes directories it created and its staging. Idempotent: running it again after
    /// a crash in the middle reaches the same result. Decides per action from storage, not
    /// from how far the run got: content is removed only where this operation provably
    /// placed it (the path holds exactly the bytes or link text it wrote, and staging no
    /// longer holds them), and moved-aside content goes back exactly where it was, never
    /// over something else.
    pub fn undo(&self, op: &StagedOperation) -> Result<()> {
        self.locked()?;
        op.check(&self.path)?;
        let op_rel = format!("{STAGING_DIR}/{}", op.operation_id);
        if !self.dir_exists(&op_rel)? {
            return self.remove_staging(&op.operation_id);
        }
        let staged_exists = |rel: String| -> Result<bool> {
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
            if p.rmdir(name).is_err() {
                return;
            }
            self.forget(&rel);
            rel = parent.to_string();
        }
    }

    /// Removes an operation's whole staging entry, and `.distributor-staging` when it is
    /// left empty. The files two levels down (`new/<bucket>/*`, `old/*`) go on several
    /// threads: deleting costs kernel work per inode.
    pub fn remove_staging(&self, op: &str) -> Result<()> {
        self.locked()?;
        let Some(staging) = self.sub_opt(STAGING_DIR)? else {
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
        if staging.rmdir_if_empty(STAGING_DIR, &self.dir) {
            self.forget(STAGING_DIR);
        }
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
        staging.remove_tree(name).ctx("remove staging", &path)
    }

    /// Whether the staging entry of `op` holds anything but directories.
    pub fn staging_holds_files(&self, op: &str) -> Result<bool> {
        let rel = format!("{STAGING_DIR}/{op}");
        let (mut files, mut dirs) = (Vec::new(), Vec::new());
        list_tree(&self.dir, &rel, &self.path, &mut files, &mut dirs)?;
        Ok(!files.is_empty())
    }

    /// Every non-directory below the bundle path, bundle-relative, never through a
    /// symlink, sorted.
    pub fn list_files(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        list_tree(&self.dir, "", &self.path, &mut out, &mut Vec::new())?;
        out.sort();
        Ok(out)
    }
}

impl Dir {
    /// Removes `.distributor-staging` (this handle) from `bundle` when it is empty.
    fn rmdir_if_empty(&self, name: &str, bundle: &Dir) -> bool {
        matches!(self.entries(), Ok(e) if e.is_empty()) && bundle.rmdir(name).is_ok()
    }
}

/// Whether an entry of type `kind` is what an action that moves aside `replaces` planned
/// to move (a record without it: a file or a link).
fn fits(replaces: Option<Replaced>, kind: FileType) -> bool {
    match replaces {
        Some(Replaced::File) => kind == FileType::RegularFile,
        Some(Replaced::Link) => kind == FileType::Symlink,
        None => matches!(kind, FileType::RegularFile | FileType::Symlink),
    }
}

fn entry_name(e: &StagingEntry) -> &str {
    match e {
        StagingEntry::Operation(n) | StagingEntry::Unfinished(n) | StagingEntry::Foreign(n, _) => n,
    }
}

fn split_owned(rel: &str) -> (String, String) {
    let (d, n) = split(rel);
    (d.to_string(), n.to_string())
}

/// Every non-directory under `rel` of `dir` into `out`, every directory into `dirs`,
/// bundle-relative, recursively; symlinks not followed.
pub fn list_tree(
    dir: &Dir,
    rel: &str,
    bundle: &Path,
    out: &mut Vec<String>,
    dirs: &mut Vec<String>,
) -> Result<()> {
    let d = if rel.is_empty() {
        dir.try_clone().ctx("open", bundle)?
    } else {
        dir.open_dir(rel)
            .map_err(|e| dir_error(bundle.join(rel), e))?
    };
    for (name, kind) in d.entries().ctx("list", bundle.join(rel))? {
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if kind == FileType::Directory {
            dirs.push(child.clone());
            list_tree(dir, &child, bundle, out, dirs)?;
        } else {
            out.push(child);
        }
    }
    Ok(())
}

/// Opens a source file for reading without blocking; a FIFO, device or anything but a
/// regular file (swapped in after the source was checked) is an invalid source.
pub fn open_source(path: &Path) -> Result<File> {
    match super::handle::open_file_path(path) {
        Ok((f, _)) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput || is_redirect(&e) => {
            Err(Error::Source(format!(
                "{}: {e}; a bundle holds regular files only",
                path.display()
            )))
        }
        Err(e) => Err(Error::io("open", path, e)),
    }
}

fn write_synced(dir: &Dir, dir_path: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir_path.join(name);
    let mut f = dir.create_file(name).ctx("create", &path)?;
    f.write_all(bytes).ctx("write", &path)?;
    dir.sync_file(&f, name).ctx("fsync", &path)
}

/// The placement fingerprint of a file from its `lstat`.
// The field types of `stat` differ between targets.
#[allow(clippy::unnecessary_cast)]
pub fn fingerprint(st: &rustix::fs::Stat, sha256: &str) -> Fingerprint {
    Fingerprint {
        size: st.st_size as u64,
        mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
        ino: st.st_ino as u64,
        ctime_ns: Some(st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64),
        sha256: sha256.to_string(),
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
