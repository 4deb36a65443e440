//! The driver's I/O state, behind its lock: the poller, the listener, the
//! connections and, per peer rank, the rail and the packet being written.
//!
//! Lock order: this state's lock (the driver's) is taken first, then the
//! node's state lock through [`NodeCore::port`], for one packet or one
//! pass at a time. User threads take only the node's lock, so no cycle.
//!
//! Per peer and link, packets of its rail are written on one connection
//! (the first that completed its handshake) and read from every
//! established one: when both ranks dial each other at once, each ends up
//! with two connections, and the engine reorders what arrives by sequence
//! number. With several links ([`super::links`]), a peer has one rail per
//! link, slot `peer * links + link`; dialing a peer dials all its links.
//!
//! Epoll: while the driver has few connections ([`DIRECT_READ_MAX`]), its
//! spinning rounds read every established connection directly, so those
//! connections need no readiness events, and they are kept out of the
//! epoll set. A socket in an epoll set wakes it on every packet that
//! arrives: on loopback the sender's `write` runs that wake-up (two locks
//! taken with interrupts off), which profiles put at about 3 % of the send
//! path of a small message. A connection comes back into the set when a
//! write finds its socket full (until the packet is out: epoll tells when
//! it takes more), and all of them before a thread blocks
//! ([`Inner::park`]; epoll reports at once what is already ready); the
//! first round that finds work after that takes the established ones out
//! again. Handshakes and the listener always stay in.

use std::io::{self, IoSlice, Read};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use navette_core::{NowGather, NowPart, RailId, Rank};
use navette_session::{Bootstrap, JOB_KEY_LEN};
use navette_wire::{Limits, RdvDataHeader};
use rustc_hash::FxHashMap;
use rustix::io::Errno;

use super::Congestion;
use super::TcpStats;
use super::conn::{Conn, ConnError, Identity, Landing};
use super::frame::{ByteSink, Filled, OutPacket, RDV_PREFIX, WriteError, Written};
use super::links::{LINKS_KEY, LinkError, MAX_LINKS, parse_peer_links};
use crate::clock::Clock;
use crate::driver::DriverPort;
use crate::node::NodeCore;

pub(super) const WAKER: Token = Token(0);
/// The listener of link `k` is `Token(FIRST_LISTENER + k)`.
const FIRST_LISTENER: usize = 1;
const FIRST_CONN: usize = FIRST_LISTENER + MAX_LINKS;
/// Packets delivered from one connection per round, so one busy peer does
/// not starve the others.
const READ_BUDGET: usize = 64;
/// With at most this many established connections, a spinning progress
/// round reads every connection directly instead of asking epoll first: a
/// read that finds nothing costs one system call, like `epoll_wait`, and a
/// read that finds data saves one. Handshakes, accepts and blocked writes
/// still wait for epoll, asked every [`EPOLL_EVERY`] rounds (and every
/// round while any of them is pending).
const DIRECT_READ_MAX: usize = 4;
/// See [`DIRECT_READ_MAX`].
const EPOLL_EVERY: u32 = 16;
/// Largest packet [`Inner::send_now`] and [`Inner::send_message_now`]
/// send; larger ones go through the window. Sent at once, a packet's large
/// pieces are written from where they lie, but the part the socket does
/// not take is copied (the caller's memory is free on return). Measured
/// one-way on loopback with a limit of 65 KiB, messages of 32 and 64 KiB
/// gained nothing clear over the window (within ±0.5 µs, run to run).
const SEND_NOW_MAX: usize = 17 << 10;
/// Data of a message sent at once ([`Inner::send_now`],
/// [`Inner::send_message_now`]) is written from where it lies, by a
/// vectored write, in pieces longer than this, rather than copied into the
/// packet buffer: on loopback a vectored write costs more than a copy of a
/// few hundred bytes, less than a copy of many KiB.
const NOW_COPY_MAX: usize = 4 << 10;

/// One link to one peer rank as the driver sees it.
#[derive(Debug)]
struct PeerSlot {
    rail: RailId,
    /// The connection packets are written on.
    send_conn: Option<Token>,
    /// Our outgoing connection, until it is established.
    dialing: Option<Token>,
    /// The packet being written (or waiting for a connection).
    out: Option<OutPacket>,
    /// The rail was closed: nothing more goes to this peer.
    closed: bool,
}

/// Everything behind the driver's lock.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) poll: Poll,
    events: Events,
    /// One per link, by link; emptied by `close`.
    listeners: Vec<TcpListener>,
    /// By link: the listener may have connections to accept.
    listener_ready: Vec<bool>,
    /// By token; tokens are ours, so the fast Fx hash is safe.
    conns: FxHashMap<Token, Conn>,
    next_token: usize,
    /// By `peer * links + link`; `None` for our own rank.
    peers: Vec<Option<PeerSlot>>,
    /// How many links (at least one).
    links: usize,
    /// By link: the address our connections on it leave from (`None`: the
    /// system picks, as with the default single link).
    sources: Vec<Option<IpAddr>>,
    /// Peers' listening addresses, by link, once read from the bootstrap.
    peer_addrs: FxHashMap<Rank, Vec<SocketAddr>>,
    bootstrap: Arc<dyn Bootstrap>,
    rank: Rank,
    size: u32,
    job_id: u64,
    job_key: [u8; JOB_KEY_LEN],
    limits: Limits,
    pub(super) start: Clock,
    pub(super) eager_connect: bool,
    pub(super) max_handshakes: usize,
    pub(super) handshake_timeout: Duration,
    pub(super) congestion: Congestion,
    /// The kernel refused `congestion` once (said once, not per
    /// connection).
    congestion_refused: bool,
    /// See [`super::TcpConfig::keepalive`].
    pub(super) keepalive: Option<Duration>,
    /// The kernel refused the keepalive settings once (said once).
    keepalive_refused: bool,
    /// Set when the session is finalizing: connections closing then are
    /// expected, not worth a warning.
    pub(super) finalizing: bool,
    pub(super) closed: bool,
    pub(super) stats: TcpStats,
    /// Where packets sent at once are encoded (grown to the longest one).
    now_buf: Vec<u8>,
    /// Progress rounds since epoll was last asked (it is asked about
    /// every [`EPOLL_EVERY`] rounds).
    rounds: u32,
    /// The last round wrote and skipped reading.
    skipped_read: bool,
    /// Some peer slot may hold a packet to write (`out`): set as one is
    /// given one, cleared by a pass of [`Inner::write_all`] that leaves
    /// none. Idle rounds then skip the walk over every peer's slots,
    /// which grows with the job.
    writing: bool,
    /// Connections were put in epoll for a blocking wait ([`Inner::park`]);
    /// the next round takes the established ones out again.
    parked: bool,
}

impl Inner {
    /// The driver's state over `listeners`, one per link, whose
    /// connections leave from `sources` (by link, as many).
    pub(super) fn new(
        poll: Poll,
        listeners: Vec<TcpListener>,
        sources: Vec<Option<IpAddr>>,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> io::Result<Self> {
        assert!(
            (1..=MAX_LINKS).contains(&listeners.len()) && sources.len() == listeners.len(),
            "checked by TcpDriver::bind"
        );
        let mut listeners = listeners;
        for (link, listener) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(listener, Token(FIRST_LISTENER + link), Interest::READABLE)?;
        }
        Ok(Self {
            poll,
            events: Events::with_capacity(256),
            listener_ready: vec![true; listeners.len()],
            links: listeners.len(),
            listeners,
            sources,
            peer_addrs: FxHashMap::default(),
            conns: FxHashMap::default(),
            next_token: FIRST_CONN,
            peers: Vec::new(),
            rank: bootstrap.rank(),
            size: bootstrap.size(),
            job_id: bootstrap.job_id(),
            job_key: *bootstrap.job_key(),
            bootstrap,
            limits: Limits::default(),
            start: Clock::start(),
            eager_connect: false,
            max_handshakes: 1024,
            handshake_timeout: Duration::from_secs(10),
            congestion: Congestion::default(),
            congestion_refused: false,
            keepalive: None,
            keepalive_refused: false,
            finalizing: false,
            closed: false,
            stats: TcpStats::default(),
            now_buf: Vec::new(),
            rounds: 0,
            skipped_read: false,
            writing: false,
            parked: false,
        })
    }

    /// Declares one rail per peer rank and link, with the link's `caps`
    /// (by link, as many as links); no socket is opened.
    pub(super) fn attach(&mut self, node: &NodeCore, caps: &[navette_core::RailCaps]) {
        debug_assert_eq!(caps.len(), self.links);
        // A peer's packet header sizes the buffer its packet is read
        // into: no packet may be longer than our rails make (a packet, or
        // one rendezvous fragment behind its header), whatever the
        // engine's wider limits allow.
        let mut limits = node.lock().engine.config().limits;
        // `TcpDriver::bind` refused a fragment whose packet could not be
        // described; saturating all the same (once, as the driver starts).
        let longest = caps
            .iter()
            .map(|c| {
                c.max_packet
                    .max(c.max_fragment.saturating_add(RdvDataHeader::LEN))
            })
            .max()
            .unwrap_or(0);
        limits.max_body_len = limits
            .max_body_len
            .min(u32::try_from(longest).unwrap_or(u32::MAX));
        self.limits = limits;
        let mut port = node.port();
        let rank = self.rank;
        self.peers = (0..self.size)
            .flat_map(|peer| caps.iter().map(move |caps| (peer, caps)))
            .map(|(peer, caps)| {
                (peer != rank).then(|| PeerSlot {
                    rail: port.add_rail(peer, *caps),
                    send_conn: None,
                    dialing: None,
                    out: None,
                    closed: false,
                })
            })
            .collect();
    }

    fn now(&self) -> Duration {
        self.start.now()
    }

    fn identity(&self) -> Identity<'_> {
        Identity {
            rank: self.rank,
            size: self.size,
            job_id: self.job_id,
            job_key: &self.job_key,
            links: self.links,
        }
    }

    /// Connections established, counting both of a simultaneous pair.
    pub(super) fn established(&self) -> usize {
        self.conns.values().filter(|c| c.peer().is_some()).count()
    }

    /// The established connections whose addresses the system still
    /// knows.
    pub(super) fn connections(&self) -> Vec<super::TcpConnection> {
        let mut all: Vec<super::TcpConnection> = self
            .conns
            .values()
            .filter_map(|c| {
                Some(super::TcpConnection {
                    peer: c.peer()?,
                    link: c.link,
                    local: c.stream.local_addr().ok()?,
                    remote: c.stream.peer_addr().ok()?,
                })
            })
            .collect();
        all.sort_by_key(|c| (c.peer, c.link, c.local, c.remote));
        all
    }

    /// The counters, with the connections established now, per link too.
    pub(super) fn stats(&self) -> TcpStats {
        let mut stats = TcpStats {
            established: self.established(),
            ..self.stats
        };
        for conn in self.conns.values().filter(|c| c.peer().is_some()) {
            if let Some(link) = stats.links.get_mut(conn.link) {
                link.established += 1;
            }
        }
        stats
    }

    /// Polls for readiness (at most `timeout`) and records it.
    pub(super) fn poll_events(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        for event in &self.events {
            match event.token() {
                WAKER => {}
                Token(t) if (FIRST_LISTENER..FIRST_CONN).contains(&t) => {
                    if let Some(ready) = self.listener_ready.get_mut(t - FIRST_LISTENER) {
                        *ready = true;
                    }
                }
                token => {
                    if let Some(conn) = self.conns.get_mut(&token) {
                        conn.read_closed |= event.is_read_closed() || event.is_error();
                        conn.readable |= event.is_readable() || event.is_read_closed();
                        conn.writable |= event.is_writable() || event.is_write_closed();
                        conn.readable |= event.is_error();
                        conn.writable |= event.is_error();
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether recorded readiness leaves work for `progress`.
    pub(super) fn has_ready_work(&self) -> bool {
        if self.closed {
            return false;
        }
        self.listener_ready.contains(&true)
            || self
                .conns
                .values()
                .any(|c| c.setup_ready() || (c.peer().is_some() && c.readable) || self.can_write(c))
    }

    fn can_write(&self, conn: &Conn) -> bool {
        let Some(peer) = conn.peer() else {
            return false;
        };
        conn.writable && self.slot(peer, conn.link).is_some_and(|s| s.out.is_some())
    }

    fn index(&self, peer: Rank, link: usize) -> usize {
        peer as usize * self.links + link
    }

    fn slot(&self, peer: Rank, link: usize) -> Option<&PeerSlot> {
        if link >= self.links {
            return None;
        }
        self.peers.get(self.index(peer, link))?.as_ref()
    }

    fn slot_mut(&mut self, peer: Rank, link: usize) -> Option<&mut PeerSlot> {
        if link >= self.links {
            return None;
        }
        let index = self.index(peer, link);
        self.peers.get_mut(index)?.as_mut()
    }

    /// One round of I/O: accept, handshakes, reads, then writes.
    pub(super) fn progress(&mut self, node: &NodeCore) -> io::Result<bool> {
        if self.closed {
            return Ok(false);
        }
        let any = self.round(node)?;
        // Back from a blocking wait with work to do: spinning rounds read
        // the connections directly again. Not before there is work: a
        // registration reports the socket's writability at once, so taking
        // connections out after every such report would register them again
        // before each sleep, and no thread would ever sleep.
        if any && self.parked {
            self.sync_registrations();
        }
        Ok(any)
    }

    fn round(&mut self, node: &NodeCore) -> io::Result<bool> {
        self.rounds = self.rounds.wrapping_add(1);
        // A round with freshly submitted work is on a send's latency path:
        // it defers the periodic epoll check to a later round (by at most
        // EPOLL_EVERY rounds, so a steady stream of sends cannot starve
        // accepts), and its packet leaves one system call sooner.
        let due =
            self.rounds >= EPOLL_EVERY && (self.rounds >= 2 * EPOLL_EVERY || !node.has_work());
        if !self.reads_directly() || due || self.awaits_readiness() {
            self.rounds = 0;
            self.poll_events(Some(Duration::ZERO))?;
            self.expire_handshakes(node);
        }
        let mut any = self.accept()?;
        any |= self.advance_setups(node);
        // Writes first: a thread that just submitted a send should not pay
        // for a read that finds nothing before its packet leaves. After a
        // write the round ends at once, so the sender is back to its caller
        // one system call sooner; the next round reads (rounds alternate, so
        // a stream of writes cannot starve reading).
        let wrote = self.transmit(node);
        if wrote && !self.skipped_read {
            self.skipped_read = true;
            return Ok(true);
        }
        self.skipped_read = false;
        any |= wrote;
        any |= self.read_all(node);
        Ok(any)
    }

    /// Whether spinning rounds read established connections without epoll.
    fn reads_directly(&self) -> bool {
        self.conns.len() <= DIRECT_READ_MAX
    }

    /// Puts every connection in the epoll set, before a thread blocks in
    /// it: epoll reports at once the readiness a connection already has.
    /// Returns whether every connection is in; one the kernel refused
    /// (logged) is only seen by the rounds, so the caller must not sleep
    /// long.
    pub(super) fn park(&mut self) -> bool {
        self.parked = true;
        let mut all = true;
        for (&token, conn) in &mut self.conns {
            match conn.register(self.poll.registry(), token) {
                Ok(true) => self.stats.parked_registrations += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(rank = self.rank, %e, "tcp: epoll registration");
                    all = false;
                }
            }
        }
        all
    }

    /// Brings the epoll set to what spinning rounds need: established
    /// connections out of it while they are read directly, every
    /// connection in it otherwise. A connection that cannot be moved stays
    /// where it is (either way is correct, the other only slower).
    fn sync_registrations(&mut self) {
        self.parked = false;
        let direct = self.reads_directly();
        let registry = self.poll.registry();
        for (&token, conn) in &mut self.conns {
            let result = if direct && conn.peer().is_some() {
                conn.deregister(registry)
            } else {
                conn.register(registry, token).map(|_| ())
            };
            if let Err(e) = result {
                tracing::debug!(rank = self.rank, %e, "tcp: epoll registration");
            }
        }
    }

    /// Whether something only epoll can report is pending: a handshake, or
    /// a packet waiting for its socket to become writable.
    fn awaits_readiness(&self) -> bool {
        self.conns.values().any(|c| c.peer().is_none())
            || self.writing
                && self.peers.iter().flatten().any(|s| {
                    s.out.is_some()
                        && s.send_conn
                            .and_then(|t| self.conns.get(&t))
                            .is_some_and(|c| c.registered && !c.writable)
                })
    }

    fn accept(&mut self) -> io::Result<bool> {
        let mut any = false;
        for link in 0..self.listeners.len() {
            if self.listener_ready[link] {
                any |= self.accept_on(link);
            }
        }
        Ok(any)
    }

    /// Accepts what the listener of `link` has.
    fn accept_on(&mut self, link: usize) -> bool {
        let mut any = false;
        loop {
            let Some(listener) = self.listeners.get(link) else {
                return any;
            };
            let (stream, addr) = match listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.listener_ready[link] = false;
                    return any;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, aborted connection…: not fatal.
                    tracing::warn!(rank = self.rank, link, %e, "tcp: accept failed");
                    self.listener_ready[link] = false;
                    return any;
                }
            };
            any = true;
            let pending = self.conns.values().filter(|c| c.peer().is_none()).count();
            if pending >= self.max_handshakes {
                tracing::warn!(rank = self.rank, %addr, "tcp: too many handshakes, refusing");
                self.stats.refused += 1;
                continue;
            }
            self.add_accepted(stream, addr, link);
        }
    }

    fn add_accepted(&mut self, stream: TcpStream, addr: SocketAddr, link: usize) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(rank = self.rank, %addr, %e, "tcp: refusing connection");
            return;
        }
        self.tune(&stream, addr);
        match Conn::accepted(stream, &self.identity(), link) {
            Ok(conn) => {
                if let Err(e) = self.insert(conn) {
                    tracing::warn!(rank = self.rank, %addr, %e, "tcp: refusing connection");
                }
            }
            Err(e) => tracing::warn!(rank = self.rank, %addr, %e, "tcp: refusing connection"),
        }
    }

    fn insert(&mut self, mut conn: Conn) -> io::Result<Token> {
        let token = Token(self.next_token);
        self.next_token += 1;
        conn.register(self.poll.registry(), token)?;
        self.conns.insert(token, conn);
        if self.conns.len() == DIRECT_READ_MAX + 1 {
            // Too many to read directly from now on: every one in epoll.
            self.sync_registrations();
        }
        Ok(token)
    }

    /// Opens a connection to `peer` on each of its links that has none
    /// and is not being dialed (addresses from the bootstrap). A peer that
    /// cannot be reached on one link is failed.
    pub(super) fn dial(&mut self, node: &NodeCore, peer: Rank) {
        let addrs = match self.peer_links(peer) {
            Ok(addrs) => addrs,
            Err(e) => {
                tracing::warn!(rank = self.rank, peer, "tcp: cannot reach peer: {e}");
                self.fail_peer(node, peer);
                return;
            }
        };
        for (link, &addr) in addrs.iter().enumerate() {
            let Some(slot) = self.slot(peer, link) else {
                return;
            };
            if slot.closed || slot.send_conn.is_some() || slot.dialing.is_some() {
                continue;
            }
            let source = self.sources[link];
            let result = connect_from(source, addr)
                .map_err(|e| match source {
                    Some(source) => format!("link {link}: connect {addr} from {source}: {e}"),
                    None => format!("link {link}: connect {addr}: {e}"),
                })
                .and_then(|stream| {
                    self.tune(&stream, addr);
                    self.insert(Conn::dialing(stream, peer, link))
                        .map_err(|e| e.to_string())
                });
            match result {
                Ok(token) => {
                    self.stats.dialed += 1;
                    if let Some(slot) = self.slot_mut(peer, link) {
                        slot.dialing = Some(token);
                    }
                }
                Err(e) => {
                    tracing::warn!(rank = self.rank, peer, "tcp: cannot reach peer: {e}");
                    self.fail_peer(node, peer);
                    return;
                }
            }
        }
    }

    /// Gives a new connection to `addr` its congestion control and its
    /// keepalive. A refusal leaves the system's, and is logged once.
    fn tune(&mut self, stream: &TcpStream, addr: SocketAddr) {
        self.set_congestion(stream, addr);
        let Some(after) = self.keepalive else {
            return;
        };
        if let Err(e) = super::keepalive::apply(stream, after)
            && !std::mem::replace(&mut self.keepalive_refused, true)
        {
            tracing::warn!(rank = self.rank, %e, "tcp: keepalive refused, connections keep the system's");
        }
    }

    /// Gives a new connection to `addr` its congestion control. A refusal
    /// (unknown algorithm, or not allowed to this process) leaves the
    /// system's, and is logged once.
    fn set_congestion(&mut self, stream: &TcpStream, addr: SocketAddr) {
        match self.congestion.apply(stream, addr.ip()) {
            Ok(set) => self.stats.congestion_set += usize::from(set.is_some()),
            Err(e) if !self.congestion_refused => {
                self.congestion_refused = true;
                let congestion = &self.congestion;
                tracing::warn!(
                    rank = self.rank, %congestion, %e,
                    "tcp: congestion control refused, connections keep the system's"
                );
            }
            Err(_) => {}
        }
    }

    /// The peer's listening addresses, by link (see [`LINKS_KEY`]),
    /// checked against this rank's links.
    fn peer_links(&mut self, peer: Rank) -> Result<Vec<SocketAddr>, String> {
        if let Some(addrs) = self.peer_addrs.get(&peer) {
            return Ok(addrs.clone());
        }
        let raw = self
            .bootstrap
            .get(peer, LINKS_KEY)
            .map_err(|e| e.to_string())?;
        let addrs = parse_peer_links(peer, &raw, self.links).map_err(|e| e.to_string())?;
        for (link, (addr, source)) in addrs.iter().zip(&self.sources).enumerate() {
            if let Some(source) = *source
                && source.is_ipv4() != addr.is_ipv4()
            {
                let err = LinkError::FamilyMismatch {
                    link,
                    rank: peer,
                    ours: source,
                    theirs: *addr,
                };
                return Err(err.to_string());
            }
        }
        self.peer_addrs.insert(peer, addrs.clone());
        Ok(addrs)
    }

    /// Dials every higher rank (eager connection at start-up).
    pub(super) fn dial_higher(&mut self, node: &NodeCore) {
        for peer in self.rank + 1..self.size {
            self.dial(node, peer);
        }
    }

    fn advance_setups(&mut self, node: &NodeCore) -> bool {
        if self.conns.values().all(|c| !c.setup_ready()) {
            return false;
        }
        let ready: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.setup_ready())
            .map(|(&t, _)| t)
            .collect();
        let any = !ready.is_empty();
        for token in ready {
            let me = Identity {
                rank: self.rank,
                size: self.size,
                job_id: self.job_id,
                job_key: &self.job_key,
                links: self.links,
            };
            // A failed peer's connections may have gone meanwhile.
            let Some(conn) = self.conns.get_mut(&token) else {
                continue;
            };
            let link = conn.link;
            match conn.advance_setup(&me) {
                Ok(None) => {}
                Ok(Some(peer)) => self.on_established(token, peer, link),
                Err(e) => self.on_setup_failed(node, token, &e),
            }
        }
        any
    }

    fn on_established(&mut self, token: Token, peer: Rank, link: usize) {
        self.stats.established_total += 1;
        let Some(slot) = self.slot_mut(peer, link) else {
            return;
        };
        if slot.dialing == Some(token) {
            slot.dialing = None;
        }
        if slot.send_conn.is_none() && !slot.closed {
            slot.send_conn = Some(token);
        }
        if self.reads_directly() && !self.parked {
            self.sync_registrations();
        }
        tracing::debug!(rank = self.rank, peer, link, "tcp: connection established");
    }

    /// Drops connections whose handshake outlived its deadline.
    fn expire_handshakes(&mut self, node: &NodeCore) {
        let limit = self.handshake_timeout;
        let expired: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.peer().is_none() && c.opened.elapsed() > limit)
            .map(|(&t, _)| t)
            .collect();
        for token in expired {
            let err = ConnError::Refused(format!("no handshake within {limit:?}"));
            self.on_setup_failed(node, token, &err);
        }
    }

    fn on_setup_failed(&mut self, node: &NodeCore, token: Token, err: &ConnError) {
        let Some(conn) = self.conns.remove(&token) else {
            return;
        };
        let link = conn.link;
        match conn.dialed {
            Some(peer) => {
                tracing::warn!(rank = self.rank, peer, link, %err, "tcp: connection to peer failed");
                self.fail_peer(node, peer);
            }
            None => {
                let addr = conn.stream.peer_addr().ok();
                tracing::warn!(rank = self.rank, ?addr, link, %err, "tcp: refused connection");
                self.stats.refused += 1;
            }
        }
    }

    /// Closes the peer's rails, every link's: the engine fails what needs
    /// the peer (it fails the peer as a whole when any of its rails closes,
    /// since a rail does not retransmit what it may have lost). Its other
    /// connections close too, so that the peer sees the failure on every
    /// link rather than keep talking over the ones still up.
    fn fail_peer(&mut self, node: &NodeCore, peer: Rank) {
        self.close_conns_of(peer);
        for link in 0..self.links {
            let Some(slot) = self.slot_mut(peer, link) else {
                return;
            };
            if slot.closed {
                continue;
            }
            slot.closed = true;
            slot.out = None;
            slot.send_conn = None;
            slot.dialing = None;
            let rail = slot.rail;
            node.port().close_rail(rail);
        }
    }

    /// Closes every connection to or from `peer`, established or not.
    fn close_conns_of(&mut self, peer: Rank) {
        let doomed: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.peer() == Some(peer) || c.dialed == Some(peer))
            .map(|(&t, _)| t)
            .collect();
        for token in doomed {
            if let Some(mut conn) = self.conns.remove(&token) {
                // Dropped next, which closes the socket: a failed
                // deregistration only leaves epoll to forget it then.
                let _ = conn.deregister(self.poll.registry());
            }
        }
    }

    /// Drops an established connection after an error; its peer's rail
    /// closes.
    fn drop_conn(&mut self, node: &NodeCore, token: Token, err: &ConnError) {
        let Some(conn) = self.conns.remove(&token) else {
            return;
        };
        let Some(peer) = conn.peer() else {
            return;
        };
        let link = conn.link;
        if self.finalizing || matches!(err, ConnError::Eof) {
            tracing::debug!(rank = self.rank, peer, link, %err, "tcp: connection closed");
        } else {
            tracing::warn!(rank = self.rank, peer, link, %err, "tcp: closing connection");
        }
        self.fail_peer(node, peer);
    }

    /// Reads every established connection that may have bytes; drops
    /// those that fail. Returns whether anything happened.
    fn read_all(&mut self, node: &NodeCore) -> bool {
        // Connections are read where they lie in the map: no list of them
        // made first, no lookup of each (a tenth of an idle round). One
        // that fails ends the walk, to be dropped (which changes the map),
        // and the walk starts again.
        let mut any = false;
        loop {
            let direct = self.reads_directly();
            let reader = ConnReader {
                node,
                start: self.start,
                limits: self.limits,
                links: self.links,
                size: self.size,
                peers: &self.peers,
            };
            let mut failed = None;
            for (&token, conn) in &mut self.conns {
                // Outside epoll, a connection is read without waiting for
                // an event (one not established yet is left alone by
                // `read`).
                if !(direct || conn.readable || !conn.registered) {
                    continue;
                }
                match reader.read(conn, &mut self.stats) {
                    Ok(n) => any |= n > 0,
                    Err(e) => {
                        failed = Some((token, e));
                        break;
                    }
                }
            }
            let Some((token, e)) = failed else {
                return any;
            };
            any = true;
            self.drop_conn(node, token, &e);
        }
    }
}

/// What reading a connection needs of the driver's state besides the
/// connection and the statistics: borrowed apart from the connections'
/// map, which [`Inner::read_all`] walks.
struct ConnReader<'a> {
    node: &'a NodeCore,
    start: Clock,
    limits: Limits,
    links: usize,
    size: u32,
    peers: &'a [Option<PeerSlot>],
}

impl ConnReader<'_> {
    /// Reads packets from one established connection and feeds them to
    /// the engine.
    fn read(&self, conn: &mut Conn, stats: &mut TcpStats) -> Result<usize, ConnError> {
        let Self {
            node,
            start,
            limits,
            links,
            size,
            peers,
        } = *self;
        let Some(peer) = conn.peer() else {
            return Ok(0);
        };
        let link = conn.link;
        let slot = (peer < size && link < links)
            .then(|| peers.get(peer as usize * links + link))
            .flatten()
            .and_then(Option::as_ref);
        let Some(rail) = slot.map(|s| s.rail) else {
            return Err(ConnError::Refused(format!(
                "no rail to rank {peer} on link {link}"
            )));
        };

        let mut delivered = 0;
        let mut drained = false;
        loop {
            if conn.landing.is_some() {
                match land(conn, node, rail, start, stats, link)? {
                    LandStep::Landed => {
                        delivered += 1;
                        if delivered == READ_BUDGET {
                            // More may be buffered: read again next round.
                            conn.readable = true;
                            return Ok(delivered);
                        }
                        continue;
                    }
                    LandStep::Blocked => {
                        conn.readable = conn.read_closed;
                        return Ok(delivered);
                    }
                }
            }
            let bad_header = |e| ConnError::Refused(format!("bad packet header: {e}"));
            if let Some(header) = conn.frames.start_rdv_data(&limits).map_err(bad_header)? {
                conn.landing = Some(Landing { header, written: 0 });
                continue;
            }
            if let Some(frame) = conn.frames.next_frame(&limits).map_err(bad_header)? {
                let link_stats = &mut stats.links[link];
                link_stats.packets_received += 1;
                link_stats.bytes_received += frame.len() as u64;
                let refused = |e: navette_core::ProtocolError| ConnError::Refused(e.to_string());
                // A packet that ends the buffer may keep the buffer (the
                // engine decides: a large whole message landing at once),
                // its data then not copied out of it.
                if let Some(buf) = conn.frames.last_frame_buffer(&frame) {
                    let taken = node
                        .port()
                        .handle_packet_in(|| start.now(), rail, buf, frame)
                        .map_err(refused)?;
                    if taken {
                        conn.frames.restart();
                    }
                } else {
                    let bytes = &conn.frames.bytes()[frame];
                    node.port()
                        .handle_packet(|| start.now(), rail, bytes)
                        .map_err(refused)?;
                }
                delivered += 1;
                if delivered == READ_BUDGET {
                    // Frames may be left in the buffer, which no readiness
                    // event announces: read again next round.
                    conn.readable = true;
                    return Ok(delivered);
                }
                continue;
            }
            if drained {
                return Ok(delivered);
            }
            // While rendezvous data is awaited from the peer, the next
            // packet's headers are read alone: its data then goes straight
            // into its destination, not through the buffer (one more read
            // per packet, only then).
            let buffered = conn.frames.buffered();
            let max = if buffered < RDV_PREFIX && node.port().awaits_rdv_data(peer) {
                RDV_PREFIX - buffered
            } else {
                usize::MAX
            };
            match conn.frames.fill_at_most(&mut conn.stream, max) {
                Ok(Filled { len: 0, .. }) if buffered > 0 => {
                    return Err(ConnError::Truncated(buffered));
                }
                Ok(Filled { len: 0, .. }) => return Err(ConnError::Eof),
                // A read that did not fill the buffer drained the socket: a
                // further read would only find nothing (`WouldBlock`) and
                // cost a system call on the latency path. Deliver what came
                // and stop; data arriving later raises a new readiness
                // event (tokio clears readiness on short reads likewise).
                // An end of stream already reported raises none: keep
                // reading until it shows.
                Ok(Filled { drained: true, .. }) => {
                    conn.readable = conn.read_closed;
                    drained = true;
                }
                Ok(_) => {}
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    conn.readable = false;
                    return Ok(delivered);
                }
                Err(e) => return Err(io::Error::from(e).into()),
            }
        }
    }
}

impl Inner {
    /// Hands idle rails their next packet and writes what the sockets take.
    fn transmit(&mut self, node: &NodeCore) -> bool {
        let mut any = false;
        // A completed packet frees its rail: look again, a few times.
        for _ in 0..4 {
            let polled = node.take_dirty() && self.poll_rails(node);
            let (wrote, completed) = self.write_all(node);
            any |= polled || wrote;
            if !completed {
                break;
            }
        }
        any
    }

    /// Asks the engine for a packet on every idle rail; dials peers that
    /// have one and no connection yet. Returns whether it dialed.
    fn poll_rails(&mut self, node: &NodeCore) -> bool {
        let now = self.now();
        let mut to_dial = Vec::new();
        {
            let mut port = node.port();
            let links = self.links;
            for (index, slot) in self.peers.iter_mut().enumerate() {
                let Some(slot) = slot else { continue };
                if slot.closed || slot.out.is_some() {
                    continue;
                }
                let Some(plan) = port.poll_transmit(now, slot.rail) else {
                    continue;
                };
                slot.out = Some(OutPacket::new(plan));
                self.writing = true;
                let peer = (index / links) as Rank;
                // With eager connection, lower ranks dial us.
                let dials = !self.eager_connect || peer > self.rank;
                // `dial` dials every link of the peer: once per peer.
                if slot.send_conn.is_none()
                    && slot.dialing.is_none()
                    && dials
                    && to_dial.last() != Some(&peer)
                {
                    to_dial.push(peer);
                }
            }
        }
        let any = !to_dial.is_empty();
        for peer in to_dial {
            self.dial(node, peer);
        }
        any
    }

    /// Writes pending packets; returns whether bytes left and whether a
    /// packet completed.
    fn write_all(&mut self, node: &NodeCore) -> (bool, bool) {
        if !self.writing {
            return (false, false);
        }
        let start = self.start;
        let direct = self.reads_directly();
        let (mut wrote, mut completed) = (false, false);
        let links = self.links;
        for index in 0..self.peers.len() {
            let Some(Some(slot)) = self.peers.get_mut(index) else {
                continue;
            };
            let (Some(out), Some(token)) = (slot.out.as_mut(), slot.send_conn) else {
                continue;
            };
            let (peer, link) = (index / links, index % links);
            let Some(conn) = self.conns.get_mut(&token).filter(|c| c.may_write()) else {
                continue;
            };
            let rail = slot.rail;
            let mut port = node.port();
            let before = out.sent();
            let result = out.write(&mut conn.stream, port.memory());
            let link_stats = &mut self.stats.links[link];
            link_stats.bytes_sent += (out.sent() - before) as u64;
            match result {
                Ok(Written::Done) => {
                    if let Some(out) = slot.out.take() {
                        // The rest of a message sent at once was counted.
                        link_stats.packets_sent += u64::from(!out.is_rest());
                        port.recycle_plan(out.into_plan());
                    }
                    port.handle_send_complete(start.now(), rail);
                    (wrote, completed) = (true, true);
                    // Put in epoll for a blocked write (below): out again.
                    if direct
                        && !self.parked
                        && let Err(e) = conn.deregister(self.poll.registry())
                    {
                        tracing::debug!(rank = self.rank, %e, "tcp: epoll registration");
                    }
                }
                Ok(Written::Blocked) => {
                    conn.writable = false;
                    // Only bytes that left are progress: a full socket is
                    // not, or a thread waiting on it would never go idle.
                    wrote |= out.sent() > before;
                    // Epoll tells when the socket takes more; until then
                    // this connection is not written (`may_write`).
                    match conn.register(self.poll.registry(), token) {
                        Ok(_) => {}
                        Err(e) => tracing::debug!(rank = self.rank, %e, "tcp: epoll registration"),
                    }
                }
                Err(WriteError::Missing {
                    err,
                    started: false,
                }) => {
                    // Only a cancelled request's memory can be missing: the
                    // packet is dropped and the rail freed.
                    tracing::warn!(rank = self.rank, peer, link, %err, "tcp: dropping packet");
                    slot.out = None;
                    port.handle_send_complete(start.now(), rail);
                    completed = true;
                }
                Err(WriteError::Missing { err, started: true }) => {
                    drop(port);
                    let err = ConnError::Refused(format!("packet cut short: {err}"));
                    self.drop_conn(node, token, &err);
                }
                Err(WriteError::Io(e)) => {
                    drop(port);
                    self.drop_conn(node, token, &ConnError::Io(e));
                }
            }
        }
        self.writing = self.peers.iter().flatten().any(|s| s.out.is_some());
        (wrote, completed)
    }

    /// Sends a tagged message at once on an idle, established connection
    /// (see [`crate::driver::Driver::send_now`]): the engine encodes the
    /// packet's headers, and a small message's data, into a buffer the
    /// driver keeps; one `write` sends it, or one vectored write with data
    /// of more than [`NOW_COPY_MAX`] bytes from where it lies. A message
    /// sent at once skips a round through the engine's window (measured
    /// one-way on loopback, an RPC with a 1 KiB body 5.6 → 4.8–5.2 µs when
    /// the limit of sending at once went from 512 bytes to 17 KiB).
    /// `None` when the message must go the usual way. Bytes the socket
    /// does not take wait as the connection's packet in progress, written
    /// before any other; the caller's memory is free either way.
    pub(super) fn send_now(
        &mut self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
    ) -> Option<crate::Result<navette_core::Status>> {
        use navette_core::Engine;
        let len = Engine::tagged_packet_len(data.len());
        let buffered = Engine::tagged_buffer_len(data.len(), NOW_COPY_MAX);
        let fill = |port: &mut DriverPort<'_>, rail, buffer: &mut [u8]| {
            if !port.can_send_now(gate, rail, data.len()) {
                return None;
            }
            Some(port.gather_tagged_now(gate, tag, data, NOW_COPY_MAX, buffer))
        };
        let sent = self.write_now(node, gate.peer, (len, buffered), fill, |_| data)?;
        Some(sent.map(|()| navette_core::Status {
            peer: gate.peer,
            tag,
            len: data.len(),
        }))
    }

    /// Sends the one-piece tagged message whose data is `parts` at once
    /// (see [`crate::driver::Driver::send_parts_now`]), copied into one
    /// buffer (they are small: a small RPC message's table and pieces) and
    /// written by one system call. `arm` runs under the node's lock once
    /// the engine agrees, before the message is numbered.
    pub(super) fn send_parts_now(
        &mut self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        arm: &mut dyn FnMut(&mut DriverPort<'_>),
    ) -> Option<crate::Result<navette_core::Status>> {
        let len: usize = parts.iter().map(|part| part.len()).sum();
        if len > NOW_COPY_MAX {
            return None;
        }
        let packet = navette_core::Engine::tagged_packet_len(len);
        let fill = |port: &mut DriverPort<'_>, rail, buffer: &mut [u8]| {
            if !port.can_send_now(gate, rail, len) {
                return None;
            }
            arm(port);
            Some(port.gather_parts_now(gate, tag, parts, buffer))
        };
        let sent = self.write_now(node, gate.peer, (packet, packet), fill, |i| parts[i])?;
        Some(sent.map(|()| navette_core::Status {
            peer: gate.peer,
            tag,
            len,
        }))
    }

    /// Sends the whole message `out` at once (see
    /// [`crate::driver::Driver::send_message_now`]). Its pieces of more
    /// than [`NOW_COPY_MAX`] bytes are written from where they lie, in
    /// the same vectored write as the rest of the packet.
    pub(super) fn send_message_now(
        &mut self,
        node: &NodeCore,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> Option<crate::Result<()>> {
        let len = navette_core::Engine::message_packet_len(pieces);
        let buffered = navette_core::Engine::message_buffer_len(pieces, NOW_COPY_MAX);
        let peer = out.peer();
        let fill = |port: &mut DriverPort<'_>, rail, buffer: &mut [u8]| {
            if !port.can_send_message_now(out, rail, pieces) {
                return None;
            }
            Some(port.gather_message_now(out, pieces, NOW_COPY_MAX, buffer))
        };
        self.write_now(node, peer, (len, buffered), fill, |i| pieces[i].data)
    }

    /// Writes a packet of `len` bytes to `peer` at once, on the first link
    /// whose rail is idle and connection writable, if `fill` (given the
    /// port, that rail and a buffer of `buffered` bytes) says the engine
    /// agrees and fills the buffer: the packet is then the parts it
    /// returns, ranges of the buffer and the data of pieces (`piece`
    /// gives piece `i`'s). `None`: not sent, go the usual way.
    fn write_now<'d>(
        &mut self,
        node: &NodeCore,
        peer: Rank,
        (len, buffered): (usize, usize),
        fill: impl FnOnce(&mut DriverPort<'_>, RailId, &mut [u8]) -> Option<NowGather>,
        piece: impl Fn(usize) -> &'d [u8],
    ) -> Option<crate::Result<()>> {
        if len > SEND_NOW_MAX || self.closed {
            return None;
        }
        // The first link whose rail is idle and connection writable.
        let (link, rail, token) = (0..self.links).find_map(|link| {
            let slot = self.slot(peer, link)?;
            let token = slot.send_conn?;
            let idle = !slot.closed && slot.out.is_none();
            (idle && self.conns.get(&token)?.may_write()).then_some((link, slot.rail, token))
        })?;
        if self.now_buf.len() < buffered {
            self.now_buf.resize(buffered, 0);
        }
        let mut buffer = std::mem::take(&mut self.now_buf);
        let gather = {
            let mut port = node.port();
            fill(&mut port, rail, &mut buffer[..buffered])
        };
        let sent = gather.map(|gather| {
            let mut slices = [IoSlice::new(&[]); NowGather::MOST_PARTS];
            let mut count = 0;
            for part in gather.parts() {
                let bytes = match part {
                    NowPart::Buffer(range) => &buffer[range.clone()],
                    &NowPart::Piece(i) => piece(i),
                };
                slices[count] = IoSlice::new(bytes);
                count += 1;
            }
            self.write_packet_now(node, peer, (link, token), &slices[..count], buffered)
        });
        self.now_buf = buffer;
        sent
    }

    /// Writes the packet `slices`, just numbered by the engine, on `link`'s
    /// connection `token` to `peer`; what the socket does not take waits
    /// as the connection's packet in progress. `copied`: bytes this driver
    /// copied to build it.
    fn write_packet_now(
        &mut self,
        node: &NodeCore,
        peer: Rank,
        (link, token): (usize, Token),
        slices: &[IoSlice<'_>],
        copied: usize,
    ) -> crate::Result<()> {
        let len: usize = slices.iter().map(|s| s.len()).sum();
        // The packet is numbered now: it must go, or fail.
        let Some(conn) = self.conns.get_mut(&token) else {
            return Err(navette_core::RequestError::PeerUnreachable { peer }.into());
        };
        let written = loop {
            match conn.stream.write_slices(slices) {
                Ok(n) => break n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    conn.writable = false;
                    break 0;
                }
                Err(e) => {
                    self.drop_conn(node, token, &ConnError::Io(e.into()));
                    return Err(navette_core::RequestError::PeerUnreachable { peer }.into());
                }
            }
        };
        self.stats.sent_now += 1;
        self.stats.sent_now_bytes += copied as u64;
        self.stats.links[link].packets_sent += 1;
        self.stats.links[link].bytes_sent += written as u64;
        if written < len {
            // Rare (a full socket): the rest goes first, by `write_all`,
            // copied out of the caller's memory, which is free on return.
            self.stats.sent_now_deferred += 1;
            let mut rest = Vec::with_capacity(len - written);
            let mut skip = written;
            for slice in slices {
                let from = skip.min(slice.len());
                skip -= from;
                rest.extend_from_slice(&slice[from..]);
            }
            self.stats.sent_now_bytes += rest.len() as u64;
            let plan = navette_core::PacketPlan {
                segments: vec![navette_core::Segment::Local(0..rest.len())],
                bytes: rest,
                offers: Vec::new(),
            };
            if let Some(slot) = self.slot_mut(peer, link) {
                slot.out = Some(OutPacket::rest_of_sent(plan));
                self.writing = true;
            }
        }
        Ok(())
    }

    /// Closes every socket; the driver does nothing afterwards.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.listeners.clear();
        self.listener_ready.clear();
        self.conns.clear();
        for slot in self.peers.iter_mut().flatten() {
            slot.send_conn = None;
            slot.dialing = None;
            slot.out = None;
        }
    }
}

/// Starts a non-blocking connection to `addr`, leaving from `source` if
/// given (port chosen by the system), so that a link's traffic takes that
/// link's network. mio's `TcpStream::connect` cannot bind first, so the
/// socket is made with rustix (safe calls) and handed to mio.
fn connect_from(source: Option<IpAddr>, addr: SocketAddr) -> io::Result<TcpStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let Some(source) = source else {
        return TcpStream::connect(addr);
    };
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let socket = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Some(rustix::net::ipproto::TCP),
    )?;
    rustix::net::bind(&socket, &SocketAddr::new(source, 0))?;
    match rustix::net::connect(&socket, &addr) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(TcpStream::from_std(std::net::TcpStream::from(socket)))
}

/// How far [`land`] got.
enum LandStep {
    /// The chunk's data is all in its destination, and the engine knows.
    Landed,
    /// The socket has no more bytes for now.
    Blocked,
}

/// Reads the rendezvous data `conn` is landing straight into its
/// destination in user memory — no copy through the connection's buffer
/// except for the bytes that arrived together with the headers. The node's
/// lock is held meanwhile (user memory is reached only under it). A
/// destination cancelled by its owner no longer resolves: its bytes are
/// read and dropped.
fn land(
    conn: &mut Conn,
    node: &NodeCore,
    rail: RailId,
    start: Clock,
    stats: &mut TcpStats,
    link: usize,
) -> Result<LandStep, ConnError> {
    let landing = conn.landing.as_mut().expect("called while landing");
    let mut port = node.port();
    let dest = port
        .rdv_destination(rail, &landing.header)
        .map_err(|e| ConnError::Refused(e.to_string()))?;
    while landing.written < dest.len {
        let at = dest.offset + landing.written..dest.offset + dest.len;
        let buffered = conn.frames.take_buffered(dest.len - landing.written);
        if !buffered.is_empty() {
            let n = buffered.len();
            let region = port.memory_mut().get_mut(dest.handle);
            if let Some(target) = region.and_then(|r| r.get_mut(at.start..at.start + n)) {
                target.copy_from_slice(buffered);
            }
            landing.written += n;
            stats.landed_copied += n as u64;
            continue;
        }
        let mut sink = [0u8; 4096];
        let read = match port
            .memory_mut()
            .get_mut(dest.handle)
            .and_then(|r| r.get_mut(at))
        {
            Some(target) => conn.stream.read(target),
            None => {
                let n = (dest.len - landing.written).min(sink.len());
                conn.stream.read(&mut sink[..n])
            }
        };
        match read {
            // In the middle of a rendezvous data chunk.
            Ok(0) => {
                let received = RDV_PREFIX + landing.written;
                return Err(ConnError::Truncated(received));
            }
            Ok(n) => {
                landing.written += n;
                stats.landed_direct += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(LandStep::Blocked),
            Err(e) => return Err(e.into()),
        }
    }
    let header = landing.header;
    conn.landing = None;
    if let Some(link) = stats.links.get_mut(link) {
        link.packets_received += 1;
        link.bytes_received +=
            (navette_wire::PacketHeader::LEN + navette_wire::RdvDataHeader::LEN + dest.len) as u64;
    }
    port.handle_rdv_landed(start.now(), rail, &header)
        .map_err(|e| ConnError::Refused(e.to_string()))?;
    Ok(LandStep::Landed)
}
