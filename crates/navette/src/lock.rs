//! The node's lock: released by a plain store, and biased to one thread.
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
//! # Biased to one thread
//!
//! Taking the lock by a compare-exchange is a locked instruction too: each
//! `isend` and `irecv` of a series waited there for the stores of the one
//! before (its copy into the open packet, the landing's into the
//! receives) and paid the instruction's own cycles; without it a series of
//! 8 or 16 small segments takes 6–10 % less time (docs/profiling.md). A runtime that calls
//! a node from one thread (MPI's `MPI_THREAD_SINGLE` or `FUNNELED`, where
//! MPI libraries take no lock at all) should not pay for threads it does
//! not have.
//!
//! So the lock is *biased* to the first thread that takes it, after the
//! biased locks of Java virtual machines and the asymmetric barriers of
//! userspace RCU: that thread enters with plain stores and loads (it marks
//! itself in, `owner_in`, then checks the lock is still biased, with only
//! a compiler fence between the two), and leaves with a plain store. The
//! first other thread to take the lock revokes the bias for good: it marks
//! the lock revoking, then makes every thread of the process run a full
//! memory barrier (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, one
//! system call), which makes the two sides see each other as a full fence
//! on both would (Dekker's mutual exclusion): either the owner sees the
//! revocation and backs out, or the revoker sees the owner in, and the
//! bias ends once it leaves (any thread that looks then may end it; a
//! `try_lock` never waits for it). From then on every thread, the owner
//! too, takes `locked` by compare-exchange as before. A node used from
//! several threads (a progress thread, a handler pool, many client
//! threads) pays one system call at its first contention and nothing
//! more; where the kernel has no `membarrier` (before Linux 4.14, or
//! refused by a sandbox), the lock is never biased.
//!
//! Written here rather than taken from a crate: `parking_lot`'s and std's
//! mutexes take and release with read-modify-writes by design (they park
//! waiters), `spin`'s never stops spinning or yielding, and no crate found
//! offers a biased lock. The backoff is `crossbeam-utils`', the barrier
//! `rustix`'s.

use std::cell::Cell;
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, compiler_fence, fence};
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

/// The lock's bias: its owner may enter with plain stores.
const BIASED: u8 = 0;
/// A thread runs the process-wide barrier that ends the bias.
const REVOKING: u8 = 1;
/// The barrier ran: no biased section begins any more, but the owner may
/// still be inside the last one (`owner_in`).
const BARRIERED: u8 = 2;
/// No bias: every thread takes `locked`, and no biased section is left.
const REVOKED: u8 = 3;

/// A lock released by a plain store, biased to the first thread that
/// takes it (see the module's docs).
#[derive(Debug)]
pub(crate) struct NodeLock {
    /// The lock of every thread once the bias is revoked.
    locked: AtomicBool,
    /// [`BIASED`], [`REVOKING`], [`BARRIERED`] or [`REVOKED`]; only ever
    /// grows.
    bias: AtomicU8,
    /// The [`thread_token`] of the thread the lock is biased to; 0 until
    /// the first lock.
    owner: AtomicU64,
    /// The owner is entering, or inside, a biased section.
    owner_in: AtomicBool,
}

/// A number of the calling thread that no other thread ever has (a
/// `ThreadId` would do, but `thread::current()` counts a reference).
#[inline]
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        // No destructor: readable to the thread's very end.
        static TOKEN: Cell<u64> = const { Cell::new(0) };
    }
    TOKEN.with(|token| match token.get() {
        0 => {
            let new = NEXT.fetch_add(1, Ordering::Relaxed);
            token.set(new);
            new
        }
        known => known,
    })
}

/// Whether this process may make every one of its threads run a memory
/// barrier (`membarrier`'s private expedited command, registered here):
/// without it, no lock is biased. Found out once, the same answer for
/// every thread.
fn process_barrier_works() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier, membarrier_query};
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let query = membarrier_query();
        query.contains_command(MembarrierCommand::PrivateExpedited)
            && query.contains_command(MembarrierCommand::RegisterPrivateExpedited)
            && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
            && membarrier(MembarrierCommand::PrivateExpedited).is_ok()
    })
}

/// Makes every running thread of this process run a full memory barrier
/// (the revoker's side of the bias, see the module's docs).
fn process_barrier() {
    use rustix::thread::{MembarrierCommand, membarrier};
    // It worked when the bias was taken (`process_barrier_works`); a
    // refusal now is a kernel short of memory for a moment, or a sandbox
    // installed since. Tried again a while, then the process stops: going
    // on would let two threads into the node's state.
    let mut err = None;
    for attempt in 0..100 {
        match membarrier(MembarrierCommand::PrivateExpedited) {
            Ok(()) => return,
            Err(e) => err = Some(e),
        }
        std::thread::sleep(LONG_HOLD_STEP * attempt);
    }
    // Not `eprintln!`, which panics if standard error fails: this must
    // not unwind with the bias half revoked.
    let _ = writeln!(
        std::io::stderr(),
        "navette: membarrier keeps failing ({err:?}) after it worked: a lock's bias cannot be revoked safely"
    );
    std::process::abort();
}

/// A waiter's pause between looks: spinning, then yielding its core, then
/// sleeping in short steps (the holder may keep the lock long).
struct Pause {
    backoff: Backoff,
    yields: u32,
}

impl Pause {
    fn new() -> Self {
        Self {
            backoff: Backoff::new(),
            yields: 0,
        }
    }

    fn step(&mut self) {
        if !self.backoff.is_completed() {
            self.backoff.snooze();
        } else if self.yields < YIELDS_BEFORE_SLEEP {
            self.yields += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(LONG_HOLD_STEP);
        }
    }
}

impl NodeLock {
    /// Enters a biased section if this thread owns the bias (or claims it,
    /// as the first to lock), the bias holds, and it is not inside already.
    #[inline]
    fn try_biased(&self) -> bool {
        if self.bias.load(Ordering::Relaxed) != BIASED {
            return false;
        }
        let me = thread_token();
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != me && !(owner == 0 && self.claim(me)) {
            return false;
        }
        // Acquire: a biased section released by another thread (its guard
        // was sent there) happens before this one. A section not released
        // yet is not shared.
        if self.owner_in.load(Ordering::Acquire) {
            return false;
        }
        self.owner_in.store(true, Ordering::Relaxed);
        // The revoker's process-wide barrier stands for a full fence here:
        // either the load below sees the revocation, or the revoker sees
        // `owner_in` (see `try_revoke`). The compiler must keep the order.
        compiler_fence(Ordering::SeqCst);
        if self.bias.load(Ordering::Relaxed) != BIASED {
            self.owner_in.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// The first lock: `me` takes the bias where the process can revoke
    /// one, else the lock is never biased.
    #[cold]
    fn claim(&self, me: u64) -> bool {
        if !process_barrier_works() {
            // Every thread finds the same answer: nobody ever entered
            // biased, there is nothing to wait for.
            self.bias.store(REVOKED, Ordering::Release);
            return false;
        }
        self.owner
            .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Ends the bias, waiting for the owner's last biased section or
    /// another thread's barrier: once this returns, no biased section is
    /// under way or can begin, and the last one happens before the
    /// caller's next steps.
    #[inline]
    fn revoke(&self) {
        // After the first contention, the usual case: a load, no
        // read-modify-write.
        if self.bias.load(Ordering::Acquire) != REVOKED {
            self.revoke_waiting();
        }
    }

    #[cold]
    fn revoke_waiting(&self) {
        let mut pause = Pause::new();
        while !self.try_revoke() {
            pause.step();
        }
    }

    /// Moves the bias towards REVOKED as far as it can without waiting:
    /// whether it is REVOKED (see [`Self::revoke`]). Any thread may finish
    /// a revocation another began, so none waits on a particular one.
    #[cold]
    fn try_revoke(&self) -> bool {
        loop {
            match self.bias.load(Ordering::Acquire) {
                REVOKED => return true,
                BIASED => {
                    if self
                        .bias
                        .compare_exchange(BIASED, REVOKING, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        // A full barrier in every thread: the owner's
                        // `owner_in` store before it shows from now on, or
                        // its read of `bias` after it sees REVOKING.
                        process_barrier();
                        self.bias.store(BARRIERED, Ordering::Release);
                    }
                }
                // Another thread's barrier is under way.
                REVOKING => return false,
                _ => {
                    // BARRIERED: the barrier happened before this load, and
                    // this fence comes after both in their single order, so
                    // an `owner_in` stored before the barrier shows below.
                    fence(Ordering::SeqCst);
                    if self.owner_in.load(Ordering::Acquire) {
                        return false;
                    }
                    if self
                        .bias
                        .compare_exchange(BARRIERED, REVOKED, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        tracing::debug!(
                            "the node's lock is no longer biased: a second thread took it"
                        );
                    }
                    return true;
                }
            }
        }
    }

    fn try_acquire(&self) -> bool {
        self.locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes `locked`, the bias revoked: every lock of a node used from
    /// several threads, after the first.
    fn lock_shared(&self) {
        self.revoke();
        if !self.try_acquire() {
            self.lock_contended();
        }
    }

    /// The lock was held: waits for it.
    #[cold]
    fn lock_contended(&self) {
        let mut pause = Pause::new();
        loop {
            // Read before trying: a failed compare-exchange would take the
            // line from the holder.
            if !self.locked.load(Ordering::Relaxed) && self.try_acquire() {
                return;
            }
            pause.step();
        }
    }
}

// SAFETY: one section at a time. While the bias holds (BIASED, REVOKING,
// or BARRIERED with the owner inside), only the owner thread enters, by
// `try_biased`, and only when `owner_in` was false: it sets it, and the one
// guard there is clears it. Any other thread (or the owner inside already)
// goes to `try_revoke`, and takes `locked` only once the bias is REVOKED,
// which a thread stores only after the process-wide barrier ran (BARRIERED)
// and it then saw `owner_in` false. The barrier orders the owner's
// `owner_in` store before that load, or the REVOKING store before the
// owner's load of `bias` (the owner then backs out); a biased section
// cannot begin after it. After REVOKED every thread takes `locked` by
// compare-exchange: false to true, at most one holder. Acquire on that
// compare-exchange and on the loads of `owner_in` and `bias` pair with the
// Release stores that end sections (`unlock`) and the bias: a section's
// writes happen before the next one. The guard state is `GuardSend`:
// nothing is tied to the thread that took it (`unlock` tells the kinds
// apart by `bias`, not by thread).
unsafe impl lock_api::RawMutex for NodeLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Self {
        locked: AtomicBool::new(false),
        bias: AtomicU8::new(BIASED),
        owner: AtomicU64::new(0),
        owner_in: AtomicBool::new(false),
    };

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if !self.try_biased() {
            self.lock_shared();
        }
        lock_api::GuardSend::new()
    }

    /// Takes the lock if no section holds it, without waiting. A thread
    /// that is not the owner revokes the bias on the way (one system
    /// call). While the bias ends it may also fail with the lock free: the
    /// owner backing out of a section it was entering, or another thread's
    /// barrier under way.
    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        if self.try_biased() {
            return Some(lock_api::GuardSend::new());
        }
        // Held by a biased section (the owner's, or being entered): no
        // need to revoke the bias to find that out.
        if self.bias.load(Ordering::Acquire) != REVOKED
            && (self.owner_in.load(Ordering::Acquire) || !self.try_revoke())
        {
            return None;
        }
        (!self.locked.load(Ordering::Relaxed) && self.try_acquire()).then(lock_api::GuardSend::new)
    }

    // SAFETY: the caller holds the lock (lock_api's contract: `_guard` came
    // from a successful `lock` or `try_lock`). A holder found `bias`
    // REVOKED before it took `locked` (and `bias` never goes back), or it
    // is the biased section, during which `bias` cannot become REVOKED
    // (that needs `owner_in` seen false): so `bias` tells which it holds.
    // Release publishes the section's writes to the next holder's Acquire.
    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        if self.bias.load(Ordering::Relaxed) == REVOKED {
            self.locked.store(false, Ordering::Release);
        } else {
            self.owner_in.store(false, Ordering::Release);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed) || self.owner_in.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One section over `shared`: checks that no other thread is inside,
    /// and counts itself by a plain read-modify-write (a lost update would
    /// show in the total).
    fn one_section(shared: &Mutex<(u64, bool)>) {
        let mut guard = shared.lock();
        assert!(!guard.1, "two threads inside the section");
        guard.1 = true;
        guard.0 += 1;
        guard.1 = false;
    }

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
                        one_section(&shared);
                    }
                });
            }
        });
        assert_eq!(shared.lock().0, threads * rounds);
    }

    /// The first locker's sections (biased) against threads that join
    /// later (each revokes, or waits for the revocation): no section is
    /// ever shared, and no update is lost, whenever the revocation falls.
    #[test]
    fn threads_that_join_the_owner_later_revoke_its_bias_and_never_share_a_section() {
        for round in 0..20u64 {
            let rounds = 5_000u64;
            let joiners = 3u64;
            let shared = Mutex::new((0u64, false));
            let owner_started = std::sync::Barrier::new(1 + joiners as usize);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..rounds {
                        if i == round * 100 {
                            owner_started.wait();
                        }
                        one_section(&shared);
                    }
                });
                for _ in 0..joiners {
                    s.spawn(|| {
                        owner_started.wait();
                        for _ in 0..rounds {
                            one_section(&shared);
                        }
                    });
                }
            });
            let lock = shared.lock();
            assert_eq!(lock.0, (1 + joiners) * rounds, "round {round}");
        }
    }

    /// A biased section whose guard went to another thread still excludes
    /// its owner, which waits for it there; the bias is then revoked.
    #[test]
    fn the_owners_guard_released_by_another_thread_ends_its_section() {
        let lock = Mutex::new(Vec::new());
        let guard = lock.lock();
        std::thread::scope(|s| {
            let releaser = s.spawn(move || {
                let mut guard = guard;
                std::thread::sleep(LONG_HOLD_STEP * 10);
                guard.push("released elsewhere");
            });
            lock.lock().push("owner again");
            releaser.join().expect("the releaser did not panic");
        });
        assert_eq!(*lock.lock(), ["released elsewhere", "owner again"]);
        // SAFETY: the raw lock is only read, not locked or unlocked.
        let raw = unsafe { lock.raw() };
        assert_eq!(
            raw.bias.load(Ordering::Relaxed),
            REVOKED,
            "the owner took the shared way"
        );
    }

    /// A thread holding lock X that only tries lock Y (held by Y's owner,
    /// which then waits for X) is told no at once instead of waiting for
    /// the owner's section: a `try_lock` never waits, revoking or not.
    #[test]
    fn try_lock_of_a_biased_lock_never_waits_for_its_owner() {
        let (done, finished) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            for _ in 0..200 {
                let x = Mutex::new(0u64);
                let y = Mutex::new(0u64);
                let stop = AtomicBool::new(false);
                let started = AtomicBool::new(false);
                std::thread::scope(|s| {
                    // Y's owner: Y, then X.
                    s.spawn(|| {
                        while !stop.load(Ordering::Relaxed) {
                            let mut in_y = y.lock();
                            started.store(true, Ordering::Release);
                            *x.lock() += 1;
                            *in_y += 1;
                        }
                    });
                    while !started.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    // X, then only a try of Y.
                    for _ in 0..50 {
                        let _in_x = x.lock();
                        if let Some(mut in_y) = y.try_lock() {
                            *in_y += 1;
                        }
                    }
                    stop.store(true, Ordering::Relaxed);
                });
            }
            done.send(()).expect("the test listens");
        });
        // A hang detector, not a speed bound: the rounds take well under a
        // second when nothing deadlocks.
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("a thread waited in try_lock: deadlock");
        worker.join().expect("the worker did not panic");
    }

    #[test]
    fn a_lock_used_by_one_thread_stays_biased() {
        let lock = Mutex::new(0u32);
        for _ in 0..1000 {
            *lock.lock() += 1;
        }
        // SAFETY: the raw lock is only read, not locked or unlocked.
        let raw = unsafe { lock.raw() };
        let expected = if process_barrier_works() {
            BIASED
        } else {
            REVOKED
        };
        assert_eq!(raw.bias.load(Ordering::Relaxed), expected);
        assert!(
            !raw.locked.load(Ordering::Relaxed),
            "never taken the shared way"
        );
        assert_eq!(*lock.lock(), 1000);
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
