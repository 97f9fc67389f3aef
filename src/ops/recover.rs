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
//! or both are absent → roll back (the backend's undo); anything else → diverged: touch
//! nothing. An operation of the journal whose staging entry is gone (another journal's
//! `recover` finished it, or it never got that far) is `closed` from the state alone
//! (SPEC §13), touching nothing; an unfinished staging record (`.tmp-<op>`) never changed
//! anything and is removed. Each step is idempotent and the journal event is appended
//! last, so a crash of `recover` itself is repaired by running it again. Never writes when
//! `dry_run` is set.
//!
//! Every look at and change to a destination goes through the storage interface
//! ([`crate::backend`]), which refuses staging that is not a real directory tree its own
//! record describes.

use crate::backend::local::STAGING_DIR;
use crate::backend::releases::ReleaseStore;
use crate::backend::types::StagingEntry;
use crate::backend::{self, Backend, BundleStore, Operation, Verdict, state_sha256};
use crate::config::{Config, PathMapping};
use crate::error::{Error, Result};
use crate::execute::{POST_STATE_FILE, PRE_STATE_FILE, StagedOperation, journal_records};
use crate::failpoint;
use crate::journal::{Event, Journal, query};
use crate::progress::{Bytes, Ticker};
use crate::state::STATE_FILE;
use serde::Serialize;
use std::collections::BTreeMap;
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
        if s.diverged + s.failed + s.untrusted + s.staging_moved > 0 {
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
            Outcome::Diverged | Outcome::Failed | Outcome::Untrusted | Outcome::StagingMoved
        )
    }
}

/// An operation to look at, before it is loaded.
#[derive(Debug, Default)]
struct Candidate {
    in_journal: bool,
    in_staging: bool,
    /// Only an unfinished staging record (`.tmp-<op>`) was found.
    unfinished_record: bool,
    /// Its staging entry is an earlier version's (`.distributor-staging/<op>/`).
    legacy: bool,
    /// Base for the "no symlink on the way" walk of the lock.
    base: Option<PathBuf>,
    /// The storage holding the bundle path when the path alone does not say (from the
    /// config or the record).
    location: Option<Location>,
}

/// An object store or a releases destination, as a config or a record names it.
#[derive(Debug, Clone, Default)]
struct Location {
    s3: Option<backend::s3::S3Location>,
    releases: Option<backend::releases::ReleasesRecord>,
}

impl Location {
    fn of_destination(dest: &crate::config::Destination) -> Option<Location> {
        let l = Location {
            s3: dest.s3.as_ref().map(backend::s3::S3Location::from_settings),
            releases: dest
                .releases
                .as_ref()
                .map(|r| backend::releases::ReleasesRecord {
                    settings: r.clone(),
                    active_before: None,
                    activates: None,
                    adopts: false,
                    undoes: None,
                    adopts_dir: None,
                    stages: false,
                }),
        };
        (l.s3.is_some() || l.releases.is_some()).then_some(l)
    }

    fn backend(l: Option<&Location>, bundle: &Path) -> Result<Box<dyn Backend>> {
        backend::for_record(
            bundle,
            l.and_then(|l| l.s3.as_ref()),
            l.and_then(|l| l.releases.as_ref()),
        )
    }
}

/// Finds and recovers every unfinished operation (SPEC §8); `progress` hears of each
/// operation dealt with.
pub fn recover(
    config: Option<&Config>,
    opts: &RecoverOptions,
    progress: Ticker<'_>,
) -> Result<RecoverReport> {
    let mut journal = Journal::open_existing(&opts.journal)?;
    // bundle path -> operation id -> candidate
    let mut found: BTreeMap<PathBuf, BTreeMap<String, Candidate>> = BTreeMap::new();
    let mut report = RecoverReport {
        report_version: 1,
        command: "recover",
        dry_run: opts.dry_run,
        journal: opts.journal.to_string_lossy().into_owned(),
        operations: Vec::new(),
        errors: Vec::new(),
        summary: RecoverSummary::default(),
    };
    if let Some(j) = &journal {
        for (op, bundle) in j.unfinished()? {
            let location = recorded_location(j, &op)?;
            let c = found.entry(PathBuf::from(bundle)).or_default();
            let c = c.entry(op).or_default();
            c.in_journal = true;
            c.location = c.location.take().or(location);
        }
    }
    if let Some(config) = config {
        for dest in &config.destinations {
            // One destination that cannot be searched is reported, and the others still
            // are (SPEC §16).
            if let Err(e) = search_staging(dest, &mut found, &mut report) {
                report.errors.push(DestinationError {
                    destination_id: dest.id.clone(),
                    path: dest.path.to_string_lossy().into_owned(),
                    message: e.to_string(),
                });
            }
        }
    }
    if journal.is_none() && !opts.dry_run && found.values().any(|ops| !ops.is_empty()) {
        journal = Some(Journal::open(&opts.journal)?);
    }
    let total = found.values().map(|ops| ops.len() as u64).sum();
    progress.start("operations", Some(total), Bytes::Uncounted);
    for (bundle, ops) in found {
        if ops.is_empty() {
            continue;
        }
        recover_bundle(&bundle, ops, journal.as_mut(), opts, &mut report, progress);
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
            Outcome::Closed => s.closed += 1,
            Outcome::Untrusted => s.untrusted += 1,
            Outcome::StagingMoved => s.staging_moved += 1,
        }
    }
    s.failed += report.errors.len();
    Ok(report)
}

/// Adds to `found` the operations whose staging is in `dest`'s bundle paths (staging
/// distributor did not make goes to `report`, failed).
fn search_staging(
    dest: &crate::config::Destination,
    found: &mut BTreeMap<PathBuf, BTreeMap<String, Candidate>>,
    report: &mut RecoverReport,
) -> Result<()> {
    let backend = backend::for_destination(dest)?;
    let backend = backend.as_ref();
    for bundle in staging_bundles(backend, &dest.path, &dest.path_mapping)? {
        let Some(store) = backend.open(&dest.path, &bundle)? else {
            continue;
        };
        let entries = store.staging_entries()?;
        let ops = found.entry(bundle.clone()).or_default();
        for entry in entries {
            let c = match &entry {
                StagingEntry::Operation(op) | StagingEntry::Unfinished(op) => {
                    ops.entry(op.clone()).or_default()
                }
                StagingEntry::Legacy(op) => ops.entry(op.clone()).or_default(),
                StagingEntry::Foreign(name, why) => {
                    report.operations.push(foreign(&bundle, name, why));
                    continue;
                }
                StagingEntry::Untrusted(name, why) => {
                    let mut r = foreign(&bundle, name, why);
                    r.outcome = Outcome::Untrusted;
                    r.message = why.clone();
                    report.operations.push(r);
                    continue;
                }
            };
            match entry {
                StagingEntry::Operation(_) => c.in_staging = true,
                StagingEntry::Legacy(_) => c.legacy = true,
                _ => c.unfinished_record = true,
            }
            c.base = Some(dest.path.clone());
            c.location = Location::of_destination(dest);
        }
    }
    Ok(())
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
    let location = recorded_location(&journal, &d.operation_id)?;
    let store = Location::backend(location.as_ref(), &bundle)?.open(&bundle, &bundle)?;
    let staged = match &store {
        Some(s) => s
            .staging_entries()?
            .contains(&StagingEntry::Operation(d.operation_id.clone())),
        None => false,
    };
    let mut message = if opts.dry_run {
        "would be abandoned: the journal would stop asking for its recovery; the destination would not be touched".to_string()
    } else {
        "abandoned: the journal no longer asks for its recovery; the destination was not touched"
            .to_string()
    };
    if staged {
        message.push_str(&format!(
            "; its staging {} is left in place: inspect it and remove it by hand (publish refuses while staging holds anything)",
            op_dir.display()
        ));
    }
    if !opts.dry_run {
        journal.event(
            &d.operation_id,
            Event::Abandoned,
            Some(&format!("by {}: {message}", opts.actor)),
        )?;
    }
    let state_sha256 = match &store {
        Some(s) => state_sha256(s.as_ref())?.ok().flatten(),
        None => None,
    };
    let found_in = if staged {
        FoundIn::JournalAndStaging
    } else {
        FoundIn::Journal
    };
    Ok(RecoverReport {
        report_version: 1,
        command: "recover",
        dry_run: opts.dry_run,
        journal: opts.journal.to_string_lossy().into_owned(),
        errors: Vec::new(),
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
            replaced_state: None,
        }],
        summary: RecoverSummary {
            operations: 1,
            abandoned: 1,
            ..RecoverSummary::default()
        },
    })
}

/// The object store an operation's journal record names, if any.
fn recorded_location(j: &Journal, op: &str) -> Result<Option<Location>> {
    Ok(j.plan_json(op)?
        .and_then(|p| serde_json::from_str::<StagedOperation>(&p).ok())
        .and_then(|s| {
            (s.store.is_some() || s.releases.is_some()).then_some(Location {
                s3: s.store,
                releases: s.releases,
            })
        }))
}

/// Bundle paths of a destination that may have staging: the path itself for fixed
/// mapping; for mapped destinations every bundle path below it.
fn staging_bundles(
    backend: &dyn Backend,
    base: &Path,
    mapping: &PathMapping,
) -> Result<Vec<PathBuf>> {
    if *mapping == PathMapping::Fixed {
        return Ok(vec![base.to_path_buf()]);
    }
    backend.bundle_paths(base)
}

/// A staging entry distributor did not make: reported failed, never touched.
fn foreign(bundle: &Path, name: &str, why: &str) -> RecoveredOperation {
    RecoveredOperation {
        operation_id: name.to_string(),
        bundle_path: bundle.to_string_lossy().into_owned(),
        pipeline_id: None,
        destination_id: None,
        decision: None,
        found_in: FoundIn::Staging,
        state_sha256: None,
        pre_state_sha256: None,
        post_state_sha256: None,
        outcome: Outcome::Failed,
        message: format!("{why}: inspect it and remove it by hand"),
        replaced_state: None,
    }
}

fn recover_bundle(
    bundle: &Path,
    ops: BTreeMap<String, Candidate>,
    mut journal: Option<&mut Journal>,
    opts: &RecoverOptions,
    report: &mut RecoverReport,
    progress: Ticker<'_>,
) {
    // The lock: taken only when something may be written, and only on a bundle path that
    // exists (recovery never creates one). An operation known only to the journal has no
    // destination path to walk from: its bundle path is walked from itself.
    let base = ops
        .values()
        .find_map(|c| c.base.clone())
        .unwrap_or_else(|| bundle.to_path_buf());
    let location = ops.values().find_map(|c| c.location.clone());
    let store = Location::backend(location.as_ref(), bundle).and_then(|backend| {
        if opts.dry_run {
            backend.open(&base, bundle)
        } else {
            backend.lock(
                &base,
                bundle,
                crate::backend::LockRequest {
                    timeout: opts.lock_timeout,
                    create: false,
                    actor: &opts.actor,
                },
            )
        }
    });
    let store = match store {
        Ok(s) => s,
        Err(e) => {
            for (op, c) in &ops {
                let mut r = blank(op, bundle, c);
                r.message = format!("not recovered: {e}");
                report.operations.push(r);
            }
            progress.done(ops.len() as u64);
            return;
        }
    };
    if store.is_some() && !opts.dry_run {
        failpoint::hit("recover_after_lock");
    }
    for (op, c) in ops {
        let r = match recover_one(
            store.as_deref(),
            bundle,
            &op,
            &c,
            journal.as_deref_mut(),
            opts,
        ) {
            Ok(Some(r)) => r,
            Ok(None) => {
                progress.done(1);
                continue;
            }
            Err(Error::Untrusted(why)) => {
                let mut r = blank(&op, bundle, &c);
                r.outcome = Outcome::Untrusted;
                r.message = format!("not recovered, nothing touched: {why}");
                r
            }
            Err(e) => {
                let mut r = blank(&op, bundle, &c);
                r.message = format!("not recovered: {e}");
                r
            }
        };
        report.operations.push(r);
        progress.done(1);
    }
}

fn blank(op: &str, bundle: &Path, c: &Candidate) -> RecoveredOperation {
    RecoveredOperation {
        operation_id: op.to_string(),
        bundle_path: bundle.to_string_lossy().into_owned(),
        pipeline_id: None,
        destination_id: None,
        decision: None,
        found_in: match (
            c.in_journal,
            c.in_staging || c.unfinished_record || c.legacy,
        ) {
            (true, true) => FoundIn::JournalAndStaging,
            (false, true) => FoundIn::Staging,
            _ => FoundIn::Journal,
        },
        state_sha256: None,
        pre_state_sha256: None,
        post_state_sha256: None,
        outcome: Outcome::Failed,
        message: String::new(),
        replaced_state: None,
    }
}

/// Recovers one operation in the bundle path `store` holds (`None`: the bundle path does
/// not exist); `None` when, under the lock, it turned out finished already (a concurrent
/// publish or recover finished it).
fn recover_one(
    store: Option<&dyn BundleStore>,
    bundle: &Path,
    op: &str,
    c: &Candidate,
    mut journal: Option<&mut Journal>,
    opts: &RecoverOptions,
) -> Result<Option<RecoveredOperation>> {
    let entries = match store {
        Some(s) => s.staging_entries()?,
        None => Vec::new(),
    };
    let mut staged_now = entries.contains(&StagingEntry::Operation(op.to_string()));
    let unfinished_record = entries.contains(&StagingEntry::Unfinished(op.to_string()));
    let legacy = entries.contains(&StagingEntry::Legacy(op.to_string()));
    let status = match journal.as_deref() {
        Some(j) => j.status(op)?,
        None => None,
    };
    if legacy && !staged_now {
        // An earlier version's staging (SPEC §17 "Upgrading"): believed only for an
        // operation this journal records; then moved into `.distributor/staging/` and
        // recovered as any other.
        let Some(s) = store.filter(|_| status.is_some()) else {
            let mut r = blank(op, bundle, c);
            r.outcome = Outcome::Untrusted;
            r.message = format!(
                "{} was written by an earlier version of distributor and this journal does not record operation {op}: nothing touched. Recover it with the journal that wrote it (--journal), or inspect it and remove it by hand",
                bundle
                    .join(crate::backend::local::LEGACY_STAGING_DIR)
                    .join(op)
                    .display()
            );
            return Ok(Some(r));
        };
        if !opts.dry_run {
            s.adopt_legacy_staging(op)?;
        }
        staged_now = true;
    }
    let unfinished = |s: &str| matches!(s, "in_progress" | "committed" | "diverged");
    let in_journal = status.as_deref().is_some_and(unfinished);
    if !staged_now && !in_journal && !unfinished_record {
        return Ok(None);
    }
    let mut r = blank(op, bundle, c);
    let now = match store {
        Some(s) => state_sha256(s)?,
        None => Ok(None),
    };
    r.state_sha256 = now.clone().ok().flatten();
    if !staged_now && !unfinished_record {
        // The staging entry is gone: closed, but only while the record directory it was
        // written in is still the one at its place (SPEC §17). One moved away (with the
        // staging in it) or replaced leaves the operation for a person.
        let recorded = match journal.as_deref() {
            Some(j) if in_journal => j
                .plan_json(op)?
                .and_then(|p| serde_json::from_str::<StagedOperation>(&p).ok()),
            _ => None,
        };
        let want = recorded.as_ref().and_then(|s| s.record_dir);
        let now_dir = match store {
            Some(s) => s.record_dir(false)?,
            None => None,
        };
        if let Some(want) = want
            && now_dir != Some(want)
        {
            if let Some(staged) = &recorded {
                describe(&mut r, staged);
            }
            r.outcome = Outcome::StagingMoved;
            r.message = format!(
                "the staging record of operation {op} was written in {} (device {}, inode {}), and {}: its staging may have moved away with it, so the operation is not closed and nothing was touched. Put that directory back and run `distributor recover` again; if the operation is known to be finished, `distributor recover --abandon {op}` ends it",
                bundle
                    .join(crate::backend::local::records::RECORD_DIR)
                    .display(),
                want.dev,
                want.ino,
                match now_dir {
                    None => "nothing is there now".to_string(),
                    Some(d) => format!(
                        "another directory is there now (device {}, inode {})",
                        d.dev, d.ino
                    ),
                }
            );
            // Journaled once as diverged: it waits for a person, and `--abandon` ends it.
            if !opts.dry_run
                && status.as_deref() != Some("diverged")
                && let Some(j) = journal
            {
                j.event(
                    op,
                    Event::Diverged,
                    Some(&format!("by {}: staging moved: {}", opts.actor, r.message)),
                )?;
            }
            return Ok(Some(r));
        }
    }
    if !staged_now {
        // The staging record was never completed (the operation changed nothing), or the
        // staging entry is gone: closed, from the state alone.
        if !opts.dry_run
            && let Some(s) = store
        {
            if unfinished_record {
                s.remove_unfinished(op)?;
            }
            // An empty `.distributor-staging` (made for this operation's record) goes too.
            s.remove_staging(op)?;
        }
        let recorded = match journal.as_deref() {
            Some(j) if in_journal => j
                .plan_json(op)?
                .and_then(|p| serde_json::from_str::<StagedOperation>(&p).ok()),
            _ => None,
        };
        if let Some(staged) = &recorded {
            describe(&mut r, staged);
        }
        // Its post-state is there, or (an object store's state, which adds each output's
        // ETag to the planned post-state) a state that names it as an owner's operation.
        let names_op = |s: &dyn BundleStore| match s.read_state() {
            Ok(b) => match b.parse() {
                crate::state::StateFile::Valid(st) => {
                    st.owners.iter().any(|o| o.operation_id == op)
                }
                _ => false,
            },
            Err(_) => false,
        };
        let applied = recorded.as_ref().is_some_and(|s| {
            r.state_sha256.as_deref() == Some(s.post_state_sha256.as_str())
                || store.is_some_and(|st| st.capabilities().commits_by_decision && names_op(st))
        });
        r.outcome = Outcome::Closed;
        r.message = closed_message(applied, unfinished_record, opts.dry_run);
        // A stage whose staging entry went after its log entry (SPEC §19): its release is
        // held for promote; the journal ends it as its own run would have.
        let held = recorded
            .as_ref()
            .filter(|s| s.releases.as_ref().is_some_and(|r| r.stages))
            .filter(|_| store.is_some_and(|s| logged(s, bundle, op).unwrap_or(false)));
        if let Some(staged) = held {
            r.message = format!(
                "staged: its staging entry is gone and the destination log records its release as staged (its own run stopped before the journal said so); {}",
                crate::execute::held_detail(staged)
            );
            if !opts.dry_run
                && in_journal
                && let Some(j) = journal
            {
                j.event(
                    op,
                    Event::HeldForPromote,
                    Some(&format!("by {}: {}", opts.actor, r.message)),
                )?;
            }
            return Ok(Some(r));
        }
        if !applied && status.as_deref() == Some("diverged") {
            r.message.push_str(
                ". It had diverged and its staging was removed by hand: whatever it placed is still in the destination as it was left; check it with `distributor verify`",
            );
        }
        if !opts.dry_run
            && in_journal
            && let Some(j) = journal
        {
            j.event(
                op,
                Event::Closed,
                Some(&format!("by {}: {}", opts.actor, r.message)),
            )?;
        }
        return Ok(Some(r));
    }
    let store = store.expect("a staging entry was listed in it");
    // The record: the staging entry's own, checked to describe the entry; the journal's
    // where the entry has none (staging written before records came first).
    // A dry run over an earlier version's staging judges from the journal's record (the
    // entry is moved into `.distributor/staging/` only by a real run).
    let from_staging = if legacy && opts.dry_run {
        None
    } else {
        store.read_record(op)?
    };
    let recorded = match journal.as_deref() {
        Some(j) => j
            .plan_json(op)?
            .and_then(|p| serde_json::from_str::<StagedOperation>(&p).ok()),
        None => None,
    };
    let Some(staged) = recorded.or(from_staging) else {
        // No record anywhere: distributor before records came first made the directory
        // and was stopped before its plan.json. Holding nothing, it never changed anything.
        let op_dir = bundle.join(STAGING_DIR).join(op);
        if store.staging_holds_files(op)? {
            r.message = format!(
                "{} has no plan.json and no journal knows the operation, but it holds files; inspect it and remove it by hand",
                op_dir.display()
            );
            return Ok(Some(r));
        }
        r.outcome = Outcome::RolledBack;
        r.message = if opts.dry_run {
            "would remove a staging directory that never held content".into()
        } else {
            store.remove_staging(op)?;
            "removed a staging directory that never held content".into()
        };
        return Ok(Some(r));
    };
    staged.check(bundle)?;
    describe(&mut r, &staged);
    let recorded_commit = match journal.as_deref() {
        Some(j) if status.is_some() => j.recorded_commit(op)?,
        _ => false,
    };
    let verdict = store.verdict(&staged)?;
    let contradicted = verdict == Verdict::Back && recorded_commit;
    r.outcome = match verdict {
        Verdict::Forward => Outcome::RolledForward,
        // The journal recorded the commit, yet storage shows the state before it (a
        // releases `path` pointed back by a hand, say): an undo would remove committed
        // content. Nothing is touched (SPEC §17).
        Verdict::Back if recorded_commit => Outcome::Diverged,
        Verdict::Back => Outcome::RolledBack,
        Verdict::Diverged => Outcome::Diverged,
    };
    // A releases destination keeps its staging in `releases.dir`, not under `path`.
    let op_dir = match &staged.releases {
        Some(rec) => rec.settings.dir.join(STAGING_DIR).join(op),
        None => bundle.join(STAGING_DIR).join(op),
    };
    // A staging record whose operation the destination log already records (SPEC §17,
    // §18) committed: the only thing left to do with it is the cleanup its own run did not
    // get to (its post-state is there: roll forward). Anything else is a stale or
    // replayed record: reported, never acted on, and not adopted into this journal.
    if r.outcome != Outcome::RolledForward && logged(store, bundle, op)? {
        r.outcome = Outcome::Failed;
        r.message = format!(
            "stale staging record: the destination log already records operation {op} (it committed), so {} is not acted on; inspect it and remove it by hand (then `distributor recover --abandon {op}` ends it in a journal that has it unfinished)",
            op_dir.display()
        );
        // A journal that has it unfinished records it diverged, once, so `--abandon`
        // can end it.
        if !opts.dry_run
            && in_journal
            && status.as_deref() != Some("diverged")
            && let Some(j) = journal
        {
            j.event(
                op,
                Event::Diverged,
                Some(&format!("by {}: {}", opts.actor, r.message)),
            )?;
        }
        return Ok(Some(r));
    }
    if let Some(j) = journal
        .as_deref_mut()
        .filter(|_| status.is_none() && !opts.dry_run)
    {
        let (record, actions) = journal_records(&staged)?;
        let detail = format!(
            "by {}: found in {}, unknown to this journal",
            opts.actor,
            op_dir.join("plan.json").display()
        );
        j.adopt_operation(&record, actions, &detail)?;
        failpoint::hit("recover_after_adopt");
    }
    r.message = match r.outcome {
        Outcome::Diverged if contradicted => format!(
            "the journal recorded that operation {op} passed its commit point, yet {} shows the state before it (someone put it back): rolling it back would remove committed content, so nothing was touched. Make {} show what the operation committed again{} and run `distributor recover` again; to keep the destination as it is, remove {} by hand and run `distributor recover --abandon {op}`",
            bundle.display(),
            bundle.display(),
            staged
                .releases
                .as_ref()
                .map_or(String::new(), |rec| format!(
                    " (a symlink to release {})",
                    rec.settings.dir.join(rec.target(op)).display()
                )),
            op_dir.display()
        ),
        Outcome::Diverged if staged.releases.is_some() => {
            releases_diverged_message(bundle, &op_dir, &staged, store)
        }
        Outcome::Diverged => diverged_message(bundle, &op_dir, &staged, &now, true),
        o if store.capabilities().commits_by_decision => explain_decided(o, opts.dry_run),
        o => explain(o, staged.pre_state_sha256.is_some(), opts.dry_run),
    };
    if opts.dry_run {
        return Ok(Some(r));
    }
    let ev = match r.outcome {
        Outcome::RolledForward => {
            let replaced = match journal.as_deref() {
                Some(j) => {
                    j.with_log_tail(store, || Operation::of(store, &staged).roll_forward())?
                }
                None => Operation::of(store, &staged).roll_forward()?,
            };
            if let Some(replaced) = replaced {
                let m = replaced_message(&replaced);
                r.message.push_str(&format!("; {m}"));
                if let Some(j) = journal.as_deref() {
                    j.event(
                        op,
                        Event::StateReplaced,
                        Some(&format!("by {}: {m}", opts.actor)),
                    )?;
                }
                r.replaced_state = Some(replaced);
            }
            Event::RecoveredForward
        }
        Outcome::RolledBack => {
            Operation::of(store, &staged).undo()?;
            Event::RecoveredBack
        }
        _ => Event::Diverged,
    };
    failpoint::hit("recover_before_event");
    // A diverged operation stays diverged until someone acts: record it once.
    let repeat = ev == Event::Diverged && status.as_deref() == Some("diverged");
    if let Some(j) = journal.filter(|_| !repeat) {
        j.event(op, ev, Some(&format!("by {}: {}", opts.actor, r.message)))?;
        // A stage rolled forward is held for promote, as its own run would have ended it.
        if ev == Event::RecoveredForward && staged.releases.as_ref().is_some_and(|r| r.stages) {
            j.event(
                op,
                Event::HeldForPromote,
                Some(&crate::execute::held_detail(&staged)),
            )?;
        }
    }
    Ok(Some(r))
}

/// Fills in what the record says of the operation.
fn describe(r: &mut RecoveredOperation, staged: &StagedOperation) {
    r.pipeline_id = Some(staged.origin.pipeline_id.clone());
    r.destination_id = Some(staged.destination_id.clone());
    r.decision = Some(staged.origin.decision.clone());
    r.pre_state_sha256 = staged.pre_state_sha256.clone();
    r.post_state_sha256 = Some(staged.post_state_sha256.clone());
}

/// Why an operation without a staging entry is closed.
fn closed_message(applied: bool, unfinished_record: bool, dry_run: bool) -> String {
    let mut m = if applied {
        "applied elsewhere: its staging entry is gone and .distributor.json is its post-state (it was finished by its own run before that stopped, or rolled forward by another journal's recover)".to_string()
    } else {
        "not applied: its staging entry does not exist and .distributor.json is not its post-state (it never reached the destination, or was rolled back elsewhere)".to_string()
    };
    if unfinished_record {
        m.push_str(if dry_run {
            "; would remove its unfinished staging record (it changed nothing)"
        } else {
            "; removed its unfinished staging record (it changed nothing)"
        });
    }
    m.push_str("; nothing else was touched");
    m
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

/// [`explain`] for an object store, where the operation's decision record decides
/// (SPEC §14).
fn explain_decided(outcome: Outcome, dry_run: bool) -> String {
    let (why, done, would) = match outcome {
        Outcome::RolledForward => (
            "its decision record says commit: the commit point was reached",
            "finished the deletes and the state object, and removed its staging",
            "would finish the deletes and the state object, and remove its staging",
        ),
        _ => (
            "it has no commit decision and the state object is the state before it: the commit point was not reached",
            "decided abort, restored moved-aside objects and removed the objects it wrote",
            "would decide abort, restore moved-aside objects and remove the objects it wrote",
        ),
    };
    format!("{why}; {}", if dry_run { would } else { done })
}

/// What a roll-forward did with a state object that was neither the pre- nor the
/// post-state (SPEC §17).
fn replaced_message(r: &backend::ReplacedState) -> String {
    format!(
        "the state object held sha256 {} (etag {}), neither the state before the operation nor the state it committed: it was copied to {} (kept, never deleted) and overwritten with the post-state",
        r.sha256,
        r.etag.as_deref().unwrap_or("none"),
        r.copied_to
    )
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
    }
}

/// Whether the destination log of the bundle path `store` holds records an entry of
/// operation `op`.
fn logged(store: &dyn BundleStore, bundle: &Path, op: &str) -> Result<bool> {
    if let Some(r) = ReleaseStore::of(store) {
        return Ok(r.log_view()?.log.names_operation(op));
    }
    if let Some(log) = store.log().map(|l| l.read_log()).transpose()? {
        return Ok(log.names_operation(op));
    }
    let log = crate::backend::local::log::read_below(bundle)
        .map_err(|e| Error::io("open", bundle, e))??;
    Ok(log.names_operation(op))
}

/// Why a releases operation diverged (its `path` names neither the release it activates
/// nor the one active before it), and what an operator does: point `path` back at one of
/// them, never write into a release (they are read-only, and shared by hard links).
fn releases_diverged_message(
    bundle: &Path,
    op_dir: &Path,
    staged: &StagedOperation,
    store: &dyn BundleStore,
) -> String {
    let rec = staged.releases.as_ref().expect("a releases operation");
    let target = rec.target(&staged.operation_id);
    let dir = &rec.settings.dir;
    let now = match ReleaseStore::of(store).and_then(|r| r.active_release()) {
        Some(r) => format!("names release {r}"),
        None => "is not a symlink to a release (missing, or a plain directory)".to_string(),
    };
    let before = match &rec.active_before {
        Some(b) => format!("a symlink to release {b} ({}) again", dir.join(b).display()),
        None => "absent again (no release was active before)".to_string(),
    };
    format!(
        "{} {now}, which is neither the release this operation activates ({target}) nor the one active before it: something else changed it after the interruption. Nothing was touched. To roll back, make {} {before}; to roll forward, make it a symlink to {} (in both cases a new symlink renamed over it, e.g. `ln -s TARGET {tmp} && mv -T {tmp} {}`); then run `distributor recover` again. Never copy a state file into a release: releases are read-only and share files. To keep the destination as it is instead, remove {} by hand and run `distributor recover --abandon {}`.",
        bundle.display(),
        bundle.display(),
        dir.join(target).display(),
        bundle.display(),
        op_dir.display(),
        staged.operation_id,
        tmp = bundle.with_extension("new").display(),
    )
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
