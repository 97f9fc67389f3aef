//! Hostile neighbours of releases destinations (SPEC §13, §15, §17, §18), as
//! `tests/test_hostile.rs` does for in-place publications: a local user of another uid
//! (`setpriv --reuid=65534`) who may create, rename and delete entries in the parent of
//! `path` and in `releases.dir`, acts at every writing step of `publish`, `rollback`,
//! `prune`, `releases adopt`, `publish --stage`, `promote` and `recover` (of an
//! interrupted releases publication, before and after its commit point). A `pause`
//! failpoint stops the real binary at the step; the steps are the failpoints a calibration
//! run of the same scene reaches, each hit in turn.
//!
//! The neighbour's moves: `path` renamed away and replaced by a plain directory of theirs,
//! by a symlink to their private directory outside, or by a symlink to another release
//! (one neither old nor new, and the one the command works on);
//! a release directory (the one the command works on, and the active one) renamed away,
//! or swapped for a symlink to the private directory; two releases' names swapped (the
//! active and the previous one, the active and the one the command works on); a
//! directory of theirs with no state under a release's name (the active one, the one the
//! command works on), and for rollback and promote their copy of the release to activate
//! (every file reads as recorded); for an adoption, the plain directory at `path` swapped
//! for another managed destination's directory (docs/operations.md, "Release identity").
//!
//! After the run (and a `recover` where it left something unfinished): the private
//! directory and the neighbour's own directories are byte-identical; no release the log
//! names was removed, by name or by device and inode, whatever name it has now (prune:
//! none but the one retention judged before the run); every activation or stage logged
//! since the pause names a whole release (its state written) whose name holds the device
//! and inode the entry recorded; `path` is the old or the new release's symlink, whole
//! (adoption: the old directory, or the new release), or the command refused with an
//! error or `path_changed` and `path` is what the neighbour left (and before the commit
//! point, prune: before a removal, the run failed); no logged release was removed after
//! `path` changed; with the neighbour's release moves put back and `recover` run again,
//! `verify` exits 0 with nothing missing or modified; and nothing the neighbour owns sits
//! in a directory the neighbour cannot write (no inode of theirs was carried).
//!
//! Lost races (distributor bugs) are kept out of the matrices and run as ignored tests.

use crate::common::Env;
use crate::common::hostile::{NEIGHBOUR, PausedRun, as_neighbour, misplaced_neighbour_entries};
use crate::common::release_scene::{
    Cmd, DIR, LINK_PREFIX, OTHER, PATH, PRIVATE, Scene, Which, describe, identities,
    logged_releases, path_view, read_active, releases, unfounded_activations,
};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;

/// What the neighbour does while the run stands at the failpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    /// `path` renamed away; a plain directory of theirs in its place.
    PathPlainDir,
    /// `path` renamed away; a symlink to the private directory in its place.
    PathOutsideLink,
    /// `path` renamed away; a symlink (distributor's relative form) to another release.
    PathOtherRelease,
    /// `path` renamed away; a symlink to the release the command works on (rollback's
    /// target, the pruned one, the one being built or recovered).
    PathToSubject,
    /// A release renamed away (beside itself, `<name>.moved`).
    ReleaseAway(Which),
    /// A release renamed away and a symlink to the private directory in its place.
    ReleaseLink(Which),
    /// Adoption: the plain directory at `path` renamed away and another managed
    /// destination's directory renamed to `path`.
    PathOtherManaged,
    /// Two releases swap names (through a third name).
    SwapNames(Which, Which),
    /// A release renamed away; a directory of the neighbour's, with no state, under its
    /// name.
    TheirsUnder(Which),
    /// A release renamed away; the neighbour's copy of it (every file it can read: all but
    /// the state) under its name.
    CopyUnder(Which),
}

const PATH_MOVES: &[Move] = &[
    Move::PathPlainDir,
    Move::PathOutsideLink,
    Move::PathOtherRelease,
    Move::PathToSubject,
];
const RELEASE_MOVES: &[Move] = &[
    Move::ReleaseAway(Which::Subject),
    Move::ReleaseLink(Which::Subject),
    Move::ReleaseAway(Which::Active),
    Move::ReleaseLink(Which::Active),
];
/// Swapped names, swapped directories and a directory with no state under a logged name
/// (issue 39): none is ever activated, carried or removed.
const IDENTITY_MOVES: &[Move] = &[
    Move::SwapNames(Which::Active, Which::Previous),
    Move::SwapNames(Which::Active, Which::Subject),
    Move::TheirsUnder(Which::Subject),
    Move::TheirsUnder(Which::Active),
];
/// A copy of the release to activate again under its name: its files read back as
/// recorded, only its identity tells (rollback, promote).
const COPY_MOVES: &[Move] = &[Move::CopyUnder(Which::Subject)];

/// The failpoints (name and hit) the command passes in a calibration run of its scene.
fn steps(cmd: Cmd) -> Vec<(String, u64)> {
    let s = Scene::new(cmd);
    let args = s.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (r, log) = s.env.run_logged(&args, &[]);
    r.expect_code(0);
    let mut counts = std::collections::HashMap::<String, u64>::new();
    let mut out = Vec::new();
    for name in log {
        let n = counts.entry(name.clone()).or_insert(0);
        *n += 1;
        // The first hit of a per-file step stands for the others (the same act on another
        // file of the same release); each removal of prune is its own. Planning only reads;
        // staging only writes into distributor's own record directory.
        let no_move = [
            "probe_hash",
            "during_staging",
            "io_stage_write",
            "io_syncfs",
        ];
        if (*n > 1 && name != "during_prune") || no_move.contains(&name.as_str()) {
            continue;
        }
        out.push((name, *n));
    }
    out
}

/// Why `path`, moved by the run (it is no longer `left`, what the neighbour left), names
/// a directory that is not the release the run built or verified, if it does: nothing
/// there, a symlink, the neighbour's, a release with no state, or another directory than
/// the one the name held when the run paused (`at_pause`).
fn wrongly_activated(env: &Env, at_pause: &[(String, (u64, u64))], left: &str) -> Option<String> {
    if describe(env, PATH) == left {
        return None;
    }
    let r = read_active(env)?;
    let dir = env.path(&format!("{DIR}/{r}"));
    let Ok(md) = fs::symlink_metadata(&dir) else {
        return Some(format!("the run activated {r}, and nothing has that name"));
    };
    if !md.is_dir() || md.uid() == NEIGHBOUR || !dir.join(".distributor.json").exists() {
        return Some(format!(
            "the run activated {r}, whose name holds the neighbour's, or a release with no state"
        ));
    }
    match at_pause.iter().find(|(n, _)| *n == r) {
        Some((_, id)) if *id != (md.dev(), md.ino()) => Some(format!(
            "the run activated {r}, whose name holds {}:{}, not the release it held when the run paused ({}:{})",
            md.dev(),
            md.ino(),
            id.0,
            id.1
        )),
        _ => None,
    }
}

/// What the neighbour does for `mv` at this moment (`now`: the releases present,
/// `building`: the one the run is building, if any), and how it takes its releases back
/// afterwards; `None` when what the move takes is not there (or the move is the same as
/// another one of the matrix).
fn neighbour_move(
    s: &Scene,
    mv: Move,
    now: &BTreeSet<String>,
    building: Option<String>,
) -> Option<(String, Option<String>)> {
    let release_of = |w: Which| {
        match w {
            Which::Active => s.old.clone(),
            Which::Subject => s.subject.clone().or(building.clone()),
            Which::Previous => s.previous.clone(),
        }
        .filter(|r| now.contains(r))
    };
    let private = s.env.path(PRIVATE);
    let private = private.to_str().unwrap();
    let away = format!("mv {PATH} {PATH}.moved");
    // A release renamed away is taken back: whatever stands under its name goes first.
    let take_back = |r: &str| {
        let at = format!("{DIR}/{r}");
        Some(format!(
            "set -e; if [ -L {at} ]; then rm {at}; elif [ -d {at} ] && [ -O {at} ] && [ -e {at}.moved ]; then rm -rf {at}; fi; if [ ! -e {at} ] && [ -e {at}.moved ]; then mv {at}.moved {at}; fi"
        ))
    };
    Some(match mv {
        Move::PathPlainDir => (
            format!("set -e; {away}; mkdir {PATH}; echo mine > {PATH}/mine.txt"),
            None,
        ),
        Move::PathOutsideLink => (format!("set -e; {away}; ln -s {private} {PATH}"), None),
        Move::PathOtherRelease => {
            let other = s.other.clone()?;
            (
                format!("set -e; {away}; ln -s {LINK_PREFIX}{other} {PATH}"),
                None,
            )
        }
        Move::PathToSubject => {
            let r = release_of(Which::Subject)?;
            if s.other.as_ref() == Some(&r) {
                // The same move as PathOtherRelease.
                return None;
            }
            (
                format!("set -e; {away}; ln -s {LINK_PREFIX}{r} {PATH}"),
                None,
            )
        }
        Move::ReleaseAway(w) | Move::ReleaseLink(w) => {
            let r = release_of(w)?;
            let link = if matches!(mv, Move::ReleaseLink(_)) {
                format!("; ln -s {private} {DIR}/{r}")
            } else {
                String::new()
            };
            (
                format!("set -e; mv {DIR}/{r} {DIR}/{r}.moved{link}"),
                take_back(&r),
            )
        }
        Move::PathOtherManaged => (format!("set -e; {away}; mv {OTHER} {PATH}"), None),
        Move::SwapNames(a, b) => {
            let (a, b) = (release_of(a)?, release_of(b)?);
            if a == b
                || (mv == Move::SwapNames(Which::Active, Which::Subject)
                    && Some(&b) == s.previous.as_ref())
            {
                return None;
            }
            let swap = format!(
                "mv {DIR}/{a} {DIR}/.swap; mv {DIR}/{b} {DIR}/{a}; mv {DIR}/.swap {DIR}/{b}"
            );
            (
                format!("set -e; {swap}"),
                Some(format!(
                    "set -e; if [ -d {DIR}/{a} ] && [ -d {DIR}/{b} ]; then {swap}; fi"
                )),
            )
        }
        Move::TheirsUnder(w) => {
            let r = release_of(w)?;
            let at = format!("{DIR}/{r}");
            (
                format!(
                    "set -e; mv {at} {at}.moved; mkdir {at}; echo theirs > {at}/index.html; echo theirs > {at}/planted.html"
                ),
                take_back(&r),
            )
        }
        Move::CopyUnder(w) => {
            let r = release_of(w)?;
            let at = format!("{DIR}/{r}");
            // Everything but the state (a record: the neighbour may not read it).
            (
                format!("mv {at} {at}.moved && cp -R {at}.moved {at}; test -d {at}"),
                take_back(&r),
            )
        }
    })
}

/// One attack: the scene of `cmd`, the run paused at the `k`-th hit of `step`, the
/// neighbour's `mv`, the run resumed, a `recover`, the neighbour's release put back, a
/// `recover` again, the checks. `must_refuse`: the step comes before the command's commit
/// point (prune: before a removal), so a run that leaves `path` as the neighbour left it
/// must fail. `Ok(None)`: the move could
/// not be made at that step (what it takes is not there); `Err`: what went wrong.
fn attack(
    cmd: Cmd,
    step: &str,
    k: u64,
    must_refuse: bool,
    mv: Move,
) -> Result<Option<String>, String> {
    let s = Scene::new(cmd);
    let env = &s.env;
    let private_before = env.snapshot(PRIVATE);
    let present_before = releases(env);
    let logged_before: BTreeSet<String> = logged_releases(env)
        .intersection(&present_before)
        .cloned()
        .chain(s.committed.clone())
        .collect();
    let other_before = env.snapshot(OTHER);
    let ids_before = identities(env, &logged_before);
    let path_before = path_view(env);
    let args = s.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let paused = PausedRun::start(env, &args, &format!("{step}:{k}"), &[]);
    let logged_after_pause = crate::common::release_scene::logged(env).len();

    // The releases the move may take, as they are at this moment, and what each is.
    let now = releases(env);
    let at_pause = identities(env, &now);
    let building = now.difference(&present_before).next().cloned();
    let Some((script, put_back)) = neighbour_move(&s, mv, &now, building) else {
        return Ok(None);
    };
    if !as_neighbour(env, &script) {
        drop(paused);
        return Ok(Some(format!("the neighbour could not: {script}")));
    }
    let left = describe(env, PATH);
    let theirs = path_view(env);
    let run = paused.resume();
    // As the run left it, before anyone puts anything back: a move made before the
    // commit point never ends with `path` moved by the run to a name that does not hold
    // the release the run built or verified.
    let wrong = must_refuse
        .then(|| wrongly_activated(env, &at_pause, &left))
        .flatten();
    let rec = env.run(&["recover", "--json", "--config", s.cfg()]);
    // The neighbour takes its release back (names as they were), and the operator runs
    // `recover` again.
    if let Some(back) = &put_back {
        as_neighbour(env, back);
    }
    let rec2 = env.run(&["recover", "--json", "--config", s.cfg()]);
    let ctx = format!(
        "{cmd:?} paused at {step}:{k}, neighbour: {mv:?} ({script})\nrun exit {}:\n{}\n{}\nrecover exit {}:\n{}\n{}\nrecover again exit {}:\n{}",
        run.code, run.stdout, run.stderr, rec.code, rec.stdout, rec.stderr, rec2.code, rec2.stdout
    );
    let mut failures: Vec<String> = wrong.into_iter().collect();

    if env.snapshot(PRIVATE) != private_before {
        failures.push("the private directory outside changed".to_string());
    }
    let misplaced = misplaced_neighbour_entries(env, &[PRIVATE]);
    if !misplaced.is_empty() {
        failures.push(format!(
            "entries of the neighbour where it cannot create them: {misplaced:?}"
        ));
    }
    let present = releases(env);
    for r in &logged_before {
        let pruned = cmd == Cmd::Prune && s.subject.as_ref() == Some(r);
        if !present.contains(r) && !pruned {
            failures.push(format!("logged (or committed) release {r} was removed"));
        }
    }
    // Never removed, whatever name it has now: every logged release directory (its device
    // and inode) is still in `releases.dir` (prune: but the release it prunes).
    let ids_now: BTreeSet<(u64, u64)> = fs::read_dir(env.path(DIR))
        .map(|rd| {
            rd.filter_map(|e| fs::symlink_metadata(e.unwrap().path()).ok())
                .filter(|m| m.is_dir())
                .map(|m| (m.dev(), m.ino()))
                .collect()
        })
        .unwrap_or_default();
    for (r, id) in &ids_before {
        let pruned = cmd == Cmd::Prune && s.subject.as_ref() == Some(r);
        if !pruned && !ids_now.contains(id) {
            failures.push(format!(
                "the directory of logged release {r} ({}:{}) was removed",
                id.0, id.1
            ));
        }
    }
    // distributor's word: every activation it logged after the pause is of a release that
    // was whole (its state written) and is the directory it built or verified.
    failures.extend(unfounded_activations(env, logged_after_pause));
    // What `path` is now.
    let accepted = match read_active(env) {
        // A release the run built.
        Some(r)
            if !present_before.contains(&r)
                && matches!(cmd, Cmd::Adopt | Cmd::RollbackShared | Cmd::Publish) =>
        {
            present.contains(&r)
        }
        // The old or the new release, whole (its state is written last, before the
        // commit point): a half-built one `path` was pointed at is not accepted.
        Some(r) => {
            (s.old.as_ref() == Some(&r) || s.new.as_ref() == Some(&r))
                && fs::symlink_metadata(env.path(&format!("{DIR}/{r}"))).is_ok_and(|m| m.is_dir())
                && env.exists(&format!("{DIR}/{r}/.distributor.json"))
        }
        None if cmd == Cmd::Adopt => {
            fs::symlink_metadata(env.path(PATH)).is_ok_and(|m| s.plain == Some((m.dev(), m.ino())))
                && path_view(env) == path_before
        }
        None => false,
    };
    let path_moved = PATH_MOVES.contains(&mv) || mv == Move::PathOtherManaged;
    if !accepted {
        if must_refuse && run.code == 0 {
            failures.push(format!(
                "path is {} (neither the old nor the new release) and the run did not refuse",
                describe(env, PATH)
            ));
        }
        if describe(env, PATH) != left {
            failures.push(format!(
                "path is {}, not what the neighbour left ({left})",
                describe(env, PATH)
            ));
        }
    }
    // Logged releases that went after the pause (an unlogged release an undo removes, one
    // the run itself was building, is not retention's).
    let removed_after: Vec<&String> = (now.difference(&present))
        .filter(|r| logged_before.contains(*r))
        .collect();
    if path_moved && !removed_after.is_empty() {
        failures.push(format!(
            "releases {removed_after:?} were removed after path changed"
        ));
    }
    match mv {
        Move::PathPlainDir | Move::PathOtherManaged if path_view(env) != theirs => {
            failures.push("the directory the neighbour put at path changed".to_string());
        }
        Move::PathOtherManaged if path_view(env) != other_before => {
            failures.push("the other destination changed".to_string());
        }
        _ => {}
    }
    if accepted {
        let v = env.run(&["verify", "--json", "--config", s.cfg()]);
        let d = v.dest(0);
        if d["missing"] != serde_json::json!([]) || d["modified"] != serde_json::json!([]) {
            failures.push(format!(
                "verify finds the active release incomplete:\n{}",
                v.stdout
            ));
        }
        if v.code != 0 {
            failures.push(format!(
                "verify exits {} on the old or new content:\n{}",
                v.code, v.stdout
            ));
        }
    }
    if std::env::var_os("HOSTILE_TRACE").is_some() {
        // What each attack came to, for a reader of the matrix.
        eprintln!(
            "{cmd:?} {step}:{k} {mv:?}: run {} / recover {} / again {}; path {}",
            run.code,
            rec.code,
            rec2.code,
            describe(env, PATH)
        );
    }
    if failures.is_empty() {
        Ok(Some(String::new()))
    } else {
        Err(format!("{}\n{ctx}", failures.join("\n")))
    }
}

/// Every move of `moves` at every step `cmd` passes; panics naming each lost race.
fn matrix(cmd: Cmd, moves: &[Move], known: &[(&str, u64, Move)]) {
    let steps = steps(cmd);
    eprintln!("{cmd:?}: steps {steps:?}");
    let mut failed = Vec::new();
    let mut ran = 0;
    // Where the commit point follows (rollback: the rename over `path`; adoption: the
    // exchange); prune's last act is its last removal.
    let after = |name: &str| steps.iter().position(|(s, _)| s == name).map(|i| i + 1);
    let last_act = match cmd {
        Cmd::Rollback | Cmd::RollbackShared | Cmd::Promote | Cmd::Publish => {
            after("io_state_rename")
        }
        // A stage checks that `path` is still what it locked after its release is durable
        // (its state file's fsync), and never moves it.
        Cmd::Stage => after("io_state_fsync"),
        Cmd::Adopt => after("before_adopt_exchange"),
        Cmd::Prune => steps
            .iter()
            .rposition(|(s, _)| s == "during_prune")
            .map(|i| i + 1),
        Cmd::RecoverBefore | Cmd::RecoverAfter => Some(0),
    }
    .expect("the commit point is among the steps");
    for (i, (step, k)) in steps.iter().enumerate() {
        for &mv in moves {
            if known
                .iter()
                .any(|&(s, kk, m)| s == step && kk == *k && m == mv)
            {
                continue;
            }
            match attack(cmd, step, *k, i < last_act, mv) {
                Ok(None) => {}
                Ok(Some(why)) if !why.is_empty() => eprintln!("skipped {step}:{k} {mv:?}: {why}"),
                Ok(Some(_)) => ran += 1,
                Err(e) => {
                    eprintln!("LOST: {e}\n");
                    failed.push(format!("{step}:{k} {mv:?}"));
                }
            }
        }
    }
    eprintln!("{cmd:?}: {ran} attacks held");
    assert!(failed.is_empty(), "{cmd:?}: lost races: {failed:#?}");
}

/// Every move of `cmd` but the adoption's and the copies.
fn all_moves() -> Vec<Move> {
    PATH_MOVES
        .iter()
        .chain(RELEASE_MOVES)
        .chain(IDENTITY_MOVES)
        .copied()
        .collect()
}

/// [`all_moves`] and a copy of the release to activate under its name.
fn activation_moves() -> Vec<Move> {
    all_moves()
        .into_iter()
        .chain(COPY_MOVES.iter().copied())
        .collect()
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn rollback_at_every_step_against_every_move() {
    matrix(Cmd::Rollback, &activation_moves(), &[]);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn shared_root_rollback_at_every_step_against_every_move() {
    matrix(Cmd::RollbackShared, &all_moves(), &[]);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn prune_at_every_step_against_every_move() {
    matrix(Cmd::Prune, &all_moves(), PRUNE_KNOWN);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn adopt_at_every_step_against_every_move() {
    let mut moves = all_moves();
    moves.push(Move::PathOtherManaged);
    matrix(Cmd::Adopt, &moves, &[]);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_before_the_commit_point_at_every_step_against_every_move() {
    matrix(Cmd::RecoverBefore, &all_moves(), &[]);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_after_the_commit_point_at_every_step_against_every_move() {
    matrix(Cmd::RecoverAfter, &all_moves(), RECOVER_AFTER_KNOWN);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn stage_at_every_step_against_every_move() {
    matrix(Cmd::Stage, &all_moves(), &[]);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn promote_at_every_step_against_every_move() {
    matrix(Cmd::Promote, &activation_moves(), &[]);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn publish_at_every_step_against_every_move() {
    matrix(Cmd::Publish, &all_moves(), &[]);
}

/// `prune` checks `path` once, after the lock, and not again before each removal: with
/// `path` replaced while it stands before its first removal, it still removes the
/// release retention judged (SPEC §17: "checking that identity again before each step
/// that moves, deletes"; "when `path` is not the symlink the last logged activation made
/// … retention and `prune` remove nothing and report `path_changed`"). A plain directory:
/// exit 0, no `path_changed`. A symlink outside, or to that very release (left dangling):
/// the removal is done, then the run fails (exit 1) reporting `removed: 0`, with no
/// journal operation and no log entry for the removal.
const PRUNE_KNOWN: &[(&str, u64, Move)] = &[
    ("during_prune", 1, Move::PathPlainDir),
    ("during_prune", 1, Move::PathOutsideLink),
    ("during_prune", 1, Move::PathOtherRelease),
];

/// `recover` of a releases publication that passed its commit point (the journal has
/// `committed`, `path` named the new release) but was killed before its log entry: with
/// `path` pointed back at the release before, `recover` reads the pre-state there, says
/// "the commit point was not reached" and rolls back, removing the committed release,
/// which the neighbour could not have deleted (SPEC §17: no command deletes anything that
/// user could not, or loses recorded content).
const RECOVER_AFTER_KNOWN: &[(&str, u64, Move)] =
    &[("recover_after_lock", 1, Move::PathOtherRelease)];

/// Runs known-lost races; panics with what went wrong in each.
fn known(cmd: Cmd, must_refuse: bool, cases: &[(&str, u64, Move)]) {
    let lost: Vec<String> = (cases.iter())
        .filter_map(|&(step, k, mv)| attack(cmd, step, k, must_refuse, mv).err())
        .collect();
    assert!(lost.is_empty(), "{}", lost.join("\n\n"));
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn prune_rechecks_path_before_each_removal() {
    known(Cmd::Prune, true, PRUNE_KNOWN);
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_never_removes_a_committed_release_path_no_longer_names() {
    known(Cmd::RecoverAfter, false, RECOVER_AFTER_KNOWN);
}

/// The same as above without a pause: the neighbour points `path` back at the release
/// before while no distributor runs, after a publication was killed past its commit point
/// and before its log entry; the next `recover` removes the committed release.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_never_removes_a_committed_release_when_path_was_pointed_back_beforehand() {
    let s = Scene::new(Cmd::RecoverAfter);
    let env = &s.env;
    let committed = s.committed.clone().unwrap();
    let before = s.other.clone().unwrap();
    assert!(as_neighbour(
        env,
        &format!("set -e; mv {PATH} {PATH}.moved; ln -s {LINK_PREFIX}{before} {PATH}")
    ));
    let rec = env.run(&["recover", "--json", "--config", s.cfg()]);
    assert!(
        releases(env).contains(&committed),
        "the committed release {committed} was removed\n{}",
        rec.stdout
    );
}
