//! cairn's numeric inner loops, where most of the time of a search by meaning goes: the
//! sentence model's dense layers ([`dense`]) and the bit distance of the vector index
//! ([`bits`]). Each uses the processor's vector or popcount instructions where it has them,
//! detected at run time, and plain Rust elsewhere.
//!
//! Its own crate so that it alone is optimised in debug builds, like candle: unoptimised,
//! a prompt's embedding took forty times as long, and the tests embed.

pub mod bits;
pub mod dense;
