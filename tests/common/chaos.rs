//! Several journals on one destination (SPEC §13) and the chaos loop: a small fixed-seed
//! PRNG written inline (no crate), `recover` and `history` against a chosen journal, and
//! the check that no operation in any journal is left for a person.

use super::{Env, Run};
use std::path::Path;

/// Statuses of an operation that is not finished: `recover` still has work (or a person
/// has, for `diverged`). Every other status is final.
pub const UNFINISHED: &[&str] = &["in_progress", "committed", "diverged"];

/// xorshift64*, seeded through splitmix64 so that any seed (0 included) gives a good
/// stream. Deterministic: the same seed gives the same choices on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 0x2545_F491_4F6C_DD1D } else { z })
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// `recover --json --config C --journal J` with extra environment.
pub fn recover_with(env: &Env, cfg: &Path, journal: &Path, extra: &[(&str, &str)]) -> Run {
    env.run_env(
        &[
            "recover",
            "--json",
            "--config",
            cfg.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ],
        extra,
    )
}

/// Every operation of journal `journal` (`history --json --journal`): id and status,
/// newest first. A journal that does not exist has none.
pub fn history(env: &Env, journal: &Path) -> Vec<(String, String)> {
    if !journal.exists() {
        // `history --journal` refuses a path with no journal (a typo is not an empty
        // history, SPEC §16).
        return Vec::new();
    }
    let r = env.run(&["history", "--json", "--journal", journal.to_str().unwrap()]);
    r.expect_code(0);
    r.json()["operations"]
        .as_array()
        .unwrap_or_else(|| panic!("history --json has no operations: {}", r.stdout))
        .iter()
        .map(|o| {
            (
                o["operation_id"].as_str().unwrap().to_string(),
                o["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The status journal `journal` gives operation `op` (None: unknown to it).
pub fn status_in(env: &Env, journal: &Path, op: &str) -> Option<String> {
    history(env, journal)
        .into_iter()
        .find(|(id, _)| id == op)
        .map(|(_, s)| s)
}

/// SPEC §13: no operation in any of `journals` is left `in_progress`, `committed` or
/// `diverged`.
pub fn assert_nothing_needs_a_person(env: &Env, journals: &[&Path], ctx: &str) {
    for j in journals {
        let left: Vec<(String, String)> = history(env, j)
            .into_iter()
            .filter(|(_, s)| UNFINISHED.contains(&s.as_str()))
            .collect();
        assert!(
            left.is_empty(),
            "{ctx}: journal {} still has unfinished operations: {left:?}",
            j.display()
        );
    }
}

/// The operations of a recover report: (id, outcome, message).
pub fn recovered(r: &Run) -> Vec<(String, String, String)> {
    r.json()["operations"]
        .as_array()
        .unwrap_or_else(|| panic!("recover --json has no operations: {}", r.stdout))
        .iter()
        .map(|o| {
            (
                o["operation_id"].as_str().unwrap_or_default().to_string(),
                o["outcome"].as_str().unwrap_or_default().to_string(),
                o["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Whether `strace` can trace here (installed, and ptrace allowed).
pub fn strace_works() -> bool {
    std::process::Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs the binary like [`Env::run_env`], under `strace -f` with `strace_args` before the
/// binary (e.g. `-e inject=unlinkat:signal=KILL:when=3`).
pub fn run_traced(env: &Env, strace_args: &[&str], args: &[&str]) -> Run {
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq"])
        .args(strace_args)
        .arg(env!("CARGO_BIN_EXE_distributor"))
        .args(args)
        .env_clear()
        .env("HOME", env.path("home"))
        .env("USER", "tester")
        .env("DISTRIBUTOR_ACTOR", "tester")
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DISTRIBUTOR_JOURNAL", env.journal())
        .current_dir(&env.root)
        .output()
        .expect("run strace");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// How many times a run of `args` makes each of `syscalls` (all threads together).
pub fn count_syscalls(env: &Env, syscalls: &[&str], args: &[&str]) -> Vec<(String, u64)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("strace.log");
    let trace = format!("trace={}", syscalls.join(","));
    let r = run_traced(env, &["-o", log.to_str().unwrap(), "-e", &trace], args);
    r.expect_code(0);
    let text = std::fs::read_to_string(&log).unwrap();
    syscalls
        .iter()
        .map(|s| {
            let call = format!(" {s}(");
            let n = text.lines().filter(|l| l.contains(&call)).count() as u64;
            (s.to_string(), n)
        })
        .collect()
}

/// Runs `args` under strace, SIGKILLed at the `n`-th call of `syscall` (counted per
/// thread, as strace counts); the run is killed there or, when it makes fewer calls, ends
/// by itself.
pub fn run_killed_at(env: &Env, syscall: &str, n: u64, args: &[&str]) -> Run {
    let inject = format!("inject={syscall}:signal=KILL:when={n}");
    let trace = format!("trace={syscall}");
    run_traced(env, &["-o", "/dev/null", "-e", &trace, "-e", &inject], args)
}
