//! `publish` and `plan`: verify the source, then per destination resolve the bundle path,
//! probe storage, plan, and (unless dry run) lock, re-plan under the lock, and execute
//! through the journal. Shared by the CLI and the HTTP server.
//!
//! One destination's run, in the order it happens:
//! - [`read`]: the bundle path opened for reading, the state file as it is now (parsed
//!   again only when its bytes change) and the journal's placement fingerprints;
//! - [`republication`]: the fast path of a source published again unchanged, decided from
//!   the manifest, the fingerprints and storage alone;
//! - [`plan`]: storage probed and the planner run, and a saved plan's entry (SPEC §19);
//! - [`dry_run`]: `plan` and `publish --dry-run` stop there, having read what a real run
//!   would write;
//! - [`run`]: the look without the lock, the lock, planning again under it, and execution
//!   through the journal.

mod dry_run;
mod plan;
mod read;
mod republication;
mod run;
mod view;

use super::common::{ExitCode, Outcome, failed_entry, journal_refused};
use crate::backend::{Kind, kind_of};
use crate::config::{Config, Destination, PathMapping};
use crate::error::{ConfigError, Error, Result};
use crate::execute::Progress;
use crate::journal::{Journal, JournalView};
use crate::model::Decision;
use crate::plan::saved::{PlanFile, SavedDestination};
use crate::plan::{DestinationPlan, Overrides, PlanFailed};
use crate::report::{DestinationReport, Report, Status, Summary};
use crate::source::Source;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use plan::plan_rollback;

/// What to publish and how.
#[derive(Debug, Clone)]
pub(crate) struct PublishOptions {
    /// Destination ids to publish to; empty means all.
    pub destinations: Vec<String>,
    /// Plan only; write nothing anywhere.
    pub dry_run: bool,
    /// `--force`.
    pub force: bool,
    /// `--allow-delete N`: the deletion guard (`mass_delete`) lifted up to N deletions.
    pub allow_delete: Option<u64>,
    /// `publish --plan FILE` (SPEC §19): publish only where planning again under the lock
    /// gives this saved plan; elsewhere the conflict `stale_plan`.
    pub saved_plan: Option<std::sync::Arc<PlanFile>>,
    /// `plan --out FILE`: keep what was planned for each destination, for the plan file
    /// ([`Outcome::saved`]).
    pub save_plan: bool,
    /// Journal file (already resolved).
    pub journal: PathBuf,
    /// How long to wait for a destination lock.
    pub lock_timeout: Duration,
    /// Who publishes (`cli:<user>` or `token:<name>`).
    pub actor: String,
    /// Why (`--reason`, `DISTRIBUTOR_REASON`, `X-Distributor-Reason`), bounded; `None`
    /// when none was given.
    pub reason: Option<String>,
    /// `publish` or `plan`, for the report.
    pub command: String,
    /// `publish --stage` (SPEC §19): build and verify each release, hold it for
    /// `distributor promote` instead of activating it (releases destinations only).
    pub stage: bool,
}

/// Publishes (or plans) a verified source to the configured destinations.
pub(crate) fn publish(config: &Config, source: &Source, opts: &PublishOptions) -> Result<Outcome> {
    publish_with_progress(config, source, opts, None)
}

/// [`publish`], telling `progress` how staging goes (the CLI draws a progress bar).
pub(crate) fn publish_with_progress(
    config: &Config,
    source: &Source,
    opts: &PublishOptions,
    progress: Option<&dyn Progress>,
) -> Result<Outcome> {
    let selected = config.select(&opts.destinations)?;
    if opts.stage
        && let Some(d) = (selected.iter()).find(|d| !matches!(kind_of(d), Kind::Releases(_)))
    {
        return Err(Error::Usage(format!(
            "--stage: destination '{}' has no releases block; only a destination with releases stages a release for `distributor promote` (select others with --destination)",
            d.id
        )));
    }
    // A dry run reads the journal without writing anything, to say what a real run would
    // (exit 4 while recovery is pending, SPEC §16).
    let (mut journal, view) = if opts.dry_run {
        (None, JournalView::open(&opts.journal)?)
    } else {
        (Some(Journal::open(&opts.journal)?), None)
    };
    let mut reports = Vec::new();
    let mut codes: Vec<ExitCode> = Vec::new();
    let mut invalid_source: Option<String> = None;
    let mut concurrent_change = false;
    let mut saved = Vec::new();
    for dest in selected {
        if let Some(why) = &invalid_source {
            reports.push(failed_entry(
                dest,
                shown_bundle_path(config, dest, source),
                format!("not attempted: {why}"),
                Some("invalid_source"),
            ));
            continue;
        }
        let (report, code) = match publish_one(
            config,
            dest,
            source,
            opts,
            match journal.as_mut() {
                Some(j) => Journaling::Real(j),
                None => Journaling::DryRun(view.as_ref()),
            },
            progress,
            &mut saved,
        ) {
            Ok(x) => x,
            Err(PlanFailed { plan, error: e }) => {
                if matches!(e.root(), Error::Source(_)) {
                    invalid_source = Some(e.to_string());
                }
                concurrent_change |= e.is_concurrent_change();
                failed_destination(config, dest, source, plan, &e)
            }
        };
        reports.push(report);
        codes.push(code);
    }
    Ok(outcome(
        config,
        source,
        opts,
        reports,
        &codes,
        concurrent_change,
        saved,
    ))
}

/// The report and exit code of a destination whose run failed: with its plan when it got
/// that far.
fn failed_destination(
    config: &Config,
    dest: &Destination,
    source: &Source,
    plan: Option<Box<DestinationPlan>>,
    e: &Error,
) -> (DestinationReport, ExitCode) {
    let code = e.exit_code();
    let mut r = match plan {
        Some(plan) => DestinationReport::of_error(*plan, e),
        None => failed_entry(
            dest,
            shown_bundle_path(config, dest, source),
            e.to_string(),
            None,
        ),
    };
    if r.status == Status::Failed {
        r.error_kind = Some(e.kind());
    }
    (r, code)
}

/// The run's outcome from each destination's report and exit code: the report, the exit
/// code of the run, and (`plan --out`, when every destination planned) the plan file.
fn outcome(
    config: &Config,
    source: &Source,
    opts: &PublishOptions,
    reports: Vec<DestinationReport>,
    codes: &[ExitCode],
    concurrent_change: bool,
    saved: Vec<SavedDestination>,
) -> Outcome {
    // A destination can fail with a config error of its own (a template that renders an
    // unsafe path): that is 2, after 1 and before 4 and 3, never lost as 0.
    let exit_code = ExitCode::overall(codes.iter().copied());
    let summary = Summary::of(&reports);
    let all_planned = reports.iter().all(|r| r.status != Status::Failed);
    let saved = (opts.save_plan && all_planned).then(|| PlanFile {
        plan_format_version: crate::plan::saved::PLAN_FORMAT_VERSION,
        pipeline_id: config.pipeline_id.clone(),
        planned_at: crate::clock::now(),
        source: source.source_ref(),
        force: opts.force,
        allow_delete: opts.allow_delete,
        destinations: saved,
    });
    Outcome {
        report: Report {
            report_version: 1,
            command: opts.command.clone(),
            dry_run: opts.dry_run,
            pipeline_id: config.pipeline_id.clone(),
            source: source.source_ref(),
            destinations: reports,
            summary,
            plan_file: None,
            reason: opts.reason.clone(),
        },
        exit_code,
        concurrent_change,
        saved,
    }
}

/// The bundle path of `dest` as a report shows it: empty when it cannot be rendered.
fn shown_bundle_path(config: &Config, dest: &Destination, source: &Source) -> String {
    bundle_path(config, dest, source)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The bundle path of `dest` for `source` (SPEC §2 path mapping).
pub(crate) fn bundle_path(config: &Config, dest: &Destination, source: &Source) -> Result<PathBuf> {
    Ok(match &dest.path_mapping {
        PathMapping::Fixed => dest.path.clone(),
        PathMapping::SourceId => dest.path.join(&source.manifest.id),
        PathMapping::Template(t) => {
            let rel = t
                .render(
                    &source.manifest.id,
                    source.created,
                    &config.pipeline_id,
                    &dest.id,
                )
                .map_err(|m| {
                    Error::from(ConfigError::Key {
                        file: config.file.clone(),
                        key: format!(
                            "destinations[{}].path_mapping.template",
                            config.index_of(dest)
                        ),
                        message: m,
                        at: String::new(),
                    })
                })?;
            dest.path.join(rel)
        }
    })
}

impl PublishOptions {
    /// What this run lifts: `--force`, `--allow-delete`.
    pub(crate) fn overrides(&self) -> Overrides {
        Overrides {
            force: self.force,
            allow_delete: self.allow_delete,
        }
    }
}

/// The journal a run writes, or, for a dry run, the one it reads (if there is one).
enum Journaling<'j> {
    Real(&'j mut Journal),
    DryRun(Option<&'j JournalView>),
}

/// Publishes (or plans) to one destination: a dry run plans and reads ([`dry_run`]), a
/// real run plans, locks and executes through the journal ([`run`]).
fn publish_one(
    config: &Config,
    dest: &Destination,
    source: &Source,
    opts: &PublishOptions,
    journaling: Journaling<'_>,
    progress: Option<&dyn Progress>,
    saved: &mut Vec<SavedDestination>,
) -> std::result::Result<(DestinationReport, ExitCode), PlanFailed> {
    match journaling {
        Journaling::Real(journal) => {
            run::publish_locked(config, dest, source, opts, journal, progress)
        }
        Journaling::DryRun(view) => {
            dry_run::plan_and_read(config, dest, source, opts, view, progress, saved)
        }
    }
}

/// A publication refused for its conflicts is journaled (SPEC §16): the operation with
/// the conflicts (its `plan_json`), no actions and a terminal `refused` event, in one
/// transaction, so an audit shows who tried what and it never reads as unfinished. The
/// operation id, for a conflict; `None` for any other decision (nothing is journaled).
fn journal_refusal(
    config: &Config,
    plan: &DestinationPlan,
    source: &Source,
    opts: &PublishOptions,
    journal: &mut Journal,
) -> Result<Option<String>> {
    if plan.decision != Decision::Conflict {
        return Ok(None);
    }
    let op = journal_refused(
        journal,
        &opts.command,
        (&opts.actor, opts.reason.as_deref()),
        &config.pipeline_id,
        plan,
        source.source_ref(),
    )?;
    Ok(Some(op))
}

/// Whether the plan refuses for a record distributor does not believe (SPEC §17): that
/// conflict is reported before any pending recovery.
fn untrusted(plan: &DestinationPlan) -> bool {
    (plan.conflicts.iter()).any(|c| c.kind == crate::model::ConflictKind::UntrustedRecord)
}

/// Whether a decision is reported even while recovery is due at its bundle path. SPEC §6
/// refuses (exit 4) a writing decision then. `unchanged` and `skip_destination_newer` write
/// nothing and hold whatever an interrupted operation left (the state records this very
/// source, every recorded path matching it, or a newer one), so they stand. A conflict is
/// refused like a writing decision: what it objects to may be the interrupted operation's
/// half-placed files, and recovery is what resolves them.
///
/// Not on a store whose commit point is a decision record (an object store): there an
/// operation committed but not logged yet leaves the destination log short of what the
/// state holds, and a publication that reported `unchanged` would hide that until someone
/// ran `recover`; every publication is `recovery required` (exit 4) instead
/// (docs/operations.md, "Recovery").
fn stands_during_recovery(decision: Decision, store: crate::backend::Capabilities) -> bool {
    !store.commits_by_decision
        && matches!(
            decision,
            Decision::Unchanged | Decision::SkipDestinationNewer
        )
}

fn status_of(plan: &DestinationPlan, writing: Status) -> Status {
    match plan.decision {
        Decision::Conflict => Status::Conflict,
        Decision::Unchanged | Decision::SkipDestinationNewer => Status::Skipped,
        _ => writing,
    }
}

fn code_of(plan: &DestinationPlan) -> ExitCode {
    if plan.decision == Decision::Conflict {
        ExitCode::Conflict
    } else {
        ExitCode::Success
    }
}
