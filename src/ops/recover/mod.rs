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
//!
//! In order: [`find`] gathers the candidates, [`recover_bundle`] locks each bundle path,
//! [`one`] judges and acts on each operation in it, [`messages`] says why, and [`report`]
//! counts and renders.

mod find;
mod messages;
mod one;
mod report;

pub use report::{
    DestinationError, FoundIn, Outcome, RecoverReport, RecoverSummary, RecoveredOperation,
};

use crate::backend::local::STAGING_DIR;
use crate::backend::state_sha256;
use crate::backend::types::StagingEntry;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::failpoint;
use crate::journal::{Event, Journal, query};
use crate::progress::{Bytes, Ticker};
use find::{Candidate, Location, recorded_location, search_staging};
use one::recover_one;
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
            Outcome::ReleaseMoved => s.release_moved += 1,
        }
    }
    s.failed += report.errors.len();
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
                    history: journal
                        .as_deref()
                        .map(|j| j as &dyn crate::backend::History),
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
