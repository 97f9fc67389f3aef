//! `distributor rollback`.

use super::CommandOutput;
use crate::config::Config;
use crate::error::Result;
use crate::ops::common::resolve_journal;
use crate::ops::rollback::{RollbackOptions, rollback};
use clap::Args;
use std::path::PathBuf;

/// Activate an earlier release of destinations with releases, in one atomic step.
///
/// Default target: the release active before the current one; a second rollback steps
/// further back. Afterwards, publishing the source digest rolled back from is the
/// conflict `rolled_back` (a new build publishes normally).
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// Pipeline config file (YAML).
    #[arg(long, value_name = "F")]
    pub config: PathBuf,
    /// Only these destinations (repeatable); default: every destination with releases.
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
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
pub fn run(a: RollbackArgs) -> Result<CommandOutput> {
    let lock_timeout = a.run.lock_timeout()?;
    let config = Config::load(&a.config)?;
    let opts = RollbackOptions {
        destinations: a.destinations,
        to: a.to,
        dry_run: a.dry_run,
        journal: resolve_journal(a.run.journal.as_deref(), Some(&config))?,
        lock_timeout,
        actor: a.run.actor(),
    };
    let mut outcome = rollback(&config, &opts)?;
    crate::hooks::run_for(&config, &mut outcome.report, &opts.journal);
    let metrics = Some(crate::metrics::file::Run::of_report(&outcome.report));
    // A JSON report is written out as it is serialized (`finish`).
    let (stdout, report) = if a.run.json {
        (String::new(), Some(outcome.report))
    } else {
        (outcome.report.to_text(&a.text.options()), None)
    };
    Ok(CommandOutput {
        report,
        stdout,
        code: outcome.exit_code,
        metrics,
    })
}
