//! Receiving whole messages at once: the reply of an RPC call, the next
//! call for a node's services, and a message begun by
//! [`crate::Node::begin_unpacking`] before it came wait outside the engine.
//!
//! Each is kept in the node's state as a [`LeanWhole`] in its own slot
//! ([`WholeFor`]), at most one of each kind at a time, made only when
//! nothing posted or unexpected could come before it on its channel.
//! Drivers show every packet to the waiting ones (through
//! [`crate::driver::DriverPort::handle_packet`], after the tagged receive
//! of [`crate::lean`]): a packet that is exactly one in-order message,
//! every piece eager, that a receive accepts leaves the engine at once as a
//! [`WholeMessage`] whose data is copied back to back into a recycled buffer
//! ([`navette_core::Engine::recv_whole_now`]) — no receive message, posted
//! entry, unexpected entry, binding, request or completion.
//!
//! A packet that only the usual path can match correctly goes that way:
//! - a reply's or a begun message's receive is posted first, as
//!   [`crate::Node::begin_unpacking`] would have made it (so is one whose
//!   owner stops spinning, or polls it as a future while a progress thread
//!   runs, or whose peer is lost);
//! - the wait for calls is given up, and the call comes unexpected, as it
//!   would have; the dispatcher takes the landed call, if any, before the
//!   unexpected ones, so calls keep their order.
//!
//! The packet's thread may be any thread making progress: what became of
//! a receive stays in the state until its owner takes it, and
//! `NodeCore::lean_whole_settled` tells the owner, without the lock, that
//! there is something to take.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use navette_core::{RailId, RecvNow, ReqId, WholeMessage, WholeNowOutcome};

use crate::Node;
use crate::node::State;

/// Which whole message waits outside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WholeFor {
    /// The reply of one call of this node.
    Reply = 0,
    /// The next call for this node's services.
    Calls = 1,
    /// A message begun by [`crate::Node::begin_unpacking`] before it came.
    /// It is the newest receive of its channel: no other receive there
    /// waits outside the engine after it ([`State::can_recv_now`]), and
    /// one made the usual way has it posted first
    /// ([`State::before_posting`]); it is made only where no other
    /// receive waits, in the engine or outside it.
    Message = 2,
}

impl WholeFor {
    /// What waits in the slot, for reports.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::Reply => "RPC reply",
            Self::Calls => "next RPC call",
            Self::Message => "begun message",
        }
    }
}

/// The slots, in the order packets are shown to them.
pub(crate) const SLOTS: [WholeFor; SLOT_COUNT] =
    [WholeFor::Reply, WholeFor::Calls, WholeFor::Message];

/// How many slots there are.
pub(crate) const SLOT_COUNT: usize = 3;

/// A receive of a whole message waiting outside the engine, in the node's
/// state.
#[derive(Debug)]
pub(crate) enum LeanWhole {
    /// Shown every received packet.
    Waiting(RecvNow),
    /// Its message came, out of the engine.
    Landed(WholeMessage),
    /// Posted to the engine as the usual receive message, under this key
    /// (a reply's receive only).
    Posted(ReqId),
}

/// What became of a receive waiting outside the engine, once settled.
#[derive(Debug)]
pub(crate) enum Settled {
    /// Its message came whole.
    Landed(WholeMessage),
    /// It is the engine's receive message under this key.
    Posted(ReqId),
}

/// The state's whole-message receives waiting outside the engine.
pub(crate) type LeanWholes = [Option<LeanWhole>; SLOT_COUNT];

/// Whether each slot's receive settled and its owner has not taken it yet.
pub(crate) type SettledFlags = [AtomicBool; SLOT_COUNT];

impl State {
    /// Shows a received packet to the whole-message receives waiting
    /// outside the engine: whether it landed in one (the packet is then
    /// handled). A receive that settles (landed or posted) raises its flag
    /// in `settled`.
    pub(crate) fn land_whole_now(
        &mut self,
        rail: RailId,
        bytes: &[u8],
        settled: &SettledFlags,
    ) -> bool {
        self.land_whole_with(settled, |engine, want| {
            engine.recv_whole_now(rail, bytes, want)
        })
    }

    /// [`Self::land_whole_now`] for the packet `buf[range]`, which a large
    /// message that lands may keep (see
    /// [`navette_core::Engine::recv_whole_now_in`]): whether it landed,
    /// and whether it took `buf`.
    pub(crate) fn land_whole_now_in(
        &mut self,
        rail: RailId,
        buf: &mut Vec<u8>,
        range: Range<usize>,
        settled: &SettledFlags,
    ) -> (bool, bool) {
        let mut taken = false;
        let landed = self.land_whole_with(settled, |engine, want| {
            let (outcome, took) = engine.recv_whole_now_in(rail, buf, range.clone(), want);
            taken |= took;
            outcome
        });
        (landed, taken)
    }

    /// Shows a packet, through `recv`, to each waiting receive in turn.
    fn land_whole_with(
        &mut self,
        settled: &SettledFlags,
        mut recv: impl FnMut(&mut navette_core::Engine, &RecvNow) -> WholeNowOutcome,
    ) -> bool {
        for slot in SLOTS {
            let Some(LeanWhole::Waiting(want)) = self.lean_whole[slot as usize] else {
                continue;
            };
            match recv(&mut self.engine, &want) {
                WholeNowOutcome::Landed(whole) => {
                    self.lean_whole[slot as usize] = Some(LeanWhole::Landed(whole));
                    settled[slot as usize].store(true, Ordering::Release);
                    return true;
                }
                WholeNowOutcome::Unrelated => {}
                WholeNowOutcome::Post => match slot {
                    WholeFor::Reply | WholeFor::Message => {
                        self.post_lean_whole(slot);
                        settled[slot as usize].store(true, Ordering::Release);
                    }
                    // The call comes unexpected, as it would have.
                    WholeFor::Calls => self.lean_whole[slot as usize] = None,
                },
            }
        }
        false
    }

    /// Posts the waiting receive of `slot` as the usual receive message.
    fn post_lean_whole(&mut self, slot: WholeFor) {
        let Some(LeanWhole::Waiting(want)) = self.lean_whole[slot as usize] else {
            return;
        };
        // Receives of the list on its channel are newer, as for
        // `State::post_lean`: posted after it.
        let key = self.engine.recv_begin(want.channel, want.source, want.tag);
        self.watch(key, None);
        self.lean_whole[slot as usize] = Some(LeanWhole::Posted(key));
    }

    /// Makes `want` the receive of `slot` waiting outside the engine, if
    /// the slot is free and nothing posted or unexpected could come before
    /// it: whether it did.
    pub(crate) fn await_whole(
        &mut self,
        slot: WholeFor,
        want: RecvNow,
        settled: &SettledFlags,
    ) -> bool {
        let free = self.lean_whole[slot as usize].is_none();
        if !free || !self.can_recv_now(want.channel, want.source) {
            return false;
        }
        self.lean_whole[slot as usize] = Some(LeanWhole::Waiting(want));
        settled[slot as usize].store(false, Ordering::Relaxed);
        true
    }

    /// Takes what became of the receive of `slot`, if it settled; with
    /// `post`, one still waiting is posted first. `None` leaves it as it
    /// is (waiting, or no receive).
    pub(crate) fn settle_whole(
        &mut self,
        slot: WholeFor,
        post: bool,
        settled: &SettledFlags,
    ) -> Option<Settled> {
        if post {
            self.post_lean_whole(slot);
        }
        let out = match self.lean_whole[slot as usize].take() {
            Some(LeanWhole::Landed(whole)) => Settled::Landed(whole),
            Some(LeanWhole::Posted(key)) => Settled::Posted(key),
            waiting => {
                self.lean_whole[slot as usize] = waiting;
                return None;
            }
        };
        settled[slot as usize].store(false, Ordering::Relaxed);
        Some(out)
    }
}

impl State {
    /// Takes the message landed in `slot`, if one did; anything else stays.
    pub(crate) fn take_landed(
        &mut self,
        slot: WholeFor,
        settled: &SettledFlags,
    ) -> Option<WholeMessage> {
        let landed = &mut self.lean_whole[slot as usize];
        if !matches!(landed, Some(LeanWhole::Landed(_))) {
            return None;
        }
        settled[slot as usize].store(false, Ordering::Relaxed);
        match landed.take() {
            Some(LeanWhole::Landed(whole)) => Some(whole),
            _ => None,
        }
    }

    /// Posts the reply's and the begun message's receives if they wait
    /// outside the engine: a peer was lost (the engine then fails them, if
    /// they were that peer's), and only the usual path reports that.
    pub(crate) fn post_waiting_wholes(&mut self, settled: &SettledFlags) {
        for slot in [WholeFor::Reply, WholeFor::Message] {
            if matches!(self.lean_whole[slot as usize], Some(LeanWhole::Waiting(_))) {
                self.post_lean_whole(slot);
                settled[slot as usize].store(true, Ordering::Release);
            }
        }
    }

    /// Whether the begun message's receive waits outside the engine on
    /// `channel`: no other receive there may then wait outside after it.
    pub(crate) fn message_waits_on(&self, channel: navette_core::ChannelId) -> bool {
        matches!(
            self.lean_whole[WholeFor::Message as usize],
            Some(LeanWhole::Waiting(want)) if want.channel == channel
        )
    }

    /// Posts the begun message's receive if it waits outside the engine on
    /// `channel`: a receive made there the usual way comes after it.
    pub(crate) fn post_message_on(
        &mut self,
        channel: navette_core::ChannelId,
        settled: &SettledFlags,
    ) {
        if self.message_waits_on(channel) {
            self.post_lean_whole(WholeFor::Message);
            settled[WholeFor::Message as usize].store(true, Ordering::Release);
        }
    }
}

impl Node {
    /// Whether waiting for the reply whose receive waits outside the
    /// engine would not block: it landed, or, posted, it was matched (or
    /// failed).
    pub(crate) fn reply_lean_ready(&self) -> bool {
        let mut state = self.core().lock();
        let ready = match state.lean_whole[WholeFor::Reply as usize] {
            Some(LeanWhole::Landed(_)) => true,
            Some(LeanWhole::Posted(key)) => {
                state.collect();
                state.is_done(key)
            }
            _ => false,
        };
        crate::node::unlock(state);
        ready
    }

    /// Whether the receive of `slot` waiting outside the engine has
    /// settled, read without the lock.
    pub(crate) fn lean_whole_settled(&self, slot: WholeFor) -> bool {
        self.core().lean_whole_settled[slot as usize].load(Ordering::Acquire)
    }

    /// Takes what became of the receive of `slot` waiting outside the
    /// engine, if it settled; with `post`, one still waiting is posted
    /// first (then it is the engine's). `None` leaves it waiting.
    pub(crate) fn settle_whole(&self, slot: WholeFor, post: bool) -> Option<Settled> {
        let core = self.core();
        let take = |state: &mut State| state.settle_whole(slot, post, &core.lean_whole_settled);
        if post {
            // As any change the API makes: the driver looks again.
            return self.with_state(take);
        }
        let mut state = core.lock();
        let settled = take(&mut state);
        crate::node::unlock(state);
        settled
    }

    /// Spins until the receive of `slot` waiting outside the engine
    /// settles (its message came, or a packet had it posted), or until
    /// the spin phase ends, which posts it: then any further wait is the
    /// usual one. Calls for this node's services are served meanwhile.
    /// `None` if `give_up` said so first (the receive still waits). A
    /// stall fails with [`crate::Error::Stalled`] naming `what`, and
    /// leaves the receive waiting.
    pub(crate) fn spin_whole(
        &self,
        slot: WholeFor,
        give_up: impl Fn() -> bool,
        what: &dyn Fn() -> String,
    ) -> crate::Result<Option<Settled>> {
        let core = self.core();
        let mut spin = self.spinning();
        loop {
            let progressed = core.driver().progress_lean(core)?;
            if let Some(rpc) = core.rpc.get() {
                rpc.dispatch(self);
            }
            let spun = spin.idle >= self.spin_rounds();
            if (self.lean_whole_settled(slot) || spun)
                && let Some(settled) = self.settle_whole(slot, spun)
            {
                return Ok(Some(settled));
            }
            if give_up() {
                return Ok(None);
            }
            // Its owner may wait again, or drop it.
            self.spin_round(&mut spin, progressed, what)?;
        }
    }

    /// Gives up the receive of `slot` waiting outside the engine: returns
    /// whether its message may still come (it had not landed, nor matched
    /// once posted), which then comes unexpected or to a later receive.
    pub(crate) fn drop_whole(&self, slot: WholeFor) -> bool {
        let core = self.core();
        self.with_state(|state| {
            let slot = slot as usize;
            core.lean_whole_settled[slot].store(false, Ordering::Relaxed);
            match state.lean_whole[slot].take() {
                None | Some(LeanWhole::Landed(_)) => false,
                Some(LeanWhole::Waiting(_)) => true,
                Some(LeanWhole::Posted(key)) => {
                    let unmatched = state.engine.recv_unmatched(key);
                    state.engine.recv_abandon(key);
                    state.detach(key);
                    unmatched
                }
            }
        })
    }
}
