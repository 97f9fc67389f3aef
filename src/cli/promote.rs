//! `distributor promote`.

use super::CommandOutput;
use crate::error::{Error, Result};
use crate::ops::common::resolve_journal;
use crate::ops::promote::{PromoteOptions, promote};
use clap::Args;

/// Activate releases `publish --stage` built, each in one atomic step.
///
/// Only while the active release is the one the staged release was built against
/// (otherwise the conflict stale_stage: stage again). Guarded like a publication.
#[derive(Debug, Args)]
pub(super) struct PromoteArgs {
    #[command(flatten)]
    pub pipeline: super::ConfigArgs,
    /// A destination and the staged operation to promote there (its id, or its unique
    /// start); repeatable.
    #[arg(
        long = "destination",
        num_args = 2,
        value_names = ["ID", "OP_ID"],
        required = true,
        value_hint = clap::ValueHint::Other
    )]
    pub destinations: Vec<String>,
    /// Allow up to N deletions where guard.max_delete would refuse them (mass_delete).
    #[arg(long, value_name = "N")]
    pub allow_delete: Option<u64>,
    /// Plan only: write nothing anywhere.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: super::RunArgs,
    #[command(flatten)]
    pub text: super::TextArgs,
}

/// Runs promote.
pub(super) fn run(a: PromoteArgs) -> Result<CommandOutput> {
    let lock_timeout = a.run.lock_timeout()?;
    let actor = a.run.actor()?;
    let reason = a.run.reason()?;
    let config = a.pipeline.load()?;
    crate::hooks::check_programs(&config)?;
    let targets: Vec<(String, String)> = a
        .destinations
        .chunks(2)
        .map(|p| match p {
            [id, op] => Ok((id.clone(), op.clone())),
            _ => Err(Error::Usage("--destination takes ID OP_ID".into())),
        })
        .collect::<Result<_>>()?;
    let opts = PromoteOptions {
        targets,
        dry_run: a.dry_run,
        allow_delete: a.allow_delete,
        journal: resolve_journal(a.run.journal.as_deref(), Some(&config))?,
        lock_timeout,
        actor,
        reason,
    };
    let mut outcome = promote(&config, &opts)?;
    // After every destination's lock was released (SPEC §19); never for a dry run.
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
