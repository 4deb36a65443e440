//! Events and the time-ordered queue that holds them.
//!
//! The queue is a min-heap keyed by `(time, insertion counter)`: events due
//! at the same instant come out in the order they were scheduled, so the
//! order never depends on anything but the calls made on the network.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::{LinkId, NodeId};

/// Something that happened on the network, handed out by
/// [`SimNetwork::poll_event`](crate::SimNetwork::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimEvent {
    /// A packet arrived at `to`, sent by `from` over `link`.
    Delivered {
        /// Receiving node.
        to: NodeId,
        /// Sending node.
        from: NodeId,
        /// Link the packet travelled on.
        link: LinkId,
        /// The packet, exactly as sent.
        bytes: Vec<u8>,
    },
    /// `node` finished transmitting a packet on `link`: the sender's local
    /// completion. Exactly one per successful `send`, even if the link is cut
    /// before the packet arrives.
    SendDone {
        /// Sending node.
        node: NodeId,
        /// Link the packet was sent on.
        link: LinkId,
    },
}

impl SimEvent {
    /// The link this event concerns.
    pub fn link(&self) -> LinkId {
        match self {
            Self::Delivered { link, .. } | Self::SendDone { link, .. } => *link,
        }
    }
}

/// An event with its due time and insertion counter.
#[derive(Debug)]
struct Scheduled {
    at: Duration,
    seq: u64,
    event: SimEvent,
}

impl Scheduled {
    fn key(&self) -> (Duration, u64) {
        (self.at, self.seq)
    }
}

// Ordered by key only; `seq` is unique, so equal keys mean the same entry.
impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Pending events, earliest first.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Reverse<Scheduled>>,
    next_seq: u64,
}

impl EventQueue {
    /// Schedules `event` at `at`, after every event already scheduled at the
    /// same time.
    pub(crate) fn push(&mut self, at: Duration, event: SimEvent) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Scheduled { at, seq, event }));
    }

    /// Due time of the earliest pending event.
    pub(crate) fn next_time(&self) -> Option<Duration> {
        self.heap.peek().map(|Reverse(s)| s.at)
    }

    /// Removes and returns the earliest event if it is due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Duration) -> Option<SimEvent> {
        if self.next_time()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse(s)| s.event)
    }

    /// Removes every pending delivery on `link` (its `SendDone`s stay).
    /// Linear in the queue length; used only when a link is cut.
    pub(crate) fn remove_deliveries_on(&mut self, link: LinkId) {
        self.heap.retain(
            |Reverse(s)| !matches!(&s.event, SimEvent::Delivered { link: l, .. } if *l == link),
        );
    }

    /// Number of pending events of any kind.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(node: NodeId) -> SimEvent {
        SimEvent::SendDone {
            node,
            link: LinkId(0),
        }
    }

    #[test]
    fn time_then_insertion_order() {
        let mut q = EventQueue::default();
        let t = Duration::from_nanos;
        q.push(t(5), done(0));
        q.push(t(3), done(1));
        q.push(t(5), done(2));
        q.push(t(3), done(3));
        assert_eq!(q.pop_due(t(2)), None);
        let order: Vec<_> = std::iter::from_fn(|| q.pop_due(t(10))).collect();
        assert_eq!(order, vec![done(1), done(3), done(0), done(2)]);
        assert_eq!(q.next_time(), None);
    }
}
