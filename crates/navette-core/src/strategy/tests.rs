//! Unit tests of the rail arithmetic strategies rely on.

use std::time::Duration;

use super::RailInfo;
use crate::{RailCaps, RailId};

fn rail(id: u32, latency_us: u64, bandwidth: u64, in_flight: usize) -> RailInfo {
    RailInfo {
        id: RailId(id),
        caps: RailCaps {
            latency: Duration::from_micros(latency_us),
            bandwidth,
            ..RailCaps::default()
        },
        idle: in_flight == 0,
        in_flight,
        bandwidth,
    }
}

#[test]
fn delivery_time_counts_what_is_in_flight_then_latency_and_size() {
    let idle = rail(0, 10, 1_000_000_000, 0);
    assert_eq!(idle.delivery_time(0), Duration::from_micros(10));
    assert_eq!(idle.delivery_time(1_000_000), Duration::from_micros(1010));
    let busy = rail(1, 1, 1_000_000_000, 2_000_000);
    assert_eq!(busy.delivery_time(0), Duration::from_micros(2001));
    // An unknown bandwidth compares by latency alone.
    let unknown = rail(2, 3, 0, 5_000_000);
    assert_eq!(unknown.delivery_time(1 << 30), Duration::from_micros(3));
}
