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
    plan_lifting(dest, src, st, force, None)
}

fn plan_lifting(
    dest: &crate::config::Destination,
    src: &Source,
    st: &State,
    force: bool,
    allow_delete: Option<u64>,
) -> super::DestinationPlan {
    plan_destination(&PlanInput {
        pipeline_id: "weather",
        destination: dest,
        bundle_path: Path::new("/srv/dest"),
        source: src,
        state: &StateFile::Valid(st.clone()),
        storage: &storage_of(st),
        force,
        allow_delete,
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

/// What [`super::Republication`] accepts: this owner, this very source, exactly the
/// manifest's paths and content. Its plan is the general planner's `unchanged` plan.
#[test]
fn a_republication_is_the_recorded_source_with_exactly_its_paths() {
    use super::Republication;
    let d = destination("");
    let me = Owner::new("weather", "latest");
    let src = source("tomorrow", T7, &[("a.txt", 'a'), ("b.txt", 'b')]);
    let st = state(&me, &src, &[("a.txt", 'a'), ("b.txt", 'b')]);
    let file = StateFile::Valid(st.clone());
    let rep = Republication::of("weather", &d, &src, &file).expect("a republication");
    let storage = storage_of(&st);
    assert!(Republication::state_file_holds(&storage));
    assert!(Republication::outputs_hold(&storage, &src.manifest.outputs));
    let fast = rep.plan(Path::new("/srv/dest"));
    let general = plan(&d, &src, &st, false);
    assert_eq!(general.decision, Decision::Unchanged, "{}", general.message);
    assert!(fast.files.is_empty(), "no row per file");
    let mut listed = fast.clone();
    listed.files = fast.file_actions().map(|f| f.into_owned()).collect();
    listed.outputs_unchanged = None;
    assert_eq!(listed, general);

    // Not a republication: the general planner decides.
    let not = |d: &crate::config::Destination, src: &Source, st: StateFile, why: &str| {
        assert!(Republication::of("weather", d, src, &st).is_none(), "{why}");
    };
    let other = source("tomorrow", T8, &[("a.txt", 'a'), ("b.txt", 'b')]);
    not(&d, &other, file.clone(), "another source (created later)");
    let changed = source("tomorrow", T7, &[("a.txt", 'a'), ("b.txt", 'c')]);
    not(&d, &changed, file.clone(), "another digest");
    let fewer = source("tomorrow", T7, &[("a.txt", 'a')]);
    let recorded_more = state(&me, &fewer, &[("a.txt", 'a'), ("b.txt", 'b')]);
    not(
        &d,
        &fewer,
        StateFile::Valid(recorded_more),
        "a record the manifest omits",
    );
    let recorded_less = state(&me, &src, &[("a.txt", 'a')]);
    not(
        &d,
        &src,
        StateFile::Valid(recorded_less),
        "an output not recorded",
    );
    let other_content = state(&me, &src, &[("a.txt", 'a'), ("b.txt", 'x')]);
    not(
        &d,
        &src,
        StateFile::Valid(other_content),
        "recorded with other content",
    );
    let theirs = state(
        &Owner::new("radar", "latest"),
        &src,
        &[("a.txt", 'a'), ("b.txt", 'b')],
    );
    not(&d, &src, StateFile::Valid(theirs), "another owner's record");
    let mut unsorted = source("tomorrow", T7, &[("b.txt", 'b'), ("a.txt", 'a')]);
    let unsorted_state = state(&me, &unsorted, &[("a.txt", 'a'), ("b.txt", 'b')]);
    not(
        &d,
        &unsorted,
        StateFile::Valid(unsorted_state.clone()),
        "an unsorted manifest",
    );
    std::sync::Arc::make_mut(&mut unsorted.manifest)
        .outputs
        .sort_by(|a, b| a.path.cmp(&b.path));
    assert!(
        Republication::of("weather", &d, &unsorted, &StateFile::Valid(unsorted_state)).is_some()
    );
    let shared = destination("    state:\n      mode: shared_root\n");
    not(&shared, &src, file.clone(), "state in the other mode");
    let releases = destination("    releases: {keep: 2}\n");
    not(&releases, &src, file.clone(), "a releases destination");
    not(&d, &src, StateFile::Absent, "no state");
    not(
        &d,
        &src,
        StateFile::Invalid("broken".into()),
        "invalid state",
    );
}

/// In a shared root, another owner's records at other paths do not matter; one at a path
/// of the manifest does (it is a takeover or a conflict).
#[test]
fn a_shared_root_republication_ignores_other_owners_paths_only() {
    use super::Republication;
    let d = destination("    state:\n      mode: shared_root\n");
    let me = Owner::new("weather", "latest");
    let them = Owner::new("radar", "latest");
    let src = source("tomorrow", T7, &[("b.txt", 'b'), ("d.txt", 'd')]);
    let shared_state = |theirs: &[(&str, char)]| {
        let mut st = state(&me, &src, &[("b.txt", 'b'), ("d.txt", 'd')]);
        st.mode = StateMode::SharedRoot;
        let other = state(&them, &src, theirs);
        st.owners.push(other.owners[0].clone());
        st.outputs.extend(other.outputs);
        st.outputs.sort_by(|a, b| a.path.cmp(&b.path));
        StateFile::Valid(st)
    };
    let around = shared_state(&[("a.txt", 'x'), ("c.txt", 'y'), ("e.txt", 'z')]);
    assert!(Republication::of("weather", &d, &src, &around).is_some());
    let colliding = shared_state(&[("a.txt", 'x')]);
    let StateFile::Valid(mut st) = colliding else {
        unreachable!()
    };
    st.outputs.retain(|o| o.path != "d.txt");
    st.outputs.push(RecordedOutput {
        path: "d.txt".into(),
        size: 1,
        sha256: hex('d'),
        etag: None,
        owner: them.clone().into(),
    });
    st.outputs.sort_by(|a, b| a.path.cmp(&b.path));
    assert!(Republication::of("weather", &d, &src, &StateFile::Valid(st)).is_none());
}

/// What storage must hold: every output a file of its size whose content was proven, every
/// directory on the way a directory, and no directory, symlink or special file at the state
/// file's path.
#[test]
fn a_republication_holds_only_proven_files_reached_through_directories() {
    use super::Republication;
    use std::borrow::Cow;
    let src = source("tomorrow", T7, &[("d/a.txt", 'a')]);
    let outputs = &src.manifest.outputs;
    let file = |size: u64, sha: Option<char>| Entry::File {
        size,
        sha256: sha.map(|c| Cow::Owned(hex(c))),
    };
    let dir = || Entry::Dir {
        contents: vec![],
        dirs: vec![],
    };
    let holds = |at_d: Entry<'static>, at_a: Entry<'static>| {
        let mut s = Storage::default();
        s.entries.insert("d", at_d);
        s.entries.insert("d/a.txt", at_a);
        Republication::outputs_hold(&s, outputs)
    };
    assert!(holds(dir(), file(1, Some('a'))));
    assert!(!holds(dir(), file(1, None)), "content not proven");
    assert!(!holds(dir(), file(2, Some('a'))), "another size");
    assert!(!holds(dir(), file(1, Some('b'))), "another hash");
    assert!(!holds(dir(), Entry::Missing), "missing");
    let link = Entry::Symlink { target: "x".into() };
    assert!(!holds(dir(), link.clone()), "a symlink where the file was");
    assert!(!holds(link, file(1, Some('a'))), "a symlink on the way");
    let mut s = Storage::default();
    assert!(
        Republication::state_file_holds(&s),
        "a file (or nothing) there"
    );
    s.entries.insert(crate::state::STATE_FILE, dir());
    assert!(!Republication::state_file_holds(&s));
}

/// The deletion guard (SPEC §19): deleting more recorded paths than `guard.max_delete`
/// is `mass_delete`, inclusive at the limit, a percent of the owner's recorded paths
/// rounded up; `--force` does not lift it, `--allow-delete N` does up to N.
#[test]
fn max_delete_refuses_more_deletions_than_it_allows() {
    let me = Owner::new("weather", "latest");
    let old = source("tomorrow", T7, &[]);
    let recorded: Vec<(String, char)> = (0..10).map(|i| (format!("f{i}.txt"), 'a')).collect();
    let recorded: Vec<(&str, char)> = recorded.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    let st = state(&me, &old, &recorded);
    // The new build keeps 7 of the 10 files: 3 deletions.
    let new = source("tomorrow", T8, &recorded[..7]);

    let at = |g: &str| destination(&format!("    guard:\n      max_delete: {g}\n"));
    let p = plan(&at("3"), &new, &st, false);
    assert_eq!(
        p.decision,
        Decision::ReplaceOlder,
        "the limit is inclusive: {}",
        p.message
    );
    let p = plan(&at("\"30%\""), &new, &st, false);
    assert_eq!(
        p.decision,
        Decision::ReplaceOlder,
        "30% of 10 is 3: {}",
        p.message
    );
    for g in ["2", "\"20%\"", "\"0%\""] {
        for force in [false, true] {
            let p = plan(&at(g), &new, &st, force);
            assert_eq!(p.decision, Decision::Conflict, "{g}: {}", p.message);
            let c = &p.conflicts[0];
            assert_eq!(c.kind, crate::model::ConflictKind::MassDelete);
            assert!(!c.forceable, "only --allow-delete lifts it");
            assert!(c.message.contains("deletes 3") && c.message.contains("--allow-delete 3"));
            assert!(p.files.is_empty() && p.new_state.is_none());
        }
    }
    let p = plan_lifting(&at("2"), &new, &st, false, Some(3));
    assert_eq!(p.decision, Decision::ReplaceOlder, "{}", p.message);
    let p = plan_lifting(&at("2"), &new, &st, false, Some(2));
    assert_eq!(p.decision, Decision::Conflict, "{}", p.message);
    assert!(p.conflicts[0].message.contains("--allow-delete 2 is fewer"));
    // No guard: no limit.
    assert_eq!(
        plan(&destination(""), &new, &st, false).decision,
        Decision::ReplaceOlder
    );
}

/// An empty bundle that would delete recorded content is `empty_source` (forceable)
/// unless `guard.allow_empty`; with nothing recorded it publishes an empty state.
#[test]
fn an_empty_bundle_deleting_recorded_content_is_empty_source() {
    let me = Owner::new("weather", "latest");
    let old = source("tomorrow", T7, &[("a.txt", 'a')]);
    let st = state(&me, &old, &[("a.txt", 'a'), ("b.txt", 'b')]);
    let empty = source("tomorrow", T8, &[]);
    let p = plan(&destination(""), &empty, &st, false);
    assert_eq!(p.decision, Decision::Conflict, "{}", p.message);
    assert_eq!(p.conflicts.len(), 1);
    assert_eq!(p.conflicts[0].kind, crate::model::ConflictKind::EmptySource);
    assert!(p.conflicts[0].forceable);
    assert!(
        p.conflicts[0].message.contains("deletes 2"),
        "{}",
        p.conflicts[0].message
    );
    let p = plan(&destination(""), &empty, &st, true);
    assert_eq!(p.decision, Decision::ForceReplace, "{}", p.message);
    let p = plan(
        &destination("    guard:\n      allow_empty: true\n"),
        &empty,
        &st,
        false,
    );
    assert_eq!(p.decision, Decision::ReplaceOlder, "{}", p.message);
    // Both guards at once: --force lifts empty_source, not mass_delete.
    let both = destination("    guard:\n      max_delete: 1\n");
    let p = plan(&both, &empty, &st, true);
    assert_eq!(p.decision, Decision::Conflict, "{}", p.message);
    let kinds: Vec<_> = p.conflicts.iter().map(|c| c.kind).collect();
    assert!(
        kinds.contains(&crate::model::ConflictKind::MassDelete),
        "{kinds:?}"
    );
    // Nothing recorded: an empty state.
    let fresh = State {
        owners: vec![],
        outputs: vec![],
        ..st.clone()
    };
    let p = plan(&destination(""), &empty, &fresh, false);
    assert_eq!(p.decision, Decision::Create, "{}", p.message);
    assert!(p.new_state.is_some_and(|s| s.outputs.is_empty()));
}
