//! The SQLite journal (SPEC §7): opened with WAL and a busy timeout, migrated on open,
//! append-only. Every planned action is appended before it runs; statuses are derived from
//! events, never updated.
//!
//! Never UPDATE or DELETE here: the schema's triggers refuse it, and recovery and audit
//! depend on rows telling the truth about what was planned and done.

//!
//! Opening and the types live here; [`write`] appends, [`read`] answers, [`placements`]
//! keeps the placement fingerprints a commit records, [`migrate`] brings an older schema
//! up to date, [`query`] serves `history` and `log`, and [`JournalView`] reads without
//! writing (a dry run's view).

mod migrate;
mod placements;
pub mod query;
mod read;
mod read_only;
#[cfg(test)]
mod tests;
mod write;

pub use read_only::JournalView;

pub use migrate::{MIGRATIONS, SCHEMA_VERSION};
use placements::read_fingerprints;

use crate::error::{Error, JournalError, Result};
use crate::hash::ContentHash;
use crate::model::{RecordedDecision, StateMode, TakeoverMode};
use rusqlite::{Connection, OpenFlags};
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
    /// Why (`--reason`); `None` when none was given.
    pub reason: Option<String>,
    /// Pipeline id.
    pub pipeline_id: String,
    /// Destination id.
    pub destination_id: String,
    /// Bundle path.
    pub bundle_path: String,
    /// State mode.
    pub state_mode: StateMode,
    /// The decision, or the operation when it is not a publication (`adopt`, `prune`,
    /// `settings`).
    pub decision: RecordedDecision,
    /// Takeover mode.
    pub takeover_mode: TakeoverMode,
    /// Previous owner.
    pub previous_owner: Option<String>,
    /// The source the bundle path held before.
    pub previous_source: Option<crate::model::SourceRef>,
    /// The source published (all empty when none is: a `prune`, a settings change).
    pub source: crate::model::SourceRef,
    /// sha256 of the state file before (None when absent; written as NULL).
    pub pre_state_sha256: Option<ContentHash>,
    /// sha256 of the state file the operation writes (None when it commits none, a
    /// refused publication, or there is none to record: written as the empty text).
    pub post_state_sha256: Option<ContentHash>,
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
    /// sha256 (files); serialized as lowercase hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<crate::hash::ContentHash>,
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
        create_private(path)?;
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
}

/// Creates the journal file `path`, when nothing has that name, exactly 0600 whatever the
/// umask (`fchmod` after an `O_CREAT|O_EXCL|O_NOFOLLOW` open): it records who did what,
/// where, and every path written, for distributor's user alone. SQLite gives the `-wal`
/// and `-shm` files it creates beside it the journal's mode (its unix VFS copies the main
/// file's permission bits and `fchmod`s a new one to them), so they are 0600 too. An
/// existing journal keeps its mode (docs/operations.md, "Who may write where").
fn create_private(path: &Path) -> Result<()> {
    use rustix::fs::{Mode, OFlags};
    let made = rustix::fs::openat(
        rustix::fs::CWD,
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    );
    let fd = match made {
        Ok(fd) => fd,
        Err(rustix::io::Errno::EXIST) => return Ok(()),
        Err(e) => {
            return Err(JournalError::Create {
                path: path.to_path_buf(),
                error: e.into(),
            }
            .into());
        }
    };
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600)).map_err(|e| {
        Error::from(JournalError::Create {
            path: path.to_path_buf(),
            error: e.into(),
        })
    })
}

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
    /// The state mode it planned with.
    pub state_mode: StateMode,
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
