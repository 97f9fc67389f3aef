//! What the operations share: the exit code of a run, its outcome, where the journal is,
//! whether recovery is due at a bundle path, and the journal row of a refusal; the
//! destinations a releases command runs on, its options and its report; the report
//! entries of an activation (rollback, promote) gathered into its outcome.

use crate::backend::{BundleStore, local, types};
use crate::config::{Config, Destination};
use crate::error::{Error, Result};
use crate::journal::{Journal, JournalView};
use crate::model::SourceRef;
use crate::plan::saved::PlanFile;
use crate::plan::{DestinationPlan, PlanFailed};
use crate::report::{DestinationReport, Report, Status, Summary};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use crate::error::ExitCode;

/// A report and the exit code it implies (SPEC §10).
#[derive(Debug)]
pub(crate) struct Outcome {
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
    (actor, reason): (&str, Option<&str>),
    pipeline_id: &str,
    plan: &DestinationPlan,
    src: crate::model::SourceRef,
) -> Result<String> {
    let record = crate::journal::OperationRecord {
        operation_id: uuid::Uuid::new_v4().to_string(),
        started_at: crate::clock::now(),
        command: command.to_string(),
        actor: actor.to_string(),
        reason: reason.map(str::to_string),
        pipeline_id: pipeline_id.to_string(),
        destination_id: plan.destination_id.clone(),
        bundle_path: plan.bundle_path.to_string_lossy().into_owned(),
        state_mode: plan.state_mode,
        decision: plan.decision.into(),
        takeover_mode: plan.takeover_mode,
        previous_owner: plan.previous.as_ref().map(|p| p.owner.to_string()),
        previous_source: plan.previous.as_ref().map(|p| p.source.clone()),
        source: src,
        pre_state_sha256: None,
        // Nothing was committed: no state file is the operation's.
        post_state_sha256: None,
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
pub(crate) fn check_recovery(journal: &Journal, store: &dyn BundleStore) -> Result<()> {
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
pub(crate) enum Pending {
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
pub(crate) fn pending(
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
pub(crate) fn journal_is_default(flag: Option<&Path>, config: Option<&Config>) -> bool {
    flag.is_none()
        && std::env::var_os("DISTRIBUTOR_JOURNAL").is_none_or(|v| v.is_empty())
        && config.is_none_or(|c| c.journal_path.is_none())
}

/// The journal location (SPEC §2): `--journal`, `DISTRIBUTOR_JOURNAL`, `journal.path`,
/// `$XDG_STATE_HOME/distributor/journal.sqlite3`, `~/.local/state/distributor/journal.sqlite3`.
pub(crate) fn resolve_journal(flag: Option<&Path>, config: Option<&Config>) -> Result<PathBuf> {
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

/// The destinations a releases command runs on: those `named`, else every destination
/// with a releases block. None at all is a usage error; `does` says what the command
/// does (`prune removes inactive releases of destinations with a releases block`).
pub(crate) fn releases_destinations<'a>(
    config: &'a Config,
    named: &[String],
    does: &str,
) -> Result<Vec<&'a Destination>> {
    let selected: Vec<&Destination> = if named.is_empty() {
        (config.destinations.iter())
            .filter(|d| d.releases.is_some())
            .collect()
    } else {
        config.select(named)?
    };
    if selected.is_empty() {
        return Err(Error::Usage(format!(
            "no destination in {} has releases; {does}",
            config.file.display()
        )));
    }
    Ok(selected)
}

/// The journal a run writes to, opened; none for a dry run, which writes nothing.
pub(crate) fn journal_unless_dry(dry_run: bool, path: &Path) -> Result<Option<Journal>> {
    match dry_run {
        true => Ok(None),
        false => Journal::open(path).map(Some),
    }
}

/// The journal a run writes to, or for a dry run the journal read without writing
/// anything (to refuse, exit 4, where the real run would: an unfinished operation no live
/// lock covers, SPEC §16).
pub(crate) fn journal_or_view(
    dry_run: bool,
    path: &Path,
) -> Result<(Option<Journal>, Option<JournalView>)> {
    match dry_run {
        true => Ok((None, JournalView::open(path)?)),
        false => Ok((Some(Journal::open(path)?), None)),
    }
}

/// What a releases command (`prune`, `releases adopt`, `releases settings`) runs with.
#[derive(Debug, Clone)]
pub(crate) struct ReleasesOptions {
    /// Destination ids; empty means every destination with `releases`.
    pub destinations: Vec<String>,
    /// Say what would happen; write nothing anywhere.
    pub dry_run: bool,
    /// Journal file (already resolved).
    pub journal: PathBuf,
    /// How long to wait for a destination lock.
    pub lock_timeout: Duration,
    /// Who runs it.
    pub actor: String,
    /// Why (`--reason`, `DISTRIBUTOR_REASON`, `X-Distributor-Reason`), bounded; `None`
    /// when none was given.
    pub reason: Option<String>,
}

/// The report of a releases command: one entry of kind `D` per destination.
#[derive(Debug, Serialize)]
pub(crate) struct ReleasesReport<D> {
    /// Always 1.
    pub report_version: u32,
    /// The command (`prune`, `releases adopt`, `releases settings`).
    pub command: &'static str,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Pipeline id.
    pub pipeline_id: String,
    /// One entry per destination.
    pub destinations: Vec<D>,
}

/// Runs a releases command: on the destinations [`releases_destinations`] selects (`does`
/// says what the command does), with the journal [`journal_unless_dry`] opens; `one`
/// makes each destination's entry and the exit codes it contributes. Returns the report
/// and the run's exit code ([`ExitCode::overall`]).
pub(crate) fn for_each_releases_destination<'a, D>(
    config: &'a Config,
    opts: &ReleasesOptions,
    command: &'static str,
    does: &str,
    mut one: impl FnMut(&'a Destination, Option<&mut Journal>) -> (D, Vec<ExitCode>),
) -> Result<(ReleasesReport<D>, ExitCode)> {
    let selected = releases_destinations(config, &opts.destinations, does)?;
    let mut journal = journal_unless_dry(opts.dry_run, &opts.journal)?;
    let mut report = ReleasesReport {
        report_version: 1,
        command,
        dry_run: opts.dry_run,
        pipeline_id: config.pipeline_id.clone(),
        destinations: Vec::new(),
    };
    let mut codes = Vec::new();
    for dest in selected {
        let (d, c) = one(dest, journal.as_mut());
        report.destinations.push(d);
        codes.extend(c);
    }
    Ok((report, ExitCode::overall(codes)))
}

/// The report entries of an activation command (rollback, promote), one per destination,
/// with their exit codes and the source of the first activated, gathered into its
/// [`Outcome`].
#[derive(Debug, Default)]
pub(crate) struct Activations {
    reports: Vec<DestinationReport>,
    codes: Vec<ExitCode>,
    source: Option<SourceRef>,
}

impl Activations {
    /// Adds `dest`'s result: its report (a conflict's exit code 3) and the source it
    /// activated, or the error it failed with (its plan's report, when it was planned).
    pub(crate) fn push(
        &mut self,
        dest: &Destination,
        result: std::result::Result<(DestinationReport, SourceRef), PlanFailed>,
    ) {
        match result {
            Ok((report, source)) => {
                self.source.get_or_insert(source);
                self.codes.push(if report.status == Status::Conflict {
                    ExitCode::Conflict
                } else {
                    ExitCode::Success
                });
                self.reports.push(report);
            }
            // Refused before anything began, because a release's name holds another
            // directory: the conflict `release_moved` (docs/operations.md, "Release
            // identity"), as a publication's plan reports it.
            Err(PlanFailed {
                plan: None,
                error: e,
            }) if is_moved(&e) => {
                self.codes.push(ExitCode::Conflict);
                let mut r = failed_entry(
                    dest,
                    dest.path.to_string_lossy().into_owned(),
                    e.to_string(),
                    None,
                );
                r.status = Status::Conflict;
                r.decision = Some(crate::model::Decision::Conflict);
                r.conflicts.push(crate::plan::Conflict::new(
                    crate::model::ConflictKind::ReleaseMoved,
                    None,
                    None,
                    e.to_string(),
                ));
                self.reports.push(r);
            }
            Err(PlanFailed { plan, error: e }) => {
                self.codes.push(e.exit_code());
                self.reports.push(match plan {
                    Some(plan) => DestinationReport::of_error(*plan, &e),
                    None => unplanned_failure(dest, dest.path.to_string_lossy().into_owned(), &e),
                });
            }
        }
    }

    /// The outcome of `command`: the report of every destination, the run's exit code.
    pub(crate) fn outcome(
        self,
        config: &Config,
        command: &str,
        dry_run: bool,
        reason: Option<&str>,
    ) -> Outcome {
        let summary = Summary::of(&self.reports);
        Outcome {
            report: Report {
                report_version: 1,
                command: command.into(),
                dry_run,
                pipeline_id: config.pipeline_id.clone(),
                source: self.source.unwrap_or_else(|| SourceRef {
                    id: String::new(),
                    created_at: String::new(),
                    digest: String::new(),
                }),
                destinations: self.reports,
                summary,
                plan_file: None,
                reason: reason.map(str::to_string),
            },
            exit_code: ExitCode::overall(self.codes),
            concurrent_change: false,
            saved: None,
        }
    }
}

/// Whether `e` is `release_moved` (docs/operations.md, "Release identity").
fn is_moved(e: &Error) -> bool {
    matches!(
        e.root(),
        Error::Releases(crate::error::ReleasesError::Moved { .. })
    )
}

/// The report entry of destination `dest` (at `bundle_path`) that failed with `e` before
/// it was planned.
pub(crate) fn unplanned_failure(
    dest: &Destination,
    bundle_path: String,
    e: &Error,
) -> DestinationReport {
    failed_entry(dest, bundle_path, e.to_string(), Some(e.kind()))
}

/// The report entry of destination `dest` (at `bundle_path`) that failed, or was not
/// attempted, before it was planned: `message` says why, `error_kind` of what kind.
pub(crate) fn failed_entry(
    dest: &Destination,
    bundle_path: String,
    message: String,
    error_kind: Option<&'static str>,
) -> DestinationReport {
    DestinationReport {
        destination_id: dest.id.clone(),
        bundle_path,
        state_mode: dest.state_mode,
        takeover_mode: dest.takeover,
        decision: None,
        status: Status::Failed,
        operation_id: None,
        previous: None,
        takeovers: vec![],
        conflicts: vec![],
        files: Default::default(),
        links: vec![],
        message,
        hooks: Vec::new(),
        lock_wait: None,
        error_kind,
        release_activated: None,
        releases_removed: Vec::new(),
        omitted_unchanged: None,
    }
}
