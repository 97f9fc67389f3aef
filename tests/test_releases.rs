//! Release directories (SPEC §15): each publication builds a complete release in
//! `releases.dir` and swaps the `path` symlink to it in one rename; unchanged files are
//! hard links into the previous release; both state modes; retention; refusals (a plain
//! directory at `path`, settings that differ from the recorded ones); dry runs that write
//! nothing; a crash at every step recovered to the old or the new release.

use crate::common::faults::{V1_AT, V1_FILES, V1_LINKS, V2_AT, V2_FILES, V2_LINKS, assert_aborted};
use crate::common::{Env, Run};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

const PATH: &str = "www/latest";
const DIR: &str = "www/.latest.releases";

fn config(
    env: &Env,
    name: &str,
    pipeline: &str,
    dest: &str,
    mode: &str,
    releases: &str,
) -> PathBuf {
    let extra = format!("    state:\n      mode: {mode}\n    releases:\n{releases}");
    env.simple_config(name, pipeline, dest, PATH, &extra)
}

/// The release `path` names.
fn active(env: &Env) -> String {
    let t = std::fs::read_link(env.path(PATH)).expect("path is a symlink");
    let t = t.to_str().unwrap();
    let name = t
        .strip_prefix(".latest.releases/")
        .unwrap_or_else(|| panic!("{t}"));
    name.to_string()
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

/// What a reader resolving `path` sees: every entry below it, state and lock files
/// excluded (an in-place destination has a lock file; a release never does).
fn view(env: &Env) -> Vec<(String, String)> {
    env.snapshot(PATH)
        .into_iter()
        .filter(|(p, _)| {
            p != ".distributor.json" && p != ".distributor.lock" && !crate::common::is_record(p)
        })
        .collect()
}

/// The destination log's entries in `releases.dir`, oldest first.
pub fn logged(env: &Env, dir: &str) -> Vec<Value> {
    let mut names: Vec<PathBuf> =
        match std::fs::read_dir(env.path(&format!("{dir}/.distributor/log"))) {
            Ok(rd) => rd
                .map(|e| e.unwrap().path())
                .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
                .filter(|p| p.to_string_lossy().ends_with(".json"))
                .collect(),
            Err(_) => Vec::new(),
        };
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect()
}

fn op_of(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

#[test]
fn each_publication_is_a_release_swapped_in_and_unchanged_files_are_shared() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
    let r = env.publish(&cfg, &v1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    let first = op_of(&r);
    assert_eq!(active(&env), first, "the release is named by its operation");
    assert_eq!(env.read(&format!("{PATH}/keep.txt")), "same in both");
    assert_eq!(
        std::fs::read_link(env.path(&format!("{PATH}/l1"))).unwrap(),
        Path::new("change.txt")
    );
    // Files distributor writes are read-only.
    let md = std::fs::metadata(env.path(&format!("{DIR}/{first}/keep.txt"))).unwrap();
    assert_eq!(
        md.permissions().mode() & 0o222,
        0,
        "release files are read-only"
    );
    assert!(!env.staging_left(DIR));

    // Unchanged: nothing is built.
    let r = env.publish(&cfg, &v1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
    assert_eq!(releases(&env).len(), 1);

    let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
    let r = env.publish(&cfg, &v2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    let second = op_of(&r);
    assert_eq!(active(&env), second);
    // The reader sees v2 exactly.
    let reference = {
        let e = Env::new();
        let c = e.simple_config("c.yaml", "weather", "latest", "plain", "");
        let b = e.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
        e.publish(&c, &b, &[]).expect_code(0);
        e.snapshot("plain")
            .into_iter()
            .filter(|(p, _)| {
                p != ".distributor.json" && p != ".distributor.lock" && !crate::common::is_record(p)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(view(&env), reference);
    // The old release is untouched and kept; the unchanged file is one inode in both.
    assert_eq!(
        releases(&env),
        BTreeSet::from([first.clone(), second.clone()])
    );
    assert_eq!(
        env.read(&format!("{DIR}/{first}/change.txt")),
        "version one"
    );
    let ino = |r: &str| {
        std::fs::metadata(env.path(&format!("{DIR}/{r}/keep.txt")))
            .unwrap()
            .ino()
    };
    assert_eq!(ino(&first), ino(&second), "unchanged files are hard links");

    // verify and status read the active release.
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    v.expect_code(0);
    let d = &v.json()["destinations"][0];
    assert_eq!(d["missing"], serde_json::json!([]), "{}", v.stdout);
    assert_eq!(d["modified"], serde_json::json!([]), "{}", v.stdout);
    assert_eq!(d["unrecorded"], serde_json::json!([]), "{}", v.stdout);

    // The journal has the activation and a retention event with fingerprints after it.
    let h = env.run(&["history", "show", &second, "--json"]);
    h.expect_code(0);
    let events: Vec<String> = h.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        events,
        [
            "staged",
            "moved_aside",
            "placed",
            "committed",
            "pruned",
            "completed"
        ]
    );
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn fingerprints_are_taken_after_linking_and_pruning() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 0\n",
    );
    let publish = |name: &str, at: &str, fail: Option<&str>| {
        let b = env.bundle(name, "tomorrow", at, V2_FILES, V2_LINKS);
        let mut vars = Vec::new();
        if let Some(f) = fail {
            vars.push(("DISTRIBUTOR_FAILPOINT", f));
        }
        let cfg = cfg.to_str().unwrap();
        env.run_env(
            &[
                "publish",
                "--json",
                "--config",
                cfg,
                "--source",
                b.to_str().unwrap(),
            ],
            &vars,
        )
    };
    publish("b1", "2026-12-02T01:00:00Z", None).expect_code(0);
    publish("b2", "2026-12-02T02:00:00Z", None).expect_code(0);
    // The third activation removes the first release, whose files share their inodes
    // (and so their ctimes) with the active one.
    publish("b3", "2026-12-02T03:00:00Z", None).expect_code(0);
    assert_eq!(releases(&env).len(), 2);
    // The same files again: every one is proven by its fingerprint, none hashed (a hash
    // reaches the probe_hash failpoint, which aborts).
    let r = publish("b4", "2026-12-02T04:00:00Z", Some("probe_hash"));
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
}

#[test]
fn keep_and_the_previous_release_bound_what_stays() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 0\n",
    );
    let mut ops = Vec::new();
    for i in 0..4 {
        let b = env.bundle(
            &format!("b{i}"),
            "tomorrow",
            &format!("2026-12-02T0{i}:00:00Z"),
            &[("v.txt", &format!("version {i}")), ("same.txt", "same")],
            &[],
        );
        let r = env.publish(&cfg, &b, &[]);
        r.expect_code(0);
        ops.push(op_of(&r));
    }
    // keep: 0 keeps only the active release and the one active before it.
    assert_eq!(
        releases(&env),
        BTreeSet::from([ops[2].clone(), ops[3].clone()])
    );
    assert_eq!(env.read(&format!("{PATH}/v.txt")), "version 3");
    let log = logged(&env, DIR);
    let activations: Vec<&Value> = log.iter().filter(|e| e["command"] == "publish").collect();
    assert_eq!(activations.len(), 4, "{log:?}");
    for (e, op) in activations.iter().zip(&ops) {
        assert_eq!(e["release_activated"], op.as_str());
        assert_eq!(e["log_format_version"], 1);
    }
    // Retention after the third and fourth publications removed a release each: a
    // prune entry after the activation's, naming it.
    let prunes: Vec<&Value> = log.iter().filter(|e| e["command"] == "prune").collect();
    assert_eq!(prunes.len(), 2, "{log:?}");
    assert_eq!(prunes[0]["operation_id"], ops[2].as_str());
    assert_eq!(prunes[0]["removed_releases"][0], ops[0].as_str());
    assert_eq!(prunes[1]["removed_count"], 1);
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e["seq"], i + 1);
    }
    assert!(!env.exists(&format!("{DIR}/.distributor-activations.log")));
    assert_eq!(
        env.read(&format!("{DIR}/.distributor-releases.json")),
        "{\"moved_to\": \".distributor/\"}\n"
    );
}

#[test]
fn a_dry_run_writes_nothing_not_even_releases_dir() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
    let r = env.plan(&cfg, &v1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    assert!(!env.exists(DIR), "a dry run made releases.dir");
    assert!(!env.exists("www"), "a dry run made path's parent");
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let before = (env.snapshot("www"), releases(&env));
    let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
    let r = env.plan(&cfg, &v2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!((env.snapshot("www"), releases(&env)), before);
}

#[test]
fn a_plain_directory_at_path_is_refused_naming_adopt() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    env.write(&format!("{PATH}/index.html"), "hand-made");
    let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
    let r = env.publish(&cfg, &v1, &[]);
    assert_eq!(r.conflict_kinds(), ["unsafe_storage"], "{}", r.stdout);
    assert!(
        r.stdout.contains("distributor releases adopt"),
        "{}",
        r.stdout
    );
    assert_eq!(env.read(&format!("{PATH}/index.html")), "hand-made");
    assert!(releases(&env).is_empty());
}

#[test]
fn a_symlink_not_made_by_distributor_is_refused() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    std::fs::create_dir_all(env.path("elsewhere")).unwrap();
    std::fs::create_dir_all(env.path("www")).unwrap();
    std::os::unix::fs::symlink(env.path("elsewhere"), env.path(PATH)).unwrap();
    let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
    let r = env.publish(&cfg, &v1, &[]);
    assert_eq!(r.conflict_kinds(), ["unsafe_storage"], "{}", r.stdout);
    assert!(r.stdout.contains("not to a release"), "{}", r.stdout);
    assert_eq!(std::fs::read_dir(env.path("elsewhere")).unwrap().count(), 0);
    // And a destination without releases meeting a symlinked path is unsafe_storage as
    // today.
    let plain = env.simple_config("p.yaml", "weather", "latest", PATH, "");
    let r = env.publish(&plain, &v1, &[]);
    assert_eq!(r.conflict_kinds(), ["unsafe_storage"], "{}", r.stdout);
}

#[test]
fn settings_that_differ_from_the_recorded_ones_are_releases_mismatch() {
    let env = Env::new();
    let a = config(
        &env,
        "a.yaml",
        "weather",
        "latest",
        "shared_root",
        "      keep: 3\n",
    );
    let b = config(
        &env,
        "b.yaml",
        "other",
        "o",
        "shared_root",
        "      keep: 5\n",
    );
    let v1 = env.bundle("b1", "tomorrow", V1_AT, &[("w/a.txt", "a")], &[]);
    env.publish(&a, &v1, &[]).expect_code(0);
    let bo = env.bundle("bo", "other-src", V1_AT, &[("o/x.txt", "x")], &[]);
    let r = env.publish(&b, &bo, &[]);
    assert_eq!(r.conflict_kinds(), ["releases_mismatch"], "{}", r.stdout);
    let c = &r.dest(0)["conflicts"][0];
    assert_eq!(c["forceable"], false);
    assert!(
        c["message"].as_str().unwrap().contains("keep 3"),
        "{}",
        r.stdout
    );
    let r = env.publish(&b, &bo, &["--force"]);
    assert_eq!(r.conflict_kinds(), ["releases_mismatch"], "{}", r.stdout);
}

#[test]
fn shared_root_releases_carry_every_other_owner_unchanged() {
    let env = Env::new();
    let a = config(
        &env,
        "a.yaml",
        "weather",
        "latest",
        "shared_root",
        "      keep: 1\n",
    );
    let b = config(
        &env,
        "b.yaml",
        "other",
        "o",
        "shared_root",
        "      keep: 1\n",
    );
    let wa1 = env.bundle(
        "wa1",
        "w",
        V1_AT,
        &[("w/a.txt", "w1"), ("w/gone.txt", "g")],
        &[],
    );
    let ob1 = env.bundle(
        "ob1",
        "o",
        V1_AT,
        &[("o/x.txt", "o1")],
        &[("o/l", "o/x.txt")],
    );
    env.publish(&a, &wa1, &[]).expect_code(0);
    env.publish(&b, &ob1, &[]).expect_code(0);
    let wa2 = env.bundle("wa2", "w", V2_AT, &[("w/a.txt", "w2")], &[]);
    let r = env.publish(&a, &wa2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(env.read(&format!("{PATH}/w/a.txt")), "w2");
    assert!(!env.exists(&format!("{PATH}/w/gone.txt")));
    assert_eq!(env.read(&format!("{PATH}/o/x.txt")), "o1");
    assert_eq!(
        std::fs::read_link(env.path(&format!("{PATH}/o/l"))).unwrap(),
        Path::new("x.txt")
    );
    let state: Value =
        serde_json::from_str(&env.read(&format!("{PATH}/.distributor.json"))).unwrap();
    let owners: BTreeSet<&str> = state["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, BTreeSet::from(["weather/latest", "other/o"]));
    for cfg in [&a, &b] {
        let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
        v.expect_code(0);
    }
}

#[test]
fn unmanaged_content_in_the_active_release_is_carried_never_adopted_or_dropped() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let v1 = env.bundle("b1", "tomorrow", V1_AT, &[("a.txt", "1")], &[]);
    let r = env.publish(&cfg, &v1, &[]);
    r.expect_code(0);
    let first = op_of(&r);
    // Somebody with write access to the release directory leaves a file there.
    env.write(&format!("{DIR}/{first}/robots.txt"), "hand-made");
    let v2 = env.bundle("b2", "tomorrow", V2_AT, &[("a.txt", "2")], &[]);
    env.publish(&cfg, &v2, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{PATH}/robots.txt")), "hand-made");
    let state = env.read(&format!("{PATH}/.distributor.json"));
    assert!(!state.contains("robots.txt"), "never recorded: {state}");
    // A planned path holding it is unmanaged_content, as in place.
    let v3 = env.bundle(
        "b3",
        "tomorrow",
        "2026-12-02T08:00:00Z",
        &[("a.txt", "3"), ("robots.txt", "mine")],
        &[],
    );
    let r = env.publish(&cfg, &v3, &[]);
    assert_eq!(r.conflict_kinds(), ["unmanaged_content"], "{}", r.stdout);
}

#[test]
fn config_errors_name_the_key() {
    let env = Env::new();
    for (extra, key, says) in [
        (
            "    path_mapping:\n      mode: source_id\n    releases:\n      keep: 3\n",
            "releases",
            "fixed only",
        ),
        (
            "    releases:\n      keep: 1001\n",
            "releases.keep",
            "0 to 1000",
        ),
        (
            "    releases:\n      max_age: 30x\n",
            "releases.max_age",
            "s, m, h, d or w",
        ),
        (
            "    releases:\n      dir: www/latest/inner\n",
            "releases.dir",
            "inside the destination path",
        ),
        (
            "    releases:\n      colour: blue\n",
            "colour",
            "`dir`, `keep`, `max_age`",
        ),
        ("    releases:\n", "releases", "is empty"),
    ] {
        let cfg = env.simple_config("c.yaml", "weather", "latest", PATH, extra);
        let r = env.run(&["validate", "--config", cfg.to_str().unwrap()]);
        r.expect_code(2);
        assert!(r.stderr.contains(key), "{extra}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{extra}: {}", r.stderr);
    }
}

/// The failpoints of a publication into a release destination, and which side recovery
/// lands on: before the rename over `path`, the old release; after it, the new one.
const CRASHES: &[(&str, bool)] = &[
    ("after_journal_append", false),
    ("before_staging_record", false),
    ("after_staging_record", false),
    ("during_carry_over", false),
    ("during_staging", false),
    ("after_staging", false),
    ("after_move_aside", false),
    ("during_placement:2", false),
    ("after_placement", false),
    ("during_links", false),
    ("after_links", false),
    ("io_state_fsync", false),
    ("io_state_rename", false),
    ("after_state_write", true),
    ("after_journal_commit", true),
    ("during_cleanup", true),
    ("io_remove_staging", true),
    ("during_prune", true),
];

/// A kill at every step, and a power cut at every step (the crash-simulating layer loses
/// everything not yet durable), in both state modes: `path` names the old or the new
/// release, the reader's view is exactly v1 or v2, recover leaves no staging and no
/// half-built release, and publishing works again.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_crash_at_every_step_leaves_the_old_or_the_new_release() {
    let cases = CRASHES.iter().flat_map(|&(spec, forward)| {
        [
            (spec.to_string(), forward),
            (format!("{spec}=powercut"), forward),
        ]
    });
    let cases: Vec<(String, bool)> = cases.collect();
    for mode in ["single_owner", "shared_root"] {
        for (spec, forward) in &cases {
            let (spec, forward) = (spec.as_str(), *forward);
            let ctx = format!("{mode} crash at {spec}");
            let env = Env::new();
            // keep 0 with three releases before: the crash's own retention removes one.
            let cfg = config(&env, "c.yaml", "weather", "latest", mode, "      keep: 0\n");
            if mode == "shared_root" {
                let o = config(&env, "o.yaml", "other", "o", mode, "      keep: 0\n");
                let b = env.bundle("bo", "o", V1_AT, &[("o/x.txt", "other")], &[]);
                env.publish(&o, &b, &[]).expect_code(0);
            }
            let v0 = env.bundle(
                "b0",
                "tomorrow",
                "2026-12-02T05:00:00Z",
                &[("keep.txt", "zero")],
                &[],
            );
            env.publish(&cfg, &v0, &[]).expect_code(0);
            let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
            env.publish(&cfg, &v1, &[]).expect_code(0);
            let old = active(&env);
            let before_view = view(&env);
            let before_releases = releases(&env);
            let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
            let r = env.run_env(
                &[
                    "publish",
                    "--json",
                    "--config",
                    cfg.to_str().unwrap(),
                    "--source",
                    v2.to_str().unwrap(),
                ],
                &[("DISTRIBUTOR_FAILPOINT", spec)],
            );
            let name = spec.split([':', '=']).next().unwrap();
            let said = if spec.ends_with("=powercut") {
                format!("failpoint {name} hit: power cut, aborting")
            } else {
                format!("failpoint {name} hit: aborting")
            };
            assert!(
                r.code == -1 && r.stderr.contains(&said),
                "{ctx}: {}",
                r.stderr
            );
            // Whatever the moment, path names a complete release.
            let now = active(&env);
            assert!(
                now == old || !forward || before_releases.len() < releases(&env).len(),
                "{ctx}"
            );
            let rec = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
            rec.expect_code(0);
            let outcome = rec.json()["operations"][0]["outcome"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let after = active(&env);
            if forward {
                assert_ne!(after, old, "{ctx}: {}", rec.stdout);
                if name == "during_prune" {
                    // Past the cleanup: the activation stands, its staging is gone;
                    // retention runs again after the next activation.
                    assert_eq!(outcome, "closed", "{ctx}: {}", rec.stdout);
                    assert!(
                        rec.stdout.contains("applied elsewhere"),
                        "{ctx}: {}",
                        rec.stdout
                    );
                } else {
                    assert_eq!(outcome, "rolled_forward", "{ctx}: {}", rec.stdout);
                }
                let reference: Vec<(String, String)> = {
                    let e = Env::new();
                    let c = e.simple_config("c.yaml", "weather", "latest", "plain", "");
                    let b = e.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
                    e.publish(&c, &b, &[]).expect_code(0);
                    e.snapshot("plain")
                        .into_iter()
                        .filter(|(p, _)| {
                            p != ".distributor.json"
                                && p != ".distributor.lock"
                                && !crate::common::is_record(p)
                        })
                        .collect()
                };
                let mut got = view(&env);
                got.retain(|(p, _)| !p.starts_with("o/") && p != "o");
                assert_eq!(got, reference, "{ctx}");
            } else {
                assert_eq!(after, old, "{ctx}: {}", rec.stdout);
                assert_eq!(view(&env), before_view, "{ctx}");
                assert_eq!(
                    releases(&env),
                    before_releases,
                    "{ctx}: a half-built release is left"
                );
                if !matches!(name, "after_journal_append" | "before_staging_record") {
                    assert_eq!(outcome, "rolled_back", "{ctx}: {}", rec.stdout);
                }
            }
            assert!(!env.staging_left(DIR), "{ctx}");
            let leftovers: Vec<String> = std::fs::read_dir(env.path(DIR))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".distributor-activate-"))
                .collect();
            assert!(leftovers.is_empty(), "{ctx}: {leftovers:?}");
            let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
            v.expect_code(0);
            // Publishing works again and lands on v2.
            let again = env.publish(&cfg, &v2, &[]);
            again.expect_code(0);
            assert_eq!(
                env.read(&format!("{PATH}/change.txt")),
                "version two, longer than one",
                "{ctx}"
            );
        }
    }
}

/// Publishes versions 1..=n of a small site (every file carries its version) and returns
/// their operation ids, oldest first.
fn publish_versions(env: &Env, cfg: &Path, n: usize) -> Vec<String> {
    (1..=n)
        .map(|i| {
            let b = site(env, i);
            let r = env.publish(cfg, &b, &[]);
            r.expect_code(0);
            op_of(&r)
        })
        .collect()
}

fn site(env: &Env, i: usize) -> PathBuf {
    let v = format!("version {i}");
    let mut files = vec![("index.html", v.as_str()), ("same.css", "same")];
    let extra = format!("only-in-{i}.html");
    files.push((extra.as_str(), v.as_str()));
    env.bundle(
        &format!("site{i}"),
        "site",
        &format!("2026-12-02T0{i}:00:00Z"),
        &files,
        &[],
    )
}

fn rollback(env: &Env, cfg: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["rollback", "--json", "--config", cfg.to_str().unwrap()];
    args.extend_from_slice(extra);
    env.run(&args)
}

#[test]
fn rollback_activates_the_previous_release_and_steps_further_back() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let ops = publish_versions(&env, &cfg, 3);
    // A dry run first: the report says what readers will see change, and nothing changes.
    let before = (env.snapshot("www"), std::fs::read(env.journal()).unwrap());
    let r = rollback(&env, &cfg, &["--dry-run"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "rollback");
    assert_eq!(r.dest(0)["status"], "planned");
    let files: Vec<(String, String)> = r.dest(0)["files"]
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
        files.contains(&("index.html".into(), "overwrite".into())),
        "{files:?}"
    );
    assert!(
        files.contains(&("only-in-3.html".into(), "delete".into())),
        "{files:?}"
    );
    assert!(
        files.contains(&("only-in-2.html".into(), "create".into())),
        "{files:?}"
    );
    assert!(
        files.contains(&("same.css".into(), "unchanged".into())),
        "{files:?}"
    );
    assert_eq!(
        before.0,
        env.snapshot("www"),
        "a dry run wrote to the destination"
    );
    assert_eq!(
        before.1,
        std::fs::read(env.journal()).unwrap(),
        "a dry run wrote to the journal"
    );

    let r = rollback(&env, &cfg, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "rollback");
    assert_eq!(r.json()["summary"]["rollback"], 1);
    assert_eq!(active(&env), ops[1]);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 2");
    assert!(!env.exists(&format!("{PATH}/only-in-3.html")));
    let op = op_of(&r);
    let h = env.run(&["history", "show", &op, "--json"]);
    h.expect_code(0);
    let h = h.json();
    assert_eq!(h["decision"], "rollback", "{h}");
    assert_eq!(h["status"], "applied", "{h}");
    let details: String = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["detail"].as_str())
        .collect();
    assert!(
        details.contains(&ops[2]) && details.contains(&ops[1]),
        "{h}"
    );
    let list = env.run(&["history", "--json"]);
    assert!(list.stdout.contains("rollback"), "{}", list.stdout);

    // A second rollback steps further back; it does not toggle.
    let r = rollback(&env, &cfg, &[]);
    r.expect_code(0);
    assert_eq!(active(&env), ops[0]);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 1");
    // Nothing before the first release.
    let r = rollback(&env, &cfg, &[]);
    r.expect_code(1);
    assert!(r.stdout.contains("nothing to roll back to"), "{}", r.stdout);
    assert_eq!(active(&env), ops[0]);
    // --to names any release that still exists.
    let r = rollback(&env, &cfg, &["--to", &ops[2]]);
    r.expect_code(0);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 3");
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    v.expect_code(0);
}

#[test]
fn publishing_the_digest_rolled_back_from_is_rolled_back_until_forced_or_a_new_build() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    publish_versions(&env, &cfg, 2);
    rollback(&env, &cfg, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 1");
    // The hourly job publishes version 2 again: held.
    let b2 = env.path("site2");
    let r = env.publish(&cfg, &b2, &[]);
    assert_eq!(r.conflict_kinds(), ["rolled_back"], "{}", r.stdout);
    assert_eq!(r.dest(0)["conflicts"][0]["forceable"], true);
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 1");
    // --force publishes it anyway.
    let r = env.publish(&cfg, &b2, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 2");
    // Roll back again, then a new build publishes normally and lifts the hold.
    rollback(&env, &cfg, &[]).expect_code(0);
    let b3 = site(&env, 3);
    let r = env.publish(&cfg, &b3, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 3");
}

#[test]
fn rollback_to_a_pruned_or_tampered_release_is_refused() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 0\n",
    );
    let ops = publish_versions(&env, &cfg, 3);
    assert!(
        !env.exists(&format!("{DIR}/{}", ops[0])),
        "keep 0 pruned the first"
    );
    let r = rollback(&env, &cfg, &["--to", &ops[0]]);
    r.expect_code(1);
    assert!(r.stdout.contains("is gone"), "{}", r.stdout);
    // The previous release, tampered with, fails verification: nothing changes.
    let f = env.path(&format!("{DIR}/{}/index.html", ops[1]));
    let mut perm = std::fs::metadata(&f).unwrap().permissions();
    perm.set_mode(0o644);
    std::fs::set_permissions(&f, perm).unwrap();
    std::fs::write(&f, "defaced").unwrap();
    let r = rollback(&env, &cfg, &[]);
    r.expect_code(1);
    assert!(r.stdout.contains("fails verification"), "{}", r.stdout);
    assert!(r.stdout.contains("index.html"), "{}", r.stdout);
    assert_eq!(active(&env), ops[2]);
    // Not a releases destination, or shared_root: refused with the reason.
    let plain = env.simple_config("p.yaml", "weather", "latest", "plain", "");
    let r = rollback(&env, &plain, &[]);
    r.expect_code(2);
}

/// A kill at every step of a rollback: `path` names the release rolled back from or the
/// one rolled back to, and recover finishes or undoes it.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_crash_at_every_step_of_a_rollback_is_recovered() {
    for (spec, forward) in [
        ("before_staging_record", false),
        ("after_staging_record", false),
        ("io_state_rename", false),
        ("during_cleanup", true),
        ("io_remove_staging", true),
    ] {
        let env = Env::new();
        let cfg = config(
            &env,
            "c.yaml",
            "weather",
            "latest",
            "single_owner",
            "      keep: 0\n",
        );
        let ops = publish_versions(&env, &cfg, 3);
        let r = env.run_env(
            &["rollback", "--json", "--config", cfg.to_str().unwrap()],
            &[("DISTRIBUTOR_FAILPOINT", spec)],
        );
        assert_aborted(&r, spec);
        let rec = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
        rec.expect_code(0);
        let want = if forward { &ops[1] } else { &ops[2] };
        assert_eq!(&active(&env), want, "{spec}: {}", rec.stdout);
        assert!(!env.staging_left(DIR), "{spec}");
        assert!(
            env.exists(&format!("{DIR}/{}", ops[1])),
            "{spec}: the target was removed"
        );
        env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()])
            .expect_code(0);
        // The destination works again.
        let b4 = site(&env, 4);
        env.publish(&cfg, &b4, &[]).expect_code(0);
    }
}

/// Waits until the dry run of `prune` says the oldest release goes for its age (`max_age`
/// passed, as the clock shows it: no fixed sleep); returns that dry run.
fn wait_until_aged_out(env: &Env, cfg: &Path) -> Run {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = env.run(&[
            "prune",
            "--dry-run",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ]);
        r.expect_code(0);
        if r.json()["destinations"][0]["releases"][0]["keep"] == false {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the oldest release never aged out: {}",
            r.stdout
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn prune_says_why_each_release_is_kept_or_removed_and_status_lists_them() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n      max_age: 1s\n",
    );
    let ops = publish_versions(&env, &cfg, 3);
    assert_eq!(releases(&env).len(), 3);
    let before = env.snapshot("www");
    let r = wait_until_aged_out(&env, &cfg);
    let d = &r.json()["destinations"][0];
    let verdicts: Vec<(String, bool, String)> = d["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["release"].as_str().unwrap().to_string(),
                v["keep"].as_bool().unwrap(),
                v["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(verdicts.len(), 3, "{}", r.stdout);
    assert_eq!(
        (&verdicts[0].0, verdicts[0].1),
        (&ops[0], false),
        "{}",
        r.stdout
    );
    assert!(verdicts[0].2.contains("max_age"), "{}", r.stdout);
    assert_eq!((&verdicts[1].0, verdicts[1].1), (&ops[1], true));
    assert!(verdicts[1].2.contains("previously active"), "{}", r.stdout);
    assert_eq!(
        (&verdicts[2].0, verdicts[2].2.as_str()),
        (&ops[2], "active")
    );
    assert_eq!(env.snapshot("www"), before, "a dry run removed something");
    // status lists the releases with their activation times.
    let s = env.run(&["status", "--config", cfg.to_str().unwrap()]);
    s.expect_code(0);
    for op in &ops {
        assert!(
            s.stdout.contains(&format!("release {op}: activated 20")),
            "{}",
            s.stdout
        );
    }
    // prune removes it, and the journal says so.
    let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    let d = &r.json()["destinations"][0];
    assert_eq!(d["removed"], 1, "{}", r.stdout);
    assert_eq!(
        releases(&env),
        BTreeSet::from([ops[1].clone(), ops[2].clone()])
    );
    let op = d["operation_id"].as_str().unwrap();
    let h = env.run(&["history", "show", op, "--json"]);
    h.expect_code(0);
    assert!(
        h.stdout.contains(&ops[0]) && h.stdout.contains("pruned"),
        "{}",
        h.stdout
    );
    // Nothing left to remove: nothing journaled.
    let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert_eq!(r.json()["destinations"][0]["operation_id"], Value::Null);
}

/// What one reader request saw: the versions of the files it read, per owner directory.
fn read_request(path: &Path, owners: &[&str], files: usize) -> Vec<BTreeSet<String>> {
    // Resolve `path` once, as nginx's $realpath_root does, then read everything below it.
    let Ok(root) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    owners
        .iter()
        .map(|o| {
            (0..files)
                .filter_map(|i| {
                    std::fs::read_to_string(root.join(o).join(format!("f{i}.txt"))).ok()
                })
                .collect()
        })
        .collect()
}

/// Bundle `v` of owner directory `o`: `files` files that all carry the version.
fn versioned(env: &Env, o: &str, v: usize, files: usize) -> PathBuf {
    let text = format!("{o} version {v}");
    let names: Vec<String> = (0..files).map(|i| format!("{o}/f{i}.txt")).collect();
    let list: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), text.as_str())).collect();
    env.bundle(
        &format!("b-{o}-{v}"),
        o,
        &format!("2026-12-02T06:{:02}:{:02}Z", v / 60, v % 60),
        &list,
        &[],
    )
}

/// Runs a reader in a loop while `publish` runs; returns (requests, requests that saw
/// more than one version of some owner's files, requests that missed files).
fn read_while(
    path: &Path,
    owners: &[&str],
    files: usize,
    steps: usize,
    mut publish: impl FnMut(usize),
) -> (u64, u64, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let done = std::sync::Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, done) = (stop.clone(), done.clone());
        let path = path.to_path_buf();
        let owners: Vec<String> = owners.iter().map(|s| s.to_string()).collect();
        std::thread::spawn(move || {
            let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
            let (mut requests, mut mixed, mut missing) = (0u64, 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let seen = read_request(&path, &owners, files);
                if seen.is_empty() {
                    continue;
                }
                requests += 1;
                if seen.iter().any(|v| v.len() > 1) {
                    mixed += 1;
                }
                if seen.iter().any(|v| v.is_empty()) {
                    missing += 1;
                }
                done.store(requests, Ordering::Relaxed);
            }
            (requests, mixed, missing)
        })
    };
    // Each publication waits until the reader has finished a request since the last one:
    // the reader runs through all of them however the two threads are scheduled.
    for step in 0..steps {
        let before = done.load(Ordering::Relaxed);
        let start = std::time::Instant::now();
        while done.load(Ordering::Relaxed) == before && !reader.is_finished() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "the reader finished no request in a minute"
            );
            std::thread::yield_now();
        }
        publish(step);
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap()
}

/// SPEC §15: a reader that resolves `path` once per request sees one release, never a
/// mix, through 100 publications; with `DISTRIBUTOR_MEASURE_IN_PLACE=1`, the same reader on
/// an in-place destination is shown for comparison (docs/operations.md gives the figure).
#[test]
fn a_reader_never_sees_two_versions_in_one_request() {
    const FILES: usize = 40;
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 1\n",
    );
    let bundles: Vec<PathBuf> = (1..=100)
        .map(|v| versioned(&env, "site", v, FILES))
        .collect();
    env.publish(&cfg, &bundles[0], &[]).expect_code(0);
    let (requests, mixed, missing) = read_while(&env.path(PATH), &["site"], FILES, 99, |i| {
        env.publish(&cfg, &bundles[i + 1], &[]).expect_code(0);
    });
    eprintln!("releases: {requests} requests, {mixed} saw two versions, {missing} missed files");
    assert!(requests >= 99, "the reader hardly ran: {requests} requests");
    assert_eq!(
        mixed, 0,
        "a request saw two versions ({mixed} of {requests})"
    );
    assert_eq!(
        missing, 0,
        "a request missed files ({missing} of {requests})"
    );
    assert_eq!(env.read(&format!("{PATH}/site/f0.txt")), "site version 100");

    // The same reader on an in-place destination, for the record (docs/operations.md):
    // it asserts nothing, so it runs only when asked.
    if std::env::var_os("DISTRIBUTOR_MEASURE_IN_PLACE").is_none() {
        return;
    }
    let plain = env.simple_config("p.yaml", "weather", "plain", "www/plain", "");
    env.publish(&plain, &bundles[0], &[]).expect_code(0);
    let (requests, mixed, missing) =
        read_while(&env.path("www/plain"), &["site"], FILES, 99, |i| {
            env.publish(&plain, &bundles[i + 1], &[]).expect_code(0);
        });
    eprintln!("in place: {requests} requests, {mixed} saw two versions, {missing} missed files");
}

/// Two owners of a shared root alternate publications while the reader runs: every
/// request sees, for each owner, one complete version of that owner's files.
#[test]
fn shared_root_readers_see_one_version_per_owner() {
    const FILES: usize = 20;
    let env = Env::new();
    let a = config(
        &env,
        "a.yaml",
        "weather",
        "latest",
        "shared_root",
        "      keep: 1\n",
    );
    let b = config(
        &env,
        "b.yaml",
        "other",
        "o",
        "shared_root",
        "      keep: 1\n",
    );
    let wa: Vec<PathBuf> = (1..=30).map(|v| versioned(&env, "w", v, FILES)).collect();
    let ob: Vec<PathBuf> = (1..=30).map(|v| versioned(&env, "o", v, FILES)).collect();
    env.publish(&a, &wa[0], &[]).expect_code(0);
    env.publish(&b, &ob[0], &[]).expect_code(0);
    let (requests, mixed, missing) = read_while(&env.path(PATH), &["w", "o"], FILES, 58, |i| {
        if i % 2 == 0 {
            env.publish(&a, &wa[i / 2 + 1], &[]).expect_code(0);
        } else {
            env.publish(&b, &ob[i / 2 + 1], &[]).expect_code(0);
        }
    });
    assert!(requests >= 58, "the reader hardly ran: {requests} requests");
    assert_eq!(
        mixed, 0,
        "{mixed} of {requests} requests saw two versions of an owner"
    );
    assert_eq!(
        missing, 0,
        "{missing} of {requests} requests missed an owner's files"
    );
}

fn adopt(env: &Env, cfg: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "releases",
        "adopt",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    env.run(&args)
}

/// An in-place destination at `path`, then a config that gives it releases.
fn in_place_then_releases(env: &Env) -> (PathBuf, PathBuf) {
    let plain = env.simple_config("plain.yaml", "weather", "latest", PATH, "");
    let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
    env.publish(&plain, &v1, &[]).expect_code(0);
    let cfg = config(
        env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    (plain, cfg)
}

#[test]
fn adopt_makes_the_managed_directory_a_first_release() {
    let env = Env::new();
    let (_, cfg) = in_place_then_releases(&env);
    let before = view(&env);
    let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
    let r = env.publish(&cfg, &v2, &[]);
    assert_eq!(r.conflict_kinds(), ["unsafe_storage"], "{}", r.stdout);
    assert!(r.stdout.contains("releases adopt"), "{}", r.stdout);
    // status and verify still read the plain directory.
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);

    let snap = env.snapshot("www");
    let r = adopt(&env, &cfg, &["--dry-run"]);
    r.expect_code(0);
    assert_eq!(
        r.json()["destinations"][0]["status"],
        "planned",
        "{}",
        r.stdout
    );
    assert_eq!(env.snapshot("www"), snap, "a dry run wrote");

    let r = adopt(&env, &cfg, &[]);
    r.expect_code(0);
    let d = &r.json()["destinations"][0];
    assert_eq!(d["status"], "applied", "{}", r.stdout);
    let op = d["operation_id"].as_str().unwrap().to_string();
    assert_eq!(active(&env), op);
    assert_eq!(view(&env), before, "readers see the same content");
    let leftovers: Vec<String> = std::fs::read_dir(env.path(DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with(".distributor-activate-") || n.starts_with(".distributor-adopted-")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    let h = env.run(&["history", "show", &op, "--json"]);
    assert!(h.stdout.contains("became release"), "{}", h.stdout);
    // Now it publishes as releases, and rolls back to the adopted content.
    env.publish(&cfg, &v2, &[]).expect_code(0);
    assert_eq!(
        env.read(&format!("{PATH}/change.txt")),
        "version two, longer than one"
    );
    rollback(&env, &cfg, &[]).expect_code(0);
    assert_eq!(view(&env), before);
    // Adopting again: nothing to do.
    let r = adopt(&env, &cfg, &[]);
    r.expect_code(0);
    assert_eq!(r.json()["destinations"][0]["status"], "skipped");
}

#[test]
fn adopt_is_refused_with_the_list_while_unmanaged_content_is_there() {
    let env = Env::new();
    let (_, cfg) = in_place_then_releases(&env);
    env.write(&format!("{PATH}/robots.txt"), "hand-made");
    env.write(&format!("{PATH}/dir/hand.txt"), "hand-made too");
    let snap = env.snapshot(PATH);
    let r = adopt(&env, &cfg, &[]);
    r.expect_code(3);
    let d = &r.json()["destinations"][0];
    assert_eq!(d["status"], "refused");
    assert_eq!(
        d["unmanaged"],
        serde_json::json!(["dir/hand.txt", "robots.txt"])
    );
    assert_eq!(env.snapshot(PATH), snap);
    assert!(
        !std::fs::symlink_metadata(env.path(PATH))
            .unwrap()
            .is_symlink()
    );
    let text = env.run(&["releases", "adopt", "--config", cfg.to_str().unwrap()]);
    assert!(
        text.stdout.contains("unmanaged: robots.txt"),
        "{}",
        text.stdout
    );
}

/// The audit's attack 5: a neighbour swaps another managed destination in at `path` while
/// an adoption runs. Only the directory the adoption locked is ever exchanged: the other
/// destination stays where it was put, its state and lock files with it, and nothing is
/// deleted; the adoption fails, leaving the locked directory and no release behind. The
/// swap comes between the check of `path` and the exchange: what the exchange moved is
/// checked and exchanged back.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn adopt_exchanges_only_the_directory_it_locked() {
    let env = Env::new();
    let (_, cfg) = in_place_then_releases(&env);
    // Another managed destination beside it.
    let other_cfg = env.simple_config("other.yaml", "radar", "other", "www/other", "");
    let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
    env.publish(&other_cfg, &v2, &[]).expect_code(0);
    let other = env.snapshot("www/other");
    let mine = env.snapshot(PATH);
    let args = [
        "releases",
        "adopt",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
    ];
    let paused =
        crate::common::hostile::PausedRun::start(&env, &args, "before_adopt_exchange", &[]);
    std::fs::rename(env.path(PATH), env.path("www/latest.locked")).unwrap();
    std::fs::rename(env.path("www/other"), env.path(PATH)).unwrap();
    let r = paused.resume();
    r.expect_code(1);
    assert!(r.stdout.contains("exchanged back"), "{}", r.stdout);
    assert_eq!(
        env.snapshot(PATH),
        other,
        "the other destination is untouched"
    );
    assert_eq!(env.snapshot("www/latest.locked"), mine);
    assert!(releases(&env).is_empty(), "{:?}", releases(&env));
    assert!(logged(&env, DIR).is_empty());
    // Put back, the adoption goes through.
    std::fs::rename(env.path(PATH), env.path("www/other")).unwrap();
    std::fs::rename(env.path("www/latest.locked"), env.path(PATH)).unwrap();
    adopt(&env, &cfg, &[]).expect_code(0);
    assert_eq!(env.snapshot("www/other"), other);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_crash_at_every_step_of_an_adoption_is_recovered() {
    // Killed, and a power cut (the crash model undoes what was not durable, the adoption's
    // RENAME_EXCHANGE included) at each step.
    let steps = [
        ("before_staging_record", false),
        ("after_staging_record", false),
        ("during_carry_over", false),
        ("io_state_fsync", false),
        ("io_state_rename", false),
        ("before_adopt_exchange", false),
        ("during_cleanup", true),
        ("io_remove_staging", true),
    ];
    let cases = steps.iter().flat_map(|&(spec, forward)| {
        [
            (spec.to_string(), forward),
            (format!("{spec}=powercut"), forward),
        ]
    });
    for (spec, forward) in cases {
        let spec = spec.as_str();
        let env = Env::new();
        let (_, cfg) = in_place_then_releases(&env);
        let before = view(&env);
        let r = env.run_env(
            &[
                "releases",
                "adopt",
                "--json",
                "--config",
                cfg.to_str().unwrap(),
            ],
            &[("DISTRIBUTOR_FAILPOINT", spec)],
        );
        if spec.ends_with("=powercut") {
            let name = spec.split('=').next().unwrap();
            assert!(
                r.code == -1
                    && r.stderr
                        .contains(&format!("failpoint {name} hit: power cut")),
                "{spec}: {}",
                r.stderr
            );
        } else {
            assert_aborted(&r, spec);
        }
        let rec = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
        rec.expect_code(0);
        let is_link = std::fs::symlink_metadata(env.path(PATH))
            .unwrap()
            .is_symlink();
        assert_eq!(is_link, forward, "{spec}: {}", rec.stdout);
        let mut got = view(&env);
        got.retain(|(p, _)| p != ".distributor.lock");
        let mut want = before.clone();
        want.retain(|(p, _)| p != ".distributor.lock");
        assert_eq!(got, want, "{spec}");
        assert!(!env.staging_left(DIR), "{spec}");
        if !forward {
            assert!(
                releases(&env).is_empty(),
                "{spec}: a half-built release is left"
            );
            // It can be adopted again.
            adopt(&env, &cfg, &[]).expect_code(0);
        }
        let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
        env.publish(&cfg, &v2, &[]).expect_code(0);
    }
}

/// In a shared root a rollback restores only the rolling-back owner's records, in a new
/// release; the other owner's later publication stays; a path another owner holds now is
/// decided by §5.2 (here: owner_conflict, nothing changes).
#[test]
fn a_shared_root_rollback_restores_only_the_owners_records() {
    let env = Env::new();
    let w = config(
        &env,
        "w.yaml",
        "weather",
        "latest",
        "shared_root",
        "      keep: 5\n",
    );
    let o = config(
        &env,
        "o.yaml",
        "other",
        "o",
        "shared_root",
        "      keep: 5\n",
    );
    let w1 = env.bundle(
        "w1",
        "w",
        "2026-12-02T01:00:00Z",
        &[("w/a.txt", "w1"), ("w/only1.txt", "w1")],
        &[],
    );
    let o1 = env.bundle("o1", "o", "2026-12-02T01:00:00Z", &[("o/x.txt", "o1")], &[]);
    let w2 = env.bundle("w2", "w", "2026-12-02T02:00:00Z", &[("w/a.txt", "w2")], &[]);
    let o2 = env.bundle("o2", "o", "2026-12-02T02:00:00Z", &[("o/x.txt", "o2")], &[]);
    for (cfg, b) in [(&w, &w1), (&o, &o1), (&w, &w2), (&o, &o2)] {
        env.publish(cfg, b, &[]).expect_code(0);
    }
    let r = rollback(&env, &w, &["--dry-run"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "rollback", "{}", r.stdout);
    let r = rollback(&env, &w, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "rollback", "{}", r.stdout);
    assert_eq!(env.read(&format!("{PATH}/w/a.txt")), "w1");
    assert_eq!(env.read(&format!("{PATH}/w/only1.txt")), "w1");
    assert_eq!(
        env.read(&format!("{PATH}/o/x.txt")),
        "o2",
        "the other owner's later publication stays"
    );
    for cfg in [&w, &o] {
        env.run(&["verify", "--config", cfg.to_str().unwrap()])
            .expect_code(0);
    }
    // w's hourly job publishing w2 again is held; o publishes normally.
    let r = env.publish(&w, &w2, &[]);
    assert_eq!(r.conflict_kinds(), ["rolled_back"], "{}", r.stdout);
    let o3 = env.bundle("o3", "o", "2026-12-02T03:00:00Z", &[("o/x.txt", "o3")], &[]);
    env.publish(&o, &o3, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{PATH}/w/a.txt")), "w1");
    // Nothing of w before w1.
    let r = rollback(&env, &w, &[]);
    r.expect_code(1);
    assert!(r.stdout.contains("nothing to roll back to"), "{}", r.stdout);
    // o rolls back o3: o2 again, w untouched.
    rollback(&env, &o, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{PATH}/o/x.txt")), "o2");
    assert_eq!(env.read(&format!("{PATH}/w/a.txt")), "w1");
}

#[test]
fn a_shared_root_rollback_onto_a_path_another_owner_holds_now_is_a_conflict() {
    let env = Env::new();
    let w = config(
        &env,
        "w.yaml",
        "weather",
        "latest",
        "shared_root",
        "      keep: 5\n",
    );
    let o = config(
        &env,
        "o.yaml",
        "other",
        "o",
        "shared_root",
        "      keep: 5\n",
    );
    let w1 = env.bundle(
        "w1",
        "w",
        "2026-12-02T01:00:00Z",
        &[("w/a.txt", "w1"), ("shared.txt", "w1")],
        &[],
    );
    let w2 = env.bundle("w2", "w", "2026-12-02T02:00:00Z", &[("w/a.txt", "w2")], &[]);
    let o1 = env.bundle(
        "o1",
        "o",
        "2026-12-02T03:00:00Z",
        &[("shared.txt", "o1")],
        &[],
    );
    for (cfg, b) in [(&w, &w1), (&w, &w2), (&o, &o1)] {
        env.publish(cfg, b, &[]).expect_code(0);
    }
    let before = view(&env);
    let r = rollback(&env, &w, &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["owner_conflict"], "{}", r.stdout);
    assert_eq!(view(&env), before);
}

/// Review findings, each fixed: a prune is journaled whole (never left unfinished); status
/// reads a plain directory before releases.dir exists; a rollback's hold never turns a
/// republication of what is active into a conflict; adopted files are read-only.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_killed_prune_leaves_nothing_unfinished() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n      max_age: 1s\n",
    );
    let ops = publish_versions(&env, &cfg, 3);
    wait_until_aged_out(&env, &cfg);
    let r = env.run_env(
        &["prune", "--json", "--config", cfg.to_str().unwrap()],
        &[("DISTRIBUTOR_FAILPOINT", "during_prune")],
    );
    assert_aborted(&r, "during_prune");
    let rec = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    rec.expect_code(0);
    assert_eq!(
        rec.json()["operations"],
        serde_json::json!([]),
        "{}",
        rec.stdout
    );
    // The next prune finishes it; publishing was never blocked.
    env.run(&["prune", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    assert!(!env.exists(&format!("{DIR}/{}", ops[0])));
    let b4 = site(&env, 4);
    env.publish(&cfg, &b4, &[]).expect_code(0);
}

#[test]
fn status_reads_a_plain_directory_before_releases_dir_exists() {
    let env = Env::new();
    let (_, cfg) = in_place_then_releases(&env);
    let s = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    s.expect_code(0);
    assert_eq!(
        s.json()["destinations"][0]["state"],
        "valid",
        "{}",
        s.stdout
    );
    assert!(!env.exists(DIR));
}

#[test]
fn the_hold_never_makes_republishing_the_active_bundle_a_conflict() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let ops = publish_versions(&env, &cfg, 2);
    rollback(&env, &cfg, &[]).expect_code(0);
    rollback(&env, &cfg, &["--to", &ops[1]]).expect_code(0);
    let r = env.publish(&cfg, &env.path("site2"), &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged", "{}", r.stdout);
}

#[test]
fn adopted_files_become_read_only() {
    let env = Env::new();
    let (_, cfg) = in_place_then_releases(&env);
    adopt(&env, &cfg, &[]).expect_code(0);
    let md = std::fs::metadata(env.path(&format!("{PATH}/keep.txt"))).unwrap();
    assert_eq!(
        md.permissions().mode() & 0o222,
        0,
        "adopted files are read-only"
    );
}

/// Where a hard link cannot be made (EXDEV, EPERM, EMLINK; injected here as EXDEV for
/// every link), the new release gets a read-only copy, verified by reading it back.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn files_that_cannot_be_hard_linked_are_copied_and_verified() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
    let r = env.publish(&cfg, &v1, &[]);
    r.expect_code(0);
    let first = op_of(&r);
    let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
    let r = env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            v2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "io_link=error")],
    );
    r.expect_code(0);
    let second = op_of(&r);
    let md = |rel: &str| std::fs::symlink_metadata(env.path(rel)).unwrap();
    let (a, b) = (
        md(&format!("{DIR}/{first}/keep.txt")),
        md(&format!("{DIR}/{second}/keep.txt")),
    );
    assert_ne!(a.ino(), b.ino(), "copied, not linked");
    assert_eq!(b.permissions().mode() & 0o222, 0, "the copy is read-only");
    assert_eq!(env.read(&format!("{PATH}/keep.txt")), "same in both");
    assert!(md(&format!("{DIR}/{second}/lk")).file_type().is_symlink());
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

/// A publication that fails is rolled back with its half-built release, and never counts
/// as a release for retention or rollback.
#[test]
fn a_failed_publication_never_counts_as_a_release() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 0\n",
    );
    let ops = publish_versions(&env, &cfg, 2);
    let before = (releases(&env), logged(&env, DIR));
    // The bundle's file changes after its manifest was written: an invalid source, found
    // while staging.
    let b3 = site(&env, 3);
    std::fs::write(b3.join("index.html"), "changed after the manifest").unwrap();
    let r = env.publish(&cfg, &b3, &[]);
    r.expect_code(1);
    assert_eq!((releases(&env), logged(&env, DIR)), before);
    // The previous release is still the rollback target, and retention kept both.
    rollback(&env, &cfg, &["--dry-run"]).expect_code(0);
    assert_eq!(
        releases(&env),
        BTreeSet::from([ops[0].clone(), ops[1].clone()])
    );
}

/// Hostile neighbour (SPEC §13 applies to releases.dir): a directory of the release being
/// built is swapped for a symlink to another directory mid-run. Nothing is written through
/// it; the publication fails, its half-built release goes, and `path` still names the old
/// release.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_directory_of_the_release_being_built_swapped_for_a_symlink_redirects_nothing() {
    use crate::common::hostile::{race, swap_for_symlink};
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let v1 = env.bundle("b1", "s", V1_AT, &[("a/x.txt", "x"), ("a/y.txt", "y")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let old = active(&env);
    let before = view(&env);
    std::fs::create_dir_all(env.path("victim")).unwrap();
    let v2 = env.bundle(
        "b2",
        "s",
        V2_AT,
        &[("a/x.txt", "x"), ("a/z.txt", "new")],
        &[],
    );
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        v2.to_str().unwrap(),
    ];
    let r = race(&env, &args, "during_placement:1", &[], || {
        let building = releases(&env)
            .into_iter()
            .find(|r| *r != old)
            .expect("a release being built");
        swap_for_symlink(
            &env.path(&format!("{DIR}/{building}/a")),
            &env.path("victim"),
        );
    });
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert_eq!(
        std::fs::read_dir(env.path("victim")).unwrap().count(),
        0,
        "written through the symlink"
    );
    assert_eq!(active(&env), old);
    assert_eq!(view(&env), before);
    assert_eq!(
        releases(&env),
        BTreeSet::from([old.clone()]),
        "the half-built release is left"
    );
}

/// Hostile neighbour: `path` is pointed elsewhere while a release is built. The commit
/// point sees that `path` no longer names the release planned against and activates
/// nothing: the neighbour's symlink stays, and nothing is written where it points.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn path_repointed_mid_run_is_never_replaced() {
    use crate::common::hostile::race;
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    let v1 = env.bundle("b1", "s", V1_AT, &[("a/x.txt", "x")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    std::fs::create_dir_all(env.path("victim")).unwrap();
    let v2 = env.bundle("b2", "s", V2_AT, &[("a/x.txt", "x2")], &[]);
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        v2.to_str().unwrap(),
    ];
    let r = race(&env, &args, "after_links", &[], || {
        std::fs::remove_file(env.path(PATH)).unwrap();
        std::os::unix::fs::symlink(env.path("victim"), env.path(PATH)).unwrap();
    });
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert_eq!(
        std::fs::read_link(env.path(PATH)).unwrap(),
        env.path("victim")
    );
    assert_eq!(std::fs::read_dir(env.path("victim")).unwrap().count(), 0);
}

/// A rollback dry run refuses (exit 4) where the real rollback would: an operation
/// killed before its staging existed is only in the journal, which the dry run reads
/// without writing anything (SPEC §16).
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_rollback_dry_run_sees_pending_recovery() {
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 3\n",
    );
    publish_versions(&env, &cfg, 2);
    let b3 = site(&env, 3);
    let killed = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b3.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_journal_append")],
    );
    crate::common::faults::assert_aborted(&killed, "after_journal_append");
    for dry in [true, false] {
        let extra: &[&str] = if dry { &["--dry-run"] } else { &[] };
        let r = rollback(&env, &cfg, extra);
        assert_eq!(r.code, 4, "dry run {dry}: {}", r.stdout);
        let msg = r.dest(0)["message"].as_str().unwrap().to_string();
        assert!(msg.contains("recovery required"), "dry run {dry}: {msg}");
    }
    env.run(&["recover", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    rollback(&env, &cfg, &["--dry-run"]).expect_code(0);
}

/// Hostile neighbour during retention: a directory of the release about to be pruned is
/// swapped for a symlink to a directory of theirs. Retention removes the symlink, never
/// what it points to; the publication stands.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "needs the failpoints feature: cargo test --all-features"
)]
fn a_directory_of_a_pruned_release_swapped_for_a_symlink_removes_nothing_through_it() {
    use crate::common::hostile::{race, swap_for_symlink};
    let env = Env::new();
    let cfg = config(
        &env,
        "c.yaml",
        "weather",
        "latest",
        "single_owner",
        "      keep: 0\n",
    );
    let v1 = env.bundle("b1", "s", V1_AT, &[("a/x.txt", "x"), ("a/y.txt", "y")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let first = active(&env);
    let v2 = env.bundle("b2", "s", V2_AT, &[("a/x.txt", "x2")], &[]);
    env.publish(&cfg, &v2, &[]).expect_code(0);
    env.write("victim/keep.txt", "theirs");
    env.write("victim/sub/deep.txt", "theirs too");
    let v3 = env.bundle("b3", "s", "2026-12-02T08:00:00Z", &[("a/x.txt", "x3")], &[]);
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        v3.to_str().unwrap(),
    ];
    // keep: 0 prunes the first release (neither active nor previously active).
    let r = race(&env, &args, "during_prune:1", &[], || {
        swap_for_symlink(&env.path(&format!("{DIR}/{first}/a")), &env.path("victim"));
    });
    r.expect_code(0);
    assert_eq!(env.read("victim/keep.txt"), "theirs");
    assert_eq!(env.read("victim/sub/deep.txt"), "theirs too");
    assert_eq!(env.read(&format!("{PATH}/a/x.txt")), "x3");
    assert!(
        !releases(&env).contains(&first),
        "the first release was pruned"
    );
}

/// A prune over several destinations exits by SPEC §10's order, not with the largest
/// number: one destination refused (an untrusted `releases.json`: exit 1) beside one whose
/// `path` someone replaced (`path_changed`: exit 3) exits 1; each reports its own reason
/// and neither loses a release.
#[test]
fn prune_over_several_destinations_exits_by_the_specs_order() {
    let env = Env::new();
    let yaml = format!(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: {}\n    state:\n      mode: single_owner\n    releases:\n      keep: 1\n  - id: b\n    path: {}\n    state:\n      mode: single_owner\n    releases:\n      keep: 1\n",
        env.path("www/a").display(),
        env.path("www/b").display()
    );
    let cfg = env.config("two.yaml", &yaml);
    for i in 1..=2 {
        env.publish(&cfg, &site(&env, i), &[]).expect_code(0);
    }
    let dir_of = |d: &str| env.path(&format!("www/.{d}.releases"));
    let count = |d: &str| {
        fs::read_dir(dir_of(d))
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    };
    let (a_before, b_before) = (count("a"), count("b"));
    // a: `path` is a plain directory now (path_changed, exit 3).
    let a = env.path("www/a");
    fs::remove_file(&a).unwrap();
    fs::create_dir(&a).unwrap();
    // b: its settings record is writable by anyone: not distributor's (exit 1).
    let rec = dir_of("b").join(".distributor/releases.json");
    assert!(rec.exists(), "{} was not written", rec.display());
    fs::set_permissions(&rec, fs::Permissions::from_mode(0o666)).unwrap();
    let r = env.run(&["prune", "--json", "--config", cfg.to_str().unwrap()]);
    r.expect_code(1);
    let dests = r.json()["destinations"].as_array().unwrap().clone();
    let of = |id: &str| {
        dests
            .iter()
            .find(|d| d["destination_id"] == id)
            .unwrap_or_else(|| panic!("no destination {id}: {}", r.stdout))
            .clone()
    };
    assert!(r.stdout.contains("path_changed"), "{}", r.stdout);
    assert!(of("b")["error"].is_string(), "{}", r.stdout);
    assert_eq!(
        (count("a"), count("b")),
        (a_before, b_before),
        "{}",
        r.stdout
    );
}
