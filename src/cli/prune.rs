//! `distributor prune`.

use super::progress::Shown;
use super::{CommandOutput, cli_actor};
use crate::config::Config;
use crate::error::Result;
use crate::ops::common::resolve_journal;
use crate::ops::prune::{PruneOptions, prune};
use clap::Args;
use std::path::PathBuf;

/// Remove inactive releases that retention does not keep, saying for each release why it
/// is kept or removed.
///
/// The active release, the one active before it and any release an unfinished operation
/// uses are always kept; any other goes once `keep` other such releases were active after
/// it, or once it has been inactive longer than `max_age`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Pipeline config file (YAML).
    #[arg(long, value_name = "F")]
    pub config: PathBuf,
    /// Only these destinations (repeatable); default: every destination with releases.
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Show no progress on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Journal file (else DISTRIBUTOR_JOURNAL, journal.path, $XDG_STATE_HOME/distributor/journal.sqlite3).
    #[arg(long, value_name = "P")]
    pub journal: Option<PathBuf>,
    /// Seconds to wait for a destination lock.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub lock_timeout: f64,
    /// Who runs this, for the journal (else DISTRIBUTOR_ACTOR, the CI's identity, user@host).
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,
}

/// Runs prune.
pub fn run(a: PruneArgs) -> Result<CommandOutput> {
    let lock_timeout = super::lock_timeout(a.lock_timeout)?;
    let config = Config::load(&a.config)?;
    let opts = PruneOptions {
        destinations: a.destinations,
        dry_run: a.dry_run,
        journal: resolve_journal(a.journal.as_deref(), Some(&config))?,
        lock_timeout,
        actor: cli_actor(a.actor.as_deref()),
    };
    // How removing releases goes (SPEC §20).
    let shown = Shown::on_stderr("prune", a.json, a.quiet);
    let pruned = prune(&config, &opts, shown.ticker());
    shown.finish();
    let (report, code) = pruned?;
    let stdout = super::render(a.json, &report, |r| r.to_text())?;
    let metrics = Some(crate::metrics::file::Run {
        pipeline: report.pipeline_id.clone(),
        rows: (report.destinations.iter())
            .map(|d| crate::metrics::file::Row {
                destination: d.destination_id.clone(),
                files_written: 0,
                files_deleted: 0,
                conflicts: u64::from(d.path_changed.is_some()),
                success: code == 0,
            })
            .collect(),
    });
    Ok(CommandOutput {
        report: None,
        stdout,
        code,
        metrics,
    })
}
