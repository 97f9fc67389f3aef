//! Failpoints for crash tests. Compiled to nothing unless the `failpoints` cargo feature
//! is on; then `DISTRIBUTOR_FAILPOINT=<name>[:<k>]` aborts the process (no unwinding, no
//! cleanup, like a kill -9) the k-th time (default 1st) execution reaches `<name>`.

/// Every failpoint compiled into the executor and recovery, in execution order. A test
/// checks that each one is exercised.
pub const ALL: &[&str] = &[
    "after_journal_append",
    "during_staging",
    "after_staging",
    "during_move_aside",
    "after_move_aside",
    "during_placement",
    "after_placement",
    "after_links",
    "after_state_write",
    "after_journal_commit",
    "during_cleanup",
    "recover_after_lock",
    "recover_during_undo",
    "recover_before_event",
];

/// Marks that execution reached failpoint `name`.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let Ok(spec) = std::env::var("DISTRIBUTOR_FAILPOINT") else {
        return;
    };
    let (want, k) = match spec.split_once(':') {
        Some((n, k)) => (n.to_string(), k.parse::<u64>().unwrap_or(1)),
        None => (spec.clone(), 1),
    };
    if let Ok(log) = std::env::var("DISTRIBUTOR_FAILPOINT_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{name}");
        }
    }
    if want == name && COUNT.fetch_add(1, Ordering::SeqCst) + 1 == k {
        eprintln!("failpoint {name} hit: aborting");
        std::process::abort();
    }
}

/// Marks that execution reached failpoint `name` (no-op without the `failpoints` feature).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) {}
