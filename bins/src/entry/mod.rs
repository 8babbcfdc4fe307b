//! The producer and consumer processes, as library functions: `cairn-hook` and
//! `cairn-worker` are three-line binaries over them, and `cairn hook` / `cairn worker` run
//! the very same code (so `cargo run --bin cairn -- demo`, which builds only `cairn`, can
//! still play the whole pipeline through separate processes).

pub mod hook;
pub mod worker;
