//! The `tcp` driver: one rail per peer rank over TCP, connected on demand.
//!
//! At start-up the driver binds a non-blocking listener
//! ([`TcpConfig::bind`], loopback by default), publishes its address through
//! the bootstrap under `tcp-addr`, and declares one engine rail per peer
//! rank — no socket yet. A connection to a peer is dialed the first time the
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

mod congestion;
mod conn;
mod frame;
mod inner;

pub use congestion::{CONGESTION_VAR, Congestion};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Poll, Waker};
use navette_core::RailCaps;
use navette_session::Bootstrap;
use parking_lot::Mutex;

use crate::driver::Driver;
use crate::node::NodeCore;
use crate::{Error, Result};
use inner::Inner;

/// The bootstrap key under which each rank publishes its listening address.
pub const ADDR_KEY: &str = "tcp-addr";

/// Settings of the tcp driver. Every field has a default.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Address to listen on; port 0 picks a free one. Peers dial the
    /// address the listener got, so it must be reachable from them (not
    /// `0.0.0.0`).
    pub bind: SocketAddr,
    /// Connect to every peer at start-up instead of on first use: each rank
    /// dials the higher ranks and waits for the lower ones.
    pub eager_connect: bool,
    /// What the engine is told about every tcp rail.
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
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
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
            },
            max_handshakes: 1024,
            handshake_timeout: Duration::from_secs(10),
            congestion: Congestion::default(),
        }
    }
}

impl TcpConfig {
    /// This configuration with the congestion control that
    /// `NAVETTE_TCP_CONGESTION` names, if set.
    pub fn from_env(self) -> Result<Self> {
        Ok(Self {
            congestion: self.congestion.from_env()?,
            ..self
        })
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
    /// Small messages sent at once (one `write`, no request).
    pub sent_now: u64,
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
}

/// The tcp driver of one rank.
#[derive(Debug)]
pub struct TcpDriver {
    inner: Mutex<Inner>,
    waker: Waker,
    /// Threads blocked in `epoll` (or about to be).
    sleepers: AtomicUsize,
    bootstrap: Arc<dyn Bootstrap>,
    local_addr: SocketAddr,
    caps: RailCaps,
    /// The origin of the time given to the engine (shared with `Inner`).
    start: crate::clock::Clock,
}

fn io_error(what: &str, err: std::io::Error) -> Error {
    Error::Driver {
        driver: "tcp",
        message: format!("{what}: {err}"),
    }
}

impl TcpDriver {
    /// Binds the listener and publishes its address under [`ADDR_KEY`].
    /// Peers can dial only after a fence of the bootstrap.
    pub fn bind(bootstrap: Arc<dyn Bootstrap>, config: &TcpConfig) -> Result<Arc<Self>> {
        let listener = TcpListener::bind(config.bind).map_err(|e| io_error("cannot listen", e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| io_error("listener address", e))?;
        bootstrap.put(ADDR_KEY, local_addr.to_string().as_bytes())?;
        let poll = Poll::new().map_err(|e| io_error("epoll", e))?;
        let waker = Waker::new(poll.registry(), inner::WAKER).map_err(|e| io_error("waker", e))?;
        let mut inner = Inner::new(poll, listener, Arc::clone(&bootstrap))
            .map_err(|e| io_error("epoll registration", e))?;
        inner.eager_connect = config.eager_connect;
        inner.max_handshakes = config.max_handshakes;
        inner.handshake_timeout = config.handshake_timeout;
        inner.congestion = config.congestion.clone();
        let start = inner.start;
        Ok(Arc::new(Self {
            inner: Mutex::new(inner),
            waker,
            sleepers: AtomicUsize::new(0),
            bootstrap,
            local_addr,
            caps: config.caps,
            start,
        }))
    }

    /// Declares one rail per peer rank on `node` (the node this driver
    /// serves). Opens no socket.
    pub fn attach(&self, node: &NodeCore) {
        self.inner.lock().attach(node, self.caps);
    }

    /// With [`TcpConfig::eager_connect`], dials every higher rank; call
    /// after the bootstrap's fence.
    pub fn connect_eagerly(&self, node: &NodeCore) {
        let mut inner = self.inner.lock();
        if inner.eager_connect {
            inner.dial_higher(node);
        }
    }

    /// The address this rank listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Connections established now; a pair that dialed each other at once
    /// counts two.
    pub fn connection_count(&self) -> usize {
        self.inner.lock().established()
    }

    /// The driver's counters.
    pub fn stats(&self) -> TcpStats {
        let inner = self.inner.lock();
        TcpStats {
            established: inner.established(),
            ..inner.stats
        }
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

    fn now(&self) -> Option<Duration> {
        Some(self.start.now())
    }

    fn send_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
    ) -> Option<Result<navette_core::Status>> {
        self.inner.try_lock()?.send_now(node, gate, tag, data)
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
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            if let Err(e) = self.waker.wake() {
                tracing::warn!(%e, "tcp: cannot wake the poller");
            }
        }
    }

    fn finalize(&self, node: &NodeCore) -> Result<()> {
        self.shut_down(node)
    }
}
