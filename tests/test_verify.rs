//! Drift (SPEC §5.1 repair, §10 verify and status): `verify` compares storage with state
//! and lists exactly what is missing, modified and unrecorded (exit 3); republishing the
//! same bundle repairs only what drifted; `status` shows what state records.

use crate::common::{Env, Run};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

const T0: &str = "2026-12-02T06:00:00Z";
const T1: &str = "2026-12-02T07:00:00Z";

fn verify(env: &Env, cfg: &Path) -> Run {
    env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
}

fn status(env: &Env, cfg: &Path) -> Value {
    let r = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    r.json()
}

/// `{missing, modified, unrecorded}` of destination `i` of a verify report.
fn drift(r: &Run, i: usize) -> Value {
    let d = &r.json()["destinations"][i];
    json!({"missing": d["missing"], "modified": d["modified"], "unrecorded": d["unrecorded"]})
}

/// path → op of a report's `files` (or `links`).
fn ops(r: &Run, key: &str) -> BTreeMap<String, String> {
    r.dest(0)[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["op"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn published() -> (Env, PathBuf, PathBuf) {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let b = env.bundle(
        "b1",
        "tomorrow",
        T0,
        &[
            ("a.txt", "one"),
            ("b.txt", "two"),
            ("c.txt", "three"),
            ("d/e.txt", "four"),
        ],
        &[("l1", "a.txt"), ("l2", "c.txt")],
    );
    env.publish(&cfg, &b, &[]).expect_code(0);
    (env, cfg, b)
}

#[test]
fn clean_destination_verifies() {
    let (env, cfg, _) = published();
    let before = env.snapshot("");
    let r = verify(&env, &cfg);
    r.expect_code(0);
    assert_eq!(r.json()["drift"], false);
    let d = &r.json()["destinations"][0];
    assert_eq!(d["state"], "valid");
    assert_eq!(d["bundle_path"], env.path("dest/latest").to_str().unwrap());
    assert_eq!(
        drift(&r, 0),
        json!({"missing": [], "modified": [], "unrecorded": []})
    );
    let r = env.run(&["verify", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert!(r.stdout.contains("state valid, ok"), "{}", r.stdout);
    assert_eq!(env.snapshot(""), before, "verify wrote something");
}

#[test]
fn drift_is_listed_then_repaired() {
    let (env, cfg, b) = published();
    // Modify (same size, so only hashing notices), rewrite with another size, delete,
    // repoint a link, and add unrecorded files.
    env.write("dest/latest/a.txt", "ONE");
    env.write("dest/latest/d/e.txt", "four, changed");
    fs::remove_file(env.path("dest/latest/b.txt")).unwrap();
    fs::remove_file(env.path("dest/latest/l1")).unwrap();
    symlink("c.txt", env.path("dest/latest/l1")).unwrap();
    env.write("dest/latest/new.txt", "hand-made");
    env.write("dest/latest/d/extra.txt", "hand-made too");

    let before = env.snapshot("");
    let r = verify(&env, &cfg);
    r.expect_code(3);
    assert_eq!(r.json()["drift"], true);
    assert_eq!(
        drift(&r, 0),
        json!({
            "missing": ["b.txt"],
            "modified": ["a.txt", "d/e.txt", "l1"],
            "unrecorded": ["d/extra.txt", "new.txt"],
        })
    );
    let text = env.run(&["verify", "--config", cfg.to_str().unwrap()]);
    text.expect_code(3);
    for line in [
        "missing    b.txt",
        "modified   a.txt",
        "modified   l1",
        "unrecorded new.txt",
    ] {
        assert!(text.stdout.contains(line), "{line}: {}", text.stdout);
    }
    assert_eq!(env.snapshot(""), before, "verify wrote something");

    // Republishing the same bundle repairs exactly what drifted.
    let dry = env.publish(&cfg, &b, &["--dry-run"]);
    dry.expect_code(0);
    assert_eq!(dry.decision(), "repair");
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "repair");
    assert_eq!(r.dest(0)["status"], "applied");
    let files = ops(&r, "files");
    assert_eq!(files["a.txt"], "overwrite");
    assert_eq!(files["b.txt"], "create");
    assert_eq!(files["d/e.txt"], "overwrite");
    assert_eq!(files["c.txt"], "unchanged");
    assert_eq!(files.len(), 4, "{files:?}");
    let links = ops(&r, "links");
    assert_eq!(links["l1"], "overwrite");
    assert_eq!(links["l2"], "unchanged");
    let s = &r.json()["summary"];
    assert_eq!(s["repair"], 1);
    assert_eq!(s["files_written"], 3);
    assert_eq!(s["files_unchanged"], 1);
    assert_eq!(s["files_deleted"], 0);

    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert_eq!(env.read("dest/latest/b.txt"), "two");
    assert_eq!(env.read("dest/latest/d/e.txt"), "four");
    assert_eq!(
        fs::read_link(env.path("dest/latest/l1")).unwrap(),
        PathBuf::from("a.txt")
    );
    assert_eq!(env.read("dest/latest/new.txt"), "hand-made");
    assert_eq!(env.read("dest/latest/d/extra.txt"), "hand-made too");
    assert!(!env.staging_left("dest/latest"));

    // Verify is clean but for the unrecorded files, which it still reports.
    let r = verify(&env, &cfg);
    r.expect_code(3);
    assert_eq!(
        drift(&r, 0),
        json!({"missing": [], "modified": [], "unrecorded": ["d/extra.txt", "new.txt"]})
    );
    // And the next publication of the same bundle is unchanged.
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
}

#[test]
fn repair_leaves_untouched_files_in_place() {
    let (env, cfg, b) = published();
    let ino = |rel: &str| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(env.path(rel)).unwrap().ino()
    };
    let c_before = ino("dest/latest/c.txt");
    fs::remove_file(env.path("dest/latest/b.txt")).unwrap();
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "repair");
    assert_eq!(ino("dest/latest/c.txt"), c_before, "c.txt was rewritten");
    let r = verify(&env, &cfg);
    r.expect_code(0);
}

#[test]
fn a_recorded_file_replaced_by_a_link_or_directory_is_modified() {
    let (env, cfg, _) = published();
    fs::remove_file(env.path("dest/latest/a.txt")).unwrap();
    symlink("c.txt", env.path("dest/latest/a.txt")).unwrap();
    fs::remove_file(env.path("dest/latest/l2")).unwrap();
    env.write("dest/latest/l2/inner.txt", "x");
    let r = verify(&env, &cfg);
    r.expect_code(3);
    assert_eq!(
        drift(&r, 0),
        json!({"missing": [], "modified": ["a.txt", "l2"], "unrecorded": ["l2/inner.txt"]})
    );
}

#[test]
fn a_recorded_path_behind_a_symlinked_directory_is_missing() {
    let (env, cfg, b) = published();
    // Same content, but reached through a symlink to a directory outside the bundle path.
    env.write("elsewhere/e.txt", "four");
    fs::remove_dir_all(env.path("dest/latest/d")).unwrap();
    symlink(env.path("elsewhere"), env.path("dest/latest/d")).unwrap();
    let r = verify(&env, &cfg);
    r.expect_code(3);
    assert_eq!(
        drift(&r, 0),
        json!({"missing": ["d/e.txt"], "modified": [], "unrecorded": ["d"]})
    );
    // Republishing never writes through it.
    let before = env.snapshot("elsewhere");
    let r = env.publish(&cfg, &b, &[]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert_eq!(env.snapshot("elsewhere"), before);
}

#[test]
fn invalid_state_is_drift_and_absent_state_is_not() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let r = verify(&env, &cfg);
    r.expect_code(0);
    assert_eq!(r.json()["destinations"][0]["state"], "absent");
    assert!(!env.exists("dest"), "verify created the destination");
    env.write_state_file("dest/latest/.distributor.json", b"{\"state_version\": 9}");
    let r = verify(&env, &cfg);
    r.expect_code(3);
    let d = &r.json()["destinations"][0];
    assert_eq!(d["state"], "invalid");
    assert!(
        d["invalid_reason"]
            .as_str()
            .unwrap()
            .contains("state_version 9"),
        "{d}"
    );
    let s = status(&env, &cfg);
    assert_eq!(s["destinations"][0]["state"], "invalid");
    assert!(s["destinations"][0]["invalid_reason"].is_string());
}

#[test]
fn status_of_a_single_owner_destination() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let s = status(&env, &cfg);
    assert_eq!(
        s["destinations"][0],
        json!({
            "destination_id": "latest",
            "bundle_path": env.path("dest/latest").to_str().unwrap(),
            "state": "absent",
            "state_mode": null,
            "invalid_reason": null,
            "owners": [],
            "recovery_pending": false,
        })
    );
    let b = env.bundle(
        "b1",
        "tomorrow",
        T0,
        &[("a.txt", "one"), ("b.txt", "two")],
        &[("l", "a.txt")],
    );
    let p = env.publish(&cfg, &b, &[]);
    p.expect_code(0);
    let op = p.dest(0)["operation_id"].as_str().unwrap().to_string();
    let digest = p.json()["source"]["digest"].clone();
    let s = status(&env, &cfg);
    assert_eq!(s["pipeline_id"], "weather");
    let d = &s["destinations"][0];
    assert_eq!(d["state"], "valid");
    assert_eq!(d["state_mode"], "single_owner");
    assert_eq!(d["recovery_pending"], false);
    let o = &d["owners"];
    assert_eq!(o.as_array().unwrap().len(), 1);
    assert_eq!(o[0]["owner"], "weather/latest");
    assert_eq!(
        o[0]["source"],
        json!({"id": "tomorrow", "created_at": T0, "digest": digest})
    );
    assert_eq!(o[0]["operation_id"], op.as_str());
    assert_eq!(o[0]["outputs"], 2);
    assert_eq!(o[0]["links"], 1);
    let state: Value = serde_json::from_str(&env.read("dest/latest/.distributor.json")).unwrap();
    assert_eq!(o[0]["published_at"], state["published_at"]);
    let text = env.run(&["status", "--config", cfg.to_str().unwrap()]);
    text.expect_code(0);
    assert!(
        text.stdout.contains(
            "owner weather/latest: source tomorrow created 2026-12-02T06:00:00Z, 2 outputs, 1 links"
        ),
        "{}",
        text.stdout
    );
}

#[test]
fn status_of_a_shared_root() {
    let env = Env::new();
    let shared = "    state:\n      mode: shared_root\n";
    let weather = env.simple_config("w.yaml", "weather", "latest", "dest/shared", shared);
    let alerts = env.simple_config("a.yaml", "alerts", "all", "dest/shared", shared);
    let bw = env.bundle(
        "bw",
        "tomorrow",
        T0,
        &[("weather/f.json", "{}"), ("weather/g.json", "[]")],
        &[("weather/current.json", "weather/f.json")],
    );
    let ba = env.bundle("ba", "alerts-1", T1, &[("alerts/list.json", "[]")], &[]);
    env.publish(&weather, &bw, &[]).expect_code(0);
    env.publish(&alerts, &ba, &[]).expect_code(0);
    for cfg in [&weather, &alerts] {
        let s = status(&env, cfg);
        let d = &s["destinations"][0];
        assert_eq!(d["state"], "valid");
        assert_eq!(d["state_mode"], "shared_root");
        let owners: Vec<(String, String, u64, u64)> = d["owners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["owner"].as_str().unwrap().to_string(),
                    o["source"]["id"].as_str().unwrap().to_string(),
                    o["outputs"].as_u64().unwrap(),
                    o["links"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            owners,
            [
                ("alerts/all".into(), "alerts-1".into(), 1, 0),
                ("weather/latest".into(), "tomorrow".into(), 2, 1),
            ]
        );
    }
    // Each owner's paths are recorded: nothing is unrecorded or drifted.
    let r = verify(&env, &weather);
    r.expect_code(0);
    env.write("dest/shared/alerts/list.json", "[1]");
    let r = verify(&env, &weather);
    r.expect_code(3);
    assert_eq!(
        drift(&r, 0),
        json!({"missing": [], "modified": ["alerts/list.json"], "unrecorded": []})
    );
}

#[test]
fn status_and_verify_of_mapped_destinations() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "daily",
        "dest/daily",
        "    path_mapping:\n      mode: source_id\n",
    );
    let b1 = env.bundle("b1", "day-1", T0, &[("a.txt", "one")], &[]);
    let b2 = env.bundle("b2", "day-2", T1, &[("a.txt", "two")], &[]);
    env.publish(&cfg, &b1, &[]).expect_code(0);
    env.publish(&cfg, &b2, &[]).expect_code(0);
    let s = status(&env, &cfg);
    let paths: Vec<&str> = s["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["bundle_path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            env.path("dest/daily/day-1").to_str().unwrap(),
            env.path("dest/daily/day-2").to_str().unwrap()
        ]
    );
    // An interrupted first publication: staging, no state yet.
    fs::create_dir_all(env.path("dest/daily/day-3/.distributor-staging/op")).unwrap();
    let r = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(4); // recovery pending (SPEC §16)
    let s = r.json();
    let d = &s["destinations"][2];
    assert_eq!(
        d["bundle_path"],
        env.path("dest/daily/day-3").to_str().unwrap()
    );
    assert_eq!(d["state"], "absent");
    assert_eq!(d["recovery_pending"], true);
    fs::remove_dir_all(env.path("dest/daily/day-3")).unwrap();
    fs::remove_file(env.path("dest/daily/day-2/a.txt")).unwrap();
    let r = verify(&env, &cfg);
    r.expect_code(3);
    assert_eq!(
        drift(&r, 0),
        json!({"missing": [], "modified": [], "unrecorded": []})
    );
    assert_eq!(
        drift(&r, 1),
        json!({"missing": ["a.txt"], "modified": [], "unrecorded": []})
    );
}

#[test]
fn unknown_destination_is_a_usage_error() {
    let (env, cfg, _) = published();
    for cmd in ["status", "verify"] {
        let r = env.run(&[
            cmd,
            "--config",
            cfg.to_str().unwrap(),
            "--destination",
            "nope",
        ]);
        r.expect_code(2);
        assert!(r.stderr.contains("--destination nope"), "{}", r.stderr);
    }
}
