//! The receive ring: a bounded multi-producer single-consumer queue of
//! fixed-size cells.
//!
//! # Algorithm
//!
//! A bounded multi-producer single-consumer queue after Dmitry Vyukov's
//! bounded queue ("Bounded MPMC queue", 1024cores.net, 2010; crossbeam's
//! `ArrayQueue`), with one change for shared memory: producers learn that a
//! cell is free from the consumer's `head`, not from the cell. Ring
//! positions are `u64` counters that only grow (wrapping at 2^64, which
//! `wrapping_*` arithmetic and a power-of-two capacity make harmless: the
//! cell of position `p` is `p & (capacity - 1)` on both sides of the wrap).
//! Every cell carries the sequence number `seq` of the last message
//! published in it.
//!
//! * A producer reads `tail` as `pos`; the cell of `pos` is free once the
//!   consumer is past its previous lap, `pos - head < C` (capacity `C`).
//!   It checks that against a *cached* `head` in its own process's memory
//!   ([`RingMemory::head_cache`]), which it refreshes from the shared one
//!   (Acquire) when the cached value says full, and after a push that
//!   takes the ring, by the cache, to exactly half in use (see
//!   [`try_push`]): `head` only grows, so a stale value is merely
//!   cautious. It claims `pos` by CAS `tail: pos -> pos + 1`, writes the
//!   payload, then publishes with `seq = pos + 1` (Release).
//! * The consumer reads at `head` when `seq == head + 1` (Acquire), hands
//!   the payload out, then advances `head` (Release), which frees the cell.
//!   Nothing else of the consumer's is shared: it never writes a cell.
//!
//! On a cache-coherent machine this is what makes the small-message path
//! short. In Vyukov's queue the consumer frees a cell by writing its `seq`,
//! so the next producer of that cell reads a line the consumer owns, then
//! writes it: two transfers of the line, and the consumer's write waits at
//! its next atomic read-modify-write. Here a producer's only shared write
//! is the cell it fills (one transfer, to the consumer that polls it), and
//! it reads the consumer's `head` line about once a lap. The consumer
//! checks for exactly `head + 1`: a cell's previous message (`seq = head +
//! 1 - C`) or the initial state (`seq = index`) never equals it, as `C >=
//! 2`.
//!
//! # Field encodings
//!
//! * `head`, `tail`: `u64` positions (not indices); `tail - head` messages
//!   are claimed or published.
//! * stamp (first word of a cell): `seq - index`, wrapping, where `index`
//!   is the cell's index. Storing the difference makes all-zero memory the
//!   initial state (`seq == index`: nothing published), so a fresh segment
//!   needs no writes to its cells and its pages stay untouched until used.
//! * `len` (second word of a cell): the payload length in bytes; any value
//!   above the payload capacity (a buggy peer, or [`ABANDONED`] written when
//!   a producer's `fill` panicked) makes the consumer free the cell without
//!   handing it out, and count it in `skipped`.
//! * `consumer`: 0 when no consumer is inside [`pop`], 1 while one is (a
//!   try-lock, so that two consumers can never hand out the same cell).
//! * `skipped`: number of cells freed without being handed out.
//!
//! # Hot path
//!
//! Push and pop make no allocation, no system call and take no lock beyond
//! the consumer's uncontended try-lock; each is O(1) unless producers race
//! for the same position (then a CAS retry).

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The length word of a cell whose producer's `fill` panicked: the consumer
/// skips it.
pub(crate) const ABANDONED: u32 = u32::MAX;

/// No free cell in the ring: an ordinary "no resource, retry later" result.
///
/// It may also be reported for a moment while the ring is on the edge of
/// full (a producer read a stale `tail` or cell word), or when the ring's
/// words were corrupted by a peer; retrying is always correct.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("ring full: no free cell, retry later")]
pub struct Full;

/// Where a ring's words and cells live: a shared mapping in production,
/// heap memory under loom.
///
/// # Safety
///
/// Implementors guarantee, for the lifetime of `&self`:
/// * [`capacity`](Self::capacity) is a power of two, at least 2, and
///   [`payload_capacity`](Self::payload_capacity) fits in a `u32` below
///   [`ABANDONED`]; neither ever changes (they must come from trusted local
///   state, not from shared memory);
/// * for every `index < capacity`, [`stamp`](Self::stamp) and
///   [`len`](Self::len) return the words of cell `index`, and the payload
///   accessors pass `f` a pointer valid for reads and writes of
///   `payload_capacity` bytes that overlaps no other cell, no cell word and
///   no ring word;
/// * the words returned by `head`, `tail`, `consumer` and `skipped` are
///   distinct from each other and from every cell;
/// * [`head_cache`](Self::head_cache) is this producer process's own word
///   for this ring (not shared with other processes), never written but by
///   [`try_push`].
// SAFETY: declaring the trait unsafe is what makes implementors promise
// the contract above; the ring's unsafe blocks rely on it and say where.
pub(crate) unsafe trait RingMemory {
    /// Position of the next message to consume.
    fn head(&self) -> &AtomicU64;
    /// A value `head` had, as producers of this process last read it.
    fn head_cache(&self) -> &AtomicU64;
    /// Position of the next cell to claim.
    fn tail(&self) -> &AtomicU64;
    /// Consumer try-lock (0 free, 1 held).
    fn consumer(&self) -> &AtomicU32;
    /// Cells freed without being handed out.
    fn skipped(&self) -> &AtomicU64;
    /// Number of cells.
    fn capacity(&self) -> u64;
    /// Largest payload of one cell, in bytes.
    fn payload_capacity(&self) -> usize;
    /// Stamp word (`seq - index`) of cell `index`.
    fn stamp(&self, index: usize) -> &AtomicU64;
    /// Length word of cell `index`.
    fn len(&self, index: usize) -> &AtomicU32;
    /// Runs `f` on a pointer to the payload of cell `index`, for writing.
    fn with_payload_mut<R>(&self, index: usize, f: impl FnOnce(*mut u8) -> R) -> R;
    /// Runs `f` on a pointer to the payload of cell `index`, for reading.
    fn with_payload<R>(&self, index: usize, f: impl FnOnce(*const u8) -> R) -> R;
}

fn index_of<M: RingMemory>(m: &M, pos: u64) -> usize {
    // The mask keeps the value below `capacity`, which indexes memory and so
    // fits in usize.
    (pos & (m.capacity() - 1)) as usize
}

fn load_seq<M: RingMemory>(m: &M, index: usize, order: Ordering) -> u64 {
    m.stamp(index).load(order).wrapping_add(index as u64)
}

fn store_seq<M: RingMemory>(m: &M, index: usize, seq: u64, order: Ordering) {
    m.stamp(index).store(seq.wrapping_sub(index as u64), order);
}

/// Claims a cell, lets `fill` write the first `len` bytes of its payload,
/// and publishes it.
///
/// Then, if the push took the ring to exactly half in use by this
/// process's cache of the consumer's head, refreshes the cache. Read only
/// when it says full, the cache would be read again, in a ping-pong, once
/// a lap, on the path of the push that finds it so, whose cell the
/// prefetches before it (`RankArea::prefetch_next_cell`,
/// `prefetch_tail_cell`) also skipped as the consumer's still: series of
/// 8 × 4 B over shm took 600 ns more per round trip at that lap's push
/// (docs/profiling.md, stop 45). After a push the producer is about to
/// wait or to write its next message. At exactly half, not from half on:
/// a stream that keeps the ring more than half full (the consumer behind)
/// reads the consumer's line, which the consumer writes at each pop, once
/// more a lap, not at every push.
///
/// # Panics
///
/// If `len > m.payload_capacity()` (a caller bug). If `fill` panics, the
/// cell is published as [`ABANDONED`] (the consumer skips it) and the panic
/// goes on.
pub(crate) fn try_push<M: RingMemory>(
    m: &M,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), Full> {
    assert!(
        len <= m.payload_capacity(),
        "message of {len} bytes exceeds the cell payload ({} bytes)",
        m.payload_capacity()
    );
    let (index, pos) = claim(m)?;
    let mut publish = Publish {
        m,
        index,
        pos,
        len: ABANDONED,
    };
    m.with_payload_mut(index, |payload| {
        // SAFETY: `payload` is valid for `payload_capacity >= len` bytes of
        // this cell only (RingMemory contract). Our CAS claimed position
        // `pos`, so no other producer writes this cell before position
        // `pos + C` is claimed, which needs head past `pos`, which needs our
        // publication first; the consumer does not read it before seq
        // becomes `pos + 1`. The previous lap's consumer finished its reads
        // before its Release store of a head past `pos - C`, which we (or a
        // producer of this process, whose cache we read after it) acquired
        // before claiming. So the bytes are ours alone until we publish.
        let bytes = unsafe { std::slice::from_raw_parts_mut(payload, len) };
        fill(bytes);
    });
    // `len <= payload_capacity < ABANDONED` (contract), so it fits a u32.
    publish.len = len as u32;
    drop(publish);
    let used = pos
        .wrapping_add(1)
        .wrapping_sub(m.head_cache().load(Ordering::Relaxed));
    if used == m.capacity() / 2 {
        refresh_head_cache(m);
    }
    Ok(())
}

/// Reads the consumer's `head` into this process's cache of it, and
/// returns it. Acquire: the consumer's reads of the cells it freed happen
/// before our writes to them. Release into the cache: a head read by
/// another producer thread of this process frees cells for us only
/// through it (the claim acquires the cache).
fn refresh_head_cache<M: RingMemory>(m: &M) -> u64 {
    let head = m.head().load(Ordering::Acquire);
    m.head_cache().store(head, Ordering::Release);
    head
}

/// CAS loop of the producer: returns the claimed cell and position.
fn claim<M: RingMemory>(m: &M) -> Result<(usize, u64), Full> {
    let capacity = m.capacity();
    let mut pos = m.tail().load(Ordering::Relaxed);
    // Acquire / Release on the cache too: a head read by another producer
    // thread of this process frees cells for us only through it.
    let mut head = m.head_cache().load(Ordering::Acquire);
    loop {
        // Positions ahead of `pos` in use: wrapping, so a head that another
        // producer's claims left behind a stale `pos` reads as negative.
        let mut used = pos.wrapping_sub(head) as i64;
        if used < 0 || used >= capacity as i64 {
            // The cached head says full (or is newer than `pos`): read the
            // consumer's.
            head = refresh_head_cache(m);
            used = pos.wrapping_sub(head) as i64;
            if used < 0 {
                // `pos` is stale: others claimed and the consumer consumed
                // past it meanwhile.
                pos = m.tail().load(Ordering::Relaxed);
                continue;
            }
            if used >= capacity as i64 {
                return Err(Full);
            }
        }
        match m.tail().compare_exchange_weak(
            pos,
            pos.wrapping_add(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Ok((index_of(m, pos), pos)),
            Err(now) => pos = now,
        }
    }
}

/// Publishes a claimed cell when dropped, also on unwind.
struct Publish<'m, M: RingMemory> {
    m: &'m M,
    index: usize,
    pos: u64,
    len: u32,
}

impl<M: RingMemory> Drop for Publish<'_, M> {
    fn drop(&mut self) {
        self.m.len(self.index).store(self.len, Ordering::Relaxed);
        store_seq(
            self.m,
            self.index,
            self.pos.wrapping_add(1),
            Ordering::Release,
        );
    }
}

/// What one consumer step found.
#[derive(Debug)]
pub(crate) enum Popped<R> {
    /// No published message at head (or another consumer is active).
    Empty,
    /// The message at head was handed to `f`, which returned this.
    Item(R),
    /// The cell at head held an invalid length; it was freed unread.
    Skipped,
}

/// Consumes the message at head: runs `f` on its payload, then frees the
/// cell (also when `f` panics).
///
/// Returns [`Popped::Empty`] at once if another consumer holds the ring's
/// consumer lock, so that two threads (or processes) can never hand out the
/// same cell. (The loom models pop this way; `RankArea::pop` goes through
/// [`pop_if`] too.)
#[cfg(loom)]
pub(crate) fn pop<M: RingMemory, R>(m: &M, f: impl FnOnce(&[u8]) -> R) -> Popped<R> {
    match pop_if(m, |bytes| Some(f(bytes))) {
        Popped::Empty => Popped::Empty,
        Popped::Item(Some(r)) => Popped::Item(r),
        // Not reached: the closure above always takes the payload.
        Popped::Item(None) => Popped::Empty,
        Popped::Skipped => Popped::Skipped,
    }
}

/// [`pop`], except that the cell stays at head, unconsumed, when `f`
/// returns `None` (`Popped::Item(None)`); it is freed when `f` returns
/// `Some` or panics.
pub(crate) fn pop_if<M: RingMemory, R>(
    m: &M,
    f: impl FnOnce(&[u8]) -> Option<R>,
) -> Popped<Option<R>> {
    // A compare-exchange rather than a swap: same cost, and loom 0.7 models
    // it correctly (its swap lets a concurrent store slip between the read
    // and the write: tokio-rs/loom#254).
    if m.consumer()
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Popped::Empty;
    }
    let _unlock = Unlock(m.consumer());
    let head = m.head().load(Ordering::Relaxed);
    let index = index_of(m, head);
    if load_seq(m, index, Ordering::Acquire) != head.wrapping_add(1) {
        return Popped::Empty;
    }
    let len = m.len(index).load(Ordering::Relaxed) as usize;
    let mut free = Free {
        m,
        head,
        keep: false,
    };
    if len > m.payload_capacity() {
        m.skipped().fetch_add(1, Ordering::Relaxed);
        return Popped::Skipped;
    }
    let r = m.with_payload(index, |payload| {
        // SAFETY: `payload` is valid for `payload_capacity >= len` bytes of
        // this cell only (RingMemory contract). seq == head + 1, loaded with
        // Acquire, means the producer published this cell with Release after
        // writing it; no producer can claim it again before we advance head
        // past it (after `f` returns), and we hold the consumer lock, so
        // no other consumer reads it: nobody writes these bytes while the
        // slice lives.
        let bytes = unsafe { std::slice::from_raw_parts(payload, len) };
        f(bytes)
    });
    free.keep = r.is_none();
    Popped::Item(r)
}

/// Frees the consumed cell by advancing head when dropped.
struct Free<'m, M: RingMemory> {
    m: &'m M,
    head: u64,
    /// The cell stays at head, unconsumed.
    keep: bool,
}

impl<M: RingMemory> Drop for Free<'_, M> {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // Release: our reads of the cell happen before a producer's
        // writes to it (it acquires head before claiming the cell again).
        self.m
            .head()
            .store(self.head.wrapping_add(1), Ordering::Release);
    }
}

/// Releases the consumer lock when dropped.
struct Unlock<'m>(&'m AtomicU32);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Whether no published message waits at head.
///
/// Lock-free, so callable from any thread; a thread that races with another
/// thread's [`pop`] may read a head that is already stale and answer `true`
/// while the next message is published (the popping thread will see it).
pub(crate) fn is_empty<M: RingMemory>(m: &M) -> bool {
    let head = m.head().load(Ordering::Acquire);
    let index = index_of(m, head);
    load_seq(m, index, Ordering::Acquire) != head.wrapping_add(1)
}

/// Restarts an idle ring at position `start` (tests: wrap-around at 2^64).
///
/// Only valid while nobody else uses the ring.
#[cfg(all(test, not(loom)))]
pub(crate) fn reset_at<M: RingMemory>(m: &M, start: u64) {
    for k in 0..m.capacity() {
        let pos = start.wrapping_add(k);
        store_seq(m, index_of(m, pos), pos, Ordering::Relaxed);
    }
    m.head().store(start, Ordering::Relaxed);
    m.head_cache().store(start, Ordering::Relaxed);
    m.tail().store(start, Ordering::Release);
}
