//! Hostile neighbours (SPEC §6 "never follow a symlink out of the bundle path", §13): a
//! local user who can write inside the destination renames a directory away and puts a
//! symlink to a directory outside (the victim) in its place, at the very moment distributor
//! works in it. A `pause` failpoint stops the real binary at that step, so every race is
//! deterministic.
//!
//! Proves, for every step that writes (placement, move aside, deletion, links, pruning,
//! `recover`'s undo) with the swapped directory below the bundle path, and for the bundle
//! directory itself: nothing outside the bundle path is written, moved or deleted. The
//! victim (which holds files with the names the publication writes or moves, and an empty
//! directory where pruning works), a canary beside the destination and everything else
//! outside it are byte-identical afterwards, and the run either failed or completed with its
//! content inside the bundle path. A swapped bundle directory always fails the run.
//!
//! Each step is attacked at two moments: at the step's own failpoint (just before
//! distributor looks at the path), and, where the step renames, between its look and its
//! act: the `io_rename` failpoint inside the rename primitive, found from a calibration
//! run's failpoint log. A path-based check-then-act loses only at the second moment; a walk
//! on directory handles opened without following symlinks wins at both.

use crate::common::faults::{Mode, assert_aborted};
use crate::common::hostile::{contents_under, io_window, outside, race, swap_for_symlink};
use crate::common::{Env, F, Run};
use std::path::PathBuf;

/// The configured destination path (root-relative).
const DEST: &str = "dest/root";
/// A canary in a directory beside the destination.
const CANARY: &str = "dest/canary/c.txt";
/// The directory outside the destination that the symlink points to.
const VICTIM: &str = "victim";
/// The victim: files named like the ones the publications write or move, and an empty
/// directory named like the one pruning removes.
const VICTIM_FILES: &[F] = &[("a.txt", "private a"), ("b.txt", "private b")];
const VICTIM_EMPTY_DIR: &str = "deep";
const SOURCE_ID: &str = "tomorrow";
const V1_AT: &str = "2026-12-02T06:00:00Z";
const V2_AT: &str = "2026-12-02T07:00:00Z";
const MODES: [Mode; 2] = [Mode::SingleOwner, Mode::SharedRoot];

/// A destination holding v1, the bundle of v2, a victim and a canary.
struct Scene {
    env: Env,
    cfg: PathBuf,
    v2: PathBuf,
    /// The bundle path, root-relative.
    bundle: String,
}

/// What one test publishes.
#[derive(Clone, Copy)]
struct Versions {
    v1: &'static [F<'static>],
    v1_links: &'static [F<'static>],
    v2: &'static [F<'static>],
    v2_links: &'static [F<'static>],
    /// `path_mapping: source_id` (bundle path `<dest>/<source id>`) instead of fixed.
    by_source_id: bool,
}

impl Scene {
    fn new(mode: Mode, v: Versions) -> Scene {
        let env = Env::new();
        env.write(CANARY, "canary");
        for (p, c) in VICTIM_FILES {
            env.write(&format!("{VICTIM}/{p}"), c);
        }
        std::fs::create_dir_all(env.path(&format!("{VICTIM}/{VICTIM_EMPTY_DIR}"))).unwrap();
        let mut extra = format!("    state:\n      mode: {}\n", mode.yaml());
        if v.by_source_id {
            extra.push_str("    path_mapping:\n      mode: source_id\n");
        }
        let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, &extra);
        let v1 = env.bundle("b1", SOURCE_ID, V1_AT, v.v1, v.v1_links);
        env.publish(&cfg, &v1, &[]).expect_code(0);
        let v2 = env.bundle("b2", SOURCE_ID, V2_AT, v.v2, v.v2_links);
        let bundle = if v.by_source_id {
            format!("{DEST}/{SOURCE_ID}")
        } else {
            DEST.to_string()
        };
        Scene {
            env,
            cfg,
            v2,
            bundle,
        }
    }

    fn publish_args(&self) -> Vec<String> {
        [
            "publish",
            "--json",
            "--config",
            self.cfg.to_str().unwrap(),
            "--source",
            self.v2.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    }

    fn recover_args(&self) -> Vec<String> {
        ["recover", "--json", "--config", self.cfg.to_str().unwrap()]
            .map(String::from)
            .to_vec()
    }

    /// Publishes v2 aborted at `after_links`: placed and linked, not committed, so
    /// `recover` rolls it back.
    fn crash_v2(&self) {
        let args = self.publish_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = self
            .env
            .run_env(&args, &[("DISTRIBUTOR_FAILPOINT", "after_links")]);
        assert_aborted(&r, "after_links");
    }
}

/// Which command is raced.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cmd {
    /// `publish` of v2.
    Publish,
    /// `recover` after v2 was aborted at `after_links`.
    Recover,
}

/// One attack: where to stop, what to swap, what a completed run must have written.
struct Attack {
    versions: Versions,
    cmd: Cmd,
    /// Step failpoint and the hit at which the step works on the swapped directory.
    step: &'static str,
    k: u64,
    /// Whether the step renames there, so that its check-to-act window (`io_rename`) is
    /// attacked too.
    renames: bool,
    /// The directory swapped, relative to the bundle path ("" = the bundle directory).
    swap: &'static str,
    /// Contents a run that exits 0 must have put inside the bundle path.
    written: &'static [&'static str],
}

impl Attack {
    fn prepare(&self, mode: Mode) -> Scene {
        let sc = Scene::new(mode, self.versions);
        if self.cmd == Cmd::Recover {
            sc.crash_v2();
        }
        sc
    }

    fn args(&self, sc: &Scene) -> Vec<String> {
        match self.cmd {
            Cmd::Publish => sc.publish_args(),
            Cmd::Recover => sc.recover_args(),
        }
    }

    /// The moments to attack at: the step's failpoint, and the `io_rename` inside the step
    /// (found from a calibration run of the same scene) when the step renames.
    fn moments(&self, mode: Mode) -> Vec<String> {
        let mut specs = vec![format!("{}:{}", self.step, self.k)];
        if self.renames {
            let sc = self.prepare(mode);
            let args = self.args(&sc);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (run, log) = sc.env.run_logged(&args, &[]);
            let n = io_window(&log, self.step, self.k, "io_rename").unwrap_or_else(|| {
                panic!(
                    "{mode:?}: no io_rename between {}:{} and the next step; the window between the check and the rename cannot be reached\nfailpoints: {log:?}\nstdout:\n{}\nstderr:\n{}",
                    self.step, self.k, run.stdout, run.stderr
                )
            });
            specs.push(format!("io_rename:{n}"));
        }
        specs
    }

    /// Every moment, every mode: set up, race, check. Every case runs even when one
    /// fails, so one run names every moment that loses.
    fn run(&self) {
        let failed = self.failures();
        assert!(
            failed.is_empty(),
            "lost the race (details above): {failed:?}"
        );
    }

    /// The cases of [`Attack::run`] that failed.
    fn failures(&self) -> Vec<String> {
        let mut failed = Vec::new();
        for mode in MODES {
            for spec in self.moments(mode) {
                let case = std::panic::AssertUnwindSafe(|| self.once(mode, &spec));
                if std::panic::catch_unwind(case).is_err() {
                    failed.push(format!("{mode:?} at {spec}"));
                }
            }
        }
        failed
    }

    fn once(&self, mode: Mode, spec: &str) {
        let sc = self.prepare(mode);
        let env = &sc.env;
        let swapped = if self.swap.is_empty() {
            sc.bundle.clone()
        } else {
            format!("{}/{}", sc.bundle, self.swap)
        };
        let ctx = format!("{mode:?}, {swapped} swapped at {spec}");
        assert!(
            std::fs::symlink_metadata(env.path(&swapped)).is_ok_and(|m| m.is_dir()),
            "{ctx}: {swapped} is not a directory before the attack"
        );
        let victim_before = env.snapshot(VICTIM);
        let outside_before = outside(env, DEST);
        let args = self.args(&sc);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = race(env, &args, spec, &[], || {
            swap_for_symlink(&env.path(&swapped), &env.path(VICTIM))
        });
        let ctx = format!(
            "{ctx} (exit {})\nstdout:\n{}\nstderr:\n{}",
            run.code, run.stdout, run.stderr
        );
        assert_eq!(
            env.snapshot(VICTIM),
            victim_before,
            "{ctx}\nthe victim outside the destination changed"
        );
        assert!(
            env.path(&format!("{VICTIM}/{VICTIM_EMPTY_DIR}")).is_dir(),
            "{ctx}\nthe victim's empty directory was removed"
        );
        assert_eq!(env.read(CANARY), "canary", "{ctx}\nthe canary changed");
        assert_eq!(
            outside(env, DEST),
            outside_before,
            "{ctx}\nsomething outside the destination changed"
        );
        assert!(
            !run.stderr.contains("panicked at") && run.code != -1,
            "{ctx}\nthe run crashed"
        );
        if self.swap.is_empty() {
            // SPEC §13: before the commit point the bundle path must still name the
            // directory locked at the start.
            assert_ne!(
                run.code, 0,
                "{ctx}\nthe run succeeded through a swapped bundle directory"
            );
            assert_ne!(
                status(&run, self.cmd),
                "applied",
                "{ctx}\nreported applied through a swapped bundle directory"
            );
        } else if run.code == 0 {
            let inside = contents_under(env, &sc.bundle);
            for c in self.written {
                assert!(
                    inside.iter().any(|x| x == c),
                    "{ctx}\nthe run succeeded but '{c}' is not inside the bundle path: {inside:?}"
                );
            }
        }
    }
}

/// The first destination's status (publish) or the first operation's outcome (recover).
fn status(run: &Run, cmd: Cmd) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&run.stdout) else {
        return String::new();
    };
    let s = match cmd {
        Cmd::Publish => &v["destinations"][0]["status"],
        Cmd::Recover => &v["operations"][0]["outcome"],
    };
    s.as_str().unwrap_or_default().to_string()
}

/// v2 creates `a.txt`, `sub/a.txt` and `z.txt`: placed in path order, `sub/a.txt` second.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn placement_through_a_swapped_subdirectory_never_writes_outside() {
    Attack {
        versions: Versions {
            v1: &[("sub/keep.txt", "kept")],
            v1_links: &[],
            v2: &[
                ("a.txt", "v2 a"),
                ("sub/a.txt", "v2 sub a"),
                ("sub/keep.txt", "kept"),
                ("z.txt", "v2 z"),
            ],
            v2_links: &[],
            by_source_id: false,
        },
        cmd: Cmd::Publish,
        step: "during_placement",
        k: 2,
        renames: true,
        swap: "sub",
        written: &["v2 a", "v2 sub a", "v2 z"],
    }
    .run();
}

/// v2 creates the directory `sub/new` (a new tree, placed whole with one rename into
/// `sub`): `sub` is swapped for a symlink as that rename is about to happen.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_new_tree_placed_through_a_swapped_subdirectory_never_lands_outside() {
    Attack {
        versions: Versions {
            v1: &[("sub/keep.txt", "kept")],
            v1_links: &[],
            v2: &[
                ("sub/keep.txt", "kept"),
                ("sub/new/a.txt", "v2 new a"),
                ("sub/new/deep/b.txt", "v2 new b"),
            ],
            v2_links: &[],
            by_source_id: false,
        },
        cmd: Cmd::Publish,
        step: "during_placement",
        k: 1,
        renames: true,
        swap: "sub",
        written: &["v2 new a", "v2 new b"],
    }
    .run();
}

/// v2 overwrites `a.txt` and `sub/b.txt`: moved aside in path order, `sub/b.txt` second.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn move_aside_through_a_swapped_subdirectory_never_moves_outside_content() {
    Attack {
        versions: Versions {
            v1: &[
                ("a.txt", "v1 a"),
                ("sub/b.txt", "v1 b"),
                ("sub/keep.txt", "kept"),
            ],
            v1_links: &[],
            v2: &[
                ("a.txt", "v2 a"),
                ("sub/b.txt", "v2 b"),
                ("sub/keep.txt", "kept"),
            ],
            v2_links: &[],
            by_source_id: false,
        },
        cmd: Cmd::Publish,
        step: "during_move_aside",
        k: 2,
        renames: true,
        swap: "sub",
        written: &["v2 a", "v2 b"],
    }
    .run();
}

/// v2 overwrites `a.txt` and omits `sub/b.txt`, which is deleted: moved aside second.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn deletion_through_a_swapped_subdirectory_never_deletes_outside() {
    Attack {
        versions: Versions {
            v1: &[
                ("a.txt", "v1 a"),
                ("sub/b.txt", "v1 b"),
                ("sub/keep.txt", "kept"),
            ],
            v1_links: &[],
            v2: &[("a.txt", "v2 a"), ("sub/keep.txt", "kept")],
            v2_links: &[],
            by_source_id: false,
        },
        cmd: Cmd::Publish,
        step: "during_move_aside",
        k: 2,
        renames: true,
        swap: "sub",
        written: &["v2 a"],
    }
    .run();
}

/// v2 adds the links `k` and `sub/l`, created in path order, `sub/l` second. The victim
/// has no `l`: a link created there would show.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn link_creation_through_a_swapped_subdirectory_never_links_outside() {
    Attack {
        versions: Versions {
            v1: &[("sub/keep.txt", "kept"), ("sub/t.txt", "target")],
            v1_links: &[],
            v2: &[("sub/keep.txt", "kept"), ("sub/t.txt", "target")],
            v2_links: &[("k", "sub/keep.txt"), ("sub/l", "sub/t.txt")],
            by_source_id: false,
        },
        cmd: Cmd::Publish,
        step: "during_links",
        k: 2,
        renames: false,
        swap: "sub",
        written: &["kept", "target"],
    }
    .run();
}

/// v2 deletes the only file of `sub/deep/`, so cleanup prunes `sub/deep`; the victim has
/// an empty `deep/` that must survive.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn pruning_through_a_swapped_subdirectory_never_removes_outside_directories() {
    Attack {
        versions: Versions {
            v1: &[("sub/deep/d.txt", "deep"), ("sub/keep.txt", "kept")],
            v1_links: &[],
            v2: &[("sub/keep.txt", "kept v2")],
            v2_links: &[],
            by_source_id: false,
        },
        cmd: Cmd::Publish,
        step: "cleanup_before_prune",
        k: 1,
        renames: false,
        swap: "sub",
        written: &["kept v2"],
    }
    .run();
}

/// The scene `recover` rolls back: v2 created `sub/a.txt` and overwrote `sub/b.txt`, then
/// was aborted after placing them.
const UNDONE: Versions = Versions {
    v1: &[("sub/b.txt", "v1 b"), ("sub/keep.txt", "kept")],
    v1_links: &[],
    v2: &[
        ("sub/a.txt", "v2 sub a"),
        ("sub/b.txt", "v2 b"),
        ("sub/keep.txt", "kept"),
    ],
    v2_links: &[],
    by_source_id: false,
};

/// `recover` restores the moved-aside `sub/b.txt` (its first restore).
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_restoring_through_a_swapped_subdirectory_never_writes_outside() {
    Attack {
        versions: UNDONE,
        cmd: Cmd::Recover,
        step: "undo_restore",
        k: 1,
        renames: true,
        swap: "sub",
        written: &["v1 b", "kept"],
    }
    .run();
}

/// `recover` removes the placed `sub/b.txt` (actions are undone last first).
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn recover_removing_placed_files_through_a_swapped_subdirectory_never_deletes_outside() {
    Attack {
        versions: UNDONE,
        cmd: Cmd::Recover,
        step: "undo_remove_placed",
        k: 1,
        renames: false,
        swap: "sub",
        written: &["v1 b", "kept"],
    }
    .run();
}

/// The bundle path is `<dest>/tomorrow` (`path_mapping: source_id`); it is swapped for a
/// symlink to the victim after the lock is taken: before staging begins, and once staging
/// is done. v2 overwrites `b.txt` (the victim has one), creates `a.txt` (so has the victim)
/// and adds a link.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn swapping_the_bundle_directory_never_writes_into_its_replacement() {
    let versions = Versions {
        v1: &[("b.txt", "v1 b"), ("keep.txt", "kept")],
        v1_links: &[],
        v2: &[("a.txt", "v2 a"), ("b.txt", "v2 b"), ("keep.txt", "kept")],
        v2_links: &[("l", "keep.txt")],
        by_source_id: true,
    };
    let mut failed = Vec::new();
    for step in ["after_journal_append", "after_staging"] {
        let attack = Attack {
            versions,
            cmd: Cmd::Publish,
            step,
            k: 1,
            renames: false,
            swap: "",
            written: &[],
        };
        failed.extend(attack.failures());
    }
    assert!(
        failed.is_empty(),
        "lost the race (details above): {failed:?}"
    );
}

/// As above, with a v2 whose only change is a new link: after staging nothing is moved
/// or placed, so the link is the first write that could land in the victim.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn swapping_the_bundle_directory_never_links_into_its_replacement() {
    Attack {
        versions: Versions {
            v1: &[("b.txt", "v1 b"), ("keep.txt", "kept")],
            v1_links: &[],
            v2: &[("b.txt", "v1 b"), ("keep.txt", "kept")],
            v2_links: &[("l", "keep.txt")],
            by_source_id: true,
        },
        cmd: Cmd::Publish,
        step: "after_staging",
        k: 1,
        renames: false,
        swap: "",
        written: &[],
    }
    .run();
}

/// Starts `publish --json` of `source` with `cfg`, paused at failpoint `spec`.
fn publish_paused(
    env: &Env,
    cfg: &std::path::Path,
    source: &std::path::Path,
    spec: &str,
) -> crate::common::hostile::PausedRun {
    let args = [
        "publish",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--source",
        source.to_str().unwrap(),
    ];
    crate::common::hostile::PausedRun::start(env, &args, spec, &[])
}

/// Makes a FIFO at `path` (replacing what is there).
fn mkfifo(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(ok.success(), "mkfifo {}", path.display());
}

/// SPEC §13: a source file swapped for a FIFO after the source was checked is an invalid
/// source (exit 1) the moment staging opens it, never a hang while the destination lock
/// is held; the publication is rolled back.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_source_file_swapped_for_a_fifo_is_refused_without_blocking() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("a.txt", "v1 a")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let before = env.snapshot_unlocked(DEST);
    let v2 = env.bundle("b2", SOURCE_ID, V2_AT, &[("a.txt", "v2 a")], &[]);
    let run = publish_paused(&env, &cfg, &v2, "after_staging_record");
    mkfifo(&v2.join("a.txt"));
    // Not blocked on the FIFO: the resumed run exits (resume panics if it does not).
    let r = run.resume();
    r.expect_code(1);
    let msg = message(&r);
    assert!(msg.contains("not a regular file (a FIFO)"), "{msg}");
    assert_eq!(env.snapshot_unlocked(DEST), before, "not rolled back");
    // A dry run reads the same source the same way.
    let dry = env.plan(&cfg, &v2, &[]);
    dry.expect_code(1);
}

/// SPEC §13 and §3.1: a source file swapped for a symlink after the source was checked is
/// an invalid source (opened without following it), and so is one whose directory was
/// swapped for a symlink: staging opens each source directory once, without following a
/// symlink, and each file in its directory's handle, so it never reads through the
/// symlink, even where the file it points to holds exactly the manifest's bytes.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_source_file_or_directory_swapped_for_a_symlink_is_refused() {
    for swapped in ["sub/a.txt", "sub"] {
        let env = Env::new();
        let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
        let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("sub/a.txt", "v1 a")], &[]);
        env.publish(&cfg, &v1, &[]).expect_code(0);
        let before = env.snapshot_unlocked(DEST);
        let v2 = env.bundle("b2", SOURCE_ID, V2_AT, &[("sub/a.txt", "v2 a")], &[]);
        // Outside the bundle, the same bytes at the same relative path.
        let elsewhere = env.bundle("elsewhere", SOURCE_ID, V2_AT, &[("sub/a.txt", "v2 a")], &[]);
        let run = publish_paused(&env, &cfg, &v2, "after_staging_record");
        swap_for_symlink(&v2.join(swapped), &elsewhere.join(swapped));
        let r = run.resume();
        r.expect_code(1);
        let msg = message(&r);
        let why = if swapped == "sub" {
            "is not a real directory"
        } else {
            "a bundle holds regular files only"
        };
        assert!(msg.contains(why), "{swapped}: {msg}");
        assert_eq!(
            env.snapshot_unlocked(DEST),
            before,
            "{swapped}: not rolled back"
        );
        // A dry run reads the source the same way.
        env.plan(&cfg, &v2, &[]).expect_code(1);
    }
}

/// SPEC §3.1: a source file that grows or shrinks while staging reads it is an invalid
/// source. Staging stops at the read that comes back short once the bytes read reach the
/// size the file had when opened (it skips the read that would return 0); a file that
/// grew fills the buffer or passes that size and is read on to its end, one that shrank
/// comes back short before it, and either way the bytes read differ from the manifest's.
/// The file here is larger than staging's buffer, so it changes between two reads.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_source_file_that_grows_or_shrinks_while_it_is_read_is_refused() {
    let big = "x".repeat((1 << 20) + (1 << 19));
    for (what, change) in [
        ("grows", (1 << 20) + (1 << 19) + 1),
        ("shrinks", (1 << 20) + 10),
    ] {
        let env = Env::new();
        let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
        let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("a.txt", "v1 a")], &[]);
        env.publish(&cfg, &v1, &[]).expect_code(0);
        let before = env.snapshot_unlocked(DEST);
        let v2 = env.bundle("b2", SOURCE_ID, V2_AT, &[("a.txt", &big)], &[]);
        // Paused after the first read (1 MiB, the buffer's size), before its write.
        let run = publish_paused(&env, &cfg, &v2, "io_stage_write");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(v2.join("a.txt"))
            .unwrap();
        f.set_len(change as u64).unwrap();
        drop(f);
        let r = run.resume();
        r.expect_code(1);
        let msg = message(&r);
        assert!(
            msg.contains(&format!("output 'a.txt' changed: read {change} bytes")),
            "{what}: {msg}"
        );
        assert_eq!(
            env.snapshot_unlocked(DEST),
            before,
            "{what}: not rolled back"
        );
    }
}

/// FIFOs planted in a destination where distributor reads or locks: its lock file, its
/// state file, a recorded file. Nothing blocks; each is refused or reported.
#[test]
fn fifos_planted_in_a_destination_never_block() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("a.txt", "v1 a")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle("b2", SOURCE_ID, V2_AT, &[("a.txt", "v2 a")], &[]);
    let dest = env.path(DEST);
    // A recorded file: verify reports it modified; a publication refuses to replace a
    // special file.
    mkfifo(&dest.join("a.txt"));
    let v = env.run(&["verify", "--json", "--config", cfg.to_str().unwrap()]);
    v.expect_code(3);
    assert_eq!(
        v.json()["destinations"][0]["modified"],
        serde_json::json!(["a.txt"])
    );
    let r = env.publish(&cfg, &v2, &[]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    std::fs::remove_file(dest.join("a.txt")).unwrap();
    // The lock file.
    mkfifo(&dest.join(".distributor.lock"));
    let r = env.publish(&cfg, &v2, &[]);
    r.expect_code(1);
    assert!(r.stdout.contains("not a regular file"), "{}", r.stdout);
    std::fs::remove_file(dest.join(".distributor.lock")).unwrap();
    // The state file: invalid state, never read.
    mkfifo(&dest.join(".distributor.json"));
    let s = env.run(&["status", "--json", "--config", cfg.to_str().unwrap()]);
    assert_eq!(
        s.json()["destinations"][0]["state"],
        "invalid",
        "{}",
        s.stdout
    );
    let r = env.publish(&cfg, &v2, &[]);
    r.expect_code(3);
    let kinds = r.conflict_kinds();
    assert!(kinds.contains(&"invalid_state".to_string()), "{}", r.stdout);
    assert!(
        kinds.contains(&"unsafe_storage".to_string()),
        "{}",
        r.stdout
    );
}

/// SPEC §13: the lock cannot be defeated by unlinking `.distributor.lock` while a
/// publication holds it: a second publication still waits (here: times out), and the
/// first completes.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn unlinking_the_lock_file_does_not_let_a_second_publication_in() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("a.txt", "v1 a")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle("b2", SOURCE_ID, V2_AT, &[("a.txt", "v2 a")], &[]);
    let run = publish_paused(&env, &cfg, &v2, "after_staging_record");
    let lock = env.path(&format!("{DEST}/.distributor.lock"));
    std::fs::remove_file(&lock).unwrap();
    let v3 = env.bundle(
        "b3",
        SOURCE_ID,
        "2026-12-02T08:00:00Z",
        &[("a.txt", "v3 a")],
        &[],
    );
    let second = env.publish(&cfg, &v3, &["--lock-timeout", "1"]);
    second.expect_code(1);
    assert!(
        second.dest(0)["message"]
            .as_str()
            .unwrap_or_default()
            .contains("is locked by another distributor process"),
        "{}",
        second.stdout
    );
    run.resume().expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/a.txt")), "v2 a");
    env.publish(&cfg, &v3, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/a.txt")), "v3 a");
}

/// SPEC §13: a directory below the bundle path moved out of it mid-run (not replaced by a
/// symlink: moved, with what distributor already placed in it) makes the run fail before
/// its commit point, and the rollback, through the same handles, takes back what it wrote
/// there and puts back what it moved aside: the moved directory holds exactly what it held
/// before the publication.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_directory_moved_out_of_the_bundle_mid_run_fails_the_run_and_gets_its_content_back() {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle(
        "b1",
        SOURCE_ID,
        V1_AT,
        &[
            ("sub/a.txt", "v1 a"),
            ("sub/b.txt", "v1 b"),
            ("top.txt", "v1 top"),
        ],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let state_before = env.read(&format!("{DEST}/.distributor.json"));
    let v2 = env.bundle(
        "b2",
        SOURCE_ID,
        V2_AT,
        &[
            ("sub/a.txt", "v2 a"),
            ("sub/b.txt", "v2 b"),
            ("top.txt", "v2 top"),
        ],
        &[],
    );
    // Placement goes in path order: sub/a.txt, sub/b.txt, top.txt. Stop before the second.
    let run = publish_paused(&env, &cfg, &v2, "during_placement:2");
    std::fs::create_dir_all(env.path("elsewhere")).unwrap();
    std::fs::rename(env.path(&format!("{DEST}/sub")), env.path("elsewhere/sub")).unwrap();
    let r = run.resume();
    assert_ne!(r.code, 0, "{}", r.stdout);
    let msg = message(&r);
    assert!(
        msg.contains("was moved or replaced while the operation ran"),
        "{msg}"
    );
    assert_eq!(
        env.snapshot("elsewhere"),
        vec![
            ("sub".to_string(), "<dir>".to_string()),
            ("sub/a.txt".to_string(), "v1 a".to_string()),
            ("sub/b.txt".to_string(), "v1 b".to_string()),
        ],
        "the moved directory does not hold exactly what it held before"
    );
    assert_eq!(env.read(&format!("{DEST}/.distributor.json")), state_before);
    assert_eq!(env.read(&format!("{DEST}/top.txt")), "v1 top");
    assert!(!env.staging_left(DEST));
}

/// The message of the first destination of a `--json` run.
fn message(r: &Run) -> String {
    r.dest(0)["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// How a neighbour tampers with the staged `post-state.json` (its path, and a directory
/// outside the destination to use).
type Tamper = fn(&std::path::Path, &std::path::Path);

/// Publishes v2 over v1, paused after placement; `tamper` changes the staged post-state;
/// the run must then fail before its commit point with `expect`, leave the destination as
/// it was, and leave nothing to recover.
fn staged_post_state_tampered(tamper: Tamper, expect: &str) {
    let env = Env::new();
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("a.txt", "v1 a")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let before = env.snapshot_unlocked(DEST);
    let v2 = env.bundle("b2", SOURCE_ID, V2_AT, &[("a.txt", "v2 a")], &[]);
    let run = publish_paused(&env, &cfg, &v2, "after_placement");
    let staging = env.path(&format!("{DEST}/.distributor/staging"));
    let op = std::fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| !n.starts_with('.'))
        .expect("a staging record");
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    tamper(&staging.join(&op).join("post-state.json"), &elsewhere);
    let r = run.resume();
    r.expect_code(1);
    let msg = message(&r);
    assert!(msg.contains(expect), "{msg}");
    assert_eq!(env.snapshot_unlocked(DEST), before, "not rolled back");
    // Nothing is pending: the next publication goes ahead.
    env.publish(&cfg, &v2, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/a.txt")), "v2 a");
    assert!(!env.exists(&format!("{DEST}/victim.txt")));
}

/// The commit point writes the post-state staged in the staging record (read back, not
/// held in memory): a hand that rewrites that copy mid-run (here, to record a file the
/// publication never wrote) fails the run before its commit point; the destination and its
/// state are as before, and nothing is left to recover.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_staged_post_state_rewritten_mid_run_is_never_committed() {
    staged_post_state_tampered(
        |post, _| {
            let forged = std::fs::read_to_string(post)
                .unwrap()
                .replace("\"a.txt\"", "\"victim.txt\"");
            std::fs::write(post, forged).unwrap();
        },
        "was changed after it was staged",
    );
}

/// The staged post-state swapped for a symlink, at the step that reads it back: the
/// symlink is not followed, even to a file holding exactly the planned bytes.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_staged_post_state_swapped_for_a_symlink_is_never_followed() {
    staged_post_state_tampered(
        |post, elsewhere| {
            let copy = elsewhere.join("post-state.json");
            std::fs::copy(post, &copy).unwrap();
            std::fs::remove_file(post).unwrap();
            std::os::unix::fs::symlink(&copy, post).unwrap();
        },
        "post-state.json: Too many levels of symbolic links",
    );
}

/// The one operation staged in `DEST` (its staging entry's directory).
fn staging_entry(env: &Env) -> PathBuf {
    let staging = env.path(&format!("{DEST}/.distributor/staging"));
    let entries: Vec<PathBuf> = std::fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().unwrap()
}

/// v1 published: `top.txt` only. v2 adds the directory `new` (a new tree).
fn a_new_tree_ahead(env: &Env) -> (PathBuf, PathBuf) {
    let cfg = env.simple_config("c.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle("b1", SOURCE_ID, V1_AT, &[("top.txt", "v1 top")], &[]);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "b2",
        SOURCE_ID,
        V2_AT,
        &[
            ("top.txt", "v1 top"),
            ("new/a.txt", "v2 a"),
            ("new/sub/b.txt", "v2 b"),
        ],
        &[],
    );
    (cfg, v2)
}

/// A directory the publication creates is staged as a new tree (`new/tree/new/...` in its
/// staging entry) and placed whole, with one rename: after placement the staged tree is
/// gone from staging and stands in the destination, its directories exactly 0755.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_directory_the_publication_creates_is_placed_whole() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let (cfg, v2) = a_new_tree_ahead(&env);
    let run = publish_paused(&env, &cfg, &v2, "after_staging");
    let tree = staging_entry(&env).join("new/tree");
    assert_eq!(
        std::fs::read_to_string(tree.join("new/sub/b.txt")).unwrap(),
        "v2 b"
    );
    assert!(!env.path(&format!("{DEST}/new")).exists());
    let r = run.resume();
    r.expect_code(0);
    let run = {
        let v3 = env.bundle(
            "b3",
            SOURCE_ID,
            "2026-12-02T08:00:00Z",
            &[
                ("top.txt", "v1 top"),
                ("n3/c.txt", "v3 c"),
                ("n3/d/e.txt", "v3 e"),
            ],
            &[],
        );
        publish_paused(&env, &cfg, &v3, "after_placement")
    };
    let tree = staging_entry(&env).join("new/tree");
    assert!(
        tree.is_dir() && !tree.join("n3").exists(),
        "the tree is still staged"
    );
    assert_eq!(env.read(&format!("{DEST}/n3/d/e.txt")), "v3 e");
    for d in ["n3", "n3/d"] {
        let mode = std::fs::metadata(env.path(&format!("{DEST}/{d}")))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "{d}");
    }
    run.resume().expect_code(0);
    assert!(!env.staging_left(DEST));
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

/// A hand makes the directory a publication is about to place whole, after staging: the
/// rename that would place the tree never replaces it. The files go in one by one beside
/// the hand's own, which stays, in the hand's directory; where the hand made a planned
/// file, the run fails before its commit point and takes back what it placed.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_directory_made_by_a_hand_where_a_new_tree_goes_is_never_replaced() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    let (cfg, v2) = a_new_tree_ahead(&env);
    let run = publish_paused(&env, &cfg, &v2, "after_staging");
    env.write(&format!("{DEST}/new/mine.txt"), "hand-made");
    let ino = std::fs::metadata(env.path(&format!("{DEST}/new")))
        .unwrap()
        .ino();
    run.resume().expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/new/mine.txt")), "hand-made");
    assert_eq!(env.read(&format!("{DEST}/new/a.txt")), "v2 a");
    assert_eq!(env.read(&format!("{DEST}/new/sub/b.txt")), "v2 b");
    assert_eq!(
        std::fs::metadata(env.path(&format!("{DEST}/new")))
            .unwrap()
            .ino(),
        ino,
        "the hand's directory was replaced"
    );
    assert!(!env.staging_left(DEST));

    // An empty directory too: a plain rename would replace it.
    let env = Env::new();
    let (cfg, v2) = a_new_tree_ahead(&env);
    let run = publish_paused(&env, &cfg, &v2, "after_staging");
    std::fs::create_dir(env.path(&format!("{DEST}/new"))).unwrap();
    let ino = std::fs::metadata(env.path(&format!("{DEST}/new")))
        .unwrap()
        .ino();
    run.resume().expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/new/sub/b.txt")), "v2 b");
    assert_eq!(
        std::fs::metadata(env.path(&format!("{DEST}/new")))
            .unwrap()
            .ino(),
        ino,
        "the hand's empty directory was replaced"
    );

    let env = Env::new();
    let (cfg, v2) = a_new_tree_ahead(&env);
    let state_before = env.read(&format!("{DEST}/.distributor.json"));
    let run = publish_paused(&env, &cfg, &v2, "after_staging");
    env.write(&format!("{DEST}/new/sub/b.txt"), "hand-made b");
    let r = run.resume();
    assert_ne!(r.code, 0, "{}", r.stdout);
    assert_eq!(env.read(&format!("{DEST}/new/sub/b.txt")), "hand-made b");
    assert!(
        !env.path(&format!("{DEST}/new/a.txt")).exists(),
        "placed content left"
    );
    assert_eq!(env.read(&format!("{DEST}/.distributor.json")), state_before);
    assert!(!env.staging_left(DEST));
}
