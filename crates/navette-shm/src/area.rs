//! One rank's area: its published information, doorbell and receive ring.
//!
//! Hot path: [`RankArea::try_push`], [`RankArea::pop`] and
//! [`RankArea::ring_doorbell`] make no allocation and no system call while
//! the owner is awake ([`RankArea::ring_doorbell`] makes one `futex_wake`
//! when it sleeps), and take no lock beyond the consumer's uncontended
//! try-lock.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::thread::futex;

use crate::bell::{Bell, Ticket};
use crate::layout::{AreaControl, CELL_HEADER_BYTES, Geometry};
use crate::offer::{Offer, OfferWords, Settled};
use crate::ring::{self, Full, Popped, RingMemory};

/// One rank's area in a [`crate::Segment`]: any rank may push into its ring
/// and ring its doorbell; only the owning rank consumes and sleeps.
#[derive(Clone, Copy)]
pub struct RankArea<'a> {
    control: &'a AreaControl,
    /// This process's cache of the ring's head (see `ring`).
    head_cache: &'a AtomicU64,
    /// Bytes of this process's last push to the ring.
    last_push: &'a AtomicU64,
    /// First cell (64-byte aligned), followed by `cells * cell_size` bytes.
    cells: NonNull<u8>,
    cell_size: usize,
    cells_count: u32,
    rank: u32,
    _segment: PhantomData<&'a [u8]>,
}

// SAFETY: `cells` points into the segment's mapping, which outlives 'a;
// cell words are reached only as atomics and payload bytes only through the
// ring protocol, which hands each cell to one thread at a time.
unsafe impl Send for RankArea<'_> {}
// SAFETY: as for Send: every access through `&RankArea` is atomic or
// exclusive by protocol.
unsafe impl Sync for RankArea<'_> {}

impl fmt::Debug for RankArea<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RankArea")
            .field("rank", &self.rank)
            .field("pid", &self.pid())
            .field("ring_cells", &self.cells_count)
            .field("cell_size", &self.cell_size)
            .finish_non_exhaustive()
    }
}

impl<'a> RankArea<'a> {
    /// Builds the view; `cells` must be followed by `ring_cells * cell_size`
    /// bytes of the mapping (the caller, `Segment::area`, checks it).
    pub(crate) fn new(
        control: &'a AreaControl,
        producer: &'a crate::segment::ProducerCache,
        cells: NonNull<u8>,
        rank: u32,
        g: &Geometry,
    ) -> Self {
        Self {
            control,
            head_cache: &producer.head,
            last_push: &producer.last_push,
            cells,
            cell_size: g.cell_size,
            cells_count: g.ring_cells,
            rank,
            _segment: PhantomData,
        }
    }

    /// Pointer to byte `offset` of cell `index`.
    #[inline]
    fn cell_ptr(&self, index: usize, offset: usize) -> *mut u8 {
        assert!(index < self.cells_count as usize && offset < self.cell_size);
        // SAFETY: index < cells and offset < cell_size (asserted), so the
        // result lies inside this area's cells (see `new`).
        unsafe { self.cells.as_ptr().add(index * self.cell_size + offset) }
    }

    #[inline]
    fn bell(&self) -> Bell<'a> {
        Bell {
            doorbell: &self.control.doorbell,
            sleepers: &self.control.sleepers,
        }
    }

    /// This area's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Publishes the owner's process id and probe (an address in the
    /// owner's memory and the `u64` stored there), for peers to test
    /// single-copy reads with [`crate::can_pull_from`]. The pid is stored
    /// last, so a peer that reads a non-zero [`pid`](Self::pid) also reads
    /// the probe.
    pub fn publish(&self, pid: u32, probe_addr: u64, probe_value: u64) {
        let c = self.control;
        c.probe_addr.store(probe_addr, Ordering::Relaxed);
        c.probe_value.store(probe_value, Ordering::Relaxed);
        c.pid.store(pid, Ordering::Release);
    }

    /// The owner's process id; 0 until [`publish`](Self::publish)ed.
    pub fn pid(&self) -> u32 {
        self.control.pid.load(Ordering::Acquire)
    }

    /// The owner's probe: (address, value).
    pub fn probe(&self) -> (u64, u64) {
        let c = self.control;
        let _ = c.pid.load(Ordering::Acquire);
        (
            c.probe_addr.load(Ordering::Relaxed),
            c.probe_value.load(Ordering::Relaxed),
        )
    }

    /// Records whether the owner can pull from its peers.
    pub fn set_can_pull(&self, yes: bool) {
        self.control
            .can_pull
            .store(u32::from(yes), Ordering::Release);
    }

    /// Whether the owner said it can pull from its peers (any non-zero
    /// word counts as yes).
    pub fn can_pull(&self) -> bool {
        self.control.can_pull.load(Ordering::Acquire) != 0
    }

    /// Owner: memory it gave peers the address of, to read, is being let
    /// go. Call before the memory is reused: the bump is ordered before
    /// every later access of this thread (a read-modify-write with
    /// acquire and release), so a peer that reads the memory and then
    /// finds [`release_epoch`](Self::release_epoch) unchanged read it
    /// before it was let go.
    pub fn note_release(&self) {
        self.control.released.fetch_add(1, Ordering::AcqRel);
    }

    /// The number of [`note_release`](Self::note_release)s so far: a
    /// peer takes it with an address, and reads the memory there only
    /// while it has not moved (checking again after the read).
    pub fn release_epoch(&self) -> u64 {
        self.control.released.load(Ordering::Acquire)
    }

    fn offer_words(&self) -> OfferWords<'a> {
        let c = self.control;
        OfferWords {
            state: &c.offer_state,
            source: &c.offer_source,
            dest: &c.offer_dest,
            len: &c.offer_len,
        }
    }

    /// Owner: offers `offer.taker` to write a part of the data this rank
    /// pulls from it (see [`crate::Offer`]). Ring the taker's doorbell so
    /// that a sleeping taker sees it, then settle it with
    /// [`settle_offer`](Self::settle_offer) before offering again.
    pub fn offer(&self, offer: &Offer) {
        self.offer_words().post(offer);
    }

    /// Whether this area's owner offers `me` a part to write (a hint, with
    /// no write to the slot's line: [`take_offer`](Self::take_offer)
    /// decides).
    pub fn is_offered_to(&self, me: u32) -> bool {
        self.offer_words().is_offered_to(me)
    }

    /// Rank `me`: takes the offer this area's owner made to it, if one
    /// waits. The caller must then write the part (checking first that it
    /// describes data it is sending) and call
    /// [`finish_offer`](Self::finish_offer) at once: the owner waits.
    pub fn take_offer(&self, me: u32) -> Option<Offer> {
        self.offer_words().take(me)
    }

    /// Rank `me`: the part it took is written (`ok`) or not.
    pub fn finish_offer(&self, me: u32, ok: bool) {
        self.offer_words().finish(me, ok);
    }

    /// Owner: ends the offer made to `taker`, revoking it if it was not
    /// taken, else waiting until the taker finishes, calling
    /// `keep_waiting` between looks (`false` gives up: the taker died).
    /// On return no one writes into the owner's memory for this offer.
    pub fn settle_offer(&self, taker: u32, keep_waiting: impl FnMut() -> bool) -> Settled {
        self.offer_words().settle(taker, keep_waiting)
    }

    /// Number of cells in the ring.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.cells_count
    }

    /// Largest payload of one cell.
    #[inline]
    pub fn cell_payload(&self) -> usize {
        self.cell_size - CELL_HEADER_BYTES
    }

    /// Producer side (any rank, any thread): claims a cell, lets `fill`
    /// write the first `len` bytes of its payload, and publishes it.
    /// `Err(Full)` when no cell is free: retry later.
    ///
    /// `fill` sees the cell's previous contents (not zeroes). Call
    /// [`ring_doorbell`](Self::ring_doorbell) after one or more pushes.
    ///
    /// # Panics
    ///
    /// If `len > self.cell_payload()` (a caller bug). If `fill` panics, the
    /// cell is published as abandoned (the consumer skips it) and the
    /// panic goes on.
    #[inline]
    pub fn try_push(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), Full> {
        ring::try_push(self, len, fill)?;
        self.last_push.store(len as u64, Ordering::Relaxed);
        self.prefetch_next_cell(len);
        Ok(())
    }

    /// [`try_push`](Self::try_push), then, if `demote`, moves the cell's
    /// lines (its header and up to 2 KiB in all, `DEMOTE_MOST`) out of
    /// this core's own caches into the shared one (`CLDEMOTE`, a hint,
    /// where the processor has it): the consumer, polling the first line
    /// and reading the rest once it is published, then finds them there
    /// rather than in this core's cache, which answers more slowly.
    /// Demoting takes the producer some time of its own: it is for a
    /// producer about to wait (a blocking send, an RPC, a flush before a
    /// wait), not one sending more at once. A cell of one line is left
    /// alone: the consumer takes it as soon from this core. Measured in
    /// docs/profiling.md, stop 38.
    #[inline]
    pub fn try_push_handing_over(
        &self,
        len: usize,
        demote: bool,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Full> {
        let mut payload = std::ptr::null::<u8>();
        self.try_push(len, |out| {
            payload = out.as_ptr();
            fill(out);
        })?;
        let bytes = CELL_HEADER_BYTES + len;
        if demote && bytes > 64 {
            // The cell's start: its payload follows its header (the stamp
            // and the length), and cells are aligned to lines.
            demote_lines(
                payload.wrapping_sub(CELL_HEADER_BYTES),
                bytes.min(DEMOTE_MOST),
            );
        }
        Ok(())
    }

    /// Producer side, a hint given just before a push: asks for the lines
    /// of the cell at the tail for writing, the first (the one the consumer
    /// polls while it waits) and then as far as this process's last push
    /// to the ring reached, up to 2 KiB (`TAIL_PREFETCH_MOST`).
    /// [`Self::try_push`] leaves the first line alone after a push (see
    /// `prefetch_next_cell`); asked for here instead, a few hundred cycles
    /// before the push writes it, the line is on its way back by then. The
    /// others were asked for after the last push already, but by the next
    /// one they are no longer all this core's: the push's stores then wait
    /// for each to come back, and the cell's stamp, stored last, is seen
    /// that much later. Series of 8 × 64 B over shm (a cell of 12 lines),
    /// whose flush comes right after: the doorbell's fence after the push,
    /// which waits for the stores, took 345 ns with the first line alone
    /// asked for here, 260 with the others too; series of 8 and 16 × 64 B
    /// 6–12 % faster. See docs/profiling.md, stops 38 (then
    /// `prefetch_tail_line`) and 43. Nothing while the ring is full (the
    /// consumer may still read that cell).
    #[inline]
    pub fn prefetch_tail_cell(&self) {
        let Some(cell) = self.free_tail_cell() else {
            return;
        };
        // At most the cell: the last push fitted in one.
        let last = self.last_push.load(Ordering::Relaxed) as usize;
        // The first line always: the header alone reaches into it.
        let end = (CELL_HEADER_BYTES + last)
            .min(self.cell_size)
            .min(TAIL_PREFETCH_MOST);
        self.prefetch_lines_for_write(cell, 0, end);
    }

    /// The cell at the tail, the next one to be claimed, unless the
    /// consumer may still be reading it (by the cached head: a stale one
    /// only says so more often).
    #[inline]
    pub(crate) fn free_tail_cell(&self) -> Option<usize> {
        let tail = self.control.tail.load(Ordering::Relaxed);
        let used = tail.wrapping_sub(self.head_cache.load(Ordering::Relaxed));
        // Below `cells_count`, a u32.
        (used < u64::from(self.cells_count))
            .then(|| (tail & u64::from(self.cells_count - 1)) as usize)
    }

    /// Asks for the lines of `cell` from byte `from` (a line's start) up to
    /// byte `end` (at most the cell's size), for writing. The cell's start
    /// is found, and the processor asked whether it has the instruction,
    /// once for all the lines: per line, they took more instructions than
    /// the prefetch itself (docs/profiling.md, stop 45).
    #[inline]
    fn prefetch_lines_for_write(&self, cell: usize, from: usize, end: usize) {
        if !has_prefetchw() {
            return;
        }
        debug_assert!(end <= self.cell_size);
        let start = self.cell_ptr(cell, 0);
        let mut at = from;
        while at < end {
            let line = start.wrapping_add(at);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint, not an access: it reads and
            // writes nothing, and never faults, whatever the address (the
            // line lies inside the cell anyway: `end` is at most its
            // size); the processor has the instruction (checked above).
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) line,
                    options(nostack, preserves_flags, readonly)
                );
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = line;
            at += 64;
        }
    }

    /// Asks for the lines of the next cell to be claimed that the message
    /// just pushed (`len` bytes) took, for writing, up to
    /// [`PREFETCH_MOST`] bytes: the consumer read them a lap ago, and a
    /// message written there would otherwise take each line back from the
    /// consumer's cache (a transfer between cores) before its stamp could
    /// be published, with the copy stalled on them. Messages to a peer
    /// often come in one size (a ping-pong's, an RPC's calls and replies),
    /// and the next one is usually a round trip away: the lines are this
    /// core's by then. The first line, which the consumer polls, is left
    /// alone, and so is a cell the consumer may still be reading (by the
    /// cached head: a stale one only skips a prefetch), whose lines would
    /// be taken from under it. With several producers, the cell at the
    /// tail may be one another producer has just claimed: its writer then
    /// takes the lines back (a prefetch is only a hint). Skipping the
    /// prefetch then, by comparing the tail with the position just pushed,
    /// made an RPC of 1 KiB slower by 3–4 % (2 of 16 pairs faster, twice),
    /// for a case no benchmark here has.
    ///
    /// Measured (interleaved pairs, against one line): RPC of 1 KiB over
    /// shm faster in 12 of 12 pairs (median ratio 0.92), of 16 KiB in 7
    /// of 8 (0.85); a ping-pong of 4 KiB 8 of 8 (0.84); a series of 8 × 1
    /// KiB 7 of 8 (0.89).
    #[inline]
    fn prefetch_next_cell(&self, len: usize) {
        if self.cell_size <= 64 {
            return;
        }
        let Some(cell) = self.free_tail_cell() else {
            return;
        };
        // The second line at least, as for a message of one line: the
        // next one may be longer (a cell of more than one line has two).
        let end = (CELL_HEADER_BYTES + len)
            .min(self.cell_size)
            .clamp(128, PREFETCH_MOST);
        self.prefetch_lines_for_write(cell, 64, end);
    }

    /// Consumer side: runs `f` on the next published payload, then frees the
    /// cell (also if `f` panics). `None` if the ring is empty.
    ///
    /// Only the owning rank consumes, and one thread at a time (the driver
    /// serialises). This is enforced, not assumed: a try-lock in the area
    /// makes a concurrent or re-entrant `pop` return `None` at once.
    ///
    /// A cell whose length word exceeds [`cell_payload`](Self::cell_payload)
    /// (written by a buggy peer, or abandoned by a panicking producer) is
    /// freed without being handed out, counted in
    /// [`skipped_cells`](Self::skipped_cells), and `pop` goes on to the next
    /// cell. Lengths are never trusted: `f` never sees bytes outside the
    /// cell.
    #[inline]
    pub fn pop<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        // `f` always takes the payload: never left at head.
        self.pop_if(|bytes| Some(f(bytes))).flatten()
    }

    /// [`pop`](Self::pop), except that the payload stays at the head of
    /// the ring, unconsumed, when `f` returns `None`: `Some(Some(r))` when
    /// `f` took it, `Some(None)` when it left it, `None` if the ring is
    /// empty. (A panic in `f` frees the cell, as in `pop`.)
    #[inline]
    pub fn pop_if<R>(&self, f: impl FnOnce(&[u8]) -> Option<R>) -> Option<Option<R>> {
        let mut f = Some(f);
        loop {
            let popped = ring::pop_if(self, |bytes| {
                let f = f.take().expect("pop_if hands out at most one payload");
                self.prefetch_after_head();
                prefetch_payload(bytes);
                f(bytes)
            });
            match popped {
                Popped::Empty => return None,
                Popped::Item(r) => return Some(r),
                Popped::Skipped => continue,
            }
        }
    }

    /// Asks for the first line of the cell after the one at head, for
    /// reading, as that one is handed out: a producer sending a series of
    /// messages has written it already, and its transfer from the
    /// producer's core then overlaps the handling of this one instead of
    /// following it (multiseg over shm, interleaved pairs: 8 × 4 B faster
    /// in 32 of 50, 16 × 4 B in 20 of 30, 8 × 64 B in 13 of 20, median
    /// ratios 0.95–0.97; RPC unchanged). A line not written yet costs
    /// nothing more: it is the one the consumer polls next.
    #[inline]
    fn prefetch_after_head(&self) {
        let head = self.control.head.load(Ordering::Relaxed);
        let next = head.wrapping_add(1) & u64::from(self.cells_count - 1);
        // Below `cells_count`, a u32.
        prefetch_for_read(self.cell_ptr(next as usize, 0));
    }

    /// Whether no published message waits at the head of the ring.
    #[inline]
    pub fn is_empty(&self) -> bool {
        ring::is_empty(self)
    }

    /// Cells freed without being handed out since creation (invalid lengths
    /// or abandoned pushes). Non-zero means a peer misbehaved.
    pub fn skipped_cells(&self) -> u64 {
        self.control.skipped.load(Ordering::Relaxed)
    }

    /// After a push: wakes the owner if one of its threads sleeps; a
    /// `futex_wake` only then, otherwise no system call.
    #[inline]
    pub fn ring_doorbell(&self) {
        self.bell().ring_if_sleeping(|| self.futex_wake());
    }

    /// For the owner's own threads: wakes any sleeper of this area, and
    /// makes a [`sleep_until`](Self::sleep_until) with an older
    /// [`Ticket`] return at once (e.g. a thread blocked while another thread
    /// submitted work). No system call if nobody sleeps.
    pub fn wake(&self) {
        self.bell().ring(|| self.futex_wake());
    }

    /// Owner: the doorbell's current value. Take it before checking other
    /// conditions (local queues) and pass it to
    /// [`sleep_until`](Self::sleep_until), so that a [`wake`](Self::wake)
    /// between the check and the sleep is not lost.
    pub fn ticket(&self) -> Ticket {
        self.bell().ticket()
    }

    /// Owner: announces that it sleeps, re-checks the ring, then waits on
    /// the doorbell (a shared futex) for at most `timeout`; returns early on
    /// a doorbell. Spurious returns happen (signals, races); callers loop.
    pub fn sleep(&self, timeout: Duration) -> io::Result<()> {
        self.sleep_until(self.ticket(), timeout)
    }

    /// Owner: as [`sleep`](Self::sleep), but returns at once if the
    /// doorbell rang since `ticket` was taken.
    pub fn sleep_until(&self, ticket: Ticket, timeout: Duration) -> io::Result<()> {
        self.sleep_unless(ticket, timeout, || false)
    }

    /// Owner: as [`sleep_until`](Self::sleep_until), and does not wait if
    /// `has_work` (checked after the sleeper is announced) says there is
    /// local work. Whoever makes `has_work` true and then calls
    /// [`ring_doorbell`](Self::ring_doorbell) cannot be missed (the same
    /// handshake as a pushed cell), so such wakers need no
    /// [`wake`](Self::wake) and its doorbell write while nobody sleeps.
    pub fn sleep_unless(
        &self,
        ticket: Ticket,
        timeout: Duration,
        has_work: impl FnOnce() -> bool,
    ) -> io::Result<()> {
        let timeout = futex::Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let wait = |expected: u32| {
            // Not PRIVATE: the word is shared with other processes.
            match futex::wait(
                &self.control.doorbell,
                futex::Flags::empty(),
                expected,
                Some(&timeout),
            ) {
                Ok(()) | Err(Errno::AGAIN | Errno::TIMEDOUT | Errno::INTR) => Ok(()),
                Err(e) => Err(io::Error::from(e)),
            }
        };
        self.bell()
            .sleep(ticket, || !self.is_empty() || has_work(), wait)
            .map(|_| ())
    }

    fn futex_wake(&self) {
        // Wake every sleeper: several of the owner's threads may sleep. An
        // error (EFAULT, EINVAL) would mean a broken mapping; waking is best
        // effort and sleepers have timeouts.
        let _ = futex::wake(
            &self.control.doorbell,
            futex::Flags::empty(),
            i32::MAX as u32,
        );
    }
}

// SAFETY: `capacity` (a power of two >= 2) and `payload_capacity` (cell
// size <= 2^30, less 12) come from the validated local Geometry. Cell
// `index < capacity` spans `cell_size` bytes at `cells + index * cell_size`
// inside this area: its stamp at offset 0 and length at offset 8 (8- and
// 4-aligned, as the cells are 64-aligned) and its payload at offset 12 for
// `cell_size - 12` bytes (read and written bytewise: no alignment), so
// cells and their parts are disjoint, and
// disjoint from the control block that holds head, tail, consumer and
// skipped (distinct fields).
unsafe impl RingMemory for RankArea<'_> {
    #[inline]
    fn head(&self) -> &AtomicU64 {
        &self.control.head
    }

    #[inline]
    fn head_cache(&self) -> &AtomicU64 {
        self.head_cache
    }

    #[inline]
    fn tail(&self) -> &AtomicU64 {
        &self.control.tail
    }

    #[inline]
    fn consumer(&self) -> &AtomicU32 {
        &self.control.consumer
    }

    #[inline]
    fn skipped(&self) -> &AtomicU64 {
        &self.control.skipped
    }

    #[inline]
    fn capacity(&self) -> u64 {
        u64::from(self.cells_count)
    }

    #[inline]
    fn payload_capacity(&self) -> usize {
        self.cell_payload()
    }

    #[inline]
    fn stamp(&self, index: usize) -> &AtomicU64 {
        let ptr = self.cell_ptr(index, 0).cast::<u64>();
        // SAFETY: `ptr` is inside the mapping (cell_ptr), 8-aligned (cells
        // are 64-aligned), valid for the borrow of `self` (the mapping
        // outlives 'a), and only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(ptr) }
    }

    #[inline]
    fn len(&self, index: usize) -> &AtomicU32 {
        let ptr = self.cell_ptr(index, 8).cast::<u32>();
        // SAFETY: as in `stamp`; offset 8 of a 64-aligned cell is 4-aligned.
        unsafe { AtomicU32::from_ptr(ptr) }
    }

    #[inline]
    fn with_payload_mut<R>(&self, index: usize, f: impl FnOnce(*mut u8) -> R) -> R {
        f(self.cell_ptr(index, CELL_HEADER_BYTES))
    }

    #[inline]
    fn with_payload<R>(&self, index: usize, f: impl FnOnce(*const u8) -> R) -> R {
        f(self.cell_ptr(index, CELL_HEADER_BYTES))
    }
}

/// Most bytes of the next cell asked for writing after a push (see
/// [`RankArea::prefetch_next_cell`]): what the default cells hold (33 KiB),
/// within a first-level data cache (48 KiB per core on the test machine);
/// more would evict lines asked for before the next message is written.
const PREFETCH_MOST: usize = 32 << 10;

/// Most bytes of the tail's cell asked for writing before a push
/// ([`RankArea::prefetch_tail_cell`]): the largest open packet (2 KiB, a
/// series of small messages). Larger messages are copied in bulk, whose
/// own stores stream.
const TAIL_PREFETCH_MOST: usize = 2 << 10;

/// Most bytes of a cell demoted after a push ([`RankArea::try_push_handing_over`]):
/// each line costs the producer some time, and past a few kilobytes the
/// consumer's own prefetches (and the hardware's) keep up anyway. A ping-pong
/// of 16 KiB demoting all its lines ran 2 % slower, one of 32 KiB 5 %.
const DEMOTE_MOST: usize = 2 << 10;

/// Moves the lines of `len` bytes from `start` (a line's start) out of this
/// core's own caches into the shared one: a hint, for memory another core
/// reads next. Out of line: the small messages' path, which skips it,
/// stays short.
#[inline(never)]
fn demote_lines(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        static CLDEMOTE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            // Leaf 7, sub-leaf 0, ECX bit 25: CLDEMOTE (Intel's manual),
            // present since the basic leaves reach 7.
            std::arch::x86_64::__cpuid(0).eax >= 7
                && std::arch::x86_64::__cpuid_count(7, 0).ecx & (1 << 25) != 0
        });
        if !*CLDEMOTE {
            return;
        }
        let mut at = 0;
        while at < len {
            let line = start.wrapping_add(at);
            // SAFETY: CLDEMOTE is a hint, not an access: it reads and
            // writes nothing a program can see, and never faults, whatever
            // the address; the processor has the instruction (checked
            // above). It touches no register but its address operand.
            unsafe {
                std::arch::asm!("cldemote [{0}]", in(reg) line, options(nostack, preserves_flags));
            }
            at += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// Most bytes of a payload asked for reading as it is handed out: the
/// hardware's own prefetcher follows the copy past them (8 KiB read no
/// faster, at 16 KiB).
const PAYLOAD_PREFETCH_MOST: usize = 2 << 10;

/// Asks for the lines of a payload being handed out, past its first and
/// up to [`PAYLOAD_PREFETCH_MOST`], for reading: they lie in the
/// producer's cache, and their transfers between cores then overlap the
/// landing's decoding and matching, before its copy reads them (the first
/// line came with the stamp). Interleaved pairs, against asking for none:
/// RPC of 1 KiB over shm faster in 11 of 12 and 10 of 12 (median ratios
/// 0.967, 0.953), of 64 B (two lines) in 13 of 16, 9 of 12 and 12 of
/// 16 (0.951, 0.910, 0.968), a ping-pong of 4 KiB 8 of 8 (0.967), RPC
/// of 16 KiB 5 of 8 (0.985); series of 8 × 64 B 10, 4, 14 and 15 of 20
/// (1.011, 1.057, 0.986, 0.970), of 16 × 64 B 12 of 16 (0.936).
#[inline]
fn prefetch_payload(bytes: &[u8]) {
    // A payload within its cell's first line: nothing more to ask for.
    if bytes.len() <= 64 - CELL_HEADER_BYTES {
        return;
    }
    let start = bytes.as_ptr() as usize;
    // The next line's offset in `bytes`.
    let mut at = (start | 63) + 1 - start;
    let end = bytes.len().min(PAYLOAD_PREFETCH_MOST);
    while at < end {
        prefetch_for_read(bytes.as_ptr().wrapping_add(at));
        at += 64;
    }
}

/// Asks for the cache line at `p` for reading, ahead of the read.
#[inline]
fn prefetch_for_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint, not an access: it reads nothing a
    // program can see and never faults, whatever the address; SSE, which
    // has it, is part of x86-64's baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Whether the processor has `PREFETCHW`, which asks for a cache line in
/// a state that can be written, ahead of the write
/// ([`RankArea::prefetch_lines_for_write`] issues it). By hand:
/// `_mm_prefetch::<_MM_HINT_ET0>` emits a read prefetch unless the whole
/// build enables the `prfchw` feature, which most x86-64 processors have
/// but the baseline target does not, and `is_x86_feature_detected!` does
/// not know it: CPUID tells, once.
#[inline]
fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static PREFETCHW: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            // Leaf 0x8000_0001, ECX bit 8: PREFETCHW (AMD's and Intel's
            // manuals), present since the leaf's maximum says so.
            let max = std::arch::x86_64::__cpuid(0x8000_0000).eax;
            max >= 0x8000_0001 && std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0
        });
        *PREFETCHW
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}
