//! `distributor recover` (SPEC §8): finds every unfinished operation and, under its
//! destination's lock, rolls it forward, rolls it back, or reports it diverged.
//!
//! Where operations are found: the journal's unfinished operations, and, with a config,
//! every `.distributor-staging/<op>/` in the config's destinations, even when the journal
//! never saw the operation (another host, a lost journal): its `plan.json` carries the whole
//! record, which is then written to this journal first (an `adopted` event), so the outcome
//! is recorded like any other.
//!
//! The verdict comes from the state file alone, the commit point of SPEC §6: its sha256
//! equals the planned post-state → roll forward (finish the cleanup); equals the pre-state,
//! or both are absent → roll back ([`undo`]); anything else → diverged: touch nothing. Each
//! step is idempotent and the journal event is appended last, so a crash of `recover` itself
//! is repaired by running it again. Never writes when `dry_run` is set.

use crate::backend::local::{self, STAGING_DIR};
use crate::config::{Config, PathMapping};
use crate::error::{Error, IoContext, Result};
use crate::execute::{
    PLAN_FILE, POST_STATE_FILE, PRE_STATE_FILE, StagedOperation, cleanup, journal_records, undo,
};
use crate::failpoint;
use crate::hash::sha256_hex;
use crate::journal::{Journal, event, query};
use crate::state::STATE_FILE;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to recover.
#[derive(Debug, Clone)]
pub struct RecoverOptions {
    /// Journal file (already resolved).
    pub journal: PathBuf,
    /// Report what would be done; write nothing anywhere.
    pub dry_run: bool,
    /// How long to wait for each destination lock.
    pub lock_timeout: Duration,
    /// Who recovers (`cli:<user>`), for the journal.
    pub actor: String,
}

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
    /// Counters.
    pub summary: RecoverSummary,
}

impl RecoverReport {
    /// 0 when everything found was recovered (or nothing was found), else 1 (SPEC §10).
    pub fn exit_code(&self) -> u8 {
        if self.summary.diverged + self.summary.failed > 0 {
            1
        } else {
            0
        }
    }
}

/// An operation to look at, before it is loaded.
#[derive(Debug, Default)]
struct Candidate {
    in_journal: bool,
    in_staging: bool,
    /// Base for the "no symlink on the way" check of the lock.
    base: Option<PathBuf>,
}

/// Finds and recovers every unfinished operation (SPEC §8).
pub fn recover(config: Option<&Config>, opts: &RecoverOptions) -> Result<RecoverReport> {
    let mut journal = Journal::open_existing(&opts.journal)?;
    // bundle path -> operation id -> candidate
    let mut found: BTreeMap<PathBuf, BTreeMap<String, Candidate>> = BTreeMap::new();
    let mut report = RecoverReport {
        report_version: 1,
        command: "recover",
        dry_run: opts.dry_run,
        journal: opts.journal.to_string_lossy().into_owned(),
        operations: Vec::new(),
        summary: RecoverSummary::default(),
    };
    if let Some(j) = &journal {
        for (op, bundle) in j.unfinished()? {
            let c = found.entry(PathBuf::from(bundle)).or_default();
            c.entry(op).or_default().in_journal = true;
        }
    }
    if let Some(config) = config {
        for dest in &config.destinations {
            for bundle in staging_bundles(&dest.path, &dest.path_mapping)? {
                let ops = found.entry(bundle.clone()).or_default();
                for name in staging_names(&bundle, &mut report) {
                    let c = ops.entry(name).or_default();
                    c.in_staging = true;
                    c.base = Some(dest.path.clone());
                }
            }
        }
    }
    if journal.is_none() && !opts.dry_run && found.values().any(|ops| !ops.is_empty()) {
        journal = Some(Journal::open(&opts.journal)?);
    }
    for (bundle, ops) in found {
        if ops.is_empty() {
            continue;
        }
        recover_bundle(&bundle, ops, journal.as_mut(), opts, &mut report);
    }
    let s = &mut report.summary;
    for o in &report.operations {
        s.operations += 1;
        match o.outcome {
            Outcome::RolledForward => s.rolled_forward += 1,
            Outcome::RolledBack => s.rolled_back += 1,
            Outcome::Diverged => s.diverged += 1,
            Outcome::Failed => s.failed += 1,
            Outcome::Abandoned => s.abandoned += 1,
        }
    }
    Ok(report)
}

/// Ends the diverged operation `op` without touching its destination (`recover
/// --abandon`): an `abandoned` event, after which it no longer blocks its bundle path. Its
/// staging, if any, is left for the operator to inspect and remove.
pub fn abandon(op: &str, opts: &RecoverOptions) -> Result<RecoverReport> {
    query::check_operation_id(op)?;
    let missing = || {
        Error::Failed(format!(
            "no operation {op} in journal {}",
            opts.journal.display()
        ))
    };
    let journal = Journal::open_existing(&opts.journal)?.ok_or_else(missing)?;
    let d = query::show(&journal, op)?.ok_or_else(missing)?.operation;
    if d.status != "diverged" {
        return Err(Error::Failed(format!(
            "operation {} is {}: only a diverged operation can be abandoned; `distributor recover` rolls unfinished operations forward or back",
            d.operation_id, d.status
        )));
    }
    let bundle = PathBuf::from(&d.bundle_path);
    let op_dir = bundle.join(STAGING_DIR).join(&d.operation_id);
    let mut message = if opts.dry_run {
        "would be abandoned: the journal would stop asking for its recovery; the destination would not be touched".to_string()
    } else {
        "abandoned: the journal no longer asks for its recovery; the destination was not touched"
            .to_string()
    };
    if fs::symlink_metadata(&op_dir).is_ok() {
        message.push_str(&format!(
            "; its staging {} is left in place: inspect it and remove it by hand (publish refuses while staging holds anything)",
            op_dir.display()
        ));
    }
    if !opts.dry_run {
        journal.event(
            &d.operation_id,
            event::ABANDONED,
            Some(&format!("by {}: {message}", opts.actor)),
        )?;
    }
    let state_sha256 = state_sha(&bundle)?.ok().flatten();
    let found_in = if op_dir.exists() {
        FoundIn::JournalAndStaging
    } else {
        FoundIn::Journal
    };
    Ok(RecoverReport {
        report_version: 1,
        command: "recover",
        dry_run: opts.dry_run,
        journal: opts.journal.to_string_lossy().into_owned(),
        operations: vec![RecoveredOperation {
            operation_id: d.operation_id,
            bundle_path: d.bundle_path,
            pipeline_id: Some(d.pipeline_id),
            destination_id: Some(d.destination_id),
            decision: Some(d.decision),
            found_in,
            state_sha256,
            pre_state_sha256: d.pre_state_sha256,
            post_state_sha256: Some(d.post_state_sha256),
            outcome: Outcome::Abandoned,
            message,
        }],
        summary: RecoverSummary {
            operations: 1,
            abandoned: 1,
            ..RecoverSummary::default()
        },
    })
}

/// Bundle paths of a destination that have a staging directory: the path itself for fixed
/// mapping; for mapped destinations every directory below the path that holds one.
fn staging_bundles(base: &Path, mapping: &PathMapping) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if *mapping == PathMapping::Fixed {
        if fs::symlink_metadata(base.join(STAGING_DIR)).is_ok() {
            out.push(base.to_path_buf());
        }
        return Ok(out);
    }
    walk_for_staging(base, &mut out)?;
    Ok(out)
}

fn walk_for_staging(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    // A bundle path (it holds state or staging) is where the walk stops: below it is
    // published content, which may hold anything, a directory named like staging too, and
    // is never an operation of distributor's.
    if fs::symlink_metadata(dir.join(STAGING_DIR)).is_ok() {
        out.push(dir.to_path_buf());
        return Ok(());
    }
    if fs::symlink_metadata(dir.join(STATE_FILE)).is_ok() {
        return Ok(());
    }
    for e in rd {
        let e = e.ctx("list", dir)?;
        if e.file_type().ctx("stat", e.path())?.is_dir() {
            walk_for_staging(&e.path(), out)?;
        }
    }
    Ok(())
}

/// Names of the operations staged in `bundle`; entries that cannot be operations are
/// reported failed right away (nothing is touched).
fn staging_names(bundle: &Path, report: &mut RecoverReport) -> Vec<String> {
    let staging = bundle.join(STAGING_DIR);
    let mut names = Vec::new();
    let mut unknown = |name: String, why: String| {
        report.operations.push(RecoveredOperation {
            operation_id: name,
            bundle_path: bundle.to_string_lossy().into_owned(),
            pipeline_id: None,
            destination_id: None,
            decision: None,
            found_in: FoundIn::Staging,
            state_sha256: None,
            pre_state_sha256: None,
            post_state_sha256: None,
            outcome: Outcome::Failed,
            message: why,
        })
    };
    if !fs::symlink_metadata(&staging).is_ok_and(|m| m.is_dir()) {
        unknown(
            STAGING_DIR.to_string(),
            format!(
                "{} is not a real directory; distributor did not make it: inspect it and remove it by hand",
                staging.display()
            ),
        );
        return names;
    }
    let entries = match fs::read_dir(&staging) {
        Ok(rd) => rd,
        Err(e) => {
            unknown(
                STAGING_DIR.to_string(),
                format!("cannot list {}: {e}", staging.display()),
            );
            return names;
        }
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && uuid::Uuid::parse_str(&name).is_ok() {
            names.push(name);
        } else {
            unknown(
                name,
                format!(
                    "{} is not an operation's staging directory; distributor did not make it: inspect it and remove it by hand",
                    e.path().display()
                ),
            );
        }
    }
    names.sort();
    names
}

fn recover_bundle(
    bundle: &Path,
    ops: BTreeMap<String, Candidate>,
    mut journal: Option<&mut Journal>,
    opts: &RecoverOptions,
    report: &mut RecoverReport,
) {
    // The lock: taken only when something may be written, and only on a bundle path that
    // exists (recovery never creates one).
    let base = ops
        .values()
        .find_map(|c| c.base.clone())
        .unwrap_or_else(|| bundle.to_path_buf());
    let _lock = if opts.dry_run || fs::symlink_metadata(bundle).is_err() {
        None
    } else {
        match local::lock(&base, bundle, opts.lock_timeout) {
            Ok(l) => Some(l),
            Err(e) => {
                for (op, c) in &ops {
                    let mut r = blank(op, bundle, c);
                    r.message = format!("not recovered: {e}");
                    report.operations.push(r);
                }
                return;
            }
        }
    };
    failpoint::hit("recover_after_lock");
    for (op, c) in ops {
        let r = match recover_one(bundle, &op, &c, journal.as_deref_mut(), opts) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                let mut r = blank(&op, bundle, &c);
                r.message = format!("not recovered: {e}");
                r
            }
        };
        report.operations.push(r);
    }
}

fn blank(op: &str, bundle: &Path, c: &Candidate) -> RecoveredOperation {
    RecoveredOperation {
        operation_id: op.to_string(),
        bundle_path: bundle.to_string_lossy().into_owned(),
        pipeline_id: None,
        destination_id: None,
        decision: None,
        found_in: match (c.in_journal, c.in_staging) {
            (true, true) => FoundIn::JournalAndStaging,
            (false, true) => FoundIn::Staging,
            _ => FoundIn::Journal,
        },
        state_sha256: None,
        pre_state_sha256: None,
        post_state_sha256: None,
        outcome: Outcome::Failed,
        message: String::new(),
    }
}

/// The state file's sha256 now; `Err` text when it is there but not a regular file.
fn state_sha(bundle: &Path) -> Result<std::result::Result<Option<String>, String>> {
    let path = bundle.join(STATE_FILE);
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ok(None)),
        Err(e) if e.raw_os_error() == Some(20) => Ok(Ok(None)), // ENOTDIR: no bundle dir
        Err(e) => Err(Error::io("stat", path, e)),
        Ok(md) if md.is_file() => Ok(Ok(Some(sha256_hex(&fs::read(&path).ctx("read", &path)?)))),
        Ok(_) => Ok(Err(format!("{} is not a regular file", path.display()))),
    }
}

/// Recovers one operation; `None` when, under the lock, it turned out finished already (a
/// concurrent publish or recover finished it).
fn recover_one(
    bundle: &Path,
    op: &str,
    c: &Candidate,
    mut journal: Option<&mut Journal>,
    opts: &RecoverOptions,
) -> Result<Option<RecoveredOperation>> {
    let op_dir = bundle.join(STAGING_DIR).join(op);
    let staged_now = fs::symlink_metadata(&op_dir).is_ok_and(|m| m.is_dir());
    let status = match journal.as_deref() {
        Some(j) => j.status(op)?,
        None => None,
    };
    let unfinished = |s: &str| matches!(s, "in_progress" | "committed" | "diverged");
    if !staged_now && !status.as_deref().is_some_and(unfinished) {
        return Ok(None);
    }
    let mut r = blank(op, bundle, c);
    let Some(staged) = load(&mut r, bundle, journal.as_deref(), staged_now, opts.dry_run)? else {
        return Ok(Some(r));
    };
    r.pipeline_id = Some(staged.origin.pipeline_id.clone());
    r.destination_id = Some(staged.destination_id.clone());
    r.decision = Some(staged.origin.decision.clone());
    r.pre_state_sha256 = staged.pre_state_sha256.clone();
    r.post_state_sha256 = Some(staged.post_state_sha256.clone());
    if let Some(j) = journal
        .as_deref_mut()
        .filter(|_| status.is_none() && !opts.dry_run)
    {
        let (record, actions) = journal_records(&staged)?;
        let detail = format!(
            "by {}: found in {}, unknown to this journal",
            opts.actor,
            op_dir.join(PLAN_FILE).display()
        );
        j.adopt_operation(&record, &actions, &detail)?;
        failpoint::hit("recover_after_adopt");
    }

    let now = state_sha(bundle)?;
    r.state_sha256 = now.clone().ok().flatten();
    r.outcome = verdict(&staged, &now);
    r.message = match r.outcome {
        Outcome::Diverged => diverged_message(bundle, &op_dir, &staged, &now, staged_now),
        o => explain(o, staged.pre_state_sha256.is_some(), opts.dry_run),
    };
    if opts.dry_run {
        return Ok(Some(r));
    }
    let ev = match r.outcome {
        Outcome::RolledForward => {
            cleanup(bundle, &staged)?;
            event::RECOVERED_FORWARD
        }
        Outcome::RolledBack => {
            undo(bundle, &staged)?;
            event::RECOVERED_BACK
        }
        _ => event::DIVERGED,
    };
    failpoint::hit("recover_before_event");
    // A diverged operation stays diverged until someone acts: record it once.
    let repeat = ev == event::DIVERGED && status.as_deref() == Some("diverged");
    if let Some(j) = journal.filter(|_| !repeat) {
        j.event(op, ev, Some(&format!("by {}: {}", opts.actor, r.message)))?;
    }
    Ok(Some(r))
}

/// The operation's record: the journal's, else its `plan.json`; `None` when there is none
/// and `r` is the final report entry. A staging directory without either never touched
/// the destination (`plan.json` is written before anything is staged or moved aside) and
/// is removed when it holds no files.
fn load(
    r: &mut RecoveredOperation,
    bundle: &Path,
    journal: Option<&Journal>,
    staged_now: bool,
    dry_run: bool,
) -> Result<Option<StagedOperation>> {
    let op = r.operation_id.clone();
    let op_dir = bundle.join(STAGING_DIR).join(&op);
    let recorded = journal.map(|j| j.plan_json(&op)).transpose()?.flatten();
    if let Some(s) = recorded.and_then(|p| serde_json::from_str::<StagedOperation>(&p).ok()) {
        return Ok(Some(s));
    }
    if staged_now && op_dir.join(PLAN_FILE).exists() {
        return StagedOperation::read(&op_dir).map(Some);
    }
    if !staged_now {
        r.message = "the journal's record of this operation cannot be read".into();
        return Ok(None);
    }
    if holds_files(&op_dir)? {
        r.message = format!(
            "{} has no {PLAN_FILE} but holds files; inspect it and remove it by hand",
            op_dir.display()
        );
        return Ok(None);
    }
    r.outcome = Outcome::RolledBack;
    r.message = if dry_run {
        "would remove a staging directory that never held content".into()
    } else {
        local::remove_staging(bundle, &op)?;
        "removed a staging directory that never held content".into()
    };
    Ok(None)
}

/// SPEC §8: post-state → forward; pre-state (or both absent) → back; else diverged.
fn verdict(staged: &StagedOperation, now: &std::result::Result<Option<String>, String>) -> Outcome {
    match now {
        Ok(Some(sha)) if *sha == staged.post_state_sha256 => Outcome::RolledForward,
        Ok(sha) if *sha == staged.pre_state_sha256 => Outcome::RolledBack,
        _ => Outcome::Diverged,
    }
}

/// Why an operation rolls forward or back, and what was (or would be) done.
fn explain(outcome: Outcome, had_state: bool, dry_run: bool) -> String {
    let (why, done, would) = match outcome {
        Outcome::RolledForward => (
            ".distributor.json is the planned post-state: the commit point was reached",
            "finished the cleanup",
            "would finish the cleanup",
        ),
        _ if had_state => (
            ".distributor.json is the state before the operation: the commit point was not reached",
            "restored moved-aside content and removed placed content",
            "would restore moved-aside content and remove placed content",
        ),
        _ => (
            "there was no .distributor.json before and there is none now: the commit point was not reached",
            "restored moved-aside content and removed placed content",
            "would restore moved-aside content and remove placed content",
        ),
    };
    format!("{why}; {}", if dry_run { would } else { done })
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::RolledForward => "rolled forward",
        Outcome::RolledBack => "rolled back",
        Outcome::Diverged => "diverged",
        Outcome::Failed => "failed",
        Outcome::Abandoned => "abandoned",
    }
}

/// True when anything but directories and a half-written `plan.json.tmp` is under `dir`.
fn holds_files(dir: &Path) -> Result<bool> {
    for e in fs::read_dir(dir).ctx("list", dir)? {
        let e = e.ctx("list", dir)?;
        if e.file_type().ctx("stat", e.path())?.is_dir() {
            if holds_files(&e.path())? {
                return Ok(true);
            }
        } else if e.file_name() != format!("{PLAN_FILE}.tmp").as_str() {
            return Ok(true);
        }
    }
    Ok(false)
}

fn diverged_message(
    bundle: &Path,
    op_dir: &Path,
    staged: &StagedOperation,
    now: &std::result::Result<Option<String>, String>,
    staged_now: bool,
) -> String {
    let state = bundle.join(STATE_FILE);
    let found = match now {
        Ok(Some(sha)) => format!("{} has sha256 {sha}", state.display()),
        Ok(None) => format!("{} is absent", state.display()),
        Err(why) => why.clone(),
    };
    let pre = staged
        .pre_state_sha256
        .as_deref()
        .map(|s| format!("sha256 {s}"))
        .unwrap_or_else(|| "absent".into());
    let mut m = format!(
        "{found}, which is neither the state before the operation ({pre}) nor its planned post-state (sha256 {}): something else changed it after the interruption. Nothing was touched. ",
        staged.post_state_sha256
    );
    if staged_now {
        m.push_str(&format!(
            "Check what changed: {} and {} hold the state before and after, {}/old the moved-aside originals, {}/new the staged files not yet placed. To roll back, copy {PRE_STATE_FILE} over .distributor.json (or remove .distributor.json when there was none before); to roll forward, copy {POST_STATE_FILE} over it; then run `distributor recover` again. To keep the destination as it is instead, remove {} by hand and run `distributor recover --abandon {}`.",
            op_dir.join(PRE_STATE_FILE).display(),
            op_dir.join(POST_STATE_FILE).display(),
            op_dir.display(),
            op_dir.display(),
            op_dir.display(),
            staged.operation_id,
        ));
    } else {
        m.push_str(&format!(
            "The operation's staging directory is gone, so no half-done work of it is left in the destination (another publication may have replaced its state). Check the destination with `distributor verify`; when it is right as it is, end this operation with `distributor recover --abandon {}`.",
            staged.operation_id
        ));
    }
    m
}

impl RecoverReport {
    /// The text report.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if self.operations.is_empty() {
            let _ = writeln!(out, "nothing to recover (journal {})", self.journal);
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
            let verdict = if self.dry_run && o.outcome != Outcome::Failed {
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
            if s.abandoned > 0 {
                format!(", {} abandoned", s.abandoned)
            } else {
                String::new()
            }
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
