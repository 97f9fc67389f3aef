fn main() -> std::process::ExitCode {
    distributor::cli::main()
}
/// A republication allocates per file on several threads; mimalloc spares most of the
/// page faults and lock traffic of the system allocator (see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
