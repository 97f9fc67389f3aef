//! `distributor verify --config F [--destination ID]... [--deep] [--json]`.

use super::CommandOutput;
use super::progress::Shown;
use crate::error::Result;
use crate::journal::JournalView;
use crate::ops::common::{ExitCode, resolve_journal};
use crate::ops::inspect;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

/// Compare storage with state: missing, modified and unrecorded paths, and the state with
/// the destination log: log_mismatch (exit 3 on drift).
#[derive(Debug, Args)]
pub struct VerifyArgs {
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
pub fn run(a: VerifyArgs) -> Result<CommandOutput> {
    let config = a.target.pipeline.load()?;
    let dests = config.select(&a.target.destinations)?;
    let view = JournalView::open(&resolve_journal(a.journal.as_deref(), Some(&config))?)?;
    // How checking each recorded file goes (SPEC §20).
    let shown = Shown::on_stderr("verify", a.json, a.quiet);
    let drift = inspect::verify(&dests, a.deep, view.as_ref(), shown.ticker());
    shown.finish();
    // An unverifiable bundle path is 1, pending recovery 4, drift 3 (SPEC §10 precedence).
    let codes: Vec<ExitCode> = drift
        .iter()
        .map(|d| {
            match (d.error.as_ref(), d.recovery_pending, d.drifted()) {
                (Some(_), _, _) => ExitCode::Failed,
                // An untrusted record is decided before a pending recovery (SPEC §17).
                _ if d.untrusted_record.is_some() => ExitCode::Conflict,
                _ if d.log_error.is_some() => ExitCode::Failed,
                (None, true, _) => ExitCode::RecoveryRequired,
                (None, false, true) => ExitCode::Conflict,
                (None, false, false) => ExitCode::Success,
            }
        })
        .collect();
    let code = ExitCode::overall(codes.iter().copied());
    let metrics = Some(crate::metrics::file::Run {
        pipeline: config.pipeline_id.clone(),
        rows: (drift.iter().zip(&codes))
            .map(|(d, c)| crate::metrics::file::Row {
                destination: d.destination_id.clone(),
                files_written: 0,
                files_deleted: 0,
                conflicts: 0,
                success: c.is_success(),
            })
            .collect(),
    });
    if a.json {
        let any_drift = drift.iter().any(|d| d.drifted());
        let v = serde_json::json!({"pipeline_id": config.pipeline_id, "drift": any_drift, "destinations": drift});
        let stdout = format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(CommandOutput::text(stdout, code, metrics));
    }
    if a.quiet {
        return Ok(CommandOutput::text(quiet_text(&drift), code, metrics));
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
        let mut counts: Vec<String> = lists
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(what, l)| format!("{} {what}", l.len()))
            .collect();
        if d.ignored > 0 {
            counts.push(format!("{} unrecorded ignored (verify.ignore)", d.ignored));
        }
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
    Ok(CommandOutput::text(out, code, metrics))
}

/// `verify --quiet` (SPEC §16, as §20 amends it): a line for every bundle path that could
/// not be verified, drifted or waits for recovery, saying why, then the summary.
fn quiet_text(drift: &[inspect::BundleDrift]) -> String {
    let mut out = String::new();
    let (mut ok, mut drifted, mut pending, mut busy, mut errors) = (0, 0, 0, 0, 0);
    for d in drift {
        let why = if let Some(e) = d.error.as_ref().or(d.log_error.as_ref()) {
            errors += 1;
            format!("error: {e}")
        } else if let Some(u) = &d.untrusted_record {
            drifted += 1;
            format!("untrusted_record: {u}")
        } else if let Some(what) = &d.recovery {
            pending += 1;
            format!("recovery pending: {what}")
        } else if d.busy.is_some() {
            busy += 1;
            continue;
        } else if d.drifted() {
            drifted += 1;
            format!("drift: {}", drift_reason(d))
        } else {
            ok += 1;
            continue;
        };
        let _ = writeln!(
            out,
            "destination {} -> {}: {why}",
            d.destination_id, d.bundle_path
        );
    }
    let _ = writeln!(
        out,
        "summary: {} bundle path(s); {ok} ok, {drifted} drift, {pending} recovery pending, {busy} busy, {errors} error(s)",
        drift.len()
    );
    out
}

/// Why a bundle path drifted, in one line: the counts and the first path of each list, an
/// invalid state's reason, a log mismatch.
fn drift_reason(d: &inspect::BundleDrift) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(r) = &d.invalid_reason {
        parts.push(format!("invalid state: {r}"));
    }
    for (what, l) in [
        ("missing", &d.missing),
        ("modified", &d.modified),
        ("unrecorded", &d.unrecorded),
    ] {
        match l.as_slice() {
            [] => {}
            [one] => parts.push(format!("1 {what} ({one})")),
            [first, ..] => parts.push(format!("{} {what} (first {first})", l.len())),
        }
    }
    if let Some(m) = &d.log_mismatch {
        parts.push(format!("log_mismatch: {m}"));
    }
    parts.join(", ")
}
