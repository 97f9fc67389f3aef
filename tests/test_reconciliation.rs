//! Reconciliation (SPEC §5.4): replace and merge, for the same source and across a
//! takeover, in single owner and shared root; and that nothing outside the managed paths is
//! ever touched, whatever the decision. On both backends (`<test>::local`, `<test>::s3`:
//! SPEC §14, "every rule of §4-5 holds"); after every publication `verify` finds no drift
//! and `status` shows what state records, without writing.

use crate::common::backend::{Backend, World, per_backend};
use crate::common::{F, Run};
use serde_json::Value;
use std::path::{Path, PathBuf};

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const T8: &str = "2026-12-02T08:00:00Z";
const T9: &str = "2026-12-02T09:00:00Z";
const SHARED: &str = "    state:\n      mode: shared_root\n";
const MERGE: &str = "    reconciliation:\n      mode: merge\n";

fn state(w: &World, bundle: &str) -> Value {
    w.state(bundle)
}

/// Recorded output paths (with their owner in shared root, else "").
fn recorded(w: &World, bundle: &str) -> Vec<(String, String)> {
    state(w, bundle)["outputs"]
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

fn owners(w: &World, bundle: &str) -> Vec<String> {
    state(w, bundle)["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["owner"].as_str().unwrap().to_string())
        .collect()
}

fn owner_record(w: &World, bundle: &str, owner: &str) -> Value {
    state(w, bundle)["owners"]
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

/// Publishes, expecting `decision`.
fn publish(w: &World, cfg: &Path, bundle: &Path, extra: &[&str], decision: &str) -> Run {
    let r = w.publish(cfg, bundle, extra);
    r.expect_code(0);
    assert_eq!(r.decision(), decision, "{}", r.stdout);
    r
}

/// Publishes, expecting `decision`; then `verify` finds no drift and `status` agrees
/// with state ([`verify_and_status`]).
fn publish_ok(w: &World, cfg: &Path, bundle: &Path, extra: &[&str], decision: &str) -> Run {
    let r = publish(w, cfg, bundle, extra, decision);
    let bundle_path = r.dest(0)["bundle_path"].as_str().unwrap().to_string();
    assert_eq!(
        verify_and_status(w, cfg, &bundle_path),
        Drift::default(),
        "verify after {decision}"
    );
    r
}

/// What `verify` lists for one bundle path.
#[derive(Debug, Default, PartialEq, Eq)]
struct Drift {
    missing: Vec<String>,
    modified: Vec<String>,
    unrecorded: Vec<String>,
}

/// `verify` and `status` of the config's one bundle path `bundle_path` (as reports spell
/// it): returns what verify lists (its exit code must say whether that is drift), and
/// checks that status reports the state's mode and owners with their output counts, and
/// that neither command sends a write request (s3).
fn verify_and_status(w: &World, cfg: &Path, bundle_path: &str) -> Drift {
    let mark = w.mark();
    let v = w.verify(cfg);
    let d = v.dest(0);
    assert_eq!(
        v.json()["destinations"].as_array().unwrap().len(),
        1,
        "{}",
        v.stdout
    );
    assert_eq!(d["bundle_path"], bundle_path, "{}", v.stdout);
    assert_eq!(d["state"], "valid", "{}", v.stdout);
    let list = |k: &str| -> Vec<String> {
        d[k].as_array()
            .unwrap_or_else(|| panic!("verify {k}: {}", v.stdout))
            .iter()
            .map(|p| p.as_str().unwrap().to_string())
            .collect()
    };
    let drift = Drift {
        missing: list("missing"),
        modified: list("modified"),
        unrecorded: list("unrecorded"),
    };
    v.expect_code(if drift == Drift::default() { 0 } else { 3 });

    let s = w.status(cfg);
    s.expect_code(0);
    assert_eq!(
        s.json()["destinations"].as_array().unwrap().len(),
        1,
        "{}",
        s.stdout
    );
    let d = s.dest(0);
    assert_eq!(d["bundle_path"], bundle_path, "{}", s.stdout);
    let st = w.state(&w.storage_path(bundle_path));
    assert_eq!(st["state_version"], w.backend.state_version());
    assert_eq!(d["state"], "valid", "{}", s.stdout);
    assert_eq!(d["state_mode"], st["state_mode"], "{}", s.stdout);
    assert_eq!(d["recovery_pending"], false, "{}", s.stdout);
    let outputs = st["outputs"].as_array().unwrap();
    let in_state: Vec<(String, usize)> = if st["state_mode"] == "single_owner" {
        let owner = format!(
            "{}/{}",
            st["pipeline_id"].as_str().unwrap(),
            st["destination_id"].as_str().unwrap()
        );
        vec![(owner, outputs.len())]
    } else {
        st["owners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let n = outputs.iter().filter(|x| x["owner"] == o["owner"]).count();
                (o["owner"].as_str().unwrap().to_string(), n)
            })
            .collect()
    };
    let in_status: Vec<(String, usize)> = d["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let n = o["outputs"].as_u64().unwrap() as usize;
            (o["owner"].as_str().unwrap().to_string(), n)
        })
        .collect();
    assert_eq!(in_status, in_state, "{}", s.stdout);
    assert_eq!(
        w.writes_since(mark),
        Vec::<String>::new(),
        "verify and status sent write requests"
    );
    drift
}

fn cfg(w: &World, name: &str, pipeline: &str, dest: &str, extra: &[&str]) -> PathBuf {
    w.simple_config(
        &format!("{name}.yaml"),
        pipeline,
        dest,
        "dest",
        &extra.concat(),
    )
}

fn bundle(w: &World, rel: &str, id: &str, at: &str, files: &[F]) -> PathBuf {
    w.bundle(rel, id, at, files, &[])
}

// ---- single owner ----

fn replace_deletes_omitted_outputs_of_the_same_source(backend: Backend) {
    let w = World::new(backend);
    let c = cfg(&w, "c", "weather", "latest", &[]);
    let b6 = bundle(
        &w,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o"), ("d/x.txt", "x")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[
            ("a.txt", "overwrite"),
            ("d/x.txt", "delete"),
            ("old.txt", "delete")
        ])
    );
    assert_eq!(recorded(&w, "dest"), pairs(&[("a.txt", "")]));
    assert!(!w.exists("dest/old.txt"));
    assert!(
        !w.exists("dest/d"),
        "a directory emptied by deletion is removed"
    );
}

fn merge_retains_omitted_outputs_of_the_same_source(backend: Backend) {
    let w = World::new(backend);
    let c = cfg(&w, "c", "weather", "latest", &[MERGE]);
    let b6 = bundle(
        &w,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "retain")])
    );
    assert_eq!(r.json()["summary"]["files_retained"], 1);
    assert_eq!(w.read("dest/old.txt"), "o");
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[("a.txt", ""), ("old.txt", "")]),
        "a retained output stays recorded"
    );
    assert_eq!(state(&w, "dest")["reconciliation"], "merge");
}

/// Publishing the same bundle again after a merge retained outputs changes nothing: the
/// retained outputs are recorded and present, so the destination is `unchanged`.
fn the_same_bundle_after_a_merge_is_unchanged(backend: Backend) {
    let w = World::new(backend);
    let c = cfg(&w, "c", "weather", "latest", &[MERGE]);
    let b6 = bundle(
        &w,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    publish_ok(&w, &c, &b7, &[], "replace_older");
    let before = w.snapshot("dest");
    let r = publish_ok(&w, &c, &b7, &[], "unchanged");
    assert_eq!(r.dest(0)["status"], "skipped");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "unchanged"), ("old.txt", "retain")])
    );
    assert_eq!(w.snapshot("dest"), before);
    // A retained output is not in this source: it cannot be rewritten from it, so even a
    // missing one does not make the republication a repair (`verify` reports it).
    w.remove("dest/old.txt");
    let before = w.snapshot("dest");
    let r = publish(&w, &c, &b7, &[], "unchanged");
    assert_eq!(w.snapshot("dest"), before);
    let bundle_path = r.dest(0)["bundle_path"].as_str().unwrap().to_string();
    let missing_old = Drift {
        missing: vec!["old.txt".into()],
        ..Drift::default()
    };
    assert_eq!(verify_and_status(&w, &c, &bundle_path), missing_old);
    // A drifted output of the source itself is repaired; the retained one stays recorded.
    w.write("dest/a.txt", "tampered");
    let tampered = Drift {
        missing: vec!["old.txt".into()],
        modified: vec!["a.txt".into()],
        ..Drift::default()
    };
    assert_eq!(verify_and_status(&w, &c, &bundle_path), tampered);
    let r = publish(&w, &c, &b7, &[], "repair");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "retain")])
    );
    assert_eq!(w.read("dest/a.txt"), "a7");
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[("a.txt", ""), ("old.txt", "")])
    );
    assert_eq!(verify_and_status(&w, &c, &bundle_path), missing_old);
}

fn merge_across_a_takeover_behaves_as_replace(backend: Backend) {
    let w = World::new(backend);
    let c = cfg(&w, "c", "weather", "latest", &[MERGE]);
    let b6 = bundle(
        &w,
        "b6",
        "older-src",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_takeover");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "delete")])
    );
    assert_eq!(r.json()["summary"]["files_retained"], 0);
    assert!(!w.exists("dest/old.txt"));
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[("a.txt", "")]),
        "never claimed by the new source"
    );
}

/// Another destination of the pipeline published the same source id: the owner differs, so
/// merge still behaves as replace.
fn merge_across_owners_with_the_same_source_id_behaves_as_replace(backend: Backend) {
    let w = World::new(backend);
    let other = cfg(&w, "other", "weather", "other", &[MERGE]);
    let b6 = bundle(
        &w,
        "b6",
        "tomorrow",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&w, &other, &b6, &[], "create");
    let c = cfg(&w, "c", "weather", "latest", &[MERGE]);
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_takeover");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "delete")])
    );
    assert!(!w.exists("dest/old.txt"));
    assert_eq!(state(&w, "dest")["destination_id"], "latest");
}

fn merge_across_a_forced_identity_replacement_behaves_as_replace(backend: Backend) {
    let w = World::new(backend);
    let radar = cfg(&w, "radar", "radar", "latest", &[]);
    let b6 = bundle(
        &w,
        "b6",
        "radar-src",
        T6,
        &[("a.txt", "a6"), ("old.txt", "o")],
    );
    publish_ok(&w, &radar, &b6, &[], "create");
    let c = cfg(&w, "c", "weather", "latest", &[MERGE]);
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    let r = w.publish(&c, &b7, &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["pipeline_differs"]);
    let r = publish_ok(&w, &c, &b7, &["--force"], "force_replace");
    assert_eq!(
        file_ops(&r),
        pairs(&[("a.txt", "overwrite"), ("old.txt", "delete")])
    );
    assert!(!w.exists("dest/old.txt"));
    assert_eq!(recorded(&w, "dest"), pairs(&[("a.txt", "")]));
    assert_eq!(state(&w, "dest")["pipeline_id"], "weather");
}

// ---- shared root ----

/// `radar/latest` owns `radar/r.txt` in the shared root; it must come through any
/// publication of `weather/latest` untouched: record, owner record and bytes.
fn publish_radar(w: &World) -> Value {
    let radar = cfg(w, "radar", "radar", "latest", &[SHARED]);
    let b = bundle(w, "radar-b", "radar-src", T6, &[("radar/r.txt", "r")]);
    publish_ok(w, &radar, &b, &[], "create");
    owner_record(w, "dest", "radar/latest")
}

fn assert_radar_untouched(w: &World, record: &Value) {
    assert_eq!(&owner_record(w, "dest", "radar/latest"), record);
    let radar_outputs: Vec<(String, String)> = recorded(w, "dest")
        .into_iter()
        .filter(|(_, o)| o == "radar/latest")
        .collect();
    assert_eq!(radar_outputs, pairs(&[("radar/r.txt", "radar/latest")]));
    assert_eq!(w.read("dest/radar/r.txt"), "r");
}

fn shared_root_replace_deletes_only_the_current_owners_old_outputs(backend: Backend) {
    let w = World::new(backend);
    let radar = publish_radar(&w);
    let c = cfg(&w, "c", "weather", "latest", &[SHARED]);
    let b6 = bundle(
        &w,
        "b6",
        "tomorrow",
        T6,
        &[("w/a.txt", "a6"), ("w/old.txt", "o")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("w/a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[("w/a.txt", "overwrite"), ("w/old.txt", "delete")])
    );
    assert!(!w.exists("dest/w/old.txt"));
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[
            ("radar/r.txt", "radar/latest"),
            ("w/a.txt", "weather/latest")
        ])
    );
    assert_radar_untouched(&w, &radar);
}

fn shared_root_merge_retains_omitted_outputs_of_the_same_source(backend: Backend) {
    let w = World::new(backend);
    let radar = publish_radar(&w);
    let c = cfg(&w, "c", "weather", "latest", &[SHARED, MERGE]);
    let b6 = bundle(
        &w,
        "b6",
        "tomorrow",
        T6,
        &[("w/a.txt", "a6"), ("w/old.txt", "o")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("w/a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_older");
    assert_eq!(
        file_ops(&r),
        pairs(&[("w/a.txt", "overwrite"), ("w/old.txt", "retain")])
    );
    assert_eq!(w.read("dest/w/old.txt"), "o");
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[
            ("radar/r.txt", "radar/latest"),
            ("w/a.txt", "weather/latest"),
            ("w/old.txt", "weather/latest"),
        ])
    );
    assert_radar_untouched(&w, &radar);
}

fn shared_root_merge_across_a_source_change_behaves_as_replace(backend: Backend) {
    let w = World::new(backend);
    let radar = publish_radar(&w);
    let c = cfg(&w, "c", "weather", "latest", &[SHARED, MERGE]);
    let b6 = bundle(
        &w,
        "b6",
        "older-src",
        T6,
        &[("w/a.txt", "a6"), ("w/old.txt", "o")],
    );
    publish_ok(&w, &c, &b6, &[], "create");
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("w/a.txt", "a7")]);
    let r = publish_ok(&w, &c, &b7, &[], "replace_takeover");
    assert_eq!(
        file_ops(&r),
        pairs(&[("w/a.txt", "overwrite"), ("w/old.txt", "delete")])
    );
    assert!(!w.exists("dest/w/old.txt"));
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[
            ("radar/r.txt", "radar/latest"),
            ("w/a.txt", "weather/latest")
        ])
    );
    assert_eq!(
        owner_record(&w, "dest", "weather/latest")["source"]["id"],
        "tomorrow"
    );
    assert_radar_untouched(&w, &radar);
}

/// Taking paths over from other owners of the pipeline: the paths move to the current
/// owner, the other owners keep everything else, and an owner left with no paths is
/// removed. Merge does not retain anything of theirs for the current owner.
fn shared_root_takeover_moves_paths_and_removes_emptied_owner_records(backend: Backend) {
    for reconciliation in ["", MERGE] {
        let w = World::new(backend);
        let radar = publish_radar(&w);
        let other = cfg(&w, "other", "weather", "other", &[SHARED]);
        let bo = bundle(&w, "bo", "other-src", T6, &[("x.txt", "x-other")]);
        publish_ok(&w, &other, &bo, &[], "create");
        let third = cfg(&w, "third", "weather", "third", &[SHARED]);
        let bt = bundle(
            &w,
            "bt",
            "third-src",
            T6,
            &[("y.txt", "y-third"), ("z.txt", "z-third")],
        );
        publish_ok(&w, &third, &bt, &[], "create");
        let third_record = owner_record(&w, "dest", "weather/third");

        let c = cfg(&w, "c", "weather", "latest", &[SHARED, reconciliation]);
        let b7 = bundle(
            &w,
            "b7",
            "tomorrow",
            T7,
            &[("mine.txt", "m"), ("x.txt", "x-new"), ("y.txt", "y-new")],
        );
        let r = publish_ok(&w, &c, &b7, &[], "replace_takeover");
        let d = r.dest(0);
        assert!(d["previous"].is_null());
        assert_eq!(
            d["takeovers"],
            serde_json::json!([
                {"from_owner": "weather/other", "from_source_id": "other-src", "cross_owner": true, "paths": ["x.txt"]},
                {"from_owner": "weather/third", "from_source_id": "third-src", "cross_owner": true, "paths": ["y.txt"]},
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
            recorded(&w, "dest"),
            pairs(&[
                ("mine.txt", "weather/latest"),
                ("radar/r.txt", "radar/latest"),
                ("x.txt", "weather/latest"),
                ("y.txt", "weather/latest"),
                ("z.txt", "weather/third"),
            ])
        );
        let mut o = owners(&w, "dest");
        o.sort();
        assert_eq!(
            o,
            ["radar/latest", "weather/latest", "weather/third"],
            "weather/other has no path left and is removed"
        );
        assert_eq!(owner_record(&w, "dest", "weather/third"), third_record);
        assert_eq!(w.read("dest/z.txt"), "z-third");
        assert_eq!(w.read("dest/x.txt"), "x-new");
        assert_radar_untouched(&w, &radar);
    }
}

/// A forced takeover of a path from an owner that may not be taken over: the path moves,
/// the owner keeps the rest.
fn shared_root_forced_owner_conflict_moves_only_the_colliding_path(backend: Backend) {
    let w = World::new(backend);
    let radar = cfg(&w, "radar", "radar", "latest", &[SHARED]);
    let b = bundle(
        &w,
        "rb",
        "radar-src",
        T6,
        &[("a.txt", "ra"), ("radar/r.txt", "r")],
    );
    publish_ok(&w, &radar, &b, &[], "create");
    let c = cfg(&w, "c", "weather", "latest", &[SHARED, MERGE]);
    let b7 = bundle(&w, "b7", "tomorrow", T7, &[("a.txt", "a7")]);
    w.publish(&c, &b7, &[]).expect_code(3);
    let r = publish_ok(&w, &c, &b7, &["--force"], "force_replace");
    assert_eq!(
        r.dest(0)["takeovers"],
        serde_json::json!([{"from_owner": "radar/latest", "from_source_id": "radar-src", "cross_owner": true, "paths": ["a.txt"]}])
    );
    assert_eq!(file_ops(&r), pairs(&[("a.txt", "overwrite")]));
    assert_eq!(
        recorded(&w, "dest"),
        pairs(&[("a.txt", "weather/latest"), ("radar/r.txt", "radar/latest")])
    );
    assert_eq!(w.read("dest/radar/r.txt"), "r");
    assert_eq!(w.read("dest/a.txt"), "a7");
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

fn assert_unrelated_intact(w: &World, step: &str) {
    for (p, c) in UNRELATED {
        assert!(w.exists(p), "{step}: {p} is gone");
        assert_eq!(&w.read(p), c, "{step}: {p} changed");
    }
    let sibling = w.tree("site/sibling");
    assert_eq!(
        sibling,
        vec![("keep.txt".to_string(), "sibling dir".to_string())],
        "{step}"
    );
}

fn unrelated_content_survives_every_kind_of_publication(backend: Backend) {
    for mode in ["", SHARED] {
        let w = World::new(backend);
        for (p, c) in UNRELATED {
            w.write(p, c);
        }
        let at = |name: &str, pipeline: &str, extra: &[&str]| {
            let mut extra = extra.concat();
            extra.push_str(mode);
            w.simple_config(
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
                    &w,
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
                bundle(&w, "b2", "tomorrow", T7, &[("a.txt", "2"), ("b.txt", "b")]),
                &[],
            ),
            (
                "replace_takeover",
                weather.clone(),
                bundle(
                    &w,
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
                bundle(&w, "b4", "radar-src", T8, &[("a.txt", "4"), ("r.txt", "r")]),
                &["--force"],
            ),
            (
                "replace_older",
                radar_merge.clone(),
                bundle(&w, "b5", "radar-src", T9, &[("a.txt", "5")]),
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
            let r = w.publish(&config, &b, extra);
            r.expect_code(0);
            assert_eq!(r.decision(), decision, "{step}: {}", r.stdout);
            assert_unrelated_intact(&w, &step);
            assert!(!w.staging_left("site/bundle"), "{step}");
            let bundle_path = w.bundle_path("site/bundle");
            let unmanaged = Drift {
                unrecorded: vec![
                    "d/hand.txt".into(),
                    "extra/x.txt".into(),
                    "notes.txt".into(),
                ],
                ..Drift::default()
            };
            assert_eq!(
                verify_and_status(&w, &config, &bundle_path),
                unmanaged,
                "{step}"
            );
            last = decision.to_string();
        }
        // The merge kept r.txt (same radar source); d/ still holds the unmanaged file;
        // e/f/ emptied by the first replacement is gone.
        assert_eq!(w.read("site/bundle/r.txt"), "r");
        assert_eq!(w.read("site/bundle/a.txt"), "5");
        assert!(!w.exists("site/bundle/d/m.txt"));
        if mode.is_empty() {
            assert!(
                !w.exists("site/bundle/d/n.txt"),
                "the single owner was replaced"
            );
        } else {
            // Shared root: the forced radar publication took a.txt only; d/n.txt is still
            // weather/latest's.
            assert_eq!(w.read("site/bundle/d/n.txt"), "n");
            assert!(
                recorded(&w, "site/bundle")
                    .contains(&("d/n.txt".to_string(), "weather/latest".to_string()))
            );
        }
        assert!(!w.exists("site/bundle/e"));
        assert!(!w.exists("site/bundle/b.txt"));
    }
}

/// A bundle path mapped below `path` (source_id mapping): replacing everything in it
/// leaves the bundle path and its parent in place.
fn the_bundle_path_and_its_parent_stay_when_every_output_is_replaced(backend: Backend) {
    let w = World::new(backend);
    w.write("site/keep.txt", "parent");
    let c = w.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "site",
        "    path_mapping:\n      mode: source_id\n",
    );
    let b1 = bundle(&w, "b1", "tomorrow", T6, &[("x/only.txt", "1")]);
    publish_ok(&w, &c, &b1, &[], "create");
    let b2 = bundle(&w, "b2", "tomorrow", T7, &[("y.txt", "2")]);
    publish_ok(&w, &c, &b2, &[], "replace_older");
    assert!(!w.exists("site/tomorrow/x"));
    assert_eq!(w.read("site/tomorrow/y.txt"), "2");
    assert_eq!(w.read("site/keep.txt"), "parent");
}

/// Links follow the same rules as outputs: replace deletes an omitted link, merge retains
/// it (same source), a takeover deletes it. On s3 there is nothing to reconcile: a link
/// is always the conflict `unsupported_link`, which `--force` does not override (SPEC §14).
fn links_are_reconciled_like_outputs(backend: Backend) {
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
    if backend.object_store() {
        let w = World::new(backend);
        let c = cfg(&w, "c", "weather", "latest", &[]);
        let b6 = w.bundle(
            "b6",
            "tomorrow",
            T6,
            &[("a.txt", "a6"), ("old.txt", "o")],
            &[("current", "old.txt")],
        );
        for extra in [&[][..], &["--force"]] {
            let r = w.publish(&c, &b6, extra);
            r.expect_code(3);
            assert_eq!(r.conflict_kinds(), ["unsupported_link"], "{extra:?}");
            assert_eq!(r.dest(0)["conflicts"][0]["path"], "current");
            assert_eq!(r.dest(0)["conflicts"][0]["forceable"], false);
        }
        assert_eq!(w.snapshot("dest"), vec![], "a conflict wrote something");
        return;
    }
    for (extra, second_id, decision, op) in [
        ("", "tomorrow", "replace_older", "delete"),
        (MERGE, "tomorrow", "replace_older", "retain"),
        (MERGE, "other-src", "replace_takeover", "delete"),
    ] {
        let w = World::new(backend);
        let c = cfg(&w, "c", "weather", "latest", &[extra]);
        let b6 = w.bundle(
            "b6",
            "tomorrow",
            T6,
            &[("a.txt", "a6"), ("old.txt", "o")],
            &[("current", "old.txt")],
        );
        publish_ok(&w, &c, &b6, &[], "create");
        let b7 = w.bundle(
            "b7",
            second_id,
            T7,
            &[("a.txt", "a7"), ("old.txt", "o")],
            &[],
        );
        let r = publish_ok(&w, &c, &b7, &[], decision);
        assert_eq!(
            link_ops(&r),
            pairs(&[("current", op)]),
            "{decision} {extra}"
        );
        let recorded_links = state(&w, "dest")["links"].as_array().unwrap().len();
        if op == "retain" {
            assert!(w.exists("dest/current"));
            assert_eq!(recorded_links, 1);
        } else {
            assert!(!w.exists("dest/current"));
            assert_eq!(recorded_links, 0);
        }
    }
}

per_backend!(
    replace_deletes_omitted_outputs_of_the_same_source,
    merge_retains_omitted_outputs_of_the_same_source,
    the_same_bundle_after_a_merge_is_unchanged,
    merge_across_a_takeover_behaves_as_replace,
    merge_across_owners_with_the_same_source_id_behaves_as_replace,
    merge_across_a_forced_identity_replacement_behaves_as_replace,
    shared_root_replace_deletes_only_the_current_owners_old_outputs,
    shared_root_merge_retains_omitted_outputs_of_the_same_source,
    shared_root_merge_across_a_source_change_behaves_as_replace,
    shared_root_takeover_moves_paths_and_removes_emptied_owner_records,
    shared_root_forced_owner_conflict_moves_only_the_colliding_path,
    unrelated_content_survives_every_kind_of_publication,
    the_bundle_path_and_its_parent_stay_when_every_output_is_replaced,
    links_are_reconciled_like_outputs,
);
