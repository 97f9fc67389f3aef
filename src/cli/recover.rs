//! `distributor recover [--config F] [--journal P] [--dry-run] [--json] [--lock-timeout SECS]`.

use super::CommandOutput;
use super::progress::Shown;
use crate::config::Config;
use crate::error::Result;
use crate::ops::common::{journal_is_default, resolve_journal};
use crate::ops::recover::{RecoverOptions, abandon, recover};
use clap::Args;
use std::path::PathBuf;

/// Finish or undo interrupted operations: roll forward when the commit point was reached,
/// roll back when it was not, report `diverged` (exit 1) and touch nothing otherwise.
#[derive(Debug, Args)]
pub(super) struct RecoverArgs {
    /// Pipeline config file (YAML): also look for interrupted operations in the staging
    /// directories of its destinations, even those this journal never saw.
    #[arg(long, value_name = "F")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub run: super::RunArgs,
    /// Report what would be done; write nothing anywhere.
    #[arg(long)]
    pub dry_run: bool,
    /// Show no progress on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// End this diverged operation without recovering it: the journal stops asking for its
    /// recovery; the destination is not touched (its staging, if any, is left for you).
    #[arg(long, value_name = "OP_ID")]
    pub abandon: Option<String>,
}

/// Runs the command.
pub(super) fn run(a: RecoverArgs) -> Result<CommandOutput> {
    let lock_timeout = a.run.lock_timeout()?;
    let actor = a.run.actor()?;
    if a.run.reason.is_some() {
        return Err(crate::error::Error::Usage(
            "--reason: recover finishes operations that other runs started, and their own reasons stand; give the reason to the command that runs next".into(),
        ));
    }
    let config = a.config.as_deref().map(Config::load).transpose()?;
    let journal = resolve_journal(a.run.journal.as_deref(), config.as_ref())?;
    if journal_is_default(a.run.journal.as_deref(), config.as_ref()) {
        // A bare `recover` reads the default journal: say which, since the operations to
        // recover may be in another (SPEC §16).
        eprintln!(
            "using the default journal {} (no --journal, DISTRIBUTOR_JOURNAL or journal.path{})",
            journal.display(),
            if config.is_none() {
                ", no --config"
            } else {
                ""
            }
        );
    }
    // The log entries this run writes for operations it finishes say so.
    crate::backend::local::log::set_recovering(&actor);
    let opts = RecoverOptions {
        journal,
        dry_run: a.dry_run,
        lock_timeout,
        actor,
    };
    let report = match &a.abandon {
        Some(op) => abandon(op, &opts)?,
        None => {
            // How recovering each operation goes (SPEC §20).
            let shown = Shown::on_stderr("recover", a.run.json, a.quiet);
            let recovered = recover(config.as_ref(), &opts, shown.ticker());
            shown.finish();
            recovered?
        }
    };
    let code = report.exit_code();
    // With a config, one series per destination: recovery succeeded there unless one of
    // its operations was left for a person.
    let metrics = config.as_ref().map(|c| crate::metrics::file::Run {
        pipeline: c.pipeline_id.clone(),
        rows: (c.destinations.iter())
            .map(|d| {
                let left = (report.operations.iter())
                    .filter(|o| o.destination_id.as_deref() == Some(d.id.as_str()))
                    .any(|o| o.needs_a_person())
                    || report.errors.iter().any(|e| e.destination_id == d.id);
                crate::metrics::file::Row::checked(&d.id, !left)
            })
            .collect(),
    });
    Ok(CommandOutput {
        report: None,
        stdout: if a.run.json {
            report.to_json()
        } else {
            report.to_text()
        },
        code,
        metrics,
    })
}
