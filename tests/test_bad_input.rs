//! Bad input through the real binary (SPEC §3, §4, §10): invalid manifests, sources whose
//! content differs from their manifest, invalid destination state, and `distributor
//! manifest` on a directory it must refuse. Each case checks the exit code, a message that
//! names the file, field or path, and that nothing changed anywhere.

use crate::common::{Env, Run};
use distributor::hash::sha256_hex;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};

const T0: &str = "2026-12-02T06:00:00Z";
const T1: &str = "2026-12-02T07:00:00Z";

/// An output entry of a hand-written manifest for `content`.
fn out(path: &str, content: &str) -> Value {
    json!({"path": path, "size": content.len(), "sha256": sha256_hex(content.as_bytes())})
}

/// A manifest with default id and time, the given outputs and links.
fn manifest(outputs: Vec<Value>, links: Vec<Value>) -> Value {
    json!({"manifest_version": 1, "id": "tomorrow", "created_at": T0, "outputs": outputs, "links": links})
}

/// Writes a bundle with `files` and a hand-written manifest (no checks of ours).
fn raw_bundle(env: &Env, rel: &str, files: &[(&str, &str)], m: &Value) -> PathBuf {
    for (p, c) in files {
        env.write(&format!("{rel}/{p}"), c);
    }
    env.write(
        &format!("{rel}/distributor-manifest.json"),
        &serde_json::to_string_pretty(m).unwrap(),
    );
    env.path(rel)
}

/// A world with a published destination `dest/latest` (and an unrelated file there), a
/// config for it, and the snapshot of the whole destination.
struct World {
    env: Env,
    cfg: PathBuf,
}

impl World {
    fn published() -> World {
        let env = Env::new();
        let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
        let b = env.bundle("good", "tomorrow", T0, &[("a.txt", "one")], &[]);
        env.write("dest/latest/unrelated.txt", "hand-made");
        env.publish(&cfg, &b, &[]).expect_code(0);
        World { env, cfg }
    }

    fn fresh() -> World {
        let env = Env::new();
        let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
        World { env, cfg }
    }

    fn journal_rows(&self) -> Vec<(String, String)> {
        operations(&self.env.journal())
    }
}

/// `(decision, status)` of every row of the journal's `operations` view; empty when the
/// journal does not exist.
fn operations(journal: &Path) -> Vec<(String, String)> {
    if !journal.exists() {
        return vec![];
    }
    let conn = rusqlite::Connection::open(journal).unwrap();
    let mut stmt = conn
        .prepare("SELECT decision, status FROM operations ORDER BY started_at")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

fn assert_stderr_has(r: &Run, needles: &[&str]) {
    for n in needles {
        assert!(
            r.stderr.contains(n),
            "stderr lacks {n:?}\nstdout:\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
    }
}

/// Publishes (real and dry run, with and without --force) a bundle whose manifest is
/// refused before planning: exit 1, a message with `needles`, nothing changed, no journal
/// row added.
fn refused_source(files: &[(&str, &str)], m: Value, needles: &[&str]) {
    let w = World::published();
    let env = &w.env;
    let b = raw_bundle(env, "bad", files, &m);
    let before = env.snapshot("dest");
    let rows = w.journal_rows();
    for extra in [
        &[][..],
        &["--force"],
        &["--dry-run"],
        &["--dry-run", "--force"],
    ] {
        let r = env.publish(&w.cfg, &b, extra);
        r.expect_code(1);
        assert_stderr_has(&r, &["invalid source", b.to_str().unwrap()]);
        assert_stderr_has(&r, needles);
        assert_eq!(r.json()["error"]["kind"], "invalid_source");
        assert_eq!(
            env.snapshot("dest"),
            before,
            "destination changed ({extra:?})"
        );
        assert_eq!(w.journal_rows(), rows, "journal changed ({extra:?})");
    }
    let r = env.run(&[
        "validate",
        "--config",
        w.cfg.to_str().unwrap(),
        "--source",
        b.to_str().unwrap(),
    ]);
    r.expect_code(1);
    assert_stderr_has(&r, needles);
    // Nothing was ever created for a source refused on a fresh destination either.
    let w = World::fresh();
    let b = raw_bundle(&w.env, "bad", files, &m);
    w.env.publish(&w.cfg, &b, &[]).expect_code(1);
    assert!(!w.env.exists("dest"), "destination created");
    assert!(!w.env.journal().exists(), "journal created");
}

#[test]
fn dotdot_segment_is_refused() {
    refused_source(
        &[("a.txt", "x")],
        manifest(vec![out("x/../a.txt", "x")], vec![]),
        &["outputs[0].path", "x/../a.txt", "'..'"],
    );
}

#[test]
fn absolute_path_is_refused() {
    refused_source(
        &[("a.txt", "x")],
        manifest(vec![out("/etc/passwd", "x")], vec![]),
        &["outputs[0].path", "/etc/passwd", "absolute"],
    );
}

#[test]
fn empty_segment_is_refused() {
    refused_source(
        &[("a/b", "x")],
        manifest(vec![out("a//b", "x")], vec![]),
        &["outputs[0].path", "a//b", "empty segment"],
    );
}

#[test]
fn backslash_is_refused() {
    refused_source(
        &[("a.txt", "x")],
        manifest(vec![out("a\\b", "x")], vec![]),
        &["outputs[0].path", "backslash"],
    );
}

#[test]
fn reserved_top_level_names_are_refused() {
    for name in [
        ".distributor.json",
        ".distributor-staging/x",
        ".distributor.lock",
    ] {
        refused_source(
            &[(name, "x")],
            manifest(vec![out(name, "x")], vec![]),
            &["outputs[0].path", name, "reserved"],
        );
    }
}

#[test]
fn reserved_link_path_is_refused() {
    refused_source(
        &[("a.txt", "x")],
        manifest(
            vec![out("a.txt", "x")],
            vec![json!({"path": ".distributor.json", "target": "a.txt"})],
        ),
        &["links[0].path", ".distributor.json", "reserved"],
    );
}

#[test]
fn duplicate_paths_are_refused() {
    refused_source(
        &[("a.txt", "x")],
        manifest(vec![out("a.txt", "x"), out("a.txt", "x")], vec![]),
        &["'a.txt'", "more than once"],
    );
    // A link may not reuse an output's path either.
    refused_source(
        &[("a.txt", "x")],
        manifest(
            vec![out("a.txt", "x")],
            vec![json!({"path": "a.txt", "target": "a.txt"})],
        ),
        &["'a.txt'", "more than once"],
    );
}

#[test]
fn prefix_paths_are_refused() {
    refused_source(
        &[("a", "x"), ("b/c", "y")],
        manifest(vec![out("a", "x"), out("a/b", "y")], vec![]),
        &["'a'", "prefix", "'a/b'"],
    );
}

#[test]
fn symlinked_output_is_refused() {
    let files = [("real.txt", "x")];
    let m = manifest(vec![out("a.txt", "x")], vec![]);
    let w = World::published();
    let b = raw_bundle(&w.env, "bad", &files, &m);
    std::os::unix::fs::symlink("real.txt", b.join("a.txt")).unwrap();
    let before = w.env.snapshot("dest");
    let rows = w.journal_rows();
    for extra in [&[][..], &["--force"], &["--dry-run"]] {
        let r = w.env.publish(&w.cfg, &b, extra);
        r.expect_code(1);
        assert_stderr_has(&r, &["output 'a.txt'", "is a symlink", "regular file"]);
        assert_eq!(w.env.snapshot("dest"), before);
        assert_eq!(w.journal_rows(), rows);
    }
}

#[test]
fn symlinked_directory_on_the_way_to_an_output_is_refused() {
    let w = World::published();
    let b = raw_bundle(
        &w.env,
        "bad",
        &[("real/a.txt", "x")],
        &manifest(vec![out("d/a.txt", "x")], vec![]),
    );
    std::os::unix::fs::symlink("real", b.join("d")).unwrap();
    let before = w.env.snapshot("dest");
    let r = w.env.publish(&w.cfg, &b, &[]);
    r.expect_code(1);
    assert_stderr_has(&r, &["output 'd/a.txt'", "is a symlink"]);
    assert_eq!(w.env.snapshot("dest"), before);
}

#[test]
fn missing_output_is_refused() {
    refused_source(
        &[("other.txt", "x")],
        manifest(vec![out("a.txt", "x")], vec![]),
        &["output 'a.txt'"],
    );
}

#[test]
fn size_mismatch_is_refused() {
    refused_source(
        &[("a.txt", "four")],
        manifest(vec![out("a.txt", "x")], vec![]),
        &[
            "output 'a.txt'",
            "bad/a.txt: size is 4 bytes, the manifest says 1",
        ],
    );
}

#[test]
fn link_to_a_non_output_is_refused() {
    refused_source(
        &[("a.txt", "x"), ("b.txt", "y")],
        manifest(
            vec![out("a.txt", "x")],
            vec![json!({"path": "l", "target": "b.txt"})],
        ),
        &["links[0].target", "'b.txt'", "not an output"],
    );
    // A link is not an output: a link to a link is refused too.
    refused_source(
        &[("a.txt", "x")],
        manifest(
            vec![out("a.txt", "x")],
            vec![
                json!({"path": "l1", "target": "a.txt"}),
                json!({"path": "l2", "target": "l1"}),
            ],
        ),
        &["links[1].target", "'l1'", "not an output"],
    );
}

#[test]
fn bad_created_at_is_refused() {
    for bad in ["2026-12-02 06:00:00", "2026-12-02T06:00:00", "yesterday"] {
        let mut m = manifest(vec![out("a.txt", "x")], vec![]);
        m["created_at"] = json!(bad);
        refused_source(&[("a.txt", "x")], m, &["created_at", bad, "RFC 3339"]);
    }
}

#[test]
fn bad_id_is_refused() {
    for bad in ["", "-lead", "has space", "a/b"] {
        let mut m = manifest(vec![out("a.txt", "x")], vec![]);
        m["id"] = json!(bad);
        refused_source(&[("a.txt", "x")], m, &["id '", "invalid"]);
    }
}

#[test]
fn bad_manifest_shapes_are_refused() {
    // Unknown keys, wrong types, a bad sha and an unknown version are all invalid
    // sources, reported with the field (no outputs is a valid manifest: SPEC §19 amends
    // §3.1, and the deletion guard's `empty_source` judges it).
    let mut unknown = manifest(vec![out("a.txt", "x")], vec![]);
    unknown["owner"] = json!("someone");
    refused_source(&[("a.txt", "x")], unknown, &["unknown field `owner`"]);
    let mut wrong = manifest(vec![out("a.txt", "x")], vec![]);
    wrong["outputs"][0]["size"] = json!("1");
    refused_source(&[("a.txt", "x")], wrong, &["invalid type"]);
    let mut sha = manifest(vec![out("a.txt", "x")], vec![]);
    sha["outputs"][0]["sha256"] = json!("ABC");
    refused_source(
        &[("a.txt", "x")],
        sha,
        &["sha256 'ABC'", "64 lowercase hex", "line 9"],
    );
    let mut version = manifest(vec![out("a.txt", "x")], vec![]);
    version["manifest_version"] = json!(2);
    refused_source(&[("a.txt", "x")], version, &["manifest_version 2"]);
}

#[test]
fn garbage_manifest_is_refused() {
    let w = World::published();
    w.env.write("bad/a.txt", "x");
    w.env.write(
        "bad/distributor-manifest.json",
        "{\"manifest_version\": 1, \"id\"",
    );
    let before = w.env.snapshot("dest");
    let r = w.env.publish(&w.cfg, &w.env.path("bad"), &[]);
    r.expect_code(1);
    assert_stderr_has(&r, &["invalid source", "distributor-manifest.json"]);
    assert_eq!(w.env.snapshot("dest"), before);
    let r = w.env.publish(&w.cfg, &w.env.path("nowhere"), &[]);
    r.expect_code(1);
    assert_stderr_has(&r, &["cannot read manifest", "nowhere"]);
}

/// A bundle whose file has the listed size but other bytes: structure passes, hashing
/// while staging (or while dry-running) must catch it.
fn corrupted_bundle(env: &Env) -> PathBuf {
    let b = env.bundle(
        "corrupt",
        "tomorrow",
        T1,
        &[("a.txt", "new"), ("b.txt", "bee")],
        &[],
    );
    fs::write(b.join("b.txt"), "BEE").unwrap();
    b
}

#[test]
fn sha256_mismatch_is_caught_by_a_real_run_and_rolled_back() {
    let w = World::published();
    let env = &w.env;
    let b = corrupted_bundle(env);
    let before = env.snapshot("dest");
    let rows = w.journal_rows();
    for extra in [&[][..], &["--force"]] {
        let r = env.publish(&w.cfg, &b, extra);
        r.expect_code(1);
        let d = r.dest(0);
        assert_eq!(d["status"], "failed", "{}", r.stdout);
        let msg = d["message"].as_str().unwrap();
        assert!(msg.contains("invalid source"), "{msg}");
        assert!(msg.contains("output 'b.txt'"), "{msg}");
        assert!(msg.contains("sha256"), "{msg}");
        assert_eq!(r.json()["summary"]["failed"], 1);
        assert_eq!(
            env.snapshot("dest"),
            before,
            "destination changed ({extra:?})"
        );
        assert!(!env.staging_left("dest/latest"));
        // The journal may hold the attempt, but only as rolled back: never as applied or
        // in progress.
        let now = w.journal_rows();
        assert_eq!(&now[..rows.len()], &rows[..]);
        for (decision, status) in &now[rows.len()..] {
            assert_eq!(decision, "replace_older");
            assert!(
                status == "failed" || status == "rolled_back",
                "journal row status {status}"
            );
        }
    }
    // Nothing is pending: the next good publication goes ahead.
    let good = env.bundle("good2", "tomorrow", T1, &[("a.txt", "new")], &[]);
    let r = env.publish(&w.cfg, &good, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
}

#[test]
fn sha256_mismatch_is_caught_by_a_dry_run() {
    let w = World::published();
    let env = &w.env;
    let b = corrupted_bundle(env);
    let before = env.snapshot("");
    for args in [&["--dry-run"][..], &["--dry-run", "--force"]] {
        let r = env.publish(&w.cfg, &b, args);
        r.expect_code(1);
        let d = r.dest(0);
        assert_eq!(d["status"], "failed");
        let msg = d["message"].as_str().unwrap();
        assert!(
            msg.contains("output 'b.txt'") && msg.contains("sha256"),
            "{msg}"
        );
    }
    let r = env.plan(&w.cfg, &b, &[]);
    r.expect_code(1);
    assert_eq!(env.snapshot(""), before, "a dry run wrote something");
}

#[test]
fn sha256_mismatch_stops_every_destination() {
    let env = Env::new();
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: one\n    path: {}\n  - id: two\n    path: {}\n",
            env.path("dest/one").display(),
            env.path("dest/two").display()
        ),
    );
    let b = corrupted_bundle(&env);
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(1);
    for i in 0..2 {
        assert_eq!(r.dest(i)["status"], "failed", "{}", r.stdout);
    }
    assert!(
        r.dest(1)["message"]
            .as_str()
            .unwrap()
            .contains("not attempted"),
        "{}",
        r.stdout
    );
    assert!(!env.exists("dest/two"), "second destination touched");
    for (_, status) in operations(&env.journal()) {
        assert_eq!(status, "failed");
    }
    assert!(
        env.snapshot("dest/one")
            .iter()
            .all(|(p, _)| crate::common::is_own(p))
    );
}

/// A destination whose `.distributor.json` is `bytes`, plus an unrelated file and a file on
/// a planned path.
fn invalid_state_world(bytes: &[u8]) -> World {
    let w = World::fresh();
    w.env.write("dest/latest/unrelated.txt", "hand-made");
    w.env.write("dest/latest/a.txt", "someone's");
    w.env
        .write("dest/latest/old.txt", "listed by the broken state, maybe");
    w.env
        .write_state_file("dest/latest/.distributor.json", bytes);
    w
}

fn invalid_state_is_a_forceable_conflict(bytes: &[u8]) {
    let w = invalid_state_world(bytes);
    let env = &w.env;
    let b = env.bundle(
        "b",
        "tomorrow",
        T0,
        &[("a.txt", "one"), ("n.txt", "new")],
        &[],
    );
    let before = env.snapshot("dest");
    for r in [env.publish(&w.cfg, &b, &[]), env.plan(&w.cfg, &b, &[])] {
        r.expect_code(3);
        assert_eq!(r.decision(), "conflict");
        assert!(r.conflict_kinds().contains(&"invalid_state".to_string()));
        let c = &r.dest(0)["conflicts"];
        let c = c
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "invalid_state")
            .unwrap();
        assert_eq!(c["forceable"], true);
        assert!(
            c["message"].as_str().unwrap().contains(".distributor.json"),
            "{c}"
        );
        assert_eq!(env.snapshot("dest"), before);
    }
    // Each refused publication is journaled as such, with nothing else (SPEC §16).
    let ops = operations(&env.journal());
    assert!(!ops.is_empty());
    assert!(
        ops.iter().all(|(d, s)| d == "conflict" && s == "refused"),
        "{ops:?}"
    );
    // --force: force_replace; nothing deleted (nothing is known to be managed), fresh state.
    let r = env.publish(&w.cfg, &b, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    let files = r.dest(0)["files"].as_array().unwrap().clone();
    assert!(files.iter().all(|f| f["op"] != "delete"), "{files:?}");
    assert_eq!(r.json()["summary"]["files_deleted"], 0);
    assert_eq!(env.read("dest/latest/unrelated.txt"), "hand-made");
    assert_eq!(
        env.read("dest/latest/old.txt"),
        "listed by the broken state, maybe"
    );
    assert_eq!(env.read("dest/latest/a.txt"), "one");
    assert_eq!(env.read("dest/latest/n.txt"), "new");
    let state: Value = serde_json::from_str(&env.read("dest/latest/.distributor.json")).unwrap();
    assert_eq!(state["state_version"], 1);
    assert_eq!(state["pipeline_id"], "weather");
    let paths: Vec<&str> = state["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a.txt", "n.txt"]);
    let r = env.publish(&w.cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
}

#[test]
fn garbage_state_is_invalid_state() {
    invalid_state_is_a_forceable_conflict(b"\x00\xffnot json at all");
}

#[test]
fn truncated_state_is_invalid_state() {
    // A real state file cut in half.
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest/latest", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        T0,
        &[("a.txt", "one"), ("old.txt", "old")],
        &[],
    );
    env.publish(&cfg, &b, &[]).expect_code(0);
    let full = fs::read(env.path("dest/latest/.distributor.json")).unwrap();
    invalid_state_is_a_forceable_conflict(&full[..full.len() / 2]);
}

#[test]
fn invalid_state_with_refuse_stays_a_conflict_under_force() {
    let w = World::fresh();
    let cfg = w.env.simple_config(
        "r.yaml",
        "weather",
        "latest",
        "dest/latest",
        "    transfer:\n      on_conflict: refuse\n",
    );
    w.env
        .write_state_file("dest/latest/.distributor.json", b"{}");
    let b = w.env.bundle("b", "tomorrow", T0, &[("a.txt", "one")], &[]);
    let before = w.env.snapshot("dest");
    let r = w.env.publish(&cfg, &b, &["--force"]);
    r.expect_code(3);
    assert_eq!(r.decision(), "conflict");
    assert!(r.dest(0)["message"].as_str().unwrap().contains("refuse"));
    assert_eq!(w.env.snapshot("dest"), before);
}

#[test]
fn force_never_overrides_an_invalid_source_on_invalid_state() {
    let w = invalid_state_world(b"garbage");
    let b = corrupted_bundle(&w.env);
    let before = w.env.snapshot("dest");
    let r = w.env.publish(&w.cfg, &b, &["--force"]);
    r.expect_code(1);
    // The real run took the destination lock before staging caught the bad bytes; the
    // lock file is the tool's own and the only trace.
    assert_eq!(w.env.snapshot_unlocked("dest"), before);
    assert!(!w.env.staging_left("dest/latest"));
}

#[test]
fn manifest_refuses_a_symlink_pointing_outside() {
    let env = Env::new();
    env.write("outside.txt", "secret");
    for (name, target) in [
        ("up", "../outside.txt".to_string()),
        ("abs", env.path("outside.txt").display().to_string()),
    ] {
        let dir = env.path(&format!("m-{name}"));
        env.write(&format!("m-{name}/a.txt"), "x");
        std::os::unix::fs::symlink(&target, dir.join("leak")).unwrap();
        let r = env.run(&[
            "manifest",
            dir.to_str().unwrap(),
            "--id",
            "x",
            "--created-at",
            T0,
        ]);
        r.expect_code(1);
        assert_stderr_has(&r, &["symlink leak", "points outside"]);
        assert!(!dir.join("distributor-manifest.json").exists());
    }
    // A symlink to a directory inside is no link to an output either.
    env.write("m-dir/d/a.txt", "x");
    std::os::unix::fs::symlink("d", env.path("m-dir/l")).unwrap();
    let r = env.run(&["manifest", env.path("m-dir").to_str().unwrap(), "--id", "x"]);
    r.expect_code(1);
    assert_stderr_has(&r, &["symlink l", "regular file"]);
    assert!(!env.exists("m-dir/distributor-manifest.json"));
}

/// SPEC §3.1: a symlink to a file inside DIR becomes a link, however its text reaches the
/// file: relative, climbing out of DIR and back in, or absolute.
#[test]
fn manifest_links_every_symlink_that_reaches_a_file_inside() {
    let env = Env::new();
    env.write("m/maps/t.png", "png");
    let dir = env.path("m");
    for (name, target) in [
        ("rel", "maps/t.png".to_string()),
        ("viaparent", "../m/maps/t.png".to_string()),
        ("abs", dir.join("maps/t.png").display().to_string()),
        ("maps/up", "../maps/./t.png".to_string()),
    ] {
        std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
    }
    let r = env.run(&[
        "manifest",
        dir.to_str().unwrap(),
        "--id",
        "x",
        "--created-at",
        T0,
    ]);
    r.expect_code(0);
    let m: serde_json::Value =
        serde_json::from_str(&env.read("m/distributor-manifest.json")).unwrap();
    let links: Vec<(String, String)> = m["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap().to_string(),
                l["target"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = ["abs", "maps/up", "rel", "viaparent"]
        .iter()
        .map(|p| (p.to_string(), "maps/t.png".to_string()))
        .collect();
    assert_eq!(links, want);
}

#[test]
fn manifest_never_writes_through_a_symlinked_manifest() {
    let env = Env::new();
    env.write("outside.json", "keep");
    env.write("m/a.txt", "x");
    std::os::unix::fs::symlink(
        env.path("outside.json"),
        env.path("m/distributor-manifest.json"),
    )
    .unwrap();
    let r = env.run(&["manifest", env.path("m").to_str().unwrap(), "--id", "x"]);
    r.expect_code(1);
    assert_stderr_has(&r, &["distributor-manifest.json", "not a regular file"]);
    assert_eq!(env.read("outside.json"), "keep");
}

#[test]
fn manifest_refuses_bad_arguments() {
    let env = Env::new();
    env.write("m/a.txt", "x");
    let dir = env.path("m");
    let d = dir.to_str().unwrap();
    let r = env.run(&["manifest", d, "--id", "bad id"]);
    r.expect_code(2);
    assert_stderr_has(&r, &["--id 'bad id'"]);
    let r = env.run(&["manifest", d, "--id", "x", "--created-at", "today"]);
    r.expect_code(2);
    assert_stderr_has(&r, &["--created-at 'today'", "RFC 3339"]);
    assert!(!env.exists("m/distributor-manifest.json"));
    // A reserved name inside the bundle cannot be listed either.
    env.write("r/.distributor.json", "{}");
    let r = env.run(&["manifest", env.path("r").to_str().unwrap(), "--id", "x"]);
    r.expect_code(1);
    assert_stderr_has(&r, &[".distributor.json", "reserved"]);
    assert!(!env.exists("r/distributor-manifest.json"));
}

#[test]
fn manifest_writes_links_for_symlinks_inside() {
    let env = Env::new();
    env.write("m/maps/temp.png", "png");
    env.write("m/forecast.json", "{}");
    std::os::unix::fs::symlink("maps/temp.png", env.path("m/current.png")).unwrap();
    let r = env.run(&[
        "manifest",
        env.path("m").to_str().unwrap(),
        "--id",
        "tomorrow",
        "--created-at",
        T0,
    ]);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("sha256:88612630aea63ae33a81ed5e89fdda9cc31d58cb1fafd82c17070e2689d531d8"),
        "{}",
        r.stdout
    );
    let m: Value = serde_json::from_str(&env.read("m/distributor-manifest.json")).unwrap();
    assert_eq!(
        m["links"],
        json!([{"path": "current.png", "target": "maps/temp.png"}])
    );
}
