//! Reports (SPEC §11): the `--json` object and the text plan, both rendered from plans and
//! per-destination outcomes.

use crate::hash::ContentHash;
use crate::model::{Decision, FileOp, SourceRef, StateMode, TakeoverMode};
use crate::plan::{Conflict, DestinationPlan, FileAction, LinkAction, Previous, TakeoverEntry};
use crate::source::Manifest;
use serde::Serialize;
use std::sync::Arc;

mod text;
pub(crate) use text::{FILE_LINES, TextOptions, takeover_words};

/// The report of one `publish`/`plan` run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
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
    /// Why the run was made (`--reason`, `DISTRIBUTOR_REASON`, `X-Distributor-Reason`);
    /// absent when none was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A saved plan (SPEC §19) as a report names it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlanFileUse {
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
pub(crate) enum Status {
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
pub(crate) struct DestinationReport {
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
pub(crate) struct OmittedUnchanged {
    /// Unchanged files left out of `files`.
    pub files: u64,
    /// Unchanged links left out of `links`.
    pub links: u64,
}

/// How one hook ran (SPEC §19).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HookOutcome {
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
pub(crate) struct Files {
    listed: Vec<FileAction>,
    unchanged: Option<Arc<Manifest>>,
}

/// One file action of a report (serialized as a [`FileAction`] is).
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct FileRow<'a> {
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
    pub(crate) fn iter(&self) -> impl Iterator<Item = FileRow<'_>> {
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
    pub(crate) fn omit_unchanged(&mut self) -> u64 {
        let before = self.len();
        self.unchanged = None;
        self.listed.retain(|f| f.op != FileOp::Unchanged);
        (before - self.len()) as u64
    }

    /// How many rows.
    pub(crate) fn len(&self) -> usize {
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
    pub(crate) fn of_error(plan: DestinationPlan, e: &crate::error::Error) -> Self {
        let mut r = match e.committed_operation() {
            Some(op) => Self::from_plan(plan, Status::Applied, Some(op.to_string())),
            None => Self::from_plan(plan, Status::Failed, None),
        };
        r.message = e.to_string();
        r.error_kind = (r.status == Status::Failed).then(|| e.kind());
        r
    }

    /// Builds the entry of a plan.
    pub(crate) fn from_plan(
        plan: DestinationPlan,
        status: Status,
        operation_id: Option<String>,
    ) -> Self {
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
pub(crate) struct Summary {
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
    pub(crate) fn of(destinations: &[DestinationReport]) -> Summary {
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
    pub(crate) fn json_len_estimate(&self) -> usize {
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
    pub(crate) fn omit_unchanged(&mut self) {
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
    /// serialized, without holding it whole. Generic over the writer: serde_json writes
    /// every token through it, and a concrete buffered writer takes each as a copy into its
    /// buffer where a `dyn Write` would take a call.
    pub(crate) fn write_json<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut w, self)?;
        w.write_all(b"\n")
    }
}
