//! Chaos (SPEC §6, §8, §13): rounds of concurrent `distributor publish` processes on one
//! destination, with two journals, some killed with SIGKILL at a random moment; then
//! `recover` with every journal (and, for a shared root, every pipeline's config), and the
//! invariants every recovery must keep:
//!
//! - every `recover` exits 0, and a second one finds nothing to do;
//! - no `.distributor/staging` is left;
//! - each owner's files are exactly one of its versions (byte for byte, directories
//!   included), the one its state names, plus the unmanaged files, untouched;
//! - `verify` is clean: nothing missing or modified, nothing unrecorded but the unmanaged
//!   files; each recorded file's sha256 matches its content;
//! - a publication that reported `applied` is never lost: the state names it or a newer
//!   version;
//! - canaries outside and beside the destination are untouched;
//! - no operation in either journal is left `in_progress`, `committed` or `diverged`, and
//!   the destination publishes again.
//!
//! Rounds alternate single_owner and shared_root (two pipelines' configs on the same path,
//! each owning its own files). Everything but timing follows from the seed: round `n` uses
//! its own PRNG seeded from (seed, n), so any round replays alone.
//!
//! - `DISTRIBUTOR_CHAOS_SEED=<u64, decimal or 0x hex>`: the seed (default [`DEFAULT_SEED`]);
//! - `DISTRIBUTOR_CHAOS_ROUND=<n>`: replay round `n` over and over (timing varies);
//! - `DISTRIBUTOR_CHAOS_SECS=<s>`: the time budget (default [`DEFAULT_SECS`]).
//!
//! Each round prints its actions; a failure names the seed and the round.

use crate::common::Env;
use crate::common::chaos::{Rng, assert_nothing_needs_a_person, recover_with, recovered};
use distributor::source::relative_link_target;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DEFAULT_SEED: u64 = 0xC4A0_5EED_2026_1202;
/// The loop's time budget; setup and the last round come on top.
const DEFAULT_SECS: u64 = 95;
/// Rounds run whatever the budget (three of them with a publisher paused after staging).
const MIN_ROUNDS: usize = 10;
/// Versions prepared per pipeline, created_at one hour apart.
const VERSIONS: usize = 5;
/// The bundle path, relative to each round's env root.
const DEST: &str = "dest/root";
const PIPELINES: [&str; 2] = ["px", "py"];
/// Each pipeline's files live under its own prefix (a shared root splits by owner).
const PREFIXES: [&str; 2] = ["x", "y"];
/// Paths a version picks its files from (below its prefix); `t` (a file or a directory)
/// and `sw` (a file or a link) change kind between versions.
const POOL: &[&str] = &[
    "a.txt",
    "b.txt",
    "c.txt",
    "d1/e.txt",
    "d1/f.txt",
    "d1/sub/g.txt",
    "d2/h.txt",
    "d2/i.txt",
    "d3/deep/j.txt",
    "k.bin",
    "m.txt",
    "n/o.txt",
    "n/p/q.txt",
    "r.txt",
    "u/v.txt",
    "w.txt",
];
const OUTSIDE: (&str, &str) = ("outside/canary.txt", "outside the destination");
const BESIDE: (&str, &str) = ("dest/beside.txt", "beside the destination, same parent");
const STATUS_OK: &[i32] = &[0, 4];

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => v.replace('_', "").parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v}: {e}")))
}

/// One prepared bundle.
struct Version {
    index: usize,
    created_at: String,
    dir: PathBuf,
    /// (path, content), bundle-relative.
    files: Vec<(String, String)>,
    /// (path, target), both bundle-relative.
    links: Vec<(String, String)>,
}

fn created_at(index: usize) -> String {
    format!("2026-12-02T{:02}:00:00Z", 6 + index)
}

fn content(rng: &mut Rng, head: &str) -> String {
    let size = if rng.chance(1, 8) {
        rng.range(32 * 1024, 96 * 1024)
    } else {
        rng.range(16, 2048)
    } as usize;
    let mut s = format!("{head} {:016x}\n", rng.next_u64());
    while s.len() < size {
        s.push_str(&format!("{:016x}", rng.next_u64()));
    }
    s.truncate(size.max(head.len()));
    s
}

/// The versions of every pipeline, built in `lib` from `seed` alone.
fn prepare(lib: &Env, seed: u64) -> Vec<Vec<Version>> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (p, prefix) in PREFIXES.iter().enumerate() {
        let mut versions: Vec<Version> = Vec::new();
        for index in 0..VERSIONS {
            let mut pool: Vec<&str> = POOL.to_vec();
            rng.shuffle(&mut pool);
            let n = rng.range(5, 14) as usize;
            let mut paths: Vec<String> = pool[..n].iter().map(|s| s.to_string()).collect();
            match rng.below(3) {
                0 => paths.push("t".into()),
                1 => paths.push("t/inner.txt".into()),
                _ => {}
            }
            let sw_is_file = rng.chance(1, 2);
            if sw_is_file {
                paths.push("sw".into());
            }
            let mut files = Vec::new();
            for rel in paths {
                let path = format!("{prefix}/{rel}");
                // Some files are the same as in the first version: unchanged paths.
                let same = versions
                    .first()
                    .and_then(|v0| v0.files.iter().find(|(q, _)| *q == path))
                    .filter(|_| rng.chance(1, 3))
                    .map(|(_, c)| c.clone());
                let c = match same {
                    Some(c) => c,
                    None => content(&mut rng, &format!("{prefix} v{index} {path}")),
                };
                files.push((path, c));
            }
            files.sort();
            let mut links = Vec::new();
            let target = |rng: &mut Rng| rng.pick(&files).0.clone();
            links.push((format!("{prefix}/l1"), target(&mut rng)));
            if rng.chance(1, 2) {
                links.push((format!("{prefix}/d2/l2"), target(&mut rng)));
            }
            if !sw_is_file {
                links.push((format!("{prefix}/sw"), target(&mut rng)));
            }
            let rel = format!("bundles/{}-v{index}", PIPELINES[p]);
            let f: Vec<(&str, &str)> = files
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let l: Vec<(&str, &str)> = links
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let at = created_at(index);
            let dir = lib.bundle(&rel, &format!("src-{}", PIPELINES[p]), &at, &f, &l);
            versions.push(Version {
                index,
                created_at: at,
                dir,
                files,
                links,
            });
        }
        out.push(versions);
    }
    out
}

/// One publisher of a round.
#[derive(Debug, Clone, Copy)]
struct Publisher {
    pipeline: usize,
    version: usize,
    journal: usize,
    killed: bool,
}

/// Counters over the whole run, to show the chaos did something.
#[derive(Debug, Default)]
struct Stats {
    rounds: usize,
    publishers: usize,
    kill_signals: usize,
    killed_mid_run: usize,
    refused: usize,
    recovers_killed: usize,
    outcomes: BTreeMap<String, usize>,
}

fn journal_name(j: usize) -> &'static str {
    ["A", "B"][j]
}

/// Every ancestor directory of `path` (bundle-relative).
fn ancestors(path: &str, into: &mut BTreeMap<String, String>) {
    let mut p = path;
    while let Some((parent, _)) = p.rsplit_once('/') {
        into.insert(parent.to_string(), "<dir>".into());
        p = parent;
    }
}

fn run_round(versions: &[Vec<Version>], seed: u64, n: u64, stats: &mut Stats) {
    let mut rng = Rng::new(seed ^ (n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let shared = n % 2 == 1;
    let mode = if shared {
        "shared_root"
    } else {
        "single_owner"
    };
    let pipelines: Vec<usize> = if shared { vec![0, 1] } else { vec![0] };
    let env = Env::new();
    let state_yaml = format!("    state:\n      mode: {mode}\n");
    let cfgs: Vec<PathBuf> = pipelines
        .iter()
        .map(|&p| {
            let name = PIPELINES[p];
            env.simple_config(&format!("{name}.yaml"), name, "d", DEST, &state_yaml)
        })
        .collect();
    let journals = [env.path("journal-a.sqlite3"), env.path("journal-b.sqlite3")];
    let ctx = format!("seed {seed:#x} round {n} ({mode})");

    // Canaries outside and beside the destination; unmanaged files inside it, one in a
    // directory the pipeline's files share.
    env.write(OUTSIDE.0, OUTSIDE.1);
    env.write(BESIDE.0, BESIDE.1);
    let mut unmanaged: Vec<(&str, &str)> = vec![
        ("unmanaged.txt", "nobody's"),
        ("x/d1/hand.txt", "hand-made, inside x/d1"),
    ];
    if shared {
        unmanaged.push(("y/d2/hand.txt", "hand-made, inside y/d2"));
    }
    for (p, c) in &unmanaged {
        env.write(&format!("{DEST}/{p}"), c);
    }

    // A history to replace: each pipeline's first or second version.
    let mut initial = Vec::new();
    let mut initial_version = [0usize; 2];
    for (c, &p) in pipelines.iter().enumerate() {
        let v = rng.below(2) as usize;
        initial_version[p] = v;
        let j = rng.below(2) as usize;
        initial.push(format!("{}:v{v}:{}", PIPELINES[p], journal_name(j)));
        let r = env.run(
            &publish_args(&cfgs[c], &versions[p][v].dir, &journals[j])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(
            r.code, 0,
            "{ctx}: initial publish\nstdout:\n{}\nstderr:\n{}",
            r.stdout, r.stderr
        );
    }

    let count = rng.range(1, 4) as usize;
    let mut pubs: Vec<Publisher> = (0..count)
        .map(|_| Publisher {
            pipeline: *rng.pick(&pipelines),
            version: rng.below(VERSIONS as u64) as usize,
            journal: rng.below(2) as usize,
            killed: false,
        })
        .collect();
    let delay = rng.range(0, 40);
    for p in pubs.iter_mut() {
        p.killed = rng.chance(1, 2);
    }
    // Every fourth round (with the failpoints feature) kills its first publisher at a
    // moment it is seen to have reached, not after a delay: paused after staging, alone
    // with the lock, publishing another version than the one there. So some kill surely
    // interrupts an operation that recovery must undo, however slow the machine (the
    // coverage check at the end), while the other rounds keep their random timing.
    let paused = cfg!(feature = "failpoints") && n.is_multiple_of(4);
    if paused {
        let first = &mut pubs[0];
        first.killed = true;
        if first.version == initial_version[first.pipeline] {
            first.version = (first.version + 1) % VERSIONS;
        }
    }
    let mut order: Vec<(usize, usize)> = (0..cfgs.len())
        .flat_map(|c| (0..2).map(move |j| (c, j)))
        .collect();
    rng.shuffle(&mut order);
    let describe: Vec<String> = pubs
        .iter()
        .map(|p| {
            format!(
                "{}:v{}:{}{}",
                PIPELINES[p.pipeline],
                p.version,
                journal_name(p.journal),
                if p.killed { ":kill" } else { "" }
            )
        })
        .collect();
    let order_s: Vec<String> = order
        .iter()
        .map(|&(c, j)| format!("{}:{}", PIPELINES[pipelines[c]], journal_name(j)))
        .collect();
    // Sometimes a first `recover` is killed too (SPEC §13: no crash of `recover` leaves an
    // operation that needs a person): (config, journal, delay in ms).
    let killed_recover = rng.chance(1, 3).then(|| {
        (
            rng.below(cfgs.len() as u64) as usize,
            rng.below(2) as usize,
            rng.range(0, 25),
        )
    });
    let killed_recover_s = killed_recover
        .map(|(c, j, d)| {
            format!(
                ", killed recover {}:{} after {d} ms",
                PIPELINES[pipelines[c]],
                journal_name(j)
            )
        })
        .unwrap_or_default();
    println!(
        "round {n} {mode}: initial [{}], publishers [{}], kill after {delay} ms{}{killed_recover_s}, recover [{}]",
        initial.join(" "),
        describe.join(" "),
        if paused {
            " (the first once paused after staging)"
        } else {
            ""
        },
        order_s.join(" ")
    );

    // The publishers, all at once; the kills; the rest run to the end.
    let cfg_of = |p: usize| &cfgs[pipelines.iter().position(|&q| q == p).unwrap()];
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let spawn = |p: &Publisher, vars: &[(&str, &str)]| {
        let args = publish_args(
            cfg_of(p.pipeline),
            &versions[p.pipeline][p.version].dir,
            &journals[p.journal],
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.spawn_env(&args, vars)
    };
    let mut children: Vec<std::process::Child> = Vec::new();
    if paused {
        let vars = [
            ("DISTRIBUTOR_FAILPOINT", "after_staging=pause"),
            ("DISTRIBUTOR_FAILPOINT_PAUSE", pause.to_str().unwrap()),
        ];
        let mut first = spawn(&pubs[0], &vars);
        let reached = pause.join("after_staging.paused");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !reached.exists() && first.try_wait().ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "{ctx}: the first publisher never reached staging"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        children.push(first);
    }
    for p in &pubs[children.len()..] {
        children.push(spawn(p, &[]));
    }
    std::thread::sleep(Duration::from_millis(delay));
    for (child, p) in children.iter_mut().zip(&pubs) {
        if p.killed {
            // Child::kill sends SIGKILL; a child that is done already is left as it is.
            let _ = child.kill();
            stats.kill_signals += 1;
        }
    }
    let mut applied: Vec<(usize, usize)> = Vec::new();
    let mut ends = Vec::new();
    for (child, p) in children.into_iter().zip(&pubs) {
        let out = child.wait_with_output().expect("wait for publish");
        stats.publishers += 1;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match (out.status.code(), out.status.signal()) {
            (None, Some(9)) => {
                stats.killed_mid_run += 1;
                ends.push("killed".to_string());
            }
            (Some(code), _) => {
                ends.push(format!("exit {code}"));
                assert!(
                    STATUS_OK.contains(&code),
                    "{ctx}: publisher {}:v{} (journal {}) exited {code}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                    PIPELINES[p.pipeline],
                    p.version,
                    journal_name(p.journal)
                );
                if code == 4 {
                    stats.refused += 1;
                }
                if code == 0 {
                    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
                        panic!("{ctx}: publish report is not JSON ({e}): {stdout}")
                    });
                    if v["destinations"][0]["status"] == "applied" {
                        applied.push((p.pipeline, p.version));
                    }
                }
            }
            (None, sig) => panic!(
                "{ctx}: publisher {}:v{} ended by signal {sig:?}\nstderr:\n{stderr}",
                PIPELINES[p.pipeline], p.version
            ),
        }
    }
    println!("  publishers ended: [{}]", ends.join(", "));

    if let Some((c, j, d)) = killed_recover {
        let args = [
            "recover",
            "--json",
            "--config",
            cfgs[c].to_str().unwrap(),
            "--journal",
            journals[j].to_str().unwrap(),
        ];
        let mut child = env.spawn_env(&args, &[]);
        std::thread::sleep(Duration::from_millis(d));
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait for recover");
        let end = match (out.status.code(), out.status.signal()) {
            (None, Some(9)) => {
                stats.recovers_killed += 1;
                "killed".to_string()
            }
            (Some(code), _) => format!("exit {code}"),
            (None, sig) => format!("signal {sig:?}"),
        };
        println!("  killed recover ended: {end}");
    }

    // Recover with every journal, every config, in the round's order.
    let mut outcomes = Vec::new();
    for &(c, j) in &order {
        let r = recover_with(&env, &cfgs[c], &journals[j], &[]);
        if r.code != 0 {
            let ops: Vec<(String, String, String)> = serde_json::from_str::<Value>(&r.stdout)
                .map(|_| recovered(&r))
                .unwrap_or_default();
            panic!(
                "{ctx}: recover with journal {} ({}) exited {}: {ops:?}\nconfig {}\nstdout:\n{}\nstderr:\n{}",
                journal_name(j),
                journals[j].display(),
                r.code,
                cfgs[c].display(),
                r.stdout,
                r.stderr
            );
        }
        for (op, outcome, _) in recovered(&r) {
            *stats.outcomes.entry(outcome.clone()).or_default() += 1;
            outcomes.push(format!(
                "{}:{}:{}:{outcome}",
                PIPELINES[pipelines[c]],
                journal_name(j),
                &op[..8.min(op.len())]
            ));
        }
    }
    println!("  recovered: [{}]", outcomes.join(", "));

    assert!(
        !env.staging_left(DEST),
        "{ctx}: .distributor/staging left after every recover (SPEC §8: the destination is byte-identical to before or after): {:?}",
        env.snapshot(&format!("{DEST}/.distributor/staging"))
    );
    check_destination(&env, versions, &pipelines, &unmanaged, &applied, &ctx);
    for cfg in &cfgs {
        check_verify(&env, cfg, &unmanaged, &ctx);
    }
    check_canaries(&env, &ctx);
    let (a, b) = (&journals[0], &journals[1]);
    assert_nothing_needs_a_person(&env, &[a.as_path(), b.as_path()], &ctx);

    // A second recover finds nothing to do.
    for &(c, j) in &order {
        let r = recover_with(&env, &cfgs[c], &journals[j], &[]);
        r.expect_code(0);
        assert_eq!(
            r.json()["operations"],
            serde_json::json!([]),
            "{ctx}: a second recover (journal {}) found something to do",
            journal_name(j)
        );
    }
    // The destination publishes again, with either journal.
    let j = rng.below(2) as usize;
    let args = publish_args(&cfgs[0], &versions[0][VERSIONS - 1].dir, &journals[j]);
    let r = env.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        r.code, 0,
        "{ctx}: publishing the newest version afterwards\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    stats.rounds += 1;
}

fn publish_args(cfg: &Path, bundle: &Path, journal: &Path) -> Vec<String> {
    [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        bundle.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
        "--lock-timeout",
        "60",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The destination holds, for each owner, exactly the version its state names (files,
/// links, directories), plus the unmanaged files; every recorded file's size and sha256
/// match its content; a publication reported `applied` is not lost.
fn check_destination(
    env: &Env,
    versions: &[Vec<Version>],
    pipelines: &[usize],
    unmanaged: &[(&str, &str)],
    applied: &[(usize, usize)],
    ctx: &str,
) {
    let state_text = env.read(&format!("{DEST}/.distributor.json"));
    let state: Value = serde_json::from_str(&state_text)
        .unwrap_or_else(|e| panic!("{ctx}: state is not JSON ({e}): {state_text}"));
    // (pipeline, created_at) of each owner.
    let owners: Vec<(String, String)> = if state["state_mode"] == "single_owner" {
        vec![(
            state["pipeline_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            state["source"]["created_at"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )]
    } else {
        state["owners"]
            .as_array()
            .unwrap_or_else(|| panic!("{ctx}: no owners: {state}"))
            .iter()
            .map(|o| {
                (
                    o["pipeline_id"].as_str().unwrap_or_default().to_string(),
                    o["source"]["created_at"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect()
    };
    let named: BTreeSet<&str> = owners.iter().map(|(p, _)| p.as_str()).collect();
    let want: BTreeSet<&str> = pipelines.iter().map(|&p| PIPELINES[p]).collect();
    assert_eq!(named, want, "{ctx}: owners in state: {state}");

    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for (pipeline, at) in &owners {
        let p = PIPELINES.iter().position(|q| q == pipeline).unwrap();
        let v = versions[p]
            .iter()
            .find(|v| v.created_at == *at)
            .unwrap_or_else(|| panic!("{ctx}: {pipeline}'s state names no version: {at}"));
        for &(_, w) in applied.iter().filter(|(q, _)| *q == p) {
            assert!(
                v.index >= w,
                "{ctx}: {pipeline} v{w} was reported applied but the state names v{} ({at})",
                v.index
            );
        }
        for (path, c) in &v.files {
            expected.insert(path.clone(), c.clone());
            ancestors(path, &mut expected);
        }
        for (path, target) in &v.links {
            expected.insert(
                path.clone(),
                format!("-> {}", relative_link_target(path, target)),
            );
            ancestors(path, &mut expected);
        }
    }
    for (path, c) in unmanaged {
        expected.insert(path.to_string(), c.to_string());
        ancestors(path, &mut expected);
    }
    let actual: BTreeMap<String, String> = env
        .snapshot_unlocked(DEST)
        .into_iter()
        .filter(|(p, _)| p != ".distributor.json")
        .collect();
    if actual != expected {
        let missing: Vec<&String> = expected
            .keys()
            .filter(|k| actual.get(*k) != expected.get(*k))
            .collect();
        let extra: Vec<&String> = actual
            .keys()
            .filter(|k| !expected.contains_key(*k))
            .collect();
        panic!(
            "{ctx}: the destination is not exactly the versions its state names {owners:?}: differing or missing {missing:?}, unexpected {extra:?}\nstate: {state_text}"
        );
    }
    // The state's own record of each file.
    let base = env.path(DEST);
    for o in state["outputs"].as_array().unwrap_or(&Vec::new()) {
        let path = o["path"].as_str().unwrap();
        let bytes = std::fs::read(base.join(path))
            .unwrap_or_else(|e| panic!("{ctx}: recorded {path} unreadable: {e}"));
        assert_eq!(
            o["size"].as_u64(),
            Some(bytes.len() as u64),
            "{ctx}: size of {path}"
        );
        assert_eq!(
            o["sha256"].as_str(),
            Some(distributor::hash::sha256_hex(&bytes).as_str()),
            "{ctx}: sha256 of {path}"
        );
    }
}

/// `verify` finds nothing missing or modified and nothing unrecorded but the unmanaged
/// files.
fn check_verify(env: &Env, cfg: &Path, unmanaged: &[(&str, &str)], ctx: &str) {
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    let d = &v.json()["destinations"][0];
    let mut want: Vec<&str> = unmanaged.iter().map(|(p, _)| *p).collect();
    want.sort();
    assert_eq!(d["state"], "valid", "{ctx}: verify {}", v.stdout);
    assert_eq!(d["missing"], serde_json::json!([]), "{ctx}: {}", v.stdout);
    assert_eq!(d["modified"], serde_json::json!([]), "{ctx}: {}", v.stdout);
    assert_eq!(
        d["unrecorded"],
        serde_json::json!(want),
        "{ctx}: {}",
        v.stdout
    );
    assert_eq!(
        v.code, 3,
        "{ctx}: verify reports the unmanaged files as drift"
    );
}

/// Nothing outside the destination changed: the canary beside it (same parent), the one
/// outside, and nothing new appeared next to it.
fn check_canaries(env: &Env, ctx: &str) {
    assert_eq!(env.read(OUTSIDE.0), OUTSIDE.1, "{ctx}: {}", OUTSIDE.0);
    assert_eq!(
        env.snapshot("outside"),
        vec![("canary.txt".to_string(), OUTSIDE.1.to_string())],
        "{ctx}"
    );
    let beside: Vec<(String, String)> = env
        .snapshot("dest")
        .into_iter()
        .filter(|(p, _)| !p.starts_with("root/"))
        .collect();
    assert_eq!(
        beside,
        vec![
            ("beside.txt".to_string(), BESIDE.1.to_string()),
            ("root".to_string(), "<dir>".to_string()),
        ],
        "{ctx}: beside the destination"
    );
}

#[test]
fn chaos_concurrent_publishers_killed_at_random_then_recovered() {
    let seed = env_u64("DISTRIBUTOR_CHAOS_SEED").unwrap_or(DEFAULT_SEED);
    let budget = Duration::from_secs(env_u64("DISTRIBUTOR_CHAOS_SECS").unwrap_or(DEFAULT_SECS));
    let only = env_u64("DISTRIBUTOR_CHAOS_ROUND");
    println!(
        "chaos seed {seed:#x} (DISTRIBUTOR_CHAOS_SEED), budget {budget:?}{}",
        only.map(|r| format!(", replaying round {r}"))
            .unwrap_or_default()
    );
    let lib = Env::new();
    let versions = prepare(&lib, seed);
    let sources = lib.snapshot("bundles");
    let start = Instant::now();
    let mut stats = Stats::default();
    let mut n = 0;
    // Rounds are independent (each has its own destination and journals): a round that
    // breaks an invariant is recorded and the loop goes on, so one run reports every
    // broken invariant it meets.
    let mut failures: Vec<(u64, String)> = Vec::new();
    // At least MIN_ROUNDS rounds, however slow the machine: the time budget adds rounds,
    // it does not decide whether the run proves enough.
    while start.elapsed() < budget || n < MIN_ROUNDS as u64 {
        let round = only.unwrap_or(n);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_round(&versions, seed, round, &mut stats)
        }));
        if let Err(e) = result {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(no message)".into());
            println!("  ROUND {round} FAILED: {msg}");
            failures.push((round, msg));
        }
        n += 1;
    }
    assert_eq!(lib.snapshot("bundles"), sources, "a source bundle changed");
    println!(
        "chaos seed {seed:#x}: {n} rounds, {stats:?} in {:?}",
        start.elapsed()
    );
    eprintln!(
        "chaos seed {seed:#x}: {n} rounds, {stats:?} in {:?}",
        start.elapsed()
    );
    if !failures.is_empty() {
        let list: Vec<String> = failures
            .iter()
            .map(|(round, msg)| {
                let first = msg.lines().next().unwrap_or_default();
                format!(
                    "round {round}: {first}\n  replay: DISTRIBUTOR_CHAOS_SEED={seed:#x} DISTRIBUTOR_CHAOS_ROUND={round} cargo test --all-features --test runner test_chaos"
                )
            })
            .collect();
        panic!(
            "{} of {n} chaos rounds broke an invariant (seed {seed:#x}):\n{}",
            failures.len(),
            list.join("\n")
        );
    }
    assert!(
        stats.rounds >= MIN_ROUNDS,
        "only {} rounds ran",
        stats.rounds
    );
    let recovered: usize = ["rolled_back", "rolled_forward"]
        .iter()
        .map(|o| stats.outcomes.get(*o).copied().unwrap_or(0))
        .sum();
    // Sure only where rounds pause a publisher at a seen moment (the failpoints feature).
    if cfg!(feature = "failpoints") {
        assert!(
            recovered > 0,
            "no kill interrupted an operation that needed rolling back or forward: {stats:?}"
        );
    }
}
