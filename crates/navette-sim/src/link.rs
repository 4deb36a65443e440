//! Links: identity, specification, statistics and per-direction state.
//!
//! A link is one bidirectional rail between two nodes. Each of its two
//! directions is an independent FIFO serializer with its own `busy_until`
//! (when the wire is free again) and `last_delivery` (the floor that keeps
//! deliveries in send order).

use std::fmt;
use std::time::Duration;

use crate::NodeId;

/// Identifies one link of a [`SimNetwork`](crate::SimNetwork).
///
/// Ids are dense and given in creation order: the first `connect` returns
/// `LinkId(0)`, the next `LinkId(1)`, and so on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

impl fmt::Display for LinkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "link {}", self.0)
    }
}

/// The timing profile of a link, the same in both directions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Propagation delay added to every packet after its transmission ends.
    pub latency: Duration,
    /// Serialization rate in bytes per second; `0` means infinite (a packet
    /// takes no time on the wire).
    pub bandwidth: u64,
    /// Upper bound of a uniform random extra delay in `[0, jitter]`, drawn
    /// per packet from the network's seeded generator.
    pub jitter: Duration,
}

impl LinkSpec {
    /// Latency of [`LinkSpec::default`]: 1 µs.
    pub const DEFAULT_LATENCY: Duration = Duration::from_micros(1);
    /// Bandwidth of [`LinkSpec::default`]: 10 GB/s.
    pub const DEFAULT_BANDWIDTH: u64 = 10_000_000_000;

    /// A link with this latency and bandwidth (bytes per second, `0` for
    /// infinite) and no jitter.
    pub fn new(latency: Duration, bandwidth: u64) -> Self {
        Self {
            latency,
            bandwidth,
            jitter: Duration::ZERO,
        }
    }

    /// The same link with a uniform random extra delay in `[0, jitter]`.
    #[must_use]
    pub fn with_jitter(self, jitter: Duration) -> Self {
        Self { jitter, ..self }
    }

    /// How long `len` bytes occupy one direction of the wire:
    /// `len / bandwidth` seconds, rounded up to the nanosecond so that a
    /// non-empty packet on a finite link never takes zero time. Zero when
    /// `bandwidth` is 0. Computed in `u128` nanoseconds, saturating at
    /// `u64::MAX` nanoseconds.
    pub fn transmit_time(&self, len: usize) -> Duration {
        if self.bandwidth == 0 {
            return Duration::ZERO;
        }
        let scaled = (len as u128) * 1_000_000_000;
        let nanos = scaled.div_ceil(u128::from(self.bandwidth));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Default for LinkSpec {
    /// 1 µs latency, 10 GB/s, no jitter.
    fn default() -> Self {
        Self::new(Self::DEFAULT_LATENCY, Self::DEFAULT_BANDWIDTH)
    }
}

/// Counters of one direction of a link.
///
/// At any time `packets_sent == packets_delivered + packets_dropped +` the
/// packets still in flight in that direction (and likewise for bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets accepted by `send` in this direction.
    pub packets_sent: u64,
    /// Bytes accepted by `send` in this direction.
    pub bytes_sent: u64,
    /// Packets handed out as [`SimEvent::Delivered`](crate::SimEvent::Delivered).
    pub packets_delivered: u64,
    /// Bytes handed out as [`SimEvent::Delivered`](crate::SimEvent::Delivered).
    pub bytes_delivered: u64,
    /// Packets lost because the link was cut while they were in flight.
    pub packets_dropped: u64,
    /// Bytes lost because the link was cut while they were in flight.
    pub bytes_dropped: u64,
}

/// Counters of a link, per direction. `a` and `b` are the nodes in the order
/// they were given to `connect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkStats {
    /// First endpoint given to `connect`.
    pub a: NodeId,
    /// Second endpoint given to `connect`.
    pub b: NodeId,
    /// Traffic sent by `a` to `b` (all traffic, for a loop link).
    pub a_to_b: DirectionStats,
    /// Traffic sent by `b` to `a`.
    pub b_to_a: DirectionStats,
}

impl LinkStats {
    /// The counters of the direction `node` sends in, or `None` if `node` is
    /// not an endpoint.
    pub fn sent_by(&self, node: NodeId) -> Option<&DirectionStats> {
        if node == self.a {
            Some(&self.a_to_b)
        } else if node == self.b {
            Some(&self.b_to_a)
        } else {
            None
        }
    }

    /// Packets dropped in both directions.
    pub fn packets_dropped(&self) -> u64 {
        self.a_to_b.packets_dropped + self.b_to_a.packets_dropped
    }

    /// Bytes dropped in both directions.
    pub fn bytes_dropped(&self) -> u64 {
        self.a_to_b.bytes_dropped + self.b_to_a.bytes_dropped
    }
}

/// State of one direction of a link.
#[derive(Clone, Debug, Default)]
pub(crate) struct Direction {
    /// When the serializer is free for the next packet.
    pub(crate) busy_until: Duration,
    /// Delivery time of the last packet sent; later packets are not
    /// delivered earlier (no reordering within a link).
    pub(crate) last_delivery: Duration,
    pub(crate) stats: DirectionStats,
    pub(crate) in_flight_packets: u64,
    pub(crate) in_flight_bytes: u64,
}

/// One link of the network.
#[derive(Clone, Debug)]
pub(crate) struct Link {
    /// `[a, b]` as given to `connect`; direction 0 is `a -> b`.
    pub(crate) ends: [NodeId; 2],
    pub(crate) spec: LinkSpec,
    pub(crate) cut: bool,
    pub(crate) dirs: [Direction; 2],
}

impl Link {
    pub(crate) fn new(a: NodeId, b: NodeId, spec: LinkSpec) -> Self {
        Self {
            ends: [a, b],
            spec,
            cut: false,
            dirs: Default::default(),
        }
    }

    /// Index of the direction `node` sends in (0 for `a`, 1 for `b`; a loop
    /// link only uses direction 0).
    pub(crate) fn direction_from(&self, node: NodeId) -> Option<usize> {
        self.ends.iter().position(|&end| end == node)
    }

    /// The node at the other end from `node`.
    pub(crate) fn peer_of(&self, node: NodeId) -> Option<NodeId> {
        self.direction_from(node).map(|d| self.ends[1 - d])
    }

    pub(crate) fn stats(&self) -> LinkStats {
        LinkStats {
            a: self.ends[0],
            b: self.ends[1],
            a_to_b: self.dirs[0].stats,
            b_to_a: self.dirs[1].stats,
        }
    }

    /// Counts every packet in flight as dropped and returns how many there
    /// were. Their deliveries must be removed from the queue by the caller.
    /// `last_delivery` falls back to `now`: the dropped packets no longer
    /// hold back later ones.
    pub(crate) fn drop_in_flight(&mut self, now: Duration) -> u64 {
        let mut dropped = 0;
        for dir in &mut self.dirs {
            dir.stats.packets_dropped += dir.in_flight_packets;
            dir.stats.bytes_dropped += dir.in_flight_bytes;
            dropped += dir.in_flight_packets;
            dir.in_flight_packets = 0;
            dir.in_flight_bytes = 0;
            dir.last_delivery = dir.last_delivery.min(now);
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmit_time_rounds_up_and_handles_infinite_bandwidth() {
        let spec = LinkSpec::new(Duration::ZERO, 1_000_000_000);
        assert_eq!(spec.transmit_time(1500), Duration::from_nanos(1500));
        let fast = LinkSpec::default();
        assert_eq!(fast.transmit_time(1), Duration::from_nanos(1));
        assert_eq!(fast.transmit_time(0), Duration::ZERO);
        assert_eq!(
            LinkSpec::new(Duration::ZERO, 0).transmit_time(1 << 30),
            Duration::ZERO
        );
        let slow = LinkSpec::new(Duration::ZERO, 1);
        assert_eq!(
            slow.transmit_time(usize::MAX),
            Duration::from_nanos(u64::MAX)
        );
    }

    #[test]
    fn default_spec() {
        let spec = LinkSpec::default();
        assert_eq!(spec.latency, Duration::from_micros(1));
        assert_eq!(spec.bandwidth, 10_000_000_000);
        assert_eq!(spec.jitter, Duration::ZERO);
        let j = spec.with_jitter(Duration::from_nanos(5));
        assert_eq!(j.jitter, Duration::from_nanos(5));
    }
}
