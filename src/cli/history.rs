//! `distributor history` and `distributor history show OP_ID` (SPEC §9): the journal as an
//! audit trail. Read-only; a journal that does not exist yet has no history.

use super::CommandOutput;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::journal::query::{self, Filter, OperationDetail, OperationSummary, STATUSES};
use crate::model::Decision;
use crate::ops::common::resolve_journal;
use clap::{Args, Subcommand};
use std::fmt::Write;
use std::path::PathBuf;

/// Where the journal is.
#[derive(Debug, Args)]
pub(super) struct JournalArgs {
    /// Pipeline config file: use its journal.path.
    #[arg(long, value_name = "F", conflicts_with = "journal")]
    pub config: Option<PathBuf>,
    /// Journal file (else DISTRIBUTOR_JOURNAL, journal.path, $XDG_STATE_HOME/distributor/journal.sqlite3).
    #[arg(long, value_name = "P")]
    pub journal: Option<PathBuf>,
}

/// List journaled operations, newest first; `--action replace_takeover` is the audit of
/// past takeovers.
#[derive(Debug, Args)]
pub(super) struct HistoryArgs {
    #[command(subcommand)]
    show: Option<HistoryCommand>,
    #[command(flatten)]
    list: ListArgs,
}

#[derive(Debug, Subcommand)]
enum HistoryCommand {
    Show(ShowArgs),
}

/// Filters of the list.
#[derive(Debug, Args)]
struct ListArgs {
    #[command(flatten)]
    journal: JournalArgs,
    /// Only this pipeline.
    #[arg(long, value_name = "P", value_hint = clap::ValueHint::Other)]
    pipeline: Option<String>,
    /// Only this destination id.
    #[arg(long, value_name = "D", value_hint = clap::ValueHint::Other)]
    destination: Option<String>,
    /// Only this decision (create, repair, replace_older, replace_changed, replace_takeover, force_replace, conflict, rollback, ...; prune, adopt, settings).
    #[arg(long, value_name = "A", hide_possible_values = true,
          value_parser = super::completions::Hinted(query::actions))]
    action: Option<String>,
    /// Only this status (in_progress, committed, applied, failed, rolled_forward, rolled_back, diverged, abandoned, closed, refused, staged).
    #[arg(long, value_name = "S", hide_possible_values = true,
          value_parser = super::completions::Hinted(|| STATUSES.to_vec()))]
    status: Option<String>,
    /// Started at or after T (RFC 3339, or a date YYYY-MM-DD meaning midnight UTC).
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Started before T (RFC 3339, or a date YYYY-MM-DD meaning midnight UTC).
    #[arg(long, value_name = "T")]
    until: Option<String>,
    /// At most N operations.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Show one operation with its events and actions.
#[derive(Debug, Args)]
struct ShowArgs {
    /// Operation id (or its unique start).
    #[arg(value_name = "OP_ID")]
    operation_id: String,
    #[command(flatten)]
    journal: JournalArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl HistoryArgs {
    /// Whether the output is JSON.
    pub(super) fn json(&self) -> bool {
        match &self.show {
            Some(HistoryCommand::Show(s)) => s.json || self.list.json,
            None => self.list.json,
        }
    }
}

/// `history --config F show ID` is `history show ID --config F`: where the journal is and
/// `--json` may come before `show`; the list's filters may not.
fn merged(mut s: ShowArgs, list: ListArgs) -> Result<ShowArgs> {
    let filters = [
        ("--pipeline", list.pipeline.is_some()),
        ("--destination", list.destination.is_some()),
        ("--action", list.action.is_some()),
        ("--status", list.status.is_some()),
        ("--since", list.since.is_some()),
        ("--until", list.until.is_some()),
        ("--limit", list.limit.is_some()),
    ];
    if let Some((flag, _)) = filters.iter().find(|(_, given)| *given) {
        return Err(Error::Usage(format!(
            "{flag} filters the list; `history show OP_ID` shows one operation (it takes --config, --journal and --json)"
        )));
    }
    s.journal.config = s.journal.config.or(list.journal.config);
    s.journal.journal = s.journal.journal.or(list.journal.journal);
    if s.journal.config.is_some() && s.journal.journal.is_some() {
        return Err(Error::Usage(
            "--config and --journal both name the journal; give one".into(),
        ));
    }
    s.json |= list.json;
    Ok(s)
}

fn open(a: &JournalArgs) -> Result<(PathBuf, Option<Journal>)> {
    let config = a.config.as_deref().map(Config::load).transpose()?;
    let path = resolve_journal(a.journal.as_deref(), config.as_ref())?;
    let journal = Journal::open_existing(&path)?;
    Ok((path, journal))
}

/// Runs the command.
pub(super) fn run(a: HistoryArgs) -> Result<CommandOutput> {
    match a.show {
        Some(HistoryCommand::Show(s)) => show(merged(s, a.list)?),
        None => list(a.list),
    }
}

fn list(a: ListArgs) -> Result<CommandOutput> {
    if let Some(s) = a.status.as_deref().filter(|s| !STATUSES.contains(s)) {
        return Err(Error::Usage(format!(
            "--status {s}: unknown value, accepted: {}",
            STATUSES.join(", ")
        )));
    }
    let bound = |flag: &str, v: &Option<String>| {
        v.as_deref()
            .map(query::time_bound)
            .transpose()
            .map_err(|m| Error::Usage(format!("{flag}: {m}")))
    };
    let config = a.journal.config.as_deref().map(Config::load).transpose()?;
    // `--config F` is that pipeline's history (SPEC §16).
    let pipeline = match (&a.pipeline, &config) {
        (Some(p), Some(c)) if *p != c.pipeline_id => {
            return Err(Error::Usage(format!(
                "--pipeline {p}: {} is the config of pipeline {}; give one or the other",
                c.file.display(),
                c.pipeline_id
            )));
        }
        (Some(p), _) => Some(p.clone()),
        (None, Some(c)) => Some(c.pipeline_id.clone()),
        (None, None) => None,
    };
    let filter = Filter {
        since: bound("--since", &a.since)?,
        until: bound("--until", &a.until)?,
        pipeline,
        destination: a.destination,
        action: a.action,
        status: a.status,
        limit: a.limit,
    };
    let path = resolve_journal(a.journal.journal.as_deref(), config.as_ref())?;
    let journal = Journal::open_existing(&path)?;
    if journal.is_none() && a.journal.journal.is_some() {
        // Named on the command line and not there: a typo, not an empty history.
        return Err(Error::Usage(format!(
            "--journal {}: no journal there (nothing was ever published with it)",
            path.display()
        )));
    }
    check_filters(journal.as_ref(), &filter, a.pipeline.is_some())?;
    let ops = match &journal {
        Some(j) => query::list(j, &filter)?,
        None => Vec::new(),
    };
    let stdout = if a.json {
        let v = serde_json::json!({
            "history_version": 1,
            "journal": path.to_string_lossy(),
            "operations": ops,
        });
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
    } else if ops.is_empty() && journal.is_none() {
        // Not an error (a fresh host has no history yet), but not to be mistaken for a
        // journal that recorded nothing matching.
        format!(
            "no operations: journal {} does not exist yet (nothing was journaled there; is this the journal your runs use? --journal, DISTRIBUTOR_JOURNAL or journal.path name another)\n",
            path.display()
        )
    } else if ops.is_empty() {
        format!("no operations (journal {})\n", path.display())
    } else {
        let mut out = String::new();
        for op in &ops {
            list_line(&mut out, op);
        }
        out
    };
    Ok(CommandOutput {
        stdout,
        code: crate::error::ExitCode::Success,
        report: None,
        metrics: None,
    })
}

/// Unknown filter values are errors that list what exists (SPEC §16): a `--pipeline`
/// (given as such, not from `--config`) or `--destination` no operation of the journal
/// has, an `--action` that is neither a decision nor a command the journal records.
fn check_filters(journal: Option<&Journal>, f: &Filter, pipeline_flag: bool) -> Result<()> {
    let known = |column: &str| -> Result<Vec<String>> {
        match journal {
            Some(j) => query::distinct(j, column),
            None => Ok(Vec::new()),
        }
    };
    let listed = |v: &[String]| {
        if v.is_empty() {
            "none (the journal records no operation)".to_string()
        } else {
            v.join(", ")
        }
    };
    if let Some(p) = f.pipeline.as_deref().filter(|_| pipeline_flag) {
        let there = known("pipeline_id")?;
        if !there.iter().any(|x| x == p) {
            return Err(Error::Usage(format!(
                "--pipeline {p}: no operation of that pipeline in the journal; pipelines there: {}",
                listed(&there)
            )));
        }
    }
    if let Some(d) = &f.destination {
        let there = known("destination_id")?;
        if !there.iter().any(|x| x == d) {
            return Err(Error::Usage(format!(
                "--destination {d}: no operation of that destination in the journal; destinations there: {}",
                listed(&there)
            )));
        }
    }
    if let Some(act) = &f.action {
        let mut accepted: Vec<String> = query::actions().iter().map(|d| d.to_string()).collect();
        for d in known("decision")? {
            if !accepted.contains(&d) {
                accepted.push(d);
            }
        }
        if !accepted.contains(act) {
            return Err(Error::Usage(format!(
                "--action {act}: unknown value, accepted: {}",
                accepted.join(", ")
            )));
        }
    }
    Ok(())
}

/// One line per operation, ending with who ran it; takeovers get the audit lines below it.
fn list_line(out: &mut String, op: &OperationSummary) {
    let _ = writeln!(
        out,
        "{}  {}  {}/{}  {}  {}  source {}  by {}",
        op.started_at,
        op.operation_id,
        op.pipeline_id,
        op.destination_id,
        op.decision,
        op.status,
        op.source.id,
        op.actor
    );
    if op.decision == Decision::ReplaceTakeover.as_str() || has_takeovers(op) {
        takeover_lines(out, op, "    ");
    }
    if !op.releases_removed.is_empty() {
        let by = if op.decision == "prune" {
            "removed"
        } else {
            "retention removed"
        };
        let _ = writeln!(out, "    {by} releases {}", op.releases_removed.join(", "));
    }
}

fn has_takeovers(op: &OperationSummary) -> bool {
    op.takeovers.as_array().is_some_and(|a| !a.is_empty())
}

/// The takeover audit: mode, previous owner and source, new source, paths that changed
/// hands, who and when.
fn takeover_lines(out: &mut String, op: &OperationSummary, indent: &str) {
    let _ = writeln!(
        out,
        "{indent}{} at {} by {}, takeover.mode {}",
        op.decision, op.started_at, op.actor, op.takeover_mode
    );
    match &op.previous {
        Some(p) => {
            let _ = writeln!(
                out,
                "{indent}previous: {} source {} (created {})",
                p.owner, p.source.id, p.source.created_at
            );
        }
        None => {
            let _ = writeln!(out, "{indent}previous: none");
        }
    }
    let _ = writeln!(
        out,
        "{indent}new: {}/{} source {} (created {})",
        op.pipeline_id, op.destination_id, op.source.id, op.source.created_at
    );
    for t in op.takeovers.as_array().into_iter().flatten() {
        let paths: Vec<&str> = t["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str())
            .collect();
        let _ = writeln!(
            out,
            "{indent}from {} (source {}): {} path(s): {}",
            t["from_owner"].as_str().unwrap_or("?"),
            t["from_source_id"].as_str().unwrap_or("?"),
            paths.len(),
            paths.join(", ")
        );
    }
}

fn show(a: ShowArgs) -> Result<CommandOutput> {
    query::check_operation_id(&a.operation_id)?;
    let (path, journal) = open(&a.journal)?;
    let detail = match &journal {
        Some(j) => query::show(j, &a.operation_id)?,
        None => None,
    };
    let Some(d) = detail else {
        return Err(Error::Failed(format!(
            "no operation {} in journal {}",
            a.operation_id,
            path.display()
        )));
    };
    let stdout = if a.json {
        format!("{}\n", serde_json::to_string_pretty(&d).unwrap_or_default())
    } else {
        show_text(&d)
    };
    Ok(CommandOutput {
        stdout,
        code: crate::error::ExitCode::Success,
        report: None,
        metrics: None,
    })
}

fn show_text(d: &OperationDetail) -> String {
    let op = &d.operation;
    let mut out = String::new();
    let absent = || "absent".to_string();
    let _ = writeln!(out, "operation {}", op.operation_id);
    let _ = writeln!(
        out,
        "  started      {} by {} ({})",
        op.started_at, op.actor, op.command
    );
    let _ = writeln!(
        out,
        "  owner        {}/{}",
        op.pipeline_id, op.destination_id
    );
    let _ = writeln!(out, "  bundle path  {}", op.bundle_path);
    let _ = writeln!(
        out,
        "  state mode   {}, takeover.mode {}",
        op.state_mode, op.takeover_mode
    );
    let _ = writeln!(out, "  decision     {}, status {}", op.decision, op.status);
    let _ = writeln!(
        out,
        "  source       {} (created {}, {})",
        op.source.id, op.source.created_at, op.source.digest
    );
    match &op.previous {
        Some(p) => {
            let _ = writeln!(
                out,
                "  previous     {} source {} (created {}, {})",
                p.owner, p.source.id, p.source.created_at, p.source.digest
            );
        }
        None => {
            let _ = writeln!(out, "  previous     none");
        }
    }
    let _ = writeln!(
        out,
        "  state sha256 {} -> {}",
        op.pre_state_sha256.clone().unwrap_or_else(absent),
        op.post_state_sha256
    );
    if has_takeovers(op) || op.decision == Decision::ReplaceTakeover.as_str() {
        let _ = writeln!(out, "  takeover:");
        takeover_lines(&mut out, op, "    ");
    }
    if !d.conflicts.is_empty() {
        let _ = writeln!(out, "  conflicts ({}):", d.conflicts.len());
        for c in &d.conflicts {
            let at = c["path"]
                .as_str()
                .map(|p| format!(" at {p}"))
                .unwrap_or_default();
            let force = match c["forceable"].as_bool() {
                Some(true) => "forceable",
                _ => "not forceable",
            };
            let _ = writeln!(
                out,
                "    {}{at}: {} ({force})",
                c["kind"].as_str().unwrap_or("?"),
                c["message"].as_str().unwrap_or("")
            );
        }
    }
    let _ = writeln!(out, "  actions ({}):", d.actions.len());
    for a in &d.actions {
        let what = match (&a.target, a.size, &a.sha256) {
            (Some(t), _, _) => format!(" -> {t}"),
            (None, Some(s), Some(h)) => format!(" ({s} bytes, sha256 {h})"),
            _ => String::new(),
        };
        let _ = writeln!(out, "    {} {}{what}", a.kind, a.path);
    }
    let _ = writeln!(out, "  events:");
    for e in &d.events {
        match &e.detail {
            Some(x) => {
                let _ = writeln!(out, "    {} {}: {x}", e.at, e.event);
            }
            None => {
                let _ = writeln!(out, "    {} {}", e.at, e.event);
            }
        }
    }
    out
}
