//! `distributor prune` (SPEC §15): retention on demand. For every release of the selected
//! destinations it says whether it is kept or removed, and why; unless a dry run it
//! removes the ones retention does not keep, under the destination lock, and journals the
//! pruning as an operation (command and decision `prune`, event `pruned` naming what was
//! removed, with the active release's placement fingerprints taken after it: unlinking a
//! release's files changes the ctime of those the active release shares).

use crate::backend::StoreRead;
use crate::backend::releases::{PruneBy, ReleaseStore, log::Verdict};
use crate::clock::now;
use crate::config::{Config, Destination};
use crate::error::{Error, ReleasesError, Result};
use crate::execute::record_removal;
use crate::journal::{Event, Journal, OperationRecord};
use crate::model::RecordedDecision;
use crate::ops::common::{
    ExitCode, ReleasesOptions, ReleasesReport, check_recovery, for_each_releases_destination,
};
use crate::progress::Ticker;
use crate::state::StateFile;
use serde::Serialize;
use std::fmt::Write;

/// What to prune and how.
pub(crate) type PruneOptions = ReleasesOptions;

/// The prune report.
pub(crate) type PruneReport = ReleasesReport<DestinationPrune>;

/// Retention at one destination.
#[derive(Debug, Serialize)]
pub(crate) struct DestinationPrune {
    /// Destination id.
    pub destination_id: String,
    /// Its `path`.
    pub bundle_path: String,
    /// Its `releases.dir`.
    pub releases_dir: String,
    /// The journaled operation, when releases were removed.
    pub operation_id: Option<String>,
    /// Every release, oldest activation first, with its verdict.
    pub releases: Vec<Verdict>,
    /// How many were (or would be) removed.
    pub removed: usize,
    /// Why nothing was removed when `path` is not the symlink the last logged activation
    /// made (SPEC §17): the conflict `path_changed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_changed: Option<String>,
    /// Why nothing was removed when the active release's name holds another directory
    /// than the release the log activated (docs/operations.md, "Release identity"): the
    /// conflict `release_moved`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_moved: Option<String>,
    /// The destination log's bad entries (SPEC §18), while which retention removes
    /// nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
    /// The error, when the destination could not be pruned.
    pub error: Option<String>,
}

impl PruneReport {
    /// The report as text.
    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        for d in &self.destinations {
            let verb = if self.dry_run {
                "would remove"
            } else {
                "removed"
            };
            let _ = writeln!(
                out,
                "destination {} -> {} (releases in {}): {} kept, {verb} {}",
                d.destination_id,
                d.bundle_path,
                d.releases_dir,
                d.releases.len() - d.removed,
                d.removed
            );
            if let Some(e) = &d.error {
                let _ = writeln!(out, "  error: {e}");
            }
            if let Some(e) = &d.path_changed {
                let _ = writeln!(out, "  ! path_changed: {e}");
            }
            if let Some(e) = &d.release_moved {
                let _ = writeln!(out, "  ! release_moved: {e}");
            }
            if let Some(e) = &d.log_error {
                let _ = writeln!(out, "  error: {e}");
            }
            for v in &d.releases {
                let _ = writeln!(
                    out,
                    "  {} {}: {}",
                    if v.keep { "keep  " } else { "remove" },
                    v.release,
                    v.reason
                );
            }
        }
        out
    }
}

/// Prunes the selected destinations; returns the report and the exit code (0, or the
/// worst error's); `progress` hears of each release removed.
pub(crate) fn prune(
    config: &Config,
    opts: &PruneOptions,
    progress: Ticker<'_>,
) -> Result<(PruneReport, ExitCode)> {
    for_each_releases_destination(
        config,
        opts,
        "prune",
        "prune removes inactive releases of destinations with a releases block",
        |dest, journal| {
            let mut d = DestinationPrune {
                destination_id: dest.id.clone(),
                bundle_path: dest.path.to_string_lossy().into_owned(),
                releases_dir: (dest.releases.as_ref())
                    .map(|r| r.dir.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                operation_id: None,
                releases: Vec::new(),
                removed: 0,
                path_changed: None,
                release_moved: None,
                log_error: None,
                error: None,
            };
            let mut codes = Vec::new();
            if let Err(e) = prune_one(config, dest, opts, journal, &mut d, progress) {
                codes.push(e.exit_code());
                d.error = Some(e.to_string());
            }
            if d.log_error.is_some() {
                codes.push(ExitCode::Failed);
            }
            if d.path_changed.is_some() || d.release_moved.is_some() {
                codes.push(ExitCode::Conflict);
            }
            (d, codes)
        },
    )
}

fn prune_one(
    config: &Config,
    dest: &Destination,
    opts: &PruneOptions,
    journal: Option<&mut Journal>,
    d: &mut DestinationPrune,
    progress: Ticker<'_>,
) -> Result<()> {
    let settings = dest.releases.as_ref().ok_or_else(|| {
        Error::Usage(format!(
            "destination '{}' has no releases block; there is nothing to prune",
            dest.id
        ))
    })?;
    let lock = (!opts.dry_run).then_some(crate::backend::LockRequest {
        timeout: opts.lock_timeout,
        create: false,
        actor: &opts.actor,
        history: journal
            .as_deref()
            .map(|j| j as &dyn crate::backend::History),
    });
    let Some(store) = ReleaseStore::open(&dest.path, settings, lock)? else {
        return Ok(());
    };
    if let Some(why) = store.mismatch()? {
        return Err(ReleasesError::Mismatch {
            why,
            outcome: "nothing pruned",
        }
        .into());
    }
    // Retention removes nothing while path is not what the log says, or the log has bad
    // entries: say why.
    d.path_changed = store.path_changed().map(str::to_string);
    d.release_moved = store.release_moved();
    d.log_error = store.log_view()?.untrusted();
    if d.path_changed.is_some() || d.release_moved.is_some() || d.log_error.is_some() {
        d.releases = ordered(&store, store.prune(true, Ticker::NONE)?)?;
        return Ok(());
    }
    let Some(journal) = journal else {
        d.releases = ordered(&store, store.prune(true, Ticker::NONE)?)?;
        d.removed = d.releases.iter().filter(|v| !v.keep).count();
        return Ok(());
    };
    check_recovery(journal, &store)?;
    let verdicts = store.prune(true, Ticker::NONE)?;
    if verdicts.iter().all(|v| v.keep) {
        d.releases = ordered(&store, verdicts)?;
        return Ok(());
    }
    remove(config, dest, opts, journal, &store, d, progress)
}

/// Removes the releases retention does not keep, then journals the pruning in one
/// transaction (with what was removed, or why it stopped): a removal needs no recovery,
/// and the operation never reads as unfinished.
fn remove(
    config: &Config,
    dest: &Destination,
    opts: &PruneOptions,
    journal: &mut Journal,
    store: &ReleaseStore,
    d: &mut DestinationPrune,
    progress: Ticker<'_>,
) -> Result<()> {
    let state = match store.read_state()?.parse() {
        StateFile::Valid(s) => Some(s),
        _ => None,
    };
    let pruned = store.prune(false, progress.on(&dest.id));
    // `path` changed while retention ran (checked before each removal): it stopped, and
    // the active release's files are not looked at through `path` again.
    let stopped = (pruned.as_ref().ok()).and_then(|v| crate::backend::releases::stopped(v));
    let outputs: Vec<(&str, crate::hash::ContentHash)> = (state.iter())
        .flat_map(|s| s.outputs.iter().map(|o| (o.path.as_str(), o.sha256)))
        .collect();
    let fingerprints = match &stopped {
        Some(_) => Vec::new(),
        None => store.fingerprints(&outputs)?,
    };
    d.path_changed = stopped;
    let removed: Vec<String> = match &pruned {
        Ok(v) => (v.iter())
            .filter(|v| !v.keep)
            .map(|v| v.release.clone())
            .collect(),
        Err(_) => Vec::new(),
    };
    let detail = match &pruned {
        Ok(_) => format!("removed releases {}", removed.join(", ")),
        Err(e) => format!("retention failed: {e}"),
    };
    let op_id = uuid::Uuid::new_v4().to_string();
    let owner = state.as_ref().and_then(|s| s.owners.first());
    let source = owner.map(|o| o.source.clone()).unwrap_or_default();
    // None when no state file can be read: the row holds the empty text as pre and post.
    let state_sha = crate::backend::state_hash(store)?.ok().flatten();
    let record = prune_record(
        config,
        dest,
        opts,
        &op_id,
        &d.bundle_path,
        source,
        state_sha,
    );
    record_removal(
        journal,
        &record,
        &[(Event::Pruned, Some(&detail)), (Event::Completed, None)],
        &fingerprints,
        |journal_id| {
            if pruned.is_err() {
                return Ok(());
            }
            let by = PruneBy {
                actor: &opts.actor,
                pipeline_id: &config.pipeline_id,
                journal_id: Some(journal_id),
            };
            store.log_prune(&op_id, &by, &dest.id, &removed)
        },
    )?;
    let verdicts = pruned?;
    d.operation_id = Some(op_id);
    d.removed = verdicts.iter().filter(|v| !v.keep).count();
    d.releases = ordered(store, verdicts)?;
    Ok(())
}

/// The journal row of a pruning (command and decision `prune`): it changes no state, so
/// the state hash is its pre and post alike.
fn prune_record(
    config: &Config,
    dest: &Destination,
    opts: &PruneOptions,
    op_id: &str,
    bundle_path: &str,
    source: crate::model::SourceRef,
    state_sha: Option<crate::hash::ContentHash>,
) -> OperationRecord {
    OperationRecord {
        operation_id: op_id.to_string(),
        started_at: now(),
        command: "prune".into(),
        actor: opts.actor.clone(),
        reason: opts.reason.clone(),
        pipeline_id: config.pipeline_id.clone(),
        destination_id: dest.id.clone(),
        bundle_path: bundle_path.to_string(),
        state_mode: dest.state_mode,
        decision: RecordedDecision::Prune,
        takeover_mode: dest.takeover,
        previous_owner: None,
        previous_source: None,
        source,
        pre_state_sha256: state_sha,
        post_state_sha256: state_sha,
        takeovers_json: "[]".into(),
        plan_json: "{}".into(),
    }
}

fn ordered(store: &ReleaseStore, v: Vec<Verdict>) -> Result<Vec<Verdict>> {
    store.in_activation_order(v)
}
