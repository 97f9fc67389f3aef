//! Schema migrations: an ordered list applied inside one exclusive transaction from
//! `PRAGMA user_version` on, each recorded in `schema_migrations`.

use rusqlite::Connection;

/// The migrations, in order. Be sure to never change the order or the entries here: only
/// append. Each is a file in `migrations/`.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_initial",
        include_str!("../../migrations/0001_initial.sql"),
    ),
    (
        "0002_abandoned",
        include_str!("../../migrations/0002_abandoned.sql"),
    ),
    (
        "0003_latest_placements",
        include_str!("../../migrations/0003_latest_placements.sql"),
    ),
    (
        "0004_no_replace",
        include_str!("../../migrations/0004_no_replace.sql"),
    ),
    (
        "0005_placement_sets",
        include_str!("../../migrations/0005_placement_sets.sql"),
    ),
    (
        "0006_closed",
        include_str!("../../migrations/0006_closed.sql"),
    ),
    (
        "0007_refused",
        include_str!("../../migrations/0007_refused.sql"),
    ),
    (
        "0008_compact_actions",
        include_str!("../../migrations/0008_compact_actions.sql"),
    ),
    (
        "0009_journal_id",
        include_str!("../../migrations/0009_journal_id.sql"),
    ),
    (
        "0010_log_tail",
        include_str!("../../migrations/0010_log_tail.sql"),
    ),
    (
        "0011_staged",
        include_str!("../../migrations/0011_staged.sql"),
    ),
    (
        "0012_state_files",
        include_str!("../../migrations/0012_state_files.sql"),
    ),
    (
        "0013_reason",
        include_str!("../../migrations/0013_reason.sql"),
    ),
    (
        "0014_log_entry_sha",
        include_str!("../../migrations/0014_log_entry_sha.sql"),
    ),
];

/// Schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// The tables every distributor journal has had since schema 1 (`journal_actions` is a
/// view from schema 8 on).
const CORE_TABLES: &[&str] = &[
    "schema_migrations",
    "journal_operations",
    "journal_actions",
    "journal_events",
    "journal_placements",
];

/// Refuses, before anything is written to it (not even the switch to WAL), a database
/// that is not a distributor journal this build can use: a newer schema, or one that
/// claims a schema version without distributor's tables, or that holds other tables and
/// no version at all. Returns the schema version it read (`PRAGMA user_version`).
pub(super) fn refuse_foreign(conn: &Connection) -> Result<i64, String> {
    // One statement, so the version and the tables come from one snapshot: another
    // process may be creating this journal right now, and its migration commits both at
    // once.
    let (version, tables): (i64, Option<String>) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT group_concat(name, '/') FROM sqlite_master
                      WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(describe)?;
    let tables: Vec<&str> = tables
        .as_deref()
        .map_or(Vec::new(), |t| t.split('/').collect());
    if version as usize > SCHEMA_VERSION {
        return Err(format!(
            "was written by a newer distributor (schema {version}); this build knows schema {SCHEMA_VERSION}; upgrade distributor or use another --journal"
        ));
    }
    let ours = CORE_TABLES
        .iter()
        .all(|t| tables.iter().any(|have| have == t));
    if (version == 0 && !tables.is_empty()) || (version > 0 && !ours) {
        return Err(
            "is an SQLite database but not a distributor journal (it holds other tables and no distributor schema); use another --journal"
                .to_string(),
        );
    }
    Ok(version)
}

/// Brings the database to [`SCHEMA_VERSION`]; refuses what [`refuse_foreign`] refuses.
#[cfg(test)]
pub(super) fn migrate(conn: &mut Connection) -> Result<(), String> {
    let version = refuse_foreign(conn)?;
    migrate_from(conn, version)
}

/// [`migrate`] of a database [`refuse_foreign`] just accepted at schema `version`: a
/// journal already current (every open but the first of each new schema) costs no
/// further statement.
pub(super) fn migrate_from(conn: &mut Connection, version: i64) -> Result<(), String> {
    if version as usize == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .map_err(describe)?;
    // Another process may have migrated (or somebody else written) while we waited for
    // the lock: look again.
    refuse_foreign(&tx)?;
    let version = user_version(&tx)?;
    if version == 0 {
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);",
        )
        .map_err(describe)?;
    }
    for (i, (name, sql)) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)
            .map_err(|e| format!("migration {name}: {e}"))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            rusqlite::params![i as i64 + 1, name, crate::clock::now()],
        )
        .map_err(describe)?;
    }
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
        .map_err(describe)?;
    tx.commit().map_err(describe)
}

fn user_version(conn: &Connection) -> Result<i64, String> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(describe)
}

fn describe(e: rusqlite::Error) -> String {
    match &e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
            "is not a distributor journal (file is not an SQLite database, or it is corrupt)"
                .to_string()
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_twice_on_memory_database() {
        let mut c = Connection::open_in_memory().unwrap();
        migrate(&mut c).unwrap();
        migrate(&mut c).unwrap();
        let n: i64 = c
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n as usize, SCHEMA_VERSION);
    }

    /// A journal written by the first schema is brought up to date and keeps its rows.
    #[test]
    fn migrates_from_schema_one() {
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch(MIGRATIONS[0].1).unwrap();
        c.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
             INSERT INTO schema_migrations VALUES (1, '0001_initial', 'then');
             PRAGMA user_version = 1;
             INSERT INTO journal_operations VALUES ('op', 't', 'publish', 'cli:x', 'p', 'd', '/b', 'single_owner',
               'create', 'same_pipeline', NULL, NULL, NULL, NULL, 's', 't', 'sha256:x', NULL, 'post', '[]', '{}');
             INSERT INTO journal_events (operation_id, at, event) VALUES ('op', 't', 'diverged'), ('op', 't2', 'abandoned');
             INSERT INTO journal_actions VALUES ('op', 0, 'file_create', 'a.txt', 3, 'abc', NULL);",
        )
        .unwrap();
        migrate(&mut c).unwrap();
        let status: String = c
            .query_row(
                "SELECT status FROM operations WHERE operation_id = 'op'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(status, "abandoned");
        // Schema 8 keeps the old action rows in journal_actions_v1, append-only still, and
        // the journal_actions view shows them as before.
        let action: (String, i64, String, String, i64, String) = c
            .query_row(
                "SELECT operation_id, seq, kind, path, size, sha256 FROM journal_actions",
                [],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(
            action,
            (
                "op".into(),
                0,
                "file_create".into(),
                "a.txt".into(),
                3,
                "abc".into()
            )
        );
        for sql in [
            "UPDATE journal_actions_v1 SET path = 'x'",
            "DELETE FROM journal_actions_v1",
            "INSERT OR REPLACE INTO journal_actions_v1 SELECT * FROM journal_actions_v1",
        ] {
            let e = c.execute(sql, []).unwrap_err().to_string();
            assert!(e.contains("append-only"), "{sql}: {e}");
        }
        let n: i64 = c
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n as usize, SCHEMA_VERSION);
    }

    #[test]
    fn refuses_a_foreign_database() {
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE notes (x TEXT)").unwrap();
        assert!(
            migrate(&mut c)
                .unwrap_err()
                .contains("not a distributor journal")
        );
    }

    #[test]
    fn refuses_newer_schema() {
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
        assert!(migrate(&mut c).unwrap_err().contains("newer distributor"));
    }
}
