//! Concurrency (SPEC §6 step 1, §7): parallel publishers of one destination serialize on
//! the destination lock and the newest bundle wins whatever the order; parallel owners of
//! one shared root never lose each other's records; `--lock-timeout` expires with a clear
//! error, for `publish` and for `recover`.

use crate::common::Env;
use crate::common::faults::{Mode, Scenario, Side, snapshot};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn_publish(env: &Env, cfg: &Path, bundle: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_distributor"))
        .args(["publish", "--json", "--config"])
        .arg(cfg)
        .arg("--source")
        .arg(bundle)
        .env_clear()
        .env("HOME", env.path("home"))
        .env("USER", "tester")
        .env("DISTRIBUTOR_ACTOR", "tester")
        .env("DISTRIBUTOR_JOURNAL", env.journal())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for every child; asserts exit 0; returns each report.
fn wait_all(children: Vec<Child>) -> Vec<Value> {
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}\n{}",
                stdout,
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_str(&stdout).unwrap()
        })
        .collect()
}

fn assert_no_unfinished(env: &Env) {
    for status in ["in_progress", "committed", "diverged"] {
        let r = env.run(&["history", "--json", "--status", status]);
        assert_eq!(r.json()["operations"], serde_json::json!([]), "{status}");
    }
}

fn verify_clean(env: &Env, cfg: &Path) {
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    v.expect_code(0);
}

#[test]
fn parallel_publishers_of_one_destination_serialize_and_the_newest_wins() {
    for descending in [false, true] {
        let env = Env::new();
        let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
        let bundles: Vec<PathBuf> = (1..=6)
            .map(|i| {
                let a = format!("version {i}");
                let only = format!("only{i}.txt");
                env.bundle(
                    &format!("b{i}"),
                    "tomorrow",
                    &format!("2026-12-02T0{i}:00:00Z"),
                    &[("a.txt", &a), ("dir/b.txt", &a), (&only, &a)],
                    &[("l", "a.txt")],
                )
            })
            .collect();
        let mut order: Vec<&PathBuf> = bundles.iter().collect();
        if descending {
            order.reverse();
        }
        let children = order.iter().map(|b| spawn_publish(&env, &cfg, b)).collect();
        let reports = wait_all(children);
        for r in &reports {
            let d = &r["destinations"][0];
            assert!(
                ["applied", "skipped"].contains(&d["status"].as_str().unwrap()),
                "{r}"
            );
        }
        let state: Value = serde_json::from_str(&env.read("dest/.distributor.json")).unwrap();
        assert_eq!(state["source"]["created_at"], "2026-12-02T06:00:00Z");
        assert_eq!(env.read("dest/a.txt"), "version 6");
        assert_eq!(env.read("dest/only6.txt"), "version 6");
        for i in 1..6 {
            assert!(
                !env.exists(&format!("dest/only{i}.txt")),
                "only{i}.txt left"
            );
        }
        assert!(!env.staging_left("dest"));
        verify_clean(&env, &cfg);
        assert_no_unfinished(&env);
        // Serialized: in the order they ran, every applied operation published a newer
        // source than the one before it.
        let h = env.run(&["history", "--json", "--status", "applied"]);
        let mut applied: Vec<String> = h.json()["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["source"]["created_at"].as_str().unwrap().to_string())
            .collect();
        applied.reverse();
        assert!(
            applied.windows(2).all(|w| w[0] < w[1]),
            "applied out of order: {applied:?}"
        );
        assert_eq!(applied.last().unwrap(), "2026-12-02T06:00:00Z");
    }
}

#[test]
fn parallel_owners_of_one_shared_root_keep_every_record() {
    let env = Env::new();
    let sr = "    state:\n      mode: shared_root\n";
    let owners = 6;
    let cfgs: Vec<PathBuf> = (0..owners)
        .map(|i| env.simple_config(&format!("c{i}.yaml"), &format!("p{i}"), "d", "dest", sr))
        .collect();
    for wave in 1..=2 {
        let bundles: Vec<PathBuf> = (0..owners)
            .map(|i| {
                let a = format!("p{i}/a.txt");
                let w = format!("p{i}/wave{wave}.txt");
                let c = format!("owner {i} wave {wave}");
                env.bundle(
                    &format!("b{i}-{wave}"),
                    &format!("src{i}"),
                    &format!("2026-12-02T0{wave}:00:00Z"),
                    &[(&a, &c), (&w, &c)],
                    &[],
                )
            })
            .collect();
        let children = cfgs
            .iter()
            .zip(&bundles)
            .map(|(c, b)| spawn_publish(&env, c, b))
            .collect();
        for r in wait_all(children) {
            assert_eq!(r["destinations"][0]["status"], "applied", "{r}");
        }
        let state: Value = serde_json::from_str(&env.read("dest/.distributor.json")).unwrap();
        let mut listed: Vec<String> = state["owners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["owner"].as_str().unwrap().to_string())
            .collect();
        listed.sort();
        let want: Vec<String> = (0..owners).map(|i| format!("p{i}/d")).collect();
        assert_eq!(listed, want, "wave {wave}");
        let mut outputs: Vec<String> = state["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap().to_string())
            .collect();
        outputs.sort();
        let mut want: Vec<String> = (0..owners)
            .flat_map(|i| [format!("p{i}/a.txt"), format!("p{i}/wave{wave}.txt")])
            .collect();
        want.sort();
        assert_eq!(outputs, want, "wave {wave}");
        for i in 0..owners {
            assert_eq!(
                env.read(&format!("dest/p{i}/a.txt")),
                format!("owner {i} wave {wave}")
            );
        }
        verify_clean(&env, &cfgs[0]);
    }
    assert_no_unfinished(&env);
}

/// Holds `<bundle>/.distributor.lock` the way another distributor process would: the
/// `flock`, and the holder's record in the file (SPEC §16), which a waiting publisher
/// prints once as it starts to wait ([`wait_until_waiting`]).
fn hold_lock(bundle: &Path) -> std::fs::File {
    use std::io::Write;
    std::fs::create_dir_all(bundle).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(bundle.join(".distributor.lock"))
        .unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).unwrap();
    f.set_len(0).unwrap();
    f.write_all(
        br#"{"host": "other-host", "pid": 4242, "actor": "other", "since": "2026-12-02T06:00:00Z"}"#,
    )
    .unwrap();
    f
}

/// Waits until `child` says on stderr that it waits for the lock [`hold_lock`] holds: the
/// moment it is seen to stand at the lock (not a fixed delay). Panics when it exits first,
/// or after a minute. Takes the child's stderr; the rest of it is read and dropped.
fn wait_until_waiting(child: &mut Child) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("waiting for the lock") && line.contains("host other-host, pid 4242") {
                let _ = tx.send(());
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(()) => return,
            Err(_) => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("the publisher exited ({status}) without waiting for the lock");
                }
                assert!(
                    Instant::now() < deadline,
                    "the publisher never said it waits for the lock"
                );
            }
        }
    }
}

#[test]
fn lock_timeout_expires_with_a_clear_error_and_no_write() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    let lock = hold_lock(&env.path("dest"));
    let before = env.snapshot("dest");
    let started = Instant::now();
    let r = env.publish(&cfg, &b, &["--lock-timeout", "0.5"]);
    let waited = started.elapsed();
    r.expect_code(1);
    let msg = r.dest(0)["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("locked by another distributor process") && msg.contains("--lock-timeout"),
        "{msg}"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "gave up after {waited:?}"
    );
    assert_eq!(env.snapshot("dest"), before);
    assert_eq!(
        env.run(&["history", "--json"]).json()["operations"],
        serde_json::json!([]),
        "an operation was journaled without the lock"
    );
    // Released while a publisher waits (it said so): it proceeds.
    let mut child = spawn_publish(&env, &cfg, &b);
    wait_until_waiting(&mut child);
    drop(lock);
    let reports = wait_all(vec![child]);
    assert_eq!(reports[0]["destinations"][0]["status"], "applied");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_waits_for_the_lock_and_times_out_clearly() {
    let sc = Scenario::new(Mode::SingleOwner);
    sc.crash_publish("after_links");
    let frozen = snapshot(&sc.env);
    let lock = hold_lock(&sc.env.path(crate::common::faults::DEST));
    let r = sc.env.run(&[
        "recover",
        "--json",
        "--lock-timeout",
        "0.3",
        "--config",
        sc.cfg.to_str().unwrap(),
    ]);
    r.expect_code(1);
    let op = &r.json()["operations"][0];
    assert_eq!(op["outcome"], "failed");
    assert!(
        op["message"]
            .as_str()
            .unwrap()
            .contains("locked by another distributor process"),
        "{op}"
    );
    assert_eq!(snapshot(&sc.env), frozen);
    drop(lock);
    sc.recover_env(&[]).expect_code(0);
    sc.assert_recovered(Side::Before, "after the lock was released");
}

/// While another process holds the lock, its half-placed files look like unmanaged
/// content: a publisher must not report that as a conflict from a look outside the lock,
/// but wait and plan under the lock.
#[test]
fn a_conflict_seen_outside_the_lock_is_confirmed_under_it() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle(
        "b",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "1")],
        &[],
    );
    // "Another process" is in the middle of an operation: it holds the lock and has
    // placed a.txt, not yet recorded.
    let lock = hold_lock(&env.path("dest"));
    env.write("dest/a.txt", "half-placed by the other process");
    // It looked at the destination before it tried the lock, and now waits for it: it
    // has not decided (a publisher that reported the conflict from its first look would
    // exit instead, and this panics).
    let mut child = spawn_publish(&env, &cfg, &b);
    wait_until_waiting(&mut child);
    // The other process rolls back and releases the lock.
    std::fs::remove_file(env.path("dest/a.txt")).unwrap();
    drop(lock);
    let reports = wait_all(vec![child]);
    assert_eq!(reports[0]["destinations"][0]["decision"], "create");
    assert_eq!(env.read("dest/a.txt"), "1");
}
