//! Saved plans (SPEC §19) on the real binary: `plan --out FILE` writes the plan and prints
//! its sha256; `publish --plan FILE [--plan-sha256 H]` plans again under each lock and
//! publishes only where that plan is the saved one, else refuses with `stale_plan` (exit
//! 3, journaled). A wrong, truncated or foreign plan file plans and writes nothing.

use crate::common::s3::{require_moto, s3_env};
use crate::common::{Env, F, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const V1: &[F] = &[("index.html", "v1"), ("a.txt", "a"), ("old.txt", "old")];
const V2: &[F] = &[("index.html", "v2"), ("a.txt", "a"), ("new.txt", "new")];

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `plan --json --out FILE`: the report, the file's sha256.
fn plan_out(env: &Env, cfg: &Path, bundle: &Path, out: &Path, extra: &[&str]) -> (Run, String) {
    let mut args = vec![
        "plan",
        "--json",
        "--config",
        p(cfg),
        "--source",
        p(bundle),
        "--out",
        p(out),
    ];
    args.extend_from_slice(extra);
    let r = env.run(&args);
    let sha = r.json()["plan_file"]["sha256"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (r, sha)
}

fn publish_plan(env: &Env, cfg: &Path, bundle: &Path, plan: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "publish",
        "--json",
        "--config",
        p(cfg),
        "--source",
        p(bundle),
        "--plan",
        p(plan),
    ];
    args.extend_from_slice(extra);
    env.run(&args)
}

fn stale_message(r: &Run) -> String {
    let json = r.json();
    let cs = json["destinations"][0]["conflicts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = cs
        .iter()
        .find(|c| c["kind"] == "stale_plan")
        .unwrap_or_else(|| panic!("no stale_plan: {}", r.stdout));
    assert_eq!(c["forceable"], false);
    c["message"].as_str().unwrap().to_string()
}

/// Reviewed, then applied exactly: the file's sha256 is the one printed, the report names
/// it, and a plan published once is stale the second time (the state moved on).
#[test]
fn a_saved_plan_is_published_as_reviewed() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    env.publish(&cfg, &b1, &[]).expect_code(0);
    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let out = env.path("review/plan.json");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let (r, sha) = plan_out(&env, &cfg, &b2, &out, &[]);
    r.expect_code(0);
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(
        sha,
        distributor::hash::sha256_hex(&bytes),
        "the printed sha256 is the file's"
    );
    let file: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(file["plan_format_version"], 1);
    assert_eq!(file["source"]["created_at"], T7);
    assert_eq!(file["force"], false);
    let d = &file["destinations"][0];
    assert_eq!(d["decision"], "replace_older");
    assert!(
        d["pre_state_sha256"]
            .as_str()
            .is_some_and(|s| s.len() == 64),
        "{d}"
    );
    let kinds: Vec<(String, String)> = (d["actions"].as_array().unwrap().iter())
        .map(|a| {
            (
                a["kind"].as_str().unwrap().into(),
                a["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("file_overwrite".to_string(), "index.html".to_string()),
            ("file_create".into(), "new.txt".into()),
            ("file_delete".into(), "old.txt".into()),
        ]
    );
    // Text mode prints the sha256 too.
    let text = env.run(&[
        "plan",
        "--config",
        p(&cfg),
        "--source",
        p(&b2),
        "--out",
        p(&env.path("review/again.json")),
    ]);
    text.expect_code(0);
    assert!(
        text.stdout.contains(&format!(
            "plan file: {} sha256 ",
            env.path("review/again.json").display()
        )),
        "{}",
        text.stdout
    );
    assert!(!env.exists("dest/new.txt"), "plan writes nothing");

    let r = publish_plan(&env, &cfg, &b2, &out, &["--plan-sha256", &sha]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(r.json()["plan_file"]["sha256"], sha.as_str());
    assert_eq!(env.read("dest/index.html"), "v2");
    assert!(!env.exists("dest/old.txt"));

    let again = publish_plan(&env, &cfg, &b2, &out, &[]);
    again.expect_code(3);
    let m = stale_message(&again);
    assert!(
        m.contains("the state changed since")
            && m.contains("the decision was replace_older, now unchanged"),
        "{m}"
    );
}

/// Whatever changed since the review makes the plan stale, and nothing is written: the
/// state (another publication), storage (a hand-made file where the plan creates one),
/// the settings, or the source.
#[test]
fn a_plan_that_no_longer_holds_is_stale_and_writes_nothing() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    env.publish(&cfg, &b1, &[]).expect_code(0);
    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let out = env.path("plan.json");
    plan_out(&env, &cfg, &b2, &out, &[]).0.expect_code(0);
    let before = env.snapshot("dest");

    // A hand-made file where the plan creates new.txt: the plan now has a conflict.
    env.write("dest/new.txt", "hand-made");
    let r = publish_plan(&env, &cfg, &b2, &out, &[]);
    r.expect_code(3);
    let m = stale_message(&r);
    assert!(
        m.contains("the conflicts were none, now unmanaged_content at new.txt"),
        "{m}"
    );
    assert_eq!(env.read("dest/index.html"), "v1");
    std::fs::remove_file(env.path("dest/new.txt")).unwrap();
    assert_eq!(env.snapshot("dest"), before);

    // Another setting in the config.
    let other = env.simple_config(
        "c2.yaml",
        "weather",
        "latest",
        "dest",
        "    reconciliation:\n      mode: merge\n",
    );
    let r = publish_plan(&env, &other, &b2, &out, &[]);
    r.expect_code(3);
    assert!(stale_message(&r).contains("the destination's settings in the config changed"));

    // Another source.
    let b3 = env.bundle("b3", "site", "2026-12-02T08:00:00Z", V2, &[]);
    let r = publish_plan(&env, &cfg, &b3, &out, &[]);
    r.expect_code(3);
    let m = stale_message(&r);
    assert!(
        m.contains("it was made for source site created 2026-12-02T07:00:00Z"),
        "{m}"
    );
    assert_eq!(env.snapshot("dest"), before);

    // Each refusal is journaled.
    let h = env.run(&["history", "--json", "--status", "refused"]);
    h.expect_code(0);
    assert_eq!(
        h.json()["operations"].as_array().map(Vec::len),
        Some(3),
        "{}",
        h.stdout
    );

    // The state moved on under another publication.
    env.publish(&cfg, &b2, &[]).expect_code(0);
    let r = publish_plan(&env, &cfg, &b2, &out, &[]);
    r.expect_code(3);
    assert!(stale_message(&r).contains("the state changed since"));
}

/// A plan file edited by hand, truncated, from another pipeline, or not the one
/// `--plan-sha256` names plans and writes nothing; an edit that still parses is stale.
#[test]
fn bad_plan_files_are_refused() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let out = env.path("plan.json");
    let (r, sha) = plan_out(&env, &cfg, &b1, &out, &[]);
    r.expect_code(0);
    let good = std::fs::read_to_string(&out).unwrap();

    // Not the file the sha256 names.
    let r = publish_plan(&env, &cfg, &b1, &out, &["--plan-sha256", &"0".repeat(64)]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("its sha256 is") && r.stderr.contains(&sha),
        "{}",
        r.stderr
    );
    assert!(!env.exists("dest"), "nothing planned or written");

    // Truncated.
    let cut = env.write("cut.json", &good[..good.len() / 2]);
    let r = publish_plan(&env, &cfg, &b1, &cut, &[]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("not a plan file") && r.stderr.contains("cut.json"),
        "{}",
        r.stderr
    );
    assert!(!env.exists("dest"));

    // Another format version.
    let v2 = env.write(
        "v2.json",
        &good.replace("\"plan_format_version\": 1", "\"plan_format_version\": 2"),
    );
    let r = publish_plan(&env, &cfg, &b1, &v2, &[]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("plan_format_version 2 is not supported"),
        "{}",
        r.stderr
    );

    // Another pipeline's config.
    let radar = env.simple_config("r.yaml", "radar", "latest", "dest", "");
    let r = publish_plan(&env, &radar, &b1, &out, &[]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("planned for pipeline 'weather'"),
        "{}",
        r.stderr
    );
    assert!(!env.exists("dest"));

    // Edited by hand so that it still parses: an action removed. Planned again, the plan
    // differs: stale, nothing written.
    let mut edited: Value = serde_json::from_str(&good).unwrap();
    edited["destinations"][0]["actions"]
        .as_array_mut()
        .unwrap()
        .pop();
    let edited_file = env.write(
        "edited.json",
        &serde_json::to_string_pretty(&edited).unwrap(),
    );
    let r = publish_plan(&env, &cfg, &b1, &edited_file, &[]);
    r.expect_code(3);
    assert!(
        stale_message(&r).contains("the actions differ (2 planned, 3 now)"),
        "{}",
        r.stdout
    );
    assert!(!env.exists("dest/a.txt"));

    // --force and --destination are the plan's, not the command line's.
    for extra in [
        &["--force"][..],
        &["--destination", "latest"][..],
        &["--allow-delete", "3"][..],
    ] {
        let r = publish_plan(&env, &cfg, &b1, &out, extra);
        r.expect_code(2);
    }
    // --plan-sha256 needs --plan.
    env.run(&[
        "publish",
        "--config",
        p(&cfg),
        "--source",
        p(&b1),
        "--plan-sha256",
        &sha,
    ])
    .expect_code(2);
    // --out into a missing directory is an error naming it, and leaves nothing.
    let r = env.run(&[
        "plan",
        "--config",
        p(&cfg),
        "--source",
        p(&b1),
        "--out",
        p(&env.path("nowhere/plan.json")),
    ]);
    assert_ne!(r.code, 0);
    assert!(
        r.stdout.contains("nowhere") || r.stderr.contains("nowhere"),
        "{}{}",
        r.stdout,
        r.stderr
    );

    // The good file still publishes.
    publish_plan(&env, &cfg, &b1, &out, &["--plan-sha256", &sha]).expect_code(0);
    assert_eq!(env.read("dest/a.txt"), "a");
}

/// A plan made with --force publishes forced (the report says the force came from the
/// plan); `--allow-delete` travels the same way.
#[test]
fn force_and_allow_delete_come_from_the_plan() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    guard:\n      max_delete: 0\n",
    );
    env.write("dest/index.html", "hand-made");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let out = env.path("plan.json");
    let (r, _) = plan_out(&env, &cfg, &b1, &out, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    let r = publish_plan(&env, &cfg, &b1, &out, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(r.json()["plan_file"]["force"], true);
    let text = env.run(&["history", "--json"]);
    text.expect_code(0);
    assert_eq!(env.read("dest/index.html"), "v1");

    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let (r, _) = plan_out(&env, &cfg, &b2, &out, &[]);
    r.expect_code(3);
    assert!(r.conflict_kinds().contains(&"mass_delete".to_string()));
    let (r, _) = plan_out(&env, &cfg, &b2, &out, &["--allow-delete", "1"]);
    r.expect_code(0);
    let r = publish_plan(&env, &cfg, &b2, &out, &[]);
    r.expect_code(0);
    assert_eq!(r.json()["plan_file"]["allow_delete"], 1);
    assert!(!env.exists("dest/old.txt"));
}

/// Releases destinations: the plan is judged against the active release's state.
#[test]
fn a_releases_destination_publishes_a_saved_plan() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "site",
        "    releases:\n      keep: 2\n",
    );
    env.publish(&cfg, &env.bundle("b1", "site", T6, V1, &[]), &[])
        .expect_code(0);
    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let out = env.path("plan.json");
    plan_out(&env, &cfg, &b2, &out, &[]).0.expect_code(0);
    let r = publish_plan(&env, &cfg, &b2, &out, &[]);
    r.expect_code(0);
    assert_eq!(env.read("site/index.html"), "v2");
    // Rolled back since: the active release's state is another, the plan is stale.
    let b3 = env.bundle("b3", "site", "2026-12-02T08:00:00Z", V1, &[]);
    plan_out(&env, &cfg, &b3, &out, &[]).0.expect_code(0);
    env.run(&["rollback", "--config", p(&cfg)]).expect_code(0);
    let r = publish_plan(&env, &cfg, &b3, &out, &[]);
    r.expect_code(3);
    assert!(stale_message(&r).contains("the state changed since"));
    assert_eq!(env.read("site/index.html"), "v1");
}

/// s3: the same review-then-apply, and the plan file holds no credential.
#[test]
fn an_s3_destination_publishes_a_saved_plan_without_credentials_in_it() {
    let moto = require_moto!();
    let env = Env::new();
    let bucket = moto.fresh_bucket();
    let cfg = env.config(
        "s3.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{bucket}/weather/latest\n    s3:\n      endpoint: {}\n      allow_http: true\n",
            moto.endpoint
        ),
    );
    let vars = s3_env(moto);
    let mut vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    vars.push(("AWS_SECRET_ACCESS_KEY", "a-secret-never-in-a-plan"));
    vars.push(("AWS_ACCESS_KEY_ID", "test"));
    let run = |args: &[&str]| env.run_env(args, &vars);
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    run(&["publish", "--config", p(&cfg), "--source", p(&b1)]).expect_code(0);
    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let out: PathBuf = env.path("plan.json");
    let r = run(&[
        "plan",
        "--json",
        "--config",
        p(&cfg),
        "--source",
        p(&b2),
        "--out",
        p(&out),
    ]);
    r.expect_code(0);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        !text.contains("a-secret-never-in-a-plan") && !text.contains("AWS_"),
        "{text}"
    );
    let sha = r.json()["plan_file"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run(&[
        "publish",
        "--json",
        "--config",
        p(&cfg),
        "--source",
        p(&b2),
        "--plan",
        p(&out),
        "--plan-sha256",
        &sha,
    ]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(
        moto.get(&bucket, "weather/latest/index.html").unwrap(),
        b"v2"
    );
    // Published once: stale the second time.
    let r = run(&[
        "publish",
        "--json",
        "--config",
        p(&cfg),
        "--source",
        p(&b2),
        "--plan",
        p(&out),
    ]);
    r.expect_code(3);
    assert!(stale_message(&r).contains("the state changed since"));
}
