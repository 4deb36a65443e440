//! The job segment: a POSIX shared-memory object created by rank 0 and
//! mapped by every rank of the job.

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::Mode;
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::shm;

use crate::RankArea;
use crate::error::ShmError;
use crate::layout::{AreaControl, CONTROL_BYTES, Geometry, HEADER_BYTES, Header, MAGIC, VERSION};

/// A mapping of the whole segment, unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of `fd` shared, readable and writable.
    fn new(fd: &OwnedFd, len: usize, name: &str) -> Result<Self, ShmError> {
        // SAFETY: a fresh mapping chosen by the kernel (null hint, no
        // MAP_FIXED) replaces no existing memory; `len > 0` (callers pass at
        // least a header). The pointer is only used through `Mapping`, which
        // unmaps it exactly once, on drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| ShmError::io("mmap", name, e))?;
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| {
            ShmError::io(
                "mmap",
                name,
                io::Error::other("kernel returned a null mapping"),
            )
        })?;
        Ok(Self { base, len })
    }

    /// The header at offset 0.
    fn header(&self) -> &Header {
        debug_assert!(self.len >= HEADER_BYTES);
        // SAFETY: the mapping is page-aligned (so aligned for Header) and at
        // least HEADER_BYTES >= size_of::<Header>() long (checked by both
        // constructors' callers); Header is made of atomics, valid for any
        // bit pattern and safe to share; the reference lives no longer than
        // `&self`, and so than the mapping.
        unsafe { self.base.cast::<Header>().as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping made in `new`, not unmapped
        // before; every reference into it borrows the Segment that owns this
        // Mapping, so none outlives this call.
        let result = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
        debug_assert!(result.is_ok(), "munmap of our own mapping failed");
    }
}

/// Geometry used when a [`Segment`] is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// Cells per rank's ring: a power of two, 2..=65536. Default 64.
    pub ring_cells: u32,
    /// Bytes per cell, its 16-byte header included: a multiple of 64,
    /// 64..=2^30. Default 16 KiB (payloads up to 16 368 bytes).
    pub cell_size: usize,
}

impl SegmentConfig {
    /// Checks this geometry for a job of `ranks`, as [`Segment::create`]
    /// does: every rank can refuse a bad one before the job's first fence,
    /// rather than wait there for a creator that failed.
    pub fn check(&self, ranks: u32) -> Result<(), ShmError> {
        Geometry::new(ranks, self)
            .map(drop)
            .map_err(ShmError::Config)
    }
}

impl Default for SegmentConfig {
    fn default() -> Self {
        Self {
            ring_cells: 64,
            cell_size: 16 * 1024,
        }
    }
}

/// A job's shared-memory segment, mapped in this process.
///
/// Unmapped on drop. The segment returned by [`Segment::create`] also
/// removes the name on drop if [`Segment::unlink`] was not called, so the
/// name never outlives its creator's handle (a crash is cleaned up by the
/// launcher with [`unlink_job`]).
pub struct Segment {
    map: Mapping,
    /// Per rank's ring, what its producers in this process keep: the head
    /// they last read (see `ring`) and the length of their last push.
    /// Local memory, never shared.
    producer_caches: Box<[ProducerCache]>,
    geometry: Geometry,
    job_id: u64,
    name: String,
    created: bool,
    unlinked: AtomicBool,
}

// SAFETY: the only non-Send/Sync field is the mapping's base pointer. The
// mapping stays valid until drop, and every access through it is either an
// atomic (layout words) or a payload slice that the ring protocol gives to
// one thread alone (see `ring`), so sharing or moving the handle between
// threads creates no unsynchronised access.
unsafe impl Send for Segment {}
// SAFETY: as for Send.
unsafe impl Sync for Segment {}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("name", &self.name)
            .field("ranks", &self.geometry.ranks)
            .field("ring_cells", &self.geometry.ring_cells)
            .field("cell_size", &self.geometry.cell_size)
            .field("mapped_bytes", &self.map.len)
            .finish_non_exhaustive()
    }
}

impl Segment {
    /// The shared-memory object name of a job: `/navette-` and the job id
    /// as 16 hexadecimal digits (visible as `/dev/shm/navette-…`).
    pub fn name(job_id: u64) -> String {
        format!("/navette-{job_id:016x}")
    }

    /// Creates, sizes, initialises and maps the job's segment (rank 0).
    ///
    /// The object is created exclusively (`O_CREAT | O_EXCL`) with mode
    /// 0600; if any later step fails, the name is removed again.
    pub fn create(job_id: u64, ranks: u32, config: &SegmentConfig) -> Result<Self, ShmError> {
        let geometry = Geometry::new(ranks, config).map_err(ShmError::Config)?;
        let name = Self::name(job_id);
        let flags = shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR;
        let fd = shm::open(&name, flags, Mode::RUSR | Mode::WUSR).map_err(|e| match e {
            Errno::EXIST => ShmError::Exists { name: name.clone() },
            e => ShmError::io("shm_open", &name, e),
        })?;
        match Self::init(fd, geometry, job_id, &name) {
            Ok(map) => Ok(Self {
                map,
                producer_caches: producer_caches(&geometry),
                geometry,
                job_id,
                name,
                created: true,
                unlinked: AtomicBool::new(false),
            }),
            Err(e) => {
                // Best effort: the creation error is the one to report.
                let _ = shm::unlink(&name);
                Err(e)
            }
        }
    }

    /// Sizes a fresh object and writes its header; `magic` last.
    fn init(fd: OwnedFd, g: Geometry, job_id: u64, name: &str) -> Result<Mapping, ShmError> {
        // A restrictive umask could have removed the owner's write bit, which
        // attaching ranks need: set 0600 exactly.
        rustix::fs::fchmod(&fd, Mode::RUSR | Mode::WUSR)
            .map_err(|e| ShmError::io("fchmod", name, e))?;
        // The object stays sparse (pages come as rings fill), so a capped
        // filesystem would take it and fail later, with SIGBUS: check now.
        let vfs = rustix::fs::fstatvfs(&fd).map_err(|e| ShmError::io("fstatvfs", name, e))?;
        let room = vfs.f_bavail.saturating_mul(vfs.f_frsize);
        if g.total_size as u64 > room {
            return Err(ShmError::NoRoom {
                name: name.to_owned(),
                need: g.total_size as u64,
                room,
            });
        }
        rustix::fs::ftruncate(&fd, g.total_size as u64)
            .map_err(|e| ShmError::io("ftruncate", name, e))?;
        let map = Mapping::new(&fd, g.total_size, name)?;
        // The object is zero-filled: every ring is empty at position 0, no
        // cell published (see `ring` on the stamp encoding), every flag
        // clear. Only the header needs writing.
        let h = map.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.ranks.store(g.ranks, Ordering::Relaxed);
        h.job_id.store(job_id, Ordering::Relaxed);
        h.ring_cells.store(g.ring_cells, Ordering::Relaxed);
        // cell_size <= 2^30 (Geometry), so it fits.
        h.cell_size.store(g.cell_size as u32, Ordering::Relaxed);
        h.area_size.store(g.area_size as u64, Ordering::Relaxed);
        h.total_size.store(g.total_size as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(map)
    }

    /// Maps an existing segment of this job and checks it: owner and mode,
    /// size, magic, version, job id, rank count and geometry. Anything else
    /// is an error.
    pub fn attach(job_id: u64, ranks: u32) -> Result<Self, ShmError> {
        let name = Self::name(job_id);
        let fd = shm::open(&name, shm::OFlags::RDWR, Mode::empty()).map_err(|e| match e {
            Errno::NOENT => ShmError::NotFound { name: name.clone() },
            e => ShmError::io("shm_open", &name, e),
        })?;
        let size = check_object(&fd, &name)?;
        let map = Mapping::new(&fd, size, &name)?;
        let geometry = validate_header(map.header(), job_id, ranks, size, &name)?;
        Ok(Self {
            map,
            producer_caches: producer_caches(&geometry),
            geometry,
            job_id,
            name,
            created: false,
            unlinked: AtomicBool::new(false),
        })
    }

    /// Removes the segment's name (the mapping stays usable). Idempotent: a
    /// name already gone is not an error.
    pub fn unlink(&self) -> Result<(), ShmError> {
        if self.unlinked.load(Ordering::Acquire) {
            return Ok(());
        }
        match shm::unlink(&self.name) {
            Ok(()) | Err(Errno::NOENT) => {
                self.unlinked.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => Err(ShmError::io("shm_unlink", &self.name, e)),
        }
    }

    /// The job id.
    pub fn job_id(&self) -> u64 {
        self.job_id
    }

    /// Rank count.
    #[inline]
    pub fn ranks(&self) -> u32 {
        self.geometry.ranks
    }

    /// Cells per ring.
    pub fn ring_cells(&self) -> u32 {
        self.geometry.ring_cells
    }

    /// Largest payload of one cell, in bytes (cell size less 16).
    #[inline]
    pub fn cell_payload(&self) -> usize {
        self.geometry.cell_payload()
    }

    /// Rank `rank`'s area.
    ///
    /// # Panics
    ///
    /// If `rank >= self.ranks()` (a caller bug).
    #[inline]
    pub fn area(&self, rank: u32) -> RankArea<'_> {
        let g = &self.geometry;
        assert!(
            rank < g.ranks,
            "rank {rank} out of range (segment of {} ranks)",
            g.ranks
        );
        let offset = g.area_offset(rank);
        debug_assert!(offset + g.area_size <= self.map.len);
        // SAFETY: `offset + area_size <= total_size == map.len` (Geometry,
        // rank < ranks), so the pointer stays inside the mapping; it is not
        // null since the base is not.
        let base = unsafe { self.map.base.add(offset) };
        // SAFETY: `base` is inside the mapping, 128-aligned (page-aligned
        // base, HEADER_BYTES and area_size multiples of 128) and followed by
        // at least CONTROL_BYTES bytes; AreaControl is made of atomics and
        // padding, valid for any bit pattern; the reference borrows `self`.
        let control = unsafe { base.cast::<AreaControl>().as_ref() };
        // SAFETY: `CONTROL_BYTES + ring_cells * cell_size == area_size`, so
        // the cells lie inside this rank's area.
        let cells = unsafe { base.add(CONTROL_BYTES) };
        RankArea::new(
            control,
            &self.producer_caches[rank as usize],
            cells,
            rank,
            g,
        )
    }

    /// Bytes mapped (the whole segment).
    pub fn mapped_bytes(&self) -> usize {
        self.map.len
    }

    /// Bytes of the segment actually in memory (`mincore`): pages that some
    /// rank has touched. A fresh segment is all zeros except its header
    /// (an empty ring needs no initialisation), so it costs one page; each
    /// cell costs a page once used, more for payloads beyond 4 KiB.
    pub fn resident_bytes(&self) -> io::Result<usize> {
        let page = rustix::param::page_size();
        let pages = self.map.len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // rustix 1.x has no `mincore`, hence libc.
        // SAFETY: `base` is page-aligned and `base..base+len` is our live
        // mapping; `vec` holds one byte per page of it, as mincore writes.
        let rc = unsafe {
            libc::mincore(
                self.map.base.as_ptr().cast(),
                self.map.len,
                vec.as_mut_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|&&b| b & 1 != 0).count() * page)
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.created {
            // Best effort: nothing to report to in drop.
            let _ = self.unlink();
        }
    }
}

/// Checks the object's owner, mode and size; returns its size.
fn check_object(fd: &OwnedFd, name: &str) -> Result<usize, ShmError> {
    let st = rustix::fs::fstat(fd).map_err(|e| ShmError::io("fstat", name, e))?;
    let mode = st.st_mode & 0o7777;
    let uid = st.st_uid;
    if mode & 0o077 != 0 || uid != rustix::process::geteuid().as_raw() {
        return Err(ShmError::Permissions {
            name: name.to_owned(),
            mode,
            uid,
        });
    }
    // A negative size would be a kernel bug; read it as 0.
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size < HEADER_BYTES as u64 {
        return Err(ShmError::Truncated {
            name: name.to_owned(),
            found: size,
            expected: HEADER_BYTES as u64,
        });
    }
    usize::try_from(size).map_err(|_| ShmError::Corrupt {
        name: name.to_owned(),
        what: "object larger than the address space",
    })
}

/// Validates a mapped header against what the caller expects and the
/// object's real size; returns the trusted geometry.
fn validate_header(
    h: &Header,
    job_id: u64,
    ranks: u32,
    size: usize,
    name: &str,
) -> Result<Geometry, ShmError> {
    let name_s = || name.to_owned();
    let magic = h.magic.load(Ordering::Acquire);
    if magic == 0 {
        return Err(ShmError::NotReady { name: name_s() });
    }
    if magic != MAGIC {
        return Err(ShmError::Foreign {
            name: name_s(),
            found: magic,
        });
    }
    let version = h.version.load(Ordering::Relaxed);
    if version != VERSION {
        return Err(ShmError::Version {
            name: name_s(),
            found: version,
            expected: VERSION,
        });
    }
    let found_job = h.job_id.load(Ordering::Relaxed);
    if found_job != job_id {
        return Err(ShmError::JobMismatch {
            name: name_s(),
            found: found_job,
            expected: job_id,
        });
    }
    let found_ranks = h.ranks.load(Ordering::Relaxed);
    if found_ranks != ranks {
        return Err(ShmError::RankMismatch {
            name: name_s(),
            found: found_ranks,
            expected: ranks,
        });
    }
    let config = SegmentConfig {
        ring_cells: h.ring_cells.load(Ordering::Relaxed),
        cell_size: h.cell_size.load(Ordering::Relaxed) as usize,
    };
    let g = Geometry::new(ranks, &config).map_err(|what| ShmError::Corrupt {
        name: name_s(),
        what,
    })?;
    let corrupt = |what| ShmError::Corrupt {
        name: name_s(),
        what,
    };
    if h.area_size.load(Ordering::Relaxed) != g.area_size as u64 {
        return Err(corrupt("area size does not match the geometry"));
    }
    if h.total_size.load(Ordering::Relaxed) != g.total_size as u64 {
        return Err(corrupt("total size does not match the geometry"));
    }
    if size > g.total_size {
        return Err(corrupt("object larger than its header says"));
    }
    if size < g.total_size {
        return Err(ShmError::Truncated {
            name: name_s(),
            found: size as u64,
            expected: g.total_size as u64,
        });
    }
    Ok(g)
}

/// Removes job `job_id`'s segment name if present (launcher clean-up after
/// a crash). Returns whether a name was removed.
pub fn unlink_job(job_id: u64) -> Result<bool, ShmError> {
    let name = Segment::name(job_id);
    match shm::unlink(&name) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(ShmError::io("shm_unlink", &name, e)),
    }
}

/// What this process's producers keep of one ring: its head as they last
/// read it (see `ring`), and the length of their last push there (see
/// [`RankArea::prefetch_tail_cell`]), on their own pair of lines so that
/// threads pushing to different rings do not share them.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct ProducerCache {
    pub(crate) head: AtomicU64,
    pub(crate) last_push: AtomicU64,
}

fn producer_caches(g: &Geometry) -> Box<[ProducerCache]> {
    (0..g.ranks).map(|_| ProducerCache::default()).collect()
}
