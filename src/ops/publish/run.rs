//! A real run at one destination: read it, look without the lock (which is all an
//! unchanged republication needs), lock, plan again under the lock, and execute the plan
//! through the journal.

use super::plan::{
    PlanInputs, Planning, could_be_unchanged, judge_saved, plan_general, plan_state, plan_with,
    saved_entry,
};
use super::read::{DestinationRead, Republished, read_destination};
use super::view::{StateMemo, Unlocked, View};
use super::{
    PublishOptions, code_of, journal_refusal, stands_during_recovery, status_of, untrusted,
};
use crate::backend::releases::{Purpose, ReleaseStore};
use crate::backend::{self, BundleStore, types};
use crate::config::{Config, Destination};
use crate::error::{Error, Result};
use crate::execute::{ExecContext, Progress, execute};
use crate::journal::Journal;
use crate::model::{Decision, Owner};
use crate::ops::common::{ExitCode, check_recovery};
use crate::plan::{DestinationPlan, PlanFailed};
use crate::progress::Ticker;
use crate::report::{DestinationReport, Status};
use crate::source::Source;
use crate::state::StateFile;
use std::path::Path;
use std::time::Duration;

/// What every phase of one destination's run reads.
struct Run<'a> {
    config: &'a Config,
    dest: &'a Destination,
    source: &'a Source,
    opts: &'a PublishOptions,
}

/// Publishes to one destination through `journal`.
pub(super) fn publish_locked(
    config: &Config,
    dest: &Destination,
    source: &Source,
    opts: &PublishOptions,
    journal: &mut Journal,
    progress: Option<&dyn Progress>,
) -> std::result::Result<(DestinationReport, ExitCode), PlanFailed> {
    let run = Run {
        config,
        dest,
        source,
        opts,
    };
    let DestinationRead {
        bundle,
        unlocked,
        mut memo,
        state,
        fingerprints,
        republished,
    } = read_destination(config, dest, source, journal)?;
    let (preview, locked_before) = run.look(
        &bundle,
        &unlocked,
        state.as_deref(),
        &fingerprints,
        republished,
    )?;
    if let Some(p) = &preview
        && run.ends_unlocked(p, locked_before, journal, &bundle, &unlocked)
    {
        let (status, code) = (status_of(p, Status::Applied), code_of(p));
        let preview = preview.expect("looked at above");
        let op = journal_refusal(config, &preview, source, opts, journal)?;
        return Ok((DestinationReport::from_plan(preview, status, op), code));
    }
    let (store, waited) = run.lock(
        &bundle,
        preview,
        &unlocked,
        &mut memo,
        &fingerprints,
        &*journal,
    )?;
    drop(unlocked);
    run.under_lock(
        journal,
        store.as_ref(),
        &mut memo,
        &fingerprints,
        waited,
        progress,
    )
}

impl<'a> Run<'a> {
    /// What planning starts from in this run, with the journal's `fingerprints`.
    fn planning<'p>(&self, fingerprints: &'p types::Fingerprints<'p>) -> Planning<'p>
    where
        'a: 'p,
    {
        Planning {
            config: self.config,
            dest: self.dest,
            source: self.source,
            lift: self.opts.overrides(),
            fingerprints,
        }
    }

    /// The look outside the lock, planned from the state just read (under the lock it is
    /// read again): `None` when it would be thrown away. With it, whether distributor has
    /// ever locked this bundle path.
    fn look(
        &self,
        bundle: &Path,
        unlocked: &Unlocked,
        state: Option<&StateFile>,
        fingerprints: &types::Fingerprints,
        republished: Republished,
    ) -> Result<(Option<DestinationPlan>, bool)> {
        let Run {
            config,
            dest,
            source,
            ..
        } = *self;
        // A held republication read the state (and dropped it).
        let read_state = state.is_some() || matches!(republished, Republished::Held(_));
        let locked_before = match &unlocked.store {
            Some(store) => read_state && store.locked_before()?,
            None => false,
        };
        // Once distributor has locked a bundle path, every decision but `unchanged` is
        // looked at again under the lock, so when the state file already rules `unchanged`
        // out, a look outside the lock would be thrown away: go straight to the lock and
        // plan once. A republication of the same source still gets its lock-free look.
        let me = Owner::new(config.pipeline_id.clone(), dest.id.clone());
        let rules_out_unchanged = state.is_some_and(|s| !could_be_unchanged(s, &me, source));
        let read = state.unwrap_or(&StateFile::Absent);
        let look = unlocked.view();
        let inputs = PlanInputs {
            planning: self.planning(fingerprints),
            bundle,
            state: read,
            view: &look,
        };
        let preview = match republished {
            Republished::Held(plan) => Some(*plan),
            _ if locked_before && rules_out_unchanged => None,
            Republished::NotHeld => Some(plan_general(&inputs, Ticker::NONE)?),
            Republished::No => Some(plan_state(&inputs, Ticker::NONE)?),
        };
        Ok((preview, locked_before))
    }

    /// Whether the look outside the lock, `p`, is the run's answer.
    ///
    /// Outside the lock, an unfinished operation may be one that another process (or
    /// another request of `distributor serve`) is carrying out right now, and the preview
    /// may have seen its half-placed files (a conflict that is not one). A non-writing
    /// preview ends the run here only when no operation can have overlapped it: recovery
    /// is clean and distributor never locked this bundle path (every operation creates the
    /// lock file first and it is never removed). Otherwise wait for the lock and look
    /// again. `unchanged` needs no second look: it holds only when the state file
    /// (replaced atomically) records this very source and every recorded path matches it,
    /// and an operation caught half-way has moved aside or placed files, which makes the
    /// preview a repair, a writing decision that is confirmed under the lock. So a
    /// republication of what is already there neither waits for the lock nor probes twice.
    fn ends_unlocked(
        &self,
        p: &DestinationPlan,
        locked_before: bool,
        journal: &Journal,
        bundle: &Path,
        unlocked: &Unlocked,
    ) -> bool {
        let nothing_to_wait_for = p.decision == Decision::Unchanged || !locked_before;
        let clean = |store: Option<&dyn BundleStore>| match store {
            Some(store) => check_recovery(journal, store).is_ok(),
            None => journal
                .unfinished_for(&bundle.to_string_lossy())
                .is_ok_and(|u| u.is_empty()),
        };
        // A saved plan is judged under the lock only.
        !p.decision.writes()
            && nothing_to_wait_for
            && self.opts.saved_plan.is_none()
            && clean(unlocked.store.as_deref())
    }

    /// Takes the bundle path's lock (creating the bundle path), and says how long that
    /// took (for `serve`'s metrics).
    ///
    /// A failure to lock is reported with the planned decision; with no preview, it is
    /// planned now. A lock timeout keeps the decision it would have made, but never the
    /// lock-free look's conflicts: what that look saw may be the holder's half-placed
    /// files, which are no conflicts (issue 27), so the lock error, naming the holder, is
    /// all that is reported then. The look outside the lock (at a million files, a second
    /// plan and post-state: hundreds of megabytes) is not kept through execution.
    fn lock(
        &self,
        bundle: &Path,
        preview: Option<DestinationPlan>,
        unlocked: &Unlocked,
        memo: &mut StateMemo,
        fingerprints: &types::Fingerprints,
        history: &dyn crate::backend::History,
    ) -> std::result::Result<(Box<dyn BundleStore>, Duration), PlanFailed> {
        let Run { dest, opts, .. } = *self;
        let with_plan = |plan: &DestinationPlan, e: Error| PlanFailed::new(plan.clone(), e);
        let mut planned = |e: Error| match &preview {
            Some(p) if matches!(e, Error::Lock(_)) && !p.conflicts.is_empty() => e.into(),
            Some(p) => with_plan(p, e),
            None => match plan_with(
                self.planning(fingerprints),
                memo,
                &unlocked.view(),
                Ticker::NONE,
            ) {
                Ok(p) if matches!(e, Error::Lock(_)) && !p.conflicts.is_empty() => e.into(),
                Ok(p) => with_plan(&p, e),
                Err(_) => e.into(),
            },
        };
        let backend = backend::for_destination(dest).map_err(&mut planned)?;
        let waiting = std::time::Instant::now();
        let lock = backend.lock(
            &dest.path,
            bundle,
            crate::backend::LockRequest {
                timeout: opts.lock_timeout,
                create: true,
                actor: &opts.actor,
                history: Some(history),
            },
        );
        let store = lock
            .and_then(|s| {
                s.ok_or_else(|| Error::Failed(format!("{} could not be created", bundle.display())))
            })
            .map_err(&mut planned)?;
        Ok((store, waiting.elapsed()))
    }

    /// Plans again under the lock, and reports the plan, refuses it, or executes it.
    fn under_lock(
        &self,
        journal: &mut Journal,
        store: &dyn BundleStore,
        memo: &mut StateMemo,
        fingerprints: &types::Fingerprints,
        waited: Duration,
        progress: Option<&dyn Progress>,
    ) -> std::result::Result<(DestinationReport, ExitCode), PlanFailed> {
        let Run {
            config,
            dest,
            source,
            opts,
        } = *self;
        let stamp = |mut r: DestinationReport| {
            r.lock_wait = Some(waited);
            r
        };
        // Where the journal in use saw the destination log end: a log shorter than that is
        // the conflict `log_missing`, decided by planning under the lock.
        if let Some(cursor) = store.log_cursor() {
            cursor.set_known(journal.log_tail(cursor.location())?);
        }
        let mut plan = plan_with(
            self.planning(fingerprints),
            memo,
            &View::Store(store),
            Ticker::NONE,
        )?;
        if opts.saved_plan.is_some() {
            let entry = saved_entry(config, dest, &plan, Some(store))?;
            judge_saved(opts, source, &entry, &mut plan);
        }
        if stands_during_recovery(plan.decision, store.capabilities()) {
            let (status, code) = (status_of(&plan, Status::Applied), code_of(&plan));
            return Ok((
                stamp(DestinationReport::from_plan(plan, status, None)),
                code,
            ));
        }
        // An untrusted record is decided before the pending-recovery check (SPEC §17).
        if !untrusted(&plan) {
            check_recovery(journal, store).map_err(|e| PlanFailed::new(plan.clone(), e))?;
        }
        if !plan.decision.writes() {
            let op = journal_refusal(config, &plan, source, opts, journal)?;
            let (status, code) = (status_of(&plan, Status::Applied), code_of(&plan));
            return Ok((stamp(DestinationReport::from_plan(plan, status, op)), code));
        }
        let mut r = self.execute(plan, journal, store, progress)?;
        r.lock_wait = Some(waited);
        Ok((r, ExitCode::Success))
    }

    /// Executes a writing plan through the journal (`publish --stage`: stages its release
    /// for `distributor promote`).
    fn execute(
        &self,
        mut plan: DestinationPlan,
        journal: &mut Journal,
        store: &dyn BundleStore,
        progress: Option<&dyn Progress>,
    ) -> std::result::Result<DestinationReport, PlanFailed> {
        let Run {
            config,
            dest,
            source,
            opts,
        } = *self;
        let (mut command, mut purpose) = ("publish", Purpose::Publish);
        if opts.stage {
            ReleaseStore::of(store).ok_or_else(|| {
                Error::Usage(format!(
                    "--stage: destination '{}' has no releases block",
                    dest.id
                ))
            })?;
            (command, purpose) = ("stage", Purpose::Stage);
        }
        let ctx = ExecContext {
            command,
            pipeline_id: &config.pipeline_id,
            actor: &opts.actor,
            reason: opts.reason.as_deref(),
            progress,
            purpose,
        };
        let done = if opts.stage {
            Status::Staged
        } else {
            Status::Applied
        };
        match execute(&mut plan, source, journal, store, &ctx) {
            Ok(op) => {
                let mut r = DestinationReport::from_plan(plan, done, Some(op.clone()));
                if opts.stage {
                    r.message = format!(
                        "staged as release {op}, not activated: `distributor promote --destination {} {op}` activates it",
                        dest.id
                    );
                } else if store.capabilities().releases {
                    r.releases_removed = crate::journal::query::releases_removed(journal, &op)?;
                    r.release_activated = Some(op);
                }
                Ok(r)
            }
            Err(e) => Err(PlanFailed::new(plan, e)),
        }
    }
}
