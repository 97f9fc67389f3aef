//! What `recover` says of an operation: why it is closed, rolled forward or back, or
//! diverged, and what an operator does about a diverged one.

use super::{Outcome, RecoveredOperation};
use crate::backend::releases::ReleaseStore;
use crate::backend::{self, BundleStore};
use crate::execute::{POST_STATE_FILE, PRE_STATE_FILE, StagedOperation};
use crate::state::STATE_FILE;
use std::path::Path;

/// Fills in what the record says of the operation.
pub(super) fn describe(r: &mut RecoveredOperation, staged: &StagedOperation) {
    r.pipeline_id = Some(staged.origin.pipeline_id.clone());
    r.destination_id = Some(staged.destination_id.clone());
    r.decision = Some(staged.origin.decision.to_string());
    r.pre_state_sha256 = staged.pre_state_sha256.clone();
    r.post_state_sha256 = Some(staged.post_state_sha256.clone());
}

/// Why an operation without a staging entry is closed.
pub(super) fn closed_message(applied: bool, unfinished_record: bool, dry_run: bool) -> String {
    let mut m = if applied {
        "applied elsewhere: its staging entry is gone and .distributor.json is its post-state (it was finished by its own run before that stopped, or rolled forward by another journal's recover)".to_string()
    } else {
        "not applied: its staging entry does not exist and .distributor.json is not its post-state (it never reached the destination, or was rolled back elsewhere)".to_string()
    };
    if unfinished_record {
        m.push_str(if dry_run {
            "; would remove its unfinished staging record (it changed nothing)"
        } else {
            "; removed its unfinished staging record (it changed nothing)"
        });
    }
    m.push_str("; nothing else was touched");
    m
}

/// Why an operation rolls forward or back, and what was (or would be) done.
pub(super) fn explain(outcome: Outcome, had_state: bool, dry_run: bool) -> String {
    let (why, done, would) = match outcome {
        Outcome::RolledForward => (
            ".distributor.json is the planned post-state: the commit point was reached",
            "finished the cleanup",
            "would finish the cleanup",
        ),
        _ if had_state => (
            ".distributor.json is the state before the operation: the commit point was not reached",
            "restored moved-aside content and removed placed content",
            "would restore moved-aside content and remove placed content",
        ),
        _ => (
            "there was no .distributor.json before and there is none now: the commit point was not reached",
            "restored moved-aside content and removed placed content",
            "would restore moved-aside content and remove placed content",
        ),
    };
    format!("{why}; {}", if dry_run { would } else { done })
}

/// [`explain`] for an object store, where the operation's decision record decides
/// (SPEC §14).
pub(super) fn explain_decided(outcome: Outcome, dry_run: bool) -> String {
    let (why, done, would) = match outcome {
        Outcome::RolledForward => (
            "its decision record says commit: the commit point was reached",
            "finished the deletes and the state object, and removed its staging",
            "would finish the deletes and the state object, and remove its staging",
        ),
        _ => (
            "it has no commit decision and the state object is the state before it: the commit point was not reached",
            "decided abort, restored moved-aside objects and removed the objects it wrote",
            "would decide abort, restore moved-aside objects and remove the objects it wrote",
        ),
    };
    format!("{why}; {}", if dry_run { would } else { done })
}

/// What a roll-forward did with a state object that was neither the pre- nor the
/// post-state (SPEC §17).
pub(super) fn replaced_message(r: &backend::ReplacedState) -> String {
    format!(
        "the state object held sha256 {} (etag {}), neither the state before the operation nor the state it committed: it was copied to {} (kept, never deleted) and overwritten with the post-state",
        r.sha256,
        r.etag.as_deref().unwrap_or("none"),
        r.copied_to
    )
}

/// Why a releases operation diverged (its `path` names neither the release it activates
/// nor the one active before it), and what an operator does: point `path` back at one of
/// them, never write into a release (they are read-only, and shared by hard links).
pub(super) fn releases_diverged_message(
    bundle: &Path,
    op_dir: &Path,
    staged: &StagedOperation,
    store: &dyn BundleStore,
) -> String {
    let rec = staged.releases.as_ref().expect("a releases operation");
    let target = rec.target(&staged.operation_id);
    let dir = &rec.settings.dir;
    let now = match ReleaseStore::of(store).and_then(|r| r.active_release()) {
        Some(r) => format!("names release {r}"),
        None => "is not a symlink to a release (missing, or a plain directory)".to_string(),
    };
    let before = match &rec.active_before {
        Some(b) => format!("a symlink to release {b} ({}) again", dir.join(b).display()),
        None => "absent again (no release was active before)".to_string(),
    };
    format!(
        "{} {now}, which is neither the release this operation activates ({target}) nor the one active before it: something else changed it after the interruption. Nothing was touched. To roll back, make {} {before}; to roll forward, make it a symlink to {} (in both cases a new symlink renamed over it, e.g. `ln -s TARGET {tmp} && mv -T {tmp} {}`); then run `distributor recover` again. Never copy a state file into a release: releases are read-only and share files. To keep the destination as it is instead, remove {} by hand and run `distributor recover --abandon {}`.",
        bundle.display(),
        bundle.display(),
        dir.join(target).display(),
        bundle.display(),
        op_dir.display(),
        staged.operation_id,
        tmp = bundle.with_extension("new").display(),
    )
}

pub(super) fn diverged_message(
    bundle: &Path,
    op_dir: &Path,
    staged: &StagedOperation,
    now: &std::result::Result<Option<String>, String>,
    staged_now: bool,
) -> String {
    let state = bundle.join(STATE_FILE);
    let found = match now {
        Ok(Some(sha)) => format!("{} has sha256 {sha}", state.display()),
        Ok(None) => format!("{} is absent", state.display()),
        Err(why) => why.clone(),
    };
    let pre = staged
        .pre_state_sha256
        .as_deref()
        .map(|s| format!("sha256 {s}"))
        .unwrap_or_else(|| "absent".into());
    let mut m = format!(
        "{found}, which is neither the state before the operation ({pre}) nor its planned post-state (sha256 {}): something else changed it after the interruption. Nothing was touched. ",
        staged.post_state_sha256
    );
    if staged_now {
        m.push_str(&format!(
            "Check what changed: {} and {} hold the state before and after, {}/old the moved-aside originals, {}/new the staged files not yet placed. To roll back, copy {PRE_STATE_FILE} over .distributor.json (or remove .distributor.json when there was none before); to roll forward, copy {POST_STATE_FILE} over it; then run `distributor recover` again. To keep the destination as it is instead, remove {} by hand and run `distributor recover --abandon {}`.",
            op_dir.join(PRE_STATE_FILE).display(),
            op_dir.join(POST_STATE_FILE).display(),
            op_dir.display(),
            op_dir.display(),
            op_dir.display(),
            staged.operation_id,
        ));
    } else {
        m.push_str(&format!(
            "The operation's staging directory is gone, so no half-done work of it is left in the destination (another publication may have replaced its state). Check the destination with `distributor verify`; when it is right as it is, end this operation with `distributor recover --abandon {}`.",
            staged.operation_id
        ));
    }
    m
}
