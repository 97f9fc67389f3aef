//! Progress in a log (SPEC §20): when stderr is not a terminal, `publish`, `plan`,
//! `verify`, `recover`, `prune` and `manifest` print a line at most every 10 s
//! (`publish latest: 12,000/100,000 files, 1.2 GiB, 41 s`), none with `--quiet`, and
//! never a byte on stdout. The interval is shortened here with
//! `DISTRIBUTOR_PROGRESS_EVERY_MS=0`, so every count prints a line: which lines appear
//! does not depend on timing.

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

/// Every test here shortens the interval to 0: each count prints a line.
const EVERY_COUNT: [(&str, &str); 1] = [("DISTRIBUTOR_PROGRESS_EVERY_MS", "0")];

/// A progress line: `{head}: {done}[/{total}] {unit}[, {bytes}], {secs} s`.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    head: String,
    done: u64,
    total: Option<u64>,
    unit: String,
    bytes: Option<String>,
}

fn number(s: &str) -> u64 {
    s.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {s}"))
}

/// The progress lines of `stderr` whose head is `head` (`verify latest`), parsed; panics
/// on one not in the SPEC §20 form.
fn lines(stderr: &str, head: &str) -> Vec<Line> {
    let prefix = format!("{head}: ");
    stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(|l| {
            let rest = &l[prefix.len()..];
            let body = rest
                .strip_suffix(" s")
                .unwrap_or_else(|| panic!("no seconds: {l}"));
            let (body, secs) = body.rsplit_once(", ").unwrap();
            number(secs);
            let (counts, bytes) = match body.split_once(", ") {
                Some((c, b)) => (c, Some(b.to_string())),
                None => (body, None),
            };
            if let Some(b) = &bytes {
                let (n, unit) = b.split_once(' ').unwrap();
                assert!(n.parse::<f64>().is_ok(), "{l}");
                assert!(["B", "KiB", "MiB", "GiB", "TiB"].contains(&unit), "{l}");
            }
            let (counts, unit) = counts.split_once(' ').unwrap();
            let (done, total) = match counts.split_once('/') {
                Some((d, t)) => (number(d), Some(number(t))),
                None => (number(counts), None),
            };
            Line {
                head: head.to_string(),
                done,
                total,
                unit: unit.to_string(),
                bytes,
            }
        })
        .collect()
}

/// The phases of `lines` (runs of the same unit and total), each checked: counts never go
/// down, and the last is the total. Returns each phase's (unit, total, last line).
fn phases(lines: &[Line]) -> Vec<(String, Option<u64>, Line)> {
    let mut out: Vec<(String, Option<u64>, Line)> = Vec::new();
    let mut prev: Option<&Line> = None;
    for l in lines {
        match prev {
            Some(p) if p.unit == l.unit && p.total == l.total && p.done <= l.done => {
                out.last_mut().unwrap().2 = l.clone();
            }
            _ => out.push((l.unit.clone(), l.total, l.clone())),
        }
        prev = Some(l);
    }
    for (unit, total, last) in &out {
        if let Some(t) = total {
            assert_eq!(
                last.done, *t,
                "{unit}: the last line is not the total: {lines:?}"
            );
        }
    }
    out
}

fn five_files(env: &Env, rel: &str, at: &str, content: &str) -> std::path::PathBuf {
    let files: Vec<(String, String)> = (0..5)
        .map(|i| (format!("d{}/f{i}.txt", i % 2), content.repeat(200)))
        .collect();
    let f: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    env.bundle(rel, "site", at, &f, &[])
}

/// `plan` shows how probing the destination and hashing the source go; `--quiet` shows
/// nothing; `--json` on stdout is the same either way.
#[test]
fn plan_prints_progress_lines_for_probing_and_hashing() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let c = cfg.to_str().unwrap();
    env.publish(
        &cfg,
        &five_files(&env, "b1", "2026-12-02T06:00:00Z", "a"),
        &[],
    )
    .expect_code(0);
    let b2 = five_files(&env, "b2", "2026-12-02T07:00:00Z", "b");
    let args = [
        "plan",
        "--json",
        "--config",
        c,
        "--source",
        b2.to_str().unwrap(),
    ];
    let r = env.run_env(&args, &EVERY_COUNT);
    r.expect_code(0);
    let got = phases(&lines(&r.stderr, "plan latest"));
    let units: Vec<(&str, Option<u64>)> = got.iter().map(|(u, t, _)| (u.as_str(), *t)).collect();
    // The five paths, the state file; then the five files a real run would write.
    assert_eq!(
        units,
        [("paths probed", Some(6)), ("files hashed", Some(5))],
        "{}",
        r.stderr
    );
    assert_eq!(got[1].2.bytes.as_deref(), Some("1000 B"), "{}", r.stderr);
    let quiet = env.run_env(
        &[
            "plan",
            "--quiet",
            "--json",
            "--config",
            c,
            "--source",
            b2.to_str().unwrap(),
        ],
        &EVERY_COUNT,
    );
    quiet.expect_code(0);
    assert!(!quiet.stderr.contains("plan latest: "), "{}", quiet.stderr);
    assert_eq!(r.stdout, quiet.stdout, "progress changed stdout");
    // A republication is probed from the manifest alone: its own phase.
    let r = env.run_env(
        &[
            "plan",
            "--config",
            c,
            "--source",
            env.path("b1").to_str().unwrap(),
        ],
        &EVERY_COUNT,
    );
    r.expect_code(0);
    let got = phases(&lines(&r.stderr, "plan latest"));
    assert_eq!(got.len(), 1, "{}", r.stderr);
    assert_eq!((got[0].0.as_str(), got[0].1), ("paths probed", Some(6)));
}

/// `verify` shows how checking each recorded file goes (hashing its bytes).
#[test]
fn verify_prints_progress_lines_for_each_recorded_file() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", "dest", "");
    let c = cfg.to_str().unwrap();
    env.publish(
        &cfg,
        &five_files(&env, "b1", "2026-12-02T06:00:00Z", "a"),
        &[],
    )
    .expect_code(0);
    let r = env.run_env(&["verify", "--json", "--config", c], &EVERY_COUNT);
    r.expect_code(0);
    let all = lines(&r.stderr, "verify latest");
    let got = phases(&all);
    assert_eq!(got.len(), 1, "{}", r.stderr);
    assert_eq!((got[0].0.as_str(), got[0].1), ("files", Some(5)));
    assert_eq!(got[0].2.bytes.as_deref(), Some("1000 B"), "{}", r.stderr);
    assert!(all.len() >= 5, "a line for each file: {}", r.stderr);
    let quiet = env.run_env(
        &["verify", "--quiet", "--json", "--config", c],
        &EVERY_COUNT,
    );
    quiet.expect_code(0);
    assert!(
        !quiet.stderr.contains("verify latest: "),
        "{}",
        quiet.stderr
    );
    assert_eq!(r.stdout, quiet.stdout, "progress changed stdout");
}

/// `manifest` shows the files found, then the files and bytes hashed.
#[test]
fn manifest_prints_progress_lines_for_walking_and_hashing() {
    let env = Env::new();
    let dir = five_files(&env, "b", "2026-12-02T06:00:00Z", "a");
    let d = dir.to_str().unwrap();
    let args = [
        "manifest",
        d,
        "--id",
        "site",
        "--created-at",
        "2026-12-02T06:00:00Z",
    ];
    let r = env.run_env(&args, &EVERY_COUNT);
    r.expect_code(0);
    let written = env.read("b/distributor-manifest.json");
    let got = phases(&lines(&r.stderr, "manifest"));
    let units: Vec<(&str, Option<u64>)> = got.iter().map(|(u, t, _)| (u.as_str(), *t)).collect();
    assert_eq!(
        units,
        [("files found", None), ("files", Some(5))],
        "{}",
        r.stderr
    );
    assert_eq!(got[0].2.done, 5, "{}", r.stderr);
    assert_eq!(got[1].2.bytes.as_deref(), Some("1000 B"), "{}", r.stderr);
    let mut quiet_args = args.to_vec();
    quiet_args.push("--quiet");
    let quiet = env.run_env(&quiet_args, &EVERY_COUNT);
    quiet.expect_code(0);
    assert!(!quiet.stderr.contains("manifest: "), "{}", quiet.stderr);
    assert_eq!(r.stdout, quiet.stdout, "progress changed stdout");
    assert_eq!(written, env.read("b/distributor-manifest.json"));
}

/// Five releases published with `keep: 10`, then `keep: 1` recorded: a prune removes some.
fn releases_to_prune(env: &Env) -> std::path::PathBuf {
    let releases = |keep: u32| {
        env.simple_config(
            "c.yaml",
            "weather",
            "latest",
            "www/latest",
            &format!("    releases:\n      keep: {keep}\n"),
        )
    };
    let cfg = releases(10);
    for i in 0..5 {
        let at = format!("2026-12-02T0{i}:00:00Z");
        let b = five_files(env, &format!("b{i}"), &at, &i.to_string());
        env.publish(&cfg, &b, &[]).expect_code(0);
    }
    let cfg = releases(1);
    let c = cfg.to_str().unwrap();
    env.run(&["releases", "settings", "--config", c])
        .expect_code(0);
    cfg
}

/// `prune` shows each release it removes.
#[test]
fn prune_prints_progress_lines_for_each_release_removed() {
    let env = Env::new();
    let cfg = releases_to_prune(&env);
    let c = cfg.to_str().unwrap();
    let dry = env.run_env(
        &["prune", "--dry-run", "--json", "--config", c],
        &EVERY_COUNT,
    );
    dry.expect_code(0);
    assert!(
        !dry.stderr.contains("prune latest: "),
        "removes nothing: {}",
        dry.stderr
    );
    let r = env.run_env(&["prune", "--json", "--config", c], &EVERY_COUNT);
    r.expect_code(0);
    let removed = r.json()["destinations"][0]["removed"].as_u64().unwrap();
    assert!(removed >= 2, "{}", r.stdout);
    let all = lines(&r.stderr, "prune latest");
    assert_eq!(all.len() as u64, removed, "a line for each: {}", r.stderr);
    let got = phases(&all);
    assert_eq!(got.len(), 1, "{}", r.stderr);
    assert_eq!(got[0].0, "releases removed");
    assert_eq!(got[0].1, Some(removed), "{}", r.stderr);
    // The progress is on stderr alone: stdout is the one JSON object.
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("stdout is JSON");
    assert_eq!(v["command"], "prune");
    // --quiet: none, while it removes as many.
    let env = Env::new();
    let cfg = releases_to_prune(&env);
    let c = cfg.to_str().unwrap();
    let r = env.run_env(&["prune", "--quiet", "--json", "--config", c], &EVERY_COUNT);
    r.expect_code(0);
    assert_eq!(
        r.json()["destinations"][0]["removed"].as_u64(),
        Some(removed)
    );
    assert!(!r.stderr.contains("prune latest: "), "{}", r.stderr);
}

/// `recover` shows each interrupted operation it deals with.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_prints_progress_lines_for_each_operation() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "dest",
        "    path_mapping:\n      mode: source_id\n",
    );
    let c = cfg.to_str().unwrap();
    // Two publications to two bundle paths, each stopped after its staging record.
    for (i, id) in ["one", "two"].iter().enumerate() {
        let at = format!("2026-12-02T0{i}:00:00Z");
        let b = env.bundle(&format!("b{i}"), id, &at, &[("a.txt", "x")], &[]);
        let crashed = env.run_env(
            &["publish", "--config", c, "--source", b.to_str().unwrap()],
            &[("DISTRIBUTOR_FAILPOINT", "after_links")],
        );
        assert_eq!(crashed.code, -1, "{}", crashed.stderr);
    }
    let dry = env.run_env(
        &["recover", "--dry-run", "--json", "--config", c],
        &EVERY_COUNT,
    );
    dry.expect_code(0);
    let got = phases(&lines(&dry.stderr, "recover"));
    assert_eq!(got.len(), 1, "{}", dry.stderr);
    assert_eq!((got[0].0.as_str(), got[0].1), ("operations", Some(2)));
    let quiet = env.run_env(
        &["recover", "--dry-run", "--quiet", "--json", "--config", c],
        &EVERY_COUNT,
    );
    quiet.expect_code(0);
    assert!(!quiet.stderr.contains("recover: "), "{}", quiet.stderr);
    assert_eq!(dry.stdout, quiet.stdout, "progress changed stdout");
    let r = env.run_env(&["recover", "--json", "--config", c], &EVERY_COUNT);
    r.expect_code(0);
    let all = lines(&r.stderr, "recover");
    assert_eq!(
        all.iter().map(|l| l.done).collect::<Vec<_>>(),
        [1, 2],
        "{}",
        r.stderr
    );
    assert_eq!(r.json()["summary"]["operations"], 2, "{}", r.stdout);
}
