//! The per-gate optimization window: chunks waiting for a rail.

use std::collections::VecDeque;

use navette_wire::{ClearToSend, EagerHeader, RdvRequest, ReceiveMode};

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

/// What a strategy may weigh about a pending chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Message tag (pieces and rendezvous requests).
    pub tag: Option<u64>,
    /// Sequence number within the gate (pieces and rendezvous requests).
    pub seq: Option<u32>,
    /// Bytes the chunk adds to a packet, header included.
    pub wire_len: usize,
    /// How the receiver takes a piece's data (pieces only).
    pub receive_mode: Option<ReceiveMode>,
    /// Higher goes first: see [`Priority`].
    pub priority: Priority,
}

/// How urgently a chunk should leave, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Rendezvous data: bulk bytes.
    Bulk,
    /// A piece the receiver takes CHEAPER (it may wait).
    Normal,
    /// A piece the receiver takes EXPRESS: it needs it before it can go on
    /// unpacking (a header deciding where the rest goes).
    Express,
    /// Protocol control (rendezvous request, clear-to-send): unblocks a
    /// transfer at the peer.
    Control,
}

impl Pending {
    /// The chunk's attributes.
    pub fn info(&self) -> ChunkInfo {
        let (tag, seq, receive_mode) = match self {
            Self::Eager { header, .. } => (
                Some(header.tag),
                Some(header.seq),
                Some(header.flags.receive_mode()),
            ),
            Self::RdvRequest(r) => (Some(r.tag), Some(r.seq), None),
            Self::ClearToSend(_) | Self::RdvData { .. } => (None, None, None),
        };
        ChunkInfo {
            tag,
            seq,
            wire_len: self.wire_len(),
            receive_mode,
            priority: self.priority(),
        }
    }

    /// How urgently the chunk should leave.
    pub fn priority(&self) -> Priority {
        match self {
            Self::Eager { header, .. } => match header.flags.receive_mode() {
                ReceiveMode::Express => Priority::Express,
                ReceiveMode::Cheaper => Priority::Normal,
            },
            Self::RdvRequest(_) | Self::ClearToSend(_) => Priority::Control,
            Self::RdvData { .. } => Priority::Bulk,
        }
    }

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

    /// The chunk at `index`.
    pub fn get(&self, index: usize) -> Option<&Pending> {
        self.chunks.get(index)
    }

    /// The chunk at `index`, mutably (a strategy may take part of it).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut Pending> {
        self.chunks.get_mut(index)
    }
}
