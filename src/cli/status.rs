//! `distributor status --config F [--destination ID]... [--json]`.

use super::CommandOutput;
use crate::error::Result;
use crate::journal::JournalView;
use crate::ops::common::{ExitCode, resolve_journal};
use crate::ops::inspect;
use crate::ops::inspect_report::{checked_metrics, status_quiet_text, status_text};
use clap::Args;
use std::path::PathBuf;

/// Show what each destination holds according to its state.
#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    #[command(flatten)]
    pub target: super::Selection,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Print only a summary line and, before it, one line for each destination that
    /// failed, waits for recovery or holds an invalid or untrusted record, saying why.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Journal file, read to tell pending recovery (else DISTRIBUTOR_JOURNAL, journal.path,
    /// $XDG_STATE_HOME/distributor/journal.sqlite3). Nothing is written to it.
    #[arg(long, value_name = "P")]
    pub journal: Option<PathBuf>,
}

/// Runs the command.
pub(super) fn run(a: StatusArgs) -> Result<CommandOutput> {
    let config = a.target.pipeline.load()?;
    let dests = config.select(&a.target.destinations)?;
    let view = JournalView::open(&resolve_journal(a.journal.as_deref(), Some(&config))?)?;
    let st = inspect::status(&dests, view.as_ref());
    let codes: Vec<ExitCode> = st.iter().map(inspect::BundleStatus::exit_code).collect();
    let code = ExitCode::overall(codes.iter().copied());
    let rows = (st.iter()).map(|s| s.destination_id.as_str());
    let metrics = Some(checked_metrics(&config.pipeline_id, rows.zip(codes)));
    let stdout = if a.json {
        let v = serde_json::json!({"pipeline_id": config.pipeline_id, "destinations": st});
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    } else if a.quiet {
        status_quiet_text(&st)
    } else {
        status_text(&st)
    };
    Ok(CommandOutput::text(stdout, code, metrics))
}
