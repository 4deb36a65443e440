//! The node's lock: released by a plain store.
//!
//! Every call into a node takes its state's lock once (a send at once, a
//! landing, a receive posted ahead, a wait's check). A `parking_lot` mutex
//! releases with a compare-exchange, so that it can find threads parked on
//! it; on x86 that is a locked instruction, a full barrier: it waits until
//! every earlier store has left the store buffer. After a send at once, the
//! earlier stores are the ring cell's, whose line the receiving core holds
//! while it polls the cell: the release waits for that line to come back.
//! A series of small sends (an `isend` per segment) paid that once per
//! send, the receive side once per landing.
//!
//! [`NodeLock`] releases with a plain `Release` store, which waits for
//! nothing. The price is that a release cannot wake a waiter: a thread
//! that finds the lock held spins, then yields its core, then, if the lock
//! stays held long (a large copy under it), sleeps in short steps
//! ([`LONG_HOLD_STEP`]) and looks again. The lock is held for short
//! sections only, and rarely contended (a progress thread and the threads
//! that call the node), so waiters seldom get that far.
//!
//! Written here rather than taken from a crate: `parking_lot`'s and std's
//! mutexes release with a read-modify-write by design (they park
//! waiters), and `spin`'s never stops spinning or yielding. The backoff
//! itself is `crossbeam-utils`'.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_utils::Backoff;

/// A mutex over `T` locked by [`NodeLock`].
pub(crate) type Mutex<T> = lock_api::Mutex<NodeLock, T>;

/// The guard of a [`Mutex`].
pub(crate) type MutexGuard<'a, T> = lock_api::MutexGuard<'a, NodeLock, T>;

/// How long a waiter sleeps between looks once spinning and yielding did
/// not get the lock: the lock was held for a long section, and a release
/// wakes nobody.
pub(crate) const LONG_HOLD_STEP: Duration = Duration::from_micros(20);

/// Yields a waiter makes, after spinning, before it sleeps between looks.
const YIELDS_BEFORE_SLEEP: u32 = 256;

/// A lock released by a plain store (see the module's docs).
#[derive(Debug)]
pub(crate) struct NodeLock {
    locked: AtomicBool,
}

impl NodeLock {
    fn try_acquire(&self) -> bool {
        self.locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The lock was held: waits for it, spinning, then yielding, then
    /// sleeping between looks.
    #[cold]
    fn lock_contended(&self) {
        let backoff = Backoff::new();
        let mut yields = 0u32;
        loop {
            // Read before trying: a failed compare-exchange would take the
            // line from the holder.
            if !self.locked.load(Ordering::Relaxed) && self.try_acquire() {
                return;
            }
            if !backoff.is_completed() {
                backoff.snooze();
            } else if yields < YIELDS_BEFORE_SLEEP {
                yields += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(LONG_HOLD_STEP);
            }
        }
    }
}

// SAFETY: `locked` is true exactly while a guard exists: `lock` and
// `try_lock` return a guard only after their compare-exchange turned it
// from false to true (so at most one guard at a time), and `unlock`, which
// consumes the guard, stores false. Acquire on the successful
// compare-exchange pairs with the Release store of the previous `unlock`:
// everything done under the lock before happens before the new holder's
// section. The guard state is `GuardSend`: nothing of the lock is tied to
// the thread that took it.
unsafe impl lock_api::RawMutex for NodeLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
    };

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if !self.try_acquire() {
            self.lock_contended();
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        (!self.locked.load(Ordering::Relaxed) && self.try_acquire()).then(lock_api::GuardSend::new)
    }

    // SAFETY: the caller holds the lock (lock_api's contract: `_guard` came
    // from a successful `lock` or `try_lock`), so storing false ends the
    // one section there is; Release publishes that section's writes to the
    // next holder's Acquire.
    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        self.locked.store(false, Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_beyond_the_cores_never_share_the_section() {
        // More threads than this machine's cores: waiters must yield for
        // the holder to run.
        let threads = 8;
        let rounds = 20_000u64;
        let shared = Mutex::new((0u64, false));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let mut guard = shared.lock();
                        assert!(!guard.1, "two threads inside the section");
                        guard.1 = true;
                        // A plain read-modify-write: a lost update would
                        // show in the total.
                        guard.0 += 1;
                        guard.1 = false;
                    }
                });
            }
        });
        assert_eq!(shared.lock().0, threads * rounds);
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after() {
        let lock = Mutex::new(1);
        let guard = lock.lock();
        assert!(lock.is_locked());
        assert!(lock.try_lock().is_none());
        drop(guard);
        assert!(!lock.is_locked());
        assert_eq!(lock.try_lock().map(|g| *g), Some(1));
    }

    #[test]
    fn a_waiter_past_its_spins_and_yields_gets_a_lock_held_long() {
        let lock = Mutex::new(Vec::new());
        let (started, waiter_started) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let mut guard = lock.lock();
            let waiter = s.spawn(|| {
                started.send(()).expect("the holder listens");
                // Blocks until the holder releases: long enough to reach
                // the sleeping steps.
                lock.lock().push("waiter");
            });
            waiter_started.recv().expect("the waiter started");
            std::thread::sleep(LONG_HOLD_STEP * 100);
            guard.push("holder");
            drop(guard);
            waiter.join().expect("the waiter did not panic");
        });
        assert_eq!(*lock.lock(), ["holder", "waiter"]);
    }
}
