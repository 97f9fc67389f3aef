//! The state a writing plan commits: this owner's record with the manifest's outputs and
//! links (and what a merge retains), and in a shared root every other owner's records but
//! for the paths this publication claims.

use super::{Moved, Planner, Retained};
use crate::model::Owner;
use crate::model::StateMode;
use crate::state::{OwnerRecord, RecordedLink, RecordedOutput, State};
use foldhash::HashSet;

impl Planner<'_, '_> {
    /// The state after this publication.
    pub(super) fn new_state(&self, retained: &Retained<'_>, moved: &Moved<'_, '_>) -> State {
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
            StateMode::SharedRoot => self.shared_root_state(mine, outputs, links, moved),
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

    /// A shared root's state after this publication: other owners' records stay, but for
    /// the paths this owner now claims and those it takes over.
    fn shared_root_state(
        &self,
        mine: OwnerRecord,
        outputs: Vec<RecordedOutput>,
        links: Vec<RecordedLink>,
        moved: &Moved<'_, '_>,
    ) -> State {
        let d = self.input.destination;
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
}
