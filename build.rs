use std::env;

fn main() {
    // Migrations are embedded with include_str!; rebuild when they change.
    println!("cargo:rerun-if-changed=migrations");
    // The binary's 57,000 relative relocations packed as RELR: 17 KB of relocation
    // records instead of 1.3 MB that the loader reads at every start (see
    // docs/performance.md). Needs a linker that knows the option (binutils >= 2.38, lld)
    // and glibc >= 2.36 where the binary runs.
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
