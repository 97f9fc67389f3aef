//! Journal hardening (SPEC §7): append-only enforced by triggers, migrations recorded, a
//! newer schema, a corrupt, unreadable or foreign journal refused with a clear error and no
//! destination write, and several processes sharing one journal.

use crate::common::Env;
use rusqlite::Connection;
use std::path::PathBuf;

/// A config and a bundle, nothing published and no journal yet.
fn unpublished() -> (Env, PathBuf, PathBuf) {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    (env, cfg, b)
}

fn published() -> (Env, PathBuf, PathBuf) {
    let (env, cfg, b) = unpublished();
    env.publish(&cfg, &b, &[]).expect_code(0);
    let b2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "two")],
        &[],
    );
    (env, cfg, b2)
}

#[test]
fn update_and_delete_are_refused_by_triggers() {
    let (env, _, _) = published();
    let c = Connection::open(env.journal()).unwrap();
    for table in [
        "journal_operations",
        "journal_action_sets",
        "journal_action_rows",
        "journal_action_kinds",
        "journal_events",
        "journal_placement_sets",
    ] {
        let n: i64 = c
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert!(n > 0, "{table} is empty: the trigger would prove nothing");
        let col = match table {
            "journal_operations" => "actor",
            "journal_action_rows" => "path",
            "journal_action_kinds" => "kind",
            _ => "operation_id",
        };
        let e = c
            .execute(&format!("UPDATE {table} SET {col} = 'x'"), [])
            .unwrap_err();
        assert!(e.to_string().contains("append-only"), "{table}: {e}");
        let e = c.execute(&format!("DELETE FROM {table}"), []).unwrap_err();
        assert!(e.to_string().contains("append-only"), "{table}: {e}");
    }
    let status: String = c
        .query_row("SELECT status FROM operations", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "applied");
}

/// INSERT OR REPLACE (and an upsert) deletes the row it collides with without firing a
/// DELETE trigger: schema 4 refuses any insert whose key is taken, so no row is rewritten.
#[test]
fn insert_or_replace_cannot_rewrite_a_row() {
    let (env, _, _) = published();
    let c = Connection::open(env.journal()).unwrap();
    let before: String = c
        .query_row("SELECT status || ' ' || actor FROM operations", [], |r| {
            r.get(0)
        })
        .unwrap();
    for sql in [
        "INSERT OR REPLACE INTO journal_operations SELECT operation_id, started_at, command, 'cli:mallory', pipeline_id, destination_id, bundle_path, state_mode, decision, takeover_mode, previous_owner, previous_source_id, previous_source_created_at, previous_source_digest, source_id, source_created_at, source_digest, pre_state_sha256, post_state_sha256, takeovers_json, plan_json, reason FROM journal_operations",
        "INSERT OR REPLACE INTO journal_events (id, operation_id, at, event, detail) SELECT id, operation_id, at, 'rolled_back', NULL FROM journal_events",
        "INSERT OR REPLACE INTO journal_action_sets SELECT * FROM journal_action_sets",
        "INSERT OR REPLACE INTO journal_action_rows SELECT * FROM journal_action_rows",
        "INSERT OR REPLACE INTO journal_action_kinds SELECT code, 'file_move' FROM journal_action_kinds",
        "INSERT OR REPLACE INTO journal_placement_sets SELECT * FROM journal_placement_sets",
    ] {
        let e = c.execute(sql, []).unwrap_err();
        assert!(e.to_string().contains("append-only"), "{sql}: {e}");
    }
    let after: String = c
        .query_row("SELECT status || ' ' || actor FROM operations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(after, before);
}

#[test]
fn migrations_are_recorded_and_applied_once() {
    let (env, cfg, b2) = published();
    env.publish(&cfg, &b2, &[]).expect_code(0);
    let c = Connection::open(env.journal()).unwrap();
    let rows: Vec<(i64, String)> = c
        .prepare("SELECT version, name FROM schema_migrations ORDER BY version")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<(i64, String)> = distributor::journal::MIGRATIONS
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (i as i64 + 1, n.to_string()))
        .collect();
    assert_eq!(rows, want);
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v as usize, distributor::journal::SCHEMA_VERSION);
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

/// Runs publish, history and recover against a bad journal: each exits 1 naming the
/// journal and `needle`, and the destination is untouched.
fn refused_everywhere(env: &Env, cfg: &std::path::Path, b2: &std::path::Path, needle: &str) {
    let before = env.snapshot("dest");
    let j = env.journal();
    let j = j.to_str().unwrap();
    for args in [
        vec![
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
        ],
        vec!["history"],
        vec!["recover", "--config", cfg.to_str().unwrap()],
    ] {
        let r = env.run(&args);
        r.expect_code(1);
        assert!(
            r.stderr.contains(j) && r.stderr.contains(needle),
            "{args:?}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    assert_eq!(
        env.snapshot("dest"),
        before,
        "a refused journal let a write through"
    );
}

#[test]
fn newer_schema_is_refused() {
    let (env, cfg, b2) = published();
    Connection::open(env.journal())
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    refused_everywhere(&env, &cfg, &b2, "newer distributor (schema 99)");
}

#[test]
fn corrupt_journal_is_refused_before_any_destination_write() {
    let (env, cfg, b) = unpublished();
    std::fs::write(
        env.journal(),
        "this is not an SQLite database\n".repeat(200),
    )
    .unwrap();
    refused_everywhere(&env, &cfg, &b, "not a distributor journal");
    assert!(!env.exists("dest"), "the destination was created");
}

#[test]
fn journal_that_cannot_be_opened_is_refused() {
    let (env, cfg, b) = unpublished();
    std::fs::create_dir_all(env.journal()).unwrap();
    refused_everywhere(&env, &cfg, &b, "journal");
    assert!(!env.exists("dest"), "the destination was created");
}

#[test]
fn foreign_sqlite_database_is_refused_and_left_alone() {
    let (env, cfg, b) = unpublished();
    Connection::open(env.journal())
        .unwrap()
        .execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    refused_everywhere(&env, &cfg, &b, "not a distributor journal");
    let c = Connection::open(env.journal()).unwrap();
    let tables: Vec<String> = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, ["notes"]);
}

/// A foreign database that claims a schema version (PRAGMA user_version is anybody's to
/// set) is refused too, before anything is written to it: not even its journal mode
/// changes (byte 18 of the header stays 1, rollback journal; WAL would make it 2).
#[test]
fn foreign_database_with_a_user_version_is_refused_untouched() {
    let (env, cfg, b) = unpublished();
    Connection::open(env.journal())
        .unwrap()
        .execute_batch(
            "CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine'); PRAGMA user_version = 3;",
        )
        .unwrap();
    let before = std::fs::read(env.journal()).unwrap();
    assert_eq!(before[18], 1);
    refused_everywhere(&env, &cfg, &b, "not a distributor journal");
    assert!(!env.exists("dest"), "the destination was created");
    assert_eq!(std::fs::read(env.journal()).unwrap(), before);
}

/// Eight processes publish to eight destinations at once through one journal that does
/// not exist yet (creating it, switching it to WAL and migrating it concurrently): all
/// succeed and every operation is recorded applied. Repeated, because the race is in the
/// first moments of a journal's life.
#[test]
fn several_processes_share_one_journal() {
    let env = Env::new();
    // Everything is prepared first so the eight processes really start together.
    let jobs: Vec<(PathBuf, PathBuf)> = (0..8)
        .map(|i| {
            let cfg = env.simple_config(
                &format!("c{i}.yaml"),
                &format!("p{i}"),
                "latest",
                &format!("dest/{i}"),
                "",
            );
            let b = env.bundle(
                &format!("b{i}"),
                "tomorrow",
                "2026-12-02T06:00:00Z",
                &[("a.txt", "one"), ("b/c.txt", "two")],
                &[],
            );
            (cfg, b)
        })
        .collect();
    for round in 0..3 {
        let journal = env.path(&format!("journal-{round}.sqlite3"));
        let _ = std::fs::remove_dir_all(env.path("dest"));
        let children: Vec<std::process::Child> = jobs
            .iter()
            .map(|(cfg, b)| {
                std::process::Command::new(env!("CARGO_BIN_EXE_distributor"))
                    .args(["publish", "--config"])
                    .arg(cfg)
                    .arg("--source")
                    .arg(b)
                    .env_clear()
                    .env("HOME", env.path("home"))
                    .env("DISTRIBUTOR_JOURNAL", &journal)
                    .output_async()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let h = env.run(&[
            "history",
            "--json",
            "--status",
            "applied",
            "--journal",
            journal.to_str().unwrap(),
        ]);
        h.expect_code(0);
        let ops = h.json()["operations"].as_array().unwrap().clone();
        let mut pipelines: Vec<&str> = ops
            .iter()
            .map(|o| o["pipeline_id"].as_str().unwrap())
            .collect();
        pipelines.sort();
        assert_eq!(
            pipelines,
            ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"],
            "round {round}"
        );
    }
}

trait Spawn {
    fn output_async(&mut self) -> std::process::Child;
}

impl Spawn for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}
