//! Source bundles (SPEC §3): the manifest model, its verification and the source digest.
//!
//! [`Source::open`] verifies structure and sizes before any planning; content hashes are
//! verified later from the bytes actually copied (see `execute::stage`), or read by a dry
//! run, so every published byte is checked exactly once.

mod generate;

mod open;

pub use crate::paths::relative_link_target;
pub(crate) use crate::paths::{ancestors, check_path_set, check_safe_path};
pub use generate::write_manifest;
pub(crate) use generate::write_manifest_excluding;
pub(crate) use open::{hash_file, hash_source, open_source, open_source_sized};

use crate::error::{Error, Result, SourceError};
use crate::fs::tree::Tree;
use crate::hash::ContentHash;
use crate::model::{SourceRef, is_valid_source_id, parse_time};
use chrono::{DateTime, FixedOffset};
use foldhash::HashSet;
use rustix::fs::FileType;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// File name of the manifest at the bundle root.
pub const MANIFEST_FILE: &str = "distributor-manifest.json";

/// One output file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputEntry {
    /// Safe relative path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256 (64 lowercase hex characters as written).
    pub sha256: ContentHash,
}

/// One link of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    /// Safe relative path of the link.
    pub path: String,
    /// An output path of the same manifest.
    pub target: String,
}

/// `distributor-manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Must be 1.
    pub manifest_version: u32,
    /// Source id.
    pub id: String,
    /// RFC 3339 with offset.
    pub created_at: String,
    /// Output files.
    pub outputs: Vec<OutputEntry>,
    /// Links (optional).
    #[serde(default)]
    pub links: Vec<LinkEntry>,
}

impl Manifest {
    /// Checks every rule of §3.1 and §3.2 that needs no filesystem.
    pub fn validate(&self) -> std::result::Result<DateTime<FixedOffset>, String> {
        if self.manifest_version != 1 {
            return Err(format!(
                "manifest_version {} is not supported, accepted: 1",
                self.manifest_version
            ));
        }
        if !is_valid_source_id(&self.id) {
            return Err(format!(
                "id '{}' is invalid: accepted are letters, digits, '.', '_', ':', '+' or '-', starting with a letter or digit, at most 128 characters",
                self.id
            ));
        }
        let created = parse_time(&self.created_at).ok_or_else(|| {
            format!(
                "created_at '{}' is not RFC 3339 with an offset (e.g. 2026-12-02T06:00:00Z)",
                self.created_at
            )
        })?;
        for (i, o) in self.outputs.iter().enumerate() {
            check_safe_path(&o.path)
                .map_err(|e| format!("outputs[{i}].path '{}': {e}", o.path.escape_debug()))?;
        }
        // Link targets are looked up among the output paths: a scan of every output per
        // link would be quadratic in a manifest of thousands of links.
        let output_paths: HashSet<&str> = if self.links.is_empty() {
            HashSet::default()
        } else {
            self.outputs.iter().map(|o| o.path.as_str()).collect()
        };
        for (i, l) in self.links.iter().enumerate() {
            check_safe_path(&l.path)
                .map_err(|e| format!("links[{i}].path '{}': {e}", l.path.escape_debug()))?;
            if !output_paths.contains(l.target.as_str()) {
                return Err(format!(
                    "links[{i}].target '{}' is not an output path of this manifest",
                    l.target
                ));
            }
        }
        check_path_set(
            self.outputs
                .iter()
                .map(|o| o.path.as_str())
                .chain(self.links.iter().map(|l| l.path.as_str())),
        )
        .map_err(|e| e.to_string())?;
        Ok(created)
    }

    /// The source digest of §3.3.
    pub fn digest(&self) -> String {
        let mut outputs: Vec<&OutputEntry> = self.outputs.iter().collect();
        outputs.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        let mut links: Vec<&LinkEntry> = self.links.iter().collect();
        links.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        // One line per entry, hashed as it is written through a small buffer (at a million
        // outputs the whole text would be a hundred megabytes).
        use std::io::Write as _;
        let mut text =
            std::io::BufWriter::with_capacity(1 << 16, crate::hash::HashWriter::default());
        for o in outputs {
            let _ = writeln!(text, "o\0{}\0{}\0{}", o.path, o.size, o.sha256);
        }
        for l in links {
            for part in ["l\0", &l.path, "\0", &l.target, "\n"] {
                let _ = text.write_all(part.as_bytes());
            }
        }
        let hasher = text.into_inner().ok().expect("hashing does not fail");
        format!("sha256:{}", hasher.finish_hex())
    }
}

/// The error for an output whose bytes are not what the manifest lists: the source is
/// invalid. One wording for staging, dry runs and `validate --source`.
pub(crate) fn content_mismatch(
    path: &str,
    size: u64,
    sha256: &ContentHash,
    listed_size: u64,
    listed_sha256: &ContentHash,
) -> Error {
    Error::Source(SourceError::Changed {
        path: path.to_string(),
        size,
        sha256: sha256.hex(),
        listed_size,
        listed_sha256: listed_sha256.hex(),
    })
}

/// A source whose manifest and structure are verified.
#[derive(Debug, Clone)]
pub struct Source {
    /// Bundle directory.
    pub dir: PathBuf,
    /// The manifest. Shared: an `unchanged` report lists its outputs from it, without a
    /// row of its own per file.
    pub manifest: std::sync::Arc<Manifest>,
    /// Parsed `created_at`.
    pub created: DateTime<FixedOffset>,
    /// Source digest.
    pub digest: String,
}

impl Source {
    /// Reads `<dir>/distributor-manifest.json` and verifies it and the files' structure.
    pub fn open(dir: &Path) -> Result<Source> {
        Source::open_manifest(&dir.join(MANIFEST_FILE))
    }

    /// [`Source::open`] for the bundle directory `dir` that the config's `source.path`
    /// names (the default for `--source`). When that directory, or its manifest, is not
    /// there, the error says so first and, for a path the config wrote relative, that it
    /// is taken relative to the config file, not the working directory:
    /// `source.path 'out/site' is taken relative to the config file /x/pipeline.yaml:
    /// /x/out/site does not exist`.
    pub fn open_configured(dir: &Path, config: &crate::config::Config) -> Result<Source> {
        let origin = config
            .path_origin("source.path")
            .unwrap_or_else(|| "source.path".to_string());
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::invalid_source(format!(
                    "{origin}: {} does not exist (pass --source DIR, or correct source.path in {})",
                    dir.display(),
                    config.file.display()
                )));
            }
            Ok(m) if !m.is_dir() => {
                return Err(Error::invalid_source(format!(
                    "{origin}: {} is not a directory; source.path names the bundle directory, the one holding {MANIFEST_FILE}",
                    dir.display()
                )));
            }
            _ => {}
        }
        Source::open(dir).map_err(|e| match e {
            Error::Source(SourceError::ManifestUnreadable {
                file, error, hint, ..
            }) => Error::Source(SourceError::ManifestUnreadable {
                file,
                error,
                hint,
                origin: Some(origin),
            }),
            e => e,
        })
    }

    /// Reads a manifest file and verifies it and the files' structure; the bundle
    /// directory is the file's directory.
    pub fn open_manifest(file: &Path) -> Result<Source> {
        let source = Source::read_manifest(file)?;
        source.check_files()?;
        Ok(source)
    }

    /// Reads a manifest file and verifies the manifest alone.
    fn read_manifest(file: &Path) -> Result<Source> {
        let dir = file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        // A manifest over the limit is refused before it is read (the scale issue).
        let limit = crate::limits::manifest_bytes()?;
        if let Ok(m) = std::fs::metadata(file)
            && m.len() > limit
        {
            return Err(Error::invalid_source(crate::limits::over(
                &format!("manifest {}", file.display()),
                m.len(),
                limit,
                crate::limits::MANIFEST_VAR,
            )));
        }
        let text = std::fs::read(file).map_err(|e| {
            let hint = match std::fs::metadata(&dir) {
                // No bundle directory at all: there is nothing to write a manifest for.
                Err(d) if d.kind() == std::io::ErrorKind::NotFound => {
                    format!("; the bundle directory {} does not exist", dir.display())
                }
                Ok(m) if !m.is_dir() => format!("; {} is not a directory", dir.display()),
                _ if e.kind() == std::io::ErrorKind::NotFound => format!(
                    "; write it with `distributor manifest {} --id ID` once the bundle is complete",
                    dir.display()
                ),
                _ => String::new(),
            };
            Error::Source(SourceError::ManifestUnreadable {
                file: file.to_path_buf(),
                error: e,
                hint,
                origin: None,
            })
        })?;
        let mut manifest: Manifest =
            serde_json::from_slice(&text).map_err(|e| SourceError::Manifest {
                file: file.to_path_buf(),
                message: e.to_string(),
            })?;
        drop(text);
        // Parsing grows the lists by doubling: up to half of each is spare, held for the
        // whole run (a million outputs: tens of megabytes).
        manifest.outputs.shrink_to_fit();
        manifest.links.shrink_to_fit();
        let created = manifest
            .validate()
            .map_err(|message| SourceError::Manifest {
                file: file.to_path_buf(),
                message,
            })?;
        let digest = manifest.digest();
        Ok(Source {
            dir,
            manifest: manifest.into(),
            created,
            digest,
        })
    }

    /// Checks that every output exists in the bundle as a regular file (not a symlink) of
    /// the listed size, reached through real directories; the error names the first output
    /// in manifest order that is not.
    pub fn check_files(&self) -> Result<()> {
        if !all_files_sound(&self.dir, &self.manifest.outputs) {
            // Something is wrong: walk each path again, on several threads, to name the
            // first output in manifest order that fails and why.
            crate::parallel::try_map(&self.manifest.outputs, HashSet::default, |o, seen| {
                check_bundle_file(&self.dir, &o.path, o.size, seen)
            })?;
        }
        Ok(())
    }

    /// Reads and hashes every output and compares it with the manifest. Publication never
    /// needs this (it hashes what it copies, SPEC §3.1); `validate --source` does, so an
    /// operator checking a bundle learns about bad content before publishing it.
    pub fn verify_content(&self) -> Result<()> {
        for o in &self.manifest.outputs {
            let (size, sha) = hash_file(&self.file(&o.path))?;
            if size != o.size || sha != o.sha256 {
                return Err(content_mismatch(&o.path, size, &sha, o.size, &o.sha256));
            }
        }
        Ok(())
    }

    /// The identity recorded in state and reports.
    pub fn source_ref(&self) -> SourceRef {
        SourceRef {
            id: self.manifest.id.clone(),
            created_at: self.manifest.created_at.clone(),
            digest: self.digest.clone(),
        }
    }

    /// Path of an output inside the bundle directory.
    pub fn file(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// The directories holding `paths` (bundle-relative output paths), each opened once
    /// from the bundle directory down without following a symlink, so that each file is
    /// then opened by its name in its directory's handle ([`SourceDirs::file`]) rather
    /// than by a full path the kernel walks again for every file.
    pub fn dirs<'p>(&'p self, paths: impl IntoIterator<Item = &'p str>) -> Result<SourceDirs<'p>> {
        let mut tree =
            Tree::open(&self.dir).map_err(|e| Error::io("open directory", &self.dir, e))?;
        for d in crate::paths::ancestors(paths) {
            // A directory that is missing or no longer a real one is not opened: its
            // files are refused when they are opened (`SourceFile::open`).
            tree.open_dir(d)
                .map_err(|e| Error::io("open directory", self.dir.join(d), e))?;
        }
        Ok(SourceDirs {
            tree,
            dir: &self.dir,
        })
    }
}

/// Handles of a source bundle's directories ([`Source::dirs`]).
pub struct SourceDirs<'p> {
    tree: Tree<'p>,
    dir: &'p Path,
}

impl<'p> SourceDirs<'p> {
    /// The output `rel`, to be opened in its directory's handle.
    pub fn file<'a>(&'a self, rel: &'a str) -> SourceFile<'a> {
        SourceFile {
            dirs: Some(&self.tree),
            rel,
            path: self.dir.join(rel),
        }
    }
}

/// One output of a source bundle, to read: opened in its directory's handle when it
/// comes from [`SourceDirs::file`], else by its path.
pub struct SourceFile<'a> {
    dirs: Option<&'a Tree<'a>>,
    rel: &'a str,
    path: PathBuf,
}

impl<'a> SourceFile<'a> {
    /// An output opened by its full path (its directories are the producer's; the last
    /// segment is never followed).
    pub fn at_path(path: PathBuf) -> SourceFile<'static> {
        SourceFile {
            dirs: None,
            rel: "",
            path,
        }
    }

    /// Its path, for messages (and for storage that opens sources by path).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens it for reading without blocking and checks that it is a regular file (SPEC
    /// §13): a FIFO, device, symlink or anything else swapped in after the source was
    /// checked is an invalid source, and so is a file whose directory is no longer a real
    /// directory of the bundle (it is never looked up through a symlink). Returns the
    /// file and the size `fstat` gave it when opened.
    pub fn open(&self) -> Result<(std::fs::File, u64)> {
        let Some(tree) = self.dirs else {
            return open_source_sized(&self.path);
        };
        match tree.open_file_stat(self.rel) {
            Ok(opened) => Ok(opened),
            Err(e)
                if e.kind() == std::io::ErrorKind::InvalidInput || crate::fs::is_redirect(&e) =>
            {
                Err(Error::invalid_source(format!(
                    "{}: {e}; a bundle holds regular files only",
                    self.path.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !tree.has_parent(self.rel) => {
                Err(Error::invalid_source(format!(
                    "{}: its directory is missing or is not a real directory (a symlink?) any more; a bundle holds regular files in real directories only",
                    self.path.display()
                )))
            }
            Err(e) => Err(Error::io("open", &self.path, e)),
        }
    }
}

/// True when every output is a regular file of the listed size reached through real
/// directories: each directory is opened once without following a symlink and each file
/// looked up in its directory's handle (see [`crate::fs::tree`]). False on anything else,
/// including a failure to look: [`check_bundle_file`] then says what is wrong.
fn all_files_sound(dir: &Path, outputs: &[OutputEntry]) -> bool {
    let Ok(mut tree) = Tree::open(dir) else {
        return false;
    };
    for d in crate::source::ancestors(outputs.iter().map(|o| o.path.as_str())) {
        if !matches!(tree.open_dir(d), Ok(true)) {
            return false;
        }
    }
    crate::parallel::all(
        outputs,
        |o| matches!(tree.lstat(&o.path), Ok(m) if m.file_type == FileType::RegularFile && m.size == o.size),
    )
}

/// An output must be a regular file of the listed size, reached through real directories.
/// `dirs_checked` holds the bundle-relative directories already found to be real ones.
fn check_bundle_file<'a>(
    dir: &Path,
    rel: &'a str,
    size: u64,
    dirs_checked: &mut HashSet<&'a str>,
) -> Result<()> {
    let mut cur = dir.to_path_buf();
    let segs: Vec<&str> = rel.split('/').collect();
    let mut end = 0;
    for (i, seg) in segs.iter().enumerate() {
        cur.push(seg);
        end += seg.len() + usize::from(i > 0);
        let last = i + 1 == segs.len();
        if !last && dirs_checked.contains(&rel[..end]) {
            continue;
        }
        let md = std::fs::symlink_metadata(&cur).map_err(|e| {
            Error::invalid_source(format!("output '{rel}': {}: {e}", cur.display()))
        })?;
        if md.file_type().is_symlink() {
            return Err(Error::invalid_source(format!(
                "output '{rel}': {} is a symlink; outputs must be regular files",
                cur.display()
            )));
        }
        if last && !md.is_file() {
            return Err(Error::invalid_source(format!(
                "output '{rel}': {} is not a regular file",
                cur.display()
            )));
        }
        if !last && !md.is_dir() {
            return Err(Error::invalid_source(format!(
                "output '{rel}': {} is not a directory",
                cur.display()
            )));
        }
        if !last {
            dirs_checked.insert(&rel[..end]);
        }
        if last && md.len() != size {
            return Err(Error::invalid_source(format!(
                "output '{rel}': {}: size is {} bytes, the manifest says {size}",
                cur.display(),
                md.len()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(path: &str, size: u64, sha: &str) -> OutputEntry {
        OutputEntry {
            path: path.into(),
            size,
            sha256: ContentHash::parse(sha).unwrap(),
        }
    }

    #[test]
    fn digest_matches_spec_test_vector() {
        let m = Manifest {
            manifest_version: 1,
            id: "x".into(),
            created_at: "2026-12-02T06:00:00Z".into(),
            outputs: vec![
                out(
                    "maps/temp.png",
                    3,
                    "8f8cbb7dcf46e0bc7d53265749a6c17d116093a6ba95e442764060c76fd4a86c",
                ),
                out(
                    "forecast.json",
                    2,
                    "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                ),
            ],
            links: vec![LinkEntry {
                path: "current.png".into(),
                target: "maps/temp.png".into(),
            }],
        };
        assert_eq!(
            m.digest(),
            "sha256:88612630aea63ae33a81ed5e89fdda9cc31d58cb1fafd82c17070e2689d531d8"
        );
        assert_eq!(
            crate::hash::sha256_hex(b"{}"),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert!(m.validate().is_ok());
    }
}
