//! `distributor verify --config F [--destination ID]... [--deep] [--json]`.

use super::CommandOutput;
use super::progress::Shown;
use crate::error::Result;
use crate::journal::JournalView;
use crate::ops::common::{ExitCode, resolve_journal};
use crate::ops::inspect;
use crate::ops::inspect_report::{checked_metrics, verify_quiet_text, verify_text};
use clap::Args;
use std::path::PathBuf;

/// Compare storage with state: missing, modified and unrecorded paths, and the state with
/// the destination log: log_mismatch (exit 3 on drift).
#[derive(Debug, Args)]
pub(super) struct VerifyArgs {
    #[command(flatten)]
    pub target: super::Selection,
    /// s3 destinations: download and hash every recorded object instead of trusting the
    /// listing's size and ETag (local destinations always hash every recorded file).
    #[arg(long)]
    pub deep: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// List every drifted path (the text lists at most 20 per destination).
    #[arg(long, conflicts_with = "quiet")]
    pub files: bool,
    /// Print only a summary line and, before it, one line for each destination that
    /// drifted, failed or waits for recovery, saying why; no progress on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Journal file, read to tell pending recovery (else DISTRIBUTOR_JOURNAL, journal.path,
    /// $XDG_STATE_HOME/distributor/journal.sqlite3). Nothing is written to it.
    #[arg(long, value_name = "P")]
    pub journal: Option<PathBuf>,
}

/// Runs the command.
pub(super) fn run(a: VerifyArgs) -> Result<CommandOutput> {
    let config = a.target.pipeline.load()?;
    let dests = config.select(&a.target.destinations)?;
    let view = JournalView::open(&resolve_journal(a.journal.as_deref(), Some(&config))?)?;
    // How checking each recorded file goes (SPEC §20).
    let shown = Shown::on_stderr("verify", a.json, a.quiet);
    let drift = inspect::verify(&dests, a.deep, view.as_ref(), shown.ticker());
    shown.finish();
    let codes: Vec<ExitCode> = drift.iter().map(inspect::BundleDrift::exit_code).collect();
    let code = ExitCode::overall(codes.iter().copied());
    let rows = (drift.iter()).map(|d| d.destination_id.as_str());
    let metrics = Some(checked_metrics(&config.pipeline_id, rows.zip(codes)));
    let stdout = if a.json {
        let any_drift = drift.iter().any(|d| d.drifted());
        let v = serde_json::json!({"pipeline_id": config.pipeline_id, "drift": any_drift, "destinations": drift});
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    } else if a.quiet {
        verify_quiet_text(&drift)
    } else {
        verify_text(&drift, a.files)
    };
    Ok(CommandOutput::text(stdout, code, metrics))
}
