//! Dry runs (SPEC §6, §11): `plan` and `publish --dry-run` plan exactly as a real run
//! would and write nothing anywhere (no bundle directory, lock file, journal or staging),
//! and their report equals the real run's but for `dry_run`, `status` and `operation_id`.

use crate::common::{Env, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const T0: &str = "2026-12-02T06:00:00Z";
const T1: &str = "2026-12-02T07:00:00Z";

/// Every dry-run form, with and without `--force` and `--json`: each must leave the whole
/// temporary root byte-identical. Returns the `publish --dry-run --json` run.
fn dry_runs_write_nothing(env: &Env, cfg: &Path, bundle: &Path, expect: i32) -> Run {
    let before = env.snapshot("");
    let c = cfg.to_str().unwrap();
    let b = bundle.to_str().unwrap();
    let forms: [&[&str]; 6] = [
        &["plan", "--config", c, "--source", b],
        &["plan", "--json", "--config", c, "--source", b],
        &["plan", "--force", "--config", c, "--source", b],
        &["publish", "--dry-run", "--config", c, "--source", b],
        &[
            "publish",
            "--dry-run",
            "--json",
            "--force",
            "--config",
            c,
            "--source",
            b,
        ],
        &[
            "publish",
            "--dry-run",
            "--json",
            "--config",
            c,
            "--source",
            b,
        ],
    ];
    let mut last = None;
    for args in forms {
        let r = env.run(args);
        if !args.contains(&"--force") {
            r.expect_code(expect);
        }
        assert_eq!(env.snapshot(""), before, "{args:?} wrote something");
        last = Some(r);
    }
    let r = last.unwrap();
    assert_eq!(r.json()["dry_run"], true);
    r
}

/// The report without the fields a dry run may differ in.
fn comparable(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("dry_run");
    for d in v["destinations"].as_array_mut().unwrap() {
        let d = d.as_object_mut().unwrap();
        d.remove("status");
        d.remove("operation_id");
    }
    v
}

/// Dry run first (writing nothing), then the real run: the reports must agree.
fn dry_run_matches_real_run(env: &Env, cfg: &Path, bundle: &Path, extra: &[&str]) -> Run {
    let mut dry_args = vec!["--dry-run"];
    dry_args.extend_from_slice(extra);
    let before = env.snapshot("");
    let dry = env.publish(cfg, bundle, &dry_args);
    assert_eq!(env.snapshot(""), before, "dry run wrote something");
    let real = env.publish(cfg, bundle, extra);
    assert_eq!(dry.code, real.code, "{}\n{}", dry.stdout, real.stdout);
    let (d, r) = (dry.json(), real.json());
    assert_eq!(d["dry_run"], true);
    assert_eq!(r["dry_run"], false);
    assert_eq!(
        comparable(d.clone()),
        comparable(r.clone()),
        "dry run:\n{:#}\nreal run:\n{:#}",
        d,
        r
    );
    for (dd, rd) in d["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .zip(r["destinations"].as_array().unwrap())
    {
        assert_eq!(dd["operation_id"], Value::Null);
        if rd["status"] == "applied" && rd["decision"] != "unchanged" {
            assert_eq!(dd["status"], "planned");
            assert!(rd["operation_id"].is_string());
        } else {
            assert_eq!(dd["status"], rd["status"]);
        }
    }
    real
}

fn cfg(env: &Env, extra: &str) -> PathBuf {
    env.simple_config("c.yaml", "weather", "latest", "dest/latest", extra)
}

#[test]
fn create_writes_nothing_when_dry() {
    let env = Env::new();
    let c = cfg(&env, "");
    let b = env.bundle(
        "b1",
        "tomorrow",
        T0,
        &[("a.txt", "one"), ("d/b.txt", "two")],
        &[("l", "a.txt")],
    );
    let r = dry_runs_write_nothing(&env, &c, &b, 0);
    assert_eq!(r.decision(), "create");
    assert_eq!(r.dest(0)["status"], "planned");
    assert!(!env.exists("dest"), "no bundle directory");
    assert!(!env.journal().exists(), "no journal");
    let r = dry_run_matches_real_run(&env, &c, &b, &[]);
    assert_eq!(r.decision(), "create");
    assert_eq!(r.dest(0)["status"], "applied");
}

#[test]
fn create_under_a_missing_parent_writes_nothing_when_dry() {
    let env = Env::new();
    let c = env.simple_config("c.yaml", "weather", "latest", "deep/er/dest", "");
    let b = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    dry_runs_write_nothing(&env, &c, &b, 0);
    assert!(!env.exists("deep"));
}

#[test]
fn unchanged_matches() {
    let env = Env::new();
    let c = cfg(&env, "");
    let b = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[("l", "a.txt")]);
    env.publish(&c, &b, &[]).expect_code(0);
    dry_runs_write_nothing(&env, &c, &b, 0);
    let r = dry_run_matches_real_run(&env, &c, &b, &[]);
    assert_eq!(r.decision(), "unchanged");
}

#[test]
fn replace_older_matches() {
    let env = Env::new();
    let c = cfg(&env, "");
    let b1 = env.bundle(
        "b1",
        "tomorrow",
        T0,
        &[("a.txt", "one"), ("d/b.txt", "two")],
        &[("l", "a.txt")],
    );
    env.publish(&c, &b1, &[]).expect_code(0);
    env.write("dest/latest/unrelated.txt", "hand-made");
    let b2 = env.bundle(
        "b2",
        "tomorrow",
        T1,
        &[("a.txt", "one v2"), ("c.txt", "three")],
        &[],
    );
    let r = dry_runs_write_nothing(&env, &c, &b2, 0);
    assert_eq!(r.decision(), "replace_older");
    let r = dry_run_matches_real_run(&env, &c, &b2, &[]);
    assert_eq!(r.decision(), "replace_older");
    let ops: Vec<(String, String)> = r.dest(0)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["op"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(
        ops.contains(&("d/b.txt".into(), "delete".into())),
        "{ops:?}"
    );
    assert_eq!(env.read("dest/latest/unrelated.txt"), "hand-made");
}

#[test]
fn replace_takeover_matches() {
    let env = Env::new();
    let old = env.simple_config("old.yaml", "weather", "old", "dest/latest", "");
    let b1 = env.bundle(
        "b1",
        "yesterday",
        T0,
        &[("a.txt", "one"), ("x.txt", "x")],
        &[],
    );
    env.publish(&old, &b1, &[]).expect_code(0);
    let c = cfg(&env, "");
    let b2 = env.bundle("b2", "tomorrow", T1, &[("a.txt", "new")], &[]);
    let r = dry_runs_write_nothing(&env, &c, &b2, 0);
    assert_eq!(r.decision(), "replace_takeover");
    let r = dry_run_matches_real_run(&env, &c, &b2, &[]);
    assert_eq!(r.decision(), "replace_takeover");
    let d = r.dest(0);
    assert_eq!(d["previous"]["owner"], "weather/old");
    assert_eq!(d["takeovers"][0]["from_owner"], "weather/old");
}

#[test]
fn merge_matches() {
    let env = Env::new();
    let c = cfg(&env, "    reconciliation:\n      mode: merge\n");
    let b1 = env.bundle(
        "b1",
        "tomorrow",
        T0,
        &[("a.txt", "one"), ("b.txt", "two")],
        &[],
    );
    env.publish(&c, &b1, &[]).expect_code(0);
    let b2 = env.bundle(
        "b2",
        "tomorrow",
        T1,
        &[("a.txt", "one v2"), ("c.txt", "three")],
        &[],
    );
    dry_runs_write_nothing(&env, &c, &b2, 0);
    let r = dry_run_matches_real_run(&env, &c, &b2, &[]);
    let ops: Vec<(String, String)> = r.dest(0)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["op"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(ops.contains(&("b.txt".into(), "retain".into())), "{ops:?}");
    assert_eq!(env.read("dest/latest/b.txt"), "two");
}

#[test]
fn conflict_and_force_replace_match() {
    let env = Env::new();
    let c = cfg(&env, "");
    env.write("dest/latest/a.txt", "someone else's");
    let b = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    let r = dry_runs_write_nothing(&env, &c, &b, 3);
    assert_eq!(r.decision(), "conflict");
    assert_eq!(r.dest(0)["status"], "conflict");
    assert!(!env.journal().exists());
    assert!(!env.exists("dest/latest/.distributor.lock"), "no lock file");
    let r = dry_run_matches_real_run(&env, &c, &b, &[]);
    assert_eq!(r.decision(), "conflict");
    assert_eq!(r.conflict_kinds(), ["unmanaged_content"]);
    let r = dry_run_matches_real_run(&env, &c, &b, &["--force"]);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(env.read("dest/latest/a.txt"), "one");
}

#[test]
fn force_replace_of_another_pipeline_matches() {
    let env = Env::new();
    let other = env.simple_config("other.yaml", "alerts", "all", "dest/latest", "");
    let b1 = env.bundle(
        "b1",
        "alerts-1",
        T0,
        &[("a.txt", "alert"), ("z.txt", "zz")],
        &[],
    );
    env.publish(&other, &b1, &[]).expect_code(0);
    let c = cfg(&env, "");
    let b2 = env.bundle("b2", "tomorrow", T1, &[("a.txt", "one")], &[]);
    let r = dry_runs_write_nothing(&env, &c, &b2, 3);
    assert!(r.conflict_kinds().contains(&"pipeline_differs".to_string()));
    let r = dry_run_matches_real_run(&env, &c, &b2, &["--force"]);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(r.dest(0)["previous"]["owner"], "alerts/all");
    assert!(!env.exists("dest/latest/z.txt"));
}

#[test]
fn several_destinations_match() {
    let env = Env::new();
    let c = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: one\n    path: {}\n  - id: two\n    path: {}\n    path_mapping:\n      mode: source_id\n  - id: three\n    path: {}\n",
            env.path("dest/one").display(),
            env.path("dest/two").display(),
            env.path("dest/three").display()
        ),
    );
    env.write("dest/three/a.txt", "unmanaged");
    let b = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    dry_runs_write_nothing(&env, &c, &b, 3);
    assert!(!env.exists("dest/one") && !env.exists("dest/two"));
    let r = dry_run_matches_real_run(&env, &c, &b, &[]);
    assert_eq!(r.json()["summary"]["create"], 2);
    assert_eq!(r.json()["summary"]["conflict"], 1);
    assert_eq!(env.read("dest/two/tomorrow/a.txt"), "one");
}

#[test]
fn plan_report_is_the_dry_run_report() {
    // `plan` is `publish --dry-run`; its report differs from the real run's only in the
    // fields allowed, plus the name of the command that produced it.
    let env = Env::new();
    let c = cfg(&env, "");
    let b = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    let plan = env.plan(&c, &b, &[]).json();
    let dry = env.publish(&c, &b, &["--dry-run"]).json();
    assert_eq!(plan["command"], "plan");
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("command");
        v
    };
    assert_eq!(strip(plan), strip(dry));
}

#[test]
fn content_mismatch_reports_agree_between_dry_and_real_run() {
    // Bytes changed after the manifest was written (same size): both runs read them, fail
    // the destination with the planned decision and the same message, and write nothing.
    let env = Env::new();
    let c = cfg(&env, "");
    let b1 = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    env.publish(&c, &b1, &[]).expect_code(0);
    let b2 = env.bundle("b2", "tomorrow", T1, &[("a.txt", "two")], &[]);
    std::fs::write(b2.join("a.txt"), "TWO").unwrap();
    let before = env.snapshot_unlocked("dest");
    let r = dry_run_matches_real_run(&env, &c, &b2, &[]);
    r.expect_code(1);
    let d = r.dest(0);
    assert_eq!(d["decision"], "replace_older");
    assert_eq!(d["status"], "failed");
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("output 'a.txt' changed"),
        "{d}"
    );
    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert_eq!(env.snapshot_unlocked("dest"), before);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn dry_run_reports_recovery_required_when_staging_is_left() {
    let env = Env::new();
    let c = cfg(&env, "");
    let b1 = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    env.publish(&c, &b1, &[]).expect_code(0);
    let b2 = env.bundle("b2", "tomorrow", T1, &[("a.txt", "two")], &[]);
    let (c_s, b2_s) = (c.to_str().unwrap(), b2.to_str().unwrap());
    let crashed = env.run_env(
        &["publish", "--json", "--config", c_s, "--source", b2_s],
        &[("DISTRIBUTOR_FAILPOINT", "after_staging")],
    );
    assert_ne!(crashed.code, 0, "the failpoint aborts the run");
    assert!(env.staging_left("dest/latest"));
    // The journal is read, not written: its database and WAL stay byte for byte (the
    // `-shm` index, where SQLite readers take their read marks, holds no data).
    let unshared = || -> Vec<(String, String)> {
        env.snapshot("")
            .into_iter()
            .filter(|(p, _)| !p.ends_with("-shm"))
            .collect()
    };
    let before = unshared();
    assert!(
        before.iter().any(|(p, _)| p.ends_with("-wal")),
        "the killed run left its WAL"
    );
    let r = env.plan(&c, &b2, &[]);
    r.expect_code(4);
    assert_eq!(r.dest(0)["status"], "failed");
    assert_eq!(r.dest(0)["decision"], "replace_older");
    assert!(
        r.dest(0)["message"]
            .as_str()
            .unwrap()
            .contains("recovery required")
    );
    assert_eq!(unshared(), before, "the dry run wrote something");
    env.publish(&c, &b2, &[]).expect_code(4);
}

/// SPEC §6 refuses (exit 4) a destination whose decision writes: with a staging entry left
/// behind, `unchanged` and `skip_destination_newer` write nothing and are reported as usual
/// (exit 0) by the dry run and the real run alike, and a writing decision is refused by
/// both.
#[test]
fn a_decision_that_writes_nothing_stands_while_recovery_is_due() {
    let env = Env::new();
    let c = cfg(&env, "");
    let b1 = env.bundle("b1", "tomorrow", T0, &[("a.txt", "one")], &[]);
    env.publish(&c, &b1, &[]).expect_code(0);
    env.write("dest/latest/.distributor-staging/junk", "left behind");
    let older = env.bundle(
        "b0",
        "tomorrow",
        "2026-12-02T05:00:00Z",
        &[("a.txt", "zero")],
        &[],
    );
    for (bundle, decision) in [(&b1, "unchanged"), (&older, "skip_destination_newer")] {
        for r in [env.plan(&c, bundle, &[]), env.publish(&c, bundle, &[])] {
            r.expect_code(0);
            assert_eq!(r.dest(0)["decision"], decision);
            assert_eq!(r.dest(0)["status"], "skipped");
        }
    }
    let b2 = env.bundle("b2", "tomorrow", T1, &[("a.txt", "two")], &[]);
    for r in [env.plan(&c, &b2, &[]), env.publish(&c, &b2, &[])] {
        r.expect_code(4);
        assert_eq!(r.dest(0)["decision"], "replace_older");
        assert_eq!(r.dest(0)["status"], "failed");
    }
    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert_eq!(
        env.read("dest/latest/.distributor-staging/junk"),
        "left behind"
    );
}
