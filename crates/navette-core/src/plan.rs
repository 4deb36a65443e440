//! Packet plans: what a driver must put on a rail, without copying user data.
//!
//! A plan is the packet's bytes in order, as a list of [`Segment`]s: ranges
//! of the plan's own buffer (the packet header, chunk headers, control
//! chunks) and ranges of user memory (the data of eager and rendezvous
//! chunks). A gathering driver hands the segments to a vectored write; a
//! copying one calls [`PacketPlan::gather`].

use std::ops::Range;

use navette_wire::{Chunk, EagerHeader, PacketHeader, RdvDataHeader};

use crate::memory::{self, Memory};
use crate::{MemRef, ReqId, Status};

/// One contiguous piece of a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Bytes of [`PacketPlan::bytes`].
    Local(Range<usize>),
    /// Bytes of user memory.
    User(MemRef),
}

/// A packet to send on one rail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketPlan {
    /// Headers and inline chunks.
    pub bytes: Vec<u8>,
    /// The packet, in order.
    pub segments: Vec<Segment>,
    /// The transfer ids (`send_id`) of the readable rendezvous requests in
    /// this packet ([`navette_wire::RdvRequest::readable`]): the driver
    /// gives the receiver the address of each one's data
    /// ([`crate::Engine::offered_data`]) with the packet. Empty on rails
    /// without [`crate::RailCaps::read_min`].
    pub offers: Vec<u32>,
}

/// A user range named by a plan no longer resolves (its request was cancelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("packet refers to memory {0:?} that is no longer registered")]
pub struct MissingMemory(pub MemRef);

impl PacketPlan {
    /// Total packet length.
    pub fn len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Local(r) => r.len(),
                Segment::User(m) => m.len,
            })
            .sum()
    }

    /// Whether the packet is empty (never true for a plan from the engine).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the whole packet into the start of `out` (at least
    /// [`Self::len`] bytes); returns the packet's length.
    pub fn gather_into(&self, mem: &dyn Memory, out: &mut [u8]) -> Result<usize, MissingMemory> {
        let mut at = 0;
        for segment in &self.segments {
            let bytes = match segment {
                Segment::Local(range) => &self.bytes[range.clone()],
                Segment::User(range) => memory::read(mem, *range).ok_or(MissingMemory(*range))?,
            };
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
        Ok(at)
    }

    /// Copies the whole packet into `out`.
    pub fn gather(&self, mem: &dyn Memory, out: &mut Vec<u8>) -> Result<(), MissingMemory> {
        out.reserve(self.len());
        for segment in &self.segments {
            match segment {
                Segment::Local(range) => out.extend_from_slice(&self.bytes[range.clone()]),
                Segment::User(range) => {
                    out.extend_from_slice(memory::read(mem, *range).ok_or(MissingMemory(*range))?);
                }
            }
        }
        Ok(())
    }
}

/// What completes when a packet has been sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendProgress {
    /// An eager piece: its request completes.
    Piece { req: ReqId, status: Status },
    /// A chunk no request waits for.
    Internal,
    /// Bytes of a rendezvous transfer.
    RdvBytes { send_id: u32, len: usize },
    /// An open packet of the peer at this index of the engine's peers
    /// (see `Engine::stage_tagged`), by number.
    OpenPacket { peer_index: usize, packet: u64 },
}

/// Builds a packet chunk by chunk; strategies push into it.
#[derive(Debug)]
pub struct PacketBuilder {
    plan: PacketPlan,
    chunk_count: u16,
    local_start: usize,
    /// Bytes of user memory pushed: with the plan's own bytes, the body's
    /// length without a walk over the segments (strategies ask after
    /// every chunk).
    user_len: usize,
    progress: Vec<SendProgress>,
}

impl Default for PacketBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PacketBuilder {
    /// An empty packet.
    pub fn new() -> Self {
        let mut bytes = Vec::with_capacity(128);
        bytes.resize(PacketHeader::LEN, 0);
        Self {
            plan: PacketPlan {
                bytes,
                segments: Vec::new(),
                offers: Vec::new(),
            },
            chunk_count: 0,
            local_start: 0,
            user_len: 0,
            progress: Vec::new(),
        }
    }

    /// An empty packet built in the buffers of finished ones (see
    /// [`PlanPool`], which empties their offers), so that the
    /// small-message path does not allocate.
    pub(crate) fn reusing(mut plan: PacketPlan, mut progress: Vec<SendProgress>) -> Self {
        plan.bytes.clear();
        plan.bytes.resize(PacketHeader::LEN, 0);
        plan.segments.clear();
        progress.clear();
        Self {
            plan,
            chunk_count: 0,
            local_start: 0,
            user_len: 0,
            progress,
        }
    }

    /// Gives back the buffers of a packet that ended up empty.
    pub(crate) fn into_parts(self) -> (PacketPlan, Vec<SendProgress>) {
        (self.plan, self.progress)
    }

    /// Number of chunks pushed.
    pub fn chunk_count(&self) -> u16 {
        self.chunk_count
    }

    /// Body bytes pushed so far.
    pub fn body_len(&self) -> usize {
        self.plan.bytes.len() - PacketHeader::LEN + self.user_len
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.chunk_count == 0
    }

    /// Pushes a chunk that carries no user data (request, clear-to-send, ack, credit).
    pub fn push_control(&mut self, chunk: &Chunk<'_>) {
        debug_assert!(!matches!(chunk, Chunk::Eager(_) | Chunk::RdvData(_)));
        chunk.encode(&mut self.plan.bytes);
        if let Chunk::RdvRequest(r) = chunk
            && r.readable
        {
            self.plan.offers.push(r.send_id);
        }
        self.chunk_count += 1;
    }

    pub(crate) fn push_eager(&mut self, header: &EagerHeader, data: MemRef, done: SendProgress) {
        header.encode(&mut self.plan.bytes);
        self.push_user(data);
        self.chunk_count += 1;
        self.progress.push(done);
    }

    pub(crate) fn push_rdv_data(&mut self, header: &RdvDataHeader, data: MemRef, send_id: u32) {
        header.encode(&mut self.plan.bytes);
        self.push_user(data);
        self.chunk_count += 1;
        self.progress.push(SendProgress::RdvBytes {
            send_id,
            len: data.len,
        });
    }

    fn push_user(&mut self, data: MemRef) {
        self.flush_local();
        if data.len > 0 {
            self.plan.segments.push(Segment::User(data));
            self.user_len += data.len;
        }
    }

    fn flush_local(&mut self) {
        let end = self.plan.bytes.len();
        if end > self.local_start {
            self.plan
                .segments
                .push(Segment::Local(self.local_start..end));
            self.local_start = end;
        }
    }

    pub(crate) fn finish(mut self) -> (PacketPlan, Vec<SendProgress>) {
        self.flush_local();
        let body_len = self.body_len();
        debug_assert_eq!(body_len, self.plan.len() - PacketHeader::LEN);
        // The header is encoded past the end, then moved over its
        // placeholder: no temporary buffer.
        let end = self.plan.bytes.len();
        PacketHeader {
            chunk_count: self.chunk_count,
            body_len: u32::try_from(body_len).expect("strategies keep packets below 4 GiB"),
        }
        .encode(&mut self.plan.bytes);
        self.plan.bytes.copy_within(end.., 0);
        self.plan.bytes.truncate(end);
        (self.plan, self.progress)
    }
}

/// Buffers of packets already sent, kept for the next ones: in the steady
/// state building a packet allocates nothing. Drivers give plans back with
/// `Engine::recycle_plan`; the engine keeps what completed packets leave.
#[derive(Debug, Default)]
pub(crate) struct PlanPool {
    plans: Vec<PacketPlan>,
    progress: Vec<Vec<SendProgress>>,
}

impl PlanPool {
    /// Buffers kept of each kind: one packet in flight per rail needs few,
    /// and a burst of large plans must not stay pinned.
    const KEEP: usize = 8;
    /// A plan whose buffers grew above this is not kept (open packets,
    /// see `Engine::stage_tagged`, stay below).
    const KEEP_BYTES: usize = 4 << 10;

    /// A builder in recycled buffers when there are some.
    pub(crate) fn builder(&mut self) -> PacketBuilder {
        match (self.plans.pop(), self.progress.pop()) {
            (Some(plan), Some(progress)) => PacketBuilder::reusing(plan, progress),
            (plan, progress) => {
                plan.into_iter().for_each(|p| self.put_plan(p));
                progress.into_iter().for_each(|p| self.put_progress(p));
                PacketBuilder::new()
            }
        }
    }

    /// A plan to fill, in recycled buffers when there are some (its
    /// contents mean nothing).
    pub(crate) fn take_plan(&mut self) -> PacketPlan {
        self.plans.pop().unwrap_or_else(|| PacketPlan {
            bytes: Vec::new(),
            segments: Vec::with_capacity(1),
            offers: Vec::new(),
        })
    }

    /// Keeps a sent (or unused) plan's buffers.
    pub(crate) fn put_plan(&mut self, mut plan: PacketPlan) {
        if self.plans.len() < Self::KEEP
            && plan.bytes.capacity() <= Self::KEEP_BYTES
            && plan.segments.capacity() <= Self::KEEP_BYTES
        {
            // Whoever takes it next fills bytes and segments, not offers.
            plan.offers.clear();
            self.plans.push(plan);
        }
    }

    /// A progress list to fill, recycled when there is one.
    pub(crate) fn progress_list(&mut self) -> Vec<SendProgress> {
        self.progress.pop().unwrap_or_default()
    }

    /// Keeps a completed packet's progress list.
    pub(crate) fn put_progress(&mut self, progress: Vec<SendProgress>) {
        if self.progress.len() < Self::KEEP && progress.capacity() <= Self::KEEP_BYTES {
            self.progress.push(progress);
        }
    }
}
