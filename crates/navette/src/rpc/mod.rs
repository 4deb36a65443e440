//! RPC services: handlers registered by name, called with Madeleine
//! messages, their arguments received straight into the memory the
//! handler chooses.
//!
//! A call is one message: a header the library reads EXPRESS, then the
//! pieces the caller packed. The handler unpacks them as any message —
//! typically a small header EXPRESS, then, having allocated, the body
//! CHEAPER straight into its own memory (over the rendezvous path, with no
//! intermediate copy) — and replies with a message of its own packing or
//! with an error. The caller gets a [`CallRequest`] (test, wait, or
//! `.await`) whose [`Reply`] it unpacks the same way.
//!
//! A call that returns at once ([`Node::call`](crate::Node::call))
//! borrows none of its arguments, so its request may outlive them: it
//! copies large borrowed pieces as they are submitted, and sends shared
//! bytes ([`Packing::pack_bytes`](crate::Packing::pack_bytes)) without a
//! copy. A blocking call ([`Node::call_wait`](crate::Node::call_wait))
//! lends its arguments until the reply, and sends them by rendezvous
//! straight from the caller's memory, as below.
//!
//! ```
//! use navette::rpc::{HandlerMode, ServiceName};
//! use navette::{ReceiveMode, SendMode, sim::SimCluster};
//!
//! let cluster = SimCluster::builder(2).build();
//! let (client, server) = (cluster.node(0), cluster.node(1));
//! // Sums a vector of bytes whose length comes first.
//! server
//!     .register_service("sum", HandlerMode::Inline, |call| {
//!         let (mut args, responder) = call.split();
//!         let mut len = [0u8; 4];
//!         args.unpack_express(&mut len, SendMode::Safer)?;
//!         let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
//!         args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
//!         args.end_unpacking()?;
//!         let sum: u64 = body.iter().map(|&b| u64::from(b)).sum();
//!         responder.reply(|msg| msg.pack_safer(&sum.to_le_bytes(), ReceiveMode::Express))?;
//!         Ok(())
//!     })
//!     .unwrap();
//! let stop = std::sync::atomic::AtomicBool::new(false);
//! std::thread::scope(|s| {
//!     s.spawn(|| server.serve_until(|| stop.load(std::sync::atomic::Ordering::Acquire)));
//!     let body = vec![3u8; 100_000]; // above the rendezvous threshold
//!     let len = (body.len() as u32).to_le_bytes();
//!     let reply = client
//!         .call_wait(1, "sum", |msg| {
//!             msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
//!             msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
//!         })
//!         .unwrap();
//!     let mut msg = reply.unpacking();
//!     let mut sum = [0u8; 8];
//!     msg.unpack_express(&mut sum, SendMode::Safer).unwrap();
//!     msg.end_unpacking().unwrap();
//!     assert_eq!(u64::from_le_bytes(sum), 300_000);
//!     // Unknown services are typed errors.
//!     let err = client.call(1, "nope", |_| Ok(())).unwrap().wait().unwrap_err();
//!     assert!(matches!(err, navette::Error::Rpc(navette::rpc::RpcError::UnknownService { .. })));
//!     stop.store(true, std::sync::atomic::Ordering::Release);
//! });
//! ```
//!
//! # Where handlers run
//!
//! [`HandlerMode::Inline`] handlers run in whichever thread makes progress
//! ([`crate::Node::progress`], any wait, [`crate::Node::serve_until`], a
//! progress thread) when their call arrives, one at a time: they must not
//! block. [`HandlerMode::Pool`] handlers run on the node's handler threads
//! and may block and make calls of their own. A server needs some thread
//! making progress to notice calls: a progress thread, `serve_until`, or
//! its own waits.
//!
//! Calls and replies travel on the reserved channel [`crate::ChannelId::RPC`]:
//! a user's send, receive or message there is refused
//! ([`crate::UsageError::ReservedChannel`]), so that none can take a call or
//! a reply; probing it is allowed.
//!
//! # Small calls
//!
//! A small call or reply leaves in one packet when its rail is idle (over
//! shared memory, written straight into the peer's ring; over tcp, by one
//! write). One of at most 4 KiB (its pieces and their table) travels as
//! a single tagged piece whose data is the table of its pieces
//! ([`navette_wire::PieceTable`]) then their data, each copied straight
//! into the peer's ring (over tcp, into the one buffer written):
//! a tagged message's send and landing cost about half those of a message
//! of several pieces, and this layer unfolds it back into the pieces its
//! reader unpacks, with the same checks (a malformed table fails the
//! message with [`crate::RequestError::Malformed`]). Its bytes are
//! counted: a packet of one piece leaves in the lone form
//! ([`navette_wire::LONE`], 20 bytes of headers), a table entry takes two
//! bytes, the call's header eleven, so that a call of a word-sized
//! argument, or its reply, fits one 64-byte line of the ring (with the
//! ring's and the cell's 20): the receiver's core fetches it in one
//! transfer, where a second line would cost a second (about as much as
//! the rest of the call, see `docs/profiling.md`). A service whose name
//! is known when the program is built is best named by a `const`
//! [`ServiceName::from_static`]: calls then pass its name around with no
//! allocation and no shared count. Over shared memory a call or reply
//! takes no lock as it begins: it is numbered under the lock that writes
//! it into the ring, and a call's reply receive is made under that lock
//! too, before the call can leave. On arrival, a
//! lone call's reply and a server's next call are received at once: each
//! waits outside the engine, and a packet that is exactly its message,
//! in order and all eager, is taken out whole, its data copied back to
//! back, with no receive posted, matched or completed (see
//! `GateStats::messages_at_once`). Over tcp, such a message of 4 KiB or
//! more keeps the connection's buffer instead: its data is copied only
//! into the memory it is unpacked to. The storage of a message taken
//! whole is recycled by the thread that drops it (up to 64 KiB copied and
//! 1 MiB of a connection's buffer per thread), so a client waiting for
//! its replies, or a server serving calls, allocates nothing for them.
//! Anything else — concurrent calls, large arguments by rendezvous, a
//! message cut over packets — is received the usual way, in the same
//! order.

mod client;
mod server;
mod service;
mod typed;
mod wire;

/// The channel of calls and replies.
pub(crate) use wire::CHANNEL;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use navette_core::{Rank, Source};

use crate::{Node, Result};

pub use client::{CallRequest, Reply};
pub use server::{Call, Responder};
pub use service::{HandlerError, HandlerMode, HandlerResult, ServiceId, ServiceName};
pub use typed::MAX_TYPED_LEN;
pub use wire::HeaderError;

use crate::lean_whole::WholeFor;
use server::Pool;
use service::{Registry, Service};

/// Why an RPC failed, beyond the transport's own errors (a dead peer is
/// [`crate::RequestError::PeerUnreachable`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// The server has no service of that name.
    #[error("rank {peer} has no service {service:?}")]
    UnknownService {
        /// The server.
        peer: Rank,
        /// The service called.
        service: String,
    },
    /// The handler failed (or panicked, or returned without replying).
    #[error("service {service:?} at rank {peer} failed: {message}")]
    Handler {
        /// The server.
        peer: Rank,
        /// The service called.
        service: String,
        /// The handler's error.
        message: String,
    },
    /// No reply came before the call's deadline. A reply that comes later
    /// is dropped.
    #[error("no reply from service {service:?} at rank {peer} within {after:?}")]
    DeadlineExceeded {
        /// The server.
        peer: Rank,
        /// The service called.
        service: String,
        /// The time the call was given.
        after: Duration,
    },
    /// The peer's reply (or call) did not follow the RPC protocol.
    #[error("malformed RPC message from rank {peer}: {source}")]
    Malformed {
        /// The peer.
        peer: Rank,
        /// What was wrong.
        #[source]
        source: HeaderError,
    },
    /// A typed call's value could not be encoded or decoded.
    #[error("typed service {service:?}: {message}")]
    Encoding {
        /// The service called.
        service: String,
        /// What failed.
        message: String,
    },
    /// A service of that name is registered already.
    #[error("service {service:?} is registered already")]
    AlreadyRegistered {
        /// The name.
        service: String,
    },
    /// Two names have the same wire id: rename one.
    #[error("service {service:?} has the wire id {wire:#010x} of registered service {existing:?}")]
    IdCollision {
        /// The name refused.
        service: String,
        /// The name registered.
        existing: String,
        /// Their wire id.
        wire: u32,
    },
    /// The handler threads are already running: their number is fixed.
    #[error("the handler threads are running already ({running})")]
    PoolStarted {
        /// How many run.
        running: usize,
    },
    /// A handler thread could not be started.
    #[error("cannot start a handler thread: {0}")]
    Spawn(String),
}

/// Handler threads started with the first pool service, unless set.
pub const DEFAULT_HANDLER_THREADS: usize = 4;

/// A node's RPC state: its services, the dispatch of their calls, and the
/// numbering of its own calls.
#[derive(Debug)]
pub(crate) struct Rpc {
    registry: Registry,
    /// Some service is registered: progress looks for calls.
    serving: AtomicBool,
    /// A thread is looking for calls (one at a time).
    dispatching: AtomicBool,
    /// A thread found another dispatching: that one looks again after.
    missed: AtomicBool,
    next_call: AtomicU64,
    /// The node's count of messages come unexpected on the RPC channel
    /// (`NodeCore::arrivals`) when calls were last looked for: until it
    /// moves, no call can have arrived unexpected (one received at once
    /// raises the calls slot's flag instead, see [`crate::lean_whole`]).
    looked: AtomicU64,
    /// Replies of calls past their deadline that may still come: progress
    /// drops unexpected replies while there are some.
    abandoned: AtomicUsize,
    handler_threads: AtomicUsize,
    pool: OnceLock<Pool>,
}

impl Rpc {
    fn new() -> Self {
        Self {
            registry: Registry::default(),
            serving: AtomicBool::new(false),
            dispatching: AtomicBool::new(false),
            missed: AtomicBool::new(false),
            next_call: AtomicU64::new(0),
            looked: AtomicU64::new(u64::MAX),
            abandoned: AtomicUsize::new(0),
            handler_threads: AtomicUsize::new(DEFAULT_HANDLER_THREADS),
            pool: OnceLock::new(),
        }
    }

    /// A fresh call number (below 2^48: six bytes of the call's header,
    /// and it goes in a reply's tag).
    fn next_call(&self) -> u64 {
        self.next_call.fetch_add(1, Ordering::Relaxed) & wire::CALL_MASK
    }

    /// Counts a call given up while its reply may still come: progress
    /// drops that reply, even one that came already.
    fn abandon_one(&self) {
        self.abandoned.fetch_add(1, Ordering::SeqCst);
        self.looked.store(u64::MAX, Ordering::SeqCst);
    }

    /// Serves the calls that arrived, one thread at a time; called after
    /// every round of progress.
    pub(crate) fn dispatch(&self, node: &Node) {
        // Calls may have arrived in rounds made by a driver alone (a lean
        // receive, finalize), so a server looks at every round.
        if !self.serving.load(Ordering::Acquire) && self.abandoned.load(Ordering::Acquire) == 0 {
            return;
        }
        // Spinning waits call this on every round: a few loads when
        // nothing arrived.
        let arrivals = &node.core().arrivals;
        if arrivals.load(Ordering::Acquire) == self.looked.load(Ordering::SeqCst)
            && !self.missed.load(Ordering::Acquire)
            && !node.lean_whole_settled(WholeFor::Calls)
        {
            return;
        }
        loop {
            if self
                .dispatching
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                self.missed.store(true, Ordering::Release);
                return;
            }
            let guard = Dispatching(&self.dispatching);
            // Packets handled from now on are looked at next time; a call
            // abandoned from now on resets the mark after this store
            // (`abandon_one`), so its late reply is looked for then. Stored
            // only when it moved (a call that landed outside the engine
            // moves nothing): a SeqCst store is an atomic exchange, about
            // 8 ns on the call's path. One skipped orders nothing either:
            // an abandoned call's mark, stored after, differs, and has the
            // next round store it again.
            let seen = arrivals.load(Ordering::Acquire);
            if self.looked.load(Ordering::Relaxed) != seen {
                self.looked.store(seen, Ordering::SeqCst);
            }
            if self.abandoned.load(Ordering::SeqCst) > 0 {
                self.drop_late_replies(node);
            }
            if self.serving.load(Ordering::Acquire) {
                server::serve_arrived(self, node);
            }
            drop(guard);
            // Read before it is swapped: a swap is an atomic exchange.
            if !(self.missed.load(Ordering::Acquire) && self.missed.swap(false, Ordering::AcqRel)) {
                return;
            }
        }
    }

    /// Drops replies nobody waits for any more (their calls passed their
    /// deadline): every reply is awaited by a receive posted before its
    /// call left, so an unexpected one is late, or bogus.
    fn drop_late_replies(&self, node: &Node) {
        loop {
            let late = node
                .core()
                .lock()
                .engine
                .probe(wire::CHANNEL, Source::Any, wire::REPLIES);
            let Some(late) = late else { return };
            // Matched, then abandoned: its pieces are dropped as they come.
            drop(node.begin_rpc_unpacking(
                Source::Rank(late.peer),
                navette_core::TagMatch::exact(late.tag),
            ));
            let _ = self
                .abandoned
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            tracing::debug!(peer = late.peer, tag = late.tag, "late RPC reply dropped");
        }
    }

    fn register(&self, service: Service) -> Result<()> {
        if service.mode == HandlerMode::Pool {
            self.pool()?;
        }
        self.registry.insert(service)?;
        self.serving.store(true, Ordering::Release);
        // Calls that came before it are looked at again.
        self.looked.store(u64::MAX, Ordering::SeqCst);
        Ok(())
    }

    fn pool(&self) -> Result<&Pool> {
        if let Some(pool) = self.pool.get() {
            return Ok(pool);
        }
        let threads = self.handler_threads.load(Ordering::Acquire).max(1);
        let pool = Pool::start(threads)?;
        Ok(self.pool.get_or_init(|| pool))
    }
}

/// Clears the dispatching mark even if a handler panics through it.
struct Dispatching<'a>(&'a AtomicBool);

impl Drop for Dispatching<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Node {
    pub(crate) fn rpc(&self) -> &Rpc {
        self.core().rpc.get_or_init(Rpc::new)
    }

    /// Registers the service `name`: `handler` runs for each call to it, as
    /// `mode` says (see [`HandlerMode`]). A name registered already, or
    /// one whose wire id another name has, is refused
    /// ([`RpcError::AlreadyRegistered`], [`RpcError::IdCollision`]).
    pub fn register_service(
        &self,
        name: &str,
        mode: HandlerMode,
        handler: impl Fn(Call<'_>) -> HandlerResult + Send + Sync + 'static,
    ) -> Result<()> {
        self.rpc().register(Service {
            name: ServiceName::new(name),
            mode,
            handler: Box::new(handler),
        })
    }

    /// Removes the service `name`; later calls to it get
    /// [`RpcError::UnknownService`]. Returns whether it was registered.
    pub fn unregister_service(&self, name: &str) -> bool {
        self.core()
            .rpc
            .get()
            .is_some_and(|rpc| rpc.registry.remove(&ServiceName::new(name)))
    }

    /// Sets how many handler threads serve [`HandlerMode::Pool`] services
    /// (default [`DEFAULT_HANDLER_THREADS`]); they start with the first
    /// such service, after which the number is fixed.
    pub fn set_handler_threads(&self, threads: usize) -> Result<()> {
        let rpc = self.rpc();
        if let Some(pool) = rpc.pool.get() {
            return Err(RpcError::PoolStarted {
                running: pool.threads(),
            }
            .into());
        }
        rpc.handler_threads.store(threads.max(1), Ordering::Release);
        Ok(())
    }

    /// Makes progress (serving calls) until `done` returns true, checking
    /// it after every round; idles as waits do (spin, yield, block).
    pub fn serve_until(&self, done: impl Fn() -> bool) -> Result<()> {
        let core = self.core();
        let mut idle: u32 = 0;
        while !done() {
            // A call that lands at once costs the node's lock alone, not
            // a whole round of the driver's (see `Driver::progress_lean`).
            let moved = core.driver().progress_lean(core)?;
            if let Some(rpc) = core.rpc.get() {
                rpc.dispatch(self);
            }
            if moved {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                self.back_off(idle)?;
            }
        }
        Ok(())
    }
}
