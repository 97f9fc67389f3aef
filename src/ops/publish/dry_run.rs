//! A dry run (`plan`, `publish --dry-run`): plan, and read the files a real run would
//! write so both reach the same verdict on the source. Writes nothing anywhere: the
//! journal, if there is one, is only read.

use super::plan::{Planning, judge_saved, plan_one, saved_entry};
use super::view::Unlocked;
use super::{PublishOptions, bundle_path, code_of, stands_during_recovery, status_of, untrusted};
use crate::backend::{self, types};
use crate::config::{Config, Destination};
use crate::error::Error;
use crate::execute::Progress;
use crate::journal::JournalView;
use crate::ops::common::{ExitCode, Pending, pending};
use crate::plan::saved::SavedDestination;
use crate::plan::{DestinationPlan, PlanFailed};
use crate::progress::{Bytes, Ticker};
use crate::report::{DestinationReport, Status};
use crate::source::{Source, hash_source};

/// Plans one destination without writing anything, reads the files the plan would write,
/// and says what a real run would: exit 4 while recovery is pending, a note while another
/// process is publishing there. `saved` gets the destination's entry for a plan file.
pub(super) fn plan_and_read(
    config: &Config,
    dest: &Destination,
    source: &Source,
    opts: &PublishOptions,
    view: Option<&JournalView>,
    progress: Option<&dyn Progress>,
    saved: &mut Vec<SavedDestination>,
) -> std::result::Result<(DestinationReport, ExitCode), PlanFailed> {
    // Unchanged files are proven by the journal's placement fingerprints (read only) as
    // in the real run, not hashed.
    let mut fingerprints = types::Fingerprints::default();
    if let Some(v) = view {
        let bundle = bundle_path(config, dest, source)?;
        fingerprints = types::Fingerprints::wanting_all(&source.manifest.outputs);
        v.fingerprints(&bundle.to_string_lossy(), &mut fingerprints)?;
    }
    // `plan` shows how probing and hashing go (SPEC §20).
    let progress = Ticker::to(progress).on(&dest.id);
    let planning = Planning {
        config,
        dest,
        source,
        lift: opts.overrides(),
        fingerprints: &fingerprints,
    };
    let mut plan = plan_one(planning, view, progress)?;
    if opts.save_plan || opts.saved_plan.is_some() {
        let store = Unlocked::open(dest, &plan.bundle_path)?.store;
        let entry = saved_entry(config, dest, &plan, store.as_deref())?;
        judge_saved(opts, source, &entry, &mut plan);
        saved.push(entry);
    }
    read_writes(source, &plan, progress)?;
    // The journal (read only) and staging say whether recovery is pending: the real run
    // would refuse with exit 4, so the plan says so too; unless another process is
    // publishing there right now (`busy`).
    let store = Unlocked::open(dest, &plan.bundle_path)?.store;
    let busy = match pending(view, &plan.bundle_path, store.as_deref())? {
        Pending::Recovery(what)
            if !stands_during_recovery(plan.decision, backend::capabilities(dest))
                && !untrusted(&plan) =>
        {
            return Err(PlanFailed::new(plan, Error::RecoveryRequired(what)));
        }
        Pending::Busy(who) => Some(who),
        _ => None,
    };
    let status = status_of(&plan, Status::Planned);
    let code = code_of(&plan);
    let mut report = DestinationReport::from_plan(plan, status, None);
    if let Some(who) = busy {
        report.message = format!(
            "busy: another distributor process is publishing here now ({who}); this plan may change when it finishes"
        );
    }
    if matches!(backend::kind_of(dest), backend::Kind::ObjectStore(_)) {
        // A real run checks once that the store honours conditional writes; a dry run
        // writes nothing, so it cannot (SPEC §14).
        if !report.message.is_empty() {
            report.message.push_str("; ");
        }
        report.message.push_str("conditional writes not verified");
    }
    Ok((report, code))
}

/// Reads and hashes the files `plan` writes, the way a real run's staging reads them
/// (`execute::stage`): a file that is not what the manifest says fails the plan.
fn read_writes(
    source: &Source,
    plan: &DestinationPlan,
    progress: Ticker<'_>,
) -> std::result::Result<(), PlanFailed> {
    if progress.is_on() {
        let (files, bytes) = (plan.writes()).fold((0, 0), |(n, b), f| (n + 1, b + f.size));
        progress.start("files hashed", Some(files), Bytes::Of(bytes));
    }
    let dirs = source.dirs(plan.writes().map(|f| f.path.as_str()))?;
    for f in plan.writes() {
        let (size, sha) = hash_source(&dirs.file(&f.path))?;
        progress.bytes(size);
        progress.done(1);
        if size != f.size || sha != f.sha256 {
            let e = crate::source::content_mismatch(&f.path, size, &sha, f.size, &f.sha256);
            return Err(PlanFailed::new(plan.clone(), e));
        }
    }
    Ok(())
}
