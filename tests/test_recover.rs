//! `distributor recover` beyond the crash matrix (SPEC §8): diverged state is left alone
//! and explained, dry runs write nothing, staging the journal never saw is found through
//! the config (fixed and mapped paths), and staging entries distributor did not make are
//! reported, never removed.

use crate::common::Env;
use crate::common::faults::{DEST, Mode, Scenario, Side, outcome, snapshot};

fn staged_op(sc: &Scenario) -> String {
    let dir = sc.env.path(&format!("{DEST}/.distributor/staging"));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names.remove(0)
}

fn events(env: &Env, op: &str) -> Vec<String> {
    let r = env.run(&["history", "show", op, "--json"]);
    r.expect_code(0);
    r.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// The state file changed after the crash: recover touches nothing, exits 1 and says
/// what to check; restoring the pre- or post-state copy it points to lets it finish.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn diverged_state_is_left_alone_then_resolved_by_the_operator() {
    for (copy, side) in [
        ("pre-state.json", Side::Before),
        ("post-state.json", Side::After),
    ] {
        let sc = Scenario::new(Mode::SingleOwner);
        sc.crash_publish("after_links");
        let op = staged_op(&sc);
        let state = format!("{DEST}/.distributor.json");
        let edited = sc.env.read(&state).replace("tomorrow", "edited-by-hand");
        sc.env.write(&state, &edited);
        let frozen = snapshot(&sc.env);

        let r = sc.recover_env(&[]);
        r.expect_code(1);
        assert_eq!(outcome(&r), "diverged", "{}", r.stdout);
        let msg = r.json()["operations"][0]["message"]
            .as_str()
            .unwrap()
            .to_string();
        for needle in [
            "Nothing was touched",
            "pre-state.json",
            "post-state.json",
            &op,
        ] {
            assert!(msg.contains(needle), "'{needle}' missing from: {msg}");
        }
        assert_eq!(
            snapshot(&sc.env),
            frozen,
            "diverged recovery touched the destination"
        );
        // Still refused, still diverged, recorded once.
        sc.assert_refused_until_recovered("diverged");
        let text = sc
            .env
            .run(&["recover", "--config", sc.cfg.to_str().unwrap()]);
        text.expect_code(1);
        assert!(text.stdout.contains(": diverged"), "{}", text.stdout);
        assert_eq!(snapshot(&sc.env), frozen);
        let ev = events(&sc.env, &op);
        assert_eq!(ev.iter().filter(|e| *e == "diverged").count(), 1, "{ev:?}");

        // The operator restores the state the message points to.
        let from = sc
            .env
            .read(&format!("{DEST}/.distributor/staging/{op}/{copy}"));
        sc.env.write(&state, &from);
        let r = sc.recover_env(&[]);
        r.expect_code(0);
        sc.assert_recovered(side, copy);
    }
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn dry_run_reports_and_writes_nothing() {
    let sc = Scenario::new(Mode::SingleOwner);
    sc.crash_publish("after_move_aside");
    let op = staged_op(&sc);
    let frozen = snapshot(&sc.env);
    let ev = events(&sc.env, &op);
    let r = sc.env.run(&[
        "recover",
        "--dry-run",
        "--json",
        "--config",
        sc.cfg.to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert_eq!(r.json()["dry_run"], true);
    assert_eq!(outcome(&r), "rolled_back");
    assert_eq!(snapshot(&sc.env), frozen);
    assert_eq!(
        events(&sc.env, &op),
        ev,
        "a dry run appended to the journal"
    );
    let text = sc
        .env
        .run(&["recover", "--dry-run", "--config", sc.cfg.to_str().unwrap()]);
    assert!(
        text.stdout.contains("would be rolled back"),
        "{}",
        text.stdout
    );

    // Without a journal, a dry run does not create one.
    sc.lose_journal();
    let r = sc.env.run(&[
        "recover",
        "--dry-run",
        "--json",
        "--config",
        sc.cfg.to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert_eq!(r.json()["operations"][0]["found_in"], "staging");
    assert!(!sc.env.journal().exists(), "a dry run created the journal");
    assert!(sc.env.staging_left(DEST));
}

/// Staging the journal never saw is invisible without the config, found with it, and the
/// operation is written to this journal before its outcome.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn staging_only_operation_needs_the_config_and_is_adopted() {
    let sc = Scenario::new(Mode::SharedRoot);
    sc.crash_publish("during_placement:3");
    let op = staged_op(&sc);
    sc.lose_journal();
    let bare = sc.env.run(&["recover", "--json"]);
    bare.expect_code(0);
    assert_eq!(bare.json()["operations"], serde_json::json!([]));
    let refused = sc.publish_env(&[]);
    refused.expect_code(4);
    assert!(
        refused.dest(0)["message"].as_str().unwrap().contains(&op),
        "{}",
        refused.stdout
    );
    let r = sc.recover_env(&[]);
    r.expect_code(0);
    assert_eq!(r.json()["operations"][0]["found_in"], "staging");
    assert_eq!(r.json()["operations"][0]["pipeline_id"], "weather");
    sc.assert_recovered(Side::Before, "adopted");
    let show = sc.env.run(&["history", "show", &op, "--json"]).json();
    assert_eq!(show["decision"], "replace_older");
    assert_eq!(show["actor"], "cli:tester");
    assert_eq!(show["status"], "rolled_back");
    assert_eq!(events(&sc.env, &op), ["adopted", "recovered_back"]);
}

/// A mapped destination (`path_mapping: source_id`): recover walks the destination path
/// for staging directories.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn staging_under_a_mapped_destination_is_found() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    path_mapping:\n      mode: source_id\n",
    );
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let before = env.snapshot("dest");
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "two"), ("b/c.txt", "c")],
        &[],
    );
    let args = [
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        v2.to_str().unwrap(),
    ];
    let crashed = env.run_env(&args, &[("DISTRIBUTOR_FAILPOINT", "after_links")]);
    assert_eq!(crashed.code, -1, "{}", crashed.stderr);
    std::fs::remove_file(env.journal()).unwrap();
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let op = &r.json()["operations"][0];
    assert_eq!(op["outcome"], "rolled_back", "{}", r.stdout);
    assert!(
        op["bundle_path"]
            .as_str()
            .unwrap()
            .ends_with("dest/tomorrow")
    );
    assert_eq!(env.snapshot("dest"), before);
}

/// Entries in `.distributor/staging/` that are not an operation distributor staged are
/// reported (exit 1) and left alone; an operation directory that never got its plan is
/// removed, one holding files without a plan is left alone.
#[test]
fn foreign_staging_entries_are_reported_and_left_alone() {
    let sc = Scenario::new(Mode::SingleOwner);
    let staging = format!("{DEST}/.distributor/staging");
    sc.env.write(&format!("{staging}/junk.txt"), "not mine");
    let empty_op = "8b8e3f52-3c7e-4c52-9d0a-2b4e5f6a7b8c";
    std::fs::create_dir_all(sc.env.path(&format!("{staging}/{empty_op}/new"))).unwrap();
    let full_op = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    sc.env.write(
        &format!("{staging}/{full_op}/old/keep.txt"),
        "someone's data",
    );
    crate::common::as_records(&sc.env.path(DEST));
    let r = sc.recover_env(&[]);
    r.expect_code(1);
    let ops = r.json()["operations"].as_array().unwrap().clone();
    let by_id = |id: &str| {
        ops.iter()
            .find(|o| o["operation_id"] == id)
            .unwrap_or_else(|| panic!("{id} not reported: {}", r.stdout))
            .clone()
    };
    assert_eq!(by_id("junk.txt")["outcome"], "failed");
    assert_eq!(by_id(empty_op)["outcome"], "rolled_back");
    assert_eq!(by_id(full_op)["outcome"], "failed");
    assert_eq!(sc.env.read(&format!("{staging}/junk.txt")), "not mine");
    assert_eq!(
        sc.env.read(&format!("{staging}/{full_op}/old/keep.txt")),
        "someone's data"
    );
    assert!(!sc.env.exists(&format!("{staging}/{empty_op}")));
    // Publishing stays refused while staging holds anything.
    sc.publish_env(&[]).expect_code(4);
}

#[test]
fn nothing_to_recover() {
    let env = Env::new();
    let r = env.run(&["recover"]);
    r.expect_code(0);
    assert!(r.stdout.contains("nothing to recover"), "{}", r.stdout);
    assert!(
        !env.journal().exists(),
        "recover created a journal with nothing to record"
    );
}

/// Diverged with nothing left in staging: another journal's publication replaced the state
/// after a crash that staged nothing. The operator ends the operation with `--abandon`,
/// which touches nothing and unblocks publishing.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn diverged_operation_can_be_abandoned() {
    let sc = Scenario::new(Mode::SingleOwner);
    sc.crash_publish("after_links");
    // Somebody edits the state file meanwhile: neither the state before nor after.
    sc.env.write(&format!("{DEST}/.distributor.json"), "{}\n");
    let frozen = snapshot(&sc.env);
    let r = sc.recover_env(&[]);
    r.expect_code(1);
    let op = r.json()["operations"][0].clone();
    assert_eq!(op["outcome"], "diverged");
    let id = op["operation_id"].as_str().unwrap();
    let msg = op["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("distributor recover --abandon {id}")),
        "{msg}"
    );

    // Only a diverged operation can be abandoned; unknown ids are refused.
    let bad = sc.env.run(&["recover", "--abandon", "0123abcd"]);
    bad.expect_code(1);
    assert!(
        bad.stderr.contains("no operation 0123abcd"),
        "{}",
        bad.stderr
    );

    let dry = sc
        .env
        .run(&["recover", "--json", "--dry-run", "--abandon", id]);
    dry.expect_code(0);
    assert_eq!(events(&sc.env, id).last().unwrap(), "diverged");
    let r = sc.env.run(&["recover", "--json", "--abandon", id]);
    r.expect_code(0);
    assert_eq!(outcome(&r), "abandoned");
    assert!(
        r.json()["operations"][0]["message"]
            .as_str()
            .unwrap()
            .contains("remove it by hand"),
        "{}",
        r.stdout
    );
    assert_eq!(snapshot(&sc.env), frozen, "abandon touched the destination");
    let h = sc.env.run(&["history", "--json", "--status", "abandoned"]);
    assert_eq!(h.json()["operations"][0]["operation_id"], id);
    let again = sc.env.run(&["recover", "--abandon", id]);
    again.expect_code(1);
    assert!(again.stderr.contains("is abandoned"), "{}", again.stderr);
    // The operator removes the staging by hand, as the message says: nothing is left to
    // recover.
    std::fs::remove_dir_all(sc.env.path(&format!("{DEST}/.distributor/staging"))).unwrap();
    let r = sc.recover_env(&[]);
    r.expect_code(0);
    assert_eq!(
        r.json()["operations"],
        serde_json::json!([]),
        "{}",
        r.stdout
    );
}

/// SPEC §13: a publisher killed after its journal row but before its staging record
/// existed, then another host (another journal) publishes: the operation is `closed`
/// (`not applied`), touching nothing, never `diverged`.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn an_operation_that_never_reached_the_destination_is_closed_not_diverged() {
    let sc = Scenario::new(Mode::SingleOwner);
    sc.crash_publish("after_journal_append");
    let other = sc.env.path("other-journal.sqlite3");
    let args = [
        "publish",
        "--config",
        sc.cfg.to_str().unwrap(),
        "--source",
        sc.v2.to_str().unwrap(),
        "--journal",
        other.to_str().unwrap(),
    ];
    sc.env.run(&args).expect_code(0);
    let frozen = snapshot(&sc.env);
    sc.assert_refused_until_recovered("closed, v2 published by another host");
    let r = sc.recover_env(&[]);
    r.expect_code(0);
    let op = r.json()["operations"][0].clone();
    assert_eq!(op["outcome"], "closed", "{}", r.stdout);
    assert!(
        op["message"].as_str().unwrap().starts_with("not applied"),
        "{op}"
    );
    assert_eq!(r.json()["summary"]["closed"], 1);
    assert_eq!(snapshot(&sc.env), frozen, "closing touched the destination");
    let id = op["operation_id"].as_str().unwrap();
    assert_eq!(events(&sc.env, id).last().unwrap(), "closed");
    let h = sc.env.run(&["history", "--json", "--status", "closed"]);
    assert_eq!(h.json()["operations"][0]["operation_id"], id);
    // Nothing is left: publishing works, and v2 is already there.
    let p = sc.publish_env(&[]);
    p.expect_code(0);
    assert_eq!(p.decision(), "unchanged");
    let again = sc.recover_env(&[]);
    again.expect_code(0);
    assert_eq!(again.json()["operations"], serde_json::json!([]));
}

/// A forged `plan.json`: an operation on `bundle` whose actions reach outside it.
fn forged_plan(op: &str, bundle: &std::path::Path, victim_sha: &str) -> String {
    serde_json::json!({
        "operation_id": op,
        "destination_id": "latest",
        "bundle_path": bundle,
        "pre_state_sha256": null,
        "post_state_sha256": "0".repeat(64),
        "origin": {
            "started_at": "2020-01-01T00:00:00.000Z", "command": "publish",
            "actor": "cli:someone-else", "pipeline_id": "forged", "state_mode": "single_owner",
            "decision": "create", "takeover_mode": "same_pipeline",
            "previous_owner": null, "previous_source": null,
            "source": {"id": "x", "created_at": "2020-01-01T00:00:00Z", "digest": "sha256:0"},
            "takeovers": []
        },
        "actions": [
            {"kind": "file_create", "path": "../../../victims/victim.txt", "size": 6, "sha256": victim_sha},
            {"kind": "file_delete", "path": "../../../victims/planted.txt", "size": 1, "sha256": "0".repeat(64)}
        ],
        "new_dirs": [],
        "staging_layout": "flat"
    })
    .to_string()
}

/// Published content may hold anything, a directory named `.distributor/staging` holding a
/// forged plan too. `recover --config` never takes it for an operation (the walk for
/// staging stops at bundle paths), and a forged plan in a real staging directory is
/// refused for its unsafe paths: nothing outside the bundle path is ever touched.
#[test]
fn forged_staging_never_makes_recover_touch_anything_outside() {
    let env = Env::new();
    env.write("victims/victim.txt", "victim");
    let victim_sha = distributor::hash::sha256_hex(b"victim");
    let op = "11111111-2222-4333-8444-555555555555";
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    path_mapping:\n      mode: source_id\n",
    );
    let plan = forged_plan(op, &env.path("dest/evil/sub"), &victim_sha);
    let evil = env.bundle(
        "evil",
        "evil",
        "2026-12-02T06:00:00Z",
        &[
            ("readme.txt", "hello"),
            (&format!("sub/.distributor/staging/{op}/plan.json"), &plan),
            (
                &format!("sub/.distributor/staging/{op}/old/1"),
                "planted by producer",
            ),
        ],
        &[],
    );
    env.publish(&cfg, &evil, &[]).expect_code(0);
    let published = env.snapshot("dest");
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert_eq!(
        r.json()["operations"],
        serde_json::json!([]),
        "{}",
        r.stdout
    );
    assert_eq!(env.snapshot("dest"), published);
    assert_eq!(env.read("victims/victim.txt"), "victim");
    assert!(!env.exists("victims/planted.txt"));

    // The same plan in a real staging directory of a fixed destination.
    let fixed = env.simple_config("f.yaml", "weather", "latest", "fixed/out", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    env.publish(&fixed, &b, &[]).expect_code(0);
    env.write(
        &format!("fixed/out/.distributor/staging/{op}/plan.json"),
        &forged_plan(op, &env.path("fixed/out"), &victim_sha),
    );
    env.write(
        &format!("fixed/out/.distributor/staging/{op}/old/1"),
        "planted",
    );
    crate::common::as_records(&env.path("fixed/out"));
    let r = env.run(&["recover", "--json", "--config", fixed.to_str().unwrap()]);
    r.expect_code(1);
    let o = &r.json()["operations"][0];
    assert_eq!(o["outcome"], "failed", "{}", r.stdout);
    assert!(
        o["message"].as_str().unwrap().contains("not a safe path"),
        "{}",
        r.stdout
    );
    assert_eq!(env.read("victims/victim.txt"), "victim");
    assert!(!env.exists("victims/planted.txt"));
    assert_eq!(env.read("fixed/out/a.txt"), "one");
}

/// A releases operation diverged (its `path` names neither the release it activates nor
/// the one active before): the advice points at its staging in `releases.dir`, not under
/// `path`, and says to point `path` back, never to write a state file into a release.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_diverged_releases_operation_is_explained_in_releases_terms() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "www/latest",
        "    releases:\n      dir: www/.latest.releases\n",
    );
    let cfg_s = cfg.to_str().unwrap();
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "two")],
        &[],
    );
    let crashed = env.run_env(
        &[
            "publish",
            "--config",
            cfg_s,
            "--source",
            v2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_staging_record")],
    );
    assert_ne!(crashed.code, 0);
    // Somebody removes `path` meanwhile: neither the release before nor the new one.
    std::fs::remove_file(env.path("www/latest")).unwrap();
    let r = env.run(&["recover", "--json", "--config", cfg_s]);
    r.expect_code(1);
    let o = &r.json()["operations"][0];
    assert_eq!(o["outcome"], "diverged", "{}", r.stdout);
    let msg = o["message"].as_str().unwrap();
    let staging = env.path("www/.latest.releases/.distributor/staging");
    assert!(msg.contains(&staging.display().to_string()), "{msg}");
    assert!(!msg.contains("www/latest/.distributor"), "{msg}");
    assert!(
        msg.contains("Never copy a state file into a release"),
        "{msg}"
    );
    assert!(!msg.contains("pre-state.json over"), "{msg}");
}
