//! The caller's side: sending a call, awaiting its reply.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use navette_core::{Rank, RecvNow, SendMode, Source, TagMatch};

use super::wire::{self, CallHeader, ReplyHeader, ReplyKind};
use super::{RpcError, ServiceName};
use crate::lean_whole::{Settled, WholeFor};
use crate::message::{ReplyArm, Sent};
use crate::{Error, Node, Packing, ReceiveMode, Result, Unpacking};

/// A call awaiting its reply: [`Self::test`], [`Self::wait`], or `.await`
/// (on any executor: each poll makes a round of progress; with a progress
/// thread running and no deadline, a pending call sleeps until that thread
/// brings its reply). Dropping it abandons the call: its reply, when it
/// comes, is dropped.
#[must_use = "a call's outcome is known only by waiting for its reply"]
pub struct CallRequest<'n> {
    node: &'n Node,
    peer: Rank,
    service: ServiceName,
    /// The arguments, while some may still be leaving. They borrow
    /// nothing of the caller's (see [`Node::call`]).
    sending: Option<Sent<'n, 'static>>,
    /// Why the arguments failed to leave, if they did: the call's error,
    /// unless the reply (a server that refused them) says more.
    send_failed: Option<Error>,
    /// The reply's receive, once it is the engine's or its message came;
    /// `None` while it waits outside the engine (`lean`) and once read.
    reply: Option<Unpacking<'n, 'static>>,
    /// The reply's receive waits outside the engine (see
    /// [`crate::lean_whole`]): the node's one such receive is this call's.
    lean: bool,
    deadline: Option<(Instant, Duration)>,
}

impl fmt::Debug for CallRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallRequest")
            .field("peer", &self.peer)
            .field("service", &self.service)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// The reply to a call: the handler's pieces, to unpack in the order it
/// packed them.
#[derive(Debug)]
pub struct Reply<'n> {
    peer: Rank,
    msg: Unpacking<'n, 'static>,
}

impl<'n> Reply<'n> {
    /// The server's rank.
    pub fn from(&self) -> Rank {
        self.peer
    }

    /// The message to unpack; end it with [`Unpacking::end_unpacking`].
    pub fn unpacking<'a>(self) -> Unpacking<'n, 'a> {
        self.msg
    }

    /// Ends a reply that carries nothing (or whose pieces are not wanted:
    /// the handler then gets an error if it sent any).
    pub fn end(self) -> Result<()> {
        self.msg.end_unpacking().map(drop)
    }
}

impl Node {
    /// Calls `service` at rank `peer` with the arguments `pack` packs,
    /// without blocking: the returned request ([`CallRequest::wait`], or
    /// `.await`) gives the reply.
    ///
    /// The request borrows none of the arguments: a call small enough to
    /// leave at once (the usual one) is read where its pieces are, and a
    /// larger one copies, as it is submitted, the pieces that would leave
    /// after `call` returns (CHEAPER ones above the rendezvous threshold,
    /// LATER ones). To send large arguments without a copy, pack them as
    /// shared bytes ([`Packing::pack_bytes`]), which the engine keeps until
    /// they have left, or make the call with [`Node::call_wait`], which
    /// lends them until the reply. (A request that borrowed them could be
    /// leaked with `mem::forget`, ending the borrow while the engine still
    /// read them: SECURITY.md.)
    pub fn call<'a>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
    ) -> Result<CallRequest<'_>> {
        let (mut request, sent) = self.begin_call(peer, service.into(), false, pack)?;
        let sent = sent
            .unlent()
            .expect("a call that returns at once lends nothing");
        request.sending = Some(sent);
        Ok(request)
    }

    /// Calls `service` at rank `peer` with the arguments `pack` packs and
    /// waits for the reply (as [`Node::call`] then [`CallRequest::wait`]),
    /// lending the arguments to the engine until they have left: a large
    /// CHEAPER piece leaves by rendezvous straight from the caller's
    /// memory, never copied.
    pub fn call_wait<'a>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
    ) -> Result<Reply<'_>> {
        self.call_lending(peer, service.into(), None, pack)
    }

    /// [`Node::call_wait`], failed with [`RpcError::DeadlineExceeded`] if
    /// the reply has not come `after` from now (as
    /// [`CallRequest::timeout`]).
    pub fn call_wait_timeout<'a>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        after: Duration,
        pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
    ) -> Result<Reply<'_>> {
        self.call_lending(peer, service.into(), Some(after), pack)
    }

    /// [`Node::call_wait`], with the deadline `after` from now if any.
    fn call_lending<'a>(
        &self,
        peer: Rank,
        service: ServiceName,
        after: Option<Duration>,
        pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
    ) -> Result<Reply<'_>> {
        let (mut request, sent) = self.begin_call(peer, service, true, pack)?;
        if let Some(after) = after {
            request = request.timeout(after);
        }
        request.wait_lending(sent)
    }

    /// The number of a new call, which a finalized node refuses
    /// ([`crate::UsageError::Finalized`]).
    fn next_call(&self) -> Result<u64> {
        self.core().running()?;
        Ok(self.rpc().next_call())
    }

    /// Sends a call: its request, its arguments not yet waited for (none
    /// lent unless `lend`, see [`Packing::copy_what_it_would_lend`]).
    fn begin_call<'a>(
        &self,
        peer: Rank,
        service: ServiceName,
        lend: bool,
        pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
    ) -> Result<(CallRequest<'_>, Sent<'_, 'a>)> {
        let call = self.next_call()?;
        // The reply's receive is made before the call leaves, under the
        // lock that numbers or writes it: a reply is never unexpected,
        // unless its call was abandoned. It waits outside the engine if it
        // can (the usual lone call); else it is posted.
        let want = RecvNow {
            channel: wire::CHANNEL,
            source: Source::Rank(peer),
            tag: TagMatch::exact(wire::reply_tag(call)),
        };
        // The message drops as this returns: one packed in part that did
        // not leave has sent an empty aborted message in its place.
        let (sent, arm) =
            self.with_rpc_packing(peer, wire::call_tag(service.id()), Some(want), |msg| {
                if !lend {
                    msg.copy_what_it_would_lend();
                }
                let sent = finish_call(msg, &service, call, false, pack);
                (sent, msg.take_reply())
            });
        let (lean, reply) = match arm {
            Some(ReplyArm::Lean) => (true, None),
            Some(ReplyArm::Posted(key)) => {
                (false, Some(Unpacking::from_posted(self, key).into_rpc()))
            }
            Some(ReplyArm::Pending(_)) | None => {
                debug_assert!(sent.is_err(), "a call that left has its reply armed");
                (false, None)
            }
        };
        let mut request = CallRequest {
            node: self,
            peer,
            service,
            sending: None,
            send_failed: None,
            reply,
            lean,
            deadline: None,
        };
        match sent {
            Ok(sent) => Ok((request, sent)),
            Err(err) => {
                // Nothing of the call left, but for an empty aborted
                // message if it was packed in part (abandoned above): no
                // reply will come, and none is waited for.
                if let Some(reply) = request.reply.take() {
                    reply.abandon();
                }
                if std::mem::take(&mut request.lean) {
                    request.node.drop_whole(WholeFor::Reply);
                }
                Err(err)
            }
        }
    }

    /// Calls `service` at rank `peer` with no reply: returns once the
    /// arguments have left the caller's memory. The handler's failures are
    /// logged at the server.
    pub fn call_one_way<'a>(
        &self,
        peer: Rank,
        service: impl Into<ServiceName>,
        pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
    ) -> Result<()> {
        let call = self.next_call()?;
        let service = service.into();
        let tag = wire::call_tag(service.id());
        self.with_rpc_packing(peer, tag, None, |msg| {
            finish_call(msg, &service, call, true, pack)?.wait()
        })
    }
}

/// Packs the call's header and the caller's pieces into `msg`, and sends
/// them. By reference: a `Packing` is hundreds of bytes (see
/// [`Packing::end_later`]).
fn finish_call<'n, 'a>(
    msg: &mut Packing<'n, 'a>,
    service: &ServiceName,
    call: u64,
    one_way: bool,
    pack: impl FnOnce(&mut Packing<'_, 'a>) -> Result<()>,
) -> Result<Sent<'n, 'a>> {
    let header = CallHeader {
        service: service.id(),
        call,
        one_way,
    };
    msg.pack_safer(&header.encode(), ReceiveMode::Express)?;
    pack(msg)?;
    msg.end_later()
}

impl<'n> CallRequest<'n> {
    /// Fails the call with [`RpcError::DeadlineExceeded`] if its reply has
    /// not come `after` from now.
    /// A deadline too far to tell from never (past what [`Instant`] can
    /// hold) is none.
    pub fn timeout(mut self, after: Duration) -> Self {
        self.deadline = Instant::now().checked_add(after).map(|at| (at, after));
        self
    }

    /// The server.
    pub fn peer(&self) -> Rank {
        self.peer
    }

    /// Makes a round of progress and tells whether the reply has come (or
    /// the call has failed): [`Self::wait`] would not block.
    pub fn test(&self) -> Result<bool> {
        if self.lean {
            self.node.progress()?;
            return Ok(self.node.reply_lean_ready() || self.is_late());
        }
        match self.match_request() {
            Some(req) => Ok(self.node.test_id(req)? || self.is_late()),
            None => Ok(true),
        }
    }

    /// Waits for the arguments to leave and the reply to come; a failure
    /// at the server is an [`RpcError`], a dead server
    /// [`crate::RequestError::PeerUnreachable`], a reply the handler
    /// abandoned while packing it [`crate::RequestError::Aborted`].
    pub fn wait(mut self) -> Result<Reply<'n>> {
        if let Some(sending) = self.sending.take() {
            self.wait_sent(sending)?;
        }
        self.wait_reply()
    }

    /// [`Self::wait`] for a call whose arguments, `sent`, may be lent
    /// ([`Node::call_wait`]): they are waited for (and their memory
    /// released) before this returns, whatever happens.
    fn wait_lending(mut self, sent: Sent<'n, '_>) -> Result<Reply<'n>> {
        self.wait_sent(sent)?;
        self.wait_reply()
    }

    /// Waits until the arguments have left (or failed to: the call's
    /// error, unless the reply says more), or the deadline passes.
    fn wait_sent(&mut self, sent: Sent<'n, '_>) -> Result<()> {
        match sent.wait_until(self.deadline.map(|(at, _)| at)) {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.abandon()),
            Err(failed @ Error::Request(_)) => {
                self.send_failed = Some(failed);
                Ok(())
            }
            Err(other) => Err(other),
        }
    }

    /// Waits for the reply, the arguments gone.
    fn wait_reply(mut self) -> Result<Reply<'n>> {
        if self.lean && !self.wait_lean()? {
            return Err(self.abandon());
        }
        if self.match_request().is_some() {
            self.wait_posted()?;
        }
        self.finish()
    }

    /// Waits for a reply whose receive is the engine's (posted, not
    /// waiting outside it): out of line, as the usual reply lands outside
    /// the engine.
    #[inline(never)]
    fn wait_posted(&mut self) -> Result<()> {
        if let Some(req) = self.match_request() {
            let (service, peer) = (&self.service, self.peer);
            let what = || describe(service, peer);
            let reply = self.reply.as_mut().expect("a call's reply is read once");
            // The reply, come whole, is taken under the lock that sees it.
            let late = match self.deadline {
                None => {
                    self.node.wait_until(&what, |state| {
                        state.is_done(req).then(|| reply.take_whole(state))
                    })?;
                    false
                }
                Some((at, _)) => self.node.wait_until(&what, |state| {
                    if state.is_done(req) {
                        reply.take_whole(state);
                        Some(false)
                    } else {
                        (Instant::now() >= at).then_some(true)
                    }
                })?,
            };
            if late {
                return Err(self.abandon());
            }
        }
        Ok(())
    }

    /// Spins until the reply's receive waiting outside the engine settles
    /// (see [`Node::spin_whole`]): then it is [`Self::reply`], and any
    /// further wait is the usual one. `Ok(false)` if the deadline passed
    /// first.
    fn wait_lean(&mut self) -> Result<bool> {
        let node = self.node;
        let what = || describe(&self.service, self.peer);
        match node.spin_whole(WholeFor::Reply, || self.is_late(), &what)? {
            Some(settled) => {
                self.take_settled(settled);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Takes the reply's receive back from outside the engine if it
    /// settled (with `post`, posting it if not): whether it did.
    fn settle_lean(&mut self, post: bool) -> bool {
        let Some(settled) = self.node.settle_whole(WholeFor::Reply, post) else {
            return false;
        };
        self.take_settled(settled);
        true
    }

    fn take_settled(&mut self, settled: Settled) {
        self.lean = false;
        let reply = match settled {
            Settled::Landed(whole) => Unpacking::from_whole(self.node, whole),
            Settled::Posted(key) => Unpacking::from_posted(self.node, key),
        };
        self.reply = Some(reply.into_rpc());
    }

    fn match_request(&self) -> Option<navette_core::ReqId> {
        self.reply.as_ref().and_then(Unpacking::match_request)
    }

    fn is_late(&self) -> bool {
        self.deadline.is_some_and(|(at, _)| Instant::now() >= at)
    }

    /// Gives up the call past its deadline: a later reply will be dropped.
    fn abandon(&mut self) -> Error {
        let after = self.deadline.map_or(Duration::ZERO, |(_, after)| after);
        self.give_up();
        RpcError::DeadlineExceeded {
            peer: self.peer,
            service: self.service.to_string(),
            after,
        }
        .into()
    }

    /// The call's outcome once its reply came (or failed): the reply, or
    /// the failure it reports; a call whose arguments failed to leave gets
    /// that error, unless the reply says more (a server that refused
    /// them says why).
    fn finish(&mut self) -> Result<Reply<'n>> {
        let read = self.read_reply();
        match self.send_failed.take() {
            Some(sent) if !matches!(read, Err(Error::Rpc(_))) => Err(sent),
            _ => read,
        }
    }

    /// Reads the reply's header, and the failure it reports if any.
    fn read_reply(&mut self) -> Result<Reply<'n>> {
        let mut msg = self.reply.take().expect("a call's reply is read once");
        let peer = self.peer;
        let mut raw = [0u8; ReplyHeader::LEN];
        if let Err(err) = msg.unpack_express(&mut raw, SendMode::Safer) {
            // The match's own failure (a lost peer) says more than the
            // piece's.
            return Err(msg.status().err().unwrap_or(err));
        }
        // The caller numbers the pieces it unpacks from its first.
        msg.hide_header_piece();
        let header =
            ReplyHeader::decode(&raw).map_err(|source| RpcError::Malformed { peer, source })?;
        match header.kind {
            ReplyKind::Ok => Ok(Reply { peer, msg }),
            ReplyKind::Failed => Err(self.read_failure(msg, true, header.detail)),
            ReplyKind::UnknownService => Err(self.read_failure(msg, false, header.detail)),
        }
    }

    /// The failure a reply reports (the handler's, or an unknown
    /// service), its text (`len` bytes) read from `msg`: out of line, as
    /// the usual reply succeeds.
    #[inline(never)]
    fn read_failure(&self, msg: Unpacking<'_, '_>, handler_failed: bool, len: u32) -> Error {
        let (peer, service) = (self.peer, self.service.to_string());
        match read_detail(msg, len) {
            Err(err) => err,
            Ok(message) if handler_failed => RpcError::Handler {
                peer,
                service,
                message,
            }
            .into(),
            Ok(_) => RpcError::UnknownService { peer, service }.into(),
        }
    }
}

impl CallRequest<'_> {
    /// Abandons the reply's receive; if the reply may still come, the
    /// node's progress drops it when it does.
    fn give_up(&mut self) {
        let may_come = match self.reply.take() {
            Some(reply) => reply.abandon(),
            None => std::mem::take(&mut self.lean) && self.node.drop_whole(WholeFor::Reply),
        };
        if may_come {
            self.node.rpc().abandon_one();
        }
    }
}

impl Drop for CallRequest<'_> {
    fn drop(&mut self) {
        self.give_up();
    }
}

fn describe(service: &ServiceName, peer: Rank) -> String {
    format!("the reply of {:?} at rank {peer}", service.as_str())
}

/// The failure text that ends a reply.
fn read_detail(mut msg: Unpacking<'_, '_>, len: u32) -> Result<String> {
    let mut text = vec![0u8; len as usize];
    if !text.is_empty() {
        msg.unpack_express(&mut text, SendMode::Safer)?;
    }
    msg.end_unpacking()?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

impl<'n> Future for CallRequest<'n> {
    type Output = Result<Reply<'n>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        assert!(
            this.reply.is_some() || this.lean,
            "a call polled after it completed"
        );
        if let Some(sending) = &mut this.sending {
            match sending.poll(cx.waker()) {
                None if this.is_late() => return Poll::Ready(Err(this.abandon())),
                None => return this.pending(cx),
                Some(Ok(())) => this.sending = None,
                Some(Err(sent @ Error::Request(_))) => {
                    this.sending = None;
                    this.send_failed = Some(sent);
                }
                Some(Err(other)) => return Poll::Ready(Err(other)),
            }
        }
        if this.lean
            && let Some(not_done) = this.poll_lean(cx)
        {
            return not_done;
        }
        if let Some(req) = this.match_request() {
            match this.node.poll_id(req, cx.waker()) {
                Err(err) => return Poll::Ready(Err(err)),
                Ok(true) => {}
                Ok(false) if this.is_late() => return Poll::Ready(Err(this.abandon())),
                Ok(false) => return this.pending(cx),
            }
        }
        Poll::Ready(this.finish())
    }
}

impl<'n> CallRequest<'n> {
    /// For a future whose reply's receive waits outside the engine: after
    /// a round of progress, takes it back if it settled. A progress thread
    /// wakes only requests, so with one running it is posted at once.
    /// `Some` while the call is not done (polled again at once) or failed.
    fn poll_lean(&mut self, cx: &Context<'_>) -> Option<Poll<Result<Reply<'n>>>> {
        let threads = self.node.core().progress_threads.load(Ordering::Acquire);
        if threads > 0 {
            self.settle_lean(true);
            return None;
        }
        if let Err(err) = self.node.progress() {
            return Some(Poll::Ready(Err(err)));
        }
        if self.settle_lean(false) {
            return None;
        }
        if self.is_late() {
            return Some(Poll::Ready(Err(self.abandon())));
        }
        cx.waker().wake_by_ref();
        Some(Poll::Pending)
    }

    fn pending<T>(&self, cx: &Context<'_>) -> Poll<T> {
        // No timer wakes a deadline: poll again.
        if self.deadline.is_some() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}
