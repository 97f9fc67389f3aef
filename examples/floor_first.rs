//! The floor of a first publication (issue 28): the work distributor cannot skip to put a
//! new bundle into an empty local destination durably and crash-safely, done as plainly
//! as possible, on as many threads as distributor's staging uses where the work is per
//! file.
//!
//! - Open the source as distributor does (`Source::open`: read the manifest, parse it into
//!   distributor's own `Manifest` type, check it and take its source digest, SPEC §3.3),
//!   and check its files (`Source::check_files`: `lstat` every output, compare its type
//!   and size with the manifest's).
//! - Journal the operation before acting (SPEC §7): a SQLite journal in WAL mode, one
//!   transaction with the operation and a row per action (path, size, sha256), committed
//!   with an fsync.
//! - Take the bundle path's lock: `flock` on `.distributor.lock` (SPEC §6 step 1).
//! - Write the staging record first (SPEC §17): `plan.json` (every action's path, size and
//!   sha256) and `post-state.json` (the state to commit) under
//!   `.distributor/staging/.tmp-<op>/`, one `syncfs`, renamed to `<op>`, the staging
//!   directory fsynced.
//! - Stage (SPEC §6 step 4): every file copied into `.distributor/staging/<op>/new/`,
//!   created exclusively with mode 0644, hashed while copied, the digest compared with the
//!   manifest's; on two threads (this machine's cores). As distributor's `trees` layout
//!   has it: a file in a directory (in an empty destination every directory is new) at
//!   its path under `new/tree/`, a file at the top by its index in `new/<n>/` (256 a
//!   directory). Each file in a tree is `fstat`ed once written: placing its tree changes
//!   nothing of it, so that is its placement fingerprint.
//! - One `syncfs` before the first rename into the destination (SPEC §13).
//! - Place: rename each new tree (each top directory) into place whole, and each file at
//!   the top, with `RENAME_NOREPLACE` (nothing that appeared there is ever replaced),
//!   `lstat`ing each file renamed for its placement fingerprint, on one thread.
//! - One `syncfs` for the directories that gained entries; copy the staged post-state to
//!   a temp file, fsync it, rename it over `.distributor.json`, fsync the bundle
//!   directory.
//! - Commit in the journal with the placement fingerprints (an fsync); append the
//!   destination log's entry (SPEC §18: a record file fsynced, linked to `<seq>.json`,
//!   the log directory fsynced); remove the staging entry.
//!
//! What distributor does beyond this (planning and the report, its checks against a
//! hostile neighbour: the file type of every source opened, record owners and modes, the
//! bundle path's identity before the commit; the journal's schema, step events and
//! indexes; progress) is its overhead. Used by `benches/publish.py --floor-first` and
//! `benches/first_publish.py --floor`.
//!
//!     cargo run --release --example floor_first -- SOURCE_DIR BUNDLE_PATH JOURNAL

use distributor::source::{OutputEntry, Source};
use rusqlite::Connection;
use rustix::fs::{Mode, OFlags, RenameFlags};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

const BUCKET: usize = 256;
const THREADS: usize = 2;

fn fail(what: &Path, e: impl std::fmt::Display) -> ! {
    eprintln!("floor_first: {}: {e}", what.display());
    std::process::exit(1)
}

fn journal(path: &Path, op: &str, outputs: &[OutputEntry]) -> Connection {
    let db = Connection::open(path).unwrap_or_else(|e| fail(path, e));
    db.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS operations (id TEXT PRIMARY KEY, status TEXT NOT NULL,
             placements TEXT);
         CREATE TABLE IF NOT EXISTS actions (op TEXT NOT NULL, seq INTEGER NOT NULL,
             path TEXT NOT NULL, size INTEGER NOT NULL, sha256 BLOB NOT NULL,
             PRIMARY KEY (op, seq)) WITHOUT ROWID;",
    )
    .unwrap_or_else(|e| fail(path, e));
    let tx = db.unchecked_transaction().unwrap_or_else(|e| fail(path, e));
    tx.execute("INSERT INTO operations VALUES (?1, 'begun', NULL)", [op])
        .unwrap_or_else(|e| fail(path, e));
    {
        let mut ins = tx
            .prepare("INSERT INTO actions VALUES (?1, ?2, ?3, ?4, ?5)")
            .unwrap_or_else(|e| fail(path, e));
        for (i, o) in outputs.iter().enumerate() {
            ins.execute(rusqlite::params![
                op,
                i as i64,
                o.path,
                o.size as i64,
                o.sha256.0.as_slice()
            ])
            .unwrap_or_else(|e| fail(path, e));
        }
    }
    tx.commit().unwrap_or_else(|e| fail(path, e));
    db
}

fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| fail(path, e))
}

/// A placement fingerprint: inode, mtime and ctime.
type Fingerprint = (u64, i64, i64);

fn fingerprint(st: &rustix::fs::Stat) -> Fingerprint {
    (st.st_ino, st.st_mtime, st.st_ctime)
}

/// Copies output `i` into `dir` as `name`, hashing it, and checks the digest: the file's
/// fingerprint once written.
fn stage(source: &Path, dir: &OwnedFd, name: &str, o: &OutputEntry, buf: &mut [u8]) -> Fingerprint {
    let p = source.join(&o.path);
    let mut input = std::fs::File::open(&p).unwrap_or_else(|e| fail(&p, e));
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap_or_else(|e| fail(&p, e));
    let mut output = std::fs::File::from(fd);
    let mut h = Sha256::new();
    loop {
        let n = input.read(buf).unwrap_or_else(|e| fail(&p, e));
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        output.write_all(&buf[..n]).unwrap_or_else(|e| fail(&p, e));
    }
    if h.finalize().as_slice() != o.sha256.0.as_slice() {
        fail(&p, "sha256 differs from the manifest");
    }
    fingerprint(&rustix::fs::fstat(&output).unwrap_or_else(|e| fail(&p, e)))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, source, bundle, journal_path] = args.as_slice() else {
        eprintln!("usage: floor_first SOURCE_DIR BUNDLE_PATH JOURNAL");
        std::process::exit(2);
    };
    let (source, bundle, journal_path) = (
        Path::new(source),
        Path::new(bundle),
        Path::new(journal_path),
    );
    // The source work distributor does, through its own functions: read, parse, check and
    // digest the manifest, then `lstat` every output (on the threads distributor uses).
    let src = Source::open(source).unwrap_or_else(|e| fail(source, e));
    src.check_files().unwrap_or_else(|e| fail(source, e));
    let (digest, outputs) = (&src.digest, &src.manifest.outputs);

    let op = uuid::Uuid::new_v4().to_string();
    let db = journal(journal_path, &op, outputs);

    std::fs::create_dir_all(bundle.join(".distributor/staging"))
        .unwrap_or_else(|e| fail(bundle, e));
    let root = open_dir(bundle);
    let lock_path = bundle.join(".distributor.lock");
    let lock = std::fs::File::create(&lock_path).unwrap_or_else(|e| fail(&lock_path, e));
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .unwrap_or_else(|e| fail(&lock_path, e));

    #[derive(serde::Serialize)]
    struct State<'a> {
        source_digest: &'a str,
        outputs: &'a [OutputEntry],
    }
    let record_tmp = bundle
        .join(".distributor/staging")
        .join(format!(".tmp-{op}"));
    std::fs::create_dir(&record_tmp).unwrap_or_else(|e| fail(&record_tmp, e));
    for (name, value) in [
        ("plan.json", serde_json::to_vec(outputs)),
        (
            "post-state.json",
            serde_json::to_vec(&State {
                source_digest: digest,
                outputs,
            }),
        ),
    ] {
        let p = record_tmp.join(name);
        std::fs::write(&p, value.unwrap_or_else(|e| fail(&p, e))).unwrap_or_else(|e| fail(&p, e));
    }
    rustix::fs::syncfs(&root).unwrap_or_else(|e| fail(bundle, e));
    let record = bundle.join(".distributor/staging").join(&op);
    std::fs::rename(&record_tmp, &record).unwrap_or_else(|e| fail(&record, e));
    rustix::fs::fsync(open_dir(&bundle.join(".distributor/staging")))
        .unwrap_or_else(|e| fail(bundle, e));
    let staging = record.join("new");
    std::fs::create_dir(&staging).unwrap_or_else(|e| fail(&staging, e));
    // Where each output is staged: its directory's handle and its name there.
    let tree = staging.join("tree");
    std::fs::create_dir(&tree).unwrap_or_else(|e| fail(&tree, e));
    let mut dirs: HashMap<&str, OwnedFd> = HashMap::new();
    let mut buckets: Vec<OwnedFd> = Vec::new();
    let mut at: Vec<(&str, usize, String)> = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.iter().enumerate() {
        match o.path.rsplit_once('/') {
            Some((parent, name)) => {
                if !dirs.contains_key(parent) {
                    let d = tree.join(parent);
                    std::fs::create_dir_all(&d).unwrap_or_else(|e| fail(&d, e));
                    dirs.insert(parent, open_dir(&d));
                }
                at.push((parent, 0, name.to_string()));
            }
            None => {
                if buckets.len() <= i / BUCKET {
                    let d = staging.join((i / BUCKET).to_string());
                    std::fs::create_dir_all(&d).unwrap_or_else(|e| fail(&d, e));
                    buckets.resize_with(i / BUCKET + 1, || open_dir(&d));
                }
                at.push(("", i / BUCKET, i.to_string()));
            }
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut as_staged: Vec<Fingerprint> = vec![(0, 0, 0); outputs.len()];
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut staged = Vec::new();
                    loop {
                        let start = next.fetch_add(BUCKET, std::sync::atomic::Ordering::Relaxed);
                        if start >= outputs.len() {
                            break;
                        }
                        let end = (start + BUCKET).min(outputs.len());
                        for (i, o) in outputs[start..end].iter().enumerate() {
                            let (parent, bucket, name) = &at[start + i];
                            let dir = match *parent {
                                "" => &buckets[*bucket],
                                p => &dirs[p],
                            };
                            staged.push((start + i, stage(source, dir, name, o, &mut buf)));
                        }
                    }
                    staged
                })
            })
            .collect();
        for t in threads {
            for (i, f) in t
                .join()
                .unwrap_or_else(|_| fail(source, "a staging thread panicked"))
            {
                as_staged[i] = f;
            }
        }
    });
    rustix::fs::syncfs(&root).unwrap_or_else(|e| fail(bundle, e));

    // Each new tree whole, then each file at the top, `lstat`ed for its fingerprint (its
    // rename set its ctime); a file placed with its tree keeps its fingerprint as staged.
    let tree_fd = open_dir(&tree);
    let mut tops: Vec<&str> = outputs
        .iter()
        .filter_map(|o| o.path.split_once('/').map(|(top, _)| top))
        .collect();
    tops.sort_unstable();
    tops.dedup();
    for top in tops {
        rustix::fs::renameat_with(&tree_fd, top, &root, top, RenameFlags::NOREPLACE)
            .unwrap_or_else(|e| fail(&bundle.join(top), e));
    }
    let mut fingerprints = as_staged;
    for ((o, (parent, bucket, name)), f) in outputs.iter().zip(&at).zip(&mut fingerprints) {
        if parent.is_empty() {
            rustix::fs::renameat_with(
                &buckets[*bucket],
                name.as_str(),
                &root,
                &o.path,
                RenameFlags::NOREPLACE,
            )
            .unwrap_or_else(|e| fail(&bundle.join(&o.path), e));
            let st = rustix::fs::statat(&root, &o.path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .unwrap_or_else(|e| fail(&bundle.join(&o.path), e));
            *f = fingerprint(&st);
        }
    }
    rustix::fs::syncfs(&root).unwrap_or_else(|e| fail(bundle, e));

    let tmp = record.join("state.json");
    let mut f = std::fs::File::create(&tmp).unwrap_or_else(|e| fail(&tmp, e));
    std::io::copy(
        &mut std::fs::File::open(record.join("post-state.json")).unwrap_or_else(|e| fail(&tmp, e)),
        &mut f,
    )
    .unwrap_or_else(|e| fail(&tmp, e));
    f.sync_all().unwrap_or_else(|e| fail(&tmp, e));
    let state = bundle.join(".distributor.json");
    std::fs::rename(&tmp, &state).unwrap_or_else(|e| fail(&state, e));
    rustix::fs::fsync(&root).unwrap_or_else(|e| fail(bundle, e));
    let placements = serde_json::to_string(&fingerprints).unwrap_or_else(|e| fail(&tmp, e));
    db.execute(
        "UPDATE operations SET status = 'committed', placements = ?2 WHERE id = ?1",
        [&op, &placements],
    )
    .unwrap_or_else(|e| fail(journal_path, e));

    let log = bundle.join(".distributor/log");
    std::fs::create_dir_all(&log).unwrap_or_else(|e| fail(&log, e));
    let entry = log.join(format!(".tmp-{op}"));
    let mut f = std::fs::File::create(&entry).unwrap_or_else(|e| fail(&entry, e));
    writeln!(
        f,
        "{{\"seq\":1,\"operation_id\":\"{op}\",\"source_digest\":\"{digest}\",\"outputs\":{}}}",
        outputs.len()
    )
    .unwrap_or_else(|e| fail(&entry, e));
    f.sync_all().unwrap_or_else(|e| fail(&entry, e));
    std::fs::hard_link(&entry, log.join("1.json")).unwrap_or_else(|e| fail(&log, e));
    rustix::fs::fsync(open_dir(&log)).unwrap_or_else(|e| fail(&log, e));
    std::fs::remove_file(&entry).unwrap_or_else(|e| fail(&entry, e));

    drop(buckets);
    std::fs::remove_dir_all(&record).unwrap_or_else(|e| fail(&staging, e));
    drop(lock);
    println!(
        "{} files published ({digest}), {} bytes",
        outputs.len(),
        outputs.iter().map(|o| o.size).sum::<u64>()
    );
}
