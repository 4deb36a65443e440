//! The per-gate optimization window: chunks waiting for a rail.

use std::collections::VecDeque;

use navette_wire::{ClearToSend, EagerHeader, RdvRequest};

use crate::{MemRef, ReqId, Status};

/// A chunk waiting in a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    /// An eager piece, its data still in user memory.
    Eager {
        /// The chunk header.
        header: EagerHeader,
        /// Where the data is.
        data: MemRef,
        /// The piece's request and its status, complete once the packet is
        /// sent (none for internal chunks such as an abort).
        done: Option<(ReqId, Status)>,
    },
    /// A rendezvous request.
    RdvRequest(RdvRequest),
    /// A clear-to-send.
    ClearToSend(ClearToSend),
    /// Rendezvous data still to send: `data` from `offset` within the piece.
    RdvData {
        /// Channel of the transfer.
        channel: u16,
        /// The receiver's destination id.
        recv_id: u32,
        /// The sender's transfer id.
        send_id: u32,
        /// Offset in the piece of `data`'s first byte.
        offset: u64,
        /// The bytes left to send.
        data: MemRef,
    },
}

impl Pending {
    /// Bytes this chunk adds to a packet (header and data).
    pub fn wire_len(&self) -> usize {
        match self {
            Self::Eager { data, .. } => EagerHeader::LEN + data.len,
            Self::RdvRequest(_) => RdvRequest::LEN,
            Self::ClearToSend(_) => ClearToSend::LEN,
            Self::RdvData { data, .. } => navette_wire::RdvDataHeader::LEN + data.len,
        }
    }
}

/// Chunks of one gate in submission order. Strategies take from it.
#[derive(Debug, Default)]
pub struct Window {
    chunks: VecDeque<Pending>,
}

impl Window {
    /// Appends a chunk.
    pub(crate) fn push(&mut self, chunk: Pending) {
        self.chunks.push_back(chunk);
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Number of chunks waiting.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// The chunks in order.
    pub fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.chunks.iter()
    }

    /// The oldest chunk.
    pub fn front(&self) -> Option<&Pending> {
        self.chunks.front()
    }

    /// The oldest chunk, mutably (a strategy may take part of it).
    pub fn front_mut(&mut self) -> Option<&mut Pending> {
        self.chunks.front_mut()
    }

    /// Removes the oldest chunk.
    pub fn pop_front(&mut self) -> Option<Pending> {
        self.chunks.pop_front()
    }

    /// Removes the chunk at `index`.
    pub fn remove(&mut self, index: usize) -> Option<Pending> {
        self.chunks.remove(index)
    }
}
