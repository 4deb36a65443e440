//! The network's only source of randomness.
//!
//! One [`ChaCha8Rng`] seeded with `seed_from_u64(seed)`: portable and
//! reproducible across platforms and releases, so a seed printed by a failing
//! test replays the same run anywhere. Draws happen only in `send` on a link
//! with non-zero jitter, in call order, so the sequence of draws is a pure
//! function of the seed and of the calls made on the network.

use std::fmt;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// Seeded generator used for jitter samples.
pub(crate) struct SimRng(ChaCha8Rng);

impl fmt::Debug for SimRng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimRng { .. }")
    }
}

impl SimRng {
    /// A generator whose whole output is determined by `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A uniform integer in `[0, max]`, without modulo bias.
    ///
    /// Lemire's widening-multiply method with rejection ("Fast Random Integer
    /// Generation in an Interval", 2019).
    pub(crate) fn below_inclusive(&mut self, max: u64) -> u64 {
        let Some(range) = max.checked_add(1) else {
            return self.0.next_u64();
        };
        let threshold = range.wrapping_neg() % range;
        loop {
            let product = u128::from(self.0.next_u64()) * u128::from(range);
            // Truncation intended: the low half decides rejection, the high
            // half is the result.
            let low = product as u64;
            if low >= threshold {
                return (product >> 64) as u64;
            }
        }
    }

    /// A uniform duration in `[0, max]` at nanosecond resolution.
    ///
    /// A `max` beyond `u64::MAX` nanoseconds (about 584 years) is clamped.
    pub(crate) fn jitter(&mut self, max: Duration) -> Duration {
        let max_nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.below_inclusive(max_nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_in_range_and_reaches_both_ends() {
        let mut rng = SimRng::new(7);
        let draws: Vec<u64> = (0..2000).map(|_| rng.below_inclusive(3)).collect();
        assert!(draws.iter().all(|&d| d <= 3));
        for v in 0..=3 {
            assert!(draws.contains(&v), "value {v} never drawn");
        }
    }

    #[test]
    fn zero_max_is_zero_and_full_range_works() {
        let mut rng = SimRng::new(1);
        assert_eq!(rng.below_inclusive(0), 0);
        let _ = rng.below_inclusive(u64::MAX);
        assert_eq!(rng.jitter(Duration::ZERO), Duration::ZERO);
        assert!(rng.jitter(Duration::from_nanos(10)) <= Duration::from_nanos(10));
    }

    #[test]
    fn same_seed_same_stream() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        for _ in 0..100 {
            assert_eq!(a.below_inclusive(1_000_000), b.below_inclusive(1_000_000));
        }
    }
}
