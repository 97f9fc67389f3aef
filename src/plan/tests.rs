//! Planner unit tests: pure inputs built in code, no filesystem. The whole policy matrix
//! runs end to end in `tests/test_takeover_matrix.rs`; these pin the planner's own rules.

use super::{Entry, PlanInput, Storage, plan_destination};
use crate::config::Config;
use crate::model::{Decision, FileOp, Owner, ReconciliationMode, StateMode};
use crate::source::{Manifest, OutputEntry, Source};
use crate::state::{OwnerRecord, RecordedOutput, State, StateFile};
use std::path::{Path, PathBuf};

const T7: &str = "2026-12-02T07:00:00Z";
const T8: &str = "2026-12-02T08:00:00Z";

fn hex(c: char) -> crate::hash::ContentHash {
    // A distinct digest per letter (the letters need not be hex digits).
    crate::hash::ContentHash([c as u8; 32])
}

/// A one-destination config for `weather/latest` with extra destination keys.
fn destination(extra: &str) -> crate::config::Destination {
    let yaml = format!(
        "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: latest\n    path: /srv/dest\n{extra}"
    );
    Config::parse(&yaml, Path::new("/etc/c.yaml"))
        .expect("valid config")
        .destinations
        .remove(0)
}

/// A verified source with outputs `(path, hex char)` of size 1.
fn source(id: &str, at: &str, outputs: &[(&str, char)]) -> Source {
    let manifest = Manifest {
        manifest_version: 1,
        id: id.into(),
        created_at: at.into(),
        outputs: outputs
            .iter()
            .map(|(p, c)| OutputEntry {
                path: p.to_string(),
                size: 1,
                sha256: hex(*c),
            })
            .collect(),
        links: vec![],
    };
    Source {
        dir: PathBuf::from("/bundle"),
        created: crate::model::parse_time(at).unwrap(),
        digest: manifest.digest(),
        manifest: manifest.into(),
    }
}

/// Single-owner state of `owner` holding `src` with the given outputs.
fn state(owner: &Owner, src: &Source, outputs: &[(&str, char)]) -> State {
    State {
        version: 1,
        mode: StateMode::SingleOwner,
        owners: vec![OwnerRecord {
            owner: owner.clone(),
            source: src.source_ref(),
            reconciliation: ReconciliationMode::Merge,
            published_at: T7.into(),
            operation_id: "00000000-0000-4000-8000-000000000000".into(),
        }],
        outputs: outputs
            .iter()
            .map(|(p, c)| RecordedOutput {
                path: p.to_string(),
                size: 1,
                sha256: hex(*c),
                etag: None,
                owner: owner.clone().into(),
            })
            .collect(),
        links: vec![],
    }
}

/// Storage holding exactly the recorded outputs of `state`, proven by hash.
fn storage_of(state: &State) -> Storage<'_> {
    let mut s = Storage::default();
    for o in &state.outputs {
        s.entries.insert(
            &o.path,
            Entry::File {
                size: o.size,
                sha256: Some(std::borrow::Cow::Owned(o.sha256)),
            },
        );
    }
    s
}

fn plan(
    dest: &crate::config::Destination,
    src: &Source,
    st: &State,
    force: bool,
) -> super::DestinationPlan {
    plan_destination(&PlanInput {
        pipeline_id: "weather",
        destination: dest,
        bundle_path: Path::new("/srv/dest"),
        source: src,
        state: &StateFile::Valid(st.clone()),
        storage: &storage_of(st),
        force,
        rollback: false,
    })
}

/// Republishing the same source after a merge retained outputs is `unchanged`, not a
/// repair that rewrites nothing.
#[test]
fn retained_outputs_do_not_make_a_republication_a_repair() {
    let d = destination("    reconciliation:\n      mode: merge\n");
    let src = source("tomorrow", T7, &[("a.txt", 'a')]);
    let st = state(
        &Owner::new("weather", "latest"),
        &src,
        &[("a.txt", 'a'), ("old.txt", 'b')],
    );
    let p = plan(&d, &src, &st, false);
    assert_eq!(p.decision, Decision::Unchanged, "{}", p.message);
    let ops: Vec<FileOp> = p.files.iter().map(|f| f.op).collect();
    assert_eq!(ops, [FileOp::Unchanged, FileOp::Retain]);
}

/// `destination_newer: skip` keeps newer content in place even under --force: a conflict
/// over the owner of newer content (here: another pipeline owns the destination) is not
/// forceable, and a forced plan stays a conflict rather than a skip.
#[test]
fn force_leaves_newer_content_under_destination_newer_skip() {
    let d = destination("");
    let theirs = source("radar-src", T8, &[("a.txt", 'r')]);
    let st = state(&Owner::new("radar", "latest"), &theirs, &[("a.txt", 'r')]);
    let mine = source("tomorrow", T7, &[("a.txt", 'a')]);

    for force in [false, true] {
        let p = plan(&d, &mine, &st, force);
        assert_eq!(p.decision, Decision::Conflict, "{}", p.message);
        assert!(!p.message.contains("--force would"), "{}", p.message);
        assert!(p.message.contains("not forceable"), "{}", p.message);
        assert_eq!(p.conflicts.len(), 1);
        assert!(!p.conflicts[0].forceable, "{:?}", p.conflicts[0]);
        assert!(p.files.is_empty() && p.new_state.is_none());
    }

    let d = destination("    transfer:\n      destination_newer: conflict\n");
    let p = plan(&d, &mine, &st, true);
    assert_eq!(p.decision, Decision::ForceReplace, "{}", p.message);
}

/// Shared root: a newer colliding owner that may not be taken over counts as newer content
/// too, as a newer single owner does.
#[test]
fn a_newer_colliding_owner_counts_whether_or_not_takeover_is_permitted() {
    let d = destination(
        "    state:\n      mode: shared_root\n    transfer:\n      destination_newer: conflict\n",
    );
    let theirs = source("radar-src", T8, &[("a.txt", 'r')]);
    let mut st = state(&Owner::new("radar", "latest"), &theirs, &[("a.txt", 'r')]);
    st.mode = StateMode::SharedRoot;
    let mine = source("tomorrow", T7, &[("a.txt", 'a')]);
    let p = plan(&d, &mine, &st, false);
    let kinds: Vec<&str> = p.conflicts.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["owner_conflict", "destination_newer"]);
    assert_eq!(
        p.previous, None,
        "no own record: previous is null in a shared root"
    );
}

/// Lookups in probe order, out of it, among the directories, and of paths listed nowhere
/// all find what was probed (or nothing), whatever came before.
#[test]
fn storage_finds_every_entry_in_any_order() {
    let file = |size| Entry::File { size, sha256: None };
    let dirs: foldhash::HashMap<&str, Entry> = [(
        "d",
        Entry::Dir {
            contents: vec![],
            dirs: vec![],
        },
    )]
    .into_iter()
    .collect();
    let probed = vec![("d/b", file(2)), ("a", file(1)), ("d/c", file(3))];
    let s = Storage::new(None, dirs, probed);
    let size = |p: &str| match s.get(p) {
        Entry::File { size, .. } => Some(*size),
        Entry::Dir { .. } => Some(0),
        _ => None,
    };
    // In probe order, with a directory and unknown paths in between.
    assert_eq!(size("d/b"), Some(2));
    assert_eq!(size("d"), Some(0));
    assert_eq!(size("a"), Some(1));
    assert_eq!(size("nowhere"), None);
    assert_eq!(size("d/c"), Some(3));
    // Out of order, repeated, and in order again after a jump back.
    assert_eq!(size("a"), Some(1));
    assert_eq!(size("d/b"), Some(2));
    assert_eq!(size("d/b"), Some(2));
    assert_eq!(size("a"), Some(1));
    assert_eq!(size("d/c"), Some(3));
    assert_eq!(size("d/a"), None);
    assert!(matches!(Storage::default().get("a"), Entry::Missing));
}
