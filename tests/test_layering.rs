//! SPEC §13: nothing but the storage backend touches destination storage. The modules
//! that plan, execute, recover, inspect and report reach a destination only through the
//! storage interface (`backend::Backend`, `backend::BundleStore`); this test fails when a
//! filesystem call appears in one of them.
//!
//! Modules allowed their own file access, and why: `backend/local/` is the local backend,
//! `backend/releases/` the local backend's release directories; `cli/actor.rs` reads
//! `/etc/passwd` for the name of a uid without `$USER`;
//! `source/` reads the producer's bundle; `config/` reads the config file; `journal/`
//! makes the journal's directory; `server/` keeps its upload spool; `failpoint.rs` writes
//! the test log; `tree.rs` looks up source bundles through handles; `backend/s3/lease.rs`
//! reads `/proc` for the lease holder's boot id, PID namespace and start time (SPEC §14
//! amendments), never a destination; `plan/saved.rs` reads and writes the operator's saved
//! plan file (SPEC §19), never a destination; `hooks.rs` writes a hook's changed-paths
//! file in the temporary directory (SPEC §19), never a destination; `metrics/file.rs`
//! writes the operator's `--metrics-file` (SPEC §20), never a destination.

use std::path::{Path, PathBuf};

const ALLOWED: &[&str] = &[
    "backend/local/",
    "backend/releases/",
    "cli/actor.rs",
    "source/",
    "config/",
    "journal/",
    "server/",
    "failpoint.rs",
    "tree.rs",
    "backend/s3/lease.rs",
    "plan/saved.rs",
    "hooks.rs",
    "metrics/file.rs",
];

/// Spellings of a filesystem call.
const FORBIDDEN: &[&str] = &[
    "std::fs",
    "fs::",
    "File::open",
    "File::create",
    "OpenOptions",
    "rustix::fs",
    "symlink_metadata",
    "read_dir",
    "remove_file",
    "remove_dir",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn only_the_storage_backend_touches_destination_storage() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut found = Vec::new();
    let mut checked = 0;
    for f in &files {
        let rel = f
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if ALLOWED.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(f).unwrap();
        // Unit tests may build fixtures on disk.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap();
            for bad in FORBIDDEN {
                if line.contains(bad) {
                    found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} files checked");
    assert!(
        found.is_empty(),
        "filesystem calls outside the storage backend (go through backend::BundleStore):\n{}",
        found.join("\n")
    );
}
