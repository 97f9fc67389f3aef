//! Runs a writing [`DestinationPlan`] through the journal (SPEC §6 steps 3-8): append,
//! stage with hash-while-copy, move aside, place, commit the state file, record the commit,
//! clean up. On an error before the commit point the operation is undone from what staging
//! holds (the same [`undo`] `recover` uses) and reported failed.
//!
//! The caller holds the destination lock and has planned under it.

mod stage;
mod undo;

pub use stage::Progress;

pub use undo::{
    Origin, PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, StagedAction, StagedOperation,
    StagingLayout, undo,
};

use crate::backend::local::{self, Fingerprint, STAGING_DIR};
use crate::error::{Error, IoContext, Result};
use crate::failpoint;
use crate::hash::sha256_hex;
use crate::journal::{ActionRecord, Journal, OperationRecord, event, now};
use crate::model::FileOp;
use crate::plan::{DestinationPlan, FileAction};
use crate::source::{Source, relative_link_target};
use std::fs;
use std::path::{Path, PathBuf};

/// Who runs the operation, for the journal.
#[derive(Debug, Clone)]
pub struct ExecContext<'a> {
    /// Pipeline id.
    pub pipeline_id: &'a str,
    /// `cli:<user>` or `token:<name>`.
    pub actor: &'a str,
    /// Hears how staging goes (the CLI's progress bar), if anyone listens.
    pub progress: Option<&'a dyn Progress>,
}

/// Executes `plan`; returns the operation id. `plan.new_state` must be set.
pub fn execute(
    plan: &DestinationPlan,
    source: &Source,
    journal: &mut Journal,
    ctx: &ExecContext<'_>,
) -> Result<String> {
    let bundle = plan.bundle_path.as_path();
    let op_id = uuid::Uuid::new_v4().to_string();
    let mut state = plan
        .new_state
        .clone()
        .ok_or_else(|| Error::Failed("plan has no post-state".into()))?;
    let published_at = now();
    for r in state.owners.iter_mut() {
        if r.operation_id.is_empty() {
            r.operation_id = op_id.clone();
            r.published_at = published_at.clone();
        }
    }
    let post = state.render();
    let pre = local::read_state_bytes(bundle)?;
    let staged = StagedOperation::from_plan(
        plan,
        &op_id,
        pre.as_deref().map(sha256_hex),
        sha256_hex(&post),
        origin(plan, source, ctx, &published_at)?,
    );
    let (record, actions) = journal_records(&staged)?;
    journal.begin_operation(&record, &actions)?;
    failpoint::hit("after_journal_append");

    let result = run_steps(
        plan,
        source,
        &staged,
        pre.as_deref(),
        &post,
        journal,
        ctx.progress,
    );
    match result {
        Ok(placements) => {
            // Past the commit point: the publication stands whatever fails now, and
            // `recover` finishes what is left.
            let finish = |e: Error| {
                Error::Failed(format!(
                    "operation {op_id} passed its commit point but could not finish ({e}); run `distributor recover`"
                ))
            };
            journal
                .commit(&op_id, &bundle.to_string_lossy(), &placements)
                .map_err(finish)?;
            failpoint::hit("after_journal_commit");
            cleanup(bundle, &staged).map_err(finish)?;
            journal
                .event(&op_id, event::COMPLETED, None)
                .map_err(finish)?;
            Ok(op_id)
        }
        Err(e) if committed(bundle, &staged) => {
            // The error came after the commit point: the publication stands; recovery
            // finishes the cleanup.
            Err(Error::Failed(format!(
                "operation {op_id} passed its commit point but could not finish ({e}); run `distributor recover`"
            )))
        }
        Err(e) => match undo(bundle, &staged) {
            Ok(()) => {
                journal.event(&op_id, event::ROLLED_BACK, Some(&e.to_string()))?;
                Err(e)
            }
            Err(u) => Err(Error::RecoveryRequired(format!(
                "operation {op_id} failed ({e}) and could not be rolled back ({u}); run `distributor recover`"
            ))),
        },
    }
}

fn committed(bundle: &Path, staged: &StagedOperation) -> bool {
    matches!(local::read_state_bytes(bundle), Ok(Some(b)) if sha256_hex(&b) == staged.post_state_sha256)
}

/// Steps 4-7. Returns the placement fingerprints.
fn run_steps(
    plan: &DestinationPlan,
    source: &Source,
    staged: &StagedOperation,
    pre: Option<&[u8]>,
    post: &[u8],
    journal: &Journal,
    progress: Option<&dyn Progress>,
) -> Result<Vec<(String, Fingerprint)>> {
    let bundle = plan.bundle_path.as_path();
    let op_dir = staged.dir(bundle);
    local::make_staging_root(bundle)?;
    // plan.json first: staging without it never held anything else.
    staged.write(bundle, pre, post)?;
    for d in [op_dir.join("new"), op_dir.join("old")]
        .into_iter()
        .chain(staged.new_buckets(&op_dir))
    {
        fs::create_dir(&d).ctx("create staging", &d)?;
    }

    // 4. Stage, hashing while copying, several files at once (stage.rs), each file as
    // `new/<bucket>/<action index>`; each file's fingerprint is taken from the staged copy, which
    // the rename into place keeps.
    let writes: Vec<(&FileAction, PathBuf)> = plan
        .writes()
        .zip(staged.file_writes())
        .map(|(f, (i, a))| {
            debug_assert_eq!(f.path, a.path);
            (f, staged.staged_new(&op_dir, i))
        })
        .collect();
    let fingerprints = stage::stage(&writes, source, progress)?;
    journal.event(&staged.operation_id, event::STAGED, None)?;
    failpoint::hit("after_staging");

    // 5. Move aside what is overwritten or deleted, each as `old/<action index>`.
    for (i, a) in staged.moves() {
        let from = bundle.join(&a.path);
        if fs::symlink_metadata(&from).is_err() {
            continue;
        }
        failpoint::hit("during_move_aside");
        local::check_inside(bundle, &a.path)?;
        local::rename(&from, &staged.staged_old(&op_dir, i))?;
    }
    // Directories standing where a file goes hold only moved-aside content now.
    for rel in staged.writes() {
        let p = bundle.join(rel);
        if fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            local::check_inside(bundle, rel)?;
            local::remove_emptied_tree(&p)?;
        }
    }
    journal.event(&staged.operation_id, event::MOVED_ASIDE, None)?;
    failpoint::hit("after_move_aside");

    // 6. Place files, then links.
    let mut placements = Vec::with_capacity(writes.len());
    for ((f, staged_file), fingerprint) in writes.iter().zip(fingerprints) {
        failpoint::hit("during_placement");
        local::check_inside(bundle, &f.path)?;
        local::rename_into(staged_file, bundle, &f.path)?;
        placements.push((f.path.clone(), fingerprint));
    }
    failpoint::hit("after_placement");
    for l in plan
        .links
        .iter()
        .filter(|l| matches!(l.op, FileOp::Create | FileOp::Overwrite))
    {
        failpoint::hit("during_links");
        local::check_inside(bundle, &l.path)?;
        local::make_parents(bundle, &l.path)?;
        let dst = bundle.join(&l.path);
        std::os::unix::fs::symlink(relative_link_target(&l.path, &l.target), &dst)
            .ctx("create link", &dst)?;
    }
    journal.event(&staged.operation_id, event::PLACED, None)?;
    failpoint::hit("after_links");

    // 7. Commit point: everything above is made durable by one syncfs, then the state file
    // is written to a temp file, fsynced, renamed into place and the directory fsynced.
    local::sync_filesystem(bundle)?;
    local::write_state_atomic(bundle, &op_dir.join("state.json"), post)?;
    failpoint::hit("after_state_write");
    Ok(placements)
}

/// Step 8's cleanup: drop moved-aside content and staging, prune emptied directories.
pub fn cleanup(bundle: &Path, staged: &StagedOperation) -> Result<()> {
    failpoint::hit("during_cleanup");
    local::remove_staging(bundle, &staged.operation_id)?;
    failpoint::hit("cleanup_before_prune");
    let mut dirs: Vec<&str> = staged
        .actions
        .iter()
        .filter(|a| a.kind.ends_with("_delete"))
        .filter_map(|a| a.path.rsplit_once('/').map(|(d, _)| d))
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.len()));
    dirs.dedup();
    for d in dirs {
        local::prune_empty_dirs(bundle, d);
    }
    Ok(())
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
        command: "publish".into(),
        actor: ctx.actor.to_string(),
        pipeline_id: ctx.pipeline_id.to_string(),
        state_mode: plan.state_mode.to_string(),
        decision: plan.decision.to_string(),
        takeover_mode: plan.takeover_mode.to_string(),
        previous_owner: plan.previous.as_ref().map(|p| p.owner.to_string()),
        previous_source: plan.previous.as_ref().map(|p| p.source.clone()),
        source: source.source_ref(),
        takeovers: serde_json::to_value(&plan.takeovers)
            .map_err(|e| Error::Failed(e.to_string()))?,
    })
}

/// The journal rows of an operation: its record and its actions. Built from the
/// [`StagedOperation`] alone, so `recover` writes the same rows from a `plan.json` when the
/// journal that started the operation is gone.
pub fn journal_records(staged: &StagedOperation) -> Result<(OperationRecord, Vec<ActionRecord>)> {
    let o = &staged.origin;
    let json = |e: serde_json::Error| Error::Failed(e.to_string());
    let record = OperationRecord {
        operation_id: staged.operation_id.clone(),
        started_at: o.started_at.clone(),
        command: o.command.clone(),
        actor: o.actor.clone(),
        pipeline_id: o.pipeline_id.clone(),
        destination_id: staged.destination_id.clone(),
        bundle_path: staged.bundle_path.to_string_lossy().into_owned(),
        state_mode: o.state_mode.clone(),
        decision: o.decision.clone(),
        takeover_mode: o.takeover_mode.clone(),
        previous_owner: o.previous_owner.clone(),
        previous_source: o
            .previous_source
            .as_ref()
            .map(|s| (s.id.clone(), s.created_at.clone(), s.digest.clone())),
        source: (
            o.source.id.clone(),
            o.source.created_at.clone(),
            o.source.digest.clone(),
        ),
        pre_state_sha256: staged.pre_state_sha256.clone(),
        post_state_sha256: staged.post_state_sha256.clone(),
        takeovers_json: serde_json::to_string(&o.takeovers).map_err(json)?,
        plan_json: serde_json::to_string(staged).map_err(json)?,
    };
    let actions = staged
        .actions
        .iter()
        .map(|a| ActionRecord {
            kind: a.kind.clone(),
            path: a.path.clone(),
            size: a.size,
            sha256: a.sha256.clone(),
            target: a.target.clone(),
        })
        .collect();
    Ok((record, actions))
}

/// `<bundle>/.distributor-staging/<op>`.
pub fn staging_dir(bundle: &Path, op: &str) -> std::path::PathBuf {
    bundle.join(STAGING_DIR).join(op)
}
