//! Navette's shared-memory substrate: the job segment that the shm driver
//! maps in every local rank, the per-rank receive rings inside it, their
//! futex doorbells, and single-copy pulls between processes.
//!
//! This crate knows no protocol: it moves opaque payloads of at most
//! [`Segment::cell_payload`] bytes between local processes and wakes
//! sleeping receivers. The driver (`navette::shm`) builds on it.
//!
//! # The segment
//!
//! One POSIX shared-memory object per job, named by [`Segment::name`]
//! (`/navette-<job id as 16 hex digits>`). Rank 0 [creates](Segment::create)
//! it with `O_CREAT | O_EXCL` and mode 0600, sizes it and writes its header;
//! every rank [attaches](Segment::attach) (mapping it `MAP_SHARED`), which
//! checks owner, mode, size, magic, layout version, job id, rank count and
//! geometry; once every rank has attached (the driver fences through its
//! bootstrap), rank 0 [unlinks](Segment::unlink) the name, so nothing is
//! left behind even if the job crashes later. A launcher cleans up after a
//! crash before that point with [`unlink_job`].
//!
//! ```text
//! offset 0     header (128 B): magic "NAVSHM\0\x01" (u64, written last),
//!              version u32, ranks u32, job id u64, ring cells u32,
//!              cell size u32, area size u64, total size u64
//! 128          rank area 0
//! 128 + A      rank area 1 ...          A = 512 + cells * cell size
//!
//! rank area:
//! +0    line 0      pid u32, can_pull u32, probe address u64, probe value u64
//! +64   line 1      doorbell u32 (futex word), sleepers u32
//! +128  lines 2-3   head u64, skipped u64, consumer lock u32   (owner only)
//! +256  lines 4-5   tail u64                                   (producers)
//! +384  lines 6-7   offer: state u64, source u64, dest u64, len u64
//!                   (the owner and the peer it names, see `offer`)
//! +512  cells: `ring cells` cells of `cell size` bytes (multiple of 64)
//!
//! cell:
//! +0    stamp u64 (seq - index, see `ring`)
//! +8    length u32
//! +12   payload (cell size - 12 bytes); a payload of up to 52 bytes
//!       shares the cache line of its header
//! ```
//!
//! Memory grows as O(ranks): one ring per rank, which every peer pushes
//! into, rather than a queue per pair. With this crate's default geometry
//! (64 cells of 16 KiB) that is 1 MiB of address space per rank (Navette's
//! shm driver takes cells of 33 KiB: 2.1 MiB); pages are only touched when
//! used (all-zero memory is a valid empty ring), which
//! [`Segment::resident_bytes`] shows. Creation checks that the filesystem
//! behind shared memory has room for the whole segment.
//!
//! # The ring
//!
//! Each rank's receive ring is a bounded multi-producer single-consumer
//! queue after Dmitry Vyukov's (crossbeam's `ArrayQueue`): producers claim
//! a position by CAS on `tail` when the consumer's `head` (cached in each
//! producer process, refreshed when it says full) leaves room, write, and
//! publish with the cell's `seq = pos + 1` (Release); the owner reads at
//! `head` when `seq == head + 1` (Acquire) and frees the cell by advancing
//! `head` (Release), never writing a cell, so that a small message moves
//! its cell's cache line once. [`RankArea::try_push`] returns
//! [`Full`] when no cell is free, an ordinary "retry later". The payload
//! slices handed out cover only a cell the protocol gives to the caller
//! alone (claimed and not yet published for the producer; published and
//! not yet freed for the consumer); lengths read from the segment are
//! checked against the cell size before use. The encodings of every word
//! are documented in the `ring` module's source; the algorithm is
//! model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p
//! navette-shm --release --lib loom`).
//!
//! # Doorbells
//!
//! A receiver with nothing to do [sleeps](RankArea::sleep) on its area's
//! doorbell, a shared futex word; a producer calls
//! [`RankArea::ring_doorbell`] after pushing, which makes a system call
//! only if the receiver announced that it sleeps (Dekker's handshake with
//! a `SeqCst` fence on each side, model-checked with loom too).
//!
//! # Single copy
//!
//! Each rank [publishes](RankArea::publish) its pid and a probe (an address
//! in its memory and the value stored there); peers test once with
//! [`can_pull_from`] whether the kernel lets them [`pull`] (read another
//! process's memory with `process_vm_readv`), and record the answer with
//! [`RankArea::set_can_pull`].
//!
//! A puller may [offer](RankArea::offer) its sender part of a long pull to
//! [`push`] itself (`process_vm_writev`) while it pulls the rest: two
//! cores copy at once. The sender [takes](RankArea::take_offer) the offer,
//! writes, and [finishes](RankArea::finish_offer) it; the puller
//! [settles](RankArea::settle_offer) it, revoking it if it was not taken,
//! so that no one writes into its memory once it has settled (see the
//! `offer` module's source for the states).
//!
//! # Memory for large messages
//!
//! A [`HugeBuffer`] is a zeroed byte buffer backed by transparent huge
//! pages: the kernel's single copy pins its pages together rather than
//! one by one, so large messages to and from it cross faster.
//!
//! # Trust
//!
//! Peers are processes of the same job and user, but a buggy one must not
//! make this process read or write out of bounds: sizes and offsets come
//! from the header once, validated, and are kept locally; indices are
//! masked; lengths are checked. A peer that breaks the protocol (writes a
//! cell it does not own, resizes the object) can still corrupt messages or
//! crash the job (`SIGBUS` on a shrunk object); the segment is private to
//! the user (mode 0600) for that reason.
//!
//! # Example
//!
//! ```
//! use navette_shm::{Segment, SegmentConfig};
//!
//! let job_id = 0x0123_4567_89ab_cdef ^ u64::from(std::process::id());
//! let config = SegmentConfig { ring_cells: 4, cell_size: 128 };
//! let seg = Segment::create(job_id, 2, &config)?;
//! let peer = Segment::attach(job_id, 2)?;     // in rank 1's process
//! seg.unlink()?;                              // once every rank attached
//!
//! peer.area(0).try_push(5, |buf| buf.copy_from_slice(b"hello"))?;
//! peer.area(0).ring_doorbell();
//! let got = seg.area(0).pop(|bytes| bytes.to_vec());
//! assert_eq!(got.as_deref(), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

// Under loom only the model tests use these (the segment is compiled out).
#[cfg_attr(all(loom, not(test)), allow(dead_code))]
mod bell;
#[cfg_attr(all(loom, not(test)), allow(dead_code))]
mod ring;
mod sync;

#[cfg(not(loom))]
mod area;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod huge;
#[cfg(not(loom))]
mod layout;
#[cfg_attr(all(loom, not(test)), allow(dead_code))]
mod offer;
#[cfg(not(loom))]
mod pull;
#[cfg(not(loom))]
mod segment;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(not(loom))]
pub use area::RankArea;
pub use bell::Ticket;
#[cfg(not(loom))]
pub use error::ShmError;
#[cfg(not(loom))]
pub use huge::{HUGE_PAGE, HugeBuffer, HugeBufferError};
#[cfg(not(loom))]
pub use layout::FIRST_LINE_PAYLOAD;
pub use offer::{Offer, Settled};
#[cfg(not(loom))]
pub use pull::{can_pull_from, is_alive, pull, push};
pub use ring::Full;
#[cfg(not(loom))]
pub use segment::{Segment, SegmentConfig, unlink_job};
