//! The SQLite journal (SPEC §7): opened with WAL and a busy timeout, migrated on open,
//! append-only. Every planned action is appended before it runs; statuses are derived from
//! events, never updated.
//!
//! Never UPDATE or DELETE here: the schema's triggers refuse it, and recovery and audit
//! depend on rows telling the truth about what was planned and done.

mod migrate;
pub mod query;
mod read_only;

pub use read_only::JournalView;

pub use migrate::{MIGRATIONS, SCHEMA_VERSION};

use crate::backend::types::Fingerprint;
use crate::clock::now;
use crate::error::{Error, JournalError, Result};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The events an operation goes through, each written in `journal_events.event` as its
/// name ([`Event::as_str`]): statuses are derived from them (schema views).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// `staged`: new content is staged and verified.
    Staged,
    /// `moved_aside`: replaced and deleted paths are moved aside.
    MovedAside,
    /// `placed`: new content is in place.
    Placed,
    /// `committed`: the state file was renamed into place (commit point).
    Committed,
    /// `completed`: cleanup finished.
    Completed,
    /// `rolled_back`: an error undid the operation in process.
    RolledBack,
    /// `recovered_forward`: `recover` finished the operation.
    RecoveredForward,
    /// `recovered_back`: `recover` undid the operation.
    RecoveredBack,
    /// `state_replaced`: `recover`, rolling an operation forward on an object store (SPEC
    /// §17), found a state object that was neither its pre- nor its post-state and
    /// overwrote it: the detail names the replaced object's sha256 and ETag and where its
    /// copy is kept. Precedes `recovered_forward`; ends nothing.
    StateReplaced,
    /// `diverged`: `recover` found neither pre- nor post-state.
    Diverged,
    /// `adopted`: `recover` wrote the operation's row from the `plan.json` in its staging
    /// directory, because this journal had never seen it (another host, a lost journal).
    Adopted,
    /// `abandoned`: an operator ended a diverged operation without recovering it
    /// (`recover --abandon`); the destination was not touched.
    Abandoned,
    /// `closed`: `recover` found no staging entry for the operation (SPEC §13): it was
    /// applied elsewhere or never applied; nothing was touched. The detail says which.
    Closed,
    /// `pruned`: retention ran after an activation (SPEC §15): the detail names the
    /// releases it removed, or why it failed (a warning; the publication stands).
    Pruned,
    /// `activated`: a rollback activated an earlier release (SPEC §15): the detail names
    /// the release activated, the one rolled back from, and the source digest now held.
    Activated,
    /// `refused`: a publication refused for its conflicts (SPEC §16): its only event.
    Refused,
    /// `held_for_promote`: `publish --stage` (SPEC §19): the release is built, verified
    /// and logged, not activated; `distributor promote` activates it. Terminal: the
    /// status `staged`.
    HeldForPromote,
    /// `settings_changed`: `releases settings` changed a releases destination's settings;
    /// the detail says from what to what.
    SettingsChanged,
    /// `hook_ok`: a hook exited 0 (SPEC §19).
    HookOk,
    /// `hook_failed`: a hook failed, timed out or could not be started.
    HookFailed,
}

impl Event {
    /// The event's name, as the journal stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Staged => "staged",
            Event::MovedAside => "moved_aside",
            Event::Placed => "placed",
            Event::Committed => "committed",
            Event::Completed => "completed",
            Event::RolledBack => "rolled_back",
            Event::RecoveredForward => "recovered_forward",
            Event::RecoveredBack => "recovered_back",
            Event::StateReplaced => "state_replaced",
            Event::Diverged => "diverged",
            Event::Adopted => "adopted",
            Event::Abandoned => "abandoned",
            Event::Closed => "closed",
            Event::Pruned => "pruned",
            Event::Activated => "activated",
            Event::Refused => "refused",
            Event::HeldForPromote => "held_for_promote",
            Event::SettingsChanged => "settings_changed",
            Event::HookOk => "hook_ok",
            Event::HookFailed => "hook_failed",
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl rusqlite::ToSql for Event {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(
            rusqlite::types::ValueRef::Text(self.as_str().as_bytes()),
        ))
    }
}

/// The operation row appended before anything runs.
#[derive(Debug, Clone)]
pub struct OperationRecord {
    /// UUID.
    pub operation_id: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// `publish`.
    pub command: String,
    /// Who ran it (`cli:<user>` or `token:<name>`).
    pub actor: String,
    /// Pipeline id.
    pub pipeline_id: String,
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// State mode.
    pub state_mode: String,
    /// Decision.
    pub decision: String,
    /// Takeover mode.
    pub takeover_mode: String,
    /// Previous owner.
    pub previous_owner: Option<String>,
    /// The source the bundle path held before.
    pub previous_source: Option<crate::model::SourceRef>,
    /// The source published (all empty when none is: a `prune`, a settings change).
    pub source: crate::model::SourceRef,
    /// sha256 of the state file before (None when absent).
    pub pre_state_sha256: Option<String>,
    /// sha256 of the state file the operation writes.
    pub post_state_sha256: String,
    /// The report's `takeovers` array, as JSON.
    pub takeovers_json: String,
    /// The whole plan, as JSON, for recovery and `history show`.
    pub plan_json: String,
}

/// One planned action. Serialized as the plan's actions are (a `plan.json`'s `actions`),
/// so [`Journal::plan_json`] can put them back into the plan they were taken from.
/// Borrowed from the plan when written (a million actions are not copied to be
/// journaled), owned when read back.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ActionRecord<'a> {
    /// `file_create`, `file_overwrite`, `file_delete`, `link_create`, `link_overwrite`, `link_delete`.
    pub kind: Cow<'a, str>,
    /// Path.
    pub path: Cow<'a, str>,
    /// Size (files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// sha256 (files), lowercase hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Cow<'a, str>>,
    /// Link target (links).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Cow<'a, str>>,
    /// What an overwrite or delete moves aside (`file`, `link`), as planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<Cow<'a, str>>,
}

/// The action kinds by their code in `journal_action_rows.kind` (schema 8's
/// `journal_action_kinds`).
const ACTION_KINDS: [&str; 6] = [
    "file_create",
    "file_overwrite",
    "file_delete",
    "link_create",
    "link_overwrite",
    "link_delete",
];

/// An open, migrated journal.
pub struct Journal {
    conn: Connection,
    path: PathBuf,
}

impl Journal {
    /// Opens (creating when absent) and migrates the journal at `path`.
    pub fn open(path: &Path) -> Result<Journal> {
        if path.is_dir() {
            return Err(is_a_directory(path));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|error| JournalError::CreateDir {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
                error,
            })?;
        }
        let conn = Connection::open(path).map_err(|e| jerr(path, e))?;
        let mut j = Journal {
            conn,
            path: path.to_path_buf(),
        };
        let version = j.configure()?;
        migrate::migrate_from(&mut j.conn, version).map_err(|message| JournalError::Schema {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(j)
    }

    /// Opens an existing journal for reading; `None` when there is no file. Still migrates
    /// (an older schema is brought up to date), refuses a newer one.
    pub fn open_existing(path: &Path) -> Result<Option<Journal>> {
        if path.is_dir() {
            return Err(is_a_directory(path));
        }
        if !path.exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map_err(|e| jerr(path, e))?;
        let mut j = Journal {
            conn,
            path: path.to_path_buf(),
        };
        let version = j.configure()?;
        migrate::migrate_from(&mut j.conn, version).map_err(|message| JournalError::Schema {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(Some(j))
    }

    /// Sets the connection up (busy timeout, WAL, synchronous, foreign keys) once
    /// [`migrate::refuse_foreign`] accepted the database; returns the schema version it
    /// read.
    fn configure(&mut self) -> Result<i64> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| jerr(&self.path, e))?;
        let version =
            migrate::refuse_foreign(&self.conn).map_err(|message| JournalError::Schema {
                path: self.path.clone(),
                message,
            })?;
        // Switching a new journal to WAL needs an exclusive lock, and SQLite answers
        // "database is locked" at once, without its busy handler, while another process is
        // doing the same: retry for as long as the busy timeout.
        let started = std::time::Instant::now();
        let mode: String = loop {
            match self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            {
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if matches!(
                        f.code,
                        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                    ) && started.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                r => break r.map_err(|e| jerr(&self.path, e))?,
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JournalError::Schema {
                path: self.path.clone(),
                message: format!("cannot enable WAL (journal_mode is {mode})"),
            }
            .into());
        }
        self.conn
            .execute_batch(
                "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA mmap_size = 16777216;",
            )
            .map_err(|e| jerr(&self.path, e))?;
        Ok(version)
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A transaction that takes the write lock at once (waiting for it as long as the busy
    /// timeout): one that read first and then wrote could find another process's commit in
    /// between, and SQLite fails that upgrade at once, without waiting.
    fn write_transaction(&mut self) -> Result<rusqlite::Transaction<'_>> {
        self.conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| jerr(&self.path, e))
    }

    /// The underlying connection, for queries in this module's siblings and tests.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

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
        let tx = self.write_transaction()?;
        tx.execute(
            "INSERT INTO journal_operations (operation_id, started_at, command, actor, pipeline_id, destination_id,
               bundle_path, state_mode, decision, takeover_mode, previous_owner, previous_source_id,
               previous_source_created_at, previous_source_digest, source_id, source_created_at, source_digest,
               pre_state_sha256, post_state_sha256, takeovers_json, plan_json)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
            params![
                op.operation_id,
                op.started_at,
                op.command,
                op.actor,
                op.pipeline_id,
                op.destination_id,
                op.bundle_path,
                op.state_mode,
                op.decision,
                op.takeover_mode,
                op.previous_owner,
                op.previous_source.as_ref().map(|s| &s.id),
                op.previous_source.as_ref().map(|s| &s.created_at),
                op.previous_source.as_ref().map(|s| &s.digest),
                op.source.id,
                op.source.created_at,
                op.source.digest,
                op.pre_state_sha256,
                op.post_state_sha256,
                op.takeovers_json,
                op.plan_json,
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

    /// The source whose post-state a publication in `bundle_path` committed as the state
    /// file `file` identifies, with the records of its owner being exactly that source's
    /// manifest (schema 12; the newest such file of the bundle path, and only while its
    /// operation counts as committed: applied, committed or rolled forward). `None` when
    /// the newest one recorded is another file, or none was.
    pub fn republishable_state(
        &self,
        bundle_path: &str,
        file: &crate::backend::StateFileId,
    ) -> Result<Option<CommittedSource>> {
        let row = self
            .conn
            .query_row(
                "SELECT s.dev, s.ino, s.size, s.mtime_ns, s.ctime_ns, o.pipeline_id,
                        o.destination_id, o.state_mode, o.source_id, o.source_created_at,
                        o.source_digest, o.status
                   FROM (SELECT * FROM journal_state_files WHERE bundle_path = ?1
                          ORDER BY id DESC LIMIT 1) s
                   JOIN operations o ON o.operation_id = s.operation_id",
                [bundle_path],
                |r| {
                    let recorded = crate::backend::StateFileId {
                        dev: r.get::<_, i64>(0)? as u64,
                        ino: r.get::<_, i64>(1)? as u64,
                        size: r.get::<_, i64>(2)? as u64,
                        mtime_ns: r.get(3)?,
                        ctime_ns: r.get(4)?,
                    };
                    let status: String = r.get(11)?;
                    Ok((
                        recorded,
                        status,
                        CommittedSource {
                            pipeline_id: r.get(5)?,
                            destination_id: r.get(6)?,
                            state_mode: r.get(7)?,
                            source: crate::model::SourceRef {
                                id: r.get(8)?,
                                created_at: r.get(9)?,
                                digest: r.get(10)?,
                            },
                        },
                    ))
                },
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))?;
        Ok(row.and_then(|(recorded, status, source)| {
            (recorded == *file
                && matches!(status.as_str(), "applied" | "committed" | "rolled_forward"))
            .then_some(source)
        }))
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

    /// Operations on `bundle_path` that are not finished (recovery is due).
    pub fn unfinished_for(&self, bundle_path: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT operation_id FROM operations WHERE bundle_path = ?1 AND status IN ('in_progress', 'committed', 'diverged')
                 ORDER BY started_at",
            )
            .map_err(|e| jerr(&self.path, e))?;
        let rows = stmt
            .query_map([bundle_path], |r| r.get::<_, String>(0))
            .map_err(|e| jerr(&self.path, e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| jerr(&self.path, e))
    }

    /// This journal's own id (SPEC §18 `journal_id`), kept from its creation.
    pub fn journal_id(&self) -> Result<String> {
        self.conn
            .query_row("SELECT journal_id FROM journal_meta", [], |r| r.get(0))
            .map_err(|e| jerr(&self.path, e))
    }

    /// The last seq of the destination log at `location` this journal saw (SPEC §18
    /// "Finding the tail"), `None` when it never wrote there.
    pub fn log_tail(&self, location: &str) -> Result<Option<u64>> {
        self.conn
            .query_row(
                "SELECT seq FROM journal_log_tails WHERE location = ?1 ORDER BY id DESC LIMIT 1",
                [location],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|s| s.map(|s| s as u64))
            .map_err(|e| jerr(&self.path, e))
    }

    /// Records that the destination log at `location` ended at `seq`. A hint (see
    /// [`Journal::with_log_tail`]), so committed without an fsync of its own
    /// ([`Journal::step_event`]): one lost to a power cut leaves an older hint, from
    /// which the next writer reads the log a little further.
    pub fn record_log_tail(&self, location: &str, seq: u64) -> Result<()> {
        if self.log_tail(location)? == Some(seq) {
            return Ok(());
        }
        self.unsynced(|| {
            self.conn
                .execute(
                    "INSERT INTO journal_log_tails (location, seq, at) VALUES (?1, ?2, ?3)",
                    rusqlite::params![location, seq as i64, now()],
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
        let Some(cursor) = store.log().map(|l| l.log_cursor()) else {
            return step();
        };
        cursor.set_known(self.log_tail(cursor.location()).ok().flatten());
        let out = step();
        if let Some(seq) = cursor.reached() {
            let _ = self.record_log_tail(cursor.location(), seq);
        }
        out
    }

    /// Whether the journal recorded that operation `op` passed its commit point (its
    /// `committed` event), whatever came after.
    pub fn recorded_commit(&self, op: &str) -> Result<bool> {
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM journal_events WHERE operation_id = ?1 AND event = ?2)",
                params![op, Event::Committed],
                |r| r.get::<_, bool>(0),
            )
            .map_err(|e| jerr(&self.path, e))
    }

    /// Whether an operation on `bundle_path` committed a state file of exactly this
    /// sha256 (SPEC §17: a state file an earlier version wrote is believed through the
    /// journal that committed it).
    pub fn committed_post_state(&self, bundle_path: &str, sha256: &str) -> Result<bool> {
        committed_post_state(&self.conn, &self.path, bundle_path, sha256)
    }

    /// Every unfinished operation (any bundle path), oldest first: id and bundle path.
    pub fn unfinished(&self) -> Result<Vec<(String, String)>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT operation_id, bundle_path FROM operations WHERE status IN ('in_progress', 'committed', 'diverged')
                 ORDER BY started_at, operation_id",
            )
            .map_err(|e| jerr(&self.path, e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| jerr(&self.path, e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| jerr(&self.path, e))
    }

    /// The derived status of an operation (`None` when the journal does not know it).
    pub fn status(&self, operation_id: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT status FROM operations WHERE operation_id = ?1",
                [operation_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))
    }

    /// Fills `wanted` with the newest placement fingerprint of each of its paths at
    /// `bundle_path`: the bundle path's placement sets are read newest first, then (for a
    /// journal older than schema 5) its per-file placement rows, newest first, each
    /// through an index, and only until every wanted path has had its newest placement
    /// offered. Every set is newer than every per-file row: schema 5 writes sets only.
    pub fn fingerprints(
        &self,
        bundle_path: &str,
        wanted: &mut crate::backend::types::Fingerprints<'_>,
    ) -> Result<()> {
        read_fingerprints(
            &self.conn,
            &self.path,
            SCHEMA_VERSION as i64,
            bundle_path,
            wanted,
        )
    }

    /// The plan JSON of an operation, as its staging directory's `plan.json` has it: from
    /// schema 8 on, the stored `plan_json` lacks the actions, which are put back from
    /// `journal_action_rows`.
    pub fn plan_json(&self, operation_id: &str) -> Result<Option<String>> {
        let err = |e| jerr(&self.path, e);
        let Some(stored) = self
            .conn
            .query_row(
                "SELECT plan_json FROM journal_operations WHERE operation_id = ?1",
                [operation_id],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(err)?
        else {
            return Ok(None);
        };
        let set: Option<i64> = self
            .conn
            .query_row(
                "SELECT id FROM journal_action_sets WHERE operation_id = ?1",
                [operation_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(err)?;
        let Some(set) = set else {
            return Ok(Some(stored));
        };
        let actions = read_actions(&self.conn, &self.path, set)?;
        let actions = serde_json::to_string(&actions).map_err(|e| JournalError::Corrupt {
            path: self.path.clone(),
            message: format!("cannot render the actions of {operation_id}: {e}"),
        })?;
        let body = stored.trim_end();
        let Some(body) = body.strip_suffix('}') else {
            return Err(JournalError::Corrupt {
                path: self.path.clone(),
                message: format!("plan_json of {operation_id} is not a JSON object"),
            }
            .into());
        };
        let sep = if body.trim_end().ends_with('{') {
            ""
        } else {
            ","
        };
        Ok(Some(format!("{body}{sep}\"actions\":{actions}}}")))
    }
}

/// Appends `actions` as the action set of `operation_id` (schema 8): one row of
/// `journal_action_sets`, and a row per action in `journal_action_rows`, the kind as its
/// code and the sha256 as 32 bytes.
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
    let mut stmt = tx
        .prepare(
            "INSERT INTO journal_action_rows (action_set, seq, kind, path, size, sha256, target, replaces)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(|e| jerr(path, e))?;
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
        let sha = match &a.sha256 {
            Some(h) => Some(
                crate::hash::sha256_bytes(h)
                    .ok_or_else(|| bad(format!("sha256 {h:?} is not 64 lowercase hex digits")))?,
            ),
            None => None,
        };
        stmt.execute(params![
            set,
            i as i64,
            kind as i64,
            a.path,
            a.size.map(|s| s as i64),
            sha.as_ref().map(|b| &b[..]),
            a.target,
            a.replaces,
        ])
        .map_err(|e| jerr(path, e))?;
    }
    Ok(())
}

/// The actions of action set `set`, in plan order.
fn read_actions(conn: &Connection, path: &Path, set: i64) -> Result<Vec<ActionRecord<'static>>> {
    let err = |e| jerr(path, e);
    let mut stmt = conn
        .prepare(
            "SELECT seq, kind, path, size, sha256, target, replaces FROM journal_action_rows
             WHERE action_set = ?1 ORDER BY seq",
        )
        .map_err(err)?;
    let mut rows = stmt.query([set]).map_err(err)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(err)? {
        let seq: i64 = r.get(0).map_err(err)?;
        let code: i64 = r.get(1).map_err(err)?;
        let corrupt = |what: &str| {
            Error::from(JournalError::Corrupt {
                path: path.to_path_buf(),
                message: format!("journal_action_rows ({set}, {seq}): {what}"),
            })
        };
        if seq != out.len() as i64 {
            return Err(corrupt("actions are not numbered 0, 1, 2, ..."));
        }
        let kind = usize::try_from(code)
            .ok()
            .and_then(|c| ACTION_KINDS.get(c))
            .ok_or_else(|| corrupt("unknown kind code"))?;
        let sha256 = match r.get_ref(4).map_err(err)? {
            rusqlite::types::ValueRef::Null => None,
            rusqlite::types::ValueRef::Blob(b) if b.len() == 32 => Some(crate::hash::hex(b)),
            _ => return Err(corrupt("sha256 is not 32 bytes")),
        };
        out.push(ActionRecord {
            kind: Cow::Borrowed(kind),
            path: Cow::Owned(r.get(2).map_err(err)?),
            size: r.get::<_, Option<i64>>(3).map_err(err)?.map(|s| s as u64),
            sha256: sha256.map(Cow::Owned),
            target: r.get::<_, Option<String>>(5).map_err(err)?.map(Cow::Owned),
            replaces: r.get::<_, Option<String>>(6).map_err(err)?.map(Cow::Owned),
        });
    }
    Ok(out)
}

/// [`Journal::fingerprints`] on any connection to a journal of schema `version` (a
/// [`JournalView`] too: read only, it may be older than this build's).
pub(crate) fn read_fingerprints(
    conn: &Connection,
    journal: &Path,
    version: i64,
    bundle_path: &str,
    wanted: &mut crate::backend::types::Fingerprints<'_>,
) -> Result<()> {
    if wanted.open() == 0 {
        return Ok(());
    }
    let err = |e| jerr(journal, e);
    let query = if version >= 8 {
        LATEST_PLACEMENT_SETS
    } else {
        LATEST_PLACEMENT_SETS_V5
    };
    let mut stmt = conn.prepare(query).map_err(err)?;
    let mut sets = stmt.query([bundle_path]).map_err(err)?;
    while wanted.open() > 0 {
        let Some(r) = sets.next().map_err(err)? else {
            break;
        };
        let id: i64 = r.get(0).map_err(err)?;
        let action_set: Option<i64> = if version >= 8 {
            r.get(1).map_err(err)?
        } else {
            None
        };
        // The set is read through a blob handle as it is parsed: at a million files it is
        // 40 MB of text that a column value would hold whole.
        let set = conn
            .blob_open(
                rusqlite::MAIN_DB,
                "journal_placement_sets",
                "placements",
                id,
                true,
            )
            .map_err(err)?;
        if let Some(action_set) = action_set {
            let bases = (
                r.get::<_, Option<i64>>(2).map_err(err)?.unwrap_or(0),
                r.get::<_, Option<i64>>(3).map_err(err)?,
            );
            offer_commit_set(conn, journal, id, set, action_set, bases, wanted)?;
            continue;
        }
        let text = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(
            SET_READ_BUF,
            set,
        ));
        for_each_element(text, |SetEntry(path, size, mtime_ns, ino, sha256, ctime_ns)| {
            let placed = crate::backend::types::Placed {
                size: size as u64,
                mtime_ns,
                ino: ino as u64,
                ctime_ns,
            };
            wanted.offer(&path, &sha256, placed);
            Ok(wanted.open() > 0)
        })
        .map_err(|e| match e {
            Stopped::Parse(e) => JournalError::Corrupt {
                path: journal.to_path_buf(),
                message: format!(
                    "journal_placement_sets row {id} is not a JSON array of [path, size, mtime_ns, ino, sha256, ctime_ns]: {e}"
                ),
            }
            .into(),
            Stopped::By(e) => e,
        })?;
    }
    if wanted.open() == 0 {
        return Ok(());
    }
    let mut stmt = conn.prepare(LATEST_PLACEMENTS).map_err(err)?;
    let mut rows = stmt.query([bundle_path]).map_err(err)?;
    while wanted.open() > 0 {
        let Some(r) = rows.next().map_err(err)? else {
            break;
        };
        let text = |i| r.get_ref(i).and_then(|v| Ok(v.as_str()?)).map_err(err);
        let placed = crate::backend::types::Placed {
            size: r.get::<_, i64>(1).map_err(err)? as u64,
            mtime_ns: r.get(2).map_err(err)?,
            ino: r.get::<_, i64>(3).map_err(err)? as u64,
            // Recorded before ctime was: vouches for nothing.
            ctime_ns: None,
        };
        wanted.offer(text(0)?, text(4)?, placed);
    }
    Ok(())
}

/// Offers the fingerprints of a commit's placement set (schema 8, row `id`): its elements
/// `[seq, mtime_ns - mtime_base, ino, ctime_ns - ctime_base]` in ascending `seq`, each
/// joined with the action `seq` of `action_set` for its path, size and sha256. The actions
/// are read in one pass beside the elements.
fn offer_commit_set(
    conn: &Connection,
    journal: &Path,
    id: i64,
    set: rusqlite::blob::Blob<'_>,
    action_set: i64,
    (mtime_base, ctime_base): (i64, Option<i64>),
    wanted: &mut crate::backend::types::Fingerprints<'_>,
) -> Result<()> {
    let err = |e| jerr(journal, e);
    let corrupt = |what: String| {
        Error::from(JournalError::Corrupt {
            path: journal.to_path_buf(),
            message: format!("journal_placement_sets row {id}: {what}"),
        })
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT seq, path, size, sha256 FROM journal_action_rows
             WHERE action_set = ?1 AND seq >= ?2 ORDER BY seq",
        )
        .map_err(err)?;
    let mut head = [0u8; 64];
    let head = set.read_at(&mut head, 0).map(|n| &head[..n]).map_err(err)?;
    let first = first_seq(std::str::from_utf8(head).unwrap_or_default());
    let mut rows = stmt.query([action_set, first]).map_err(err)?;
    let text =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(SET_READ_BUF, set));
    let mut hex = [0u8; 64];
    // Each element offered as it is parsed: at a million files, the set as a list would
    // be 40 MB more at the republication's peak.
    for_each_element(text, |(seq, mtime, ino, ctime): (i64, i64, i64, Option<i64>)| {
        let row = loop {
            let Some(r) = rows.next().map_err(err)? else {
                return Err(corrupt(format!(
                    "names action {seq}, which action set {action_set} does not hold (or not in ascending order)"
                )));
            };
            if r.get::<_, i64>(0).map_err(err)? == seq {
                break r;
            }
        };
        let path = row.get_ref(1).and_then(|v| Ok(v.as_str()?)).map_err(err)?;
        let size: Option<i64> = row.get(2).map_err(err)?;
        let sha = match row.get_ref(3).map_err(err)? {
            rusqlite::types::ValueRef::Blob(b) if b.len() == 32 => hex_into(b, &mut hex),
            _ => {
                return Err(corrupt(format!(
                    "action {seq} placed no file with a sha256"
                )));
            }
        };
        let placed = crate::backend::types::Placed {
            size: size.unwrap_or(0) as u64,
            mtime_ns: mtime_base.wrapping_add(mtime),
            ino: ino as u64,
            ctime_ns: ctime.zip(ctime_base).map(|(c, b)| b.wrapping_add(c)),
        };
        wanted.offer(path, sha, placed);
        Ok(wanted.open() > 0)
    })
    .map_err(|e| match e {
        Stopped::Parse(e) => corrupt(format!(
            "is not a JSON array of [seq, mtime_ns - mtime_base, ino, ctime_ns - ctime_base]: {e}"
        )),
        Stopped::By(e) => e,
    })
}

/// The buffer a placement set is parsed through.
const SET_READ_BUF: usize = 256 * 1024;

/// The `seq` of a commit set's first element (`[[seq,...`), to start reading its actions
/// there; 0 (from the first action) when the text does not start that way (or its head
/// is cut inside a character).
fn first_seq(text: &str) -> i64 {
    let head = text.trim_start().strip_prefix('[').map(str::trim_start);
    let head = head.and_then(|h| h.strip_prefix('[')).map(str::trim_start);
    head.and_then(|h| {
        let end = h.find(|c: char| !c.is_ascii_digit()).unwrap_or(h.len());
        h[..end].parse().ok()
    })
    .unwrap_or(0)
}

/// Why [`for_each_element`] stopped before the end of its array.
enum Stopped {
    /// The text is not a JSON array of such elements.
    Parse(serde_json::Error),
    /// The callback failed.
    By(Error),
}

/// Calls `f` with each element of the JSON array `text` reads as it is parsed, without
/// collecting them, until `f` returns `Ok(false)` (done: the rest is not read) or fails.
fn for_each_element<'de, T: serde::Deserialize<'de>, R: serde_json::de::Read<'de>>(
    mut text: serde_json::Deserializer<R>,
    f: impl FnMut(T) -> Result<bool>,
) -> std::result::Result<(), Stopped> {
    struct Each<F, T>(F, Option<Error>, std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>, F: FnMut(T) -> Result<bool>> serde::de::Visitor<'de>
        for &mut Each<F, T>
    {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<(), A::Error> {
            while let Some(x) = seq.next_element::<T>()? {
                match (self.0)(x) {
                    Ok(true) => {}
                    Ok(false) => return Err(serde::de::Error::custom(DONE)),
                    Err(e) => {
                        self.1 = Some(e);
                        return Err(serde::de::Error::custom(DONE));
                    }
                }
            }
            Ok(())
        }
    }
    const DONE: &str = "distributor: stopped";
    let mut each = Each(f, None, std::marker::PhantomData);
    let read = serde::Deserializer::deserialize_seq(&mut text, &mut each).and_then(|()| text.end());
    match (read, each.1) {
        (_, Some(e)) => Err(Stopped::By(e)),
        (Err(e), None) if e.to_string().starts_with(DONE) => Ok(()),
        (Err(e), None) => Err(Stopped::Parse(e)),
        (Ok(()), None) => Ok(()),
    }
}

/// Lowercase hex of 32 bytes into `buf`, without allocating.
fn hex_into<'b>(bytes: &[u8], buf: &'b mut [u8; 64]) -> &'b str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        buf[2 * i] = DIGITS[(b >> 4) as usize];
        buf[2 * i + 1] = DIGITS[(b & 15) as usize];
    }
    std::str::from_utf8(buf).expect("hex digits")
}

/// Appends the placement set of a commit (schema 8): each element names the action that
/// placed the file, whose row holds its path, size and sha256; times are stored as offsets
/// from the set's smallest, which takes about half the digits.
fn insert_commit_set(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    operation_id: &str,
    bundle_path: &str,
    placements: &[(usize, crate::backend::types::Placed)],
) -> Result<()> {
    if placements.is_empty() {
        return Ok(());
    }
    let action_set: i64 = tx
        .query_row(
            "SELECT id FROM journal_action_sets WHERE operation_id = ?1",
            [operation_id],
            |r| r.get(0),
        )
        .map_err(|e| jerr(path, e))?;
    let mtime_base = placements
        .iter()
        .map(|(_, f)| f.mtime_ns)
        .min()
        .unwrap_or(0);
    let ctime_base = placements.iter().filter_map(|(_, f)| f.ctime_ns).min();
    debug_assert!(placements.windows(2).all(|w| w[0].0 < w[1].0));
    // Written straight from the placements into one buffer sized for them (a row is
    // typically under 64 bytes): no list of rows, no doubling, at a million files.
    let set = crate::model::Seq(
        placements,
        |(seq, f): &(usize, crate::backend::types::Placed)| {
            (
                *seq,
                f.mtime_ns.wrapping_sub(mtime_base),
                f.ino as i64,
                f.ctime_ns.zip(ctime_base).map(|(c, b)| c.wrapping_sub(b)),
            )
        },
    );
    let mut json = Vec::with_capacity(placements.len() * 64 + 2);
    serde_json::to_writer(&mut json, &set).map_err(|e| JournalError::Corrupt {
        path: path.to_path_buf(),
        message: format!("cannot record the placements of {operation_id}: {e}"),
    })?;
    let json = String::from_utf8(json).expect("JSON is UTF-8");
    tx.execute(
        "INSERT INTO journal_placement_sets (operation_id, bundle_path, placements, action_set, mtime_base, ctime_base)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![operation_id, bundle_path, json, action_set, mtime_base, ctime_base],
    )
    .map_err(|e| jerr(path, e))?;
    Ok(())
}

/// Appends one row of `journal_placement_sets` holding `placements` (none for an empty
/// list), in the transaction `tx`.
fn insert_placement_set(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    operation_id: &str,
    bundle_path: &str,
    placements: &[(String, Fingerprint)],
) -> Result<()> {
    if placements.is_empty() {
        return Ok(());
    }
    let set: Vec<SetEntry<'_>> = placements
        .iter()
        .map(|(p, fp)| {
            SetEntry(
                p.into(),
                fp.size as i64,
                fp.mtime_ns,
                fp.ino as i64,
                fp.sha256.hex().into(),
                fp.ctime_ns,
            )
        })
        .collect();
    let json = serde_json::to_string(&set).map_err(|e| JournalError::Corrupt {
        path: path.to_path_buf(),
        message: format!("cannot record the placements of {operation_id}: {e}"),
    })?;
    tx.execute(
        "INSERT INTO journal_placement_sets (operation_id, bundle_path, placements) VALUES (?1, ?2, ?3)",
        params![operation_id, bundle_path, json],
    )
    .map_err(|e| jerr(path, e))?;
    Ok(())
}

/// One file of a placement set: path, size, mtime_ns, inode, sha256, ctime_ns. Paths and
/// hashes are borrowed from the stored text unless JSON escapes had to be undone. Size and
/// inode are stored as SQLite integers (signed 64 bits), as `journal_placements` stored
/// them, so the `placements` view shows them alike. Sets written before ctime was recorded
/// have five elements: their ctime reads as `None`, and they vouch for nothing.
#[derive(serde::Serialize, serde::Deserialize)]
struct SetEntry<'a>(
    #[serde(borrow)] std::borrow::Cow<'a, str>,
    i64,
    i64,
    i64,
    #[serde(borrow)] std::borrow::Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")] Option<i64>,
);

/// A bundle path's placement sets, newest first (through `journal_placement_sets_latest`).
const LATEST_PLACEMENT_SETS: &str = "SELECT id, action_set, mtime_base, ctime_base
     FROM journal_placement_sets WHERE bundle_path = ?1 ORDER BY id DESC";

/// The same in a journal of schemas 5-7, whose sets all have the schema 5 form.
const LATEST_PLACEMENT_SETS_V5: &str = "SELECT id FROM journal_placement_sets
     WHERE bundle_path = ?1 ORDER BY id DESC";

/// A bundle path's per-file placements (schemas 1-4), newest first (through
/// `journal_placements_latest`).
const LATEST_PLACEMENTS: &str = "SELECT path, size, mtime_ns, ino, sha256 FROM journal_placements
     WHERE bundle_path = ?1 ORDER BY id DESC";

/// The error for a journal path that names a directory.
pub(crate) fn is_a_directory(path: &Path) -> Error {
    JournalError::IsADirectory {
        path: path.to_path_buf(),
    }
    .into()
}

/// How long a journal statement waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn jerr(path: &Path, error: rusqlite::Error) -> Error {
    let path = path.to_path_buf();
    match &error {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
            JournalError::NotADatabase { path }
        }
        _ => JournalError::Sqlite { path, error },
    }
    .into()
}

/// What [`Journal::republishable_state`] finds: the owner, state mode and source of the
/// operation that committed a state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedSource {
    /// The operation's pipeline id.
    pub pipeline_id: String,
    /// The operation's destination id.
    pub destination_id: String,
    /// The state mode it planned with (`single_owner`, `shared_root`).
    pub state_mode: String,
    /// The source it published.
    pub source: crate::model::SourceRef,
}

/// [`Journal::committed_post_state`] on any connection to a journal.
pub(crate) fn committed_post_state(
    conn: &Connection,
    path: &Path,
    bundle_path: &str,
    sha256: &str,
) -> Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM operations WHERE bundle_path = ?1 AND post_state_sha256 = ?2
                        AND status IN ('applied', 'committed', 'rolled_forward'))",
        [bundle_path, sha256],
        |r| r.get::<_, bool>(0),
    )
    .map_err(|e| jerr(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Committed;
    use crate::backend::types::{Fingerprints, Placed};
    use crate::hash::ContentHash;

    fn operation(op: &str, bundle: &str) -> OperationRecord {
        let s = |v: &str| v.to_string();
        OperationRecord {
            operation_id: s(op),
            started_at: now(),
            command: s("publish"),
            actor: s("cli:test"),
            pipeline_id: s("weather"),
            destination_id: s("latest"),
            bundle_path: s(bundle),
            state_mode: s("single_owner"),
            decision: s("replace_same_pipeline"),
            takeover_mode: s("same_pipeline"),
            previous_owner: None,
            previous_source: None,
            source: crate::model::SourceRef {
                id: s("s"),
                created_at: s("2026-12-02T06:00:00Z"),
                digest: s("d"),
            },
            pre_state_sha256: None,
            post_state_sha256: s("p"),
            takeovers_json: s("[]"),
            plan_json: s("{}"),
        }
    }

    fn fp(ino: u64) -> Fingerprint {
        Fingerprint {
            size: 1,
            mtime_ns: ino as i64,
            ino,
            ctime_ns: Some(ino as i64 + 7),
            sha256: *sha(ino),
        }
    }

    /// A sha256 in lowercase hex (64 digits) standing for content `n`.
    fn sha(n: u64) -> &'static ContentHash {
        static SHAS: std::sync::LazyLock<Vec<ContentHash>> = std::sync::LazyLock::new(|| {
            (0..16)
                .map(|n| ContentHash::parse(&format!("{n:064x}")).unwrap())
                .collect()
        });
        &SHAS[n as usize]
    }

    /// Commits operation `op` on `bundle` placing `paths`, each with fingerprint `fp(ino)`.
    fn place(j: &mut Journal, op: &str, bundle: &str, paths: &[(&str, u64)]) {
        let actions: Vec<ActionRecord<'_>> = paths
            .iter()
            .map(|(p, i)| ActionRecord {
                kind: "file_create".into(),
                path: (*p).into(),
                size: Some(1),
                sha256: Some(sha(*i).hex().into()),
                target: None,
                replaces: None,
            })
            .collect();
        j.begin_operation(&operation(op, bundle), actions).unwrap();
        let placements: Vec<(usize, Placed)> = paths
            .iter()
            .enumerate()
            .map(|(k, (_, i))| (k, placed(*i)))
            .collect();
        j.commit(Committed::passed(), op, bundle, &placements)
            .unwrap();
    }

    fn placed(ino: u64) -> Placed {
        let f = fp(ino);
        Placed {
            size: f.size,
            mtime_ns: f.mtime_ns,
            ino: f.ino,
            ctime_ns: f.ctime_ns,
        }
    }

    #[test]
    fn fingerprints_are_the_latest_placement_of_each_wanted_path() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        place(&mut j, "o1", "/d", &[("a", 1), ("b", 2), ("c", 3)]);
        place(&mut j, "o2", "/other", &[("a", 9), ("b", 9)]);
        place(&mut j, "o3", "/d", &[("a", 4)]);
        place(&mut j, "o4", "/d", &[("b", 5)]);
        let wanted = [
            ("a", sha(4)),
            ("b", sha(5)),
            ("c", sha(3)),
            ("never", sha(1)),
        ];
        let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs(wanted));
        j.fingerprints("/d", &mut got).unwrap();
        assert_eq!(got.vouching("a", sha(4)), Some(&placed(4)));
        assert_eq!(got.vouching("b", sha(5)), Some(&placed(5)));
        // Placed long ago and not since: still found, behind newer placements.
        assert_eq!(got.vouching("c", sha(3)), Some(&placed(3)));
        assert_eq!(got.vouching("never", sha(1)), None);
        assert_eq!(got.open(), 1, "only 'never' was not found");
        // Only for the hash it was wanted for.
        assert_eq!(got.vouching("a", sha(1)), None);
        // Only what is asked for.
        let mut got =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("c", sha(3))]));
        j.fingerprints("/d", &mut got).unwrap();
        assert_eq!(got.vouching("a", sha(4)), None);
        assert_eq!(got.vouching("c", sha(3)), Some(&placed(3)));
        let mut none =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(4))]));
        j.fingerprints("/nowhere", &mut none).unwrap();
        assert_eq!(none.vouching("a", sha(4)), None);
    }

    /// Schema 8 stores the actions as rows, not in plan_json: `plan_json` puts them back
    /// as the plan had them, and the journal_actions view shows them as before.
    #[test]
    fn actions_are_stored_once_and_put_back_into_the_plan() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        let actions = vec![
            ActionRecord {
                kind: "file_overwrite".into(),
                path: "dir/a \"b\".txt".into(),
                size: Some(7),
                sha256: Some(sha(3).hex().into()),
                target: None,
                replaces: Some("link".into()),
            },
            ActionRecord {
                kind: "link_create".into(),
                path: "l".into(),
                size: None,
                sha256: None,
                target: Some("dir".into()),
                replaces: None,
            },
        ];
        let mut op = operation("o1", "/d");
        op.plan_json = r#"{"operation_id":"o1","new_dirs":[]}"#.into();
        j.begin_operation(&op, actions.clone()).unwrap();
        let plan: serde_json::Value =
            serde_json::from_str(&j.plan_json("o1").unwrap().unwrap()).unwrap();
        assert_eq!(
            plan,
            serde_json::json!({
                "operation_id": "o1",
                "new_dirs": [],
                "actions": [
                    {"kind": "file_overwrite", "path": "dir/a \"b\".txt", "size": 7,
                     "sha256": sha(3), "replaces": "link"},
                    {"kind": "link_create", "path": "l", "target": "dir"},
                ],
            })
        );
        // An empty plan object, and a plan with no action set (a refusal), as stored.
        let mut op = operation("o2", "/d");
        op.plan_json = "{}".into();
        j.begin_operation(&op, std::iter::empty()).unwrap();
        assert_eq!(j.plan_json("o2").unwrap().unwrap(), r#"{"actions":[]}"#);
        j.refused_operation(&operation("o3", "/d"), "conflicts")
            .unwrap();
        assert_eq!(j.plan_json("o3").unwrap().unwrap(), "{}");
        assert_eq!(j.plan_json("nope").unwrap(), None);
        type Row = (
            String,
            i64,
            String,
            String,
            Option<i64>,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<Row> = j
            .connection()
            .prepare("SELECT operation_id, seq, kind, path, size, sha256, target FROM journal_actions ORDER BY operation_id, seq")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            rows,
            vec![
                (
                    "o1".into(),
                    0,
                    "file_overwrite".into(),
                    "dir/a \"b\".txt".into(),
                    Some(7),
                    Some(sha(3).hex()),
                    None
                ),
                (
                    "o1".into(),
                    1,
                    "link_create".into(),
                    "l".into(),
                    None,
                    None,
                    Some("dir".into())
                ),
            ]
        );
        // A sha256 that is not one is refused, and nothing of the operation is written.
        let mut bad = actions.clone();
        bad[0].sha256 = Some("sha-3".into());
        let e = j
            .begin_operation(&operation("o4", "/d"), bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("action 0 of o4") && e.contains("64 lowercase hex"),
            "{e}"
        );
        assert_eq!(j.status("o4").unwrap(), None);
    }

    #[test]
    fn only_the_newest_placement_of_a_path_vouches() {
        // `a` was placed with sha-1 (inode 1), then replaced with sha-4 (inode 4): a file
        // matching the old fingerprint is not proof of sha-1 (inode 1 may be reused).
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        place(&mut j, "o1", "/d", &[("a", 1)]);
        place(&mut j, "o2", "/d", &[("a", 4)]);
        let mut got =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
        j.fingerprints("/d", &mut got).unwrap();
        assert_eq!(got.vouching("a", sha(1)), None);
        assert_eq!(got.open(), 0, "decided by the newest placement");
    }

    /// Writes a per-file placement row as schemas 1-4 did.
    fn legacy_row(j: &mut Journal, op: &str, bundle: &str, path: &str, ino: u64) {
        j.begin_operation(&operation(op, bundle), std::iter::empty())
            .ok();
        let f = fp(ino);
        j.connection()
            .execute(
                "INSERT INTO journal_placements (operation_id, bundle_path, path, size, mtime_ns, ino, sha256)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![op, bundle, path, f.size as i64, f.mtime_ns, f.ino as i64, f.sha256.hex()],
            )
            .unwrap();
    }

    #[test]
    fn a_commit_records_its_placements_as_one_set() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        place(&mut j, "o1", "/d", &[("a", 1), ("dir/b", 2)]);
        let c = j.connection();
        let count = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(count("SELECT count(*) FROM journal_placement_sets"), 1);
        assert_eq!(count("SELECT count(*) FROM journal_placements"), 0);
        // The `placements` view shows one row per file, as journal_placements did.
        type Row = (String, String, String, i64, i64, i64, String);
        let rows: Vec<Row> = c
            .prepare("SELECT operation_id, bundle_path, path, size, mtime_ns, ino, sha256 FROM placements ORDER BY path")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let s = |v: &str| v.to_string();
        assert_eq!(
            rows,
            vec![
                (s("o1"), s("/d"), s("a"), 1, 1, 1, sha(1).hex()),
                (s("o1"), s("/d"), s("dir/b"), 1, 2, 2, sha(2).hex()),
            ]
        );
        // A commit that placed nothing (deletions only) writes no set.
        place(&mut j, "o2", "/d", &[]);
        let n: i64 = j
            .connection()
            .query_row("SELECT count(*) FROM journal_placement_sets", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(n, 1);
    }

    /// An inode number past i64::MAX (possible on some filesystems) comes back exact, and
    /// the view shows it as `journal_placements` did (the same 64 bits, signed).
    #[test]
    fn the_largest_inode_numbers_come_back_exact() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        place(&mut j, "o0", "/elsewhere", &[("x", 2)]);
        let action = ActionRecord {
            kind: "file_create".into(),
            path: "a".into(),
            size: Some(1),
            sha256: Some(sha(1).hex().into()),
            target: None,
            replaces: None,
        };
        j.begin_operation(&operation("o1", "/d"), [action]).unwrap();
        let big = Placed {
            ino: u64::MAX - 1,
            ..placed(1)
        };
        j.commit(Committed::passed(), "o1", "/d", &[(0, big)])
            .unwrap();
        let mut got =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
        j.fingerprints("/d", &mut got).unwrap();
        assert_eq!(got.vouching("a", sha(1)).map(|p| p.ino), Some(u64::MAX - 1));
        let shown: i64 = j
            .connection()
            .query_row(
                "SELECT ino FROM placements WHERE bundle_path = '/d'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(shown, (u64::MAX - 1) as i64);
    }

    #[test]
    fn paths_that_json_escapes_come_back_intact() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        let odd = "quote\"d/sn\u{f8}w \u{2603}.txt";
        place(&mut j, "o1", "/d", &[(odd, 7)]);
        let mut got =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([(odd, sha(7))]));
        j.fingerprints("/d", &mut got).unwrap();
        assert_eq!(got.vouching(odd, sha(7)), Some(&placed(7)));
    }

    /// A journal from before schema 5 holds per-file rows: they are still read, after
    /// every set (sets are newer), so the newest placement of a path still decides.
    #[test]
    fn placements_of_older_schemas_are_read_after_the_sets() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        legacy_row(&mut j, "o1", "/d", "a", 1);
        legacy_row(&mut j, "o1", "/d", "b", 2);
        legacy_row(&mut j, "o1", "/other", "c", 3);
        place(&mut j, "o2", "/d", &[("a", 4)]);
        let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([
            ("a", sha(4)),
            ("b", sha(2)),
            ("c", sha(3)),
        ]));
        j.fingerprints("/d", &mut got).unwrap();
        assert_eq!(got.vouching("a", sha(4)), Some(&placed(4)));
        // Recorded before ctime was: found, but it can never match a file (it proves
        // nothing, and the file is hashed).
        let legacy = Placed {
            ctime_ns: None,
            ..placed(2)
        };
        assert_eq!(got.vouching("b", sha(2)), Some(&legacy));
        assert_eq!(got.vouching("c", sha(3)), None, "another bundle path's");
        // The old placement of `a` (sha-1) is behind the newer set: it vouches for nothing.
        let mut old =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
        j.fingerprints("/d", &mut old).unwrap();
        assert_eq!(old.vouching("a", sha(1)), None);
        let n: i64 = j
            .connection()
            .query_row(
                "SELECT count(*) FROM placements WHERE bundle_path = '/d'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 3, "the view shows rows and set entries alike");
        // The old rows stay as they are.
        for sql in [
            "UPDATE journal_placements SET ino = 0",
            "DELETE FROM journal_placements",
            "INSERT OR REPLACE INTO journal_placements SELECT * FROM journal_placements",
        ] {
            let e = j.connection().execute(sql, []).unwrap_err();
            assert!(e.to_string().contains("append-only"), "{sql}: {e}");
        }
    }

    #[test]
    fn a_garbled_placement_set_is_a_journal_error() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        j.begin_operation(&operation("o1", "/d"), std::iter::empty())
            .unwrap();
        j.connection()
            .execute(
                "INSERT INTO journal_placement_sets (operation_id, bundle_path, placements) VALUES ('o1', '/d', '[[\"a\", 1]]')",
                [],
            )
            .unwrap();
        let mut got =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
        let e = j.fingerprints("/d", &mut got).unwrap_err().to_string();
        assert!(e.contains("journal_placement_sets row 1"), "{e}");
        assert!(
            e.contains("[path, size, mtime_ns, ino, sha256, ctime_ns]"),
            "{e}"
        );
    }

    /// Sets written before ctime was recorded have five elements: read, with no ctime.
    #[test]
    fn a_placement_set_without_ctime_is_read_with_none() {
        let tmp = tempfile::tempdir().unwrap();
        let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        j.begin_operation(&operation("o1", "/d"), std::iter::empty())
            .unwrap();
        j.connection()
            .execute(
                "INSERT INTO journal_placement_sets (operation_id, bundle_path, placements) VALUES ('o1', '/d', ?1)",
                [format!("[[\"a\", 1, 2, 3, \"{}\"]]", sha(1))],
            )
            .unwrap();
        let mut got =
            Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
        j.fingerprints("/d", &mut got).unwrap();
        let want = Placed {
            size: 1,
            mtime_ns: 2,
            ino: 3,
            ctime_ns: None,
        };
        assert_eq!(got.vouching("a", sha(1)), Some(&want));
    }

    #[test]
    fn fingerprints_read_newest_first_through_an_index_without_sorting() {
        // Reading stops once every wanted path is found only if rows come newest first
        // straight from an index: a sort would read the whole history first.
        let tmp = tempfile::tempdir().unwrap();
        let j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
        for (query, index) in [
            (LATEST_PLACEMENT_SETS, "journal_placement_sets_latest"),
            (LATEST_PLACEMENTS, "journal_placements_latest"),
        ] {
            let plan: Vec<String> = j
                .connection()
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap()
                .query_map(["/d"], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let plan = plan.join("; ");
            assert!(plan.contains(index), "{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }
}
