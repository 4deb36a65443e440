//! The doorbell handshake: how a consumer goes to sleep without missing a
//! message, and how producers wake it without a system call in the common
//! case where it is awake.
//!
//! Two words per rank area: `doorbell`, a counter that every wake-up bumps
//! (the futex word), and `sleepers`, the number of the owner's threads
//! inside [`Bell::sleep`]. The handshake is Dekker's, with a `SeqCst` fence
//! on each side:
//!
//! ```text
//! sleeper                              producer
//! t = doorbell            (Acquire)    publish cell           (Release)
//! sleepers += 1                        fence(SeqCst)
//! fence(SeqCst)                        if sleepers != 0 {
//! if ring empty && doorbell == t {         doorbell += 1     (Release)
//!     futex_wait(doorbell, t)              futex_wake(doorbell)
//! }                                    }
//! sleepers -= 1
//! ```
//!
//! Of the two fences one comes first in the single total order of `SeqCst`
//! fences: either the producer sees `sleepers != 0` and rings, or the
//! sleeper sees the published cell and does not wait. A ring that lands
//! after `t` was read changes the futex word, so `futex_wait` returns at
//! once (`EAGAIN`) or is woken. A ticket that already includes a ring was
//! acquired from that ring's Release increment, so the sleeper then also sees
//! the message that preceded it. The futex calls are parameters so that the
//! loom model can replace them.

use crate::sync::atomic::{AtomicU32, Ordering, fence};

/// The doorbell value read before a caller checks its own conditions; a
/// sleep with this ticket returns at once if any wake-up happened since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(pub(crate) u32);

/// The two words of a rank area's doorbell.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bell<'a> {
    /// Futex word: bumped by every ring.
    pub(crate) doorbell: &'a AtomicU32,
    /// Threads of the owner inside `sleep`.
    pub(crate) sleepers: &'a AtomicU32,
}

impl Bell<'_> {
    /// Reads the current doorbell value.
    #[inline]
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket(self.doorbell.load(Ordering::Acquire))
    }

    /// Announces a sleeper, re-checks `has_work` and the doorbell, and runs
    /// `wait(ticket)` (the futex wait) only if neither changed. Returns
    /// whether it waited.
    pub(crate) fn sleep<E>(
        &self,
        ticket: Ticket,
        has_work: impl FnOnce() -> bool,
        wait: impl FnOnce(u32) -> Result<(), E>,
    ) -> Result<bool, E> {
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let idle = !has_work() && self.doorbell.load(Ordering::Acquire) == ticket.0;
        let waited = if idle {
            wait(ticket.0).map(|()| true)
        } else {
            Ok(false)
        };
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        waited
    }

    /// After publishing work: rings (bumps the doorbell and runs `wake`)
    /// only if a sleeper is announced. Returns whether it rang.
    #[inline]
    pub(crate) fn ring_if_sleeping(&self, wake: impl FnOnce()) -> bool {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.doorbell.fetch_add(1, Ordering::Release);
        wake();
        true
    }

    /// Always bumps the doorbell, so a sleeper holding an older ticket
    /// returns; runs `wake` if a sleeper is announced.
    pub(crate) fn ring(&self, wake: impl FnOnce()) {
        self.doorbell.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            wake();
        }
    }
}
