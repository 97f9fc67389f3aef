//! The text report at any size (SPEC §16), as snapshots (`insta`; temp paths, operation
//! ids, digests and times filtered out): counts by op first, at most 20 file lines unless
//! `--files`, `--quiet` for the summary alone, conflicts grouped by kind with a count and
//! the first paths, human-readable sizes. `--json` stays complete.
//!
//! Update the snapshots after a deliberate change: `cargo insta review`, or run with
//! `INSTA_UPDATE=always` and read the diff.

use crate::common::{Env, Run};

fn settings(env: &Env) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    let root = env.path("c.yaml");
    let root = root.parent().unwrap().to_str().unwrap();
    s.add_filter(&regex_escape(root), "[TMP]/");
    s.add_filter(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[OP]",
    );
    s.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[DIGEST]");
    s.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "[TIME]");
    s
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('/');
    out
}

/// A bundle of `n` files `f01.txt`... of `size` bytes each (created at a minute that
/// depends on the size).
fn bundle(env: &Env, rel: &str, n: usize, size: usize) -> std::path::PathBuf {
    let files: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("f{i:02}.txt"), format!("{i:0size$}")))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let at = format!("2026-12-02T06:{:02}:00Z", size % 60);
    env.bundle(rel, "report", &at, &refs, &[])
}

fn text(env: &Env, what: &str, cfg: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> Run {
    let mut args = vec![
        what,
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    env.run(&args)
}

#[test]
fn a_large_publication_lists_counts_and_twenty_files() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = bundle(&env, "b", 45, 1500);
    let r = text(&env, "publish", &cfg, &b, &[]);
    r.expect_code(0);
    assert_eq!(
        r.stdout.lines().filter(|l| l.starts_with("  + ")).count(),
        20
    );
    settings(&env).bind(|| insta::assert_snapshot!("publish_45_files", r.stdout));

    // --files lists every one; --quiet prints the summary alone.
    let r = text(&env, "plan", &cfg, &b, &["--files"]);
    r.expect_code(0);
    assert_eq!(
        r.stdout.lines().filter(|l| l.starts_with("  = ")).count(),
        45
    );
    let r = text(&env, "publish", &cfg, &b, &["--quiet"]);
    r.expect_code(0);
    settings(&env).bind(|| insta::assert_snapshot!("publish_quiet", r.stdout));

    // JSON stays complete.
    let j = env.publish(&cfg, &b, &[]);
    assert_eq!(j.dest(0)["files"].as_array().unwrap().len(), 45);
}

#[test]
fn conflicts_of_one_kind_are_one_group_with_a_count_and_the_first_paths() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b = bundle(&env, "b", 30, 10);
    for i in 1..=12 {
        env.write(&format!("dest/f{i:02}.txt"), "hand-made");
    }
    let r = text(&env, "plan", &cfg, &b, &[]);
    r.expect_code(3);
    settings(&env).bind(|| insta::assert_snapshot!("plan_conflicts_grouped", r.stdout));
    let r = text(&env, "plan", &cfg, &b, &["--files"]);
    assert!(
        r.stdout.contains("at f01.txt, f02.txt, f03.txt, f04.txt, f05.txt, f06.txt, f07.txt, f08.txt, f09.txt, f10.txt, f11.txt, f12.txt\n"),
        "{}",
        r.stdout
    );
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_publication_refused_for_recovery_stays_short() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let b1 = bundle(&env, "b1", 40, 100);
    text(&env, "publish", &cfg, &b1, &[]).expect_code(0);
    let b2 = bundle(&env, "b2", 40, 110);
    let killed = env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_staging")],
    );
    crate::common::faults::assert_aborted(&killed, "after_staging");
    let r = text(&env, "publish", &cfg, &b2, &[]);
    r.expect_code(4);
    assert!(r.stdout.lines().count() < 35, "{}", r.stdout);
    settings(&env).bind(|| insta::assert_snapshot!("publish_refused_recovery", r.stdout));
}
