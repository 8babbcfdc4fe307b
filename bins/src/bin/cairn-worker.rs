//! `cairn-worker`: the consumer. See `cairn_cli::entry::worker` and `cairn-worker --help`.

fn main() -> std::process::ExitCode {
    one_thread_per_embedding();
    cairn_cli::entry::worker::main(std::env::args_os())
}

/// The sentence model's matrix products run on one thread each, unless the user says
/// otherwise (`RAYON_NUM_THREADS`, which the model's library reads at every product and
/// `cairn_kernels::dense` at its first).
/// A prompt's query is a few dozen tokens: split over threads, its products cost more in
/// handing work around than they save, and on a machine of few cores they fight the hook
/// that waits for them. Measured (BENCHMARKS.md, "Recall at prompts and files"): at
/// 100,000 memories on 2 cores, the worker's answer p50 20-21 → 15-16.5 ms and prompts
/// ranked with meaning 116-126 → 164-168 of 200, for 19% less throughput when the worker
/// embeds stored memories in the background (216 → 175 texts a second).
#[allow(unsafe_code)] // std offers no safe way to set this process's environment
fn one_thread_per_embedding() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // SAFETY: `set_var` is unsafe because another thread could read the environment at
        // the same time; this runs first in `main`, before any thread exists.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", "1") };
    }
}
