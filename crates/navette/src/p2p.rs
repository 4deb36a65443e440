//! Tagged point-to-point: non-blocking requests over owned buffers, and
//! blocking calls over borrowed ones.
//!
//! Non-blocking calls take ownership of their buffers (a send's
//! [`Bytes`], a receive's `Vec<u8>`) and give a receive buffer back on
//! completion, so a request may outlive any borrow. Blocking calls lend the
//! caller's slices for their duration, without copying.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use navette_core::{RecvNow, ReqId, StagedSend, Status, TagMatch};

#[cfg(doc)]
use crate::UsageError;
use crate::driver::Then;
use crate::lean_irecv::LeanKey;
use crate::node::{Outside, State, WakeOn, unlock};
use crate::{Error, Gate, Node, RecvFrom, Result};

/// What a completed receive gives back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The buffer given to `irecv`, truncated to the message's length.
    pub data: Vec<u8>,
    /// Sender, tag and length.
    pub status: Status,
}

/// Turns a completion into the value a request yields.
pub trait Completion: Sized {
    #[doc(hidden)]
    fn from_parts(status: Status, buf: Option<Vec<u8>>) -> Self;
}

impl Completion for Status {
    fn from_parts(status: Status, _buf: Option<Vec<u8>>) -> Self {
        status
    }
}

impl Completion for Received {
    fn from_parts(status: Status, buf: Option<Vec<u8>>) -> Self {
        let mut data = buf.unwrap_or_default();
        data.truncate(status.len);
        Self { data, status }
    }
}

/// A handle on a non-blocking operation: a send yields its [`Status`], a
/// receive its [`Received`] buffer. Dropping it detaches the operation,
/// which still completes; its buffer is then freed.
///
/// A small send that left at once ([`Node::isend`] over shared memory) is
/// complete from its start: testing, waiting for or polling it makes no
/// progress and takes no lock.
///
/// It is also a [`Future`] of the same outcome, for any executor: each poll
/// makes a round of progress; with a progress thread running
/// ([`Node::spawn_progress_thread`]) a pending request sleeps until that
/// thread completes it (a receive posted ahead stays outside the engine,
/// a small send in an open packet wakes once the packet left), otherwise it
/// asks to be polled again at once, as a spinning wait would.
#[derive(Debug)]
#[must_use = "a request does nothing until it is waited for or tested"]
pub struct Request<'n, T: Completion> {
    node: &'n Node,
    op: Op,
    taken: bool,
    _yields: PhantomData<fn() -> T>,
}

/// Where a request's operation is.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// In the engine.
    Engine(ReqId),
    /// A send that left at once ([`Node::isend`]): complete from its start,
    /// unknown to the engine.
    Left(Status),
    /// A receive waiting outside the engine ([`Node::irecv`], see
    /// [`crate::lean_irecv`]), or what became of it.
    Lean(LeanKey),
    /// A small send put in its peer's open packet ([`Node::isend`]):
    /// complete once the packet leaves, at the next round of progress or,
    /// over shm, when a thread waits for it.
    Staged(StagedSend, Status),
    /// A receive refused as it was made ([`Node::irecv`] on a reserved
    /// channel, or from a rank no message can come from): fails from its
    /// start, unknown to the engine. What it was from, not its error,
    /// which is not `Copy` (ops are copied on every request's path).
    Refused(RecvFrom),
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Engine(id) => id.fmt(f),
            Self::Left(status) => write!(f, "a send of {} bytes left at once", status.len),
            Self::Lean(key) => key.fmt(f),
            Self::Staged(_, status) => {
                write!(f, "a send of {} bytes in an open packet", status.len)
            }
            Self::Refused(from) => write!(f, "a receive refused ({from:?})"),
        }
    }
}

impl<'n, T: Completion> Request<'n, T> {
    fn new(node: &'n Node, op: Op) -> Self {
        Self {
            node,
            op,
            taken: false,
            _yields: PhantomData,
        }
    }

    /// Makes one round of progress and tells whether the request is
    /// complete (a send complete from its start needs none).
    pub fn test(&self) -> Result<bool> {
        match self.op {
            Op::Engine(id) => self.node.test_id(id),
            Op::Left(_) => Ok(true),
            Op::Refused(from) => Err(self.node.refusal(from)),
            Op::Lean(_) | Op::Staged(..) => self.node.test_with(|state| self.is_done(state)),
        }
    }

    /// Waits for completion.
    pub fn wait(mut self) -> Result<T> {
        let (outcome, buf) = match self.op {
            // On error (a stalled wait) it is detached as it drops.
            Op::Engine(id) => self.node.wait_id(id)?,
            Op::Left(status) => (Ok(status), None),
            Op::Refused(from) => {
                self.taken = true;
                return Err(self.node.refusal(from));
            }
            Op::Lean(key) => self
                .node
                .wait_until(&|| key.to_string(), |state| state.take_irecv(key))?,
            Op::Staged(staged, status) => {
                // Its open packet leaves now, rather than at a round of the
                // wait below; a driver's failure shows there too.
                self.node.ready_to_push(staged.peer);
                let _ = self.node.flush_staged();
                let what = || self.op.to_string();
                let left = self
                    .node
                    .wait_until(&what, |state| state.take_staged(staged))?;
                (left.map(|()| status).map_err(Error::from), None)
            }
        };
        self.taken = true;
        Ok(T::from_parts(outcome?, buf))
    }

    /// Lets go of an operation dropped before it was taken: it completes
    /// on its own, unseen.
    #[cold]
    fn detach(&mut self) {
        match self.op {
            Op::Engine(id) => self.node.with_state(|s| s.detach(id)),
            Op::Lean(key) => self.node.with_state(|s| s.drop_irecv(key)),
            Op::Staged(staged, _) => {
                let mut state = self.node.core().lock();
                state.drop_staged(staged);
                unlock(state);
            }
            Op::Left(_) | Op::Refused(_) => {}
        }
    }

    /// Whether it is complete (under the lock that sees it).
    fn is_done(&self, state: &State) -> bool {
        match self.op {
            Op::Engine(id) => state.is_done(id),
            Op::Left(_) | Op::Refused(_) => true,
            Op::Lean(key) => state.irecv_is_done(key),
            Op::Staged(staged, _) => state.engine.staged_outcome(staged).is_some(),
        }
    }

    /// Its outcome if it is complete ([`Self::try_take`]), a receive
    /// posted ahead that landed in its buffer (the usual one in a list)
    /// taken without the general path's layers.
    #[inline]
    fn take_if_complete(&mut self, state: &mut State) -> Option<Result<T>> {
        if let Op::Lean(key) = self.op {
            if let Some((status, buf)) = state.take_landed_irecv(key) {
                self.taken = true;
                return Some(Ok(T::from_parts(status, Some(buf))));
            }
            // Still waiting (what a spinning wait sees each round): no
            // call into the general path.
            if !state.irecv_is_done(key) {
                return None;
            }
        }
        self.try_take(state)
    }

    fn try_take(&mut self, state: &mut State) -> Option<Result<T>> {
        let outcome = match self.op {
            Op::Engine(id) => {
                let (outcome, buf) = state.take(id)?;
                outcome.map(|status| T::from_parts(status, buf))
            }
            Op::Left(status) => Ok(T::from_parts(status, None)),
            Op::Refused(from) => Err(self.node.refusal(from)),
            Op::Lean(key) => {
                let (outcome, buf) = state.take_irecv(key)?;
                outcome.map(|status| T::from_parts(status, buf))
            }
            Op::Staged(staged, status) => {
                let left = state.take_staged(staged)?;
                left.map(|()| T::from_parts(status, None))
                    .map_err(Error::from)
            }
        };
        self.taken = true;
        Some(outcome)
    }
}

impl<T: Completion> Future for Request<'_, T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        assert!(!this.taken, "a request polled after it completed");
        let on = match this.op {
            Op::Left(status) => {
                this.taken = true;
                return Poll::Ready(Ok(T::from_parts(status, None)));
            }
            Op::Refused(from) => {
                this.taken = true;
                return Poll::Ready(Err(this.node.refusal(from)));
            }
            Op::Engine(id) => WakeOn::Req(id),
            Op::Lean(key) => WakeOn::Outside(Outside::Irecv(key)),
            Op::Staged(staged, _) => WakeOn::Outside(Outside::Staged(staged)),
        };
        let node = this.node;
        match node.poll_with(on, cx.waker(), |state| this.try_take(state)) {
            Err(err) => Poll::Ready(Err(err)),
            Ok(poll) => poll,
        }
    }
}

impl<T: Completion> Drop for Request<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Taken (the usual end): nothing left to let go of.
        if !self.taken {
            self.detach();
        }
    }
}

/// The data of a non-blocking send: the caller's [`Bytes`], or a slice of
/// the caller's that is copied where it must outlive the call.
enum SendData<'a> {
    Owned(Bytes),
    Borrowed(&'a [u8]),
}

impl SendData<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Owned(bytes) => bytes,
            Self::Borrowed(slice) => slice,
        }
    }

    /// The data as the request keeps it: a borrowed slice is copied.
    fn into_owned(self) -> Bytes {
        match self {
            Self::Owned(bytes) => bytes,
            Self::Borrowed(slice) => Bytes::copy_from_slice(slice),
        }
    }
}

impl Node {
    /// The error of a receive from `from` refused as it was made
    /// ([`Op::Refused`]): the same as then, as the job's size and this
    /// rank do not change.
    #[cold]
    fn refusal(&self, from: RecvFrom) -> Error {
        match self.core().user_source(from) {
            Err(err) => err.into(),
            Ok(()) => unreachable!("a receive refused as it was made stays refused"),
        }
    }
}

/// Waits for every request; returns their outcomes in order (see
/// [`wait_all_into`]).
pub fn wait_all<T: Completion>(mut requests: Vec<Request<'_, T>>) -> Vec<Result<T>> {
    let mut outcomes = Vec::with_capacity(requests.len());
    wait_all_into(&mut requests, &mut outcomes);
    outcomes
}

/// Waits for every request of `requests`, which it empties, and appends
/// their outcomes to `outcomes` in order: with both vectors kept from call
/// to call, waiting allocates nothing.
///
/// Requests of one node are waited for together, as `MPI_Waitall` does:
/// progress runs until all are complete, then all are taken under one
/// lock. If the wait stalls past the node's timeout, each complete request
/// gives its outcome and each other one [`Error::Stalled`] (and is
/// detached, as a request dropped); if progress itself fails, each request
/// is waited for in turn, so that each gets its own outcome.
pub fn wait_all_into<'n, T: Completion>(
    requests: &mut Vec<Request<'n, T>>,
    outcomes: &mut Vec<Result<T>>,
) {
    let Some(first) = requests.first() else {
        return;
    };
    let node = first.node;
    // Sends in open packets leave now, rather than at a round of the wait
    // below (a driver's failure shows there too), and if all have left
    // they are taken at once.
    let flush_and_take = |requests: &mut Vec<Request<'n, T>>, outcomes: &mut Vec<Result<T>>| {
        let _ = node.flush_staged();
        take_sends_that_left(node, requests, outcomes)
    };
    // A list of sends in open packets, the usual one, begins with one: its
    // packets are written before anything else is looked at, the driver
    // asking first for the memory it writes.
    let mut flushed = false;
    if let Op::Staged(staged, _) = first.op {
        node.ready_to_push(staged.peer);
        if flush_and_take(requests, outcomes) {
            return;
        }
        flushed = true;
    }
    // What the list holds, in one pass.
    let (mut all_left, mut any_staged, mut one_node) = (true, false, true);
    for r in requests.iter() {
        all_left &= matches!(r.op, Op::Left(_));
        any_staged |= matches!(r.op, Op::Staged(..));
        one_node &= std::sync::Arc::ptr_eq(r.node.core(), node.core());
    }
    // Sends that all left at once: nothing to lock for.
    if all_left {
        outcomes.extend(requests.drain(..).map(Request::wait));
        return;
    }
    if one_node && any_staged && !flushed && flush_and_take(requests, outcomes) {
        return;
    }
    if one_node {
        let count = requests.len();
        // Requests before this one are taken, their outcomes in
        // `outcomes`, in order. Each is taken as soon as it is seen
        // complete, in the same look, and in place (marked taken, not
        // moved out): emptying the list then lets go of nothing.
        let mut taken = 0;
        let all = node.wait_until(&|| format!("all of {count} requests"), |state| {
            while let Some(outcome) = requests
                .get_mut(taken)
                .and_then(|r| r.take_if_complete(state))
            {
                outcomes.push(outcome);
                taken += 1;
            }
            (taken == count).then(|| requests.clear())
        });
        let Err(err) = all else {
            return;
        };
        // The requests taken hold nothing more.
        requests.drain(..taken);
        if let Error::Stalled { waited, .. } = err {
            // Stalled ones are dropped once the lock is released
            // (dropping a request detaches it, which locks).
            let mut stalled = Vec::new();
            let mut state = node.core().lock();
            state.collect();
            for mut request in requests.drain(..) {
                match request.try_take(&mut state) {
                    Some(outcome) => outcomes.push(outcome),
                    None => {
                        outcomes.push(Err(Error::Stalled {
                            waited,
                            what: request.op.to_string(),
                        }));
                        stalled.push(request);
                    }
                }
            }
            unlock(state);
            return;
        }
    }
    outcomes.extend(requests.drain(..).map(Request::wait));
}

/// Takes every request of `requests` if all are sends of `node` that have
/// left (at once, or in open packets), in one pass under one lock: the
/// usual end of a list of small sends once their packets were flushed.
/// Whether it did (else it took none, and `outcomes` is as it was).
fn take_sends_that_left<'n, T: Completion>(
    node: &'n Node,
    requests: &mut Vec<Request<'n, T>>,
    outcomes: &mut Vec<Result<T>>,
) -> bool {
    let before = outcomes.len();
    let state = node.core().lock();
    // The packets of the last peer seen that have left, read once for all
    // of its sends (a list's are usually to one peer).
    let mut left_below: Option<(navette_core::Rank, u64)> = None;
    let mut has_left = |staged: StagedSend| {
        let below = match left_below {
            Some((peer, below)) if peer == staged.peer => below,
            _ => {
                let below = state.engine.staged_left_below(staged);
                left_below = Some((staged.peer, below));
                below
            }
        };
        staged.packet < below
    };
    let all = !state.has_outside_wakers()
        && requests.iter_mut().all(|r| {
            let status = match r.op {
                Op::Left(status) => status,
                Op::Staged(staged, status) if has_left(staged) => status,
                _ => return false,
            };
            if !std::sync::Arc::ptr_eq(r.node.core(), node.core()) {
                return false;
            }
            r.taken = true;
            outcomes.push(Ok(T::from_parts(status, None)));
            true
        });
    unlock(state);
    if all {
        requests.clear();
    } else {
        // Not taken after all: each goes the usual way.
        for r in requests.iter_mut().take(outcomes.len() - before) {
            r.taken = false;
        }
        outcomes.truncate(before);
    }
    all
}

/// Waits until one of `requests` completes, removes it and returns its
/// index and outcome.
///
/// # Panics
/// If `requests` is empty or its requests belong to different nodes.
pub fn wait_any<T: Completion>(requests: &mut Vec<Request<'_, T>>) -> Result<(usize, Result<T>)> {
    assert!(!requests.is_empty(), "wait_any needs at least one request");
    let node = requests[0].node;
    assert!(
        requests
            .iter()
            .all(|r| std::sync::Arc::ptr_eq(r.node.core(), node.core())),
        "wait_any needs requests of one node"
    );
    // A send complete from its start: no lock.
    if let Some(i) = requests.iter().position(|r| matches!(r.op, Op::Left(_))) {
        let outcome = requests.remove(i).wait();
        return Ok((i, outcome));
    }
    let count = requests.len();
    let found = node.wait_until(&|| format!("any of {count} requests"), |state| {
        requests
            .iter_mut()
            .enumerate()
            .find_map(|(i, r)| r.try_take(state).map(|out| (i, out)))
    })?;
    drop(requests.remove(found.0));
    Ok(found)
}

impl Node {
    /// Sends `data` to `gate` with `tag`, without blocking. Over shared
    /// memory, a small message above `ShmConfig::stage_max` (256 bytes by
    /// default) to an idle rail leaves at once (copied into the peer's
    /// ring): its request is complete from the start. A small message that
    /// does not (over tcp, over shm one of at most `stage_max` bytes, or
    /// any while its rail is busy) waits for the next round of progress —
    /// any wait, test or progress call, or the progress thread; over shm,
    /// `wait` or `wait_all` of one of the sends, or a send to the same peer
    /// that may leave at once, writes it at once — and, where its
    /// channel's strategy aggregates (the default), shares one packet with
    /// the other small messages sent to the same peer meanwhile, whatever
    /// their channels and tags: it is copied into that packet now, and its
    /// request completes when the packet leaves. A larger message is sent
    /// from `data` itself, which the request keeps until it has left.
    ///
    /// The reserved channel [`ChannelId::RPC`](crate::ChannelId::RPC) is
    /// refused ([`UsageError::ReservedChannel`]), as by every send and
    /// receive. So are, by every send, a rank outside the job
    /// ([`UsageError::NotInJob`]) and this rank itself
    /// ([`UsageError::SendToSelf`]); a lost peer of the job gets
    /// [`UsageError::NoRail`]. On a finalized node every send fails with
    /// [`UsageError::Finalized`].
    pub fn isend(
        &self,
        gate: Gate,
        tag: u64,
        data: impl Into<Bytes>,
    ) -> Result<Request<'_, Status>> {
        self.isend_from(gate, tag, SendData::Owned(data.into()), |request| request)
    }

    /// Sends a copy of `data` to `gate` with `tag`, without blocking:
    /// Madeleine's SAFER mode, the caller's buffer is free as soon as this
    /// returns. A small message goes as by [`Node::isend`] (at once, or
    /// copied into its peer's open packet), with no [`Bytes`] to make or
    /// share; a larger one is copied into a buffer of
    /// its own first, which `isend` of a [`Bytes`] avoids.
    pub fn isend_safer(&self, gate: Gate, tag: u64, data: &[u8]) -> Result<Request<'_, Status>> {
        self.isend_from(gate, tag, SendData::Borrowed(data), |request| request)
    }

    /// [`Node::isend`], its request put at the end of `requests`, as
    /// `MPI_Isend` writes into a request array: for a program that keeps
    /// its sends in a list for [`wait_all_into`]. On error nothing is
    /// added. The request is written straight into the list: a request is
    /// 64 bytes, and one returned, then pushed, is copied twice on the
    /// way, each copy reading back what was stored a few cycles before
    /// (series of small sends 5–11 % faster this way in two builds of
    /// three, the same in the third: docs/profiling.md, stop 43).
    pub fn isend_into<'n>(
        &'n self,
        gate: Gate,
        tag: u64,
        data: impl Into<Bytes>,
        requests: &mut Vec<Request<'n, Status>>,
    ) -> Result<()> {
        self.isend_from(gate, tag, SendData::Owned(data.into()), |request| {
            requests.push(request);
        })
    }

    /// [`Node::isend_safer`], its request put at the end of `requests` (see
    /// [`Node::isend_into`]). On error nothing is added.
    pub fn isend_safer_into<'n>(
        &'n self,
        gate: Gate,
        tag: u64,
        data: &[u8],
        requests: &mut Vec<Request<'n, Status>>,
    ) -> Result<()> {
        self.isend_from(gate, tag, SendData::Borrowed(data), |request| {
            requests.push(request);
        })
    }

    /// [`Node::isend`] and [`Node::isend_safer`]: the data is copied out of
    /// `data` where the message leaves at once or joins an open packet;
    /// otherwise the request keeps it, owned. The request goes to `put`
    /// (returned, or pushed where the caller keeps its requests).
    ///
    /// Inlined into its callers, which a program built with the
    /// workspace's profiles (fat LTO) then inlines into its loop: as a
    /// call of its own, with the caller's registers kept on the stack
    /// around it, it made a series of small sends 1-6 % slower
    /// (docs/profiling.md, stop 42).
    #[inline(always)]
    fn isend_from<'n, R>(
        &'n self,
        gate: Gate,
        tag: u64,
        data: SendData<'_>,
        put: impl FnOnce(Request<'n, Status>) -> R,
    ) -> Result<R> {
        crate::node::user_channel(gate.channel)?;
        let core = self.core();
        core.running()?;
        let bytes = data.bytes();
        // The usual small send: into its peer's open packet, with no call
        // to the driver and none of the rest of the paths in the frame.
        let stages = core.isend_stages_first(bytes.len());
        if stages {
            let mut state = core.lock();
            if let Some(staged) = state
                .engine
                .stage_tagged(gate.channel, gate.peer, tag, bytes)
            {
                unlock(state);
                return Ok(put(self.staged(gate, tag, bytes.len(), staged)));
            }
            unlock(state);
        }
        Ok(put(self.isend_usual(gate, tag, data, stages)?))
    }

    /// A send put in its peer's open packet: tells the driver, and makes
    /// its request.
    #[inline(always)]
    fn staged(&self, gate: Gate, tag: u64, len: usize, staged: StagedSend) -> Request<'_, Status> {
        let core = self.core();
        core.mark_dirty();
        if staged.closed {
            self.send_closed_packet();
        }
        if staged.opened {
            // A thread sleeping in the driver (a progress thread) sends it;
            // later messages of the same packet need not tell.
            self.wake_driver();
        }
        let status = Status {
            peer: gate.peer,
            tag,
            len,
        };
        Request::new(self, Op::Staged(staged, status))
    }

    /// Sends a full open packet now: the receiver starts on it while this
    /// thread fills the next. The message is accepted either way: a
    /// driver's failure shows at the next wait.
    #[cold]
    fn send_closed_packet(&self) {
        let core = self.core();
        if let Err(err) = core.driver().send_closed(core) {
            tracing::debug!(%err, "sending a full open packet");
        }
    }

    /// [`Self::isend_from`] past its fast path (`staging_tried`: the open
    /// packet refused the message already).
    #[inline(never)]
    fn isend_usual(
        &self,
        gate: Gate,
        tag: u64,
        data: SendData<'_>,
        staging_tried: bool,
    ) -> Result<Request<'_, Status>> {
        let core = self.core();
        // Where packets cost little (shm), a small send to an idle rail
        // leaves at once, and the receiver starts on it while this thread
        // goes on; elsewhere (tcp: a system call per packet) it waits for
        // the next round, to leave with what follows.
        let tried_at_once = core.isend_tries_at_once(data.bytes().len());
        if tried_at_once
            && let Some(sent) = self.send_at_once(gate, tag, data.bytes(), Then::SendsMore)
        {
            return Ok(Request::new(self, Op::Left(sent?)));
        }
        // Too large for an open packet, a borrowed message is copied before
        // the lock is taken: a large copy under it would hold up the node's
        // other threads.
        let data = if data.bytes().len() > navette_core::OPEN_MOST_PIECE {
            SendData::Owned(data.into_owned())
        } else {
            data
        };
        let bytes = data.bytes();
        let mut state = core.lock();
        // Small messages that wait share their peer's open packet where
        // their channel's strategy aggregates (the default): encoded now,
        // copied, they leave together at the next round, before anything
        // of the windows.
        if !staging_tried
            && let Some(staged) = state
                .engine
                .stage_tagged(gate.channel, gate.peer, tag, bytes)
        {
            unlock(state);
            return Ok(self.staged(gate, tag, bytes.len(), staged));
        }
        if !tried_at_once && core.sends_at_once() {
            // A small message the open packet did not take (its channel's
            // strategy does not stage, or a window of its peer holds
            // something) leaves at once where it can, as a larger one would.
            unlock(state);
            if let Some(sent) = self.send_at_once(gate, tag, bytes, Then::SendsMore) {
                return Ok(Request::new(self, Op::Left(sent?)));
            }
            state = core.lock();
        }
        let out = state.engine.send_begin(gate.channel, gate.peer, tag)?;
        let range = state.mem.insert_shared(data.into_owned());
        let id = state.engine.send_tagged(out, range);
        state.watch(id, Some(range.handle));
        self.unlock_with_work(state);
        Ok(Request::new(self, Op::Engine(id)))
    }

    /// Sends the one-piece message `data` at once if the driver can
    /// ([`Driver::send_now`]). Small messages waiting in the peer's open
    /// packet hold it back (it would overtake them): where packets cost a
    /// copy (`NodeCore::sends_at_once`), they are sent first
    /// ([`Driver::flush_staged`]) and it tries again; elsewhere (a system
    /// call per packet) it leaves with them at the next round. `then`:
    /// what this thread does next (see [`Then`]).
    fn send_at_once(
        &self,
        gate: Gate,
        tag: u64,
        data: &[u8],
        then: Then,
    ) -> Option<Result<Status>> {
        let core = self.core();
        let driver = core.driver();
        // What follows writes into the peer's ring if it can: its first
        // line is asked for first (see `Driver::ready_to_push`).
        driver.ready_to_push(gate.peer);
        if let Some(sent) = driver.send_now(core, gate, tag, data, then) {
            return Some(sent);
        }
        if !core.sends_at_once() {
            return None;
        }
        // A failure of the flush (another peer's) is not this message's:
        // it goes the usual way, and the next round reports it.
        match driver.flush_staged(core, then) {
            Ok(true) => driver.send_now(core, gate, tag, data, then),
            Ok(false) | Err(_) => None,
        }
    }

    /// Receives into `buf` a message from `from` whose tag matches `tag`,
    /// without blocking. The message may be shorter than `buf`, not longer.
    ///
    /// Where nothing is posted or unexpected on its channel (receives
    /// posted ahead of their messages), the receive waits outside the
    /// engine and its message lands in `buf` with no request or posting
    /// of the engine's (see `GateStats::messages_at_once`).
    ///
    /// On the reserved channel [`ChannelId::RPC`](crate::ChannelId::RPC)
    /// ([`UsageError::ReservedChannel`]), from a rank outside the job
    /// ([`UsageError::NotInJob`]) or from this rank itself
    /// ([`UsageError::RecvFromSelf`]), the request fails from its start
    /// and `buf` is dropped.
    pub fn irecv(
        &self,
        from: impl Into<RecvFrom>,
        tag: impl Into<TagMatch>,
        buf: Vec<u8>,
    ) -> Request<'_, Received> {
        let (from, tag) = (from.into(), tag.into());
        if self.core().user_source(from).is_err() {
            return Request::new(self, Op::Refused(from));
        }
        let want = RecvNow {
            channel: from.channel,
            source: from.source,
            tag,
        };
        let mut state = self.core().lock();
        let buf = match state.irecv_lean(want, buf) {
            Ok(key) => {
                // Nothing for the driver to send: no mark, no wake-up.
                unlock(state);
                return Request::new(self, Op::Lean(key));
            }
            Err(buf) => buf,
        };
        state.before_posting(from.channel, self.core());
        let id = state.post_irecv(want, buf);
        // Posting may have queued a chunk (a clear-to-send).
        self.unlock_with_work(state);
        Request::new(self, Op::Engine(id))
    }

    /// Sends `data` and returns once it has left `data`'s memory.
    ///
    /// A send whose wait fails ([`crate::Error::Stalled`], past
    /// [`crate::NodeConfig::wait_timeout`]) gives `data` back all the
    /// same: the message still leaves, from a copy made then, so that a
    /// receiver posted later gets it whole rather than waiting for ever.
    pub fn send(&self, gate: Gate, tag: u64, data: &[u8]) -> Result<Status> {
        crate::node::user_channel(gate.channel)?;
        self.core().running()?;
        // A small message to an idle rail may leave at once (shm, tcp).
        if let Some(sent) = self.send_at_once(gate, tag, data, Then::Waits) {
            return sent;
        }
        let (id, lent) = self.with_state(|s| {
            let out = s.engine.send_begin(gate.channel, gate.peer, tag)?;
            let (range, lent) = self.lend(s, data);
            let id = s.engine.send_tagged(out, range);
            s.watch(id, None);
            Ok::<_, Error>((id, lent))
        })?;
        // The send was just submitted and cannot be complete yet: make a
        // round of progress (which writes it) before the first check,
        // rather than locking to check first. On error the caller gets its
        // memory back and the send goes on from a copy, as after a stall.
        if let Err(err) = self.progress() {
            self.with_state(|s| lent.give_back_sending(s, id));
            return Err(err);
        }
        self.wait_sending(id, lent)
    }

    /// Receives into `dest` and returns once the message is there. Refused
    /// at once, as by [`Node::irecv`]: the reserved channel, a rank
    /// outside the job, this rank itself.
    pub fn recv(
        &self,
        from: impl Into<RecvFrom>,
        tag: impl Into<TagMatch>,
        dest: &mut [u8],
    ) -> Result<Status> {
        let (from, tag) = (from.into(), tag.into());
        self.core().user_source(from)?;
        let want = RecvNow {
            channel: from.channel,
            source: from.source,
            tag,
        };
        // Nothing before it on its channel: it waits outside the engine
        // while it spins, and its message lands with no request at all.
        if let Some(received) = self.recv_lean(want, dest) {
            return received;
        }
        let (id, lent) = self.with_state(|s| {
            s.before_posting(from.channel, self.core());
            let (range, lent) = self.lend_mut(s, dest);
            let State { engine, mem, .. } = &mut *s;
            let id = engine.recv_tagged(from.channel, from.source, tag, range, mem);
            s.watch(id, None);
            (id, lent)
        });
        self.wait_receive(from.channel, id, lent)
    }

    /// After one round of progress, the first message that a receive from
    /// `from` with `tag` would match, if one has arrived: its sender, tag
    /// and length (of its first piece). Any channel may be probed, the
    /// reserved one included; a rank outside the job and this rank itself
    /// are refused, as by a receive ([`Node::irecv`]): no message could
    /// ever be there.
    pub fn probe(
        &self,
        from: impl Into<RecvFrom>,
        tag: impl Into<TagMatch>,
    ) -> Result<Option<Status>> {
        let (from, tag) = (from.into(), tag.into());
        self.core().possible_source(from.source)?;
        self.progress()?;
        Ok(self
            .core()
            .lock()
            .engine
            .probe(from.channel, from.source, tag))
    }
}
