//! The destination log of s3 destinations (SPEC §18) and their staging's new name (SPEC
//! §22), against a real S3 protocol server (moto, `tests/common/s3.rs`; the race for a seq
//! on SeaweedFS, whose conditional writes are atomic): one entry
//! `<prefix>/.distributor/log/<seq>.json` per committed publication, with who, what and
//! the state object's sha256 and ETag; the tail found from the journal's last seq, a cold
//! start listing the whole log; `recover` writing the entry of a run killed before it, and
//! never twice; a writer whose seq another operation's entry took stopping with
//! `concurrent_change` and writing nothing further; bad entries named by `log`, `status`
//! and `verify`, and moved out by `log --quarantine`. (An earlier version's
//! `.distributor-staging/<op>/`, recovered and logged: `tests/test_s3.rs`.)

use crate::common::hostile::PausedRun;
use crate::common::s3::{Moto, require_moto, require_seaweedfs, s3_env};
use crate::common::{Env, F, Run};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const PREFIX: &str = "weather/latest";

const V1: &[F] = &[("index.html", "<h1>v1</h1>"), ("old.txt", "to be deleted")];
const V2: &[F] = &[("index.html", "<h1>v2</h1>"), ("new.txt", "new in v2")];

fn key(rel: &str) -> String {
    format!("{PREFIX}/{rel}")
}

fn entry_key(seq: u64) -> String {
    key(&format!(".distributor/log/{seq:020}.json"))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One bucket, one config with the destination `site` at `s3://<bucket>/weather/latest`.
struct World {
    env: Env,
    moto: &'static Moto,
    bucket: String,
    vars: Vec<(&'static str, String)>,
    config: PathBuf,
}

impl World {
    fn new(moto: &'static Moto) -> World {
        let env = Env::new();
        let bucket = moto.fresh_bucket();
        let config = env.config(
            "d.yaml",
            &format!(
                "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: site\n    backend: s3\n    path: s3://{bucket}/{PREFIX}\n    s3:\n      endpoint: {}\n      allow_http: true\n",
                moto.endpoint
            ),
        );
        World {
            env,
            moto,
            bucket,
            vars: s3_env(moto),
            config,
        }
    }

    fn env_vars(&self) -> Vec<(&str, &str)> {
        self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut env = self.env_vars();
        env.extend_from_slice(extra);
        self.env.run_env(args, &env)
    }

    /// `<command> --config d.yaml` plus `extra`.
    fn cmd(&self, command: &str, extra: &[&str]) -> Run {
        let mut args = vec![command, "--config", path(&self.config)];
        args.extend_from_slice(extra);
        self.run(&args, &[])
    }

    fn bundle(&self, name: &str, hour: u32, files: &[F]) -> PathBuf {
        self.env.bundle(
            name,
            "site",
            &format!("2026-12-02T{hour:02}:00:00Z"),
            files,
            &[],
        )
    }

    fn publish_args<'a>(&'a self, bundle: &'a Path) -> Vec<&'a str> {
        vec![
            "publish",
            "--json",
            "--config",
            path(&self.config),
            "--source",
            path(bundle),
        ]
    }

    /// Publishes `bundle` (with `extra` arguments, e.g. `--journal`); its report.
    fn publish(&self, bundle: &Path, extra: &[&str]) -> Run {
        let mut args = self.publish_args(bundle);
        args.extend_from_slice(extra);
        self.run(&args, &[])
    }

    /// The keys under `rel/` (a folder under the prefix).
    fn keys(&self, rel: &str) -> Vec<String> {
        (self
            .moto
            .list(&self.bucket, &key(&format!("{rel}/")))
            .into_iter())
        .map(|o| o.key)
        .collect()
    }

    /// The log's entries as stored, oldest first (not their path lists).
    fn log(&self) -> Vec<Value> {
        (self.keys(".distributor/log").iter())
            .filter(|k| k.ends_with(".json"))
            .map(|k| serde_json::from_slice(&self.moto.get(&self.bucket, k).unwrap()).unwrap())
            .collect()
    }

    /// The operation whose staging entry is under `.distributor/staging/` (one).
    fn staged_operation(&self) -> String {
        let staging = key(".distributor/staging/");
        let mut ops: Vec<String> = (self.keys(".distributor/staging").iter())
            .filter_map(|k| Some(k.strip_prefix(&staging)?.split('/').next()?.to_string()))
            .collect();
        ops.dedup();
        assert_eq!(ops.len(), 1, "staging holds {ops:?}");
        ops.remove(0)
    }
}

fn op_of(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    distributor::hash::hex(&sha2::Sha256::digest(bytes))
}

/// A well-formed entry that names `seq` and operation `op`, as another writer would make.
fn entry_of(seq: u64, op: &str) -> Vec<u8> {
    serde_json::to_vec_pretty(&json!({
        "log_format_version": 1,
        "seq": seq,
        "operation_id": op,
        "command": "publish",
        "decision": "create",
        "pipeline_id": "other",
        "destination_id": "elsewhere",
        "actor": "cli:someone-else",
        "host": "another-host",
        "counts": {"written": 1, "deleted": 0, "unchanged": 0, "bytes_written": 1},
        "started_at": "2026-12-04T00:00:00Z",
        "committed_at": "2026-12-04T00:00:01Z"
    }))
    .unwrap()
}

/// Every committed publication adds one entry, numbered from 1, with who, what, the
/// state before and the state object written (sha256 and ETag); unchanged and refused
/// publications add none; `log` prints them, `--jsonl` one object per line; staging
/// lives under `.distributor/staging/` and is gone once the operation is finished.
#[test]
fn every_committed_publication_adds_one_entry_in_order() {
    let moto = require_moto!();
    let w = World::new(moto);
    let first = w.publish(&w.bundle("b1", 6, V1), &[]);
    first.expect_code(0);
    let state1 = w.moto.get(&w.bucket, &key(".distributor.json")).unwrap();
    // Unchanged: no entry.
    w.publish(&w.bundle("b1", 6, V1), &[]).expect_code(0);
    // Refused (an unmanaged object where the bundle puts a file): no entry.
    w.moto.put(&w.bucket, &key("new.txt"), b"not distributor's");
    let refused = w.publish(&w.bundle("b2", 7, V2), &[]);
    refused.expect_code(3);
    w.moto.delete(&w.bucket, &key("new.txt"));
    let second = w.publish(&w.bundle("b2", 7, V2), &[]);
    second.expect_code(0);
    let state2 = w.moto.get(&w.bucket, &key(".distributor.json")).unwrap();
    let etag2 = w
        .moto
        .head(&w.bucket, &key(".distributor.json"))
        .unwrap()
        .etag;

    let paths_key = |seq: u64| key(&format!(".distributor/log/{seq:020}.paths.jsonl"));
    assert_eq!(
        w.keys(".distributor/log"),
        [entry_key(1), paths_key(1), entry_key(2), paths_key(2)],
        "one entry (and its path list) per committed publication"
    );
    let log = w.log();
    let (e1, e2) = (&log[0], &log[1]);
    for (i, (e, r)) in [(e1, &first), (e2, &second)].into_iter().enumerate() {
        assert_eq!(e["log_format_version"], 1);
        assert_eq!(e["seq"], i as u64 + 1);
        assert_eq!(e["operation_id"], op_of(r).as_str());
        assert_eq!(e["command"], "publish");
        assert_eq!(e["pipeline_id"], "weather");
        assert_eq!(e["destination_id"], "site");
        assert_eq!(e["actor"], "cli:tester");
        assert!(e["host"].as_str().is_some_and(|h| !h.is_empty()), "{e}");
        let jid = e["journal_id"].as_str().expect("journal_id");
        assert!(uuid::Uuid::parse_str(jid).is_ok(), "{jid}");
        assert!(e.get("recovered_by").is_none(), "{e}");
    }
    assert_eq!(e1["decision"], "create");
    assert!(e1.get("pre_state_sha256").is_none(), "{e1}");
    assert_eq!(e1["post_state_sha256"], sha256_hex(&state1).as_str());
    assert_eq!(e1["counts"]["written"], 2);
    assert_eq!(e2["decision"], "replace_older");
    assert_eq!(e2["source"]["created_at"], "2026-12-02T07:00:00Z");
    assert_eq!(e2["previous_source"]["created_at"], "2026-12-02T06:00:00Z");
    assert_eq!(e2["pre_state_sha256"], sha256_hex(&state1).as_str());
    // The state object written (the planned post-state with each output's ETag).
    assert_eq!(e2["post_state_sha256"], sha256_hex(&state2).as_str());
    assert_eq!(e2["post_state_etag"], etag2.as_str());
    assert_eq!(e2["counts"]["written"], 2);
    assert_eq!(e2["counts"]["deleted"], 1);
    assert_eq!(e1["journal_id"], e2["journal_id"]);
    for k in w.keys(".distributor/log") {
        let size = w.moto.head(&w.bucket, &k).unwrap().size;
        assert!(size < 4096, "{k}: {size} bytes");
    }
    // Staging: the new name only, and nothing left of it.
    assert!(w.keys(".distributor/staging").is_empty());
    assert!(w.keys(".distributor-staging").is_empty());

    // The log is not content: status and verify are clean.
    w.cmd("status", &[]).expect_code(0);
    w.cmd("verify", &[]).expect_code(0);
    let r = w.cmd("log", &[]);
    r.expect_code(0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "destination site (s3://{}/{PREFIX}/.distributor/log):",
            w.bucket
        ),
        "{}",
        r.stdout
    );
    assert_eq!(lines.len(), 3, "{}", r.stdout);
    assert!(lines[2].contains(&op_of(&second)), "{}", r.stdout);
    let r = w.cmd("log", &["--jsonl"]);
    r.expect_code(0);
    let objs: Vec<Value> = (r.stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objs, log, "--jsonl prints the entries as stored");
    let r = w.cmd("log", &["--jsonl", "--limit", "1"]);
    r.expect_code(0);
    assert_eq!(r.stdout.lines().count(), 1);
    assert!(r.stdout.contains(&op_of(&second)));
}

/// The journal keeps where the log ended (SPEC §18 "Finding the tail"): the next writer
/// lists from there. Entries another journal wrote since are found from there too; a
/// remembered entry that is gone (moved to quarantine) makes the writer list the whole
/// log, and a quarantined number is not taken again.
#[test]
fn the_tail_comes_from_the_journal_and_a_cold_start_lists_the_whole_log() {
    let moto = require_moto!();
    let w = World::new(moto);
    let other = w.env.path("other.sqlite3");
    let tails = |journal: &Path| -> Vec<(String, u64)> {
        let c = rusqlite::Connection::open(journal).unwrap();
        let mut st = c
            .prepare("SELECT location, seq FROM journal_log_tails ORDER BY id")
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    // This host, the other, this one again: 1, 2, 3, each journal's tail its own last.
    let a = w.publish(&w.bundle("b1", 1, V1), &[]);
    a.expect_code(0);
    let b = w.publish(&w.bundle("b2", 2, V2), &["--journal", path(&other)]);
    b.expect_code(0);
    let c = w.publish(&w.bundle("b3", 3, V1), &[]);
    c.expect_code(0);
    let location = format!("{}|s3://{}/{PREFIX}", moto.endpoint, w.bucket);
    assert_eq!(
        tails(&w.env.journal()),
        [(location.clone(), 1), (location.clone(), 3)]
    );
    assert_eq!(tails(&other), [(location.clone(), 2)]);
    let ops: Vec<Value> = w.log().iter().map(|e| e["operation_id"].clone()).collect();
    assert_eq!(ops, [op_of(&a), op_of(&b), op_of(&c)]);

    // Entry 3, which this journal remembers, moves to quarantine (and entry 4 records
    // that): this journal's next writer does not find 3, lists everything, and takes 5.
    let r = w.cmd("log", &["--quarantine", "3"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("entry 4 records the move"),
        "{}",
        r.stdout
    );
    let d = w.publish(&w.bundle("b4", 4, V2), &[]);
    d.expect_code(0);
    let log = w.log();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 4, 5]);
    assert_eq!(log[2]["command"], "quarantine");
    assert_eq!(log[2]["quarantined_seq"], 3);
    assert_eq!(log[3]["operation_id"], op_of(&d).as_str());
    assert_eq!(tails(&w.env.journal()).last().unwrap().1, 5);
    w.cmd("log", &[]).expect_code(0);
    w.cmd("verify", &[]).expect_code(0);
}

/// A run killed after its commit point and before its entry leaves that entry the
/// missing last one: recovery is due, and `recover` (here on "another host": a fresh
/// journal) writes it with the operation's own actor and host and `recovered_by`. A run
/// killed after its entry and before its staging went gets no second entry from
/// `recover`.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_writes_the_missing_last_entry_once() {
    let moto = require_moto!();
    let w = World::new(moto);
    let first = w.publish(&w.bundle("b1", 1, V1), &[]);
    first.expect_code(0);
    let b2 = w.bundle("b2", 2, V2);
    let r = w.run(
        &w.publish_args(&b2),
        &[("DISTRIBUTOR_FAILPOINT", "s3_before_log_entry")],
    );
    assert_ne!(r.code, 0, "the failpoint did not stop the run");
    let op = w.staged_operation();
    assert_eq!(w.log().len(), 1, "no entry yet");
    w.cmd("verify", &[]).expect_code(4);
    let other = w.env.path("other.sqlite3");
    let r = w.cmd("recover", &["--json", "--journal", path(&other)]);
    r.expect_code(0);
    assert_eq!(r.json()["summary"]["rolled_forward"], 1, "{}", r.stdout);
    let log = w.log();
    assert_eq!(log.len(), 2, "{log:#?}");
    let e = &log[1];
    assert_eq!(e["seq"], 2);
    assert_eq!(e["operation_id"], op.as_str());
    assert_eq!(e["actor"], "cli:tester");
    assert_eq!(e["decision"], "replace_older");
    assert_eq!(
        e["journal_id"], log[0]["journal_id"],
        "the journal that ran it"
    );
    assert!(e["recovered_by"].is_object(), "{e}");
    let state = w.moto.get(&w.bucket, &key(".distributor.json")).unwrap();
    assert_eq!(e["post_state_sha256"], sha256_hex(&state).as_str());
    assert!(w.keys(".distributor/staging").is_empty());
    // The crashed host's own journal closes the operation; nothing is logged twice.
    w.cmd("recover", &[]).expect_code(0);
    assert_eq!(w.log().len(), 2);
    w.cmd("verify", &[]).expect_code(0);

    // Killed after the entry, before the staging entry went: `recover` finishes the
    // cleanup and finds the entry there.
    let b3 = w.bundle("b3", 3, V1);
    let r = w.run(
        &w.publish_args(&b3),
        &[("DISTRIBUTOR_FAILPOINT", "during_cleanup")],
    );
    assert_ne!(r.code, 0, "the failpoint did not stop the run");
    let op3 = w.staged_operation();
    assert_eq!(w.log().len(), 3);
    w.cmd("recover", &[]).expect_code(0);
    let log = w.log();
    assert_eq!(log.len(), 3, "{log:#?}");
    assert_eq!(log[2]["operation_id"], op3.as_str());
    assert!(
        log[2].get("recovered_by").is_none(),
        "written by the run itself"
    );
    assert!(w.keys(".distributor/staging").is_empty());
    w.cmd("verify", &[]).expect_code(0);
}

/// Two writers racing for one seq (SPEC §18): the publication stands just before it
/// creates its entry (the tail listed: seq 2) while another operation's entry takes
/// seq 2. Its create is refused; it reads what is there, stops with `concurrent change`,
/// and writes nothing further; its staging entry stays, and `recover` logs it after
/// the entry that won. When what took the seq is the operation's own entry (a retried
/// create), it is written and the run finishes.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_writer_whose_seq_another_entry_took_stops_with_concurrent_change() {
    let server = require_seaweedfs!();
    let w = World::new(server);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    let b2 = w.bundle("b2", 2, V2);
    let vars = w.env_vars();
    let paused = PausedRun::start(&w.env, &w.publish_args(&b2), "s3_before_log_entry", &vars);
    let op = w.staged_operation();
    let theirs = entry_of(2, "7d4c8e0a-0000-4000-8000-000000000002");
    w.moto.put(&w.bucket, &entry_key(2), &theirs);
    let r = paused.resume();
    r.expect_code(1);
    let message = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(message.contains("concurrent change"), "{message}");
    assert!(message.contains(&entry_key(2)), "{message}");
    assert!(message.contains("passed its commit point"), "{message}");
    // Nothing further: the entry that won stays as it was, no entry 3, staging kept.
    assert_eq!(w.moto.get(&w.bucket, &entry_key(2)).unwrap(), theirs);
    assert_eq!(w.log().len(), 2);
    assert_eq!(w.staged_operation(), op);
    let r = w.cmd("recover", &["--json"]);
    r.expect_code(0);
    let log = w.log();
    assert_eq!(log.len(), 3, "{log:#?}");
    assert_eq!(log[2]["operation_id"], op.as_str());
    assert!(log[2]["recovered_by"].is_object());
    w.cmd("verify", &[]).expect_code(0);

    // The seq taken by this operation's own entry: written, and the run finishes.
    let b3 = w.bundle("b3", 3, V1);
    let paused = PausedRun::start(&w.env, &w.publish_args(&b3), "s3_before_log_entry", &vars);
    let op = w.staged_operation();
    let mut own: Value = serde_json::from_slice(&entry_of(4, &op)).unwrap();
    own["command"] = json!("publish");
    let own = serde_json::to_vec_pretty(&own).unwrap();
    w.moto.put(&w.bucket, &entry_key(4), &own);
    let r = paused.resume();
    r.expect_code(0);
    assert_eq!(w.moto.get(&w.bucket, &entry_key(4)).unwrap(), own);
    assert_eq!(w.log().len(), 4);
    assert!(w.keys(".distributor/staging").is_empty());
}

/// Bad entries (SPEC §18): a torn one, one naming another seq, one after a missing
/// number are errors naming their keys in `log` (exit 1, the believed entries still
/// printed), `status` and `verify` (exit 1). `log --quarantine SEQ` moves one out under
/// the lease and logs the move; the log is whole again.
#[test]
fn bad_entries_are_named_and_quarantine_moves_them_out() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    w.publish(&w.bundle("b2", 2, V2), &[]).expect_code(0);
    w.moto
        .put(&w.bucket, &entry_key(3), b"{\"log_format_version\": 1");
    let r = w.cmd("log", &[]);
    r.expect_code(1);
    assert!(r.stdout.contains(&entry_key(3)), "{}", r.stdout);
    assert!(r.stdout.contains("torn or not an entry"), "{}", r.stdout);
    let r = w.cmd("log", &["--jsonl"]);
    r.expect_code(1);
    assert_eq!(
        r.stdout.lines().count(),
        2,
        "the believed entries still print"
    );
    assert!(r.stderr.contains(&entry_key(3)), "{}", r.stderr);
    for command in ["status", "verify"] {
        let r = w.cmd(command, &[]);
        r.expect_code(1);
        assert!(
            r.stdout.contains(&entry_key(3)) || r.stderr.contains(&entry_key(3)),
            "{command}: {}{}",
            r.stdout,
            r.stderr
        );
    }
    let r = w.cmd("status", &["--json"]);
    let status = r.json();
    let text = status.to_string();
    assert!(text.contains("log_error"), "{text}");

    let r = w.cmd("log", &["--quarantine", "3"]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("entry 4 records the move"),
        "{}",
        r.stdout
    );
    assert_eq!(
        w.moto
            .get(
                &w.bucket,
                &key(".distributor/quarantine/00000000000000000003.json")
            )
            .unwrap(),
        b"{\"log_format_version\": 1"
    );
    assert!(w.moto.get(&w.bucket, &entry_key(3)).is_none());
    w.cmd("log", &[]).expect_code(0);
    w.cmd("status", &[]).expect_code(0);
    w.cmd("verify", &[]).expect_code(0);
    let r = w.cmd("log", &["--quarantine", "3"]);
    r.expect_code(2);
    assert!(r.stderr.contains("holds no entry 3"), "{}", r.stderr);

    // An entry naming another seq, and one after a missing number.
    w.moto.put(&w.bucket, &entry_key(5), &entry_of(9, "a"));
    w.moto.put(&w.bucket, &entry_key(7), &entry_of(7, "b"));
    let r = w.cmd("log", &[]);
    r.expect_code(1);
    let errors: Vec<&str> = r.stdout.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 2, "{}", r.stdout);
    assert!(
        errors[0].contains(&entry_key(5)) && errors[0].contains("it says seq 9"),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].contains(&entry_key(7)) && errors[1].contains("a number is missing"),
        "{}",
        errors[1]
    );
    w.cmd("verify", &[]).expect_code(1);
}

/// A run killed before its entry while the newest entry is bad: `recover` cannot tell
/// whether the operation is logged, says which entry stops it, and leaves the operation
/// for after the entry is moved out (SPEC §18: nothing that depends on a bad entry goes on
/// silently).
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_stops_at_a_bad_last_entry_until_it_is_quarantined() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    let b2 = w.bundle("b2", 2, V2);
    let r = w.run(
        &w.publish_args(&b2),
        &[("DISTRIBUTOR_FAILPOINT", "s3_before_log_entry")],
    );
    assert_ne!(r.code, 0);
    let op = w.staged_operation();
    w.moto.put(&w.bucket, &entry_key(2), b"torn");
    let r = w.cmd("recover", &["--json"]);
    r.expect_code(1);
    let m = r.json()["operations"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    let bad = format!(
        "not recovered: bad log entry s3://{}/{}: torn or not an entry",
        w.bucket,
        entry_key(2)
    );
    assert!(m.starts_with(&bad), "{m}");
    assert!(
        m.ends_with(&format!(
            "so whether operation {op} is logged cannot be told, and its entry is not written: inspect it, then `distributor log --quarantine 2` moves it out of the log"
        )),
        "{m}"
    );
    assert_eq!(
        w.staged_operation(),
        op,
        "staging stays for the next recover"
    );
    w.cmd("log", &["--quarantine", "2"]).expect_code(0);
    w.cmd("recover", &[]).expect_code(0);
    let log = w.log();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 3, 4]);
    assert_eq!(log[2]["operation_id"], op.as_str());
    w.cmd("verify", &[]).expect_code(0);
}

/// `verify` reports `log_mismatch` on s3 too (SPEC §18): the state object names an
/// operation the log's last state-changing entry does not.
#[test]
fn verify_reports_a_state_object_the_log_does_not_name() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 6, &[("a.txt", "1")]), &[])
        .expect_code(0);
    let v = w.cmd("verify", &["--json"]);
    v.expect_code(0);
    assert!(!v.stdout.contains("log_mismatch"), "{}", v.stdout);
    // Someone rewrites the state object with another operation id.
    let state_key = key(".distributor.json");
    let mut state: Value =
        serde_json::from_slice(&moto.get(&w.bucket, &state_key).unwrap()).unwrap();
    state["operation_id"] = json!("00000000-0000-4000-8000-00000000beef");
    moto.put(
        &w.bucket,
        &state_key,
        &serde_json::to_vec_pretty(&state).unwrap(),
    );
    let v = w.cmd("verify", &["--json"]);
    v.expect_code(3);
    assert!(v.stdout.contains("log_mismatch"), "{}", v.stdout);
}

/// A publication of what is already there (`unchanged`) while an operation is committed
/// but not logged yet is `recovery required` (exit 4) on an object store, as a writing
/// one is (docs/operations.md, "Recovery"): reporting `unchanged` would leave the log
/// short of the state until someone ran `recover`. After `recover` it is `unchanged`.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn an_unchanged_publication_is_recovery_required_while_an_operation_is_unlogged() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    let b2 = w.bundle("b2", 2, V2);
    let r = w.run(
        &w.publish_args(&b2),
        &[("DISTRIBUTOR_FAILPOINT", "s3_before_log_entry")],
    );
    assert_ne!(r.code, 0, "the failpoint did not stop the run");
    let op = w.staged_operation();
    assert_eq!(w.log().len(), 1, "operation {op} is committed, not logged");
    for args in [vec![], vec!["--dry-run"]] {
        let r = w.publish(&b2, &args);
        r.expect_code(4);
        assert!(
            r.stdout.contains("recovery required") && r.stdout.contains(&op),
            "{args:?}: {}",
            r.stdout
        );
    }
    assert_eq!(w.log().len(), 1, "nothing was written");
    w.cmd("recover", &[]).expect_code(0);
    assert_eq!(w.log().len(), 2);
    let r = w.publish(&b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
}

/// Runs the binary as [`World::run`] does, killed after `secs` (a run that never ends is
/// the bug this guards against, so the test must end either way).
fn run_bounded(w: &World, args: &[&str], secs: u32) -> Run {
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg("--signal=KILL")
        .arg(secs.to_string())
        .arg(env!("CARGO_BIN_EXE_distributor"))
        .args(args)
        .env_clear()
        .env("HOME", w.env.path("home"))
        .env("USER", "tester")
        .env("DISTRIBUTOR_ACTOR", "tester")
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DISTRIBUTOR_JOURNAL", w.env.journal());
    for (k, v) in w.env_vars() {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run distributor");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A planted entry named with a seq no writer makes (`18446744073709551615.json`, the
/// largest u64: the next seq wrapped to 0) is a bad entry, named by `log`, `status` and
/// `verify`, never counted in the numbering: the publication it would have stranded is
/// logged by `recover` at the next real seq, in bounded time, and later ones go on from
/// there. `log --quarantine` moves it out.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_seq_at_or_above_ten_to_the_nineteenth_is_a_bad_entry_and_never_wraps_the_log() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    let planted = key(&format!(".distributor/log/{}.json", u64::MAX));
    w.moto
        .put(&w.bucket, &planted, &entry_of(u64::MAX, "planted"));
    let b2 = w.bundle("b2", 2, V2);
    let r = w.run(
        &w.publish_args(&b2),
        &[("DISTRIBUTOR_FAILPOINT", "s3_before_log_entry")],
    );
    assert_ne!(r.code, 0, "the failpoint did not stop the run");
    let op = w.staged_operation();
    let r = run_bounded(&w, &["recover", "--json", "--config", path(&w.config)], 300);
    r.expect_code(0);
    let log = w.log();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, u64::MAX], "{log:#?}");
    assert_eq!(log[1]["operation_id"], op.as_str());
    assert!(
        w.moto
            .get(
                &w.bucket,
                &key(".distributor/log/00000000000000000000.json")
            )
            .is_none(),
        "the numbering wrapped"
    );
    let r = w.cmd("log", &[]);
    r.expect_code(1);
    assert!(
        r.stdout.contains(&planted) && r.stdout.contains("at or above 10^19"),
        "{}",
        r.stdout
    );
    for command in ["status", "verify"] {
        let r = w.cmd(command, &[]);
        r.expect_code(1);
        assert!(
            r.stdout.contains(&planted) || r.stderr.contains(&planted),
            "{command}: {}{}",
            r.stdout,
            r.stderr
        );
    }
    let r = w.publish(&w.bundle("b3", 3, V1), &[]);
    r.expect_code(0);
    assert_eq!(w.log()[2]["seq"], 3, "the next seq after the real tail");
    let r = w.cmd("log", &["--quarantine", &u64::MAX.to_string()]);
    r.expect_code(0);
    assert!(
        r.stdout.contains("entry 4 records the move"),
        "{}",
        r.stdout
    );
    w.cmd("log", &[]).expect_code(0);
    w.cmd("verify", &[]).expect_code(0);
}

/// The hash chain on s3 (docs/operations.md, "The hash chain"): each entry carries the
/// sha256 of the previous entry object's bytes; an entry rewritten under its key is
/// `log_chain_broken` (exit 3) naming the entry after it.
#[test]
fn the_log_is_a_hash_chain_on_s3_too() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    w.publish(&w.bundle("b2", 2, V2), &[]).expect_code(0);
    w.publish(&w.bundle("b3", 3, V1), &[]).expect_code(0);
    let log = w.log();
    assert_eq!(log[0]["prev_entry_sha256"], Value::Null);
    for seq in [2u64, 3] {
        let before = w.moto.get(&w.bucket, &entry_key(seq - 1)).unwrap();
        assert_eq!(
            log[seq as usize - 1]["prev_entry_sha256"],
            sha256_hex(&before).as_str()
        );
    }
    w.cmd("verify", &[]).expect_code(0);
    let bytes = w.moto.get(&w.bucket, &entry_key(2)).unwrap();
    let edited = String::from_utf8(bytes)
        .unwrap()
        .replace("cli:tester", "cli:mallory");
    w.moto.put(&w.bucket, &entry_key(2), edited.as_bytes());
    let r = w.cmd("verify", &["--json"]);
    r.expect_code(3);
    let m = r.dest(0)["log_chain_broken"].as_str().unwrap().to_string();
    assert!(
        m.starts_with("entry 3 says") && m.contains("entry 2 was changed"),
        "{m}"
    );
}

/// Path lists on s3: `blame --destination-only` with the journal deleted gives the same
/// owner, source, operation and actor as `blame` with it; a path list object rewritten
/// under its key is refused by the sha256 its entry names.
#[test]
fn blame_from_the_destination_alone_on_s3() {
    let moto = require_moto!();
    let w = World::new(moto);
    w.publish(&w.bundle("b1", 1, V1), &[]).expect_code(0);
    w.publish(&w.bundle("b2", 2, V2), &[]).expect_code(0);
    let answers = |extra: &[&str]| -> Vec<(String, String, String, String)> {
        let r = w.cmd("blame", &[&["--jsonl"], extra, &["**"]].concat());
        r.expect_code(0);
        (r.stdout.lines())
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|b| {
                (
                    b["path"].as_str().unwrap().to_string(),
                    b["owner"].as_str().unwrap_or_default().to_string(),
                    b["last"]["operation_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    b["last"]["actor"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let with = answers(&[]);
    assert_eq!(with.len(), 3, "{with:?}");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", w.env.journal().display()));
    }
    assert_eq!(answers(&["--destination-only"]), with);
    let list = key(".distributor/log/00000000000000000002.paths.jsonl");
    let bytes = w.moto.get(&w.bucket, &list).expect("a path list");
    let mut edited = bytes.clone();
    edited.extend_from_slice(b"{\"path\":\"planted\",\"what\":\"file_create\"}\n");
    w.moto.put(&w.bucket, &list, &edited);
    let r = w.cmd("blame", &["--destination-only", "**"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("path list refused"), "{}", r.stderr);
}
