//! The server side: taking calls as they arrive, running their handlers
//! inline or on the handler threads, and replying.

use std::cell::Cell;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};

use navette_core::{Rank, RecvNow, RequestError, SendMode, Source, Status, TagMatch};
use parking_lot::Mutex;

use super::service::Service;
use super::wire::{self, CallHeader, ReplyHeader, ReplyKind};
use super::{HandlerMode, Rpc, RpcError, ServiceName};
use crate::lean_whole::{LeanWhole, WholeFor};
use crate::message::Parked;
use crate::{Error, Node, Packing, ReceiveMode, Result, Unpacking};

/// An incoming call, given to its service's handler: the caller, and the
/// message whose remaining pieces are the caller's. [`Call::split`] gives
/// the arguments to unpack and the [`Responder`] to reply with.
pub struct Call<'c> {
    node: &'c Node,
    from: Rank,
    service: &'c ServiceName,
    header: CallHeader,
    args: Unpacking<'c, 'static>,
    replied: &'c Cell<bool>,
}

impl fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("from", &self.from)
            .field("service", &self.service)
            .field("call", &self.header.call)
            .field("one_way", &self.header.one_way)
            .finish_non_exhaustive()
    }
}

impl<'c> Call<'c> {
    /// The caller's rank.
    pub fn from(&self) -> Rank {
        self.from
    }

    /// The service called.
    pub fn service(&self) -> &ServiceName {
        self.service
    }

    /// Whether the caller wants no reply.
    pub fn is_one_way(&self) -> bool {
        self.header.one_way
    }

    /// The arguments, to unpack in the order the caller packed them and
    /// end with [`Unpacking::end_unpacking`] (CHEAPER pieces land there,
    /// in the handler's memory), and the responder.
    pub fn split<'a>(self) -> (Unpacking<'c, 'a>, Responder<'c>) {
        let responder = Responder {
            node: self.node,
            to: self.from,
            call: self.header.call,
            one_way: self.header.one_way,
            replied: self.replied,
        };
        (self.args, responder)
    }
}

/// Replies to one call, once.
pub struct Responder<'c> {
    node: &'c Node,
    to: Rank,
    call: u64,
    one_way: bool,
    replied: &'c Cell<bool>,
}

impl fmt::Debug for Responder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("to", &self.to)
            .field("call", &self.call)
            .finish_non_exhaustive()
    }
}

impl Responder<'_> {
    /// Sends the reply `pack` packs (possibly nothing), and returns once it
    /// has left the handler's memory (CHEAPER pieces are sent from it). A
    /// one-way call's reply goes nowhere.
    pub fn reply<'a>(self, pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>) -> Result<()> {
        self.replied.set(true);
        if self.one_way {
            return Ok(());
        }
        let tag = wire::reply_tag(self.call);
        self.node.with_rpc_packing(self.to, tag, None, |msg| {
            msg.pack_safer(&ReplyHeader::OK.encode(), ReceiveMode::Express)?;
            pack(msg)?;
            // Not `end_packing`, which would move the message (hundreds
            // of bytes) on every reply's path.
            msg.end_later()?.wait()
        })
    }

    /// Fails the call: the caller gets [`RpcError::Handler`] with `message`
    /// (at most 4 KiB of it). Returning an error from the handler does the
    /// same.
    pub fn fail(self, message: impl fmt::Display) -> Result<()> {
        self.replied.set(true);
        if self.one_way {
            return Ok(());
        }
        send_failure(
            self.node,
            self.to,
            self.call,
            ReplyKind::Failed,
            &message.to_string(),
        )
    }
}

/// Sends the failure reply of `call` to `to`.
fn send_failure(node: &Node, to: Rank, call: u64, kind: ReplyKind, text: &str) -> Result<()> {
    let (header, text) = ReplyHeader::failure(kind, text);
    node.with_rpc_packing(to, wire::reply_tag(call), None, |msg| {
        msg.pack_safer(&header.encode(), ReceiveMode::Express)?;
        if !text.is_empty() {
            msg.pack_safer(text.as_bytes(), ReceiveMode::Express)?;
        }
        msg.end_later()?.wait()
    })
}

/// Takes every call that has arrived and serves it (inline) or hands it to
/// the handler threads. Failures concern one call and one peer: they are
/// logged, and the others go on.
pub(super) fn serve_arrived(rpc: &Rpc, node: &Node) {
    let core = node.core();
    let settled = &core.lean_whole_settled;
    loop {
        let (next, quiet_at) = {
            let mut state = core.lock();
            // A call landed at once came before any unexpected one; a
            // call come whole (the usual small one) leaves the engine at
            // once; another is received the usual way.
            let next = match state.take_landed(WholeFor::Calls, settled) {
                Some(whole) => Some(Ok(whole)),
                None => {
                    let engine = &mut state.engine;
                    engine
                        .take_unexpected_whole(wire::CHANNEL, Source::Any, wire::CALLS)
                        .map(Ok)
                        .or_else(|| {
                            engine
                                .probe(wire::CHANNEL, Source::Any, wire::CALLS)
                                .map(Err)
                        })
                }
            };
            // With no call left waiting, the next one may land at once,
            // even while this one is served.
            state.await_whole(WholeFor::Calls, CALLS_AT_ONCE, settled);
            // Then no call is queued unexpected: a later one either lands
            // (raising the slot's flag) or moves the count of arrivals.
            let waiting = matches!(
                state.lean_whole[WholeFor::Calls as usize],
                Some(LeanWhole::Waiting(_))
            );
            let seen = core.arrivals.load(Ordering::Acquire);
            match next {
                Some(next) => (next, waiting.then_some(seen)),
                None => return,
            }
        };
        let (peer, tag, args) = match next {
            Ok(whole) => {
                let Status { peer, tag, .. } = whole.status();
                (peer, tag, Unpacking::from_whole(node, whole).into_rpc())
            }
            Err(Status { peer, tag, .. }) => {
                // The first call that matches its sender and tag: order is
                // kept per sender.
                let args = node.begin_rpc_unpacking(Source::Rank(peer), TagMatch::exact(tag));
                (peer, tag, args)
            }
        };
        take_call(rpc, node, peer, tag, args);
        // Nothing came since (no call landed, none unexpected): no need
        // to lock and look again.
        let unchanged = |seen| core.arrivals.load(Ordering::Acquire) == seen;
        if quiet_at.is_some_and(unchanged) && !node.lean_whole_settled(WholeFor::Calls) {
            return;
        }
    }
}

/// The receive of the next call, waiting outside the engine.
const CALLS_AT_ONCE: RecvNow = RecvNow {
    channel: wire::CHANNEL,
    source: Source::Any,
    tag: wire::CALLS,
};

/// Reads the header of the call `args` from `peer` with `tag`, and runs
/// or queues its handler.
fn take_call(rpc: &Rpc, node: &Node, peer: Rank, tag: u64, mut args: Unpacking<'_, 'static>) {
    let mut raw = [0u8; CallHeader::LEN];
    if let Err(err) = args.unpack_express(&mut raw, SendMode::Safer) {
        if matches!(err, Error::Request(RequestError::Aborted)) {
            // Its caller gave up while packing it.
            tracing::debug!(peer, "RPC call abandoned by its caller");
        } else {
            tracing::warn!(peer, %err, "RPC call without its header dropped");
        }
        return;
    }
    // The handler numbers the pieces it unpacks from its first.
    args.hide_header_piece();
    let header = match CallHeader::decode(&raw, tag) {
        Ok(header) => header,
        Err(source) => {
            let err = RpcError::Malformed { peer, source };
            tracing::warn!(%err, "RPC call dropped");
            return;
        }
    };
    let Some(service) = rpc.registry.find(header.service) else {
        // Its remaining pieces are dropped as they come.
        drop(args);
        tracing::debug!(peer, service = %header.service, "call to an unknown service");
        if !header.one_way {
            let sent = send_failure(node, peer, header.call, ReplyKind::UnknownService, "");
            log_failed_reply(peer, sent);
        }
        return;
    };
    match service.mode {
        HandlerMode::Inline => run_handler(node, &service, peer, header, args),
        HandlerMode::Pool => match rpc.pool() {
            Ok(pool) => pool.submit(Job {
                service,
                from: peer,
                header,
                args: args.park(),
            }),
            Err(err) => tracing::error!(%err, "no handler thread for a pool service"),
        },
    }
}

/// Runs `service`'s handler on one call, then sends the failure reply if
/// the handler did not reply: its error, its panic, or its silence.
fn run_handler(
    node: &Node,
    service: &Service,
    from: Rank,
    header: CallHeader,
    args: Unpacking<'_, 'static>,
) {
    let replied = Cell::new(false);
    let call = Call {
        node,
        from,
        service: &service.name,
        header,
        args,
        replied: &replied,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| (service.handler)(call)));
    let failure = match outcome {
        Ok(Ok(())) if replied.get() || header.one_way => return,
        Ok(Ok(())) => "the handler returned without replying".to_owned(),
        Ok(Err(err)) => err.message().to_owned(),
        Err(panic) => format!("the handler panicked: {}", panic_text(&*panic)),
    };
    if replied.get() || header.one_way {
        tracing::warn!(service = %service.name, peer = from, "RPC handler failed: {failure}");
        return;
    }
    let sent = send_failure(node, from, header.call, ReplyKind::Failed, &failure);
    log_failed_reply(from, sent);
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

fn log_failed_reply(peer: Rank, sent: Result<()>) {
    if let Err(err) = sent {
        tracing::warn!(peer, %err, "cannot send an RPC failure reply");
    }
}

/// A call for a pool service, its header read.
struct Job {
    service: Arc<Service>,
    from: Rank,
    header: CallHeader,
    args: Parked,
}

/// The handler threads of pool services. They end when the node does (the
/// last handle on it dropped: the queue closes).
pub(super) struct Pool {
    jobs: mpsc::Sender<Job>,
    threads: usize,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub(super) fn start(threads: usize) -> Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        // One queue for all (std's receiver has one owner; taking it in
        // turns costs a lock per job, far below a handler's cost).
        let queue = Arc::new(Mutex::new(queue));
        for index in 0..threads {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name(format!("navette-rpc-{index}"))
                .spawn(move || work(&queue))
                .map_err(|e| RpcError::Spawn(e.to_string()))?;
        }
        Ok(Self { jobs, threads })
    }

    pub(super) fn threads(&self) -> usize {
        self.threads
    }

    fn submit(&self, job: Job) {
        if self.jobs.send(job).is_err() {
            tracing::error!("the RPC handler threads are gone: call dropped");
        }
    }
}

fn work(queue: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let Ok(job) = queue.lock().recv() else { return };
        let node = job.args.node().clone();
        let args = job.args.resume(&node);
        run_handler(&node, &job.service, job.from, job.header, args);
    }
}
