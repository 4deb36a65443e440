//! The node's memory table: what the engine's handles point to.
//!
//! Regions are either owned by the table (buffers of non-blocking requests,
//! SAFER copies) or borrowed from the caller of a blocking call for exactly
//! the duration of that call (`crate::node::Registration` removes them on
//! every exit path, unwinding included). A receive waiting outside the
//! engine (`crate::lean`) keeps its borrowed destination beside the table,
//! as a [`LentMut`], until it is landed in or registered. Borrowed regions
//! are why this module holds the only `unsafe` code of the crate.
//!
//! Invariant that every `unsafe` block below relies on: a borrowed entry
//! (or [`LentMut`]) exists only while the thread that registered it is
//! inside the blocking call that holds the borrow, and every access to it
//! happens under the node's state lock.

use std::cell::Cell;
use std::ptr::NonNull;

use bytes::Bytes;
use navette_core::{MemHandle, MemRef, Memory};
use rustc_hash::FxHashMap;

/// What one handle points to.
#[derive(Debug)]
enum Region {
    /// Shared immutable bytes (non-blocking sends).
    Shared(Bytes),
    /// A buffer owned by the table (receive buffers, copies).
    Owned(Vec<u8>),
    /// Caller memory, read-only.
    Borrowed { ptr: NonNull<u8>, len: usize },
    /// Caller memory, writable.
    BorrowedMut { ptr: NonNull<u8>, len: usize },
}

/// Regions by handle.
#[derive(Debug, Default)]
pub(crate) struct MemTable {
    regions: FxHashMap<MemHandle, Region>,
    next: u64,
}

// SAFETY: the raw pointers in `Borrowed`/`BorrowedMut` are only dereferenced
// under the node's state lock while the registering thread is blocked in the
// call that holds the borrow (module invariant). Shared borrows come from
// `&[u8]` (Sync) or from `&[Cell<u8>]`, whose owner thread is blocked and so
// cannot write concurrently; unique borrows come from `&mut [u8]`. Moving the
// table to another thread therefore creates no unsynchronised access.
unsafe impl Send for MemTable {}

/// Caller memory lent, writable, for one blocking call, outside the table
/// (module invariant).
#[derive(Debug)]
pub(crate) struct LentMut {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: as for `MemTable`: the pointer comes from a unique `&mut [u8]`
// whose owner is blocked in the call that holds it, and it is only
// dereferenced under the node's state lock (module invariant).
unsafe impl Send for LentMut {}

impl LentMut {
    /// Lends `data`. The caller must drop the value (or register it with
    /// [`MemTable::insert_lent`] and remove that region) before the borrow
    /// ends (module invariant); `crate::lean` does.
    pub(crate) fn new(data: &mut [u8]) -> Self {
        let len = data.len();
        Self {
            ptr: NonNull::from(data).cast::<u8>(),
            len,
        }
    }

    /// The lent memory.
    pub(crate) fn get_mut(&mut self) -> &mut [u8] {
        // SAFETY: by the module invariant the borrow this came from is live
        // and its owner is blocked, and we are under the state lock, which
        // `&mut self` (reached through the locked state) extends to the
        // returned slice: nothing else accesses it meanwhile. Pointer and
        // length come from that `&mut [u8]`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl MemTable {
    /// Registers lent memory (the same region as [`Self::borrow_mut`] of
    /// the slice it came from).
    pub(crate) fn insert_lent(&mut self, lent: LentMut) -> MemRef {
        let LentMut { ptr, len } = lent;
        let handle = self.insert(Region::BorrowedMut { ptr, len });
        MemRef::whole(handle, len)
    }

    fn insert(&mut self, region: Region) -> MemHandle {
        let handle = MemHandle(self.next);
        self.next += 1;
        self.regions.insert(handle, region);
        handle
    }

    /// Adds shared bytes; returns a range over them.
    pub(crate) fn insert_shared(&mut self, bytes: Bytes) -> MemRef {
        let len = bytes.len();
        MemRef::whole(self.insert(Region::Shared(bytes)), len)
    }

    /// Adds an owned buffer; returns a range over it.
    pub(crate) fn insert_owned(&mut self, buf: Vec<u8>) -> MemRef {
        let len = buf.len();
        MemRef::whole(self.insert(Region::Owned(buf)), len)
    }

    /// Removes a region; returns the buffer if the table owned one.
    pub(crate) fn remove(&mut self, handle: MemHandle) -> Option<Vec<u8>> {
        match self.regions.remove(&handle)? {
            Region::Owned(buf) => Some(buf),
            _ => None,
        }
    }

    /// Registers `data` read-only.
    ///
    /// The caller must remove the region before the borrow ends (module
    /// invariant); `crate::node::Registration` does.
    pub(crate) fn borrow(&mut self, data: &[u8]) -> MemRef {
        let ptr = NonNull::from(data).cast::<u8>();
        let handle = self.insert(Region::Borrowed {
            ptr,
            len: data.len(),
        });
        MemRef::whole(handle, data.len())
    }

    /// Registers `data` read-only; its owner may change it through the
    /// cells until the blocking call starts (LATER mode).
    pub(crate) fn borrow_cells(&mut self, data: &[Cell<u8>]) -> MemRef {
        let ptr = NonNull::from(data).cast::<u8>();
        let handle = self.insert(Region::Borrowed {
            ptr,
            len: data.len(),
        });
        MemRef::whole(handle, data.len())
    }

    /// Registers `data` writable for the duration of a blocking call.
    pub(crate) fn borrow_mut(&mut self, data: &mut [u8]) -> MemRef {
        let len = data.len();
        let ptr = NonNull::from(data).cast::<u8>();
        let handle = self.insert(Region::BorrowedMut { ptr, len });
        MemRef::whole(handle, len)
    }
}

impl Memory for MemTable {
    fn get(&self, handle: MemHandle) -> Option<&[u8]> {
        match self.regions.get(&handle)? {
            Region::Shared(b) => Some(b),
            Region::Owned(v) => Some(v),
            Region::Borrowed { ptr, len } | Region::BorrowedMut { ptr, len } => {
                // SAFETY: the entry exists, so by the module invariant the
                // borrow it came from is live and its owner is blocked; the
                // pointer and length come from that slice (valid, aligned for
                // u8, initialised). `Cell<u8>` has the layout of `u8`. The
                // returned slice lives no longer than `&self`, during which the
                // state lock is held and the entry cannot be removed.
                Some(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) })
            }
        }
    }

    fn get_mut(&mut self, handle: MemHandle) -> Option<&mut [u8]> {
        match self.regions.get_mut(&handle)? {
            Region::Owned(v) => Some(v),
            Region::BorrowedMut { ptr, len } => {
                // SAFETY: as in `get`; moreover the region came from a unique
                // `&mut [u8]` whose owner is blocked in the call that holds it,
                // and `&mut self` (under the state lock) excludes any other
                // access through this table, so the slice is not aliased.
                Some(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), *len) })
            }
            Region::Shared(_) | Region::Borrowed { .. } => None,
        }
    }
}
