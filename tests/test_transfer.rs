//! Transfer policy (SPEC §5.1, §5.3): same-source comparisons, destination-newer content,
//! same-created digest mismatches, and that a takeover never replaces newer content.

use crate::common::{Env, Run};
use std::path::PathBuf;

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const T8: &str = "2026-12-02T08:00:00Z";

/// Destination keys for a transfer policy (`key: value` under `transfer:`), optionally a
/// takeover mode and a state mode.
fn transfer(lines: &[&str]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut s = "    transfer:\n".to_string();
    for l in lines {
        s.push_str(&format!("      {l}\n"));
    }
    s
}

/// A config for `weather/latest` at `dest` with `extra` destination keys.
fn config(env: &Env, name: &str, extra: &str) -> PathBuf {
    env.simple_config(name, "weather", "latest", "dest", extra)
}

fn bundle(env: &Env, rel: &str, id: &str, at: &str, a: &str) -> PathBuf {
    env.bundle(rel, id, at, &[("a.txt", a), ("b.txt", "b")], &[])
}

/// Asserts a run that writes nothing: decision, exit code, status, conflict kinds and a
/// destination byte-identical to `before`.
fn assert_nothing_written(
    env: &Env,
    r: &Run,
    before: &[(String, String)],
    decision: &str,
    code: i32,
    kinds: &[&str],
) {
    r.expect_code(code);
    assert_eq!(r.decision(), decision, "{}", r.stdout);
    assert_eq!(r.conflict_kinds(), kinds, "{}", r.stdout);
    let d = r.dest(0);
    let status = if decision == "conflict" {
        "conflict"
    } else {
        "skipped"
    };
    assert_eq!(d["status"], status);
    // Only a refused publication is journaled (SPEC §16); a skip writes nothing at all.
    assert_eq!(
        d["operation_id"].is_string(),
        decision == "conflict",
        "{}",
        r.stdout
    );
    assert_eq!(d["takeovers"], serde_json::json!([]));
    for c in d["conflicts"].as_array().unwrap() {
        assert_eq!(c["forceable"], true, "{c}");
    }
    assert_eq!(env.snapshot("dest"), before, "nothing is written");
}

#[test]
fn older_state_of_the_same_source_is_replace_older() {
    let env = Env::new();
    let cfg = config(&env, "c.yaml", "");
    env.publish(&cfg, &bundle(&env, "b6", "tomorrow", T6, "six"), &[])
        .expect_code(0);
    let r = env.publish(&cfg, &bundle(&env, "b7", "tomorrow", T7, "seven"), &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    let d = r.dest(0);
    assert_eq!(d["previous"]["owner"], "weather/latest");
    assert_eq!(d["previous"]["source"]["created_at"], T6);
    assert_eq!(d["takeovers"], serde_json::json!([]));
    assert_eq!(env.read("dest/a.txt"), "seven");
}

#[test]
fn the_same_bundle_again_is_unchanged_and_writes_nothing() {
    let env = Env::new();
    let cfg = config(&env, "c.yaml", "");
    let b = bundle(&env, "b", "tomorrow", T7, "seven");
    env.publish(&cfg, &b, &[]).expect_code(0);
    let before = env.snapshot("dest");
    let r = env.publish(&cfg, &b, &[]);
    assert_nothing_written(&env, &r, &before, "unchanged", 0, &[]);
    let ops: Vec<String> = r.dest(0)["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["op"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ops, ["unchanged", "unchanged"]);
    assert_eq!(r.json()["summary"]["files_unchanged"], 2);
    assert_eq!(r.json()["summary"]["files_written"], 0);
}

#[test]
fn same_created_digest_mismatch_conflicts_by_default_and_when_configured() {
    for extra in [
        String::new(),
        transfer(&["same_created_digest_mismatch: conflict"]),
    ] {
        let env = Env::new();
        let cfg = config(&env, "c.yaml", &extra);
        env.publish(&cfg, &bundle(&env, "b1", "tomorrow", T7, "one"), &[])
            .expect_code(0);
        let before = env.snapshot("dest");
        let b2 = bundle(&env, "b2", "tomorrow", T7, "two");
        let r = env.publish(&cfg, &b2, &[]);
        assert_nothing_written(
            &env,
            &r,
            &before,
            "conflict",
            3,
            &["same_created_digest_mismatch"],
        );
        assert_eq!(env.read("dest/a.txt"), "one");
        // Forceable: --force with the default on_conflict: replace writes it.
        let r = env.publish(&cfg, &b2, &["--force"]);
        r.expect_code(0);
        assert_eq!(r.decision(), "force_replace");
        assert_eq!(env.read("dest/a.txt"), "two");
    }
}

#[test]
fn same_created_digest_mismatch_replace_is_replace_changed() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        &transfer(&["same_created_digest_mismatch: replace"]),
    );
    env.publish(&cfg, &bundle(&env, "b1", "tomorrow", T7, "one"), &[])
        .expect_code(0);
    let r = env.publish(&cfg, &bundle(&env, "b2", "tomorrow", T7, "two"), &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_changed");
    assert_eq!(r.conflict_kinds(), Vec::<String>::new());
    assert_eq!(r.dest(0)["takeovers"], serde_json::json!([]));
    assert_eq!(env.read("dest/a.txt"), "two");
    let files = r.dest(0)["files"].clone();
    assert_eq!(files[0]["path"], "a.txt");
    assert_eq!(files[0]["op"], "overwrite");
    assert_eq!(files[1]["path"], "b.txt");
    assert_eq!(
        files[1]["op"], "unchanged",
        "identical content is not rewritten"
    );
}

#[test]
fn destination_newer_skip_is_the_default_and_writes_nothing() {
    for extra in [String::new(), transfer(&["destination_newer: skip"])] {
        let env = Env::new();
        let cfg = config(&env, "c.yaml", &extra);
        env.publish(&cfg, &bundle(&env, "b8", "tomorrow", T8, "eight"), &[])
            .expect_code(0);
        let before = env.snapshot("dest");
        let b7 = bundle(&env, "b7", "tomorrow", T7, "seven");
        let r = env.publish(&cfg, &b7, &[]);
        assert_nothing_written(&env, &r, &before, "skip_destination_newer", 0, &[]);
        assert_eq!(r.json()["summary"]["skip_destination_newer"], 1);
        // A skip is not a conflict: --force has nothing to override.
        let r = env.publish(&cfg, &b7, &["--force"]);
        assert_nothing_written(&env, &r, &before, "skip_destination_newer", 0, &[]);
    }
}

#[test]
fn destination_newer_conflict_conflicts_and_force_overrides_unless_refused() {
    let env = Env::new();
    let cfg = config(&env, "c.yaml", &transfer(&["destination_newer: conflict"]));
    env.publish(&cfg, &bundle(&env, "b8", "tomorrow", T8, "eight"), &[])
        .expect_code(0);
    let before = env.snapshot("dest");
    let b7 = bundle(&env, "b7", "tomorrow", T7, "seven");
    let r = env.publish(&cfg, &b7, &[]);
    assert_nothing_written(&env, &r, &before, "conflict", 3, &["destination_newer"]);

    let refuse = config(
        &env,
        "refuse.yaml",
        &transfer(&["destination_newer: conflict", "on_conflict: refuse"]),
    );
    let r = env.publish(&refuse, &b7, &["--force"]);
    assert_nothing_written(&env, &r, &before, "conflict", 3, &["destination_newer"]);

    let r = env.publish(&cfg, &b7, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(env.read("dest/a.txt"), "seven");
}

/// Single owner: `weather/latest` holds `other-src` from 08:00; the current source is
/// `tomorrow` from 07:00. same_pipeline would permit the takeover, but it never replaces
/// content from a newer source.
#[test]
fn a_takeover_never_replaces_newer_content() {
    for (extra, decision, code, kinds) in [
        (
            transfer(&["destination_newer: skip"]),
            "skip_destination_newer",
            0,
            &[][..],
        ),
        (
            transfer(&["destination_newer: conflict"]),
            "conflict",
            3,
            &["destination_newer"][..],
        ),
    ] {
        let env = Env::new();
        let cfg = config(
            &env,
            "c.yaml",
            &format!("{extra}    takeover:\n      mode: same_pipeline\n"),
        );
        env.publish(&cfg, &bundle(&env, "b8", "other-src", T8, "eight"), &[])
            .expect_code(0);
        let before = env.snapshot("dest");
        let r = env.publish(&cfg, &bundle(&env, "b7", "tomorrow", T7, "seven"), &[]);
        assert_nothing_written(&env, &r, &before, decision, code, kinds);
        assert_eq!(r.dest(0)["previous"]["source"]["id"], "other-src");
    }
}

/// The same from another destination of the same pipeline.
#[test]
fn a_takeover_from_another_destination_never_replaces_newer_content() {
    for (policy, decision, code, kinds) in [
        ("skip", "skip_destination_newer", 0, &[][..]),
        ("conflict", "conflict", 3, &["destination_newer"][..]),
    ] {
        let env = Env::new();
        let other = env.simple_config("other.yaml", "weather", "other", "dest", "");
        env.publish(&other, &bundle(&env, "b8", "other-src", T8, "eight"), &[])
            .expect_code(0);
        let cfg = config(
            &env,
            "c.yaml",
            &transfer(&[&format!("destination_newer: {policy}")]),
        );
        let before = env.snapshot("dest");
        let r = env.publish(&cfg, &bundle(&env, "b7", "tomorrow", T7, "seven"), &[]);
        assert_nothing_written(&env, &r, &before, decision, code, kinds);
    }
}

/// Shared root: a colliding path owned by a permitted owner whose source is newer.
#[test]
fn a_shared_root_takeover_never_replaces_newer_content() {
    for (policy, decision, code, kinds) in [
        ("skip", "skip_destination_newer", 0, &[][..]),
        ("conflict", "conflict", 3, &["destination_newer"][..]),
    ] {
        let env = Env::new();
        let shared = "    state:\n      mode: shared_root\n";
        let other = env.simple_config("other.yaml", "weather", "other", "dest", shared);
        env.publish(&other, &bundle(&env, "b8", "other-src", T8, "eight"), &[])
            .expect_code(0);
        let cfg = config(
            &env,
            "c.yaml",
            &format!(
                "{shared}{}",
                transfer(&[&format!("destination_newer: {policy}")])
            ),
        );
        let before = env.snapshot("dest");
        let r = env.publish(&cfg, &bundle(&env, "b7", "tomorrow", T7, "seven"), &[]);
        assert_nothing_written(&env, &r, &before, decision, code, kinds);
        assert!(r.dest(0)["previous"].is_null(), "no own record yet");
    }
}

/// Equal source ids and `created_at` with another digest are decided by transfer, even
/// when the owner differs (SPEC §5.1, last sentence).
#[test]
fn same_created_digest_mismatch_applies_across_owners() {
    let env = Env::new();
    let other = env.simple_config("other.yaml", "weather", "other", "dest", "");
    env.publish(&other, &bundle(&env, "b1", "tomorrow", T7, "one"), &[])
        .expect_code(0);
    let before = env.snapshot("dest");
    let b2 = bundle(&env, "b2", "tomorrow", T7, "two");
    let cfg = config(&env, "c.yaml", "");
    let r = env.publish(&cfg, &b2, &[]);
    assert_nothing_written(
        &env,
        &r,
        &before,
        "conflict",
        3,
        &["same_created_digest_mismatch"],
    );
    let cfg = config(
        &env,
        "c2.yaml",
        &transfer(&["same_created_digest_mismatch: replace"]),
    );
    let r = env.publish(&cfg, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_takeover");
    assert_eq!(r.dest(0)["takeovers"][0]["from_owner"], "weather/other");
    assert_eq!(env.read("dest/a.txt"), "two");
}

/// A refusal `--force` cannot lift: another owner's newer content, which
/// `destination_newer: skip` keeps even under `--force`. Every conflict is then not
/// forceable, and the run exits 3 with or without `--force`.
fn assert_refused_newer(env: &Env, r: &Run, before: &[(String, String)], kinds: &[&str]) {
    r.expect_code(3);
    assert_eq!(r.decision(), "conflict", "{}", r.stdout);
    assert_eq!(r.conflict_kinds(), kinds, "{}", r.stdout);
    let d = r.dest(0);
    assert_eq!(d["status"], "conflict");
    // Refused, and journaled as such (SPEC §16).
    assert!(d["operation_id"].is_string(), "{}", r.stdout);
    for c in d["conflicts"].as_array().unwrap() {
        assert_eq!(c["forceable"], false, "{c}");
        assert!(
            c["message"]
                .as_str()
                .unwrap()
                .contains("newer than this source"),
            "{c}"
        );
    }
    let reason = d["message"].as_str().unwrap();
    assert!(reason.contains("not forceable"), "{reason}");
    assert!(!reason.contains("--force would"), "{reason}");
    assert_eq!(env.snapshot("dest"), before, "nothing is written");
}

/// Another pipeline holds newer content and takeover is not permitted. Under
/// `destination_newer: skip` the newer content stays in place even with `--force`, so the
/// ownership conflict is not forceable and a forced run is refused too (exit 3, not a skip
/// with exit 0); under `conflict` both conflicts are reported, forceable, and `--force`
/// replaces.
#[test]
fn force_never_replaces_newer_content_under_destination_newer_skip() {
    let env = Env::new();
    let radar = env.simple_config("radar.yaml", "radar", "latest", "dest", "");
    env.publish(&radar, &bundle(&env, "b8", "radar-src", T8, "eight"), &[])
        .expect_code(0);
    let before = env.snapshot("dest");
    let b7 = bundle(&env, "b7", "tomorrow", T7, "seven");

    let skip = config(&env, "skip.yaml", "");
    let r = env.publish(&skip, &b7, &[]);
    assert_refused_newer(&env, &r, &before, &["pipeline_differs"]);
    let r = env.publish(&skip, &b7, &["--force"]);
    assert_refused_newer(&env, &r, &before, &["pipeline_differs"]);

    let conflict = config(
        &env,
        "conflict.yaml",
        &transfer(&["destination_newer: conflict"]),
    );
    let r = env.publish(&conflict, &b7, &[]);
    assert_nothing_written(
        &env,
        &r,
        &before,
        "conflict",
        3,
        &["pipeline_differs", "destination_newer"],
    );
    let r = env.publish(&conflict, &b7, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(env.read("dest/a.txt"), "seven");
}

/// The same owner's newer content with an unmanaged file on a planned path: the unmanaged
/// file is forceable (forcing it leaves what the run would do without it), but `--force`
/// does not put older content over newer under `destination_newer: skip`: the forced run
/// skips the destination, as the plain run's reason says.
#[test]
fn force_over_unmanaged_content_still_skips_newer_content() {
    let env = Env::new();
    let cfg = config(&env, "c.yaml", "");
    env.publish(&cfg, &bundle(&env, "b8", "tomorrow", T8, "eight"), &[])
        .expect_code(0);
    env.write("dest/c.txt", "hand-made");
    let before = env.snapshot("dest");
    let b7 = env.bundle(
        "b7",
        "tomorrow",
        T7,
        &[("a.txt", "seven"), ("c.txt", "c")],
        &[],
    );
    let r = env.publish(&cfg, &b7, &[]);
    assert_nothing_written(&env, &r, &before, "conflict", 3, &["unmanaged_content"]);
    let reason = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(
        reason.contains("a forced run skips this destination"),
        "{reason}"
    );
    let r = env.publish(&cfg, &b7, &["--force"]);
    assert_nothing_written(&env, &r, &before, "skip_destination_newer", 0, &[]);
}

/// Shared root: a colliding owner that may not be taken over holds newer content. The same
/// rules as for a single owner.
#[test]
fn force_never_replaces_a_newer_colliding_owner_under_destination_newer_skip() {
    let env = Env::new();
    let shared = "    state:\n      mode: shared_root\n";
    let radar = env.simple_config("radar.yaml", "radar", "latest", "dest", shared);
    env.publish(&radar, &bundle(&env, "b8", "radar-src", T8, "eight"), &[])
        .expect_code(0);
    let before = env.snapshot("dest");
    let b7 = bundle(&env, "b7", "tomorrow", T7, "seven");

    let skip = config(&env, "skip.yaml", shared);
    let r = env.publish(&skip, &b7, &[]);
    assert_refused_newer(&env, &r, &before, &["owner_conflict", "owner_conflict"]);
    let r = env.publish(&skip, &b7, &["--force"]);
    assert_refused_newer(&env, &r, &before, &["owner_conflict", "owner_conflict"]);

    let conflict = config(
        &env,
        "conflict.yaml",
        &format!("{shared}{}", transfer(&["destination_newer: conflict"])),
    );
    let r = env.publish(&conflict, &b7, &[]);
    assert_nothing_written(
        &env,
        &r,
        &before,
        "conflict",
        3,
        &["owner_conflict", "owner_conflict", "destination_newer"],
    );
    let r = env.publish(&conflict, &b7, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(env.read("dest/a.txt"), "seven");
}
