//! Stage then promote (SPEC §19): `publish --stage` builds and verifies a complete
//! release without activating it, logs it (command `stage`) and ends its operation
//! `held_for_promote`; a kill at every step of a stage is recovered with `path` never
//! moved.

use crate::common::faults::assert_aborted;
use crate::common::{Env, Run};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const PATH: &str = "www/latest";
const DIR: &str = "www/.latest.releases";

fn config(env: &Env, releases: &str) -> PathBuf {
    let extra = format!("    releases:\n{releases}");
    env.simple_config("c.yaml", "weather", "latest", PATH, &extra)
}

/// The release `path` names.
fn active(env: &Env) -> String {
    let t = std::fs::read_link(env.path(PATH)).expect("path is a symlink");
    t.to_str()
        .unwrap()
        .strip_prefix(".latest.releases/")
        .unwrap()
        .to_string()
}

/// The release directories in `releases.dir`.
fn releases(env: &Env) -> BTreeSet<String> {
    match std::fs::read_dir(env.path(DIR)) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

fn site(env: &Env, i: usize) -> PathBuf {
    let v = format!("version {i}");
    let extra = format!("only-in-{i}.html");
    env.bundle(
        &format!("site{i}"),
        "site",
        &format!("2026-12-02T0{i}:00:00Z"),
        &[
            ("index.html", v.as_str()),
            ("same.css", "same"),
            (extra.as_str(), v.as_str()),
        ],
        &[],
    )
}

fn op_of(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

fn stage(env: &Env, cfg: &Path, bundle: &Path) -> Run {
    env.publish(cfg, bundle, &["--stage"])
}

/// The journal's status of operation `op`, as `history` shows it.
fn status_of(env: &Env, op: &str) -> String {
    let r = env.run(&["history", "show", "--json", op]);
    r.expect_code(0);
    let v = r.json();
    v["status"]
        .as_str()
        .or_else(|| v["operation"]["status"].as_str())
        .unwrap_or_else(|| panic!("{}", r.stdout))
        .to_string()
}

fn log_entries(env: &Env) -> Vec<Value> {
    crate::test_releases::logged(env, DIR)
}

#[test]
fn stage_builds_a_release_without_activating_it() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n");
    let r = env.publish(&cfg, &site(&env, 1), &[]);
    r.expect_code(0);
    let first = op_of(&r);
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(0);
    let d = r.dest(0);
    assert_eq!(d["status"], "staged", "{}", r.stdout);
    assert_eq!(d["decision"], "replace_older");
    assert_eq!(r.json()["summary"]["staged"], 1);
    let staged = op_of(&r);
    // Readers still see the first release; the staged one is complete beside it.
    assert_eq!(active(&env), first);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 1");
    assert_eq!(env.read(&format!("{DIR}/{staged}/index.html")), "version 2");
    assert!(env.exists(&format!("{DIR}/{staged}/.distributor.json")));
    assert!(!env.staging_left(DIR));
    // Logged as a stage against the active release; journaled `staged`.
    let log = log_entries(&env);
    let last = log.last().unwrap();
    assert_eq!(last["command"], "stage");
    assert_eq!(last["operation_id"], staged.as_str());
    assert_eq!(last["release_staged"], staged.as_str());
    assert_eq!(last["staged_against"], first.as_str());
    assert!(last.get("release_activated").is_none(), "{last}");
    assert_eq!(status_of(&env, &staged), "staged");
    // Nothing is pending, and the destination verifies as the first release.
    env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    // The text report says so.
    let r = env.run(&[
        "publish",
        "--stage",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        site(&env, 3).to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert!(r.stdout.contains("[staged]"), "{}", r.stdout);
    assert!(r.stdout.contains("distributor promote"), "{}", r.stdout);
}

/// A stage hard-links the active release's files into its own, which changes their
/// ctimes (SPEC §13): their fingerprints are taken again when the stage is held, so the
/// next publication of the same files proves each one by its fingerprint, hashing none.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn after_a_stage_the_active_files_are_still_proven_by_their_fingerprints() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n");
    let files = |at: &str, name: &str| {
        env.bundle(
            name,
            "site",
            at,
            &[("index.html", "version 1"), ("same.css", "same")],
            &[],
        )
    };
    env.publish(&cfg, &files("2026-12-02T01:00:00Z", "a"), &[])
        .expect_code(0);
    stage(&env, &cfg, &site(&env, 2)).expect_code(0);
    // Any hash of a destination file reaches the probe_hash failpoint, which aborts.
    let b = files("2026-12-02T03:00:00Z", "b");
    let r = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "probe_hash")],
    );
    r.expect_code(0);
    assert_eq!(r.dest(0)["decision"], "replace_older", "{}", r.stdout);
}

#[test]
fn stage_on_a_destination_without_releases_is_a_usage_error() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "plain", "plain", "");
    let r = stage(&env, &cfg, &site(&env, 1));
    r.expect_code(2);
    assert!(r.stderr.contains("--stage"), "{}", r.stderr);
    assert!(!env.exists("plain"), "nothing written");
}

/// The failpoints of a stage, and whether recovery keeps its release (past its commit
/// point, the state file made durable) or removes it.
const STAGE_CRASHES: &[(&str, bool)] = &[
    ("after_journal_append", false),
    ("before_staging_record", false),
    ("after_staging_record", false),
    ("during_carry_over", false),
    ("during_staging", false),
    ("after_staging", false),
    ("during_placement:2", false),
    ("after_placement", false),
    // The state file is whole (it was written last): the release is complete.
    ("io_state_fsync", true),
    ("after_journal_commit", true),
    ("during_cleanup", true),
    ("io_remove_staging", true),
    ("before_held_for_promote", true),
];

/// A kill at every step of a stage: `path` never moves, recover keeps the release (logged
/// as staged, journaled `staged`) or removes it, and a later stage works.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_crash_at_every_step_of_a_stage_is_recovered() {
    for &(spec, kept) in STAGE_CRASHES {
        let env = Env::new();
        let cfg = config(&env, "      keep: 3\n");
        let r = env.publish(&cfg, &site(&env, 1), &[]);
        r.expect_code(0);
        let first = op_of(&r);
        let before = releases(&env);
        let b2 = site(&env, 2);
        let r = env.run_env(
            &[
                "publish",
                "--stage",
                "--json",
                "--config",
                cfg.to_str().unwrap(),
                "--source",
                b2.to_str().unwrap(),
            ],
            &[("DISTRIBUTOR_FAILPOINT", spec)],
        );
        assert_aborted(&r, spec);
        assert_eq!(active(&env), first, "{spec}: path moved");
        let rec = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
        rec.expect_code(0);
        assert_eq!(active(&env), first, "{spec}: path moved");
        assert!(!env.staging_left(DIR), "{spec}: {}", rec.stdout);
        let new: Vec<String> = releases(&env).difference(&before).cloned().collect();
        if kept {
            assert_eq!(new.len(), 1, "{spec}: {}", rec.stdout);
            let log = log_entries(&env);
            assert!(
                log.iter()
                    .any(|e| e["command"] == "stage" && e["release_staged"] == new[0].as_str()),
                "{spec}: {log:?}"
            );
            assert_eq!(status_of(&env, &new[0]), "staged", "{spec}: {}", rec.stdout);
        } else {
            assert!(new.is_empty(), "{spec}: {new:?} {}", rec.stdout);
            assert!(
                !log_entries(&env).iter().any(|e| e["command"] == "stage"),
                "{spec}"
            );
        }
        env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
            .expect_code(0);
        // Staging works again.
        stage(&env, &cfg, &site(&env, 3)).expect_code(0);
    }
}

/// `status` lists a staged release; retention keeps it while it is younger than
/// `stage_max_age` and removes it, never promoted, once older; a staged release never
/// counts as an activation for `keep`.
#[test]
fn retention_removes_a_staged_release_older_than_stage_max_age_only() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 0\n      stage_max_age: 2s\n");
    let r = env.publish(&cfg, &site(&env, 1), &[]);
    r.expect_code(0);
    let first = op_of(&r);
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(0);
    let staged = op_of(&r);
    let r = env.run(&["status", "--config", cfg.to_str().unwrap()]);
    assert!(
        r.stdout.contains(&format!("release {staged}: staged ")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("not promoted yet"), "{}", r.stdout);
    let r = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    let listed = r.stdout.contains("\"staged_at\"");
    assert!(listed, "{}", r.stdout);
    // Young: prune keeps it.
    let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert!(env.exists(&format!("{DIR}/{staged}")), "{}", r.stdout);
    // Wait until it is older than stage_max_age, as the clock shows it (no fixed sleep:
    // poll the dry run's verdict).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = env.run(&[
            "prune",
            "--dry-run",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ]);
        if r.stdout.contains("longer than stage_max_age") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.stdout);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Another staged release, young, stays; the old one goes; the active one stays.
    let r = stage(&env, &cfg, &site(&env, 3));
    r.expect_code(0);
    let young = op_of(&r);
    let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert!(!env.exists(&format!("{DIR}/{staged}")), "{}", r.stdout);
    assert!(env.exists(&format!("{DIR}/{young}")), "{}", r.stdout);
    assert_eq!(active(&env), first);
    assert!(env.exists(&format!("{DIR}/{first}")));
}

/// A releases directory recorded before `stage_max_age` existed matches a config that
/// does not set it, or sets the default; another value is `releases_mismatch`.
#[test]
fn stage_max_age_default_matches_settings_recorded_before_it() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n");
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    // The record as an earlier build wrote it: no stage_max_age key.
    let rec = env.path(&format!("{DIR}/.distributor/releases.json"));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&rec).unwrap()).unwrap();
    assert!(v.get("stage_max_age").is_none(), "default not written: {v}");
    v.as_object_mut().unwrap().remove("stage_max_age");
    let cfg = config(&env, "      keep: 3\n      stage_max_age: 7d\n");
    env.publish(&cfg, &site(&env, 2), &[]).expect_code(0);
    let cfg = config(&env, "      keep: 3\n      stage_max_age: 1d\n");
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(3);
    assert!(
        r.conflict_kinds()
            .contains(&"releases_mismatch".to_string()),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("stage_max_age"), "{}", r.stdout);
    let cfg = config(&env, "      keep: 3\n      stage_max_age: 1x\n");
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(2);
    assert!(r.stderr.contains("releases.stage_max_age"), "{}", r.stderr);
}

fn promote(env: &Env, cfg: &Path, dest_op: &[(&str, &str)], extra: &[&str]) -> Run {
    let mut args = vec!["promote", "--json", "--config", cfg.to_str().unwrap()];
    for (d, op) in dest_op {
        args.extend_from_slice(&["--destination", d, op]);
    }
    args.extend_from_slice(extra);
    env.run(&args)
}

/// Stage, then promote by a unique start of the operation id: the staged release becomes
/// active in one step, logged and reported as a publication of its source (decision
/// `promote`); a rollback undoes it; promoting it again is an error.
#[test]
fn stage_then_promote_activates_the_staged_release_and_rollback_undoes_it() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n");
    let r = env.publish(&cfg, &site(&env, 1), &[]);
    r.expect_code(0);
    let first = op_of(&r);
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(0);
    let staged = op_of(&r);
    // A dry run changes nothing.
    let r = promote(&env, &cfg, &[("latest", &staged[..8])], &["--dry-run"]);
    r.expect_code(0);
    assert_eq!(r.dest(0)["status"], "planned", "{}", r.stdout);
    assert_eq!(active(&env), first);
    let r = promote(&env, &cfg, &[("latest", &staged[..8])], &[]);
    r.expect_code(0);
    let d = r.dest(0);
    assert_eq!(d["decision"], "promote", "{}", r.stdout);
    assert_eq!(d["status"], "applied");
    assert_eq!(r.json()["summary"]["promote"], 1);
    assert_eq!(r.json()["source"]["id"], "site");
    assert_eq!(r.json()["source"]["created_at"], "2026-12-02T02:00:00Z");
    let promoted = op_of(&r);
    assert_ne!(promoted, staged);
    assert_eq!(active(&env), staged);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 2");
    let last = log_entries(&env).last().unwrap().clone();
    assert_eq!(last["command"], "promote");
    assert_eq!(last["operation_id"], promoted.as_str());
    assert_eq!(last["release_activated"], staged.as_str());
    assert_eq!(last["release_deactivated"], first.as_str());
    assert_eq!(last["source"]["created_at"], "2026-12-02T02:00:00Z");
    assert_eq!(status_of(&env, &promoted), "applied");
    env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    // Promoted already: a clear error, nothing changes.
    let r = promote(&env, &cfg, &[("latest", &staged)], &[]);
    r.expect_code(1);
    assert!(
        r.dest(0)["message"]
            .as_str()
            .unwrap()
            .contains("promoted already"),
        "{}",
        r.stdout
    );
    // A rollback undoes the promote.
    let r = env.run(&["rollback", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert_eq!(active(&env), first);
    let last = log_entries(&env).last().unwrap().clone();
    assert_eq!(last["undoes"], promoted.as_str(), "{last}");
    // The promoted source is held now; a new build publishes normally.
    let r = env.publish(&cfg, &site(&env, 2), &[]);
    r.expect_code(3);
    assert!(r.conflict_kinds().contains(&"rolled_back".to_string()));
    env.publish(&cfg, &site(&env, 3), &[]).expect_code(0);
}

/// A promote lifts the owner's `rolled_back` hold, as a publication does.
#[test]
fn promote_lifts_a_rolled_back_hold() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n");
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    env.publish(&cfg, &site(&env, 2), &[]).expect_code(0);
    env.run(&["rollback", "--json", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    let r = stage(&env, &cfg, &site(&env, 3));
    r.expect_code(0);
    promote(&env, &cfg, &[("latest", &op_of(&r))], &[]).expect_code(0);
    // Site 2 was held; the promote by its owner lifted the hold.
    let r = env.publish(&cfg, &site(&env, 2), &["--force"]);
    let r2 = env.plan(&cfg, &site(&env, 2), &[]);
    assert!(
        !r2.conflict_kinds().contains(&"rolled_back".to_string()),
        "{}",
        r2.stdout
    );
    drop(r);
}

/// Another publication in between makes the staged release stale: `stale_stage`, not
/// forceable, nothing changes.
#[test]
fn promote_after_another_publication_is_stale_stage() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n");
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(0);
    let staged = op_of(&r);
    let r = env.publish(&cfg, &site(&env, 3), &[]);
    r.expect_code(0);
    let third = op_of(&r);
    let r = promote(&env, &cfg, &[("latest", &staged)], &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["stale_stage"], "{}", r.stdout);
    assert_eq!(r.dest(0)["conflicts"][0]["forceable"], false);
    assert_eq!(r.dest(0)["status"], "conflict");
    assert_eq!(active(&env), third);
    assert!(env.exists(&format!("{DIR}/{staged}")));
    // Journaled as a refusal (SPEC §16), as a refused publication is.
    let op = r.dest(0)["operation_id"]
        .as_str()
        .expect("a refused promote's operation")
        .to_string();
    let h = env.run(&["history", "show", &op, "--json"]);
    h.expect_code(0);
    let show = h.json();
    assert_eq!(show["status"], "refused", "{show}");
    assert_eq!(show["command"], "promote", "{show}");
}

/// Unknown, not staged, ambiguous and pruned operations are clear errors; nothing moves.
#[test]
fn promote_of_unknown_not_staged_or_pruned_operations_is_refused() {
    let env = Env::new();
    let cfg = config(&env, "      keep: 3\n      stage_max_age: 1s\n");
    let r = env.publish(&cfg, &site(&env, 1), &[]);
    r.expect_code(0);
    let first = op_of(&r);
    let r = promote(&env, &cfg, &[("latest", "0000dead")], &[]);
    r.expect_code(1);
    let m = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(m.contains("no staged release 0000dead"), "{m}");
    let r = promote(&env, &cfg, &[("latest", &first)], &[]);
    r.expect_code(1);
    let m = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(m.contains("is not a staged release"), "{m}");
    let r = promote(&env, &cfg, &[("latest", "not-an-id!")], &[]);
    r.expect_code(2);
    let r = env.run(&["promote", "--config", cfg.to_str().unwrap()]);
    r.expect_code(2);
    // Pruned: staged longer ago than stage_max_age, removed by retention.
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(0);
    let staged = op_of(&r);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
        if !env.exists(&format!("{DIR}/{staged}")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.stdout);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let r = promote(&env, &cfg, &[("latest", &staged)], &[]);
    r.expect_code(1);
    let m = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(m.contains("is gone") && m.contains("pruned"), "{m}");
    assert_eq!(active(&env), first);
}

/// A promote's deletion guard is judged when it runs; `--allow-delete N` lifts it.
#[test]
fn promote_is_guarded_like_a_publication() {
    let env = Env::new();
    let extra = "    guard:\n      max_delete: 0\n    releases:\n      keep: 3\n";
    let cfg = env.simple_config("c.yaml", "weather", "latest", PATH, extra);
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    // Site 2 drops only-in-1.html: one deletion.
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(3);
    let r = env.publish(&cfg, &site(&env, 2), &["--stage", "--allow-delete", "1"]);
    r.expect_code(0);
    let staged = op_of(&r);
    let r = promote(&env, &cfg, &[("latest", &staged)], &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["mass_delete"], "{}", r.stdout);
    promote(&env, &cfg, &[("latest", &staged)], &["--allow-delete", "1"]).expect_code(0);
    assert_eq!(active(&env), staged);
}

/// `after_commit` hooks run after a promote (never after a stage: nothing changed for
/// readers), with the decision `promote`.
#[test]
fn hooks_run_after_a_promote() {
    let env = Env::new();
    let out = env.path("hook.out");
    let hook = env.program(
        "hook.sh",
        &format!(
            "#!/bin/sh\necho \"$DISTRIBUTOR_DECISION $DISTRIBUTOR_OPERATION_ID\" >> {}\n",
            out.display()
        ),
    );
    let extra = format!(
        "    releases:\n      keep: 3\n    hooks:\n      after_commit: [{{run: [\"{}\"]}}]\n",
        hook.display()
    );
    let cfg = env.simple_config("c.yaml", "weather", "latest", PATH, &extra);
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    let r = stage(&env, &cfg, &site(&env, 2));
    r.expect_code(0);
    let staged = op_of(&r);
    assert_eq!(
        env.read("hook.out").lines().count(),
        1,
        "no hook for a stage"
    );
    let r = promote(&env, &cfg, &[("latest", &staged)], &[]);
    r.expect_code(0);
    let promoted = op_of(&r);
    assert_eq!(r.dest(0)["hooks"][0]["ok"], true, "{}", r.stdout);
    let text = env.read("hook.out");
    assert_eq!(
        text.lines().last().unwrap(),
        format!("promote {promoted}"),
        "{text}"
    );
}

/// A kill at every step of a promote: `path` names the staged release or the one before,
/// recover finishes or undoes it, the staged release is never removed, and a promote
/// undone can run again.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_crash_at_every_step_of_a_promote_is_recovered() {
    for (spec, forward) in [
        ("after_journal_append", false),
        ("before_staging_record", false),
        ("after_staging_record", false),
        ("io_state_rename", false),
        ("after_journal_commit", true),
        ("during_cleanup", true),
        ("io_log_write", true),
        ("io_remove_staging", true),
        ("during_prune", true),
    ] {
        let env = Env::new();
        let cfg = config(&env, "      keep: 0\n");
        let mut first = String::new();
        for i in 1..=3 {
            let r = env.publish(&cfg, &site(&env, i), &[]);
            r.expect_code(0);
            first = op_of(&r);
        }
        let r = stage(&env, &cfg, &site(&env, 4));
        r.expect_code(0);
        let staged = op_of(&r);
        let r = env.run_env(
            &[
                "promote",
                "--json",
                "--config",
                cfg.to_str().unwrap(),
                "--destination",
                "latest",
                &staged,
            ],
            &[("DISTRIBUTOR_FAILPOINT", spec)],
        );
        assert_aborted(&r, spec);
        let rec = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
        rec.expect_code(0);
        let want = if forward { &staged } else { &first };
        assert_eq!(&active(&env), want, "{spec}: {}", rec.stdout);
        assert!(!env.staging_left(DIR), "{spec}");
        assert!(env.exists(&format!("{DIR}/{staged}")), "{spec}");
        env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
            .expect_code(0);
        if !forward {
            let r = promote(&env, &cfg, &[("latest", &staged)], &[]);
            r.expect_code(0);
            assert_eq!(active(&env), staged, "{spec}: {}", r.stdout);
        } else {
            let log = log_entries(&env);
            assert!(
                log.iter().any(|e| e["command"] == "promote"
                    && e["release_activated"] == staged.as_str()),
                "{spec}: {log:?}"
            );
        }
        // The destination works again.
        env.publish(&cfg, &site(&env, 5), &[]).expect_code(0);
    }
}
