//! Trust (SPEC §17): distributor believes a record in a destination only when `fstat` on
//! the descriptor it reads shows its own uid, the exact record mode and one link. Here
//! distributor runs as root and the neighbour is another uid (`setpriv`), who owns the
//! bundle directory but not `sub/` below it, and plants a staging record that, were it
//! believed, would make root's `recover` delete root's file in `sub/` (a created file
//! rolled back). Nothing the neighbour writes may make any command act: `recover` reports
//! `untrusted` and touches nothing; `publish`, `plan`, `status` and `verify` report the
//! conflict `untrusted_record` (exit 3), before any pending recovery.
//!
//! Also: records are made with exact modes whatever the umask, and published content
//! whatever a default ACL above the bundle path; a published file renamed
//! into a record's place (root's, mode 0644) is not believed; a staging entry of an
//! earlier version (`.distributor-staging/`) is recovered only through the journal that
//! recorded its operation, and untrusted through any other.

use crate::common::hostile::outside;
use crate::common::{Env, Run};
use distributor::hash::sha256_hex;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const DEST: &str = "dest/root";
const OP: &str = "5d1c7a0e-3b8f-4f6a-9e2d-8c4b1a7f0e21";
/// The neighbour's uid and gid.
const NEIGHBOUR: u32 = 65534;

/// A destination published by root (`sub/x.txt` in root's `sub/`), whose bundle directory
/// the neighbour owns.
struct Scene {
    env: Env,
    cfg: PathBuf,
    bundle: PathBuf,
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, PermissionsExt::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
}

impl Scene {
    fn new() -> Scene {
        let env = Env::new();
        let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
        let v1 = env.bundle(
            "b1",
            "tomorrow",
            "2026-12-02T06:00:00Z",
            &[("sub/x.txt", "root's x"), ("keep.txt", "kept")],
            &[],
        );
        env.publish(&cfg, &v1, &[]).expect_code(0);
        // The neighbour may reach the destination and owns the bundle directory.
        for p in ["", "dest"] {
            chmod(&env.path(p), 0o755);
        }
        let bundle = env.path(DEST);
        chown(&bundle, NEIGHBOUR);
        Scene { env, cfg, bundle }
    }

    fn cfg(&self) -> &str {
        self.cfg.to_str().unwrap()
    }

    /// A forged record of an operation that created `sub/x.txt`: were it believed, a
    /// roll back (its pre-state is the state file now) would delete root's file.
    fn forged_plan(&self) -> Value {
        let state = fs::read(self.bundle.join(".distributor.json")).unwrap();
        json!({
            "operation_id": OP,
            "destination_id": "latest",
            "bundle_path": self.bundle,
            "pre_state_sha256": sha256_hex(&state),
            "post_state_sha256": sha256_hex(b"forged"),
            "origin": {
                "started_at": "2026-12-02T07:00:01.000Z", "command": "publish",
                "actor": "cli:neighbour", "pipeline_id": "weather", "state_mode": "single_owner",
                "decision": "replace_older", "takeover_mode": "same_pipeline",
                "previous_owner": null, "previous_source": null,
                "source": {"id": "tomorrow", "created_at": "2026-12-02T07:00:00Z",
                           "digest": format!("sha256:{}", sha256_hex(b"forged"))},
                "takeovers": []
            },
            "actions": [{
                "kind": "file_create", "path": "sub/x.txt",
                "size": 8, "sha256": sha256_hex(b"root's x"),
            }],
            "new_dirs": [],
            "staging_layout": "flat",
        })
    }

    /// Runs `script` in the test's root as the neighbour.
    fn as_neighbour(&self, script: &str) {
        let out = Command::new("setpriv")
            .args([
                &format!("--reuid={NEIGHBOUR}"),
                &format!("--regid={NEIGHBOUR}"),
                "--clear-groups",
                "sh",
                "-c",
                script,
            ])
            .current_dir(self.env.path(""))
            .output()
            .expect("setpriv");
        assert!(
            out.status.success(),
            "the neighbour's script failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The neighbour plants the forged record as distributor would write it, modes and
    /// all, at `.distributor/staging/<OP>/` (or an earlier version's place).
    fn plant(&self, staging: &str) {
        let forged = self.env.path("forged-plan.json");
        fs::write(&forged, serde_json::to_vec(&self.forged_plan()).unwrap()).unwrap();
        chmod(&forged, 0o644);
        // Root's own `.distributor/` (0700) is in the way: the neighbour, who owns the
        // bundle directory, renames it away and makes one of its own.
        self.as_neighbour(&format!(
            "set -e; [ ! -e {DEST}/.distributor ] || mv {DEST}/.distributor {DEST}/.moved-away; \
             d={DEST}/{staging}/{OP}; mkdir -p $d/new $d/old; cp forged-plan.json $d/plan.json; \
             chmod 700 {DEST}/{staging} $d $d/new $d/old; chmod 600 $d/plan.json; \
             [ -d {DEST}/.distributor ] && chmod 700 {DEST}/.distributor || true"
        ));
    }

    fn destination(&self) -> Vec<(String, String)> {
        self.env.snapshot_unlocked(DEST)
    }

    /// Runs `args`, then checks that nothing changed inside or outside the destination.
    fn run_touching_nothing(&self, args: &[&str]) -> Run {
        let before = (self.destination(), outside(&self.env, DEST));
        let r = self.env.run(args);
        assert!(
            !r.stderr.contains("panicked at"),
            "{args:?} crashed: {}",
            r.stderr
        );
        assert_eq!(
            (self.destination(), outside(&self.env, DEST)),
            before,
            "{args:?} changed something\nstdout:\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(self.env.read(&format!("{DEST}/sub/x.txt")), "root's x");
        r
    }

    /// `recover` reports the record `untrusted`, naming `naming`, and exits 1.
    fn assert_recover_untrusted(&self, extra: &[&str], naming: &str) {
        let mut args = vec!["recover", "--json", "--config", self.cfg()];
        args.extend_from_slice(extra);
        let r = self.run_touching_nothing(&args);
        assert_eq!(r.code, 1, "recover: {}\n{}", r.stdout, r.stderr);
        let report = r.json();
        let ops = report["operations"].as_array().cloned().unwrap_or_default();
        assert!(
            ops.iter().all(|o| o["outcome"] == "untrusted"),
            "every operation found is untrusted: {report:#}"
        );
        assert!(
            ops.iter()
                .any(|o| o["message"].as_str().unwrap_or_default().contains(naming)),
            "no untrusted operation names {naming:?}: {report:#}"
        );
        assert!(report["summary"]["untrusted"].as_u64().unwrap_or(0) >= 1);
    }

    /// `publish`, `plan`, `status` and `verify` all say `untrusted_record` (exit 3).
    fn assert_commands_refuse(&self, naming: &str) {
        let v2 = self.env.bundle(
            "b2",
            "tomorrow",
            "2026-12-02T08:00:00Z",
            &[("sub/x.txt", "v2 x")],
            &[],
        );
        let v2 = v2.to_str().unwrap();
        for cmd in ["publish", "plan"] {
            let r =
                self.run_touching_nothing(&[cmd, "--json", "--config", self.cfg(), "--source", v2]);
            assert_eq!(r.code, 3, "{cmd}: {}\n{}", r.stdout, r.stderr);
            let d = r.dest(0);
            assert!(
                r.conflict_kinds().contains(&"untrusted_record".to_string()),
                "{cmd}: {d:#}"
            );
            assert!(
                d.to_string().contains(naming),
                "{cmd} names {naming}: {d:#}"
            );
        }
        for cmd in ["status", "verify"] {
            let r = self.run_touching_nothing(&[cmd, "--json", "--config", self.cfg()]);
            assert_eq!(r.code, 3, "{cmd}: {}\n{}", r.stdout, r.stderr);
            assert!(r.stdout.contains("untrusted_record"), "{cmd}: {}", r.stdout);
        }
    }
}

#[test]
fn a_staging_record_another_uid_wrote_is_never_acted_on() {
    let s = Scene::new();
    s.plant(".distributor/staging");
    s.assert_recover_untrusted(&[], "uid 65534");
    // Through another journal too: the record is judged by its owner, not by who knows it.
    let other = s.env.path("journal.sqlite3.other");
    s.assert_recover_untrusted(&["--journal", other.to_str().unwrap()], "uid 65534");
    s.assert_commands_refuse("uid 65534");
}

#[test]
fn a_published_file_renamed_into_a_records_place_is_not_believed() {
    let s = Scene::new();
    // Root's own staging directories, exactly as distributor makes them, holding a
    // published file (root's, mode 0644) renamed to plan.json.
    let op_dir = s.bundle.join(".distributor/staging").join(OP);
    fs::create_dir_all(op_dir.join("new")).unwrap();
    fs::create_dir_all(op_dir.join("old")).unwrap();
    for d in [".distributor", ".distributor/staging"] {
        chmod(&s.bundle.join(d), 0o700);
    }
    for d in ["", "new", "old"] {
        chmod(&op_dir.join(d), 0o700);
    }
    s.env
        .write("dest/root/published.json", &s.forged_plan().to_string());
    chmod(&s.env.path("dest/root/published.json"), 0o644);
    fs::rename(
        s.env.path("dest/root/published.json"),
        op_dir.join("plan.json"),
    )
    .unwrap();
    s.assert_recover_untrusted(&[], "mode 0644");
    s.assert_commands_refuse("mode 0644");
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn records_have_exact_modes_whatever_the_umask() {
    let env = Env::new();
    let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a/b.txt", "b")],
        &[],
    );
    // A permissive umask, through a shell, for the run only.
    let bin = env!("CARGO_BIN_EXE_distributor");
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "umask 000; exec \"$0\" publish --config {} --source {}",
                cfg.display(),
                v1.display()
            ),
            bin,
        ])
        .env("DISTRIBUTOR_JOURNAL", env.journal())
        .env("DISTRIBUTOR_ACTOR", "tester")
        .env("HOME", env.path("home"))
        .current_dir(env.path(""))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |rel: &str| fs::symlink_metadata(env.path(rel)).unwrap().mode() & 0o7777;
    assert_eq!(
        mode(&format!("{DEST}/.distributor.json")),
        0o600,
        "the state file"
    );
    assert_eq!(mode(&format!("{DEST}/a/b.txt")), 0o644, "a published file");
    assert_eq!(mode(&format!("{DEST}/a")), 0o755, "a published directory");
    // A run stopped right after its staging record: every record is 0700/0600.
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a/b.txt", "b2")],
        &[],
    );
    env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            v2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_staging_record")],
    );
    let staging = env.path(&format!("{DEST}/.distributor/staging"));
    let op = fs::read_dir(&staging)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for d in [
        env.path(&format!("{DEST}/.distributor")),
        staging.clone(),
        op.clone(),
    ] {
        assert_eq!(
            fs::metadata(&d).unwrap().mode() & 0o7777,
            0o700,
            "{}",
            d.display()
        );
    }
    for f in ["plan.json", "post-state.json", "pre-state.json"] {
        assert_eq!(
            fs::metadata(op.join(f)).unwrap().mode() & 0o7777,
            0o600,
            "{f}"
        );
    }
    env.run(&["recover", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/a/b.txt")), "b");
}

/// A default ACL on the directory above the bundle path, as an operator may set on a web
/// root: `user::rwx`, `group::---`, `other::---`. Where a directory has one, it decides the
/// mode of what is made in it instead of the umask, and directories made in it inherit
/// it, so every directory distributor makes below has it too. Content created asking for
/// 0644 would be 0600 there (a record's mode) without an `fchmod`.
/// Sets that default ACL on `dir` (made if missing), and checks it applies.
fn default_acl_on(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    // The xattr's value (linux/posix_acl_xattr.h): version 2, then (tag, perm, id) entries.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm) in [(0x01u16, 7u16), (0x04, 0), (0x20, 0)] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(u32::MAX.to_le_bytes());
    }
    rustix::fs::setxattr(
        dir,
        "system.posix_acl_default",
        &acl,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap_or_else(|e| {
        panic!(
            "this test needs POSIX ACLs where the tests run ({}): {e}",
            dir.display()
        )
    });
    // The ACL is in force: a directory made under it gets group and other bits from it.
    fs::create_dir(dir.join("probe")).unwrap();
    let probe = fs::metadata(dir.join("probe")).unwrap().mode() & 0o777;
    assert_eq!(probe, 0o700, "the default ACL did not apply");
    fs::remove_dir(dir.join("probe")).unwrap();
}

#[test]
fn published_content_has_exact_modes_under_a_default_acl() {
    let env = Env::new();
    let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
    default_acl_on(&env.path("dest"));

    let mode = |rel: &str| fs::symlink_metadata(env.path(rel)).unwrap().mode() & 0o7777;
    // A new tree (a/), a file at the top, then a file into a directory that exists.
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a/b/c.txt", "c"), ("top.txt", "t")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a/b/c.txt", "c"), ("a/d.txt", "d"), ("top.txt", "t2")],
        &[],
    );
    env.publish(&cfg, &v2, &[]).expect_code(0);
    for f in ["a/b/c.txt", "a/d.txt", "top.txt"] {
        assert_eq!(mode(&format!("{DEST}/{f}")), 0o644, "published file {f}");
    }
    for d in ["a", "a/b"] {
        assert_eq!(
            mode(&format!("{DEST}/{d}")),
            0o755,
            "published directory {d}"
        );
    }
    assert_eq!(
        mode(&format!("{DEST}/.distributor.json")),
        0o600,
        "state file"
    );
    for d in [".distributor", ".distributor/log", ".distributor/staging"] {
        assert_eq!(mode(&format!("{DEST}/{d}")), 0o700, "record directory {d}");
    }
    // Its own records believed: the same bundle again is unchanged, and verify passes.
    let again = env.publish(&cfg, &v2, &[]);
    again.expect_code(0);
    assert_eq!(again.decision(), "unchanged");
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

/// The same default ACL above a releases destination: each release's directories are
/// exactly 0755 and its files 0444.
#[test]
fn release_directories_have_exact_modes_under_a_default_acl() {
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "www/latest",
        "    releases:\n      keep: 3\n",
    );
    default_acl_on(&env.path("www"));
    // The second carries a/b/c.txt over from the first and makes a/d/ for its new file.
    for (i, files) in [
        (1, &["a/b/c.txt"][..]),
        (2, &["a/b/c.txt", "a/d/e.txt"][..]),
    ] {
        let version = format!("version {i}");
        let mut outputs = vec![("index.html", version.as_str())];
        outputs.extend(files.iter().map(|f| (*f, "x")));
        let b = env.bundle(
            &format!("b{i}"),
            "tomorrow",
            &format!("2026-12-02T0{i}:00:00Z"),
            &outputs,
            &[],
        );
        env.publish(&cfg, &b, &[]).expect_code(0);
    }
    // The active release: its own directories and those carried over from the first.
    let release = fs::canonicalize(env.path("www/latest")).unwrap();
    let mode = |rel: &str| fs::symlink_metadata(release.join(rel)).unwrap().mode() & 0o7777;
    for d in ["", "a", "a/b", "a/d"] {
        assert_eq!(mode(d), 0o755, "release directory {d:?}");
    }
    for f in ["index.html", "a/b/c.txt", "a/d/e.txt"] {
        assert_eq!(mode(f), 0o444, "release file {f}");
    }
    env.run(&["verify", "--config", cfg.to_str().unwrap()])
        .expect_code(0);
}

/// An interrupted publication whose staging is moved to where an earlier version kept it
/// (`.distributor-staging/<op>/`, files 0644 as that version made them).
fn legacy_scene() -> (Env, PathBuf, String) {
    let env = Env::new();
    let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("x.txt", "v1")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("x.txt", "v2")],
        &[],
    );
    env.run_env(
        &[
            "publish",
            "--config",
            cfg.to_str().unwrap(),
            "--source",
            v2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_links")],
    );
    let bundle = env.path(DEST);
    let staging = bundle.join(".distributor/staging");
    let op = fs::read_dir(&staging)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let op = op.to_string_lossy().into_owned();
    fs::create_dir(bundle.join(".distributor-staging")).unwrap();
    fs::rename(
        staging.join(&op),
        bundle.join(".distributor-staging").join(&op),
    )
    .unwrap();
    // An earlier version kept no `.distributor/` at all (no log either).
    fs::remove_dir_all(bundle.join(".distributor")).unwrap();
    for f in ["plan.json", "pre-state.json", "post-state.json"] {
        chmod(
            &bundle.join(".distributor-staging").join(&op).join(f),
            0o644,
        );
    }
    (env, cfg, op)
}

#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn an_earlier_versions_staging_is_recovered_through_the_journal_that_recorded_it() {
    let (env, cfg, op) = legacy_scene();
    let cfg = cfg.to_str().unwrap();
    // Another journal does not know the operation: untrusted, nothing touched.
    let other = env.path("journal.sqlite3.other");
    let before = env.snapshot_unlocked(DEST);
    let r = env.run(&[
        "recover",
        "--json",
        "--config",
        cfg,
        "--journal",
        other.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.json()["operations"][0]["outcome"],
        "untrusted",
        "{}",
        r.stdout
    );
    assert_eq!(env.snapshot_unlocked(DEST), before);
    // A publication meanwhile is refused: recovery is due.
    let v3 = env.bundle(
        "b3",
        "tomorrow",
        "2026-12-02T08:00:00Z",
        &[("x.txt", "v3")],
        &[],
    );
    env.publish(&env.path("weather.yaml"), &v3, &[])
        .expect_code(4);
    // The journal that recorded it recovers it.
    let r = env.run(&["recover", "--json", "--config", cfg]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let o = &r.json()["operations"][0];
    assert_eq!(o["operation_id"], op.as_str());
    assert!(
        matches!(
            o["outcome"].as_str(),
            Some("rolled_back" | "rolled_forward")
        ),
        "{o:#}"
    );
    assert!(!env.exists(&format!("{DEST}/.distributor-staging")));
    assert!(!env.staging_left(DEST));
    // The log this journal saw (entry 1) went with `.distributor/` above: publishing
    // waits for `log --restart` (an earlier version's journal knew no log).
    env.publish(&env.path("weather.yaml"), &v3, &[])
        .expect_code(3);
    env.run(&["log", "--config", cfg, "--restart"])
        .expect_code(0);
    env.publish(&env.path("weather.yaml"), &v3, &[])
        .expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/x.txt")), "v3");
}

/// The neighbour, who owns the bundle directory, replaces root's state file with one of
/// its own that records root's unmanaged `sub/secret.txt` as this owner's: were it
/// believed, the next publication (which no longer lists it) would delete root's file.
#[test]
fn a_state_file_another_uid_wrote_is_never_believed() {
    let s = Scene::new();
    s.env
        .write(&format!("{DEST}/sub/secret.txt"), "root's secret");
    let mut state: Value =
        serde_json::from_slice(&fs::read(s.bundle.join(".distributor.json")).unwrap()).unwrap();
    state["outputs"].as_array_mut().unwrap().push(json!({
        "path": "sub/secret.txt", "size": 13, "sha256": sha256_hex(b"root's secret"),
    }));
    fs::write(
        s.env.path("forged-state.json"),
        serde_json::to_vec_pretty(&state).unwrap(),
    )
    .unwrap();
    chmod(&s.env.path("forged-state.json"), 0o644);
    s.as_neighbour(&format!(
        "set -e; cp forged-state.json {DEST}/.forged; chmod 600 {DEST}/.forged; \
         mv -f {DEST}/.forged {DEST}/.distributor.json"
    ));
    s.assert_commands_refuse("uid 65534");
    assert_eq!(
        s.env.read(&format!("{DEST}/sub/secret.txt")),
        "root's secret"
    );
}

/// A state file an earlier version wrote (mode 0644) is believed through the journal that
/// committed exactly its bytes, and the next publication writes it 0600; through another
/// journal it is `untrusted_record`.
#[test]
fn an_earlier_versions_state_file_is_believed_through_the_journal_that_committed_it() {
    let env = Env::new();
    let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("x.txt", "v1")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let state = env.path(&format!("{DEST}/.distributor.json"));
    chmod(&state, 0o644);
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("x.txt", "v2")],
        &[],
    );
    let other = env.path("journal.sqlite3.other");
    let other = other.to_str().unwrap();
    let before = env.snapshot_unlocked(DEST);
    let r = env.publish(&cfg, &v2, &["--journal", other]);
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(r.conflict_kinds().contains(&"untrusted_record".to_string()));
    assert!(r.stdout.contains("mode 0644"), "{}", r.stdout);
    assert_eq!(env.snapshot_unlocked(DEST), before);
    // The journal that committed it vouches for it.
    env.plan(&cfg, &v2, &[]).expect_code(0);
    env.publish(&cfg, &v2, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/x.txt")), "v2");
    assert_eq!(fs::metadata(&state).unwrap().mode() & 0o7777, 0o600);
}

/// The journal and the staging record keep the device and inode of `.distributor/`: an
/// operation whose staging entry is gone because the record directory was moved away is
/// `staging_moved`, not `closed`; put back, it is recovered as usual.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn an_operation_whose_record_directory_moved_is_not_closed() {
    let env = Env::new();
    let cfg = env.simple_config("weather.yaml", "weather", "latest", DEST, "");
    let cfg_s = cfg.to_str().unwrap();
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("x.txt", "v1")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("x.txt", "v2")],
        &[],
    );
    let crashed = env.run_env(
        &[
            "publish",
            "--config",
            cfg_s,
            "--source",
            v2.to_str().unwrap(),
        ],
        &[("DISTRIBUTOR_FAILPOINT", "after_links")],
    );
    assert_ne!(crashed.code, 0);
    let rec = env.path(&format!("{DEST}/.distributor"));
    let away = env.path(&format!("{DEST}/.away"));
    for replaced in [false, true] {
        fs::rename(&rec, &away).unwrap();
        if replaced {
            fs::create_dir_all(rec.join("staging")).unwrap();
            chmod(&rec, 0o700);
            chmod(&rec.join("staging"), 0o700);
        }
        let before = env.snapshot_unlocked(DEST);
        let r = env.run(&["recover", "--json", "--config", cfg_s]);
        assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
        let o = &r.json()["operations"][0];
        assert_eq!(o["outcome"], "staging_moved", "{}", r.stdout);
        assert_eq!(r.json()["summary"]["staging_moved"], 1);
        assert_eq!(
            env.snapshot_unlocked(DEST),
            before,
            "recover touched something"
        );
        if replaced {
            fs::remove_dir_all(&rec).unwrap();
        }
        fs::rename(&away, &rec).unwrap();
    }
    let r = env.run(&["recover", "--json", "--config", cfg_s]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.json()["operations"][0]["outcome"],
        "rolled_back",
        "{}",
        r.stdout
    );
    assert_eq!(env.read(&format!("{DEST}/x.txt")), "v1");
    env.publish(&cfg, &v2, &[]).expect_code(0);
    assert_eq!(env.read(&format!("{DEST}/x.txt")), "v2");
}

/// A replayed staging record (SPEC §17: "A staging record whose operation already has a
/// log entry is stale: reported, never acted on"): a releases publication's own record,
/// copied while it stood, put back after a rollback made the release it was built
/// against active again. Its verdict would be "roll back", whose undo removes the release
/// it built; since the destination log records its operation, `recover` reports it and
/// touches nothing, through any journal.
#[test]
#[cfg_attr(
    not(feature = "failpoints"),
    ignore = "drives the binary's failpoints: cargo test --all-features"
)]
fn a_replayed_staging_record_of_a_logged_operation_is_never_acted_on() {
    use crate::common::hostile::PausedRun;
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        "www/latest",
        "    releases:\n      dir: www/.latest.releases\n",
    );
    let cfg_s = cfg.to_str().unwrap();
    let v1 = env.bundle(
        "b1",
        "tomorrow",
        "2026-12-02T06:00:00Z",
        &[("a.txt", "one")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("a.txt", "two")],
        &[],
    );
    // v2 stands after its commit point and its log entry, its staging not yet removed:
    // its record is copied (modes and owner kept) as a backup would.
    let staging = env.path("www/.latest.releases/.distributor/staging");
    let run = PausedRun::start(
        &env,
        &[
            "publish",
            "--config",
            cfg_s,
            "--source",
            v2.to_str().unwrap(),
        ],
        "io_remove_staging",
        &[],
    );
    let op = fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| !n.starts_with('.'))
        .expect("the publication's staging record");
    let copy = env.path("replay");
    let out = Command::new("cp")
        .args([
            "-a",
            staging.join(&op).to_str().unwrap(),
            copy.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    run.resume().expect_code(0);
    // A rollback makes v1's release active again: the one v2's record was built against.
    env.run(&["rollback", "--config", cfg_s]).expect_code(0);
    let releases = env.path("www/.latest.releases");
    assert!(
        releases.join(&op).is_dir(),
        "v2's release is kept after the rollback"
    );
    // The record is put back.
    let out = Command::new("cp")
        .args([
            "-a",
            copy.to_str().unwrap(),
            staging.join(&op).to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let before = env.snapshot("www");
    for journal in [None, Some(env.path("journal.sqlite3.other"))] {
        let mut args = vec!["recover", "--json", "--config", cfg_s];
        let j;
        if let Some(p) = &journal {
            j = p.to_str().unwrap().to_string();
            args.extend(["--journal", j.as_str()]);
        }
        let r = env.run(&args);
        assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
        let o = &r.json()["operations"][0];
        assert_eq!(o["outcome"], "failed", "{}", r.stdout);
        assert!(
            o["message"]
                .as_str()
                .unwrap()
                .contains("stale staging record"),
            "{}",
            r.stdout
        );
        let after: Vec<_> = env
            .snapshot("www")
            .into_iter()
            .filter(|(p, _)| !p.ends_with(".distributor.lock"))
            .collect();
        let want: Vec<_> = before
            .iter()
            .filter(|(p, _)| !p.ends_with(".distributor.lock"))
            .cloned()
            .collect();
        assert_eq!(after, want, "recover acted on a replayed record");
        assert!(releases.join(&op).is_dir(), "v2's release was removed");
    }
}

/// A releases destination whose `releases.dir` the neighbour owns: the neighbour renames
/// root's `.distributor/` away and plants its own with a `releases.json` recording
/// `keep: 0` (were it believed, retention would remove every release but two, and
/// `releases settings` would write over it). `publish` and `plan` report the conflict
/// `untrusted_record` (exit 3), as `status` and `verify` do; `prune` and `releases
/// settings` refuse, naming the record and its owner; no release is removed and nothing
/// is written.
#[test]
fn a_releases_settings_record_another_uid_wrote_is_never_believed() {
    const PATH: &str = "www/latest";
    const DIR: &str = "www/.latest.releases";
    let env = Env::new();
    let cfg = env.simple_config(
        "c.yaml",
        "weather",
        "latest",
        PATH,
        "    releases:\n      keep: 3\n",
    );
    let c = cfg.to_str().unwrap();
    for i in 1..=3 {
        let b = env.bundle(
            &format!("b{i}"),
            "tomorrow",
            &format!("2026-12-02T0{i}:00:00Z"),
            &[("index.html", &format!("version {i}"))],
            &[],
        );
        env.publish(&cfg, &b, &[]).expect_code(0);
    }
    let settings = env.path(&format!("{DIR}/.distributor/releases.json"));
    let mut forged: Value = serde_json::from_slice(&fs::read(&settings).unwrap()).unwrap();
    let keep = forged
        .as_object_mut()
        .and_then(|o| o.iter_mut().find(|(k, _)| k.as_str() == "keep"))
        .map(|(_, v)| v)
        .expect("the settings record holds keep");
    *keep = json!(0);
    fs::write(
        env.path("forged.json"),
        serde_json::to_vec(&forged).unwrap(),
    )
    .unwrap();
    chmod(&env.path("forged.json"), 0o644);
    for p in ["", "www"] {
        chmod(&env.path(p), 0o755);
    }
    chown(&env.path(DIR), NEIGHBOUR);
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={NEIGHBOUR}"),
            &format!("--regid={NEIGHBOUR}"),
            "--clear-groups",
            "sh",
            "-c",
            &format!(
                "set -e; mv {DIR}/.distributor {DIR}/.moved-away; mkdir -m 700 {DIR}/.distributor; \
                 cp forged.json {DIR}/.distributor/releases.json; chmod 600 {DIR}/.distributor/releases.json"
            ),
        ])
        .current_dir(env.path(""))
        .output()
        .expect("setpriv");
    assert!(
        out.status.success(),
        "the neighbour's script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = env.snapshot_unlocked("www");
    let v4 = env.bundle(
        "b4",
        "tomorrow",
        "2026-12-02T04:00:00Z",
        &[("index.html", "version 4")],
        &[],
    );
    let v4 = v4.to_str().unwrap();
    for args in [
        vec!["publish", "--json", "--config", c, "--source", v4],
        vec!["plan", "--json", "--config", c, "--source", v4],
    ] {
        let r = env.run(&args);
        assert_eq!(r.code, 3, "{args:?}: {}\n{}", r.stdout, r.stderr);
        assert!(
            r.conflict_kinds().contains(&"untrusted_record".to_string()),
            "{args:?}: {}",
            r.stdout
        );
        assert!(r.stdout.contains("uid 65534"), "{args:?}: {}", r.stdout);
    }
    for args in [
        vec!["prune", "--json", "--config", c],
        vec!["releases", "settings", "--json", "--config", c],
    ] {
        let r = env.run(&args);
        assert_ne!(r.code, 0, "{args:?}: {}\n{}", r.stdout, r.stderr);
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(
            said.contains("uid 65534") && said.contains(".latest.releases/.distributor"),
            "{args:?} names the record and its owner: {said}"
        );
    }
    for cmd in ["status", "verify"] {
        let r = env.run(&[cmd, "--json", "--config", c]);
        assert_eq!(r.code, 3, "{cmd}: {}\n{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("untrusted_record"), "{cmd}: {}", r.stdout);
    }
    // The log cannot be read either: no advice to quarantine an entry that is not the
    // trouble.
    let r = env.run(&["status", "--config", c]);
    assert!(
        r.stdout.contains("unreadable log") && !r.stdout.contains("--quarantine"),
        "{}",
        r.stdout
    );
    assert_eq!(
        env.snapshot_unlocked("www"),
        before,
        "something in the destination changed"
    );
    assert_eq!(env.read(&format!("{PATH}/index.html")), "version 3");
}

/// The log's continuity (docs/operations.md, "The log's continuity"): the neighbour, who
/// owns the bundle directory, renames root's `.distributor/` away. Before, the next
/// publication quietly started a new log at seq 1 although the journal knew the log had
/// reached entry 2. Now `publish` refuses with the conflict `log_missing` (exit 3, not
/// forceable) and writes nothing, `verify` reports `log_mismatch` (exit 3), until
/// `log --restart` logs the gap (an entry after the tail the journal knew); then
/// publishing resumes, numbered after it, and the log reads without a bad entry.
#[test]
fn a_log_renamed_away_is_log_missing_until_log_restart() {
    let s = Scene::new();
    let v2 = s.env.bundle(
        "b2",
        "tomorrow",
        "2026-12-02T07:00:00Z",
        &[("sub/x.txt", "root's x, v2"), ("keep.txt", "kept")],
        &[],
    );
    s.env.publish(&s.cfg, &v2, &[]).expect_code(0);
    let log = s.bundle.join(".distributor/log");
    assert!(log.join("00000000000000000002.json").exists());
    s.as_neighbour(&format!("mv {DEST}/.distributor {DEST}/.moved-away"));
    let v3 = s.env.bundle(
        "b3",
        "tomorrow",
        "2026-12-02T08:00:00Z",
        &[("sub/x.txt", "root's x, v3"), ("keep.txt", "kept")],
        &[],
    );
    for extra in [&[][..], &["--force"][..]] {
        let r = s.env.publish(&s.cfg, &v3, extra);
        r.expect_code(3);
        assert_eq!(r.conflict_kinds(), ["log_missing"], "{}", r.stdout);
        let m = r.dest(0)["conflicts"][0]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            m.contains("saw this destination's log reach entry 2")
                && m.contains("distributor log --restart"),
            "{m}"
        );
    }
    assert_eq!(
        fs::read_to_string(s.bundle.join("sub/x.txt")).unwrap(),
        "root's x, v2"
    );
    assert!(!log.exists(), "no new log was started");
    let r = s.env.run(&["verify", "--config", s.cfg()]);
    r.expect_code(3);
    assert!(r.stdout.contains("log_mismatch"), "{}", r.stdout);

    let r = s.env.run(&["log", "--config", s.cfg(), "--restart"]);
    r.expect_code(0);
    assert!(
        r.stdout
            .contains("entry 3 records that the log went on from here"),
        "{}",
        r.stdout
    );
    let entry: Value =
        serde_json::from_slice(&fs::read(log.join("00000000000000000003.json")).unwrap()).unwrap();
    assert_eq!(entry["command"], "restart");
    assert_eq!(entry["restarted_after"], 2);
    // The operator looks at what the neighbour moved aside, then removes it.
    fs::remove_dir_all(s.bundle.join(".moved-away")).unwrap();
    s.env.run(&["verify", "--config", s.cfg()]).expect_code(0);
    let r = s.env.publish(&s.cfg, &v3, &[]);
    r.expect_code(0);
    assert!(log.join("00000000000000000004.json").exists());
    s.env.run(&["log", "--config", s.cfg()]).expect_code(0);
    assert_eq!(
        fs::read_to_string(s.bundle.join("sub/x.txt")).unwrap(),
        "root's x, v3"
    );
}
