//! `distributor blame`.

use super::CommandOutput;
use crate::config::Config;
use crate::error::{Error, ExitCode, Result};
use crate::journal::Journal;
use crate::ops::blame::{Blame, BlameRequest, Event, blame};
use crate::ops::common::resolve_journal;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

/// Say who owns each PATH of a destination, which source placed it and which operation
/// last wrote it (docs/audit.md).
///
/// A PATH is relative to the bundle path (object stores: to the prefix), or a glob as for
/// verify.ignore (`*` stays within one path segment, `**` crosses them). The owner and
/// source come from the state the destination holds now; the operations from the
/// journals (--config reads journal.path; several --journal are merged by time), each
/// naming the journal it comes from. A path no state records is `unmanaged`, and still
/// shows what the journals know of it. Exit 1 when a PATH matched nothing.
#[derive(Debug, Args)]
pub(super) struct BlameArgs {
    /// Pipeline config file: its destinations, and its journal.path unless --journal is given.
    #[arg(long, value_name = "F", required_unless_present = "journal")]
    config: Option<PathBuf>,
    /// Journal file (repeatable: merged by time); without --config the answers come from
    /// the journals alone.
    #[arg(long, value_name = "P")]
    journal: Vec<PathBuf>,
    /// Only these destinations (repeatable; with --config).
    #[arg(long = "destination", value_name = "ID", requires = "config", value_hint = clap::ValueHint::Other)]
    destinations: Vec<String>,
    /// Every operation that wrote, deleted or was refused on each path, newest first.
    #[arg(long)]
    all: bool,
    /// Answer from the destinations alone (their state and their logs' path lists), with
    /// no journal: what every host did there, refusals not included. Needs --config.
    #[arg(long, requires = "config", conflicts_with = "journal")]
    destination_only: bool,
    /// One JSON object (blame_version 1) with every answer.
    #[arg(long, conflicts_with = "jsonl")]
    json: bool,
    /// One JSON object per answer and line (blame_version 1).
    #[arg(long)]
    jsonl: bool,
    /// The paths or globs to blame.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<String>,
}

impl BlameArgs {
    /// Whether the output is JSON.
    pub(super) fn json(&self) -> bool {
        self.json
    }
}

/// Runs blame.
pub(super) fn run(a: BlameArgs) -> Result<CommandOutput> {
    let config = a.config.as_deref().map(Config::load).transpose()?;
    let paths: Vec<PathBuf> = match (a.destination_only, a.journal.is_empty()) {
        (true, _) => Vec::new(),
        (false, true) => vec![resolve_journal(None, config.as_ref())?],
        (false, false) => a.journal.clone(),
    };
    let mut journals = Vec::new();
    for p in &paths {
        match Journal::open_existing(p)? {
            Some(j) => journals.push((p.clone(), j)),
            None if !a.journal.is_empty() => {
                return Err(Error::Usage(format!(
                    "--journal {}: no journal there (nothing was ever published with it)",
                    p.display()
                )));
            }
            None => {}
        }
    }
    let req = BlameRequest {
        config: config.as_ref(),
        destinations: &a.destinations,
        journals: &journals,
        paths: &a.paths,
        all: a.all,
        destination_only: a.destination_only,
    };
    let blamed = blame(&req)?;
    for u in &blamed.unknown {
        eprintln!(
            "{u}: nothing known (no state records it, and no journal names it{})",
            if config.is_some() {
                " at these destinations"
            } else {
                ""
            }
        );
    }
    let stdout = if a.jsonl {
        let mut out = String::new();
        for b in &blamed.found {
            out.push_str(&serde_json::to_string(b)?);
            out.push('\n');
        }
        out
    } else if a.json {
        let v = serde_json::json!({
            "blame_version": crate::ops::blame::BLAME_VERSION,
            "paths": blamed.found,
            "unknown": blamed.unknown,
        });
        format!("{}\n", serde_json::to_string_pretty(&v)?)
    } else {
        let mut out = String::new();
        for b in &blamed.found {
            text(&mut out, b);
        }
        out
    };
    let code = match blamed.unknown.is_empty() {
        true => ExitCode::Success,
        false => ExitCode::Failed,
    };
    Ok(CommandOutput {
        stdout,
        report: None,
        code,
        metrics: None,
    })
}

fn text(out: &mut String, b: &Blame) {
    let at = match &b.destination_id {
        Some(d) => format!("destination {d}, {}", b.bundle_path),
        None => b.bundle_path.clone(),
    };
    let _ = writeln!(out, "{} ({at})", b.path);
    match (&b.owner, &b.source) {
        (Some(o), Some(s)) if b.present => {
            let _ = writeln!(
                out,
                "  owner   {o}, source {} (created {}, digest {})",
                s.id, s.created_at, s.digest
            );
        }
        (Some(o), Some(s)) => {
            let _ = writeln!(
                out,
                "  owner   {o} (its last writer; no state read), source {} (created {})",
                s.id, s.created_at
            );
        }
        _ => {
            let _ = writeln!(out, "  owner   none: unmanaged (no state records it now)");
        }
    }
    match &b.last {
        Some(e) => {
            let _ = writeln!(out, "  last    {}", event_words(e));
        }
        None => {
            let _ = writeln!(out, "  last    no operation of the journals wrote it");
        }
    }
    if let Some(chain) = &b.chain {
        let _ = writeln!(out, "  chain ({}, newest first):", chain.len());
        for e in chain {
            let _ = writeln!(out, "    {}", event_words(e));
        }
    }
}

fn event_words(e: &Event) -> String {
    let what = match &e.conflict {
        Some(c) => format!("refused ({c})"),
        None => format!("{} {}", e.decision, e.action),
    };
    let why = e
        .reason
        .as_deref()
        .map(|r| format!(", reason: {r}"))
        .unwrap_or_default();
    let on = e
        .host
        .as_deref()
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    format!(
        "{} {what} by {}{on} as {} source {}, {} {} [{}; {}]{why}",
        e.started_at, e.actor, e.owner, e.source.id, e.command, e.operation_id, e.status, e.from
    )
}
