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
//! the test log; `fs/` is the no-follow handle layer the local backends and `source/` use; `backend/s3/lease/object.rs`
//! reads `/proc` for the lease holder's boot id, PID namespace and start time (SPEC §14
//! amendments), never a destination; `plan/saved.rs` reads and writes the operator's saved
//! plan file (SPEC §19), never a destination; `hooks.rs` writes a hook's changed-paths
//! file in the temporary directory (SPEC §19), never a destination; `metrics/file.rs`
//! writes the operator's `--metrics-file` (SPEC §20), never a destination; `input.rs`
//! reads a file an option names (a saved plan), bounded, never a destination;
//! `hooks/program.rs` checks who may write a hook's program and the directories above
//! it, never a destination; `metrics/place.rs` places the `--metrics-file` through its
//! directory's handle, never a destination.

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
    "fs/",
    "backend/s3/lease/object.rs",
    "plan/saved.rs",
    "hooks.rs",
    "metrics/file.rs",
    "input.rs",
    "hooks/program.rs",
    "metrics/place.rs",
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

/// The layers of `src/`, lowest first: a file may name (import, or link to in its docs)
/// only files of its own layer or below. The layout and why are in
/// docs/internal/layout.md. The most specific prefix decides a file's layer; a file no
/// prefix names fails the test until it is given a layer.
const LAYERS: &[(u8, &[&str])] = &[
    // Words everything shares: errors, the data model, units, the clock, hashes, paths.
    (
        0,
        &[
            "error/",
            "model.rs",
            "units.rs",
            "clock.rs",
            "ordered.rs",
            "globs.rs",
            "progress.rs",
            "hash.rs",
            "limits.rs",
            "parallel.rs",
            "paths.rs",
        ],
    ),
    // No-follow directory handles; the config file.
    (1, &["fs/", "config/"]),
    // The producer's bundle; failpoints (which may cut the power: fs/crashsim.rs); inputs
    // bounded before anything is written (an option's file is read through fs/).
    (2, &["source/", "failpoint.rs", "input.rs"]),
    // The state file.
    (3, &["state/"]),
    // The records an operation leaves in a destination: the contract between the executor
    // and the backends.
    (4, &["record/"]),
    // Storage: the interface, its types and one folder per backend.
    (5, &["backend/"]),
    // The pure planner and the journal.
    (6, &["plan/", "journal/"]),
    // The one transaction; reports, hooks and metrics of what ran; the destination log's
    // readers.
    (
        7,
        &[
            "execute/",
            "report/",
            "hooks.rs",
            "hooks/",
            "metrics/",
            "dest_log.rs",
            "log_mismatch.rs",
        ],
    ),
    // The operations commands run.
    (8, &["ops/"]),
    // The two front ends.
    (9, &["server/", "cli/"]),
    (10, &["lib.rs", "main.rs"]),
];

/// Arrows that still run up, each with what removes it (issue 24). The test fails when
/// one is no longer needed, so that the list only shrinks.
const STILL_UP: &[(&str, &str, &str)] = &[];

fn layer_of(rel: &str) -> Option<u8> {
    let mut best: Option<(usize, u8)> = None;
    for (n, prefixes) in LAYERS {
        for p in *prefixes {
            let hit = rel == *p || (p.ends_with('/') && rel.starts_with(p));
            if hit && best.is_none_or(|(len, _)| p.len() > len) {
                best = Some((p.len(), *n));
            }
        }
    }
    best.map(|(_, n)| n)
}

/// The module path of a file below `src/` (`backend/local/mod.rs` → `backend::local`).
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file that the longest prefix of `path` names, if any.
fn file_of(
    modules: &std::collections::BTreeMap<Vec<String>, String>,
    path: &[String],
) -> Option<String> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).cloned())
}

/// Every `crate::…` and `super::…` path in `code`, braces expanded one level
/// (`crate::a::{b, c::d}` → `a::b`, `a::c::d`), resolved against `me`.
fn named_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("::") {
        // Find the root word before this `::`.
        let start = code[..at].rfind(|c: char| !ident(c)).map_or(0, |i| i + 1);
        let root = &code[start..at];
        let base: Vec<String> = match root {
            "crate" => Vec::new(),
            // `super` of `a::b` (a/b.rs or a/b/mod.rs) is `a`.
            "super" => me[..me.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        if start > 0 && (bytes[start - 1] == b':') {
            continue;
        }
        // Segments after the root.
        let mut segs = base.clone();
        let mut rest = &code[at + 2..];
        loop {
            if let Some(inner) = rest.strip_prefix('{') {
                let end = inner.find('}').unwrap_or(inner.len());
                for item in inner[..end].split(',') {
                    let item = item.trim().split(" as ").next().unwrap_or("");
                    let mut p = segs.clone();
                    p.extend(
                        item.split("::")
                            .map(str::trim)
                            .take_while(|s| !s.is_empty() && s.chars().all(ident))
                            .map(String::from),
                    );
                    out.push(p);
                }
                break;
            }
            let len = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
            if len == 0 {
                break;
            }
            segs.push(rest[..len].to_string());
            rest = &rest[len..];
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        out.push(segs);
    }
    out
}

#[test]
fn imports_run_down_the_layers() {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let rels: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    let modules: std::collections::BTreeMap<Vec<String>, String> =
        rels.iter().map(|r| (module_of(r), r.clone())).collect();
    let mut unplaced = Vec::new();
    let mut up = Vec::new();
    let mut used = vec![false; STILL_UP.len()];
    let mut arrows = 0;
    for (f, rel) in files.iter().zip(&rels) {
        let Some(mine) = layer_of(rel) else {
            unplaced.push(rel.clone());
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        // Unit tests may reach any layer for their fixtures.
        let code = text.split("#[cfg(test)]").next().unwrap();
        let me = module_of(rel);
        let mut seen = std::collections::BTreeSet::new();
        for path in named_paths(code, &me) {
            let Some(target) = file_of(&modules, &path) else {
                continue;
            };
            if target == *rel || !seen.insert(target.clone()) {
                continue;
            }
            arrows += 1;
            let Some(theirs) = layer_of(&target) else {
                continue;
            };
            if theirs <= mine {
                continue;
            }
            match STILL_UP
                .iter()
                .position(|(from, to, _)| rel.starts_with(from) && target.starts_with(to))
            {
                Some(i) => used[i] = true,
                None => up.push(format!(
                    "src/{rel} (layer {mine}) names src/{target} (layer {theirs}): `{}`",
                    path.join("::")
                )),
            }
        }
    }
    assert!(
        arrows >= 150,
        "only {arrows} arrows read: is the parser still right?"
    );
    assert!(
        unplaced.is_empty(),
        "give these files a layer in LAYERS: {unplaced:?}"
    );
    assert!(
        up.is_empty(),
        "imports that run up the layers (move the item down, or the importer up):\n{}",
        up.join("\n")
    );
    let stale: Vec<_> = (STILL_UP.iter().zip(&used))
        .filter(|(_, u)| !**u)
        .map(|((from, to, _), _)| format!("{from} -> {to}"))
        .collect();
    assert!(
        stale.is_empty(),
        "these arrows no longer run up: take them out of STILL_UP: {stale:?}"
    );
}
