//! `verify`'s `log_mismatch` (SPEC §18, §22: drift, exit 3): the state's operation (shared
//! root: its newest owner record's; releases: the active release's) is not the one the
//! destination log's last state-changing entry names, so the destination was changed
//! outside distributor. Every operation distributor runs leaves state and log agreeing;
//! a hand-made state, a repointed `path`, or a quarantined or removed last entry does not.
//! A destination with no log to compare with (an earlier version published it) never
//! mismatches.

use crate::common::{Env, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const PLAIN: &str = "plain";
const PLAIN_LOG: &str = "plain/.distributor/log";
const PATH: &str = "www/latest";
const DIR: &str = "www/.latest.releases";

fn site(env: &Env, i: usize) -> PathBuf {
    let v = format!("version {i}");
    env.bundle(
        &format!("site{i}"),
        "site",
        &format!("2026-12-02T0{i}:00:00Z"),
        &[("index.html", v.as_str()), ("same.css", "same")],
        &[],
    )
}

fn op_of(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

fn verify(env: &Env, cfg: &Path) -> Run {
    env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
}

/// `verify` exits 0 and reports no `log_mismatch` on any bundle path.
fn agrees(env: &Env, cfg: &Path, after: &str) {
    let r = verify(env, cfg);
    assert_eq!(r.code, 0, "after {after}: {}{}", r.stdout, r.stderr);
    for d in r.json()["destinations"].as_array().unwrap() {
        assert!(d.get("log_mismatch").is_none(), "after {after}: {d}");
    }
}

/// `verify` reports drift (exit 3) with a `log_mismatch` saying `says`; returns it.
fn mismatch(env: &Env, cfg: &Path, says: &[&str]) -> String {
    let r = verify(env, cfg);
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["drift"], true);
    let m = r.dest(0)["log_mismatch"]
        .as_str()
        .unwrap_or_else(|| panic!("no log_mismatch: {}", r.stdout))
        .to_string();
    for s in says {
        assert!(m.contains(s), "{s:?} not in {m}");
    }
    assert!(m.contains("changed outside distributor"), "{m}");
    m
}

/// Rewrites the state file at `rel` as distributor's own uid would (mode 0600), with
/// `edit` applied to its JSON.
fn rewrite_state(env: &Env, rel: &str, edit: impl FnOnce(&mut Value)) {
    let file = format!("{rel}/.distributor.json");
    let mut state: Value = serde_json::from_str(&env.read(&file)).unwrap();
    edit(&mut state);
    env.write_state_file(&file, serde_json::to_string(&state).unwrap().as_bytes());
}

fn entry_file(seq: u64) -> String {
    format!("{seq:020}.json")
}

fn log_entries(env: &Env, log: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(env.path(log))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

const OTHER_OP: &str = "0b9d4c5e-1f2a-4b3c-8d4e-5f6a7b8c9d0e";

#[test]
fn a_hand_made_state_is_a_log_mismatch_until_distributor_publishes_again() {
    let env = Env::new();
    let cfg = env.simple_config("p.yaml", "weather", "latest", PLAIN, "");
    let first = env.publish(&cfg, &site(&env, 1), &[]);
    first.expect_code(0);
    agrees(&env, &cfg, "a first publication");
    let second = env.publish(&cfg, &site(&env, 2), &[]);
    second.expect_code(0);
    agrees(&env, &cfg, "a second publication");
    env.publish(&cfg, &site(&env, 2), &[]).expect_code(0);
    agrees(&env, &cfg, "an unchanged publication (no entry)");

    // The state rewritten by hand, as distributor's uid, mode 0600: the same files,
    // another operation.
    rewrite_state(&env, PLAIN, |s| {
        s["operation_id"] = OTHER_OP.into();
    });
    let m = mismatch(&env, &cfg, &[OTHER_OP, &op_of(&second), "entry 2 (publish"]);
    assert!(m.contains("the state names operation"), "{m}");
    // Text: the verdict is drift, and the line says why.
    let r = env.run(&["verify", "--config", cfg.to_str().unwrap()]);
    r.expect_code(3);
    assert!(r.stdout.contains(": state valid, drift"), "{}", r.stdout);
    assert!(r.stdout.contains("  log_mismatch: "), "{}", r.stdout);
    // The files are still what that state records: the mismatch is the only drift.
    let d = verify(&env, &cfg).dest(0);
    for list in ["missing", "modified", "unrecorded"] {
        assert_eq!(d[list], Value::Array(vec![]), "{d}");
    }

    // A new build published by distributor writes a state and an entry that agree.
    env.publish(&cfg, &site(&env, 3), &[]).expect_code(0);
    agrees(&env, &cfg, "publishing a new build");
    // So does a state removed by hand.
    std::fs::remove_file(env.path(&format!("{PLAIN}/.distributor.json"))).unwrap();
    mismatch(&env, &cfg, &["no .distributor.json"]);
}

#[test]
fn a_quarantined_or_removed_last_entry_is_a_log_mismatch() {
    let env = Env::new();
    let cfg = env.simple_config("p.yaml", "weather", "latest", PLAIN, "");
    let ops: Vec<String> = (1..=2)
        .map(|i| {
            let r = env.publish(&cfg, &site(&env, i), &[]);
            r.expect_code(0);
            op_of(&r)
        })
        .collect();
    let r = env.run(&[
        "log",
        "--config",
        cfg.to_str().unwrap(),
        "--quarantine",
        "2",
    ]);
    r.expect_code(0);
    // The quarantine entry changes no state: the last state-changing entry is 1.
    mismatch(&env, &cfg, &[&ops[1], &ops[0], "entry 1 (publish"]);
    env.publish(&cfg, &site(&env, 3), &[]).expect_code(0);
    agrees(&env, &cfg, "publishing after a quarantine");

    // The last entry removed (not quarantined): nothing says it is missing, but the
    // state names an operation the log does not end with.
    let last = log_entries(&env, PLAIN_LOG).pop().unwrap();
    assert_eq!(last, entry_file(4));
    std::fs::remove_file(env.path(&format!("{PLAIN_LOG}/{last}"))).unwrap();
    mismatch(&env, &cfg, &["entry 1 (publish"]);
    // The log is shorter than the journal saw it (docs/operations.md, "The log's
    // continuity"): publishing is the conflict `log_missing` until `log --restart` logs
    // the gap, after the tail the journal knew (entry 4).
    let r = env.publish(&cfg, &site(&env, 4), &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["log_missing"], "{}", r.stdout);
    env.run(&["log", "--config", cfg.to_str().unwrap(), "--restart"])
        .expect_code(0);
    // An entry removed from the middle is a gap: a bad entry (exit 1), and no mismatch
    // is judged from a log that has one.
    env.publish(&cfg, &site(&env, 4), &[]).expect_code(0);
    std::fs::remove_file(env.path(&format!("{PLAIN_LOG}/{}", entry_file(1)))).unwrap();
    let entries = log_entries(&env, PLAIN_LOG);
    assert_eq!(entries, [entry_file(3), entry_file(5), entry_file(6)]);
    agrees(
        &env,
        &cfg,
        "the oldest entry removed (a missing oldest part is allowed)",
    );
    env.publish(&cfg, &site(&env, 5), &[]).expect_code(0);
    std::fs::remove_file(env.path(&format!("{PLAIN_LOG}/{}", entry_file(6)))).unwrap();
    let r = verify(&env, &cfg);
    r.expect_code(1);
    assert!(r.dest(0)["log_error"].is_string(), "{}", r.stdout);
    assert!(r.dest(0).get("log_mismatch").is_none(), "{}", r.stdout);
}

/// The upgrade: a destination an earlier version published has a state and no log.
/// Nothing to compare with is not a mismatch; the first publication of this version
/// starts the log and the comparison.
#[test]
fn a_destination_without_a_log_is_no_mismatch() {
    let env = Env::new();
    let cfg = env.simple_config("p.yaml", "weather", "latest", PLAIN, "");
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    for name in log_entries(&env, PLAIN_LOG) {
        std::fs::remove_file(env.path(&format!("{PLAIN_LOG}/{name}"))).unwrap();
    }
    // An earlier version's journal knew no log tail (with this one, a log shorter than
    // it saw is `log_mismatch`: tests/test_trust.rs).
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", env.journal().display()));
    }
    rewrite_state(&env, PLAIN, |s| {
        s["operation_id"] = OTHER_OP.into();
    });
    agrees(&env, &cfg, "a state from before the log");
    // A log with no state-changing entry (only a quarantine record) says nothing either.
    env.write(&format!("{PLAIN_LOG}/{}", entry_file(1)), "torn");
    std::fs::set_permissions(
        env.path(&format!("{PLAIN_LOG}/{}", entry_file(1))),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    env.run(&[
        "log",
        "--config",
        cfg.to_str().unwrap(),
        "--quarantine",
        "1",
    ])
    .expect_code(0);
    agrees(&env, &cfg, "a log holding only a quarantine entry");
    env.publish(&cfg, &site(&env, 2), &[]).expect_code(0);
    agrees(&env, &cfg, "the first publication after the upgrade");
    rewrite_state(&env, PLAIN, |s| {
        s["operation_id"] = OTHER_OP.into();
    });
    mismatch(&env, &cfg, &[OTHER_OP]);
}

/// Shared root: the newest owner record is the last logged publication's, whichever
/// owner made it; a record written by hand after it, or an owner's operation changed by
/// hand, is a mismatch.
#[test]
fn a_shared_root_state_agrees_with_its_last_logged_publication() {
    let env = Env::new();
    let shared = "    state:\n      mode: shared_root\n";
    let w = env.simple_config("w.yaml", "weather", "latest", PLAIN, shared);
    let o = env.simple_config("o.yaml", "other", "o", PLAIN, shared);
    let w1 = env.bundle("w1", "w", "2026-12-02T01:00:00Z", &[("w/a.txt", "w1")], &[]);
    let o1 = env.bundle("o1", "o", "2026-12-02T01:00:00Z", &[("o/x.txt", "o1")], &[]);
    let w2 = env.bundle("w2", "w", "2026-12-02T02:00:00Z", &[("w/a.txt", "w2")], &[]);
    let mut last = String::new();
    for (cfg, b) in [(&w, &w1), (&o, &o1), (&w, &w2)] {
        let r = env.publish(cfg, b, &[]);
        r.expect_code(0);
        last = op_of(&r);
        agrees(&env, &w, "a shared root publication");
        agrees(&env, &o, "a shared root publication");
    }
    // The other owner's record made newer by hand, naming an operation no entry names.
    rewrite_state(&env, PLAIN, |s| {
        for r in s["owners"].as_array_mut().unwrap() {
            if r["owner"] == "other/o" {
                r["operation_id"] = OTHER_OP.into();
                r["published_at"] = "2999-01-01T00:00:00.000Z".into();
            }
        }
    });
    mismatch(&env, &o, &["owner record other/o", OTHER_OP, &last]);
    // weather's own record changed by hand.
    env.publish(
        &o,
        &env.bundle("o2", "o", "2026-12-02T02:00:00Z", &[("o/x.txt", "o2")], &[]),
        &[],
    )
    .expect_code(0);
    agrees(&env, &w, "publishing again");
    rewrite_state(&env, PLAIN, |s| {
        for r in s["owners"].as_array_mut().unwrap() {
            r["operation_id"] = OTHER_OP.into();
        }
    });
    mismatch(&env, &w, &[OTHER_OP]);
}

/// An operation interrupted after its commit point: while recovery is pending nothing is
/// compared; once `recover` wrote its entry, state and log agree.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn recover_leaves_state_and_log_agreeing() {
    let env = Env::new();
    let cfg = env.simple_config("p.yaml", "weather", "latest", PLAIN, "");
    env.publish(&cfg, &site(&env, 1), &[]).expect_code(0);
    let r = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            site(&env, 2).to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "before_log_link")],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    let r = verify(&env, &cfg);
    r.expect_code(4);
    assert!(r.dest(0).get("log_mismatch").is_none(), "{}", r.stdout);
    env.run(&["recover", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    agrees(&env, &cfg, "recover");

    // Releases: the log write fails after the activation; recover writes the entry.
    let rel = env.simple_config(
        "r.yaml",
        "weather",
        "latest",
        PATH,
        "    releases:\n      keep: 1\n",
    );
    env.publish(&rel, &site(&env, 1), &[]).expect_code(0);
    let r = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            rel.to_str().unwrap(),
            "--source",
            site(&env, 2).to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "io_log_write=error")],
    );
    assert_ne!(r.code, 0, "{}", r.stdout);
    verify(&env, &rel).expect_code(4);
    env.run(&["recover", "--config", rel.to_str().unwrap()])
        .expect_code(0);
    agrees(&env, &rel, "recover of a releases publication");
}

fn releases_config(env: &Env, name: &str, pipeline: &str, dest: &str, mode: &str) -> PathBuf {
    let extra = format!("    state:\n      mode: {mode}\n    releases:\n      keep: 1\n");
    env.simple_config(name, pipeline, dest, PATH, &extra)
}

fn run(env: &Env, args: &[&str], cfg: &Path) -> Run {
    let mut all = args.to_vec();
    all.extend(["--json", "--config", cfg.to_str().unwrap()]);
    env.run(&all)
}

/// Releases: every activation distributor makes (publish, rollback, prune's retention,
/// an adoption) leaves `path` showing the release the last logged activation made;
/// `path` pointed elsewhere by hand, or the last activation quarantined, is a mismatch.
#[test]
fn releases_agree_with_the_last_logged_activation() {
    let env = Env::new();
    // An in-place destination, then adopted.
    let plain = env.simple_config("plain.yaml", "weather", "latest", PATH, "");
    env.publish(&plain, &site(&env, 1), &[]).expect_code(0);
    let cfg = releases_config(&env, "c.yaml", "weather", "latest", "single_owner");
    agrees(&env, &cfg, "in place, not adopted yet (its own log)");
    rewrite_state(&env, PATH, |s| {
        s["operation_id"] = OTHER_OP.into();
    });
    mismatch(&env, &cfg, &[OTHER_OP]);
    env.publish(&plain, &site(&env, 2), &[]).expect_code(0);
    agrees(&env, &cfg, "publishing in place again");
    run(&env, &["releases", "adopt"], &cfg).expect_code(0);
    agrees(&env, &cfg, "releases adopt");
    let mut ops = Vec::new();
    for i in 3..=5 {
        let r = env.publish(&cfg, &site(&env, i), &[]);
        r.expect_code(0);
        ops.push(op_of(&r));
        agrees(&env, &cfg, "a publication with its retention");
    }
    run(&env, &["prune"], &cfg).expect_code(0);
    agrees(&env, &cfg, "prune");
    run(&env, &["rollback"], &cfg).expect_code(0);
    agrees(&env, &cfg, "rollback");
    let r = env.publish(&cfg, &site(&env, 6), &[]);
    r.expect_code(0);
    let sixth = op_of(&r);
    agrees(&env, &cfg, "publishing after a rollback");

    // `path` pointed by hand at the release before (the rollback's, always kept).
    std::fs::remove_file(env.path(PATH)).unwrap();
    std::os::unix::fs::symlink(format!(".latest.releases/{}", ops[1]), env.path(PATH)).unwrap();
    mismatch(
        &env,
        &cfg,
        &[
            &format!("path shows release {}", ops[1]),
            &format!("made release {sixth} active"),
        ],
    );
    // `path` removed.
    std::fs::remove_file(env.path(PATH)).unwrap();
    mismatch(&env, &cfg, &["path shows no release"]);
    // `rollback --to` activates a release of the operator's choice and logs it.
    let r = env.run(&[
        "rollback",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--to",
        &sixth,
    ]);
    r.expect_code(0);
    agrees(&env, &cfg, "rollback --to");
    env.publish(&cfg, &site(&env, 7), &[]).expect_code(0);

    // The last activation quarantined (retention's prune entries after it change no
    // state): the log now ends with the one before, the rollback's.
    let log = format!("{DIR}/.distributor/log");
    let last: Value = (log_entries(&env, &log).iter().rev())
        .map(|n| serde_json::from_str::<Value>(&env.read(&format!("{log}/{n}"))).unwrap())
        .find(|e| e.get("release_activated").is_some())
        .unwrap();
    assert_eq!(last["command"], "publish");
    let seq = last["seq"].to_string();
    env.run(&[
        "log",
        "--config",
        cfg.to_str().unwrap(),
        "--quarantine",
        &seq,
    ])
    .expect_code(0);
    mismatch(
        &env,
        &cfg,
        &[&format!("made release {sixth} active"), "(rollback"],
    );
}

/// A shared root with releases: a rollback builds a release of its own, and it is what
/// the log's last activation made active.
#[test]
fn a_shared_root_rollback_agrees_with_the_log() {
    let env = Env::new();
    let w = releases_config(&env, "w.yaml", "weather", "latest", "shared_root");
    let o = releases_config(&env, "o.yaml", "other", "o", "shared_root");
    let w1 = env.bundle("w1", "w", "2026-12-02T01:00:00Z", &[("w/a.txt", "w1")], &[]);
    let o1 = env.bundle("o1", "o", "2026-12-02T01:00:00Z", &[("o/x.txt", "o1")], &[]);
    let w2 = env.bundle("w2", "w", "2026-12-02T02:00:00Z", &[("w/a.txt", "w2")], &[]);
    for (cfg, b) in [(&w, &w1), (&o, &o1), (&w, &w2)] {
        env.publish(cfg, b, &[]).expect_code(0);
    }
    agrees(&env, &o, "shared root publications with releases");
    run(&env, &["rollback"], &w).expect_code(0);
    agrees(&env, &w, "a shared root rollback");
    agrees(&env, &o, "a shared root rollback");
    run(&env, &["prune"], &o).expect_code(0);
    agrees(&env, &o, "prune");
}
