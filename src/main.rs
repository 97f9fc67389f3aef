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

/// mimalloc's option `allow_thp` (`mi_option_allow_thp` in the version 3 `mimalloc.h`
/// that libmimalloc-sys builds by default; 37 in version 2). No constant in the crate.
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Keeps the resident memory of a large publication near what it uses (the scale issue:
/// see docs/performance.md). Freed memory goes back to the kernel at once, not a second
/// later (mimalloc's default: a run of a million files frees hundreds of megabytes in
/// steps, and held them all). And nothing at exit: by default mimalloc, linked statically,
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
}

/// No transparent huge pages, which make each page touched 2 MiB of resident memory, and
/// whose first fault clears 2 MiB: with them, mimalloc advises its 1 GiB arena
/// `MADV_HUGEPAGE` as it initialises, before `main`, and the first allocation (the
/// runtime's, before `main` too) cost a 2 MiB clear, a third of the CPU time of
/// `distributor --version` (see docs/performance.md). Set in a constructor that runs
/// before mimalloc's (its `mi_process_attach` has priority 101): mimalloc then disables
/// THP for the process itself (`prctl(PR_SET_THP_DISABLE)` in its `_mi_prim_mem_init`)
/// and advises nothing; a policy that forbids the `prctl` is no error.
#[used]
#[unsafe(link_section = ".init_array.00100")]
static NO_HUGE_PAGES: extern "C" fn() = no_huge_pages;

extern "C" fn no_huge_pages() {
    // SAFETY: as in `tune_memory`: a store of an option's value, in a constructor, before
    // any thread and before mimalloc's own initialisation reads it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
}
