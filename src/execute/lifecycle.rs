//! The one lifecycle every operation that changes a destination runs through (SPEC §17
//! "One lifecycle"): the caller holds the destination lock (the [`BundleStore`] it
//! passes, which checks what it locked before each step that moves, deletes or
//! exchanges); then
//!
//! 1. [`Transaction::begin`]: the journal's row, with the record directory's identity
//!    and the journal's id in the staging record it will write;
//! 2. [`Transaction::act`]: the caller's steps write the staging record, act, and pass
//!    the commit point; an error before it is undone from what staging holds (the undo
//!    `recover` uses), one after it is reported with what is live;
//! 3. [`Passed::finish`] (the commit is `#[must_use]`): the journal records the commit,
//!    the storage writes the destination log's entry and then removes the staging entry
//!    (`clean_up`), retention runs where there is one, and the operation completes.
//!
//! Publications, rollbacks and adoptions go through here; `recover` finishes an operation
//! through the same storage step (`roll_forward`: the log entry, then the staging
//! entry's removal); prune, which removes whole releases and stages nothing, records
//! itself through [`record_removal`], the same journal row and log entry.
//!
//! Must never: report less than what happened (a failure past the commit point names
//! what is live and what is left for `recover`), or undo an operation whose commit the
//! storage shows.

use super::journal_records;
use crate::backend::types::Placed;
use crate::backend::{BundleStore, Committed, Operation, OperationState, Verdict};
use crate::error::{Error, Result};
use crate::failpoint;
use crate::journal::{Event, Journal};
use crate::record::StagedOperation;

/// An operation begun in the journal, not yet past its commit point.
pub struct Transaction<'a> {
    journal: &'a mut Journal,
    store: &'a dyn BundleStore,
    staged: StagedOperation,
    /// The backend's state of the operation, from its staging record to its cleanup.
    state: OperationState<'a>,
}

/// An operation past its commit point: the publication stands whatever fails now, and
/// `recover` finishes what is left. [`Passed::finish`] records and completes it.
#[must_use = "an operation past its commit point is finished with `finish`, or left to `recover`"]
pub struct Passed<'a> {
    tx: Transaction<'a>,
    committed: Committed,
    /// The post-state records the operation's owner with exactly its source (see
    /// [`Passed::republishable`]).
    republishable: bool,
}

impl<'a> Transaction<'a> {
    /// Journals `staged` (its row and actions) as begun in the locked `store`, after
    /// recording where its staging record goes: the store's location, its releases
    /// settings and what the operation does there, the identity of its record directory,
    /// and this journal's id.
    pub fn begin(
        journal: &'a mut Journal,
        store: &'a dyn BundleStore,
        staged: StagedOperation,
    ) -> Result<Transaction<'a>> {
        Transaction::begin_with(journal, store, staged, OperationState::new(store))
    }

    /// [`Transaction::begin`] of an operation whose steps `state` are, made by the store
    /// for what the caller said the operation does (`ReleaseStore::operation_for`).
    pub fn begin_with(
        journal: &'a mut Journal,
        store: &'a dyn BundleStore,
        mut staged: StagedOperation,
        state: OperationState<'a>,
    ) -> Result<Transaction<'a>> {
        // A log shorter than this journal saw it is refused before anything is written
        // (publications are refused earlier, as the planner's conflict `log_missing`).
        if let Some(cursor) = store.log_cursor() {
            cursor.set_known(journal.log_tail(cursor.location())?);
            if let Some(why) = crate::backend::log_missing(store)? {
                return Err(Error::LogMissing(why));
            }
        }
        store.describe(&mut staged);
        state.describe(&mut staged);
        staged.record_dir = store.record_dir(true)?;
        staged.origin.journal_id = Some(journal.journal_id()?);
        // An entry that could not be logged after the commit point is refused now.
        crate::backend::local::log::check_fits(&staged)?;
        let (record, actions) = journal_records(&staged)?;
        journal.begin_operation(&record, actions)?;
        failpoint::hit("after_journal_append");
        Ok(Transaction {
            journal,
            store,
            staged,
            state,
        })
    }

    /// The operation as its staging record holds it.
    pub fn staged(&self) -> &StagedOperation {
        &self.staged
    }

    /// Runs `steps` on the operation (its staging record, the changes, the commit point).
    /// An error the storage shows to be past the commit point is reported as such; any
    /// other is undone and journaled `rolled_back` (or, when the undo fails too, left to
    /// `recover`).
    pub fn act<T>(
        self,
        steps: impl FnOnce(&Operation<'_>, &Journal) -> Result<(Committed, T)>,
    ) -> Result<(Passed<'a>, T)> {
        let operation = Operation::with(self.store, &self.staged, &self.state);
        match steps(&operation, self.journal) {
            Ok((committed, t)) => {
                drop(operation);
                Ok((
                    Passed {
                        tx: self,
                        committed,
                        republishable: false,
                    },
                    t,
                ))
            }
            Err(e) if operation.verdict()? == Verdict::Forward => {
                Err(late(&self.staged, self.store, e))
            }
            Err(e) => {
                let op = &self.staged.operation_id;
                match operation.undo() {
                    Ok(()) => {
                        self.journal
                            .event(op, Event::RolledBack, Some(&e.to_string()))?;
                        Err(e)
                    }
                    Err(u) => Err(Error::RecoveryRequired(format!(
                        "{} {op} failed ({e}) and could not be rolled back ({u}); run `distributor recover`",
                        self.staged.origin.command
                    ))),
                }
            }
        }
    }
}

impl Passed<'_> {
    /// Says that the post-state records the operation's owner with the operation's source
    /// and exactly its manifest's outputs and links: the journal then keeps the identity
    /// of the state file the backend wrote (schema 12), under which a republication of
    /// that source needs no read of the state. Without it, none is kept.
    pub fn republishable(self, yes: bool) -> Self {
        Passed {
            republishable: yes,
            ..self
        }
    }

    /// The operation's id.
    pub fn operation_id(&self) -> &str {
        &self.tx.staged.operation_id
    }

    /// Records the commit (with the placement fingerprints, and for an activation that
    /// published nothing the event `activated` with its detail), writes the log entry
    /// and removes the staging entry, runs `after` (retention) and completes. Any error
    /// says what is live and what is left for `recover`.
    pub fn finish(
        self,
        placements: &[(usize, Placed)],
        activated: Option<&str>,
        after: impl FnOnce(&mut Journal) -> Result<()>,
    ) -> Result<String> {
        let Passed {
            tx,
            committed,
            republishable,
        } = self;
        let committed = match republishable {
            true => committed,
            false => committed.without_state_file(),
        };
        let Transaction {
            journal,
            store,
            staged,
            state,
        } = tx;
        let op = staged.operation_id.as_str();
        let bundle = store.path().to_string_lossy();
        let late = |e| late(&staged, store, e);
        journal
            .commit(committed, op, &bundle, placements)
            .map_err(late)?;
        failpoint::hit("after_journal_commit");
        if let Some(detail) = activated {
            journal
                .event(op, Event::Activated, Some(detail))
                .map_err(late)?;
        }
        // The destination log's entry, then the staging entry's removal (SPEC §18).
        let operation = Operation::with(store, &staged, &state);
        (journal.with_log_tail(store, || operation.clean_up())).map_err(late)?;
        drop(operation);
        after(journal).map_err(late)?;
        journal.event(op, Event::Completed, None).map_err(late)?;
        Ok(staged.operation_id)
    }
}

impl Passed<'_> {
    /// Finishes a stage (`publish --stage`, SPEC §19) past its commit point (its release
    /// complete and durable, not activated): records the commit, writes the log entry
    /// (command `stage`) and removes the staging entry, then ends the operation with the
    /// terminal event `held_for_promote`, in one transaction with `active`: the
    /// fingerprints of the active release's files, taken after the stage linked them into
    /// its release (which changed their ctimes, SPEC §13). No retention: nothing was
    /// activated.
    pub fn hold(self, active: &[(String, crate::backend::types::Fingerprint)]) -> Result<String> {
        let Passed { tx, committed, .. } = self;
        let committed = committed.without_state_file();
        let Transaction {
            journal,
            store,
            staged,
            state,
        } = tx;
        let op = staged.operation_id.as_str();
        let bundle = store.path().to_string_lossy();
        let late = |e| late(&staged, store, e);
        journal.commit(committed, op, &bundle, &[]).map_err(late)?;
        failpoint::hit("after_journal_commit");
        let operation = Operation::with(store, &staged, &state);
        (journal.with_log_tail(store, || operation.clean_up())).map_err(late)?;
        drop(operation);
        failpoint::hit("before_held_for_promote");
        journal
            .settle(
                op,
                &bundle,
                Event::HeldForPromote,
                Some(&held_detail(&staged)),
                active,
            )
            .map_err(late)?;
        Ok(staged.operation_id)
    }
}

/// The detail of `held_for_promote`: the release staged and the one it was built against.
pub fn held_detail(staged: &StagedOperation) -> String {
    let before = staged
        .releases
        .as_ref()
        .and_then(|r| r.active_before.as_deref());
    format!(
        "release {} staged against {}; `distributor promote --destination {} {}` activates it",
        staged.operation_id,
        before.map_or("no active release".to_string(), |b| format!("release {b}")),
        staged.destination_id,
        staged.operation_id
    )
}

/// The error of an operation that passed its commit point and then failed: what is live
/// now and what is left for `recover` (SPEC §17). A lost race stays one (SPEC §14:
/// `concurrent_change`, rolled forward by `recover`).
fn late(staged: &StagedOperation, store: &dyn BundleStore, e: Error) -> Error {
    let op = &staged.operation_id;
    let live = match &staged.releases {
        Some(r) => format!("release {}", r.target(op)),
        None => "its content".to_string(),
    };
    let m = format!(
        "{} {op} passed its commit point: {live} is live at {}; what is left of it (its cleanup: {e}) is for `distributor recover`",
        staged.origin.command,
        store.path().display()
    );
    let source = if e.is_concurrent_change() {
        Error::ConcurrentChange(m)
    } else {
        Error::Failed(m)
    };
    Error::Committed {
        operation_id: op.clone(),
        source: Box::new(source),
    }
}

/// Records a removal that staged nothing (prune's: whole releases, removed before it is
/// journaled, since a removal needs no recovery): the journal's finished operation, then
/// the destination log's entry, both naming this journal (SPEC §18).
pub fn record_removal(
    journal: &mut Journal,
    record: &crate::journal::OperationRecord,
    events: &[(Event, Option<&str>)],
    fingerprints: &[(String, crate::backend::types::Fingerprint)],
    log: impl FnOnce(&str) -> Result<()>,
) -> Result<()> {
    journal.finished_operation(record, events, fingerprints)?;
    log(&journal.journal_id()?)
}
