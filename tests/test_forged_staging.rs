//! Forged staging (SPEC §13: "`recover` follows nothing in `.distributor/staging/` through a
//! symlink, and uses a staging entry only if it is a real directory tree that its own
//! record describes"). Anyone who can write inside the destination can plant an
//! operation's staging there; `recover` must not let it read, move or delete anything
//! outside the bundle path, nor move anything planted into the destination.
//!
//! The planted operation is well formed: `plan.json` names this bundle path, its
//! pre-state is the state file now (so `recover` rolls it back), and it looks like a
//! publication interrupted after placing its files (`x.txt` overwritten, original at
//! `old/1`; `new.txt` created). A control proves that such an operation is rolled back.
//! Each forgery then changes one thing: `old`, `old/1`, `new`, `plan.json` or
//! `.distributor/staging` is a symlink to something outside; an action path escapes the
//! bundle path; `old/1` is a directory; the operation directory holds entries its record
//! does not describe. For each, `recover` must fail that operation with a message naming
//! the offending path (exit non-zero, outcome `failed`), leave the private files outside
//! byte-identical and in place, and leave the destination as it was.

use crate::common::hostile::outside;
use crate::common::{Env, Run};
use distributor::hash::sha256_hex;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

const DEST: &str = "dest/root";
const CANARY: &str = "dest/canary/c.txt";
/// A directory outside the destination the forgeries point into.
const PRIVATE: &str = "private";
const OP: &str = "0b6f1a52-7d0e-4c1e-9a55-3f1f6c2e8d10";
const V1_AT: &str = "2026-12-02T06:00:00Z";
const V2_AT: &str = "2026-12-02T07:00:00Z";
/// The index of the overwrite of `x.txt` in the planted record's actions.
const I: usize = 1;

/// A destination holding v1, and a planted interrupted operation on it.
struct Forged {
    env: Env,
    cfg: PathBuf,
    /// The bundle path, absolute.
    bundle: PathBuf,
    /// `<bundle>/.distributor/staging/<OP>`.
    op_dir: PathBuf,
    /// The planted `plan.json`.
    plan: Value,
    /// The destination after v1, before anything was planted (lock file excluded).
    v1: Vec<(String, String)>,
}

fn file_action(kind: &str, path: &str, content: &str) -> Value {
    let mut a = json!({
        "kind": kind,
        "path": path,
        "size": content.len(),
        "sha256": sha256_hex(content.as_bytes()),
    });
    // An overwrite records what it moves aside: here a file, as distributor writes it.
    if kind != "file_create" {
        a["replaces"] = "file".into();
    }
    a
}

impl Forged {
    /// v1 published (single owner), then the scene of an operation interrupted after
    /// placement: `x.txt` holds the new content and its original is at `old/1`, `new.txt`
    /// was created (its bucket `new/0/` is empty), the state file is still v1's.
    fn new() -> Forged {
        let env = Env::new();
        env.write(CANARY, "canary");
        env.write(&format!("{PRIVATE}/{I}"), "private");
        env.write(&format!("{PRIVATE}/secret.txt"), "private secret");
        env.write(&format!("{PRIVATE}/0/0"), "private new");
        let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
        let v1 = env.bundle(
            "b1",
            "tomorrow",
            V1_AT,
            &[("a/s.txt", "v1 s"), ("keep.txt", "kept"), ("x.txt", "v1 x")],
            &[],
        );
        env.publish(&cfg, &v1, &[]).expect_code(0);
        let bundle = env.path(DEST);
        let v1_snapshot = destination(&env);
        let state_bytes = fs::read(bundle.join(".distributor.json")).unwrap();
        let state: Value = serde_json::from_slice(&state_bytes).unwrap();
        let post = b"{\"forged\": \"post-state\"}\n";
        let plan = json!({
            "operation_id": OP,
            "destination_id": "latest",
            "bundle_path": bundle,
            "pre_state_sha256": sha256_hex(&state_bytes),
            "post_state_sha256": sha256_hex(post),
            "origin": {
                "started_at": "2026-12-02T07:00:01.000Z", "command": "publish",
                "actor": "cli:tester", "pipeline_id": "weather", "state_mode": "single_owner",
                "decision": "replace_older", "takeover_mode": "same_pipeline",
                "previous_owner": "weather/latest", "previous_source": state["source"],
                "source": {"id": "tomorrow", "created_at": V2_AT,
                           "digest": format!("sha256:{}", sha256_hex(b"forged"))},
                "takeovers": []
            },
            "actions": [
                file_action("file_create", "new.txt", "v2 new"),
                file_action("file_overwrite", "x.txt", "v2 x"),
            ],
            "new_dirs": [],
            "staging_layout": "flat",
        });
        let op_dir = bundle.join(".distributor/staging").join(OP);
        fs::create_dir_all(op_dir.join("new/0")).unwrap();
        fs::create_dir_all(op_dir.join("old")).unwrap();
        fs::write(op_dir.join("pre-state.json"), &state_bytes).unwrap();
        fs::write(op_dir.join("post-state.json"), post).unwrap();
        fs::write(op_dir.join(format!("old/{I}")), "v1 x").unwrap();
        env.write(&format!("{DEST}/x.txt"), "v2 x");
        env.write(&format!("{DEST}/new.txt"), "v2 new");
        let f = Forged {
            env,
            cfg,
            bundle,
            op_dir,
            plan,
            v1: v1_snapshot,
        };
        f.write_plan();
        // Planted with the modes of distributor's own records (SPEC §17), as its own uid
        // could: what is tested here is what comes after trust.
        crate::common::as_records(&f.bundle);
        f
    }

    fn write_plan(&self) {
        fs::write(
            self.op_dir.join("plan.json"),
            serde_json::to_vec_pretty(&self.plan).unwrap(),
        )
        .unwrap();
    }

    fn private(&self, rel: &str) -> PathBuf {
        self.env.path(&format!("{PRIVATE}/{rel}"))
    }

    fn recover(&self) -> Run {
        self.env
            .run(&["recover", "--json", "--config", self.cfg.to_str().unwrap()])
    }

    /// Runs `recover` on the forged staging and asserts that it touched nothing and
    /// failed, naming one of `offending` in an operation's message.
    fn assert_refused(&self, offending: &[&str], what: &str) {
        let env = &self.env;
        let private_before = env.snapshot(PRIVATE);
        let outside_before = outside(env, DEST);
        let dest_before = destination(env);
        let r = self.recover();
        let ctx = format!(
            "{what}: recover exited {}\nstdout:\n{}\nstderr:\n{}",
            r.code, r.stdout, r.stderr
        );
        assert_eq!(
            env.snapshot(PRIVATE),
            private_before,
            "{ctx}\nthe private directory outside the destination changed"
        );
        assert_eq!(env.read(CANARY), "canary", "{ctx}\nthe canary changed");
        assert_eq!(
            outside(env, DEST),
            outside_before,
            "{ctx}\nsomething outside the destination changed"
        );
        assert_eq!(
            destination(env),
            dest_before,
            "{ctx}\nthe destination changed"
        );
        assert!(
            r.code != 0 && r.code != -1 && !r.stderr.contains("panicked at"),
            "{ctx}\nexpected a failure (exit 1), not success or a crash"
        );
        let report = r.json();
        let ops = report["operations"].as_array().cloned().unwrap_or_default();
        for o in &ops {
            assert!(
                !matches!(
                    o["outcome"].as_str(),
                    Some("rolled_back" | "rolled_forward")
                ),
                "{ctx}\nan operation was recovered from forged staging"
            );
        }
        assert!(
            ops.iter().any(|o| {
                (o["outcome"] == "failed" || o["outcome"] == "untrusted")
                    && offending
                        .iter()
                        .any(|p| o["message"].as_str().unwrap_or_default().contains(p))
            }),
            "{ctx}\nno failed operation names {offending:?}"
        );
    }
}

/// The destination, without staging and lock file.
fn destination(env: &Env) -> Vec<(String, String)> {
    env.snapshot(DEST)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".distributor") || p == ".distributor.json")
        .collect()
}

fn op_path(rel: &str) -> String {
    format!("{OP}/{rel}")
}

/// The control: the planted operation, unforged, is rolled back, so each forgery below is
/// refused for its forgery alone.
#[test]
fn a_well_formed_staging_record_is_rolled_back() {
    let f = Forged::new();
    let private_before = f.env.snapshot(PRIVATE);
    let r = f.recover();
    r.expect_code(0);
    let ops = r.json()["operations"].clone();
    assert_eq!(ops.as_array().map(Vec::len), Some(1), "{}", r.stdout);
    assert_eq!(ops[0]["outcome"], "rolled_back", "{}", r.stdout);
    assert_eq!(destination(&f.env), f.v1, "not rolled back to v1");
    assert!(!f.env.staging_left(DEST));
    assert_eq!(f.env.snapshot(PRIVATE), private_before);
    assert_eq!(f.env.read(CANARY), "canary");
}

/// (a) `old` is a symlink to a private directory holding a file named like the
/// moved-aside original.
#[test]
fn recover_never_follows_a_symlinked_old_directory() {
    let f = Forged::new();
    fs::remove_dir_all(f.op_dir.join("old")).unwrap();
    symlink(f.env.path(PRIVATE), f.op_dir.join("old")).unwrap();
    f.assert_refused(&[&op_path("old")], "old -> private dir");
}

/// (b) `old/1` is a symlink to a private file, where the record moved aside a file. (A
/// record may say it moved a link aside; restoring a link never follows it, and puts in
/// the destination only what its neighbour could have put there anyway.)
#[test]
fn recover_never_restores_a_symlink_planted_as_moved_aside_content() {
    let f = Forged::new();
    let old = f.op_dir.join(format!("old/{I}"));
    fs::remove_file(&old).unwrap();
    symlink(f.private("secret.txt"), &old).unwrap();
    f.assert_refused(&[&op_path(&format!("old/{I}"))], "old/1 -> private file");
}

/// (c) `new` is a symlink to a private directory (holding `0/0`, where action 0's staged
/// file would be).
#[test]
fn recover_refuses_a_symlinked_new_directory() {
    let f = Forged::new();
    fs::remove_dir_all(f.op_dir.join("new")).unwrap();
    symlink(f.env.path(PRIVATE), f.op_dir.join("new")).unwrap();
    f.assert_refused(&[&op_path("new")], "new -> private dir");
}

/// (d) `plan.json` is a symlink to a (well-formed) plan kept elsewhere.
#[test]
fn recover_refuses_a_symlinked_plan() {
    let f = Forged::new();
    let elsewhere = f.private("plan.json");
    fs::rename(f.op_dir.join("plan.json"), &elsewhere).unwrap();
    symlink(&elsewhere, f.op_dir.join("plan.json")).unwrap();
    f.assert_refused(&[&op_path("plan.json")], "plan.json -> private plan");
}

/// (e) `.distributor/staging`, or `.distributor` itself, is a symlink to a directory
/// elsewhere that holds the well-formed operation directory.
#[test]
fn recover_refuses_a_symlinked_staging_directory() {
    for link in [".distributor/staging", ".distributor"] {
        let f = Forged::new();
        let staging = f.bundle.join(link);
        let elsewhere = f.private("staging");
        fs::rename(&staging, &elsewhere).unwrap();
        symlink(&elsewhere, &staging).unwrap();
        f.assert_refused(&[link], &format!("{link} -> private dir"));
    }
}

/// (f) An action whose path leaves the bundle path: a deletion whose "original" waits at
/// `old/2`, to be restored there. The absolute one points into the private directory (not
/// at `/etc`: the tests may run as root).
#[test]
fn recover_refuses_action_paths_that_escape_the_bundle() {
    for escape in ["../x", "a/../../x", "{private}/x"] {
        let mut f = Forged::new();
        let private_x = f.private("x");
        let path = escape.replace("{private}", private_x.to_str().unwrap());
        let actions = f.plan["actions"].as_array_mut().unwrap();
        actions.push(file_action("file_delete", &path, "planted"));
        f.write_plan();
        fs::write(f.op_dir.join("old/2"), "planted").unwrap();
        f.assert_refused(&[&path], &format!("action path {path}"));
    }
}

/// (g) `old/1` is a directory holding a file (moved-aside content is always a file or a
/// symlink).
#[test]
fn recover_refuses_a_directory_as_moved_aside_content() {
    let f = Forged::new();
    let old = f.op_dir.join(format!("old/{I}"));
    fs::remove_file(&old).unwrap();
    fs::create_dir(&old).unwrap();
    fs::write(old.join("f.txt"), "planted").unwrap();
    f.assert_refused(&[&op_path(&format!("old/{I}"))], "old/1 is a directory");
}

/// (h) The operation directory holds entries besides `plan.json`, `pre-state.json`,
/// `post-state.json`, `new` and `old`.
#[test]
fn recover_refuses_an_operation_directory_with_unknown_entries() {
    let f = Forged::new();
    fs::write(f.op_dir.join("evil.txt"), "planted").unwrap();
    fs::create_dir(f.op_dir.join("stash")).unwrap();
    fs::write(f.op_dir.join("stash/f.txt"), "planted").unwrap();
    f.assert_refused(
        &[&op_path("evil.txt"), &op_path("stash")],
        "unknown entries in the operation directory",
    );
}

/// The planted operation also created `n/t.txt` in a new directory `n`, staged as a new
/// tree (`staging_layout: trees`, `new/tree/n/t.txt`) and placed whole: `new/tree/` is
/// empty, `n/t.txt` stands in the destination with the new content.
fn with_a_new_tree() -> Forged {
    let mut f = Forged::new();
    f.plan["staging_layout"] = "trees".into();
    f.plan["new_dirs"] = json!(["n"]);
    let actions = f.plan["actions"].as_array_mut().unwrap();
    actions.push(file_action("file_create", "n/t.txt", "v2 tree"));
    f.write_plan();
    fs::create_dir_all(f.op_dir.join("new/tree")).unwrap();
    f.env.write(&format!("{DEST}/n/t.txt"), "v2 tree");
    crate::common::as_records(&f.bundle);
    f
}

/// The control for the new-tree forgeries: such an operation is rolled back, the placed
/// tree removed with it.
#[test]
fn a_well_formed_record_with_a_placed_new_tree_is_rolled_back() {
    let f = with_a_new_tree();
    let r = f.recover();
    r.expect_code(0);
    let ops = r.json()["operations"].clone();
    assert_eq!(ops[0]["outcome"], "rolled_back", "{}", r.stdout);
    assert_eq!(destination(&f.env), f.v1, "not rolled back to v1");
    assert!(!f.env.staging_left(DEST));
}

/// (i) `new/tree/` holds what the record does not stage there: a file beside the tree's
/// (planted in the tree's directory), a directory of another name, or the tree's
/// directory as a symlink to a private directory.
#[test]
fn recover_refuses_new_trees_holding_what_the_record_does_not_stage() {
    let f = with_a_new_tree();
    fs::create_dir(f.op_dir.join("new/tree/n")).unwrap();
    fs::write(f.op_dir.join("new/tree/n/evil.txt"), "planted").unwrap();
    f.assert_refused(
        &[&op_path("new/tree/n/evil.txt")],
        "a planted file in a tree",
    );

    let f = with_a_new_tree();
    fs::create_dir_all(f.op_dir.join("new/tree/other")).unwrap();
    f.assert_refused(&[&op_path("new/tree/other")], "a directory no tree names");

    let f = with_a_new_tree();
    fs::create_dir_all(f.private("n")).unwrap();
    fs::write(f.private("n/t.txt"), "v2 tree").unwrap();
    symlink(f.private("n"), f.op_dir.join("new/tree/n")).unwrap();
    f.assert_refused(&[&op_path("new/tree/n")], "new/tree/n -> private dir");

    let f = with_a_new_tree();
    fs::remove_dir(f.op_dir.join("new/tree")).unwrap();
    symlink(f.env.path(PRIVATE), f.op_dir.join("new/tree")).unwrap();
    f.assert_refused(&[&op_path("new/tree")], "new/tree -> private dir");
}
