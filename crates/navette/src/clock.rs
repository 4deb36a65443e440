//! The time drivers give the engine: the coarse monotonic clock.
//!
//! The engine uses time for request ages in reports and for deadlines
//! counted in seconds; the driver reads the clock several times per
//! message. `CLOCK_MONOTONIC_COARSE` (the last timer tick, a few
//! milliseconds of resolution) is read from the vDSO without touching the
//! time-stamp counter, several times cheaper than `Instant::now`.

use std::sync::OnceLock;
use std::time::Duration;

use rustix::time::{ClockId, clock_gettime};

/// Time since the first driver of this process started, at tick
/// resolution. One origin for the whole process, so that drivers that
/// serve one node together (`shm+tcp`) give its engine the same time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: Duration,
}

impl Clock {
    /// The process's clock (its time starts with the first call).
    pub(crate) fn start() -> Self {
        static ORIGIN: OnceLock<Duration> = OnceLock::new();
        Self {
            origin: *ORIGIN.get_or_init(read_coarse),
        }
    }

    /// Time since [`Self::start`].
    pub(crate) fn now(&self) -> Duration {
        read_coarse().saturating_sub(self.origin)
    }
}

fn read_coarse() -> Duration {
    let t = clock_gettime(ClockId::MonotonicCoarse);
    // The monotonic clock is never negative; the casts cannot lose bits.
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}
