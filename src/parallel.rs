//! A fallible map over a slice on several threads, for the per-file work of a publication:
//! checking the source's files, probing the destination, staging copies. Such work waits
//! on the kernel (path lookups, inode allocation) or on hashing, and a second core halves
//! it.
//!
//! The result never depends on how the threads interleave: outputs come back in input
//! order, and when items fail, the error returned is the one of the first failing item in
//! input order. Every item before it is always processed; items after it may be skipped.

use crate::error::Result;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most threads any map uses; past this the disk, not the cores, is the limit.
pub const MAX_THREADS: usize = 4;

/// Fewer items than this are not worth a thread.
const MIN_PER_THREAD: usize = 32;

/// Most consecutive items one thread takes at a time. Items come in path order, so a run
/// mostly stays in one directory, and two threads creating files in one directory would
/// queue on its lock.
const MAX_RUN: usize = 256;

/// Threads worth using for `n` items.
pub fn threads_for(n: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(MAX_THREADS)
        .min(n / MIN_PER_THREAD)
        .max(1)
}

/// `f` over every item, on as many threads as the count of items is worth (see
/// [`threads_for`]). Each thread gets its own scratch value from `scratch` (a copy buffer,
/// a cache) that `f` may use freely.
pub fn try_map<'a, T, R, S>(
    items: &'a [T],
    scratch: impl Fn() -> S + Sync,
    f: impl Fn(&'a T, &mut S) -> Result<R> + Sync,
) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
{
    try_map_on(threads_for(items.len()), items, scratch, f)
}

/// [`try_map`] on `threads` threads (at most one per item), for callers whose items are
/// each worth a thread.
pub fn try_map_on<'a, T, R, S>(
    threads: usize,
    items: &'a [T],
    scratch: impl Fn() -> S + Sync,
    f: impl Fn(&'a T, &mut S) -> Result<R> + Sync,
) -> Result<Vec<R>>
where
    T: Sync,
    R: Send,
{
    let threads = threads.min(items.len()).max(1);
    if threads == 1 {
        let mut s = scratch();
        return items.iter().map(|item| f(item, &mut s)).collect();
    }
    let run = (items.len() / (threads * 8)).clamp(1, MAX_RUN);
    let next = AtomicUsize::new(0);
    let first_error = AtomicUsize::new(usize::MAX);
    let work = || {
        let mut s = scratch();
        let mut done: Vec<(usize, Result<R>)> = Vec::new();
        loop {
            let start = next.fetch_add(run, Ordering::Relaxed);
            // Runs are handed out in increasing order: once past a failed item, every later
            // run is past it too.
            if start >= items.len() || start > first_error.load(Ordering::Relaxed) {
                break;
            }
            let end = (start + run).min(items.len());
            for (i, item) in items[start..end]
                .iter()
                .enumerate()
                .map(|(k, t)| (start + k, t))
            {
                if i > first_error.load(Ordering::Relaxed) {
                    break;
                }
                let r = f(item, &mut s);
                if r.is_err() {
                    first_error.fetch_min(i, Ordering::Relaxed);
                }
                done.push((i, r));
            }
        }
        done
    };
    let mut done = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        let mut all = Vec::with_capacity(items.len());
        for h in handles {
            all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::collections::HashSet;
    use std::sync::Mutex;

    #[test]
    fn results_come_back_in_input_order() {
        let items: Vec<u64> = (0..5000).collect();
        let out = try_map(
            &items,
            || 0u64,
            |x, calls| {
                *calls += 1;
                Ok(x * 2)
            },
        )
        .unwrap();
        assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
    }

    #[test]
    fn the_first_failing_item_in_order_is_reported_and_everything_before_it_runs() {
        let items: Vec<usize> = (0..5000).collect();
        for _ in 0..20 {
            let seen = Mutex::new(HashSet::new());
            let err = try_map(
                &items,
                || (),
                |&i, _| {
                    seen.lock().unwrap().insert(i);
                    if i == 4000 || i == 1234 {
                        Err(Error::Failed(format!("item {i}")))
                    } else {
                        Ok(i)
                    }
                },
            )
            .unwrap_err();
            assert_eq!(
                err.to_string(),
                Error::Failed("item 1234".into()).to_string()
            );
            let seen = seen.into_inner().unwrap();
            assert!((0..=1234).all(|i| seen.contains(&i)));
        }
    }

    #[test]
    fn small_inputs_run_inline() {
        assert_eq!(threads_for(0), 1);
        assert_eq!(threads_for(MIN_PER_THREAD), 1);
        let tid = std::thread::current().id();
        let out = try_map(
            &[1, 2, 3],
            || (),
            |x, _| Ok((*x, std::thread::current().id())),
        )
        .unwrap();
        assert!(out.iter().all(|(_, t)| *t == tid));
    }
}
