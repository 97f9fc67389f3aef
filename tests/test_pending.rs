//! Pending recovery and per-destination errors as the commands that take no lock see them
//! (SPEC §16): `plan`, `status` and `verify` read the journal without writing anything
//! (no file created, whichever way SQLite left it), say "recovery pending" with exit 4,
//! call an operation another process is carrying out right now `busy` (exit 0); and one
//! destination's error is reported on it while the others are still read, in `status`,
//! `verify` and `recover`.

use crate::common::backend::{Backend, World};
use crate::common::hostile::PausedRun;
use crate::common::{Env, Run};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The journal's files (`journal.sqlite3`, `-wal`, `-shm`): each name with the sha256
/// of its content (`-shm`, SQLite's shared-memory index that readers take part in, by
/// name only).
fn journal_files(env: &Env) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(env.path("")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("journal.sqlite3") {
            continue;
        }
        let sum = if name.ends_with("-shm") {
            String::new()
        } else {
            distributor::hash::hex(&Sha256::digest(std::fs::read(e.path()).unwrap()))
        };
        out.push((name, sum));
    }
    out.sort();
    out
}

fn two_destinations(env: &Env, second: &str) -> std::path::PathBuf {
    env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: one\n    path: {}\n  - id: two\n    path: {}\n",
            env.path("d1").display(),
            env.path(second).display()
        ),
    )
}

fn cmd(env: &Env, what: &str, cfg: &Path, bundle: Option<&Path>) -> Run {
    let mut args = vec![what, "--json", "--config", cfg.to_str().unwrap()];
    if let Some(b) = bundle {
        args.extend(["--source", b.to_str().unwrap()]);
    }
    env.run(&args)
}

/// What `plan`, `status` and `verify` say while the operation on `one` is unfinished.
fn assert_pending(env: &Env, cfg: &Path, b2: &Path, ctx: &str) {
    let plan = cmd(env, "plan", cfg, Some(b2));
    assert_eq!(
        plan.code, 4,
        "{ctx}: plan\n{}\n{}",
        plan.stdout, plan.stderr
    );
    let d = plan.dest(0);
    assert_eq!(d["status"], "failed", "{ctx}");
    let msg = d["message"].as_str().unwrap();
    assert!(
        msg.contains("recovery required: operation") && msg.contains("is unfinished"),
        "{ctx}: {msg}"
    );
    assert_eq!(plan.dest(1)["status"], "planned", "{ctx}");

    let status = cmd(env, "status", cfg, None);
    assert_eq!(status.code, 4, "{ctx}: status\n{}", status.stdout);
    let s = status.json();
    let one = &s["destinations"][0];
    assert_eq!(one["recovery_pending"], true, "{ctx}: {one}");
    assert!(
        one["recovery"].as_str().unwrap().contains("is unfinished"),
        "{ctx}: {one}"
    );
    assert_eq!(s["destinations"][1]["recovery_pending"], false, "{ctx}");

    let verify = cmd(env, "verify", cfg, None);
    assert_eq!(verify.code, 4, "{ctx}: verify\n{}", verify.stdout);
    let v = verify.json();
    let one = &v["destinations"][0];
    assert_eq!(one["recovery_pending"], true, "{ctx}: {one}");
    // Not compared: nothing is listed as drift while recovery is due.
    assert_eq!(one["missing"], serde_json::json!([]), "{ctx}");
    let text = env.run(&["verify", "--config", cfg.to_str().unwrap()]);
    assert_eq!(text.code, 4);
    assert!(
        text.stdout.contains("recovery pending, not compared"),
        "{ctx}: {}",
        text.stdout
    );
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn an_operation_killed_before_its_staging_is_pending_in_plan_status_and_verify() {
    let env = Env::new();
    let cfg = two_destinations(&env, "d2");
    let b1 = env.bundle("b1", "one", "2026-12-01T06:00:00Z", &[("a.txt", "1")], &[]);
    let b2 = env.bundle("b2", "two", "2026-12-02T06:00:00Z", &[("a.txt", "2")], &[]);
    cmd(&env, "publish", &cfg, Some(&b1)).expect_code(0);
    let killed = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
            "--destination",
            "one",
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_journal_append")],
    );
    crate::common::faults::assert_aborted(&killed, "after_journal_append");
    // Killed before its staging existed: only the journal knows.
    assert!(!env.staging_left("d1"));
    let files = journal_files(&env);
    assert!(
        files.iter().any(|(n, _)| n.ends_with("-wal")),
        "a killed writer leaves its WAL: {files:?}"
    );

    // 1. The WAL and its index as the killed writer left them: read through them.
    assert_pending(&env, &cfg, &b2, "wal and shm");
    assert_eq!(journal_files(&env), files, "nothing written to the journal");

    // 2. The index is gone (a copied journal): a private copy is read; nothing is made.
    std::fs::remove_file(env.path("journal.sqlite3-shm")).unwrap();
    let files = journal_files(&env);
    assert_pending(&env, &cfg, &b2, "wal without shm");
    assert_eq!(journal_files(&env), files, "no -shm created");

    // 3. Checkpointed (a writer opened and closed it): the database file alone.
    env.run(&["history", "--json"]).expect_code(0);
    let files = journal_files(&env);
    assert_eq!(
        files.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["journal.sqlite3"],
        "checkpointed"
    );
    assert_pending(&env, &cfg, &b2, "database file only");
    assert_eq!(journal_files(&env), files, "no -wal or -shm created");

    // Recovered: every command agrees that nothing is pending.
    env.run(&["recover", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    cmd(&env, "plan", &cfg, Some(&b2)).expect_code(0);
    cmd(&env, "status", &cfg, None).expect_code(0);
    cmd(&env, "verify", &cfg, None).expect_code(0);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn an_operation_under_a_live_lock_is_busy_not_pending() {
    let env = Env::new();
    let cfg = two_destinations(&env, "d2");
    let b1 = env.bundle("b1", "one", "2026-12-01T06:00:00Z", &[("a.txt", "1")], &[]);
    let b2 = env.bundle("b2", "two", "2026-12-02T06:00:00Z", &[("a.txt", "2")], &[]);
    cmd(&env, "publish", &cfg, Some(&b1)).expect_code(0);
    let paused = PausedRun::start(
        &env,
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
            "--destination",
            "one",
        ],
        "after_staging",
        &[],
    );
    let pid = format!("pid {}", paused.pid());
    let status = cmd(&env, "status", &cfg, None);
    status.expect_code(0);
    let one = &status.json()["destinations"][0];
    assert_eq!(one["recovery_pending"], false, "{one}");
    let busy = one["busy"].as_str().expect("busy");
    assert!(
        busy.contains(&pid) && busy.contains("actor cli:tester"),
        "{busy}"
    );

    let verify = cmd(&env, "verify", &cfg, None);
    verify.expect_code(0);
    let one = &verify.json()["destinations"][0];
    assert!(one["busy"].as_str().unwrap().contains(&pid), "{one}");
    assert_eq!(one["recovery_pending"], false);

    let plan = cmd(&env, "plan", &cfg, Some(&b2));
    plan.expect_code(0);
    let msg = plan.dest(0)["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("busy: ") && msg.contains(&pid), "{msg}");
    let text = env.run(&["status", "--config", cfg.to_str().unwrap()]);
    assert!(
        text.stdout
            .contains("busy: another distributor process is publishing here now")
    );

    paused.resume().expect_code(0);
    let status = cmd(&env, "status", &cfg, None);
    status.expect_code(0);
    assert!(status.json()["destinations"][0].get("busy").is_none());
}

#[test]
fn reading_commands_create_no_journal_and_name_a_directory_given_as_one() {
    let env = Env::new();
    let cfg = two_destinations(&env, "d2");
    let b1 = env.bundle("b1", "one", "2026-12-01T06:00:00Z", &[("a.txt", "1")], &[]);
    let nowhere = env.path("state/journal.sqlite3");
    let with = [("DISTRIBUTOR_JOURNAL", nowhere.to_str().unwrap())];
    for args in [
        vec![
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b1.to_str().unwrap(),
        ],
        vec!["status", "--config", cfg.to_str().unwrap()],
        vec!["verify", "--config", cfg.to_str().unwrap()],
    ] {
        env.run_env(&args, &with).expect_code(0);
        assert!(
            !env.exists("state"),
            "{args:?} created the journal's directory"
        );
    }
    // A journal path that is a directory: every command says so.
    std::fs::create_dir_all(env.path("jdir")).unwrap();
    let jdir = env.path("jdir");
    let with = [("DISTRIBUTOR_JOURNAL", jdir.to_str().unwrap())];
    for args in [
        vec![
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b1.to_str().unwrap(),
        ],
        vec![
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b1.to_str().unwrap(),
        ],
        vec!["status", "--config", cfg.to_str().unwrap()],
        vec!["history"],
    ] {
        let r = env.run_env(&args, &with);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!(
                "journal {}: is a directory; the journal is a file",
                jdir.display()
            )),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert!(!env.exists("d1"), "nothing was published");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn one_destinations_error_is_reported_on_it_and_the_others_still_are() {
    let env = Env::new();
    env.write("afile", "a regular file");
    let cfg = two_destinations(&env, "afile/sub");
    let b1 = env.bundle("b1", "one", "2026-12-01T06:00:00Z", &[("a.txt", "1")], &[]);
    let b2 = env.bundle("b2", "two", "2026-12-02T06:00:00Z", &[("a.txt", "2")], &[]);
    let r = env.run(&[
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b1.to_str().unwrap(),
    ]);
    assert_ne!(r.code, 0);
    assert_eq!(r.dest(0)["status"], "applied", "{}", r.stdout);

    for what in ["status", "verify"] {
        let r = cmd(&env, what, &cfg, None);
        assert_eq!(r.code, 1, "{what}: {}", r.stdout);
        let j = r.json();
        assert_eq!(j["destinations"][0]["state"], "valid", "{what}");
        let two = &j["destinations"][1];
        assert_eq!(two["state"], "error", "{what}: {two}");
        assert!(
            two["error"].as_str().unwrap().contains("afile/sub"),
            "{what}: {two}"
        );
    }

    // recover: the interrupted operation on `one` is rolled back although `two` cannot
    // be searched, and `two` is reported.
    let killed = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
            "--destination",
            "one",
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_staging")],
    );
    crate::common::faults::assert_aborted(&killed, "after_staging");
    let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let j = r.json();
    assert_eq!(j["summary"]["rolled_back"], 1, "{}", r.stdout);
    assert_eq!(j["errors"][0]["destination_id"], "two", "{}", r.stdout);
    assert!(
        env.run(&["recover", "--config", cfg.to_str().unwrap()])
            .stdout
            .contains("destination two -> ")
    );
    assert_eq!(env.read("d1/a.txt"), "1");
}

#[test]
fn a_bare_recover_names_the_default_journal() {
    let env = Env::new();
    let r = env.run_env_without_journal(&["recover"], &[]);
    r.expect_code(0);
    let default = env.path("home/.local/state/distributor/journal.sqlite3");
    assert!(
        r.stderr
            .contains(&format!("using the default journal {}", default.display())),
        "{}",
        r.stderr
    );
    let r = env.run(&["recover"]);
    r.expect_code(0);
    assert!(!r.stderr.contains("default journal"), "{}", r.stderr);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn busy_under_a_live_flock() {
    busy_under_a_live_lock_on_either_backend(Backend::Local);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn busy_under_a_live_s3_lease() {
    let _ = crate::common::s3::require_moto!();
    busy_under_a_live_lock_on_either_backend(Backend::S3);
}

/// On both backends, an operation another process is carrying out now (its lock: the
/// flock, or the s3 lease) is `busy` in status and verify, exit 0, with the holder named.
fn busy_under_a_live_lock_on_either_backend(b: Backend) {
    let w = World::new(b);
    let cfg = w.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = w.bundle("b1", "one", "2026-12-01T06:00:00Z", &[("a.txt", "1")], &[]);
    let b2 = w.bundle("b2", "two", "2026-12-02T06:00:00Z", &[("a.txt", "2")], &[]);
    w.publish(&cfg, &b1, &[]).expect_code(0);
    let vars = w.vars();
    let paused = PausedRun::start(
        &w.env,
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
        ],
        "after_staging",
        &vars,
    );
    let pid = format!("pid {}", paused.pid());
    for r in [w.status(&cfg), w.verify(&cfg)] {
        r.expect_code(0);
        let d = &r.json()["destinations"][0];
        assert_eq!(d["recovery_pending"], false, "{d}");
        let busy = d["busy"]
            .as_str()
            .unwrap_or_else(|| panic!("not busy: {d}"));
        assert!(busy.contains(&pid) && busy.contains("cli:tester"), "{busy}");
    }
    paused.resume().expect_code(0);
    let r = w.status(&cfg);
    r.expect_code(0);
    assert!(r.json()["destinations"][0].get("busy").is_none());
}

/// A mapped destination shows in status and verify even before its first publication
/// (absent, at its configured path), and one whose path is under a file is an error on
/// it, never silently nothing.
#[test]
fn a_mapped_destination_always_shows_and_one_under_a_file_is_an_error() {
    let env = Env::new();
    env.write("afile", "a regular file");
    let cfg = env.config(
        "c.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: daily\n    path: {}\n    path_mapping:\n      mode: source_id\n  - id: broken\n    path: {}\n    path_mapping:\n      mode: source_id\n",
            env.path("daily").display(),
            env.path("afile/sub").display()
        ),
    );
    for what in ["status", "verify"] {
        let r = env.run(&[what, "--json", "--config", cfg.to_str().unwrap()]);
        assert_eq!(r.code, 1, "{what}: {}", r.stdout);
        let j = r.json();
        let d = &j["destinations"];
        assert_eq!(d.as_array().unwrap().len(), 2, "{what}: {j}");
        assert_eq!(d[0]["destination_id"], "daily");
        assert_eq!(d[0]["state"], "absent");
        assert_eq!(d[0]["bundle_path"], env.path("daily").to_str().unwrap());
        assert_eq!(d[1]["destination_id"], "broken");
        assert_eq!(d[1]["state"], "error", "{what}: {j}");
        assert!(
            d[1]["error"]
                .as_str()
                .unwrap()
                .contains("is not a real directory"),
            "{what}: {j}"
        );
    }
}
