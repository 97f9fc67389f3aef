//! The journal read without writing anything (SPEC §16): `plan`, `status` and `verify`
//! say whether recovery is pending, and may create no file, switch no journal mode and
//! migrate nothing to find out.
//!
//! SQLite opens a WAL database read-only only with its `-shm` file, and creates that file
//! (and `-wal`) when they are missing. So the journal is opened one of three ways:
//!
//! - `-wal` holds something and `-shm` exists (a process is writing right now, or one was
//!   killed): opened read-only (`mode=ro`), taking part in SQLite's locking as any reader;
//!   nothing is created.
//! - `-wal` is missing or empty: everything is in the database file, opened `immutable=1`
//!   (no locks, no `-shm`). A writer that starts meanwhile writes to a new `-wal`, so the
//!   answer is checked once more after reading: when a `-wal` appeared, it is read again
//!   the first way.
//! - `-wal` holds something and `-shm` is missing (rare: copied or restored files): the
//!   two files are copied to a private temporary directory and the copy is read.
//!
//! An older schema is read as it is (the `operations` view has named the same columns
//! since schema 1); a newer one, or a file that is not a journal, is refused as
//! [`super::Journal::open`] refuses it.

use super::{jerr, migrate};
use crate::error::{Error, JournalError, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

/// A journal opened for reading only.
pub struct JournalView {
    conn: Option<Connection>,
    path: PathBuf,
    mode: Mode,
    /// The directory of the private copy ([`Mode::Copy`]), removed on drop.
    copy: Option<PathBuf>,
}

impl std::fmt::Debug for JournalView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalView")
            .field("path", &self.path)
            .finish()
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The size of `path`, `None` when it does not exist.
fn size(path: &Path) -> Result<Option<u64>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat", path, e)),
    }
}

/// A `file:` URI for `path` with `query`: `?`, `#`, `%` and every byte outside ASCII
/// escaped, so the URI names the path byte for byte.
fn uri(path: &Path, query: &str) -> String {
    let mut out = String::from("file:");
    for &b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'?' | b'#' | b'%' | 0x80.. => out.push_str(&format!("%{b:02X}")),
            _ => out.push(b as char),
        }
    }
    format!("{out}?{query}")
}

/// How a [`JournalView`] reads the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The database file alone, `immutable=1`: there was no `-wal`.
    Immutable,
    /// Read-only through the `-wal` and `-shm` that exist.
    ReadOnly,
    /// A private copy of the database and its `-wal`.
    Copy,
}

impl JournalView {
    /// Opens the journal at `path` for reading; `None` when there is no journal there (a
    /// journal that was never written records no operation). A directory at `path` is an
    /// error that says so.
    pub fn open(path: &Path) -> Result<Option<JournalView>> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(super::is_a_directory(path)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("stat", path, e)),
        }
        let mut view = JournalView {
            conn: None,
            path: path.to_path_buf(),
            mode: Mode::Immutable,
            copy: None,
        };
        let wal = sibling(path, "-wal");
        let shm = sibling(path, "-shm");
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match (size(&wal)?.unwrap_or(0), size(&shm)?.is_some()) {
            (0, _) => Connection::open_with_flags(uri(path, "immutable=1"), flags),
            (_, true) => {
                view.mode = Mode::ReadOnly;
                Connection::open_with_flags(uri(path, "mode=ro"), flags)
            }
            (_, false) => {
                view.mode = Mode::Copy;
                let dir = std::env::temp_dir()
                    .join(format!("distributor-journal-{}", uuid::Uuid::new_v4()));
                std::fs::create_dir(&dir).map_err(|e| Error::io("create", &dir, e))?;
                view.copy = Some(dir.clone());
                let copy = dir.join("journal.sqlite3");
                std::fs::copy(path, &copy).map_err(|e| Error::io("copy", path, e))?;
                std::fs::copy(&wal, sibling(&copy, "-wal"))
                    .map_err(|e| Error::io("copy", &wal, e))?;
                Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_WRITE)
            }
        }
        .map_err(|e| jerr(path, e))?;
        conn.busy_timeout(super::BUSY_TIMEOUT)
            .map_err(|e| jerr(path, e))?;
        migrate::refuse_foreign(&conn).map_err(|message| JournalError::Schema {
            path: path.to_path_buf(),
            message,
        })?;
        view.conn = Some(conn);
        Ok(Some(view))
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> &Connection {
        self.conn.as_ref().expect("opened")
    }

    /// Every unfinished operation (any bundle path), oldest first: id and bundle path.
    /// Read from one snapshot; when the journal was read as a file without a `-wal` and a
    /// writer has started one since, read again through it.
    pub fn unfinished(&self) -> Result<Vec<(String, String)>> {
        let read = |conn: &Connection| -> Result<Vec<(String, String)>> {
            let version: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| jerr(&self.path, e))?;
            if version == 0 {
                // Created and never migrated: it records nothing.
                return Ok(Vec::new());
            }
            super::read::unfinished(conn, &self.path)
        };
        let first = read(self.conn());
        let wal_now = size(&sibling(&self.path, "-wal"))?.unwrap_or(0) > 0;
        if self.mode == Mode::Immutable && (wal_now || first.is_err()) {
            // A writer started (and may have checkpointed into the file) while it was
            // read: once more, the way the journal's files are now.
            if let Some(again) = JournalView::open(&self.path)?
                && again.mode != Mode::Immutable
            {
                return read(again.conn());
            }
        }
        first
    }

    /// [`super::Journal::fingerprints`], read only: a dry run proves unchanged files by
    /// their placement fingerprints as the real run does, instead of hashing them. A
    /// journal older than schema 6 recorded no ctime, so its placements vouch for nothing
    /// and are not read. A fingerprint read from a snapshot a writer has moved past since
    /// can only be older: it then matches no file (the ctime changed), which is hashed.
    pub fn fingerprints(
        &self,
        bundle_path: &str,
        wanted: &mut crate::backend::types::Fingerprints<'_>,
    ) -> Result<()> {
        let version: i64 = self
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| jerr(&self.path, e))?;
        if version < 6 {
            return Ok(());
        }
        super::read_fingerprints(self.conn(), &self.path, version, bundle_path, wanted)
    }

    /// [`super::Journal::committed_post_state`], read only (a journal never migrated
    /// records nothing).
    pub fn committed_post_state(&self, bundle_path: &str, sha256: &str) -> Result<bool> {
        let version: i64 = self
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| jerr(&self.path, e))?;
        if version == 0 {
            return Ok(false);
        }
        super::committed_post_state(self.conn(), &self.path, bundle_path, sha256)
    }

    /// The last seq of the destination log at `location` this journal saw (a journal older
    /// than schema 10 kept none).
    pub fn log_tail(&self, location: &str) -> Result<Option<u64>> {
        let version: i64 = self
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| jerr(&self.path, e))?;
        if version < 10 {
            return Ok(None);
        }
        use rusqlite::OptionalExtension;
        self.conn()
            .query_row(
                "SELECT seq FROM journal_log_tails WHERE location = ?1 ORDER BY id DESC LIMIT 1",
                [location],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|s| s.map(|s| s as u64))
            .map_err(|e| jerr(&self.path, e))
    }

    /// The last destination log entry at `location` this journal wrote, with the sha256
    /// of its bytes (a journal older than schema 14 kept none).
    pub fn log_entry_written(&self, location: &str) -> Result<Option<(u64, String)>> {
        let version: i64 = self
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| jerr(&self.path, e))?;
        if version < 14 {
            return Ok(None);
        }
        use rusqlite::OptionalExtension;
        self.conn()
            .query_row(
                "SELECT seq, entry_sha256 FROM journal_log_tails
                  WHERE location = ?1 AND entry_sha256 IS NOT NULL ORDER BY id DESC LIMIT 1",
                [location],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?)),
            )
            .optional()
            .map_err(|e| jerr(&self.path, e))
    }

    /// Unfinished operations on `bundle_path`, oldest first.
    pub fn unfinished_for(&self, bundle_path: &str) -> Result<Vec<String>> {
        Ok(self
            .unfinished()?
            .into_iter()
            .filter(|(_, b)| b == bundle_path)
            .map(|(op, _)| op)
            .collect())
    }
}

impl Drop for JournalView {
    fn drop(&mut self) {
        drop(self.conn.take());
        if let Some(dir) = &self.copy {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
