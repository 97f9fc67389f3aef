//! Hostile neighbours of releases destinations (SPEC §13, §15, §17, §18), as
//! `tests/test_hostile.rs` does for in-place publications: a local user of another uid
//! (`setpriv --reuid=65534`) who may create, rename and delete entries in the parent of
//! `path` and in `releases.dir`, acts at every writing step of `rollback`, `prune`,
//! `releases adopt`, `publish --stage`, `promote` and `recover` (of an interrupted
//! releases publication, before and after its commit point). A `pause` failpoint stops the real binary at the step; the
//! steps are the failpoints a calibration run of the same scene reaches, each hit in turn.
//!
//! The neighbour's moves: `path` renamed away and replaced by a plain directory of theirs,
//! by a symlink to their private directory outside, or by a symlink to another release
//! (one neither old nor new, and the one the command works on);
//! a release directory (the one the command works on, and the active one) renamed away,
//! or swapped for a symlink to the private directory; for an adoption, the plain
//! directory at `path` swapped for another managed destination's directory.
//!
//! After the run (and a `recover` where it left something unfinished): the private
//! directory and the neighbour's own directories are byte-identical; no release the log
//! names was removed (prune: none but those retention judged before the run); `path` is
//! the old or the new release's symlink (adoption: the old directory, or the new release),
//! or the command refused with an error or `path_changed` and `path` is what the neighbour
//! left (and before the commit point, prune: before a removal, the run failed); no
//! logged release was removed after `path` changed; with the neighbour's release moves put
//! back and `recover` run again, `verify` exits 0 with nothing missing or modified; and
//! nothing the neighbour owns sits in a directory the neighbour cannot write.
//!
//! Lost races (distributor bugs) are kept out of the matrices and run as ignored tests.

use crate::common::faults::{V1_AT, V1_FILES, V1_LINKS, V2_AT, V2_FILES, V2_LINKS, assert_aborted};
use crate::common::hostile::{NEIGHBOUR, PausedRun, as_neighbour, misplaced_neighbour_entries};
use crate::common::{Env, Run};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(crate) const PATH: &str = "www/latest";
pub(crate) const DIR: &str = "www/.latest.releases";
/// Where `path`'s symlink points, relative to `path`'s parent.
pub(crate) const LINK_PREFIX: &str = ".latest.releases/";
/// The neighbour's private directory outside.
const PRIVATE: &str = "private";
/// Another managed (in-place) destination beside `path` (adoption).
const OTHER: &str = "www/other";

/// The command raced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    /// `rollback` from the third release to the second.
    Rollback,
    /// The same in `shared_root`, where the rollback builds a new release.
    RollbackShared,
    /// `prune` of the first release (`keep: 0`; its retention was killed).
    Prune,
    /// `releases adopt` of an in-place destination.
    Adopt,
    /// `recover` of a publication killed before its commit point (`after_links`).
    RecoverBefore,
    /// `recover` of a publication killed after its commit point (`during_cleanup`).
    RecoverAfter,
    /// `publish --stage` of a third version on top of two releases (SPEC §19): builds a
    /// release, never moves `path`.
    Stage,
    /// `promote` of a release staged on top of two releases (SPEC §19): an activation,
    /// as rollback's.
    Promote,
}

/// Which release a release move takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    /// The one `path` names before the run.
    Active,
    /// The one the command works on: rollback's target, the pruned one, the one being
    /// built (adopt, recover).
    Subject,
}

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

pub(crate) fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

pub(crate) fn site(env: &Env, i: usize) -> PathBuf {
    let v = format!("version {i}");
    let extra = format!("only-in-{i}.html");
    env.bundle(
        &format!("site{i}"),
        "site",
        &format!("2026-12-02T0{i}:00:00Z"),
        &[
            ("index.html", v.as_str()),
            ("same.css", "same"),
            ("sub/page.html", v.as_str()),
            (extra.as_str(), v.as_str()),
        ],
        &[],
    )
}

pub(crate) fn op_of(r: &Run) -> String {
    r.dest(0)["operation_id"].as_str().unwrap().to_string()
}

/// The release directories in `releases.dir` (uuid names only).
pub(crate) fn releases(env: &Env) -> BTreeSet<String> {
    fs::read_dir(env.path(DIR))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| uuid::Uuid::parse_str(n).is_ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every release some log entry names as activated or deactivated.
pub(crate) fn logged_releases(env: &Env) -> BTreeSet<String> {
    crate::test_releases::logged(env, DIR)
        .iter()
        .flat_map(|e| {
            ["release_activated", "release_deactivated"]
                .into_iter()
                .filter_map(|k| e[k].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A destination, ready for the command, and what the checks need.
struct Scene {
    cmd: Cmd,
    env: Env,
    cfg: PathBuf,
    /// The release `path` names before the run (adopt: none).
    old: Option<String>,
    /// The release the run activates, when known before it (rollback's target, the
    /// interrupted publication's release).
    new: Option<String>,
    /// A release that is neither old nor new (for `path` pointed at another release).
    other: Option<String>,
    /// The release the command works on (known before the run).
    subject: Option<String>,
    /// Adopt: the device and inode of the plain directory at `path`.
    plain: Option<(u64, u64)>,
    /// A release whose activation is committed (journal and `path`) but not logged yet:
    /// the interrupted publication past its commit point.
    committed: Option<String>,
}

impl Scene {
    fn new(cmd: Cmd) -> Scene {
        let env = Env::new();
        chmod(&env.path(""), 0o755);
        env.write(&format!("{PRIVATE}/index.html"), "private index");
        env.write(&format!("{PRIVATE}/same.css"), "private css");
        env.write(&format!("{PRIVATE}/sub/page.html"), "private page");
        fs::create_dir_all(env.path("www")).unwrap();
        std::os::unix::fs::chown(env.path(PRIVATE), Some(NEIGHBOUR), Some(NEIGHBOUR)).unwrap();
        for p in ["index.html", "same.css", "sub", "sub/page.html"] {
            let p = env.path(&format!("{PRIVATE}/{p}"));
            std::os::unix::fs::lchown(&p, Some(NEIGHBOUR), Some(NEIGHBOUR)).unwrap();
        }
        chmod(&env.path(PRIVATE), 0o700);
        let keep = if cmd == Cmd::Prune { 0 } else { 3 };
        let mode = if cmd == Cmd::RollbackShared {
            "shared_root"
        } else {
            "single_owner"
        };
        let extra = format!("    state:\n      mode: {mode}\n    releases:\n      keep: {keep}\n");
        let cfg = env.simple_config("c.yaml", "weather", "latest", PATH, &extra);
        let mut s = Scene {
            cmd,
            env,
            cfg,
            old: None,
            new: None,
            other: None,
            subject: None,
            plain: None,
            committed: None,
        };
        s.prepare();
        // The neighbour may write in `path`'s parent and in `releases.dir`.
        chmod(&s.env.path("www"), 0o777);
        if s.env.exists(DIR) {
            chmod(&s.env.path(DIR), 0o777);
        }
        s
    }

    fn cfg(&self) -> &str {
        self.cfg.to_str().unwrap()
    }

    fn publish(&self, i: usize) -> String {
        let r = self.env.publish(&self.cfg, &site(&self.env, i), &[]);
        r.expect_code(0);
        op_of(&r)
    }

    fn prepare(&mut self) {
        let env = &self.env;
        match self.cmd {
            Cmd::Rollback => {
                let ops: Vec<String> = (1..=3).map(|i| self.publish(i)).collect();
                self.old = Some(ops[2].clone());
                self.new = Some(ops[1].clone());
                self.subject = Some(ops[1].clone());
                self.other = Some(ops[0].clone());
            }
            Cmd::RollbackShared => {
                // The new release is built by the run; its records come from the second.
                let ops: Vec<String> = (1..=3).map(|i| self.publish(i)).collect();
                self.old = Some(ops[2].clone());
                self.subject = Some(ops[1].clone());
                self.other = Some(ops[0].clone());
            }
            Cmd::Prune => {
                let ops: Vec<String> = (1..=2).map(|i| self.publish(i)).collect();
                // The third publication's retention is killed: the first release stays
                // for `prune`.
                let r = env.run_env(
                    &[
                        "publish",
                        "--json",
                        "--config",
                        self.cfg(),
                        "--source",
                        site(env, 3).to_str().unwrap(),
                    ],
                    &[("DISTRIBUTOR_FAILPOINT", "during_prune")],
                );
                assert_aborted(&r, "during_prune");
                env.run(&["recover", "--json", "--config", self.cfg()])
                    .expect_code(0);
                let third = read_active(env).expect("path names a release");
                assert!(
                    releases(env).contains(&ops[0]),
                    "the first release is left for prune: {:?}",
                    releases(env)
                );
                self.old = Some(third.clone());
                self.new = Some(third);
                self.subject = Some(ops[0].clone());
                self.other = Some(ops[0].clone());
            }
            Cmd::Adopt => {
                let plain = env.simple_config("plain.yaml", "weather", "latest", PATH, "");
                let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
                env.publish(&plain, &v1, &[]).expect_code(0);
                let other = env.simple_config("other.yaml", "radar", "other", OTHER, "");
                let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
                env.publish(&other, &v2, &[]).expect_code(0);
                let md = fs::symlink_metadata(env.path(PATH)).unwrap();
                self.plain = Some((md.dev(), md.ino()));
                // `releases.dir` made beforehand, so that the neighbour may write there.
                fs::create_dir_all(env.path(DIR)).unwrap();
            }
            Cmd::Stage => {
                let ops: Vec<String> = (1..=2).map(|i| self.publish(i)).collect();
                // `path` stays at the second release whatever the stage does.
                self.old = Some(ops[1].clone());
                self.new = Some(ops[1].clone());
                self.other = Some(ops[0].clone());
            }
            Cmd::Promote => {
                let ops: Vec<String> = (1..=2).map(|i| self.publish(i)).collect();
                let r = env.publish(&self.cfg, &site(env, 3), &["--stage"]);
                r.expect_code(0);
                let staged = op_of(&r);
                self.old = Some(ops[1].clone());
                self.new = Some(staged.clone());
                self.subject = Some(staged);
                self.other = Some(ops[0].clone());
            }
            Cmd::RecoverBefore | Cmd::RecoverAfter => {
                let ops: Vec<String> = (1..=2).map(|i| self.publish(i)).collect();
                let fp = if self.cmd == Cmd::RecoverBefore {
                    "after_links"
                } else {
                    "during_cleanup"
                };
                let r = env.run_env(
                    &[
                        "publish",
                        "--json",
                        "--config",
                        self.cfg(),
                        "--source",
                        site(env, 3).to_str().unwrap(),
                    ],
                    &[("DISTRIBUTOR_FAILPOINT", fp)],
                );
                assert_aborted(&r, fp);
                let third = releases(env)
                    .into_iter()
                    .find(|r| !ops.contains(r))
                    .expect("the interrupted publication's release");
                self.subject = Some(third.clone());
                if self.cmd == Cmd::RecoverBefore {
                    self.old = Some(ops[1].clone());
                    self.new = Some(third);
                    self.other = Some(ops[0].clone());
                } else {
                    // Past its commit point: `path` names the new release already, and the
                    // journal has the commit; the neighbour may point `path` back at the
                    // release before.
                    let h = env.run(&["history", "show", &third, "--json"]);
                    h.expect_code(0);
                    assert!(
                        h.json()["events"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|e| e["event"] == "committed"),
                        "{}",
                        h.stdout
                    );
                    assert_eq!(read_active(env).as_deref(), Some(third.as_str()));
                    self.committed = Some(third.clone());
                    self.old = Some(third.clone());
                    self.new = Some(third);
                    self.other = Some(ops[1].clone());
                }
            }
        }
    }

    fn args(&self) -> Vec<String> {
        let head: &[&str] = match self.cmd {
            Cmd::Rollback | Cmd::RollbackShared => &["rollback"],
            Cmd::Prune => &["prune"],
            Cmd::Adopt => &["releases", "adopt"],
            Cmd::RecoverBefore | Cmd::RecoverAfter => &["recover"],
            Cmd::Stage => &["publish", "--stage"],
            Cmd::Promote => &["promote"],
        };
        let mut a: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        a.extend(["--json", "--config", self.cfg()].map(String::from));
        match self.cmd {
            Cmd::Stage => a.extend([
                "--source".to_string(),
                site(&self.env, 3).to_str().unwrap().to_string(),
            ]),
            Cmd::Promote => a.extend([
                "--destination".to_string(),
                "latest".to_string(),
                self.subject.clone().expect("the staged release"),
            ]),
            _ => {}
        }
        a
    }
}

/// The release `path` names, when it is a symlink of distributor's form.
pub(crate) fn read_active(env: &Env) -> Option<String> {
    let t = fs::read_link(env.path(PATH)).ok()?;
    t.to_str()?.strip_prefix(LINK_PREFIX).map(str::to_string)
}

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

/// What is at `rel`, not followed: a symlink's text, a directory's inode, or nothing.
fn describe(env: &Env, rel: &str) -> String {
    match fs::symlink_metadata(env.path(rel)) {
        Err(_) => "nothing".to_string(),
        Ok(md) if md.file_type().is_symlink() => {
            format!("-> {}", fs::read_link(env.path(rel)).unwrap().display())
        }
        Ok(md) if md.is_dir() => format!("directory {}:{}", md.dev(), md.ino()),
        Ok(md) => format!("file {}", md.ino()),
    }
}

/// The log entries from the `since`-th on that activate or stage a release that is not
/// whole (no `.distributor.json`), or whose name holds another directory than the one the
/// entry recorded (`release_identity`): distributor's word given for what is not the
/// release it built or verified (docs/operations.md, "Release identity").
fn unfounded_activations(env: &Env, since: usize) -> Vec<String> {
    let mut out = Vec::new();
    for e in crate::test_releases::logged(env, DIR).iter().skip(since) {
        let Some(r) = e["release_activated"]
            .as_str()
            .or(e["release_staged"].as_str())
        else {
            continue;
        };
        let dir = env.path(&format!("{DIR}/{r}"));
        let Ok(md) = fs::symlink_metadata(&dir) else {
            // Gone since (retention): nothing left to judge.
            continue;
        };
        if !dir.join(".distributor.json").exists() {
            out.push(format!(
                "entry {} activates {r}, which holds no state",
                e["seq"]
            ));
        }
        let id = &e["release_identity"];
        if !id.is_null() && (id["dev"] != md.dev() || id["ino"] != md.ino()) {
            out.push(format!(
                "entry {} activates {r} as {id}, but its name holds {}:{}",
                e["seq"],
                md.dev(),
                md.ino()
            ));
        }
    }
    out
}

/// What a reader of `path` sees without following a symlink at `path` itself: the
/// symlink's text, or the directory's snapshot.
fn path_view(env: &Env) -> Vec<(String, String)> {
    match fs::symlink_metadata(env.path(PATH)) {
        Ok(md) if md.is_dir() => env.snapshot(PATH),
        _ => vec![(String::new(), describe(env, PATH))],
    }
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
    let path_before = path_view(env);
    let args = s.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let paused = PausedRun::start(env, &args, &format!("{step}:{k}"), &[]);
    let logged_after_pause = crate::test_releases::logged(env, DIR).len();

    // The releases the move may take, as they are at this moment.
    let now = releases(env);
    let building = now.difference(&present_before).next().cloned();
    let release_of = |w: Which| match w {
        Which::Active => s.old.clone(),
        Which::Subject => s.subject.clone().or(building.clone()),
    };
    let private = env.path(PRIVATE);
    let private = private.to_str().unwrap();
    let away = format!("mv {PATH} {PATH}.moved");
    let (script, moved_release) = match mv {
        Move::PathPlainDir => (
            format!("set -e; {away}; mkdir {PATH}; echo mine > {PATH}/mine.txt"),
            None,
        ),
        Move::PathOutsideLink => (format!("set -e; {away}; ln -s {private} {PATH}"), None),
        Move::PathOtherRelease => {
            let Some(other) = s.other.clone() else {
                return Ok(None);
            };
            (
                format!("set -e; {away}; ln -s {LINK_PREFIX}{other} {PATH}"),
                None,
            )
        }
        Move::PathToSubject => {
            let Some(r) = release_of(Which::Subject).filter(|r| now.contains(r)) else {
                return Ok(None);
            };
            if s.other.as_ref() == Some(&r) {
                // The same move as PathOtherRelease.
                return Ok(None);
            }
            (
                format!("set -e; {away}; ln -s {LINK_PREFIX}{r} {PATH}"),
                None,
            )
        }
        Move::ReleaseAway(w) | Move::ReleaseLink(w) => {
            let Some(r) = release_of(w).filter(|r| now.contains(r)) else {
                return Ok(None);
            };
            let link = if matches!(mv, Move::ReleaseLink(_)) {
                format!("; ln -s {private} {DIR}/{r}")
            } else {
                String::new()
            };
            (
                format!("set -e; mv {DIR}/{r} {DIR}/{r}.moved{link}"),
                Some(r),
            )
        }
        Move::PathOtherManaged => (format!("set -e; {away}; mv {OTHER} {PATH}"), None),
    };
    if !as_neighbour(env, &script) {
        drop(paused);
        return Ok(Some(format!("the neighbour could not: {script}")));
    }
    let left = describe(env, PATH);
    let theirs = path_view(env);
    let run = paused.resume();
    let rec = env.run(&["recover", "--json", "--config", s.cfg()]);
    // The neighbour takes its release back, and the operator runs `recover` again.
    if let Some(r) = &moved_release {
        let at = format!("{DIR}/{r}");
        as_neighbour(
            env,
            &format!(
                "set -e; if [ -L {at} ]; then rm {at}; fi; if [ ! -e {at} ] && [ -e {at}.moved ]; then mv {at}.moved {at}; fi"
            ),
        );
    }
    let rec2 = env.run(&["recover", "--json", "--config", s.cfg()]);
    let ctx = format!(
        "{cmd:?} paused at {step}:{k}, neighbour: {mv:?} ({script})\nrun exit {}:\n{}\n{}\nrecover exit {}:\n{}\n{}\nrecover again exit {}:\n{}",
        run.code, run.stdout, run.stderr, rec.code, rec.stdout, rec.stderr, rec2.code, rec2.stdout
    );
    let mut failures = Vec::new();

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
    // distributor's word: every activation it logged after the pause is of a release that
    // was whole (its state written) and is the directory it built or verified.
    failures.extend(unfounded_activations(env, logged_after_pause));
    // What `path` is now.
    let accepted = match read_active(env) {
        // A release the run built.
        Some(r)
            if !present_before.contains(&r) && matches!(cmd, Cmd::Adopt | Cmd::RollbackShared) =>
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
        Cmd::Rollback | Cmd::RollbackShared | Cmd::Promote => after("io_state_rename"),
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

/// Every move of `cmd` but the adoption's own.
fn all_moves() -> Vec<Move> {
    PATH_MOVES.iter().chain(RELEASE_MOVES).copied().collect()
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn rollback_at_every_step_against_every_move() {
    matrix(Cmd::Rollback, &all_moves(), &[]);
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
    matrix(Cmd::Promote, &all_moves(), &[]);
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
