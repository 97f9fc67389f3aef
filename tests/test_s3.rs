//! s3 destinations end to end (SPEC §14), against real S3 servers on 127.0.0.1 started by
//! `tests/common/s3.rs`: the lease tests and those where another writer races the
//! publication run on SeaweedFS (atomic conditional writes), the rest on moto (faster;
//! it logs requests). Publishing, the planner's rules, state
//! version 2, headers, recovery after a crash at every step from this host or another one
//! with a fresh journal, and a publisher stopped past its lease that must not commit.
//! The lease (SPEC §14 amendments): a nonce per acquisition, takeover at once only of a
//! lease whose process is gone from this machine, and a holder past its deadline that
//! leaves its lease in place.

use crate::common::hostile::PausedRun;
use crate::common::s3::{Moto, ServerKind, require_moto, s3_env};
use crate::common::{Env, F, Run};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PREFIX: &str = "weather/latest";

/// Objects under the prefix: key -> (ETag, content).
type Objects = BTreeMap<String, (String, Vec<u8>)>;

/// One bucket and the environment to reach it.
struct World {
    env: Env,
    moto: &'static Moto,
    bucket: String,
    vars: Vec<(&'static str, String)>,
}

impl World {
    fn new(moto: &'static Moto) -> World {
        World {
            env: Env::new(),
            moto,
            bucket: moto.fresh_bucket(),
            vars: s3_env(moto),
        }
    }

    /// A config with one destination `site` at `s3://<bucket>/<prefix>` (`az://…` on
    /// Azurite), extra keys for the destination (indented 4) and for its `s3:` (`azure:`)
    /// block (indented 6).
    fn config(&self, rel: &str, prefix: &str, dest_extra: &str, s3_extra: &str) -> PathBuf {
        self.env.config(
            rel,
            &format!(
                "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n{dest_extra}{}{s3_extra}",
                self.moto.dest_keys(&self.bucket, prefix)
            ),
        )
    }

    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut env: Vec<(&str, &str)> = self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env.extend_from_slice(extra);
        self.env.run_env(args, &env)
    }

    fn publish(&self, config: &Path, bundle: &Path, extra: &[&str]) -> Run {
        let mut args = vec![
            "publish",
            "--json",
            "--config",
            path(config),
            "--source",
            path(bundle),
        ];
        args.extend_from_slice(extra);
        self.run(&args, &[])
    }

    /// Every object under the prefix: key -> (etag, content); the lease of a run that
    /// was killed is left out (it stays until it expires or its host takes it over), and
    /// so is the destination log, which only grows ([`World::log`]).
    fn objects(&self) -> BTreeMap<String, (String, Vec<u8>)> {
        let mut o = self.moto.snapshot(&self.bucket, &format!("{PREFIX}/"));
        o.remove(&format!("{PREFIX}/.distributor.lock"));
        o.retain(|k, _| !k.starts_with(&key(".distributor/log/")));
        o
    }

    /// The destination log's entries (SPEC §18), oldest first.
    fn log(&self) -> Vec<Value> {
        (self
            .moto
            .list(&self.bucket, &key(".distributor/log/"))
            .iter())
        .filter(|o| o.key.ends_with(".json"))
        .map(|o| serde_json::from_slice(&self.moto.get(&self.bucket, &o.key).unwrap()).unwrap())
        .collect()
    }

    /// The objects a reader sees: everything but distributor's own state object and the
    /// check object of a run killed during its conditional-write check (never content; a
    /// later publication removes it once it is a minute old).
    fn content(&self) -> BTreeMap<String, (String, Vec<u8>)> {
        let mut o = self.objects();
        o.remove(&format!("{PREFIX}/.distributor.json"));
        let probe = format!("{PREFIX}/.distributor-probe-");
        o.retain(|k, _| !k.starts_with(&probe));
        o
    }

    /// Objects as a rollback must leave them: byte for byte, and on S3 with the same ETags
    /// too (a copy of the same bytes has the same ETag there); on Azure every write makes a
    /// new ETag, so an undo's restored object has a new one (its recorded sha256 proves
    /// it: `BundleStore::probe` hashes it then).
    fn restored(&self, objects: Objects) -> Objects {
        match self.moto.kind {
            ServerKind::Azurite => objects
                .into_iter()
                .map(|(k, (_, c))| (k, (String::new(), c)))
                .collect(),
            _ => objects,
        }
    }

    fn state(&self) -> Option<Value> {
        self.moto
            .get(&self.bucket, &format!("{PREFIX}/.distributor.json"))
            .map(|b| serde_json::from_slice(&b).expect("state is JSON"))
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn key(rel: &str) -> String {
    format!("{PREFIX}/{rel}")
}

const V1: &[F] = &[
    ("index.html", "<h1>v1</h1>"),
    ("forecast.json", "{\"t\": 1}"),
    ("maps/temp.png", "png-1"),
    ("old.txt", "to be deleted"),
];
const V2: &[F] = &[
    ("index.html", "<h1>v2</h1>"),
    ("forecast.json", "{\"t\": 1}"),
    ("maps/temp.png", "png-2"),
    ("new.txt", "new in v2"),
];

/// For each `fn name(server)` listed, the tests `name::s3` (on the S3 server named: moto,
/// or SeaweedFS where requests race) and `name::azure` (on Azurite, `backend: azure`): one
/// body for every object store (SPEC §14, §21). `failpoints` marks those that drive the
/// binary's failpoints.
macro_rules! per_store {
    () => {};
    (@one $name:ident $require:ident [$($attr:tt)*]) => {
        mod $name {
            #[test]
            $($attr)*
            fn s3() {
                super::$name(crate::common::s3::$require!());
            }
            #[test]
            $($attr)*
            fn azure() {
                super::$name(crate::common::s3::require_azurite!());
            }
        }
    };
    ($name:ident on $require:ident, failpoints; $($rest:tt)*) => {
        per_store!(@one $name $require [#[cfg_attr(
            not(feature = "failpoints"),
            ignore = "drives the binary's failpoints: cargo test --all-features"
        )]]);
        per_store!($($rest)*);
    };
    ($name:ident on $require:ident; $($rest:tt)*) => {
        per_store!(@one $name $require []);
        per_store!($($rest)*);
    };
}

per_store!(
    publish_records_etags_and_an_unchanged_republish_writes_nothing on require_moto;
    a_newer_bundle_replaces_changed_objects_and_deletes_dropped_ones on require_moto;
    unmanaged_objects_are_refused_unless_forced on require_moto;
    links_and_overlong_keys_are_conflicts_nothing_is_written on require_moto;
    a_dry_run_writes_nothing_to_the_bucket on require_moto;
    a_crash_at_every_step_recovers_to_before_or_after_from_any_host on require_moto, failpoints;
    a_publisher_stopped_past_its_lease_does_not_commit on require_seaweedfs, failpoints;
    verify_deep_hashes_what_the_listing_cannot_show on require_moto;
    a_kill_at_every_request_recovers_to_before_or_after on require_moto, failpoints;
    a_key_written_by_someone_else_mid_run_is_a_concurrent_change_and_rolls_back on require_seaweedfs, failpoints;
    source_id_mapping_publishes_under_one_prefix_per_source on require_moto;
    a_state_object_replaced_after_the_commit_decision_is_kept_and_rolled_over on require_moto, failpoints;
    a_recover_interrupted_after_keeping_the_replaced_state_finishes_and_keeps_it on require_moto, failpoints;
    each_acquisition_writes_a_lease_with_its_own_nonce_and_etag on require_seaweedfs, failpoints;
    a_lease_left_by_a_killed_holder_on_this_machine_is_taken_over_at_once on require_seaweedfs, failpoints;
    a_lease_whose_process_is_alive_is_not_taken_over on require_seaweedfs, failpoints;
    a_lease_of_another_boot_or_namespace_or_an_older_one_is_not_taken_over_early on require_seaweedfs;
    a_holder_past_its_deadline_leaves_its_lease_in_place on require_seaweedfs, failpoints;
    a_lease_too_short_to_work_is_refused_before_anything_is_written on require_seaweedfs;
    an_earlier_versions_staging_is_still_recovered on require_moto, failpoints;
    readers_see_each_object_whole_while_publications_alternate on require_seaweedfs;
);

/// SPEC §14: readers of plain keys see each object switch atomically, never a partial
/// object, and a key both bundles have never goes missing. A reader reads two keys over
/// and over (a small file, one PUT; a large one, in parts or blocks) while two bundles
/// replace each other six times; each read is whole, one bundle's or the other's. On
/// SeaweedFS for s3: moto answers a GET during a multipart completion of its key with 500.
fn readers_see_each_object_whole_while_publications_alternate(server: &'static Moto) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let w = World::new(server);
    let config = w.config("d.yaml", PREFIX, "", "");
    // 9 MiB: past one PUT (8 MiB), so it goes in parts (s3) or blocks (azure).
    let size = 9 * 1024 * 1024;
    let versions: [(&str, String, String); 2] = [
        ("a", "<h1>A</h1>".to_string(), "a".repeat(size)),
        ("b", "<h1>B, longer</h1>".to_string(), "b".repeat(size + 1)),
    ];
    let bundle = |round: usize| {
        let (name, index, big) = &versions[round % 2];
        let only = format!("only-{name}.txt");
        w.env.bundle(
            &format!("r{round}"),
            "site",
            &format!("2026-12-02T{:02}:00:00Z", round + 1),
            &[
                ("index.html", index.as_str()),
                ("data/big.bin", big.as_str()),
                (only.as_str(), name),
            ],
            &[],
        )
    };
    w.publish(&config, &bundle(0), &[]).expect_code(0);
    let stop = AtomicBool::new(false);
    let rounds = AtomicUsize::new(0);
    let seen = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut seen: BTreeMap<(String, &str), usize> = BTreeMap::new();
            while !stop.load(Ordering::SeqCst) {
                for rel in ["index.html", "data/big.bin"] {
                    let got = w.moto.get(&w.bucket, &key(rel));
                    let got = got.unwrap_or_else(|| panic!("{rel} went missing"));
                    let which = versions.iter().find(|(_, index, big)| {
                        got == if rel == "index.html" { index } else { big }.as_bytes()
                    });
                    let Some((name, ..)) = which else {
                        panic!("{rel}: a read of {} bytes is neither bundle's", got.len());
                    };
                    *seen.entry((rel.to_string(), *name)).or_default() += 1;
                }
                rounds.fetch_add(1, Ordering::SeqCst);
            }
            seen
        });
        for round in 1..=6 {
            // The reader has read since the last publication before the next begins.
            let at = rounds.load(Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(60);
            while rounds.load(Ordering::SeqCst) == at && !reader.is_finished() {
                assert!(Instant::now() < deadline, "the reader made no progress");
                std::thread::sleep(Duration::from_millis(5));
            }
            if reader.is_finished() {
                break;
            }
            w.publish(&config, &bundle(round), &[]).expect_code(0);
        }
        stop.store(true, Ordering::SeqCst);
        reader
            .join()
            .expect("the reader saw a partial or missing object")
    });
    for rel in ["index.html", "data/big.bin"] {
        for name in ["a", "b"] {
            assert!(
                seen.contains_key(&(rel.to_string(), name)),
                "{rel}: bundle {name} never read: {seen:?}"
            );
        }
    }
}

fn publish_records_etags_and_an_unchanged_republish_writes_nothing(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config(
        "d.yaml",
        PREFIX,
        "",
        "      content_types: {\".png\": image/x-test}\n      cache_control: [{glob: \"*.html\", value: no-cache}]\n",
    );
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let r = w.publish(&config, &b1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "create");

    // The objects are the bundle's files, each with its content.
    let objects = w.content();
    let keys: Vec<&str> = objects.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            key("forecast.json"),
            key("index.html"),
            key("maps/temp.png"),
            key("old.txt")
        ]
    );
    for (p, c) in V1 {
        assert_eq!(objects[&key(p)].1, c.as_bytes(), "{p}");
    }
    // Nothing of distributor's own is left but the state: no lease, no staging.
    assert_eq!(w.objects().len(), V1.len() + 1);

    // State version 2 records each output's ETag as the listing shows it.
    let state = w.state().expect("state object");
    assert_eq!(state["state_version"], 2);
    for o in state["outputs"].as_array().unwrap() {
        let k = key(o["path"].as_str().unwrap());
        assert_eq!(o["etag"].as_str().unwrap(), objects[&k].0, "{k}");
    }

    // Content-Type from the table and s3.content_types; Cache-Control from the first rule.
    let html = moto.head(&w.bucket, &key("index.html")).unwrap();
    assert_eq!(html.content_type.as_deref(), Some("text/html"));
    assert_eq!(html.cache_control.as_deref(), Some("no-cache"));
    let json = moto.head(&w.bucket, &key("forecast.json")).unwrap();
    assert_eq!(json.content_type.as_deref(), Some("application/json"));
    assert_eq!(json.cache_control, None);
    let png = moto.head(&w.bucket, &key("maps/temp.png")).unwrap();
    assert_eq!(png.content_type.as_deref(), Some("image/x-test"));

    // The same bundle again: unchanged, decided from the listing's ETags; not one object
    // (the state included) is rewritten.
    let before = w.objects();
    let heads: Vec<_> = before
        .keys()
        .map(|k| moto.head(&w.bucket, k).unwrap())
        .collect();
    let r = w.publish(&config, &b1, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
    assert_eq!(w.objects(), before);
    let after: Vec<_> = before
        .keys()
        .map(|k| moto.head(&w.bucket, k).unwrap())
        .collect();
    assert_eq!(heads, after, "an unchanged republish rewrote an object");

    // status and verify read the same state.
    w.run(&["status", "--config", path(&config)], &[])
        .expect_code(0);
    let v = w.run(&["verify", "--json", "--config", path(&config)], &[]);
    v.expect_code(0);
}

fn a_newer_bundle_replaces_changed_objects_and_deletes_dropped_ones(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &[]).expect_code(0);
    let untouched = w.objects()[&key("forecast.json")].clone();
    let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
    let r = w.publish(&config, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    let objects = w.content();
    let keys: Vec<&str> = objects.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            key("forecast.json"),
            key("index.html"),
            key("maps/temp.png"),
            key("new.txt")
        ]
    );
    for (p, c) in V2 {
        assert_eq!(objects[&key(p)].1, c.as_bytes(), "{p}");
    }
    assert_eq!(
        objects[&key("forecast.json")],
        untouched,
        "an unchanged file was rewritten"
    );
    assert_eq!(
        w.objects().len(),
        V2.len() + 1,
        "staging or the lease was left behind"
    );
    let v = w.run(&["verify", "--json", "--config", path(&config)], &[]);
    v.expect_code(0);

    // An object changed behind distributor's back is drift, and a repair puts it back.
    moto.put(&w.bucket, &key("new.txt"), b"tampered");
    let v = w.run(&["verify", "--config", path(&config)], &[]);
    assert_ne!(v.code, 0, "verify missed a changed object\n{}", v.stdout);
    let r = w.publish(&config, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "repair");
    assert_eq!(moto.get(&w.bucket, &key("new.txt")).unwrap(), b"new in v2");
}

// Stays on moto: SeaweedFS 4.48 keeps an empty implicit folder `maps/temp.png/` after the
// last key under it is deleted, and refuses the later `PUT maps/temp.png` with
// `If-None-Match: *` (412, though no such key exists): this publication then ends in
// `concurrent_change` there (see
// `test_s3_harness::seaweedfs_refuses_a_create_where_a_deleted_folder_was`).
fn unmanaged_objects_are_refused_unless_forced(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    moto.put(&w.bucket, &key("index.html"), b"hand-made");
    moto.put(
        &w.bucket,
        &key("maps/temp.png/inside"),
        b"a key below a planned path",
    );
    let before = w.objects();
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let r = w.publish(&config, &b1, &[]);
    r.expect_code(3);
    let mut kinds = r.conflict_kinds();
    kinds.sort();
    assert_eq!(kinds, ["unmanaged_content", "unmanaged_directory"]);
    assert_eq!(w.objects(), before, "a refused publication wrote something");

    // --force may replace the unmanaged object, never what stands under a planned path.
    moto.delete(&w.bucket, &key("maps/temp.png/inside"));
    let r = w.publish(&config, &b1, &["--force"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "force_replace");
    assert_eq!(
        moto.get(&w.bucket, &key("index.html")).unwrap(),
        b"<h1>v1</h1>"
    );
}

fn links_and_overlong_keys_are_conflicts_nothing_is_written(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b = w.env.bundle(
        "b",
        "site",
        "2026-12-02T06:00:00Z",
        &[("maps/temp.png", "png")],
        &[("current.png", "maps/temp.png")],
    );
    let r = w.publish(&config, &b, &["--force"]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["unsupported_link"]);
    assert_eq!(r.dest(0)["conflicts"][0]["forceable"], false);

    let long = format!(
        "{}/{}/{}/{}/{}",
        "a".repeat(250),
        "b".repeat(250),
        "c".repeat(250),
        "d".repeat(250),
        "e-long.txt"
    );
    let b = w
        .env
        .bundle("b2", "site", "2026-12-02T06:00:00Z", &[(&long, "x")], &[]);
    let r = w.publish(&config, &b, &["--force"]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["key_too_long"]);
    assert!(w.objects().is_empty(), "a conflict wrote something");
}

fn a_dry_run_writes_nothing_to_the_bucket(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let r = w.run(
        &[
            "plan",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&b1),
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(r.decision(), "create");
    let r = w.publish(&config, &b1, &["--dry-run"]);
    r.expect_code(0);
    let message = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(
        message.ends_with("conditional writes not verified"),
        "{message}"
    );
    assert!(
        moto.list(&w.bucket, "").is_empty(),
        "a dry run wrote to the bucket"
    );
}

/// A failpoint that aborts the run, whether recovery then rolls back or forward.
const STEPS: &[(&str, bool)] = &[
    ("after_journal_append", false),
    ("after_staging_record", false),
    ("during_staging", false),
    ("after_staging", false),
    ("after_move_aside", false),
    ("after_placement", false),
    ("after_links", false),
    // After the decision record says commit: rolled forward.
    ("io_state_fsync", true),
    ("io_state_rename", true),
    ("after_state_write", true),
    ("after_journal_commit", true),
    ("during_cleanup", true),
];

fn a_crash_at_every_step_recovers_to_before_or_after_from_any_host(moto: &'static Moto) {
    let modes = ["single_owner", "shared_root"];
    for (i, (&(step, forward), mode)) in STEPS
        .iter()
        .flat_map(|s| modes.iter().map(move |m| (s, m)))
        .enumerate()
    {
        let step = &*format!("{step} ({mode})");
        let fp = step.split(' ').next().unwrap().to_string();
        let w = World::new(moto);
        let config = w.config(
            "d.yaml",
            PREFIX,
            &format!("    state:\n      mode: {mode}\n"),
            "",
        );
        let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
        w.publish(&config, &b1, &[]).expect_code(0);
        let before = w.objects();
        let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
        let r = w.run(
            &[
                "publish",
                "--json",
                "--config",
                path(&config),
                "--source",
                path(&b2),
            ],
            &[("DISTRIBUTOR_FAILPOINT", &fp)],
        );
        assert_ne!(r.code, 0, "{step}: the failpoint did not stop the run");
        assert!(!r.stderr.contains("DISTRIBUTOR_FAILPOINT"), "{}", r.stderr);
        // Every other step is recovered by "another host": a fresh journal, no config.
        let other_host = i % 2 == 1;
        let journal = w.env.path("other-host.sqlite3");
        let r = if other_host {
            w.run(
                &[
                    "recover",
                    "--json",
                    "--config",
                    path(&config),
                    "--journal",
                    path(&journal),
                ],
                &[],
            )
        } else {
            w.run(&["recover", "--json", "--config", path(&config)], &[])
        };
        r.expect_code(0);
        let after = w.objects();
        if forward {
            let want: BTreeMap<String, Vec<u8>> = V2
                .iter()
                .map(|(p, c)| (key(p), c.as_bytes().to_vec()))
                .collect();
            let got: BTreeMap<String, Vec<u8>> =
                w.content().into_iter().map(|(k, (_, c))| (k, c)).collect();
            assert_eq!(got, want, "{step}: not the published bundle after recovery");
            let state = w.state().unwrap();
            let source = match *mode {
                "shared_root" => &state["owners"][0]["source"],
                _ => &state["source"],
            };
            assert_eq!(source["created_at"], "2026-12-02T07:00:00Z", "{step}");
        } else {
            assert_eq!(
                w.restored(after.clone()),
                w.restored(before.clone()),
                "{step}: not byte-identical to before after recovery"
            );
        }
        assert_eq!(
            after.len(),
            if forward { V2.len() } else { V1.len() } + 1,
            "{step}: staging, a lease or a stray object is left"
        );
        // The log has one entry per committed publication (SPEC §18): the one rolled
        // forward gets its entry, whoever wrote it; the one rolled back none.
        let log = w.log();
        assert_eq!(log.len(), if forward { 2 } else { 1 }, "{step}: {log:#?}");
        let state = w.state().unwrap();
        let live = match *mode {
            "shared_root" => &state["owners"][0]["operation_id"],
            _ => &state["operation_id"],
        };
        assert_eq!(&log.last().unwrap()["operation_id"], live, "{step}");
        // The destination is usable again, and verify (with the journal that recovered
        // it) agrees with it.
        let mut verify = vec!["verify", "--config", path(&config)];
        if other_host {
            verify.extend(["--journal", path(&journal)]);
        }
        w.run(&verify, &[]).expect_code(0);
        if other_host {
            // The journal of the host that crashed still knows the operation: there,
            // recovery is pending (SPEC §16) until its own recover closes it.
            w.run(&["verify", "--config", path(&config)], &[])
                .expect_code(4);
            let r = w.run(&["recover", "--json", "--config", path(&config)], &[]);
            r.expect_code(0);
            assert_eq!(
                w.objects(),
                after,
                "{step}: closing the operation changed the bucket"
            );
            w.run(&["verify", "--config", path(&config)], &[])
                .expect_code(0);
        }
        let r = w.publish(&config, &b2, &[]);
        r.expect_code(0);
        assert_eq!(
            r.decision(),
            if forward {
                "unchanged"
            } else {
                "replace_older"
            },
            "{step}"
        );
    }
}

fn a_publisher_stopped_past_its_lease_does_not_commit(server: &'static Moto) {
    let w = World::new(server);
    // lease 14 s (the shortest that works): the holder stops writing 7 s after it sent its
    // last renewal; another host may take the lease 24 s after its last write, by the
    // store's clock.
    let config = w.config("d.yaml", PREFIX, "", "      lease_seconds: 14\n");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &[]).expect_code(0);
    let host_a_bundle = w.env.bundle("a", "site", "2026-12-02T07:00:00Z", V2, &[]);
    let vars: Vec<(&str, &str)> = w.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Host A stands after staging (new objects uploaded) and is stopped there.
    let a = PausedRun::start(
        &w.env,
        &[
            "publish",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&host_a_bundle),
        ],
        "after_staging",
        &vars,
    );
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(stop.success());
    // Host B: its own journal; waits for the lease to expire, recovers A's operation, and
    // publishes its own bundle.
    let b_journal = w.env.path("host-b.sqlite3");
    let started = Instant::now();
    let r = w.run(
        &[
            "recover",
            "--json",
            "--config",
            path(&config),
            "--journal",
            path(&b_journal),
            "--lock-timeout",
            "60",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "host B took a live lease after {:?}",
        started.elapsed()
    );
    assert_eq!(
        r.json()["operations"][0]["outcome"],
        "rolled_back",
        "{}",
        r.stdout
    );
    let host_b: &[F] = &[("index.html", "<h1>host B</h1>"), ("b-only.txt", "b")];
    let host_b_bundle = w
        .env
        .bundle("bb", "site", "2026-12-02T08:00:00Z", host_b, &[]);
    let r = w.run(
        &[
            "publish",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&host_b_bundle),
            "--journal",
            path(&b_journal),
        ],
        &[],
    );
    r.expect_code(0);
    let b_state = w.objects();

    // A wakes up: it must notice its lease is gone and write nothing more.
    let cont = std::process::Command::new("kill")
        .args(["-CONT", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(cont.success());
    let ra = a.resume();
    assert_ne!(
        ra.code, 0,
        "host A went on after its lease expired\n{}",
        ra.stdout
    );
    assert_eq!(
        w.objects(),
        b_state,
        "host A changed the prefix after losing its lease"
    );
    let got: BTreeMap<String, Vec<u8>> =
        w.content().into_iter().map(|(k, (_, c))| (k, c)).collect();
    let want: BTreeMap<String, Vec<u8>> = host_b
        .iter()
        .map(|(p, c)| (key(p), c.as_bytes().to_vec()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        w.state().unwrap()["source"]["created_at"],
        "2026-12-02T08:00:00Z"
    );
}

fn verify_deep_hashes_what_the_listing_cannot_show(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &[]).expect_code(0);
    w.run(&["verify", "--deep", "--config", path(&config)], &[])
        .expect_code(0);
    // A state that records another sha256 for an object whose size and ETag it keeps:
    // the listing cannot tell, the content can.
    let mut state = w.state().unwrap();
    let outputs = state["outputs"].as_array_mut().unwrap();
    let o = outputs
        .iter_mut()
        .find(|o| o["path"] == "index.html")
        .unwrap();
    o["sha256"] = Value::String("0".repeat(64));
    moto.put(
        &w.bucket,
        &key(".distributor.json"),
        serde_json::to_string_pretty(&state).unwrap().as_bytes(),
    );
    w.run(&["verify", "--config", path(&config)], &[])
        .expect_code(0);
    let r = w.run(
        &["verify", "--deep", "--json", "--config", path(&config)],
        &[],
    );
    r.expect_code(3);
    assert_eq!(
        r.json()["destinations"][0]["modified"],
        serde_json::json!(["index.html"])
    );
}

/// The multipart uploads in progress in the bucket (ListMultipartUploads).
fn uploads_in_progress(w: &World) -> usize {
    let r = w
        .moto
        .raw("GET", &format!("/{}?uploads", w.bucket), &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    crate::common::s3::xml_elements(&r.text(), "UploadId").len()
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn large_files_go_multipart_and_a_killed_upload_is_aborted_by_recover() {
    let moto = require_moto!();
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    // 20 MiB: three parts of at most 8 MiB.
    let big: String = (0..20 * 1024 * 1024 / 16)
        .map(|i| format!("{i:015}\n"))
        .collect();
    let b1 = w.env.bundle(
        "b1",
        "site",
        "2026-12-02T06:00:00Z",
        &[("data/big.csv", big.as_str()), ("small.txt", "small")],
        &[],
    );
    w.publish(&config, &b1, &[]).expect_code(0);
    assert_eq!(
        moto.get(&w.bucket, &key("data/big.csv")).unwrap(),
        big.as_bytes()
    );
    let head = moto.head(&w.bucket, &key("data/big.csv")).unwrap();
    assert_eq!(head.content_type.as_deref(), Some("text/csv"));
    assert_eq!(uploads_in_progress(&w), 0);

    // Killed with every part sent, before the completion: the parts stay in the bucket
    // until recover aborts the upload recorded in staging.
    let bigger = format!("{big}and more\n");
    let b2 = w.env.bundle(
        "b2",
        "site",
        "2026-12-02T07:00:00Z",
        &[("data/big.csv", bigger.as_str()), ("small.txt", "small")],
        &[],
    );
    let before = w.objects();
    let r = w.run(
        &[
            "publish",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&b2),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "io_stage_write")],
    );
    assert_ne!(r.code, 0);
    assert_eq!(
        uploads_in_progress(&w),
        1,
        "the killed run left no upload to abort"
    );
    w.run(&["recover", "--json", "--config", path(&config)], &[])
        .expect_code(0);
    assert_eq!(
        uploads_in_progress(&w),
        0,
        "recover left the killed run's upload"
    );
    assert_eq!(w.objects(), before);
    let r = w.publish(&config, &b2, &[]);
    r.expect_code(0);
    assert_eq!(
        moto.get(&w.bucket, &key("data/big.csv")).unwrap(),
        bigger.as_bytes()
    );

    // Past the single-copy limit (5 GiB on AWS; lowered here) an object is moved aside and
    // restored part by part: a run killed after placing its new content rolls back to
    // exactly the object before.
    let limit = [("DISTRIBUTOR_S3_COPY_LIMIT", "1048576")];
    let b3 = w.env.bundle(
        "b3",
        "site",
        "2026-12-02T08:00:00Z",
        &[("data/big.csv", big.as_str()), ("small.txt", "small")],
        &[],
    );
    let before = w.objects();
    let r = w.run(
        &[
            "publish",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&b3),
        ],
        &[limit[0], ("DISTRIBUTOR_FAILPOINT", "after_placement")],
    );
    assert_ne!(r.code, 0);
    assert_eq!(
        moto.get(&w.bucket, &key("data/big.csv")).unwrap(),
        big.as_bytes(),
        "the new content was not placed"
    );
    w.run(&["recover", "--json", "--config", path(&config)], &limit)
        .expect_code(0);
    let after = w.objects();
    assert_eq!(
        after[&key("data/big.csv")].1,
        before[&key("data/big.csv")].1,
        "not restored byte for byte"
    );
    // (Restored by a multipart upload of one 64 MiB part, not by CopyObject.)
    assert!(
        after[&key("data/big.csv")].0.ends_with("-1\""),
        "{}",
        after[&key("data/big.csv")].0
    );
    assert_eq!(uploads_in_progress(&w), 0);
    w.run(
        &["publish", "--config", path(&config), "--source", path(&b3)],
        &limit,
    )
    .expect_code(0);
    assert_eq!(
        moto.get(&w.bucket, &key("data/big.csv")).unwrap(),
        big.as_bytes()
    );
}

/// Kills the publication at its k-th request (before it is sent, or after its response
/// arrived), for every k until a run gets through: whatever the moment, recovery from this
/// host or another leaves the prefix exactly before or after.
fn a_kill_at_every_request_recovers_to_before_or_after(moto: &'static Moto) {
    for point in ["s3_request", "s3_response"] {
        let w = World::new(moto);
        let config = w.config("d.yaml", PREFIX, "", "");
        let b = w.env.bundle("b0", "site", "2026-12-02T00:00:00Z", V1, &[]);
        w.publish(&config, &b, &[]).expect_code(0);
        let mut k = 1;
        loop {
            assert!(k < 200, "{point}: the publication never got through");
            // Alternately V2 and V1, each newer than the last.
            let files = if k % 2 == 1 { V2 } else { V1 };
            let at = format!("2026-12-02T{:02}:{:02}:00Z", k / 60, k % 60);
            let b = w.env.bundle(&format!("b{k}"), "site", &at, files, &[]);
            let before = w.content();
            let spec = format!("{point}:{k}");
            let r = w.run(
                &[
                    "publish",
                    "--json",
                    "--config",
                    path(&config),
                    "--source",
                    path(&b),
                ],
                &[("DISTRIBUTOR_FAILPOINT", &spec)],
            );
            let finished = r.code == 0;
            if !finished {
                // Recovered by "another host" (a fresh journal) every other time, then by
                // the crashed host's own journal, which closes what is left of it.
                if k % 4 < 2 {
                    let other = w.env.path(&format!("other-{point}-{k}.sqlite3"));
                    w.run(
                        &[
                            "recover",
                            "--config",
                            path(&config),
                            "--journal",
                            path(&other),
                        ],
                        &[],
                    )
                    .expect_code(0);
                }
                w.run(&["recover", "--config", path(&config)], &[])
                    .expect_code(0);
            }
            let want: BTreeMap<String, Vec<u8>> = files
                .iter()
                .map(|(p, c)| (key(p), c.as_bytes().to_vec()))
                .collect();
            let got: BTreeMap<String, Vec<u8>> =
                w.content().into_iter().map(|(k, (_, c))| (k, c)).collect();
            let was: BTreeMap<String, Vec<u8>> =
                before.into_iter().map(|(k, (_, c))| (k, c)).collect();
            assert!(
                got == want || got == was,
                "{spec}: neither before nor after\ngot {:?}\nwant {:?}\nwas {:?}\n{}",
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                was.keys().collect::<Vec<_>>(),
                r.stderr
            );
            let probe = format!("{PREFIX}/.distributor-probe-");
            assert_eq!(
                w.objects()
                    .keys()
                    .filter(|k| !k.starts_with(&probe))
                    .count(),
                got.len() + 1,
                "{spec}: staging or a stray object is left"
            );
            // The log (SPEC §18): numbered from 1 without a gap, each operation once, its
            // last entry the operation whose state is live, whichever request was cut.
            let log = w.log();
            let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
            assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "{spec}");
            let ops: std::collections::BTreeSet<&str> = log
                .iter()
                .map(|e| e["operation_id"].as_str().unwrap())
                .collect();
            assert_eq!(ops.len(), log.len(), "{spec}: an operation logged twice");
            assert_eq!(
                log.last().unwrap()["operation_id"],
                w.state().unwrap()["operation_id"],
                "{spec}"
            );
            w.run(&["verify", "--config", path(&config)], &[])
                .expect_code(0);
            if finished {
                break;
            }
            k += 1;
        }
        // A publication makes dozens of requests: fewer kills mean the failpoint never fired.
        assert!(k > 10, "{point}: only {} kills", k - 1);
        eprintln!("{point}: killed at each of {} requests", k - 1);
    }
}

fn a_key_written_by_someone_else_mid_run_is_a_concurrent_change_and_rolls_back(
    server: &'static Moto,
) {
    let w = World::new(server);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &[]).expect_code(0);
    let before = w.objects();
    let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
    let vars: Vec<(&str, &str)> = w.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = PausedRun::start(
        &w.env,
        &[
            "publish",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&b2),
        ],
        "after_staging_record",
        &vars,
    );
    // A neighbour creates the key the publication is about to create.
    server.put(&w.bucket, &key("new.txt"), b"the neighbour's");
    let r = run.resume();
    r.expect_code(1);
    let message = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(message.starts_with("concurrent change: "), "{message}");
    assert!(message.contains("new.txt"), "{message}");
    // Rolled back; the neighbour's object is untouched.
    let mut want = before.clone();
    want.insert(key("new.txt"), w.objects()[&key("new.txt")].clone());
    assert_eq!(w.restored(w.objects()), w.restored(want));
    assert_eq!(
        server.get(&w.bucket, &key("new.txt")).unwrap(),
        b"the neighbour's"
    );
    w.run(&["recover", "--config", path(&config)], &[])
        .expect_code(0);
}

fn source_id_mapping_publishes_under_one_prefix_per_source(moto: &'static Moto) {
    let w = World::new(moto);
    let config = w.config(
        "d.yaml",
        "weather/archive",
        "    path_mapping:\n      mode: source_id\n",
        "",
    );
    for id in ["run-1", "run-2"] {
        let b = w
            .env
            .bundle(id, id, "2026-12-02T06:00:00Z", &[("a.txt", id)], &[]);
        let r = w.publish(&config, &b, &[]);
        r.expect_code(0);
        assert_eq!(
            r.dest(0)["bundle_path"],
            format!("{}{}/weather/archive/{id}", w.moto.scheme(), w.bucket)
        );
        assert_eq!(
            moto.get(&w.bucket, &format!("weather/archive/{id}/a.txt"))
                .unwrap(),
            id.as_bytes()
        );
    }
    // status finds both bundle paths below the destination's prefix.
    let r = w.run(&["status", "--json", "--config", path(&config)], &[]);
    r.expect_code(0);
    let text = r.stdout;
    for id in ["run-1", "run-2"] {
        assert!(
            text.contains(&format!(
                "{}{}/weather/archive/{id}",
                w.moto.scheme(),
                w.bucket
            )),
            "{text}"
        );
    }
}

#[test]
fn a_file_that_does_not_match_its_manifest_never_becomes_visible() {
    let moto = require_moto!();
    let w = World::new(moto);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &[]).expect_code(0);
    let before = w.objects();
    // One small file (one PUT) and one large (multipart), each changed after its
    // manifest was written, keeping its size.
    let big = "x".repeat(9 * 1024 * 1024);
    for (changed, files) in [
        ("index.html", V2.to_vec()),
        ("big.bin", [V2, &[("big.bin", big.as_str())]].concat()),
    ] {
        let b = w
            .env
            .bundle("b2", "site", "2026-12-02T07:00:00Z", &files, &[]);
        let p = b.join(changed);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        let r = w.publish(&config, &b, &[]);
        r.expect_code(1);
        let message = r.dest(0)["message"].as_str().unwrap().to_string();
        assert!(message.contains("invalid source"), "{message}");
        assert!(message.contains(changed), "{message}");
        assert_eq!(w.objects(), before, "{changed}: something became visible");
        assert_eq!(uploads_in_progress(&w), 0, "{changed}: an upload was left");
    }
}

/// The operation whose staging entry is under the prefix (one).
fn staged_operation(w: &World) -> String {
    let staging = key(".distributor/staging/");
    let mut ops: Vec<String> = w
        .moto
        .list(&w.bucket, &staging)
        .into_iter()
        .filter_map(|o| {
            let rest = o.key.strip_prefix(&staging)?;
            Some(rest.split('/').next()?.to_string())
        })
        .collect();
    ops.dedup();
    assert_eq!(ops.len(), 1, "staging holds {ops:?}");
    ops.remove(0)
}

/// The journal events of `op` (in the default journal): name and detail.
fn events_of(w: &World, op: &str) -> Vec<(String, String)> {
    let r = w.run(&["history", "show", op, "--json"], &[]);
    r.expect_code(0);
    r.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// What a third party writes over the state object after the commit decision.
const FOREIGN_STATE: &[u8] = b"{\"written\": \"by someone else\"}\n";

/// Publishes V1, then V2 stopped just after its decision record says `commit`: killed at
/// `point`, or (`pause`) held there while the state object is replaced, then let go.
/// Returns the operation id, the ETag of the replacing PUT and what the publish said
/// (when paused).
fn replace_state_after_commit(
    w: &World,
    config: &Path,
    point: &str,
    pause: bool,
) -> (String, String, Option<Run>) {
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(config, &b1, &[]).expect_code(0);
    let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
    let args = [
        "publish",
        "--json",
        "--config",
        path(config),
        "--source",
        path(&b2),
    ];
    let state_key = key(".distributor.json");
    if pause {
        let vars: Vec<(&str, &str)> = w.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let run = PausedRun::start(&w.env, &args, point, &vars);
        let op = staged_operation(w);
        let etag = w.moto.put(&w.bucket, &state_key, FOREIGN_STATE);
        let r = run.resume();
        (op, etag, Some(r))
    } else {
        let r = w.run(&args, &[("DISTRIBUTOR_FAILPOINT", point)]);
        assert_ne!(r.code, 0, "{point}: the failpoint did not stop the run");
        let op = staged_operation(w);
        let etag = w.moto.put(&w.bucket, &state_key, FOREIGN_STATE);
        (op, etag, None)
    }
}

/// The prefix holds exactly V2, the post-state and the replaced state's copies `kept`
/// (key -> bytes); with `config`, `verify` agrees (with no recovery pending).
fn assert_rolled_forward(w: &World, config: Option<&Path>, kept: &[(String, &[u8])], ctx: &str) {
    let mut want: BTreeMap<String, Vec<u8>> = V2
        .iter()
        .map(|(p, c)| (key(p), c.as_bytes().to_vec()))
        .collect();
    for (k, b) in kept {
        want.insert(k.clone(), b.to_vec());
    }
    let got: BTreeMap<String, Vec<u8>> =
        w.content().into_iter().map(|(k, (_, c))| (k, c)).collect();
    assert_eq!(
        got, want,
        "{ctx}: not the published bundle and the kept copy"
    );
    let state = w.state().expect("a state object");
    assert_eq!(
        state["source"]["created_at"], "2026-12-02T07:00:00Z",
        "{ctx}"
    );
    if let Some(config) = config {
        w.run(&["verify", "--config", path(config)], &[])
            .expect_code(0);
    }
}

fn a_state_object_replaced_after_the_commit_decision_is_kept_and_rolled_over(moto: &'static Moto) {
    let foreign_sha = distributor::hash::sha256_hex(FOREIGN_STATE);
    // Killed with the decision made and nothing else (the state object is the pre-state
    // when replaced); killed after the state object was written (the post-state when
    // replaced); held at the decision while the state is replaced, then let go (its own
    // conditional write of the state object loses).
    for (point, pause) in [
        ("io_state_fsync", false),
        ("during_cleanup", false),
        ("io_state_fsync", true),
    ] {
        let ctx = &*format!("{point} ({})", if pause { "paused" } else { "killed" });
        let w = World::new(moto);
        let config = w.config("d.yaml", PREFIX, "", "");
        let (op, etag, published) = replace_state_after_commit(&w, &config, point, pause);
        if let Some(r) = published {
            // Past its commit point: the report says so and what is left for recover.
            assert_ne!(r.code, 0, "{ctx}: {}", r.stdout);
            let said = format!("{}{}", r.stdout, r.stderr);
            assert!(
                said.contains("passed its commit point") && said.contains("distributor recover"),
                "{ctx}: {said}"
            );
        }
        let copy = key(&format!(".distributor/replaced/{op}.json"));
        let r = w.run(&["recover", "--json", "--config", path(&config)], &[]);
        r.expect_code(0);
        let o = &r.json()["operations"][0];
        assert_eq!(o["operation_id"], op.as_str(), "{ctx}");
        assert_eq!(o["outcome"], "rolled_forward", "{ctx}: {}", r.stdout);
        let replaced = &o["replaced_state"];
        assert_eq!(replaced["sha256"], foreign_sha.as_str(), "{ctx}");
        assert_eq!(
            replaced["etag"].as_str().map(|e| e.trim_matches('"')),
            Some(etag.trim_matches('"')),
            "{ctx}"
        );
        assert_eq!(
            replaced["copied_to"],
            format!("{}{}/{copy}", w.moto.scheme(), w.bucket).as_str(),
            "{ctx}"
        );
        assert!(
            o["message"].as_str().unwrap().contains(&foreign_sha),
            "{ctx}: {}",
            o["message"]
        );
        assert_eq!(moto.get(&w.bucket, &copy).as_deref(), Some(FOREIGN_STATE));
        assert_rolled_forward(&w, Some(&config), &[(copy.clone(), FOREIGN_STATE)], ctx);
        let events = events_of(&w, &op);
        let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
        assert_eq!(
            names[names.len() - 2..],
            ["state_replaced", "recovered_forward"],
            "{ctx}"
        );
        let detail = &events[events.len() - 2].1;
        assert!(
            detail.contains(&foreign_sha) && detail.contains(&copy),
            "{ctx}: {detail}"
        );

        // Nothing is left to recover, and the copy stays.
        let r = w.run(&["recover", "--config", path(&config)], &[]);
        r.expect_code(0);
        assert!(
            r.stdout.contains("nothing to recover"),
            "{ctx}: {}",
            r.stdout
        );
        // Later publications work, and never remove the copy.
        let b2 = w.env.path("b2");
        let r = w.publish(&config, &b2, &[]);
        r.expect_code(0);
        assert_eq!(r.decision(), "unchanged", "{ctx}");
        let b3 = w.env.bundle("b3", "site", "2026-12-02T08:00:00Z", V1, &[]);
        w.publish(&config, &b3, &[]).expect_code(0);
        assert_eq!(
            w.state().unwrap()["source"]["created_at"],
            "2026-12-02T08:00:00Z"
        );
        assert_eq!(moto.get(&w.bucket, &copy).as_deref(), Some(FOREIGN_STATE));
    }
}

fn a_recover_interrupted_after_keeping_the_replaced_state_finishes_and_keeps_it(
    moto: &'static Moto,
) {
    let foreign_sha = distributor::hash::sha256_hex(FOREIGN_STATE);
    let earlier: &[u8] = b"{\"written\": \"earlier, by someone else\"}\n";
    // The copy an interrupted recover left: of these very bytes, or of a state object
    // replaced again since (kept; these bytes go beside it, under their sha256).
    for same in [true, false] {
        let ctx = if same { "same copy" } else { "other copy" };
        let w = World::new(moto);
        let config = w.config("d.yaml", PREFIX, "", "");
        let (op, _, _) = replace_state_after_commit(&w, &config, "io_state_fsync", false);
        let copy = key(&format!(".distributor/replaced/{op}.json"));
        moto.put(&w.bucket, &copy, if same { FOREIGN_STATE } else { earlier });
        // This recover is killed after it rolled forward, before its journal event.
        let r = w.run(
            &["recover", "--json", "--config", path(&config)],
            &[("DISTRIBUTOR_FAILPOINT", "recover_before_event")],
        );
        assert_ne!(r.code, 0, "{ctx}: the failpoint did not stop recover");
        let kept: Vec<(String, &[u8])> = if same {
            vec![(copy.clone(), FOREIGN_STATE)]
        } else {
            vec![
                (copy.clone(), earlier),
                (
                    key(&format!(".distributor/replaced/{op}-{foreign_sha}.json")),
                    FOREIGN_STATE,
                ),
            ]
        };
        // (The journal does not know yet: verify says recovery is pending.)
        assert_rolled_forward(&w, None, &kept, ctx);
        // The next recover finds it finished (its staging is gone) and deletes nothing.
        let r = w.run(&["recover", "--json", "--config", path(&config)], &[]);
        r.expect_code(0);
        assert_eq!(r.json()["operations"][0]["outcome"], "closed", "{ctx}");
        assert_rolled_forward(&w, Some(&config), &kept, ctx);
        let events = events_of(&w, &op);
        let replaced = events
            .iter()
            .find(|(e, _)| e == "state_replaced")
            .unwrap_or_else(|| panic!("{ctx}: no state_replaced event in {events:?}"));
        assert!(replaced.1.contains(&foreign_sha), "{ctx}: {}", replaced.1);
        let b3 = w.env.bundle("b3", "site", "2026-12-02T08:00:00Z", V1, &[]);
        w.publish(&config, &b3, &[]).expect_code(0);
        for (k, b) in &kept {
            assert_eq!(moto.get(&w.bucket, k).as_deref(), Some(*b), "{ctx}: {k}");
        }
    }
}

const LOCK_KEY: &str = "weather/latest/.distributor.lock";

impl World {
    /// The lease object: its ETag and body.
    fn lease(&self) -> Option<(String, Value)> {
        let head = self.moto.head(&self.bucket, LOCK_KEY)?;
        let body = self.moto.get(&self.bucket, LOCK_KEY)?;
        Some((
            head.etag,
            serde_json::from_slice(&body).expect("a lease is JSON"),
        ))
    }

    fn vars(&self) -> Vec<(&str, &str)> {
        self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    /// Waits until the store's own clock says the lease has expired: its `Date` later than
    /// the lease's `Last-Modified` + `lease_seconds` + 10 s. Meanwhile the lease must stay
    /// `etag`. Panics after a few minutes.
    fn wait_until_lease_expired(&self, etag: &str, lease_seconds: i64) {
        let started = Instant::now();
        loop {
            let r = self
                .moto
                .raw_object("HEAD", &self.bucket, LOCK_KEY, &[], &[]);
            assert_eq!(r.status, 200, "the lease is gone");
            assert_eq!(r.header("etag"), Some(etag), "the lease was rewritten");
            let time = |h: &str| {
                chrono::DateTime::parse_from_rfc2822(r.header(h).expect(h))
                    .unwrap_or_else(|e| panic!("{h}: {e}"))
            };
            let (date, modified) = (time("date"), time("last-modified"));
            if date > modified + chrono::Duration::seconds(lease_seconds + 10) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "the store's clock never showed the lease expired"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// This machine as a lease records it: boot id and PID-namespace inode.
fn this_machine() -> (String, u64) {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    (boot.trim().to_string(), ns)
}

fn publish_args<'a>(config: &'a Path, bundle: &'a Path) -> Vec<&'a str> {
    vec![
        "publish",
        "--json",
        "--config",
        path(config),
        "--source",
        path(bundle),
    ]
}

const V3: &[F] = &[("index.html", "<h1>v3</h1>"), ("v3.txt", "three")];

fn each_acquisition_writes_a_lease_with_its_own_nonce_and_etag(server: &'static Moto) {
    let w = World::new(server);
    let config = w.config("d.yaml", PREFIX, "", "");
    let (boot, ns) = this_machine();
    let mut seen = Vec::new();
    for (i, files) in [V1, V2].into_iter().enumerate() {
        let created = format!("2026-12-02T0{}:00:00Z", 6 + i);
        let b = w.env.bundle(&format!("b{i}"), "site", &created, files, &[]);
        // Stopped while it holds the lease, once the lease names its operation.
        let run = PausedRun::start(
            &w.env,
            &publish_args(&config, &b),
            "before_staging_record",
            &w.vars(),
        );
        let (etag, body) = w.lease().expect("no lease while a publication runs");
        assert_eq!(body["pid"], run.pid(), "{body}");
        assert_eq!(body["boot_id"], boot.as_str(), "{body}");
        assert_eq!(body["pid_namespace"], ns, "{body}");
        assert!(body["start_time"].as_u64().is_some(), "{body}");
        assert!(body["operation_id"].is_string(), "{body}");
        let nonce = body["nonce"].as_str().expect("a nonce").to_string();
        uuid::Uuid::parse_str(&nonce).expect("the nonce is a uuid");
        run.resume().expect_code(0);
        assert_eq!(w.lease(), None, "the lease was left after a finished run");
        seen.push((etag, nonce));
    }
    assert_ne!(seen[0].1, seen[1].1, "two acquisitions, one nonce");
    assert_ne!(seen[0].0, seen[1].0, "two acquisitions, one ETag");
}

fn a_lease_left_by_a_killed_holder_on_this_machine_is_taken_over_at_once(server: &'static Moto) {
    let w = World::new(server);
    // The default lease, 60 s: it would expire 70 s after its last write.
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    w.publish(&config, &b1, &[]).expect_code(0);
    let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
    let run = PausedRun::start(
        &w.env,
        &publish_args(&config, &b2),
        "after_journal_append",
        &w.vars(),
    );
    let pid = run.pid();
    let (etag, _) = w.lease().expect("no lease while a publication runs");
    // SIGKILL, and reaped (a zombie would still have its /proc entry).
    drop(run);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(w.lease().map(|l| l.0), Some(etag), "the killed run's lease");
    // The next run, with a journal of its own, takes it at once: a lock timeout far
    // below the lease is enough.
    let b3 = w.env.bundle("b3", "site", "2026-12-02T08:00:00Z", V3, &[]);
    let other = w.env.path("other.sqlite3");
    let mut args = publish_args(&config, &b3);
    args.extend(["--journal", path(&other), "--lock-timeout", "5"]);
    let r = w.run(&args, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older", "{}", r.stdout);
    assert_eq!(w.lease(), None);
    let got: BTreeMap<String, Vec<u8>> =
        w.content().into_iter().map(|(k, (_, c))| (k, c)).collect();
    let want: BTreeMap<String, Vec<u8>> = V3
        .iter()
        .map(|(p, c)| (key(p), c.as_bytes().to_vec()))
        .collect();
    assert_eq!(got, want);
}

fn a_lease_whose_process_is_alive_is_not_taken_over(server: &'static Moto) {
    let w = World::new(server);
    let config = w.config("d.yaml", PREFIX, "", "");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let run = PausedRun::start(
        &w.env,
        &publish_args(&config, &b1),
        "after_journal_append",
        &w.vars(),
    );
    let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
    let other = w.env.path("other.sqlite3");
    let mut args = publish_args(&config, &b2);
    args.extend(["--journal", path(&other), "--lock-timeout", "2"]);
    let r = w.run(&args, &[]);
    r.expect_code(1);
    let held = format!(" pid {} (", run.pid());
    assert!(r.stdout.contains(&held), "{}", r.stdout);
    assert!(
        r.stdout.contains("gave up after 2 s (--lock-timeout)"),
        "{}",
        r.stdout
    );
    run.resume().expect_code(0);
    assert_eq!(w.lease(), None);
    assert_eq!(
        w.state().unwrap()["source"]["created_at"],
        "2026-12-02T06:00:00Z"
    );
}

fn a_lease_of_another_boot_or_namespace_or_an_older_one_is_not_taken_over_early(
    server: &'static Moto,
) {
    let (boot, ns) = this_machine();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    // A pid no process has (above any pid_max).
    let gone_pid = 4_000_000_000u64;
    let lease = |boot: Option<&str>, ns: Option<u64>| {
        let mut v = serde_json::json!({
            "host": host.trim(),
            "pid": gone_pid,
            "actor": "ci",
            "operation_id": null,
            "epoch": 4,
            "lease_seconds": 60,
        });
        if let (Some(boot), Some(ns)) = (boot, ns) {
            v["nonce"] = "4b1c5a53-3f5e-4b8e-9a57-0c0d7c1b2a11".into();
            v["boot_id"] = boot.into();
            v["pid_namespace"] = ns.into();
            v["start_time"] = 12345.into();
        }
        serde_json::to_vec_pretty(&v).unwrap()
    };
    let cases = [
        (
            "another boot",
            lease(Some("f00dfeed-0000-4000-8000-000000000000"), Some(ns)),
            false,
        ),
        (
            "another pid namespace",
            lease(Some(&boot), Some(ns + 1)),
            false,
        ),
        (
            "written before the fields existed",
            lease(None, None),
            false,
        ),
        (
            "this machine, its process gone",
            lease(Some(&boot), Some(ns)),
            true,
        ),
    ];
    for (case, body, taken) in cases {
        let w = World::new(server);
        let config = w.config("d.yaml", PREFIX, "", "");
        let etag = server.put(&w.bucket, LOCK_KEY, &body);
        let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
        let r = w.publish(&config, &b1, &["--lock-timeout", "2"]);
        if taken {
            r.expect_code(0);
            assert_eq!(w.lease(), None, "{case}");
        } else {
            r.expect_code(1);
            let held = format!("held by {} pid {gone_pid} (ci, epoch 4)", host.trim());
            assert!(r.stdout.contains(&held), "{case}: {}", r.stdout);
            assert_eq!(w.lease().map(|l| l.0), Some(etag), "{case}");
            assert_eq!(w.state(), None, "{case}");
        }
    }
}

fn a_holder_past_its_deadline_leaves_its_lease_in_place(server: &'static Moto) {
    let w = World::new(server);
    // lease 14 s: the holder may write for 7 s after it sent its last renewal.
    let config = w.config("d.yaml", PREFIX, "", "      lease_seconds: 14\n");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let run = PausedRun::start(
        &w.env,
        &publish_args(&config, &b1),
        "after_journal_append",
        &w.vars(),
    );
    // Stopped whole, its renewals too.
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &run.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let (etag, _) = w.lease().expect("no lease while a publication runs");
    // Once the store says the lease expired, its holder's deadline (17 s before that, by
    // any clock running at the store's rate) has long passed.
    w.wait_until_lease_expired(&etag, 14);
    signal("-CONT");
    let r = run.resume();
    assert_ne!(r.code, 0, "{}", r.stdout);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("past the 7 s its holder may write for"),
        "{all}"
    );
    // Neither renewed nor deleted: it stays until another run takes it over.
    assert_eq!(w.lease().map(|l| l.0), Some(etag));
    assert_eq!(w.state(), None);
}

fn a_lease_too_short_to_work_is_refused_before_anything_is_written(server: &'static Moto) {
    let w = World::new(server);
    let config = w.config("d.yaml", PREFIX, "", "      lease_seconds: 13\n");
    let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
    let r = w.publish(&config, &b1, &[]);
    r.expect_code(2);
    let all = format!("{}{}", r.stdout, r.stderr);
    let block = match w.moto.kind {
        ServerKind::Azurite => "azure",
        _ => "s3",
    };
    assert!(
        all.contains(&format!(
            "{block}.lease_seconds 13 is too short to publish with"
        )) && all.contains(&format!("set {block}.lease_seconds to 14 or more")),
        "{all}"
    );
    assert!(
        server.list(&w.bucket, "").is_empty(),
        "something was written"
    );
}

/// Moves every object under `.distributor/staging/<op>/` to the name an earlier version
/// used, `.distributor-staging/<op>/`.
fn to_legacy_staging(w: &World, op: &str) {
    let from = key(&format!(".distributor/staging/{op}/"));
    for o in w.moto.list(&w.bucket, &from) {
        let bytes = w.moto.get(&w.bucket, &o.key).unwrap();
        let rest = o.key.strip_prefix(&from).unwrap();
        let to = key(&format!(".distributor-staging/{op}/{rest}"));
        w.moto.put(&w.bucket, &to, &bytes);
        w.moto.delete(&w.bucket, &o.key);
    }
}

/// Staging is `<prefix>/.distributor/staging/<op>/` (SPEC §22); an entry an earlier
/// version left under `<prefix>/.distributor-staging/<op>/` is still read: recovery is
/// due (`status`, `publish`), and `recover`, with any journal, finishes it where it is
/// (forward past its commit decision, else back) and leaves nothing there.
fn an_earlier_versions_staging_is_still_recovered(moto: &'static Moto) {
    for (point, forward) in [("after_journal_commit", true), ("after_staging", false)] {
        let w = World::new(moto);
        let config = w.config("d.yaml", PREFIX, "", "");
        let b1 = w.env.bundle("b1", "site", "2026-12-02T06:00:00Z", V1, &[]);
        w.publish(&config, &b1, &[]).expect_code(0);
        let before = w.objects();
        let b2 = w.env.bundle("b2", "site", "2026-12-02T07:00:00Z", V2, &[]);
        let args = [
            "publish",
            "--json",
            "--config",
            path(&config),
            "--source",
            path(&b2),
        ];
        let r = w.run(&args, &[("DISTRIBUTOR_FAILPOINT", point)]);
        assert_ne!(r.code, 0, "{point}: the failpoint did not stop the run");
        let op = staged_operation(&w);
        to_legacy_staging(&w, &op);
        assert!(
            (w.moto.list(&w.bucket, &key(".distributor/staging/"))).is_empty(),
            "{point}"
        );
        let r = w.run(&["status", "--json", "--config", path(&config)], &[]);
        r.expect_code(4);
        assert!(r.stdout.contains(&op), "{point}: {}", r.stdout);
        let b3 = w.env.bundle("b3", "site", "2026-12-02T08:00:00Z", V1, &[]);
        w.publish(&config, &b3, &[]).expect_code(4);
        let other = w.env.path("other.sqlite3");
        let r = w.run(
            &[
                "recover",
                "--json",
                "--config",
                path(&config),
                "--journal",
                path(&other),
            ],
            &[],
        );
        r.expect_code(0);
        let outcome = if forward {
            "rolled_forward"
        } else {
            "rolled_back"
        };
        assert_eq!(r.json()["summary"][outcome], 1, "{point}: {}", r.stdout);
        for staging in [".distributor-staging/", ".distributor/staging/"] {
            let left = w.moto.list(&w.bucket, &key(staging));
            assert!(left.is_empty(), "{point}: {left:?}");
        }
        if forward {
            let got: BTreeMap<String, Vec<u8>> =
                w.content().into_iter().map(|(k, (_, c))| (k, c)).collect();
            let want: BTreeMap<String, Vec<u8>> = V2
                .iter()
                .map(|(p, c)| (key(p), c.as_bytes().to_vec()))
                .collect();
            assert_eq!(got, want, "{point}");
        } else {
            assert_eq!(
                w.restored(w.objects()),
                w.restored(before.clone()),
                "{point}"
            );
        }
        // Rolled forward, it is logged (SPEC §18) by the recover that finished it.
        let log = w.log();
        assert_eq!(log.len(), if forward { 2 } else { 1 }, "{point}: {log:#?}");
        if forward {
            assert_eq!(log[1]["operation_id"], op.as_str(), "{point}");
            assert!(log[1]["recovered_by"].is_object(), "{point}");
        }
        // The crashed host's own journal closes the operation.
        w.run(&["recover", "--config", path(&config)], &[])
            .expect_code(0);
        assert_eq!(w.log(), log, "{point}: closing it logged nothing");
        w.run(&["verify", "--config", path(&config)], &[])
            .expect_code(0);
    }
}
