//! The receive ring: a bounded multi-producer single-consumer queue of
//! fixed-size cells.
//!
//! # Algorithm
//!
//! Dmitry Vyukov's bounded MPMC queue ("Bounded MPMC queue",
//! 1024cores.net, 2010; the algorithm of crossbeam's `ArrayQueue`), used
//! with a single consumer. Every cell carries a sequence number `seq`; ring
//! positions are `u64` counters that only grow (wrapping at 2^64, which
//! `wrapping_*` arithmetic and a power-of-two capacity make harmless: the
//! cell of position `p` is `p & (capacity - 1)` on both sides of the wrap).
//! For the cell of position `p` and capacity `C`:
//!
//! | `seq` | state | owner |
//! |---|---|---|
//! | `p` | free for position `p` | whichever producer claims `p` |
//! | `p` (tail > `p`) | claimed, being written | that producer alone |
//! | `p + 1` | published | the consumer alone |
//! | `p + C` | freed: free for position `p + C` | producers |
//!
//! A producer reads `tail`, and claims position `pos` by CAS `tail: pos ->
//! pos + 1` when `seq == pos`; `seq < pos` (by wrapping difference) means
//! the cell still holds the message of the previous lap: the ring is full.
//! It writes the payload, then publishes with `seq = pos + 1` (Release).
//! The consumer reads at `head` when `seq == head + 1` (Acquire), hands the
//! payload out, then frees the cell with `seq = head + C` (Release) and
//! advances `head`. `C >= 2` keeps "published" (`p + 1`) distinct from
//! "free for the next lap" (`p + C`).
//!
//! # Field encodings
//!
//! * `head`, `tail`: `u64` positions (not indices); `tail - head` messages
//!   are claimed or published.
//! * stamp (first word of a cell): `seq - index`, wrapping, where `index`
//!   is the cell's index. Storing the difference makes all-zero memory the
//!   initial state (`seq == index`), so a fresh segment needs no writes to
//!   its cells and its pages stay untouched until used.
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
///   distinct from each other and from every cell.
pub(crate) unsafe trait RingMemory {
    /// Position of the next message to consume.
    fn head(&self) -> &AtomicU64;
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
        // `pos` while the cell's seq was `pos`: no other producer can claim
        // this cell before the consumer frees it at `pos + C`, which needs
        // our publication first, and the consumer does not read it before
        // seq becomes `pos + 1`; the previous lap's consumer finished its
        // reads before its Release store of seq = `pos`, which our Acquire
        // load observed. So the bytes are ours alone until we publish.
        let bytes = unsafe { std::slice::from_raw_parts_mut(payload, len) };
        fill(bytes);
    });
    // `len <= payload_capacity < ABANDONED` (contract), so it fits a u32.
    publish.len = len as u32;
    Ok(())
}

/// CAS loop of the producer: returns the claimed cell and position.
fn claim<M: RingMemory>(m: &M) -> Result<(usize, u64), Full> {
    let mut pos = m.tail().load(Ordering::Relaxed);
    loop {
        let index = index_of(m, pos);
        let seq = load_seq(m, index, Ordering::Acquire);
        // Wrapping difference: negative means an older lap.
        let diff = seq.wrapping_sub(pos) as i64;
        if diff == 0 {
            match m.tail().compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok((index, pos)),
                Err(now) => pos = now,
            }
        } else if diff < 0 {
            return Err(Full);
        } else {
            // Another producer claimed `pos`; its claim happens-before the
            // seq we acquired, so a fresh tail is past `pos`. If it is not,
            // the words were corrupted: report Full rather than spin.
            let now = m.tail().load(Ordering::Relaxed);
            if now == pos {
                return Err(Full);
            }
            pos = now;
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
/// same cell.
pub(crate) fn pop<M: RingMemory, R>(m: &M, f: impl FnOnce(&[u8]) -> R) -> Popped<R> {
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
    let _free = Free { m, index, head };
    if len > m.payload_capacity() {
        m.skipped().fetch_add(1, Ordering::Relaxed);
        return Popped::Skipped;
    }
    let r = m.with_payload(index, |payload| {
        // SAFETY: `payload` is valid for `payload_capacity >= len` bytes of
        // this cell only (RingMemory contract). seq == head + 1, loaded with
        // Acquire, means the producer published this cell with Release after
        // writing it; no producer can claim it again before we free it at
        // head + C (after `f` returns), and we hold the consumer lock, so
        // no other consumer reads it: nobody writes these bytes while the
        // slice lives.
        let bytes = unsafe { std::slice::from_raw_parts(payload, len) };
        f(bytes)
    });
    Popped::Item(r)
}

/// Frees the consumed cell and advances head when dropped.
struct Free<'m, M: RingMemory> {
    m: &'m M,
    index: usize,
    head: u64,
}

impl<M: RingMemory> Drop for Free<'_, M> {
    fn drop(&mut self) {
        let next_lap = self.head.wrapping_add(self.m.capacity());
        store_seq(self.m, self.index, next_lap, Ordering::Release);
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
    m.tail().store(start, Ordering::Release);
}
