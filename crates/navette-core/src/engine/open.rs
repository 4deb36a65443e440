//! Open packets: small messages that share a packet as they are submitted.
//!
//! NewMadeleine's aggregation, for the flow where it pays most: many small
//! non-blocking sends to one peer in a row (an `isend` per segment, per
//! tag, per channel). The window would hold each as a request with its
//! memory registered, and the strategy would gather them into one packet
//! when a rail goes idle. Where the channel's strategy allows it
//! ([`crate::Strategy::stages_small`], `aggregate` does), a small one-piece
//! tagged message is instead encoded at once, its data copied, into the
//! peer's *open packet* ([`Engine::stage_tagged`]): it takes the gate's
//! sequence and message numbers as it would in the window, and no request,
//! registration or window entry is made. The next idle rail to the peer
//! takes the open packet before anything of the windows
//! ([`Engine::poll_transmit`]): the receiver sees a packet of the kind
//! the aggregate strategy builds from the windows (small messages of
//! several gates together, each gate's in order), bounded by
//! [`OPEN_MOST_CHUNKS`] and [`OPEN_MOST_BODY`]. While anything waits in
//! one of the peer's windows, small messages join the windows instead, so
//! that a stream of them never holds the windows back.
//!
//! An open packet closes when it holds [`OPEN_MOST_CHUNKS`] chunks or
//! [`OPEN_MOST_BODY`] bytes (within the peer's smallest packet); closed
//! ones wait, in order, for the next rails. A driver whose transfer is
//! done once written (a copy into shared memory) may also write them at
//! once, oldest first ([`Engine::send_open_now`]): all of them for a
//! thread about to wait for them, or the closed ones alone as soon as one
//! closes, so that the receiver lands a full packet while the sender fills
//! the next. A staged message has left once its packet
//! was sent, its rail's send completed ([`Engine::staged_outcome`]); the
//! caller knows it by its packet number ([`StagedSend`]). Its data was
//! copied: the caller's memory is free as soon as it is staged.

use std::collections::VecDeque;

use smallvec::SmallVec;

use navette_wire::{EagerHeader, PacketHeader};

use super::Engine;
use crate::plan::{PacketPlan, Segment, SendProgress};
use crate::{ChannelId, RailId, Rank, RequestError};

/// Most chunks of an open packet: a receiver handles a packet of up to
/// this many eager chunks in one step.
pub const OPEN_MOST_CHUNKS: usize = 16;

/// Most body bytes of an open packet (lowered to the peer's smallest
/// packet).
pub const OPEN_MOST_BODY: usize = 2 << 10;

/// Most data bytes of one message put in an open packet: a larger one
/// costs more to copy twice (in, then out to the rail) than its own
/// packet does.
pub const OPEN_MOST_PIECE: usize = 512;

/// Which of a peer's waiting open packets [`Engine::send_open_now`]
/// writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenToSend {
    /// All of them, the one taking messages too: for a thread about to
    /// wait for them.
    All,
    /// The closed ones alone (full, they take no more messages): for a
    /// thread whose message closed one, that goes on sending.
    Closed,
}

/// A message put in an open packet: it has left once packet `packet` of
/// `peer` has (see [`Engine::staged_outcome`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedSend {
    /// The destination.
    pub peer: Rank,
    /// Where the engine keeps the destination's state (looked up without
    /// hashing).
    peer_index: usize,
    /// The number of its packet among the peer's open packets.
    pub packet: u64,
    /// Whether it opened its packet (nothing of the peer's waited before
    /// it): whoever sends packets must be told there is one.
    pub opened: bool,
    /// Whether it closed the packet before its own, which may leave now.
    pub closed: bool,
}

/// The largest body an open packet to a peer may have: within the
/// smallest packet of its open rails (`rails`, ids into `all`); `None` if
/// it has none.
fn open_max_body(rails: &[RailId], all: &[super::Rail]) -> Option<usize> {
    rails
        .iter()
        .map(|r| &all[r.0 as usize])
        .filter(|r| !r.closed)
        .map(|r| r.caps.max_packet)
        .min()
        .map(|max| max.min(OPEN_MOST_BODY))
}

/// Takes the peer at `peer_index` out of `staged_peers` (the peers with
/// open packets waiting, [`Engine::staged_peer`]): it has none any more.
pub(super) fn unstage_peer(staged_peers: &mut Vec<usize>, peer_index: usize) {
    if let Some(nth) = staged_peers.iter().position(|&p| p == peer_index) {
        staged_peers.swap_remove(nth);
    }
}

/// The oldest waiting open packet of the peer at `peer_index` (`open`) has
/// been handed to a rail or written: its number, counted as left; the peer
/// leaves `staged_peers` once nothing of it waits.
fn packet_left(open: &mut OpenPackets, staged_peers: &mut Vec<usize>, peer_index: usize) -> u64 {
    let packet = open.left;
    open.left += 1;
    if !open.is_waiting() {
        unstage_peer(staged_peers, peer_index);
    }
    packet
}

/// Writes the packet header of an open packet of `chunks` chunks, all of
/// `bytes`, into the room left for it at the start.
fn seal(bytes: &mut [u8], chunks: u16) {
    let body_len = bytes.len() - PacketHeader::LEN;
    let header = PacketHeader {
        chunk_count: chunks,
        body_len: u32::try_from(body_len).expect("open packets stay below OPEN_MOST_BODY"),
    };
    bytes[..PacketHeader::LEN].copy_from_slice(&header.to_bytes());
}

/// A peer's open packets.
#[derive(Debug, Default)]
pub(super) struct OpenPackets {
    /// The packet taking messages: its header's room, then its chunks,
    /// then room for more up to its largest body (empty when none). A
    /// buffer keeps its length from packet to packet, so that messages
    /// are written in place without clearing it first.
    bytes: Vec<u8>,
    /// Bytes at the start of `bytes` that the packet takes so far.
    used: usize,
    chunks: u16,
    /// A buffer for the next packet to open, left by the last packet
    /// handed to a rail ([`Self::keep`]): while messages are staged as
    /// fast as packets leave, no packet allocates.
    spare: Vec<u8>,
    /// Its largest body, read from the peer's rails when it opened.
    max_body: usize,
    /// Packets closed and waiting for a rail, oldest first: each one's
    /// buffer, the bytes it takes there, and its chunk count.
    closed: VecDeque<(Vec<u8>, usize, u16)>,
    /// Open packets handed to rails so far: packet `n` has left once
    /// `left > n` and it is not in `in_flight`.
    left: u64,
    /// Packets handed to rails whose sending has not completed (one per
    /// rail at most); a lost peer's stay here.
    in_flight: SmallVec<[u64; 2]>,
    /// The packet of each staged message whose request was dropped before
    /// it left: lost with its peer, nobody would hear of it otherwise.
    detached: Vec<u64>,
}

impl OpenPackets {
    /// Whether a packet waits for a rail.
    pub(super) fn is_waiting(&self) -> bool {
        self.chunks > 0 || !self.closed.is_empty()
    }

    /// The number of the packet taking messages.
    fn current(&self) -> u64 {
        self.left + self.closed.len() as u64
    }

    /// Closes the packet taking messages, if it has any: the spare buffer,
    /// if any, takes the next messages.
    fn close(&mut self) {
        if self.chunks > 0 {
            let next = std::mem::take(&mut self.spare);
            let bytes = std::mem::replace(&mut self.bytes, next);
            self.closed.push_back((bytes, self.used, self.chunks));
            self.chunks = 0;
        }
    }

    /// Keeps `buffer` (its bytes mean nothing) for the next packets: as
    /// the buffer taking messages if that one has none, else as the spare
    /// if there is none; else drops it.
    fn keep(&mut self, buffer: Vec<u8>) {
        if self.bytes.capacity() == 0 {
            // No room was reserved, so no message was staged in it.
            self.bytes = buffer;
        } else if self.spare.capacity() == 0 {
            self.spare = buffer;
        }
    }

    /// Packet `packet` has left: the messages of it whose requests were
    /// dropped can no longer be lost.
    fn forget_detached(&mut self, packet: u64) {
        if !self.detached.is_empty() {
            self.detached.retain(|n| *n != packet);
        }
    }

    /// Drops every waiting packet (their peer is lost), and the buffers
    /// kept for the next ones (no packet will go to it again): whether any
    /// waited, and how many staged messages nobody waits for were lost.
    pub(super) fn drop_all(&mut self) -> (bool, usize) {
        let waited = self.is_waiting();
        self.bytes = Vec::new();
        self.spare = Vec::new();
        self.chunks = 0;
        self.closed = VecDeque::new();
        (waited, std::mem::take(&mut self.detached).len())
    }
}

impl Engine {
    /// Puts the one-piece tagged message `data` to `peer` on `channel` in
    /// the peer's open packet, if its channel's strategy stages small
    /// messages, nothing waits in any of the peer's windows (before it in
    /// its gate's, or to leave after the open packets), it is at most
    /// [`OPEN_MOST_PIECE`] bytes and eager, and the peer is reachable: the
    /// message then takes its gate's numbers, its data is copied, and it
    /// leaves with the packet (see [`StagedSend`]). `None` sends it the
    /// usual way.
    // Always inlined: `Node::isend`'s fast path and its usual path both
    // call it, and LLVM then kept it out of line, which ran series of
    // small sends 5-11 % slower (docs/profiling.md, stop 38).
    #[inline(always)]
    pub fn stage_tagged(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        data: &[u8],
    ) -> Option<StagedSend> {
        if data.len() > OPEN_MOST_PIECE {
            return None;
        }
        // At most OPEN_MOST_PIECE.
        let len = data.len() as u32;
        // A peer that never had a rail gets no gate here: the usual path
        // refuses the message without making one.
        let gate = match self.cached_gate(channel, peer) {
            Some(gate) => gate,
            None if self.peers.contains_key(&peer) => self.gate(channel, peer),
            None => return None,
        };
        let g = &self.gates[gate.0];
        let peer_index = g.peer_index?;
        if !g.stages || !g.window.is_empty() || data.len() >= g.rdv_threshold {
            return None;
        }
        let (_, p) = self
            .peers
            .get_index_mut(peer_index)
            .expect("peers are never removed");
        // Open packets leave before the windows: while anything waits in
        // one of the peer's windows, small messages join the windows too,
        // so that the open packets drain and the windows get their turn.
        if p.windows_busy {
            let gates = &self.gates;
            if p.gates.iter().any(|g| !gates[g.0].window.is_empty()) {
                return None;
            }
            p.windows_busy = false;
        }
        let open = &mut p.open;
        let chunk_len = EagerHeader::LEN + data.len();
        let closed = open.chunks > 0
            && (usize::from(open.chunks) >= OPEN_MOST_CHUNKS
                || open.used - PacketHeader::LEN + chunk_len > open.max_body);
        if closed {
            open.close();
        }
        if open.chunks == 0 {
            // The peer's rails are read when a packet opens; its room is
            // made then, so that messages are written in place.
            open.max_body = open_max_body(&p.rails, &self.rails)?;
            let room = PacketHeader::LEN + open.max_body;
            if open.bytes.len() < room {
                open.bytes.resize(room, 0);
            }
            open.used = PacketHeader::LEN;
        }
        if chunk_len > open.max_body {
            return None;
        }
        let opened = open.chunks == 0 && open.closed.is_empty();
        if opened {
            self.staged_peers.push(peer_index);
        }
        let packet = open.current();
        let g = &mut self.gates[gate.0];
        let header = g.next_tagged(tag, len);
        let (head, rest) = open.bytes[open.used..].split_at_mut(EagerHeader::LEN);
        head.copy_from_slice(&header.to_bytes());
        navette_wire::copy_to_start(rest, data);
        open.used += chunk_len;
        open.chunks += 1;
        // A packet counts once for each gate it carries chunks of.
        if g.open_counted != packet + 1 {
            g.open_counted = packet + 1;
            g.stats.packets_sent += 1;
        }
        g.stats.chunks_sent += 1;
        g.stats.bytes_sent += chunk_len as u64;
        g.stats.bytes_copied += u64::from(len);
        Some(StagedSend {
            peer,
            peer_index,
            packet,
            opened,
            closed,
        })
    }

    /// Whether the message staged as `staged` has left: `Some(Ok)` once
    /// its packet was sent (its rail's send completed), `Some(Err)` if its
    /// peer was lost before, `None` while it waits.
    pub fn staged_outcome(&self, staged: StagedSend) -> Option<Result<(), RequestError>> {
        // Peers are never removed: the index stays theirs.
        if self.peers.get_index(staged.peer_index).is_none() {
            return Some(Err(RequestError::PeerUnreachable { peer: staged.peer }));
        }
        if self.staged_left(staged) {
            Some(Ok(()))
        } else if !self.is_reachable(staged.peer) {
            Some(Err(RequestError::PeerUnreachable { peer: staged.peer }))
        } else {
            None
        }
    }

    /// The oldest open packet of `peer` as a plan, closed and handed out,
    /// if one waits, with what completes when it is sent.
    pub(super) fn take_open_plan(&mut self, peer: Rank) -> Option<(PacketPlan, Vec<SendProgress>)> {
        let (peer_index, _, p) = self.peers.get_full_mut(&peer)?;
        let open = &mut p.open;
        if open.closed.is_empty() {
            open.close();
        }
        let (mut bytes, used, chunks) = open.closed.pop_front()?;
        bytes.truncate(used);
        let packet = packet_left(open, &mut self.staged_peers, peer_index);
        open.in_flight.push(packet);
        seal(&mut bytes, chunks);
        let mut plan = self.pool.take_plan();
        let old = std::mem::replace(&mut plan.bytes, bytes);
        // The plan's old buffer takes the next messages, or the ones after.
        open.keep(old);
        plan.segments.clear();
        plan.segments.push(Segment::Local(0..plan.bytes.len()));
        let mut progress = self.pool.progress_list();
        progress.push(SendProgress::OpenPacket { peer_index, packet });
        Some((plan, progress))
    }

    /// Whether the message staged as `staged` has left (its packet was
    /// sent): [`Self::staged_outcome`]'s `Some(Ok)`, for a caller that
    /// takes many at once.
    #[inline]
    pub fn staged_left(&self, staged: StagedSend) -> bool {
        self.peers
            .get_index(staged.peer_index)
            .is_some_and(|(_, p)| {
                p.open.left > staged.packet && !p.open.in_flight.contains(&staged.packet)
            })
    }

    /// The number below which every open packet of `staged`'s peer has
    /// left: a message staged in packet `n` of that peer has left if `n`
    /// is below it, for a caller that checks many to one peer. A packet at
    /// or above it may have left too (over another rail, before an older
    /// one): [`Self::staged_left`] tells exactly.
    #[inline]
    pub fn staged_left_below(&self, staged: StagedSend) -> u64 {
        // Packets in flight were handed out before `left` was counted
        // past them: the lowest of them, if any, bounds the packets left.
        self.peers.get_index(staged.peer_index).map_or(0, |(_, p)| {
            p.open.in_flight.iter().fold(p.open.left, |n, &f| n.min(f))
        })
    }

    /// Whether small messages wait in an open packet, to any peer.
    #[inline]
    pub fn has_staged(&self) -> bool {
        !self.staged_peers.is_empty()
    }

    /// Whether a closed open packet (full, see [`Self::stage_tagged`])
    /// still waits, to any peer: one that [`Self::send_open_now`] could
    /// not write (a full ring, a busy rail, a peer its driver does not
    /// reach) leaves with a round of progress instead.
    pub fn closed_waiting(&self) -> bool {
        self.staged_peers.iter().any(|&index| {
            self.peers
                .get_index(index)
                .is_some_and(|(_, p)| !p.open.closed.is_empty())
        })
    }

    /// The `nth` of the peers whose small messages wait in open packets,
    /// in no particular order, if there are more than `nth`: a driver that
    /// writes open packets at once ([`Self::send_open_now`]) visits these
    /// alone, however many peers the job has. Writing all of a peer's
    /// packets takes it out of the list (the last one takes its place).
    #[inline]
    pub fn staged_peer(&self, nth: usize) -> Option<Rank> {
        let index = *self.staged_peers.get(nth)?;
        self.peers.get_index(index).map(|(&peer, _)| peer)
    }

    /// Sends the open packets of `rail`'s peer at once, oldest first, for
    /// a driver whose transfer is done once written (a copy into shared
    /// memory): `which` of them ([`OpenToSend`]). While the rail is open
    /// and idle, each packet's bytes are given to `write`, which returns
    /// whether it took them (`false`: no room now, the packet waits for
    /// the usual round, [`Self::poll_transmit`]). A packet taken has left:
    /// its messages' sends are complete ([`Self::staged_outcome`]).
    /// Returns whether none of `which` waits any more.
    pub fn send_open_now(
        &mut self,
        rail: RailId,
        which: OpenToSend,
        mut write: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        let Some(r) = self.rails.get(rail.0 as usize) else {
            return false;
        };
        if r.closed || r.in_flight.is_some() {
            return false;
        }
        let peer_index = r.peer_index;
        let Some((_, p)) = self.peers.get_index_mut(peer_index) else {
            return false;
        };
        let open = &mut p.open;
        let waits = |open: &OpenPackets| match which {
            OpenToSend::All => open.is_waiting(),
            OpenToSend::Closed => !open.closed.is_empty(),
        };
        while waits(open) {
            // The oldest closed packet, else the one taking messages, sealed
            // where it lies: one the writer refuses stays as it was (the
            // open one goes on taking messages).
            let (bytes, used, chunks) = match open.closed.front_mut() {
                Some((bytes, used, chunks)) => (bytes, *used, *chunks),
                None => (&mut open.bytes, open.used, open.chunks),
            };
            let packet = &mut bytes[..used];
            seal(packet, chunks);
            if !write(packet) {
                return false;
            }
            match open.closed.pop_front() {
                Some((bytes, ..)) => open.keep(bytes),
                // Its buffer, room and all, takes the next messages.
                None => open.chunks = 0,
            }
            let packet = packet_left(open, &mut self.staged_peers, peer_index);
            open.forget_detached(packet);
        }
        true
    }

    /// Open packet `packet` of the peer at `peer_index` was sent.
    pub(super) fn open_packet_sent(&mut self, peer_index: usize, packet: u64) {
        if let Some((_, p)) = self.peers.get_index_mut(peer_index) {
            p.open.in_flight.retain(|n| *n != packet);
            p.open.forget_detached(packet);
        }
    }

    /// Forgets a staged message whose request was dropped: it still
    /// leaves with its packet, and if its peer is lost first it counts
    /// among [`Self::lost_detached_staged`].
    pub fn detach_staged(&mut self, staged: StagedSend) {
        if self.staged_outcome(staged).is_some() {
            return;
        }
        if let Some((_, p)) = self.peers.get_index_mut(staged.peer_index) {
            p.open.detached.push(staged.packet);
        }
    }

    /// Staged messages whose requests were dropped and that were lost with
    /// their peer, since the start (each was logged as its peer was lost).
    pub fn lost_detached_staged(&self) -> u64 {
        self.lost_detached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_peers_open_packets_free_their_buffers() {
        let mut open = OpenPackets {
            bytes: vec![1; 64],
            chunks: 2,
            spare: Vec::with_capacity(2048),
            max_body: 2048,
            detached: vec![3],
            ..OpenPackets::default()
        };
        open.close();
        open.bytes = vec![2; 32];
        open.chunks = 1;
        let (waited, lost) = open.drop_all();
        assert!(waited);
        assert_eq!(lost, 1);
        assert!(!open.is_waiting());
        let held = open.bytes.capacity() + open.spare.capacity() + open.closed.capacity();
        assert_eq!(held, 0, "buffers kept after the peer was lost");
    }
}
