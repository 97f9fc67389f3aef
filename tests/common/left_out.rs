//! What a `cargo test` run left out, told at its end (README, "Tests").
//!
//! Two kinds of test do not run everywhere:
//!
//! - tests that drive the binary's failpoints are `#[ignore]`d without the `failpoints`
//!   feature: [`failpoint_ignored`] counts them in the sources;
//! - tests that need something outside the repository (an S3 server, Azurite, a tmpfs
//!   mount, a Prometheus) return early, loudly, when it is missing: [`skip`] prints the
//!   loud line and records the skip under `target/tmp/left-out/<run>/`, where `<run>`
//!   names the `cargo` process that runs the test binaries.
//!
//! `tests/zz_left_out.rs`, the last test target `cargo test` runs, reads both and prints
//! the summary. Shared by the runner (`mod common`) and that target (`#[path]`).

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where skips are recorded, one directory per `cargo` run.
pub fn records_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("left-out")
}

/// This test process's run: its parent's pid and start time (field 22 of
/// `/proc/<pid>/stat`), so that a reused pid names another run. Every test binary of one
/// `cargo test` has the same parent.
pub fn run_key() -> String {
    let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    format!("{ppid}-{}", start_time(ppid).unwrap_or_default())
}

/// A process's start time, in clock ticks since boot, if it runs.
pub fn start_time(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).map(str::to_string)
}

/// Skips the current test: prints `*** SKIPPED: <test> needs <what> ... ***` to the real
/// stderr (the harness captures `eprintln!` of a passing test, not this; one write, so
/// parallel tests' lines do not interleave) and records it for the run's summary.
/// `what` is the reason as the summary groups it ("moto_server", "a tmpfs mount (root)");
/// `detail` says why it is missing and how to get it.
pub fn skip(what: &str, detail: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>").to_string();
    let line = format!("\n*** SKIPPED: {test} needs {what}: {detail} ***\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    let dir = records_root().join(run_key());
    if std::fs::create_dir_all(&dir).is_ok() {
        let file: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let _ = std::fs::write(dir.join(file), format!("{what}\n{test}\n"));
    }
}

/// How many tests in `tests/` and `src/` are ignored without the `failpoints` feature (a
/// `cfg_attr` of `not(feature = "failpoints")` that ignores them).
pub fn failpoint_ignored() -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["tests", "src"] {
        rust_files(&root.join(dir), &mut files);
    }
    files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let flat: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            let attrs = flat
                .matches("#[cfg_attr(not(feature=\"failpoints\"),ignore")
                .count();
            // `per_store!` (tests/test_s3.rs) holds the attribute once in its definition
            // and makes two tests (`::s3`, `::azure`) of each entry it marks with the
            // word failpoints (its definition's own pattern has the mark once too). The
            // needles are split so that this file does not match them.
            if flat.contains(concat!("macro_rules!", "per_store{")) {
                let mark = concat!(",", "failpoints;");
                let entries = flat.matches(mark).count().saturating_sub(1);
                attrs.saturating_sub(1) + 2 * entries
            } else {
                attrs
            }
        })
        .sum()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
