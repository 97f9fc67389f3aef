//! Hooks (SPEC §19) with real child processes: `after_commit` after a committed
//! publication or rollback, `after_failure` after a failed one; a minimal environment, the
//! destination's report on stdin, the changed paths in a file; a hook's failure, timeout
//! or absence never changes the outcome; dry runs and `recover` never run hooks; `serve`
//! replies first and journals the results.

use crate::common::server::{SECRET, Server, tar_with_manifest};
use crate::common::{Env, F, Run};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const V1: &[F] = &[("index.html", "v1"), ("a.txt", "a"), ("old.txt", "old")];
const V2: &[F] = &[("index.html", "v2"), ("a.txt", "a"), ("new.txt", "new")];

/// An executable shell script at `rel` below the test's programs directory (where a
/// hook's program may be: not under the world-writable /tmp).
fn script(env: &Env, rel: &str, body: &str) -> PathBuf {
    env.program(rel, &format!("#!/bin/sh\n{body}\n"))
}

/// A config for `dest` with `hooks` (YAML, indented 4 under the destination).
fn config(env: &Env, hooks: &str) -> PathBuf {
    env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        &format!("    hooks:\n{hooks}"),
    )
}

fn publish(env: &Env, cfg: &Path, bundle: &Path, vars: &[(&str, &str)]) -> Run {
    env.run_env(
        &[
            "publish",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            bundle.to_str().unwrap(),
        ],
        vars,
    )
}

fn events(env: &Env, op: &str) -> Vec<(String, String)> {
    let r = env.run(&["history", "show", op, "--json"]);
    r.expect_code(0);
    (r.json()["events"].as_array().unwrap().iter())
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The hook sees only its minimal environment and `pass_env`, never the credentials,
/// runs from `/`, reads the destination's report on stdin and the changed paths.
#[test]
fn after_commit_gets_its_environment_report_and_changed_paths() {
    let env = Env::new();
    let out = env.path("seen");
    std::fs::create_dir_all(&out).unwrap();
    let hook = script(
        &env,
        "hooks/record.sh",
        "env > \"$1/env\"; pwd > \"$1/pwd\"; cat > \"$1/stdin\"; cp \"$DISTRIBUTOR_CHANGED_PATHS\" \"$1/changed\"",
    );
    let cfg = config(
        &env,
        &format!(
            "      after_commit:\n        - run: [{}, {}]\n          timeout: 30s\n          pass_env: [CDN_TOKEN]\n",
            hook.display(),
            out.display()
        ),
    );
    let vars = [
        ("CDN_TOKEN", "cdn-123"),
        ("AWS_SECRET_ACCESS_KEY", "never-for-hooks"),
        ("OTHER", "not-passed"),
        ("LANG", "C.UTF-8"),
    ];
    publish(&env, &cfg, &env.bundle("b1", "site", T6, V1, &[]), &vars).expect_code(0);
    let r = publish(&env, &cfg, &env.bundle("b2", "site", T7, V2, &[]), &vars);
    r.expect_code(0);
    let json = r.json();
    let d = &json["destinations"][0];
    assert_eq!(d["hooks"][0]["ok"], true, "{d}");
    assert_eq!(d["hooks"][0]["when"], "after_commit");
    let op = d["operation_id"].as_str().unwrap();

    let seen = std::fs::read_to_string(out.join("env")).unwrap();
    let vars: Vec<&str> = seen.lines().collect();
    for want in [
        "PATH=/usr/bin:/bin".to_string(),
        "LANG=C.UTF-8".to_string(),
        "CDN_TOKEN=cdn-123".to_string(),
        format!("DISTRIBUTOR_OPERATION_ID={op}"),
        "DISTRIBUTOR_DESTINATION_ID=latest".to_string(),
        "DISTRIBUTOR_DECISION=replace_older".to_string(),
    ] {
        assert!(vars.contains(&want.as_str()), "{want} missing: {seen}");
    }
    assert!(
        !seen.contains("never-for-hooks") && !seen.contains("not-passed"),
        "{seen}"
    );
    assert!(
        !seen.contains("HOME=") && !seen.contains("DISTRIBUTOR_JOURNAL"),
        "{seen}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("pwd")).unwrap().trim(),
        "/"
    );
    let stdin: Value = serde_json::from_slice(&std::fs::read(out.join("stdin")).unwrap()).unwrap();
    assert_eq!(stdin["report_version"], 1);
    assert_eq!(stdin["destinations"].as_array().unwrap().len(), 1);
    assert_eq!(stdin["destinations"][0]["operation_id"], op);
    let mut changed: Vec<String> = std::fs::read_to_string(out.join("changed"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    changed.sort();
    assert_eq!(changed, ["index.html", "new.txt", "old.txt"]);
    // The list is removed after the hook.
    let list = vars
        .iter()
        .find_map(|v| v.strip_prefix("DISTRIBUTOR_CHANGED_PATHS="))
        .unwrap();
    assert!(!Path::new(list).exists(), "{list} left behind");
    let ev = events(&env, op);
    assert!(
        ev.iter()
            .any(|(e, d)| e == "hook_ok" && d.contains("record.sh")),
        "{ev:?}"
    );
    // An unchanged republication runs no hook.
    std::fs::remove_file(out.join("env")).unwrap();
    publish(&env, &cfg, &env.bundle("b2", "site", T7, V2, &[]), &[]).expect_code(0);
    assert!(
        !out.join("env").exists(),
        "a hook ran for an unchanged publication"
    );
}

/// A failing hook, a missing one and one that is not executable are warnings and
/// `hook_failed` events; the publication's outcome and exit code stand.
#[test]
fn failing_missing_and_unexecutable_hooks_change_no_outcome() {
    let env = Env::new();
    let fails = script(
        &env,
        "hooks/fails.sh",
        "echo 'purge refused: zone unknown' >&2; exit 3",
    );
    let unexecutable = env.program("hooks/plain.sh", "#!/bin/sh\nexit 0\n");
    std::fs::set_permissions(&unexecutable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cfg = config(
        &env,
        &format!(
            "      after_commit:\n        - run: [{}]\n        - run: [{}/hooks/missing]\n        - run: [{}]\n",
            fails.display(),
            env.programs().display(),
            unexecutable.display()
        ),
    );
    let r = publish(&env, &cfg, &env.bundle("b1", "site", T6, V1, &[]), &[]);
    r.expect_code(0);
    assert_eq!(env.read("dest/index.html"), "v1");
    let json = r.json();
    let hooks = json["destinations"][0]["hooks"].as_array().unwrap().clone();
    assert_eq!(hooks.len(), 3);
    assert_eq!(hooks[0]["ok"], false);
    assert_eq!(hooks[0]["exit_code"], 3);
    assert!(
        hooks[0]["stderr"]
            .as_str()
            .unwrap()
            .contains("zone unknown")
    );
    assert!(
        hooks[1]["error"]
            .as_str()
            .unwrap()
            .contains("could not be started"),
        "{}",
        hooks[1]
    );
    assert!(
        hooks[2]["error"]
            .as_str()
            .unwrap()
            .contains("could not be started"),
        "{}",
        hooks[2]
    );
    let op = json["destinations"][0]["operation_id"]
        .as_str()
        .unwrap()
        .to_string();
    let failed: Vec<String> = (events(&env, &op).into_iter())
        .filter(|(e, _)| e == "hook_failed")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed[0].contains("exit status 3") && failed[0].contains("zone unknown"),
        "{}",
        failed[0]
    );
    // The text report warns, and the exit code is the publication's.
    let text = env.run(&[
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        env.bundle("b2", "site", T7, V2, &[]).to_str().unwrap(),
    ]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("warning: hook after_commit")
            && text.stdout.contains("exit status 3")
            && text.stdout.contains("zone unknown"),
        "{}",
        text.stdout
    );
    // The operation stays applied.
    let h = env.run(&["history", "show", &op, "--json"]);
    assert_eq!(h.json()["status"], "applied", "{}", h.stdout);
}

/// A hook past its timeout: its group gets SIGTERM (a child it started dies), and one
/// that ignores it SIGKILL 5 s later; a descendant that left the group with setsid and
/// keeps stderr open is not waited for.
#[test]
fn a_hook_past_its_timeout_is_stopped_and_escaped_descendants_are_not_waited_for() {
    let env = Env::new();
    let pids = env.path("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let stubborn = script(
        &env,
        "hooks/stubborn.sh",
        &format!(
            "sleep 1000 & echo $! > {0}/child\ntrap '' TERM\necho waiting >&2\nsleep 1000\n",
            pids.display()
        ),
    );
    let escapes = script(
        &env,
        "hooks/escapes.sh",
        &format!(
            "setsid sh -c 'echo $$ > {0}/escaped; exec sleep 1000' &\nwhile [ ! -s {0}/escaped ]; do sleep 0.01; done\nexit 0\n",
            pids.display()
        ),
    );
    let cfg = config(
        &env,
        &format!(
            "      after_commit:\n        - run: [{}]\n          timeout: 1s\n        - run: [{}]\n",
            stubborn.display(),
            escapes.display()
        ),
    );
    let r = publish(&env, &cfg, &env.bundle("b1", "site", T6, V1, &[]), &[]);
    r.expect_code(0);
    let json = r.json();
    let hooks = json["destinations"][0]["hooks"].as_array().unwrap().clone();
    assert_eq!(hooks[0]["timed_out"], true, "{}", hooks[0]);
    assert_eq!(
        hooks[0]["signal"], 9,
        "ignored SIGTERM, so SIGKILL: {}",
        hooks[0]
    );
    assert!(hooks[0]["stderr"].as_str().unwrap().contains("waiting"));
    assert_eq!(hooks[1]["ok"], true, "{}", hooks[1]);
    let child: i32 = std::fs::read_to_string(pids.join("child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(child), "the hook's own child outlived the timeout");
    let escaped: i32 = std::fs::read_to_string(pids.join("escaped"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(left_alone(escaped), "the escaped descendant is left alone");
    unsafe_kill(escaped);
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()));
        match state {
            None | Some(Some('Z')) | Some(Some('X')) => return true,
            _ if Instant::now() > deadline => return false,
            // SIGTERM was sent to its group before the hook was killed: it is on its way.
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Whether process `pid` runs and no signal is on its way to it (none pending: one sent
/// but not yet acted on shows in `SigPnd`/`ShdPnd`), now that the run that could have
/// signalled it is over. Says so at once, without waiting to see whether it dies.
fn left_alone(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let state = field("State:");
    let no_pending = |v: String| !v.is_empty() && v.chars().all(|c| c == '0');
    !state.starts_with('Z')
        && !state.starts_with('X')
        && no_pending(field("SigPnd:"))
        && no_pending(field("ShdPnd:"))
}

fn unsafe_kill(pid: i32) {
    let _ = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status();
}

/// A hook that never reads its stdin while the report is 20,000 files long blocks
/// nothing: the report is written by a thread of its own. Each file's row carries its
/// 64-character sha256, so the report is over 1.28 MB: more than any pipe holds (Linux
/// lets a pipe grow to `/proc/sys/fs/pipe-max-size`, 1 MiB by default; it starts at
/// 64 KiB).
#[test]
fn a_hook_that_never_reads_a_large_report_blocks_nothing() {
    const FILES: usize = 20_000;
    let pipe_max: usize = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .map_or(1 << 20, |s| s.trim().parse().unwrap());
    assert!(
        FILES * 64 > pipe_max,
        "the report would fit in a pipe of {pipe_max} bytes"
    );
    let env = Env::new();
    let dir = env.path("big");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..FILES {
        let sub = dir.join(format!("d{:03}", i % 200));
        if i < 200 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(format!("f{i}")), b"").unwrap();
    }
    distributor::source::write_manifest(&dir, "big", T6).unwrap();
    let hook = script(
        &env,
        "hooks/ignores.sh",
        &format!("echo ran > {}", env.path("ran").display()),
    );
    let cfg = config(
        &env,
        &format!(
            "      after_commit:\n        - run: [{}]\n          timeout: 60s\n",
            hook.display()
        ),
    );
    let r = env.run(&[
        "publish",
        "--quiet",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        dir.to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert_eq!(env.read("ran").trim(), "ran");
    assert!(!r.stdout.contains("warning: hook"), "{}", r.stdout);
}

/// `after_failure` runs after a failed publication (a file that does not match its
/// manifest, rolled back); dry runs run no hook at all.
#[test]
fn after_failure_runs_for_a_failed_publication_and_dry_runs_run_none() {
    let env = Env::new();
    let marker = env.path("marker");
    let hook = script(
        &env,
        "hooks/mark.sh",
        &format!("echo \"$DISTRIBUTOR_DECISION\" >> {}", marker.display()),
    );
    let cfg = config(
        &env,
        &format!(
            "      after_commit:\n        - run: [{0}]\n      after_failure:\n        - run: [{0}]\n",
            hook.display()
        ),
    );
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    env.run(&[
        "plan",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b1.to_str().unwrap(),
    ])
    .expect_code(0);
    env.run(&[
        "publish",
        "--dry-run",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b1.to_str().unwrap(),
    ])
    .expect_code(0);
    assert!(!marker.exists(), "a dry run ran a hook");
    // The bundle changes after its manifest was written (same size, other bytes): staging
    // finds it, and the publication is rolled back.
    std::fs::write(b1.join("a.txt"), "b").unwrap();
    let r = publish(&env, &cfg, &b1, &[]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert_eq!(r.json()["destinations"][0]["status"], "failed");
    assert_eq!(
        env.read("marker").trim(),
        "create",
        "after_failure ran once"
    );
}

/// A rollback that commits runs `after_commit` with its decision.
#[test]
fn a_rollback_runs_after_commit() {
    let env = Env::new();
    let marker = env.path("marker");
    let hook = script(
        &env,
        "hooks/mark.sh",
        &format!("echo \"$DISTRIBUTOR_DECISION\" >> {}", marker.display()),
    );
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "site",
        &format!(
            "    releases:\n      keep: 2\n    hooks:\n      after_commit:\n        - run: [{}]\n",
            hook.display()
        ),
    );
    env.publish(&cfg, &env.bundle("b1", "site", T6, V1, &[]), &[])
        .expect_code(0);
    env.publish(&cfg, &env.bundle("b2", "site", T7, V2, &[]), &[])
        .expect_code(0);
    env.run(&["rollback", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    let lines: Vec<String> = env.read("marker").lines().map(str::to_string).collect();
    assert_eq!(lines, ["create", "replace_older", "rollback"]);
}

/// Bad hooks are config errors naming the key, a credential in pass_env included.
#[test]
fn bad_hooks_are_config_errors() {
    let env = Env::new();
    let b = env.bundle("b1", "site", T6, V1, &[]);
    for (hooks, says) in [
        (
            "      after_commit:\n        - run: [purge-cdn]\n",
            "hooks.after_commit[0].run[0]",
        ),
        (
            "      after_commit:\n        - run: [/bin/true]\n          pass_env: [AWS_SECRET_ACCESS_KEY]\n",
            "credentials",
        ),
        (
            "      after_commit:\n        - run: [/bin/true]\n          timeout: 10\n",
            "hooks.after_commit[0].timeout",
        ),
        (
            "      before_commit:\n        - run: [/bin/true]\n",
            "expected `after_commit` or `after_failure`",
        ),
    ] {
        let cfg = config(&env, hooks);
        let r = publish(&env, &cfg, &b, &[]);
        r.expect_code(2);
        assert!(r.stderr.contains(says), "{hooks}: {}", r.stderr);
        assert!(!env.exists("dest"));
    }
    // Under pipeline: too.
    let cfg = env.config(
        "p.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\n  hooks:\n    after_commit:\n      - run: [relative]\ndestinations:\n  - id: latest\n    path: {}\n",
            env.path("dest").display()
        ),
    );
    let r = publish(&env, &cfg, &b, &[]);
    r.expect_code(2);
    assert!(
        r.stderr.contains("pipeline.hooks.after_commit[0].run[0]"),
        "{}",
        r.stderr
    );
}

/// `recover` never runs hooks: a publication killed past its commit point is finished by
/// `recover`, and the hook runs neither for the killed run nor for recover.
#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature")]
fn recover_runs_no_hook() {
    let env = Env::new();
    let marker = env.path("marker");
    let hook = script(
        &env,
        "hooks/mark.sh",
        &format!("echo ran >> {}", marker.display()),
    );
    let cfg = config(
        &env,
        &format!(
            "      after_commit:\n        - run: [{0}]\n      after_failure:\n        - run: [{0}]\n",
            hook.display()
        ),
    );
    let b1 = env.bundle("b1", "site", T6, V1, &[]);
    let r = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b1.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_journal_commit")],
    );
    assert_ne!(r.code, 0, "killed at the failpoint");
    let r = env.run(&["recover", "--config", cfg.to_str().unwrap()]);
    r.expect_code(0);
    assert_eq!(env.read("dest/index.html"), "v1");
    assert!(
        !marker.exists(),
        "a hook ran for a killed run or for recover"
    );
}

/// `serve` replies first; the hook's result goes to the journal.
#[test]
fn serve_replies_first_and_journals_the_hook() {
    let env = Env::new();
    let marker = env.path("marker");
    let hook = script(
        &env,
        "hooks/slow.sh",
        &format!(
            "while [ ! -e {0}.go ]; do sleep 0.01; done; echo ran > {0}",
            marker.display()
        ),
    );
    let cfg = env.config(
        "weather.yaml",
        &format!(
            "version: 1\npipeline:\n  id: weather\nserver:\n  upload_tokens:\n    - name: forecast-job\n      sha256: {}\ndestinations:\n  - id: latest\n    path: {}\n    hooks:\n      after_commit:\n        - run: [{}]\n          timeout: 60s\n",
            distributor::hash::sha256_hex(SECRET.as_bytes()),
            env.path("dest/latest").display(),
            hook.display()
        ),
    );
    let mut server = Server::start(&env, &[&cfg], &[]);
    let tar = tar_with_manifest("t", T6, &[("a.txt", b"one")], &[]);
    // The hook waits for `<marker>.go`, which is written only after the reply came.
    let r = server.upload("weather", "", &tar);
    r.expect(200);
    let op = r.json()["destinations"][0]["operation_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!marker.exists(), "the reply waited for the hook");
    std::fs::write(format!("{}.go", marker.display()), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ev = events(&env, &op);
        if ev.iter().any(|(e, _)| e == "hook_ok") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no hook_ok in the journal: {ev:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(env.read("marker").trim(), "ran");
    assert_eq!(server.stop().code(), Some(0));
}
