//! Inputs bounded before anything is written (docs/troubleshooting.md; docs/operations.md,
//! "Who may write where"): the actor (`--actor`, `DISTRIBUTOR_ACTOR`, the CI's identity)
//! is at most 1 KiB without control characters, for every command that takes one; a saved
//! plan is a regular file of at most 64 MiB, not read through a symlink and never blocked
//! on. Each refusal is a usage error (exit 2) that names the flag, the variable or the file,
//! before the lock: the destination and the journal are as they were.
//!
//! Local files distributor writes beside its destinations: `--metrics-file` in a
//! textfile-collector directory that a neighbour (uid 65534, through `setpriv`) owns, who
//! plants symlinks and locks at the names distributor uses; the journal, created 0600 with
//! its `-wal` and `-shm` whatever the umask; a hook's program, run only when it and every
//! directory above it are root's or distributor's and writable by nobody else.

use crate::common::hostile::PausedRun;
use crate::common::{Env, F, Run};
use distributor::hash::sha256_hex;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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

/// The neighbour's uid and gid.
const NEIGHBOUR: u32 = 65534;

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, PermissionsExt::from_mode(mode)).unwrap();
}

/// A `Command` that runs `script` with `sh -c` as the neighbour, in the test's root.
fn neighbour(env: &Env, script: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        &format!("--reuid={NEIGHBOUR}"),
        &format!("--regid={NEIGHBOUR}"),
        "--clear-groups",
        "sh",
        "-c",
        script,
    ])
    .current_dir(env.path(""));
    cmd
}

/// Runs `script` as the neighbour, to its end.
fn as_neighbour(env: &Env, script: &str) {
    let out = neighbour(env, script).output().expect("setpriv");
    assert!(
        out.status.success(),
        "the neighbour's script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A destination to publish, a textfile-collector directory `tf/` the neighbour owns, and
/// a file of root's (`secret`, 0600) beside it.
fn metrics_scene() -> (Env, PathBuf, PathBuf) {
    let env = Env::new();
    chmod(&env.path(""), 0o755);
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let tf = env.path("tf");
    fs::create_dir(&tf).unwrap();
    std::os::unix::fs::lchown(&tf, Some(NEIGHBOUR), Some(NEIGHBOUR)).unwrap();
    let secret = env.write("secret", "root's own\n");
    chmod(&secret, 0o600);
    (env, cfg, b1)
}

/// What a publication's metrics file says of destination `latest`.
fn assert_metrics_written(env: &Env, path: &str) {
    let md = fs::symlink_metadata(env.path(path)).unwrap();
    assert!(md.file_type().is_file(), "{path} is a regular file");
    assert_eq!(md.uid(), 0);
    let text = env.read(path);
    assert!(
        text.contains("# TYPE distributor_last_run_exit_code gauge")
            && text.contains(
                "distributor_last_run_exit_code{command=\"publish\",pipeline=\"weather\",destination=\"latest\"} 0"
            )
            && text.contains("distributor_last_success_timestamp_seconds{command=\"publish\""),
        "{text}"
    );
}

/// The bug: `--metrics-file` followed symlinks, so a neighbour who owns the collector's
/// directory made root create a file where it chose (a dangling symlink at `PATH.lock`)
/// and truncate and overwrite root's file (a symlink at the predictable `PATH.<pid>.tmp`,
/// planted while the run stood after its commit, its pid known). Now the directory is held
/// open and no name in it is followed: root's file is unchanged, nothing is created
/// outside `tf/`, the planted `.tmp` link is never used, a symlink at `PATH` is replaced
/// (not written through), and the metrics file is written as ever.
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
#[test]
fn the_metrics_file_follows_no_symlink_a_neighbour_plants_in_its_directory() {
    let (env, cfg, b1) = metrics_scene();
    let args = [
        "publish",
        "--json",
        "--config",
        p(&cfg),
        "--source",
        p(&b1),
        "--metrics-file",
        "tf/distributor.prom",
    ];
    let run = PausedRun::start(&env, &args, "after_journal_commit", &[]);
    let pid = run.pid();
    as_neighbour(
        &env,
        &format!(
            "set -e; ln -s ../made-by-root tf/distributor.prom.lock; \
             ln -s ../secret tf/distributor.prom.{pid}.tmp; ln -s ../secret tf/distributor.prom"
        ),
    );
    let r = run.resume();
    r.expect_code(0);
    assert_eq!(
        env.read("secret"),
        "root's own\n",
        "root's file is unchanged"
    );
    assert!(
        !env.exists("made-by-root"),
        "nothing was created through the lock's link"
    );
    assert_metrics_written(&env, "tf/distributor.prom");
    let planted = fs::read_link(env.path(&format!("tf/distributor.prom.{pid}.tmp"))).unwrap();
    assert_eq!(
        planted,
        Path::new("../secret"),
        "the predictable name was never used"
    );
    let lock = fs::symlink_metadata(env.path("tf/distributor.prom.lock")).unwrap();
    assert!(lock.file_type().is_file() && lock.uid() == 0 && lock.mode() & 0o777 == 0o600);
    assert!(
        r.stderr.contains(
            "tf/distributor.prom.lock is a symlink, not a lock distributor made; removed it"
        ) && r
            .stderr
            .contains("tf/distributor.prom is a symlink; not read"),
        "{}",
        r.stderr
    );
    let left: Vec<String> = fs::read_dir(env.path("tf"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && *n != format!("distributor.prom.{pid}.tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The new file's name, seen while the run stands between writing it and renaming it into
/// place: `PATH.<pid>.<32 hex digits>.tmp`, a regular file of root's, and another random
/// part every run: no one can plant anything at it beforehand.
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
#[test]
fn the_metrics_file_is_written_under_a_name_no_one_can_predict() {
    let (env, cfg, b1) = metrics_scene();
    let args = [
        "publish",
        "--json",
        "--config",
        p(&cfg),
        "--source",
        p(&b1),
        "--metrics-file",
        "tf/distributor.prom",
    ];
    let mut randoms = Vec::new();
    for _ in 0..2 {
        let run = PausedRun::start(&env, &args, "metrics_file_written", &[]);
        let prefix = format!("distributor.prom.{}.", run.pid());
        let tmp: Vec<String> = fs::read_dir(env.path("tf"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert_eq!(tmp.len(), 1, "{tmp:?}");
        let random = tmp[0]
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".tmp"))
            .unwrap_or_else(|| panic!("{} is not {prefix}<random>.tmp", tmp[0]));
        assert!(
            random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()),
            "{random}"
        );
        let md = fs::symlink_metadata(env.path(&format!("tf/{}", tmp[0]))).unwrap();
        assert!(md.file_type().is_file() && md.uid() == 0);
        randoms.push(random.to_string());
        run.resume().expect_code(0);
        assert_metrics_written(&env, "tf/distributor.prom");
    }
    assert_ne!(randoms[0], randoms[1]);
}

/// A lock the neighbour made and holds: the old code waited on it forever after the
/// publication. It is not distributor's (uid 65534): removed, and the run ends with the
/// metrics written.
#[test]
fn a_lock_another_user_made_and_holds_is_not_waited_on() {
    let (env, cfg, b1) = metrics_scene();
    let mut holder = neighbour(
        &env,
        "exec flock -o tf/distributor.prom.lock sh -c 'touch tf/held; cat >/dev/null'",
    )
    .stdin(Stdio::piped())
    .spawn()
    .expect("setpriv flock");
    let start = Instant::now();
    while !env.exists("tf/held") {
        assert!(
            start.elapsed() < DEADLINE,
            "the neighbour never took its lock"
        );
        assert!(
            holder.try_wait().unwrap().is_none(),
            "the neighbour's flock exited"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = run_bounded(
        &env,
        &[
            "publish",
            "--json",
            "--config",
            p(&cfg),
            "--source",
            p(&b1),
            "--metrics-file",
            "tf/distributor.prom",
        ],
        &[],
    );
    drop(holder.stdin.take());
    holder.wait().unwrap();
    r.expect_code(0);
    assert!(
        r.stderr.contains(&format!(
            "tf/distributor.prom.lock is owned by uid {NEIGHBOUR} (distributor runs as uid 0), not a lock distributor made"
        )),
        "{}",
        r.stderr
    );
    assert_metrics_written(&env, "tf/distributor.prom");
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

/// The bug: the journal was created 0644 under umask 022, readable by every user (who did
/// what, where, every path written). A new journal is 0600, and so are its `-wal` and
/// `-shm`, seen while a publication under umask 022 (and 000) holds them open after its
/// commit. A journal that exists keeps its mode.
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
#[test]
fn a_new_journal_and_its_wal_are_0600_whatever_the_umask() {
    for umask in ["022", "000"] {
        let env = Env::new();
        let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
        let b1 = env.bundle("b1", "site", T6, V1, &[]);
        let journal = env.path("state/journal.sqlite3");
        let pause = tempfile::tempdir().unwrap();
        let mut child = Command::new("sh")
            .args(["-c", &format!("umask {umask}; exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_distributor"))
            .args(["publish", "--json", "--config", p(&cfg), "--source", p(&b1)])
            .env_clear()
            .env("HOME", env.path("home"))
            .env("DISTRIBUTOR_ACTOR", "tester")
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DISTRIBUTOR_JOURNAL", &journal)
            .env("DISTRIBUTOR_FAILPOINT", "after_journal_commit=pause")
            .env("DISTRIBUTOR_FAILPOINT_PAUSE", pause.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let start = Instant::now();
        while !pause.path().join("after_journal_commit.paused").exists() {
            if start.elapsed() > DEADLINE || child.try_wait().unwrap().is_some() {
                let _ = child.kill();
                panic!("the publication did not pause after its commit");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for suffix in ["", "-wal", "-shm"] {
            let f = env.path(&format!("state/journal.sqlite3{suffix}"));
            assert_eq!(mode(&f), 0o600, "umask {umask}: {}", f.display());
        }
        fs::write(pause.path().join("after_journal_commit.resume"), b"").unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "umask {umask}: {status}");
        assert_eq!(mode(&journal), 0o600);
        // An existing journal keeps the mode it has.
        chmod(&journal, 0o640);
        let b2 = env.bundle("b2", "site", T7, V2, &[]);
        let vars = [("DISTRIBUTOR_JOURNAL", p(&journal))];
        let r = env.run_env(&["publish", "--config", p(&cfg), "--source", p(&b2)], &vars);
        r.expect_code(0);
        assert_eq!(mode(&journal), 0o640);
    }
}

/// A config whose one destination has an `after_commit` hook running `program`.
fn hook_config(env: &Env, program: &Path) -> PathBuf {
    env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        &format!(
            "    hooks:\n      after_commit:\n        - run: [{}, marker]\n",
            program.display()
        ),
    )
}

/// A hook program that leaves `ran` in the test's root when it runs.
fn marking_program(env: &Env, rel: &str) -> PathBuf {
    env.program(
        rel,
        &format!("#!/bin/sh\necho \"$1\" >> {}\n", env.path("ran").display()),
    )
}

/// The bug: a hook's `run[0]` was executed as root whoever owned or could write it. Now a
/// program owned by another uid, in a group-writable or world-writable directory, under
/// the sticky world-writable /tmp, or reached through a symlink in such a directory, is a
/// config error (exit 2) from `validate`, `plan` and `publish`, naming the hook's key and
/// the path refused, before anything is locked or written; the program never runs. A
/// program of root's in root's 0755 directories is taken.
#[test]
fn a_hook_program_anyone_else_could_replace_is_a_config_error() {
    let env = Env::new();
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let programs = env.programs().to_path_buf();
    let theirs = marking_program(&env, "theirs/purge");
    std::os::unix::fs::lchown(&theirs, Some(NEIGHBOUR), Some(NEIGHBOUR)).unwrap();
    let group = marking_program(&env, "group/purge");
    chmod(&programs.join("group"), 0o775);
    let world = marking_program(&env, "world/purge");
    chmod(&programs.join("world"), 0o777);
    let in_tmp = env.write("purge", "#!/bin/sh\nexit 0\n");
    chmod(&in_tmp, 0o755);
    // The test's root is under the temporary directory (/tmp): sticky, world-writable.
    let tmp = std::env::temp_dir().canonicalize().unwrap();
    assert_eq!(mode(&tmp), 0o1777, "{} is not /tmp's 1777", tmp.display());
    let linked = programs.join("linked");
    std::os::unix::fs::symlink(&in_tmp, &linked).unwrap();
    let cases: [(&Path, PathBuf, &str); 5] = [
        (
            &theirs,
            theirs.clone(),
            "(program) is owned by uid 65534, not by root",
        ),
        (
            &group,
            programs.join("group"),
            "(directory) is writable by group (mode 0775)",
        ),
        (
            &world,
            programs.join("world"),
            "(directory) is writable by group and others (mode 0777)",
        ),
        (
            &in_tmp,
            tmp.clone(),
            "(directory) is writable by group and others (mode 1777)",
        ),
        (
            &linked,
            tmp,
            "(directory) is writable by group and others (mode 1777)",
        ),
    ];
    for (program, refused_path, why) in cases {
        let cfg = hook_config(&env, program);
        let says = format!(
            "config {}: destinations[0].hooks.after_commit[0].run[0]: '{}' may not be run: {} {why}; accepted: the program and every directory above it owned by root or by distributor's user and not writable by group or others",
            cfg.display(),
            program.display(),
            refused_path.display()
        );
        for command in ["validate", "plan", "publish"] {
            let mut args = vec![command, "--config", p(&cfg)];
            if command != "validate" {
                args.extend(["--source", p(&b1)]);
            }
            let r = env.run(&args);
            refused(&r, &says);
        }
        // `serve` refuses to start (it would run the hook after every upload).
        let serve = ["serve", "--config", p(&cfg), "--listen", "127.0.0.1:0"];
        refused(&run_bounded(&env, &serve, &[]), &says);
        assert!(
            !env.exists("dest") && !env.journal().exists(),
            "nothing written"
        );
        assert!(!env.exists("ran"), "the hook never ran");
    }
    // Root's program in root's 0755 directories: validated, and run after the commit.
    let good = marking_program(&env, "good/purge");
    let cfg = hook_config(&env, &good);
    env.run(&["validate", "--config", p(&cfg)]).expect_code(0);
    let r = env.publish(&cfg, &b1, &[]);
    r.expect_code(0);
    assert_eq!(r.dest(0)["hooks"][0]["ok"], true, "{}", r.stdout);
    assert_eq!(env.read("ran"), "marker\n");
}

/// Checked again as it is about to run: a program whose directory became group-writable
/// after the config was checked (the run stands after its commit meanwhile) is not run;
/// the hook fails with the path named, and the publication stands.
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
#[test]
fn a_hook_program_is_checked_again_when_it_is_about_to_run() {
    let env = Env::new();
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let program = marking_program(&env, "late/purge");
    let cfg = hook_config(&env, &program);
    let args = ["publish", "--json", "--config", p(&cfg), "--source", p(&b1)];
    let run = PausedRun::start(&env, &args, "after_journal_commit", &[]);
    chmod(&env.programs().join("late"), 0o775);
    let r = run.resume();
    r.expect_code(0);
    assert_eq!(env.read("dest/index.html"), "v1");
    let hook = r.dest(0)["hooks"][0].clone();
    assert_eq!(hook["ok"], false);
    let error = hook["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!(
            "not run: {} (directory) is writable by group (mode 0775)",
            env.programs().join("late").display()
        )),
        "{hook}"
    );
    assert!(!env.exists("ran"), "the hook never ran");
}
