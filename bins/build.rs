//! Links GCC's unwinder statically (`libgcc_eh.a`) into cairn's binaries on Linux with
//! glibc, instead of loading `libgcc_s.so` at every process start.
//!
//! A hook is a process started for every Claude Code event, so what a start costs counts.
//! Loading libgcc_s, whose constructor probes the CPU (slow in a VM, where each probe traps
//! to the hypervisor), was about 0.25 ms of a 2.4 ms hook here (BENCHMARKS.md, Hook).
//! Rust's own static builds use this same unwinder; with it first on the link line, the
//! `-lgcc_s` that std asks for is left unused and dropped (`--as-needed`). libc and libm
//! stay dynamic: a static glibc cannot resolve host names reliably, which the worker must.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    // Seen only when crt-static is set for the whole build (RUSTFLAGS or a target spec).
    // `cargo hook-static` passes it to one rustc call, which build scripts do not see; the
    // unwinder then appears twice on the link line, which the linker takes as one.
    let static_crt = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !static_crt
    {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
}
