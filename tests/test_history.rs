//! `distributor history` (SPEC §9): newest first, every filter, `history show` with events
//! and actions, and `--action replace_takeover` as the audit of past takeovers (mode,
//! previous owner and source, new source, paths that changed hands, actor, time), also
//! through the documented `takeovers` view.

use crate::common::{Env, Run};
use serde_json::Value;

fn history(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut a = vec!["history", "--json"];
    a.extend_from_slice(args);
    let r = env.run(&a);
    r.expect_code(0);
    r.json()["operations"].as_array().unwrap().clone()
}

fn ids(ops: &[Value]) -> Vec<String> {
    ops.iter()
        .map(|o| o["operation_id"].as_str().unwrap().to_string())
        .collect()
}

fn op_id(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

/// Five operations over two pipelines and three destinations, one of them failed.
fn five_operations() -> (Env, Vec<String>) {
    let env = Env::new();
    let wl = env.simple_config("wl.yaml", "weather", "latest", "dest/wl", "");
    let wo = env.simple_config("wo.yaml", "weather", "other", "dest/wo", "");
    let nl = env.simple_config("nl.yaml", "news", "latest", "dest/nl", "");
    let v1 = env.bundle(
        "v1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let v2 = env.bundle(
        "v2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "2")],
        &[],
    );
    let v3 = env.bundle(
        "v3",
        "tomorrow",
        "2026-12-02T08:00:00Z",
        &[("a.txt", "3")],
        &[],
    );
    let mut ids = vec![
        op_id(env.publish(&wl, &v1, &[]).expect_code(0)),
        op_id(env.publish(&nl, &v1, &[]).expect_code(0)),
        op_id(env.publish(&wl, &v2, &[]).expect_code(0)),
        op_id(env.publish(&wo, &v1, &[]).expect_code(0)),
    ];
    let failed = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            wl.to_str().unwrap(),
            "--source",
            v3.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "io_state_rename=error")],
    );
    failed.expect_code(1);
    // A failed operation's id is in the journal, not in the report: the newest one.
    let all = history(&env, &[]);
    ids.push(all[0]["operation_id"].as_str().unwrap().to_string());
    (env, ids)
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn lists_newest_first_and_filters() {
    let (env, ops) = five_operations();
    let newest_first: Vec<String> = ops.iter().rev().cloned().collect();
    let all = history(&env, &[]);
    assert_eq!(ids(&all), newest_first);
    let row = |i: usize| {
        let o = &all[4 - i];
        (
            o["pipeline_id"].as_str().unwrap().to_string(),
            o["destination_id"].as_str().unwrap().to_string(),
            o["decision"].as_str().unwrap().to_string(),
            o["status"].as_str().unwrap().to_string(),
        )
    };
    let want = [
        ("weather", "latest", "create", "applied"),
        ("news", "latest", "create", "applied"),
        ("weather", "latest", "replace_older", "applied"),
        ("weather", "other", "create", "applied"),
        ("weather", "latest", "replace_older", "failed"),
    ];
    for (i, w) in want.iter().enumerate() {
        let r = row(i);
        assert_eq!(
            (r.0.as_str(), r.1.as_str(), r.2.as_str(), r.3.as_str()),
            *w,
            "operation {i}"
        );
    }
    assert_eq!(all[0]["source"]["id"], "tomorrow");
    assert_eq!(all[0]["actor"], "cli:tester");

    let pick = |idx: &[usize]| -> Vec<String> { idx.iter().map(|&i| ops[i].clone()).collect() };
    assert_eq!(
        ids(&history(&env, &["--pipeline", "weather"])),
        pick(&[4, 3, 2, 0])
    );
    assert_eq!(
        ids(&history(&env, &["--destination", "latest"])),
        pick(&[4, 2, 1, 0])
    );
    assert_eq!(
        ids(&history(
            &env,
            &["--pipeline", "weather", "--destination", "latest"]
        )),
        pick(&[4, 2, 0])
    );
    assert_eq!(
        ids(&history(&env, &["--action", "replace_older"])),
        pick(&[4, 2])
    );
    assert_eq!(ids(&history(&env, &["--status", "failed"])), pick(&[4]));
    assert_eq!(
        ids(&history(&env, &["--status", "applied", "--limit", "2"])),
        pick(&[3, 2])
    );
    let t2 = all[2]["started_at"].as_str().unwrap().to_string();
    assert_eq!(ids(&history(&env, &["--since", &t2])), pick(&[4, 3, 2]));
    assert_eq!(ids(&history(&env, &["--until", &t2])), pick(&[1, 0]));
    assert_eq!(
        ids(&history(&env, &["--since", "2999-01-01"])),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(&history(&env, &["--until", "2000-01-01T00:00:00+02:00"])),
        Vec::<String>::new()
    );

    let text = env.run(&["history"]);
    text.expect_code(0);
    let first = text.stdout.lines().next().unwrap();
    for needle in [
        ops[4].as_str(),
        "weather/latest",
        "replace_older",
        "failed",
        "source tomorrow",
    ] {
        assert!(first.contains(needle), "'{needle}' not in: {first}");
    }
    assert_eq!(text.stdout.lines().count(), 5, "{}", text.stdout);
}

#[test]
fn bad_filters_are_usage_errors() {
    let env = Env::new();
    for (args, needle) in [
        (
            vec!["history", "--status", "done"],
            "in_progress, committed, applied",
        ),
        (vec!["history", "--action", "takeover"], "replace_takeover"),
        (vec!["history", "--since", "yesterday"], "RFC 3339"),
        (vec!["history", "--limit", "many"], "--limit"),
        (
            vec!["history", "show", "zz-not-an-id"],
            "not an operation id",
        ),
    ] {
        let r = env.run(&args);
        r.expect_code(2);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn show_has_events_and_actions_and_accepts_a_unique_prefix() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let v1 = env.bundle(
        "v1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one"), ("gone.txt", "x")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "v2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "two"), ("b.txt", "new")],
        &[("l", "b.txt")],
    );
    let op = op_id(env.publish(&cfg, &v2, &[]).expect_code(0));
    let r = env.run(&["history", "show", &op[..8], "--json"]);
    r.expect_code(0);
    let d = r.json();
    assert_eq!(d["operation_id"], op.as_str());
    assert_eq!(d["status"], "applied");
    assert_eq!(d["previous"]["owner"], "weather/latest");
    assert_eq!(
        d["previous"]["source"]["created_at"],
        "2026-12-02T06:00:00Z"
    );
    let events: Vec<&str> = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        ["staged", "moved_aside", "placed", "committed", "completed"]
    );
    let actions: Vec<(&str, &str)> = d["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["kind"].as_str().unwrap(), a["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [
            ("file_overwrite", "a.txt"),
            ("file_create", "b.txt"),
            ("file_delete", "gone.txt"),
            ("link_create", "l")
        ]
    );
    let text = env.run(&["history", "show", &op]);
    text.expect_code(0);
    for needle in [
        "decision     replace_older, status applied",
        "file_create b.txt",
        "link_create l -> b.txt",
        "completed",
    ] {
        assert!(
            text.stdout.contains(needle),
            "'{needle}' not in:\n{}",
            text.stdout
        );
    }
    let missing = env.run(&["history", "show", "0000aaaa"]);
    missing.expect_code(1);
    assert!(
        missing.stderr.contains("no operation 0000aaaa"),
        "{}",
        missing.stderr
    );
}

/// `--action replace_takeover`: who took what from whom, under which mode, and when; the
/// same rows through the documented `takeovers` view.
#[test]
fn takeover_audit() {
    let env = Env::new();
    let old = env.simple_config("old.yaml", "weather", "old", "dest", "");
    let new = env.simple_config("new.yaml", "weather", "new", "dest", "");
    let s1 = env.bundle(
        "s1",
        "run-1",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1"), ("b.txt", "1")],
        &[],
    );
    let s2 = env.bundle(
        "s2",
        "run-2",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "2")],
        &[],
    );
    env.publish(&old, &s1, &[]).expect_code(0);
    let r = env.publish(&new, &s2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_takeover");
    let op = op_id(&r);

    let audit = history(&env, &["--action", "replace_takeover"]);
    assert_eq!(ids(&audit), std::slice::from_ref(&op));
    let t = &audit[0];
    assert_eq!(t["takeover_mode"], "same_pipeline");
    assert_eq!(t["previous"]["owner"], "weather/old");
    assert_eq!(t["previous"]["source"]["id"], "run-1");
    assert_eq!(t["source"]["id"], "run-2");
    assert_eq!(t["pipeline_id"], "weather");
    assert_eq!(t["destination_id"], "new");
    assert_eq!(t["actor"], "cli:tester");
    assert!(t["started_at"].as_str().unwrap().starts_with("20"));
    assert_eq!(t["takeovers"][0]["from_owner"], "weather/old");
    assert_eq!(t["takeovers"][0]["from_source_id"], "run-1");

    let text = env.run(&["history", "--action", "replace_takeover"]);
    text.expect_code(0);
    for needle in [
        op.as_str(),
        "takeover.mode same_pipeline",
        "by cli:tester",
        "previous: weather/old source run-1",
        "new: weather/new source run-2",
        "takeover from weather/old (another owner, source run-1): 1 path(s)",
    ] {
        assert!(
            text.stdout.contains(needle),
            "'{needle}' not in:\n{}",
            text.stdout
        );
    }

    let c = rusqlite::Connection::open(env.journal()).unwrap();
    let row: (String, String, String, String, String, String) = c
        .query_row(
            "SELECT operation_id, takeover_mode, from_owner, from_source_id, new_source_id, actor FROM takeovers",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            op,
            "same_pipeline".into(),
            "weather/old".into(),
            "run-1".into(),
            "run-2".into(),
            "cli:tester".into()
        )
    );
}

/// Shared root: the paths taken from another owner are listed per owner.
#[test]
fn shared_root_takeover_lists_the_paths_that_changed_hands() {
    let env = Env::new();
    let sr = "    state:\n      mode: shared_root\n";
    let a = env.simple_config("a.yaml", "weather", "a", "dest", sr);
    let b = env.simple_config("b.yaml", "weather", "b", "dest", sr);
    let s1 = env.bundle(
        "s1",
        "one",
        "2026-12-02T06:00:00Z",
        &[("x/1.txt", "1"), ("x/2.txt", "2"), ("keep.txt", "k")],
        &[],
    );
    let s2 = env.bundle(
        "s2",
        "two",
        "2026-12-02T07:00:00Z",
        &[("x/1.txt", "new"), ("x/2.txt", "new")],
        &[],
    );
    env.publish(&a, &s1, &[]).expect_code(0);
    env.publish(&b, &s2, &[]).expect_code(0);
    let audit = history(&env, &["--action", "replace_takeover"]);
    assert_eq!(audit.len(), 1);
    assert_eq!(
        audit[0]["takeovers"],
        serde_json::json!([{"from_owner": "weather/a", "from_source_id": "one", "cross_owner": true, "paths": ["x/1.txt", "x/2.txt"]}])
    );
    assert_eq!(
        audit[0]["previous"],
        Value::Null,
        "b had no record of its own"
    );
}

#[test]
fn no_journal_means_no_history_and_none_is_created() {
    let env = Env::new();
    let r = env.run(&["history"]);
    r.expect_code(0);
    assert!(r.stdout.contains("no operations"), "{}", r.stdout);
    assert!(!env.journal().exists());
}

/// `--config F` finds the journal through `journal.path`.
#[test]
fn config_locates_the_journal() {
    let env = Env::new();
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\njournal:\n  path: ./state/j.sqlite3\ndestinations:\n  - id: latest\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    let v1 = env.bundle(
        "v1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let args = [
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        v1.to_str().unwrap(),
    ];
    env.run_env_without_journal(&args, &[]).expect_code(0);
    let r = env.run_env_without_journal(
        &["history", "--json", "--config", cfg.to_str().unwrap()],
        &[],
    );
    r.expect_code(0);
    assert_eq!(r.json()["operations"].as_array().unwrap().len(), 1);
    assert!(
        r.json()["journal"]
            .as_str()
            .unwrap()
            .ends_with("state/j.sqlite3")
    );
}

/// Every ```sql example in docs/integrations/journal.md runs against a real journal, and
/// the takeover audit query finds the takeover.
#[test]
fn documented_queries_run() {
    let env = Env::new();
    let old = env.simple_config("old.yaml", "weather", "old", "dest", "");
    let new = env.simple_config("new.yaml", "weather", "new", "dest", "");
    let s1 = env.bundle(
        "s1",
        "run-1",
        "2026-12-02T06:00:00Z",
        &[("forecast.json", "1")],
        &[],
    );
    let s2 = env.bundle(
        "s2",
        "run-2",
        "2026-12-02T07:00:00Z",
        &[("forecast.json", "2")],
        &[],
    );
    env.publish(&old, &s1, &[]).expect_code(0);
    env.publish(&new, &s2, &[]).expect_code(0);
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/integrations/journal.md"
    ))
    .unwrap();
    let queries: Vec<&str> = page
        .split("```sql\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(queries.len() >= 5, "{} sql examples", queries.len());
    let c = rusqlite::Connection::open(env.journal()).unwrap();
    // The examples name the documented bundle path; here it is the env's.
    let dest = env.path("dest").to_str().unwrap().to_string();
    let queries: Vec<String> = (queries.iter())
        .map(|q| q.replace("/srv/reports/weather/latest", &dest))
        .collect();
    for (i, q) in queries.iter().enumerate() {
        let mut stmt = c
            .prepare(q)
            .unwrap_or_else(|e| panic!("query {i} does not prepare: {e}\n{q}"));
        let n = stmt.column_count();
        let rows: Vec<Vec<rusqlite::types::Value>> = stmt
            .query_map([], |r| (0..n).map(|j| r.get(j)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("query {i} fails: {e}\n{q}"));
        if q.contains("FROM takeovers") {
            assert_eq!(rows.len(), 1, "{q}");
        }
        if q.contains("a.path = 'forecast.json'") {
            assert_eq!(rows.len(), 1, "{q}");
        }
    }
}

/// An upload through `distributor serve` is audited with the upload token's name.
#[test]
fn uploads_are_audited_with_the_token_name() {
    use crate::common::server::{Server, bundle_tar, weather_and_traffic};
    let env = Env::new();
    let (w, _) = weather_and_traffic(&env);
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let server = Server::start(&env, &[&w], &[]);
    server.upload("weather", "", &bundle_tar(&b)).expect(200);
    drop(server);
    let ops = history(&env, &["--pipeline", "weather"]);
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["actor"], "token:forecast-job");
    assert_eq!(ops[0]["status"], "applied");
}

/// A newline in the actor could forge a line of `history`: it is refused before anything
/// is written (it used to be escaped), naming the variable it came from.
#[test]
fn a_control_character_in_the_actor_is_refused_so_it_cannot_forge_a_history_line() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    let r = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_ACTOR", "bob\n2026-01-01T00:00:00Z  forged")],
    );
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("DISTRIBUTOR_ACTOR: holds the control character U+000A at byte 3"),
        "{}",
        r.stderr
    );
    let text = env.run(&["history"]);
    assert!(
        !text.stdout.lines().any(|l| l.starts_with("2026-01-01")),
        "{}",
        text.stdout
    );
    assert!(!env.exists("dest"));
}

/// A forced replacement that takes another owner's paths is a takeover too: the audit
/// (`--action replace_takeover`) lists it, with its decision, `force_replace`.
#[test]
fn takeover_audit_includes_forced_replacements_that_took_paths() {
    let env = Env::new();
    let sr = "    state:\n      mode: shared_root\n";
    let a = env.simple_config("a.yaml", "weather", "a", "dest", sr);
    let t = env.simple_config("t.yaml", "traffic", "t", "dest", sr);
    let s1 = env.bundle(
        "s1",
        "one",
        "2026-12-02T06:00:00Z",
        &[("x.txt", "1"), ("k.txt", "k")],
        &[],
    );
    let s2 = env.bundle("s2", "two", "2026-12-02T07:00:00Z", &[("x.txt", "2")], &[]);
    env.publish(&a, &s1, &[]).expect_code(0);
    // Another pipeline: not permitted by the default same_pipeline, so a conflict...
    env.publish(&t, &s2, &[]).expect_code(3);
    assert!(history(&env, &["--action", "replace_takeover"]).is_empty());
    // ...that --force replaces.
    let r = env.publish(&t, &s2, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    let audit = history(&env, &["--action", "replace_takeover"]);
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["decision"], "force_replace");
    assert_eq!(
        audit[0]["takeovers"],
        serde_json::json!([{"from_owner": "weather/a", "from_source_id": "one", "cross_owner": true, "paths": ["x.txt"]}])
    );
    // The plain decision filter still means the decision.
    assert_eq!(history(&env, &["--action", "force_replace"]).len(), 1);
}

/// SPEC §16: the actor is `--actor`, else DISTRIBUTOR_ACTOR, else the CI's identity, else
/// user@host from the OS; a CI container without $USER never records `unknown`.
#[test]
fn the_actor_is_never_unknown() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let n = std::cell::Cell::new(0);
    let actor_of = |extra: &[&str], vars: &[(&str, &str)]| {
        n.set(n.get() + 1);
        let b = env.bundle(
            "b",
            "tomorrow",
            &format!("2026-12-02T06:{:02}:00Z", n.get()),
            &[("a.txt", "one")],
            &[],
        );
        let mut args = vec![
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        // Without the harness's DISTRIBUTOR_ACTOR and USER: as in a CI container.
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_distributor"));
        cmd.args(&args)
            .env_clear()
            .env("HOME", env.path("home"))
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DISTRIBUTOR_JOURNAL", env.journal());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let h = env.run(&["history", "--json"]);
        h.json()["operations"][0]["actor"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let bare = actor_of(&[], &[]);
    assert!(
        bare.starts_with("cli:") && bare.contains('@') && !bare.contains("unknown"),
        "{bare}"
    );
    assert_eq!(
        actor_of(&[], &[("GITHUB_ACTOR", "octocat"), ("GITHUB_RUN_ID", "99")]),
        "cli:github:octocat run 99"
    );
    assert_eq!(
        actor_of(
            &[],
            &[
                ("GITLAB_USER_LOGIN", "bob"),
                ("CI_JOB_ID", "7"),
                ("USER", "x")
            ]
        ),
        "cli:gitlab:bob job 7"
    );
    assert_eq!(
        actor_of(
            &[],
            &[("DISTRIBUTOR_ACTOR", "deploy"), ("GITHUB_ACTOR", "o")]
        ),
        "cli:deploy"
    );
    assert_eq!(
        actor_of(&["--actor", "alice"], &[("DISTRIBUTOR_ACTOR", "deploy")]),
        "cli:alice"
    );
}

/// A publication refused for its conflicts is an operation (SPEC §16): decision
/// `conflict`, status `refused`, no actions, its conflicts in `history show`, and never
/// unfinished (nothing to recover, nothing pending).
#[test]
fn a_refused_publication_is_journaled_with_its_conflicts() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1"), ("b.txt", "2")],
        &[],
    );
    env.write("dest/a.txt", "hand-made");
    env.write("dest/b.txt", "hand-made");
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(3);
    let id = op_id(&r);
    let ops = history(&env, &[]);
    assert_eq!(ids(&ops), vec![id.clone()]);
    assert_eq!(ops[0]["decision"], "conflict");
    assert_eq!(ops[0]["status"], "refused");
    assert_eq!(ops[0]["actor"], "cli:tester");
    assert_eq!(
        ids(&history(&env, &["--action", "conflict"])),
        vec![id.clone()]
    );
    assert_eq!(
        ids(&history(&env, &["--status", "refused"])),
        vec![id.clone()]
    );
    let show = env.run(&["history", "show", &id, "--json"]);
    show.expect_code(0);
    let d = show.json();
    assert_eq!(d["actions"], serde_json::json!([]));
    let kinds: Vec<(&str, &str)> = (d["conflicts"].as_array().unwrap().iter())
        .map(|c| (c["kind"].as_str().unwrap(), c["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("unmanaged_content", "a.txt"),
            ("unmanaged_content", "b.txt")
        ]
    );
    let events: Vec<&str> = (d["events"].as_array().unwrap().iter())
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["refused"]);
    let text = env.run(&["history", "show", &id]);
    assert!(
        text.stdout
            .contains("conflicts (2):\n    unmanaged_content at a.txt:"),
        "{}",
        text.stdout
    );
    // Finished in its one transaction: nothing to recover, nothing pending.
    let rec = env.run(&["recover", "--json"]);
    rec.expect_code(0);
    assert_eq!(rec.json()["summary"]["operations"], 0);
    env.run(&["status", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    // A dry run journals nothing.
    env.plan(&cfg, &b, &[]).expect_code(3);
    assert_eq!(history(&env, &[]).len(), 1);
}

/// Unknown filter values are errors that list what exists (SPEC §16); `--config F` is
/// that pipeline's history.
#[test]
fn unknown_filter_values_list_what_exists_and_config_is_its_pipeline() {
    let env = Env::new();
    let weather = env.simple_config("w.yaml", "weather", "latest", "dest/w", "");
    let news = env.simple_config("n.yaml", "news", "front", "dest/n", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let w = op_id(&env.publish(&weather, &b, &[]));
    let n = op_id(&env.publish(&news, &b, &[]));
    for (args, needle) in [
        (
            vec!["history", "--pipeline", "wether"],
            "--pipeline wether: no operation of that pipeline in the journal; pipelines there: news, weather",
        ),
        (
            vec!["history", "--destination", "lates"],
            "destinations there: front, latest",
        ),
        (
            vec!["history", "--action", "conflicts"],
            "conflict, rollback",
        ),
        (
            vec!["history", "--journal", "nowhere.sqlite3"],
            "--journal nowhere.sqlite3: no journal there",
        ),
        (
            vec!["history", "--config", "w.yaml", "--pipeline", "news"],
            "is the config of pipeline weather",
        ),
    ] {
        let r = env.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
    }
    assert!(!env.exists("nowhere.sqlite3"));
    // A decision no operation has yet is accepted: an empty answer.
    assert!(history(&env, &["--action", "rollback"]).is_empty());
    assert_eq!(ids(&history(&env, &["--config", "w.yaml"])), [w]);
    assert_eq!(ids(&history(&env, &["--config", "n.yaml"])), [n]);
}
