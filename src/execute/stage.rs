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

use crate::backend::Operation;
use crate::backend::types::{Placed, Staged};
use crate::error::Result;
use crate::failpoint;
use crate::parallel;
use crate::progress::{Bytes, Ticker};
use crate::source::{Source, SourceDirs};

/// Copy buffer per thread: large enough that big files take few system calls.
const BUF_SIZE: usize = 1 << 20;

/// Stages the files of the actions `writes` (indexes into `op.actions`), on as many
/// threads as the storage suits: the fingerprint of each as staged, where the backend
/// keeps one for placing ([`crate::backend::types::Staged::as_staged`]), in the order of
/// `writes`.
pub(super) fn stage(
    operation: &Operation<'_>,
    writes: &[usize],
    source: &Source,
    progress: Ticker<'_>,
) -> Result<Vec<Option<Placed>>> {
    let op = operation.record();
    if progress.is_on() {
        let bytes = writes.iter().filter_map(|&i| op.actions[i].size).sum();
        (progress.on(&op.destination_id)).start(
            "files",
            Some(writes.len() as u64),
            Bytes::Of(bytes),
        );
    }
    // Each source directory is opened once, and each file in its directory's handle.
    let dirs = source.dirs(writes.iter().map(|&i| op.actions[i].path.as_str()))?;
    // Every file is worth a thread: creating it alone costs more than starting one.
    let result = parallel::try_map_on(
        parallel::threads_up_to(operation.store().concurrency(), writes.len()),
        writes,
        || vec![0u8; BUF_SIZE],
        |&i, buf| stage_one(operation, i, &dirs, buf, progress),
    );
    progress.finish();
    result
}

fn stage_one(
    operation: &Operation<'_>,
    i: usize,
    dirs: &SourceDirs<'_>,
    buf: &mut [u8],
    progress: Ticker<'_>,
) -> Result<Option<Placed>> {
    failpoint::hit("during_staging");
    let mut on_bytes = |n: u64| progress.bytes(n);
    let a = &operation.record().actions[i];
    let Staged {
        size,
        sha256,
        as_staged,
    } = operation.stage(i, &dirs.file(&a.path), buf, &mut on_bytes)?;
    let (want_size, want_sha) = (a.size.unwrap_or_default(), a.sha256.unwrap_or_default());
    if size != want_size || sha256 != want_sha {
        return Err(crate::source::content_mismatch(
            &a.path, size, &sha256, want_size, &want_sha,
        ));
    }
    progress.done(1);
    Ok(as_staged)
}
