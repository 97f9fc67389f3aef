//! The last thing `cargo test` prints: how many tests this run left out, and why.
//!
//! Not a test harness (`harness = false` in Cargo.toml): cargo runs the integration test
//! targets in the order of their names, after the unit tests, so this target, named to
//! sort last, runs after `tests/runner.rs`; the library has no doc tests to come after it
//! (`doctest = false`). It counts the tests ignored without the `failpoints` feature in
//! the sources, and reads the skips the runner recorded for this `cargo` run
//! (`tests/common/left_out.rs`).

#[path = "common/left_out.rs"]
mod left_out;

use std::collections::BTreeMap;

fn main() {
    // `cargo test -- --list` asks every target for its tests: this one has none.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut lines = Vec::new();
    if !cfg!(feature = "failpoints") {
        let n = left_out::failpoint_ignored();
        lines.push(format!(
            "{n} tests ignored: they drive the binary's failpoints, built only with the \
             failpoints feature (cargo test --all-features runs them)"
        ));
    }
    let root = left_out::records_root();
    let mine = root.join(left_out::run_key());
    let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(&mine) {
        for e in rd.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let mut it = text.lines();
            let (what, test) = (it.next().unwrap_or("?"), it.next().unwrap_or("?"));
            by_reason
                .entry(what.to_string())
                .or_default()
                .push(test.to_string());
        }
    }
    for (what, tests) in &by_reason {
        lines.push(format!(
            "{} tests skipped (they return early and count as passed): they need {what}; \
             see the SKIPPED lines above and README's \"Tests\"",
            tests.len()
        ));
    }
    // This run's records are told; those of runs whose cargo is gone (a runner run
    // alone, an interrupted run) are dropped.
    if let Ok(rd) = std::fs::read_dir(&root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let alive = name.split_once('-').is_some_and(|(pid, start)| {
                pid.parse::<i32>()
                    .ok()
                    .and_then(left_out::start_time)
                    .is_some_and(|s| s == start)
            });
            if e.path() == mine || !alive {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    if lines.is_empty() {
        println!("\nleft out of this run: nothing; every test ran\n");
    } else {
        println!("\nleft out of this run:");
        for l in lines {
            println!("  - {l}");
        }
        println!();
    }
}
