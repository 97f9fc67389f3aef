//! What the operations share: the exit code of a run, its outcome, where the journal is,
//! whether recovery is due at a bundle path, and the journal row of a refusal.

use crate::backend::{BundleStore, local, types};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::journal::{Journal, JournalView};
use crate::plan::DestinationPlan;
use crate::plan::saved::PlanFile;
use crate::report::Report;
use std::path::{Path, PathBuf};

pub use crate::error::ExitCode;

/// A report and the exit code it implies (SPEC §10).
#[derive(Debug)]
pub struct Outcome {
    /// The report.
    pub report: Report,
    /// Success, failed, usage (a destination's own config), conflict or recovery
    /// required.
    pub exit_code: ExitCode,
    /// A destination failed because another writer changed its storage first (an object
    /// store refused a conditional write, or the lease was lost): `serve` answers 409.
    pub concurrent_change: bool,
    /// With `PublishOptions::save_plan`: what was planned, for the plan file; `None`
    /// when a destination could not be planned.
    pub saved: Option<PlanFile>,
}

/// Journals `plan`, refused for its conflicts, as a finished operation of `command` (SPEC
/// §16): its conflicts, no actions, the terminal `refused` event, in one transaction.
/// Returns its operation id.
pub(crate) fn journal_refused(
    journal: &mut Journal,
    command: &str,
    actor: &str,
    pipeline_id: &str,
    plan: &DestinationPlan,
    src: crate::model::SourceRef,
) -> Result<String> {
    let record = crate::journal::OperationRecord {
        operation_id: uuid::Uuid::new_v4().to_string(),
        started_at: crate::clock::now(),
        command: command.to_string(),
        actor: actor.to_string(),
        pipeline_id: pipeline_id.to_string(),
        destination_id: plan.destination_id.clone(),
        bundle_path: plan.bundle_path.to_string_lossy().into_owned(),
        state_mode: plan.state_mode.to_string(),
        decision: plan.decision.to_string(),
        takeover_mode: plan.takeover_mode.to_string(),
        previous_owner: plan.previous.as_ref().map(|p| p.owner.to_string()),
        previous_source: plan.previous.as_ref().map(|p| p.source.clone()),
        source: src,
        pre_state_sha256: None,
        // Nothing was committed: no state file is the operation's.
        post_state_sha256: String::new(),
        takeovers_json: "[]".into(),
        plan_json: serde_json::json!({ "conflicts": plan.conflicts }).to_string(),
    };
    journal.refused_operation(&record, &plan.message)?;
    Ok(record.operation_id)
}

/// The names staging holds. An untrusted record is not a pending recovery: the plan's
/// conflict `untrusted_record` reports it (SPEC §17, decided before §6 step 2).
fn staging_names(store: &dyn BundleStore) -> Result<Vec<String>> {
    Ok(store
        .staging_entries()?
        .into_iter()
        .filter_map(|e| match e {
            types::StagingEntry::Operation(n) => Some(n),
            types::StagingEntry::Unfinished(op) => Some(format!("{}{op}", local::TMP_PREFIX)),
            types::StagingEntry::Foreign(n, _) => Some(n),
            types::StagingEntry::Legacy(op) => Some(format!("{}/{op}", local::LEGACY_STAGING_DIR)),
            types::StagingEntry::Untrusted(..) => None,
        })
        .collect())
}

/// Refuses (exit 4) when an operation on the bundle path is unfinished or staging holds
/// anything.
pub fn check_recovery(journal: &Journal, store: &dyn BundleStore) -> Result<()> {
    let key = store.path().to_string_lossy();
    let unfinished = journal.unfinished_for(&key)?;
    let staging = staging_names(store)?;
    match recovery_due(&key, &unfinished, &staging) {
        None => Ok(()),
        Some(what) => Err(Error::RecoveryRequired(what)),
    }
}

/// What is unfinished at bundle path `key`, said as the refusal says it; `None` when
/// nothing is.
fn recovery_due(key: &str, unfinished: &[String], staging: &[String]) -> Option<String> {
    let what = if let Some(op) = unfinished.first() {
        format!("operation {op} on {key} is unfinished")
    } else if !staging.is_empty() {
        format!(
            "{}/{} holds {}",
            key,
            local::STAGING_DIR,
            staging.join(", ")
        )
    } else {
        return None;
    };
    Some(format!(
        "recovery required: {what}; run `distributor recover` (with the same --config/--journal) before publishing again"
    ))
}

/// Whether recovery is pending at a bundle path, as a command that takes no lock sees it
/// (SPEC §16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// Nothing is unfinished.
    Nothing,
    /// Something is unfinished and another process holds the lock now: it is that
    /// process's work in progress (who, as its lock says), not a recovery.
    Busy(String),
    /// Recovery is due: what is unfinished, and what to run.
    Recovery(String),
}

/// Reads, without writing or locking anything, whether an operation at `bundle` is
/// unfinished (in the journal `view`, or in the staging of `store`) and whether a live
/// lock covers it.
pub fn pending(
    view: Option<&JournalView>,
    bundle: &Path,
    store: Option<&dyn BundleStore>,
) -> Result<Pending> {
    let key = bundle.to_string_lossy();
    let unfinished = match view {
        Some(v) => v.unfinished_for(&key)?,
        None => Vec::new(),
    };
    let staging = match store {
        Some(s) => staging_names(s)?,
        None => Vec::new(),
    };
    let Some(what) = recovery_due(&key, &unfinished, &staging) else {
        return Ok(Pending::Nothing);
    };
    if let Some(who) = store.map(|s| s.lock_holder()).transpose()?.flatten() {
        return Ok(Pending::Busy(who));
    }
    Ok(Pending::Recovery(what))
}

/// Whether [`resolve_journal`] falls through to the default location (no `--journal`,
/// `DISTRIBUTOR_JOURNAL` or `journal.path`).
pub fn journal_is_default(flag: Option<&Path>, config: Option<&Config>) -> bool {
    flag.is_none()
        && std::env::var_os("DISTRIBUTOR_JOURNAL").is_none_or(|v| v.is_empty())
        && config.is_none_or(|c| c.journal_path.is_none())
}

/// The journal location (SPEC §2): `--journal`, `DISTRIBUTOR_JOURNAL`, `journal.path`,
/// `$XDG_STATE_HOME/distributor/journal.sqlite3`, `~/.local/state/distributor/journal.sqlite3`.
pub fn resolve_journal(flag: Option<&Path>, config: Option<&Config>) -> Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("DISTRIBUTOR_JOURNAL").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = config.and_then(|c| c.journal_path.clone()) {
        return Ok(p);
    }
    if let Some(p) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p).join("distributor").join("journal.sqlite3"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/state/distributor/journal.sqlite3")),
        None => Err(Error::Usage(
            "no journal location: set --journal, DISTRIBUTOR_JOURNAL, journal.path, XDG_STATE_HOME or HOME".into(),
        )),
    }
}
