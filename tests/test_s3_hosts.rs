//! Many hosts on one s3 prefix (SPEC §14), against the serial moto server (one request at
//! a time, so conditional writes are atomic as on S3; tests/common/s3.rs): the serial
//! server creates a key once under concurrent `If-None-Match: *` PUTs, which threaded
//! `moto_server` does not (so race tests must not use it).

use crate::common::s3::{Moto, require_moto, require_serial_moto};
use std::sync::Barrier;
use std::time::Instant;

// ---------------------------------------------------------------------------------------
// The serial server is atomic.

/// `threads` concurrent `If-None-Match: *` PUTs of one fresh key, each with its own body
/// of `size` bytes, `rounds` times. What went wrong, one line per round: anything but
/// exactly one 200 and 412 for the rest, or a key that does not hold the winner's body.
///
/// The bodies are large on purpose: moto keeps a body above ~5 MiB in a temporary file,
/// and writing it releases Python's GIL between moto's check of the condition and its
/// store of the object, which is what lets a threaded server answer 200 twice.
fn concurrent_creates(moto: &Moto, threads: usize, rounds: usize, size: usize) -> Vec<String> {
    let bucket = moto.fresh_bucket();
    let mut problems = Vec::new();
    for round in 0..rounds {
        let key = format!("race/{round}");
        let barrier = Barrier::new(threads);
        let statuses: Vec<u16> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let (barrier, key, bucket) = (&barrier, &key, &bucket);
                    s.spawn(move || {
                        let body = vec![b'a' + i as u8; size];
                        barrier.wait();
                        moto.raw_object("PUT", bucket, key, &[("If-None-Match", "*")], &body)
                            .status
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = (0..threads).filter(|&i| statuses[i] == 200).collect();
        let others_refused = statuses.iter().all(|&s| s == 200 || s == 412);
        let stored = moto.get(&bucket, &key).map(|b| (b[0], b.len()));
        let winner_stored = winners.len() == 1 && stored == Some((b'a' + winners[0] as u8, size));
        if winners.len() != 1 || !others_refused || !winner_stored {
            problems.push(format!(
                "round {round}: statuses {statuses:?}; the key holds {}",
                match stored {
                    Some((c, n)) => format!("{n} bytes of {:?}", c as char),
                    None => "nothing".into(),
                }
            ));
        }
    }
    problems
}

/// The property the race test below stands on. Threaded `moto_server` (moto 5.2.5) fails
/// this same check: with these numbers (8 threads, 6 MB bodies; 20 rounds) it broke 14,
/// 15, 16 and 18 of 20 rounds in four runs: two to seven 200s in one round, and 500s
/// ("read of closed file": a winner's buffer closed under it by the next winner). With
/// 1000-byte bodies it broke 0 of 20 in each of three runs: the race needs the GIL to be
/// released between moto's check and its store. `threaded_moto_server_is_not_atomic`
/// (ignored) runs it there.
#[test]
fn the_serial_server_creates_a_key_once_under_concurrent_if_none_match() {
    let moto = require_serial_moto!();
    assert!(moto.serial);
    let started = Instant::now();
    let problems = concurrent_creates(moto, 8, 12, 6_000_000);
    println!(
        "serial moto: 12 rounds of 8 concurrent creates in {:?}",
        started.elapsed()
    );
    assert!(
        problems.is_empty(),
        "the serial server let concurrent conditional creates through:\n{}",
        problems.join("\n")
    );
}

/// A demonstration, not a check (it would be flaky): how often threaded `moto_server`
/// lets concurrent `If-None-Match: *` creates of one key through. Run it with
/// `cargo test --all-features --test runner threaded_moto_server -- --ignored --nocapture`.
#[test]
#[ignore = "a demonstration of a race in moto_server; prints, asserts nothing"]
fn threaded_moto_server_is_not_atomic() {
    let moto = require_moto!();
    assert!(!moto.serial);
    let problems = concurrent_creates(moto, 8, 20, 6_000_000);
    println!(
        "threaded moto_server: {} of 20 rounds broke:\n{}",
        problems.len(),
        problems.join("\n")
    );
}
