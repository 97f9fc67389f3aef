//! Fault injection (SPEC §6 and §8): the real binary is aborted at every failpoint of a
//! publication, in single-owner and shared-root mode, and `recover` must bring the
//! destination back to exactly just before (commit point not reached) or just after
//! (reached) the operation; `recover` itself is aborted at each of its steps and run again;
//! and the failpoints reached are proven to be exactly `failpoint::ALL`.
//!
//! Every failpoint name must have a scenario here: a new step without one fails
//! `every_failpoint_has_a_crash_scenario`.

use crate::common::Env;
use crate::common::faults::{DEST, Mode, Scenario, Side, assert_aborted, outcome, snapshot};
use distributor::failpoint;
use serde_json::Value;
use std::collections::BTreeSet;

/// How a failpoint is exercised.
enum Kind {
    /// Crash a publication there (at each k); recovery lands on this side.
    Publish(Side, &'static [u64]),
    /// Reached only while rolling back: crash `recover` (and the in-process undo) there.
    Undo,
    /// A step of `recover`.
    Recover,
    /// While planning: nothing is written (`crash_while_planning_writes_nothing`).
    Planning,
    /// Before the staging record exists: nothing changed; `recover` closes the operation
    /// (`not applied`) and removes the unfinished record.
    Closed,
}

/// The v2 publication over v1 stages 5 files, moves 7 paths aside, places 5 files and 2
/// links; the counts below stay inside those.
fn kind(name: &str) -> Kind {
    match name {
        "probe_hash" => Kind::Planning,
        "before_staging_record" | "after_journal_append" => Kind::Closed,
        "after_staging_record"
        | "after_staging"
        | "after_move_aside"
        | "after_placement"
        | "after_links" => Kind::Publish(Side::Before, &[1]),
        "during_staging" | "during_move_aside" | "during_placement" | "during_links" => {
            Kind::Publish(Side::Before, &[1, 2])
        }
        "io_stage_write" => Kind::Publish(Side::Before, &[1, 5]),
        // The 1st rename moves a file aside, the 9th places one.
        "io_rename" => Kind::Publish(Side::Before, &[1, 9]),
        "io_syncfs" | "io_state_fsync" | "io_state_rename" => Kind::Publish(Side::Before, &[1]),
        "after_state_write"
        | "after_journal_commit"
        | "io_log_write"
        | "before_log_link"
        | "during_cleanup"
        | "cleanup_before_prune"
        | "during_prune"
        | "io_remove_staging" => Kind::Publish(Side::After, &[1]),
        "undo_remove_placed" | "undo_restore" | "undo_before_remove_staging" => Kind::Undo,
        "recover_after_lock" | "recover_after_adopt" | "recover_before_event" => Kind::Recover,
        other => panic!("failpoint {other} has no crash scenario in tests/test_crash.rs"),
    }
}

#[test]
fn every_failpoint_has_a_crash_scenario() {
    for name in failpoint::ALL {
        let _ = kind(name);
    }
}

fn word(side: Side) -> &'static str {
    match side {
        Side::Before => "rolled_back",
        Side::After => "rolled_forward",
    }
}

/// The journal's view of one operation (`history show --json`).
fn show(env: &Env, op: &str) -> Value {
    let r = env.run(&["history", "show", op, "--json"]);
    r.expect_code(0);
    r.json()
}

/// Crash v2 at `spec`, check publish refuses, recover, check everything.
fn crash_and_recover(mode: Mode, spec: &str, side: Side, lose_journal: bool) {
    let ctx = format!(
        "{mode:?} crash at {spec}{}",
        if lose_journal { " (journal lost)" } else { "" }
    );
    let sc = Scenario::new(mode);
    sc.crash_publish(spec);
    if lose_journal {
        sc.lose_journal();
    }
    // Publishing again is refused until recovery: exit 4, naming the command to run.
    let refusal = sc.assert_refused_until_recovered(&ctx);

    let r = sc.recover_env(&[]);
    r.expect_code(0);
    assert_eq!(outcome(&r), word(side), "{ctx}: {}", r.stdout);
    let ops = r.json()["operations"].as_array().unwrap().clone();
    assert_eq!(ops.len(), 1, "{ctx}: {}", r.stdout);
    let op = ops[0]["operation_id"].as_str().unwrap().to_string();
    assert!(
        refusal.contains(&op),
        "{ctx}: the refusal does not name operation {op}: {refusal}"
    );
    sc.assert_recovered(side, &ctx);

    let h = show(&sc.env, &op);
    assert_eq!(h["status"], word(side), "{ctx}: {h}");
    let events: Vec<&str> = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    if lose_journal {
        assert_eq!(events[0], "adopted", "{ctx}: {events:?}");
    }
    // The destination is usable again: v2 publishes (or is already there).
    let again = sc.publish_env(&[]);
    again.expect_code(0);
    let want = match side {
        Side::Before => "replace_older",
        Side::After => "unchanged",
    };
    assert_eq!(again.decision(), want, "{ctx}");
}

fn publish_points(mode: Mode, after_commit: bool) {
    let mut n = 0;
    for name in failpoint::ALL {
        if let Kind::Publish(side, ks) = kind(name) {
            if (side == Side::After) != after_commit {
                continue;
            }
            for k in ks {
                crash_and_recover(mode, &format!("{name}:{k}"), side, false);
                n += 1;
            }
        }
    }
    assert!(n >= 4, "only {n} crash points exercised");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_before_commit_point_rolls_back_single_owner() {
    publish_points(Mode::SingleOwner, false);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_before_commit_point_rolls_back_shared_root() {
    publish_points(Mode::SharedRoot, false);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_after_commit_point_rolls_forward_single_owner() {
    publish_points(Mode::SingleOwner, true);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_after_commit_point_rolls_forward_shared_root() {
    publish_points(Mode::SharedRoot, true);
}

/// A power cut (SPEC §13) at every step of a publication, in both state modes: every
/// change not yet made durable is lost, as the crash-simulating layer of the local backend
/// models it (`backend::local::crashsim`), then `recover` lands exactly before or after.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn power_cut_at_every_step_of_a_publication_recovers_to_before_or_after() {
    let mut n = 0;
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        for name in failpoint::ALL {
            let (side, ks): (Side, &[u64]) = match kind(name) {
                Kind::Publish(side, ks) => (side, ks),
                Kind::Closed => (Side::Before, &[1]),
                _ => continue,
            };
            for k in ks {
                power_cut_and_recover(mode, &format!("{name}:{k}=powercut"), None, side);
                n += 1;
            }
        }
    }
    assert!(n >= 40, "only {n} power cuts exercised");
}

/// A power cut in the middle of `recover` (rolling back, rolling forward), then `recover`
/// again.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn power_cut_during_recover_then_recover_again() {
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        for (publish, cut, side) in [
            ("after_links", "undo_remove_placed:2=powercut", Side::Before),
            ("after_links", "undo_restore:1=powercut", Side::Before),
            ("after_links", "undo_restore:3=powercut", Side::Before),
            (
                "after_links",
                "undo_before_remove_staging=powercut",
                Side::Before,
            ),
            (
                "after_state_write",
                "cleanup_before_prune=powercut",
                Side::After,
            ),
            (
                "after_state_write",
                "recover_before_event=powercut",
                Side::After,
            ),
        ] {
            power_cut_and_recover(mode, publish, Some(cut), side);
        }
    }
}

/// Publishes v2 with `publish_spec` (a power cut, or a crash when `recover_cut` is set),
/// optionally cuts the power in `recover` at `recover_cut`, recovers, and checks SPEC §8.
fn power_cut_and_recover(mode: Mode, publish_spec: &str, recover_cut: Option<&str>, side: Side) {
    let ctx = format!("{mode:?} {publish_spec} then {recover_cut:?}");
    let sc = Scenario::new(mode);
    let cut = |r: &crate::common::Run, spec: &str| {
        let name = spec.split([':', '=']).next().unwrap();
        let said = if spec.ends_with("=powercut") {
            format!("failpoint {name} hit: power cut, aborting")
        } else {
            format!("failpoint {name} hit: aborting")
        };
        assert!(
            r.code == -1 && r.stderr.contains(&said),
            "{ctx}: expected `{said}`, exit {}\n{}",
            r.code,
            r.stderr
        );
    };
    let r = sc.publish_env(&[("DISTRIBUTOR_FAILPOINT", publish_spec)]);
    cut(&r, publish_spec);
    if let Some(spec) = recover_cut {
        let r = sc.recover_env(&[("DISTRIBUTOR_FAILPOINT", spec)]);
        cut(&r, spec);
    }
    let r = sc.recover_env(&[]);
    r.expect_code(0);
    let ops = r.json()["operations"].as_array().unwrap().clone();
    assert!(ops.len() <= 1, "{ctx}: {}", r.stdout);
    for o in &ops {
        let outcome = o["outcome"].as_str().unwrap_or_default();
        assert!(
            matches!(outcome, "rolled_back" | "rolled_forward" | "closed"),
            "{ctx}: {}",
            r.stdout
        );
    }
    sc.assert_recovered(side, &ctx);
    sc.publish_env(&[]).expect_code(0);
}

/// A run killed while it plans (here while the probe hashes a file no placement
/// fingerprint vouches for any more) has written nothing and leaves nothing to recover.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_while_planning_writes_nothing() {
    let sc = Scenario::new(Mode::SingleOwner);
    // The same permissions again: only the ctime changes, so `keep.txt` (unchanged in v2)
    // must be hashed to be proven unchanged.
    let keep = sc
        .env
        .path(&format!("{}/keep.txt", crate::common::faults::DEST));
    let mode = std::fs::metadata(&keep).unwrap().permissions();
    std::fs::set_permissions(&keep, mode).unwrap();
    let r = sc.env.run_env(
        &[
            "plan",
            "--json",
            "--config",
            sc.cfg.to_str().unwrap(),
            "--source",
            sc.v2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "probe_hash")],
    );
    assert_aborted(&r, "probe_hash");
    assert_eq!(snapshot(&sc.env), sc.before);
    let again = sc.recover_env(&[]);
    again.expect_code(0);
    assert_eq!(again.json()["operations"], serde_json::json!([]));
}

/// SPEC §13: a publisher killed while its staging record is being built changed nothing:
/// `recover`, from its journal or from none, closes it and removes the unfinished record.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_before_the_staging_record_is_complete_is_closed() {
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        for (point, lose_journal) in [
            ("before_staging_record", false),
            ("before_staging_record", true),
            ("after_journal_append", false),
        ] {
            let ctx = format!("{mode:?} {point}, journal lost: {lose_journal}");
            let sc = Scenario::new(mode);
            sc.crash_publish(point);
            let staging = sc.env.path(&format!("{DEST}/.distributor/staging"));
            let tmp: Vec<String> = std::fs::read_dir(&staging)
                .map(|rd| {
                    rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            let unfinished_record = point == "before_staging_record";
            if unfinished_record {
                assert!(
                    tmp.len() == 1 && tmp[0].starts_with(".tmp-"),
                    "{ctx}: {tmp:?}"
                );
            } else {
                assert!(tmp.is_empty(), "{ctx}: {tmp:?}");
            }
            if lose_journal {
                sc.lose_journal();
            }
            sc.assert_refused_until_recovered(&ctx);
            let r = sc.recover_env(&[]);
            r.expect_code(0);
            assert_eq!(outcome(&r), "closed", "{ctx}: {}", r.stdout);
            let msg = r.json()["operations"][0]["message"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(msg.starts_with("not applied"), "{ctx}: {msg}");
            assert_eq!(
                msg.contains("removed its unfinished staging record"),
                unfinished_record,
                "{ctx}: {msg}"
            );
            sc.assert_recovered(Side::Before, &ctx);
            if !lose_journal {
                let op = r.json()["operations"][0]["operation_id"]
                    .as_str()
                    .unwrap()
                    .to_string();
                assert_eq!(show(&sc.env, &op)["status"], "closed", "{ctx}");
            }
            sc.publish_env(&[]).expect_code(0);
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_with_lost_journal_is_recovered_from_staging() {
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        crash_and_recover(mode, "during_placement:2", Side::Before, true);
        crash_and_recover(mode, "after_links", Side::Before, true);
        crash_and_recover(mode, "after_state_write", Side::After, true);
    }
}

/// Crash `recover` at `spec` after the publication crashed at `publish_spec`, then run it
/// again: the result is that of one clean recover, with one outcome event.
fn crash_recover(mode: Mode, publish_spec: &str, spec: &str, side: Side, lose_journal: bool) {
    let ctx = format!("{mode:?} publish crash at {publish_spec}, recover crash at {spec}");
    let sc = Scenario::new(mode);
    sc.crash_publish(publish_spec);
    if lose_journal {
        sc.lose_journal();
    }
    let r = sc.recover_env(&[("DISTRIBUTOR_FAILPOINT", spec)]);
    assert_aborted(&r, spec);
    let r = sc.recover_env(&[]);
    r.expect_code(0);
    // A recover stopped after it removed staging but before its event leaves the
    // operation to be closed (SPEC §13): the destination is already before or after.
    let closes = spec == "recover_before_event";
    let want = if closes { "closed" } else { word(side) };
    assert_eq!(outcome(&r), want, "{ctx}: {}", r.stdout);
    let op = r.json()["operations"][0]["operation_id"]
        .as_str()
        .unwrap()
        .to_string();
    sc.assert_recovered(side, &ctx);
    let h = show(&sc.env, &op);
    assert_eq!(h["status"], want, "{ctx}");
    let count = |ev: &str| {
        h["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == ev)
            .count()
    };
    let outcome_event = match side {
        _ if closes => "closed",
        Side::Before => "recovered_back",
        Side::After => "recovered_forward",
    };
    assert_eq!(count(outcome_event), 1, "{ctx}: {h}");
    assert_eq!(count("adopted"), usize::from(lose_journal), "{ctx}: {h}");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_of_recover_at_each_step_then_recover_again() {
    let back = "after_links";
    let fwd = "after_state_write";
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        for (publish_spec, spec, side, lost) in [
            (back, "recover_after_lock", Side::Before, false),
            (fwd, "recover_after_lock", Side::After, false),
            (back, "recover_after_adopt", Side::Before, true),
            (fwd, "recover_after_adopt", Side::After, true),
            (back, "undo_remove_placed:1", Side::Before, false),
            (back, "undo_remove_placed:3", Side::Before, false),
            (back, "undo_restore:1", Side::Before, false),
            (back, "undo_restore:4", Side::Before, true),
            (back, "io_rename:2", Side::Before, false),
            (back, "io_syncfs", Side::Before, false),
            (back, "undo_before_remove_staging", Side::Before, false),
            (back, "io_remove_staging", Side::Before, false),
            (fwd, "during_cleanup", Side::After, false),
            (fwd, "io_remove_staging", Side::After, true),
            (fwd, "cleanup_before_prune", Side::After, false),
            (back, "recover_before_event", Side::Before, false),
            (fwd, "recover_before_event", Side::After, false),
        ] {
            crash_recover(mode, publish_spec, spec, side, lost);
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn every_failpoint_is_reached_and_listed() {
    let sc = Scenario::new(Mode::SingleOwner);
    let log = sc.env.path("failpoints.log");
    let log_s = log.to_str().unwrap().to_string();
    let logged = [("DISTRIBUTOR_FAILPOINT_LOG", log_s.as_str())];
    let with = |spec: &'static str| {
        [
            ("DISTRIBUTOR_FAILPOINT_LOG", log_s.as_str()),
            ("DISTRIBUTOR_FAILPOINT", spec),
        ]
    };
    // Interrupted and rolled back from the journal, then from staging alone.
    assert_aborted(&sc.publish_env(&with("after_links")), "after_links");
    sc.recover_env(&logged).expect_code(0);
    assert_aborted(&sc.publish_env(&with("after_links")), "after_links");
    sc.lose_journal();
    sc.recover_env(&logged).expect_code(0);
    // A clean publication reaches every step.
    sc.publish_env(&logged).expect_code(0);
    let text = std::fs::read_to_string(&log).unwrap();
    let reached: BTreeSet<&str> = text.lines().collect();
    let all: BTreeSet<&str> = failpoint::ALL.iter().copied().collect();
    assert_eq!(reached, all, "failpoints reached vs failpoint::ALL");
}

/// Every `failpoint::hit("..")`/`failpoint::io("..")` in the sources is listed in
/// `failpoint::ALL`, `S3`, `RELEASES`, `SERVER` or `METRICS` (and the other way round), each once; `IO` lists exactly
/// the I/O ones.
#[test]
fn failpoint_list_matches_the_sources() {
    let mut hit = Vec::new();
    let mut io = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    ))];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for (needle, out) in [
                    ("failpoint::hit(\"", &mut hit),
                    ("failpoint::io(\"", &mut io),
                ] {
                    for part in text.split(needle).skip(1) {
                        out.push(part.split('"').next().unwrap().to_string());
                    }
                }
            }
        }
    }
    let used: BTreeSet<String> = hit.iter().chain(io.iter()).cloned().collect();
    let all: BTreeSet<String> = (failpoint::ALL.iter())
        .chain(failpoint::S3)
        .chain(failpoint::RELEASES)
        .chain(failpoint::SERVER)
        .chain(failpoint::METRICS)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        all.len(),
        failpoint::ALL.len()
            + failpoint::S3.len()
            + failpoint::RELEASES.len()
            + failpoint::SERVER.len()
            + failpoint::METRICS.len(),
        "duplicates in failpoint::ALL, S3, RELEASES, SERVER and METRICS"
    );
    assert_eq!(
        used, all,
        "failpoints in the sources vs failpoint::ALL and S3"
    );
    let io_used: BTreeSet<String> = io.into_iter().collect();
    let io_all: BTreeSet<String> = failpoint::IO.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        io_used, io_all,
        "I/O failpoints in the sources vs failpoint::IO"
    );
}

/// SIGKILL at spread-out moments of a 2000-file replacement (staging, moving aside,
/// placing, each seen in its staging entry): whatever the moment, recovery lands exactly
/// before or after.
#[test]
fn sigkill_during_a_large_replacement_recovers_to_before_or_after() {
    const N: usize = 2000;
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    env.write(&format!("{DEST}/unmanaged.txt"), "hand-made");
    // Two content sets, published alternately; each round only rewrites the manifest's
    // created_at so every round replaces all 2000 files with a newer source.
    let build = |set: &str| {
        let names: Vec<String> = (0..N).map(|i| format!("d{}/f{i}.txt", i % 20)).collect();
        let contents: Vec<String> = (0..N).map(|i| format!("set {set} file {i}\n")).collect();
        let files: Vec<(&str, &str)> = names
            .iter()
            .zip(&contents)
            .map(|(n, c)| (n.as_str(), c.as_str()))
            .collect();
        env.bundle(
            &format!("b{set}"),
            "big",
            "2026-12-02T00:00:00Z",
            &files,
            &[],
        )
    };
    let sets = [build("A"), build("B")];
    let at = |round: usize| format!("2026-12-02T{round:02}:00:00Z");
    let retime = |bundle: &std::path::Path, round: usize| {
        let m = bundle.join("distributor-manifest.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
        v["created_at"] = Value::String(at(round));
        std::fs::write(&m, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    };
    let publish_args = |bundle: &std::path::Path| {
        vec![
            "publish".to_string(),
            "--config".into(),
            cfg.to_str().unwrap().into(),
            "--source".into(),
            bundle.to_str().unwrap().into(),
        ]
    };
    let spawn = |bundle: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_distributor"))
            .args(publish_args(bundle))
            .env_clear()
            .env("HOME", env.path("home"))
            .env("DISTRIBUTOR_JOURNAL", env.journal())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // Each kill follows a moment seen in the operation, not a delay: how many files its
    // staging entry holds. It stages every new file (`new/` fills), moves aside every old
    // one (`old/` fills), then places the new ones (`new/` empties), then commits.
    let staging = env.path(&format!("{DEST}/.distributor/staging"));
    let count = |sub: &str| -> usize {
        fn files(dir: &std::path::Path) -> usize {
            std::fs::read_dir(dir).map_or(0, |rd| {
                rd.flatten()
                    .map(|e| match e.file_type() {
                        Ok(t) if t.is_dir() => files(&e.path()),
                        Ok(_) => 1,
                        Err(_) => 0,
                    })
                    .sum()
            })
        }
        std::fs::read_dir(&staging).map_or(0, |rd| {
            rd.flatten().map(|e| files(&e.path().join(sub))).sum()
        })
    };
    let began = || std::fs::read_dir(&staging).is_ok_and(|mut d| d.next().is_some());
    // Waits until `seen` holds, or the child exits by itself.
    let wait_until = |child: &mut std::process::Child, seen: &dyn Fn() -> bool| {
        let start = std::time::Instant::now();
        while !seen() {
            if child.try_wait().unwrap().is_some() {
                return;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(120),
                "the operation never got there"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    retime(&sets[0], 0);
    env.publish(&cfg, &sets[0], &[]).expect_code(0);
    let (third, two_thirds) = (N / 3, 2 * N / 3);
    let moments: [(&str, &dyn Fn() -> bool); 7] = [
        ("staging began", &began),
        ("a third staged", &|| count("new") >= third),
        ("two thirds staged", &|| count("new") >= two_thirds),
        ("a third moved aside", &|| count("old") >= third),
        ("two thirds moved aside", &|| count("old") >= two_thirds),
        ("a third placed", &|| {
            count("old") >= N && count("new") <= two_thirds
        }),
        ("two thirds placed", &|| {
            count("old") >= N && count("new") <= third
        }),
    ];
    let mut interrupted = 0;
    for (i, (moment, seen)) in moments.iter().enumerate() {
        let round = i + 1;
        // The other set than the destination holds (a rolled-back round leaves the one
        // before), so that every file is replaced.
        let holds_a = env.read(&format!("{DEST}/d0/f0.txt")).starts_with("set A ");
        let (set, bundle) = if holds_a {
            ("B", &sets[1])
        } else {
            ("A", &sets[0])
        };
        retime(bundle, round);
        let before = snapshot(&env);
        let mut child = spawn(bundle);
        wait_until(&mut child, *seen);
        let _ = child.kill();
        let status = child.wait().unwrap();
        let r = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
        r.expect_code(0);
        let ctx = format!("kill once {moment} ({status}): {}", r.stdout);
        println!(
            "kill once {moment} ({status}): recover found {} operation(s)",
            r.json()["operations"].as_array().unwrap().len()
        );
        if !r.json()["operations"].as_array().unwrap().is_empty() {
            interrupted += 1;
        } else {
            // Killed (not exited by itself) right after staging began: an operation was
            // under way for recovery to find.
            assert!(
                i > 0 || status.success(),
                "{ctx}: a kill right after staging began found nothing"
            );
        }
        let state: Value =
            serde_json::from_str(&env.read(&format!("{DEST}/.distributor.json"))).unwrap();
        let now = snapshot(&env);
        if state["source"]["created_at"] == at(round) {
            let files: Vec<&(String, String)> =
                now.iter().filter(|(p, _)| p.contains("/f")).collect();
            assert_eq!(files.len(), N, "{ctx}");
            for (p, c) in files {
                assert!(
                    c.starts_with(&format!("set {set} ")),
                    "{ctx}: {p} holds {c}"
                );
            }
        } else {
            assert_eq!(now, before, "{ctx}: not byte-identical to before");
        }
        assert!(!env.staging_left(DEST), "{ctx}");
        let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
        let d = &v.json()["destinations"][0];
        assert_eq!(d["missing"], serde_json::json!([]), "{ctx}");
        assert_eq!(d["modified"], serde_json::json!([]), "{ctx}");
        assert_eq!(
            d["unrecorded"],
            serde_json::json!(["unmanaged.txt"]),
            "{ctx}"
        );
        let again = env.run(&["recover", "--json", "--config", cfg.to_str().unwrap()]);
        assert_eq!(again.json()["operations"], serde_json::json!([]), "{ctx}");
    }
    assert!(
        interrupted >= 2,
        "only {interrupted} of {} kills interrupted an operation: the test proves nothing",
        moments.len()
    );
}

/// A shared-root takeover interrupted on either side of its commit point: rolled back,
/// the other owner has its paths and record back byte for byte; rolled forward, they
/// changed hands and the untaken ones stay the other owner's.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn crash_during_a_shared_root_takeover() {
    for (spec, forward) in [
        ("during_move_aside:1", false),
        ("after_links", false),
        ("after_state_write", true),
    ] {
        let env = Env::new();
        let sr = "    state:\n      mode: shared_root\n";
        let a = env.simple_config("a.yaml", "weather", "a", DEST, sr);
        let b = env.simple_config("b.yaml", "weather", "b", DEST, sr);
        let s1 = env.bundle(
            "s1",
            "one",
            "2026-12-02T06:00:00Z",
            &[("x/1.txt", "a's"), ("keep.txt", "a keeps")],
            &[],
        );
        let s2 = env.bundle(
            "s2",
            "two",
            "2026-12-02T07:00:00Z",
            &[("x/1.txt", "b's")],
            &[],
        );
        env.publish(&a, &s1, &[]).expect_code(0);
        let before = snapshot(&env);
        let args = [
            "publish",
            "--config",
            b.to_str().unwrap(),
            "--source",
            s2.to_str().unwrap(),
        ];
        assert_aborted(
            &env.run_env(&args, &[("DISTRIBUTOR_FAILPOINT", spec)]),
            spec,
        );
        let r = env.run(&["recover", "--json", "--config", b.to_str().unwrap()]);
        r.expect_code(0);
        let state: Value =
            serde_json::from_str(&env.read(&format!("{DEST}/.distributor.json"))).unwrap();
        if forward {
            assert_eq!(outcome(&r), "rolled_forward");
            assert_eq!(env.read(&format!("{DEST}/x/1.txt")), "b's");
            let owner_of = |p: &str| {
                state["outputs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["path"] == p)
                    .unwrap()["owner"]
                    .clone()
            };
            assert_eq!(owner_of("x/1.txt"), "weather/b");
            assert_eq!(owner_of("keep.txt"), "weather/a");
        } else {
            assert_eq!(outcome(&r), "rolled_back", "{spec}");
            assert_eq!(snapshot(&env), before, "{spec}");
        }
        assert!(!env.staging_left(DEST));
        let v = env.run(&["verify", "--json", "--config", b.to_str().unwrap()]);
        v.expect_code(0);
    }
}
