//! The floor of deciding that a publication is unchanged (issue 28): the work distributor
//! cannot skip for a republication of the source the journal last committed to a local
//! destination, done as plainly as possible on one thread.
//!
//! - Read the manifest, parse it into distributor's own `Manifest` type, check it (safe
//!   paths, no duplicates: the paths are about to be used) and take its source digest
//!   (SPEC §3.3): distributor must know the source is the one committed, not only its id.
//! - `lstat` every source file.
//! - Open the same SQLite journal and read the identity the last commit recorded for the
//!   destination's state file (one row of `journal_state_files`), and `lstat` the state
//!   file to compare: that is how distributor knows, without reading it, that the state
//!   is the one committed.
//! - Read the newest placement set of the destination from the journal (its
//!   `[seq, mtime, ino, ctime]` elements and the action rows they name: path, size,
//!   sha256), and `lstat` every placed file, comparing size, mtime and inode: only the
//!   journal says what was placed, so only it proves a file is still as placed.
//!
//! What distributor does beyond this (the report, the plan, the journal's pragmas and
//! checks, the threads) is its overhead. Used by `benches/publish.py --floor` and
//! `benches/plan_scale.py`.
//!
//!     cargo run --release --example floor -- SOURCE_DIR BUNDLE_PATH [JOURNAL]
//!
//! Without JOURNAL (a destination published by another tool) the floor reads and parses
//! the state file's paths instead and `lstat`s those.

use distributor::source::{MANIFEST_FILE, Manifest};
use rusqlite::{Connection, OpenFlags};
use serde::Deserialize;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

#[derive(Deserialize)]
struct Paths {
    outputs: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    path: String,
}

fn fail(what: &Path, e: impl std::fmt::Display) -> ! {
    eprintln!("floor: {}: {e}", what.display());
    std::process::exit(1)
}

/// The destination files the journal's newest placement set names, with the size, mtime
/// and inode each was placed with.
fn placed(journal: &Path, bundle: &Path) -> Vec<(String, u64, i64, u64)> {
    let db = Connection::open_with_flags(journal, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| fail(journal, e));
    let key = bundle.to_string_lossy();
    let state = bundle.join(".distributor.json");
    let st = std::fs::symlink_metadata(&state).unwrap_or_else(|e| fail(&state, e));
    let recorded: (i64, i64, i64, i64, i64) = db
        .query_row(
            "SELECT dev, ino, size, mtime_ns, ctime_ns FROM journal_state_files
              WHERE bundle_path = ?1 ORDER BY id DESC LIMIT 1",
            [&key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap_or_else(|e| fail(journal, e));
    let now = (
        st.dev() as i64,
        st.ino() as i64,
        st.size() as i64,
        st.mtime() * 1_000_000_000 + st.mtime_nsec(),
        st.ctime() * 1_000_000_000 + st.ctime_nsec(),
    );
    if recorded != now {
        fail(&state, "not the state file the journal committed");
    }
    let (set, action_set, mtime_base): (String, i64, i64) = db
        .query_row(
            "SELECT placements, action_set, mtime_base FROM journal_placement_sets
              WHERE bundle_path = ?1 ORDER BY id DESC LIMIT 1",
            [&key],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                ))
            },
        )
        .unwrap_or_else(|e| fail(journal, e));
    let set: Vec<(i64, i64, i64, Option<i64>)> =
        serde_json::from_str(&set).unwrap_or_else(|e| fail(journal, e));
    let mut rows = db
        .prepare("SELECT seq, path, size, sha256 FROM journal_action_rows WHERE action_set = ?1 ORDER BY seq")
        .unwrap_or_else(|e| fail(journal, e));
    let mut rows = rows
        .query([action_set])
        .unwrap_or_else(|e| fail(journal, e));
    let mut out = Vec::with_capacity(set.len());
    for (seq, mtime, ino, _ctime) in set {
        let row = loop {
            let r = rows
                .next()
                .unwrap_or_else(|e| fail(journal, e))
                .unwrap_or_else(|| fail(journal, format!("no action {seq}")));
            if r.get::<_, i64>(0).unwrap_or_else(|e| fail(journal, e)) == seq {
                break r;
            }
        };
        let path: String = row.get(1).unwrap_or_else(|e| fail(journal, e));
        let size: Option<i64> = row.get(2).unwrap_or_else(|e| fail(journal, e));
        let sha: Vec<u8> = row.get(3).unwrap_or_else(|e| fail(journal, e));
        assert_eq!(sha.len(), 32, "{path}: sha256");
        out.push((
            path,
            size.unwrap_or(0) as u64,
            mtime_base.wrapping_add(mtime),
            ino as u64,
        ));
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (source, bundle, journal) = match args.as_slice() {
        [_, s, b] => (Path::new(s), Path::new(b), None),
        [_, s, b, j] => (Path::new(s), Path::new(b), Some(Path::new(j))),
        _ => {
            eprintln!("usage: floor SOURCE_DIR BUNDLE_PATH [JOURNAL]");
            std::process::exit(2);
        }
    };
    let file = source.join(MANIFEST_FILE);
    let bytes = std::fs::read(&file).unwrap_or_else(|e| fail(&file, e));
    let manifest: Manifest = serde_json::from_slice(&bytes).unwrap_or_else(|e| fail(&file, e));
    drop(bytes);
    manifest.validate().unwrap_or_else(|e| fail(&file, e));
    let digest = manifest.digest();
    let mut bytes = 0u64;
    for o in &manifest.outputs {
        let p = source.join(&o.path);
        let st = std::fs::symlink_metadata(&p).unwrap_or_else(|e| fail(&p, e));
        if st.len() != o.size {
            fail(&p, "size differs from the manifest");
        }
        bytes += st.len();
    }
    let recorded = match journal {
        Some(journal) => {
            let placed = placed(journal, bundle);
            for (path, size, mtime_ns, ino) in &placed {
                let p = bundle.join(path);
                let st = std::fs::symlink_metadata(&p).unwrap_or_else(|e| fail(&p, e));
                let mtime = st.mtime() * 1_000_000_000 + st.mtime_nsec();
                if st.len() != *size || mtime != *mtime_ns || st.ino() != *ino {
                    fail(&p, "not as placed");
                }
                bytes += st.len();
            }
            placed.len()
        }
        None => {
            let file = bundle.join(".distributor.json");
            let text = std::fs::read(&file).unwrap_or_else(|e| fail(&file, e));
            let state: Paths = serde_json::from_slice(&text).unwrap_or_else(|e| fail(&file, e));
            for o in &state.outputs {
                let p = bundle.join(&o.path);
                bytes += std::fs::symlink_metadata(&p)
                    .unwrap_or_else(|e| fail(&p, e))
                    .len();
            }
            state.outputs.len()
        }
    };
    println!(
        "{} source files ({digest}), {recorded} recorded files, {bytes} bytes",
        manifest.outputs.len(),
    );
}
