//! Step 4, staging: copies every file a plan writes into `.distributor-staging/<op>/new/`,
//! hashing each byte as it is copied (SPEC §6), on several threads at once.
//!
//! Why threads: staging many small files is bound by creating them (the kernel's inode
//! allocation and the copy are CPU work), and large files by copying and hashing; both
//! scale with cores, which one thread leaves idle. The outcome does not depend on the
//! interleaving: each file lands at its own path, the fingerprints come back in plan
//! order, and when files fail the error reported is the first failing file's in plan
//! order (every file before it is always attempted, later ones are skipped).
//!
//! Must never: write anywhere but `new/`, follow a symlink, or accept a file whose bytes
//! differ from the manifest.

use crate::backend::local::{self, Fingerprint, fingerprint_of};
use crate::error::Result;
use crate::failpoint;
use crate::parallel;
use crate::plan::FileAction;
use crate::source::Source;
use std::path::Path;

/// Observes a publication's staging; the CLI draws a progress bar from it. Called from
/// the staging threads, so implementations are `Sync` and their calls cheap.
pub trait Progress: Sync + std::fmt::Debug {
    /// Staging starts: `files` files of `bytes` bytes in all.
    fn start(&self, files: u64, bytes: u64);
    /// `n` more bytes were copied.
    fn bytes(&self, n: u64);
    /// One more file is staged.
    fn file_done(&self);
    /// Staging ended, done or failed: clear whatever was drawn.
    fn finish(&self);
}

/// Copy buffer per thread: large enough that big files take few system calls.
const BUF_SIZE: usize = 1 << 20;

/// Stages `files` under `new_root`; returns each file's fingerprint, in the order of
/// `files`.
pub(super) fn stage(
    files: &[&FileAction],
    source: &Source,
    new_root: &Path,
    progress: Option<&dyn Progress>,
) -> Result<Vec<Fingerprint>> {
    if let Some(p) = progress {
        p.start(files.len() as u64, files.iter().map(|f| f.size).sum());
    }
    let result = make_parent_dirs(files.iter().map(|f| f.path.as_str()), new_root)
        .and_then(|()| copy_all(files, source, new_root, progress));
    if let Some(p) = progress {
        p.finish();
    }
    result
}

/// Creates the parent directories of `paths` under `root` up front (staging's `new/` and
/// `old/` trees), so that the copying threads only ever create files and never race for a
/// directory. On one thread: creating entries in one directory takes its lock, and the
/// top-level directories all share `root`.
pub(super) fn make_parent_dirs<'p>(
    paths: impl Iterator<Item = &'p str>,
    root: &Path,
) -> Result<()> {
    let mut dirs: Vec<&str> = paths
        .filter_map(|p| p.rsplit_once('/').map(|(d, _)| d))
        .collect();
    // A parent sorts before its children: each is made once, after its parent.
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        local::make_dirs(root, d)?;
    }
    Ok(())
}

fn copy_all(
    files: &[&FileAction],
    source: &Source,
    new_root: &Path,
    progress: Option<&dyn Progress>,
) -> Result<Vec<Fingerprint>> {
    // Every file is worth a thread: creating it alone costs more than starting one.
    parallel::try_map_on(
        parallel::MAX_THREADS,
        files,
        || vec![0u8; BUF_SIZE],
        |f, buf| stage_one(f, source, new_root, buf, progress),
    )
}

fn stage_one(
    f: &FileAction,
    source: &Source,
    new_root: &Path,
    buf: &mut [u8],
    progress: Option<&dyn Progress>,
) -> Result<Fingerprint> {
    failpoint::hit("during_staging");
    let mut on_bytes = |n: u64| {
        if let Some(p) = progress {
            p.bytes(n);
        }
    };
    let c = local::copy_hashed(
        &source.file(&f.path),
        &new_root.join(&f.path),
        buf,
        &mut on_bytes,
    )?;
    if c.size != f.size || c.sha256 != f.sha256 {
        return Err(crate::source::content_mismatch(
            &f.path, c.size, &c.sha256, f.size, &f.sha256,
        ));
    }
    if let Some(p) = progress {
        p.file_done();
    }
    Ok(fingerprint_of(&c.metadata, &f.sha256))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FileOp;
    use crate::source::Source;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Recorder {
        events: Mutex<Vec<String>>,
        bytes: AtomicUsize,
        files: AtomicUsize,
    }

    impl Progress for Recorder {
        fn start(&self, files: u64, bytes: u64) {
            self.events
                .lock()
                .unwrap()
                .push(format!("start {files} {bytes}"));
        }
        fn bytes(&self, n: u64) {
            self.bytes.fetch_add(n as usize, Ordering::Relaxed);
        }
        fn file_done(&self) {
            self.files.fetch_add(1, Ordering::Relaxed);
        }
        fn finish(&self) {
            self.events.lock().unwrap().push("finish".into());
        }
    }

    fn bundle(dir: &Path, n: usize) -> Source {
        for i in 0..n {
            let p = dir.join(format!("d{}/f{i}", i % 7));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("content {i}").repeat(i % 5 + 1)).unwrap();
        }
        crate::source::write_manifest(dir, "s", "2026-12-02T06:00:00Z").unwrap();
        Source::open(dir).unwrap()
    }

    fn actions(src: &Source) -> Vec<FileAction> {
        src.manifest
            .outputs
            .iter()
            .map(|o| FileAction {
                path: o.path.clone(),
                op: FileOp::Create,
                size: o.size,
                sha256: o.sha256.clone(),
            })
            .collect()
    }

    #[test]
    fn stages_every_file_and_returns_fingerprints_in_plan_order() {
        let tmp = tempfile::tempdir().unwrap();
        let src = bundle(&tmp.path().join("b"), 40);
        let files = actions(&src);
        let refs: Vec<&FileAction> = files.iter().collect();
        let new_root = tmp.path().join("new");
        std::fs::create_dir(&new_root).unwrap();
        let rec = Recorder::default();
        let fps = stage(&refs, &src, &new_root, Some(&rec)).unwrap();
        assert_eq!(fps.len(), files.len());
        for (f, fp) in files.iter().zip(&fps) {
            let md = std::fs::symlink_metadata(new_root.join(&f.path)).unwrap();
            assert!(fp.matches(&md), "{}", f.path);
            assert_eq!(fp.sha256, f.sha256);
            assert_eq!(
                std::fs::read(new_root.join(&f.path)).unwrap(),
                std::fs::read(src.file(&f.path)).unwrap()
            );
        }
        let total: u64 = files.iter().map(|f| f.size).sum();
        assert_eq!(
            *rec.events.lock().unwrap(),
            vec![format!("start 40 {total}"), "finish".to_string()]
        );
        assert_eq!(rec.bytes.load(Ordering::Relaxed) as u64, total);
        assert_eq!(rec.files.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn makes_nested_and_look_alike_directories_once_each() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = ["a/f", "a.x/f", "a/b/f", "a/b.c/f", "a/b/d/f", "z/y/x/f"];
        let files: Vec<FileAction> = (0..40)
            .map(|i| FileAction {
                path: format!("{}{i}", paths[i % paths.len()]),
                op: FileOp::Create,
                size: 0,
                sha256: String::new(),
            })
            .collect();
        let refs: Vec<&FileAction> = files.iter().collect();
        make_parent_dirs(refs.iter().map(|f| f.path.as_str()), tmp.path()).unwrap();
        for d in ["a", "a.x", "a/b", "a/b.c", "a/b/d", "z/y/x"] {
            assert!(tmp.path().join(d).is_dir(), "{d}");
        }
    }

    #[test]
    fn reports_the_first_failing_file_in_plan_order() {
        let tmp = tempfile::tempdir().unwrap();
        let src = bundle(&tmp.path().join("b"), 40);
        let mut files = actions(&src);
        // Two files whose content no longer matches the manifest: the earlier one is named,
        // however the threads interleave.
        for k in [30, 7] {
            files[k].sha256 = "0".repeat(64);
        }
        let refs: Vec<&FileAction> = files.iter().collect();
        for round in 0..5 {
            let new_root = tmp.path().join(format!("new{round}"));
            std::fs::create_dir(&new_root).unwrap();
            let err = stage(&refs, &src, &new_root, None).unwrap_err().to_string();
            assert!(err.contains(&format!("'{}'", files[7].path)), "{err}");
            // Everything before the failing file was attempted.
            for f in &files[..7] {
                assert!(new_root.join(&f.path).exists(), "{}", f.path);
            }
        }
    }
}
