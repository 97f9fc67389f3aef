//! Deletion guards (SPEC §19) on the real binary: `guard.max_delete` refuses a publication
//! that deletes more recorded paths than it allows (`mass_delete`, lifted only by
//! `--allow-delete N`), an empty bundle that would delete recorded content is
//! `empty_source` unless `guard.allow_empty`, and bad guard values are config errors.

use crate::common::Env;
use serde_json::Value;

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";

fn files(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("f{i:02}.txt"), format!("content {i}")))
        .collect()
}

fn bundle(env: &Env, rel: &str, at: &str, files: &[(String, String)]) -> std::path::PathBuf {
    let f: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    env.bundle(rel, "nightly", at, &f, &[])
}

fn conflict<'a>(r: &'a Value, kind: &str) -> Option<&'a Value> {
    r["destinations"][0]["conflicts"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["kind"] == kind))
}

/// Ten files published; the next build holds seven: three deletions against a limit of
/// two is refused (with or without --force), journaled as refused, shown by `plan`, and
/// lifted by `--allow-delete 3` (not 2).
#[test]
fn max_delete_refuses_a_publication_that_deletes_more() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    guard:\n      max_delete: 2\n",
    );
    let all = files(10);
    let first = bundle(&env, "b1", T6, &all);
    env.publish(&cfg, &first, &[]).expect_code(0);
    let fewer = bundle(&env, "b2", T7, &all[..7]);

    let plan = env.plan(&cfg, &fewer, &[]);
    plan.expect_code(3);
    let c = conflict(&plan.json(), "mass_delete")
        .cloned()
        .expect("plan shows mass_delete");
    assert_eq!(c["forceable"], false, "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains("deletes 3") && m.contains("allows: 2") && m.contains("--allow-delete 3"),
        "{m}"
    );

    for extra in [&[][..], &["--force"][..], &["--allow-delete", "2"][..]] {
        let r = env.publish(&cfg, &fewer, extra);
        r.expect_code(3);
        assert_eq!(r.decision(), "conflict", "{extra:?}: {}", r.stdout);
        assert!(
            r.conflict_kinds().contains(&"mass_delete".to_string()),
            "{}",
            r.stdout
        );
        for (p, c) in &all {
            assert_eq!(env.read(&format!("dest/{p}")), *c, "{extra:?}: {p} kept");
        }
    }
    // Journaled as a refusal with its conflict.
    let h = env.run(&["history", "--json", "--status", "refused"]);
    h.expect_code(0);
    let refused = h.json();
    assert_eq!(
        refused["operations"].as_array().map(Vec::len),
        Some(3),
        "{refused}"
    );

    let r = env.publish(&cfg, &fewer, &["--allow-delete", "3"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older", "{}", r.stdout);
    for (p, _) in &all[7..] {
        assert!(!env.exists(&format!("dest/{p}")), "{p} deleted");
    }
    for (p, c) in &all[..7] {
        assert_eq!(env.read(&format!("dest/{p}")), *c);
    }
}

/// A percent is of the owner's recorded outputs and links, rounded up, inclusive.
#[test]
fn a_percent_limit_counts_the_recorded_paths() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    guard:\n      max_delete: \"25%\"\n",
    );
    let all = files(10);
    env.publish(&cfg, &bundle(&env, "b1", T6, &all), &[])
        .expect_code(0);
    // 25% of 10 is 2.5, rounded up: 3 deletions pass, 4 do not.
    let r = env.publish(&cfg, &bundle(&env, "b2", T7, &all[..6]), &[]);
    r.expect_code(3);
    let json = r.json();
    let m = conflict(&json, "mass_delete").unwrap()["message"]
        .as_str()
        .unwrap();
    assert!(
        m.contains("deletes 4") && m.contains("allows: 3 (25% of 10"),
        "{m}"
    );
    env.publish(&cfg, &bundle(&env, "b3", T7, &all[..7]), &[])
        .expect_code(0);
}

/// An empty bundle: refused where it would delete recorded content (forceable), allowed
/// with `guard.allow_empty`, and a first publication of one writes an empty state.
#[test]
fn an_empty_bundle_is_empty_source_unless_allowed() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let all = files(3);
    env.publish(&cfg, &bundle(&env, "b1", T6, &all), &[])
        .expect_code(0);
    let empty = bundle(&env, "empty", T7, &[]);
    let manifest: Value =
        serde_json::from_str(&env.read("empty/distributor-manifest.json")).unwrap();
    assert_eq!(
        manifest["outputs"],
        serde_json::json!([]),
        "an empty manifest is valid"
    );

    let r = env.publish(&cfg, &empty, &[]);
    r.expect_code(3);
    let json = r.json();
    let c = conflict(&json, "empty_source").expect("empty_source");
    assert_eq!(c["forceable"], true);
    assert!(c["message"].as_str().unwrap().contains("deletes 3"), "{c}");
    for (p, content) in &all {
        assert_eq!(env.read(&format!("dest/{p}")), *content);
    }

    let allowed = env.simple_config(
        "allowed.yaml",
        "weather",
        "latest",
        "dest",
        "    guard:\n      allow_empty: true\n",
    );
    let r = env.publish(&allowed, &empty, &[]);
    r.expect_code(0);
    for (p, _) in &all {
        assert!(!env.exists(&format!("dest/{p}")), "{p} deleted");
    }
    let state: Value = serde_json::from_str(&env.read("dest/.distributor.json")).unwrap();
    assert_eq!(state["outputs"], serde_json::json!([]));
    // The empty publication is recorded as this owner's: published again, unchanged.
    assert_eq!(state["source"]["id"], "nightly", "{state}");
    let again = env.publish(&allowed, &empty, &[]);
    again.expect_code(0);
    assert_eq!(again.decision(), "unchanged", "{}", again.stdout);

    // Nothing recorded: a first publication of an empty bundle is a plain create.
    let cfg2 = env.simple_config("c2.yaml", "weather", "fresh", "fresh", "");
    let r = env.publish(&cfg2, &empty, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create", "{}", r.stdout);
    let state: Value = serde_json::from_str(&env.read("fresh/.distributor.json")).unwrap();
    assert_eq!(state["outputs"], serde_json::json!([]));
}

/// `--force` lifts `empty_source`, and the forced publication is still guarded by
/// `max_delete`.
#[test]
fn force_lifts_empty_source_but_not_mass_delete() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    guard:\n      max_delete: 1\n",
    );
    let all = files(3);
    env.publish(&cfg, &bundle(&env, "b1", T6, &all), &[])
        .expect_code(0);
    let empty = bundle(&env, "empty", T7, &[]);
    let r = env.publish(&cfg, &empty, &["--force"]);
    r.expect_code(3);
    assert!(
        r.conflict_kinds().contains(&"mass_delete".to_string()),
        "{}",
        r.stdout
    );
    assert_eq!(env.read("dest/f00.txt"), "content 0");
    env.publish(&cfg, &empty, &["--force", "--allow-delete", "3"])
        .expect_code(0);
    assert!(!env.exists("dest/f00.txt"));
}

/// Bad guard values are config errors naming the key and what is accepted; nothing is
/// planned or written.
#[test]
fn bad_guard_values_are_config_errors() {
    let env = Env::new();
    let b = bundle(&env, "b1", T6, &files(1));
    for (value, says) in [
        ("\"150%\"", "more than 100%"),
        ("-1", "not a count"),
        ("abc", "not a count or a percent"),
        ("true", "not a count or a percent"),
    ] {
        let cfg = env.simple_config(
            "bad.yaml",
            "weather",
            "latest",
            "dest",
            &format!("    guard:\n      max_delete: {value}\n"),
        );
        let r = env.publish(&cfg, &b, &[]);
        r.expect_code(2);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(
            all.contains("destinations[0].guard.max_delete")
                && all.contains(says)
                && all.contains("accepted:"),
            "{value}: {all}"
        );
        assert!(!env.exists("dest"), "{value}: nothing written");
    }
    let cfg = env.simple_config(
        "bad.yaml",
        "weather",
        "latest",
        "dest",
        "    guard:\n      max_deletes: 3\n",
    );
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(2);
    assert!(
        format!("{}{}", r.stdout, r.stderr).contains("expected `max_delete` or `allow_empty`"),
        "{}",
        r.stderr
    );
}

/// A releases destination is guarded as any other: the new release is not built.
#[test]
fn a_releases_destination_is_guarded() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "site",
        "    releases:\n      keep: 2\n    guard:\n      max_delete: 1\n",
    );
    let all = files(4);
    env.publish(&cfg, &bundle(&env, "b1", T6, &all), &[])
        .expect_code(0);
    let before = std::fs::read_link(env.path("site")).unwrap();
    let r = env.publish(&cfg, &bundle(&env, "b2", T7, &all[..2]), &[]);
    r.expect_code(3);
    assert!(
        r.conflict_kinds().contains(&"mass_delete".to_string()),
        "{}",
        r.stdout
    );
    assert_eq!(std::fs::read_link(env.path("site")).unwrap(), before);
    env.publish(
        &cfg,
        &bundle(&env, "b2", T7, &all[..2]),
        &["--allow-delete", "2"],
    )
    .expect_code(0);
    assert_ne!(std::fs::read_link(env.path("site")).unwrap(), before);
    assert!(!env.exists("site/f03.txt"));
}
