//! Just enough randomness for jitter and claim tokens, without a crate: std's randomly
//! keyed SipHash over a counter. Not for secrets. Tests draw fixed data from `seeded`
//! (test builds only).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A pseudo-random u64, different across processes and calls.
pub fn u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

/// A pseudo-random number in `0..n` (0 when `n` is 0).
pub fn below(n: u64) -> u64 {
    if n == 0 { 0 } else { u64() % n }
}

/// A sequence fixed by `seed` (xorshift64; a `seed` of 0 gives only zeros), for tests
/// that draw the same data every run.
#[cfg(test)]
pub(crate) fn seeded(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_vary_and_stay_in_range() {
        let a: Vec<u64> = (0..8).map(|_| super::u64()).collect();
        assert!(a.windows(2).any(|w| w[0] != w[1]));
        assert!((0..1000).all(|_| super::below(7) < 7));
        assert_eq!(super::below(0), 0);
    }
}
