//! Releases known by identity, not by name (issue 39, "Why" 1-4; docs/operations.md,
//! "Release identity"). distributor runs as root; the neighbour is uid 65534
//! (`setpriv`), who may create, rename and delete entries in `path`'s parent and in
//! `releases.dir`, and acts at the exact step a `pause` failpoint holds the run at.
//!
//! 1. A release swapped for the neighbour's directory after it was built (publish) or
//!    verified (rollback, promote) is never activated: `release_moved`, `path` unchanged,
//!    no activation logged.
//! 2. A directory with no state under the active release's name is never planned as a
//!    first publication: `release_moved`, and none of the neighbour's inodes lands in a
//!    release.
//! 3. Activation lines the neighbour writes into the old activation log are not believed
//!    (the journal in use does not corroborate them): `prune` migrates nothing and
//!    removes nothing.
//! 4. Swapped release names: the next publication notices (`release_moved`), and
//!    retention never removes the real previous release.

use crate::common::Env;
use crate::common::hostile::{PausedRun, as_neighbour, misplaced_neighbour_entries};
use crate::common::release_scene::{
    DIR, PATH, chmod, logged, logged_releases, op_of, read_active, releases, site,
};
use std::fs;
use std::path::PathBuf;

/// A releases destination (`keep`), its parent and `releases.dir` writable by the
/// neighbour once the versions `versions` are published; returns the config and their
/// operations.
fn scene(
    env: &Env,
    keep: u32,
    versions: std::ops::RangeInclusive<usize>,
) -> (PathBuf, Vec<String>) {
    chmod(&env.path(""), 0o755);
    fs::create_dir_all(env.path("www")).unwrap();
    let extra =
        format!("    state:\n      mode: single_owner\n    releases:\n      keep: {keep}\n");
    let cfg = env.simple_config("c.yaml", "weather", "latest", PATH, &extra);
    let ops = versions
        .map(|i| {
            let r = env.publish(&cfg, &site(env, i), &[]);
            r.expect_code(0);
            op_of(&r)
        })
        .collect();
    chmod(&env.path("www"), 0o777);
    chmod(&env.path(DIR), 0o777);
    (cfg, ops)
}

/// The neighbour's move: release `r` renamed away, a directory of theirs in its place.
fn swap_in_theirs(env: &Env, r: &str) {
    assert!(as_neighbour(
        env,
        &format!(
            "set -e; mv {DIR}/{r} {DIR}/{r}.moved; mkdir {DIR}/{r}; echo theirs > {DIR}/{r}/index.html"
        )
    ));
}

/// What a run said, for assertions.
fn said(r: &crate::common::Run) -> String {
    format!("{}\n{}", r.stdout, r.stderr)
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_release_swapped_after_it_was_built_or_verified_is_never_activated() {
    // publish: the release is built (every file placed), then swapped before the commit.
    let env = Env::new();
    let (cfg, ops) = scene(&env, 3, 1..=2);
    let c = cfg.to_str().unwrap();
    let src = site(&env, 3);
    let args = [
        "publish",
        "--json",
        "--config",
        c,
        "--source",
        src.to_str().unwrap(),
    ];
    let paused = PausedRun::start(&env, &args, "after_links", &[]);
    let built = releases(&env)
        .into_iter()
        .find(|r| !ops.contains(r))
        .expect("the release being built");
    swap_in_theirs(&env, &built);
    let run = paused.resume();
    assert_ne!(run.code, 0, "{}", said(&run));
    assert!(said(&run).contains("release_moved"), "{}", said(&run));
    assert!(
        said(&run).contains(&format!("{DIR}/{built}")),
        "{}",
        said(&run)
    );
    assert_eq!(read_active(&env).as_deref(), Some(ops[1].as_str()));
    assert!(!logged_releases(&env).contains(&built));

    // rollback: the target verified, then swapped before the commit.
    let env = Env::new();
    let (cfg, ops) = scene(&env, 3, 1..=3);
    let c = cfg.to_str().unwrap();
    let paused = PausedRun::start(
        &env,
        &["rollback", "--json", "--config", c],
        "after_staging_record",
        &[],
    );
    swap_in_theirs(&env, &ops[1]);
    let run = paused.resume();
    assert_ne!(run.code, 0, "{}", said(&run));
    assert!(said(&run).contains("release_moved"), "{}", said(&run));
    assert_eq!(read_active(&env).as_deref(), Some(ops[2].as_str()));
    assert_eq!(
        logged(&env)
            .iter()
            .filter(|e| e["command"] == "rollback")
            .count(),
        0
    );

    // promote: the staged release verified, then swapped before the commit.
    let env = Env::new();
    let (cfg, ops) = scene(&env, 3, 1..=2);
    let c = cfg.to_str().unwrap();
    let r = env.publish(&cfg, &site(&env, 3), &["--stage"]);
    r.expect_code(0);
    let staged = op_of(&r);
    let paused = PausedRun::start(
        &env,
        &[
            "promote",
            "--json",
            "--config",
            c,
            "--destination",
            "latest",
            &staged,
        ],
        "after_staging_record",
        &[],
    );
    swap_in_theirs(&env, &staged);
    let run = paused.resume();
    assert_ne!(run.code, 0, "{}", said(&run));
    assert!(said(&run).contains("release_moved"), "{}", said(&run));
    assert_eq!(read_active(&env).as_deref(), Some(ops[1].as_str()));
}

#[test]
fn a_stateless_directory_under_the_active_release_name_is_never_a_first_publication() {
    let env = Env::new();
    let (cfg, ops) = scene(&env, 3, 1..=1);
    // The active release renamed away; under its name, a directory of the neighbour's
    // with no state, holding a file no source publishes (so no plan probes it).
    let a = &ops[0];
    assert!(as_neighbour(
        &env,
        &format!(
            "set -e; mv {DIR}/{a} {DIR}/{a}.moved; mkdir {DIR}/{a}; echo theirs > {DIR}/{a}/planted.html"
        )
    ));
    let r = env.publish(&cfg, &site(&env, 2), &[]);
    assert_eq!(r.code, 3, "{}", said(&r));
    assert_eq!(r.conflict_kinds(), ["release_moved"], "{}", r.stdout);
    assert!(said(&r).contains(&format!("{DIR}/{a}")), "{}", said(&r));
    assert_eq!(read_active(&env).as_deref(), Some(a.as_str()));
    assert_eq!(
        releases(&env),
        [a.clone()].into_iter().collect(),
        "no release was built"
    );
    let misplaced = misplaced_neighbour_entries(&env, &[]);
    assert!(misplaced.is_empty(), "{misplaced:?}");
    // status and verify say so too.
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    assert_ne!(v.code, 0, "{}", said(&v));
    assert!(said(&v).contains("release_moved"), "{}", said(&v));
}

#[test]
fn activation_lines_the_journal_does_not_corroborate_are_never_migrated() {
    let env = Env::new();
    let (cfg, ops) = scene(&env, 0, 1..=3);
    // keep 0: the first release went with the third publication's retention.
    assert_eq!(releases(&env), ops[1..].iter().cloned().collect());
    // The neighbour puts Part II records back: settings, and an activation log whose
    // lines 5 and 6 (the log holds 4 entries) would make the first release the one
    // before the active, so that retention takes the real previous release.
    let line = |r: &str, at: &str| {
        format!(
            "{{\"release\":\"{r}\",\"operation_id\":\"{r}\",\"activated_at\":\"{at}\",\"owner\":\"weather/latest\"}}"
        )
    };
    let mut text = String::new();
    for (i, r) in [&ops[0], &ops[1], &ops[2], &ops[0], &ops[0], &ops[2]]
        .iter()
        .enumerate()
    {
        text.push_str(&line(r, &format!("2026-12-02T0{i}:30:00.000Z")));
        text.push('\n');
    }
    fs::write(env.path("forged.log"), &text).unwrap();
    fs::write(
        env.path("forged.json"),
        format!(
            "{{\"path\": \"{}\", \"keep\": 0}}",
            env.path(PATH).display()
        ),
    )
    .unwrap();
    chmod(&env.path("forged.log"), 0o644);
    chmod(&env.path("forged.json"), 0o644);
    assert!(as_neighbour(
        &env,
        &format!(
            "set -e; rm -f {DIR}/.distributor-releases.json; cp forged.json {DIR}/.distributor-releases.json; cp forged.log {DIR}/.distributor-activations.log"
        )
    ));
    let entries = logged(&env);
    let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    assert_ne!(r.code, 0, "{}", said(&r));
    assert!(
        said(&r).contains("untrusted_record") || said(&r).contains("corroborate"),
        "{}",
        said(&r)
    );
    assert_eq!(
        releases(&env),
        ops[1..].iter().cloned().collect(),
        "{}",
        said(&r)
    );
    assert_eq!(logged(&env), entries, "nothing migrated");
    // A publication refuses them as the conflict untrusted_record.
    let p = env.publish(&cfg, &site(&env, 4), &[]);
    assert_eq!(p.code, 3, "{}", said(&p));
    assert_eq!(p.conflict_kinds(), ["untrusted_record"], "{}", p.stdout);
}

#[test]
fn swapped_release_names_are_noticed_and_never_pruned() {
    // The active and the previous release swap names.
    let env = Env::new();
    let (cfg, ops) = scene(&env, 0, 1..=3);
    let (prev, act) = (&ops[1], &ops[2]);
    let before = (
        env.snapshot(&format!("{DIR}/{prev}")),
        env.snapshot(&format!("{DIR}/{act}")),
    );
    assert!(as_neighbour(
        &env,
        &format!(
            "set -e; mv {DIR}/{act} {DIR}/x; mv {DIR}/{prev} {DIR}/{act}; mv {DIR}/x {DIR}/{prev}"
        )
    ));
    let r = env.publish(&cfg, &site(&env, 4), &[]);
    assert_eq!(r.code, 3, "{}", said(&r));
    assert_eq!(r.conflict_kinds(), ["release_moved"], "{}", r.stdout);
    let p = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    assert!(said(&p).contains("release_moved"), "{}", said(&p));
    // Both are still there, each under the other's name.
    assert_eq!(env.snapshot(&format!("{DIR}/{act}")), before.0);
    assert_eq!(env.snapshot(&format!("{DIR}/{prev}")), before.1);

    // Two inactive releases swap names: the publication goes on, and retention keeps
    // the name that holds the other release.
    let env = Env::new();
    let (cfg, ops) = scene(&env, 1, 1..=3);
    assert_eq!(releases(&env).len(), 3);
    let (a, b) = (&ops[0], &ops[1]);
    let real_b = env.snapshot(&format!("{DIR}/{b}"));
    assert!(as_neighbour(
        &env,
        &format!("set -e; mv {DIR}/{a} {DIR}/x; mv {DIR}/{b} {DIR}/{a}; mv {DIR}/x {DIR}/{b}")
    ));
    let r = env.publish(&cfg, &site(&env, 4), &[]);
    r.expect_code(0);
    // keep 1: the fourth publication's retention would remove the first release; its
    // name holds the second's directory, which stays.
    assert_eq!(env.snapshot(&format!("{DIR}/{a}")), real_b, "{}", said(&r));
    assert!(said(&r).contains("release_moved"), "{}", said(&r));
}
