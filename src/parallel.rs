//! A fallible map over a slice on several threads, for the per-file work of a publication:
//! checking the source's files, probing the destination, staging copies. Such work waits
//! on the kernel (path lookups, inode allocation) or on hashing, and a second core halves
//! it.
//!
//! The result never depends on how the threads interleave: outputs come back in input
//! order, and when items fail, the error returned is the one of the first failing item in
//! input order. Every item before it is always processed; items after it may be skipped.

use crate::error::Result;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Most threads a map over local files uses (reading a source bundle, or a destination
/// on the local backend, which says so as its concurrency): past this the disk, not the
/// cores, is the limit.
pub(crate) const LOCAL_THREADS: usize = 4;

/// Fewer items than this are not worth a thread.
const MIN_PER_THREAD: usize = 32;

/// Most consecutive items one thread takes at a time. Items come in path order, so a run
/// mostly stays in one directory, and two threads creating files in one directory would
/// queue on its lock.
const MAX_RUN: usize = 256;

/// Threads worth using for `n` items of local file work.
pub(crate) fn threads_for(n: usize) -> usize {
    cores().min(LOCAL_THREADS).min(n / MIN_PER_THREAD).max(1)
}

/// Threads for `n` items each worth a thread (creating a file costs more than starting a
/// thread), on storage that suits `max` at once: a local filesystem's few, more for
/// storage that waits on a network.
pub(crate) fn threads_up_to(max: usize, n: usize) -> usize {
    max.min(n).max(1)
}

/// The cores this process may use, asked once: the standard library reads the cgroup's
/// CPU quota files on every call, and a publication asks once per parallel step.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |p| p.get()))
}

/// `f` over every item, on as many threads as the count of items is worth (see
/// [`threads_for`]). Each thread gets its own scratch value from `scratch` (a copy buffer,
/// a cache) that `f` may use freely.
pub(crate) fn try_map<'a, T, R, S>(
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
pub(crate) fn try_map_on<'a, T, R, S>(
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
    let run = run_len(items.len(), threads);
    // Each result goes straight to its item's slot: one allocation for all of them, in
    // input order, whatever thread computed it.
    let mut slots: Vec<Option<Result<R>>> =
        std::iter::repeat_with(|| None).take(items.len()).collect();
    let first_error = AtomicUsize::new(usize::MAX);
    {
        // Runs are handed out in increasing order: once past a failed item, every later
        // run is past it too.
        let runs = Mutex::new(slots.chunks_mut(run).zip(items.chunks(run)).enumerate());
        let work = || {
            let mut s = scratch();
            loop {
                let Some((k, (out, part))) = runs.lock().unwrap_or_else(|p| p.into_inner()).next()
                else {
                    break;
                };
                let start = k * run;
                if start > first_error.load(Ordering::Relaxed) {
                    break;
                }
                for (j, (slot, item)) in out.iter_mut().zip(part).enumerate() {
                    let i = start + j;
                    if i > first_error.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = f(item, &mut s);
                    if r.is_err() {
                        first_error.fetch_min(i, Ordering::Relaxed);
                    }
                    *slot = Some(r);
                }
            }
        };
        on_threads(threads, work);
    }
    let mut out = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            Some(Ok(r)) => out.push(r),
            Some(Err(e)) => return Err(e),
            None => unreachable!("every item before the first failing one is processed"),
        }
    }
    Ok(out)
}

/// Whether `f` holds for every item, on as many threads as the count of items is worth;
/// stops looking once it does not. Nothing is stored per item.
pub(crate) fn all<T: Sync>(items: &[T], f: impl Fn(&T) -> bool + Sync) -> bool {
    let threads = threads_for(items.len());
    if threads == 1 {
        return items.iter().all(f);
    }
    let run = run_len(items.len(), threads);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || {
        while !failed.load(Ordering::Relaxed) {
            let start = next.fetch_add(run, Ordering::Relaxed);
            if start >= items.len() {
                break;
            }
            if !items[start..(start + run).min(items.len())].iter().all(&f) {
                failed.store(true, Ordering::Relaxed);
            }
        }
    };
    on_threads(threads, work);
    !failed.into_inner()
}

/// How many consecutive items a thread takes at a time: about eight runs per thread, so
/// that the threads finish close together, and at most [`MAX_RUN`].
fn run_len(items: usize, threads: usize) -> usize {
    (items / (threads * 8)).clamp(1, MAX_RUN)
}

/// Runs `work` on `threads` threads, the caller's being one of them, and waits for all of
/// them; a panic in one is resumed on the caller's thread. The caller works instead of
/// waiting: one thread fewer to start, and one wake-up fewer to wait for (on a busy
/// machine each is a turn in the run queue).
fn on_threads(threads: usize, work: impl Fn() + Sync) {
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(&work)).collect();
        work();
        for h in handles {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
    });
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
    fn all_holds_only_when_every_item_passes() {
        let items: Vec<usize> = (0..5000).collect();
        assert!(all(&items, |&i| i < 5000));
        for bad in [0, 1234, 4999] {
            assert!(!all(&items, |&i| i != bad), "{bad}");
        }
        assert!(all(&items[..0], |_| false));
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
