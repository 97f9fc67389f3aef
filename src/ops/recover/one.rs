//! One operation recovered under its bundle path's lock: what is found of it (its staging
//! entry, an earlier version's staging, an unfinished record, the journal's status), then
//! one of: closed from the state alone (no staging entry), left for a person (its record
//! directory moved), removed (staging that never held a record), or judged by its record
//! and the state file and rolled forward or back (SPEC §8).

use super::messages::{
    closed_message, describe, diverged_message, explain, explain_decided,
    releases_diverged_message, replaced_message,
};
use super::{Candidate, Outcome, RecoverOptions, RecoveredOperation, blank};
use crate::backend::local::STAGING_DIR;
use crate::backend::releases::ReleaseStore;
use crate::backend::types::StagingEntry;
use crate::backend::{BundleStore, Operation, Verdict, state_sha256};
use crate::error::{Error, Result};
use crate::execute::{StagedOperation, journal_records};
use crate::failpoint;
use crate::journal::{Event, Journal};
use std::path::Path;

/// Recovers one operation in the bundle path `store` holds (`None`: the bundle path does
/// not exist); `None` when, under the lock, it turned out finished already (a concurrent
/// publish or recover finished it).
pub(super) fn recover_one(
    store: Option<&dyn BundleStore>,
    bundle: &Path,
    op: &str,
    c: &Candidate,
    journal: Option<&mut Journal>,
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
    let found = Found {
        store,
        bundle,
        op,
        opts,
        status,
        in_journal,
        unfinished_record,
        legacy,
    };
    let mut r = blank(op, bundle, c);
    let now = match store {
        Some(s) => state_sha256(s)?,
        None => Ok(None),
    };
    r.state_sha256 = now.clone().ok().flatten();
    if !staged_now && !unfinished_record && found.staging_moved(journal.as_deref(), &mut r)? {
        return Ok(Some(r));
    }
    if !staged_now {
        return found.close(journal.as_deref(), r).map(Some);
    }
    let store = store.expect("a staging entry was listed in it");
    found.judge(store, journal, r, &now).map(Some)
}

/// What was found of one operation at its bundle path, before it is acted on.
struct Found<'a> {
    store: Option<&'a dyn BundleStore>,
    bundle: &'a Path,
    op: &'a str,
    opts: &'a RecoverOptions,
    /// The journal's status of the operation (`None`: it does not know it).
    status: Option<String>,
    /// The journal has it unfinished.
    in_journal: bool,
    /// Only an unfinished staging record (`.tmp-<op>`) is there.
    unfinished_record: bool,
    /// Its staging entry is an earlier version's.
    legacy: bool,
}

impl Found<'_> {
    /// The journal's record of the operation, where the journal has it unfinished.
    fn recorded(&self, journal: Option<&Journal>) -> Result<Option<StagedOperation>> {
        match journal {
            Some(j) if self.in_journal => journal_record(j, self.op),
            _ => Ok(None),
        }
    }

    /// Appends `event` to `journal` (never in a dry run), `by` the actor: `what`.
    fn journal_event(&self, journal: Option<&Journal>, event: Event, what: &str) -> Result<()> {
        if !self.opts.dry_run
            && let Some(j) = journal
        {
            j.event(
                self.op,
                event,
                Some(&format!("by {}: {what}", self.opts.actor)),
            )?;
        }
        Ok(())
    }

    /// The staging entry is gone: the operation is closed, but only while the record
    /// directory it was written in is still the one at its place (SPEC §17). One moved
    /// away (with the staging in it) or replaced leaves the operation for a person: true,
    /// with `r` saying so.
    fn staging_moved(&self, journal: Option<&Journal>, r: &mut RecoveredOperation) -> Result<bool> {
        let op = self.op;
        let recorded = self.recorded(journal)?;
        let want = recorded.as_ref().and_then(|s| s.record_dir);
        let now_dir = match self.store {
            Some(s) => s.record_dir(false)?,
            None => None,
        };
        let Some(want) = want.filter(|w| now_dir != Some(*w)) else {
            return Ok(false);
        };
        if let Some(staged) = &recorded {
            describe(r, staged);
        }
        r.outcome = Outcome::StagingMoved;
        r.message = format!(
            "the staging record of operation {op} was written in {} (device {}, inode {}), and {}: its staging may have moved away with it, so the operation is not closed and nothing was touched. Put that directory back and run `distributor recover` again; if the operation is known to be finished, `distributor recover --abandon {op}` ends it",
            self.bundle
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
        if self.status.as_deref() != Some("diverged") {
            let what = format!("staging moved: {}", r.message);
            self.journal_event(journal, Event::Diverged, &what)?;
        }
        Ok(true)
    }

    /// The staging record was never completed (the operation changed nothing), or the
    /// staging entry is gone: closed, from the state alone.
    fn close(
        &self,
        journal: Option<&Journal>,
        mut r: RecoveredOperation,
    ) -> Result<RecoveredOperation> {
        let (op, store) = (self.op, self.store);
        if !self.opts.dry_run
            && let Some(s) = store
        {
            if self.unfinished_record {
                s.remove_unfinished(op)?;
            }
            // An empty `.distributor-staging` (made for this operation's record) goes too.
            s.remove_staging(op)?;
        }
        let recorded = self.recorded(journal)?;
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
        r.message = closed_message(applied, self.unfinished_record, self.opts.dry_run);
        let journal = journal.filter(|_| self.in_journal);
        // A stage whose staging entry went after its log entry (SPEC §19): its release is
        // held for promote; the journal ends it as its own run would have.
        let held = recorded
            .as_ref()
            .filter(|s| s.releases.as_ref().is_some_and(|r| r.stages))
            .filter(|_| store.is_some_and(|s| logged(s, self.bundle, op).unwrap_or(false)));
        if let Some(staged) = held {
            r.message = format!(
                "staged: its staging entry is gone and the destination log records its release as staged (its own run stopped before the journal said so); {}",
                crate::execute::held_detail(staged)
            );
            self.journal_event(journal, Event::HeldForPromote, &r.message)?;
            return Ok(r);
        }
        if !applied && self.status.as_deref() == Some("diverged") {
            r.message.push_str(
                ". It had diverged and its staging was removed by hand: whatever it placed is still in the destination as it was left; check it with `distributor verify`",
            );
        }
        self.journal_event(journal, Event::Closed, &r.message)?;
        Ok(r)
    }

    /// The staging entry is there: the operation is judged by its record and the state
    /// file (the backend's verdict), and rolled forward, rolled back, or left diverged.
    fn judge(
        &self,
        store: &dyn BundleStore,
        mut journal: Option<&mut Journal>,
        mut r: RecoveredOperation,
        now: &std::result::Result<Option<String>, String>,
    ) -> Result<RecoveredOperation> {
        let (op, bundle) = (self.op, self.bundle);
        let Some(staged) = self.record(store, journal.as_deref())? else {
            return self.never_recorded(store, r);
        };
        staged.check(bundle)?;
        describe(&mut r, &staged);
        let recorded_commit = match journal.as_deref() {
            Some(j) if self.status.is_some() => j.recorded_commit(op)?,
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
        // §18) committed: the only thing left to do with it is the cleanup its own run did
        // not get to (its post-state is there: roll forward). Anything else is a stale or
        // replayed record: reported, never acted on, and not adopted into this journal.
        if r.outcome != Outcome::RolledForward && logged(store, bundle, op)? {
            return self.stale(journal.as_deref(), r, &op_dir);
        }
        if let Some(j) = journal
            .as_deref_mut()
            .filter(|_| self.status.is_none() && !self.opts.dry_run)
        {
            let (record, actions) = journal_records(&staged)?;
            let detail = format!(
                "by {}: found in {}, unknown to this journal",
                self.opts.actor,
                op_dir.join("plan.json").display()
            );
            j.adopt_operation(&record, actions, &detail)?;
            failpoint::hit("recover_after_adopt");
        }
        r.message = match r.outcome {
            Outcome::Diverged if contradicted => contradicted_message(bundle, op, &op_dir, &staged),
            Outcome::Diverged if staged.releases.is_some() => {
                releases_diverged_message(bundle, &op_dir, &staged, store)
            }
            Outcome::Diverged => diverged_message(bundle, &op_dir, &staged, now, true),
            o if store.capabilities().commits_by_decision => explain_decided(o, self.opts.dry_run),
            o => explain(o, staged.pre_state_sha256.is_some(), self.opts.dry_run),
        };
        if self.opts.dry_run {
            return Ok(r);
        }
        self.act(store, journal.as_deref(), &staged, r)
    }

    /// The operation's record: the staging entry's own, checked to describe the entry; the
    /// journal's where the entry has none (staging written before records came first). A
    /// dry run over an earlier version's staging judges from the journal's record (the
    /// entry is moved into `.distributor/staging/` only by a real run).
    fn record(
        &self,
        store: &dyn BundleStore,
        journal: Option<&Journal>,
    ) -> Result<Option<StagedOperation>> {
        let from_staging = if self.legacy && self.opts.dry_run {
            None
        } else {
            store.read_record(self.op)?
        };
        let recorded = match journal {
            Some(j) => journal_record(j, self.op)?,
            None => None,
        };
        Ok(recorded.or(from_staging))
    }

    /// No record anywhere: distributor before records came first made the directory and
    /// was stopped before its plan.json. Holding nothing, it never changed anything.
    fn never_recorded(
        &self,
        store: &dyn BundleStore,
        mut r: RecoveredOperation,
    ) -> Result<RecoveredOperation> {
        let op = self.op;
        let op_dir = self.bundle.join(STAGING_DIR).join(op);
        if store.staging_holds_files(op)? {
            r.message = format!(
                "{} has no plan.json and no journal knows the operation, but it holds files; inspect it and remove it by hand",
                op_dir.display()
            );
            return Ok(r);
        }
        r.outcome = Outcome::RolledBack;
        r.message = if self.opts.dry_run {
            "would remove a staging directory that never held content".into()
        } else {
            store.remove_staging(op)?;
            "removed a staging directory that never held content".into()
        };
        Ok(r)
    }

    /// A stale or replayed staging record (its operation committed, as the destination
    /// log says): reported failed, never acted on.
    fn stale(
        &self,
        journal: Option<&Journal>,
        mut r: RecoveredOperation,
        op_dir: &Path,
    ) -> Result<RecoveredOperation> {
        let op = self.op;
        r.outcome = Outcome::Failed;
        r.message = format!(
            "stale staging record: the destination log already records operation {op} (it committed), so {} is not acted on; inspect it and remove it by hand (then `distributor recover --abandon {op}` ends it in a journal that has it unfinished)",
            op_dir.display()
        );
        // A journal that has it unfinished records it diverged, once, so `--abandon` can
        // end it.
        if self.in_journal && self.status.as_deref() != Some("diverged") {
            self.journal_event(journal, Event::Diverged, &r.message)?;
        }
        Ok(r)
    }

    /// Rolls the operation forward or back as judged (a diverged one is left as it is),
    /// and journals the outcome last, so a crash of `recover` itself is repaired by
    /// running it again.
    fn act(
        &self,
        store: &dyn BundleStore,
        journal: Option<&Journal>,
        staged: &StagedOperation,
        mut r: RecoveredOperation,
    ) -> Result<RecoveredOperation> {
        let (op, actor) = (self.op, &self.opts.actor);
        let ev = match r.outcome {
            Outcome::RolledForward => {
                let replaced = match journal {
                    Some(j) => {
                        j.with_log_tail(store, || Operation::of(store, staged).roll_forward())?
                    }
                    None => Operation::of(store, staged).roll_forward()?,
                };
                if let Some(replaced) = replaced {
                    let m = replaced_message(&replaced);
                    r.message.push_str(&format!("; {m}"));
                    if let Some(j) = journal {
                        j.event(op, Event::StateReplaced, Some(&format!("by {actor}: {m}")))?;
                    }
                    r.replaced_state = Some(replaced);
                }
                Event::RecoveredForward
            }
            Outcome::RolledBack => match Operation::of(store, staged).undo() {
                Ok(()) => Event::RecoveredBack,
                // The name of the release it built holds another directory now: nothing
                // is removed, and the operation waits for a person (docs/operations.md,
                // "Release identity").
                Err(e @ Error::Releases(crate::error::ReleasesError::Moved { .. })) => {
                    r.outcome = Outcome::ReleaseMoved;
                    r.message = format!(
                        "{e}. Put the release directory back under its name (or remove what stands there, which is not distributor's) and run `distributor recover` again; `distributor recover --abandon {op}` ends the operation leaving everything as it is"
                    );
                    Event::Diverged
                }
                Err(e) => return Err(e),
            },
            _ => Event::Diverged,
        };
        failpoint::hit("recover_before_event");
        // A diverged operation stays diverged until someone acts: record it once.
        let repeat = ev == Event::Diverged && self.status.as_deref() == Some("diverged");
        if let Some(j) = journal.filter(|_| !repeat) {
            j.event(op, ev, Some(&format!("by {actor}: {}", r.message)))?;
            // A stage rolled forward is held for promote, as its own run would have ended it.
            if ev == Event::RecoveredForward && staged.releases.as_ref().is_some_and(|r| r.stages) {
                j.event(
                    op,
                    Event::HeldForPromote,
                    Some(&crate::execute::held_detail(staged)),
                )?;
            }
        }
        Ok(r)
    }
}

/// Why an operation the journal recorded as committed is left diverged although storage
/// shows the state before it.
fn contradicted_message(
    bundle: &Path,
    op: &str,
    op_dir: &Path,
    staged: &StagedOperation,
) -> String {
    format!(
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
    )
}

/// The journal's record of operation `op`, if it has one that parses.
pub(super) fn journal_record(j: &Journal, op: &str) -> Result<Option<StagedOperation>> {
    Ok(j.plan_json(op)?
        .and_then(|p| serde_json::from_str::<StagedOperation>(&p).ok()))
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
