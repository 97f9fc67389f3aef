//! Who the publication replaces and whose paths it takes: the identity of the replaced
//! record compared with this owner and source, the paths other owners hold that the
//! manifest lists (claimed), and the takeover entries.

use super::{Basis, Planner, Records, newer_than, sorted};
use crate::model::Owner;
use crate::model::{ConflictKind, SameCreatedDigestMismatch, StateMode, TakeoverMode};
use crate::plan::{TakeoverEntry, takeover_permitted};
use crate::state::OwnerRecord;
use foldhash::HashSet;
use std::collections::BTreeMap;

impl<'s> Planner<'_, 's> {
    /// Marks the recorded paths the manifest lists again as claimed, and returns those
    /// recorded for other owners than the replaced one (a shared root), by owner: taken
    /// over where `takeover.mode` permits, owner conflicts where it does not. A colliding
    /// owner's newer source is added to `newer`.
    pub(super) fn claim(
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

    /// The takeover entries: the replaced record when its identity differs, then the
    /// other owners whose paths this manifest takes.
    pub(super) fn list_takeovers(
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
                    cross_owner: r.owner != self.me,
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
                cross_owner: owner != self.me,
                from_owner: owner,
                from_source_id: rec.source.id.clone(),
                paths: sorted(paths),
            });
        }
    }

    /// Compares the replaced record with the current owner and source.
    pub(super) fn compare_identity(&mut self, r: &OwnerRecord, newer: &mut Vec<String>) -> Basis {
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

    pub(super) fn newer_conflicts(&mut self, newer: &[String]) {
        let msg = format!(
            "{}, newer than this source ({} created {}); transfer.destination_newer: conflict",
            newer.join("; "),
            self.src.id,
            self.src.created_at
        );
        self.conflict(ConflictKind::DestinationNewer, None, None, msg);
    }
}
