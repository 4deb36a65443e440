//! The segment's byte layout: header, rank-area control block, cells, and
//! the geometry computed from them.
//!
//! Every word that lives in shared memory is a std atomic, also those that
//! are written once: another process may write them at any time (a buggy
//! peer), and atomics keep such a race defined. Values read from shared
//! memory are validated once, at attach, and then kept in local, trusted
//! [`Geometry`]; sizes and offsets are never re-read from the segment.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::SegmentConfig;

/// `b"NAVSHM\0\x01"` read as a little-endian u64.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"NAVSHM\0\x01");
/// Layout version; bumped on any change to this file's encodings or to the
/// ring protocol over them (2: producers check for room against `head`, the
/// consumer no longer writes cells; 3: an offer slot follows the tail; 4:
/// a cell's payload follows its length word, 12 bytes in; 5: a release
/// epoch in each area's control block; 6: the shm driver's pull cells carry
/// that epoch, and its pulled cells may decline a pull).
pub(crate) const VERSION: u32 = 6;
/// Bytes from the start of the segment to the first rank area.
pub(crate) const HEADER_BYTES: usize = 128;
/// Bytes of a cell header: stamp (u64), length (u32). No spare word: a
/// cell's first line then holds 52 bytes of payload, and a message that
/// fits them crosses between cores in one transfer, where a second line
/// costs a second.
pub(crate) const CELL_HEADER_BYTES: usize = 12;
/// Cell sizes are multiples of this (a cache line).
pub(crate) const CELL_ALIGN: usize = 64;
/// Bytes of a cell's payload in its first line, the one whose stamp the
/// consumer polls: a producer writing a payload of several lines may write
/// these last, just before the stamp, so that the line is taken from the
/// polling consumer once.
pub const FIRST_LINE_PAYLOAD: usize = CELL_ALIGN - CELL_HEADER_BYTES;
/// Largest rank count of one segment.
pub(crate) const MAX_RANKS: u32 = 1 << 16;
/// Largest cell count of one ring.
pub(crate) const MAX_CELLS: u32 = 1 << 16;
/// Largest cell size (payload lengths then fit a u32 well below
/// [`crate::ring::ABANDONED`]).
pub(crate) const MAX_CELL_SIZE: usize = 1 << 30;
/// Largest segment (16 TiB, well inside a 47-bit address space).
pub(crate) const MAX_TOTAL: usize = 1 << 44;

/// The segment header, at offset 0. Written by the creator before it
/// stores `magic` (Release); read and validated by `attach` after it loads
/// `magic` (Acquire).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Header {
    /// [`MAGIC`] once initialised, 0 before.
    pub(crate) magic: AtomicU64,
    /// [`VERSION`].
    pub(crate) version: AtomicU32,
    /// Rank count.
    pub(crate) ranks: AtomicU32,
    /// The job id the name was made from.
    pub(crate) job_id: AtomicU64,
    /// Cells per ring (power of two, 2..=[`MAX_CELLS`]).
    pub(crate) ring_cells: AtomicU32,
    /// Bytes per cell, header included (multiple of 64).
    pub(crate) cell_size: AtomicU32,
    /// Bytes per rank area (control block and cells).
    pub(crate) area_size: AtomicU64,
    /// Bytes of the whole segment.
    pub(crate) total_size: AtomicU64,
}

const _: () = assert!(size_of::<Header>() <= HEADER_BYTES);

/// One cache line, for padding.
type Line = [u8; 64];

/// The control block at the start of each rank area: five groups, each on
/// its own 64-byte line or 128-byte pair of lines (x86's adjacent-line
/// prefetcher pulls pairs: crossbeam's `CachePadded` uses 128 there), so
/// that producers (tail, doorbell), the consumer (head) and read-mostly
/// information never share a line.
#[repr(C, align(128))]
#[derive(Debug)]
pub(crate) struct AreaControl {
    // Line 0: published information, written by the owner at start-up.
    /// Owner's process id; 0 until published. Stored last (Release).
    pub(crate) pid: AtomicU32,
    /// 1 if the owner can pull (single-copy read) from its peers, else 0.
    pub(crate) can_pull: AtomicU32,
    /// Address of the probe word in the owner's own memory.
    pub(crate) probe_addr: AtomicU64,
    /// Value the probe word holds.
    pub(crate) probe_value: AtomicU64,
    /// Bumped by the owner whenever memory it offered peers for reading
    /// is let go (see `RankArea::note_release`).
    pub(crate) released: AtomicU64,
    _pad0: [u8; 32],
    // Line 1: doorbell, written by producers and by the owner's sleepers.
    /// Futex word, bumped by every ring (see [`crate::bell`]).
    pub(crate) doorbell: AtomicU32,
    /// Owner's threads inside `sleep`.
    pub(crate) sleepers: AtomicU32,
    _pad1: [u8; 56],
    // Lines 2-3: consumer side, written only by the owner.
    /// Ring head position.
    pub(crate) head: AtomicU64,
    /// Cells freed without being handed out.
    pub(crate) skipped: AtomicU64,
    /// Consumer try-lock.
    pub(crate) consumer: AtomicU32,
    _pad2: [u8; 108],
    // Lines 4-5: producer side.
    /// Ring tail position.
    pub(crate) tail: AtomicU64,
    _pad3: [u8; 120],
    // Lines 6-7: the owner's offer slot (see `offer`), written by the
    // owner and by the one peer it names.
    /// Taker rank and phase.
    pub(crate) offer_state: AtomicU64,
    /// Source address, in the taker's memory.
    pub(crate) offer_source: AtomicU64,
    /// Destination address, in the owner's memory.
    pub(crate) offer_dest: AtomicU64,
    /// Bytes offered.
    pub(crate) offer_len: AtomicU64,
    _pad4: [u8; 96],
}

/// Bytes of [`AreaControl`]; the cells follow it.
pub(crate) const CONTROL_BYTES: usize = size_of::<AreaControl>();

const _: () = {
    assert!(offset_of!(AreaControl, doorbell) == 64);
    assert!(offset_of!(AreaControl, head) == 128);
    assert!(offset_of!(AreaControl, tail) == 256);
    assert!(offset_of!(AreaControl, offer_state) == 384);
    assert!(CONTROL_BYTES == 512);
    assert!(HEADER_BYTES.is_multiple_of(128));
    assert!(CELL_HEADER_BYTES + 52 == size_of::<Line>());
};

/// The validated shape of a segment, kept in local memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) ranks: u32,
    pub(crate) ring_cells: u32,
    pub(crate) cell_size: usize,
    pub(crate) area_size: usize,
    pub(crate) total_size: usize,
}

impl Geometry {
    /// Checks a configuration and computes the sizes; the error names what
    /// is wrong.
    pub(crate) fn new(ranks: u32, config: &SegmentConfig) -> Result<Self, &'static str> {
        let cells = config.ring_cells;
        let cell_size = config.cell_size;
        if ranks == 0 || ranks > MAX_RANKS {
            return Err("rank count must be in 1..=65536");
        }
        if !cells.is_power_of_two() || !(2..=MAX_CELLS).contains(&cells) {
            return Err("ring_cells must be a power of two in 2..=65536");
        }
        if cell_size < CELL_ALIGN
            || !cell_size.is_multiple_of(CELL_ALIGN)
            || cell_size > MAX_CELL_SIZE
        {
            return Err("cell_size must be a multiple of 64 in 64..=2^30");
        }
        let too_big = "segment size overflows";
        let area_size = (cells as usize)
            .checked_mul(cell_size)
            .and_then(|c| c.checked_add(CONTROL_BYTES))
            .ok_or(too_big)?;
        let total_size = area_size
            .checked_mul(ranks as usize)
            .and_then(|a| a.checked_add(HEADER_BYTES))
            .filter(|&t| t <= MAX_TOTAL)
            .ok_or(too_big)?;
        Ok(Self {
            ranks,
            ring_cells: cells,
            cell_size,
            area_size,
            total_size,
        })
    }

    /// Largest payload of one cell.
    pub(crate) fn cell_payload(&self) -> usize {
        self.cell_size - CELL_HEADER_BYTES
    }

    /// Offset of rank `rank`'s area from the segment start.
    pub(crate) fn area_offset(&self, rank: u32) -> usize {
        HEADER_BYTES + rank as usize * self.area_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometry() {
        let g = Geometry::new(2, &SegmentConfig::default()).unwrap();
        assert_eq!(g.cell_payload(), 16 * 1024 - 12);
        assert_eq!(g.area_size, 512 + 64 * 16 * 1024);
        assert_eq!(g.total_size, 128 + 2 * g.area_size);
        assert_eq!(g.area_offset(1) % 128, 0);
    }

    #[test]
    fn bad_configurations_are_rejected() {
        let cfg = |ring_cells, cell_size| SegmentConfig {
            ring_cells,
            cell_size,
        };
        assert!(Geometry::new(0, &SegmentConfig::default()).is_err());
        assert!(Geometry::new(2, &cfg(1, 64)).is_err());
        assert!(Geometry::new(2, &cfg(3, 64)).is_err());
        assert!(Geometry::new(2, &cfg(4, 100)).is_err());
        assert!(Geometry::new(2, &cfg(4, 32)).is_err());
        assert!(Geometry::new(MAX_RANKS, &cfg(MAX_CELLS, MAX_CELL_SIZE)).is_err());
        assert!(Geometry::new(1, &cfg(2, 64)).is_ok());
    }
}
