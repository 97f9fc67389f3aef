//! Tests of the journal: operations, actions and placement fingerprints written and read
//! back.

use super::placements::{LATEST_PLACEMENT_SETS, LATEST_PLACEMENTS};
use super::*;
use crate::backend::Committed;
use crate::backend::types::Fingerprint;
use crate::backend::types::{Fingerprints, Placed};
use crate::clock::now;
use crate::hash::ContentHash;
use rusqlite::params;

fn operation(op: &str, bundle: &str) -> OperationRecord {
    let s = |v: &str| v.to_string();
    OperationRecord {
        operation_id: s(op),
        started_at: now(),
        command: s("publish"),
        actor: s("cli:test"),
        reason: None,
        pipeline_id: s("weather"),
        destination_id: s("latest"),
        bundle_path: s(bundle),
        state_mode: crate::model::StateMode::SingleOwner,
        decision: crate::model::Decision::ReplaceOlder.into(),
        takeover_mode: crate::model::TakeoverMode::SamePipeline,
        previous_owner: None,
        previous_source: None,
        source: crate::model::SourceRef {
            id: s("s"),
            created_at: s("2026-12-02T06:00:00Z"),
            digest: s("d"),
        },
        pre_state_sha256: None,
        post_state_sha256: Some(ContentHash::of(b"post")),
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
            sha256: Some(*sha(*i)),
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
    let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("c", sha(3))]));
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
            sha256: Some(*sha(3)),
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
    // A kind that is not one is refused, and nothing of the operation is written.
    let mut bad = actions.clone();
    bad[1].kind = "link_rename".into();
    let e = j
        .begin_operation(&operation("o4", "/d"), bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("action 1 of o4") && e.contains("unknown kind"),
        "{e}"
    );
    assert_eq!(j.status("o4").unwrap(), None);
}

/// Actions go into `journal_action_rows` many rows a statement: a set of two full
/// statements and a remainder comes back whole and in order, and a bad action in the
/// second statement writes nothing of its operation, not even the first statement's rows.
#[test]
fn actions_many_statements_long_come_back_whole_and_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
    let n = 2 * super::write::ACTION_ROWS_PER_STATEMENT + 45;
    let actions: Vec<ActionRecord<'static>> = (0..n)
        .map(|i| ActionRecord {
            kind: if i % 3 == 2 {
                "link_create"
            } else {
                "file_create"
            }
            .into(),
            path: format!("d{}/f{i}", i % 7).into(),
            size: (i % 3 != 2).then_some(i as u64),
            sha256: (i % 3 != 2).then(|| ContentHash::parse(&format!("{:064x}", i + 1)).unwrap()),
            target: (i % 3 == 2).then(|| format!("d{}", i % 5).into()),
            replaces: (i % 11 == 0).then(|| "file".into()),
        })
        .collect();
    j.begin_operation(&operation("o1", "/d"), actions.clone())
        .unwrap();
    type Row = (
        i64,
        String,
        String,
        Option<i64>,
        Option<String>,
        Option<String>,
    );
    let back: Vec<Row> = j
        .connection()
        .prepare("SELECT seq, kind, path, size, sha256, target FROM journal_actions WHERE operation_id = 'o1' ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let want: Vec<_> = actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            (
                i as i64,
                a.kind.to_string(),
                a.path.to_string(),
                a.size.map(|s| s as i64),
                a.sha256.as_ref().map(|h| h.to_string()),
                a.target.as_ref().map(|t| t.to_string()),
            )
        })
        .collect();
    assert_eq!(back, want);
    let replaces: Vec<Option<String>> = j
        .connection()
        .prepare("SELECT replaces FROM journal_action_rows ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let want: Vec<Option<String>> = actions
        .iter()
        .map(|a| a.replaces.as_ref().map(|r| r.to_string()))
        .collect();
    assert_eq!(replaces, want);
    // The bad action is in the second statement: the first one's rows are not kept.
    let mut bad = actions;
    let at = super::write::ACTION_ROWS_PER_STATEMENT + 3;
    bad[at].kind = "file_rename".into();
    let e = j
        .begin_operation(&operation("o2", "/d"), bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("action {at} of o2")) && e.contains("unknown kind"),
        "{e}"
    );
    assert_eq!(j.status("o2").unwrap(), None);
    let rows: i64 = j
        .connection()
        .query_row("SELECT count(*) FROM journal_action_rows", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, n, "only o1's rows");
}

#[test]
fn only_the_newest_placement_of_a_path_vouches() {
    // `a` was placed with sha-1 (inode 1), then replaced with sha-4 (inode 4): a file
    // matching the old fingerprint is not proof of sha-1 (inode 1 may be reused).
    let tmp = tempfile::tempdir().unwrap();
    let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
    place(&mut j, "o1", "/d", &[("a", 1)]);
    place(&mut j, "o2", "/d", &[("a", 4)]);
    let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
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
        sha256: Some(*sha(1)),
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
    let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
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
    let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([(odd, sha(7))]));
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
    let mut old = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
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
    let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
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
    let mut got = Fingerprints::wanting_all(crate::backend::types::leaked_outputs([("a", sha(1))]));
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

/// The typed record's columns as the journal row holds them: the contract names, each
/// sha256 in lowercase hex, an absent pre-state as NULL, no post-state as the empty text,
/// and a prune's or settings change's one state as both.
#[test]
fn records_are_written_as_their_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
    let row = |j: &Journal, op: &str| {
        j.connection()
            .query_row(
                "SELECT state_mode, decision, takeover_mode, pre_state_sha256, post_state_sha256
                   FROM journal_operations WHERE operation_id = ?1",
                [op],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                },
            )
            .unwrap()
    };
    let post = ContentHash::of(b"post").hex();
    j.begin_operation(&operation("o1", "/d"), []).unwrap();
    assert_eq!(
        row(&j, "o1"),
        (
            "single_owner".into(),
            "replace_older".into(),
            "same_pipeline".into(),
            None,
            post.clone()
        )
    );

    let mut refused = operation("o2", "/d");
    refused.state_mode = crate::model::StateMode::SharedRoot;
    refused.decision = crate::model::Decision::Conflict.into();
    refused.takeover_mode = crate::model::TakeoverMode::Never;
    refused.pre_state_sha256 = Some(*sha(1));
    refused.post_state_sha256 = None;
    j.refused_operation(&refused, "conflicts").unwrap();
    assert_eq!(
        row(&j, "o2"),
        (
            "shared_root".into(),
            "conflict".into(),
            "never".into(),
            Some(sha(1).hex()),
            String::new()
        )
    );

    for (op, decision, state) in [
        ("o3", RecordedDecision::Prune, None),
        ("o4", RecordedDecision::Settings, Some(*sha(2))),
    ] {
        let mut r = operation(op, "/d");
        r.decision = decision;
        r.pre_state_sha256 = state;
        r.post_state_sha256 = state;
        j.finished_operation(&r, &[(Event::Completed, None)], &[])
            .unwrap();
        let text = state.map(|h| h.hex()).unwrap_or_default();
        assert_eq!(
            row(&j, op),
            (
                "single_owner".into(),
                decision.as_str().into(),
                "same_pipeline".into(),
                Some(text.clone()),
                text
            )
        );
    }
}

/// The state file `n` stands for.
fn state_file(n: u64) -> crate::backend::StateFileId {
    crate::backend::StateFileId {
        dev: 1,
        ino: n,
        size: 10,
        mtime_ns: 5,
        ctime_ns: 6,
    }
}

#[test]
fn a_committed_state_reads_back_with_its_state_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let mut j = Journal::open(&tmp.path().join("j.sqlite3")).unwrap();
    let mut op = operation("o1", "/d");
    op.state_mode = crate::model::StateMode::SharedRoot;
    j.begin_operation(&op, []).unwrap();
    j.commit(Committed::passed_writing(state_file(7)), "o1", "/d", &[])
        .unwrap();
    let found = j
        .republishable_state("/d", &state_file(7))
        .unwrap()
        .unwrap();
    assert_eq!(found.state_mode, crate::model::StateMode::SharedRoot);
    assert_eq!(found.pipeline_id, "weather");
    assert_eq!(found.source, op.source);
    assert_eq!(j.republishable_state("/d", &state_file(8)).unwrap(), None);
}

/// A row whose state mode is no name distributor writes (written by hand here) is an error
/// naming the journal, the operation, the column and what it accepts: never a state mode
/// guessed, never a panic.
#[test]
fn an_unknown_state_mode_in_a_row_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("j.sqlite3");
    let mut j = Journal::open(&path).unwrap();
    j.connection()
        .execute(
            "INSERT INTO journal_operations (operation_id, started_at, command, actor, pipeline_id,
               destination_id, bundle_path, state_mode, decision, takeover_mode, source_id,
               source_created_at, source_digest, post_state_sha256, takeovers_json, plan_json)
             VALUES ('o1', '2026-12-02T06:00:00Z', 'publish', 'cli:test', 'weather', 'latest', '/d',
               'everyone', 'create', 'same_pipeline', 's', '2026-12-02T06:00:00Z', 'd', ?1, '[]', '{}')",
            [ContentHash::of(b"post").hex()],
        )
        .unwrap();
    j.commit(Committed::passed_writing(state_file(7)), "o1", "/d", &[])
        .unwrap();
    let e = j
        .republishable_state("/d", &state_file(7))
        .unwrap_err()
        .to_string();
    for want in [
        path.display().to_string().as_str(),
        "operation o1",
        "column state_mode",
        "'everyone'",
        "accepted: single_owner, shared_root",
    ] {
        assert!(e.contains(want), "{e}: lacks {want}");
    }
}
