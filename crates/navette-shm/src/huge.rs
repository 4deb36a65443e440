//! Memory for large messages over shared memory: byte buffers backed by
//! transparent huge pages.
//!
//! A large message between local processes crosses by the kernel's single
//! copy (`process_vm_readv` by the receiver, `process_vm_writev` by the
//! sender for its share). Each call pins the other process's pages one by
//! one before copying, and on a virtual machine pinning costs more than
//! copying: with 4 KiB pages a 256 KiB block takes 64 pins. Pages of a
//! transparent huge page are pinned together, which halves the copy's
//! time on this project's test machine (docs/profiling.md, "Large blocks
//! in huge pages"). A runtime's long-lived buffers for large messages (as
//! MPI's `MPI_Alloc_mem`) are the ones to allocate here.
//!
//! Written by hand over `mmap` rather than with `memmap2`: a huge page can
//! only back a 2 MiB-aligned range, and `memmap2` does not align its
//! anonymous maps.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use rustix::mm::{Advice, MapFlags, ProtFlags};

/// Bytes of a transparent huge page (x86-64 and aarch64 with 4 KiB base
/// pages): a [`HugeBuffer`]'s mapping is aligned to, and a whole number
/// of, these.
pub const HUGE_PAGE: usize = 2 << 20;

/// Why a [`HugeBuffer`] could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HugeBufferError {
    /// The length, rounded up to whole huge pages, overflows.
    #[error("a buffer of {len} bytes is too large to map")]
    TooLarge {
        /// The length asked for.
        len: usize,
    },
    /// The kernel refused the mapping (out of memory or address space, or
    /// a limit on mappings).
    #[error("could not map {bytes} bytes for a buffer of {len} bytes: {source}")]
    Map {
        /// The length asked for.
        len: usize,
        /// The bytes asked of the kernel.
        bytes: usize,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
}

/// A zeroed byte buffer of a fixed length in memory of its own, backed by
/// transparent huge pages where the system grants them.
///
/// It derefs to `[u8]`: pack it, unpack into it, send it or receive into
/// it as any slice. Large messages to and from it over shared memory
/// cross faster (see the module's documentation).
///
/// **Cost.** Its memory is whole huge pages ([`HUGE_PAGE`], 2 MiB): a
/// buffer of 256 KiB takes 2 MiB of address space, and 2 MiB of memory
/// once touched where a huge page backs it. Where transparent huge pages
/// are off (`/sys/kernel/mm/transparent_hugepage/enabled` set to
/// `never`), it is ordinary memory, touched page by page, and nothing
/// fails. Meant for a few long-lived buffers of large messages, not for
/// many small ones.
///
/// ```
/// use navette_shm::HugeBuffer;
///
/// let mut block = HugeBuffer::zeroed(256 << 10)?;
/// assert_eq!(block.len(), 256 << 10);
/// assert!(block.iter().all(|&b| b == 0));
/// block[..5].copy_from_slice(b"hello");
/// assert_eq!(&block[..5], b"hello");
/// # Ok::<(), navette_shm::HugeBufferError>(())
/// ```
pub struct HugeBuffer {
    /// The first byte: huge-page aligned; dangling (never read) when `len`
    /// is 0.
    ptr: NonNull<u8>,
    /// The buffer's length.
    len: usize,
    /// The mapping's length from `ptr` (0 when `len` is 0: no mapping).
    mapped: usize,
}

// SAFETY: a HugeBuffer owns its mapping alone (no other handle to it
// exists), as a `Box<[u8]>` owns its memory: moving it to another thread
// moves that ownership.
unsafe impl Send for HugeBuffer {}

// SAFETY: shared references only read the bytes (`Deref`); writing takes
// `&mut self`. As for `Box<[u8]>`.
unsafe impl Sync for HugeBuffer {}

impl HugeBuffer {
    /// `len` zero bytes in a mapping of their own, aligned to and made of
    /// whole huge pages, which the kernel is asked to back with huge pages
    /// (`madvise(MADV_HUGEPAGE)`; where it will not, the buffer is
    /// ordinary memory). A length of 0 maps nothing.
    pub fn zeroed(len: usize) -> Result<Self, HugeBufferError> {
        if len == 0 {
            return Ok(Self {
                ptr: NonNull::dangling(),
                len: 0,
                mapped: 0,
            });
        }
        let too_large = || HugeBufferError::TooLarge { len };
        let mapped = len
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or_else(too_large)?;
        // A huge page's worth more, to find an aligned start inside.
        let bytes = mapped.checked_add(HUGE_PAGE).ok_or_else(too_large)?;
        // SAFETY: a fresh private anonymous mapping where the kernel
        // chooses (null hint): it aliases no memory of this process.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                bytes,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|e| HugeBufferError::Map {
            len,
            bytes,
            source: e.into(),
        })?;
        let base_addr = base as usize;
        // `base` is page-aligned, so `head` and the tail are whole pages,
        // and `head < HUGE_PAGE`, so `start + mapped <= base + bytes`.
        let head = base_addr.next_multiple_of(HUGE_PAGE) - base_addr;
        let tail = bytes - head - mapped;
        // SAFETY: `head < bytes`: inside the mapping just made.
        let start = unsafe { base.cast::<u8>().add(head) };
        // SAFETY: both ranges are whole pages inside the mapping just made
        // (see above), which nothing else uses; what stays mapped is
        // `start..start + mapped`. A failed trim leaves its pages mapped
        // and unused (see `Drop`).
        unsafe {
            if head > 0 {
                let _ = rustix::mm::munmap(base, head);
            }
            if tail > 0 {
                let _ = rustix::mm::munmap(start.add(mapped).cast(), tail);
            }
        }
        // SAFETY: `start..start + mapped` is mapped and ours. Advice only:
        // a kernel built without transparent huge pages refuses it, one
        // that has them off (`never`) takes it and gives ordinary pages;
        // either way the memory is ordinary memory.
        let _ = unsafe { rustix::mm::madvise(start.cast(), mapped, Advice::LinuxHugepage) };
        // SAFETY: inside a successful mapping, so not null.
        let ptr = unsafe { NonNull::new_unchecked(start) };
        Ok(Self { ptr, len, mapped })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether its length is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of memory it holds: its length rounded up to whole huge
    /// pages (0 for an empty buffer).
    pub fn mapped_len(&self) -> usize {
        self.mapped
    }
}

impl Drop for HugeBuffer {
    fn drop(&mut self) {
        if self.mapped > 0 {
            // `munmap` fails only where unmapping part of a mapping would
            // split it past the process's limit of mappings
            // (`vm.max_map_count`, ENOMEM): the range then stays mapped,
            // unused, and nothing else is wrong (no panic from a drop).
            // SAFETY: `ptr..ptr + mapped` is exactly the mapping `zeroed`
            // kept, page-aligned and unmapped nowhere else; `&mut self` in
            // `drop` means no slice of it lives and this runs once.
            let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.mapped) };
        }
    }
}

impl Deref for HugeBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes (the mapping, zeroed by
        // the kernel, covers them; or dangling and aligned for `len` 0),
        // and `&self` keeps the mapping alive and unwritten.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for HugeBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only
        // reference to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for HugeBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for HugeBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for HugeBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HugeBuffer")
            .field("len", &self.len)
            .field("mapped", &self.mapped)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_zeroed_aligned_and_whole_huge_pages() {
        for len in [1, 4096, 256 << 10, HUGE_PAGE, HUGE_PAGE + 1] {
            let mut buf = HugeBuffer::zeroed(len).unwrap();
            assert_eq!(buf.len(), len);
            assert!(!buf.is_empty());
            assert_eq!(buf.as_ptr() as usize % HUGE_PAGE, 0, "{len}");
            assert_eq!(buf.mapped_len(), len.next_multiple_of(HUGE_PAGE));
            assert!(buf.iter().all(|&b| b == 0), "{len}");
            // Every byte is writable and keeps what was written.
            for (i, b) in buf.iter_mut().enumerate() {
                *b = i as u8;
            }
            assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
        }
    }

    #[test]
    fn an_empty_buffer_maps_nothing() {
        let mut buf = HugeBuffer::zeroed(0).unwrap();
        assert!(buf.is_empty());
        assert_eq!(buf.mapped_len(), 0);
        assert_eq!(&buf[..], &[] as &[u8]);
        assert_eq!(buf.as_mut(), &mut [] as &mut [u8]);
    }

    #[test]
    fn a_length_too_large_is_an_error() {
        let err = HugeBuffer::zeroed(usize::MAX).unwrap_err();
        assert!(matches!(err, HugeBufferError::TooLarge { len: usize::MAX }));
        assert!(err.to_string().contains("too large"), "{err}");
        // Rounds up fine, but no machine has the address space.
        let len = usize::MAX / 2;
        let err = HugeBuffer::zeroed(len).unwrap_err();
        assert!(
            matches!(err, HugeBufferError::Map { len: l, .. } if l == len),
            "{err}"
        );
    }

    #[test]
    fn buffers_move_between_threads() {
        let mut buf = HugeBuffer::zeroed(100).unwrap();
        buf[99] = 7;
        let buf = std::thread::spawn(move || {
            assert_eq!(buf[99], 7);
            buf
        })
        .join()
        .unwrap();
        assert_eq!(
            format!("{buf:?}"),
            format!("HugeBuffer {{ len: 100, mapped: {HUGE_PAGE}, .. }}")
        );
    }
}
