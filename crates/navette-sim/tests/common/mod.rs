//! Helpers shared by the integration tests.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use navette_sim::{SimEvent, SimNetwork};

/// Runs the network until no event is pending and returns every event with
/// the time it was polled at.
pub fn drain(net: &mut SimNetwork) -> Vec<(Duration, SimEvent)> {
    let mut out = Vec::new();
    while net.advance() {
        while let Some(event) = net.poll_event() {
            out.push((net.now(), event));
        }
    }
    out
}

/// The deliveries among `events`, as `(time, to, from, bytes)`.
pub fn deliveries(events: &[(Duration, SimEvent)]) -> Vec<(Duration, u32, u32, Vec<u8>)> {
    events
        .iter()
        .filter_map(|(t, e)| match e {
            SimEvent::Delivered {
                to, from, bytes, ..
            } => Some((*t, *to, *from, bytes.clone())),
            SimEvent::SendDone { .. } => None,
        })
        .collect()
}

pub fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

pub fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}
