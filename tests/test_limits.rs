//! Hostile sizes fail cleanly (the scale issue): a state file, a manifest or a config over
//! its limit is refused before it is read, with an error naming the file, its size, the
//! limit and how to raise it: invalid state (conflict `invalid_state`), an invalid source
//! (exit 1, no journal), a config error (exit 2). The large files are generated sparse,
//! never committed.

use crate::common::Env;
use crate::common::backend::{Backend, World};
use std::fs::OpenOptions;

/// Makes `rel` a sparse file of `len` bytes (no disk used, no bytes written).
fn sparse(env: &Env, rel: &str, len: u64) {
    let p = env.path(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&p)
        .unwrap();
    f.set_len(len).unwrap();
}

#[test]
fn a_state_file_over_the_limit_is_invalid_state_and_never_read() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &[("a.txt", "1")], &[]);
    // 257 MiB, one more than the default limit: refused by its size alone.
    sparse(&env, "dest/.distributor.json", (256 << 20) + (1 << 20));
    let before = env.snapshot_unlocked("dest");
    let s = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    s.expect_code(0);
    let d = &s.json()["destinations"][0];
    assert_eq!(d["state"], "invalid", "{d}");
    let why = d["invalid_reason"].as_str().unwrap();
    assert!(
        why.contains("is 269484032 bytes (257.0 MiB), over the limit of 268435456 bytes")
            && why.contains("DISTRIBUTOR_MAX_STATE_BYTES"),
        "{why}"
    );
    let r = env.publish(&cfg, &b, &[]);
    r.expect_code(3);
    assert_eq!(r.conflict_kinds(), ["invalid_state"]);
    assert_eq!(env.snapshot_unlocked("dest"), before, "nothing written");

    // A lower limit applies to a real state file too.
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &[("a.txt", "1")], &[]);
    env.publish(&cfg, &b, &[]).expect_code(0);
    let limited = [("DISTRIBUTOR_MAX_STATE_BYTES", "100")];
    let args = ["status", "--json", "--config", cfg.to_str().unwrap()];
    let s = env.run_env(&args, &limited);
    s.expect_code(0);
    assert_eq!(s.json()["destinations"][0]["state"], "invalid");
    let s = env.run_env(&args, &[("DISTRIBUTOR_MAX_STATE_BYTES", "1M")]);
    assert_eq!(s.json()["destinations"][0]["state"], "valid");
    // A bad value is a usage error naming the variable.
    let s = env.run_env(&args, &[("DISTRIBUTOR_MAX_STATE_BYTES", "lots")]);
    s.expect_code(2);
    assert!(
        s.stderr
            .contains("DISTRIBUTOR_MAX_STATE_BYTES=lots: accepted is a number of bytes"),
        "{}",
        s.stderr
    );
}

#[test]
fn a_manifest_over_the_limit_is_an_invalid_source_and_nothing_is_journaled() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    sparse(&env, "b/distributor-manifest.json", (256 << 20) + 1);
    let b = env.path("b");
    for cmd in ["publish", "plan"] {
        let r = env.run(&[
            cmd,
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ]);
        r.expect_code(1);
        assert!(
            r.stderr.contains(&format!(
                "invalid source: manifest {}/distributor-manifest.json is 268435457 bytes",
                b.display()
            )) && r.stderr.contains("DISTRIBUTOR_MAX_MANIFEST_BYTES"),
            "{cmd}: {}",
            r.stderr
        );
    }
    assert!(!env.journal().exists(), "a journal was written");
    assert!(!env.exists("dest"), "a destination was touched");
    // Raised, the same manifest is read (and is then not JSON).
    let r = env.run_env(
        &[
            "plan",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_MAX_MANIFEST_BYTES", "1G")],
    );
    r.expect_code(1);
    assert!(!r.stderr.contains("over the limit"), "{}", r.stderr);
}

#[test]
fn a_config_over_four_mib_is_refused_before_it_is_read() {
    let env = Env::new();
    sparse(&env, "c.yaml", (4 << 20) + 1);
    let r = env.run(&["validate", "--config", env.path("c.yaml").to_str().unwrap()]);
    r.expect_code(2);
    assert!(
        r.stderr
            .contains("is 4194305 bytes (4.0 MiB); a config is at most 4.0 MiB"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_s3_state_object_over_the_limit_is_invalid_state_and_not_downloaded() {
    let _ = crate::common::s3::require_moto!();
    let w = World::new(Backend::S3);
    let cfg = w.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = w.bundle("b", "one", "2026-12-02T06:00:00Z", &[("a.txt", "1")], &[]);
    w.publish(&cfg, &b, &[]).expect_code(0);
    let mut vars = w.vars();
    vars.push(("DISTRIBUTOR_MAX_STATE_BYTES", "100"));
    let s = w.env.run_env(
        &["status", "--json", "--config", cfg.to_str().unwrap()],
        &vars,
    );
    s.expect_code(0);
    let d = &s.json()["destinations"][0];
    assert_eq!(d["state"], "invalid", "{d}");
    assert!(
        d["invalid_reason"]
            .as_str()
            .unwrap()
            .contains("over the limit of 100 bytes"),
        "{d}"
    );
}

/// A first publication that creates many directories holds no open handle per directory
/// while it stages (each new tree's files are created through one handle of `new/tree/`):
/// 200 new directories publish under a limit of 300 open files, as they did when staging
/// was flat. (A build that kept each staged directory open failed here with "Too many open
/// files".) Run through `sh -c 'ulimit -n 300; exec distributor ...'`.
#[test]
fn many_new_directories_stage_within_a_small_open_file_limit() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let names: Vec<(String, String)> = (0..400)
        .map(|i| (format!("d{:03}/f{i}.txt", i % 200), format!("file {i}")))
        .collect();
    let files: Vec<(&str, &str)> = names
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let b = env.bundle("b", "one", "2026-12-02T06:00:00Z", &files, &[]);
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 300 && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_distributor"))
        .args(["publish", "--config", cfg.to_str().unwrap(), "--source"])
        .arg(&b)
        .env_clear()
        .env("HOME", env.path("home"))
        .env("DISTRIBUTOR_ACTOR", "tester")
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DISTRIBUTOR_JOURNAL", env.journal())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(env.read("dest/d199/f399.txt"), "file 399");
    assert!(!env.staging_left("dest"));
}
