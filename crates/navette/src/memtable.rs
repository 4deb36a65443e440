//! The node's memory table: what the engine's handles point to.
//!
//! Regions are either owned by the table (buffers of non-blocking requests,
//! SAFER copies) or borrowed from the caller of a blocking call for exactly
//! the duration of that call (`crate::node::Registration` removes them on
//! every exit path, unwinding included; a send that gives up before its
//! data has left turns its region into an owned copy instead,
//! [`MemTable::keep_copy`]). A receive waiting outside the
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
use std::sync::Arc;

use bytes::Bytes;
use navette_core::{MemHandle, MemRef, Memory};

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

/// Regions by handle: a slot vector with generations rather than a hash
/// map (every message inserts, looks up and removes a region). A handle is
/// its slot's index and generation; removing a region bumps the slot's
/// generation before the slot is reused, so a handle kept after its region
/// was removed (a cancelled request's, say) never reaches a later region.
#[derive(Debug, Default)]
pub(crate) struct MemTable {
    slots: Vec<Slot>,
    /// Indices of empty slots.
    free: Vec<u32>,
    /// Called when a region whose address a driver gave a peer to read
    /// ([`Self::mark_offered`]) is removed, before its memory can be
    /// reused.
    on_release: Option<ReleaseHook>,
}

/// See [`MemTable::set_release_hook`].
#[derive(Clone)]
pub(crate) struct ReleaseHook(pub(crate) Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for ReleaseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReleaseHook")
    }
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    region: Option<Region>,
    /// Peers given the region's address and not done reading it (see
    /// [`MemTable::mark_offered`]).
    offered: u32,
}

impl MemTable {
    /// The slot of `handle`, if it is the handle of the region there now.
    fn slot(&self, handle: MemHandle) -> Option<&Slot> {
        let (index, generation) = split(handle);
        self.slots.get(index).filter(|s| s.generation == generation)
    }

    fn slot_mut(&mut self, handle: MemHandle) -> Option<&mut Slot> {
        let (index, generation) = split(handle);
        self.slots
            .get_mut(index)
            .filter(|s| s.generation == generation)
    }
}

/// A handle's slot index and generation.
fn split(handle: MemHandle) -> (usize, u32) {
    // The low half is an index below u32::MAX, the high half a generation.
    ((handle.0 & 0xffff_ffff) as usize, (handle.0 >> 32) as u32)
}

fn handle(index: u32, generation: u32) -> MemHandle {
    MemHandle((u64::from(generation) << 32) | u64::from(index))
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

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
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
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.region = Some(region);
            return handle(index, slot.generation);
        }
        // Below u32::MAX slots: MemHandle(u64::MAX), which the engine uses
        // for "no memory", never resolves. Each live region holds a slot
        // (40 bytes) and its request, so memory runs out long before 2^32
        // of them: the expect guards our own arithmetic, not user input.
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .expect("fewer than 2^32 - 1 regions at once");
        self.slots.push(Slot {
            generation: 0,
            region: Some(region),
            offered: 0,
        });
        handle(index, 0)
    }

    /// Notes that a driver gave a peer the address of `handle`'s region,
    /// for the peer to read it itself: removing the region before as many
    /// [`Self::unmark_offered`] calls the release hook first. A handle that
    /// no longer resolves is ignored.
    pub(crate) fn mark_offered(&mut self, handle: MemHandle) {
        if let Some(slot) = self.slot_mut(handle) {
            slot.offered = slot.offered.saturating_add(1);
        }
    }

    /// Notes that a peer given the address of `handle`'s region is done
    /// with it (it read the data, or will not): once every such peer is,
    /// removing the region is an ordinary removal, which moves no epoch
    /// and so costs other readers nothing.
    pub(crate) fn unmark_offered(&mut self, handle: MemHandle) {
        if let Some(slot) = self.slot_mut(handle) {
            slot.offered = slot.offered.saturating_sub(1);
        }
    }

    /// Sets what removing an offered region calls (see
    /// [`Self::mark_offered`]): a driver that tells peers addresses
    /// publishes there that such memory is let go.
    pub(crate) fn set_release_hook(&mut self, hook: ReleaseHook) {
        self.on_release = Some(hook);
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
        let (index, _) = split(handle);
        let slot = self.slot_mut(handle)?;
        let region = slot.region.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        let offered = std::mem::take(&mut slot.offered);
        // A slot whose generations are all used is retired, not reused.
        if slot.generation != 0 {
            // The index came from this vector.
            self.free.push(index as u32);
        }
        // Before the caller lets the memory go.
        if offered > 0
            && let Some(ReleaseHook(hook)) = &self.on_release
        {
            hook();
        }
        match region {
            Region::Owned(buf) => Some(buf),
            _ => None,
        }
    }

    /// Replaces the caller memory that `handle` borrows read-only with a
    /// copy the table owns, under the same handle, for a send whose caller
    /// takes its memory back before the send completes: the engine's
    /// ranges then read the copy. A peer given the region's address is
    /// told first, as by [`Self::remove`] (its read of the caller's memory
    /// no longer counts, and it asks for the data instead). Whether a copy
    /// was made: not for writable or owned regions, nor a handle that no
    /// longer resolves.
    pub(crate) fn keep_copy(&mut self, handle: MemHandle) -> bool {
        let on_release = self.on_release.clone();
        let Some(slot) = self.slot_mut(handle) else {
            return false;
        };
        let Some(Region::Borrowed { ptr, len }) = slot.region else {
            return false;
        };
        // SAFETY: the entry is still registered, so the borrow it came
        // from is alive (module invariant: its `Registration`, which holds
        // that borrow, removes or converts it before the borrow ends, and
        // is doing so now), and this read happens under the node's state
        // lock, as every read of a borrowed entry does; `ptr` and `len`
        // came from that borrowed slice. Lent cells (LATER mode) have the
        // layout of `u8`, and their owner, the thread giving them back
        // inside its blocking call, writes none meanwhile.
        let copy = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) }.to_vec();
        slot.region = Some(Region::Owned(copy));
        // The copy's address was given to no one.
        if std::mem::take(&mut slot.offered) > 0
            && let Some(ReleaseHook(hook)) = &on_release
        {
            hook();
        }
        true
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
        match self.slot(handle)?.region.as_ref()? {
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
        match self.slot_mut(handle)?.region.as_mut()? {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_of_removed_regions_never_resolve_again() {
        let mut table = MemTable::default();
        let first = table.insert_owned(vec![1, 2, 3]).handle;
        assert_eq!(table.get(first), Some(&[1, 2, 3][..]));
        assert_eq!(table.remove(first), Some(vec![1, 2, 3]));
        // The slot is reused for the next region, under a new handle.
        let second = table.insert_owned(vec![4]).handle;
        assert_ne!(first, second);
        assert_eq!(split(first).0, split(second).0);
        assert_eq!(table.get(first), None);
        assert_eq!(table.remove(first), None);
        assert_eq!(table.get(second), Some(&[4][..]));
        // Shared bytes are readable, not writable; unknown handles are none.
        let shared = table.insert_shared(Bytes::from_static(b"ab")).handle;
        assert_eq!(table.get(shared), Some(&b"ab"[..]));
        assert!(table.get_mut(shared).is_none());
        assert!(table.get(MemHandle(u64::MAX)).is_none());
        assert_eq!(table.remove(shared), None, "the table owned no buffer");
        assert!(table.get(shared).is_none());
    }

    /// Removing a region whose address was offered, and not read as often
    /// as offered, calls the release hook once, before returning; other
    /// regions, and handles that no longer resolve, never do.
    #[test]
    fn removing_an_offered_region_calls_the_release_hook() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let mut table = MemTable::default();
        let counted = Arc::clone(&calls);
        table.set_release_hook(ReleaseHook(Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })));
        let offered = table.insert_owned(vec![1; 8]);
        let plain = table.insert_owned(vec![2; 8]);
        table.mark_offered(offered.handle);
        table.remove(plain.handle);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        table.remove(offered.handle);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Offered twice and read once: still offered. Read as often as
        // offered (a surplus read is ignored): an ordinary region again.
        let mut hooked_after = |offers: usize, reads: usize| {
            let region = table.insert_owned(vec![4; 8]).handle;
            (0..offers).for_each(|_| table.mark_offered(region));
            (0..reads).for_each(|_| table.unmark_offered(region));
            let before = calls.load(Ordering::SeqCst);
            table.remove(region);
            calls.load(Ordering::SeqCst) - before
        };
        assert_eq!(hooked_after(2, 1), 1);
        assert_eq!(hooked_after(1, 2), 0);
        // The slot's next region starts unmarked; a stale handle marks
        // nothing.
        table.mark_offered(offered.handle);
        let next = table.insert_owned(vec![3; 8]);
        table.remove(next.handle);
        table.remove(offered.handle);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_slot_out_of_generations_is_retired() {
        let mut table = MemTable::default();
        let handle = table.insert_owned(vec![0]).handle;
        table.slots[0].generation = u32::MAX;
        let last = super::handle(0, u32::MAX);
        assert_eq!(table.remove(handle), None, "an old generation");
        assert_eq!(table.remove(last), Some(vec![0]));
        // Not reused: the next region takes a new slot.
        let next = table.insert_owned(vec![1]).handle;
        assert_eq!(split(next), (1, 0));
        assert!(table.get(super::handle(0, 0)).is_none());
    }
}
