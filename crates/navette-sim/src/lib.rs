//! A deterministic, seeded, in-memory network of byte packets on virtual
//! time: the test bed on which several Navette engines talk to each other.
//!
//! This crate knows nothing of Navette's protocol. It moves opaque `Vec<u8>`
//! packets between numbered nodes; the glue that feeds them to engines lives
//! elsewhere.
//!
//! # The model
//!
//! * **Nodes** are numbered `0, 1, 2, ...` by [`SimNetwork::add_node`].
//! * A **link** ([`LinkId`]) is one bidirectional rail between two nodes,
//!   made by [`SimNetwork::connect`] with a [`LinkSpec`] (latency, bandwidth,
//!   jitter). Two nodes may share several links. Storage is sparse: a network
//!   of thousands of nodes costs memory in proportion to its nodes plus its
//!   links, never to the number of pairs.
//! * **Each direction of a link is a FIFO serializer.** A packet of `len`
//!   bytes sent at `now` starts transmitting at `max(now, busy_until)`, takes
//!   [`LinkSpec::transmit_time`] (`len / bandwidth`, rounded up to the
//!   nanosecond; zero for infinite bandwidth), and then:
//!   * [`SimEvent::SendDone`] fires for the sender when transmission ends;
//!   * [`SimEvent::Delivered`] fires at transmission end + latency + a jitter
//!     sample uniform in `[0, jitter]`, but never earlier than the previous
//!     delivery in the same direction.
//!
//!   So a single link never reorders, like a TCP connection. Packets sent on
//!   two links of different latency or jitter can overtake each other: that
//!   is the reordering an engine striping over rails must survive.
//! * **Time is virtual.** [`SimNetwork::now`] moves only through
//!   [`SimNetwork::advance`] (to the next event) and
//!   [`SimNetwork::advance_to`]; it never goes backwards.
//!   [`SimNetwork::poll_event`] hands out events due at or before `now` in
//!   `(time, insertion order)`, and never moves time.
//! * **Faults.** [`SimNetwork::cut`] drops every packet in flight on a link
//!   (counted in [`LinkStats`]) and makes later sends fail with
//!   [`SimError::LinkCut`]; [`SimNetwork::restore`] reopens it. A successful
//!   send always yields exactly one `SendDone`, even if its packet is dropped.
//!
//! # Determinism
//!
//! The only randomness is a ChaCha8 generator seeded from the seed given to
//! [`SimNetwork::new`], drawn once per packet sent on a link with non-zero
//! jitter. Events are ordered by `(time, insertion counter)` in a binary
//! heap and all storage is in vectors, so nothing depends on hashing or
//! addresses: the same seed and the same calls give the same events, at the
//! same times, in the same order. Print [`SimNetwork::seed`] when a test
//! fails so the run can be replayed.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use navette_sim::{LinkSpec, SimEvent, SimNetwork};
//!
//! let mut net = SimNetwork::new(42);
//! let nodes = net.add_nodes(2);
//! // 10 µs latency, 1 GB/s: 1000 bytes take 1 µs to transmit.
//! let link = net
//!     .connect(nodes.start, nodes.start + 1, LinkSpec::new(Duration::from_micros(10), 1_000_000_000))
//!     .unwrap();
//! net.send(0, link, vec![7; 1000]).unwrap();
//!
//! let mut seen = Vec::new();
//! while net.advance() {
//!     while let Some(event) = net.poll_event() {
//!         seen.push((net.now(), event));
//!     }
//! }
//! assert_eq!(seen[0], (Duration::from_micros(1), SimEvent::SendDone { node: 0, link }));
//! assert_eq!(seen[1].0, Duration::from_micros(11));
//! assert!(matches!(&seen[1].1, SimEvent::Delivered { to: 1, from: 0, bytes, .. } if bytes.len() == 1000));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod event;
mod link;
mod network;
mod rng;

pub use error::SimError;
pub use event::SimEvent;
pub use link::{DirectionStats, LinkId, LinkSpec, LinkStats};
pub use network::SimNetwork;

/// Identifies a node of a [`SimNetwork`]: `0, 1, 2, ...` in the order added.
pub type NodeId = u32;
