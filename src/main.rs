fn main() -> std::process::ExitCode {
    tune_memory();
    distributor::cli::main()
}

/// A republication allocates per file on several threads; mimalloc spares most of the
/// page faults and lock traffic of the system allocator (see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's option `purge_delay` (`mi_option_purge_delay` in its `mimalloc.h`, the
/// same index in versions 2 and 3; the crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc's option `destroy_on_exit` (`mi_option_destroy_on_exit`, the same index in
/// versions 2 and 3; no constant in the crate either). Above 1, mimalloc does nothing
/// when the process exits (`_mi_auto_process_done` in its `init.c`).
const MI_OPTION_DESTROY_ON_EXIT: libmimalloc_sys::mi_option_t = 22;

/// Keeps the resident memory of a large publication near what it uses (the scale issue:
/// see docs/performance.md). Freed memory goes back to the kernel at once, not a second
/// later (mimalloc's default: a run of a million files frees hundreds of megabytes in
/// steps, and held them all); and no transparent huge pages, which make each page touched
/// 2 MiB of resident memory. And nothing at exit: by default mimalloc, linked statically,
/// collects its heap when the process ends, which with immediate purging is one `madvise`
/// per page of the heap (24 for `--version`, about 30 for a small publication), work the
/// kernel does anyway when it tears the process down.
fn tune_memory() {
    // SAFETY: `mi_option_set` only stores an option's value (atomically); it is called
    // before any other thread exists, with option indexes of the linked mimalloc.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_DESTROY_ON_EXIT, 2);
    };
    // Not allowed (a container's seccomp policy) is not an error: the default stays.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}
