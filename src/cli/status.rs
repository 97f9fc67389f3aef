//! `distributor status --config F [--destination ID]... [--json]`.

use super::CommandOutput;
use crate::error::Result;
use crate::journal::JournalView;
use crate::ops::common::{ExitCode, resolve_journal};
use crate::ops::inspect;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

/// Show what each destination holds according to its state.
#[derive(Debug, Args)]
pub struct StatusArgs {
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
pub fn run(a: StatusArgs) -> Result<CommandOutput> {
    let config = a.target.pipeline.load()?;
    let dests = config.select(&a.target.destinations)?;
    let view = JournalView::open(&resolve_journal(a.journal.as_deref(), Some(&config))?)?;
    let st = inspect::status(&dests, view.as_ref());
    // An unreadable bundle path (or a bad log entry) is 1, pending recovery 4 (SPEC §10
    // precedence).
    let codes: Vec<ExitCode> = st
        .iter()
        .map(|s| {
            match (s.error.as_ref(), s.recovery_pending) {
                (Some(_), _) => ExitCode::Failed,
                // An untrusted record is decided before a pending recovery (SPEC §17).
                _ if s.untrusted_record.is_some() => ExitCode::Conflict,
                _ if s.log_error.is_some() => ExitCode::Failed,
                (None, true) => ExitCode::RecoveryRequired,
                (None, false) => ExitCode::Success,
            }
        })
        .collect();
    let code = ExitCode::overall(codes.iter().copied());
    let metrics = Some(crate::metrics::file::Run {
        pipeline: config.pipeline_id.clone(),
        rows: (st.iter().zip(&codes))
            .map(|(s, c)| crate::metrics::file::Row::checked(&s.destination_id, c.is_success()))
            .collect(),
    });
    if a.json {
        let v = serde_json::json!({"pipeline_id": config.pipeline_id, "destinations": st});
        let stdout = format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(CommandOutput::text(stdout, code, metrics));
    }
    if a.quiet {
        return Ok(CommandOutput::text(quiet_text(&st), code, metrics));
    }
    let mut out = String::new();
    for s in &st {
        let _ = writeln!(
            out,
            "destination {} -> {}: state {}",
            s.destination_id, s.bundle_path, s.state
        );
        if let Some(r) = &s.invalid_reason {
            let _ = writeln!(out, "  invalid: {r}");
        }
        if let Some(e) = &s.error {
            let _ = writeln!(out, "  error: {e}");
        }
        if let Some(u) = &s.untrusted_record {
            let _ = writeln!(out, "  untrusted_record: {u}");
        }
        if let Some(e) = &s.log_error {
            let _ = writeln!(out, "  error: {e}");
        }
        for o in &s.owners {
            let _ = writeln!(
                out,
                "  owner {}: source {} created {}, {} outputs, {} links, published {} by operation {}",
                o.owner,
                o.source.id,
                o.source.created_at,
                o.outputs,
                o.links,
                o.published_at,
                o.operation_id
            );
        }
        for r in s.releases.iter().flatten() {
            let when = match (&r.activated_at, &r.staged_at) {
                (Some(a), _) => format!("activated {a}"),
                // A staged release (SPEC §19): `distributor promote` activates it.
                (None, Some(st)) => format!("staged {st}, not promoted"),
                (None, None) => "activated never".to_string(),
            };
            let _ = writeln!(
                out,
                "  release {}: {when}; {} ({})",
                r.release,
                if r.keep { "kept" } else { "would be pruned" },
                r.reason
            );
        }
        if let Some(what) = &s.recovery {
            let _ = writeln!(out, "  recovery pending: {what}");
        }
        if let Some(who) = &s.busy {
            let _ = writeln!(
                out,
                "  busy: another distributor process is publishing here now ({who})"
            );
        }
    }
    Ok(CommandOutput::text(out, code, metrics))
}

/// `status --quiet` (SPEC §16, as §20 amends it): a line for every bundle path that could
/// not be read, waits for recovery, or holds an untrusted record or an invalid state,
/// saying why, then the summary.
fn quiet_text(st: &[inspect::BundleStatus]) -> String {
    let mut out = String::new();
    let (mut valid, mut absent, mut invalid) = (0, 0, 0);
    let (mut pending, mut busy, mut errors) = (0, 0, 0);
    for s in st {
        match s.state {
            "valid" => valid += 1,
            "absent" => absent += 1,
            "invalid" => invalid += 1,
            _ => {}
        }
        busy += usize::from(s.busy.is_some());
        let why = if let Some(e) = s.error.as_ref().or(s.log_error.as_ref()) {
            errors += 1;
            format!("error: {e}")
        } else if let Some(u) = &s.untrusted_record {
            format!("untrusted_record: {u}")
        } else if let Some(what) = &s.recovery {
            pending += 1;
            format!("recovery pending: {what}")
        } else if let Some(r) = &s.invalid_reason {
            format!("invalid: {r}")
        } else {
            continue;
        };
        let _ = writeln!(
            out,
            "destination {} -> {}: {why}",
            s.destination_id, s.bundle_path
        );
    }
    let _ = writeln!(
        out,
        "summary: {} bundle path(s); {valid} valid, {absent} absent, {invalid} invalid, {pending} recovery pending, {busy} busy, {errors} error(s)",
        st.len()
    );
    out
}
