//! One bundle path of the local backend, opened: the bundle directory's handle, held from
//! the lock to the cleanup, and every step the executor, `recover`, `status` and `verify`
//! take there (SPEC §13), each made through handles opened from it without following a
//! symlink ([`crate::fs`]).
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

mod record;
mod steps;
mod undo;

pub use steps::fingerprint;

use super::holder::Holder;
use super::records::{self, RECORD_DIR, RecordError};
use super::{LEGACY_STAGING_DIR, LOCK_FILE, STAGING_DIR};
use crate::backend::types::{Fingerprint, Replaced, StagingEntry, StateBytes};
use crate::backend::{Committed, StateFileId};
use crate::error::{Error, IoContext, Result, StepError};
use crate::failpoint;
use crate::fs::{Dir, Identity, is_redirect, split, type_name};
use crate::hash::ContentHash;
use crate::record::{
    ActionKind, NEW, NEW_TREES, OLD, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, RELEASE_FILE,
    STATE_TMP_FILE, StagedAction, StagedOperation, StagingLayout,
};
use crate::source::{SourceFile, relative_link_target};
use crate::state::{STATE_FILE, StateFile};
use rustix::fs::FileType;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The prefix of a staging record being built (`.distributor/staging/.tmp-<op>/`): it is
/// renamed to `<op>/` once complete, so an entry without it is always whole.
pub const TMP_PREFIX: &str = ".tmp-";

/// A bundle path opened for reading, or locked for an operation.
#[derive(Debug)]
pub struct Bundle {
    base: PathBuf,
    path: PathBuf,
    /// The bundle path staging records name: the bundle path itself, or for a releases
    /// destination's `releases.dir` the `path` symlink its operations publish to.
    record_path: PathBuf,
    dir: Dir,
    identity: Identity,
    /// The `flock`ed `.distributor.lock`, when locked.
    lock: Option<File>,
    /// Directories below the bundle path opened this operation, by bundle-relative path.
    dirs: Mutex<foldhash::HashMap<String, Arc<Dir>>>,
    /// Directories that gained or lost entries: fsynced before the commit point.
    touched: Mutex<BTreeSet<String>>,
    /// The operation placing new trees, and its trees placed so far: whole (true), or
    /// file by file because something stood at the tree's path (false).
    trees: Mutex<(String, foldhash::HashMap<String, bool>)>,
    /// Why the state file last opened is not believed (SPEC §17).
    state_untrusted: Mutex<Option<String>>,
    /// The operation whose staged files are created with exactly the published mode, or
    /// need an `fchmod` each (asked once: [`Bundle::stage`]).
    staged_exact: std::sync::OnceLock<(String, bool)>,
    /// Where journals keep this directory's log tail, and what the journal in use knows of
    /// it (docs/operations.md, "The log's continuity").
    cursor: crate::backend::LogCursor,
}

/// A state file up to this size is read whole, then parsed; a larger one is parsed as it
/// is read ([`Bundle::read_state_parsed`]).
const PARSED_IN_MEMORY: u64 = 16 * 1024 * 1024;

/// The buffer a state file is parsed through.
const STATE_READ_BUF: usize = 256 * 1024;

/// Reads a state file from its start by position (each pass of the parser its own
/// offset), at most one byte past the size limit, hashing what it reads. Reaching the end
/// records the sha256 and the count read in `end`; a read error is kept in `failed` (the
/// parser sees it only as a syntax error).
struct StateRead<'f> {
    file: &'f File,
    pos: u64,
    limit: u64,
    sha: Sha256,
    end: &'f std::cell::Cell<Option<(ContentHash, u64)>>,
    failed: &'f std::cell::RefCell<Option<std::io::Error>>,
}

impl Read for StateRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let room = (self.limit + 1 - self.pos.min(self.limit + 1)).min(buf.len() as u64);
        let n = match self.file.read_at(&mut buf[..room as usize], self.pos) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Err(e),
            Err(e) => {
                let kept = std::io::Error::new(e.kind(), e.to_string());
                *self.failed.borrow_mut() = Some(e);
                return Err(kept);
            }
        };
        if n == 0 {
            let sha = std::mem::take(&mut self.sha);
            self.end.set(Some((ContentHash::from(sha), self.pos)));
        } else {
            self.sha.update(&buf[..n]);
            self.pos += n as u64;
        }
        Ok(n)
    }
}

/// The staging directory's name in the record directory.
const STAGING_NAME: &str = "staging";

/// An error of reading a record, as the library's error.
pub(crate) fn record_error(e: RecordError, path: &Path, action: &'static str) -> Error {
    match e {
        RecordError::Untrusted(u) => Error::Untrusted(u.message()),
        RecordError::Io(e) => Error::io(action, path, e),
    }
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

fn lock_timeout(bundle: &Path, timeout: Duration, holder: Option<&Holder>) -> Error {
    Error::Lock(format!(
        "destination {} is locked by another distributor process ({}); gave up after {}s (--lock-timeout)",
        bundle.display(),
        holder.map_or("its holder is not recorded".to_string(), |h| h.describe()),
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
            return Err(lock_timeout(bundle, timeout, None));
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
            Ok(md) if md.is_file() => format!("{} is a file, not a directory", p.display()),
            Ok(_) => format!("{} is not a directory", p.display()),
            // ENOTDIR on the way: the configured path (or the mapped part) lies below a
            // file. Name the file in the way, as for a path that is the file itself.
            Err(_) => match p
                .ancestors()
                .skip(1)
                .find(|a| std::fs::metadata(a).is_ok_and(|m| !m.is_dir()))
            {
                Some(file) => format!(
                    "{} is a file, not a directory: {} cannot be created below it",
                    file.display(),
                    p.display()
                ),
                None => format!("{} is not a directory", p.display()),
            },
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
            record_path: bundle.to_path_buf(),
            dir,
            identity,
            lock,
            dirs: Mutex::default(),
            touched: Mutex::default(),
            trees: Mutex::default(),
            state_untrusted: Mutex::default(),
            staged_exact: std::sync::OnceLock::new(),
            cursor: crate::backend::LogCursor::new(format!("local:{}", bundle.display())),
        })
    }

    /// Where journals keep the tail of the log below this directory.
    pub fn log_cursor(&self) -> &crate::backend::LogCursor {
        &self.cursor
    }

    /// Takes the destination lock (SPEC §6 step 1, §13): an exclusive `flock` on
    /// `.distributor.lock` in the bundle directory, waiting up to `timeout`, then checks
    /// that the locked file is still the one of that name (someone may have unlinked or
    /// replaced it), else tries again. With `create`, the bundle path and missing parents
    /// are created first (real directories only); without, a missing one is `None`.
    pub fn lock(
        base: &Path,
        bundle: &Path,
        how: crate::backend::LockRequest<'_>,
    ) -> Result<Option<Bundle>> {
        let timeout = how.timeout;
        let dir = match walk(base, bundle, how.create)? {
            Walk::Reached(dir) => dir,
            Walk::Missing => return Ok(None),
            Walk::Unsafe(why) => return Err(Error::Unsafe(why)),
        };
        let lock_path = bundle.join(LOCK_FILE);
        let start = Instant::now();
        let mut holder: Option<Holder> = None;
        let mut told = false;
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
                        super::holder::record(&file, None, how.actor);
                        return Ok(Some(Bundle::new(base, bundle, dir, Some(file))?));
                    }
                    // Unlinked or replaced while it was being locked: lock the file the
                    // name holds now.
                }
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                    holder = super::holder::read(&file).or(holder);
                    if !told && let Some(h) = &holder {
                        eprintln!(
                            "waiting for the lock on {}, held by {}",
                            bundle.display(),
                            h.describe()
                        );
                        told = true;
                    }
                }
                Err(e) => return Err(Error::io("lock", lock_path, e.into())),
            }
            if start.elapsed() >= timeout {
                return Err(lock_timeout(bundle, timeout, holder.as_ref()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The bundle path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether another process holds the lock now: a shared `flock` on the bundle
    /// directory, tried without waiting and let go at once (every holder has it
    /// exclusively), and the holder's record from `.distributor.lock`. Writes nothing; a
    /// publisher that tries the lock in that instant tries again 20 ms later.
    pub fn lock_holder(&self) -> Result<Option<String>> {
        match rustix::fs::flock(
            self.dir.fd(),
            rustix::fs::FlockOperation::NonBlockingLockShared,
        ) {
            Ok(()) => {
                let _ = rustix::fs::flock(self.dir.fd(), rustix::fs::FlockOperation::Unlock);
                Ok(None)
            }
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                let holder = match self.dir.open_file(LOCK_FILE) {
                    Ok((file, _)) => super::holder::read(&file),
                    Err(_) => None,
                };
                Ok(Some(holder.map_or_else(
                    || "another distributor process (its holder is not recorded)".to_string(),
                    |h| h.describe(),
                )))
            }
            Err(e) => Err(Error::io("lock", &self.path, e.into())),
        }
    }

    /// A directory opened elsewhere, for reading only (a release of a releases
    /// destination): `path` names it in messages.
    pub fn reading(path: &Path, dir: Dir) -> Result<Bundle> {
        Bundle::new(path, path, dir, None)
    }

    /// The same, its staging records naming `bundle` as their bundle path (a releases
    /// destination's `releases.dir` holds the staging of operations on `path`).
    pub fn recording_for(mut self, bundle: &Path) -> Bundle {
        self.record_path = bundle.to_path_buf();
        self
    }

    /// The directory holding the file staged for action `i` of `op`, and its name there.
    pub fn staged_new(&self, op: &StagedOperation, i: usize) -> Result<(Arc<Dir>, String)> {
        self.locked()?;
        let (dir_rel, name) = split_owned(&format!(
            "{STAGING_DIR}/{}/{}",
            op.operation_id,
            op.staged_new(i)
        ));
        Ok((self.sub(&dir_rel)?, name))
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
        // Below the record directory, from its handle (checked when it was opened), never
        // again by path from the bundle directory.
        let d = match rel
            .strip_prefix(STAGING_DIR)
            .and_then(|r| r.strip_prefix('/'))
            .zip(dirs.get(STAGING_DIR))
        {
            Some((below, staging)) => Arc::new(staging.open_dir(below)?),
            None => Arc::new(self.dir.open_dir(rel)?),
        };
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
        let created = p.mkdir(name).ctx("create directory", self.dir.join(rel))?;
        if created {
            self.touch(parent);
        }
        let d = self.sub(rel)?;
        if created {
            // Published directories are exactly 0755 (SPEC §17).
            records::set_mode(d.fd(), records::CONTENT_DIR_MODE)
                .ctx("chmod", self.dir.join(rel))?;
        }
        Ok(d)
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
            None => Err(StepError::WithoutLock {
                bundle: self.path.clone(),
            }
            .into()),
        }
    }

    /// What stands at `.distributor.json`.
    pub fn read_state(&self) -> Result<StateBytes> {
        match self.open_state()? {
            Ok((f, size, limit)) => self.state_bytes(f, size, limit),
            Err(not_bytes) => Ok(not_bytes),
        }
    }

    /// The bytes of the state file opened as `f` (`size` bytes when stat'ed).
    fn state_bytes(&self, f: File, size: u64, limit: u64) -> Result<StateBytes> {
        // At most one byte past the limit: a file that grew since the stat is refused too,
        // without reading it all. Sized to the file up front (one allocation, not a
        // doubling series).
        let mut bytes = Vec::with_capacity(size as usize + 1);
        f.take(limit + 1)
            .read_to_end(&mut bytes)
            .ctx("read", self.path.join(STATE_FILE))?;
        if bytes.len() as u64 > limit {
            return Ok(self.state_too_large(bytes.len() as u64, limit));
        }
        Ok(StateBytes::Bytes(bytes))
    }

    /// `.distributor.json` parsed as it is read, with the sha256 of the bytes parsed
    /// (`None` unless a regular file was read to its end): its bytes are never held whole
    /// (at a million outputs they are 150 MB, as much again as the parsed records).
    pub fn read_state_parsed(&self, outputs: usize) -> Result<(StateFile, Option<ContentHash>)> {
        let (f, size, limit) = match self.open_state()? {
            Ok(opened) => opened,
            Err(not_bytes) => return Ok((not_bytes.parse(), None)),
        };
        let (parsed, sha) = if size <= PARSED_IN_MEMORY {
            // Parsing from memory is about a third faster, and at this size the bytes are
            // a few megabytes.
            let read = self.state_bytes(f, size, limit)?;
            (read.parse(), read.bytes().map(ContentHash::of))
        } else {
            self.parse_state_file(&f, limit, outputs)?
        };
        Ok(match self.state_untrusted() {
            Some(why) => (StateFile::Untrusted(why, Box::new(parsed)), sha),
            None => (parsed, sha),
        })
    }

    /// [`Bundle::read_state_parsed`] of a state file larger than [`PARSED_IN_MEMORY`],
    /// opened as `f`: parsed as it is read.
    pub(crate) fn parse_state_file(
        &self,
        f: &File,
        limit: u64,
        outputs: usize,
    ) -> Result<(StateFile, Option<ContentHash>)> {
        let end = std::cell::Cell::new(None);
        let failed = std::cell::RefCell::new(None);
        let open = || {
            let read = StateRead {
                file: f,
                pos: 0,
                limit,
                sha: Sha256::new(),
                end: &end,
                failed: &failed,
            };
            std::io::BufReader::with_capacity(STATE_READ_BUF, read)
        };
        let parsed = StateFile::parse_from(open, outputs);
        if let Some(e) = failed.into_inner() {
            return Err(Error::io("read", self.path.join(STATE_FILE), e));
        }
        match end.get() {
            Some((_, read)) if read > limit => {
                Ok((self.state_too_large(read, limit).parse(), None))
            }
            Some((sha, _)) => Ok((parsed, Some(sha))),
            None => Ok((parsed, None)),
        }
    }

    /// The sha256 of `.distributor.json`'s bytes, read through without holding them;
    /// `None` when no regular file within the size limit holds them.
    pub fn state_sha256(&self) -> Result<Option<ContentHash>> {
        let (f, _, limit) = match self.open_state()? {
            Ok(opened) => opened,
            Err(_) => return Ok(None),
        };
        let path = self.path.join(STATE_FILE);
        let (read, sha) = crate::hash::hash_reader(f.take(limit + 1), &path)?;
        Ok((read <= limit).then_some(sha))
    }

    /// The identity of `.distributor.json` (one `lstat` in the bundle directory's handle),
    /// when it is a regular file distributor believes (SPEC §17: its uid, mode 0600, one
    /// link).
    pub fn state_file_id(&self) -> Result<Option<StateFileId>> {
        let path = self.path.join(STATE_FILE);
        Ok(match self.dir.stat_opt(STATE_FILE).ctx("stat", &path)? {
            Some(st) if records::check(&st, records::Kind::File, &path).is_ok() => {
                Some(state_file_id(&st))
            }
            _ => None,
        })
    }

    /// `.distributor.json` opened for reading, with its size and the size limit; or what
    /// stands there instead (nothing, or why it cannot be state). Whether distributor
    /// believes it (SPEC §17: its uid, mode 0600, one link, on the descriptor opened) is
    /// kept for [`Bundle::read_state_parsed`].
    fn open_state(&self) -> Result<std::result::Result<(File, u64, u64), StateBytes>> {
        let path = self.path.join(STATE_FILE);
        let limit = crate::limits::state_bytes()?;
        let not_a_file =
            || StateBytes::Unusable(format!("{} is not a regular file", path.display()));
        let mut untrusted = self
            .state_untrusted
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *untrusted = None;
        match self.dir.stat_opt(STATE_FILE).ctx("stat", &path)? {
            None => Ok(Err(StateBytes::Absent)),
            Some(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
                Ok(Err(not_a_file()))
            }
            Some(st) if st.st_size as u64 > limit => {
                Ok(Err(self.state_too_large(st.st_size as u64, limit)))
            }
            Some(_) => match self.dir.open_file(STATE_FILE) {
                Ok((f, st)) => {
                    if let Err(u) = records::check(&st, records::Kind::File, &path) {
                        *untrusted = Some(format!(
                            "{} (a state file an earlier version wrote is believed only through the journal that committed it)",
                            u.message()
                        ));
                    }
                    Ok(Ok((f, st.st_size as u64, limit)))
                }
                // Replaced by something else since the stat.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(Err(not_a_file())),
                Err(e) => Err(Error::io("read", path, e)),
            },
        }
    }

    /// Why the state file last opened is not believed (SPEC §17), if it is not.
    pub fn state_untrusted(&self) -> Option<String> {
        self.state_untrusted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn state_too_large(&self, size: u64, limit: u64) -> StateBytes {
        StateBytes::Unusable(crate::limits::over(
            &self.path.join(STATE_FILE).display().to_string(),
            size,
            limit,
            crate::limits::STATE_VAR,
        ))
    }

    /// Whether the directory `rel` exists (as a real directory reached without symlinks).
    pub fn dir_exists(&self, rel: &str) -> Result<bool> {
        match self.dir.open_dir(rel) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || is_redirect(&e) => Ok(false),
            Err(e) => Err(Error::io("open", self.dir.join(rel), e)),
        }
    }

    /// `.distributor/staging/`, checked to be distributor's own record directories (and
    /// created, with `create`), its handle kept for the rest of the operation: every
    /// staging entry is opened from it. `None` when it does not exist (and `create` is
    /// off).
    pub(crate) fn staging_dir(&self, create: bool) -> Result<Option<Arc<Dir>>> {
        if let Some(d) = self
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(STAGING_DIR)
        {
            return Ok(Some(Arc::clone(d)));
        }
        let rec_path = self.path.join(RECORD_DIR);
        let opened = |parent: &Dir, name: &str, path: &Path| -> Result<Option<Dir>> {
            let r = if create {
                parent.make_record_dir(name)
            } else {
                parent.open_record_dir(name)
            };
            match r {
                Ok(d) => Ok(Some(d)),
                Err(RecordError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && !create => {
                    Ok(None)
                }
                Err(e) => Err(record_error(e, path, "open")),
            }
        };
        let Some(rec) = opened(&self.dir, RECORD_DIR, &rec_path)? else {
            return Ok(None);
        };
        if create {
            self.touch("");
        }
        let Some(staging) = opened(&rec, STAGING_NAME, &self.path.join(STAGING_DIR))? else {
            return Ok(None);
        };
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        dirs.insert(RECORD_DIR.to_string(), Arc::new(rec));
        let staging = Arc::new(staging);
        dirs.insert(STAGING_DIR.to_string(), Arc::clone(&staging));
        Ok(Some(staging))
    }

    /// Device and inode of `.distributor/` (SPEC §17), made first (with `staging/`) when
    /// `create`; `None` when there is none. Read by `lstat`, without following a symlink:
    /// a symlink or another directory put in its place has another identity.
    pub fn record_dir(&self, create: bool) -> Result<Option<crate::record::RecordDir>> {
        if create {
            self.locked()?;
            self.staging_dir(true)?;
        }
        let path = self.path.join(RECORD_DIR);
        Ok(self.dir.stat_opt(RECORD_DIR).ctx("stat", &path)?.map(|st| {
            let id = Identity::of(&st);
            crate::record::RecordDir {
                dev: id.dev,
                ino: id.ino,
            }
        }))
    }

    /// The entries of `.distributor/staging/` (and of a version before SPEC §17's
    /// `.distributor-staging/`), sorted by name. A record directory distributor did not
    /// make is one [`StagingEntry::Untrusted`] entry.
    pub fn staging_entries(&self) -> Result<Vec<StagingEntry>> {
        let mut out = Vec::new();
        match self.staging_dir(false) {
            Ok(Some(staging)) => {
                let path = self.path.join(STAGING_DIR);
                for (name, kind) in staging.entries().ctx("list", &path)? {
                    let op = name.strip_prefix(TMP_PREFIX).unwrap_or(&name);
                    let is_op = uuid::Uuid::parse_str(op).is_ok();
                    let entry_path = path.join(&name);
                    out.push(match (is_op, kind) {
                        (true, FileType::Directory) => {
                            let Some(checked) =
                                self.check_staging_entry(&staging, &name, &entry_path)?
                            else {
                                // Finished and removed while it was looked at.
                                continue;
                            };
                            match checked {
                                Err(u) => StagingEntry::Untrusted(
                                    entry_path.display().to_string(),
                                    u.message(),
                                ),
                                Ok(()) if op.len() < name.len() => {
                                    StagingEntry::Unfinished(op.to_string())
                                }
                                Ok(()) => StagingEntry::Operation(name),
                            }
                        }
                        _ => {
                            let why = format!(
                                "{} is {}, not an operation's staging directory; distributor did not make it",
                                entry_path.display(),
                                type_name(kind)
                            );
                            StagingEntry::Foreign(name, why)
                        }
                    });
                }
            }
            Ok(None) => {}
            Err(Error::Untrusted(why)) => {
                out.push(StagingEntry::Untrusted(
                    self.path.join(RECORD_DIR).display().to_string(),
                    why,
                ));
            }
            Err(e) => return Err(e),
        }
        out.extend(self.legacy_staging_entries()?);
        out.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
        Ok(out)
    }

    /// Checks the staging entry `name` of `staging` and the records directly in it (the
    /// record files and `new/`, `old/`) to be distributor's own (SPEC §17). `None` when
    /// it vanished meanwhile: a look without the lock races the operation that owns it,
    /// which removes its entry when it finishes.
    fn check_staging_entry(
        &self,
        staging: &Dir,
        name: &str,
        path: &Path,
    ) -> Result<Option<std::result::Result<(), records::Untrusted>>> {
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        let dir = match staging.open_record_dir(name) {
            Ok(d) => d,
            Err(RecordError::Untrusted(u)) => return Ok(Some(Err(u))),
            Err(RecordError::Io(e)) if gone(&e) => return Ok(None),
            Err(RecordError::Io(e)) => return Err(dir_error(path.to_path_buf(), e)),
        };
        let entries = match dir.entries() {
            Ok(x) => x,
            Err(e) if gone(&e) => return Ok(None),
            Err(e) => return Err(Error::io("list", path, e)),
        };
        for (entry, kind) in entries {
            let kind = match kind {
                FileType::Directory => records::Kind::Dir,
                FileType::RegularFile => records::Kind::File,
                // Anything else is refused when the record is read, with what it is.
                _ => continue,
            };
            let p = path.join(&entry);
            let st = match dir.stat(&entry) {
                Ok(st) => st,
                // Removed by its operation meanwhile (the record goes last).
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(Error::io("stat", &p, e)),
            };
            if let Err(u) = records::check(&st, kind, &p) {
                return Ok(Some(Err(u)));
            }
        }
        Ok(Some(Ok(())))
    }

    /// The entries of `.distributor-staging/`, where a version before SPEC §17 kept
    /// staging.
    fn legacy_staging_entries(&self) -> Result<Vec<StagingEntry>> {
        let path = self.path.join(LEGACY_STAGING_DIR);
        let Some(st) = self.dir.stat_opt(LEGACY_STAGING_DIR).ctx("stat", &path)? else {
            return Ok(Vec::new());
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::Directory {
            return Ok(vec![StagingEntry::Foreign(
                LEGACY_STAGING_DIR.to_string(),
                format!(
                    "{} is {}, not a directory; distributor did not make it",
                    path.display(),
                    type_name(kind)
                ),
            )]);
        }
        let staging = self.sub(LEGACY_STAGING_DIR)?;
        let mut out = Vec::new();
        for (name, kind) in staging.entries().ctx("list", &path)? {
            let op = name.strip_prefix(TMP_PREFIX).unwrap_or(&name);
            let is_op = uuid::Uuid::parse_str(op).is_ok();
            out.push(match (is_op, kind) {
                (true, FileType::Directory) if op.len() == name.len() => {
                    StagingEntry::Legacy(name)
                }
                _ => StagingEntry::Foreign(
                    format!("{LEGACY_STAGING_DIR}/{name}"),
                    format!(
                        "{} is {}, not an operation's staging directory that distributor can recover; inspect it and remove it by hand",
                        path.join(&name).display(),
                        type_name(kind)
                    ),
                ),
            });
        }
        Ok(out)
    }

    /// Moves the staging entry of `op` that a version before SPEC §17 wrote
    /// (`.distributor-staging/<op>/`) into `.distributor/staging/`, making its record
    /// files and directories record modes, so the operation is recovered as any other.
    /// Only for an operation the journal in use records (the caller's check), and only
    /// when every record in it is owned by distributor's uid with one link; else
    /// [`Error::Untrusted`], and nothing is moved.
    pub fn adopt_legacy_staging(&self, op: &str) -> Result<()> {
        self.locked()?;
        let legacy = self.sub(LEGACY_STAGING_DIR)?;
        let op_path = self.path.join(LEGACY_STAGING_DIR).join(op);
        let op_dir = legacy
            .open_dir(op)
            .map_err(|e| dir_error(op_path.clone(), e))?;
        let me = records::euid();
        let mine = |st: &rustix::fs::Stat, path: &Path| -> Result<()> {
            let dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            #[allow(clippy::unnecessary_cast)]
            if st.st_uid != me || (!dir && st.st_nlink as u64 != 1) {
                return Err(Error::Untrusted(
                    records::Untrusted {
                        path: path.to_path_buf(),
                        uid: st.st_uid,
                        why: format!(
                            "a staging record of an earlier version, owned by uid {} with {} links (distributor runs as uid {me})",
                            st.st_uid, st.st_nlink
                        ),
                    }
                    .message(),
                ));
            }
            Ok(())
        };
        mine(
            &rustix::fs::fstat(op_dir.fd())
                .map_err(std::io::Error::from)
                .ctx("stat", &op_path)?,
            &op_path,
        )?;
        let mut fixes: Vec<(Dir, Option<String>, u32)> = Vec::new();
        for (name, kind) in op_dir.entries().ctx("list", &op_path)? {
            let path = op_path.join(&name);
            match kind {
                FileType::RegularFile => {
                    mine(&op_dir.stat(&name).ctx("stat", &path)?, &path)?;
                    fixes.push((
                        op_dir.try_clone().ctx("open", &op_path)?,
                        Some(name),
                        records::FILE_MODE,
                    ));
                }
                FileType::Directory if name == NEW || name == OLD => {
                    let d = op_dir
                        .open_dir(&name)
                        .map_err(|e| dir_error(path.clone(), e))?;
                    mine(
                        &rustix::fs::fstat(d.fd())
                            .map_err(std::io::Error::from)
                            .ctx("stat", &path)?,
                        &path,
                    )?;
                    if name == NEW {
                        for (b, k) in d.entries().ctx("list", &path)? {
                            if k == FileType::Directory {
                                let bd = d.open_dir(&b).map_err(|e| dir_error(path.join(&b), e))?;
                                fixes.push((bd, None, records::DIR_MODE));
                            }
                        }
                    }
                    fixes.push((d, None, records::DIR_MODE));
                }
                _ => {
                    return Err(Error::Unsafe(format!(
                        "{} is {}; distributor never makes that in a staging entry, so it is not recovered: inspect it and remove it by hand",
                        path.display(),
                        type_name(kind)
                    )));
                }
            }
        }
        for (d, name, mode) in fixes {
            let m = rustix::fs::Mode::from_raw_mode(mode);
            match name {
                Some(n) => {
                    let fd = rustix::fs::openat(
                        d.fd(),
                        n.as_str(),
                        rustix::fs::OFlags::RDONLY
                            | rustix::fs::OFlags::NOFOLLOW
                            | rustix::fs::OFlags::NONBLOCK
                            | rustix::fs::OFlags::CLOEXEC,
                        rustix::fs::Mode::empty(),
                    )
                    .map_err(std::io::Error::from)
                    .ctx("open", d.join(&n))?;
                    rustix::fs::fchmod(&fd, m)
                        .map_err(std::io::Error::from)
                        .ctx("chmod", d.join(&n))?;
                }
                None => rustix::fs::fchmod(d.fd(), m)
                    .map_err(std::io::Error::from)
                    .ctx("chmod", d.path())?,
            }
        }
        rustix::fs::fchmod(
            op_dir.fd(),
            rustix::fs::Mode::from_raw_mode(records::DIR_MODE),
        )
        .map_err(std::io::Error::from)
        .ctx("chmod", &op_path)?;
        let staging = self.staging_dir(true)?.expect("created");
        legacy
            .rename_new(op, &staging, op)
            .ctx("move staging record", self.path.join(STAGING_DIR).join(op))?;
        staging.sync().ctx("fsync", self.path.join(STAGING_DIR))?;
        self.forget(LEGACY_STAGING_DIR);
        if legacy.rmdir_if_empty(LEGACY_STAGING_DIR, &self.dir) {
            let _ = self.dir.sync();
        }
        Ok(())
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

fn entry_name(e: &StagingEntry) -> &str {
    match e {
        StagingEntry::Operation(n)
        | StagingEntry::Unfinished(n)
        | StagingEntry::Foreign(n, _)
        | StagingEntry::Untrusted(n, _)
        | StagingEntry::Legacy(n) => n,
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

/// The [`StateFileId`] `st` describes.
// The field types of `stat` differ between targets.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn state_file_id(st: &rustix::fs::Stat) -> StateFileId {
    StateFileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        size: st.st_size as u64,
        mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
        ctime_ns: st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64,
    }
}
