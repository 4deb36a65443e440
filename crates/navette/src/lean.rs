//! Receiving at once: a blocking tagged receive with nothing before it on
//! its channel waits outside the engine while its thread spins.
//!
//! It is kept in the node's state as a [`LeanRecv`], with the caller's
//! destination lent but not registered. Drivers show it every packet first
//! (through [`crate::driver::DriverPort::handle_packet`]): a one-piece
//! eager message that it accepts lands straight in the destination
//! ([`navette_core::Engine::recv_now`]) — no memory registration, request,
//! completion event or slot. Any packet that only the usual path can match
//! correctly posts it as the usual request first; so does the end of the
//! spin phase, after which it waits as any request does (yielding, then
//! blocking). Spinning, it reads the stall clock as any wait does. It is
//! alone outside the engine on its channel: a receive made there after it
//! has it posted first ([`State::before_posting`]).
//!
//! While it spins, its thread makes progress through
//! [`crate::driver::Driver::progress_lean`]: the shm driver shows it the
//! head of its ring under the node's lock alone, so that a message that
//! lands costs one lock, not the driver's and the node's.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use navette_core::{MemRef, RailId, RecvNow, RecvNowOutcome, ReqId, Status};

use crate::memtable::LentMut;
use crate::node::{NodeCore, State};
use crate::{Node, Result};

/// A blocking tagged receive waiting outside the engine, in the node's
/// state.
#[derive(Debug)]
pub(crate) enum LeanRecv {
    /// Shown every received packet first.
    Waiting { want: RecvNow, dest: LentMut },
    /// Posted to the engine as the usual request, its destination
    /// registered.
    Posted { req: ReqId, dest: MemRef },
}

/// What became of the receive waiting outside the engine, for its thread
/// to read without the node's lock: the common outcome, a landed message,
/// costs the waiter no lock at all.
#[derive(Debug, Default)]
pub(crate) struct LeanSlot {
    /// [`PENDING`], [`LANDED`] (status below) or [`POSTED`] (the request is
    /// in the state). Published with Release after the status.
    outcome: AtomicU8,
    peer: AtomicU32,
    tag: AtomicU64,
    len: AtomicU64,
    /// From registration until the waiter has read the slot: no other
    /// receive may use it meanwhile. Set under the state lock.
    busy: AtomicBool,
}

const PENDING: u8 = 0;
const LANDED: u8 = 1;
const POSTED: u8 = 2;

impl LeanSlot {
    /// Whether a waiting receive landed or was posted and its thread has
    /// not yet seen it.
    pub(crate) fn is_settled(&self) -> bool {
        self.outcome.load(Ordering::Relaxed) != PENDING
    }

    /// Records what a packet made of the waiting receive (under the state
    /// lock, after [`State::recv_now`]).
    pub(crate) fn record(&self, outcome: RecvNowOutcome) {
        match outcome {
            RecvNowOutcome::Landed(status) => {
                self.peer.store(status.peer, Ordering::Relaxed);
                self.tag.store(status.tag, Ordering::Relaxed);
                self.len.store(status.len as u64, Ordering::Relaxed);
                self.outcome.store(LANDED, Ordering::Release);
            }
            RecvNowOutcome::Post => self.outcome.store(POSTED, Ordering::Release),
            RecvNowOutcome::Unrelated => {}
        }
    }

    /// Frees the slot for the next receive (its reader is done with it).
    fn release(&self) {
        self.outcome.store(PENDING, Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
    }

    /// The landed status, once [`Self::record`] published one.
    fn landed(&self) -> Option<Status> {
        (self.outcome.load(Ordering::Acquire) == LANDED).then(|| Status {
            peer: self.peer.load(Ordering::Relaxed),
            tag: self.tag.load(Ordering::Relaxed),
            // Written from a `usize`.
            len: self.len.load(Ordering::Relaxed) as usize,
        })
    }
}

impl State {
    /// Shows a received packet to the receive waiting outside the engine,
    /// if any: what it made of it (`Landed`: the packet is handled, and
    /// the receive is gone from the state; record the outcome with
    /// [`LeanSlot::record`]).
    pub(crate) fn recv_now(&mut self, rail: RailId, bytes: &[u8]) -> Option<RecvNowOutcome> {
        let Some(LeanRecv::Waiting { want, dest }) = &mut self.lean else {
            return None;
        };
        let outcome = self.engine.recv_now(rail, bytes, want, dest.get_mut());
        match outcome {
            RecvNowOutcome::Landed(_) => self.lean = None,
            RecvNowOutcome::Unrelated => {}
            RecvNowOutcome::Post => self.post_lean(),
        }
        Some(outcome)
    }

    /// Posts the receive waiting outside the engine as the usual request,
    /// if one waits so: whether it did (record the outcome with
    /// [`LeanSlot::record`]).
    pub(crate) fn post_waiting_lean(&mut self) -> bool {
        if !matches!(self.lean, Some(LeanRecv::Waiting { .. })) {
            return false;
        }
        self.post_lean();
        true
    }

    /// Posts the receive waiting outside the engine as the usual request
    /// if it waits on `channel`: whether it did (record the outcome with
    /// [`LeanSlot::record`]).
    pub(crate) fn post_lean_on(&mut self, channel: navette_core::ChannelId) -> bool {
        if !self.lean_waits_on(channel) {
            return false;
        }
        self.post_lean();
        true
    }

    /// Whether the blocking receive waits outside the engine on `channel`:
    /// no other receive there may then wait outside (it is the oldest,
    /// and alone: whatever posts another posts it first).
    pub(crate) fn lean_waits_on(&self, channel: navette_core::ChannelId) -> bool {
        matches!(&self.lean, Some(LeanRecv::Waiting { want, .. }) if want.channel == channel)
    }

    /// Posts the receive waiting outside the engine as the usual request.
    fn post_lean(&mut self) {
        let Some(LeanRecv::Waiting { want, dest }) = self.lean.take() else {
            return;
        };
        // Receives of the list on its channel are newer (it waits outside
        // the engine only where none does): they are posted after it, at
        // the next packet that concerns them.
        let dest = self.mem.insert_lent(dest);
        let req = self
            .engine
            .recv_tagged(want.channel, want.source, want.tag, dest, &mut self.mem);
        self.watch(req, None);
        self.lean = Some(LeanRecv::Posted { req, dest });
    }
}

/// Leaves no receive waiting outside the engine, no destination registered
/// and the slot free, on every exit from [`Node::recv_lean`] that does not
/// hand them on (errors and unwinding included), before the borrow ends.
struct Clear<'c>(&'c NodeCore);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if let Some(LeanRecv::Posted { dest, .. }) = state.lean.take() {
            state.mem.remove(dest.handle);
        }
        self.0.lean_slot.release();
    }
}

impl Node {
    /// Receives `want` into `dest` at once if nothing posted or unexpected
    /// could come before it and no other receive waits so; `None` if it
    /// cannot (the caller posts it the usual way).
    pub(crate) fn recv_lean(&self, want: RecvNow, dest: &mut [u8]) -> Option<Result<Status>> {
        let core = self.core();
        let slot = &core.lean_slot;
        {
            let mut state = core.lock();
            let free = state.lean.is_none() && !slot.busy.load(Ordering::Acquire);
            if !free || !state.can_recv_now(want.channel, want.source) {
                return None;
            }
            state.lean = Some(LeanRecv::Waiting {
                want,
                dest: LentMut::new(dest),
            });
            slot.busy.store(true, Ordering::Relaxed);
            slot.outcome.store(PENDING, Ordering::Relaxed);
        }
        // From here on `dest` is reached only through the lent pointer,
        // under the lock, until `Clear` or the code below takes it back.
        let clear = Clear(core);
        Some(self.wait_lean(want.channel, clear))
    }

    /// Spins until the receive lands or is posted (by a packet, or here at
    /// the end of the spin phase), then, posted, waits for it as usual.
    fn wait_lean(&self, channel: navette_core::ChannelId, clear: Clear<'_>) -> Result<Status> {
        let core = self.core();
        let slot = &core.lean_slot;
        let mut spin = self.spinning();
        loop {
            let progressed = core.driver().progress_lean(core)?;
            if let Some(status) = slot.landed() {
                // Landed: the state no longer holds the receive.
                slot.release();
                std::mem::forget(clear);
                return Ok(status);
            }
            let spun = spin.idle >= self.spin_rounds();
            if slot.is_settled() || spun {
                let mut state = core.lock();
                match state.lean {
                    Some(LeanRecv::Posted { req, dest }) => {
                        state.lean = None;
                        slot.release();
                        drop(state);
                        std::mem::forget(clear);
                        // Released under the lock that sees the request done.
                        let lent = self.registration(dest);
                        return self.wait_receive(channel, req, lent);
                    }
                    Some(LeanRecv::Waiting { .. }) if spun => {
                        state.post_lean();
                        drop(state);
                        // Posting may have queued a chunk (a clear-to-send).
                        core.mark_dirty();
                        self.wake_driver();
                        slot.record(RecvNowOutcome::Post);
                        continue;
                    }
                    _ => {}
                }
            }
            if let Err(stalled) =
                self.spin_round(&mut spin, progressed, &|| "a blocking receive".to_string())
            {
                // Given up under the lock that sees it still waiting (then
                // `Clear` finds nothing to undo); one that landed or was
                // posted meanwhile is taken above.
                let mut state = core.lock();
                if matches!(state.lean, Some(LeanRecv::Waiting { .. })) {
                    state.lean = None;
                    return Err(stalled);
                }
            }
        }
    }
}
