//! Reconciliation (SPEC §5.4): replace and merge, for the same source and across a
//! takeover, in single owner and shared root; and that nothing outside the managed paths is
//! ever touched, whatever the decision.

use crate::common::{Env, F, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const T8: &str = "2026-12-02T08:00:00Z";
const T9: &str = "2026-12-02T09:00:00Z";
const SHARED: &str = "    state:\n      mode: shared_root\n";
const MERGE: &str = "    reconciliation:\n      mode: merge\n";

fn state(env: &Env, bundle: &str) -> Value {
    serde_json::from_str(&env.read(&format!("{bundle}/.distributor.json"))).expect("state JSON")
}

/// Recorded output paths (with their owner in shared root, else "").
fn recorded(env: &Env, bundle: &str) -> Vec<(String, String)> {
    state(env, bundle)["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["path"].as_str().unwrap().to_string(),
                o["owner"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn owners(env: &Env, bundle: &str) -> Vec<String> {
    state(env, bundle)["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["owner"].as_str().unwrap().to_string())
        .collect()
}

fn owner_record(env: &Env, bundle: &str, owner: &str) -> Value {
    state(env, bundle)["owners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["owner"] == owner)
        .cloned()
        .unwrap_or(Value::Null)
}

/// `(path, op)` of every file of the first destination.
fn file_ops(r: &Run) -> Vec<(String, String)> {
    r.dest(0)["files"]
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

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn publish_ok(env: &Env, cfg: &Path, bundle: &Path, extra: &[&str], decision: &str) -> Run {
    let r = env.publish(cfg, bundle, extra);
    r.expect_code(0);
    assert_eq!(r.decision(), decision, "{}", r.stdout);
    r
}

fn cfg(env: &Env, name: &str, pipeline: &str, dest: &str, extra: &[&str]) -> PathBuf {
    env.simple_config(
        &format!("{name}.yaml"),
        pipeline,
        dest,
        "dest",
        &extra.concat(),
    )
}

fn bundle(env: &Env, rel: &str, id: &str, at: &str, files: &[F]) -> PathBuf {
    env.bundle(rel, id, at, files, &[])
}

// ---- single owner ----

#[test]
fn replace_deletes_omitted_outputs_of_the_same_source() {
    let env = Env::new();
    let c = cfg(&env, "c", "weather", "latest", &[]);
    let b6 = bundle(
        &env,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o"), ("d/x.txt", "x")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[
            ("a.txt", "overwrite"),
            ("d/x.txt", "delete"),
            ("old.txt", "delete")
        ])
    );
    assert_eq!(recorded(&env, "dest"), pairs(&[("a.txt", "")]));
    assert!(!env.exists("dest/old.txt"));
    assert!(
        !env.exists("dest/d"),
        "a directory emptied by deletion is removed"
    );
}

#[test]
fn merge_retains_omitted_outputs_of_the_same_source() {
    let env = Env::new();
    let c = cfg(&env, "c", "weather", "latest", &[MERGE]);
    let b6 = bundle(
        &env,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "retain")])
    );
    assert_eq!(r.json()["summary"]["files_retained"], 1);
    assert_eq!(env.read("dest/old.txt"), "o");
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[("a.txt", ""), ("old.txt", "")]),
        "a retained output stays recorded"
    );
    assert_eq!(state(&env, "dest")["reconciliation"], "merge");
}

/// Publishing the same bundle again after a merge retained outputs changes nothing: the
/// retained outputs are recorded and present, so the destination is `unchanged`.
#[test]
fn the_same_bundle_after_a_merge_is_unchanged() {
    let env = Env::new();
    let c = cfg(&env, "c", "weather", "latest", &[MERGE]);
    let b6 = bundle(
        &env,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    publish_ok(&env, &c, &b7, &[], "replace_older");
    let before = env.snapshot("dest");
    let r = publish_ok(&env, &c, &b7, &[], "unchanged");
    assert_eq!(r.dest(0)["status"], "skipped");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "unchanged"), ("old.txt", "retain")])
    );
    assert_eq!(env.snapshot("dest"), before);
    // A retained output is not in this source: it cannot be rewritten from it, so even a
    // missing one does not make the republication a repair (`verify` reports it).
    std::fs::remove_file(env.path("dest/old.txt")).unwrap();
    let before = env.snapshot("dest");
    publish_ok(&env, &c, &b7, &[], "unchanged");
    assert_eq!(env.snapshot("dest"), before);
    // A drifted output of the source itself is repaired; the retained one stays recorded.
    env.write("dest/a.txt", "tampered");
    let r = publish_ok(&env, &c, &b7, &[], "repair");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "retain")])
    );
    assert_eq!(env.read("dest/a.txt"), "a7");
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[("a.txt", ""), ("old.txt", "")])
    );
}

#[test]
fn merge_across_a_takeover_behaves_as_replace() {
    let env = Env::new();
    let c = cfg(&env, "c", "weather", "latest", &[MERGE]);
    let b6 = bundle(
        &env,
        "b6",
        "older-src",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_takeover");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "delete")])
    );
    assert_eq!(r.json()["summary"]["files_retained"], 0);
    assert!(!env.exists("dest/old.txt"));
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[("a.txt", "")]),
        "never claimed by the new source"
    );
}

/// Another destination of the pipeline published the same source id: the owner differs, so
/// merge still behaves as replace.
#[test]
fn merge_across_owners_with_the_same_source_id_behaves_as_replace() {
    let env = Env::new();
    let other = cfg(&env, "other", "weather", "other", &[MERGE]);
    let b6 = bundle(
        &env,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&env, &other, &b6, &[], "create");
    let c = cfg(&env, "c", "weather", "latest", &[MERGE]);
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_takeover");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "delete")])
    );
    assert!(!env.exists("dest/old.txt"));
    assert_eq!(state(&env, "dest")["destination_id"], "latest");
}

#[test]
fn merge_across_a_forced_identity_replacement_behaves_as_replace() {
    let env = Env::new();
    let radar = cfg(&env, "radar", "radar", "latest", &[]);
    let b6 = bundle(
        &env,
        "b6",
        "radar-src",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&env, &radar, &b6, &[], "create");
    let c = cfg(&env, "c", "weather", "latest", &[MERGE]);
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = env.publish(&c, &b7, &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["pipeline_differs"]);
    let r = publish_ok(&env, &c, &b7, &["--force"], "force_replace");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "delete")])
    );
    assert!(!env.exists("dest/old.txt"));
    assert_eq!(recorded(&env, "dest"), pairs(&[("a.txt", "")]));
    assert_eq!(state(&env, "dest")["pipeline_id"], "weather");
}

// ---- shared root ----

/// `radar/latest` owns `radar/r.txt` in the shared root; it must come through any
/// publication of `weather/latest` untouched: record, owner record and bytes.
fn publish_radar(env: &Env) -> Value {
    let radar = cfg(env, "radar", "radar", "latest", &[SHARED]);
    let b = bundle(env, "radar-b", "radar-src", T6, &[("radar/r.txt", "r")]);
    publish_ok(env, &radar, &b, &[], "create");
    owner_record(env, "dest", "radar/latest")
}

fn assert_radar_untouched(env: &Env, record: &Value) {
    assert_eq!(&owner_record(env, "dest", "radar/latest"), record);
    let radar_outputs: Vec<(String, String)> = recorded(env, "dest")
        .into_iter()
        .filter(|(_, o)| o == "radar/latest")
        .collect();
    assert_eq!(radar_outputs, pairs(&[("radar/r.txt", "radar/latest")]));
    assert_eq!(env.read("dest/radar/r.txt"), "r");
}

#[test]
fn shared_root_replace_deletes_only_the_current_owners_old_outputs() {
    let env = Env::new();
    let radar = publish_radar(&env);
    let c = cfg(&env, "c", "weather", "latest", &[SHARED]);
    let b6 = bundle(
        &env,
        "b6",
        "tomorrow",
        T6,
        &[("w/a.txt", "a6"), ("w/old.txt", "o")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("w/a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[("w/a.txt", "overwrite"), ("w/old.txt", "delete")])
    );
    assert!(!env.exists("dest/w/old.txt"));
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[
            ("radar/r.txt", "radar/latest"),
            ("w/a.txt", "weather/latest")
        ])
    );
    assert_radar_untouched(&env, &radar);
}

#[test]
fn shared_root_merge_retains_omitted_outputs_of_the_same_source() {
    let env = Env::new();
    let radar = publish_radar(&env);
    let c = cfg(&env, "c", "weather", "latest", &[SHARED, MERGE]);
    let b6 = bundle(
        &env,
        "b6",
        "tomorrow",
        T6,
        &[("w/a.txt", "a6"), ("w/old.txt", "o")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("w/a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[("w/a.txt", "overwrite"), ("w/old.txt", "retain")])
    );
    assert_eq!(env.read("dest/w/old.txt"), "o");
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[
            ("radar/r.txt", "radar/latest"),
            ("w/a.txt", "weather/latest"),
            ("w/old.txt", "weather/latest"),
        ])
    );
    assert_radar_untouched(&env, &radar);
}

#[test]
fn shared_root_merge_across_a_source_change_behaves_as_replace() {
    let env = Env::new();
    let radar = publish_radar(&env);
    let c = cfg(&env, "c", "weather", "latest", &[SHARED, MERGE]);
    let b6 = bundle(
        &env,
        "b6",
        "older-src",
        T6,
        &[("w/a.txt", "a6"), ("w/old.txt", "o")],
    );
    publish_ok(&env, &c, &b6, &[], "create");
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("w/a.txt", "a7")]);
    let r = publish_ok(&env, &c, &b7, &[], "replace_takeover");
    assert_eq!(
        file_ops(&r),
        pairs(&[("w/a.txt", "overwrite"), ("w/old.txt", "delete")])
    );
    assert!(!env.exists("dest/w/old.txt"));
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[
            ("radar/r.txt", "radar/latest"),
            ("w/a.txt", "weather/latest")
        ])
    );
    assert_eq!(
        owner_record(&env, "dest", "weather/latest")["source"]["id"],
        "tomorrow"
    );
    assert_radar_untouched(&env, &radar);
}

/// Taking paths over from other owners of the pipeline: the paths move to the current
/// owner, the other owners keep everything else, and an owner left with no paths is
/// removed. Merge does not retain anything of theirs for the current owner.
#[test]
fn shared_root_takeover_moves_paths_and_removes_emptied_owner_records() {
    for reconciliation in ["", MERGE] {
        let env = Env::new();
        let radar = publish_radar(&env);
        let other = cfg(&env, "other", "weather", "other", &[SHARED]);
        let bo = bundle(&env, "bo", "other-src", T6, &[("x.txt", "x-other")]);
        publish_ok(&env, &other, &bo, &[], "create");
        let third = cfg(&env, "third", "weather", "third", &[SHARED]);
        let bt = bundle(
            &env,
            "bt",
            "third-src",
            T6,
            &[("y.txt", "y-third"), ("z.txt", "z-third")],
        );
        publish_ok(&env, &third, &bt, &[], "create");
        let third_record = owner_record(&env, "dest", "weather/third");

        let c = cfg(&env, "c", "weather", "latest", &[SHARED, reconciliation]);
        let b7 = bundle(
            &env,
            "b7",
            "tomorrow",
            T7,
            &[("mine.txt", "m"), ("x.txt", "x-new"), ("y.txt", "y-new")],
        );
        let r = publish_ok(&env, &c, &b7, &[], "replace_takeover");
        let d = r.dest(0);
        assert!(d["previous"].is_null());
        assert_eq!(
            d["takeovers"],
            serde_json::json!([
                {"from_owner": "weather/other", "from_source_id": "other-src", "paths": ["x.txt"]},
                {"from_owner": "weather/third", "from_source_id": "third-src", "paths": ["y.txt"]},
            ])
        );
        assert_eq!(
            file_ops(&r),
            pairs(&[
                ("mine.txt", "create"),
                ("x.txt", "overwrite"),
                ("y.txt", "overwrite")
            ]),
            "nothing of other owners is deleted or retained"
        );
        assert_eq!(
            recorded(&env, "dest"),
            pairs(&[
                ("mine.txt", "weather/latest"),
                ("radar/r.txt", "radar/latest"),
                ("x.txt", "weather/latest"),
                ("y.txt", "weather/latest"),
                ("z.txt", "weather/third"),
            ])
        );
        let mut o = owners(&env, "dest");
        o.sort();
        assert_eq!(
            o,
            ["radar/latest", "weather/latest", "weather/third"],
            "weather/other has no path left and is removed"
        );
        assert_eq!(owner_record(&env, "dest", "weather/third"), third_record);
        assert_eq!(env.read("dest/z.txt"), "z-third");
        assert_eq!(env.read("dest/x.txt"), "x-new");
        assert_radar_untouched(&env, &radar);
    }
}

/// A forced takeover of a path from an owner that may not be taken over: the path moves,
/// the owner keeps the rest.
#[test]
fn shared_root_forced_owner_conflict_moves_only_the_colliding_path() {
    let env = Env::new();
    let radar = cfg(&env, "radar", "radar", "latest", &[SHARED]);
    let b = bundle(
        &env,
        "rb",
        "radar-src",
        T6,
        &[("a.txt", "ra"), ("radar/r.txt", "r")],
    );
    publish_ok(&env, &radar, &b, &[], "create");
    let c = cfg(&env, "c", "weather", "latest", &[SHARED, MERGE]);
    let b7 = bundle(&env, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    env.publish(&c, &b7, &[]).expect_code(3);
    let r = publish_ok(&env, &c, &b7, &["--force"], "force_replace");
    assert_eq!(
        r.dest(0)["takeovers"],
        serde_json::json!([{"from_owner": "radar/latest", "from_source_id": "radar-src", "paths": ["a.txt"]}])
    );
    assert_eq!(file_ops(&r), pairs(&[("a.txt", "overwrite")]));
    assert_eq!(
        recorded(&env, "dest"),
        pairs(&[("a.txt", "weather/latest"), ("radar/r.txt", "radar/latest")])
    );
    assert_eq!(env.read("dest/radar/r.txt"), "r");
    assert_eq!(env.read("dest/a.txt"), "a7");
}

// ---- nothing outside the managed paths is touched ----

/// Unmanaged content around and inside a bundle path `site/bundle`.
const UNRELATED: &[(&str, &str)] = &[
    ("site/top.txt", "parent file"),
    ("site/sibling/keep.txt", "sibling dir"),
    ("site/bundle/notes.txt", "unmanaged file"),
    ("site/bundle/extra/x.txt", "unmanaged dir"),
    ("site/bundle/d/hand.txt", "unmanaged file in a managed dir"),
];

fn assert_unrelated_intact(env: &Env, step: &str) {
    for (p, c) in UNRELATED {
        assert!(env.exists(p), "{step}: {p} is gone");
        assert_eq!(&env.read(p), c, "{step}: {p} changed");
    }
    let sibling = env.snapshot("site/sibling");
    assert_eq!(
        sibling,
        vec![("keep.txt".to_string(), "sibling dir".to_string())],
        "{step}"
    );
}

#[test]
fn unrelated_content_survives_every_kind_of_publication() {
    for mode in ["", SHARED] {
        let env = Env::new();
        for (p, c) in UNRELATED {
            env.write(p, c);
        }
        let at = |name: &str, pipeline: &str, extra: &[&str]| {
            let mut extra = extra.concat();
            extra.push_str(mode);
            env.simple_config(
                &format!("{name}.yaml"),
                pipeline,
                "latest",
                "site/bundle",
                &extra,
            )
        };
        let weather = at("weather", "weather", &[]);
        let radar_never = at("radar", "radar", &["    takeover:\n      mode: never\n"]);
        let radar_merge = at("radar-merge", "radar", &[MERGE]);
        let steps: Vec<(&str, PathBuf, PathBuf, &[&str])> = vec![
            (
                "create",
                weather.clone(),
                bundle(
                    &env,
                    "b1",
                    "tomorrow",
                    T6,
                    &[("a.txt", "1"), ("d/m.txt", "m"), ("e/f/g.txt", "g")],
                ),
                &[],
            ),
            (
                "replace_older",
                weather.clone(),
                bundle(
                    &env,
                    "b2",
                    "tomorrow",
                    T7,
                    &[("a.txt", "2"), ("b.txt", "b")],
                ),
                &[],
            ),
            (
                "replace_takeover",
                weather.clone(),
                bundle(
                    &env,
                    "b3",
                    "other-src",
                    T8,
                    &[("a.txt", "3"), ("d/n.txt", "n")],
                ),
                &[],
            ),
            (
                "force_replace",
                radar_never.clone(),
                bundle(
                    &env,
                    "b4",
                    "radar-src",
                    T8,
                    &[("a.txt", "4"), ("r.txt", "r")],
                ),
                &["--force"],
            ),
            (
                "replace_older",
                radar_merge.clone(),
                bundle(&env, "b5", "radar-src", T9, &[("a.txt", "5")]),
                &[],
            ),
        ];
        let mut last = String::new();
        for (decision, config, b, extra) in steps {
            let step = format!(
                "{decision} after {last} ({})",
                if mode.is_empty() {
                    "single owner"
                } else {
                    "shared root"
                }
            );
            let r = env.publish(&config, &b, extra);
            r.expect_code(0);
            assert_eq!(r.decision(), decision, "{step}: {}", r.stdout);
            assert_unrelated_intact(&env, &step);
            assert!(!env.exists("site/bundle/.distributor-staging"), "{step}");
            last = decision.to_string();
        }
        // The merge kept r.txt (same radar source); d/ still holds the unmanaged file;
        // e/f/ emptied by the first replacement is gone.
        assert_eq!(env.read("site/bundle/r.txt"), "r");
        assert_eq!(env.read("site/bundle/a.txt"), "5");
        assert!(!env.exists("site/bundle/d/m.txt"));
        if mode.is_empty() {
            assert!(
                !env.exists("site/bundle/d/n.txt"),
                "the single owner was replaced"
            );
        } else {
            // Shared root: the forced radar publication took a.txt only; d/n.txt is still
            // weather/latest's.
            assert_eq!(env.read("site/bundle/d/n.txt"), "n");
            assert!(
                recorded(&env, "site/bundle")
                    .contains(&("d/n.txt".to_string(), "weather/latest".to_string()))
            );
        }
        assert!(!env.exists("site/bundle/e"));
        assert!(!env.exists("site/bundle/b.txt"));
    }
}

/// A bundle path mapped below `path` (source_id mapping): replacing everything in it
/// leaves the bundle path and its parent in place.
#[test]
fn the_bundle_path_and_its_parent_stay_when_every_output_is_replaced() {
    let env = Env::new();
    env.write("site/keep.txt", "parent");
    let c = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "site",
        "    path_mapping:\n      mode: source_id\n",
    );
    let b1 = bundle(&env, "b1", "tomorrow", T6, &[("x/only.txt", "1")]);
    publish_ok(&env, &c, &b1, &[], "create");
    let b2 = bundle(&env, "b2", "tomorrow", T7, &[("y.txt", "2")]);
    publish_ok(&env, &c, &b2, &[], "replace_older");
    assert!(!env.exists("site/tomorrow/x"));
    assert_eq!(env.read("site/tomorrow/y.txt"), "2");
    assert_eq!(env.read("site/keep.txt"), "parent");
}

/// Links follow the same rules as outputs: replace deletes an omitted link, merge retains
/// it (same source), a takeover deletes it.
#[test]
fn links_are_reconciled_like_outputs() {
    let link_ops = |r: &Run| -> Vec<(String, String)> {
        r.dest(0)["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["path"].as_str().unwrap().to_string(),
                    l["op"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    for (extra, second_id, decision, op) in [
        ("", "tomorrow", "replace_older", "delete"),
        (MERGE, "tomorrow", "replace_older", "retain"),
        (MERGE, "other-src", "replace_takeover", "delete"),
    ] {
        let env = Env::new();
        let c = cfg(&env, "c", "weather", "latest", &[extra]);
        let b6 = env.bundle(
            "b6",
            "tomorrow",
            T6,
            &[("a.txt", "a6"), ("old.txt", "o")],
            &[("current", "old.txt")],
        );
        publish_ok(&env, &c, &b6, &[], "create");
        let b7 = env.bundle(
            "b7",
            second_id,
            T7,
            &[("a.txt", "a7"), ("old.txt", "o")],
            &[],
        );
        let r = publish_ok(&env, &c, &b7, &[], decision);
        assert_eq!(
            link_ops(&r),
            pairs(&[("current", op)]),
            "{decision} {extra}"
        );
        let recorded_links = state(&env, "dest")["links"].as_array().unwrap().len();
        if op == "retain" {
            assert!(env.exists("dest/current"));
            assert_eq!(recorded_links, 1);
        } else {
            assert!(!env.exists("dest/current"));
            assert_eq!(recorded_links, 0);
        }
    }
}
