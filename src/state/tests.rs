//! Unit tests of `.distributor.json`: stable rendering, parse/render round trips in both
//! modes, and every way state can be invalid (SPEC §4).

use super::*;
use serde_json::{Value, json};

/// A state file parsed from memory, and as read through a reader that gives one byte at a
/// time (what the local backend does with a large state file, at its hardest split): both
/// ways must reach the same state, or the same reason it is invalid.
fn parse(bytes: &[u8]) -> StateFile {
    struct OneByte<'b>(&'b [u8]);
    impl std::io::Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            if buf.is_empty() {
                return Ok(0);
            }
            buf[0] = *first;
            self.0 = rest;
            Ok(1)
        }
    }
    let whole = StateFile::parse(bytes);
    assert_eq!(
        StateFile::parse_from(|| OneByte(bytes), 3),
        whole,
        "parsed as read"
    );
    whole
}

fn sha(c: char) -> String {
    c.to_string().repeat(64)
}

fn source(id: &str) -> SourceRef {
    SourceRef {
        id: id.into(),
        created_at: "2026-12-02T06:00:00Z".into(),
        digest: format!("sha256:{}", sha('d')),
    }
}

fn record(p: &str, d: &str, src: &str) -> OwnerRecord {
    OwnerRecord {
        owner: Owner::new(p, d),
        source: source(src),
        reconciliation: ReconciliationMode::Replace,
        published_at: "2026-12-02T06:01:02.123Z".into(),
        operation_id: "7d0c3f4e-3a6b-4d52-9a57-3f0e1b1c2d3e".into(),
    }
}

fn output(path: &str, owner: &Owner) -> RecordedOutput {
    RecordedOutput {
        etag: None,
        path: path.into(),
        size: 812,
        sha256: crate::hash::ContentHash::parse(&sha('a')).unwrap(),
        owner: owner.clone().into(),
    }
}

fn link(path: &str, target: &str, owner: &Owner) -> RecordedLink {
    RecordedLink {
        path: path.into(),
        target: target.into(),
        owner: owner.clone().into(),
    }
}

fn single_owner() -> State {
    let r = record("weather", "latest", "tomorrow-a");
    let o = r.owner.clone();
    State {
        version: 1,
        mode: StateMode::SingleOwner,
        owners: vec![r],
        // Deliberately unsorted: rendering sorts.
        outputs: vec![output("maps/temp.png", &o), output("forecast.json", &o)],
        links: vec![
            link("z.png", "maps/temp.png", &o),
            link("current.png", "maps/temp.png", &o),
        ],
    }
}

fn shared_root() -> State {
    let a = record("weather", "latest", "tomorrow-a");
    let b = record("alerts", "all", "alerts-1");
    let gone = record("old", "gone", "x");
    let (oa, ob) = (a.owner.clone(), b.owner.clone());
    State {
        version: 1,
        mode: StateMode::SharedRoot,
        owners: vec![a, gone, b],
        outputs: vec![
            output("weather/forecast.json", &oa),
            output("alerts/list.json", &ob),
        ],
        links: vec![link("weather/current.json", "weather/forecast.json", &oa)],
    }
}

fn parse_valid(bytes: &[u8]) -> State {
    match parse(bytes) {
        StateFile::Valid(s) => s,
        other => panic!("not valid: {other:?}\n{}", String::from_utf8_lossy(bytes)),
    }
}

fn invalid_reason(v: &Value) -> String {
    match parse(v.to_string().as_bytes()) {
        StateFile::Invalid(r) => r,
        other => panic!("accepted: {other:?}\n{v:#}"),
    }
}

/// Positions of `keys` in `text` must be increasing.
fn assert_key_order(text: &str, keys: &[&str]) {
    let mut last = 0;
    for k in keys {
        let at = text
            .find(&format!("\"{k}\":"))
            .unwrap_or_else(|| panic!("no key {k} in\n{text}"));
        assert!(at >= last, "key {k} out of order in\n{text}");
        last = at;
    }
}

#[test]
fn single_owner_round_trip_is_stable_and_sorted() {
    let s = single_owner();
    let bytes = s.render();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.ends_with("}\n"));
    assert!(text.starts_with("{\n  \"state_version\": 1,"), "{text}");
    assert_key_order(
        &text,
        &[
            "state_version",
            "state_mode",
            "pipeline_id",
            "destination_id",
            "source",
            "reconciliation",
            "published_at",
            "operation_id",
            "outputs",
            "links",
        ],
    );
    assert_key_order(&text, &["id", "created_at", "digest"]);
    assert!(
        !text.contains("\"owner\""),
        "single owner has no per-path owner"
    );
    let parsed = parse_valid(&bytes);
    let mut sorted = s.clone();
    sorted.outputs.sort_by(|a, b| a.path.cmp(&b.path));
    sorted.links.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(parsed, sorted);
    let paths: Vec<&str> = parsed.outputs.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(paths, ["forecast.json", "maps/temp.png"]);
    assert_eq!(parsed.render(), bytes, "render is a fixed point");
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["state_mode"], "single_owner");
    assert_eq!(v["links"][0]["path"], "current.png");
}

#[test]
fn shared_root_round_trip_is_stable_and_sorted() {
    let s = shared_root();
    let bytes = s.render();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert_key_order(
        &text,
        &["state_version", "state_mode", "owners", "outputs", "links"],
    );
    assert_key_order(
        &text,
        &[
            "owner",
            "pipeline_id",
            "destination_id",
            "source",
            "reconciliation",
            "published_at",
            "operation_id",
        ],
    );
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let owners: Vec<&str> = v["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["owner"].as_str().unwrap())
        .collect();
    assert_eq!(
        owners,
        ["alerts/all", "weather/latest"],
        "sorted, and the owner with no paths left is removed"
    );
    assert_eq!(v["outputs"][0]["path"], "alerts/list.json");
    assert_eq!(v["outputs"][0]["owner"], "alerts/all");
    assert_eq!(v["links"][0]["owner"], "weather/latest");
    let parsed = parse_valid(&bytes);
    assert_eq!(parsed.mode, StateMode::SharedRoot);
    assert_eq!(parsed.owners.len(), 2);
    assert!(parsed.owner(&Owner::new("old", "gone")).is_none());
    assert_eq!(
        parsed
            .owner(&Owner::new("weather", "latest"))
            .unwrap()
            .source
            .id,
        "tomorrow-a"
    );
    assert_eq!(parsed.render(), bytes, "render is a fixed point");
}

#[test]
fn spec_examples_parse() {
    let single = json!({
        "state_version": 1,
        "state_mode": "single_owner",
        "pipeline_id": "weather",
        "destination_id": "latest",
        "source": {"id": "tomorrow-a", "created_at": "2026-12-02T06:00:00Z", "digest": format!("sha256:{}", sha('0'))},
        "reconciliation": "replace",
        "published_at": "2026-12-02T06:01:02.123Z",
        "operation_id": "7d0c3f4e-3a6b-4d52-9a57-3f0e1b1c2d3e",
        "outputs": [{"path": "forecast.json", "size": 812, "sha256": sha('1')}],
        "links": [{"path": "current.png", "target": "maps/temp.png"}]
    });
    let s = parse_valid(single.to_string().as_bytes());
    assert_eq!(s.owners[0].owner, Owner::new("weather", "latest"));
    assert_eq!(*s.outputs[0].owner, Owner::new("weather", "latest"));
    let shared = json!({
        "state_version": 1,
        "state_mode": "shared_root",
        "owners": [{"owner": "weather/latest", "pipeline_id": "weather", "destination_id": "latest",
            "source": {"id": "a", "created_at": "2026-12-02T06:00:00+01:00", "digest": format!("sha256:{}", sha('0'))},
            "reconciliation": "merge", "published_at": "2026-12-02T06:01:02Z", "operation_id": "op"}],
        "outputs": [{"path": "weather/forecast.json", "size": 812, "sha256": sha('1'), "owner": "weather/latest"}],
        "links": [{"path": "weather/current.png", "target": "weather/forecast.json", "owner": "weather/latest"}]
    });
    let s = parse_valid(shared.to_string().as_bytes());
    assert_eq!(s.owners[0].reconciliation, ReconciliationMode::Merge);
}

fn single_json() -> Value {
    serde_json::from_slice(&single_owner().render()).unwrap()
}

fn shared_json() -> Value {
    serde_json::from_slice(&shared_root().render()).unwrap()
}

#[test]
fn not_json_or_not_an_object_is_invalid() {
    for bytes in [
        &b""[..],
        b"garbage",
        b"{\"state_version\": 1,",
        b"[]",
        b"null",
        b"\xff\xfe",
    ] {
        assert!(
            matches!(parse(bytes), StateFile::Invalid(_)),
            "{bytes:?} accepted"
        );
    }
    // A truncated real state file, and one with something after it, in either mode: the
    // head is read first and stops at its two keys; the syntax error further on is still
    // reported as "not JSON".
    for full in [single_owner().render(), shared_root().render()] {
        let reason = |bytes: &[u8]| match parse(bytes) {
            StateFile::Invalid(r) => r,
            other => panic!("accepted: {other:?}"),
        };
        let r = reason(&full[..full.len() / 2]);
        assert!(r.starts_with("not JSON: EOF while parsing"), "{r}");
        let mut trailing = full.clone();
        trailing.extend_from_slice(b" {}");
        let r = reason(&trailing);
        assert!(r.starts_with("not JSON: trailing characters"), "{r}");
    }
}

/// The reason an invalid state file gets does not depend on how far the first look read:
/// a truncation inside a nested value, a wrong type before a truncation, a number out of
/// range, a duplicate head key at the end.
#[test]
fn invalid_state_reasons_come_from_the_whole_document() {
    let reason = |b: &[u8]| match parse(b) {
        StateFile::Invalid(r) => r,
        _ => panic!("accepted: {}", String::from_utf8_lossy(b)),
    };
    assert_eq!(
        reason(br#"{"state_version": 1, "state_mode": "single_owner", "source": {"id": "a","#),
        "not JSON: EOF while parsing an object at line 1 column 72"
    );
    assert_eq!(
        reason(
            br#"{"state_version": 1, "state_mode": "single_owner", "pipeline_id": 5, "outputs": ["#
        ),
        "not JSON: EOF while parsing a list at line 1 column 81"
    );
    let full = String::from_utf8(single_owner().render()).unwrap();
    let huge = full.replacen("\"size\": 812", "\"size\": 1e400", 1);
    assert!(
        reason(huge.as_bytes()).starts_with("single_owner state: number out of range"),
        "{}",
        reason(huge.as_bytes())
    );
    let mut open = full.trim_end().to_string();
    open.pop(); // the closing brace
    let r = reason(format!("{open}, \"state_version\": 3}}").as_bytes());
    assert!(
        r.starts_with("state_version 3 was written by a newer distributor"),
        "{r}"
    );
}

/// The head's two keys are read wherever they stand, not only first.
#[test]
fn head_keys_are_found_anywhere_in_the_object() {
    for (v, mode) in [
        (single_json(), StateMode::SingleOwner),
        (shared_json(), StateMode::SharedRoot),
    ] {
        let mut obj = v.as_object().unwrap().clone();
        let version = obj.remove("state_version").unwrap();
        let m = obj.remove("state_mode").unwrap();
        let mut text = serde_json::to_string(&obj).unwrap();
        text.pop(); // the closing brace
        text.push_str(&format!(
            ",\"state_mode\":{m},\"state_version\":{version}}}"
        ));
        assert_eq!(parse_valid(text.as_bytes()).mode, mode, "{text}");
    }
}

#[test]
fn future_or_missing_state_version_is_invalid() {
    let mut v = single_json();
    v["state_version"] = json!(3);
    let r = invalid_reason(&v);
    assert!(r.contains("state_version 3") && r.contains("newer"), "{r}");
    // Version 2 (s3 destinations) records an etag for every output, version 1 none.
    let mut v = single_json();
    v["state_version"] = json!(2);
    let r = invalid_reason(&v);
    assert!(r.contains("records an etag for every output"), "{r}");
    let mut v = single_json();
    v["outputs"][0]["etag"] = json!("\"abc\"");
    let r = invalid_reason(&v);
    assert!(
        r.contains("etag is recorded only in state_version 2"),
        "{r}"
    );
    let mut v = single_json();
    v["state_version"] = json!(2);
    for o in v["outputs"].as_array_mut().unwrap() {
        o["etag"] = json!("\"abc\"");
    }
    let bytes = serde_json::to_vec(&v).unwrap();
    let state = match parse(&bytes) {
        StateFile::Valid(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(state.version, 2);
    // ... and is valid only where the backend's state is version 2.
    assert!(matches!(
        StateFile::Valid(state.clone()).for_version(1),
        StateFile::Invalid(r) if r.contains("state_version 2 is not the state of this backend")
    ));
    assert!(matches!(
        StateFile::Valid(state).for_version(2),
        StateFile::Valid(_)
    ));
    for bad in [json!(0), json!("1"), json!(1.5), Value::Null] {
        let mut v = single_json();
        v["state_version"] = bad;
        assert!(invalid_reason(&v).contains("state_version"));
    }
    let mut v = single_json();
    v.as_object_mut().unwrap().remove("state_version");
    assert!(invalid_reason(&v).contains("state_version"));
}

#[test]
fn unknown_mode_is_invalid() {
    for bad in [json!("multi_owner"), json!(1), Value::Null] {
        let mut v = single_json();
        v["state_mode"] = bad;
        let r = invalid_reason(&v);
        assert!(
            r.contains("state_mode") && r.contains("single_owner, shared_root"),
            "{r}"
        );
    }
    // A single-owner document labelled shared_root is not valid shared-root state.
    let mut v = single_json();
    v["state_mode"] = json!("shared_root");
    invalid_reason(&v);
}

#[test]
fn owner_not_listed_is_invalid() {
    let mut v = shared_json();
    v["outputs"][0]["owner"] = json!("someone/else");
    let r = invalid_reason(&v);
    assert!(
        r.contains("someone/else") && r.contains("not listed"),
        "{r}"
    );
    let mut v = shared_json();
    v["links"][0]["owner"] = json!("old/gone");
    assert!(invalid_reason(&v).contains("not listed"));
    let mut v = shared_json();
    v["outputs"][0].as_object_mut().unwrap().remove("owner");
    assert!(invalid_reason(&v).contains("names no owner"));
    // The owner string must match its ids, and appear once.
    let mut v = shared_json();
    v["owners"][0]["owner"] = json!("alerts/other");
    assert!(invalid_reason(&v).contains("does not match"));
    let mut v = shared_json();
    let first = v["owners"][0].clone();
    v["owners"].as_array_mut().unwrap().push(first);
    assert!(invalid_reason(&v).contains("listed twice"));
}

#[test]
fn duplicate_and_prefix_paths_are_invalid() {
    let mut v = single_json();
    let first = v["outputs"][0].clone();
    v["outputs"].as_array_mut().unwrap().push(first);
    assert!(invalid_reason(&v).contains("more than once"));
    let mut v = single_json();
    v["links"][0]["path"] = v["outputs"][0]["path"].clone();
    assert!(invalid_reason(&v).contains("more than once"));
    let mut v = single_json();
    v["links"][0]["path"] = json!("forecast.json/x");
    assert!(invalid_reason(&v).contains("prefix"));
}

#[test]
fn bad_sha_and_bad_fields_are_invalid() {
    for bad in ["ABC", "", &"A".repeat(64), &"g".repeat(64), &"a".repeat(63)] {
        let mut v = single_json();
        v["outputs"][0]["sha256"] = json!(bad);
        let r = invalid_reason(&v);
        assert!(r.contains("sha256"), "{r}");
    }
    let cases: Vec<(&str, Value)> = vec![
        ("/source/digest", json!("sha256:xyz")),
        ("/source/digest", json!(sha('a'))),
        ("/source/created_at", json!("yesterday")),
        ("/source/id", json!("bad id")),
        ("/published_at", json!("now")),
        ("/operation_id", json!("")),
        ("/pipeline_id", json!("Weather")),
        ("/destination_id", json!("")),
        ("/outputs/0/path", json!("../escape")),
        ("/outputs/0/path", json!(".distributor.json")),
        ("/outputs/0/size", json!(-1)),
        ("/outputs/0/size", json!("812")),
        ("/links/0/target", json!("/etc/passwd")),
        ("/reconciliation", json!("mirror")),
    ];
    for (ptr, bad) in cases {
        let mut v = single_json();
        *v.pointer_mut(ptr).unwrap() = bad.clone();
        let r = invalid_reason(&v);
        assert!(!r.is_empty(), "{ptr} = {bad}");
    }
}

#[test]
fn unknown_or_missing_fields_are_invalid() {
    let mut v = single_json();
    v["extra"] = json!(1);
    assert!(invalid_reason(&v).contains("unknown field"));
    let mut v = single_json();
    v["outputs"][0]["owner"] = json!("weather/latest");
    assert!(invalid_reason(&v).contains("no per-path owner"));
    let mut v = single_json();
    v.as_object_mut().unwrap().remove("source");
    assert!(invalid_reason(&v).contains("missing field `source`"));
    let mut v = shared_json();
    v["pipeline_id"] = json!("weather");
    assert!(invalid_reason(&v).contains("unknown field"));
}
