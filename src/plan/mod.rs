//! The planner (SPEC §5): a pure function from (configuration, verified source, storage
//! listing, parsed state, `--force`) to a [`DestinationPlan`].
//!
//! It never touches the filesystem, the clock or randomness; the storage it sees is a
//! [`Storage`] listing gathered beforehand by the backend. Dry runs and real runs use it the
//! same way, so their reports agree. The executor only carries out what a plan says.

mod planner;
mod takeover;
mod unchanged;

pub(crate) mod saved;

pub(crate) use planner::{PlanInput, plan_destination};
pub(crate) use takeover::takeover_permitted;
pub(crate) use unchanged::{Republication, records_exactly};

pub(crate) use crate::backend::types::{Entry, Replaced, Storage};

use crate::hash::ContentHash;
use crate::model::{ConflictKind, Decision, FileOp, Owner, SourceRef, StateMode, TakeoverMode};
use crate::source::Manifest;
use crate::state::State;
use serde::Serialize;
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

/// What the operator lifted for one run (SPEC §5.3, §19): `--force` overrides forceable
/// conflicts; `--allow-delete N` lifts the deletion guard (`mass_delete`) up to N
/// deletions, whatever `on_conflict` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    /// `--force`.
    pub force: bool,
    /// `--allow-delete N`.
    pub allow_delete: Option<u64>,
}

/// The owner and source a destination held before this publication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Previous {
    /// Previous owner.
    pub owner: Owner,
    /// Previous source.
    pub source: SourceRef,
}

/// Paths that changed hands in a takeover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TakeoverEntry {
    /// Owner the paths came from.
    pub from_owner: Owner,
    /// That owner's source id.
    pub from_source_id: String,
    /// Whether the paths belonged to another owner (another pipeline or destination id;
    /// shared root: another owner record), not only to another source id of this owner
    /// (docs/operations.md, "Source ids, versions and takeovers").
    pub cross_owner: bool,
    /// Paths now owned by the current owner.
    pub paths: Vec<String>,
}

/// One conflict (SPEC §5.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// Kind.
    pub kind: ConflictKind,
    /// Path concerned, if any.
    pub path: Option<String>,
    /// Owner concerned, if any.
    pub owner: Option<Owner>,
    /// Whether `--force` may override it.
    pub forceable: bool,
    /// What it means.
    pub message: String,
}

impl Conflict {
    /// Builds a conflict; `forceable` follows the kind.
    pub fn new(
        kind: ConflictKind,
        path: Option<&str>,
        owner: Option<&Owner>,
        message: impl Into<String>,
    ) -> Self {
        Conflict {
            kind,
            path: path.map(str::to_string),
            owner: owner.cloned(),
            forceable: kind.forceable(),
            message: message.into(),
        }
    }
}

/// What happens to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileAction {
    /// Bundle-relative path.
    pub path: String,
    /// Operation.
    pub op: FileOp,
    /// Size (new size, or the recorded size for delete and retain).
    pub size: u64,
    /// sha256 (new, or recorded for delete and retain).
    pub sha256: ContentHash,
    /// What storage held at the path when planned, for an overwrite or delete to check
    /// before it moves it aside (not reported).
    #[serde(skip)]
    pub replaces: Option<Replaced>,
}

/// What happens to one link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkAction {
    /// Bundle-relative path.
    pub path: String,
    /// Bundle-relative target.
    pub target: String,
    /// Operation.
    pub op: FileOp,
    /// What storage held at the path when planned (not reported).
    #[serde(skip)]
    pub replaces: Option<Replaced>,
}

/// The plan for one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationPlan {
    /// Destination id.
    pub destination_id: String,
    /// Resolved bundle path.
    pub bundle_path: PathBuf,
    /// Configured state mode.
    pub state_mode: StateMode,
    /// Configured takeover mode.
    pub takeover_mode: TakeoverMode,
    /// Decision.
    pub decision: Decision,
    /// Previous owner and source (shared root: the current owner's own record).
    pub previous: Option<Previous>,
    /// What changed hands.
    pub takeovers: Vec<TakeoverEntry>,
    /// Conflicts.
    pub conflicts: Vec<Conflict>,
    /// File actions, sorted by path.
    pub files: Vec<FileAction>,
    /// Set for an `unchanged` decision reached by a [`Republication`]: every output of this
    /// manifest is unchanged, in path order, and `files` (empty) does not list them one by
    /// one (at a million files, a row each is a hundred megabytes).
    pub outputs_unchanged: Option<Arc<Manifest>>,
    /// Link actions, sorted by path.
    pub links: Vec<LinkAction>,
    /// One-line reason.
    pub message: String,
    /// State after the publication, for writing decisions. The current owner's
    /// `published_at` and `operation_id` are filled in by the executor.
    pub new_state: Option<State>,
}

impl DestinationPlan {
    /// Every file action, as [`FileAction`] rows (those of `outputs_unchanged` made one by
    /// one).
    pub fn file_actions(&self) -> impl Iterator<Item = Cow<'_, FileAction>> {
        let unchanged = (self.outputs_unchanged.iter()).flat_map(|m| {
            m.outputs.iter().map(|o| {
                Cow::Owned(FileAction {
                    path: o.path.clone(),
                    op: FileOp::Unchanged,
                    size: o.size,
                    sha256: o.sha256,
                    replaces: Some(Replaced::File),
                })
            })
        });
        self.files.iter().map(Cow::Borrowed).chain(unchanged)
    }

    /// How many recorded files and links the plan deletes.
    pub fn deletes(&self) -> u64 {
        (self.files.iter().filter(|f| f.op == FileOp::Delete).count()
            + (self.links.iter())
                .filter(|l| l.op == FileOp::Delete)
                .count()) as u64
    }

    /// Files the plan writes (create or overwrite).
    pub fn writes(&self) -> impl Iterator<Item = &FileAction> {
        self.files
            .iter()
            .filter(|f| matches!(f.op, FileOp::Create | FileOp::Overwrite))
    }
}

#[cfg(test)]
mod tests;

/// A destination's run that failed while it carried out a plan: the error, and the plan,
/// kept for the report (a report never says less than what happened, SPEC §17). An
/// error before there was a plan has none.
#[derive(Debug)]
pub(crate) struct PlanFailed {
    /// The plan that was being carried out, if there was one yet.
    pub plan: Option<Box<DestinationPlan>>,
    /// What went wrong.
    pub error: crate::error::Error,
}

impl PlanFailed {
    /// `error`, met while carrying out `plan`.
    pub(crate) fn new(plan: DestinationPlan, error: crate::error::Error) -> Self {
        PlanFailed {
            plan: Some(Box::new(plan)),
            error,
        }
    }
}

impl From<crate::error::Error> for PlanFailed {
    fn from(error: crate::error::Error) -> Self {
        PlanFailed { plan: None, error }
    }
}
