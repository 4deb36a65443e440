//! Access to memory the engine does not own.
//!
//! The engine refers to user buffers by [`MemHandle`]: packet plans name
//! ranges to gather, and received data is scattered into ranges through
//! [`Memory::get_mut`]. The owner (the node) decides what a handle maps to
//! and keeps it alive while a request refers to it. A handle that no longer
//! resolves (a cancelled request) makes the data be dropped, never written
//! elsewhere.

use std::collections::HashMap;

use crate::{MemHandle, MemRef};

/// Resolves handles to bytes.
pub trait Memory {
    /// The bytes of a region, to gather from.
    fn get(&self, handle: MemHandle) -> Option<&[u8]>;
    /// The bytes of a region, to scatter into.
    fn get_mut(&mut self, handle: MemHandle) -> Option<&mut [u8]>;
}

/// Reads `range`, if its handle resolves and it lies inside the region.
pub fn read(mem: &dyn Memory, range: MemRef) -> Option<&[u8]> {
    mem.get(range.handle)?
        .get(range.offset..range.offset.checked_add(range.len)?)
}

/// Copies `src` to `offset` bytes after the start of `range`; false if the
/// handle does not resolve or the bytes do not fit.
pub fn write(mem: &mut dyn Memory, range: MemRef, offset: usize, src: &[u8]) -> bool {
    let fits = offset
        .checked_add(src.len())
        .is_some_and(|end| end <= range.len);
    let start = range.offset + offset;
    match mem.get_mut(range.handle) {
        Some(region) if fits => match region.get_mut(start..start + src.len()) {
            Some(dst) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// A simple owner of regions: vectors in a map. Used by tests and by
/// drivers that own their buffers.
#[derive(Debug, Default)]
pub struct VecMemory {
    regions: HashMap<MemHandle, Vec<u8>>,
    next: u64,
}

impl VecMemory {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a region and returns a range over all of it.
    pub fn insert(&mut self, bytes: Vec<u8>) -> MemRef {
        let handle = MemHandle(self.next);
        self.next += 1;
        let len = bytes.len();
        self.regions.insert(handle, bytes);
        MemRef::whole(handle, len)
    }

    /// Removes a region and returns its bytes.
    pub fn remove(&mut self, handle: MemHandle) -> Option<Vec<u8>> {
        self.regions.remove(&handle)
    }
}

impl Memory for VecMemory {
    fn get(&self, handle: MemHandle) -> Option<&[u8]> {
        self.regions.get(&handle).map(Vec::as_slice)
    }

    fn get_mut(&mut self, handle: MemHandle) -> Option<&mut [u8]> {
        self.regions.get_mut(&handle).map(Vec::as_mut_slice)
    }
}
