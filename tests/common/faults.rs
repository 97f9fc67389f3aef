//! Crash-test support: a destination with a history (an older publication of this owner,
//! another owner in shared-root mode, unmanaged files inside and beside managed
//! directories), the next bundle whose publication gets interrupted, and the assertions
//! every recovery must pass (SPEC §8).

use super::{Env, Run};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;

/// State mode of the destination under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    SingleOwner,
    SharedRoot,
}

impl Mode {
    pub fn yaml(self) -> &'static str {
        match self {
            Mode::SingleOwner => "single_owner",
            Mode::SharedRoot => "shared_root",
        }
    }
}

/// Which side of the interrupted operation recovery must land on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Rolled back: byte-identical to just before, state file included.
    Before,
    /// Rolled forward: the new publication, exactly.
    After,
}

/// The bundle path, relative to the env root.
pub const DEST: &str = "dest/root";
pub const V1_AT: &str = "2026-12-02T06:00:00Z";
pub const V2_AT: &str = "2026-12-02T07:00:00Z";
/// A third publication, newer than both, that recovery must be done before.
pub const V3_AT: &str = "2026-12-02T08:00:00Z";

/// The first publication: every kind of path the second one overwrites, deletes, turns
/// from file to link, from link to file and from directory to file.
pub const V1_FILES: &[(&str, &str)] = &[
    ("keep.txt", "same in both"),
    ("change.txt", "version one"),
    ("gone.txt", "deleted by v2"),
    ("dir/old.txt", "deleted by v2, beside an unmanaged file"),
    ("deep/a/b.txt", "deleted by v2 with its directories"),
    ("df/inner.txt", "a directory in v1, a file in v2"),
    ("sw", "a file in v1, a link in v2"),
];
pub const V1_LINKS: &[(&str, &str)] = &[("l1", "change.txt"), ("lk", "keep.txt")];
/// The second publication, the one that gets interrupted.
pub const V2_FILES: &[(&str, &str)] = &[
    ("keep.txt", "same in both"),
    ("change.txt", "version two, longer than one"),
    ("new.txt", "new in v2"),
    ("newdir/sub/n.txt", "new in a new directory"),
    ("df", "now a file"),
    ("l1", "a link in v1, a file in v2"),
];
pub const V2_LINKS: &[(&str, &str)] = &[("l2", "new.txt"), ("lk", "keep.txt"), ("sw", "keep.txt")];
/// Files nobody manages; recovery must never touch them.
pub const UNMANAGED: &[(&str, &str)] = &[
    ("unmanaged.txt", "hand-made, beside"),
    ("dir/hand.txt", "hand-made, inside a managed directory"),
];
/// The other owner of a shared root.
const OTHER_FILES: &[(&str, &str)] = &[("o/one.txt", "other one"), ("o/two.txt", "other two")];

/// A destination that holds v1, ready for v2 to be interrupted.
pub struct Scenario {
    pub env: Env,
    pub mode: Mode,
    pub cfg: PathBuf,
    pub v2: PathBuf,
    /// The destination just before v2 (lock file excluded).
    pub before: Vec<(String, String)>,
}

impl Scenario {
    pub fn new(mode: Mode) -> Scenario {
        let env = Env::new();
        let extra = format!("    state:\n      mode: {}\n", mode.yaml());
        let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, &extra);
        if mode == Mode::SharedRoot {
            let other = env.simple_config("other.yaml", "other", "o", DEST, &extra);
            let b = env.bundle(
                "bo",
                "other-src",
                V1_AT,
                OTHER_FILES,
                &[("o/l", "o/one.txt")],
            );
            env.publish(&other, &b, &[]).expect_code(0);
        }
        for (p, c) in UNMANAGED {
            env.write(&format!("{DEST}/{p}"), c);
        }
        let v1 = env.bundle("b1", "tomorrow", V1_AT, V1_FILES, V1_LINKS);
        env.publish(&cfg, &v1, &[]).expect_code(0);
        let v2 = env.bundle("b2", "tomorrow", V2_AT, V2_FILES, V2_LINKS);
        let before = snapshot(&env);
        Scenario {
            env,
            mode,
            cfg,
            v2,
            before,
        }
    }

    /// Asserts that publishing waits for recovery (SPEC §6): a newer bundle is refused with
    /// exit 4 and a message naming `distributor recover`; v2 again is refused too, unless
    /// the state already records it (past the commit point, or published by another host),
    /// where it is `unchanged`, writes nothing and stands (exit 0). Returns the refusal's
    /// message. Writes nothing to the destination.
    pub fn assert_refused_until_recovered(&self, ctx: &str) -> String {
        if !self.env.exists("b3") {
            self.env
                .bundle("b3", "tomorrow", V3_AT, &[("keep.txt", "v3")], &[]);
        }
        let before = snapshot(&self.env);
        let b3 = self.env.path("b3");
        let newer = self.env.run(&[
            "publish",
            "--json",
            "--config",
            self.cfg.to_str().unwrap(),
            "--source",
            b3.to_str().unwrap(),
        ]);
        newer.expect_code(4);
        let msg = newer.dest(0)["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.contains("distributor recover"), "{ctx}: {msg}");
        let again = self.publish_env(&[]);
        match again.code {
            4 => {}
            0 => assert_eq!(
                again.dest(0)["decision"],
                "unchanged",
                "{ctx}: {}",
                again.stdout
            ),
            c => panic!("{ctx}: republishing v2 exited {c}: {}", again.stdout),
        }
        assert_eq!(
            snapshot(&self.env),
            before,
            "{ctx}: a refused publication wrote"
        );
        msg
    }

    /// Publishes v2 with `DISTRIBUTOR_FAILPOINT=spec` and asserts that it aborted there.
    pub fn crash_publish(&self, spec: &str) -> Run {
        let r = self.publish_env(&[("DISTRIBUTOR_FAILPOINT", spec)]);
        assert_aborted(&r, spec);
        r
    }

    /// Publishes v2 with extra environment.
    pub fn publish_env(&self, env: &[(&str, &str)]) -> Run {
        let args = [
            "publish",
            "--json",
            "--config",
            self.cfg.to_str().unwrap(),
            "--source",
            self.v2.to_str().unwrap(),
        ];
        self.env.run_env(&args, env)
    }

    /// `recover --json --config <cfg>` with extra environment.
    pub fn recover_env(&self, env: &[(&str, &str)]) -> Run {
        self.env.run_env(
            &["recover", "--json", "--config", self.cfg.to_str().unwrap()],
            env,
        )
    }

    /// Removes the journal (and its WAL files): the operation is then known only from the
    /// destination's staging.
    pub fn lose_journal(&self) {
        let j = self.env.journal();
        for suffix in ["", "-wal", "-shm"] {
            let p = PathBuf::from(format!("{}{suffix}", j.display()));
            let _ = std::fs::remove_file(p);
        }
    }

    /// Everything SPEC §8 promises after a recovery that landed on `side`.
    pub fn assert_recovered(&self, side: Side, context: &str) {
        let env = &self.env;
        match side {
            Side::Before => assert_eq!(
                snapshot(env),
                self.before,
                "{context}: destination is not byte-identical to just before"
            ),
            Side::After => {
                assert_eq!(
                    without_state(snapshot(env)),
                    reference_after(self.mode),
                    "{context}: destination is not exactly the new publication"
                );
                let state: Value =
                    serde_json::from_str(&env.read(&format!("{DEST}/.distributor.json"))).unwrap();
                let mine = match self.mode {
                    Mode::SingleOwner => state["source"].clone(),
                    Mode::SharedRoot => state["owners"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|o| o["owner"] == "weather/latest")
                        .unwrap()["source"]
                        .clone(),
                };
                assert_eq!(mine["created_at"], V2_AT, "{context}: state names v2");
            }
        }
        if self.mode == Mode::SharedRoot {
            let state: Value =
                serde_json::from_str(&env.read(&format!("{DEST}/.distributor.json"))).unwrap();
            let owners: Vec<&str> = state["owners"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["owner"].as_str().unwrap())
                .collect();
            assert!(
                owners.contains(&"other/o"),
                "{context}: the other owner's record is lost: {owners:?}"
            );
        }
        assert!(!env.staging_left(DEST), "{context}: staging left behind");
        for (p, c) in UNMANAGED {
            assert_eq!(
                env.read(&format!("{DEST}/{p}")),
                *c,
                "{context}: {p} touched"
            );
        }
        assert_state_matches_disk(env, &self.cfg, context);
        let again = self.recover_env(&[]);
        again.expect_code(0);
        assert_eq!(
            again.json()["operations"],
            serde_json::json!([]),
            "{context}: a second recover found something to do"
        );
    }
}

/// `.distributor.json` describes exactly what is on disk: `verify` finds nothing missing or
/// modified, and nothing unrecorded but the unmanaged files. Storage against state only:
/// the journal is not consulted (an operation that another journal recovered is still
/// unfinished in the one that started it, and `verify` would rightly say recovery is
/// pending there, SPEC §16).
pub fn assert_state_matches_disk(env: &Env, cfg: &std::path::Path, context: &str) {
    let none = env.path("no-journal-here.sqlite3");
    let v = env.run(&[
        "verify",
        "--json",
        "--config",
        cfg.to_str().unwrap(),
        "--journal",
        none.to_str().unwrap(),
    ]);
    assert!(!none.exists(), "verify created a journal");
    let d = &v.json()["destinations"][0];
    assert_eq!(d["state"], "valid", "{context}: {}", v.stdout);
    assert_eq!(
        d["missing"],
        serde_json::json!([]),
        "{context}: {}",
        v.stdout
    );
    assert_eq!(
        d["modified"],
        serde_json::json!([]),
        "{context}: {}",
        v.stdout
    );
    let unrecorded: Vec<&str> = UNMANAGED.iter().map(|(p, _)| *p).collect();
    let mut want = unrecorded.clone();
    want.sort();
    assert_eq!(
        d["unrecorded"],
        serde_json::json!(want),
        "{context}: {}",
        v.stdout
    );
}

/// Asserts that a run aborted at the failpoint of `spec` (not a clean exit, not a panic).
pub fn assert_aborted(r: &Run, spec: &str) {
    let name = spec
        .split(',')
        .next_back()
        .unwrap()
        .split([':', '='])
        .next()
        .unwrap();
    assert_eq!(
        r.code, -1,
        "{spec}: expected an abort\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    assert!(
        r.stderr
            .contains(&format!("failpoint {name} hit: aborting")),
        "{spec}: aborted elsewhere:\n{}",
        r.stderr
    );
}

/// The destination, lock file excluded (it is created by the lock, before any operation).
pub fn snapshot(env: &Env) -> Vec<(String, String)> {
    env.snapshot_unlocked(DEST)
}

fn without_state(s: Vec<(String, String)>) -> Vec<(String, String)> {
    s.into_iter()
        .filter(|(p, _)| p != ".distributor.json")
        .collect()
}

/// The destination after an uninterrupted v2, state file excluded (it holds an operation
/// id and times), computed once per mode.
pub fn reference_after(mode: Mode) -> Vec<(String, String)> {
    static SO: OnceLock<Vec<(String, String)>> = OnceLock::new();
    static SR: OnceLock<Vec<(String, String)>> = OnceLock::new();
    let cell = match mode {
        Mode::SingleOwner => &SO,
        Mode::SharedRoot => &SR,
    };
    cell.get_or_init(|| {
        let sc = Scenario::new(mode);
        sc.publish_env(&[]).expect_code(0);
        without_state(snapshot(&sc.env))
    })
    .clone()
}

/// The outcome a recover report gives its first operation.
pub fn outcome(r: &Run) -> String {
    r.json()["operations"][0]["outcome"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
