//! `distributor rollback`.

use super::CommandOutput;
use crate::error::Result;
use crate::ops::rollback::{RollbackOptions, rollback};
use clap::Args;

/// Activate an earlier release of destinations with releases, in one atomic step.
///
/// Default target: the release active before the current one; a second rollback steps
/// further back. Afterwards, publishing the source digest rolled back from is the
/// conflict `rolled_back` (a new build publishes normally).
#[derive(Debug, Args)]
pub(super) struct RollbackArgs {
    #[command(flatten)]
    pub target: super::ReleasesSelection,
    /// The release to activate: the operation id that built it, or its unique start.
    #[arg(long, value_name = "OP_ID")]
    pub to: Option<String>,
    /// Plan only: write nothing anywhere.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: super::RunArgs,
    #[command(flatten)]
    pub text: super::TextArgs,
}

/// Runs rollback.
pub(super) fn run(a: RollbackArgs) -> Result<CommandOutput> {
    let (config, o) = a.target.options(a.dry_run, &a.run)?;
    let opts = RollbackOptions {
        destinations: o.destinations,
        to: a.to,
        dry_run: o.dry_run,
        journal: o.journal,
        lock_timeout: o.lock_timeout,
        actor: o.actor,
        reason: o.reason,
    };
    let mut outcome = rollback(&config, &opts)?;
    crate::hooks::run_for(&config, &mut outcome.report, &opts.journal);
    let metrics = Some(crate::metrics::file::Run::of_report(&outcome.report));
    Ok(CommandOutput::of_report(
        outcome.report,
        outcome.exit_code,
        metrics,
        a.run.json,
        &a.text,
    ))
}
