//! The simulated network: nodes, links, virtual time and the event loop.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use crate::event::EventQueue;
use crate::link::Link;
use crate::rng::SimRng;
use crate::{LinkId, LinkSpec, LinkStats, NodeId, SimError, SimEvent};

/// A deterministic in-memory network of nodes joined by links, on virtual
/// time. See the [crate documentation](crate) for the model.
///
/// Storage is sparse: a node costs one (initially empty) list of its links,
/// a link costs one record, and nothing is allocated per pair of nodes.
pub struct SimNetwork {
    seed: u64,
    rng: SimRng,
    now: Duration,
    /// `adjacency[node]`: the node's links in creation order.
    adjacency: Vec<Vec<LinkId>>,
    /// `links[id]`: every link ever created; links are never removed.
    links: Vec<Link>,
    queue: EventQueue,
    /// Deliveries scheduled and neither handed out nor dropped.
    in_flight: usize,
}

impl fmt::Debug for SimNetwork {
    // A summary: the packets themselves can be many and large.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimNetwork")
            .field("seed", &self.seed)
            .field("now", &self.now)
            .field("nodes", &self.adjacency.len())
            .field("links", &self.links.len())
            .field("pending_events", &self.queue.len())
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl SimNetwork {
    /// An empty network at time zero whose jitter is drawn from a generator
    /// seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            rng: SimRng::new(seed),
            now: Duration::ZERO,
            adjacency: Vec::new(),
            links: Vec::new(),
            queue: EventQueue::default(),
            in_flight: 0,
        }
    }

    /// The seed given to [`SimNetwork::new`]; print it when a test fails so
    /// the run can be replayed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds a node with no links. Ids are 0, 1, 2, ... in order.
    ///
    /// # Panics
    ///
    /// If the network already has `u32::MAX` nodes.
    pub fn add_node(&mut self) -> NodeId {
        let id = NodeId::try_from(self.adjacency.len())
            .ok()
            .filter(|&id| id < NodeId::MAX)
            .expect("SimNetwork holds at most u32::MAX nodes");
        self.adjacency.push(Vec::new());
        id
    }

    /// Adds `n` nodes and returns their ids.
    ///
    /// # Panics
    ///
    /// If the network would exceed `u32::MAX` nodes.
    pub fn add_nodes(&mut self, n: u32) -> Range<NodeId> {
        let start = self.node_count();
        let end = start
            .checked_add(n)
            .expect("SimNetwork holds at most u32::MAX nodes");
        self.adjacency.resize_with(end as usize, Vec::new);
        start..end
    }

    /// Number of nodes added so far.
    pub fn node_count(&self) -> u32 {
        // add_node / add_nodes keep the count below u32::MAX.
        self.adjacency.len() as u32
    }

    /// Creates one bidirectional link (rail) between `a` and `b`. Call again
    /// for a second rail between the same pair. `a == b` makes a loop link
    /// on which the node sends to itself.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownNode`] if `a` or `b` was not added.
    ///
    /// # Panics
    ///
    /// If the network already has `u32::MAX` links.
    pub fn connect(&mut self, a: NodeId, b: NodeId, spec: LinkSpec) -> Result<LinkId, SimError> {
        for node in [a, b] {
            if node >= self.node_count() {
                return Err(SimError::UnknownNode(node));
            }
        }
        let id = LinkId(u32::try_from(self.links.len()).expect("at most u32::MAX links"));
        self.links.push(Link::new(a, b, spec));
        self.adjacency[a as usize].push(id);
        if a != b {
            self.adjacency[b as usize].push(id);
        }
        Ok(id)
    }

    /// The links of `node` in creation order; empty for an unknown node.
    pub fn links_of(&self, node: NodeId) -> &[LinkId] {
        self.adjacency.get(node as usize).map_or(&[], Vec::as_slice)
    }

    /// The node at the other end of `link` from `node`.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownLink`], or [`SimError::NotAnEndpoint`] if `node`
    /// is not an end of `link`.
    pub fn peer(&self, node: NodeId, link: LinkId) -> Result<NodeId, SimError> {
        self.link(link)?
            .peer_of(node)
            .ok_or(SimError::NotAnEndpoint { node, link })
    }

    /// The specification `link` was created with.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownLink`].
    pub fn spec(&self, link: LinkId) -> Result<&LinkSpec, SimError> {
        Ok(&self.link(link)?.spec)
    }

    /// Virtual time since the network was created.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Sends `bytes` from `from` to the other end of `link`.
    ///
    /// The packet starts transmitting at `max(now, busy_until)` of that
    /// direction and occupies it for [`LinkSpec::transmit_time`];
    /// [`SimEvent::SendDone`] is scheduled when transmission ends and
    /// [`SimEvent::Delivered`] at transmission end + latency + a jitter
    /// sample, but never before the previous delivery in that direction.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownLink`], [`SimError::NotAnEndpoint`], then
    /// [`SimError::LinkCut`], checked in that order. On error nothing
    /// changes.
    pub fn send(&mut self, from: NodeId, link: LinkId, bytes: Vec<u8>) -> Result<(), SimError> {
        let now = self.now;
        let entry = self
            .links
            .get_mut(link.0 as usize)
            .ok_or(SimError::UnknownLink(link))?;
        let d = entry
            .direction_from(from)
            .ok_or(SimError::NotAnEndpoint { node: from, link })?;
        if entry.cut {
            return Err(SimError::LinkCut(link));
        }
        let to = entry.ends[1 - d];
        let len = bytes.len();
        let jitter = if entry.spec.jitter.is_zero() {
            Duration::ZERO
        } else {
            self.rng.jitter(entry.spec.jitter)
        };
        let transmit = entry.spec.transmit_time(len);
        let latency = entry.spec.latency;

        let dir = &mut entry.dirs[d];
        let end = now.max(dir.busy_until).saturating_add(transmit);
        dir.busy_until = end;
        let arrival = end
            .saturating_add(latency)
            .saturating_add(jitter)
            .max(dir.last_delivery);
        dir.last_delivery = arrival;
        dir.stats.packets_sent += 1;
        dir.stats.bytes_sent += len as u64;
        dir.in_flight_packets += 1;
        dir.in_flight_bytes += len as u64;

        // SendDone first: at equal times it comes out before the delivery.
        self.queue
            .push(end, SimEvent::SendDone { node: from, link });
        let delivered = SimEvent::Delivered {
            to,
            from,
            link,
            bytes,
        };
        self.queue.push(arrival, delivered);
        self.in_flight += 1;
        Ok(())
    }

    /// Due time of the earliest pending event, which may be at or before
    /// [`now`](Self::now) if events are waiting to be polled.
    pub fn next_event_time(&self) -> Option<Duration> {
        self.queue.next_time()
    }

    /// The next event due at or before `now`, in (time, insertion) order;
    /// `None` if none is due. Never moves time.
    pub fn poll_event(&mut self) -> Option<SimEvent> {
        let event = self.queue.pop_due(self.now)?;
        if let SimEvent::Delivered {
            from, link, bytes, ..
        } = &event
        {
            let entry = &mut self.links[link.0 as usize];
            let d = entry
                .direction_from(*from)
                .expect("a delivery is only scheduled by a send from an endpoint");
            let dir = &mut entry.dirs[d];
            dir.in_flight_packets -= 1;
            dir.in_flight_bytes -= bytes.len() as u64;
            dir.stats.packets_delivered += 1;
            dir.stats.bytes_delivered += bytes.len() as u64;
            self.in_flight -= 1;
        }
        Some(event)
    }

    /// Moves `now` to the earliest pending event's time (or leaves it if that
    /// event is already due). Returns `false`, without moving, if no event is
    /// pending.
    pub fn advance(&mut self) -> bool {
        match self.queue.next_time() {
            Some(t) => {
                self.advance_to(t);
                true
            }
            None => false,
        }
    }

    /// Moves `now` to `t`; a `t` in the past leaves `now` unchanged. Events
    /// passed over stay due and come out of `poll_event` in order.
    pub fn advance_to(&mut self, t: Duration) {
        self.now = self.now.max(t);
    }

    /// Cuts `link`: every packet in flight on it, in either direction, is
    /// dropped and counted in [`LinkStats`]; later sends fail with
    /// [`SimError::LinkCut`] until [`restore`](Self::restore). Pending
    /// [`SimEvent::SendDone`]s still fire. Cutting a cut link does nothing.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownLink`].
    pub fn cut(&mut self, link: LinkId) -> Result<(), SimError> {
        let now = self.now;
        let entry = self.link_mut(link)?;
        if entry.cut {
            return Ok(());
        }
        entry.cut = true;
        let dropped = entry.drop_in_flight(now);
        if dropped > 0 {
            self.in_flight -= usize::try_from(dropped).expect("in-flight count fits in usize");
            self.queue.remove_deliveries_on(link);
        }
        Ok(())
    }

    /// Makes a cut link usable again; packets dropped by the cut stay lost.
    /// Restoring a link that is not cut does nothing.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownLink`].
    pub fn restore(&mut self, link: LinkId) -> Result<(), SimError> {
        self.link_mut(link)?.cut = false;
        Ok(())
    }

    /// Whether `link` is cut; `false` for an unknown link.
    pub fn is_cut(&self, link: LinkId) -> bool {
        self.link(link).is_ok_and(|l| l.cut)
    }

    /// Packets and bytes sent, delivered and dropped, per direction.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownLink`].
    pub fn stats(&self, link: LinkId) -> Result<LinkStats, SimError> {
        Ok(self.link(link)?.stats())
    }

    /// Packets sent and not yet delivered nor dropped, over all links.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn link(&self, link: LinkId) -> Result<&Link, SimError> {
        self.links
            .get(link.0 as usize)
            .ok_or(SimError::UnknownLink(link))
    }

    fn link_mut(&mut self, link: LinkId) -> Result<&mut Link, SimError> {
        self.links
            .get_mut(link.0 as usize)
            .ok_or(SimError::UnknownLink(link))
    }
}
