//! Inputs bounded before anything is written (docs/troubleshooting.md; docs/operations.md,
//! "Who may write where"): the actor (`--actor`, `DISTRIBUTOR_ACTOR`, the CI's identity)
//! is at most 1 KiB without control characters, for every command that takes one; a saved
//! plan is a regular file of at most 64 MiB, not read through a symlink and never blocked
//! on. Each refusal is a usage error (exit 2) that names the flag, the variable or the file,
//! before the lock: the destination and the journal are as they were.

use crate::common::{Env, F, Run};
use distributor::hash::sha256_hex;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const V1: &[F] = &[("index.html", "v1"), ("a.txt", "a")];
const V2: &[F] = &[("index.html", "v2"), ("b.txt", "b")];
/// How long a refused run may take before the test calls it hung and kills it: generous,
/// since a loaded machine is slow; a run that blocks on a FIFO never exits at all.
const DEADLINE: Duration = Duration::from_secs(60);

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// What a refused run must leave as it was: everything under the test's root that a run
/// could write (the destinations, the journal and its `-wal`), by content.
fn everything(env: &Env) -> Vec<(String, String)> {
    let mut out = env.snapshot("www");
    out.extend(env.snapshot("dest"));
    for j in [
        "journal.sqlite3",
        "journal.sqlite3-wal",
        "journal.sqlite3-shm",
    ] {
        let f = env.path(j);
        out.push((
            j.to_string(),
            fs::read(&f).map(|b| sha256_hex(&b)).unwrap_or_default(),
        ));
    }
    out
}

/// Runs the binary as [`Env::run_env`] does, but under a 4 GiB address-space limit and a
/// deadline: a run that reads without bound or blocks forever fails the test instead of
/// the machine or the suite.
fn run_bounded(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new("prlimit");
    cmd.arg("--as=4294967296")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_distributor"))
        .args(args)
        .env_clear()
        .env("HOME", env.path("home"))
        .env("USER", "tester")
        .env("DISTRIBUTOR_ACTOR", "tester")
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DISTRIBUTOR_JOURNAL", env.journal())
        .current_dir(&env.root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn distributor under prlimit");
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "distributor {args:?} did not exit within {DEADLINE:?} (blocked?); killed it\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("wait");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts a usage error (exit 2) whose message says `says`.
fn refused(r: &Run, says: &str) {
    r.expect_code(2);
    assert!(
        r.stderr.contains(says),
        "expected {says:?} in stderr:\n{}",
        r.stderr
    );
}

/// The bug: a 5,000-character `--actor` let a publication pass its commit point and then
/// fail to write its log entry (over 4 KiB) forever. Now it is a usage error before
/// anything: no destination, no journal. So is a control character in the variable or in
/// the CI's identity; 1 KiB exactly is taken and recorded as given.
#[test]
fn an_actor_over_1_kib_or_with_a_control_character_is_refused_before_anything_is_written() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let publish = |extra: &[&str], vars: &[(&str, &str)]| {
        let mut args = vec!["publish", "--json", "--config", p(&cfg), "--source", p(&b1)];
        args.extend_from_slice(extra);
        env.run_env(&args, vars)
    };
    let long = "a".repeat(5000);
    let r = publish(&["--actor", &long], &[]);
    refused(
        &r,
        "--actor: is 5000 bytes long; accepted: at most 1024 bytes (1 KiB) of UTF-8 text without control characters",
    );
    assert!(!r.stderr.contains(&long[..100]), "the value is not echoed");
    assert!(!env.exists("dest"), "nothing was published");
    assert!(!env.journal().exists(), "nothing was journaled");
    let r = publish(&[], &[("DISTRIBUTOR_ACTOR", "deploy\nbot")]);
    refused(
        &r,
        "DISTRIBUTOR_ACTOR: holds the control character U+000A at byte 6",
    );
    let r = publish(
        &[],
        &[
            ("DISTRIBUTOR_ACTOR", ""),
            ("GITHUB_ACTOR", "octo\u{1b}[2Jcat"),
            ("GITHUB_RUN_ID", "42"),
        ],
    );
    refused(&r, "GITHUB_ACTOR: holds the control character U+001B");
    let r = publish(&[], &[("DISTRIBUTOR_ACTOR", &"b".repeat(1025))]);
    refused(&r, "DISTRIBUTOR_ACTOR: is 1025 bytes long");
    assert!(!env.exists("dest") && !env.journal().exists());
    // 1 KiB is taken, whole.
    let most = "é".repeat(512);
    publish(&["--actor", &most], &[]).expect_code(0);
    let h = env.run(&["history", "--json"]);
    h.expect_code(0);
    assert!(h.stdout.contains(&format!("cli:{most}")), "{}", h.stdout);
}

/// A releases destination with two publications, so each releases command has work.
fn releases_scene() -> (Env, PathBuf, PathBuf, String) {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "www/latest",
        "    releases:\n      keep: 3\n",
    );
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    env.publish(&cfg, &b1, &[]).expect_code(0);
    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let staged = env.publish(&cfg, &b2, &["--stage"]);
    staged.expect_code(0);
    let op = staged.dest(0)["operation_id"].as_str().unwrap().to_string();
    (env, cfg, b2, op)
}

/// Every command that takes `--actor` bounds it before its lock: the destination and the
/// journal are byte for byte as they were.
#[test]
fn every_command_that_takes_an_actor_bounds_it_before_its_lock() {
    let (env, cfg, b2, op) = releases_scene();
    let before = everything(&env);
    let bad = format!("ops{}", "x".repeat(2000));
    let c = p(&cfg);
    let commands: Vec<Vec<&str>> = vec![
        vec!["publish", "--config", c, "--source", p(&b2)],
        vec!["plan", "--config", c, "--source", p(&b2)],
        vec!["promote", "--config", c, "--destination", "latest", &op],
        vec!["rollback", "--config", c],
        vec!["prune", "--config", c],
        vec!["releases", "adopt", "--config", c],
        vec!["releases", "settings", "--config", c],
        vec!["log", "--config", c, "--quarantine", "1"],
        vec!["recover", "--config", c],
    ];
    for args in &commands {
        for actor in [bad.as_str(), "ops\r"] {
            let mut all = args.clone();
            all.extend(["--actor", actor]);
            let r = env.run(&all);
            refused(&r, "--actor: ");
            assert!(
                r.stderr.contains("accepted: at most 1024 bytes"),
                "{args:?}: {}",
                r.stderr
            );
            assert_eq!(everything(&env), before, "{args:?} changed something");
        }
    }
    // The same runs with a good actor do act (the refusals above were the actor's).
    let r = env.run(&[
        "promote",
        "--json",
        "--config",
        c,
        "--destination",
        "latest",
        &op,
        "--actor",
        "ops",
    ]);
    r.expect_code(0);
    assert_ne!(everything(&env), before);
}

/// A saved plan, and the destination it was made for.
fn plan_scene() -> (Env, PathBuf, PathBuf, PathBuf) {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    env.publish(&cfg, &b1, &[]).expect_code(0);
    let b2 = env.bundle("b2", "site", T7, V2, &[]);
    let plan = env.path("review/plan.json");
    fs::create_dir_all(plan.parent().unwrap()).unwrap();
    env.run(&[
        "plan",
        "--json",
        "--config",
        p(&cfg),
        "--source",
        p(&b2),
        "--out",
        p(&plan),
    ])
    .expect_code(0);
    (env, cfg, b2, plan)
}

fn publish_plan(env: &Env, cfg: &Path, bundle: &Path, plan: &Path) -> Run {
    run_bounded(
        env,
        &[
            "publish",
            "--json",
            "--config",
            p(cfg),
            "--source",
            p(bundle),
            "--plan",
            p(plan),
        ],
        &[],
    )
}

/// The bug: `publish --plan` on a FIFO blocked forever in open(2), and on `/dev/zero`
/// read until memory ran out. A plan file is now a regular file, opened without following
/// a symlink and without blocking, of at most 64 MiB by `fstat` and by what is read: a
/// FIFO, a character device, a directory, a symlink (even to a good plan) and a sparse
/// file of 64 MiB + 1 are usage errors naming the file, and nothing is written.
#[test]
fn a_plan_file_is_a_regular_file_of_at_most_64_mib_never_followed_or_blocked_on() {
    let (env, cfg, b2, plan) = plan_scene();
    let before = everything(&env);
    let fifo = env.path("review/fifo.json");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let link = env.path("review/link.json");
    std::os::unix::fs::symlink(&plan, &link).unwrap();
    let big = env.path("review/big.json");
    fs::File::create(&big)
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    let dir = env.path("review");
    for (file, says) in [
        (fifo.as_path(), "is a FIFO, not a regular file"),
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (dir.as_path(), "is a directory, not a regular file"),
        (link.as_path(), "is a symlink, which is not followed"),
        (
            big.as_path(),
            "is 64.0 MiB (67108865 bytes) or more, over the limit of 64.0 MiB (67108864 bytes)",
        ),
    ] {
        let r = publish_plan(&env, &cfg, &b2, file);
        refused(&r, &format!("--plan {}: {says}", file.display()));
        assert!(
            r.stderr.contains(
                "accepted: a regular file `distributor plan --out` wrote, of at most 64 MiB"
            ),
            "{}",
            r.stderr
        );
        assert_eq!(
            everything(&env),
            before,
            "{} changed something",
            file.display()
        );
    }
    // The plan the symlink names is good: published by its own name.
    publish_plan(&env, &cfg, &b2, &plan).expect_code(0);
    assert_eq!(env.read("dest/b.txt"), "b");
}
