//! The `unchanged` decision of a republication, reached without a record per file.
//!
//! Publishing again what a bundle path already holds is the most common run at every size
//! (an hourly job whose output did not change). At a million files, the general planner's
//! listing of storage, its map of recorded paths and its plan row per file are most of such
//! a run's memory, and none of them changes the answer when the state already records this
//! owner and this very source with exactly the manifest's paths and content: all that is
//! left to ask is whether storage still holds them. A [`Republication`] asks that a chunk
//! of paths at a time, as storage is probed, and its plan lists the files from the
//! manifest itself.
//!
//! Whatever it is not sure of (a file that drifted, a record it does not expect, a
//! directory or a symlink where a file should be) it leaves to the general planner, which
//! finds and explains it. So its decision is always the one [`super::plan_destination`]
//! reaches from the same storage; debug builds check that on every republication.

use super::planner::unchanged_reason;
use super::{DestinationPlan, Entry, LinkAction, Previous, Replaced, Storage};
use crate::config::Destination;
use crate::journal::CommittedSource;
use crate::model::{Decision, FileOp, Owner, StateMode};
use crate::source::{LinkEntry, OutputEntry, Source, relative_link_target};
use crate::state::{OwnerRecord, State, StateFile};
use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

/// A publication of the very source the state records for its owner, with the same paths
/// and content: `unchanged` if storage holds them (see the module).
pub(crate) struct Republication<'a> {
    destination: &'a Destination,
    source: &'a Source,
    /// The owner and the source the state records (the state's records themselves are not
    /// needed past [`Republication::of`], and a publication of a million files drops them).
    previous: Previous,
}

impl<'a> Republication<'a> {
    /// A republication, when `state` records the owner `pipeline_id/destination.id` with
    /// this source (same id, creation time and digest), every output and link of the
    /// manifest recorded for that owner with the same size and sha256 (or target), and
    /// nothing else recorded for it; manifest and state both sorted by path. `None`
    /// otherwise, and for object stores and releases destinations (their storage has more
    /// to say than its files: key lengths, release settings, rollback holds).
    pub(crate) fn of(
        pipeline_id: &str,
        destination: &'a Destination,
        source: &'a Source,
        state: &StateFile,
    ) -> Option<Republication<'a>> {
        let d = destination;
        if !Republication::may_be(d) {
            return None;
        }
        let StateFile::Valid(state) = state else {
            return None;
        };
        if state.mode != d.state_mode {
            return None;
        }
        let me = Owner::new(pipeline_id, d.id.clone());
        let previous = records_exactly(state, &me, source)?;
        Some(Republication {
            destination,
            source,
            previous: Previous {
                owner: previous.owner.clone(),
                source: previous.source.clone(),
            },
        })
    }

    /// A republication without the state file read: `committed` is what the journal says
    /// of the state file standing there now (its identity is the one taken when it was
    /// committed, [`crate::journal::Journal::republishable_state`]): the post-state of a
    /// publication by this owner, in this state mode, of this very source, which recorded
    /// that owner with exactly the manifest's outputs and links ([`records_exactly`] held
    /// at the commit). `None` otherwise, and where [`Republication::of`] says `None`.
    pub(crate) fn committed(
        pipeline_id: &str,
        destination: &'a Destination,
        source: &'a Source,
        committed: &CommittedSource,
    ) -> Option<Republication<'a>> {
        let d = destination;
        let m = &source.manifest;
        let sorted = m.outputs.is_sorted_by(|a, b| a.path < b.path)
            && m.links.is_sorted_by(|a, b| a.path < b.path);
        let source_ref = source.source_ref();
        let same = Republication::may_be(d)
            && sorted
            && committed.pipeline_id == pipeline_id
            && committed.destination_id == d.id.as_str()
            && committed.state_mode == d.state_mode
            && committed.source == source_ref;
        same.then(|| Republication {
            destination,
            source,
            previous: Previous {
                owner: Owner::new(pipeline_id, d.id.clone()),
                source: source_ref,
            },
        })
    }

    /// Whether a republication to `d` can be decided this way at all: a local bundle path
    /// that is not a releases destination.
    pub(crate) fn may_be(d: &Destination) -> bool {
        crate::backend::capabilities(d).keeps_state_file_id
    }

    /// The source published again.
    pub(crate) fn source(&self) -> &'a Source {
        self.source
    }

    /// Whether `storage` holds each of `outputs` (the manifest's, probed with their
    /// proofs) as a regular file proven to have its size and sha256, reached through
    /// directories.
    pub(crate) fn outputs_hold(storage: &Storage, outputs: &[OutputEntry]) -> bool {
        outputs.iter().all(|o| {
            matches!(storage.get(&o.path), Entry::File { size, sha256: Some(h) } if *size == o.size && **h == o.sha256)
                && through_dirs(storage, &o.path)
        })
    }

    /// Whether `storage` holds each of `links` as a symlink with its text, reached
    /// through directories.
    pub(crate) fn links_hold(storage: &Storage, links: &[LinkEntry]) -> bool {
        links.iter().all(|l| {
            matches!(storage.get(&l.path), Entry::Symlink { target } if *target == relative_link_target(&l.path, &l.target))
                && through_dirs(storage, &l.path)
        })
    }

    /// Whether what stands at the state file's path is one a writing plan could replace
    /// (the planner's check: a symlink, directory or special file there is a conflict).
    pub(crate) fn state_file_holds(storage: &Storage) -> bool {
        !matches!(
            storage.get(crate::state::STATE_FILE),
            Entry::Dir { .. } | Entry::Special | Entry::Symlink { .. }
        )
    }

    /// The `unchanged` plan, once storage was found to hold every path.
    pub(crate) fn plan(self, bundle_path: &Path) -> DestinationPlan {
        let d = self.destination;
        let m = &self.source.manifest;
        DestinationPlan {
            destination_id: d.id.clone(),
            bundle_path: bundle_path.to_path_buf(),
            state_mode: d.state_mode,
            takeover_mode: d.takeover,
            decision: Decision::Unchanged,
            previous: Some(self.previous),
            takeovers: Vec::new(),
            conflicts: Vec::new(),
            files: Vec::new(),
            outputs_unchanged: Some(Arc::clone(m)),
            links: (m.links.iter())
                .map(|l| LinkAction {
                    path: l.path.clone(),
                    target: l.target.clone(),
                    op: FileOp::Unchanged,
                    replaces: Some(Replaced::Link),
                })
                .collect(),
            message: unchanged_reason(&self.source.source_ref()),
            new_state: None,
        }
    }
}

/// The record of `me` in `state` when it holds `source` (same id, creation time and
/// digest) and the records of `me` are exactly the manifest's outputs (same size and
/// sha256) and links (same target): what a republication of `source` can take as
/// `unchanged` once storage holds them. Manifest and state must both be sorted by path.
pub(crate) fn records_exactly<'s>(
    state: &'s State,
    me: &Owner,
    source: &Source,
) -> Option<&'s OwnerRecord> {
    let previous = match state.mode {
        StateMode::SingleOwner => state.owners.first(),
        StateMode::SharedRoot => state.owner(me),
    }?;
    if previous.owner != *me || previous.source != source.source_ref() {
        return None;
    }
    let m = &source.manifest;
    let outputs = records_match(
        &m.outputs,
        &state.outputs,
        |o| &o.path,
        |r| (&r.path, &*r.owner),
        me,
        |o, r| o.size == r.size && o.sha256 == r.sha256,
    );
    let links = records_match(
        &m.links,
        &state.links,
        |l| &l.path,
        |r| (&r.path, &*r.owner),
        me,
        |l, r| l.target == r.target,
    );
    (outputs && links).then_some(previous)
}

/// Every directory on the way to `path` is one in `storage`.
fn through_dirs(storage: &Storage, path: &str) -> bool {
    (path.match_indices('/')).all(|(i, _)| matches!(storage.get(&path[..i]), Entry::Dir { .. }))
}

/// Whether `recorded` holds, for each of `wanted`, a record of `me` at its path that
/// `same` accepts, and no other record of `me`: both strictly sorted by path, walked
/// together once. Records of other owners (a shared root's) at other paths do not matter.
fn records_match<W, R>(
    wanted: &[W],
    recorded: &[R],
    path: impl Fn(&W) -> &str,
    record: impl Fn(&R) -> (&str, &Owner),
    me: &Owner,
    same: impl Fn(&W, &R) -> bool,
) -> bool {
    if !wanted.is_sorted_by(|a, b| path(a) < path(b))
        || !recorded.is_sorted_by(|a, b| record(a).0 < record(b).0)
    {
        return false;
    }
    let mut rest = recorded.iter();
    for w in wanted {
        loop {
            let Some(r) = rest.next() else {
                return false;
            };
            let (at, owner) = record(r);
            match at.cmp(path(w)) {
                // A record before it: another owner's, never one of `me` the manifest omits.
                Ordering::Less if owner != me => continue,
                Ordering::Equal if owner == me && same(w, r) => break,
                _ => return false,
            }
        }
    }
    rest.all(|r| record(r).1 != me)
}
