//! Runs a writing [`DestinationPlan`] through the journal (SPEC §6 steps 3-8, §13):
//! append, write the staging record, stage with hash-while-copy, make it durable, move
//! aside, place, commit the state file, record the commit, clean up. On an error before
//! the commit point the operation is undone from what staging holds (the same undo
//! `recover` uses) and reported failed.
//!
//! The caller holds the destination lock (the [`BundleStore`] it passes) and has planned
//! under it. Every step in the destination is a step of the storage interface.

mod lifecycle;
mod plan_record;
mod stage;

pub use crate::progress::Progress;
pub use lifecycle::{Passed, Transaction, held_detail, record_removal};

pub use crate::record::{
    ActionKind, NEW, OLD, Origin, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, RecordDir,
    STATE_TMP_FILE, StagedAction, StagedOperation, StagingLayout,
};

use crate::backend::releases::{Purpose, ReleaseStore};
use crate::backend::types::Placed;
use crate::backend::{BundleStore, Operation, StoreRead};
use crate::clock::now;
use crate::error::{Error, Result};
use crate::failpoint;
use crate::hash::{ContentHash, sha256_hex};
use crate::journal::{ActionRecord, Event, Journal, OperationRecord};
use crate::plan::DestinationPlan;
use crate::source::Source;

/// Who runs the operation, for the journal.
#[derive(Debug, Clone)]
pub struct ExecContext<'a> {
    /// Pipeline id.
    pub pipeline_id: &'a str,
    /// `cli:<user>` or `token:<name>`.
    pub actor: &'a str,
    /// Why (`--reason`), if given.
    pub reason: Option<&'a str>,
    /// Hears how staging goes (the CLI's progress bar), if anyone listens.
    pub progress: Option<&'a dyn Progress>,
    /// The command, for the journal: `publish`, or `rollback` (a shared root's rollback
    /// builds a release from an earlier one's records).
    pub command: &'a str,
    /// What the operation does in a releases destination (a stage, a shared root's
    /// rollback); a publication's elsewhere.
    pub purpose: Purpose,
}

/// Executes `plan` in the locked bundle path `store`; returns the operation id.
/// `plan.new_state` must be set; it is taken (not copied: at a million outputs it is
/// hundreds of megabytes), and the plan is left without it.
pub fn execute(
    plan: &mut DestinationPlan,
    source: &Source,
    journal: &mut Journal,
    store: &dyn BundleStore,
    ctx: &ExecContext<'_>,
) -> Result<String> {
    let bundle = store.path();
    let op_id = uuid::Uuid::new_v4().to_string();
    let mut state = plan
        .new_state
        .take()
        .ok_or_else(|| Error::Failed("plan has no post-state".into()))?;
    let published_at = now();
    for r in state.owners.iter_mut() {
        if r.operation_id.is_empty() {
            r.operation_id = op_id.clone();
            r.published_at = published_at.clone();
        }
    }
    // A publication whose post-state records its owner with exactly its source is one a
    // republication of that source may take as read while the state file stands as
    // written (the journal keeps its identity, `Passed::republishable`).
    let republishable = ctx.command == "publish"
        && store.capabilities().keeps_state_file_id
        && crate::plan::records_exactly(
            &state,
            &crate::model::Owner::new(ctx.pipeline_id, plan.destination_id.clone()),
            source,
        )
        .is_some();
    let post = state.render();
    // Only retention reads the post-state again (a releases destination); elsewhere its
    // records (about 180 B per output) are freed before staging.
    let state = store.capabilities().releases.then_some(state);
    let pre = store.read_state()?;
    let staged = StagedOperation::from_plan(
        plan,
        &op_id,
        pre.bytes().map(sha256_hex),
        sha256_hex(&post),
        origin(plan, source, ctx, &published_at)?,
        &mut |d| store.dir_exists(d),
    )?;
    let operation = match ReleaseStore::of(store) {
        Some(releases) => releases.operation_with(ctx.purpose.clone(), state.as_ref()),
        None => crate::backend::OperationState::new(store),
    };
    let tx = Transaction::begin_with(journal, store, staged, operation)?;
    let stages = (tx.staged().releases.as_ref()).is_some_and(|r| r.stages);
    let (passed, placements) =
        tx.act(|op, journal| run_steps(plan, source, op, pre, post, journal, ctx.progress))?;
    let passed = passed.republishable(republishable);
    if stages {
        // A stage: built and verified, held for `distributor promote` (SPEC §19). Its
        // links changed the ctimes of the active release's files: their fingerprints are
        // taken again, or the next publication would hash every one of them.
        let active = match ReleaseStore::of(store) {
            Some(releases) => active_fingerprints(releases)?,
            None => Vec::new(),
        };
        return passed.hold(&active);
    }
    passed.finish(&placements, None, |journal| {
        match (ReleaseStore::of(store), &state) {
            (Some(releases), Some(state)) => {
                retain(releases, state, &op_id, &bundle.to_string_lossy(), journal)
            }
            _ => Ok(()),
        }
    })
}

/// The placement fingerprints of the active release's recorded files (per its state), as
/// they are now.
fn active_fingerprints(
    releases: &ReleaseStore,
) -> Result<Vec<(String, crate::backend::types::Fingerprint)>> {
    let crate::state::StateFile::Valid(active) = releases.read_state()?.parse() else {
        return Ok(Vec::new());
    };
    let outputs: Vec<(&str, ContentHash)> = (active.outputs.iter())
        .map(|o| (o.path.as_str(), o.sha256))
        .collect();
    releases.fingerprints(&outputs)
}

/// After a release's activation (SPEC §15): retention, journaled as `pruned` (a failure
/// is a warning in that event, never a failed publication), with the placement
/// fingerprints of the active release's files taken after it, since its links and
/// unlinks changed their ctimes (SPEC §13).
pub fn retain(
    releases: &ReleaseStore,
    state: &crate::state::State,
    op_id: &str,
    bundle: &str,
    journal: &mut Journal,
) -> Result<()> {
    match prune_and_settle(releases, Some(state), op_id, bundle, journal)? {
        Err(e) => eprintln!("warning: {bundle}: retention failed: {e}"),
        // Removing releases changes what the destination holds: a log entry of its own
        // (SPEC §18), after the activation's.
        Ok(verdicts) => {
            let removed: Vec<String> = (verdicts.into_iter())
                .filter(|v| !v.keep)
                .map(|v| v.release)
                .collect();
            if !removed.is_empty()
                && let Err(e) = releases.log_retention(op_id, &removed)
            {
                eprintln!("warning: {bundle}: retention's log entry was not written: {e}");
            }
        }
    }
    Ok(())
}

/// Prunes, then journals the event `pruned` with the fingerprints of `state`'s outputs
/// in the active release. The outer error is the journal's; the inner, retention's.
fn prune_and_settle(
    releases: &ReleaseStore,
    state: Option<&crate::state::State>,
    op_id: &str,
    bundle: &str,
    journal: &mut Journal,
) -> Result<Result<Vec<crate::backend::releases::log::Verdict>>> {
    let pruned = releases.prune(false, crate::progress::Ticker::NONE);
    let detail = match &pruned {
        Ok(verdicts) => {
            let removed: Vec<&str> = verdicts
                .iter()
                .filter(|v| !v.keep)
                .map(|v| v.release.as_str())
                .collect();
            if removed.is_empty() {
                "no release removed".to_string()
            } else {
                format!("removed releases {}", removed.join(", "))
            }
        }
        Err(e) => format!("warning: retention failed: {e}"),
    };
    let outputs: Vec<(&str, ContentHash)> = state
        .map(|s| {
            s.outputs
                .iter()
                .map(|o| (o.path.as_str(), o.sha256))
                .collect()
        })
        .unwrap_or_default();
    let fingerprints = releases.fingerprints(&outputs)?;
    journal.settle(op_id, bundle, Event::Pruned, Some(&detail), &fingerprints)?;
    Ok(pruned)
}

/// Steps 4-7. Returns the commit and the placement fingerprints.
#[allow(clippy::too_many_arguments)]
fn run_steps(
    plan: &DestinationPlan,
    source: &Source,
    op: &Operation<'_>,
    pre: crate::backend::types::StateBytes,
    post: Vec<u8>,
    journal: &Journal,
    progress: Option<&dyn Progress>,
) -> Result<(crate::backend::Committed, Vec<(usize, Placed)>)> {
    // The staging record first, whole and atomically (SPEC §13); the states before and
    // after are kept there, not in memory (the commit point reads the post-state back).
    op.begin(pre.bytes(), &post)?;
    drop((pre, post));
    let staged = op.record();

    // 4. Stage, hashing while copying, several files at once (stage.rs); then make it
    // durable before anything is renamed into the bundle path.
    let writes: Vec<usize> = staged.file_writes().map(|(i, _)| i).collect();
    debug_assert!(
        plan.writes()
            .map(|f| &f.path)
            .eq(writes.iter().map(|&i| &staged.actions[i].path))
    );
    let as_staged = stage::stage(op, &writes, source, crate::progress::Ticker::to(progress))?;
    op.make_staged_durable()?;
    journal.step_event(&staged.operation_id, Event::Staged)?;
    failpoint::hit("after_staging");

    // 5. Move aside what is overwritten or deleted; directories standing where a file goes
    // hold only moved-aside content then.
    for (i, _) in staged.moves() {
        op.move_aside(i)?;
    }
    // (Only where the parent existed before the operation: in a directory it creates,
    // nothing stands in the way.)
    let new_dirs: foldhash::HashSet<&str> = staged.new_dirs.iter().map(String::as_str).collect();
    for rel in staged.writes() {
        let parent = rel.rsplit_once('/').map(|(d, _)| d);
        if !parent.is_some_and(|d| new_dirs.contains(d)) {
            op.remove_emptied_dir(rel)?;
        }
    }
    journal.step_event(&staged.operation_id, Event::MovedAside)?;
    failpoint::hit("after_move_aside");

    // 6. Place files, then links. Each fingerprint is taken after its file's rename, or
    // where placing renamed not the file but its new tree, kept from staging.
    let mut placements = Vec::with_capacity(writes.len());
    for (&i, as_staged) in writes.iter().zip(as_staged) {
        if let Some(fingerprint) = op.place(i, as_staged)? {
            placements.push((i, fingerprint));
        }
    }
    failpoint::hit("after_placement");
    for (i, a) in staged.actions.iter().enumerate() {
        if a.kind.is_link() && a.kind.writes() {
            op.link(i)?;
        }
    }
    journal.step_event(&staged.operation_id, Event::Placed)?;
    failpoint::hit("after_links");

    // 7. Commit point.
    let committed = op.commit()?;
    failpoint::hit("after_state_write");
    Ok((committed, placements))
}

/// Who started the operation and what it decided, for plan.json and the journal row.
fn origin(
    plan: &DestinationPlan,
    source: &Source,
    ctx: &ExecContext<'_>,
    started_at: &str,
) -> Result<Origin> {
    Ok(Origin {
        started_at: started_at.to_string(),
        command: ctx.command.into(),
        actor: ctx.actor.to_string(),
        reason: ctx.reason.map(str::to_string),
        pipeline_id: ctx.pipeline_id.to_string(),
        state_mode: plan.state_mode,
        decision: plan.decision.into(),
        takeover_mode: plan.takeover_mode,
        previous_owner: plan.previous.as_ref().map(|p| p.owner.to_string()),
        previous_source: plan.previous.as_ref().map(|p| p.source.clone()),
        source: source.source_ref(),
        takeovers: serde_json::to_value(&plan.takeovers)
            .map_err(|e| Error::Failed(e.to_string()))?,
        host: Some(crate::backend::local::log::host()),
        journal_id: None,
        outputs_unchanged: None,
    })
}

/// The sha256 `hex` that `field` of `staged`'s record holds; an error naming the operation
/// and the field when it is not 64 lowercase hex characters.
fn staged_hash(
    staged: &StagedOperation,
    field: &str,
    hex: &str,
) -> Result<crate::hash::ContentHash> {
    crate::hash::ContentHash::parse(hex).ok_or_else(|| {
        Error::Failed(format!(
            "the staging record of operation {}: {field} '{}' is not a sha256 (accepted: 64 lowercase hex characters)",
            staged.operation_id,
            hex.escape_debug()
        ))
    })
}

/// The journal rows of an operation: its record and its actions (borrowed from it, as
/// they are written). Built from the
/// [`StagedOperation`] alone, so `recover` writes the same rows from a `plan.json` when the
/// journal that started the operation is gone.
pub fn journal_records(
    staged: &StagedOperation,
) -> Result<(
    OperationRecord,
    impl Iterator<Item = ActionRecord<'_>> + Clone + '_,
)> {
    let o = &staged.origin;
    let json = |e: serde_json::Error| Error::Failed(e.to_string());
    let record = OperationRecord {
        operation_id: staged.operation_id.clone(),
        started_at: o.started_at.clone(),
        command: o.command.clone(),
        actor: o.actor.clone(),
        reason: o.reason.clone(),
        pipeline_id: o.pipeline_id.clone(),
        destination_id: staged.destination_id.clone(),
        bundle_path: staged.bundle_path.to_string_lossy().into_owned(),
        state_mode: o.state_mode,
        decision: o.decision,
        takeover_mode: o.takeover_mode,
        previous_owner: o.previous_owner.clone(),
        previous_source: o.previous_source.clone(),
        source: o.source.clone(),
        pre_state_sha256: (staged.pre_state_sha256.as_deref())
            .map(|h| staged_hash(staged, "pre_state_sha256", h))
            .transpose()?,
        post_state_sha256: Some(staged_hash(
            staged,
            "post_state_sha256",
            &staged.post_state_sha256,
        )?),
        takeovers_json: serde_json::to_string(&o.takeovers).map_err(json)?,
        // The actions are journaled as rows of their own (schema 8), not again here.
        plan_json: staged.to_json_without_actions().map_err(json)?,
    };
    let actions = staged.actions.iter().map(|a| ActionRecord {
        kind: a.kind.as_str().into(),
        path: a.path.as_str().into(),
        size: a.size,
        sha256: a.sha256,
        target: a.target.as_deref().map(Into::into),
        replaces: a.replaces.map(|r| r.as_str().into()),
    });
    Ok((record, actions))
}
