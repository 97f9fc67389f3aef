//! What `recover` reports: one entry per operation found, its outcome and where it was
//! found, the destinations that could not be searched, and the counters; as text and JSON.

use crate::backend;
use serde::Serialize;

/// What recovery did (or, in a dry run, would do) with one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The commit point was reached: cleanup finished.
    RolledForward,
    /// The commit point was not reached: the destination is as before the operation.
    RolledBack,
    /// The state file is neither the pre- nor the post-state: nothing touched.
    Diverged,
    /// Recovery could not run (lock timeout, unreadable staging, I/O error).
    Failed,
    /// An operator ended a diverged operation (`--abandon`); nothing was touched.
    Abandoned,
    /// The operation's staging entry does not exist: the state says whether it was
    /// `applied elsewhere` or `not applied`; nothing was touched.
    Closed,
    /// A record in the destination distributor did not write (SPEC §17: another uid's, a
    /// published file's mode, a hard link, or an earlier version's staging this journal
    /// does not know): nothing was touched.
    Untrusted,
    /// The operation's staging entry is gone and the record directory it was written in
    /// (`.distributor/`) is no longer the one at its place (SPEC §17): its staging may
    /// have been moved away with it, so the operation is not closed; nothing was touched.
    StagingMoved,
    /// The release directory the operation was building (or activating) is no longer
    /// what its name holds (docs/operations.md, "Release identity"): nothing was
    /// removed, the staging stays.
    ReleaseMoved,
}

/// Where an operation was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundIn {
    /// Only in the journal (nothing staged, or staging already removed).
    Journal,
    /// Only in a destination's staging (the journal never saw it).
    Staging,
    /// Both.
    JournalAndStaging,
}

/// One operation in a recover report.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveredOperation {
    /// Operation id (or the staging entry's name when it is not an operation).
    pub operation_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// Pipeline id, when known.
    pub pipeline_id: Option<String>,
    /// Destination id, when known.
    pub destination_id: Option<String>,
    /// The interrupted operation's decision, when known.
    pub decision: Option<String>,
    /// Where it was found.
    pub found_in: FoundIn,
    /// sha256 of the state file now (None: absent).
    pub state_sha256: Option<String>,
    /// sha256 of the state file before the operation (None: absent).
    pub pre_state_sha256: Option<String>,
    /// sha256 of the state file the operation commits.
    pub post_state_sha256: Option<String>,
    /// Outcome.
    pub outcome: Outcome,
    /// What was found and done, and for diverged what to check.
    pub message: String,
    /// An object store's state object that the roll-forward overwrote with the
    /// post-state, being neither the pre- nor the post-state (SPEC §17): its sha256, its
    /// ETag and where its copy is kept. Absent when nothing was replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_state: Option<backend::ReplacedState>,
}

/// Counters of a recover report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoverSummary {
    /// Operations found.
    pub operations: usize,
    /// Rolled forward.
    pub rolled_forward: usize,
    /// Rolled back.
    pub rolled_back: usize,
    /// Diverged.
    pub diverged: usize,
    /// Failed.
    pub failed: usize,
    /// Abandoned.
    pub abandoned: usize,
    /// Closed.
    pub closed: usize,
    /// Untrusted records: nothing touched.
    pub untrusted: usize,
    /// Operations whose record directory was moved: nothing touched.
    pub staging_moved: usize,
    /// Operations whose release's name holds another directory: nothing removed.
    pub release_moved: usize,
}

/// The report of one `recover` run.
#[derive(Debug, Clone, Serialize)]
pub struct RecoverReport {
    /// Always 1.
    pub report_version: u32,
    /// `recover`.
    pub command: &'static str,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The journal used.
    pub journal: String,
    /// One entry per operation found.
    pub operations: Vec<RecoveredOperation>,
    /// Destinations of the config that could not be searched for interrupted operations
    /// (the others still were); each counts as failed.
    pub errors: Vec<DestinationError>,
    /// Counters.
    pub summary: RecoverSummary,
}

/// A destination `recover` could not search.
#[derive(Debug, Clone, Serialize)]
pub struct DestinationError {
    /// Destination id.
    pub destination_id: String,
    /// Its configured path.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

impl RecoverReport {
    /// 0 when everything found was recovered (or nothing was found), else 1 (SPEC §10).
    pub fn exit_code(&self) -> crate::error::ExitCode {
        let s = &self.summary;
        if s.diverged + s.failed + s.untrusted + s.staging_moved + s.release_moved > 0 {
            crate::error::ExitCode::Failed
        } else {
            crate::error::ExitCode::Success
        }
    }
}

impl RecoveredOperation {
    /// Whether it was left for a person (what makes `recover` exit 1).
    pub fn needs_a_person(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Diverged
                | Outcome::Failed
                | Outcome::Untrusted
                | Outcome::StagingMoved
                | Outcome::ReleaseMoved
        )
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::RolledForward => "rolled forward",
        Outcome::RolledBack => "rolled back",
        Outcome::Diverged => "diverged",
        Outcome::Failed => "failed",
        Outcome::Abandoned => "abandoned",
        Outcome::Closed => "closed",
        Outcome::Untrusted => "untrusted",
        Outcome::StagingMoved => "staging moved",
        Outcome::ReleaseMoved => "release moved",
    }
}

impl RecoverReport {
    /// The text report.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for e in &self.errors {
            let _ = writeln!(
                out,
                "destination {} -> {}: not searched for interrupted operations: {}",
                e.destination_id, e.path, e.message
            );
        }
        if self.operations.is_empty() {
            let _ = writeln!(out, "nothing to recover (journal {})", self.journal);
            if !self.errors.is_empty() {
                let _ = writeln!(out, "{} destination(s) failed", self.errors.len());
            }
            return out;
        }
        for o in &self.operations {
            let who = match (&o.pipeline_id, &o.destination_id) {
                (Some(p), Some(d)) => format!(
                    " ({p}/{d}, {})",
                    o.decision.as_deref().unwrap_or("unknown decision")
                ),
                _ => String::new(),
            };
            let verdict =
                if self.dry_run && !matches!(o.outcome, Outcome::Failed | Outcome::Untrusted) {
                    format!("would be {}", outcome_word(o.outcome))
                } else {
                    outcome_word(o.outcome).to_string()
                };
            let _ = writeln!(
                out,
                "operation {} on {}{who}: {verdict}\n  {}",
                o.operation_id, o.bundle_path, o.message
            );
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "{}{} operation(s): {} rolled forward, {} rolled back, {} diverged, {} failed{}",
            if self.dry_run { "dry run: " } else { "" },
            s.operations,
            s.rolled_forward,
            s.rolled_back,
            s.diverged,
            s.failed,
            [
                ("abandoned", s.abandoned),
                ("closed", s.closed),
                ("untrusted", s.untrusted),
                ("staging moved", s.staging_moved),
                ("release moved", s.release_moved),
            ]
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(w, n)| format!(", {n} {w}"))
            .collect::<String>()
        );
        out
    }

    /// The JSON report.
    pub fn to_json(&self) -> String {
        format!(
            "{}\n",
            serde_json::to_string_pretty(self)
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        )
    }
}
