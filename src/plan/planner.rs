//! `plan_destination`: decisions, takeover, conflicts and reconciliation for one
//! destination. Pure: inputs in, plan out.

use super::{
    Conflict, DestinationPlan, Entry, FileAction, LinkAction, Previous, Replaced, Storage,
    TakeoverEntry, takeover_permitted,
};
use crate::backend::Capabilities;
use crate::config::Destination;
use crate::model::{
    ConflictKind, Decision, DestinationNewer, FileOp, OnConflict, Owner, ReconciliationMode,
    SameCreatedDigestMismatch, SourceRef, StateMode, TakeoverMode,
};
use crate::source::{Source, relative_link_target};
use crate::state::{OwnerRecord, RecordedLink, RecordedOutput, State, StateFile};
// foldhash: the planner hashes every path several times, and SipHash was a tenth of a
// republication's time.
use foldhash::{HashMap, HashSet};
use std::collections::BTreeMap;
use std::path::Path;

/// Everything the planner looks at.
pub struct PlanInput<'a> {
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
pub fn plan_destination(input: &PlanInput<'_>) -> DestinationPlan {
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
    if let Some(reason) = &input.storage.bundle_unsafe {
        // A relative `path` the operator meant from the working directory: say where it went.
        let message = match &d.path_origin {
            Some(origin) => format!("{reason} ({origin})"),
            None => reason.clone(),
        };
        plan.conflicts.push(Conflict::new(
            ConflictKind::UnsafeStorage,
            None,
            None,
            message,
        ));
        return finish_conflict(plan);
    }
    if let StateFile::Untrusted(why, _) = input.state {
        plan.conflicts.push(Conflict::new(
            ConflictKind::UntrustedRecord,
            Some(crate::state::STATE_FILE),
            None,
            why.clone(),
        ));
        return finish_conflict(plan);
    }
    if let Some(why) = &input.storage.untrusted_record {
        plan.conflicts.push(Conflict::new(
            ConflictKind::UntrustedRecord,
            None,
            None,
            why.clone(),
        ));
        return finish_conflict(plan);
    }
    if let Some(why) = &input.storage.releases_mismatch {
        plan.conflicts.push(Conflict::new(
            ConflictKind::ReleasesMismatch,
            None,
            None,
            why.clone(),
        ));
        return finish_conflict(plan);
    }
    if let Some(why) = &input.storage.path_changed {
        plan.conflicts.push(Conflict::new(
            ConflictKind::PathChanged,
            None,
            None,
            why.clone(),
        ));
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

    /// Marks the recorded paths the manifest lists again as claimed, and returns those
    /// recorded for other owners than the replaced one (a shared root), by owner: taken
    /// over where `takeover.mode` permits, owner conflicts where it does not. A colliding
    /// owner's newer source is added to `newer`.
    fn claim(
        &mut self,
        new_paths: &[&str],
        recorded: &mut Records<'s>,
        replaced: Option<&'s OwnerRecord>,
        newer: &mut Vec<String>,
    ) -> BTreeMap<Owner, Vec<String>> {
        let d = self.input.destination;
        let mut taken: BTreeMap<Owner, Vec<String>> = BTreeMap::new();
        let mut colliding_checked: HashSet<Owner> = HashSet::default();
        for p in new_paths {
            if let Some(rec) = recorded.get_mut(*p) {
                rec.claimed = true;
                let owner = rec.what.owner();
                if Some(owner) == replaced.map(|r| &r.owner) {
                    continue;
                }
                let other = self
                    .state
                    .owner(owner)
                    .expect("valid state lists every owner");
                // Newer content counts whether or not the takeover is permitted, as for a
                // single owner: transfer decides it even under --force.
                if colliding_checked.insert(owner.clone()) && newer_than(&other.source, &self.src) {
                    newer.push(format!(
                        "{} holds source {} created {}",
                        owner, other.source.id, other.source.created_at
                    ));
                    self.newer_owners.push(owner.clone());
                }
                if takeover_permitted(d.takeover, &self.me, &self.src.id, owner, &other.source.id) {
                    taken.entry(owner.clone()).or_default().push(p.to_string());
                } else {
                    self.conflict(
                        ConflictKind::OwnerConflict,
                        Some(p),
                        Some(owner),
                        format!(
                            "'{p}' is owned by {owner} (source {}); takeover.mode {} does not permit taking it over",
                            other.source.id, d.takeover
                        ),
                    );
                    taken.entry(owner.clone()).or_default().push(p.to_string());
                }
            }
        }

        taken
    }

    /// Plans every path: the manifest's outputs and links, then the replaced owner's
    /// recorded paths it omits (deleted, or retained by a merge); returns what a merge
    /// retains.
    fn plan_paths(&mut self, moved: &Moved<'_, 's>, retain: bool) -> Retained<'s> {
        let manifest = &self.input.source.manifest;
        // The replaced owner's recorded paths the manifest does not list again: deleted,
        // or retained by a merge.
        let omitted = |path: &str| {
            (moved.records.get(path))
                .is_some_and(|r| !r.claimed && Some(r.what.owner()) == moved.old_owner)
        };
        let omitted_outputs: Vec<&'s RecordedOutput> = (self.state.outputs.iter())
            .filter(|o| omitted(&o.path))
            .collect();
        let omitted_links: Vec<&'s RecordedLink> = (self.state.links.iter())
            .filter(|l| omitted(&l.path))
            .collect();
        let recorded = moved.records;
        let storage = self.input.storage;
        // Recorded paths this owner keeps (merge): with the manifest's, the new state's
        // records, built only when the decision writes.
        let mut retained = Retained::default();
        self.plan
            .files
            .reserve(manifest.outputs.len() + omitted_outputs.len());
        self.plan.links.reserve(manifest.links.len());
        for o in &manifest.outputs {
            let entry = storage.get(&o.path);
            let rec = recorded.get(o.path.as_str()).map(|r| &r.what);
            let same = matches!(rec, Some(Recorded::Output(r)) if r.sha256 == o.sha256 && r.size == o.size)
                && matches!(entry, Entry::File { size, sha256: Some(h) } if *size == o.size && **h == o.sha256);
            let op = self.planned_op(&o.path, entry, rec.is_some(), same, moved);
            self.check_ancestors(&o.path, moved);
            self.plan.files.push(FileAction {
                path: o.path.clone(),
                op,
                size: o.size,
                sha256: o.sha256,
                replaces: Replaced::of(entry),
            });
        }
        for l in &manifest.links {
            let entry = storage.get(&l.path);
            let text = relative_link_target(&l.path, &l.target);
            let rec = recorded.get(l.path.as_str()).map(|r| &r.what);
            let same = matches!(rec, Some(Recorded::Link(r)) if r.target == l.target)
                && matches!(entry, Entry::Symlink { target } if *target == text);
            let op = self.planned_op(&l.path, entry, rec.is_some(), same, moved);
            self.check_ancestors(&l.path, moved);
            self.plan.links.push(LinkAction {
                path: l.path.clone(),
                target: l.target.clone(),
                op,
                replaces: Replaced::of(entry),
            });
        }
        // Old paths the manifest omits: delete or retain.
        for &o in &omitted_outputs {
            let op = self.omitted_op(&o.path, retain, moved);
            self.plan.files.push(FileAction {
                path: o.path.clone(),
                op,
                size: o.size,
                sha256: o.sha256,
                replaces: Replaced::of(storage.get(&o.path)),
            });
            if retain {
                retained.outputs.push(o);
            }
        }
        for &l in &omitted_links {
            let op = self.omitted_op(&l.path, retain, moved);
            self.plan.links.push(LinkAction {
                path: l.path.clone(),
                target: l.target.clone(),
                op,
                replaces: Replaced::of(storage.get(&l.path)),
            });
            if retain {
                retained.links.push(l);
            }
        }
        // Manifests and state files are mostly sorted by path already: then the plan is.
        if !self.plan.files.is_sorted_by(|a, b| a.path <= b.path) {
            self.plan.files.sort_by(|a, b| a.path.cmp(&b.path));
        }
        if !self.plan.links.is_sorted_by(|a, b| a.path <= b.path) {
            self.plan.links.sort_by(|a, b| a.path.cmp(&b.path));
        }

        retained
    }

    /// The takeover entries: the replaced record when its identity differs, then the
    /// other owners whose paths this manifest takes.
    fn list_takeovers(
        &mut self,
        replaced: Option<&'s OwnerRecord>,
        basis: Basis,
        new_paths: &[&str],
        recorded: &Records<'s>,
        taken: BTreeMap<Owner, Vec<String>>,
    ) {
        if let Some(r) = replaced.filter(|_| basis == Basis::Takeover) {
            {
                let paths: Vec<String> = new_paths
                    .iter()
                    .filter(|p| {
                        recorded
                            .get(*p)
                            .is_some_and(|rec| rec.what.owner() == &r.owner)
                    })
                    .map(|p| p.to_string())
                    .collect();
                self.plan.takeovers.push(TakeoverEntry {
                    from_owner: r.owner.clone(),
                    from_source_id: r.source.id.clone(),
                    paths: sorted(paths),
                });
            }
        }
        for (owner, paths) in taken {
            let rec = self
                .state
                .owner(&owner)
                .expect("valid state lists every owner");
            self.plan.takeovers.push(TakeoverEntry {
                from_owner: owner,
                from_source_id: rec.source.id.clone(),
                paths: sorted(paths),
            });
        }
    }

    /// The commit point renames the new state over `.distributor.json`: a directory or
    /// special file there would make it fail after everything else was placed. A symlink
    /// there is somebody's too: replacing it would lose it, and recovery could not tell
    /// the state before from the state after.
    fn check_state_file(&mut self) {
        if matches!(
            self.input.storage.get(crate::state::STATE_FILE),
            Entry::Dir { .. } | Entry::Special | Entry::Symlink { .. }
        ) {
            let path = crate::state::STATE_FILE;
            self.conflict(
                ConflictKind::UnsafeStorage,
                Some(path),
                None,
                format!("'{path}' is a symlink, directory or special file; distributor writes its state there and never replaces one"),
            );
        }
    }

    /// Decides from what the phases found: conflicts (or `--force`), newer content,
    /// the basis of the identity comparison, a rollback's hold and the deletion guards.
    fn decide(
        mut self,
        basis: Basis,
        replaced: Option<&'s OwnerRecord>,
        retained: &Retained<'s>,
        moved: &Moved<'_, 's>,
        newer: &[String],
    ) -> DestinationPlan {
        let d = self.input.destination;
        let storage = self.input.storage;
        let old_owner = moved.old_owner;
        if !self.plan.conflicts.is_empty() {
            // Newer content still counts when it is what transfer says to refuse.
            if !newer.is_empty() && d.transfer.destination_newer == DestinationNewer::Conflict {
                self.newer_conflicts(newer);
            }
            return self.conflict_or_force(retained, moved, newer);
        }
        if !newer.is_empty() {
            match d.transfer.destination_newer {
                DestinationNewer::Skip => {
                    self.plan.decision = Decision::SkipDestinationNewer;
                    self.plan.message = format!(
                        "{}, newer than this source ({} created {}); transfer.destination_newer: skip leaves it in place",
                        newer.join("; "),
                        self.src.id,
                        self.src.created_at
                    );
                    return self.clear_actions();
                }
                DestinationNewer::Conflict => {
                    self.newer_conflicts(newer);
                    return self.conflict_or_force(retained, moved, newer);
                }
            }
        }
        let takeover = !self.plan.takeovers.is_empty();
        self.plan.decision = if takeover {
            Decision::ReplaceTakeover
        } else {
            match basis {
                Basis::Fresh => Decision::Create,
                Basis::Same => {
                    // Retained outputs (merge) are not this source's to rewrite: they
                    // never make a republication of the same source a repair.
                    let settled = |op: FileOp| matches!(op, FileOp::Unchanged | FileOp::Retain);
                    let drift = !self.plan.files.iter().all(|f| settled(f.op))
                        || !self.plan.links.iter().all(|l| settled(l.op));
                    if drift {
                        Decision::Repair
                    } else {
                        Decision::Unchanged
                    }
                }
                Basis::Older => Decision::ReplaceOlder,
                Basis::Changed => Decision::ReplaceChanged,
                Basis::Takeover => Decision::ReplaceTakeover,
            }
        };
        // A rollback's hold: this very digest was rolled back from here, and publishing
        // it would write (republishing what is active is unchanged; older content is
        // left by transfer as ever).
        if !self.input.rollback
            && self.plan.decision.writes()
            && (storage.rolled_back.iter())
                .any(|h| h.owner == self.me.to_string() && h.digest == self.src.digest)
        {
            self.conflict(
                ConflictKind::RolledBack,
                None,
                None,
                format!(
                    "source digest {} was rolled back from at this destination; publishing it again would undo the rollback (publish a new build, or --force to publish this one anyway)",
                    self.src.digest
                ),
            );
            return self.conflict_or_force(retained, moved, newer);
        }
        // The deletion guards (SPEC §19), on what this plan deletes.
        if self.plan.decision.writes() && self.guard(old_owner) {
            return self.conflict_or_force(retained, moved, newer);
        }
        self.plan.message = self.reason(replaced);
        if self.plan.decision.writes() {
            self.plan.new_state = Some(self.new_state(retained, moved));
            if self.input.rollback {
                self.plan.decision = Decision::Rollback;
                self.plan.message = format!(
                    "rolls {} back to source {} created {}",
                    self.me, self.src.id, self.src.created_at
                );
            }
        }
        self.plan
    }

    /// Compares the replaced record with the current owner and source.
    fn compare_identity(&mut self, r: &OwnerRecord, newer: &mut Vec<String>) -> Basis {
        let d = self.input.destination;
        let same_owner = r.owner == self.me;
        let same_id = r.source.id == self.src.id;
        let is_newer = newer_than(&r.source, &self.src) && !(self.input.rollback && same_owner);
        if is_newer {
            newer.push(format!(
                "{} holds source {} created {}",
                r.owner, r.source.id, r.source.created_at
            ));
            self.newer_owners.push(r.owner.clone());
        }
        let same_created = r.source.created() == Some(self.input.source.created);
        if same_id && same_created && r.source.digest != self.src.digest {
            match d.transfer.same_created_digest_mismatch {
                SameCreatedDigestMismatch::Conflict => {
                    self.conflict(
                        ConflictKind::SameCreatedDigestMismatch,
                        None,
                        Some(&r.owner),
                        format!(
                            "{} holds source {} created {} with digest {}, this source has the same id and time but digest {}; transfer.same_created_digest_mismatch: conflict",
                            r.owner, r.source.id, r.source.created_at, r.source.digest, self.src.digest
                        ),
                    );
                }
                SameCreatedDigestMismatch::Replace => {}
            }
        }
        if same_owner && same_id {
            return if is_newer {
                Basis::Older // not used: the newer guard decides first
            } else if same_created && r.source.digest == self.src.digest {
                Basis::Same
            } else if same_created {
                Basis::Changed
            } else {
                Basis::Older
            };
        }
        let permitted =
            takeover_permitted(d.takeover, &self.me, &self.src.id, &r.owner, &r.source.id);
        if !permitted {
            let (kind, what) = if !same_owner && d.state_mode == StateMode::SingleOwner {
                match d.takeover {
                    TakeoverMode::SamePipeline => (ConflictKind::PipelineDiffers, "pipeline"),
                    TakeoverMode::SameSource => (ConflictKind::SourceIdDiffers, "source id"),
                    _ if r.owner.pipeline_id != self.me.pipeline_id => {
                        (ConflictKind::PipelineDiffers, "pipeline")
                    }
                    _ if r.owner.destination_id != self.me.destination_id => {
                        (ConflictKind::DestinationDiffers, "destination")
                    }
                    _ => (ConflictKind::SourceIdDiffers, "source id"),
                }
            } else {
                (ConflictKind::SourceIdDiffers, "source id")
            };
            self.conflict(
                kind,
                None,
                Some(&r.owner),
                format!(
                    "the {what} differs: {} holds source {} and this is {}/{} with source {}; takeover.mode {} does not permit replacing it",
                    r.owner, r.source.id, self.me.pipeline_id, self.me.destination_id, self.src.id, d.takeover
                ),
            );
        }
        Basis::Takeover
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

    fn newer_conflicts(&mut self, newer: &[String]) {
        let msg = format!(
            "{}, newer than this source ({} created {}); transfer.destination_newer: conflict",
            newer.join("; "),
            self.src.id,
            self.src.created_at
        );
        self.conflict(ConflictKind::DestinationNewer, None, None, msg);
    }

    /// The operation on a planned path: `same` says storage already holds exactly the
    /// recorded content the new bundle wants there.
    fn planned_op(
        &mut self,
        path: &str,
        entry: &Entry,
        recorded: bool,
        same: bool,
        moved: &Moved<'_, '_>,
    ) -> FileOp {
        if !recorded {
            return self.unrecorded(path, entry, moved);
        }
        match entry {
            _ if same => FileOp::Unchanged,
            Entry::Missing => FileOp::Create,
            Entry::Dir { contents, dirs } => self.dir_in_the_way(path, contents, dirs, moved),
            Entry::Special => {
                self.special(path);
                FileOp::Overwrite
            }
            Entry::File { .. } | Entry::Symlink { .. } => FileOp::Overwrite,
        }
    }

    /// A planned path that no valid state records.
    fn unrecorded(&mut self, path: &str, entry: &Entry, moved: &Moved<'_, '_>) -> FileOp {
        match entry {
            Entry::Missing => FileOp::Create,
            Entry::File { .. } | Entry::Symlink { .. } => {
                let what = if matches!(entry, Entry::File { .. }) {
                    "a file"
                } else {
                    "a symlink"
                };
                self.conflict(
                    ConflictKind::UnmanagedContent,
                    Some(path),
                    None,
                    format!("'{path}' exists in storage as {what} that no valid state records; distributor does not adopt unmanaged content"),
                );
                FileOp::Overwrite
            }
            Entry::Dir { contents, dirs } => self.dir_in_the_way(path, contents, dirs, moved),
            Entry::Special => {
                self.special(path);
                FileOp::Overwrite
            }
        }
    }

    /// A directory where a file or link goes: fine only when it holds recorded content
    /// that this plan moves aside and nothing else (every file under it is moved aside and
    /// every directory under it leads to such a file), so it is the directory tree of that
    /// content, emptied and removed by the move. An empty directory, or one holding anything
    /// else, is unrecorded: somebody made it, and distributor does not remove it.
    fn dir_in_the_way(
        &mut self,
        path: &str,
        contents: &[String],
        dirs: &[String],
        moved: &Moved<'_, '_>,
    ) -> FileOp {
        let all_moved = contents.iter().all(|c| moved.contains(c.as_str()));
        let leading: HashSet<&str> = contents
            .iter()
            .flat_map(|c| c.match_indices('/').map(move |(i, _)| &c[..i]))
            .collect();
        if !contents.is_empty() && all_moved && dirs.iter().all(|d| leading.contains(d.as_str())) {
            return FileOp::Create;
        }
        let what = if contents.is_empty() && dirs.is_empty() {
            "an empty directory stands"
        } else if contents.is_empty() {
            "a directory holding only directories stands"
        } else {
            "a directory stands"
        };
        self.conflict(
            ConflictKind::UnmanagedDirectory,
            Some(path),
            None,
            format!("{what} at '{path}' where a file goes, holding nothing this publication manages; distributor does not remove directories it did not make"),
        );
        FileOp::Overwrite
    }

    /// A recorded path of the replaced owner that the manifest omits: retained by a merge,
    /// else deleted (when what stands there may be).
    fn omitted_op(&mut self, path: &str, retain: bool, moved: &Moved<'_, '_>) -> FileOp {
        let op = if retain {
            FileOp::Retain
        } else {
            self.check_deletable(path);
            FileOp::Delete
        };
        self.check_ancestors(path, moved);
        op
    }

    /// A recorded path this plan deletes must hold a file or link: a directory or special
    /// file there is somebody else's, and deletion touches only what state records.
    fn check_deletable(&mut self, path: &str) {
        match self.input.storage.get(path) {
            Entry::Dir { .. } => self.conflict(
                ConflictKind::UnmanagedDirectory,
                Some(path),
                None,
                format!("'{path}' is recorded as distributor's, but a directory stands there now; deletion touches only what state records, so distributor will not remove it or what it holds"),
            ),
            Entry::Special => self.special(path),
            Entry::Missing | Entry::File { .. } | Entry::Symlink { .. } => {}
        }
    }

    fn special(&mut self, path: &str) {
        self.conflict(
            ConflictKind::UnsafeStorage,
            Some(path),
            None,
            format!(
                "'{path}' is a socket, FIFO or device; distributor never replaces special files"
            ),
        );
    }

    /// Every ancestor of a touched path must be a directory, or a path this plan moves
    /// aside; a symlink or special file on the way is unsafe. (`moved` carries the records,
    /// which name the owner of a file in the way.)
    fn check_ancestors(&mut self, path: &str, moved: &Moved<'_, '_>) {
        for (i, b) in path.bytes().enumerate() {
            if b != b'/' {
                continue;
            }
            let anc = &path[..i];
            match self.input.storage.get(anc) {
                Entry::Missing | Entry::Dir { .. } => {}
                _ if moved.contains(anc) => {}
                Entry::Symlink { .. } | Entry::Special => {
                    self.conflict(
                        ConflictKind::UnsafeStorage,
                        Some(anc),
                        None,
                        format!("'{anc}' on the way to '{path}' is a symlink or special file; distributor never writes through it"),
                    );
                    return;
                }
                Entry::File { .. } => {
                    let whose = (moved.records)
                        .get(anc)
                        .map(|r| format!(" (recorded for {})", r.what.owner()))
                        .unwrap_or_default();
                    self.conflict(
                        ConflictKind::UnsafeStorage,
                        Some(anc),
                        None,
                        format!("'{anc}' on the way to '{path}' is a file{whose}, not a directory"),
                    );
                    return;
                }
            }
        }
    }

    fn clear_actions(mut self) -> DestinationPlan {
        self.plan.files.clear();
        self.plan.links.clear();
        self.plan.takeovers.clear();
        self.plan
    }

    fn conflict_or_force(
        mut self,
        retained: &Retained<'_>,
        moved: &Moved<'_, '_>,
        newer: &[String],
    ) -> DestinationPlan {
        let d = self.input.destination;
        // `destination_newer: skip` leaves newer content in place, forced or not (SPEC
        // §5.1: a replacement never takes over content from a newer source unless transfer
        // says so); only `destination_newer: conflict` makes it something --force overrides.
        let newer_stays =
            !newer.is_empty() && d.transfer.destination_newer == DestinationNewer::Skip;
        // So a conflict over an owner whose content is newer (another pipeline's in a
        // shared root or as single owner, an own record under another source id) is one
        // --force cannot override: it is not forceable, and a forced run refuses it (exit
        // 3) instead of skipping the destination with exit 0 while the conflict line says
        // forceable. A forceable conflict elsewhere (an unmanaged file) stays forceable:
        // forcing it gives what the run would give without it, a skip.
        // A forced run deletes what the plan deletes: guarded as any other (a run that
        // skips for newer content deletes nothing).
        if !newer_stays {
            let old_owner = moved.old_owner;
            self.guard(old_owner);
        }
        let mut held = false;
        if newer_stays {
            for c in &mut self.plan.conflicts {
                if c.forceable
                    && c.owner
                        .as_ref()
                        .is_some_and(|o| self.newer_owners.contains(o))
                {
                    c.forceable = false;
                    c.message.push_str(
                        "; its content is newer than this source, and transfer.destination_newer: skip keeps newer content even under --force",
                    );
                    held = true;
                }
            }
        }
        let all_forceable = self.plan.conflicts.iter().all(|c| c.forceable);
        let kinds = conflict_kinds(&self.plan.conflicts);
        let forced =
            self.input.force && all_forceable && d.transfer.on_conflict == OnConflict::Replace;
        if forced && newer_stays {
            self.plan.decision = Decision::SkipDestinationNewer;
            self.plan.message = format!(
                "{}, newer than this source ({} created {}); --force overrides {kinds}, but transfer.destination_newer: skip leaves newer content in place",
                newer.join("; "),
                self.src.id,
                self.src.created_at
            );
            self.plan.conflicts.clear();
            return self.clear_actions();
        }
        if forced {
            self.plan.decision = Decision::ForceReplace;
            self.plan.message =
                format!("--force with transfer.on_conflict: replace overrides {kinds}");
            if self.invalid {
                self.plan
                    .message
                    .push_str("; invalid state is replaced by fresh state, nothing is deleted");
            }
            let state = self.new_state(retained, moved);
            self.plan.new_state = Some(state);
            return self.plan;
        }
        self.plan.decision = Decision::Conflict;
        self.plan.message = if held {
            format!(
                "{kinds}: nothing written; not forceable: {}, newer than this source ({} created {}), and transfer.destination_newer: skip keeps newer content even under --force (under destination_newer: conflict, --force replaces it)",
                newer.join("; "),
                self.src.id,
                self.src.created_at
            )
        } else if !all_forceable {
            format!("{kinds}: nothing written; not forceable")
        } else if self.input.force {
            format!("{kinds}: nothing written; transfer.on_conflict: refuse forbids --force")
        } else if newer_stays {
            format!(
                "{kinds}: nothing written; --force would override the conflicts but not replace newer content: {}, newer than this source, stays under transfer.destination_newer: skip, so a forced run skips this destination",
                newer.join("; ")
            )
        } else {
            format!(
                "{kinds}: nothing written; --force would replace (transfer.on_conflict: {})",
                d.transfer.on_conflict
            )
        };
        self.clear_actions()
    }

    /// The deletion guards (SPEC §19) on the deletions this plan holds: more of
    /// `old_owner`'s recorded outputs and links than `guard.max_delete` allows (inclusive)
    /// is `mass_delete`, unless `--allow-delete N` covers them; a bundle with no outputs
    /// that deletes recorded content is `empty_source`, unless `guard.allow_empty`. Adds
    /// each once; true when it added one.
    fn guard(&mut self, old_owner: Option<&Owner>) -> bool {
        // A rollback is an operator's explicit step: not guarded (SPEC §19).
        if self.input.rollback {
            return false;
        }
        let g = self.input.destination.guard;
        let deletes = self.plan.deletes();
        if deletes == 0 {
            return false;
        }
        let has = |plan: &DestinationPlan, k| plan.conflicts.iter().any(|c| c.kind == k);
        let mut added = false;
        if let Some(max) = g.max_delete
            && !has(&self.plan, ConflictKind::MassDelete)
        {
            let recorded = old_owner.map_or(0, |o| self.state.recorded_of(o));
            if let Some(limit) = g.exceeded(deletes, recorded, self.input.allow_delete) {
                let of = match max {
                    crate::config::MaxDelete::Percent(_) => {
                        format!(" ({max} of {recorded} recorded outputs and links)")
                    }
                    crate::config::MaxDelete::Count(_) => String::new(),
                };
                let given = match self.input.allow_delete {
                    Some(n) => format!("; --allow-delete {n} is fewer"),
                    None => String::new(),
                };
                self.conflict(
                    ConflictKind::MassDelete,
                    None,
                    None,
                    format!(
                        "this publication deletes {deletes} recorded path(s), more than guard.max_delete allows: {limit}{of}{given}; if the deletions are meant, publish with --allow-delete {deletes}"
                    ),
                );
                added = true;
            }
        }
        if self.input.source.manifest.outputs.is_empty()
            && !g.allow_empty
            && !has(&self.plan, ConflictKind::EmptySource)
        {
            self.conflict(
                ConflictKind::EmptySource,
                None,
                None,
                format!(
                    "the bundle lists no outputs, and publishing it deletes {deletes} recorded path(s): an empty bundle is most often a broken build; set guard.allow_empty, or --force to publish it anyway"
                ),
            );
            added = true;
        }
        added
    }

    fn reason(&self, replaced: Option<&OwnerRecord>) -> String {
        let d = self.input.destination;
        let writes = self
            .plan
            .files
            .iter()
            .filter(|f| matches!(f.op, FileOp::Create | FileOp::Overwrite))
            .count()
            + self
                .plan
                .links
                .iter()
                .filter(|l| matches!(l.op, FileOp::Create | FileOp::Overwrite))
                .count();
        match self.plan.decision {
            Decision::Create => match self.state.owners.is_empty() {
                true => "no state at the bundle path; every path is new".to_string(),
                false => format!("no record for {} in the shared root; its paths are new", self.me),
            },
            Decision::Unchanged => unchanged_reason(&self.src),
            Decision::Repair => format!(
                "source {} is already published; {writes} recorded path(s) missing or modified in storage are rewritten",
                self.src.id
            ),
            Decision::ReplaceOlder => {
                let r = replaced.expect("replace_older has a previous record");
                format!("state holds source {} created {}, older than {}", r.source.id, r.source.created_at, self.src.created_at)
            }
            Decision::ReplaceChanged => {
                "same source id and created_at with another digest; transfer.same_created_digest_mismatch: replace permits".to_string()
            }
            Decision::ReplaceTakeover => {
                let from: Vec<String> = self
                    .plan
                    .takeovers
                    .iter()
                    .map(|t| format!("{} (source {})", t.from_owner, t.from_source_id))
                    .collect();
                format!("takeover.mode {} permits replacing {}", d.takeover, from.join(", "))
            }
            _ => String::new(),
        }
    }

    /// The state after this publication.
    fn new_state(&self, retained: &Retained<'_>, moved: &Moved<'_, '_>) -> State {
        let d = self.input.destination;
        let manifest = &self.input.source.manifest;
        let me = std::sync::Arc::new(self.me.clone());
        let outputs: Vec<RecordedOutput> = manifest
            .outputs
            .iter()
            .map(|o| RecordedOutput {
                path: o.path.clone(),
                size: o.size,
                sha256: o.sha256,
                etag: None,
                owner: std::sync::Arc::clone(&me),
            })
            .chain(retained.outputs.iter().map(|o| RecordedOutput {
                owner: std::sync::Arc::clone(&me),
                ..(*o).clone()
            }))
            .collect();
        let links: Vec<RecordedLink> = manifest
            .links
            .iter()
            .map(|l| RecordedLink {
                path: l.path.clone(),
                target: l.target.clone(),
                owner: std::sync::Arc::clone(&me),
            })
            .chain(retained.links.iter().map(|l| RecordedLink {
                owner: std::sync::Arc::clone(&me),
                ..(*l).clone()
            }))
            .collect();
        let mine = OwnerRecord {
            owner: self.me.clone(),
            source: self.src.clone(),
            reconciliation: d.reconciliation,
            published_at: String::new(),
            operation_id: String::new(),
        };
        let mut state = match d.state_mode {
            StateMode::SingleOwner => State {
                version: crate::backend::capabilities(d).state_version,
                mode: d.state_mode,
                owners: vec![mine],
                outputs,
                links,
            },
            StateMode::SharedRoot => {
                // Other owners' records stay, but for the paths this owner now claims and
                // those it takes over.
                let claimed: HashSet<&str> = (outputs.iter().map(|o| o.path.as_str()))
                    .chain(links.iter().map(|l| l.path.as_str()))
                    .collect();
                let keep = |path: &str, owner: &Owner| {
                    *owner != self.me && !claimed.contains(path) && !moved.contains(path)
                };
                let keep_out: Vec<RecordedOutput> = (self.state.outputs.iter())
                    .filter(|o| keep(&o.path, &o.owner))
                    .cloned()
                    .collect();
                let keep_links: Vec<RecordedLink> = (self.state.links.iter())
                    .filter(|l| keep(&l.path, &l.owner))
                    .cloned()
                    .collect();
                drop(claimed);
                let mut owners: Vec<OwnerRecord> = self
                    .state
                    .owners
                    .iter()
                    .filter(|r| r.owner != self.me)
                    .cloned()
                    .collect();
                owners.push(mine);
                State {
                    version: crate::backend::capabilities(d).state_version,
                    mode: d.state_mode,
                    owners,
                    outputs: keep_out.into_iter().chain(outputs).collect(),
                    links: keep_links.into_iter().chain(links).collect(),
                }
            }
        };
        // Owner records with nothing left are removed, but this publication's own: an
        // empty bundle (SPEC §19) is recorded as published, with no paths.
        let State {
            owners,
            outputs,
            links,
            ..
        } = &mut state;
        owners.retain(|r| {
            r.owner == self.me
                || outputs.iter().any(|o| *o.owner == r.owner)
                || links.iter().any(|l| *l.owner == r.owner)
        });
        state.outputs.sort_by(|a, b| a.path.cmp(&b.path));
        state.links.sort_by(|a, b| a.path.cmp(&b.path));
        state
    }
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
