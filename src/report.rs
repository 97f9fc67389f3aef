//! Reports (SPEC §11): the `--json` object and the text plan, both rendered from plans and
//! per-destination outcomes.

use crate::hash::ContentHash;
use crate::model::{Decision, FileOp, SourceRef, StateMode, TakeoverMode};
use crate::plan::{Conflict, DestinationPlan, FileAction, LinkAction, Previous, TakeoverEntry};
use crate::source::Manifest;
use crate::units::human_size;
use serde::Serialize;
use std::fmt::Write;
use std::sync::Arc;

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
    /// The saved plan this run wrote (`plan --out`) or published (`publish --plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_file: Option<PlanFileUse>,
}

/// A saved plan (SPEC §19) as a report names it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanFileUse {
    /// The file.
    pub path: String,
    /// Its sha256.
    pub sha256: String,
    /// `--force` came from the plan.
    pub force: bool,
    /// `--allow-delete N` came from the plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_delete: Option<u64>,
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
    /// `publish --stage` (SPEC §19): the release is built and verified, held for
    /// `distributor promote`; readers still see the active release.
    Staged,
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
    pub files: Files,
    /// Links.
    pub links: Vec<LinkAction>,
    /// Reason, or the error.
    pub message: String,
    /// The hooks that ran after the operation (SPEC §19), in order; a failure is a
    /// warning, never the destination's outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookOutcome>,
    /// How long the run waited for the destination's lock (for metrics; not reported).
    #[serde(skip)]
    pub lock_wait: Option<std::time::Duration>,
    /// The kind of the error a failed destination ended with (`recovery_required`,
    /// `lock_timeout`, `failed`, ...; the HTTP API's kinds); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<&'static str>,
    /// A releases destination (SPEC §15): the release the run activated (its directory in
    /// `releases.dir`); absent otherwise and in a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_activated: Option<String>,
    /// The releases retention removed after the activation; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub releases_removed: Vec<String>,
    /// With `--omit-unchanged`: how many unchanged files and links were left out of
    /// `files` and `links`; absent otherwise (the report lists every one, SPEC §11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub omitted_unchanged: Option<OmittedUnchanged>,
}

/// What `--omit-unchanged` left out of a destination's `files` and `links`: the files and
/// links whose op is `unchanged`, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OmittedUnchanged {
    /// Unchanged files left out of `files`.
    pub files: u64,
    /// Unchanged links left out of `links`.
    pub links: u64,
}

/// How one hook ran (SPEC §19).
#[derive(Debug, Clone, Serialize)]
pub struct HookOutcome {
    /// `after_commit` or `after_failure`.
    pub when: String,
    /// The program and its arguments.
    pub run: Vec<String>,
    /// It exited 0 before its timeout.
    pub ok: bool,
    /// Its exit status, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// It ran past its timeout and was stopped.
    pub timed_out: bool,
    /// How long it ran.
    pub duration_ms: u64,
    /// The last 4 KiB of its stderr.
    pub stderr: String,
    /// Why it could not be started or waited for.
    pub error: Option<String>,
}

/// A destination's file actions as reported: those a plan lists, then every output of the
/// manifest an `unchanged` republication holds ([`DestinationPlan::outputs_unchanged`]),
/// made into report rows only as they are written.
#[derive(Debug, Clone, Default)]
pub struct Files {
    listed: Vec<FileAction>,
    unchanged: Option<Arc<Manifest>>,
}

/// One file action of a report (serialized as a [`FileAction`] is).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FileRow<'a> {
    /// Bundle-relative path.
    pub path: &'a str,
    /// Operation.
    pub op: FileOp,
    /// Size.
    pub size: u64,
    /// sha256.
    pub sha256: &'a ContentHash,
}

impl Files {
    /// Every row, in order.
    pub fn iter(&self) -> impl Iterator<Item = FileRow<'_>> {
        let listed = self.listed.iter().map(|f| FileRow {
            path: &f.path,
            op: f.op,
            size: f.size,
            sha256: &f.sha256,
        });
        let unchanged = (self.unchanged.iter())
            .flat_map(|m| m.outputs.iter())
            .map(|o| FileRow {
                path: &o.path,
                op: FileOp::Unchanged,
                size: o.size,
                sha256: &o.sha256,
            });
        listed.chain(unchanged)
    }

    /// Drops the rows whose op is `unchanged`; returns how many there were.
    pub fn omit_unchanged(&mut self) -> u64 {
        let before = self.len();
        self.unchanged = None;
        self.listed.retain(|f| f.op != FileOp::Unchanged);
        (before - self.len()) as u64
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.listed.len() + self.unchanged.as_ref().map_or(0, |m| m.outputs.len())
    }
}

impl Serialize for Files {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl DestinationReport {
    /// The entry of a destination whose run failed with `e` while it carried out `plan`.
    /// Past the commit point the operation stands (SPEC §17: a report never says less
    /// than what happened): applied, its files counted, with the error, which says what is
    /// left for `recover`, as the message (exit 1 all the same).
    pub fn of_error(plan: DestinationPlan, e: &crate::error::Error) -> Self {
        let mut r = match e.committed_operation() {
            Some(op) => Self::from_plan(plan, Status::Applied, Some(op.to_string())),
            None => Self::from_plan(plan, Status::Failed, None),
        };
        r.message = e.to_string();
        r.error_kind = (r.status == Status::Failed).then(|| e.kind());
        r
    }

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
            files: Files {
                listed: plan.files,
                unchanged: plan.outputs_unchanged,
            },
            links: plan.links,
            message: plan.message,
            hooks: Vec::new(),
            lock_wait: None,
            error_kind: None,
            release_activated: None,
            releases_removed: Vec::new(),
            omitted_unchanged: None,
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
    /// Destinations where `distributor promote` activated a staged release.
    pub promote: u64,
    pub failed: u64,
    /// Destinations whose release `publish --stage` built and holds for promote.
    pub staged: u64,
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
                Decision::Promote => &mut s.promote,
            } += 1;
            if d.status == Status::Staged {
                s.staged += 1;
            }
            if d.status == Status::Failed {
                // Nothing of a failed destination stays written: its files are not counted.
                s.failed += 1;
                continue;
            }
            for f in d.files.iter() {
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
    /// About how long the report is as JSON ([`Report::write_json`]), in bytes.
    pub fn json_len_estimate(&self) -> usize {
        self.destinations
            .iter()
            .map(|d| {
                let files: usize = d.files.iter().map(|f| 200 + f.path.len()).sum();
                let links: usize = (d.links.iter())
                    .map(|l| 120 + l.path.len() + l.target.len())
                    .sum();
                4096 + files + links
            })
            .sum::<usize>()
            + 4096
    }

    /// Leaves every unchanged file and link out of each destination's `files` and
    /// `links` and counts them in its `omitted_unchanged` (`--omit-unchanged`): a report
    /// of a republication that says what was written, not every file that stayed. The
    /// summary's counters do not change.
    pub fn omit_unchanged(&mut self) {
        for d in &mut self.destinations {
            let files = d.files.omit_unchanged();
            let before = d.links.len();
            d.links.retain(|l| l.op != FileOp::Unchanged);
            d.omitted_unchanged = Some(OmittedUnchanged {
                files,
                links: (before - d.links.len()) as u64,
            });
        }
    }

    /// Writes the report to `w` as pretty JSON with a trailing newline, as it is
    /// serialized, without holding it whole.
    pub fn write_json(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *w, self)?;
        w.write_all(b"\n")
    }

    /// The text plan (SPEC §16): per destination its decision, counts by op, conflicts
    /// grouped by kind, then at most [`FILE_LINES`] file and link lines (changes first)
    /// unless `opts.files`; with `opts.quiet`, only the summary.
    pub fn to_text(&self, opts: &TextOptions) -> String {
        let mut out = String::new();
        let paint = |code: &str, text: &str| paint(opts.colour, code, text);
        // A promote, like a rollback, writes no file: it changes which files readers see.
        let promote = self.command == "promote";
        let rollback = self.command == "rollback" || promote;
        let verb = match (rollback, self.dry_run) {
            (true, true) if promote => "promote (dry run)",
            (true, false) if promote => "promote",
            (true, true) => "rollback (dry run)",
            (true, false) => "rollback",
            (false, true) => "plan",
            (false, false) => "publish",
        };
        // A rollback writes no file: it changes which files readers see.
        let (write, delete) = match (rollback, self.dry_run) {
            (true, true) => ("to change for readers", "to disappear"),
            (true, false) => ("changed for readers", "gone"),
            (false, true) => ("to write", "to delete"),
            (false, false) => ("written", "deleted"),
        };
        if opts.quiet {
        } else if rollback && self.source.id.is_empty() {
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
        if opts.quiet {
            for d in &self.destinations {
                quiet_line(&mut out, d, opts);
            }
        }
        for d in self.destinations.iter().filter(|_| !opts.quiet) {
            let _ = writeln!(
                out,
                "\ndestination {} -> {}",
                d.destination_id, d.bundle_path
            );
            match d.decision {
                // A failed destination: the error first, and the decision only as what
                // was planned, since it was not carried out.
                Some(decision) if d.status == Status::Failed => {
                    let _ = writeln!(
                        out,
                        "  {}: {}",
                        paint(status_colour(d.status), status_word(d.status)),
                        d.message
                    );
                    let _ = writeln!(out, "  planned: {decision}, not carried out");
                }
                Some(decision) => {
                    let _ = writeln!(
                        out,
                        "  decision: {decision} [{}]",
                        paint(status_colour(d.status), status_word(d.status))
                    );
                    if !d.message.is_empty() {
                        let _ = writeln!(out, "  reason: {}", d.message);
                    }
                }
                // Failed before anything was decided: the error is the whole story.
                None => {
                    let _ = writeln!(
                        out,
                        "  {}: {}",
                        paint(status_colour(d.status), status_word(d.status)),
                        d.message
                    );
                }
            }
            if let Some(counts) = counts_line(
                d.files.iter().map(|f| (f.op, f.size)),
                // A refused or failed destination keeps nothing it would have written.
                Some(match d.status {
                    Status::Failed | Status::Conflict => "not written",
                    _ => write,
                }),
            ) {
                let _ = writeln!(out, "  files: {counts}");
            }
            if let Some(counts) = counts_line(d.links.iter().map(|l| (l.op, 0)), None) {
                let _ = writeln!(out, "  links: {counts}");
            }
            write_conflicts(&mut out, &d.conflicts, opts);
            for t in &d.takeovers {
                let _ = writeln!(
                    out,
                    "  takeover from {} (source {}): {} path(s)",
                    t.from_owner,
                    t.from_source_id,
                    t.paths.len()
                );
            }
            // Changes first, then what stays; each group in plan order. Only the lines
            // shown are made (a line each would be a hundred megabytes at a million files).
            let file_line =
                |f: FileRow| format!("{} {} ({})", f.op.sign(), f.path, human_size(f.size));
            let link_line = |l: &LinkAction| format!("{} {} -> {}", l.op.sign(), l.path, l.target);
            let group = |stay: bool| {
                (d.files.iter().filter(move |f| stays(f.op) == stay))
                    .map(file_line)
                    .chain((d.links.iter().filter(move |l| stays(l.op) == stay)).map(link_line))
            };
            let total = d.files.len() + d.links.len();
            let shown = if opts.files {
                total
            } else if d.status == Status::Failed {
                // Nothing of a failed destination was written (its counts line says so):
                // its planned lines would read as what happened. --files and --json
                // still list them.
                0
            } else {
                total.min(FILE_LINES)
            };
            if d.status == Status::Failed && shown > 0 {
                let _ = writeln!(out, "  planned, not written:");
            }
            for line in group(false).chain(group(true)).take(shown) {
                let _ = writeln!(out, "  {line}");
            }
            if shown < total && d.status != Status::Failed {
                let _ = writeln!(
                    out,
                    "  ... and {} more (--files lists every one, --json has them all)",
                    total - shown
                );
            }
            if let Some(op) = &d.operation_id {
                let _ = writeln!(out, "  operation: {op}");
            }
            if let Some(release) = &d.release_activated {
                let _ = writeln!(out, "  release activated: {release}");
            }
            if !d.releases_removed.is_empty() {
                let _ = writeln!(
                    out,
                    "  retention removed: {}",
                    d.releases_removed.join(", ")
                );
            }
            for h in &d.hooks {
                let last = h.stderr.trim_end().lines().last().unwrap_or_default();
                let _ = match h.ok {
                    true => writeln!(
                        out,
                        "  hook {} {}: ok ({} ms)",
                        h.when, h.run[0], h.duration_ms
                    ),
                    false => writeln!(
                        out,
                        "  {} hook {} {}: {} after {} ms{}{last} (the outcome stands)",
                        paint(YELLOW, "warning:"),
                        h.when,
                        h.run[0],
                        h.ending(),
                        h.duration_ms,
                        if last.is_empty() { "" } else { ": " },
                    ),
                };
            }
        }
        let s = &self.summary;
        // Conflicts, as the grouped lines count them (`x20000`), and the destinations
        // they refused.
        let conflicts = match s.conflict {
            0 => "0 conflict(s)".to_string(),
            n => format!(
                "{} conflict(s) in {n} destination(s)",
                (self.destinations.iter())
                    .filter(|d| d.decision == Some(Decision::Conflict))
                    .map(|d| d.conflicts.len())
                    .sum::<usize>()
            ),
        };
        let failed = format!("{} failed", s.failed);
        let _ = writeln!(
            out,
            "{}summary: {} destination(s); {} file(s) {write} ({}), {} {delete}, {} unchanged, {} retained; {}, {}",
            if opts.quiet { "" } else { "\n" },
            s.destinations,
            s.files_written,
            human_size(s.bytes_written),
            s.files_deleted,
            s.files_unchanged,
            s.files_retained,
            if s.conflict > 0 {
                paint(YELLOW, &conflicts)
            } else {
                conflicts
            },
            if s.failed > 0 {
                paint(RED, &failed)
            } else {
                failed
            }
        );
        if let Some(p) = &self.plan_file {
            let lifted = match (p.force, p.allow_delete) {
                (false, None) => String::new(),
                (true, None) => "; --force from the plan".into(),
                (false, Some(n)) => format!("; --allow-delete {n} from the plan"),
                (true, Some(n)) => format!("; --force and --allow-delete {n} from the plan"),
            };
            let _ = match self.command.as_str() {
                "plan" => writeln!(out, "plan file: {} sha256 {}{lifted}", p.path, p.sha256),
                _ => writeln!(out, "saved plan: {} sha256 {}{lifted}", p.path, p.sha256),
            };
        }
        out
    }
}

/// File and link lines a text report shows per destination, unless `--files`.
pub const FILE_LINES: usize = 20;

/// Conflicts of one kind a text report names by path before it says how many more.
const CONFLICT_PATHS: usize = 5;

/// How a text report is laid out (SPEC §16).
#[derive(Debug, Clone, Copy, Default)]
pub struct TextOptions {
    /// Every file and link line, and every path of a conflict (`--files`).
    pub files: bool,
    /// Only the summary (`--quiet`).
    pub quiet: bool,
    /// ANSI colours (stdout is a terminal and `NO_COLOR` is not set).
    pub colour: bool,
}

impl TextOptions {
    /// Colour when `terminal` (stdout is one), `NO_COLOR` is unset or empty
    /// (<https://no-color.org>) and `TERM` is not `dumb`.
    pub fn colour_for(terminal: bool) -> bool {
        colour_from(
            terminal,
            std::env::var_os("NO_COLOR").as_deref(),
            std::env::var_os("TERM").as_deref(),
        )
    }
}

fn colour_from(
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

const RED: &str = "31";
const GREEN: &str = "32";
const YELLOW: &str = "33";
const CYAN: &str = "36";

/// `text` in the ANSI colour `code` when `colour`.
fn paint(colour: bool, code: &str, text: &str) -> String {
    if colour {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn status_colour(s: Status) -> &'static str {
    match s {
        Status::Applied | Status::Staged => GREEN,
        Status::Planned | Status::Skipped => CYAN,
        Status::Conflict => YELLOW,
        Status::Failed => RED,
    }
}

/// Whether a line for `op` shows something that stays as it is.
fn stays(op: FileOp) -> bool {
    matches!(op, FileOp::Unchanged | FileOp::Retain)
}

/// `3 create, 1 delete, 9996 unchanged (12.0 KiB to write)`: the count of each op present,
/// with the bytes created and overwritten when `written` says how to call them; `None`
/// when there is nothing.
fn counts_line(
    items: impl Iterator<Item = (FileOp, u64)>,
    written: Option<&str>,
) -> Option<String> {
    let ops = [
        FileOp::Create,
        FileOp::Overwrite,
        FileOp::Delete,
        FileOp::Unchanged,
        FileOp::Retain,
    ];
    let mut n = [0u64; 5];
    let mut bytes = 0u64;
    for (op, size) in items {
        let i = ops
            .iter()
            .position(|o| *o == op)
            .expect("every op is listed");
        n[i] += 1;
        if matches!(op, FileOp::Create | FileOp::Overwrite) {
            bytes += size;
        }
    }
    if n.iter().all(|c| *c == 0) {
        return None;
    }
    let mut line = ops
        .iter()
        .zip(n)
        .filter(|(_, c)| *c > 0)
        .map(|(op, c)| format!("{c} {}", op.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(written) = written
        && n[0] + n[1] > 0
    {
        let _ = write!(line, " ({} {written})", human_size(bytes));
    }
    Some(line)
}

/// Conflicts grouped by kind (and forceability), in the order each kind first appears:
/// one alone as `! kind at path: message (forceable)`; several as a count, the first
/// message and the first [`CONFLICT_PATHS`] paths (all with `--files`).
/// `--quiet`'s one line for a destination that failed or conflicted (SPEC §20 amends
/// §16): why, so a quiet run in CI still says what to fix. A pending recovery (exit 4)
/// reads as such, not as a failure.
fn quiet_line(out: &mut String, d: &DestinationReport, opts: &TextOptions) {
    let first_line = |m: &str| m.lines().next().unwrap_or_default().to_string();
    let why = match d.status {
        Status::Failed if d.error_kind == Some("recovery_required") => {
            format!("recovery pending: {}", first_line(&d.message))
        }
        Status::Failed => format!(
            "{}: {}",
            paint(opts.colour, RED, "failed"),
            first_line(&d.message)
        ),
        Status::Conflict => {
            let mut kinds: Vec<(&str, bool, usize)> = Vec::new();
            for c in &d.conflicts {
                match kinds
                    .iter_mut()
                    .find(|(k, f, _)| *k == c.kind.as_str() && *f == c.forceable)
                {
                    Some((_, _, n)) => *n += 1,
                    None => kinds.push((c.kind.as_str(), c.forceable, 1)),
                }
            }
            let list: Vec<String> = (kinds.iter())
                .map(|(k, f, n)| {
                    let force = if *f { "forceable" } else { "not forceable" };
                    match n {
                        1 => format!("{k} ({force})"),
                        n => format!("{k} x{n} ({force})"),
                    }
                })
                .collect();
            let first = (d.conflicts.first())
                .map(|c| format!(": {}", first_line(&c.message)))
                .unwrap_or_default();
            format!(
                "{}: {}{first}",
                paint(opts.colour, YELLOW, "conflict"),
                list.join(", ")
            )
        }
        _ => return,
    };
    let _ = writeln!(out, "destination {}: {why}", d.destination_id);
}

fn write_conflicts(out: &mut String, conflicts: &[Conflict], opts: &TextOptions) {
    let mut groups: Vec<(&Conflict, Vec<&Conflict>)> = Vec::new();
    for c in conflicts {
        match groups
            .iter_mut()
            .find(|(first, _)| first.kind == c.kind && first.forceable == c.forceable)
        {
            Some((_, all)) => all.push(c),
            None => groups.push((c, vec![c])),
        }
    }
    for (first, all) in groups {
        let force = if first.forceable {
            "forceable"
        } else {
            "not forceable"
        };
        let mark = paint(opts.colour, YELLOW, "!");
        if all.len() == 1 {
            let at = first
                .path
                .as_deref()
                .map(|p| format!(" at {p}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {mark} {}{at}: {} ({force})",
                first.kind, first.message
            );
            continue;
        }
        let _ = writeln!(
            out,
            "  {mark} {} x{} ({force}), the first: {}",
            first.kind,
            all.len(),
            first.message
        );
        let paths: Vec<&str> = all.iter().filter_map(|c| c.path.as_deref()).collect();
        let shown = if opts.files {
            paths.len()
        } else {
            paths.len().min(CONFLICT_PATHS)
        };
        if shown > 0 {
            let more = match paths.len() - shown {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let _ = writeln!(out, "    at {}{more}", paths[..shown].join(", "));
        }
    }
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Planned => "planned",
        Status::Applied => "applied",
        Status::Skipped => "skipped",
        Status::Conflict => "conflict",
        Status::Failed => "failed",
        Status::Staged => "staged",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(4096 * 10_000), "39.1 MiB");
        assert_eq!(human_size(74_100_000), "70.7 MiB");
        assert_eq!(human_size(5 << 40), "5.0 TiB");
        assert_eq!(human_size(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_from(true, None, Some(OsStr::new("xterm"))));
        assert!(colour_from(true, Some(OsStr::new("")), None));
        assert!(!colour_from(false, None, None));
        assert!(!colour_from(true, Some(OsStr::new("1")), None));
        assert!(!colour_from(true, None, Some(OsStr::new("dumb"))));
        assert_eq!(paint(false, RED, "x"), "x");
        assert_eq!(paint(true, RED, "x"), "\x1b[31mx\x1b[0m");
    }

    #[test]
    fn counts_name_each_op_present_and_the_bytes_to_write() {
        let items = [
            (FileOp::Create, 1000),
            (FileOp::Overwrite, 2000),
            (FileOp::Unchanged, 5),
            (FileOp::Unchanged, 5),
        ];
        assert_eq!(
            counts_line(items.into_iter(), Some("to write")).unwrap(),
            "1 create, 1 overwrite, 2 unchanged (2.9 KiB to write)"
        );
        assert_eq!(
            counts_line([(FileOp::Delete, 0)].into_iter(), Some("written")).unwrap(),
            "1 delete"
        );
        assert!(counts_line(std::iter::empty(), None).is_none());
    }
}
