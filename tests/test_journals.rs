//! Several journals on one destination (SPEC §13): "any of them can recover an interrupted
//! operation from the staging record alone. No crash of a publisher or of `recover` leaves
//! an operation that needs a person."
//!
//! A v2 publication journaled in journal A (the env's default journal) is aborted at every
//! publish failpoint of `failpoint::ALL`, in single-owner and shared-root mode; `recover`
//! with a fresh journal B must land the destination exactly before or after it; then A's
//! own `recover` closes the operation (`applied elsewhere` / `not applied`) touching
//! nothing; no operation in either journal is left unfinished; and v2 publishes again with
//! A. `recover` with B is itself aborted at each of its steps, and A (then B) finishes.
//!
//! Beyond the first hit of each step: every later hit of each publish step (a crash
//! partway through a loop over files or directories) and every hit of every failpoint a
//! crashed `recover` with B reaches. And real kills where no failpoint is: SIGKILL (by
//! `strace -e inject=...:signal=KILL`) at every `mkdirat`, `renameat2`, `unlinkat` and
//! `symlinkat` of a publication, and of a `recover`, each then finished by another
//! journal (strace is required; `.ci/run` installs it).
//!
//! Assumption (SPEC §13 does not say which journals get run): "nothing needs a person"
//! means that running `recover` with each journal that took part, in any order, leaves
//! every operation of every journal in a final status, with exit 0 each time.

use crate::common::Env;
use crate::common::chaos::{
    assert_nothing_needs_a_person, count_syscalls, recover_with, recovered, run_killed_at,
    status_in, strace_works,
};
use crate::common::faults::{
    DEST, Mode, Scenario, Side, UNMANAGED, V2_AT, assert_aborted, assert_state_matches_disk,
    reference_after, snapshot,
};
use distributor::failpoint;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How a failpoint of a publication is exercised here: the classification of
/// `tests/test_crash.rs` (`kind()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A step of the publication with its staging entry in place: recovery lands on this
    /// side.
    Publish(Side),
    /// Before the staging record exists: nothing changed.
    Closed,
    /// Planning, rollback or `recover` steps: not a publication's step.
    Other,
}

fn kind(name: &str) -> Kind {
    match name {
        "probe_hash" => Kind::Other,
        "before_staging_record" | "after_journal_append" => Kind::Closed,
        "after_staging_record"
        | "after_staging"
        | "after_move_aside"
        | "after_placement"
        | "after_links"
        | "during_staging"
        | "during_move_aside"
        | "during_placement"
        | "during_links"
        | "io_stage_write"
        | "io_rename"
        | "io_syncfs"
        | "io_state_fsync"
        | "io_state_rename" => Kind::Publish(Side::Before),
        "after_state_write"
        | "after_journal_commit"
        | "io_log_write"
        | "before_log_link"
        | "during_cleanup"
        | "cleanup_before_prune"
        | "during_prune"
        | "io_remove_staging" => Kind::Publish(Side::After),
        "undo_remove_placed" | "undo_restore" | "undo_before_remove_staging" => Kind::Other,
        "recover_after_lock" | "recover_after_adopt" | "recover_before_event" => Kind::Other,
        other => panic!("failpoint {other} is not classified in tests/test_journals.rs"),
    }
}

#[test]
fn every_failpoint_is_classified() {
    let publish = failpoint::ALL
        .iter()
        .filter(|n| kind(n) != Kind::Other)
        .count();
    assert!(publish >= 20, "only {publish} publish failpoints");
}

fn word(side: Side) -> &'static str {
    match side {
        Side::Before => "rolled_back",
        Side::After => "rolled_forward",
    }
}

/// How a closed operation's message starts, by the side the destination is on.
fn closed_word(side: Side) -> &'static str {
    match side {
        Side::Before => "not applied",
        Side::After => "applied elsewhere",
    }
}

/// A second journal, fresh.
fn journal_b(sc: &Scenario) -> PathBuf {
    sc.env.path("journal-b.sqlite3")
}

/// The newest operation of journal A: the interrupted v2.
fn newest_op(env: &Env) -> String {
    let r = env.run(&["history", "--json", "--limit", "1"]);
    r.expect_code(0);
    r.json()["operations"][0]["operation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no operation in journal A: {}", r.stdout))
        .to_string()
}

/// Everything SPEC §8 promises of a destination recovered onto `side`
/// ([`Scenario::assert_recovered`] without its second `recover`, which here has journal A's
/// operation to close).
fn assert_landed(sc: &Scenario, side: Side, ctx: &str) {
    let env = &sc.env;
    let state_file = format!("{DEST}/.distributor.json");
    match side {
        Side::Before => assert_eq!(
            snapshot(env),
            sc.before,
            "{ctx}: destination is not byte-identical to just before"
        ),
        Side::After => {
            let now: Vec<(String, String)> = snapshot(env)
                .into_iter()
                .filter(|(p, _)| p != ".distributor.json")
                .collect();
            assert_eq!(
                now,
                reference_after(sc.mode),
                "{ctx}: destination is not exactly the new publication"
            );
            let state: Value = serde_json::from_str(&env.read(&state_file)).unwrap();
            let mine = match sc.mode {
                Mode::SingleOwner => state["source"].clone(),
                Mode::SharedRoot => state["owners"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["owner"] == "weather/latest")
                    .unwrap()["source"]
                    .clone(),
            };
            assert_eq!(mine["created_at"], V2_AT, "{ctx}: state names v2");
        }
    }
    if sc.mode == Mode::SharedRoot {
        let state: Value = serde_json::from_str(&env.read(&state_file)).unwrap();
        assert!(
            state["owners"]
                .as_array()
                .unwrap()
                .iter()
                .any(|o| o["owner"] == "other/o"),
            "{ctx}: the other owner's record is lost: {state}"
        );
    }
    assert!(!env.staging_left(DEST), "{ctx}: staging left behind");
    for (p, c) in UNMANAGED {
        assert_eq!(env.read(&format!("{DEST}/{p}")), *c, "{ctx}: {p} touched");
    }
    assert_state_matches_disk(env, &sc.cfg, ctx);
}

/// `recover` with `journal` closes operation `op` (SPEC §13): exit 0, one operation,
/// `closed`, its message saying which side the destination is on; nothing touched; the
/// journal says `closed`.
fn assert_closes(sc: &Scenario, journal: &std::path::Path, op: &str, side: Side, ctx: &str) {
    let before = sc.env.snapshot_unlocked(DEST);
    let r = recover_with(&sc.env, &sc.cfg, journal, &[]);
    r.expect_code(0);
    let ops = recovered(&r);
    assert_eq!(ops.len(), 1, "{ctx}: {}", r.stdout);
    let (id, outcome, message) = &ops[0];
    assert_eq!(id, op, "{ctx}: {}", r.stdout);
    assert_eq!(outcome, "closed", "{ctx}: {}", r.stdout);
    assert!(
        message.starts_with(closed_word(side)),
        "{ctx}: closed with {message:?}, the destination is {side:?}"
    );
    assert_eq!(
        sc.env.snapshot_unlocked(DEST),
        before,
        "{ctx}: closing touched the destination"
    );
    assert_eq!(
        status_in(&sc.env, journal, op).as_deref(),
        Some("closed"),
        "{ctx}"
    );
}

/// A `recover` with each journal finds nothing left to do, and no journal holds an
/// unfinished operation.
fn assert_all_finished(sc: &Scenario, ctx: &str) {
    let a = sc.env.journal();
    let b = journal_b(sc);
    for j in [&a, &b] {
        let r = recover_with(&sc.env, &sc.cfg, j, &[]);
        r.expect_code(0);
        assert_eq!(
            r.json()["operations"],
            serde_json::json!([]),
            "{ctx}: recover with {} found something to do again",
            j.display()
        );
    }
    assert_nothing_needs_a_person(&sc.env, &[&a, &b], ctx);
}

/// v2 publishes again with journal A: exit 0, a replacement when the destination was
/// rolled back, `unchanged` when it holds v2 already.
fn assert_publishes_again(sc: &Scenario, side: Side, ctx: &str) {
    let again = sc.publish_env(&[]);
    again.expect_code(0);
    let want = match side {
        Side::Before => "replace_older",
        Side::After => "unchanged",
    };
    assert_eq!(again.decision(), want, "{ctx}: {}", again.stdout);
}

/// Crash v2 (journal A) at `spec`; recover with a fresh journal B; close with A.
fn crash_then_other_journal_recovers(mode: Mode, name: &str, hit: u64, k: Kind) {
    let spec = format!("{name}:{hit}");
    let ctx = format!("{mode:?} publish (journal A) crashed at {spec}, recover with journal B");
    let sc = Scenario::new(mode);
    sc.crash_publish(&spec);
    let op = newest_op(&sc.env);
    let b = journal_b(&sc);

    let r = recover_with(&sc.env, &sc.cfg, &b, &[]);
    r.expect_code(0);
    let ops = recovered(&r);
    let side = match k {
        Kind::Publish(side) => {
            assert_eq!(ops.len(), 1, "{ctx}: {}", r.stdout);
            assert_eq!(ops[0].0, op, "{ctx}: {}", r.stdout);
            assert_eq!(ops[0].1, word(side), "{ctx}: {}", r.stdout);
            assert_eq!(
                r.json()["operations"][0]["found_in"],
                "staging",
                "{ctx}: {}",
                r.stdout
            );
            // B adopted it from the staging record and recorded the outcome.
            assert_eq!(
                status_in(&sc.env, &b, &op).as_deref(),
                Some(word(side)),
                "{ctx}"
            );
            side
        }
        Kind::Closed if name == "before_staging_record" => {
            // Only an unfinished record (`.tmp-<op>`): removed, closed, not applied.
            assert_eq!(ops.len(), 1, "{ctx}: {}", r.stdout);
            assert_eq!(ops[0].0, op, "{ctx}: {}", r.stdout);
            assert_eq!(ops[0].1, "closed", "{ctx}: {}", r.stdout);
            assert!(ops[0].2.starts_with("not applied"), "{ctx}: {}", r.stdout);
            Side::Before
        }
        Kind::Closed => {
            // Nothing in the destination: B has nothing to do.
            assert!(ops.is_empty(), "{ctx}: {}", r.stdout);
            Side::Before
        }
        Kind::Other => unreachable!(),
    };
    assert_landed(&sc, side, &ctx);

    // A's own recover: the staging entry is gone, so the operation is closed, saying
    // which side it is on, and nothing is touched.
    assert_closes(&sc, &sc.env.journal(), &op, side, &format!("{ctx}, then A"));
    assert_landed(&sc, side, &format!("{ctx}, then A"));
    assert_all_finished(&sc, &ctx);
    assert_publishes_again(&sc, side, &ctx);
}

fn publish_points(mode: Mode) {
    let mut n = 0;
    for name in failpoint::ALL {
        let k = kind(name);
        if k != Kind::Other {
            crash_then_other_journal_recovers(mode, name, 1, k);
            n += 1;
        }
    }
    assert!(n >= 20, "only {n} publish failpoints exercised");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crashed_publication_is_recovered_by_another_journal_single_owner() {
    publish_points(Mode::SingleOwner);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crashed_publication_is_recovered_by_another_journal_shared_root() {
    publish_points(Mode::SharedRoot);
}

/// How many times an uninterrupted v2 publication reaches each failpoint.
fn hits(mode: Mode) -> BTreeMap<String, u64> {
    let sc = Scenario::new(mode);
    let args = [
        "publish",
        "--json",
        "--config",
        sc.cfg.to_str().unwrap(),
        "--source",
        sc.v2.to_str().unwrap(),
    ];
    let (r, log) = sc.env.run_logged(&args, &[]);
    r.expect_code(0);
    let mut out = BTreeMap::new();
    for name in log {
        *out.entry(name).or_insert(0) += 1;
    }
    out
}

/// The matrix above at every later hit of each publish step a publication reaches more
/// than once (files staged, moved aside, placed, linked, renamed; directories pruned):
/// a crash partway through a step's loop, then `recover` with another journal. Each case
/// runs to the end; the failures are listed together.
fn later_hits(mode: Mode) {
    let mut failed = Vec::new();
    let mut n = 0;
    for (name, count) in hits(mode) {
        let k = kind(&name);
        if !matches!(k, Kind::Publish(_)) {
            continue;
        }
        for hit in 2..=count {
            n += 1;
            let result =
                std::panic::catch_unwind(|| crash_then_other_journal_recovers(mode, &name, hit, k));
            if let Err(e) = result {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!(
                    "{name}:{hit}: {}",
                    msg.lines().next().unwrap_or("")
                ));
            }
        }
    }
    assert!(n >= 20, "only {n} later hits exercised");
    assert!(
        failed.is_empty(),
        "{mode:?}: {} of {n} crashes at a later hit were not recovered:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crash_at_a_later_hit_is_recovered_by_another_journal_single_owner() {
    later_hits(Mode::SingleOwner);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crash_at_a_later_hit_is_recovered_by_another_journal_shared_root() {
    later_hits(Mode::SharedRoot);
}

/// Crash v2 (journal A) at `publish_spec`, crash `recover` with a fresh journal B at
/// `spec`, then recover with A, then with B: exit 0 each, the destination before or after,
/// nothing left unfinished in either journal.
fn crash_recover_then_first_journal(mode: Mode, publish_spec: &str, spec: &str, side: Side) {
    let ctx = format!(
        "{mode:?} publish (journal A) crashed at {publish_spec}, recover (journal B) crashed at {spec}"
    );
    let sc = Scenario::new(mode);
    sc.crash_publish(publish_spec);
    let op = newest_op(&sc.env);
    let b = journal_b(&sc);
    let r = recover_with(&sc.env, &sc.cfg, &b, &[("DISTRIBUTOR_FAILPOINT", spec)]);
    assert_aborted(&r, spec);
    // B adopts the operation from staging before it acts; stopped at the lock it has not.
    let adopted = !spec.starts_with("recover_after_lock");
    assert_eq!(
        status_in(&sc.env, &b, &op).is_some(),
        adopted,
        "{ctx}: journal B's knowledge of {op}"
    );
    let staged = sc.env.exists(&format!("{DEST}/.distributor/staging/{op}"));
    // Only a recover stopped after its cleanup (before its event) removed the staging.
    assert_eq!(staged, !spec.starts_with("recover_before_event"), "{ctx}");

    // A recovers: from its own journal while the staging is there, else closes it.
    let ra = recover_with(&sc.env, &sc.cfg, &sc.env.journal(), &[]);
    ra.expect_code(0);
    let ops = recovered(&ra);
    assert_eq!(ops.len(), 1, "{ctx}, then A: {}", ra.stdout);
    assert_eq!(ops[0].0, op, "{ctx}, then A: {}", ra.stdout);
    if staged {
        assert_eq!(ops[0].1, word(side), "{ctx}, then A: {}", ra.stdout);
    } else {
        assert_eq!(ops[0].1, "closed", "{ctx}, then A: {}", ra.stdout);
        assert!(
            ops[0].2.starts_with(closed_word(side)),
            "{ctx}, then A: {}",
            ra.stdout
        );
    }
    assert_landed(&sc, side, &format!("{ctx}, then A"));

    // B: what it adopted is closed now, touching nothing; else it has nothing to do.
    if adopted {
        assert_closes(&sc, &b, &op, side, &format!("{ctx}, then A, then B"));
    } else {
        let rb = recover_with(&sc.env, &sc.cfg, &b, &[]);
        rb.expect_code(0);
        assert_eq!(rb.json()["operations"], serde_json::json!([]), "{ctx}");
    }
    assert_landed(&sc, side, &format!("{ctx}, then A, then B"));
    assert_all_finished(&sc, &ctx);
    assert_publishes_again(&sc, side, &ctx);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crashed_recover_of_another_journal_is_finished_by_the_first() {
    let back = "after_links";
    let fwd = "after_state_write";
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        for (publish_spec, spec, side) in [
            (back, "recover_after_lock", Side::Before),
            (fwd, "recover_after_lock", Side::After),
            (back, "recover_after_adopt", Side::Before),
            (fwd, "recover_after_adopt", Side::After),
            (back, "undo_remove_placed:1", Side::Before),
            (back, "undo_remove_placed:3", Side::Before),
            (back, "undo_restore:1", Side::Before),
            (back, "undo_restore:4", Side::Before),
            (back, "io_rename:2", Side::Before),
            (back, "io_syncfs", Side::Before),
            (back, "undo_before_remove_staging", Side::Before),
            (back, "io_remove_staging", Side::Before),
            (fwd, "during_cleanup", Side::After),
            (fwd, "cleanup_before_prune", Side::After),
            (fwd, "during_prune", Side::After),
            (fwd, "io_remove_staging", Side::After),
            (back, "recover_before_event", Side::Before),
            (fwd, "recover_before_event", Side::After),
        ] {
            crash_recover_then_first_journal(mode, publish_spec, spec, side);
        }
    }
}

/// How many times `recover` with a fresh journal B reaches each failpoint, after v2
/// (journal A) crashed at `publish_spec`.
fn recover_hits(mode: Mode, publish_spec: &str) -> BTreeMap<String, u64> {
    let sc = Scenario::new(mode);
    sc.crash_publish(publish_spec);
    let b = journal_b(&sc);
    let args = [
        "recover",
        "--json",
        "--config",
        sc.cfg.to_str().unwrap(),
        "--journal",
        b.to_str().unwrap(),
    ];
    let (r, log) = sc.env.run_logged(&args, &[]);
    r.expect_code(0);
    let mut out = BTreeMap::new();
    for name in log {
        *out.entry(name).or_insert(0) += 1;
    }
    out
}

/// `recover` with journal B crashed at every hit of every failpoint it reaches, rolling
/// back and rolling forward; then A, then B, finish. Each case runs to the end; the
/// failures are listed together.
fn every_recover_hit(mode: Mode) {
    let mut failed = Vec::new();
    let mut n = 0;
    for (publish_spec, side) in [
        ("after_links", Side::Before),
        ("after_state_write", Side::After),
    ] {
        for (name, count) in recover_hits(mode, publish_spec) {
            for hit in 1..=count {
                n += 1;
                let spec = format!("{name}:{hit}");
                let result = std::panic::catch_unwind(|| {
                    crash_recover_then_first_journal(mode, publish_spec, &spec, side)
                });
                if let Err(e) = result {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    failed.push(format!(
                        "publish at {publish_spec}, recover at {spec}: {}",
                        msg.lines().next().unwrap_or("")
                    ));
                }
            }
        }
    }
    assert!(n >= 20, "only {n} recover hits exercised");
    assert!(
        failed.is_empty(),
        "{mode:?}: {} of {n} crashes of recover were not finished by the other journal:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crashed_recover_at_every_hit_is_finished_by_the_first_journal_single_owner() {
    every_recover_hit(Mode::SingleOwner);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_crashed_recover_at_every_hit_is_finished_by_the_first_journal_shared_root() {
    every_recover_hit(Mode::SharedRoot);
}

/// The system calls that change a destination's tree.
const TREE_SYSCALLS: &[&str] = &["mkdirat", "renameat2", "unlinkat", "symlinkat"];

fn v2_args(sc: &Scenario) -> Vec<String> {
    [
        "publish",
        "--json",
        "--config",
        sc.cfg.to_str().unwrap(),
        "--source",
        sc.v2.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn recover_args(sc: &Scenario, journal: &std::path::Path) -> Vec<String> {
    [
        "recover",
        "--json",
        "--config",
        sc.cfg.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The side the destination's state is on: after when it names v2 for weather/latest.
fn side_now(sc: &Scenario) -> Side {
    let state: Value =
        serde_json::from_str(&sc.env.read(&format!("{DEST}/.distributor.json"))).unwrap();
    let mine = match sc.mode {
        Mode::SingleOwner => state["source"].clone(),
        Mode::SharedRoot => state["owners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["owner"] == "weather/latest")
            .map(|o| o["source"].clone())
            .unwrap_or_default(),
    };
    if mine["created_at"] == V2_AT {
        Side::After
    } else {
        Side::Before
    }
}

/// After a kill: `recover` with each journal of `order` exits 0; the destination is
/// exactly before or after (its state says which); nothing is left unfinished; v2
/// publishes again.
fn assert_finished_by(sc: &Scenario, order: &[(&str, PathBuf)], ctx: &str) {
    for (name, j) in order {
        let r = recover_with(&sc.env, &sc.cfg, j, &[]);
        assert_eq!(
            r.code,
            0,
            "{ctx}: recover with journal {name} exited {}: {:?}\nstdout:\n{}\nstderr:\n{}",
            r.code,
            serde_json::from_str::<Value>(&r.stdout)
                .map(|_| recovered(&r))
                .unwrap_or_default(),
            r.stdout,
            r.stderr
        );
    }
    let side = side_now(sc);
    assert_landed(sc, side, &format!("{ctx} (landed {side:?})"));
    assert_all_finished(sc, ctx);
    assert_publishes_again(sc, side, ctx);
}

/// Runs `case` for every (syscall, n) of `counts`, catching failures into `failed`
/// (prefixed with `what`).
fn each_kill(
    what: &str,
    counts: &[(String, u64)],
    failed: &mut Vec<String>,
    mut case: impl FnMut(&str, u64),
) {
    let mut n_cases = 0;
    for (syscall, total) in counts {
        for n in 1..=*total {
            n_cases += 1;
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(syscall, n)));
            if let Err(e) = result {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!(
                    "{what}, killed at {syscall} #{n}: {}",
                    msg.lines().next().unwrap_or("")
                ));
            }
        }
    }
    assert!(
        n_cases >= 10,
        "{what}: only {n_cases} kill points: {counts:?}"
    );
}

fn assert_no_kill_failed(failed: &[String]) {
    assert!(
        failed.is_empty(),
        "{} kills left something for a person, or the destination off before/after:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// SIGKILL (not a failpoint: a real kill, by `strace -e inject=<syscall>:signal=KILL`)
/// at every call of every system call that changes the tree (`mkdirat`, `renameat2`,
/// `unlinkat`, `symlinkat`) of a v2 publication journaled in A; then `recover` with a
/// fresh journal B, then A. This reaches moments no failpoint marks: between creating
/// `.distributor-staging/` and the staging record in it, inside the removal of a staging
/// entry (directory order, on ext4 `plan.json` first), between two directories pruned.
/// strace counts calls per thread, so a kill point among the staging threads is "the
/// first thread to make its n-th call". Needs strace (`.ci/run` installs it).
#[test]
fn a_publisher_killed_at_each_system_call_is_recovered_by_another_journal() {
    assert!(
        strace_works(),
        "this test kills distributor at each system call with strace: install it (apt-get install strace; .ci/run does)"
    );
    let mut failed = Vec::new();
    for mode in [Mode::SingleOwner, Mode::SharedRoot] {
        let calib = Scenario::new(mode);
        let counts = count_syscalls(&calib.env, TREE_SYSCALLS, &strs(&v2_args(&calib)));
        drop(calib);
        let what = format!("{mode:?} publish (journal A)");
        each_kill(&what, &counts, &mut failed, |syscall, n| {
            let ctx = format!("{what} killed at {syscall} #{n}");
            let sc = Scenario::new(mode);
            let r = run_killed_at(&sc.env, syscall, n, &strs(&v2_args(&sc)));
            assert!(
                r.code == -1 || r.code == 0,
                "{ctx}: exited {}\nstderr:\n{}",
                r.code,
                r.stderr
            );
            let order = [("B", journal_b(&sc)), ("A", sc.env.journal())];
            assert_finished_by(&sc, &order, &ctx);
        });
    }
    assert_no_kill_failed(&failed);
}

/// The same for `recover` with the publisher's journal A, rolling a crashed v2 back
/// (crashed at `after_links`, single owner) or forward (at `after_state_write`, shared
/// root): killed at every call of those system calls, then `recover` with a fresh journal
/// B (which never saw the operation), then A.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_recover_killed_at_each_system_call_is_finished_by_another_journal() {
    assert!(
        strace_works(),
        "this test kills distributor at each system call with strace: install it (apt-get install strace; .ci/run does)"
    );
    let mut failed = Vec::new();
    // One mode each way, to keep the run short (about 50 kill points).
    for (mode, publish_spec) in [
        (Mode::SingleOwner, "after_links"),
        (Mode::SharedRoot, "after_state_write"),
    ] {
        let calib = Scenario::new(mode);
        calib.crash_publish(publish_spec);
        let a = calib.env.journal();
        let counts = count_syscalls(&calib.env, TREE_SYSCALLS, &strs(&recover_args(&calib, &a)));
        drop(calib);
        let what = format!("{mode:?} publish crashed at {publish_spec}, recover (journal A)");
        each_kill(&what, &counts, &mut failed, |syscall, n| {
            let ctx = format!("{what} killed at {syscall} #{n}");
            let sc = Scenario::new(mode);
            sc.crash_publish(publish_spec);
            let a = sc.env.journal();
            let r = run_killed_at(&sc.env, syscall, n, &strs(&recover_args(&sc, &a)));
            assert!(
                r.code == -1 || r.code == 0,
                "{ctx}: exited {}\nstderr:\n{}",
                r.code,
                r.stderr
            );
            let order = [("B", journal_b(&sc)), ("A", a)];
            assert_finished_by(&sc, &order, &ctx);
        });
    }
    assert_no_kill_failed(&failed);
}
