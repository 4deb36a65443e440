//! Non-blocking tagged receives posted outside the engine.
//!
//! An [`crate::Node::irecv`] made where nothing is posted or unexpected on
//! its channel (the usual case of receives posted ahead of their messages)
//! waits in the node's state: what it accepts in a list kept in posting
//! order, the buffer it owns in a slot of its own, where its message
//! lands and where its request takes it back. No request, memory
//! registration, posted entry or completion is made for it. Drivers show
//! every received packet to the list (through
//! [`crate::driver::DriverPort::handle_packet`]): a packet of whole eager
//! one-piece messages that the list's receives take lands in their
//! buffers at once ([`navette_core::Engine::land_posted_now`]). A
//! packet that only the usual path can match correctly has the whole list
//! posted first, in order, as if its receives had been posted all along;
//! so has any receive, unpacking or blocking receive made on a channel of
//! the list, and a lost peer.
//!
//! The request of such a receive holds its [`LeanKey`]; what became of the
//! receive (waiting, landed, posted as an engine request) stays in the
//! state until the request takes it or is dropped.

use navette_core::{
    ChannelId, OutsideReceive, PostedList, PostedNowOutcome, RailId, RecvNow, ReqId, Status,
};

use crate::Result;
use crate::node::{Outside, State};

/// Most receives waiting outside the engine at once: a receive past them
/// is posted the usual way (the list first, if it has one on its channel).
/// Each packet is shown to the list, chunk by chunk: it stays short, and
/// within what the engine lands at once.
pub(crate) const MOST_WAITING: usize = navette_core::MOST_LANDING;

/// The handle of a receive posted outside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeanKey(u32);

/// The receives posted outside the engine, and what became of each.
///
/// A receive's buffer stays in its slot from the `irecv` that gives it to
/// the take that gives it back: its message lands there, and a landing
/// moves nothing but the list's entries.
#[derive(Debug, Default)]
pub(crate) struct LeanIrecvs {
    /// Receives waiting for their message, in posting order.
    waiting: Vec<Waiting>,
    /// Each receive, by key.
    slots: Vec<Slot>,
    /// Keys free for reuse.
    free: Vec<u32>,
    /// The receives of `waiting` that the packet being landed filled, a
    /// bit each by their place there (the list is at most [`MOST_WAITING`]
    /// long).
    landed: u64,
    /// Those of them whose request was dropped: their slots are freed
    /// once the packet has landed whole.
    landed_detached: u64,
}

/// A receive in the list.
#[derive(Debug)]
struct Waiting {
    /// What it accepts.
    want: RecvNow,
    /// Its buffer's length.
    room: usize,
    key: LeanKey,
}

/// A receive, by key: what became of it, and its buffer while it is the
/// node's (empty once given back, or posted as an engine request).
#[derive(Debug, Default)]
struct Slot {
    state: SlotState,
    buf: Vec<u8>,
}

/// What became of a receive.
#[derive(Clone, Copy, Debug, Default)]
enum SlotState {
    /// No receive.
    #[default]
    Free,
    /// In the list; `detached` once its request was dropped (it still
    /// takes its message, as a detached engine request would).
    Waiting { detached: bool },
    /// Its message came into its buffer.
    Landed(Status),
    /// Posted as this engine request, which holds its buffer.
    Posted(ReqId),
}

impl LeanIrecvs {
    /// Whether a receive of the list waits on `channel`.
    pub(crate) fn waits_on(&self, channel: ChannelId) -> bool {
        self.waiting.iter().any(|w| w.want.channel == channel)
    }

    /// The receives still waiting, in posting order, for a report.
    pub(crate) fn outside(&self) -> impl Iterator<Item = OutsideReceive> + '_ {
        self.waiting.iter().map(|w| OutsideReceive {
            kind: "irecv posted ahead",
            want: w.want,
            room: Some(w.room),
        })
    }

    fn slot(&mut self, key: LeanKey) -> &mut Slot {
        &mut self.slots[key.0 as usize]
    }

    /// Frees the slot of `key`, dropping its buffer if it holds one.
    fn free_slot(&mut self, key: LeanKey) {
        *self.slot(key) = Slot::default();
        self.free.push(key.0);
    }

    /// Frees the slots of the receives of `waiting` that `detached` marks
    /// (a bit each by their place there), their messages landed.
    #[cold]
    fn free_detached(&mut self, detached: u64) {
        for i in 0..self.waiting.len().min(MOST_WAITING) {
            if detached & (1 << i) != 0 {
                self.free_slot(self.waiting[i].key);
            }
        }
    }

    /// Takes the receives that landed out of the list: in the usual case,
    /// the first ones, with nothing to look at.
    fn sweep(&mut self) {
        let detached = std::mem::take(&mut self.landed_detached);
        if detached != 0 {
            self.free_detached(detached);
        }
        let landed = std::mem::take(&mut self.landed);
        let first = landed.trailing_ones() as usize;
        if landed.checked_shr(first as u32).unwrap_or(0) == 0 {
            self.waiting.drain(..first);
        } else {
            let mut i = 0;
            self.waiting.retain(|_| {
                let keep = landed & (1 << i) == 0;
                i += 1;
                keep
            });
        }
    }
}

impl PostedList for LeanIrecvs {
    #[inline]
    fn count(&self) -> usize {
        self.waiting.len()
    }

    #[inline]
    fn want(&self, i: usize) -> &RecvNow {
        &self.waiting[i].want
    }

    #[inline]
    fn room(&self, i: usize) -> usize {
        self.waiting[i].room
    }

    /// Its message goes into its slot's buffer; a detached one's slot is
    /// freed, its buffer dropped, once the packet has landed whole.
    /// Always inlined: the landing's loop calls it for each chunk.
    #[inline(always)]
    fn land(&mut self, i: usize, data: &[u8], status: Status) {
        // At most MOST_WAITING receives wait: `i` is below 64.
        self.landed |= 1 << i;
        let key = self.waiting[i].key;
        let slot = &mut self.slots[key.0 as usize];
        if let SlotState::Waiting { detached: false } = slot.state {
            navette_wire::copy_to_start(&mut slot.buf, data);
            slot.state = SlotState::Landed(status);
        } else {
            self.landed_detached |= 1 << i;
        }
    }

    /// It waits again, in its slot.
    #[cold]
    fn unland(&mut self, i: usize) {
        self.landed &= !(1 << i);
        self.landed_detached &= !(1 << i);
        let slot = self.slot(self.waiting[i].key);
        if let SlotState::Landed(_) = slot.state {
            slot.state = SlotState::Waiting { detached: false };
        }
    }
}

impl State {
    /// Whether a receive on `channel` from `source` may wait outside the
    /// engine (here, or as a blocking receive or whole message): nothing
    /// posted or unexpected could come before it on its channel, neither in
    /// the engine nor outside it (the list, a begun message, a blocking
    /// receive). So the receives waiting outside on a channel are of one
    /// kind: a blocking receive, or a begun message, or the list's.
    pub(crate) fn can_recv_now(&self, channel: ChannelId, source: navette_core::Source) -> bool {
        self.engine.can_recv_now(channel, source) && !self.waits_outside_on(channel)
    }

    /// Whether a receive waits outside the engine on `channel` (the
    /// list's, a begun message's or a blocking one): a receive made there
    /// comes after it.
    #[inline]
    pub(crate) fn waits_outside_on(&self, channel: ChannelId) -> bool {
        self.message_waits_on(channel)
            || self.lean_waits_on(channel)
            || self.lean_irecvs.waits_on(channel)
    }

    /// [`Self::can_recv_now`] but for the list itself: a receive may join
    /// the list's receives on `channel`, behind them.
    #[inline]
    fn can_join_list(&self, channel: ChannelId, source: navette_core::Source) -> bool {
        self.engine.can_recv_now(channel, source)
            && !self.message_waits_on(channel)
            && !self.lean_waits_on(channel)
    }

    /// Posts `want` into `buf` outside the engine if it may (see
    /// [`Self::can_recv_now`]) and the list has room; else gives `buf`
    /// back, for the usual path. Inlined into `irecv` with the check it
    /// makes: as calls of their own, on the path of every receive of a
    /// series, they cost it a few percent (docs/profiling.md, stop 42).
    #[inline]
    pub(crate) fn irecv_lean(
        &mut self,
        want: RecvNow,
        buf: Vec<u8>,
    ) -> std::result::Result<LeanKey, Vec<u8>> {
        let list = &self.lean_irecvs;
        if list.waiting.len() >= MOST_WAITING
            || !self.can_join_list(want.channel, want.source)
            || u32::try_from(list.slots.len()).is_err()
        {
            return Err(buf);
        }
        let list = &mut self.lean_irecvs;
        let key = match list.free.pop() {
            Some(free) => LeanKey(free),
            None => {
                // Checked above: fewer than 2^32 slots.
                list.slots.push(Slot::default());
                LeanKey((list.slots.len() - 1) as u32)
            }
        };
        let room = buf.len();
        *list.slot(key) = Slot {
            state: SlotState::Waiting { detached: false },
            buf,
        };
        list.waiting.push(Waiting { want, room, key });
        Ok(key)
    }

    /// Shows a received packet to the receives waiting outside the
    /// engine: whether it landed in them (the packet is then handled).
    /// A packet only the usual path can match has them all posted first.
    pub(crate) fn land_irecvs_now(&mut self, rail: RailId, bytes: &[u8]) -> bool {
        if self.lean_irecvs.waiting.is_empty() {
            return false;
        }
        match self
            .engine
            .land_posted_now(rail, bytes, &mut self.lean_irecvs)
        {
            PostedNowOutcome::Landed => {
                self.lean_irecvs.sweep();
                true
            }
            PostedNowOutcome::Unrelated => false,
            PostedNowOutcome::Post => {
                self.post_irecvs();
                false
            }
        }
    }

    /// Posts every receive waiting outside the engine as the usual request,
    /// in posting order (its buffer registered as an irecv's is).
    pub(crate) fn post_irecvs(&mut self) {
        let mut waiting = std::mem::take(&mut self.lean_irecvs.waiting);
        for w in waiting.drain(..) {
            let slot = self.lean_irecvs.slot(w.key);
            let detached = matches!(slot.state, SlotState::Waiting { detached: true });
            let buf = std::mem::take(&mut slot.buf);
            let req = self.post_irecv(w.want, buf);
            if detached {
                self.detach(req);
                self.lean_irecvs.free_slot(w.key);
            } else {
                self.lean_irecvs.slot(w.key).state = SlotState::Posted(req);
            }
        }
        // The list keeps its memory for the next receives.
        self.lean_irecvs.waiting = waiting;
    }

    /// Posts a receive of `want` into `buf` as the usual engine request,
    /// `buf` registered (given back when the request is taken).
    pub(crate) fn post_irecv(&mut self, want: RecvNow, buf: Vec<u8>) -> ReqId {
        let range = self.mem.insert_owned(buf);
        let Self { engine, mem, .. } = self;
        let req = engine.recv_tagged(want.channel, want.source, want.tag, range, mem);
        self.watch(req, Some(range.handle));
        req
    }

    /// Posts the receives waiting outside the engine on `channel` (of one
    /// kind, see [`Self::can_recv_now`]) before a receive is made there the
    /// usual way, so that receives keep their posting order. `core` holds
    /// this state (for the flags its waiting threads read without the
    /// lock).
    pub(crate) fn before_posting(&mut self, channel: ChannelId, core: &crate::node::NodeCore) {
        if self.post_lean_on(channel) {
            core.lean_slot.record(navette_core::RecvNowOutcome::Post);
        }
        if self.lean_irecvs.waits_on(channel) {
            self.post_irecvs();
        }
        self.post_message_on(channel, &core.lean_whole_settled);
    }

    /// Whether the receive of `key` is complete. Inlined into the waits'
    /// checks, which ask it of every request of a list.
    #[inline]
    pub(crate) fn irecv_is_done(&self, key: LeanKey) -> bool {
        match self.lean_irecvs.slots[key.0 as usize].state {
            SlotState::Landed(..) => true,
            SlotState::Posted(req) => self.is_done(req),
            SlotState::Free | SlotState::Waiting { .. } => false,
        }
    }

    /// Takes the status and buffer of the receive of `key` if its message
    /// landed in its buffer (the usual case of [`Self::take_irecv`], for
    /// [`crate::wait_all_into`]'s lists), `None` otherwise (nothing taken).
    #[inline]
    pub(crate) fn take_landed_irecv(&mut self, key: LeanKey) -> Option<(Status, Vec<u8>)> {
        let list = &mut self.lean_irecvs;
        let slot = list.slots.get_mut(key.0 as usize)?;
        let SlotState::Landed(status) = slot.state else {
            return None;
        };
        let taken = (status, std::mem::take(&mut slot.buf));
        slot.state = SlotState::Free;
        list.free.push(key.0);
        self.forget_waker(Outside::Irecv(key));
        Some(taken)
    }

    /// Takes the outcome and buffer of the receive of `key`, if complete.
    pub(crate) fn take_irecv(&mut self, key: LeanKey) -> Option<(Result<Status>, Option<Vec<u8>>)> {
        if let Some((status, buf)) = self.take_landed_irecv(key) {
            return Some((Ok(status), Some(buf)));
        }
        // Else only one posted as an engine request may be complete.
        let SlotState::Posted(req) = self.lean_irecvs.slot(key).state else {
            return None;
        };
        let taken = self.take(req)?;
        self.lean_irecvs.free_slot(key);
        self.forget_waker(Outside::Irecv(key));
        Some(taken)
    }

    /// Forgets the receive of `key` (its request was dropped): one still
    /// waiting takes its message all the same, then drops it.
    pub(crate) fn drop_irecv(&mut self, key: LeanKey) {
        self.forget_waker(Outside::Irecv(key));
        match self.lean_irecvs.slot(key).state {
            SlotState::Free => {}
            SlotState::Waiting { .. } => {
                self.lean_irecvs.slot(key).state = SlotState::Waiting { detached: true };
            }
            SlotState::Landed(..) => self.lean_irecvs.free_slot(key),
            SlotState::Posted(req) => {
                self.detach(req);
                self.lean_irecvs.free_slot(key);
            }
        }
    }
}

impl std::fmt::Display for LeanKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a receive waiting outside the engine (#{})", self.0)
    }
}
