//! Local filesystem backend: probing a bundle path for the planner, the destination lock,
//! and the few write primitives the executor uses (stage, move aside, place, link, write
//! state atomically, prune emptied directories).
//!
//! Safety rules enforced here, not by callers: paths are bundle-relative safe paths
//! (SPEC §3.2); every ancestor between the bundle path and a touched path must be a real
//! directory (never a symlink); nothing above or beside the bundle path is removed.

pub mod handle;

use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::hash::{hash_file, hex};
use crate::plan::{Entry, Storage};
use crate::state::{STATE_FILE, StateFile};
use crate::tree::{Meta, Tree};
use rustix::fs::FileType;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Name of the lock file at the bundle root.
pub const LOCK_FILE: &str = ".distributor.lock";
/// Name of the staging directory at the bundle root.
pub const STAGING_DIR: &str = ".distributor-staging";

/// The newest placement fingerprint of each of some paths, read back from the journal to
/// prove their content without rehashing: filled by `Journal::fingerprints`, newest
/// placement first, and asked with [`Fingerprints::vouching`]. Paths and hashes are
/// borrowed from the manifest being published, so reading thousands of entries allocates
/// nothing per entry. Slots sit in the order the paths were given (the manifest's), the
/// order placement sets hold them in and the probe asks for them in: a path is found
/// right after the one found last, without a map ([`crate::ordered::InOrder`]).
#[derive(Debug, Default)]
pub struct Fingerprints<'a> {
    /// Wanted paths and the hash each is wanted for.
    wanted: Vec<(&'a str, &'a str)>,
    slots: Vec<Slot>,
    /// Finds a path in `wanted`.
    order: crate::ordered::InOrder,
    open: usize,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    /// No placement offered yet.
    Wanted,
    /// The newest placement, which recorded the wanted hash.
    Found(Placed),
    /// The newest placement recorded another hash: it vouches for nothing wanted (an
    /// older one never does: the file it describes was replaced since).
    Other,
}

/// Size, mtime and inode recorded when a file was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Size.
    pub size: u64,
    /// mtime in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Inode number.
    pub ino: u64,
}

impl Placed {
    /// True when what a [`Tree`] lookup found still has the size, mtime and inode
    /// recorded here.
    pub fn matches_meta(&self, md: &Meta) -> bool {
        self.size == md.size && self.mtime_ns == md.mtime_ns && self.ino == md.ino
    }
}

impl<'a> Fingerprints<'a> {
    /// Wants the newest placement of each path, to prove it holds the given sha256.
    pub fn wanting(paths: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let wanted: Vec<(&'a str, &'a str)> = paths.into_iter().collect();
        Fingerprints {
            slots: vec![Slot::Wanted; wanted.len()],
            open: wanted.len(),
            wanted,
            order: Default::default(),
        }
    }

    /// How many wanted paths no placement was offered for yet.
    pub fn open(&self) -> usize {
        self.open
    }

    /// The slot of `path`.
    fn index(&self, path: &str) -> Option<usize> {
        (self.order).find(self.wanted.len(), |i| self.wanted[i].0, path)
    }

    /// Offers a placement of `path` that recorded `sha256`; placements must come newest
    /// first: the first one offered for a wanted path decides.
    pub fn offer(&mut self, path: &str, sha256: &str, placed: Placed) {
        let Some(i) = self.index(path) else {
            return;
        };
        if let Slot::Wanted = self.slots[i] {
            self.slots[i] = if self.wanted[i].1 == sha256 {
                Slot::Found(placed)
            } else {
                Slot::Other
            };
            self.open -= 1;
        }
    }

    /// The newest placement of `path`, when it recorded `sha256`.
    pub fn vouching(&self, path: &str, sha256: &str) -> Option<&Placed> {
        let i = self.index(path)?;
        match &self.slots[i] {
            Slot::Found(placed) if self.wanted[i].1 == sha256 => Some(placed),
            _ => None,
        }
    }
}

/// What distributor recorded when it placed a file: proves content without rehashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Size.
    pub size: u64,
    /// mtime in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// Content hash it had when placed.
    pub sha256: String,
}

/// Size, mtime and inode of a placed file.
pub fn fingerprint_of(md: &fs::Metadata, sha256: &str) -> Fingerprint {
    Fingerprint {
        size: md.len(),
        mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
        ino: md.ino(),
        sha256: sha256.to_string(),
    }
}

/// Reads the state file at the bundle root, never through a symlink.
pub fn read_state(bundle: &Path) -> Result<StateFile> {
    let path = bundle.join(STATE_FILE);
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StateFile::Absent),
        Err(e) => Err(Error::io("stat", path, e)),
        Ok(md) if !md.is_file() => Ok(StateFile::Invalid(format!(
            "{} is not a regular file",
            path.display()
        ))),
        Ok(_) => Ok(StateFile::parse(&fs::read(&path).ctx("read", &path)?)),
    }
}

/// Raw bytes of the state file, if it is a regular file.
pub fn read_state_bytes(bundle: &Path) -> Result<Option<Vec<u8>>> {
    let path = bundle.join(STATE_FILE);
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat", path, e)),
        Ok(md) if !md.is_file() => Ok(None),
        Ok(_) => Ok(Some(fs::read(&path).ctx("read", &path)?)),
    }
}

/// Why the bundle path cannot be used, if it cannot: walks from the configured
/// destination `base` down to `bundle`; `base` itself and everything below must be real
/// directories (or not exist yet).
pub fn bundle_unsafe(base: &Path, bundle: &Path) -> Option<String> {
    let rel = bundle.strip_prefix(base).ok()?;
    let mut cur = base.to_path_buf();
    let mut steps = vec![cur.clone()];
    for c in rel.components() {
        cur.push(c);
        steps.push(cur.clone());
    }
    for p in steps {
        match fs::symlink_metadata(&p) {
            Err(_) => return None,
            Ok(md) if md.file_type().is_symlink() => {
                return Some(format!(
                    "{} is a symlink; distributor never publishes through a symlink",
                    p.display()
                ));
            }
            Ok(md) if !md.is_dir() => return Some(format!("{} is not a directory", p.display())),
            Ok(_) => {}
        }
    }
    None
}

/// What the probe is to prove of a file: the hash it should hold and, when the journal has
/// one that recorded that hash, the fingerprint of its newest placement.
#[derive(Debug, Clone, Copy)]
pub struct Proof<'a> {
    /// The content hash to prove.
    pub sha256: &'a str,
    /// Proves it without hashing while the file still matches it.
    pub placed: Option<Placed>,
}

/// Probes the bundle path for the planner: every path in `paths` and their ancestors.
/// A path given with a [`Proof`] gets its content proven when it is a file, by the
/// placement fingerprint when it still matches, or else by hashing it.
pub fn probe<'a>(
    base: &Path,
    bundle: &Path,
    paths: &[(&'a str, Option<Proof<'a>>)],
    dirs_wanted: &foldhash::HashSet<&str>,
) -> Result<Storage<'a>> {
    if let Some(reason) = bundle_unsafe(base, bundle) {
        return Ok(Storage::new(Some(reason), Default::default(), Vec::new()));
    }
    let mut tree = match Tree::open(bundle) {
        Ok(tree) => tree,
        // Nothing there yet: every path is missing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Storage::default()),
        Err(e) => return Err(Error::io("open", bundle, e)),
    };
    let mut dirs: foldhash::HashMap<&str, Entry> = foldhash::HashMap::default();
    // Directories on the way first, parents before children, each opened from its parent
    // without following a symlink: a path is never looked up through a symlink or a file.
    let reachable = |entries: &foldhash::HashMap<&str, Entry>, rel: &str| match rel.rsplit_once('/')
    {
        Some((parent, _)) => matches!(entries.get(parent), Some(Entry::Dir { .. })),
        None => true,
    };
    for d in crate::tree::ancestors(paths.iter().map(|(p, _)| *p)) {
        if !reachable(&dirs, d) {
            continue;
        }
        let entry = if tree.open_dir(d).ctx("open", bundle.join(d))? {
            list_dir(bundle, d, dirs_wanted.contains(d))?
        } else {
            // Missing, or something else than a real directory: what, exactly. (Should it
            // have become a directory in between, it was not opened and what is below it
            // reads as missing: a writing plan, made again under the lock.)
            let no_list = foldhash::HashSet::default();
            match probe_one(&tree, bundle, d, None, &no_list)? {
                // A file where a directory is wanted (rare): its content proven too if it
                // was asked for.
                Entry::File { .. } => {
                    let confirm = paths.iter().find(|(p, _)| *p == d).and_then(|(_, c)| *c);
                    probe_one(&tree, bundle, d, confirm, &no_list)?
                }
                entry => entry,
            }
        };
        dirs.insert(d, entry);
    }
    // Then every path itself, on several threads: one lookup each by name in its
    // directory's handle (and a hash where no fingerprint vouches for the content).
    let mut leaves: Vec<(&str, Option<Proof>)> = Vec::with_capacity(paths.len());
    leaves.extend(
        (paths.iter().copied()).filter(|(p, _)| !dirs.contains_key(*p) && reachable(&dirs, p)),
    );
    let entries = crate::parallel::try_map(
        &leaves,
        || (),
        |&(rel, proof), _| probe_one(&tree, bundle, rel, proof, dirs_wanted),
    )?;
    let probed = leaves
        .into_iter()
        .zip(entries)
        .map(|((rel, _), entry)| (rel, entry))
        .collect();
    Ok(Storage::new(None, dirs, probed))
}

/// A directory's entry; its tree is listed only when `list` (a planned path where a
/// directory stands: the planner decides whether it may go).
fn list_dir(bundle: &Path, rel: &str, list: bool) -> Result<Entry<'static>> {
    let (mut contents, mut dirs) = (Vec::new(), Vec::new());
    if list {
        list_tree_and_dirs(bundle, rel, &mut contents, &mut dirs)?;
    }
    Ok(Entry::Dir { contents, dirs })
}

fn probe_one<'a>(
    tree: &Tree,
    bundle: &Path,
    rel: &str,
    proof: Option<Proof<'a>>,
    list_if_in: &foldhash::HashSet<&str>,
) -> Result<Entry<'a>> {
    let md = match tree.lstat(rel) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Entry::Missing),
        Err(e) if e.raw_os_error() == Some(20) => return Ok(Entry::Missing), // ENOTDIR
        Err(e) => return Err(Error::io("stat", bundle.join(rel), e)),
        Ok(md) => md,
    };
    Ok(match md.file_type {
        FileType::Symlink => Entry::Symlink {
            target: tree.read_link(rel).ctx("read link", bundle.join(rel))?,
        },
        // Listed only where a planned path is: looked up for directories alone.
        FileType::Directory => list_dir(bundle, rel, list_if_in.contains(rel))?,
        FileType::RegularFile => {
            let sha256 = match proof {
                Some(Proof {
                    sha256,
                    placed: Some(placed),
                }) if placed.matches_meta(&md) => Some(sha256.into()),
                Some(_) => Some(hash_file(&bundle.join(rel))?.1.into()),
                None => None,
            };
            Entry::File {
                size: md.size,
                sha256,
            }
        }
        _ => Entry::Special,
    })
}

/// Every non-directory under `rel`, bundle-relative, recursively; symlinks not followed.
pub fn list_tree(bundle: &Path, rel: &str, out: &mut Vec<String>) -> Result<()> {
    list_tree_and_dirs(bundle, rel, out, &mut Vec::new())
}

/// [`list_tree`], and every directory under `rel` into `dirs`.
fn list_tree_and_dirs(
    bundle: &Path,
    rel: &str,
    out: &mut Vec<String>,
    dirs: &mut Vec<String>,
) -> Result<()> {
    let dir = if rel.is_empty() {
        bundle.to_path_buf()
    } else {
        bundle.join(rel)
    };
    for e in fs::read_dir(&dir).ctx("list", &dir)? {
        let e = e.ctx("list", &dir)?;
        let name = e.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type().ctx("stat", e.path())?.is_dir() {
            dirs.push(child.clone());
            list_tree_and_dirs(bundle, &child, out, dirs)?;
        } else {
            out.push(child);
        }
    }
    Ok(())
}

/// An exclusive `flock` on `<bundle>/.distributor.lock`, released on drop.
pub struct DestinationLock {
    _file: File,
}

/// Takes the destination lock, waiting up to `timeout`. Creates the bundle path
/// (real directories only) when it does not exist yet.
pub fn lock(base: &Path, bundle: &Path, timeout: Duration) -> Result<DestinationLock> {
    if let Some(reason) = bundle_unsafe(base, bundle) {
        return Err(Error::Unsafe(reason));
    }
    fs::create_dir_all(bundle).ctx("create", bundle)?;
    if let Some(reason) = bundle_unsafe(base, bundle) {
        return Err(Error::Unsafe(reason));
    }
    let path = bundle.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags_nofollow()
        .open(&path)
        .ctx("open lock file", &path)?;
    let start = Instant::now();
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(DestinationLock { _file: file }),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                if start.elapsed() >= timeout {
                    return Err(Error::Lock(format!(
                        "destination {} is locked by another distributor process; gave up after {}s (--lock-timeout)",
                        bundle.display(),
                        timeout.as_secs_f64()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Error::io("lock", path, e.into())),
        }
    }
}

trait NoFollow {
    fn custom_flags_nofollow(&mut self) -> &mut Self;
}

impl NoFollow for OpenOptions {
    fn custom_flags_nofollow(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
    }
}

/// Checks that every ancestor of `rel` below `root` is a real directory (missing is
/// fine); refuses symlinks and files on the way.
pub fn check_inside(root: &Path, rel: &str) -> Result<()> {
    check_segments(root, rel, false)
}

/// [`check_inside`] for a directory: `rel_dir` itself, too, is a real directory or missing.
pub fn check_dir_inside(root: &Path, rel_dir: &str) -> Result<()> {
    check_segments(root, rel_dir, true)
}

fn check_segments(root: &Path, rel: &str, last_too: bool) -> Result<()> {
    // `..`, an absolute path or an empty segment would leave `root` lexically.
    crate::source::check_safe_path(rel).map_err(|e| {
        Error::Unsafe(format!(
            "'{}' is not a safe path inside {} ({e}); refusing to touch it",
            rel.escape_debug(),
            root.display()
        ))
    })?;
    let mut cur = root.to_path_buf();
    let segs: Vec<&str> = rel.split('/').collect();
    let checked = if last_too { segs.len() } else { segs.len() - 1 };
    for seg in &segs[..checked] {
        cur.push(seg);
        match fs::symlink_metadata(&cur) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("stat", cur, e)),
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::Unsafe(format!(
                    "{} is not a real directory; refusing to go through it",
                    cur.display()
                )));
            }
        }
    }
    Ok(())
}

/// Creates the parent directories of `rel` under `root`, never through a symlink.
/// Returns the directories it created, outermost first.
pub fn make_parents(root: &Path, rel: &str) -> Result<Vec<PathBuf>> {
    match rel.rsplit_once('/') {
        Some((dir, _)) => make_dirs(root, dir),
        None => Ok(Vec::new()),
    }
}

/// Creates the directory `rel_dir` and its missing ancestors under `root`, never through a
/// symlink. Returns the directories it created, outermost first.
pub fn make_dirs(root: &Path, rel_dir: &str) -> Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    let mut cur = root.to_path_buf();
    for seg in rel_dir.split('/') {
        cur.push(seg);
        match fs::symlink_metadata(&cur) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(Error::Unsafe(format!(
                    "{} is not a real directory; refusing to go through it",
                    cur.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir(&cur).ctx("create directory", &cur)?;
                created.push(cur.clone());
            }
            Err(e) => return Err(Error::io("stat", cur, e)),
        }
    }
    Ok(created)
}

/// What [`copy_hashed`] wrote.
#[derive(Debug)]
pub struct Copied {
    /// Bytes written.
    pub size: u64,
    /// Lowercase hex sha256 of exactly those bytes.
    pub sha256: String,
    /// The new file's metadata after its last write. Size, mtime and inode survive the
    /// rename into place, so this is the file's placement fingerprint.
    pub metadata: fs::Metadata,
}

/// Copies `src` to a new file `dst`, hashing the bytes as they are copied: every byte
/// written is a byte hashed, from the same buffer, so what the hash vouches for is what
/// was written (a second read, or an in-kernel copy, could differ from what was hashed
/// when the source changes underneath). `on_bytes` hears of each chunk written. The
/// destination must not exist. Not fsynced: the caller syncs the filesystem once before
/// the commit point.
pub fn copy_hashed(
    src: &Path,
    dst: &Path,
    buf: &mut [u8],
    on_bytes: &mut dyn FnMut(u64),
) -> Result<Copied> {
    let mut input = OpenOptions::new()
        .read(true)
        .custom_flags_nofollow()
        .open(src)
        .ctx("open", src)?;
    let mut output = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags_nofollow()
        .open(dst)
        .ctx("create", dst)?;
    let mut h = Sha256::new();
    let mut size = 0u64;
    loop {
        let n = input.read(buf).ctx("read", src)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        failpoint::io("io_stage_write").ctx("write", dst)?;
        output.write_all(&buf[..n]).ctx("write", dst)?;
        size += n as u64;
        on_bytes(n as u64);
    }
    let metadata = output.metadata().ctx("stat", dst)?;
    Ok(Copied {
        size,
        sha256: hex(&h.finalize()),
        metadata,
    })
}

/// Renames `from` to `to` (both absolute, same filesystem), creating `to`'s parents below
/// `to_root` first.
pub fn rename_into(from: &Path, to_root: &Path, rel: &str) -> Result<Vec<PathBuf>> {
    let created = make_parents(to_root, rel)?;
    rename(from, &to_root.join(rel))?;
    Ok(created)
}

/// Renames `from` to `to`, whose parent exists.
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    failpoint::io("io_rename").ctx("rename into place", to)?;
    fs::rename(from, to).ctx("rename into place", to)
}

/// Flushes everything written on the filesystem holding `path` (one `syncfs`).
pub fn sync_filesystem(path: &Path) -> Result<()> {
    let f = File::open(path).ctx("open", path)?;
    failpoint::io("io_syncfs").ctx("sync filesystem of", path)?;
    rustix::fs::syncfs(&f).map_err(|e| Error::io("sync filesystem of", path, e.into()))
}

/// fsyncs a directory.
pub fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .ctx("open", path)?
        .sync_all()
        .ctx("fsync", path)
}

/// The commit point: writes `bytes` to `tmp`, fsyncs, renames over
/// `<bundle>/.distributor.json`, fsyncs the bundle directory.
pub fn write_state_atomic(bundle: &Path, tmp: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags_nofollow()
        .open(tmp)
        .ctx("create", tmp)?;
    f.write_all(bytes).ctx("write", tmp)?;
    failpoint::io("io_state_fsync").ctx("fsync", tmp)?;
    f.sync_all().ctx("fsync", tmp)?;
    let dst = bundle.join(STATE_FILE);
    failpoint::io("io_state_rename").ctx("rename state into place", &dst)?;
    fs::rename(tmp, &dst).ctx("rename state into place", &dst)?;
    sync_dir(bundle)
}

/// Removes `dir` and its emptied ancestors up to, not including, `bundle`. Stops at the
/// first directory that is not empty.
pub fn prune_empty_dirs(bundle: &Path, rel_dir: &str) {
    // Only a real directory reached through real directories: `remove_dir` on a path
    // through a symlink would remove an empty directory outside the bundle path.
    if check_dir_inside(bundle, rel_dir).is_err() {
        return;
    }
    let mut rel = rel_dir.to_string();
    while !rel.is_empty() {
        if fs::remove_dir(bundle.join(&rel)).is_err() {
            return;
        }
        match rel.rfind('/') {
            Some(i) => rel.truncate(i),
            None => return,
        }
    }
}

/// Creates `<bundle>/.distributor-staging` as a real directory; refuses when something
/// other than a directory (a symlink planted there, say) holds the name.
pub fn make_staging_root(bundle: &Path) -> Result<PathBuf> {
    let staging = bundle.join(STAGING_DIR);
    match fs::symlink_metadata(&staging) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => {
            return Err(Error::Unsafe(format!(
                "{} is not a real directory; refusing to stage through it",
                staging.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir(&staging).ctx("create staging", &staging)?
        }
        Err(e) => return Err(Error::io("stat", staging, e)),
    }
    Ok(staging)
}

/// Removes a whole staging tree; only ever called on `<bundle>/.distributor-staging/<op>`.
pub fn remove_staging(bundle: &Path, op: &str) -> Result<()> {
    let staging = bundle.join(STAGING_DIR);
    let dir = staging.join(op);
    match fs::symlink_metadata(&dir) {
        Ok(md) if md.is_dir() => {
            failpoint::io("io_remove_staging").ctx("remove staging", &dir)?;
            remove_tree(&dir)?
        }
        Ok(_) => {
            return Err(Error::Unsafe(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        Err(_) => {}
    }
    let _ = fs::remove_dir(&staging);
    Ok(())
}

/// Removes `dir` and everything below it, never following a symlink. Deleting costs
/// kernel work per inode (on some mounts a discard per freed block), so the entries two
/// levels down (`new/*`, `old/*`: staged files, or the directories of a mirrored staging)
/// go on several threads.
fn remove_tree(dir: &Path) -> Result<()> {
    let mut entries: Vec<(PathBuf, bool)> = Vec::new();
    for top in fs::read_dir(dir).ctx("list", dir)? {
        let top = top.ctx("list", dir)?;
        if top.file_type().ctx("stat", top.path())?.is_dir() {
            let path = top.path();
            for e in fs::read_dir(&path).ctx("list", &path)? {
                let e = e.ctx("list", &path)?;
                let is_dir = e.file_type().ctx("stat", e.path())?.is_dir();
                entries.push((e.path(), is_dir));
            }
        }
    }
    crate::parallel::try_map(
        &entries,
        || (),
        |(path, is_dir), _| {
            if *is_dir {
                fs::remove_dir_all(path).ctx("remove staging", path)
            } else {
                fs::remove_file(path).ctx("remove staging", path)
            }
        },
    )?;
    fs::remove_dir_all(dir).ctx("remove staging", dir)
}

/// Removes `dir`, a directory whose content was all moved aside: its empty
/// subdirectories first, deepest first. Anything else found in it (a file, a symlink:
/// somebody put it there after planning) stops the removal with an error, and nothing
/// that is not an empty directory is ever removed. Symlinks are never followed.
pub fn remove_emptied_tree(dir: &Path) -> Result<()> {
    for e in fs::read_dir(dir).ctx("list", dir)? {
        let e = e.ctx("list", dir)?;
        let path = e.path();
        if e.file_type().ctx("stat", &path)?.is_dir() {
            remove_emptied_tree(&path)?;
        } else {
            return Err(Error::Failed(format!(
                "{} appeared in a directory distributor is replacing with a file; only empty directories were removed there",
                path.display()
            )));
        }
    }
    fs::remove_dir(dir).ctx("remove emptied directory", dir)
}

/// Entries of `<bundle>/.distributor-staging/`, if any.
pub fn staging_entries(bundle: &Path) -> Vec<String> {
    let staging = bundle.join(STAGING_DIR);
    match fs::symlink_metadata(&staging) {
        Err(_) => return Vec::new(),
        Ok(md) if !md.is_dir() => return vec!["(not a directory)".to_string()],
        Ok(_) => {}
    }
    match fs::read_dir(&staging) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(ino: u64) -> Placed {
        Placed {
            size: 1,
            mtime_ns: ino as i64,
            ino,
        }
    }

    /// Whatever order paths are wanted and offered in (sorted: found by looking after the
    /// last one, else by binary search; unsorted: through a map), the first offer for a
    /// path decides and vouches only for the hash it was wanted for.
    #[test]
    fn fingerprints_find_their_slot_in_any_order() {
        for wanted in [
            vec![("a", "h-a"), ("b/x", "h-b"), ("c", "h-c")],
            vec![("c", "h-c"), ("a", "h-a"), ("b/x", "h-b")],
        ] {
            let mut f = Fingerprints::wanting(wanted.clone());
            assert_eq!(f.open(), 3);
            f.offer("c", "h-c", placed(3));
            f.offer("zzz", "h-z", placed(9)); // not wanted: ignored
            f.offer("a", "h-old", placed(1)); // newest placement of `a` recorded another hash
            f.offer("a", "h-a", placed(2)); // older: decides nothing
            assert_eq!(f.open(), 1, "{wanted:?}");
            f.offer("b/x", "h-b", placed(4));
            assert_eq!(f.open(), 0);
            assert_eq!(f.vouching("c", "h-c"), Some(&placed(3)));
            assert_eq!(f.vouching("c", "h-other"), None);
            assert_eq!(f.vouching("a", "h-a"), None);
            assert_eq!(f.vouching("zzz", "h-z"), None);
            // Asked in the wanted order, and out of it: the same answers.
            let in_order: Vec<_> = wanted.iter().map(|(p, h)| f.vouching(p, h)).collect();
            let reversed: Vec<_> = wanted.iter().rev().map(|(p, h)| f.vouching(p, h)).collect();
            assert!(in_order.iter().eq(reversed.iter().rev()), "{wanted:?}");
            assert_eq!(f.vouching("b/x", "h-b"), Some(&placed(4)));
        }
    }
}
