//! `distributor manifest DIR --id ID`: writes the manifest of every regular file under DIR.
//!
//! Symlinks to regular files inside DIR become links; any other symlink, and any special
//! file, is an error, and then no manifest is written.

use super::hash_file;
use super::{LinkEntry, MANIFEST_FILE, Manifest, OutputEntry};
use crate::error::{Error, IoContext, Result};
use crate::globs::PathGlobs;
use crate::model::{is_valid_source_id, parse_time};
use crate::progress::{Bytes, Ticker};
use std::path::{Path, PathBuf};

/// Builds and writes `<dir>/distributor-manifest.json`; returns the manifest.
pub fn write_manifest(dir: &Path, id: &str, created_at: &str) -> Result<Manifest> {
    write_manifest_excluding(dir, id, created_at, &PathGlobs::default(), Ticker::NONE)
}

/// [`write_manifest`], leaving out every file, link and directory whose bundle-relative
/// path `exclude` matches (a matched directory with everything below it: `--exclude
/// .git`); `progress` hears of the files found, then of the files and bytes hashed.
pub(crate) fn write_manifest_excluding(
    dir: &Path,
    id: &str,
    created_at: &str,
    exclude: &PathGlobs,
    progress: Ticker<'_>,
) -> Result<Manifest> {
    if !is_valid_source_id(id) {
        return Err(Error::Usage(format!(
            "--id '{id}' is invalid: accepted are letters, digits, '.', '_', ':', '+' or '-', starting with a letter or digit, at most 128 characters"
        )));
    }
    if parse_time(created_at).is_none() {
        return Err(Error::Usage(format!(
            "--created-at '{created_at}' is not RFC 3339 with an offset (e.g. 2026-12-02T06:00:00Z)"
        )));
    }
    let md = std::fs::metadata(dir).ctx("read", dir)?;
    if !md.is_dir() {
        return Err(Error::Usage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let mut files = Vec::new();
    let mut links = Vec::new();
    progress.start("files found", None, Bytes::Uncounted);
    walk(dir, "", exclude, &mut files, &mut links, progress)?;
    progress.start("files", Some(files.len() as u64), Bytes::Counted);
    let mut outputs = Vec::with_capacity(files.len());
    for rel in files {
        let (size, sha256) = hash_file(&dir.join(&rel))?;
        progress.bytes(size);
        progress.done(1);
        outputs.push(OutputEntry {
            path: rel,
            size,
            sha256,
        });
    }
    let mut link_entries = Vec::new();
    for (rel, target) in links {
        let target = resolve_inside(dir, &rel).ok_or_else(|| {
            Error::invalid_source(format!(
                "symlink {rel} -> {} points outside {} (or at nothing)",
                target.display(),
                dir.display()
            ))
        })?;
        if !outputs.iter().any(|o| o.path == target) {
            return Err(Error::invalid_source(format!(
                "symlink {rel} -> {target} does not point at a regular file of the bundle"
            )));
        }
        link_entries.push(LinkEntry { path: rel, target });
    }
    outputs.sort_by(|a, b| a.path.cmp(&b.path));
    link_entries.sort_by(|a, b| a.path.cmp(&b.path));
    let manifest = Manifest {
        manifest_version: 1,
        id: id.to_string(),
        created_at: created_at.to_string(),
        outputs,
        links: link_entries,
    };
    manifest
        .validate()
        .map_err(|e| Error::invalid_source(format!("{}: {e}", dir.display())))?;
    let mut text = serde_json::to_string_pretty(&manifest)?;
    text.push('\n');
    let file = dir.join(MANIFEST_FILE);
    std::fs::write(&file, text).ctx("write", &file)?;
    Ok(manifest)
}

fn walk(
    root: &Path,
    rel: &str,
    exclude: &PathGlobs,
    files: &mut Vec<String>,
    links: &mut Vec<(String, PathBuf)>,
    progress: Ticker<'_>,
) -> Result<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    for entry in std::fs::read_dir(&dir).ctx("list", &dir)? {
        let entry = entry.ctx("list", &dir)?;
        let name = entry.file_name();
        let name = name.to_str().ok_or_else(|| {
            Error::invalid_source(format!(
                "{}: file name is not UTF-8",
                entry.path().display()
            ))
        })?;
        let child = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry.file_type().ctx("stat", entry.path())?;
        if rel.is_empty() && name == MANIFEST_FILE {
            // It is about to be replaced: never write through a symlink or into a directory.
            if !ft.is_file() {
                return Err(Error::invalid_source(format!(
                    "{} exists and is not a regular file; remove it first",
                    entry.path().display()
                )));
            }
            continue;
        }
        if exclude.is_match(&child) {
            continue;
        }
        if ft.is_symlink() {
            let target = std::fs::read_link(entry.path()).ctx("read link", entry.path())?;
            links.push((child, target));
        } else if ft.is_dir() {
            walk(root, &child, exclude, files, links, progress)?;
        } else if ft.is_file() {
            files.push(child);
            progress.done(1);
        } else {
            return Err(Error::invalid_source(format!(
                "{} is neither a regular file, a directory nor a symlink",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

/// Where the symlink `link` (relative to `dir`) leads, bundle-relative, when that is
/// inside `dir`: resolved by the filesystem, following the whole chain, so a relative
/// target that climbs out of `dir` and back in, or an absolute one naming a file of `dir`,
/// is the file it names. None when it leads outside `dir` or nowhere.
fn resolve_inside(dir: &Path, link: &str) -> Option<String> {
    let root = std::fs::canonicalize(dir).ok()?;
    let target = std::fs::canonicalize(dir.join(link)).ok()?;
    let rel = target.strip_prefix(&root).ok()?.to_str()?;
    (!rel.is_empty()).then(|| rel.to_string())
}
