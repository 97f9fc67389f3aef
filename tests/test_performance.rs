//! What makes publication fast, checked for behaviour (never for time; timings live in
//! `benches/publish.sh`): a republication proves content by placement fingerprints and
//! neither rehashes nor waits for the lock, the journal's work does not grow with the
//! number of files, staging on several threads places every file, and the progress bar
//! never reaches a stderr that is not a terminal.

use crate::common::Env;
use std::path::Path;

/// `n` files of a few bytes in `dirs` directories.
fn many(n: usize, dirs: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            (
                format!("d{}/f{i:05}.txt", i % dirs),
                format!("content of file {i}\n"),
            )
        })
        .collect()
}

fn bundle_of(
    env: &Env,
    rel: &str,
    created_at: &str,
    files: &[(String, String)],
) -> std::path::PathBuf {
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    env.bundle(rel, "many", created_at, &refs, &[])
}

fn hold_lock(bundle: &Path) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(bundle.join(".distributor.lock"))
        .unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
    f
}

#[test]
fn staging_on_several_threads_places_every_file_byte_for_byte() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let files = many(600, 7);
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &files);
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.json()["summary"]["files_written"], 600);
    for (p, c) in &files {
        assert_eq!(&env.read(&format!("dest/{p}")), c, "{p}");
    }
    assert!(!env.staging_left("dest"));
}

#[test]
fn a_staging_failure_rolls_back_every_file_staged_on_any_thread() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let files = many(300, 5);
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &files);
    // One file changes after the manifest was written, keeping its size.
    env.write("b/d3/f00123.txt", "CONTENT OF FILE 123\n");
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(1);
    assert!(
        r.dest(0)["message"]
            .as_str()
            .unwrap()
            .contains("d3/f00123.txt"),
        "{}",
        r.stdout
    );
    let left: Vec<_> = env
        .snapshot("dest")
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p != ".distributor" && p != ".distributor/staging")
        .collect();
    assert_eq!(
        left,
        vec![".distributor.lock".to_string()],
        "nothing but the lock file stays"
    );
}

/// Placement fingerprints (SPEC §5.4, §13) prove unchanged content without reading it: a
/// republication hashes nothing. A change in place that keeps size, mtime and inode still
/// changes the ctime, so that file alone is hashed, found changed, and repaired.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn republication_trusts_placement_fingerprints_and_does_not_rehash() {
    fingerprints_vouch(false);
}

/// The same with a manifest whose outputs are not sorted by path (`distributor manifest`
/// sorts them; producers writing their own may not): the outputs published again are
/// matched with the recorded ones another way, with the same result.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn fingerprints_vouch_for_the_outputs_of_an_unsorted_manifest_too() {
    fingerprints_vouch(true);
}

fn fingerprints_vouch(unsorted: bool) {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &many(20, 2));
    if unsorted {
        let path = b.join("distributor-manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        m["outputs"].as_array_mut().unwrap().reverse();
        std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    }
    env.publish(&cfg, &b, &[]).expect_code(0);
    // Which files the probe hashes, from the failpoint log.
    let log = env.path("probe.log");
    let hashed = |r: &crate::common::Run| {
        let n = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == "probe_hash")
            .count();
        let _ = std::fs::remove_file(&log);
        (r.decision(), n)
    };
    let logged = [("DISTRIBUTOR_FAILPOINT_LOG", log.to_str().unwrap())];
    let publish = |env: &Env| {
        env.run_env(
            &[
                "publish",
                "--json",
                "--config",
                cfg.to_str().unwrap(),
                "--source",
                b.to_str().unwrap(),
            ],
            &logged,
        )
    };
    let r = publish(&env);
    r.expect_code(0);
    assert_eq!(
        hashed(&r),
        ("unchanged".into(), 0),
        "the fingerprints vouched; nothing was read"
    );
    let dry = env.run_env(
        &[
            "plan",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &logged,
    );
    assert_eq!(
        hashed(&dry),
        ("unchanged".into(), 0),
        "a dry run proves unchanged files by the journal's fingerprints too (read only)"
    );
    // Changed in place, size, mtime and inode kept: the ctime gives it away, and only that
    // file is hashed (once by the look outside the lock, once by the plan under it).
    let placed = env.path("dest/d1/f00001.txt");
    let mtime = std::fs::symlink_metadata(&placed)
        .unwrap()
        .modified()
        .unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&placed)
        .unwrap();
    use std::io::Write;
    (&f).write_all(b"CONTENT OF FILE 1\n").unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    // The dry run sees it too, and hashes only that file.
    let dry = env.run_env(
        &[
            "plan",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &logged,
    );
    assert_eq!(hashed(&dry), ("repair".into(), 1));
    let r = publish(&env);
    r.expect_code(0);
    assert_eq!(hashed(&r), ("repair".into(), 2));
    assert_eq!(env.read("dest/d1/f00001.txt"), "content of file 1\n");
    // The repaired file's new fingerprint vouches again.
    let r = publish(&env);
    assert_eq!(hashed(&r), ("unchanged".into(), 0));
}

/// A republication of more files than one probe chunk (16,384) is decided chunk by chunk
/// (`docs/internal/publish.md`, "Republications"): unchanged, it reports every file from
/// the manifest; a file rewritten in place, or a directory swapped for a symlink to an
/// identical copy, in the last chunk is found as surely as in the first.
#[test]
fn a_republication_larger_than_a_probe_chunk_finds_drift_in_its_last_chunk() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let files = many(16_500, 20);
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &files);
    env.publish(&cfg, &b, &[]).expect_code(0);
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
    let rows = r.dest(0)["files"].as_array().unwrap().clone();
    assert_eq!(rows.len(), files.len(), "every file is reported");
    assert!(rows.iter().all(|f| f["op"] == "unchanged"));
    let manifest: serde_json::Value =
        serde_json::from_str(&env.read("b/distributor-manifest.json")).unwrap();
    let mut row = rows[16_400].clone();
    row.as_object_mut().unwrap().remove("op");
    assert_eq!(
        row, manifest["outputs"][16_400],
        "path, size, sha256 as listed"
    );

    // The last file in path order, rewritten in place with its size and mtime kept.
    let mut paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    paths.sort();
    let last = *paths.last().unwrap();
    let placed = env.path(&format!("dest/{last}"));
    let mtime = std::fs::metadata(&placed).unwrap().modified().unwrap();
    let original = std::fs::read(&placed).unwrap();
    let mut forged = original.clone();
    forged[0] ^= 1;
    std::fs::write(&placed, &forged).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&placed)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "repair");
    let report = r.dest(0);
    let rewritten: Vec<&str> = (report["files"].as_array().unwrap().iter())
        .filter(|f| f["op"] != "unchanged")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(rewritten, [last]);
    assert_eq!(std::fs::read(&placed).unwrap(), original);

    // The last directory swapped for a symlink to a copy holding the very same files.
    let dir = last.split_once('/').unwrap().0;
    let real = env.path(&format!("dest/{dir}"));
    let copy = env.path("copy");
    std::fs::rename(&real, &copy).unwrap();
    std::os::unix::fs::symlink(&copy, &real).unwrap();
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(3);
    let kinds = r.conflict_kinds();
    assert!(
        !kinds.is_empty() && kinds.iter().all(|k| k == "unsafe_storage"),
        "{kinds:?}"
    );
    assert_eq!(
        std::fs::read(copy.join(last.split_once('/').unwrap().1)).unwrap(),
        original
    );
}

#[test]
fn an_unchanged_republication_does_not_wait_for_the_lock() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &many(10, 2));
    env.publish(&cfg, &b, &[]).expect_code(0);
    let lock = hold_lock(&env.path("dest"));
    let r = env.publish(&cfg, &b, &["--lock-timeout", "0"]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
    assert_eq!(r.dest(0)["status"], "skipped");
    // A publication that writes still waits for it (planning only under it, as the state
    // rules `unchanged` out), and a timeout still reports what it would have done.
    let b2 = bundle_of(&env, "b2", "2026-12-02T07:00:00Z", &many(10, 2));
    let r = env.publish(&cfg, &b2, &["--lock-timeout", "0"]);
    r.expect_code(1);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(r.dest(0)["status"], "failed");
    drop(lock);
    let r = env.publish(&cfg, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
}

/// The journal records a publication in a fixed number of transactions: one for the
/// operation and all its actions, one per step event, one for the commit with every
/// placement. Ten times the files, the same number of event rows.
#[test]
fn journal_events_do_not_grow_with_the_number_of_files() {
    let env = Env::new();
    let mut events = Vec::new();
    for (k, n) in [(0, 3), (1, 300)] {
        let cfg = env.simple_config(&format!("c{k}.yaml"), "p", "d", &format!("dest{k}"), "");
        let b = bundle_of(&env, &format!("b{k}"), "2026-12-02T06:00:00Z", &many(n, 3));
        let r = env.publish(&cfg, &b, &[]);
        r.expect_code(0);
        let op = r.dest(0)["operation_id"].as_str().unwrap().to_string();
        let db = rusqlite::Connection::open(env.journal()).unwrap();
        let count = |table: &str| -> i64 {
            db.query_row(
                &format!("SELECT count(*) FROM {table} WHERE operation_id = ?1"),
                [&op],
                |row| row.get(0),
            )
            .unwrap()
        };
        assert_eq!(count("journal_actions"), n as i64);
        // Every placement, in one row.
        assert_eq!(count("placements"), n as i64);
        assert_eq!(count("journal_placement_sets"), 1);
        events.push(count("journal_events"));
    }
    assert_eq!(events[0], events[1], "event rows per operation");
}

/// At most 150 bytes of journal per published file (issue 16): each path and sha256 is
/// stored once, in the action rows; the plan and the placement set name files by their
/// action. Measured as the growth of the checkpointed journal file for a first
/// publication and for one that replaces every file, with paths as long as the
/// benchmark's (`d00000/f0000000.bin`). Schema 7 took about 490 bytes per file.
#[test]
fn the_journal_takes_at_most_150_bytes_per_published_file() {
    let env = Env::new();
    let n = 5000;
    let files = |tag: &str| -> Vec<(String, String)> {
        (0..n)
            .map(|i| {
                (
                    format!("d{:05}/f{i:07}.bin", i / 100),
                    format!("{tag} content of file {i}\n"),
                )
            })
            .collect()
    };
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let small = env.simple_config("s.yaml", "p", "small", "small", "");
    let tiny = bundle_of(&env, "tiny", "2026-12-02T05:00:00Z", &many(1, 1));
    let b1 = bundle_of(&env, "b1", "2026-12-02T06:00:00Z", &files("first"));
    let b2 = bundle_of(&env, "b2", "2026-12-02T07:00:00Z", &files("second"));
    let size = || -> u64 {
        let db = rusqlite::Connection::open(env.journal()).unwrap();
        db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        drop(db);
        std::fs::metadata(env.journal()).unwrap().len()
    };
    // The journal's schema and first pages, before anything is measured.
    env.publish(&small, &tiny, &[]).expect_code(0);
    let mut before = size();
    for (b, decision) in [(&b1, "create"), (&b2, "replace_older")] {
        let r = env.publish(&cfg, b, &[]);
        r.expect_code(0);
        assert_eq!(r.decision(), decision);
        let after = size();
        let per_file = (after - before) as f64 / n as f64;
        assert!(
            per_file <= 150.0,
            "{decision}: {per_file:.0} bytes of journal per published file"
        );
        before = after;
    }
}

#[test]
fn no_progress_output_when_stderr_is_not_a_terminal() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &many(3000, 30));
    // Text output, no --json: only the terminal test keeps the bar away.
    let r = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &[("TERM", "xterm-256color")],
    );
    r.expect_code(0);
    assert_eq!(r.stderr, "", "stderr is not a terminal: nothing drawn");
    for bar_char in ["\r", "\x1b[", "ETA", "files,"] {
        assert!(!r.stdout.contains(bar_char), "{bar_char:?} on stdout");
    }
}

/// The identity of a file: device, inode, size, mtime and ctime (nanoseconds), as the
/// journal's `journal_state_files` holds it.
fn identity(p: &Path) -> (i64, i64, i64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (
        m.dev() as i64,
        m.ino() as i64,
        m.size() as i64,
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ctime() * 1_000_000_000 + m.ctime_nsec(),
    )
}

/// The identities the journal keeps for state files of `bundle`, oldest first.
fn state_files(env: &Env, bundle: &Path) -> Vec<(i64, i64, i64, i64, i64)> {
    let conn = rusqlite::Connection::open(env.journal()).unwrap();
    let mut q = conn
        .prepare(
            "SELECT dev, ino, size, mtime_ns, ctime_ns FROM journal_state_files
              WHERE bundle_path = ?1 ORDER BY id",
        )
        .unwrap();
    q.query_map([bundle.to_str().unwrap()], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .map(|r| r.unwrap())
    .collect()
}

/// A publication keeps the identity of the state file it committed when that state
/// records its owner with exactly its source (what lets a republication of that source
/// skip reading the state); a merge that keeps an earlier source's file does not.
#[test]
fn the_journal_keeps_the_identity_of_a_state_file_that_records_exactly_its_source() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &many(10, 2));
    env.publish(&cfg, &b, &[]).expect_code(0);
    let dest = env.path("dest");
    let state = dest.join(".distributor.json");
    assert_eq!(state_files(&env, &dest), [identity(&state)]);
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
    assert_eq!(state_files(&env, &dest).len(), 1, "nothing committed");

    // Merge reconciliation keeps the file the newer source omits: its records are not
    // the source's alone, and no identity is kept for them.
    let merge = env.simple_config(
        "m.yaml",
        "p",
        "d",
        "dest",
        "    reconciliation:\n      mode: merge\n",
    );
    let mut fewer = many(10, 2);
    fewer.pop();
    let b2 = bundle_of(&env, "b2", "2026-12-02T07:00:00Z", &fewer);
    let r = env.publish(&merge, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(
        state_files(&env, &dest).len(),
        1,
        "{}",
        env.read("dest/.distributor.json")
    );
    let r = env.publish(&merge, &b2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "unchanged");
}

/// A state file rewritten in place with its size and mtime kept (one recorded sha256
/// changed for another of the same length) keeps its inode, size and mtime, but not its
/// ctime: the republication reads it and decides what the planner decides from it, not
/// `unchanged`.
#[test]
fn a_state_file_rewritten_with_its_size_and_mtime_is_read_again() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let files = many(10, 2);
    let b = bundle_of(&env, "b", "2026-12-02T06:00:00Z", &files);
    env.publish(&cfg, &b, &[]).expect_code(0);
    let dest = env.path("dest");
    let state = dest.join(".distributor.json");
    let before = identity(&state);
    let mtime = std::fs::metadata(&state).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&state).unwrap();
    let forged = forge_one_sha(&text);
    assert_eq!(forged.len(), text.len());
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&state)
            .unwrap();
        f.write_all(forged.as_bytes()).unwrap();
        f.set_modified(mtime).unwrap();
    }
    let after = identity(&state);
    assert_eq!(
        (after.0, after.1, after.2, after.3),
        (before.0, before.1, before.2, before.3),
        "same device, inode, size and mtime"
    );
    assert_ne!(after.4, before.4, "the ctime moved");
    let planned = env.plan(&cfg, &b, &[]).decision();
    let r = env.publish(&cfg, &b, &[]);
    assert_ne!(r.decision(), "unchanged", "{}", r.stdout);
    assert_eq!(r.decision(), planned);
}

/// A state file renamed over the committed one (the same bytes but one recorded sha256,
/// its mtime set back) or moved in from another bundle path that this journal committed
/// for the same source: neither is the file committed here, and the republication reads
/// it.
#[test]
fn a_forged_or_moved_state_file_is_read_again() {
    let env = Env::new();
    let cfg = two_destinations(&env);
    let b = bundle_of(&env, "src", "2026-12-02T06:00:00Z", &many(10, 2));
    env.publish(&cfg, &b, &[]).expect_code(0);
    let decisions = |r: &crate::common::Run| {
        (0..2)
            .map(|i| r.dest(i)["decision"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let r = env.publish(&cfg, &b, &[]);
    assert_eq!(decisions(&r), ["unchanged", "unchanged"]);

    // Forged: written beside it, mtime set back, renamed over it.
    let state = env.path("b/.distributor.json");
    let mtime = std::fs::metadata(&state).unwrap().modified().unwrap();
    let forged = forge_one_sha(&std::fs::read_to_string(&state).unwrap());
    let tmp = env.write_state_file("b/forged.tmp", forged.as_bytes());
    std::fs::File::options()
        .write(true)
        .open(&tmp)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::rename(&tmp, &state).unwrap();
    let planned = decisions(&env.plan(&cfg, &b, &[]));
    let r = env.publish(&cfg, &b, &[]);
    assert_eq!(decisions(&r), planned, "{}", r.stdout);
    assert_eq!(planned[0], "unchanged");
    assert_ne!(planned[1], "unchanged");

    // Moved: a's state (committed by this journal, for this source) over b's.
    let env = Env::new();
    let cfg = two_destinations(&env);
    let b = bundle_of(&env, "src", "2026-12-02T06:00:00Z", &many(10, 2));
    env.publish(&cfg, &b, &[]).expect_code(0);
    std::fs::rename(
        env.path("a/.distributor.json"),
        env.path("b/.distributor.json"),
    )
    .unwrap();
    let planned = decisions(&env.plan(&cfg, &b, &[]));
    let r = env.publish(&cfg, &b, &[]);
    assert_eq!(decisions(&r), planned, "{}", r.stdout);
    assert_ne!(planned[1], "unchanged");
}

/// `text` (a state file) with the first recorded sha256 changed in its last hex digit.
fn forge_one_sha(text: &str) -> String {
    let at = text.find("\"sha256\"").expect("a recorded sha256");
    let start = at
        + text[at..]
            .find(": \"")
            .map(|i| i + 3)
            .unwrap_or_else(|| text[at..].find(":\"").expect("sha256 value") + 2);
    let end = start + 64;
    let last = &text[end - 1..end];
    let swapped = if last == "0" { "1" } else { "0" };
    format!("{}{swapped}{}", &text[..end - 1], &text[end..])
}

/// A config of pipeline `p` with destinations `a` and `b` at `a/` and `b/`.
fn two_destinations(env: &Env) -> std::path::PathBuf {
    let yaml = format!(
        "version: 1\npipeline:\n  id: p\ndestinations:\n  - id: a\n    path: {}\n  - id: b\n    path: {}\n",
        env.path("a").display(),
        env.path("b").display()
    );
    env.config("c.yaml", &yaml)
}

/// `--json --omit-unchanged` leaves unchanged files and links out of a destination's
/// lists and counts them; the summary and every changed row stay. Without it the report
/// lists every file (SPEC §11), and the flag needs `--json`.
#[test]
fn omit_unchanged_leaves_out_and_counts_what_stayed() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "p", "d", "dest", "");
    let mut files = many(10, 2);
    let b = |env: &Env, files: &[(String, String)], at: &str| {
        let refs: Vec<(&str, &str)> = (files.iter())
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        env.bundle("b", "many", at, &refs, &[("latest", "d0/f00000.txt")])
    };
    let src = b(&env, &files, "2026-12-02T06:00:00Z");
    env.publish(&cfg, &src, &[]).expect_code(0);

    let full = env.publish(&cfg, &src, &[]);
    full.expect_code(0);
    assert_eq!(full.dest(0)["files"].as_array().unwrap().len(), 10);
    assert!(full.dest(0).get("omitted_unchanged").is_none());

    let brief = env.publish(&cfg, &src, &["--omit-unchanged"]);
    brief.expect_code(0);
    assert_eq!(brief.decision(), "unchanged");
    let d = brief.dest(0);
    assert_eq!(d["files"], serde_json::json!([]));
    assert_eq!(d["links"], serde_json::json!([]));
    assert_eq!(
        d["omitted_unchanged"],
        serde_json::json!({"files": 10, "links": 1})
    );
    assert_eq!(brief.json()["summary"], full.json()["summary"]);

    files[3].1 = "changed\n".into();
    let src = b(&env, &files, "2026-12-02T07:00:00Z");
    let r = env.publish(&cfg, &src, &["--omit-unchanged"]);
    r.expect_code(0);
    let d = r.dest(0);
    let ops: Vec<(&str, &str)> = (d["files"].as_array().unwrap().iter())
        .map(|f| (f["path"].as_str().unwrap(), f["op"].as_str().unwrap()))
        .collect();
    assert_eq!(ops, [(files[3].0.as_str(), "overwrite")]);
    assert_eq!(
        d["omitted_unchanged"],
        serde_json::json!({"files": 9, "links": 1})
    );
    assert_eq!(r.json()["summary"]["files_unchanged"], 9);

    let r = env.run(&[
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        src.to_str().unwrap(),
        "--omit-unchanged",
    ]);
    r.expect_code(2);
    assert!(r.stderr.contains("--json"), "{}", r.stderr);
}
