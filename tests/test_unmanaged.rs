//! Unmanaged directories and odd storage at the paths a publication deletes or replaces
//! (SPEC §5.3, §5.4): deletion touches only what state records, an unrecorded directory
//! where a file goes is `unmanaged_directory` whatever it holds, and a plan that cannot be
//! carried out is a conflict in the dry run and the real run alike, never a failure half
//! way.

use crate::common::{Env, F, Run};
use std::path::{Path, PathBuf};

const T6: &str = "2026-12-02T06:00:00Z";
const T7: &str = "2026-12-02T07:00:00Z";
const SHARED: &str = "    state:\n      mode: shared_root\n";

fn config(env: &Env, extra: &str) -> PathBuf {
    env.simple_config("c.yaml", "weather", "latest", "dest", extra)
}

/// Plans and publishes `bundle` (with `extra` flags); both must be a conflict (exit 3)
/// naming `kind` at `path`, and neither may change anything under `dest`.
fn refused_by_both(env: &Env, cfg: &Path, bundle: &Path, extra: &[&str], kind: &str, path: &str) {
    let before = env.snapshot_unlocked("dest");
    let runs: [Run; 2] = [
        env.plan(cfg, bundle, extra),
        env.publish(cfg, bundle, extra),
    ];
    for r in runs {
        r.expect_code(3);
        assert_eq!(r.decision(), "conflict", "{}", r.stdout);
        let hit = r.dest(0)["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == kind && c["path"] == path && c["forceable"] == false);
        assert!(hit, "no unforceable {kind} at {path}: {}", r.stdout);
    }
    assert_eq!(
        env.snapshot_unlocked("dest"),
        before,
        "a refused publication changed the destination"
    );
}

/// v1 publishes `files` and `links`; v2 (newer, same source) publishes only `a.txt`.
fn published(env: &Env, extra: &str, files: &[F], links: &[F]) -> (PathBuf, PathBuf) {
    let cfg = config(env, extra);
    let v1 = env.bundle("v1", "tomorrow", T6, files, links);
    env.publish(&cfg, &v1, &[]).expect_code(0);
    let v2 = env.bundle("v2", "tomorrow", T7, &[("a.txt", "two")], &[]);
    (cfg, v2)
}

#[test]
fn a_directory_made_at_a_recorded_path_is_never_deleted() {
    for extra in ["", SHARED] {
        let env = Env::new();
        let (cfg, v2) = published(
            &env,
            extra,
            &[
                ("a.txt", "one"),
                ("old.txt", "recorded"),
                ("sub/old", "deep"),
            ],
            &[("l", "a.txt")],
        );
        // Somebody replaces three recorded paths with directories holding their own files.
        for rel in ["old.txt", "sub/old", "l"] {
            std::fs::remove_file(env.path(&format!("dest/{rel}"))).unwrap();
            env.write(&format!("dest/{rel}/deep/user.txt"), "precious");
        }
        for (path, force) in [("old.txt", false), ("sub/old", true), ("l", true)] {
            let flags: &[&str] = if force { &["--force"] } else { &[] };
            refused_by_both(&env, &cfg, &v2, flags, "unmanaged_directory", path);
        }
        for rel in ["old.txt", "sub/old", "l"] {
            assert_eq!(env.read(&format!("dest/{rel}/deep/user.txt")), "precious");
        }
    }
}

#[test]
fn an_empty_unrecorded_directory_where_a_file_goes_is_a_conflict() {
    let env = Env::new();
    let cfg = config(&env, "");
    let b = env.bundle("b", "tomorrow", T6, &[("a.txt", "one"), ("f", "file")], &[]);
    std::fs::create_dir_all(env.path("dest/a.txt")).unwrap();
    std::fs::create_dir_all(env.path("dest/f/nested/empty")).unwrap();
    for path in ["a.txt", "f"] {
        refused_by_both(&env, &cfg, &b, &[], "unmanaged_directory", path);
        refused_by_both(&env, &cfg, &b, &["--force"], "unmanaged_directory", path);
    }
    assert!(env.path("dest/a.txt").is_dir());
    assert!(env.path("dest/f/nested/empty").is_dir());
}

#[test]
fn a_recorded_tree_becomes_a_file_and_a_directory_made_inside_it_stops_that() {
    let env = Env::new();
    let cfg = config(&env, "");
    let v1 = env.bundle(
        "v1",
        "tomorrow",
        T6,
        &[("x/y/z.txt", "deep"), ("x/w.txt", "shallow")],
        &[],
    );
    env.publish(&cfg, &v1, &[]).expect_code(0);
    // v2 turns the directory x (all of it recorded content) into a file.
    let v2 = env.bundle("v2", "tomorrow", T7, &[("x", "a file now")], &[]);
    // First with a directory somebody made inside x: refused.
    std::fs::create_dir_all(env.path("dest/x/mine")).unwrap();
    refused_by_both(&env, &cfg, &v2, &[], "unmanaged_directory", "x");
    assert!(env.path("dest/x/mine").is_dir());
    // Without it, x's tree is moved aside and removed, deepest first, and x is a file.
    std::fs::remove_dir(env.path("dest/x/mine")).unwrap();
    let r = env.publish(&cfg, &v2, &[]);
    r.expect_code(0);
    assert_eq!(r.decision(), "replace_older");
    assert_eq!(env.read("dest/x"), "a file now");
    // And back: a file becomes a directory again.
    let v3 = env.bundle(
        "v3",
        "tomorrow",
        "2026-12-02T08:00:00Z",
        &[("x/y/z.txt", "again")],
        &[],
    );
    env.publish(&cfg, &v3, &[]).expect_code(0);
    assert_eq!(env.read("dest/x/y/z.txt"), "again");
}

#[test]
fn a_link_to_delete_behind_a_symlinked_directory_is_unsafe_storage() {
    let env = Env::new();
    let (cfg, v2) = published(&env, "", &[("a.txt", "one")], &[("sub/l", "a.txt")]);
    // sub becomes a symlink to a directory outside, which holds a file named l.
    env.write("outside/l", "not distributor's");
    std::fs::remove_file(env.path("dest/sub/l")).unwrap();
    std::fs::remove_dir(env.path("dest/sub")).unwrap();
    std::os::unix::fs::symlink(env.path("outside"), env.path("dest/sub")).unwrap();
    refused_by_both(&env, &cfg, &v2, &[], "unsafe_storage", "sub");
    assert_eq!(env.read("outside/l"), "not distributor's");
}

#[test]
fn a_directory_at_the_state_file_path_is_unsafe_storage_even_with_force() {
    let env = Env::new();
    let cfg = config(&env, "");
    let b = env.bundle("b", "tomorrow", T6, &[("a.txt", "one")], &[]);
    std::fs::create_dir_all(env.path("dest/.distributor.json")).unwrap();
    refused_by_both(
        &env,
        &cfg,
        &b,
        &["--force"],
        "unsafe_storage",
        ".distributor.json",
    );
    assert!(!env.exists("dest/a.txt"));
}
