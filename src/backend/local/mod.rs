//! Local filesystem backend: a bundle path on a local filesystem, opened from the
//! configured destination path by a no-follow walk and then reached only through
//! directory handles ([`handle`]), locked with `flock` ([`bundle`]).
//!
//! Safety rules enforced here, not by callers (SPEC §13): paths are bundle-relative safe
//! paths (SPEC §3.2); nothing is looked up through a symlink or past a file; nothing above
//! or beside the bundle path is created or removed, except that the lock creates the bundle
//! path and missing parents on the first write.

pub mod bundle;
pub mod holder;
pub mod log;
pub mod records;

pub use bundle::{Bundle, TMP_PREFIX, bundle_unsafe};

use crate::backend::{Backend, BundleStore, Committed};
use crate::hash::ContentHash;
use crate::progress::Ticker;
use crate::record::{StagedOperation, StagingLayout};
use std::borrow::Cow;

/// The local filesystem.
#[derive(Debug, Clone, Copy)]
pub struct LocalBackend;

/// Most threads any per-file step uses on a local filesystem: past this the disk, not
/// the cores, is the limit.
const CONCURRENCY: usize = crate::parallel::LOCAL_THREADS;

/// What a local bundle path, published in place, can do.
pub const CAPABILITIES: crate::backend::Capabilities = crate::backend::Capabilities::LOCAL;

impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        CAPABILITIES
    }

    fn concurrency(&self) -> usize {
        CONCURRENCY
    }

    fn bundle_unsafe(&self, base: &Path, bundle: &Path) -> Option<String> {
        bundle_unsafe(base, bundle)
    }

    fn open(&self, base: &Path, bundle: &Path) -> Result<Option<Box<dyn BundleStore>>> {
        Ok(Bundle::open(base, bundle)?.map(|b| Box::new(b) as Box<dyn BundleStore>))
    }

    fn lock(
        &self,
        base: &Path,
        bundle: &Path,
        how: super::LockRequest<'_>,
    ) -> Result<Option<Box<dyn BundleStore>>> {
        Ok(Bundle::lock(base, bundle, how)?.map(|b| Box::new(b) as Box<dyn BundleStore>))
    }

    fn bundle_paths(&self, base: &Path) -> Result<Vec<PathBuf>> {
        bundle_paths(base)
    }
}

impl crate::backend::StoreRead for Bundle {
    fn path(&self) -> &Path {
        Bundle::path(self)
    }

    fn concurrency(&self) -> usize {
        CONCURRENCY
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        CAPABILITIES
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn read_state(&self) -> Result<StateBytes> {
        Bundle::read_state(self)
    }

    fn read_state_parsed(
        &self,
        outputs: usize,
    ) -> Result<(crate::state::StateFile, Option<ContentHash>)> {
        Bundle::read_state_parsed(self, outputs)
    }

    fn state_sha256(&self) -> Result<Option<ContentHash>> {
        Bundle::state_sha256(self)
    }

    fn state_file_id(&self) -> Result<Option<crate::backend::StateFileId>> {
        Bundle::state_file_id(self)
    }

    fn probe<'a>(
        &self,
        paths: &[(&'a str, Option<Proof<'a>>)],
        dirs_wanted: &foldhash::HashSet<&str>,
        progress: Ticker<'_>,
    ) -> Result<Storage<'a>> {
        probe_in(self, paths, dirs_wanted, progress)
    }

    fn list_files(&self) -> Result<Vec<String>> {
        Bundle::list_files(self)
    }

    fn dir_exists(&self, rel: &str) -> Result<bool> {
        Bundle::dir_exists(self, rel)
    }

    fn locked_before(&self) -> Result<bool> {
        Ok(self
            .dir()
            .stat_opt(LOCK_FILE)
            .ctx("stat", self.path().join(LOCK_FILE))?
            .is_some())
    }

    fn lock_holder(&self) -> Result<Option<String>> {
        Bundle::lock_holder(self)
    }

    fn staging_entries(&self) -> Result<Vec<StagingEntry>> {
        Bundle::staging_entries(self)
    }

    fn staging_holds_files(&self, op: &str) -> Result<bool> {
        Bundle::staging_holds_files(self, op)
    }

    fn last_logged_operation(&self) -> Result<Option<crate::backend::LoggedOperation>> {
        Ok(log::read(self.dir())?.last_state_change())
    }
}

impl crate::backend::RecordStore for Bundle {
    fn record_dir(&self, create: bool) -> Result<Option<crate::record::RecordDir>> {
        Bundle::record_dir(self, create)
    }

    fn operation(&self) -> Box<dyn crate::backend::Steps + Sync + '_> {
        // What a local operation keeps (the directories it opened and changed) the
        // bundle path keeps.
        Box::new(self)
    }

    fn read_record(&self, op: &str) -> Result<Option<StagedOperation>> {
        Bundle::read_record(self, op)
    }

    fn remove_staging(&self, op: &str) -> Result<()> {
        Bundle::remove_staging(self, op)
    }

    fn remove_unfinished(&self, op: &str) -> Result<()> {
        Bundle::remove_unfinished(self, op)
    }

    fn adopt_legacy_staging(&self, op: &str) -> Result<()> {
        Bundle::adopt_legacy_staging(self, op)
    }
}

impl crate::backend::Steps for Bundle {
    /// A local publication stages the files of the directories it creates as new trees,
    /// each placed whole with one rename ([`StagingLayout::Trees`]).
    fn describe(&self, staged: &mut StagedOperation) {
        if staged.staging_layout == StagingLayout::Flat {
            staged.staging_layout = StagingLayout::Trees;
        }
    }

    fn begin(&self, op: &StagedOperation, pre: Option<&[u8]>, post: &[u8]) -> Result<()> {
        Bundle::begin(self, op, pre, post)
    }

    fn stage(
        &self,
        op: &StagedOperation,
        i: usize,
        source: &crate::source::SourceFile<'_>,
        buf: &mut [u8],
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Staged> {
        Bundle::stage(self, op, i, source, buf, on_bytes)
    }

    fn make_staged_durable(&self) -> Result<()> {
        Bundle::make_staged_durable(self)
    }

    fn move_aside(&self, op: &StagedOperation, i: usize) -> Result<()> {
        Bundle::move_aside(self, op, i)
    }

    fn remove_emptied_dir(&self, rel: &str) -> Result<()> {
        Bundle::remove_emptied_dir(self, rel)
    }

    fn place(
        &self,
        op: &StagedOperation,
        i: usize,
        as_staged: Option<Placed>,
    ) -> Result<Option<Placed>> {
        Bundle::place(self, op, i, as_staged).map(Some)
    }

    fn link(&self, op: &StagedOperation, i: usize) -> Result<()> {
        Bundle::link(self, op, i)
    }

    fn commit_state(&self, op: &StagedOperation) -> Result<Committed> {
        Bundle::commit_state(self, op)
    }

    fn undo(&self, op: &StagedOperation) -> Result<()> {
        Bundle::undo(self, op)
    }

    fn clean_up(&self, op: &StagedOperation) -> Result<()> {
        // The destination log's entry (SPEC §18) exists before the staging entry goes, so
        // a missing entry is always the last one, and `recover` (which cleans up through
        // here too) writes it.
        if log::last_is(self.dir(), &op.operation_id)? {
            log::tidy(self.dir(), &op.operation_id)?;
        } else {
            log::append_for(
                self.dir(),
                log::Entry::of_operation(op),
                crate::record::paths::of_operation(op),
                self.log_cursor(),
            )?;
        }
        Bundle::clean_up(self, op)
    }
}

impl BundleStore for Bundle {
    fn log_cursor(&self) -> Option<&crate::backend::LogCursor> {
        Some(Bundle::log_cursor(self))
    }

    fn log_tail_now(&self) -> Result<Option<u64>> {
        log::tail_now(self.dir()).map(Some)
    }
}

use crate::backend::types::{Entry, Placed, Proof, Staged, StagingEntry, StateBytes, Storage};
use crate::error::{Error, IoContext, Result};
use crate::fs::tree::{Meta, Tree};
use crate::state::STATE_FILE;
use rustix::fs::FileType;
use std::path::{Path, PathBuf};

/// Name of the lock file at the bundle root.
pub const LOCK_FILE: &str = ".distributor.lock";
/// The staging directory below the bundle root, in the record directory (SPEC §17).
pub const STAGING_DIR: &str = records::STAGING;
/// Where versions before SPEC §17 kept staging: believed only for an operation the
/// journal in use records ([`Bundle::adopt_legacy_staging`]).
pub const LEGACY_STAGING_DIR: &str = ".distributor-staging";

/// True when what a [`Tree`] lookup found still has the size, mtime, inode and ctime
/// recorded in `placed`.
fn matches_meta(placed: &Placed, md: &Meta) -> bool {
    placed.size == md.size
        && placed.mtime_ns == md.mtime_ns
        && placed.ino == md.ino
        && placed.ctime_ns == Some(md.ctime_ns)
}

/// Why `path` cannot be a directory, read without writing (`distributor validate`): it
/// is, or its nearest existing ancestor is, something else (a regular file, say), in the
/// words of the `unsafe_storage` a publication would report. `None` when it is a
/// directory or can be created as one.
pub fn blocked_by_file(path: &Path) -> Option<String> {
    let found = path
        .ancestors()
        .find_map(|p| std::fs::metadata(p).ok().map(|m| (p, m)))?;
    match found {
        (_, m) if m.is_dir() => None,
        (p, m) => {
            let what = if m.is_file() {
                "a file, not a directory"
            } else {
                "not a directory"
            };
            Some(if p == path {
                format!("{} is {what}", p.display())
            } else {
                format!(
                    "{} is {what}: {} cannot be created below it",
                    p.display(),
                    path.display()
                )
            })
        }
    }
}

/// What stands at the bundle path's `.distributor.json`, read without following a
/// symlink anywhere from `base` down (absent when the bundle path does not exist).
pub fn read_state(base: &Path, bundle: &Path) -> Result<StateBytes> {
    match Bundle::open(base, bundle)? {
        Some(b) => b.read_state(),
        None => Ok(StateBytes::Absent),
    }
}

/// Probes the bundle path for the planner (unlocked: opens it; pass the locked [`Bundle`]
/// under the lock): every path in `paths` and their ancestors. A path given with a
/// [`Proof`] gets its content proven when it is a file, by the placement fingerprint when
/// it still matches, or else by hashing it.
pub fn probe<'a>(
    base: &Path,
    bundle: &Path,
    paths: &[(&'a str, Option<Proof<'a>>)],
    dirs_wanted: &foldhash::HashSet<&str>,
    progress: Ticker<'_>,
) -> Result<Storage<'a>> {
    if let Some(reason) = bundle_unsafe(base, bundle) {
        return Ok(Storage::new(Some(reason), Default::default(), Vec::new()));
    }
    match Bundle::open(base, bundle)? {
        Some(b) => probe_in(&b, paths, dirs_wanted, progress),
        // Nothing there yet: every path is missing.
        None => Ok(Storage::default()),
    }
}

/// The first staging record in `store` distributor does not believe (SPEC §17): the
/// operator's message. The one place it is taken from staging, for the planner's
/// `untrusted_record` and for `status` and `verify`.
pub fn untrusted_staging(
    store: &(impl crate::backend::StoreRead + ?Sized),
) -> Result<Option<String>> {
    Ok(store.staging_entries()?.into_iter().find_map(|e| match e {
        StagingEntry::Untrusted(_, why) => Some(why),
        _ => None,
    }))
}

/// [`probe`] in a bundle path already open; `progress` hears of each path looked up and
/// each byte hashed.
pub fn probe_in<'a>(
    b: &Bundle,
    paths: &[(&'a str, Option<Proof<'a>>)],
    dirs_wanted: &foldhash::HashSet<&str>,
    progress: Ticker<'_>,
) -> Result<Storage<'a>> {
    let mut storage = probe_paths(b, paths, dirs_wanted, progress)?;
    storage.untrusted_record = untrusted_staging(b)?;
    Ok(storage)
}

fn probe_paths<'a>(
    b: &Bundle,
    paths: &[(&'a str, Option<Proof<'a>>)],
    dirs_wanted: &foldhash::HashSet<&str>,
    progress: Ticker<'_>,
) -> Result<Storage<'a>> {
    let bundle = b.path();
    let mut tree = Tree::from_dir(b.dir()).ctx("open", bundle)?;
    let mut dirs: foldhash::HashMap<&str, Entry> = foldhash::HashMap::default();
    // Directories on the way first, parents before children, each opened from its parent
    // without following a symlink: a path is never looked up through a symlink or a file.
    let reachable = |entries: &foldhash::HashMap<&str, Entry>, rel: &str| match rel.rsplit_once('/')
    {
        Some((parent, _)) => matches!(entries.get(parent), Some(Entry::Dir { .. })),
        None => true,
    };
    for d in crate::source::ancestors(paths.iter().map(|(p, _)| *p)) {
        if !reachable(&dirs, d) {
            continue;
        }
        let entry = if tree.open_dir(d).ctx("open", bundle.join(d))? {
            list_dir(b, d, dirs_wanted.contains(d))?
        } else {
            // Missing, or something else than a real directory: what, exactly. (Should it
            // have become a directory in between, it was not opened and what is below it
            // reads as missing: a writing plan, made again under the lock.)
            let no_list = foldhash::HashSet::default();
            match probe_one(&tree, b, d, None, &no_list)? {
                // A file where a directory is wanted (rare): its content proven too if it
                // was asked for.
                Entry::File { .. } => {
                    let confirm = paths.iter().find(|(p, _)| *p == d).and_then(|(_, c)| *c);
                    probe_one(&tree, b, d, confirm, &no_list)?
                }
                entry => entry,
            }
        };
        dirs.insert(d, entry);
    }
    // Then every path itself, on several threads: one lookup each by name in its
    // directory's handle (and a hash where no fingerprint vouches for the content).
    // By index into `paths`, and each result paired with its path as it is made: at a
    // million paths a copy of the list, or a second list of results, is tens of megabytes.
    let leaves: Vec<usize> = (0..paths.len())
        .filter(|&i| !dirs.contains_key(paths[i].0) && reachable(&dirs, paths[i].0))
        .collect();
    // Directories and paths below something else than a directory are looked up already.
    progress.done((paths.len() - leaves.len()) as u64);
    let probed = crate::parallel::try_map(
        &leaves,
        || (),
        |&i, _| {
            let (rel, proof) = paths[i];
            let entry = probe_one(&tree, b, rel, proof, dirs_wanted)?;
            if let Entry::File {
                size,
                sha256: Some(Cow::Owned(_)),
            } = &entry
            {
                progress.bytes(*size);
            }
            progress.done(1);
            Ok((rel, entry))
        },
    )?;
    drop(leaves);
    Ok(Storage::new(None, dirs, probed))
}

/// A directory's entry; its tree is listed only when `list` (a planned path where a
/// directory stands: the planner decides whether it may go).
fn list_dir(b: &Bundle, rel: &str, list: bool) -> Result<Entry<'static>> {
    let (mut contents, mut dirs) = (Vec::new(), Vec::new());
    if list {
        bundle::list_tree(b.dir(), rel, b.path(), &mut contents, &mut dirs)?;
    }
    Ok(Entry::Dir { contents, dirs })
}

fn probe_one<'a>(
    tree: &Tree,
    b: &Bundle,
    rel: &str,
    proof: Option<Proof<'a>>,
    list_if_in: &foldhash::HashSet<&str>,
) -> Result<Entry<'a>> {
    let md = match tree.lstat(rel) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Entry::Missing),
        Err(e) if e.raw_os_error() == Some(20) => return Ok(Entry::Missing), // ENOTDIR
        Err(e) => return Err(Error::io("stat", b.path().join(rel), e)),
        Ok(md) => md,
    };
    let bundle = b.path();
    Ok(match md.file_type {
        FileType::Symlink => match tree.read_link(rel) {
            Ok(target) => Entry::Symlink { target },
            // Gone since the lstat: a look without the lock races the operation that
            // removes it (planned again under the lock).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Entry::Missing,
            Err(e) => return Err(Error::io("read link", bundle.join(rel), e)),
        },
        // Listed only where a planned path is: looked up for directories alone.
        FileType::Directory => list_dir(b, rel, list_if_in.contains(rel))?,
        FileType::RegularFile => {
            let sha256 = match proof {
                Some(Proof {
                    sha256,
                    placed: Some(placed),
                    ..
                }) if matches_meta(placed, &md) => Some(Cow::Borrowed(sha256)),
                Some(Proof { or_hash: true, .. }) => match tree.open_file(rel) {
                    Ok(f) if cfg!(feature = "failpoints") => {
                        crate::failpoint::hit("probe_hash");
                        Some(Cow::Owned(
                            crate::hash::hash_reader(f, &bundle.join(rel))?.1,
                        ))
                    }
                    Ok(f) => Some(Cow::Owned(
                        crate::hash::hash_reader(f, &bundle.join(rel))?.1,
                    )),
                    // Replaced by something else than a file since the lookup: a writing
                    // plan, made again under the lock.
                    Err(_) => None,
                },
                Some(Proof { or_hash: false, .. }) | None => None,
            };
            Entry::File {
                size: md.size,
                sha256,
            }
        }
        _ => Entry::Special,
    })
}

/// The bundle paths below a mapped destination's path `base` that hold a state file or
/// staging, sorted, found by a walk that follows no symlink and stops at each bundle path
/// found (what is below one is published content, which may hold anything).
pub fn bundle_paths(base: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let root = match crate::fs::Dir::open_path(base) {
        Ok(d) => d,
        // Nothing published below it yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        // A symlink, or a file, on the way: nothing can be published there, and saying
        // "nothing here" would hide it (status and verify report it on the destination).
        Err(e) if crate::fs::is_redirect(&e) => {
            return Err(Error::Unsafe(format!(
                "{} is not a real directory (a symlink or a file is on the way); distributor never publishes through one",
                base.display()
            )));
        }
        Err(e) => return Err(Error::io("open", base, e)),
    };
    find_bundles(&root, base, &mut out)?;
    out.sort();
    Ok(out)
}

fn find_bundles(dir: &crate::fs::Dir, path: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = dir.entries().ctx("list", path)?;
    if entries
        .iter()
        .any(|(n, _)| n == STATE_FILE || n == records::RECORD_DIR || n == LEGACY_STAGING_DIR)
    {
        out.push(path.to_path_buf());
        return Ok(());
    }
    for (name, kind) in entries {
        if kind == FileType::Directory {
            match dir.open_dir(&name) {
                Ok(sub) => find_bundles(&sub, &path.join(&name), out)?,
                // Replaced since it was listed: not a bundle path.
                Err(e)
                    if crate::fs::is_redirect(&e) || e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("open", path.join(&name), e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::types::Fingerprints;

    fn placed(ino: u64) -> Placed {
        Placed {
            size: 1,
            mtime_ns: ino as i64,
            ino,
            ctime_ns: Some(ino as i64),
        }
    }

    /// Whatever order paths are wanted and offered in (sorted: found by looking after the
    /// last one, else by binary search; unsorted: through a map), the first offer for a
    /// path decides and vouches only for the hash it was wanted for.
    #[test]
    fn fingerprints_find_their_slot_in_any_order() {
        let h = |n: u8| ContentHash([n; 32]);
        let (ha, hb, hc, hz, old, other) = (h(1), h(2), h(3), h(4), h(5), h(6));
        for wanted in [
            vec![("a", &ha), ("b/x", &hb), ("c", &hc)],
            vec![("c", &hc), ("a", &ha), ("b/x", &hb)],
        ] {
            let mut f =
                Fingerprints::wanting_all(crate::backend::types::leaked_outputs(wanted.clone()));
            assert_eq!(f.open(), 3);
            f.offer("c", &hc.hex(), placed(3));
            f.offer("zzz", &hz.hex(), placed(9)); // not wanted: ignored
            f.offer("a", &old.hex(), placed(1)); // newest placement of `a` recorded another hash
            f.offer("a", &ha.hex(), placed(2)); // older: decides nothing
            assert_eq!(f.open(), 1, "{wanted:?}");
            f.offer("b/x", &hb.hex(), placed(4));
            assert_eq!(f.open(), 0);
            assert_eq!(f.vouching("c", &hc), Some(&placed(3)));
            assert_eq!(f.vouching("c", &other), None);
            assert_eq!(f.vouching("a", &ha), None);
            assert_eq!(f.vouching("zzz", &hz), None);
            // Asked in the wanted order, and out of it: the same answers.
            let in_order: Vec<_> = wanted.iter().map(|(p, h)| f.vouching(p, h)).collect();
            let reversed: Vec<_> = wanted.iter().rev().map(|(p, h)| f.vouching(p, h)).collect();
            assert!(in_order.iter().eq(reversed.iter().rev()), "{wanted:?}");
            assert_eq!(f.vouching("b/x", &hb), Some(&placed(4)));
        }
        // Over a manifest's outputs, only those wanted: an offer for another is ignored.
        let output = |path: &str, sha256: ContentHash| crate::source::OutputEntry {
            path: path.into(),
            size: 1,
            sha256,
        };
        let outputs = [output("a", ha), output("b/x", hb), output("c", hc)];
        let mut f = Fingerprints::wanting_outputs(&outputs, [true, false, true]);
        assert_eq!(f.open(), 2);
        f.offer("b/x", &hb.hex(), placed(4));
        assert_eq!(f.open(), 2, "not wanted");
        f.offer("a", &ha.hex(), placed(1));
        f.offer("c", &other.hex(), placed(3));
        assert_eq!(f.open(), 0);
        assert_eq!(f.vouching("a", &ha), Some(&placed(1)));
        assert_eq!(f.vouching("b/x", &hb), None);
        assert_eq!(
            f.vouching("c", &hc),
            None,
            "its newest placement recorded another hash"
        );
    }

    /// A state file larger than distributor reads whole is parsed as it is read
    /// (`Bundle::parse_state_file`, a 256 KiB buffer and several passes): the same state
    /// and sha256 as read whole, the same reason when it is not valid, and past the size
    /// limit it is refused as too large.
    #[test]
    fn a_state_file_parsed_as_read_is_the_state_read_whole() {
        use crate::model::{Owner, ReconciliationMode, SourceRef, StateMode};
        use crate::state::{OwnerRecord, RecordedOutput, State, StateFile};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("bundle");
        std::fs::create_dir(&dir).unwrap();
        let b = Bundle::open(tmp.path(), &dir).unwrap().unwrap();
        let owner = Owner::new("p", "d");
        let shared = std::sync::Arc::new(owner.clone());
        let state = State {
            version: 1,
            mode: StateMode::SingleOwner,
            owners: vec![OwnerRecord {
                owner,
                source: SourceRef {
                    id: "nightly".into(),
                    created_at: "2026-12-02T06:00:00Z".into(),
                    digest: format!("sha256:{}", ContentHash([7; 32]).hex()),
                },
                reconciliation: ReconciliationMode::Replace,
                published_at: "2026-12-02T06:00:01Z".into(),
                operation_id: "00000000-0000-4000-8000-000000000000".into(),
            }],
            // About 600 KB: several reads of the parser's buffer.
            outputs: (0..4000)
                .map(|i| RecordedOutput {
                    path: format!("d{}/f{i:05}.txt", i % 7),
                    size: i,
                    sha256: ContentHash([(i % 251) as u8; 32]),
                    etag: None,
                    owner: std::sync::Arc::clone(&shared),
                })
                .collect(),
            links: vec![],
        };
        let mut state = state;
        state.outputs.sort_by(|a, b| a.path.cmp(&b.path));
        let rendered = state.render();
        assert!(rendered.len() > 2 * 256 * 1024);
        let file = dir.join(crate::state::STATE_FILE);
        let parse = |bytes: &[u8], limit: u64| {
            std::fs::write(&file, bytes).unwrap();
            let f = std::fs::File::open(&file).unwrap();
            b.parse_state_file(&f, limit, 10).unwrap()
        };
        let plenty = 1 << 30;
        let (parsed, sha) = parse(&rendered, plenty);
        assert_eq!(parsed, StateFile::Valid(state));
        assert_eq!(sha, Some(ContentHash::of(&rendered)));
        let broken = &rendered[..rendered.len() - 100];
        let (parsed, _) = parse(broken, plenty);
        assert!(matches!(parsed, StateFile::Invalid(_)));
        assert_eq!(
            parsed,
            StateFile::parse(broken),
            "the reason read whole gives"
        );
        let limit = rendered.len() as u64 - 1;
        let (parsed, sha) = parse(&rendered, limit);
        let why = crate::limits::over(
            &file.display().to_string(),
            limit + 1,
            limit,
            crate::limits::STATE_VAR,
        );
        assert_eq!((parsed, sha), (StateFile::Invalid(why), None));
    }
}
