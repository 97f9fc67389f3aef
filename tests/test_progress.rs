//! Progress in a log (SPEC §20): when stderr is not a terminal, `publish` prints a line at
//! most every 10 s while it stages files (`publish latest: 12,000/100,000 files, 1.2 GiB,
//! 41 s`), none with `--quiet` or for a dry run. The interval is shortened here with
//! `DISTRIBUTOR_PROGRESS_EVERY_MS`, so lines appear without waiting.

use crate::common::Env;

#[test]
fn publish_prints_progress_lines_when_stderr_is_not_a_terminal() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let files: Vec<(String, String)> = (0..5)
        .map(|i| (format!("f{i}.txt"), "x".repeat(1000)))
        .collect();
    let f: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let b = env.bundle("b", "site", "2026-12-02T06:00:00Z", &f, &[]);
    let args = [
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b.to_str().unwrap(),
    ];
    let r = env.run_env(&args, &[("DISTRIBUTOR_PROGRESS_EVERY_MS", "0")]);
    r.expect_code(0);
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("publish latest: "))
        .collect();
    assert!(!lines.is_empty(), "no progress line: {}", r.stderr);
    let last = lines.last().unwrap();
    assert!(
        last.contains("/5 files, ") && last.ends_with(" s"),
        "{last}"
    );
    assert!(lines.iter().any(|l| l.contains("5/5 files")), "{lines:?}");
    // Nothing staged, nothing printed: a republication, a dry run, --quiet.
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut a = args.to_vec();
        a.extend_from_slice(extra);
        let r = env.run_env(&a, &[("DISTRIBUTOR_PROGRESS_EVERY_MS", "0")]);
        assert!(
            !r.stderr.contains("publish latest: "),
            "{extra:?}: {}",
            r.stderr
        );
    }
    let b2 = env.bundle("b2", "site", "2026-12-02T07:00:00Z", &[("g.txt", "1")], &[]);
    let r = env.run_env(
        &[
            "publish",
            "--quiet",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            b2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_PROGRESS_EVERY_MS", "0")],
    );
    r.expect_code(0);
    assert!(!r.stderr.contains("publish latest: "), "{}", r.stderr);
    // At the default interval a short publication prints none.
    let b3 = env.bundle("b3", "site", "2026-12-02T08:00:00Z", &[("h.txt", "1")], &[]);
    let r = env.run(&[
        "publish",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        b3.to_str().unwrap(),
    ]);
    r.expect_code(0);
    assert!(!r.stderr.contains("publish latest: "), "{}", r.stderr);
}
