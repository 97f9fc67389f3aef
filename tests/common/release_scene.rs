//! The scenes of the hostile-neighbour tests of releases destinations
//! (`tests/test_hostile_releases.rs`, `tests/test_release_identity.rs`): a destination
//! with `releases` ready for one command, the neighbour (uid 65534) allowed to write in
//! `path`'s parent and in `releases.dir`, and what the checks read of it afterwards (the
//! releases present and logged, what `path` shows, the device and inode of each release,
//! the log entries that give distributor's word for a release).

use super::faults::{V1_AT, V1_FILES, V1_LINKS, V2_AT, V2_FILES, V2_LINKS, assert_aborted};
use super::hostile::NEIGHBOUR;
use super::{Env, Run};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(crate) const PATH: &str = "www/latest";
pub(crate) const DIR: &str = "www/.latest.releases";
/// Where `path`'s symlink points, relative to `path`'s parent.
pub(crate) const LINK_PREFIX: &str = ".latest.releases/";
/// The neighbour's private directory outside.
pub(crate) const PRIVATE: &str = "private";
/// Another managed (in-place) destination beside `path` (adoption).
pub(crate) const OTHER: &str = "www/other";

/// The command raced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmd {
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
    /// `publish` of a third version on top of two releases: builds a release (carrying
    /// the unchanged files of the active one) and activates it.
    Publish,
}

/// Which release a release move takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// The one `path` names before the run.
    Active,
    /// The one the command works on: rollback's target, the pruned one, the one being
    /// built (adopt, recover, publish).
    Subject,
    /// The one active before the one `path` names (the one retention always keeps).
    Previous,
}

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
    logged(env)
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
pub(crate) struct Scene {
    pub(crate) cmd: Cmd,
    pub(crate) env: Env,
    pub(crate) cfg: PathBuf,
    /// The release `path` names before the run (adopt: none).
    pub(crate) old: Option<String>,
    /// The release the run activates, when known before it (rollback's target, the
    /// interrupted publication's release).
    pub(crate) new: Option<String>,
    /// A release that is neither old nor new (for `path` pointed at another release).
    pub(crate) other: Option<String>,
    /// The release active before `old`.
    pub(crate) previous: Option<String>,
    /// The release the command works on (known before the run).
    pub(crate) subject: Option<String>,
    /// Adopt: the device and inode of the plain directory at `path`.
    pub(crate) plain: Option<(u64, u64)>,
    /// A release whose activation is committed (journal and `path`) but not logged yet:
    /// the interrupted publication past its commit point.
    pub(crate) committed: Option<String>,
}

impl Scene {
    pub(crate) fn new(cmd: Cmd) -> Scene {
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
            previous: None,
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

    pub(crate) fn cfg(&self) -> &str {
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
                self.previous = Some(ops[1].clone());
                self.other = Some(ops[0].clone());
            }
            Cmd::RollbackShared => {
                // The new release is built by the run; its records come from the second.
                let ops: Vec<String> = (1..=3).map(|i| self.publish(i)).collect();
                self.old = Some(ops[2].clone());
                self.subject = Some(ops[1].clone());
                self.previous = Some(ops[1].clone());
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
                self.previous = Some(ops[1].clone());
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
                self.previous = Some(ops[0].clone());
                self.other = Some(ops[0].clone());
            }
            Cmd::Publish => {
                let ops: Vec<String> = (1..=2).map(|i| self.publish(i)).collect();
                self.old = Some(ops[1].clone());
                self.previous = Some(ops[0].clone());
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
                self.previous = Some(ops[0].clone());
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
                    self.previous = Some(ops[0].clone());
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
                    self.previous = Some(ops[1].clone());
                    self.other = Some(ops[1].clone());
                }
            }
        }
    }

    pub(crate) fn args(&self) -> Vec<String> {
        let head: &[&str] = match self.cmd {
            Cmd::Rollback | Cmd::RollbackShared => &["rollback"],
            Cmd::Prune => &["prune"],
            Cmd::Adopt => &["releases", "adopt"],
            Cmd::RecoverBefore | Cmd::RecoverAfter => &["recover"],
            Cmd::Stage => &["publish", "--stage"],
            Cmd::Publish => &["publish"],
            Cmd::Promote => &["promote"],
        };
        let mut a: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        a.extend(["--json", "--config", self.cfg()].map(String::from));
        match self.cmd {
            Cmd::Stage | Cmd::Publish => a.extend([
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

/// What is at `rel`, not followed: a symlink's text, a directory's inode, or nothing.
pub(crate) fn describe(env: &Env, rel: &str) -> String {
    match fs::symlink_metadata(env.path(rel)) {
        Err(_) => "nothing".to_string(),
        Ok(md) if md.file_type().is_symlink() => {
            format!("-> {}", fs::read_link(env.path(rel)).unwrap().display())
        }
        Ok(md) if md.is_dir() => format!("directory {}:{}", md.dev(), md.ino()),
        Ok(md) => format!("file {}", md.ino()),
    }
}

/// The device and inode of each release in `names` (by its name in `releases.dir`).
pub(crate) fn identities(env: &Env, names: &BTreeSet<String>) -> Vec<(String, (u64, u64))> {
    names
        .iter()
        .filter_map(|r| {
            let m = fs::symlink_metadata(env.path(&format!("{DIR}/{r}"))).ok()?;
            Some((r.clone(), (m.dev(), m.ino())))
        })
        .collect()
}

/// The log entries from the `since`-th on that activate or stage a release that is not
/// whole (no `.distributor.json`), or whose name holds another directory than the one the
/// entry recorded (`release_identity`): distributor's word given for what is not the
/// release it built or verified (docs/operations.md, "Release identity").
pub(crate) fn unfounded_activations(env: &Env, since: usize) -> Vec<String> {
    let mut out = Vec::new();
    for e in logged(env).iter().skip(since) {
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
pub(crate) fn path_view(env: &Env) -> Vec<(String, String)> {
    match fs::symlink_metadata(env.path(PATH)) {
        Ok(md) if md.is_dir() => env.snapshot(PATH),
        _ => vec![(String::new(), describe(env, PATH))],
    }
}

/// The destination log's entries in `releases.dir`, oldest first.
pub(crate) fn logged(env: &Env) -> Vec<serde_json::Value> {
    let mut names: Vec<PathBuf> = match fs::read_dir(env.path(&format!("{DIR}/.distributor/log"))) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .filter(|p| p.to_string_lossy().ends_with(".json"))
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_slice(&fs::read(p).unwrap()).unwrap())
        .collect()
}
