//! Test environment: each test gets a temporary root, a cleared environment, its own
//! journal, and builders for configs and bundles. Tests drive the real binary.

#![allow(dead_code)]

pub mod azurite;
pub mod backend;
pub mod chaos;
pub mod faults;
pub mod hostile;
pub mod left_out;
pub mod release_scene;
pub mod s3;
pub mod server;

use serde_json::Value;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary world for one test.
pub struct Env {
    _tmp: tempfile::TempDir,
    /// Root of the temporary tree.
    pub root: PathBuf,
    /// Where [`Env::program`] puts hook programs, made when first asked for.
    programs: std::sync::OnceLock<tempfile::TempDir>,
}

/// The result of one run of the binary.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout parsed as JSON (panics with the output when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
    /// `destinations[i]` of a JSON report.
    pub fn dest(&self, i: usize) -> Value {
        self.json()["destinations"][i].clone()
    }
    /// Decision of the first destination.
    pub fn decision(&self) -> String {
        self.dest(0)["decision"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    /// Conflict kinds of the first destination.
    pub fn conflict_kinds(&self) -> Vec<String> {
        self.dest(0)["conflicts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| c["kind"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
    /// Asserts the exit code, showing output on failure.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// A file in a bundle: path and content.
pub type F<'a> = (&'a str, &'a str);

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        fs::create_dir_all(root.join("home")).unwrap();
        Env {
            _tmp: tmp,
            root,
            programs: std::sync::OnceLock::new(),
        }
    }

    /// The directory of this test's hook programs. A hook's program and every directory
    /// above it must be owned by root or distributor's user and not writable by group or
    /// others (docs/config.md, "Hooks"), which the test's root, under a world-writable
    /// `/tmp`, is not: so they live under `CARGO_TARGET_TMPDIR` (in `target/`, the
    /// checkout's), in a directory of their own, 0755.
    pub fn programs(&self) -> &Path {
        self.programs
            .get_or_init(|| {
                let dir = tempfile::Builder::new()
                    .prefix("programs-")
                    .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
                    .expect("programs dir");
                use std::os::unix::fs::PermissionsExt;
                fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
                dir
            })
            .path()
    }

    /// Writes the program `rel` (below [`Env::programs`]) with `content`, mode 0755.
    pub fn program(&self, rel: &str, content: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.programs().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Absolute path of `rel` under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The journal every command of this env uses (via DISTRIBUTOR_JOURNAL).
    pub fn journal(&self) -> PathBuf {
        self.root.join("journal.sqlite3")
    }

    /// Writes a file, creating parents.
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        p
    }

    /// Writes a state file by hand as distributor's own uid would (SPEC §17: mode 0600),
    /// so what is tested is what comes after trust.
    pub fn write_state_file(&self, rel: &str, content: &[u8]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    /// Reads a file under the root.
    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// True when something (even a dangling symlink) exists at `rel`.
    pub fn exists(&self, rel: &str) -> bool {
        fs::symlink_metadata(self.path(rel)).is_ok()
    }

    /// Writes a config file `rel` with the given YAML.
    pub fn config(&self, rel: &str, yaml: &str) -> PathBuf {
        self.write(rel, yaml)
    }

    /// A one-destination config for pipeline `pipeline`, destination `dest` at `path`
    /// (relative to the root) with extra destination keys (YAML, indented 4 spaces).
    pub fn simple_config(
        &self,
        rel: &str,
        pipeline: &str,
        dest: &str,
        path: &str,
        extra: &str,
    ) -> PathBuf {
        let yaml = format!(
            "version: 1\npipeline:\n  id: {pipeline}\ndestinations:\n  - id: {dest}\n    path: {}\n{extra}",
            self.path(path).display()
        );
        self.config(rel, &yaml)
    }

    /// Builds a bundle directory `rel` with files and links and writes its manifest
    /// (via the library, as `distributor manifest` would).
    pub fn bundle(
        &self,
        rel: &str,
        id: &str,
        created_at: &str,
        files: &[F],
        links: &[F],
    ) -> PathBuf {
        let dir = self.path(rel);
        if dir.exists() {
            fs::remove_dir_all(&dir).unwrap();
        }
        fs::create_dir_all(&dir).unwrap();
        for (p, c) in files {
            let f = dir.join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, c).unwrap();
        }
        for (p, target) in links {
            let l = dir.join(p);
            fs::create_dir_all(l.parent().unwrap()).unwrap();
            symlink(distributor::source::relative_link_target(p, target), l).unwrap();
        }
        distributor::source::write_manifest(&dir, id, created_at).expect("manifest");
        dir
    }

    /// Runs the binary with a cleared environment.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// Runs the binary with a cleared environment plus `env`.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_distributor"));
        cmd.args(args)
            .env_clear()
            .env("HOME", self.path("home"))
            .env("USER", "tester")
            .env("DISTRIBUTOR_ACTOR", "tester")
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DISTRIBUTOR_JOURNAL", self.journal())
            .current_dir(&self.root);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out: Output = cmd.output().expect("run distributor");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs the binary like [`Env::run_env`] but without `DISTRIBUTOR_JOURNAL`, so the
    /// journal location falls through to `journal.path`, `XDG_STATE_HOME` or `HOME`.
    pub fn run_env_without_journal(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_distributor"));
        cmd.args(args)
            .env_clear()
            .env("HOME", self.path("home"))
            .env("USER", "tester")
            .env("DISTRIBUTOR_ACTOR", "tester")
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .current_dir(&self.root);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out: Output = cmd.output().expect("run distributor");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `publish --json --config C --source B` plus extra args.
    pub fn publish(&self, config: &Path, bundle: &Path, extra: &[&str]) -> Run {
        let mut args = vec![
            "publish",
            "--json",
            "--config",
            config.to_str().unwrap(),
            "--source",
            bundle.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// `plan --json --config C --source B` plus extra args.
    pub fn plan(&self, config: &Path, bundle: &Path, extra: &[&str]) -> Run {
        let mut args = vec![
            "plan",
            "--json",
            "--config",
            config.to_str().unwrap(),
            "--source",
            bundle.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// Whether the bundle path at `bundle` holds any staging entry in
    /// `.distributor/staging/` (which, once made, stays, empty, between operations).
    pub fn staging_left(&self, bundle: &str) -> bool {
        fs::read_dir(self.path(&format!("{bundle}/.distributor/staging")))
            .is_ok_and(|mut d| d.next().is_some())
    }

    /// Every path under `rel` (files, symlinks with their targets, dirs), sorted, with file
    /// contents: a byte-level snapshot to compare before and after (a lock file's record of
    /// its last holder shown as `<lock record>`).
    pub fn snapshot(&self, rel: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let base = self.path(rel);
        if fs::symlink_metadata(&base).is_ok() {
            walk(&base, &base, &mut out);
        }
        out.sort();
        out
    }

    /// [`Env::snapshot`] without the bundle paths' lock files (a refused or failed writing
    /// run takes the lock, creating the file, before it finds out it may not write) and
    /// without distributor's record directories `.distributor/` (the destination log:
    /// `tests/test_log.rs` checks it).
    pub fn snapshot_unlocked(&self, rel: &str) -> Vec<(String, String)> {
        self.snapshot(rel)
            .into_iter()
            .filter(|(p, _)| !p.ends_with(".distributor.lock") && !is_record(p))
            .collect()
    }
}

/// Whether `rel` is in one of distributor's record directories (`.distributor/`, at any
/// depth: each bundle path has its own).
pub fn is_record(rel: &str) -> bool {
    rel == ".distributor"
        || rel.starts_with(".distributor/")
        || rel.ends_with("/.distributor")
        || rel.contains("/.distributor/")
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            out.push((rel, format!("-> {}", fs::read_link(&p).unwrap().display())));
        } else if ft.is_dir() {
            out.push((rel.clone(), "<dir>".into()));
            walk(base, &p, out);
        } else if is_record(&rel) && rel.contains(".distributor/log/") {
            // A log entry names its operation and times: what differs between two runs
            // of one scenario.
            out.push((rel, "<log entry>".into()));
        } else if p.file_name().is_some_and(|n| n == ".distributor.lock") {
            // Its content says who held the lock last (host, pid, time): it changes with
            // every locked run, and is not content any test protects.
            out.push((rel, "<lock record>".into()));
        } else {
            out.push((
                rel,
                String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned(),
            ));
        }
    }
}

/// Whether a bundle-relative path is one of distributor's own files: the state file, the
/// lock file, or the record directory `.distributor/` and what it holds (SPEC §17).
pub fn is_own(p: &str) -> bool {
    p == ".distributor.json"
        || p == ".distributor.lock"
        || p == ".distributor"
        || p.starts_with(".distributor/")
}

/// Gives what a test planted under a bundle path's `.distributor/` the modes distributor's
/// own records have (SPEC §17: directories 0700, files 0600), as if distributor's uid
/// (the test's) wrote them, so the checks that come after trust are what is tested. The
/// content below an operation's `new/` and `old/` (published content, moved or staged)
/// keeps its mode.
pub fn as_records(bundle: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fn set(p: &Path, depth: usize) {
        let Ok(md) = fs::symlink_metadata(p) else {
            return;
        };
        if md.file_type().is_symlink() {
            return;
        }
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let mode = if md.is_dir() { 0o700 } else { 0o600 };
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
        // .distributor (0) / staging (1) / <op> (2) / new|old (3) / bucket (4)
        if md.is_dir() && depth < 4 && !(depth == 3 && name.as_deref() == Some("old")) {
            for e in fs::read_dir(p).unwrap() {
                let e = e.unwrap().path();
                if depth == 3 && !fs::symlink_metadata(&e).is_ok_and(|m| m.is_dir()) {
                    continue;
                }
                set(&e, depth + 1);
            }
        }
    }
    set(&bundle.join(".distributor"), 0);
}
