//! The `tcp` driver: one rail per peer rank over TCP (one per peer and
//! network with several links, see below), connected on demand.
//!
//! At start-up the driver binds a non-blocking listener
//! ([`TcpConfig::bind`], loopback by default), publishes its address through
//! the bootstrap under `tcp-addr` (and `tcp-links`), and declares one engine
//! rail per peer rank — no socket yet. A connection to a peer is dialed the first time the
//! engine has a packet for its rail (or, with [`TcpConfig::eager_connect`],
//! to every higher rank at start-up), so N ranks that talk to few peers do
//! not open N² connections. Every connection opens with the job's
//! handshake (hello both ways, then an HMAC proof of the job key both
//! ways); a peer that fails it is refused and logged, and the session goes
//! on.
//!
//! Data path: packets are written with vectored writes straight from the
//! engine's plan (headers from the plan, data from user memory), resumed
//! after a partial write; the engine hears of the send only when the whole
//! packet is out. Received packets are framed by their 12-byte header and
//! fed to the engine. A malformed packet, a protocol violation, an end of
//! stream or a reset closes the connection and the peer's rail.
//!
//! Threads: every thread that waits may call [`Driver::progress`]; one does
//! I/O at a time (the others return at once). Threads with nothing to do
//! block in `epoll` ([`Driver::wait`]) and are woken by data, by writable
//! sockets, or by [`Driver::wake`] when a user thread submits work — a wake
//! costs a system call only while a thread is actually blocked.
//!
//! # Several links (multi-rail)
//!
//! Ranks joined by several networks can use them all at once:
//! [`TcpConfig::links`] (or `NAVETTE_TCP_LINKS=10.231.1.1,10.231.2.1`,
//! see [`LINKS_VAR`]) lists this rank's address on each network, in the
//! same order on every rank. The driver then listens on each address,
//! publishes them all under [`LINKS_KEY`] (and link 0's under
//! [`ADDR_KEY`], as with one link), and declares one engine rail per peer
//! *and link*, with the link's bandwidth if given. Link `k` to a peer is a
//! connection from this rank's `k`-th address to the peer's `k`-th; dialing
//! a peer dials all its links at once. Each connection says in its
//! handshake which link it belongs to, authenticated with the job key
//! ([`links`] has the details); a peer claiming a link this rank does not
//! have, or another link than the listener it reached, is refused, and so
//! is a peer with another number of links. The engine hands each packet
//! to whichever rail of the peer is idle (a scheduling strategy may weigh
//! them by bandwidth); [`TcpStats::links`] counts what each link carried.
//!
//! Failures: a rail does not retransmit, so when any link to a peer fails
//! (refused, reset, a bad packet) the engine fails the peer as a whole:
//! its rails on every link close and whatever needs it fails with
//! `PeerUnreachable`. Its connections on the other links close as well,
//! so that the peer, too, sees the failure on every link.
//!
//! With no link listed (the default) the driver has one link, on
//! [`TcpConfig::bind`], and its connections and handshake are exactly the
//! single-link ones.

mod congestion;
mod conn;
mod frame;
mod inner;
mod keepalive;
pub mod links;

pub use congestion::{CONGESTION_VAR, Congestion, CongestionError};

/// Environment variable: [`TcpConfig::keepalive`], `off` or whole seconds.
pub const KEEPALIVE_VAR: &str = "NAVETTE_TCP_KEEPALIVE_S";
pub use links::{LINKS_KEY, LINKS_VAR, LinkError, MAX_LINKS, TcpLink};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Poll, Waker};
use navette_core::RailCaps;
use navette_session::Bootstrap;
use navette_wire::RdvDataHeader;
use parking_lot::Mutex;

use crate::driver::Driver;
use crate::node::NodeCore;
use crate::runtime::env_setting;
use crate::{Error, Result};
use inner::Inner;

/// Longest packet body a tcp rail may be configured for
/// ([`TcpConfig::caps`]' `max_packet`): what a packet header's 32-bit body
/// length holds.
pub const MAX_PACKET: usize = u32::MAX as usize;

/// Longest rendezvous fragment a tcp rail may be configured for
/// ([`TcpConfig::caps`]' `max_fragment`): a fragment travels behind its
/// chunk header in one packet body of at most [`MAX_PACKET`] bytes.
pub const MAX_FRAGMENT: usize = MAX_PACKET - RdvDataHeader::LEN;

/// Refuses rail capabilities ([`TcpConfig::caps`]) that no packet could
/// carry: a `max_packet` past [`MAX_PACKET`] or a `max_fragment` past
/// [`MAX_FRAGMENT`] (whose packet's length, computed as the driver
/// starts, would overflow).
fn check_caps(caps: &RailCaps) -> Result<()> {
    let too_long = |field: &str, value: usize, most: usize| {
        Error::Config(format!(
            "tcp caps.{field} of {value} bytes: at most {most} \
             (a packet header holds a 32-bit body length)"
        ))
    };
    if caps.max_packet > MAX_PACKET {
        return Err(too_long("max_packet", caps.max_packet, MAX_PACKET));
    }
    if caps.max_fragment > MAX_FRAGMENT {
        return Err(too_long("max_fragment", caps.max_fragment, MAX_FRAGMENT));
    }
    if let Some(min) = caps.read_min {
        return Err(Error::Config(format!(
            "tcp caps.read_min of {min} bytes: a tcp peer cannot read this \
             process's memory (leave it None)"
        )));
    }
    Ok(())
}

/// The bootstrap key under which each rank publishes its listening address
/// (link 0's, with several links; [`LINKS_KEY`] has them all).
pub const ADDR_KEY: &str = "tcp-addr";

/// Settings of the tcp driver. Every field has a default.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Address to listen on; port 0 picks a free one. Peers dial the
    /// address the listener got, so it must be reachable from them (not
    /// `0.0.0.0`). With [`Self::links`], only its port is used (for every
    /// link).
    pub bind: SocketAddr,
    /// This rank's address on each network it shares with its peers, in
    /// the same order on every rank: one link (one engine rail per peer)
    /// per entry, at most [`MAX_LINKS`]. Empty (the default): one link, on
    /// [`Self::bind`]. `NAVETTE_TCP_LINKS` overrides it (see
    /// [`TcpConfig::from_env`]).
    pub links: Vec<TcpLink>,
    /// Connect to every peer at start-up instead of on first use: each rank
    /// dials the higher ranks and waits for the lower ones.
    pub eager_connect: bool,
    /// What the engine is told about every tcp rail. Its `max_packet` and
    /// `max_fragment` also bound the packets accepted from peers (a longer
    /// one closes the connection before anything is allocated for it):
    /// every rank of a job must use the same. A packet's header gives its
    /// body's length in 32 bits, so `max_packet` is at most [`MAX_PACKET`]
    /// and `max_fragment` at most [`MAX_FRAGMENT`] ([`TcpDriver::bind`]
    /// refuses more).
    pub caps: RailCaps,
    /// Most connections allowed in their handshake at once; more are
    /// refused.
    pub max_handshakes: usize,
    /// A connection that has not completed its handshake after this long
    /// is dropped (so silent connections cannot hold every handshake slot).
    pub handshake_timeout: Duration,
    /// Congestion control of the connections: Reno on loopback by default
    /// (see [`Congestion`]); `NAVETTE_TCP_CONGESTION` overrides it (see
    /// [`TcpConfig::from_env`]).
    pub congestion: Congestion,
    /// How long a peer host may be silent before its connections are
    /// closed, when it vanished without a reset (a crash, a cable): an
    /// idle connection is probed after this long, then every third of it,
    /// and closed after 3 unanswered probes, so its requests fail with
    /// [`crate::RequestError::PeerUnreachable`] within about twice this
    /// time. The peer's kernel answers the probes whatever its process
    /// does, so a rank busy computing is not mistaken for a lost one. A
    /// connection with data in flight to a vanished host is ended by the
    /// kernel's retransmission limit instead (minutes). A killed process
    /// is seen at once (its kernel resets the connection). From 1 s to
    /// 32767 s, Linux's limits, in whole seconds (a fraction is dropped;
    /// [`TcpDriver::bind`] refuses one outside them).
    /// `None` keeps the system's (no probes); `NAVETTE_TCP_KEEPALIVE_S`
    /// overrides it (`off`, or whole seconds from 1 to 32767).
    pub keepalive: Option<Duration>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            links: Vec::new(),
            eager_connect: false,
            caps: RailCaps {
                // Below this, copying at the receiver costs less than the
                // request / clear-to-send round trip over loopback TCP.
                rdv_threshold: 256 << 10,
                // Rendezvous data is read straight into its destination,
                // so a fragment costs no buffer: 4 MiB ones measured ~5 %
                // faster than 1 MiB ones on 4 MiB messages over loopback
                // (fewer hand-offs between fragments).
                max_fragment: 4 << 20,
                max_packet: 2 << 20,
                latency: Duration::from_micros(15),
                bandwidth: 2_000_000_000,
                read_min: None,
            },
            max_handshakes: 1024,
            handshake_timeout: Duration::from_secs(10),
            congestion: Congestion::default(),
            keepalive: Some(Duration::from_secs(30)),
        }
    }
}

impl TcpConfig {
    /// This configuration with the congestion control that
    /// `NAVETTE_TCP_CONGESTION` names, the links that `NAVETTE_TCP_LINKS`
    /// lists and the keepalive `NAVETTE_TCP_KEEPALIVE_S` gives, where set
    /// (and not empty). A value the driver could not apply is an
    /// [`Error::Config`] naming the variable: a malformed one, a keepalive
    /// past the kernel's limit, a congestion control the kernel does not
    /// have or does not allow this process (see [`Congestion::from_env`]).
    pub fn from_env(self) -> Result<Self> {
        let keepalive = match env_setting(KEEPALIVE_VAR)? {
            Some(value) if !value.trim().is_empty() => keepalive::parse(&value)?,
            _ => self.keepalive,
        };
        let links = match env_setting(LINKS_VAR)? {
            Some(value) if !value.trim().is_empty() => {
                links::parse_links(&value).map_err(|e| Error::Config(e.to_string()))?
            }
            _ => self.links,
        };
        Ok(Self {
            congestion: self.congestion.from_env()?,
            links,
            keepalive,
            ..self
        })
    }

    /// The engine capabilities of each link's rails, by link.
    pub fn link_caps(&self) -> Vec<RailCaps> {
        if self.links.is_empty() {
            return vec![self.caps];
        }
        self.links
            .iter()
            .map(|link| RailCaps {
                bandwidth: link.bandwidth.unwrap_or(self.caps.bandwidth),
                ..self.caps
            })
            .collect()
    }
}

/// Counters of the tcp driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpStats {
    /// Connections established now (both of a simultaneous pair count).
    pub established: usize,
    /// Connections that completed a handshake since the start.
    pub established_total: usize,
    /// Connections this rank dialed.
    pub dialed: usize,
    /// Incoming connections refused (failed handshake, too many).
    pub refused: usize,
    /// Rendezvous data bytes read from a socket straight into their
    /// destination.
    pub landed_direct: u64,
    /// Rendezvous data bytes that had come with their headers and were
    /// copied from the connection's buffer into their destination.
    pub landed_copied: u64,
    /// Small messages sent at once (one `write`, or one vectored write
    /// with their large pieces, no request).
    pub sent_now: u64,
    /// Bytes the driver copied to send packets at once: into its buffer,
    /// all but pieces of more than 4 KiB (written from where they lie);
    /// then, of a packet the socket did not take whole, the rest again.
    pub sent_now_bytes: u64,
    /// Of those, the ones the socket did not take whole: the rest went out
    /// later, before anything else on their connection.
    pub sent_now_deferred: u64,
    /// Connections given the configured congestion control
    /// ([`TcpConfig::congestion`]); the others keep the system's.
    pub congestion_set: usize,
    /// Connections put back in the epoll set by a thread about to block
    /// (spinning rounds read them without epoll): once per sleep that
    /// follows work, not once per sleep.
    pub parked_registrations: u64,
    /// What each link carried, by link (entries past the driver's number
    /// of links stay zero).
    pub links: [TcpLinkStats; MAX_LINKS],
}

/// Counters of one link of the tcp driver (every peer together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpLinkStats {
    /// Connections on this link established now.
    pub established: usize,
    /// Packets written whole to this link's connections (small messages
    /// sent at once included).
    pub packets_sent: u64,
    /// Bytes written to this link's connections, headers included.
    pub bytes_sent: u64,
    /// Packets received whole on this link's connections.
    pub packets_received: u64,
    /// Bytes of those packets, headers included.
    pub bytes_received: u64,
}

/// One established connection of the tcp driver (see
/// [`TcpDriver::connections`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpConnection {
    /// The peer rank.
    pub peer: u32,
    /// The link it belongs to.
    pub link: usize,
    /// This end's address.
    pub local: SocketAddr,
    /// The peer's end's address.
    pub remote: SocketAddr,
}

/// The tcp driver of one rank.
#[derive(Debug)]
pub struct TcpDriver {
    inner: Mutex<Inner>,
    waker: Waker,
    /// Threads blocked in `epoll` (or about to be).
    sleepers: AtomicUsize,
    bootstrap: Arc<dyn Bootstrap>,
    /// The listening address of each link, by link.
    local_addrs: Vec<SocketAddr>,
    /// The rails' capabilities, by link.
    caps: Vec<RailCaps>,
    /// The origin of the time given to the engine (shared with `Inner`).
    start: crate::clock::Clock,
}

/// Names of the per-link counters of [`Driver::counters`], by link.
const LINK_COUNTERS: [[&str; 4]; MAX_LINKS] = {
    macro_rules! link {
        ($k:literal) => {
            [
                concat!("link", $k, "_packets_sent"),
                concat!("link", $k, "_bytes_sent"),
                concat!("link", $k, "_packets_received"),
                concat!("link", $k, "_bytes_received"),
            ]
        };
    }
    [
        link!(0),
        link!(1),
        link!(2),
        link!(3),
        link!(4),
        link!(5),
        link!(6),
        link!(7),
    ]
};

fn io_error(what: &str, err: std::io::Error) -> Error {
    Error::Driver {
        driver: "tcp",
        message: format!("{what}: {err}"),
    }
}

impl TcpDriver {
    /// Binds a listener per link and publishes their addresses under
    /// [`LINKS_KEY`] (link 0's also under [`ADDR_KEY`]). Peers can dial
    /// only after a fence of the bootstrap. A configuration the driver
    /// could not apply is refused first ([`Error::Config`]): bad links,
    /// rail capabilities past [`MAX_PACKET`] or [`MAX_FRAGMENT`], a
    /// keepalive outside the kernel's limits (1 to 32767 s), a congestion
    /// control the kernel does not give this process.
    pub fn bind(bootstrap: Arc<dyn Bootstrap>, config: &TcpConfig) -> Result<Arc<Self>> {
        links::validate(&config.links).map_err(|e| Error::Config(e.to_string()))?;
        check_caps(&config.caps)?;
        if let Some(after) = config.keepalive {
            keepalive::check(after)?;
        }
        // A setting made in code is checked with the kernel as one from
        // the environment is (it was only warned about, on every
        // connection); the default (Reno on loopback) is not, as a kernel
        // that refused it would be refusing what it always allows.
        if config.congestion != Congestion::default() {
            config.congestion.check().map_err(|e| {
                Error::Config(format!("tcp congestion {:?}: {e}", config.congestion))
            })?;
        }
        // (where to listen, where connections leave from), by link.
        let plan: Vec<(SocketAddr, Option<std::net::IpAddr>)> = if config.links.is_empty() {
            vec![(config.bind, None)]
        } else {
            let port = config.bind.port();
            let addrs = config.links.iter().map(|l| l.addr);
            addrs
                .map(|ip| (SocketAddr::new(ip, port), Some(ip)))
                .collect()
        };
        let mut listeners = Vec::with_capacity(plan.len());
        let mut local_addrs = Vec::with_capacity(plan.len());
        for (link, (addr, _)) in plan.iter().enumerate() {
            let listener = TcpListener::bind(*addr)
                .map_err(|e| io_error(&format!("cannot listen on {addr} (link {link})"), e))?;
            local_addrs.push(
                listener
                    .local_addr()
                    .map_err(|e| io_error("listener address", e))?,
            );
            listeners.push(listener);
        }
        bootstrap.put(ADDR_KEY, local_addrs[0].to_string().as_bytes())?;
        bootstrap.put(LINKS_KEY, links::publish_value(&local_addrs).as_bytes())?;
        let poll = Poll::new().map_err(|e| io_error("epoll", e))?;
        let waker = Waker::new(poll.registry(), inner::WAKER).map_err(|e| io_error("waker", e))?;
        let sources = plan.iter().map(|&(_, source)| source).collect();
        let mut inner = Inner::new(poll, listeners, sources, Arc::clone(&bootstrap))
            .map_err(|e| io_error("epoll registration", e))?;
        inner.eager_connect = config.eager_connect;
        inner.max_handshakes = config.max_handshakes;
        inner.handshake_timeout = config.handshake_timeout;
        inner.congestion = config.congestion.clone();
        inner.keepalive = config.keepalive;
        let start = inner.start;
        Ok(Arc::new(Self {
            inner: Mutex::new(inner),
            waker,
            sleepers: AtomicUsize::new(0),
            bootstrap,
            local_addrs,
            caps: config.link_caps(),
            start,
        }))
    }

    /// Declares one rail per peer rank and link on `node` (the node this
    /// driver serves), link by link for each peer. Opens no socket.
    pub fn attach(&self, node: &NodeCore) {
        self.inner.lock().attach(node, &self.caps);
    }

    /// With [`TcpConfig::eager_connect`], dials every higher rank; call
    /// after the bootstrap's fence.
    pub fn connect_eagerly(&self, node: &NodeCore) {
        let mut inner = self.inner.lock();
        if inner.eager_connect {
            inner.dial_higher(node);
        }
    }

    /// The address this rank listens on (link 0's, with several links).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs[0]
    }

    /// The address each link listens on, by link.
    pub fn link_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// How many links this driver has (one rail per peer and link).
    pub fn link_count(&self) -> usize {
        self.local_addrs.len()
    }

    /// Connections established now; a pair that dialed each other at once
    /// counts two.
    pub fn connection_count(&self) -> usize {
        self.inner.lock().established()
    }

    /// The established connections, with their link and addresses (for
    /// diagnostics and tests: which network each link's traffic takes).
    pub fn connections(&self) -> Vec<TcpConnection> {
        self.inner.lock().connections()
    }

    /// The driver's counters.
    pub fn stats(&self) -> TcpStats {
        self.inner.lock().stats()
    }

    /// Ends the session for `node`: waits, while still serving peers, until
    /// every rank reached the bootstrap's fence, then closes every socket.
    fn shut_down(&self, node: &NodeCore) -> Result<()> {
        self.begin_finalizing();
        let fenced = crate::driver::serve_until_fenced(self, node, &*self.bootstrap);
        self.close();
        fenced
    }

    /// The session is ending: connections that close from now on are
    /// expected, not worth a warning.
    pub(crate) fn begin_finalizing(&self) {
        self.inner.lock().finalizing = true;
    }

    /// Closes every socket; the driver does nothing afterwards.
    pub(crate) fn close(&self) {
        self.inner.lock().close();
    }
}

impl Driver for TcpDriver {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn progress(&self, node: &NodeCore) -> Result<bool> {
        let Some(mut inner) = self.inner.try_lock() else {
            return Ok(false);
        };
        inner.progress(node).map_err(|e| io_error("poll", e))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        let mut all = vec![
            ("landed_direct", s.landed_direct),
            ("landed_copied", s.landed_copied),
            ("sent_now", s.sent_now),
            ("sent_now_bytes", s.sent_now_bytes),
            ("refused", s.refused as u64),
        ];
        // Per link, when there are several.
        if self.link_count() > 1 {
            for (names, l) in LINK_COUNTERS.iter().zip(&s.links).take(self.link_count()) {
                let values = [
                    l.packets_sent,
                    l.bytes_sent,
                    l.packets_received,
                    l.bytes_received,
                ];
                all.extend(names.iter().copied().zip(values));
            }
        }
        all
    }

    fn bytes_copied(&self) -> u64 {
        let stats = self.stats();
        stats.landed_copied + stats.sent_now_bytes
    }

    fn now(&self) -> Option<Duration> {
        Some(self.start.now())
    }

    fn send_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
        _then: crate::driver::Then,
    ) -> Option<Result<navette_core::Status>> {
        self.inner.try_lock()?.send_now(node, gate, tag, data)
    }

    fn send_message_now(
        &self,
        node: &NodeCore,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> Option<Result<()>> {
        self.inner.try_lock()?.send_message_now(node, out, pieces)
    }

    fn send_parts_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        arm: &mut dyn FnMut(&mut crate::driver::DriverPort<'_>),
    ) -> Option<Result<navette_core::Status>> {
        self.inner
            .try_lock()?
            .send_parts_now(node, gate, tag, parts, arm)
    }

    fn wait(&self, node: &NodeCore, timeout: Duration) -> Result<()> {
        let Some(mut inner) = self.inner.try_lock_for(timeout) else {
            return Ok(());
        };
        // Connections that spinning rounds read directly come back into
        // epoll, which reports at once what is already ready.
        // A connection epoll refused is only seen by rounds: sleep little.
        let timeout = if inner.park() {
            timeout
        } else {
            timeout.min(Duration::from_millis(1))
        };
        if inner.has_ready_work() {
            return Ok(());
        }
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // Work submitted before we registered as a sleeper: do not block.
        let result = if node.take_dirty() {
            node.mark_dirty();
            Ok(())
        } else {
            inner.poll_events(Some(timeout))
        };
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        result.map_err(|e| io_error("poll", e))
    }

    fn wake(&self) {
        // Pairs with the fence in `wait`: either the sleeper sees the dirty
        // mark, or we see the sleeper.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) > 0
            && let Err(e) = self.waker.wake()
        {
            tracing::warn!(%e, "tcp: cannot wake the poller");
        }
    }

    fn finalize(&self, node: &NodeCore) -> Result<()> {
        self.shut_down(node)
    }
}
