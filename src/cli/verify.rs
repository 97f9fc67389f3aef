//! `distributor verify --config F [--destination ID]... [--deep] [--json]`.

use super::CommandOutput;
use super::progress::Shown;
use crate::config::Config;
use crate::error::Result;
use crate::inspect;
use crate::journal::JournalView;
use crate::publish::{overall_exit_code, resolve_journal};
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

/// Compare storage with state: missing, modified and unrecorded paths, and the state with
/// the destination log: log_mismatch (exit 3 on drift).
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Pipeline config file (YAML).
    #[arg(long, value_name = "F")]
    pub config: PathBuf,
    /// Only these destinations (repeatable).
    #[arg(long = "destination", value_name = "ID", value_hint = clap::ValueHint::Other)]
    pub destinations: Vec<String>,
    /// s3 destinations: download and hash every recorded object instead of trusting the
    /// listing's size and ETag (local destinations always hash every recorded file).
    #[arg(long)]
    pub deep: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// List every drifted path (the text lists at most 20 per destination).
    #[arg(long)]
    pub files: bool,
    /// Show no progress on stderr.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Journal file, read to tell pending recovery (else DISTRIBUTOR_JOURNAL, journal.path,
    /// $XDG_STATE_HOME/distributor/journal.sqlite3). Nothing is written to it.
    #[arg(long, value_name = "P")]
    pub journal: Option<PathBuf>,
}

/// Runs the command.
pub fn run(a: VerifyArgs) -> Result<CommandOutput> {
    let config = Config::load(&a.config)?;
    let dests = config.select(&a.destinations)?;
    let view = JournalView::open(&resolve_journal(a.journal.as_deref(), Some(&config))?)?;
    // How checking each recorded file goes (SPEC §20).
    let shown = Shown::on_stderr("verify", a.json, a.quiet);
    let drift = inspect::verify(&dests, a.deep, view.as_ref(), shown.ticker());
    shown.finish();
    // An unverifiable bundle path is 1, pending recovery 4, drift 3 (SPEC §10 precedence).
    let codes: Vec<u8> = drift
        .iter()
        .map(|d| {
            match (d.error.as_ref(), d.recovery_pending, d.drifted()) {
                (Some(_), _, _) => 1,
                // An untrusted record is decided before a pending recovery (SPEC §17).
                _ if d.untrusted_record.is_some() => 3,
                _ if d.log_error.is_some() => 1,
                (None, true, _) => 4,
                (None, false, true) => 3,
                (None, false, false) => 0,
            }
        })
        .collect();
    let code = overall_exit_code(&codes);
    let metrics = Some(crate::metrics::file::Run {
        pipeline: config.pipeline_id.clone(),
        rows: (drift.iter().zip(&codes))
            .map(|(d, c)| crate::metrics::file::Row {
                destination: d.destination_id.clone(),
                files_written: 0,
                files_deleted: 0,
                conflicts: 0,
                success: *c == 0,
            })
            .collect(),
    });
    if a.json {
        let any_drift = drift.iter().any(|d| d.drifted());
        let v = serde_json::json!({"pipeline_id": config.pipeline_id, "drift": any_drift, "destinations": drift});
        return Ok(CommandOutput {
            report: None,
            stdout: format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()),
            code,
            metrics,
        });
    }
    let mut out = String::new();
    for d in &drift {
        let verdict = if d.error.is_some() {
            "error"
        } else if d.recovery_pending {
            "recovery pending, not compared"
        } else if d.busy.is_some() {
            "busy, not compared"
        } else if d.drifted() {
            "drift"
        } else {
            "ok"
        };
        let _ = writeln!(
            out,
            "destination {} -> {}: state {}, {verdict}",
            d.destination_id, d.bundle_path, d.state
        );
        if let Some(r) = &d.invalid_reason {
            let _ = writeln!(out, "  invalid state: {r}");
        }
        if let Some(e) = &d.error {
            let _ = writeln!(out, "  error: {e}");
        }
        if let Some(u) = &d.untrusted_record {
            let _ = writeln!(out, "  untrusted_record: {u}");
        }
        if let Some(e) = &d.log_error {
            let _ = writeln!(out, "  error: {e}");
        }
        if let Some(m) = &d.log_mismatch {
            let _ = writeln!(out, "  log_mismatch: {m}");
        }
        if let Some(what) = &d.recovery {
            let _ = writeln!(out, "  {what}");
        }
        if let Some(who) = &d.busy {
            let _ = writeln!(
                out,
                "  another distributor process is publishing here now ({who})"
            );
        }
        let lists = [
            ("missing", &d.missing),
            ("modified", &d.modified),
            ("unrecorded", &d.unrecorded),
        ];
        let counts: Vec<String> = lists
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(what, l)| format!("{} {what}", l.len()))
            .collect();
        if !counts.is_empty() {
            let _ = writeln!(out, "  {}", counts.join(", "));
        }
        let all: Vec<(&str, &String)> = lists
            .iter()
            .flat_map(|(what, l)| l.iter().map(move |p| (*what, p)))
            .collect();
        let shown = if a.files {
            all.len()
        } else {
            all.len().min(crate::report::FILE_LINES)
        };
        for (what, p) in &all[..shown] {
            let _ = writeln!(out, "  {what:<10} {p}");
        }
        if shown < all.len() {
            let _ = writeln!(
                out,
                "  ... and {} more (--files lists every one, --json has them all)",
                all.len() - shown
            );
        }
    }
    Ok(CommandOutput {
        report: None,
        stdout: out,
        code,
        metrics,
    })
}
