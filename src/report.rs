//! Reports (SPEC §11): the `--json` object and the text plan, both rendered from plans and
//! per-destination outcomes.

use crate::model::{Decision, FileOp, SourceRef, StateMode, TakeoverMode};
use crate::plan::{Conflict, DestinationPlan, FileAction, LinkAction, Previous, TakeoverEntry};
use serde::Serialize;
use std::fmt::Write;

/// The report of one `publish`/`plan` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always 1.
    pub report_version: u32,
    /// `publish` or `plan`.
    pub command: String,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Pipeline id.
    pub pipeline_id: String,
    /// Source identity.
    pub source: SourceRef,
    /// One entry per destination.
    pub destinations: Vec<DestinationReport>,
    /// Counters.
    pub summary: Summary,
}

/// Status of one destination in a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Dry run of a writing decision.
    Planned,
    /// Written.
    Applied,
    /// Nothing to write (unchanged, destination newer).
    Skipped,
    /// Conflict: nothing written.
    Conflict,
    /// Error: nothing written, or rolled back.
    Failed,
}

/// One destination in a report.
#[derive(Debug, Clone, Serialize)]
pub struct DestinationReport {
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// State mode.
    pub state_mode: StateMode,
    /// Takeover mode.
    pub takeover_mode: TakeoverMode,
    /// Decision; `None` (JSON `null`) when the destination failed before it was planned.
    pub decision: Option<Decision>,
    /// Status.
    pub status: Status,
    /// Operation id when one was journaled.
    pub operation_id: Option<String>,
    /// Previous owner and source.
    pub previous: Option<Previous>,
    /// What changed hands.
    pub takeovers: Vec<TakeoverEntry>,
    /// Conflicts.
    pub conflicts: Vec<Conflict>,
    /// Files.
    pub files: Vec<FileAction>,
    /// Links.
    pub links: Vec<LinkAction>,
    /// Reason, or the error.
    pub message: String,
}

impl DestinationReport {
    /// Builds the entry of a plan.
    pub fn from_plan(plan: DestinationPlan, status: Status, operation_id: Option<String>) -> Self {
        DestinationReport {
            destination_id: plan.destination_id,
            bundle_path: plan.bundle_path.to_string_lossy().into_owned(),
            state_mode: plan.state_mode,
            takeover_mode: plan.takeover_mode,
            decision: Some(plan.decision),
            status,
            operation_id,
            previous: plan.previous,
            takeovers: plan.takeovers,
            conflicts: plan.conflicts,
            files: plan.files,
            links: plan.links,
            message: plan.message,
        }
    }
}

/// Counters over all destinations.
#[derive(Debug, Clone, Default, Serialize)]
#[allow(missing_docs)]
pub struct Summary {
    pub destinations: u64,
    pub create: u64,
    pub unchanged: u64,
    pub repair: u64,
    pub replace_older: u64,
    pub replace_changed: u64,
    pub replace_takeover: u64,
    pub force_replace: u64,
    pub skip_destination_newer: u64,
    pub conflict: u64,
    pub rollback: u64,
    pub failed: u64,
    pub files_written: u64,
    pub files_deleted: u64,
    pub files_unchanged: u64,
    pub files_retained: u64,
    pub bytes_written: u64,
}

impl Summary {
    /// Counts the destinations of a report.
    pub fn of(destinations: &[DestinationReport]) -> Summary {
        let mut s = Summary {
            destinations: destinations.len() as u64,
            ..Default::default()
        };
        for d in destinations {
            let Some(decision) = d.decision else {
                s.failed += 1;
                continue;
            };
            *match decision {
                Decision::Create => &mut s.create,
                Decision::Unchanged => &mut s.unchanged,
                Decision::Repair => &mut s.repair,
                Decision::ReplaceOlder => &mut s.replace_older,
                Decision::ReplaceChanged => &mut s.replace_changed,
                Decision::ReplaceTakeover => &mut s.replace_takeover,
                Decision::ForceReplace => &mut s.force_replace,
                Decision::SkipDestinationNewer => &mut s.skip_destination_newer,
                Decision::Conflict => &mut s.conflict,
                Decision::Rollback => &mut s.rollback,
            } += 1;
            if d.status == Status::Failed {
                // Nothing of a failed destination stays written: its files are not counted.
                s.failed += 1;
                continue;
            }
            for f in &d.files {
                match f.op {
                    FileOp::Create | FileOp::Overwrite => {
                        s.files_written += 1;
                        s.bytes_written += f.size;
                    }
                    FileOp::Delete => s.files_deleted += 1,
                    FileOp::Unchanged => s.files_unchanged += 1,
                    FileOp::Retain => s.files_retained += 1,
                }
            }
        }
        s
    }
}

impl Report {
    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        // A report of many files is megabytes long: written into a buffer of about its size
        // instead of one doubled again and again.
        let estimate: usize = self
            .destinations
            .iter()
            .map(|d| {
                let files: usize = d.files.iter().map(|f| 200 + f.path.len()).sum();
                let links: usize = (d.links.iter())
                    .map(|l| 120 + l.path.len() + l.target.len())
                    .sum();
                4096 + files + links
            })
            .sum();
        let mut out = Vec::with_capacity(4096 + estimate);
        serde_json::to_writer_pretty(&mut out, self).expect("report serializes");
        out.push(b'\n');
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// The text plan.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let rollback = self.command == "rollback";
        let verb = match (rollback, self.dry_run) {
            (true, true) => "rollback (dry run)",
            (true, false) => "rollback",
            (false, true) => "plan",
            (false, false) => "publish",
        };
        if rollback && self.source.id.is_empty() {
            let _ = writeln!(out, "{verb} {}", self.pipeline_id);
        } else if rollback {
            let _ = writeln!(
                out,
                "{verb} {} to source {} (created {}, {})",
                self.pipeline_id, self.source.id, self.source.created_at, self.source.digest
            );
        } else {
            let _ = writeln!(
                out,
                "{verb} {} source {} (created {}, {})",
                self.pipeline_id, self.source.id, self.source.created_at, self.source.digest
            );
        }
        for d in &self.destinations {
            let _ = writeln!(
                out,
                "\ndestination {} -> {}",
                d.destination_id, d.bundle_path
            );
            let _ = writeln!(
                out,
                "  decision: {} [{}]",
                d.decision.map_or("none", |x| x.as_str()),
                status_word(d.status)
            );
            if !d.message.is_empty() {
                let _ = writeln!(out, "  reason: {}", d.message);
            }
            for c in &d.conflicts {
                let at = c
                    .path
                    .as_deref()
                    .map(|p| format!(" at {p}"))
                    .unwrap_or_default();
                let force = if c.forceable {
                    "forceable"
                } else {
                    "not forceable"
                };
                let _ = writeln!(out, "  ! {}{at}: {} ({force})", c.kind, c.message);
            }
            for t in &d.takeovers {
                let _ = writeln!(
                    out,
                    "  takeover from {} (source {}): {} path(s)",
                    t.from_owner,
                    t.from_source_id,
                    t.paths.len()
                );
            }
            for f in &d.files {
                let _ = writeln!(out, "  {} {} ({} bytes)", f.op.sign(), f.path, f.size);
            }
            for l in &d.links {
                let _ = writeln!(out, "  {} {} -> {}", l.op.sign(), l.path, l.target);
            }
            if let Some(op) = &d.operation_id {
                let _ = writeln!(out, "  operation: {op}");
            }
        }
        let s = &self.summary;
        // A rollback writes no file: it changes which files readers see.
        let (write, delete) = match (rollback, self.dry_run) {
            (true, true) => ("to change for readers", "to disappear"),
            (true, false) => ("changed for readers", "gone"),
            (false, true) => ("to write", "to delete"),
            (false, false) => ("written", "deleted"),
        };
        let _ = writeln!(
            out,
            "\nsummary: {} destination(s); {} file(s) {write} ({} bytes), {} {delete}, {} unchanged, {} retained; {} conflict(s), {} failed",
            s.destinations,
            s.files_written,
            s.bytes_written,
            s.files_deleted,
            s.files_unchanged,
            s.files_retained,
            s.conflict,
            s.failed
        );
        out
    }
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Planned => "planned",
        Status::Applied => "applied",
        Status::Skipped => "skipped",
        Status::Conflict => "conflict",
        Status::Failed => "failed",
    }
}
