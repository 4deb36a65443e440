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
//! blocking, with stall reports).

use std::sync::atomic::Ordering;

use navette_core::{MemRef, RailId, RecvNow, RecvNowOutcome, ReqId, Status};

use crate::memtable::LentMut;
use crate::node::{NodeCore, State};
use crate::{Node, Result};

/// A blocking tagged receive waiting outside the engine.
#[derive(Debug)]
pub(crate) enum LeanRecv {
    /// Shown every received packet first.
    Waiting { want: RecvNow, dest: LentMut },
    /// Its message landed.
    Landed(Status),
    /// Posted to the engine as the usual request, its destination
    /// registered.
    Posted { req: ReqId, dest: MemRef },
}

impl State {
    /// Shows a received packet to the receive waiting outside the engine,
    /// if any: what it made of it (`Landed`: the packet is handled).
    pub(crate) fn recv_now(&mut self, rail: RailId, bytes: &[u8]) -> Option<RecvNowOutcome> {
        let Some(LeanRecv::Waiting { want, dest }) = &mut self.lean else {
            return None;
        };
        let outcome = self.engine.recv_now(rail, bytes, want, dest.get_mut());
        match outcome {
            RecvNowOutcome::Landed(status) => self.lean = Some(LeanRecv::Landed(status)),
            RecvNowOutcome::Unrelated => {}
            RecvNowOutcome::Post => self.post_lean(),
        }
        Some(outcome)
    }

    /// Posts the receive waiting outside the engine as the usual request.
    fn post_lean(&mut self) {
        let Some(LeanRecv::Waiting { want, dest }) = self.lean.take() else {
            return;
        };
        let dest = self.mem.insert_lent(dest);
        let req = self
            .engine
            .recv_tagged(want.channel, want.source, want.tag, dest, &mut self.mem);
        self.watch(req, None);
        self.lean = Some(LeanRecv::Posted { req, dest });
    }
}

/// Leaves no receive waiting outside the engine and no destination
/// registered, on every exit from [`Node::recv_lean`] that does not hand
/// them on (errors and unwinding included), before the borrow ends.
struct Clear<'c>(&'c NodeCore);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if let Some(LeanRecv::Posted { dest, .. }) = state.lean.take() {
            state.mem.remove(dest.handle);
        }
    }
}

impl Node {
    /// Receives `want` into `dest` at once if nothing posted or unexpected
    /// could come before it and no other receive waits so; `None` if it
    /// cannot (the caller posts it the usual way).
    pub(crate) fn recv_lean(&self, want: RecvNow, dest: &mut [u8]) -> Option<Result<Status>> {
        let core = self.core();
        {
            let mut state = core.lock();
            if state.lean.is_some() || !state.engine.can_recv_now(want.channel, want.source) {
                return None;
            }
            state.lean = Some(LeanRecv::Waiting {
                want,
                dest: LentMut::new(dest),
            });
            core.lean_moved.store(false, Ordering::Relaxed);
        }
        // From here on `dest` is reached only through the lent pointer,
        // under the lock, until `Clear` or the code below takes it back.
        let clear = Clear(core);
        Some(self.wait_lean(clear))
    }

    /// Spins until the receive lands or is posted (by a packet, or here at
    /// the end of the spin phase), then, posted, waits for it as usual.
    fn wait_lean(&self, clear: Clear<'_>) -> Result<Status> {
        let core = self.core();
        let mut idle: u32 = 0;
        loop {
            let progressed = self.progress()?;
            let spun = idle >= self.spin_rounds();
            if core.lean_moved.load(Ordering::Acquire) || spun {
                let mut state = core.lock();
                match state.lean {
                    Some(LeanRecv::Landed(status)) => {
                        state.lean = None;
                        drop(state);
                        std::mem::forget(clear);
                        return Ok(status);
                    }
                    Some(LeanRecv::Posted { req, dest }) => {
                        state.lean = None;
                        drop(state);
                        std::mem::forget(clear);
                        // Released under the lock that sees the request done.
                        let lent = self.registration(dest);
                        return self.wait_releasing(req, lent);
                    }
                    _ if spun => {
                        state.post_lean();
                        drop(state);
                        // Posting may have queued a chunk (a clear-to-send).
                        core.mark_dirty();
                        self.wake_driver();
                        core.lean_moved.store(true, Ordering::Release);
                        continue;
                    }
                    _ => {}
                }
            }
            if progressed {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                std::hint::spin_loop();
            }
        }
    }
}
