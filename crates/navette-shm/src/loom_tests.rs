//! loom models of the ring, of the doorbell handshake and of the offer
//! slot, on heap memory with loom's atomics and cells (`sync` swaps them
//! in).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p navette-shm --release --lib loom`
//! (about 15 s on two cores; `LOOM_MAX_PREEMPTIONS=3` explores deeper, in
//! about 2.5 minutes).
//!
//! Producers never spin here: a spin loop on each side makes loom explore
//! unboundedly long schedules. And a consumer must retry after an empty
//! pop, so that loom lets it read a cell published meanwhile (loom 0.7's
//! partial-order reduction can otherwise skip that schedule): the models
//! were checked to fail when a Release or Acquire of the ring is weakened
//! to Relaxed (the head's, and the producers' head cache's), when the
//! consumer lock is removed, and when the sleeper's fence is removed; the
//! offer models fail when the post's Release, the take's Acquire, the
//! finish's Release or the settle's Acquire is weakened to Relaxed.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::thread;

use crate::bell::Bell;
use crate::ring::{self, Popped, RingMemory};

const PAYLOAD: usize = 8;

/// A ring whose words and cells live on the heap.
struct HeapRing {
    head: AtomicU64,
    /// One cache for every producer thread: they model producers of one
    /// process (the cache is then shared, its most racy use).
    head_cache: AtomicU64,
    tail: AtomicU64,
    consumer: AtomicU32,
    skipped: AtomicU64,
    stamps: Vec<AtomicU64>,
    lens: Vec<AtomicU32>,
    payloads: Vec<UnsafeCell<[u8; PAYLOAD]>>,
}

impl HeapRing {
    fn new(cells: usize) -> Self {
        assert!(cells.is_power_of_two() && cells >= 2);
        Self {
            head: AtomicU64::new(0),
            head_cache: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            consumer: AtomicU32::new(0),
            skipped: AtomicU64::new(0),
            stamps: (0..cells).map(|_| AtomicU64::new(0)).collect(),
            lens: (0..cells).map(|_| AtomicU32::new(0)).collect(),
            payloads: (0..cells).map(|_| UnsafeCell::new([0; PAYLOAD])).collect(),
        }
    }
}

// SAFETY: capacity is the vectors' length, a power of two >= 2 (asserted in
// `new`) that never changes; PAYLOAD is small; every cell has its own stamp,
// length and payload array (separate heap objects), distinct from the ring
// words; payload pointers come from loom's UnsafeCell, valid for PAYLOAD
// bytes, and loom checks every access to them for races.
unsafe impl RingMemory for HeapRing {
    fn head(&self) -> &AtomicU64 {
        &self.head
    }
    fn head_cache(&self) -> &AtomicU64 {
        &self.head_cache
    }
    fn tail(&self) -> &AtomicU64 {
        &self.tail
    }
    fn consumer(&self) -> &AtomicU32 {
        &self.consumer
    }
    fn skipped(&self) -> &AtomicU64 {
        &self.skipped
    }
    fn capacity(&self) -> u64 {
        self.stamps.len() as u64
    }
    fn payload_capacity(&self) -> usize {
        PAYLOAD
    }
    fn stamp(&self, index: usize) -> &AtomicU64 {
        &self.stamps[index]
    }
    fn len(&self, index: usize) -> &AtomicU32 {
        &self.lens[index]
    }
    fn with_payload_mut<R>(&self, index: usize, f: impl FnOnce(*mut u8) -> R) -> R {
        self.payloads[index].with_mut(|p| f(p.cast()))
    }
    fn with_payload<R>(&self, index: usize, f: impl FnOnce(*const u8) -> R) -> R {
        self.payloads[index].with(|p| f(p.cast()))
    }
}

/// Pushes message `i` of producer `p` (two bytes), retrying while full.
/// Only used before other threads start, where it never spins.
fn push(ring: &HeapRing, p: u8, i: u8) {
    while ring::try_push(ring, 2, |b| b.copy_from_slice(&[p, i])).is_err() {
        thread::yield_now();
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Two preemptions already catch every weakened ordering tried (see the
    // module doc); LOOM_MAX_PREEMPTIONS overrides.
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// Two producers push `per` messages each, one try each and no spinning
/// (spin loops on both sides make loom explore unboundedly long
/// schedules), then count themselves done; the consumer pops, yielding
/// when empty, until both are done and the ring is drained. Checks that
/// what was pushed is exactly what was popped (no loss, no duplication),
/// in each producer's order; loom checks every payload access for races.
fn mpsc(cells: usize, per: u8) {
    model(move || {
        let ring = Arc::new(HeapRing::new(cells));
        let done = Arc::new(AtomicU32::new(0));
        let producers: Vec<_> = (0..2u8)
            .map(|p| {
                let (ring, done) = (ring.clone(), done.clone());
                thread::spawn(move || {
                    let pushed = (0..per)
                        .filter(|&i| {
                            ring::try_push(&*ring, 2, |b| b.copy_from_slice(&[p, i])).is_ok()
                        })
                        .collect::<Vec<u8>>();
                    done.fetch_add(1, Ordering::Release);
                    pushed
                })
            })
            .collect();
        let mut popped = [Vec::new(), Vec::new()];
        loop {
            let finished = done.load(Ordering::Acquire) == 2;
            match ring::pop(&*ring, |b| (b.len(), b[0], b[1])) {
                Popped::Item((len, p, i)) => {
                    assert_eq!(len, 2);
                    popped[usize::from(p)].push(i);
                }
                Popped::Empty if finished => break,
                Popped::Empty => thread::yield_now(),
                Popped::Skipped => panic!("a valid cell was skipped"),
            }
        }
        let pushed: Vec<Vec<u8>> = producers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            popped[0], pushed[0],
            "producer 0: lost, duplicated or reordered"
        );
        assert_eq!(
            popped[1], pushed[1],
            "producer 1: lost, duplicated or reordered"
        );
        assert!(ring::is_empty(&*ring));
    });
}

#[test]
fn loom_ring_two_cells_wraps() {
    // Up to four messages through two cells while the consumer frees them:
    // cells are reused, and Full is hit.
    mpsc(2, 2);
}

#[test]
fn loom_ring_four_cells() {
    mpsc(4, 2);
}

#[test]
fn loom_ring_full_then_free() {
    model(|| {
        let ring = Arc::new(HeapRing::new(2));
        push(&ring, 0, 0);
        push(&ring, 0, 1);
        // Full is exact when nothing races.
        assert!(ring::try_push(&*ring, 1, |_| ()).is_err());
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || ring::try_push(&*ring, 2, |b| b.copy_from_slice(&[1, 0])).is_ok())
        };
        let first = ring::pop(&*ring, |b| (b[0], b[1]));
        assert!(matches!(first, Popped::Item((0, 0))));
        let pushed = producer.join().unwrap();
        let mut rest = Vec::new();
        while let Popped::Item(m) = ring::pop(&*ring, |b| (b[0], b[1])) {
            rest.push(m);
        }
        if pushed {
            assert_eq!(rest, [(0, 1), (1, 0)]);
        } else {
            assert_eq!(rest, [(0, 1)]);
        }
    });
}

#[test]
fn loom_ring_two_consumers_never_share_a_cell() {
    // The consumer try-lock: concurrent pops hand out each message once.
    model(|| {
        let ring = Arc::new(HeapRing::new(2));
        push(&ring, 0, 0);
        push(&ring, 0, 1);
        let other = {
            let ring = ring.clone();
            thread::spawn(move || match ring::pop(&*ring, |b| b[1]) {
                Popped::Item(i) => Some(i),
                _ => None,
            })
        };
        let mine = match ring::pop(&*ring, |b| b[1]) {
            Popped::Item(i) => Some(i),
            _ => None,
        };
        let theirs = other.join().unwrap();
        let mut all: Vec<u8> = mine.into_iter().chain(theirs).collect();
        while let Popped::Item(i) = ring::pop(&*ring, |b| b[1]) {
            all.push(i);
        }
        all.sort_unstable();
        assert_eq!(all, [0, 1]);
    });
}

/// A futex wait without timeout: blocks until the word leaves `expected`
/// (a lost wake-up makes loom report a livelock).
fn futex_wait(word: &AtomicU32, expected: u32) -> Result<(), ()> {
    while word.load(Ordering::Acquire) == expected {
        thread::yield_now();
    }
    Ok(())
}

/// The doorbell handshake: a sleeper that decides to wait is always rung
/// (the futex word moves past its ticket), so no wake-up is lost.
#[test]
fn loom_doorbell_no_lost_wakeup() {
    model(|| {
        let ring = Arc::new(HeapRing::new(2));
        let words = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
        let producer = {
            let (ring, words) = (ring.clone(), words.clone());
            thread::spawn(move || {
                push(&ring, 0, 0);
                let bell = Bell {
                    doorbell: &words.0,
                    sleepers: &words.1,
                };
                bell.ring_if_sleeping(|| ());
            })
        };
        let bell = Bell {
            doorbell: &words.0,
            sleepers: &words.1,
        };
        let ticket = bell.ticket();
        bell.sleep(
            ticket,
            || !ring::is_empty(&*ring),
            |t| futex_wait(&words.0, t),
        )
        .unwrap();
        producer.join().unwrap();
        assert!(!ring::is_empty(&*ring));
    });
}

/// Same for a wake by one of the owner's threads after other work.
#[test]
fn loom_wake_after_ticket_is_not_lost() {
    model(|| {
        let work = Arc::new(AtomicU32::new(0));
        let words = Arc::new((AtomicU32::new(0), AtomicU32::new(0)));
        let waker = {
            let (work, words) = (work.clone(), words.clone());
            thread::spawn(move || {
                work.store(1, Ordering::Relaxed);
                Bell {
                    doorbell: &words.0,
                    sleepers: &words.1,
                }
                .ring(|| ());
            })
        };
        let bell = Bell {
            doorbell: &words.0,
            sleepers: &words.1,
        };
        let ticket = bell.ticket();
        if work.load(Ordering::Relaxed) == 0 {
            bell.sleep(ticket, || false, |t| futex_wait(&words.0, t))
                .unwrap();
        }
        waker.join().unwrap();
    });
}

/// An offer slot's words on the heap, and the part B of data that its
/// owner or its taker writes.
struct OfferSlot {
    state: AtomicU64,
    source: AtomicU64,
    dest: AtomicU64,
    len: AtomicU64,
    part_b: UnsafeCell<u8>,
}

impl OfferSlot {
    fn new() -> Self {
        Self {
            state: AtomicU64::new(0),
            source: AtomicU64::new(0),
            dest: AtomicU64::new(0),
            len: AtomicU64::new(0),
            part_b: UnsafeCell::new(0),
        }
    }

    fn words(&self) -> crate::offer::OfferWords<'_> {
        crate::offer::OfferWords {
            state: &self.state,
            source: &self.source,
            dest: &self.dest,
            len: &self.len,
        }
    }
}

/// The owner of an offer slot offers part B of some data to a taker, writes
/// part A itself, settles, writes B itself unless the taker wrote it, and
/// reads B; the taker looks for the offer twice and writes B if it took
/// it. loom checks that the taker never writes B while the owner touches it
/// (after settling, or when it revoked), and that the owner reads what was
/// written.
#[test]
fn loom_offer_is_written_by_one_side_only() {
    use crate::offer::{Offer, Settled};

    model(|| {
        let slot = Arc::new(OfferSlot::new());
        let offer = Offer {
            taker: 1,
            source: 10,
            dest: 20,
            len: 30,
        };
        let taker = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || {
                for _ in 0..2 {
                    if let Some(took) = slot.words().take(1) {
                        assert_eq!(took, offer);
                        // SAFETY: a valid pointer from loom's cell, which
                        // reports any racing access (what this model checks).
                        slot.part_b.with_mut(|b| unsafe { *b = 2 });
                        slot.words().finish(1, true);
                        return;
                    }
                    thread::yield_now();
                }
            })
        };
        slot.words().post(&offer);
        // An offer to another rank is not taken by this one.
        assert_eq!(slot.words().take(2), None);
        let settled = slot.words().settle(1, || {
            thread::yield_now();
            true
        });
        match settled {
            Settled::Written => {}
            // SAFETY: as the taker's write.
            Settled::Revoked => slot.part_b.with_mut(|b| unsafe { *b = 1 }),
            other => panic!("settled {other:?}"),
        }
        // SAFETY: as the taker's write.
        let b = slot.part_b.with(|b| unsafe { *b });
        assert_eq!(b, if settled == Settled::Written { 2 } else { 1 });
        taker.join().unwrap();
    });
}

/// The offer slot used twice in a row, by a taker that fails its first
/// write and may take the second offer: the owner writes part B itself
/// unless the taker wrote it, round after round; the taker's late finish
/// never settles an offer it did not take (loom checks every access to B).
#[test]
fn loom_offer_slot_is_reused_and_failures_fall_back() {
    use crate::offer::{Offer, Settled};

    model(|| {
        let slot = Arc::new(OfferSlot::new());
        let offer = |round: u64| Offer {
            taker: 1,
            source: round,
            dest: 20,
            len: 30,
        };
        let taker = {
            let slot = Arc::clone(&slot);
            thread::spawn(move || {
                for _ in 0..2 {
                    if let Some(took) = slot.words().take(1) {
                        // The first round's write fails.
                        let ok = took.source == 2;
                        if ok {
                            // SAFETY: a valid pointer from loom's cell,
                            // which reports any racing access.
                            slot.part_b.with_mut(|b| unsafe { *b = 20 });
                        }
                        slot.words().finish(1, ok);
                    }
                    thread::yield_now();
                }
            })
        };
        for round in 1..=2 {
            slot.words().post(&offer(round));
            let settled = slot.words().settle(1, || {
                thread::yield_now();
                true
            });
            let expected = match settled {
                Settled::Written => {
                    assert_eq!(round, 2, "only the second write succeeds");
                    20
                }
                Settled::Revoked | Settled::Failed => {
                    // SAFETY: as the taker's write.
                    slot.part_b.with_mut(|b| unsafe { *b = round as u8 });
                    round as u8
                }
                Settled::Abandoned => panic!("the owner never gives up here"),
            };
            // SAFETY: as the taker's write.
            assert_eq!(slot.part_b.with(|b| unsafe { *b }), expected);
        }
        taker.join().unwrap();
    });
}
