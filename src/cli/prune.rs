//! `distributor prune`.

use super::CommandOutput;
use super::progress::Shown;
use crate::error::Result;
use crate::ops::prune::prune;
use clap::Args;

/// Remove inactive releases that retention does not keep, saying for each release why it
/// is kept or removed.
///
/// The active release, the one active before it and any release an unfinished operation
/// uses are always kept; any other goes once `keep` other such releases were active after
/// it, or once it has been inactive longer than `max_age`.
#[derive(Debug, Args)]
pub(super) struct PruneArgs {
    #[command(flatten)]
    pub target: super::ReleasesSelection,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: super::RunArgs,
    /// Show no progress on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// Runs prune.
pub(super) fn run(a: PruneArgs) -> Result<CommandOutput> {
    let (config, opts) = a.target.options(a.dry_run, &a.run)?;
    // How removing releases goes (SPEC §20).
    let shown = Shown::on_stderr("prune", a.run.json, a.quiet);
    let pruned = prune(&config, &opts, shown.ticker());
    shown.finish();
    let (report, code) = pruned?;
    let stdout = super::render(a.run.json, &report, |r| r.to_text())?;
    let metrics = Some(crate::metrics::file::Run {
        pipeline: report.pipeline_id.clone(),
        rows: (report.destinations.iter())
            .map(|d| crate::metrics::file::Row {
                destination: d.destination_id.clone(),
                files_written: 0,
                files_deleted: 0,
                conflicts: u64::from(d.path_changed.is_some()),
                success: code.is_success(),
            })
            .collect(),
    });
    Ok(CommandOutput::text(stdout, code, metrics))
}
