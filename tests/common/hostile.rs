//! Hostile-neighbour support (SPEC §13): runs the binary stopped at a failpoint
//! (`DISTRIBUTOR_FAILPOINT=<name>:<k>=pause`), lets the test act as a local user who can
//! write inside the destination (swap a directory for a symlink) at exactly that step, then
//! lets the run go on; finds, from a calibration run's failpoint log, the I/O failpoint
//! that sits between a step's check and its act; and snapshots everything outside the
//! destination to prove nothing there changed.

use super::{Env, Run};
use std::fs;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a run may take to reach its pause.
pub const PAUSE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a resumed run may take to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

impl Env {
    /// Spawns the binary with the cleared environment of [`Env::run_env`] plus `env`;
    /// stdin closed, stdout and stderr piped.
    pub fn spawn_env(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_distributor"));
        cmd.args(args)
            .env_clear()
            .env("HOME", self.path("home"))
            .env("USER", "tester")
            .env("DISTRIBUTOR_ACTOR", "tester")
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DISTRIBUTOR_JOURNAL", self.journal())
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn distributor")
    }

    /// Runs the binary like [`Env::run_env`] with `DISTRIBUTOR_FAILPOINT_LOG` set, and
    /// returns the run and the failpoints it reached, in order.
    pub fn run_logged(&self, args: &[&str], env: &[(&str, &str)]) -> (Run, Vec<String>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("failpoints.log");
        let log_s = log.to_str().unwrap().to_string();
        let mut all: Vec<(&str, &str)> = env.to_vec();
        all.push(("DISTRIBUTOR_FAILPOINT_LOG", &log_s));
        let run = self.run_env(args, &all);
        let text = fs::read_to_string(&log).unwrap_or_default();
        (run, text.lines().map(str::to_string).collect())
    }
}

/// The ordinal (1-based, among all hits of `io`) of the hit of I/O failpoint `io` that
/// follows the `k`-th hit of step failpoint `step` before any other step failpoint is hit:
/// the moment between the step's check of a path and its act on it. `None` when the step
/// is hit fewer than `k` times or does its work without passing `io`.
pub fn io_window(log: &[String], step: &str, k: u64, io: &str) -> Option<u64> {
    let mut seen = 0;
    let mut io_hits = 0;
    let mut inside = false;
    for name in log {
        if name == io {
            io_hits += 1;
            if inside {
                return Some(io_hits);
            }
        } else if name == step && !inside {
            seen += 1;
            inside = seen == k;
        } else if !name.starts_with("io_") && inside {
            return None;
        }
    }
    None
}

/// A run of the binary stopped at a `pause` failpoint. Killed (by its own pid) if dropped
/// before it exits, so a failing test never leaves it waiting.
pub struct PausedRun {
    child: Child,
    dir: tempfile::TempDir,
    name: String,
    spec: String,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

fn reader(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

impl PausedRun {
    /// Spawns `args` with `DISTRIBUTOR_FAILPOINT=<spec>=pause` (spec `<name>[:<k>]`) plus
    /// `env`, and waits until it stands at that failpoint. Panics, with the run's output,
    /// when it exits first or does not get there within [`PAUSE_TIMEOUT`].
    pub fn start(env: &Env, args: &[&str], spec: &str, extra: &[(&str, &str)]) -> PausedRun {
        let dir = tempfile::tempdir().expect("pause dir");
        let name = spec.split(':').next().unwrap().to_string();
        let fp = format!("{spec}=pause");
        let pause_dir = dir.path().to_str().unwrap().to_string();
        let mut all: Vec<(&str, &str)> = extra.to_vec();
        all.push(("DISTRIBUTOR_FAILPOINT", &fp));
        all.push(("DISTRIBUTOR_FAILPOINT_PAUSE", &pause_dir));
        let mut child = env.spawn_env(args, &all);
        let stdout = child.stdout.take().map(reader);
        let stderr = child.stderr.take().map(reader);
        let mut run = PausedRun {
            child,
            dir,
            name,
            spec: spec.to_string(),
            stdout,
            stderr,
        };
        run.wait_paused();
        run
    }

    /// The paused process's id (to stop it with a signal, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn marker(&self, suffix: &str) -> PathBuf {
        self.dir.path().join(format!("{}.{suffix}", self.name))
    }

    fn wait_paused(&mut self) {
        let start = Instant::now();
        let paused = self.marker("paused");
        loop {
            if paused.exists() {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let run = self.collect(status.code().unwrap_or(-1));
                panic!(
                    "the run exited ({status}) before it paused at {}: the race cannot be set up\nstdout:\n{}\nstderr:\n{}",
                    self.spec, run.stdout, run.stderr
                );
            }
            if start.elapsed() > PAUSE_TIMEOUT {
                let _ = self.child.kill();
                let status = self.child.wait().expect("wait");
                let run = self.collect(status.code().unwrap_or(-1));
                panic!(
                    "the run did not pause at {} within {PAUSE_TIMEOUT:?}; killed it\nstdout:\n{}\nstderr:\n{}",
                    self.spec, run.stdout, run.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn collect(&mut self, code: i32) -> Run {
        let join = |h: Option<JoinHandle<String>>| h.map(|h| h.join().unwrap()).unwrap_or_default();
        Run {
            code,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }

    /// Lets the run go on and waits (at most [`EXIT_TIMEOUT`]) for it to exit.
    pub fn resume(mut self) -> Run {
        fs::write(self.marker("resume"), b"").expect("write resume marker");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return self.collect(status.code().unwrap_or(-1));
            }
            if start.elapsed() > EXIT_TIMEOUT {
                let _ = self.child.kill();
                let status = self.child.wait().expect("wait");
                let run = self.collect(status.code().unwrap_or(-1));
                panic!(
                    "the run resumed at {} did not exit within {EXIT_TIMEOUT:?}; killed it\nstdout:\n{}\nstderr:\n{}",
                    self.spec, run.stdout, run.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for PausedRun {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `args` paused at `spec` (`<name>[:<k>]`), does `attack` while it stands there, lets
/// it go on and returns how it ended.
pub fn race(
    env: &Env,
    args: &[&str],
    spec: &str,
    extra: &[(&str, &str)],
    attack: impl FnOnce(),
) -> Run {
    let paused = PausedRun::start(env, args, spec, extra);
    attack();
    paused.resume()
}

/// What a hostile neighbour does: renames the real directory `dir` away (to
/// `<dir>.moved`, beside it) and puts a symlink to `target` in its place.
pub fn swap_for_symlink(dir: &Path, target: &Path) {
    let moved = PathBuf::from(format!("{}.moved", dir.display()));
    fs::rename(dir, &moved).unwrap_or_else(|e| panic!("rename {} away: {e}", dir.display()));
    symlink(target, dir).unwrap_or_else(|e| panic!("symlink {}: {e}", dir.display()));
}

/// Every path of the env's tree outside the destination `dest` (root-relative), and outside
/// the journal, with contents ([`Env::snapshot`], symlinks not followed).
pub fn outside(env: &Env, dest: &str) -> Vec<(String, String)> {
    let below = format!("{dest}/");
    env.snapshot("")
        .into_iter()
        .filter(|(p, _)| p != dest && !p.starts_with(&below) && !p.starts_with("journal.sqlite3"))
        .collect()
}

/// Every file under `rel` in the snapshot's words, symlinks not followed: the contents of
/// the regular files only.
pub fn contents_under(env: &Env, rel: &str) -> Vec<String> {
    env.snapshot(rel)
        .into_iter()
        .filter(|(_, c)| c != "<dir>" && !c.starts_with("-> "))
        .map(|(_, c)| c)
        .collect()
}

/// The neighbour's uid and gid (`nobody`): a local user who may write where a test gives
/// it write access, never distributor's.
pub const NEIGHBOUR: u32 = 65534;

/// Runs `script` (sh) in the env's root as the neighbour ([`NEIGHBOUR`], through
/// `setpriv`); its exit status.
pub fn as_neighbour(env: &Env, script: &str) -> bool {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={NEIGHBOUR}"),
            &format!("--regid={NEIGHBOUR}"),
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .current_dir(env.path(""))
        .output()
        .expect("setpriv");
    if !out.status.success() {
        eprintln!(
            "the neighbour's `{script}` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

/// Entries the neighbour owns in a directory the neighbour cannot write (SPEC §17:
/// distributor never leaves one there), root-relative; `given` lists the root-relative
/// paths the test itself gave the neighbour.
pub fn misplaced_neighbour_entries(env: &Env, given: &[&str]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, base: &Path, given: &[PathBuf], out: &mut Vec<String>) {
        let Ok(md) = fs::symlink_metadata(dir) else {
            return;
        };
        let writable = md.mode() & 0o002 != 0 || (md.uid() == NEIGHBOUR && md.mode() & 0o200 != 0);
        let Ok(rd) = fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            let Ok(emd) = fs::symlink_metadata(&p) else {
                continue;
            };
            if emd.uid() == NEIGHBOUR && !writable && !given.contains(&p) {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
            if emd.is_dir() {
                walk(&p, base, given, out);
            }
        }
    }
    let given: Vec<PathBuf> = given.iter().map(|g| env.path(g)).collect();
    let mut out = Vec::new();
    walk(&env.root, &env.root, &given, &mut out);
    out
}
