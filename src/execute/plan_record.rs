//! The staging record of a plan about to run ([`StagedOperation`], in `record/`).

use crate::error::Result;
use crate::model::FileOp;
use crate::plan::DestinationPlan;
use crate::record::{ActionKind, Origin, StagedAction, StagedOperation, StagingLayout};

impl StagedOperation {
    /// Builds the record of a plan about to run; `exists` says whether a directory of the
    /// bundle path exists now (a directory that does not may be created, and is removed
    /// again by an undo). `origin` gets the count of the outputs the plan leaves
    /// unchanged.
    pub fn from_plan(
        plan: &DestinationPlan,
        op: &str,
        pre: Option<String>,
        post: String,
        mut origin: Origin,
        exists: &mut dyn FnMut(&str) -> Result<bool>,
    ) -> Result<StagedOperation> {
        // Sized up front: one allocation, not a doubling series (a million actions).
        let (mut count, mut unchanged) = (0, 0);
        for (link, op) in (plan.files.iter().map(|f| (false, f.op)))
            .chain(plan.links.iter().map(|l| (true, l.op)))
        {
            match op {
                FileOp::Unchanged => unchanged += 1,
                _ if ActionKind::of(link, op).is_some() => count += 1,
                _ => {}
            }
        }
        let listed = plan
            .outputs_unchanged
            .as_ref()
            .map_or(0, |m| m.outputs.len());
        origin.outputs_unchanged = Some((unchanged + listed) as u64);
        let mut actions = Vec::with_capacity(count);
        for f in &plan.files {
            if let Some(kind) = ActionKind::of(false, f.op) {
                actions.push(StagedAction {
                    kind,
                    path: f.path.clone(),
                    size: Some(f.size),
                    sha256: Some(f.sha256),
                    target: None,
                    replaces: f.replaces.filter(|_| kind.moves_aside()),
                });
            }
        }
        for l in &plan.links {
            if let Some(kind) = ActionKind::of(true, l.op) {
                actions.push(StagedAction {
                    kind,
                    path: l.path.clone(),
                    size: None,
                    sha256: None,
                    target: Some(l.target.clone()),
                    replaces: l.replaces.filter(|_| kind.moves_aside()),
                });
            }
        }
        // Each directory on the way to a written path once (a set: plans of a million
        // files in thousands of directories).
        let mut seen: foldhash::HashSet<&str> = foldhash::HashSet::default();
        let mut new_dirs: Vec<String> = Vec::new();
        for a in actions.iter().filter(|a| a.kind.writes()) {
            for (i, _) in a.path.match_indices('/') {
                let d = &a.path[..i];
                if seen.insert(d) && !exists(d)? {
                    new_dirs.push(d.to_string());
                }
            }
        }
        new_dirs.sort_by_key(|d| d.len());
        Ok(StagedOperation {
            operation_id: op.to_string(),
            destination_id: plan.destination_id.clone(),
            bundle_path: plan.bundle_path.clone(),
            pre_state_sha256: pre,
            post_state_sha256: post,
            origin,
            actions,
            new_dirs,
            staging_layout: StagingLayout::Flat,
            store: None,
            releases: None,
            record_dir: None,
            new_dir_index: Default::default(),
        })
    }
}
