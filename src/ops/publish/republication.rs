//! The fast path of a source published again unchanged (a [`Republication`]): decided
//! from the manifest, the journal's placement fingerprints and storage alone, without
//! reading the state's records or running the general planner.

use crate::backend::{BundleStore, types};
use crate::error::Result;
use crate::plan::{DestinationPlan, Republication};
use crate::progress::{Bytes, Ticker};
use std::path::Path;

/// Debug builds (every test run) check that the general planner decides what a
/// republication did, from the same storage: `general` is its plan (not made in release
/// builds). Outside the lock another process may change storage between the two looks:
/// a difference while one holds the lock, or has left an unfinished operation, is that
/// process's work, not a planner's disagreement.
pub(super) fn check_republication(
    plan: &DestinationPlan,
    store: &dyn BundleStore,
    general: impl FnOnce() -> Result<DestinationPlan>,
) -> Result<()> {
    if cfg!(debug_assertions) {
        let mut listed = plan.clone();
        listed.files = plan.file_actions().map(|f| f.into_owned()).collect();
        listed.outputs_unchanged = None;
        let general = general()?;
        let busy = || -> Result<bool> {
            Ok(store.lock_holder()?.is_some() || !store.staging_entries()?.is_empty())
        };
        if listed != general && !busy()? {
            assert_eq!(
                listed, general,
                "a republication's plan differs from the planner's"
            );
        }
    }
    Ok(())
}

/// How many paths [`probe_republication`] probes at a time: enough to keep the probe's
/// threads busy, few enough that a chunk's listing is a few megabytes.
const REPUBLICATION_CHUNK: usize = 16_384;

/// The plan of a [`Republication`]: the manifest's paths probed in `store` a chunk at a
/// time, each chunk's listing checked and dropped. `None` when storage does not hold one
/// of its paths as recorded; the general planner then decides (and says what drifted).
pub(super) fn probe_republication(
    republication: Republication,
    store: &dyn BundleStore,
    fingerprints: &types::Fingerprints,
    bundle: &Path,
    progress: Ticker<'_>,
) -> Result<Option<DestinationPlan>> {
    let source = republication.source();
    let m = &source.manifest;
    let total = 1 + m.outputs.len() + m.links.len();
    progress.start("paths probed", Some(total as u64), Bytes::Uncounted);
    let list_none = foldhash::HashSet::default();
    let state_file = [(crate::state::STATE_FILE, None)];
    if !Republication::state_file_holds(&store.probe(&state_file, &list_none, progress)?) {
        return Ok(None);
    }
    let mut paths = Vec::with_capacity(REPUBLICATION_CHUNK.min(m.outputs.len() + m.links.len()));
    for chunk in m.outputs.chunks(REPUBLICATION_CHUNK) {
        paths.clear();
        for o in chunk {
            // Proven by placement fingerprints alone: a file they do not prove is hashed
            // by the general probe, once.
            let Some(placed) = fingerprints.vouching(&o.path, &o.sha256) else {
                return Ok(None);
            };
            let proof = types::Proof {
                sha256: &o.sha256,
                placed: Some(placed),
                or_hash: false,
            };
            paths.push((o.path.as_str(), Some(proof)));
        }
        if !Republication::outputs_hold(&store.probe(&paths, &list_none, progress)?, chunk) {
            return Ok(None);
        }
    }
    for chunk in m.links.chunks(REPUBLICATION_CHUNK) {
        paths.clear();
        paths.extend(chunk.iter().map(|l| (l.path.as_str(), None)));
        if !Republication::links_hold(&store.probe(&paths, &list_none, progress)?, chunk) {
            return Ok(None);
        }
    }
    Ok(Some(republication.plan(bundle)))
}
