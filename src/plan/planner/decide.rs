//! The decision, from what the phases found: conflicts (refused, or overridden by
//! `--force`), newer content, the basis of the identity comparison, a rollback's hold and
//! the deletion guards (SPEC §19); and the plan's message.

use super::{Basis, Moved, Planner, Retained, conflict_kinds, unchanged_reason};
use crate::model::{ConflictKind, Decision, DestinationNewer, FileOp, OnConflict, Owner};
use crate::plan::DestinationPlan;
use crate::state::OwnerRecord;

/// What [`Planner::refusal_message`] says of a plan refused for its conflicts.
struct Refused<'r> {
    /// The conflicts' kinds.
    kinds: &'r str,
    /// A conflict was made not forceable: its owner's content is newer and stays.
    held: bool,
    all_forceable: bool,
    /// `transfer.destination_newer: skip` keeps newer content.
    newer_stays: bool,
    newer: &'r [String],
}

impl<'s> Planner<'_, 's> {
    /// Decides from what the phases found: conflicts (or `--force`), newer content,
    /// the basis of the identity comparison, a rollback's hold and the deletion guards.
    pub(super) fn decide(
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
        self.plan.decision = self.decision_of(basis);
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

    fn clear_actions(mut self) -> DestinationPlan {
        self.plan.files.clear();
        self.plan.links.clear();
        self.plan.takeovers.clear();
        self.plan
    }

    /// Ends a plan that has conflicts: overridden by `--force` where every conflict is
    /// forceable and `transfer.on_conflict: replace` allows it, else refused.
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
        self.plan.message = self.refusal_message(&Refused {
            kinds: &kinds,
            held,
            all_forceable,
            newer_stays,
            newer,
        });
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

    /// The decision of a plan with no conflict and no newer content: a takeover, or what
    /// the identity comparison's basis says.
    fn decision_of(&self, basis: Basis) -> Decision {
        if !self.plan.takeovers.is_empty() {
            return Decision::ReplaceTakeover;
        }
        match basis {
            Basis::Fresh => Decision::Create,
            Basis::Same => {
                // Retained outputs (merge) are not this source's to rewrite: they never
                // make a republication of the same source a repair.
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
    }

    /// Why a plan refused for its conflicts writes nothing, and what `--force` would do.
    fn refusal_message(&self, r: &Refused<'_>) -> String {
        let kinds = r.kinds;
        if r.held {
            format!(
                "{kinds}: nothing written; not forceable: {}, newer than this source ({} created {}), and transfer.destination_newer: skip keeps newer content even under --force (under destination_newer: conflict, --force replaces it)",
                r.newer.join("; "),
                self.src.id,
                self.src.created_at
            )
        } else if !r.all_forceable {
            format!("{kinds}: nothing written; not forceable")
        } else if self.input.force {
            format!("{kinds}: nothing written; transfer.on_conflict: refuse forbids --force")
        } else if r.newer_stays {
            format!(
                "{kinds}: nothing written; --force would override the conflicts but not replace newer content: {}, newer than this source, stays under transfer.destination_newer: skip, so a forced run skips this destination",
                r.newer.join("; ")
            )
        } else {
            format!(
                "{kinds}: nothing written; --force would replace (transfer.on_conflict: {})",
                self.input.destination.transfer.on_conflict
            )
        }
    }
}
