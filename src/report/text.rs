//! The text report (SPEC §16): a heading, then per destination its decision, counts by
//! op, conflicts grouped by kind, file and link lines and what followed the commit; then
//! the summary. `--quiet` keeps one line per destination that failed or conflicted, and
//! the summary.

use super::{DestinationReport, FileRow, Report, Status};
use crate::model::{Decision, FileOp};
use crate::plan::{Conflict, LinkAction};
use crate::units::human_size;
use std::fmt::Write;

impl Report {
    /// The text plan (SPEC §16): per destination its decision, counts by op, conflicts
    /// grouped by kind, then at most [`FILE_LINES`] file and link lines (changes first)
    /// unless `opts.files`; with `opts.quiet`, only the summary.
    pub(crate) fn to_text(&self, opts: &TextOptions) -> String {
        let mut out = String::new();
        let words = Words::of(self);
        if opts.quiet {
            for d in &self.destinations {
                quiet_line(&mut out, d, opts);
            }
        } else {
            self.write_heading(&mut out, &words);
            for d in &self.destinations {
                write_destination(&mut out, d, words.write, opts);
            }
        }
        self.write_summary(&mut out, &words, opts);
        self.write_plan_file(&mut out);
        out
    }

    /// `publish weather source 2026-12-01 (created ..., sha256:...)`; a rollback or
    /// promote says where it went.
    fn write_heading(&self, out: &mut String, words: &Words) {
        let verb = words.verb;
        if words.rollback && self.source.id.is_empty() {
            let _ = writeln!(out, "{verb} {}", self.pipeline_id);
        } else if words.rollback {
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
    }

    /// The summary line: destinations, files and bytes, conflicts and failures.
    fn write_summary(&self, out: &mut String, words: &Words, opts: &TextOptions) {
        let (write, delete) = (words.write, words.delete);
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
                paint(opts.colour, YELLOW, &conflicts)
            } else {
                conflicts
            },
            if s.failed > 0 {
                paint(opts.colour, RED, &failed)
            } else {
                failed
            }
        );
    }

    /// The plan file a `plan` wrote or an `apply` carried out, and what it lifted.
    fn write_plan_file(&self, out: &mut String) {
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
    }
}

/// What a report's command is called and what it calls the files it changes.
struct Words {
    /// `publish`, `plan`, `rollback (dry run)`, ...
    verb: &'static str,
    /// A rollback or promote: it changes which files readers see, and writes none.
    rollback: bool,
    /// What the files created and overwritten are called.
    write: &'static str,
    /// What the files deleted are called.
    delete: &'static str,
}

impl Words {
    fn of(report: &Report) -> Words {
        // A promote, like a rollback, writes no file: it changes which files readers see.
        let promote = report.command == "promote";
        let rollback = report.command == "rollback" || promote;
        let verb = match (rollback, report.dry_run) {
            (true, true) if promote => "promote (dry run)",
            (true, false) if promote => "promote",
            (true, true) => "rollback (dry run)",
            (true, false) => "rollback",
            (false, true) => "plan",
            (false, false) => "publish",
        };
        // A rollback writes no file: it changes which files readers see.
        let (write, delete) = match (rollback, report.dry_run) {
            (true, true) => ("to change for readers", "to disappear"),
            (true, false) => ("changed for readers", "gone"),
            (false, true) => ("to write", "to delete"),
            (false, false) => ("written", "deleted"),
        };
        Words {
            verb,
            rollback,
            write,
            delete,
        }
    }
}

/// One destination's block; `write` is what the files it writes are called.
fn write_destination(out: &mut String, d: &DestinationReport, write: &str, opts: &TextOptions) {
    let _ = writeln!(
        out,
        "\ndestination {} -> {}",
        d.destination_id, d.bundle_path
    );
    write_decision(out, d, opts);
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
    write_conflicts(out, &d.conflicts, opts);
    for t in &d.takeovers {
        let _ = writeln!(
            out,
            "  {}: {} path(s)",
            takeover_words(&t.from_owner.to_string(), &t.from_source_id, t.cross_owner),
            t.paths.len()
        );
    }
    write_lines(out, d, opts);
    write_afterwards(out, d, opts);
}

/// A takeover in words: `takeover from docs/web (another owner, source docs)`, or `new
/// source id for site/web (same owner, was source site-old)`.
pub(crate) fn takeover_words(from_owner: &str, from_source_id: &str, cross_owner: bool) -> String {
    if cross_owner {
        format!("takeover from {from_owner} (another owner, source {from_source_id})")
    } else {
        format!("new source id for {from_owner} (same owner, was source {from_source_id})")
    }
}

/// The decision and status of a destination, or its error.
fn write_decision(out: &mut String, d: &DestinationReport, opts: &TextOptions) {
    let status = paint(opts.colour, status_colour(d.status), status_word(d.status));
    match d.decision {
        // A failed destination: the error first, and the decision only as what
        // was planned, since it was not carried out.
        Some(decision) if d.status == Status::Failed => {
            let _ = writeln!(out, "  {status}: {}", d.message);
            let _ = writeln!(out, "  planned: {decision}, not carried out");
        }
        Some(decision) => {
            let _ = writeln!(out, "  decision: {decision} [{status}]");
            if !d.message.is_empty() {
                let _ = writeln!(out, "  reason: {}", d.message);
            }
        }
        // Failed before anything was decided: the error is the whole story.
        None => {
            let _ = writeln!(out, "  {status}: {}", d.message);
        }
    }
}

/// The file and link lines: changes first, then what stays; each group in plan order; at
/// most [`FILE_LINES`] unless `--files`, none for a failed destination.
fn write_lines(out: &mut String, d: &DestinationReport, opts: &TextOptions) {
    // Only the lines shown are made (a line each would be a hundred megabytes at a
    // million files).
    let file_line = |f: FileRow| format!("{} {} ({})", f.op.sign(), f.path, human_size(f.size));
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
}

/// The operation id, the release activated, what retention removed and how each hook
/// ended.
fn write_afterwards(out: &mut String, d: &DestinationReport, opts: &TextOptions) {
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
                paint(opts.colour, YELLOW, "warning:"),
                h.when,
                h.run[0],
                h.ending(),
                h.duration_ms,
                if last.is_empty() { "" } else { ": " },
            ),
        };
    }
}

pub(crate) const FILE_LINES: usize = 20;

/// Conflicts of one kind a text report names by path before it says how many more.
const CONFLICT_PATHS: usize = 5;

/// How a text report is laid out (SPEC §16).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TextOptions {
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
    pub(crate) fn colour_for(terminal: bool) -> bool {
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

/// Conflicts grouped by kind (and forceability), in the order each kind first appears:
/// one alone as `! kind at path: message (forceable)`; several as a count, the first
/// message and the first [`CONFLICT_PATHS`] paths (all with `--files`).
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
