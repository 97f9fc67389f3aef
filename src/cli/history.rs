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
    /// Journal file (else DISTRIBUTOR_JOURNAL, journal.path, $XDG_STATE_HOME/distributor/journal.sqlite3); repeat it to merge several journals by time.
    #[arg(long, value_name = "P")]
    pub journal: Vec<PathBuf>,
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
    /// Started at or after T (RFC 3339, a date YYYY-MM-DD meaning midnight UTC, or a duration back from now: 90m, 12h, 7d).
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Started before T (RFC 3339, a date YYYY-MM-DD meaning midnight UTC, or a duration back from now: 90m, 12h, 7d).
    #[arg(long, value_name = "T")]
    until: Option<String>,
    /// Only operations that wrote, deleted or took over a path GLOB matches (repeatable; * stays in one path segment, ** crosses them).
    #[arg(long = "path", value_name = "GLOB")]
    paths: Vec<String>,
    /// Only takeovers from another owner (cross_owner), not a new source id of the same owner.
    #[arg(long)]
    takeovers: bool,
    /// Only operations run by A: the recorded actor (cli:alice, token:ci), or its name after cli: or token:.
    #[arg(long, value_name = "A")]
    actor: Option<String>,
    /// Only operations whose reason (--reason) contains TEXT, case-insensitively.
    #[arg(long, value_name = "TEXT")]
    reason_contains: Option<String>,
    /// At most N operations.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
    /// Print JSON.
    #[arg(long, conflicts_with = "jsonl")]
    json: bool,
    /// One JSON object per operation and line (history_version 1; docs/audit.md).
    #[arg(long)]
    jsonl: bool,
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
    /// Print every path (actions, takeovers, conflicts), one per line; without it at most 10 of each.
    #[arg(long)]
    files: bool,
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
        ("--path", !list.paths.is_empty()),
        ("--takeovers", list.takeovers),
        ("--actor", list.actor.is_some()),
        ("--reason-contains", list.reason_contains.is_some()),
        ("--jsonl", list.jsonl),
    ];
    if let Some((flag, _)) = filters.iter().find(|(_, given)| *given) {
        return Err(Error::Usage(format!(
            "{flag} filters the list; `history show OP_ID` shows one operation (it takes --config, --journal and --json)"
        )));
    }
    s.journal.config = s.journal.config.or(list.journal.config);
    s.journal.journal.extend(list.journal.journal);
    if s.journal.config.is_some() && !s.journal.journal.is_empty() {
        return Err(Error::Usage(
            "--config and --journal both name the journal; give one".into(),
        ));
    }
    s.json |= list.json;
    Ok(s)
}

/// The journals named (`--journal`, repeatable), else the one the environment or the
/// config names; each with its path. A journal named on the command line that does not
/// exist is a usage error (a typo, not an empty history); the default one may not exist
/// yet.
fn open_all(a: &JournalArgs, config: Option<&Config>) -> Result<Vec<(PathBuf, Option<Journal>)>> {
    if a.journal.is_empty() {
        let path = resolve_journal(None, config)?;
        let journal = Journal::open_existing(&path)?;
        return Ok(vec![(path, journal)]);
    }
    let mut out = Vec::new();
    for path in &a.journal {
        let Some(journal) = Journal::open_existing(path)? else {
            return Err(Error::Usage(format!(
                "--journal {}: no journal there (nothing was ever published with it)",
                path.display()
            )));
        };
        out.push((path.clone(), Some(journal)));
    }
    Ok(out)
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
    let paths = match a.paths.is_empty() {
        true => None,
        false => Some(
            crate::globs::PathGlobs::new(&a.paths)
                .map_err(|e| Error::Usage(format!("--path: {e}")))?,
        ),
    };
    let filter = Filter {
        since: bound("--since", &a.since)?,
        until: bound("--until", &a.until)?,
        pipeline,
        destination: a.destination,
        action: a.action,
        status: a.status,
        limit: a.limit,
        actor: a.actor,
        takeovers: a.takeovers,
        paths,
        reason_contains: a.reason_contains,
    };
    let journals = open_all(&a.journal, config.as_ref())?;
    let mut ops = Vec::new();
    for (_, journal) in &journals {
        check_filters(
            journal.as_ref(),
            &filter,
            a.pipeline.is_some() && journals.len() == 1,
        )?;
        if let Some(j) = journal {
            ops.extend(query::list(j, &filter)?);
        }
    }
    // Several journals: merged by time, newest first, then limited.
    if journals.len() > 1 {
        ops.sort_by(|x, y| y.started_at.cmp(&x.started_at));
        if let Some(l) = a.limit {
            ops.truncate(l.min(usize::MAX as u64) as usize);
        }
    }
    let (path, journal) = &journals[0];
    let stdout = if a.jsonl {
        let mut out = String::new();
        for op in &ops {
            let mut v = serde_json::to_value(op)?;
            v["history_version"] = 1.into();
            out.push_str(&serde_json::to_string(&v)?);
            out.push('\n');
        }
        out
    } else if a.json {
        let names: Vec<String> = (journals.iter())
            .map(|(p, _)| p.to_string_lossy().into_owned())
            .collect();
        let v = serde_json::json!({
            "history_version": 1,
            "journal": path.to_string_lossy(),
            "journals": names,
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

/// At most this many paths of one takeover or conflict in text (`history show OP
/// --files` prints them all).
const PATHS_SHOWN: usize = 10;

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
    if let Some(r) = &op.reason {
        let _ = writeln!(out, "    reason: {r}");
    }
    if op.decision == Decision::ReplaceTakeover.as_str() || has_takeovers(op) {
        takeover_lines(out, op, "    ", false);
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
/// hands (at most [`PATHS_SHOWN`] of each takeover unless `all`), who and when.
fn takeover_lines(out: &mut String, op: &OperationSummary, indent: &str, all: bool) {
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
    let owner = op.owner();
    for (from, source, paths) in op.takeover_entries() {
        let words = crate::report::takeover_words(&from, &source, from != owner);
        let _ = writeln!(out, "{indent}{words}: {} path(s)", paths.len());
        path_lines(out, &paths, &format!("{indent}  "), all, &op.operation_id);
    }
}

/// `paths`, one per line, at most [`PATHS_SHOWN`] unless `all`, then how many more and
/// how to list them.
fn path_lines(out: &mut String, paths: &[String], indent: &str, all: bool, op: &str) {
    let shown = if all {
        paths.len()
    } else {
        paths.len().min(PATHS_SHOWN)
    };
    for p in &paths[..shown] {
        let _ = writeln!(out, "{indent}{p}");
    }
    if shown < paths.len() {
        let _ = writeln!(
            out,
            "{indent}... and {} more; `distributor history show {op} --files` lists all",
            paths.len() - shown
        );
    }
}

fn show(a: ShowArgs) -> Result<CommandOutput> {
    query::check_operation_id(&a.operation_id)?;
    let config = a.journal.config.as_deref().map(Config::load).transpose()?;
    let journals = open_all(&a.journal, config.as_ref())?;
    let mut detail = None;
    for (_, journal) in &journals {
        if let Some(j) = journal
            && let Some(mut d) = query::show(j, &a.operation_id)?
        {
            d.operation.journal_id = j.journal_id().ok();
            detail = Some(d);
            break;
        }
    }
    let Some(d) = detail else {
        let names: Vec<String> = (journals.iter())
            .map(|(p, _)| p.display().to_string())
            .collect();
        return Err(Error::Failed(format!(
            "no operation {} in journal {}",
            a.operation_id,
            names.join(", ")
        )));
    };
    let stdout = if a.json {
        format!("{}\n", serde_json::to_string_pretty(&d).unwrap_or_default())
    } else {
        show_text(&d, a.files)
    };
    Ok(CommandOutput {
        stdout,
        code: crate::error::ExitCode::Success,
        report: None,
        metrics: None,
    })
}

fn show_text(d: &OperationDetail, all: bool) -> String {
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
    if let Some(r) = &op.reason {
        let _ = writeln!(out, "  reason       {r}");
    }
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
        takeover_lines(&mut out, op, "    ", all);
    }
    if !d.conflicts.is_empty() {
        let _ = writeln!(out, "  conflicts ({}):", d.conflicts.len());
        let mut per_kind: std::collections::BTreeMap<&str, usize> = Default::default();
        for c in &d.conflicts {
            let n = per_kind
                .entry(c["kind"].as_str().unwrap_or("?"))
                .or_default();
            *n += 1;
            if !all && *n > PATHS_SHOWN {
                continue;
            }
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
        for (kind, n) in per_kind.iter().filter(|(_, n)| !all && **n > PATHS_SHOWN) {
            let _ = writeln!(
                out,
                "    ... and {} more {kind}; `distributor history show {} --files` lists all",
                n - PATHS_SHOWN,
                op.operation_id
            );
        }
    }
    let _ = writeln!(out, "  actions ({}):", d.actions.len());
    let lines: Vec<String> = (d.actions.iter())
        .map(|a| {
            let what = match (&a.target, a.size, &a.sha256) {
                (Some(t), _, _) => format!(" -> {t}"),
                (None, Some(s), Some(h)) => format!(" ({s} bytes, sha256 {h})"),
                _ => String::new(),
            };
            format!("{} {}{what}", a.kind, a.path)
        })
        .collect();
    path_lines(&mut out, &lines, "    ", all, &op.operation_id);
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
