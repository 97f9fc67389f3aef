//! Step 4, staging: copies every file a plan writes into `.distributor-staging/<op>/new/`
//! (flat: each file named by its action's index, so no directory is made), hashing each
//! byte as it is copied (SPEC §6), on several threads at once.
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
use std::path::{Path, PathBuf};

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

/// Stages each file of `files` at the path paired with it (in an existing directory);
/// returns each file's fingerprint, in the order of `files`.
pub(super) fn stage(
    files: &[(&FileAction, PathBuf)],
    source: &Source,
    progress: Option<&dyn Progress>,
) -> Result<Vec<Fingerprint>> {
    if let Some(p) = progress {
        p.start(files.len() as u64, files.iter().map(|(f, _)| f.size).sum());
    }
    // Every file is worth a thread: creating it alone costs more than starting one.
    let result = parallel::try_map_on(
        parallel::MAX_THREADS,
        files,
        || vec![0u8; BUF_SIZE],
        |(f, to), buf| stage_one(f, source, to, buf, progress),
    );
    if let Some(p) = progress {
        p.finish();
    }
    result
}

fn stage_one(
    f: &FileAction,
    source: &Source,
    to: &Path,
    buf: &mut [u8],
    progress: Option<&dyn Progress>,
) -> Result<Fingerprint> {
    failpoint::hit("during_staging");
    let mut on_bytes = |n: u64| {
        if let Some(p) = progress {
            p.bytes(n);
        }
    };
    let c = local::copy_hashed(&source.file(&f.path), to, buf, &mut on_bytes)?;
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

    /// Each action paired with `root/<index>`, as the executor stages them.
    fn targets<'a>(files: &'a [FileAction], root: &Path) -> Vec<(&'a FileAction, PathBuf)> {
        files
            .iter()
            .enumerate()
            .map(|(i, f)| (f, root.join(i.to_string())))
            .collect()
    }

    #[test]
    fn stages_every_file_and_returns_fingerprints_in_plan_order() {
        let tmp = tempfile::tempdir().unwrap();
        let src = bundle(&tmp.path().join("b"), 40);
        let files = actions(&src);
        let new_root = tmp.path().join("new");
        std::fs::create_dir(&new_root).unwrap();
        let pairs = targets(&files, &new_root);
        let rec = Recorder::default();
        let fps = stage(&pairs, &src, Some(&rec)).unwrap();
        assert_eq!(fps.len(), files.len());
        for ((f, to), fp) in pairs.iter().zip(&fps) {
            let md = std::fs::symlink_metadata(to).unwrap();
            assert_eq!(*fp, fingerprint_of(&md, &fp.sha256), "{}", f.path);
            assert_eq!(fp.sha256, f.sha256);
            assert_eq!(
                std::fs::read(to).unwrap(),
                std::fs::read(src.file(&f.path)).unwrap()
            );
        }
        // Flat: nothing but the staged files, no directory.
        assert_eq!(std::fs::read_dir(&new_root).unwrap().count(), files.len());
        let total: u64 = files.iter().map(|f| f.size).sum();
        assert_eq!(
            *rec.events.lock().unwrap(),
            vec![format!("start 40 {total}"), "finish".to_string()]
        );
        assert_eq!(rec.bytes.load(Ordering::Relaxed) as u64, total);
        assert_eq!(rec.files.load(Ordering::Relaxed), 40);
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
        for round in 0..5 {
            let new_root = tmp.path().join(format!("new{round}"));
            std::fs::create_dir(&new_root).unwrap();
            let pairs = targets(&files, &new_root);
            let err = stage(&pairs, &src, None).unwrap_err().to_string();
            assert!(err.contains(&format!("'{}'", files[7].path)), "{err}");
            // Everything before the failing file was attempted.
            for (f, to) in &pairs[..7] {
                assert!(to.exists(), "{}", f.path);
            }
        }
    }
}
