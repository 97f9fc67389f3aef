//! Appending to the journal: an operation with its actions (or whole, refused, adopted),
//! its events, the commit with its placement fingerprints, and where a destination log
//! ended. Each in one transaction; never an UPDATE or DELETE.

use super::placements::{insert_commit_set, insert_placement_set};
use super::{ACTION_KINDS, ActionRecord, Event, Journal, OperationRecord, jerr};
use crate::backend::types::Fingerprint;
use crate::clock::now;
use crate::error::{Error, JournalError, Result};
use crate::model::RecordedDecision;
use rusqlite::params;
use std::path::Path;

impl Journal {
    /// Appends the operation and all its actions in one transaction.
    pub fn begin_operation<'a>(
        &mut self,
        op: &OperationRecord,
        actions: impl IntoIterator<Item = ActionRecord<'a>>,
    ) -> Result<()> {
        self.insert_operation(op, Some(&mut actions.into_iter()), &[], &[])
    }

    /// Appends an operation that was carried out whole before it was journaled (a
    /// `prune`: removals that need no recovery), its events and placement fingerprints, in
    /// one transaction: it never reads as unfinished.
    pub fn finished_operation(
        &mut self,
        op: &OperationRecord,
        events: &[(Event, Option<&str>)],
        placements: &[(String, Fingerprint)],
    ) -> Result<()> {
        self.insert_operation(op, None, events, placements)
    }

    /// Appends a publication refused for its conflicts (they are in its `plan_json`) with
    /// its terminal [`Event::Refused`] event, in one transaction: it never reads as
    /// unfinished, and an audit shows who tried what.
    pub fn refused_operation(&mut self, op: &OperationRecord, detail: &str) -> Result<()> {
        self.insert_operation(op, None, &[(Event::Refused, Some(detail))], &[])
    }

    /// Appends an operation found only in a destination's staging, its actions and an
    /// [`Event::Adopted`] event, in one transaction.
    pub fn adopt_operation<'a>(
        &mut self,
        op: &OperationRecord,
        actions: impl IntoIterator<Item = ActionRecord<'a>>,
        detail: &str,
    ) -> Result<()> {
        self.insert_operation(
            op,
            Some(&mut actions.into_iter()),
            &[(Event::Adopted, Some(detail))],
            &[],
        )
    }

    fn insert_operation<'a>(
        &mut self,
        op: &OperationRecord,
        actions: Option<&mut dyn Iterator<Item = ActionRecord<'a>>>,
        events: &[(Event, Option<&str>)],
        placements: &[(String, Fingerprint)],
    ) -> Result<()> {
        let path = self.path.clone();
        // Nothing committed (a refused publication): the empty text.
        let post = op.post_state_sha256.map_or_else(String::new, |h| h.hex());
        let pre = match op.decision {
            // They leave the state as it was: the row holds it as pre- and post-state, the
            // empty text when there is none.
            RecordedDecision::Prune | RecordedDecision::Settings => Some(post.clone()),
            _ => op.pre_state_sha256.map(|h| h.hex()),
        };
        let tx = self.write_transaction()?;
        tx.execute(
            "INSERT INTO journal_operations (operation_id, started_at, command, actor, pipeline_id, destination_id,
               bundle_path, state_mode, decision, takeover_mode, previous_owner, previous_source_id,
               previous_source_created_at, previous_source_digest, source_id, source_created_at, source_digest,
               pre_state_sha256, post_state_sha256, takeovers_json, plan_json, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)",
            params![
                op.operation_id,
                op.started_at,
                op.command,
                op.actor,
                op.pipeline_id,
                op.destination_id,
                op.bundle_path,
                op.state_mode.as_str(),
                op.decision.as_str(),
                op.takeover_mode.as_str(),
                op.previous_owner,
                op.previous_source.as_ref().map(|s| &s.id),
                op.previous_source.as_ref().map(|s| &s.created_at),
                op.previous_source.as_ref().map(|s| &s.digest),
                op.source.id,
                op.source.created_at,
                op.source.digest,
                pre,
                post,
                op.takeovers_json,
                op.plan_json,
                op.reason,
            ],
        )
        .map_err(|e| jerr(&path, e))?;
        if let Some(actions) = actions {
            insert_actions(&tx, &path, &op.operation_id, actions)?;
        }
        insert_placement_set(&tx, &path, &op.operation_id, &op.bundle_path, placements)?;
        for (event, detail) in events {
            tx.execute(
                "INSERT INTO journal_events (operation_id, at, event, detail) VALUES (?1, ?2, ?3, ?4)",
                params![op.operation_id, now(), event, detail],
            )
            .map_err(|e| jerr(&path, e))?;
        }
        tx.commit().map_err(|e| jerr(&path, e))
    }

    /// Appends one event.
    pub fn event(&self, operation_id: &str, event: Event, detail: Option<&str>) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO journal_events (operation_id, at, event, detail) VALUES (?1, ?2, ?3, ?4)",
                params![operation_id, now(), event, detail],
            )
            .map(|_| ())
            .map_err(|e| jerr(&self.path, e))
    }

    /// Appends a step event of an unfinished operation (`staged`, `moved_aside`,
    /// `placed`) without waiting for the disk: committed with `synchronous = NORMAL`, so it
    /// is in the WAL (a killed process keeps it) and becomes durable with the next
    /// transaction that is (`committed`, `rolled_back`; the WAL is written in order). No
    /// status depends on these events (the `operations` view reads none of them) and
    /// `recover` decides from the staging record and the state, so a power cut that loses
    /// one loses nothing `recover` needs; each fsync of the WAL they used to cost is a
    /// device cache flush of its own.
    pub fn step_event(&self, operation_id: &str, event: Event) -> Result<()> {
        self.unsynced(|| self.event(operation_id, event, None))
    }

    /// Runs `write` with `synchronous = NORMAL` (its commits are written to the WAL but
    /// not fsynced), then sets `synchronous = FULL` again, whatever `write` returned.
    fn unsynced<T>(&self, write: impl FnOnce() -> Result<T>) -> Result<T> {
        let set = |level: &str| {
            self.conn
                .execute_batch(&format!("PRAGMA synchronous = {level}"))
                .map_err(|e| jerr(&self.path, e))
        };
        set("NORMAL")?;
        let out = write();
        set("FULL")?;
        out
    }

    /// Appends the commit event and the placement fingerprints in one transaction, given
    /// the proof that storage passed the commit point. Each placement names the action
    /// (by its index in the plan, `seq`) that placed the file: the fingerprints are one row
    /// of `journal_placement_sets` (schema 8) whose elements are `[seq, mtime_ns -
    /// mtime_base, ino, ctime_ns - ctime_base]`, the path, size and sha256 being the
    /// action's.
    pub fn commit(
        &mut self,
        committed: crate::backend::Committed,
        operation_id: &str,
        bundle_path: &str,
        placements: &[(usize, crate::backend::types::Placed)],
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write_transaction()?;
        insert_commit_set(&tx, &path, operation_id, bundle_path, placements)?;
        // A state other than the planned post-state (an object store's, with the ETags
        // its uploads returned) is named in the event.
        let detail = committed.state_sha256().map(|sha| {
            format!(
                "state written with sha256 {sha}: the planned post-state with each output's etag"
            )
        });
        tx.execute(
            "INSERT INTO journal_events (operation_id, at, event, detail) VALUES (?1, ?2, ?3, ?4)",
            params![operation_id, now(), Event::Committed, detail],
        )
        .map_err(|e| jerr(&path, e))?;
        if let Some(f) = committed.state_file() {
            tx.execute(
                "INSERT INTO journal_state_files (operation_id, bundle_path, dev, ino, size, mtime_ns, ctime_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    operation_id,
                    bundle_path,
                    f.dev as i64,
                    f.ino as i64,
                    f.size as i64,
                    f.mtime_ns,
                    f.ctime_ns
                ],
            )
            .map_err(|e| jerr(&path, e))?;
        }
        tx.commit().map_err(|e| jerr(&path, e))
    }

    /// Appends an event of a committed operation and, in the same transaction, placement
    /// fingerprints taken after it (a releases destination takes them once its links and
    /// its pruning are done, SPEC §13): they are read before the commit's own set.
    pub fn settle(
        &mut self,
        operation_id: &str,
        bundle_path: &str,
        event: Event,
        detail: Option<&str>,
        placements: &[(String, Fingerprint)],
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write_transaction()?;
        insert_placement_set(&tx, &path, operation_id, bundle_path, placements)?;
        tx.execute(
            "INSERT INTO journal_events (operation_id, at, event, detail) VALUES (?1, ?2, ?3, ?4)",
            params![operation_id, now(), event, detail],
        )
        .map_err(|e| jerr(&path, e))?;
        tx.commit().map_err(|e| jerr(&path, e))
    }

    /// Records that the destination log at `location` ended at `seq`. A hint (see
    /// [`Journal::with_log_tail`]), so committed without an fsync of its own
    /// ([`Journal::step_event`]): one lost to a power cut leaves an older hint, from
    /// which the next writer reads the log a little further.
    pub fn record_log_tail(&self, location: &str, seq: u64) -> Result<()> {
        self.record_log_entry(location, seq, None)
    }

    /// [`Journal::record_log_tail`], with the sha256 of that entry's bytes when this
    /// journal wrote it (docs/operations.md, "The hash chain").
    pub fn record_log_entry(&self, location: &str, seq: u64, sha256: Option<&str>) -> Result<()> {
        if self.log_tail(location)? == Some(seq) && sha256.is_none() {
            return Ok(());
        }
        self.unsynced(|| {
            self.conn
                .execute(
                    "INSERT INTO journal_log_tails (location, seq, at, entry_sha256) VALUES (?1, ?2, ?3, ?4)",
                    rusqlite::params![location, seq as i64, now(), sha256],
                )
                .map(|_| ())
                .map_err(|e| jerr(&self.path, e))
        })
    }

    /// Runs `step`, a step of `store` that may add an entry to its destination log (the
    /// cleanup after a commit, a roll-forward), telling the store where this journal last
    /// saw the log end, and keeps where the store left it (SPEC §18 "Finding the tail").
    /// Stores that keep no cursor just run the step. The tail is a hint: when it cannot be
    /// read or kept, the step still runs and its outcome stands (the next writer lists
    /// the whole log).
    pub fn with_log_tail<T>(
        &self,
        store: &dyn crate::backend::BundleStore,
        step: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let Some(cursor) = store.log_cursor() else {
            return step();
        };
        cursor.set_known(self.log_tail(cursor.location()).ok().flatten());
        cursor.set_known_entry(self.log_entry_written(cursor.location()).ok().flatten());
        let out = step();
        if let Some(seq) = cursor.reached() {
            let sha = cursor.reached_sha();
            let _ = self.record_log_entry(cursor.location(), seq, sha.as_deref());
        }
        out
    }
}

/// Action rows one INSERT statement writes at most. Each statement costs a statement
/// journal (the append-only trigger may abort it) and its own setup; a first publication
/// of 10,000 files spent a third of its journal time on them, one row a statement.
pub(super) const ACTION_ROWS_PER_STATEMENT: usize = 128;

/// Appends `actions` as the action set of `operation_id` (schema 8): one row of
/// `journal_action_sets`, and a row per action in `journal_action_rows`, the kind as its
/// code and the sha256 as its 32 bytes, [`ACTION_ROWS_PER_STATEMENT`] rows a statement.
fn insert_actions<'a>(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    operation_id: &str,
    actions: &mut dyn Iterator<Item = ActionRecord<'a>>,
) -> Result<()> {
    tx.execute(
        "INSERT INTO journal_action_sets (operation_id) VALUES (?1)",
        [operation_id],
    )
    .map_err(|e| jerr(path, e))?;
    let set = tx.last_insert_rowid();
    let mut rows = ActionRows {
        set,
        path,
        full: None,
        pending: Vec::with_capacity(ACTION_ROWS_PER_STATEMENT),
    };
    for (i, a) in actions.enumerate() {
        let bad = |what: String| {
            Error::from(JournalError::Corrupt {
                path: path.to_path_buf(),
                message: format!("cannot record action {i} of {operation_id}: {what}"),
            })
        };
        let kind = ACTION_KINDS
            .iter()
            .position(|k| *k == a.kind)
            .ok_or_else(|| bad(format!("unknown kind {:?}", a.kind)))?;
        rows.push(
            tx,
            ActionRow {
                seq: i as i64,
                kind: kind as i64,
                action: a,
            },
        )?;
    }
    rows.finish(tx)
}

/// One action as `journal_action_rows` holds it.
struct ActionRow<'a> {
    seq: i64,
    kind: i64,
    action: ActionRecord<'a>,
}

/// The rows of one action set on their way into `journal_action_rows`.
struct ActionRows<'a, 'p> {
    set: i64,
    path: &'p Path,
    /// The statement for a full batch, prepared at the first.
    full: Option<rusqlite::Statement<'p>>,
    pending: Vec<ActionRow<'a>>,
}

impl<'a, 'p> ActionRows<'a, 'p> {
    fn push(&mut self, tx: &'p rusqlite::Transaction<'_>, row: ActionRow<'a>) -> Result<()> {
        self.pending.push(row);
        if self.pending.len() < ACTION_ROWS_PER_STATEMENT {
            return Ok(());
        }
        let mut stmt = match self.full.take() {
            Some(stmt) => stmt,
            None => tx
                .prepare(&insert_rows_sql(ACTION_ROWS_PER_STATEMENT))
                .map_err(|e| jerr(self.path, e))?,
        };
        let done = self.execute(&mut stmt);
        self.full = Some(stmt);
        done
    }

    /// Writes what is left, in a statement of its own size.
    fn finish(mut self, tx: &rusqlite::Transaction<'_>) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut stmt = tx
            .prepare(&insert_rows_sql(self.pending.len()))
            .map_err(|e| jerr(self.path, e))?;
        self.execute(&mut stmt)
    }

    fn execute(&mut self, stmt: &mut rusqlite::Statement<'_>) -> Result<()> {
        let path = self.path;
        let mut n = 0;
        let mut bind = |v: &dyn rusqlite::ToSql| {
            n += 1;
            stmt.raw_bind_parameter(n, v).map_err(|e| jerr(path, e))
        };
        for r in &self.pending {
            let a = &r.action;
            bind(&self.set)?;
            bind(&r.seq)?;
            bind(&r.kind)?;
            bind(&a.path.as_ref())?;
            bind(&a.size.map(|s| s as i64))?;
            bind(&a.sha256.as_ref().map(|h| &h.0[..]))?;
            bind(&a.target.as_deref())?;
            bind(&a.replaces.as_deref())?;
        }
        stmt.raw_execute().map_err(|e| jerr(path, e))?;
        self.pending.clear();
        Ok(())
    }
}

/// `INSERT INTO journal_action_rows` of `rows` rows.
fn insert_rows_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO journal_action_rows (action_set, seq, kind, path, size, sha256, target, replaces) VALUES ",
    );
    for r in 0..rows {
        sql.push_str(if r == 0 { "" } else { "," });
        sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?)");
    }
    sql
}
