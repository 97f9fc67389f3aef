//! The storage contract, in process: one set of tests of what every backend's
//! `BundleStore` promises the executor, `recover`, `status` and `verify`
//! (docs/internal/storage.md), each written once as a generic function and run against
//! every backend: a plain local bundle path, a local destination with releases, s3 on
//! moto and azure on Azurite. Modelled on object_store's `integration.rs`: a backend that
//! breaks the contract fails here, whatever the binary's tests above it happen to cover.
//!
//! The tests drive the crate's public storage interface (`backend::for_destination`,
//! `Backend::lock`, the steps of `StoreRead`, `RecordStore` and `Steps`) with a record
//! built by hand, in the order the executor takes the steps (`read_state`, `describe`,
//! `record_dir`, `begin`, `stage`, `make_staged_durable`, `move_aside`, `place`,
//! `commit_state`, `clean_up`). The object-store cases start like every s3 test: without
//! the server they are a loud skip, and a failure when `DISTRIBUTOR_REQUIRE_S3`
//! (`DISTRIBUTOR_REQUIRE_AZURE`) or `CI` is set.
//!
//! Its own test target, not a module of `runner`: the s3 and azure clients take their
//! credentials from the environment, which this process sets once (`Fixture::new`),
//! before any test touches storage, and which no test in `runner` may see changed.

#![allow(dead_code, unused_imports, unused_macros)]

mod common;

use common::Env;
use common::s3::{S3Server, ServerKind, s3_env};
use distributor::backend::releases::ReleaseStore;
use distributor::backend::types::{Entry, StagingEntry, StateBytes};
use distributor::backend::{
    self, Backend, BundleStore, LockRequest, Operation, OperationState, Verdict,
};
use distributor::config::{Config, Destination};
use distributor::hash::{ContentHash, sha256_hex};
use distributor::record::StagedOperation;
use distributor::state::StateFile;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

/// Where a fixture's destination lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Local,
    Releases,
    S3,
    Azure,
}

/// For each `fn name(kind: Kind)`, the tests `name::local`, `name::releases`, `name::s3`
/// and `name::azure`; the object-store ones start with `require_moto!` or
/// `require_azurite!`.
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn local() {
                super::$name(super::Kind::Local);
            }
            #[test]
            fn releases() {
                super::$name(super::Kind::Releases);
            }
            #[test]
            fn s3() {
                let _ = $crate::common::s3::require_moto!();
                super::$name(super::Kind::S3);
            }
            #[test]
            fn azure() {
                let _ = $crate::common::s3::require_azurite!();
                super::$name(super::Kind::Azure);
            }
        }
    )*};
}

per_backend!(
    a_fresh_bundle_path_holds_nothing,
    an_operation_commits_and_cleans_up,
    an_operation_undone_before_its_commit_leaves_nothing,
    a_staging_entry_is_listed_until_removed,
    the_verdict_is_back_forward_or_diverged,
    a_held_lock_is_seen_from_a_store_opened_for_reading,
    the_capabilities_say_what_the_store_does,
);

/// Sets, once and before any test reaches storage, the credentials the object-store
/// clients read from the environment: moto's and Azurite's ([`s3_env`]).
fn credentials() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A server that is missing where it is required fails its own tests (they start
        // with `require_moto!`/`require_azurite!`), not every test of this target.
        let start =
            |f: fn() -> Option<&'static S3Server>| std::panic::catch_unwind(f).ok().flatten();
        let servers = [start(common::s3::moto), start(common::s3::azurite)];
        for server in servers.into_iter().flatten() {
            for (k, v) in s3_env(server) {
                // SAFETY: every test calls this first, and `Once` holds the others until
                // it returns, so no thread of this process reads the environment while
                // it changes.
                unsafe { std::env::set_var(k, v) };
            }
        }
    });
}

/// One destination, fresh, of one kind.
struct Fixture {
    kind: Kind,
    env: Env,
    dest: Destination,
    /// The object store and bucket (container) of an s3 or azure destination.
    store: Option<(&'static S3Server, String)>,
}

impl Fixture {
    fn new(kind: Kind) -> Fixture {
        credentials();
        let env = Env::new();
        let (keys, store) = match kind {
            Kind::Local => (format!("    path: {}\n", env.path("dest").display()), None),
            Kind::Releases => (
                format!(
                    "    path: {}\n    releases:\n      keep: 3\n",
                    env.path("www/latest").display()
                ),
                None,
            ),
            Kind::S3 | Kind::Azure => {
                let server = match kind {
                    Kind::S3 => common::s3::moto(),
                    _ => common::s3::azurite(),
                }
                .expect("an object-store test starts with require_moto!/require_azurite!");
                let bucket = server.fresh_bucket();
                (server.dest_keys(&bucket, "dest"), Some((server, bucket)))
            }
        };
        let yaml =
            format!("version: 1\npipeline:\n  id: contract\ndestinations:\n  - id: d\n{keys}");
        let file = env.config("distributor.yaml", &yaml);
        let config = Config::parse(&yaml, &file).unwrap_or_else(|e| panic!("{yaml}: {e}"));
        let dest = config.destinations[0].clone();
        Fixture {
            kind,
            env,
            dest,
            store,
        }
    }

    fn backend(&self) -> Box<dyn Backend> {
        backend::for_destination(&self.dest).expect("the destination's backend")
    }

    /// The bundle path, locked (made when missing).
    fn lock(&self, backend: &dyn Backend) -> Box<dyn BundleStore> {
        let how = LockRequest {
            history: None,
            timeout: Duration::from_secs(30),
            create: true,
            actor: "cli:contract",
        };
        backend
            .lock(&self.dest.path, &self.dest.path, how)
            .expect("lock")
            .expect("a locked bundle path, made when missing")
    }

    /// A file of the source bundle: where `stage` copies from.
    fn source(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.env.path(&format!("src/{name}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Puts a state no operation wrote where the store keeps its state: what another
    /// writer leaves behind.
    fn tamper_state(&self) {
        let foreign = b"{\"written\": \"by someone else\"}\n";
        match (self.kind, &self.store) {
            (Kind::Local, _) => {
                self.env.write_state_file("dest/.distributor.json", foreign);
            }
            (Kind::Releases, _) => {
                // `path` made to name another release than the operation's or the one
                // before it.
                let other = op_id(99);
                self.env.write_state_file(
                    &format!("www/.latest.releases/{other}/.distributor.json"),
                    foreign,
                );
                let path = self.env.path("www/latest");
                let _ = std::fs::remove_file(&path);
                std::os::unix::fs::symlink(format!(".latest.releases/{other}"), &path).unwrap();
            }
            (_, Some((server, bucket))) => {
                server.put(bucket, "dest/.distributor.json", foreign);
            }
            _ => unreachable!(),
        }
    }
}

/// The record and post-state of an operation creating `files` (name, bytes) in `store`,
/// whose state is `pre` now: the staging record as the executor builds it (`describe`,
/// and in a `locked` store `record_dir`), before `begin`.
fn operation(
    store: &dyn BundleStore,
    op: &str,
    pre: Option<&[u8]>,
    files: &[(&str, &[u8])],
    locked: bool,
) -> (StagedOperation, Vec<u8>) {
    let caps = store.capabilities();
    let owner = distributor::model::Owner::new("contract", "d");
    let source = distributor::model::SourceRef {
        id: "bundle".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        digest: format!("sha256:{}", sha256_hex(op.as_bytes())),
    };
    let state = distributor::state::State {
        version: caps.state_version,
        mode: distributor::model::StateMode::SingleOwner,
        owners: vec![distributor::state::OwnerRecord {
            owner: owner.clone(),
            source: source.clone(),
            reconciliation: distributor::model::ReconciliationMode::Replace,
            published_at: "2026-01-01T00:00:00Z".into(),
            operation_id: op.into(),
        }],
        outputs: (files.iter())
            .map(|(name, bytes)| distributor::state::RecordedOutput {
                path: name.to_string(),
                size: bytes.len() as u64,
                sha256: ContentHash::of(bytes),
                etag: None,
                owner: std::sync::Arc::new(owner.clone()),
            })
            .collect(),
        links: vec![],
    };
    let post = state.render();
    let actions: Vec<serde_json::Value> = (files.iter())
        .map(|(name, bytes)| {
            serde_json::json!({
                "kind": "file_create",
                "path": name,
                "size": bytes.len(),
                "sha256": ContentHash::of(bytes),
            })
        })
        .collect();
    let record = serde_json::json!({
        "operation_id": op,
        "destination_id": "d",
        "bundle_path": store.path(),
        "pre_state_sha256": pre.map(sha256_hex),
        "post_state_sha256": sha256_hex(&post),
        "origin": {
            "started_at": "2026-01-01T00:00:00Z",
            "command": "publish",
            "actor": "cli:contract",
            "pipeline_id": "contract",
            "state_mode": "single_owner",
            "decision": "create",
            "takeover_mode": "same_pipeline",
            "previous_owner": null,
            "previous_source": null,
            "source": source,
            "takeovers": [],
        },
        "actions": actions,
        "new_dirs": [],
        "staging_layout": "flat",
    });
    let mut staged: StagedOperation = serde_json::from_value(record).expect("a staging record");
    store.describe(&mut staged);
    // What the operation does (a publication) its own steps say.
    OperationState::new(store).describe(&mut staged);
    if locked {
        staged.record_dir = store.record_dir(true).expect("record_dir");
    }
    (staged, post)
}

/// Runs an operation up to (not through) its commit point, as the executor does, in the
/// operation state `state` (which its later steps go on in): the state read, the record
/// written, every file staged, made durable and placed.
fn run_to_commit(
    fx: &Fixture,
    store: &dyn BundleStore,
    state: &OperationState<'_>,
    op: &str,
    files: &[(&str, &[u8])],
) -> StagedOperation {
    let pre = store.read_state().expect("read_state");
    let (staged, post) = operation(store, op, pre.bytes(), files, true);
    let steps = Operation::with(store, &staged, state);
    steps.begin(pre.bytes(), &post).expect("begin");
    let mut buf = vec![0u8; 64 * 1024];
    let mut as_staged = Vec::new();
    for (i, (name, bytes)) in files.iter().enumerate() {
        let source = distributor::source::SourceFile::at_path(fx.source(name, bytes));
        let staged_file = steps
            .stage(i, &source, &mut buf, &mut |_| {})
            .expect("stage");
        assert_eq!(
            (staged_file.size, staged_file.sha256),
            (bytes.len() as u64, ContentHash::of(bytes))
        );
        as_staged.push(staged_file.as_staged);
    }
    steps.make_staged_durable().expect("make_staged_durable");
    for (i, _) in staged.moves() {
        steps.move_aside(i).expect("move_aside");
    }
    for (i, as_staged) in as_staged.into_iter().enumerate() {
        let placed = steps.place(i, as_staged).expect("place");
        if store.capabilities().proves_by_etag {
            assert!(placed.is_none(), "an ETag proves content: no fingerprint");
        }
    }
    drop(steps);
    staged
}

/// The id of the `n`th operation of a test, shaped as distributor names operations (a
/// UUID: staging entries and release directories named otherwise are not its own).
fn op_id(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// The operations staged in `store`.
fn staged_ops(store: &dyn BundleStore) -> Vec<String> {
    let entries = store.staging_entries().expect("staging_entries");
    (entries.into_iter())
        .map(|e| match e {
            StagingEntry::Operation(op) => op,
            other => panic!("only operations are staged here, found {other:?}"),
        })
        .collect()
}

/// What the probe sees at `path`.
fn probed(store: &dyn BundleStore, path: &str) -> Entry<'static> {
    let storage = store
        .probe(
            &[(path, None)],
            &Default::default(),
            distributor::progress::Ticker::NONE,
        )
        .expect("probe");
    match storage.get(path) {
        Entry::File { size, .. } => Entry::File {
            size: *size,
            sha256: None,
        },
        Entry::Missing => Entry::Missing,
        other => panic!("{path}: {other:?}"),
    }
}

/// The files that are not distributor's records.
fn published(store: &dyn BundleStore) -> Vec<String> {
    (store.list_files().expect("list_files").into_iter())
        .filter(|f| !f.starts_with(".distributor"))
        .collect()
}

fn a_fresh_bundle_path_holds_nothing(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let store = fx.lock(&*backend);
    assert_eq!(store.read_state().unwrap(), StateBytes::Absent);
    assert_eq!(store.state_sha256().unwrap(), None);
    let (state, sha) = store.read_state_parsed(0).unwrap();
    assert!(matches!(state, StateFile::Absent), "{state:?}");
    assert_eq!(sha, None);
    assert_eq!(staged_ops(&*store), Vec::<String>::new());
    assert_eq!(published(&*store), Vec::<String>::new());
    assert_eq!(probed(&*store, "a.txt"), Entry::Missing);
}

fn an_operation_commits_and_cleans_up(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let store = fx.lock(&*backend);
    let files: &[(&str, &[u8])] = &[("a.txt", b"alpha\n"), ("sub/b.txt", b"bravo!\n")];
    let held = OperationState::new(&*store);
    let staged = run_to_commit(&fx, &*store, &held, &op_id(1), files);
    let op = Operation::with(&*store, &staged, &held);
    // The record reads back as written, and its entry is listed.
    assert_eq!(
        store.read_record(&op_id(1)).unwrap().as_ref(),
        Some(&staged)
    );
    assert_eq!(staged_ops(&*store), [op_id(1)]);
    let committed = op.commit().expect("commit_state");
    assert_eq!(op.verdict().unwrap(), Verdict::Forward);
    // The state written is the post-state, in the store's version, every output recorded,
    // as a store opened after the commit point reads it (a releases store goes on
    // reading the release that was active when it was opened).
    let reading = || {
        (backend.open(&fx.dest.path, &fx.dest.path))
            .unwrap()
            .expect("the bundle path exists")
    };
    let now = reading().read_state().unwrap();
    let bytes = now.bytes().expect("a state after the commit point");
    match committed.state_sha256() {
        Some(sha) => assert_eq!(sha, sha256_hex(bytes)),
        None => assert_eq!(sha256_hex(bytes), staged.post_state_sha256),
    }
    let StateFile::Valid(state) = StateFile::parse(bytes) else {
        panic!("not a valid state: {}", String::from_utf8_lossy(bytes))
    };
    assert_eq!(state.version, store.capabilities().state_version);
    let recorded: Vec<_> = state.outputs.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(recorded, ["a.txt", "sub/b.txt"]);
    assert!(
        (state.outputs.iter()).all(|o| o.etag.is_some() == store.capabilities().proves_by_etag),
        "ETags recorded exactly where they prove content: {:?}",
        state.outputs
    );
    op.clean_up().expect("clean_up");
    assert_eq!(staged_ops(&*store), Vec::<String>::new());
    assert_eq!(published(&*reading()), ["a.txt", "sub/b.txt"]);
    for (name, bytes) in files {
        assert_eq!(
            probed(&*reading(), name),
            Entry::File {
                size: bytes.len() as u64,
                sha256: None
            },
            "{name}"
        );
    }
    // And so does the next operation's store.
    drop(op);
    drop(held);
    drop(store);
    assert_eq!(fx.lock(&*backend).read_state().unwrap(), now);
}

fn an_operation_undone_before_its_commit_leaves_nothing(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let store = fx.lock(&*backend);
    let held = OperationState::new(&*store);
    let staged = run_to_commit(&fx, &*store, &held, &op_id(1), &[("a.txt", b"alpha\n")]);
    let op = Operation::with(&*store, &staged, &held);
    assert_eq!(op.verdict().unwrap(), Verdict::Back);
    op.undo().expect("undo");
    assert_eq!(store.read_state().unwrap(), StateBytes::Absent);
    assert_eq!(staged_ops(&*store), Vec::<String>::new());
    assert_eq!(published(&*store), Vec::<String>::new());
    assert_eq!(probed(&*store, "a.txt"), Entry::Missing);
    // Undo is idempotent: `recover` may run it again after an interrupted one, in an
    // operation of its own.
    Operation::of(&*store, &staged).undo().expect("undo again");
    assert_eq!(published(&*store), Vec::<String>::new());
}

fn a_staging_entry_is_listed_until_removed(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let store = fx.lock(&*backend);
    let pre = store.read_state().unwrap();
    let (staged, post) = operation(&*store, &op_id(1), pre.bytes(), &[("a.txt", b"a\n")], true);
    Operation::of(&*store, &staged)
        .begin(pre.bytes(), &post)
        .expect("begin");
    let op = &staged.operation_id;
    assert_eq!(staged_ops(&*store), std::slice::from_ref(op));
    assert_eq!(store.read_record(op).unwrap().as_ref(), Some(&staged));
    assert!(
        store.staging_holds_files(op).unwrap(),
        "the record is files"
    );
    // Beginning the same operation twice is refused: a record is written once. What the
    // refused attempt leaves is at most an unfinished record, which changed nothing.
    assert!(
        Operation::of(&*store, &staged)
            .begin(pre.bytes(), &post)
            .is_err()
    );
    for e in store.staging_entries().unwrap() {
        match e {
            StagingEntry::Operation(o) => assert_eq!(&o, op),
            StagingEntry::Unfinished(o) if &o == op => {
                store.remove_unfinished(op).expect("remove_unfinished")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.read_record(op).unwrap().as_ref(), Some(&staged));
    store.remove_staging(op).expect("remove_staging");
    assert_eq!(staged_ops(&*store), Vec::<String>::new());
    assert_eq!(store.read_state().unwrap(), StateBytes::Absent);
}

fn the_verdict_is_back_forward_or_diverged(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let store = fx.lock(&*backend);
    // Forward past the commit point.
    let held = OperationState::new(&*store);
    let first = run_to_commit(&fx, &*store, &held, &op_id(1), &[("a.txt", b"one\n")]);
    let op = Operation::with(&*store, &first, &held);
    assert_eq!(op.verdict().unwrap(), Verdict::Back);
    let _ = op.commit().expect("commit_state");
    assert_eq!(op.verdict().unwrap(), Verdict::Forward);
    op.clean_up().expect("clean_up");
    drop(op);
    drop(held);
    drop(store);
    // Back before it, over an existing state, in the next operation's store.
    let store = fx.lock(&*backend);
    let held = OperationState::new(&*store);
    let second = run_to_commit(&fx, &*store, &held, &op_id(2), &[("b.txt", b"two\n")]);
    assert!(second.pre_state_sha256.is_some());
    assert_eq!(store.verdict(&second).unwrap(), Verdict::Back);
    // Diverged when someone else changed the state meanwhile.
    fx.tamper_state();
    assert_eq!(store.verdict(&second).unwrap(), Verdict::Diverged);
}

fn a_held_lock_is_seen_from_a_store_opened_for_reading(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let locked = fx.lock(&*backend);
    let reading = backend
        .open(&fx.dest.path, &fx.dest.path)
        .unwrap()
        .expect("the bundle path exists once locked");
    let holder = reading.lock_holder().unwrap();
    assert!(
        holder
            .as_deref()
            .is_some_and(|h| h.contains("cli:contract")),
        "the holder names the actor: {holder:?}"
    );
    assert!(reading.locked_before().unwrap());
    // A store opened for reading refuses the writing steps.
    let pre = reading.read_state().unwrap();
    let (staged, post) = operation(
        &*reading,
        &op_id(1),
        pre.bytes(),
        &[("a.txt", b"a\n")],
        false,
    );
    assert!(
        Operation::of(&*reading, &staged)
            .begin(pre.bytes(), &post)
            .is_err()
    );
    drop(locked);
    assert_eq!(reading.lock_holder().unwrap(), None);
    assert_eq!(staged_ops(&*reading), Vec::<String>::new());
}

fn the_capabilities_say_what_the_store_does(kind: Kind) {
    let fx = Fixture::new(kind);
    let backend = fx.backend();
    let store = fx.lock(&*backend);
    let caps = store.capabilities();
    assert_eq!(caps, backend.capabilities());
    assert_eq!(
        caps,
        backend::capabilities(&fx.dest),
        "the config says the same"
    );
    assert_eq!(store.log().is_some(), caps.log_behind_interface);
    assert_eq!(ReleaseStore::of(&*store).is_some(), caps.releases);
    let expected = match kind {
        Kind::Local => (1, false, true, true),
        Kind::Releases => (1, false, false, true),
        Kind::S3 | Kind::Azure => (2, true, false, false),
    };
    assert_eq!(
        (
            caps.state_version,
            caps.proves_by_etag,
            caps.keeps_state_file_id,
            caps.links
        ),
        expected
    );
    // A store that keeps the state file's identity answers it once there is one.
    let held = OperationState::new(&*store);
    let staged = run_to_commit(&fx, &*store, &held, &op_id(1), &[("a.txt", b"a\n")]);
    let op = Operation::with(&*store, &staged, &held);
    let committed = op.commit().expect("commit_state");
    assert_eq!(
        committed.state_file().is_some(),
        caps.keeps_state_file_id,
        "{committed:?}"
    );
    assert_eq!(
        store.state_file_id().unwrap().is_some(),
        caps.keeps_state_file_id
    );
    op.clean_up().expect("clean_up");
    if let Some(log) = store.log() {
        let read = log.read_log().expect("read_log");
        assert_eq!(read.entries.len(), 1, "the operation's log entry");
    }
}
