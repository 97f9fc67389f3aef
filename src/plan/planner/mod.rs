//! `plan_destination`: decisions, takeover, conflicts and reconciliation for one
//! destination. Pure: inputs in, plan out.
//!
//! What refuses a destination before anything is planned (unsafe or untrusted storage,
//! what its storage cannot hold, a state of another mode) is here; then [`Planner::run`]
//! goes through its phases, one file each:
//! - [`identity`]: the replaced record's identity compared, other owners' paths claimed,
//!   the takeovers listed;
//! - [`paths`]: every path planned against what storage holds;
//! - [`decide`]: the decision, `--force`, the deletion guards and the message;
//! - [`new_state`]: the state a writing plan commits.

mod decide;
mod identity;
mod new_state;
mod paths;

use super::{Conflict, DestinationPlan, Previous, Storage};
use crate::backend::Capabilities;
use crate::config::Destination;
use crate::model::{ConflictKind, Decision, Owner, ReconciliationMode, SourceRef, StateMode};
use crate::source::Source;
use crate::state::{OwnerRecord, RecordedLink, RecordedOutput, State, StateFile};
// foldhash: the planner hashes every path several times, and SipHash was a tenth of a
// republication's time.
use foldhash::HashMap;
use std::path::Path;

/// Everything the planner looks at.
pub(crate) struct PlanInput<'a> {
    /// Current pipeline id.
    pub pipeline_id: &'a str,
    /// The destination's configuration.
    pub destination: &'a Destination,
    /// Resolved bundle path (for the report).
    pub bundle_path: &'a Path,
    /// Verified source.
    pub source: &'a Source,
    /// What `.distributor.json` held.
    pub state: &'a StateFile,
    /// What storage holds.
    pub storage: &'a Storage<'a>,
    /// `--force`.
    pub force: bool,
    /// `--allow-delete N` (SPEC §19): `mass_delete` lifted up to N deletions.
    pub allow_delete: Option<u64>,
    /// A shared root's rollback (SPEC §15): the source is the owner's records of an
    /// earlier release; the owner's own newer record does not make it
    /// `skip_destination_newer`, and the decision is `rollback`.
    pub rollback: bool,
}

/// What a recorded path looked like before: its owner and content.
#[derive(Clone)]
enum Recorded<'s> {
    Output(&'s RecordedOutput),
    Link(&'s RecordedLink),
}

impl<'s> Recorded<'s> {
    fn owner(&self) -> &'s Owner {
        match self {
            Recorded::Output(o) => &o.owner,
            Recorded::Link(l) => &l.owner,
        }
    }
}

/// A recorded path, and whether the manifest lists it again.
struct Rec<'s> {
    what: Recorded<'s>,
    claimed: bool,
}

/// Recorded paths by path.
type Records<'s> = HashMap<&'s str, Rec<'s>>;

/// The recorded paths this plan moves aside: those the manifest lists again (replaced by
/// new content, or left in place when unchanged) and, unless a merge retains them, those of
/// the replaced owner it omits (deleted). Asked of the records, not kept as a set of its
/// own: most plans never ask.
struct Moved<'r, 's> {
    records: &'r Records<'s>,
    /// Omitted paths of `old_owner` are deleted (not retained).
    deletes: bool,
    old_owner: Option<&'s Owner>,
}

impl Moved<'_, '_> {
    fn contains(&self, path: &str) -> bool {
        self.records
            .get(path)
            .is_some_and(|r| r.claimed || (self.deletes && Some(r.what.owner()) == self.old_owner))
    }
}

/// Recorded outputs and links of the replaced owner that a merge keeps.
#[derive(Default)]
struct Retained<'s> {
    outputs: Vec<&'s RecordedOutput>,
    links: Vec<&'s RecordedLink>,
}

/// Where identity comparison landed before reconciliation.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Basis {
    /// No previous record for this owner.
    Fresh,
    /// Same owner, same source id, same time, same digest.
    Same,
    /// Same owner and source id, older state.
    Older,
    /// Same owner, source id and time, other digest, transfer permits.
    Changed,
    /// Identity differs and takeover is permitted (or forced).
    Takeover,
}

/// Plans one destination.
pub(crate) fn plan_destination(input: &PlanInput<'_>) -> DestinationPlan {
    let d = input.destination;
    let me = Owner::new(input.pipeline_id, d.id.clone());
    let src = input.source.source_ref();
    let mut plan = DestinationPlan {
        destination_id: d.id.clone(),
        bundle_path: input.bundle_path.to_path_buf(),
        state_mode: d.state_mode,
        takeover_mode: d.takeover,
        decision: Decision::Conflict,
        previous: None,
        takeovers: Vec::new(),
        conflicts: Vec::new(),
        files: Vec::new(),
        outputs_unchanged: None,
        links: Vec::new(),
        message: String::new(),
        new_state: None,
    };
    if let Some(refusal) = refusal(input) {
        plan.conflicts.push(refusal);
        return finish_conflict(plan);
    }
    let caps = crate::backend::capabilities(d);
    storage_conflicts(&mut plan, input, caps);
    if !plan.conflicts.is_empty() {
        return finish_conflict(plan);
    }
    let empty = State {
        version: caps.state_version,
        mode: d.state_mode,
        owners: vec![],
        outputs: vec![],
        links: vec![],
    };
    let (state, invalid) = match input.state {
        // An untrusted state file was refused above.
        StateFile::Absent | StateFile::Untrusted(..) => (&empty, None),
        StateFile::Invalid(reason) => {
            plan.conflicts.push(Conflict::new(
                ConflictKind::InvalidState,
                Some(crate::state::STATE_FILE),
                None,
                format!(".distributor.json is not valid state ({reason}); nothing in the bundle path is known to be managed"),
            ));
            (&empty, Some(reason.as_str()))
        }
        StateFile::Valid(s) if s.mode != d.state_mode => {
            plan.conflicts.push(Conflict::new(
                ConflictKind::StateModeMismatch,
                Some(crate::state::STATE_FILE),
                None,
                format!(
                    "state is {} but the destination is configured as {}",
                    s.mode, d.state_mode
                ),
            ));
            return finish_conflict(plan);
        }
        StateFile::Valid(s) => (s, None),
    };
    Planner {
        input,
        me,
        src,
        state,
        invalid: invalid.is_some(),
        newer_owners: Vec::new(),
        plan,
    }
    .run()
}

struct Planner<'a, 's> {
    input: &'a PlanInput<'a>,
    me: Owner,
    src: SourceRef,
    state: &'s State,
    invalid: bool,
    /// Owners whose recorded source is newer than this one (the replaced record, or a
    /// colliding owner's): what `newer` in [`Planner::run`] describes.
    newer_owners: Vec<Owner>,
    plan: DestinationPlan,
}

impl<'a, 's> Planner<'a, 's> {
    /// Plans in phases: index the state's records, compare identities with the record
    /// this publication replaces, claim what other owners hold, plan every path, list the
    /// takeovers, check the state file's name, decide.
    fn run(mut self) -> DestinationPlan {
        let mut recorded = self.index_records();
        // The record whose content this publication replaces: the single owner (whoever it
        // is), or the current owner's own record in a shared root.
        let replaced: Option<&'s OwnerRecord> = match self.input.destination.state_mode {
            StateMode::SingleOwner => self.state.owners.first(),
            StateMode::SharedRoot => self.state.owner(&self.me),
        };
        self.plan.previous = replaced.map(|r| Previous {
            owner: r.owner.clone(),
            source: r.source.clone(),
        });
        let mut newer: Vec<String> = Vec::new();
        let mut basis = Basis::Fresh;
        if let Some(r) = replaced {
            basis = self.compare_identity(r, &mut newer);
        }
        let manifest = &self.input.source.manifest;
        let new_paths: Vec<&str> = (manifest.outputs.iter().map(|o| o.path.as_str()))
            .chain(manifest.links.iter().map(|l| l.path.as_str()))
            .collect();
        let taken = self.claim(&new_paths, &mut recorded, replaced, &mut newer);
        // Old outputs of the replaced owner and whether omitted ones are retained.
        let old_owner: Option<&'s Owner> = replaced.map(|r| &r.owner);
        let retain = self.input.destination.reconciliation == ReconciliationMode::Merge
            && matches!(basis, Basis::Same | Basis::Older | Basis::Changed)
            && replaced.is_some_and(|r| r.source.id == self.src.id && r.owner == self.me);
        let moved = Moved {
            records: &recorded,
            deletes: !retain,
            old_owner,
        };
        let retained = self.plan_paths(&moved, retain);
        self.list_takeovers(replaced, basis, &new_paths, &recorded, taken);
        self.check_state_file();
        self.decide(basis, replaced, &retained, &moved, &newer)
    }

    /// The state's recorded outputs and links, by path.
    fn index_records(&self) -> Records<'s> {
        let mut recorded: Records<'s> = HashMap::with_capacity_and_hasher(
            self.state.outputs.len() + self.state.links.len(),
            Default::default(),
        );
        let rec = |what| Rec {
            what,
            claimed: false,
        };
        for o in &self.state.outputs {
            recorded.insert(&o.path, rec(Recorded::Output(o)));
        }
        for l in &self.state.links {
            recorded.insert(&l.path, rec(Recorded::Link(l)));
        }
        recorded
    }

    fn conflict(
        &mut self,
        kind: ConflictKind,
        path: Option<&str>,
        owner: Option<&Owner>,
        message: String,
    ) {
        self.plan
            .conflicts
            .push(Conflict::new(kind, path, owner, message));
    }
}

/// What refuses the destination before anything is planned: a bundle path that is not
/// safe to use, a state file or another record distributor does not believe (SPEC §17),
/// a releases destination whose settings changed, a `path` that changed.
fn refusal(input: &PlanInput<'_>) -> Option<Conflict> {
    let d = input.destination;
    let storage = input.storage;
    if let Some(reason) = &storage.bundle_unsafe {
        // A relative `path` the operator meant from the working directory: say where it went.
        let message = match &d.path_origin {
            Some(origin) => format!("{reason} ({origin})"),
            None => reason.clone(),
        };
        return Some(Conflict::new(
            ConflictKind::UnsafeStorage,
            None,
            None,
            message,
        ));
    }
    if let StateFile::Untrusted(why, _) = input.state {
        return Some(Conflict::new(
            ConflictKind::UntrustedRecord,
            Some(crate::state::STATE_FILE),
            None,
            why.clone(),
        ));
    }
    let (kind, why) = if let Some(why) = &storage.untrusted_record {
        (ConflictKind::UntrustedRecord, why)
    } else if let Some(why) = &storage.releases_mismatch {
        (ConflictKind::ReleasesMismatch, why)
    } else if let Some(why) = &storage.path_changed {
        (ConflictKind::PathChanged, why)
    } else if let Some(why) = &storage.release_moved {
        (ConflictKind::ReleaseMoved, why)
    } else if let Some(why) = &storage.log_missing {
        (ConflictKind::LogMissing, why)
    } else {
        return None;
    };
    Some(Conflict::new(kind, None, None, why.clone()))
}

/// What the destination's storage cannot hold, as its [`Capabilities`] say (SPEC §14,
/// §21): links where it holds none, keys longer than its limit (an object store's 1024
/// bytes), and where it drops a trailing dot (azure) a key with a segment ending in `.`.
/// None is forceable.
fn storage_conflicts(plan: &mut DestinationPlan, input: &PlanInput<'_>, caps: Capabilities) {
    // The key prefix: the bundle path `s3://<bucket>/<prefix>` (`az://<container>/…`)
    // without its bucket.
    let bundle = input.bundle_path.to_string_lossy();
    let prefix_len =
        crate::backend::s3::ObjectKey::parse(input.bundle_path).map_or(0, |k| k.prefix().len());
    let manifest = &input.source.manifest;
    for o in &manifest.outputs {
        if caps.drops_trailing_dots
            && let Some(seg) = o.path.split('/').find(|s| s.ends_with('.'))
        {
            plan.conflicts.push(Conflict::new(
                ConflictKind::KeyUnsupported,
                Some(&o.path),
                None,
                format!(
                    "its segment '{seg}' ends in '.', which Azure Blob Storage drops from a name, so the object would land at another key; rename it in the bundle"
                ),
            ));
        }
        let key_len = prefix_len + 1 + o.path.len();
        if let Some(max) = caps.max_key_len
            && key_len > max
        {
            plan.conflicts.push(Conflict::new(
                ConflictKind::KeyTooLong,
                Some(&o.path),
                None,
                format!(
                    "its key under {bundle} would be {key_len} bytes; object stores accept at most {max}"
                ),
            ));
        }
    }
    for l in manifest.links.iter().filter(|_| !caps.links) {
        plan.conflicts.push(Conflict::new(
            ConflictKind::UnsupportedLink,
            Some(&l.path),
            None,
            format!(
                "links cannot be published to an object store (the link to '{}'); publish the file itself, or use a local destination",
                l.target
            ),
        ));
    }
}

/// Ends a plan stopped by a non-forceable conflict found before reconciliation.
fn finish_conflict(mut plan: DestinationPlan) -> DestinationPlan {
    let kinds = conflict_kinds(&plan.conflicts);
    plan.decision = Decision::Conflict;
    plan.message = format!("{kinds}: nothing written; not forceable");
    plan
}

fn conflict_kinds(conflicts: &[Conflict]) -> String {
    let mut kinds: Vec<&str> = conflicts.iter().map(|c| c.kind.as_str()).collect();
    kinds.dedup();
    kinds.join(", ")
}

/// The reason of an `unchanged` decision.
pub(super) fn unchanged_reason(src: &SourceRef) -> String {
    format!(
        "source {} created {} is already published and storage matches",
        src.id, src.created_at
    )
}

/// True when `state` comes from a source created after `current`.
fn newer_than(state: &SourceRef, current: &SourceRef) -> bool {
    match (state.created(), current.created()) {
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}
