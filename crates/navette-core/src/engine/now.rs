//! Small tagged messages at once: sent when nothing waits for their rail,
//! received when nothing waits before their receive.
//!
//! The window exists to optimize a flow of requests while rails are busy.
//! When a rail is idle and its gate's window empty, a one-piece eager
//! message has nothing to be scheduled against: the driver may ask
//! [`Engine::can_send_now`], then have [`Engine::send_tagged_now`] write the
//! packet straight into its transfer buffer (a shared-memory cell). The
//! message takes the gate's next message and sequence numbers like any
//! other, so the receiver sees no difference; the sender gets no request
//! (the caller's send is done once its transfer is: a blocking send
//! returns, a non-blocking one is complete from its start).
//!
//! On the receive side, a blocking tagged receive with nothing before it on
//! its channel (no posted receive, no unexpected message) may wait outside
//! the engine as a [`RecvNow`]: the driver shows each packet to
//! [`Engine::recv_now`] first, which lands a one-piece eager message that
//! the receive accepts straight in its destination — no request, posted
//! entry, completion event or message state. Any packet that could match
//! the receive otherwise asks for it to be posted the usual way
//! ([`Engine::recv_tagged`]) before the packet is handled.

use std::ops::Range;

use navette_wire::{
    Chunk, Eager, EagerHeader, LONE_HEADER_LEN, Packet, PacketHeader, PieceFlags, ReceiveMode,
    SendMode, encode_lone_header,
};

use super::{Engine, Gate, GateId, OutMsg, WholeMessage};
use crate::{ChannelId, RailId, Rank, Source, Status, TagMatch};

/// Most pieces of a message sent at once ([`Engine::can_send_message_now`]);
/// a packet of one message of up to this many pieces is also handled in one
/// step on arrival.
pub const MOST_PIECES_AT_ONCE: usize = 8;

/// A blocking tagged receive waiting outside the engine (see
/// [`Engine::recv_now`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvNow {
    /// The channel.
    pub channel: ChannelId,
    /// The accepted senders.
    pub source: Source,
    /// The accepted tags.
    pub tag: TagMatch,
}

/// One piece of a message sent at once ([`Engine::send_message_now`]).
#[derive(Clone, Copy, Debug)]
pub struct NowPiece<'a> {
    /// Its bytes.
    pub data: &'a [u8],
    /// Its send mode.
    pub send: SendMode,
    /// Its receive mode.
    pub recv: ReceiveMode,
}

/// Where the bytes of a packet sent at once come from, in order
/// ([`Engine::gather_message_now`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NowPart {
    /// This range of the packet buffer: headers and copied pieces.
    Buffer(Range<usize>),
    /// The data of this piece (an index into the pieces), read where it
    /// lies.
    Piece(usize),
}

/// The parts of a packet sent at once, in order
/// ([`Engine::gather_message_now`]): at most a buffer range around each
/// piece left where it lies.
#[derive(Clone, Debug, Default)]
pub struct NowGather {
    parts: [NowPart; Self::MOST_PARTS],
    count: usize,
}

impl Default for NowPart {
    fn default() -> Self {
        Self::Buffer(0..0)
    }
}

impl NowGather {
    /// Most parts of a packet: a buffer range around each piece left out.
    pub const MOST_PARTS: usize = 2 * MOST_PIECES_AT_ONCE + 1;

    /// The parts, in the packet's order.
    pub fn parts(&self) -> &[NowPart] {
        &self.parts[..self.count]
    }

    fn push(&mut self, part: NowPart) {
        self.parts[self.count] = part;
        self.count += 1;
    }
}

/// What [`Engine::recv_now`] made of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvNowOutcome {
    /// The receive's message landed in its destination: the receive is
    /// complete and the packet handled.
    Landed(Status),
    /// The packet cannot match the receive: handle it with
    /// [`Engine::handle_packet`]; the receive keeps waiting.
    Unrelated,
    /// The packet might match the receive in a way only the usual path
    /// handles: post the receive with [`Engine::recv_tagged`], then handle
    /// the packet with [`Engine::handle_packet`].
    Post,
}

/// What [`Engine::recv_whole_now`] made of a packet.
#[derive(Debug)]
pub enum WholeNowOutcome {
    /// The packet was the receive's whole message, now out of the engine:
    /// the packet is handled.
    Landed(WholeMessage),
    /// As [`RecvNowOutcome::Unrelated`].
    Unrelated,
    /// As [`RecvNowOutcome::Post`]: post the receive with
    /// [`Engine::recv_begin`] first.
    Post,
}

impl Engine {
    /// Length of the packet [`Self::send_tagged_now`] writes for `len`
    /// bytes of data.
    #[inline]
    pub const fn tagged_packet_len(len: usize) -> usize {
        PacketHeader::LEN + EagerHeader::LEN + len
    }

    /// Length of the lone packet [`Self::send_lone_now`] writes for `len`
    /// bytes of data.
    #[inline]
    pub const fn lone_packet_len(len: usize) -> usize {
        LONE_HEADER_LEN + len
    }

    /// Bytes of the buffer [`Self::gather_tagged_now`] writes for `len`
    /// bytes of data with `copy_max`: the headers, and the data if it is
    /// at most `copy_max` bytes.
    #[inline]
    pub const fn tagged_buffer_len(len: usize, copy_max: usize) -> usize {
        Self::tagged_packet_len(if len <= copy_max { len } else { 0 })
    }

    /// Whether a one-piece tagged message of `len` bytes to `peer` on
    /// `channel` may leave at once on `rail`: the rail leads to `peer`, is
    /// open and idle, the gate's window is empty, and the message is eager
    /// and fits the rail's packets.
    #[inline]
    pub fn can_send_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        rail: RailId,
        len: usize,
    ) -> bool {
        let Some(max_packet) = self.idle_rail_max_packet(rail, peer) else {
            return false;
        };
        let gate = self.gate(channel, peer);
        let g = &self.gates[gate.0];
        g.window.is_empty()
            && len < g.rdv_threshold
            && EagerHeader::LEN + len <= max_packet
            && u32::try_from(len).is_ok()
    }

    /// Whether small messages to `peer` wait in an open packet.
    #[inline]
    fn has_open_packet(&self, peer: Rank) -> bool {
        !self.staged_peers.is_empty() && self.peers.get(&peer).is_some_and(|p| p.open.is_waiting())
    }

    /// Writes the packet of a one-piece tagged message into `out` (exactly
    /// [`Self::tagged_packet_len`]`(data.len())` bytes), after
    /// [`Self::can_send_now`] said yes for it. The message has left once the
    /// caller's transfer of `out` has.
    ///
    /// # Panics
    /// If `out` has another length (a caller bug).
    #[inline]
    pub fn send_tagged_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        data: &[u8],
        out: &mut [u8],
    ) {
        self.write_tagged_now(channel, peer, tag, data, out, None);
    }

    /// [`Self::send_tagged_now`] in the lone form (16 bytes shorter: see
    /// [`navette_wire::LONE`]), for a driver whose transport frames each
    /// packet, of a message whose data is `parts` back to back, each
    /// copied straight into `out`: exactly
    /// [`Self::lone_packet_len`]`(len)` bytes, `len` the parts' total.
    ///
    /// # Panics
    /// If `out` has another length (a caller bug).
    #[inline]
    pub fn send_lone_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        parts: &[&[u8]],
        out: &mut [u8],
    ) {
        let gate = self.gate(channel, peer);
        self.write_parts_now(gate, tag, parts, out, LONE_HEADER_LEN, |eager, _, head| {
            encode_lone_header(eager, head);
        });
    }

    /// [`Self::gather_tagged_now`] of a message whose data is `parts` back
    /// to back, all copied into `buffer` (exactly
    /// [`Self::tagged_packet_len`]`(len)` bytes, `len` the parts' total),
    /// for a driver that writes a packet's bytes to a stream.
    ///
    /// # Panics
    /// If `buffer` has another length (a caller bug).
    pub fn gather_parts_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        parts: &[&[u8]],
        buffer: &mut [u8],
    ) -> NowGather {
        const HEAD: usize = PacketHeader::LEN + EagerHeader::LEN;
        let gate = self.gate(channel, peer);
        self.write_parts_now(gate, tag, parts, buffer, HEAD, |eager, len, head| {
            let packet = PacketHeader {
                chunk_count: 1,
                body_len: EagerHeader::LEN as u32 + len,
            };
            let (packet_head, eager_head) = head.split_at_mut(PacketHeader::LEN);
            packet_head.copy_from_slice(&packet.to_bytes());
            eager_head.copy_from_slice(&eager.to_bytes());
        });
        let mut gather = NowGather::default();
        gather.push(NowPart::Buffer(0..buffer.len()));
        gather
    }

    /// The packet of a one-piece tagged message on `gate` whose data is
    /// `parts`, into `out`: its headers (`head_len` bytes, written by
    /// `write_head` given the message's eager header and length), then the
    /// parts, copied.
    #[inline]
    fn write_parts_now(
        &mut self,
        gate: GateId,
        tag: u64,
        parts: &[&[u8]],
        out: &mut [u8],
        head_len: usize,
        write_head: impl FnOnce(&EagerHeader, u32, &mut [u8]),
    ) {
        let (head, mut body) = out.split_at_mut(head_len);
        let len: usize = parts.iter().map(|part| part.len()).sum();
        assert_eq!(body.len(), len, "packet length");
        let g = &mut self.gates[gate.0];
        let len32 = u32::try_from(len).expect("checked by can_send_now");
        write_head(&g.next_tagged(tag, len32), len32, head);
        for part in parts {
            let (room, rest) = body.split_at_mut(part.len());
            room.copy_from_slice(part);
            body = rest;
        }
        g.stats.packets_sent += 1;
        g.stats.chunks_sent += 1;
        // As the full form's body: the chunk.
        g.stats.bytes_sent += (EagerHeader::LEN + len) as u64;
    }

    /// [`Self::send_tagged_now`] for a driver that gathers: data of more
    /// than `copy_max` bytes is not copied into `buffer` (exactly
    /// [`Self::tagged_buffer_len`] bytes), which then holds the headers
    /// alone; the returned [`NowGather`] says how the packet is made of
    /// the buffer and the data (piece 0).
    ///
    /// # Panics
    /// If `buffer` has another length (a caller bug).
    pub fn gather_tagged_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        data: &[u8],
        copy_max: usize,
        buffer: &mut [u8],
    ) -> NowGather {
        let mut gather = NowGather::default();
        self.write_tagged_now(
            channel,
            peer,
            tag,
            data,
            buffer,
            Some((&mut gather, copy_max)),
        );
        gather
    }

    /// The packet of a tagged message sent at once, into `buffer`; with a
    /// gather and its copy bound, data above the bound is left out of the
    /// buffer and the parts go into the gather.
    #[inline]
    fn write_tagged_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        data: &[u8],
        buffer: &mut [u8],
        gather: Option<(&mut NowGather, usize)>,
    ) {
        let copy_max = gather
            .as_ref()
            .map_or(usize::MAX, |&(_, copy_max)| copy_max);
        let copied = data.len() <= copy_max;
        let buffered = Self::tagged_buffer_len(data.len(), copy_max);
        assert_eq!(buffer.len(), buffered, "packet buffer length");
        let gate = self.gate(channel, peer);
        let g = &mut self.gates[gate.0];
        let len = u32::try_from(data.len()).expect("checked by can_send_now");
        let packet = PacketHeader {
            chunk_count: 1,
            body_len: EagerHeader::LEN as u32 + len,
        };
        let eager = g.next_tagged(tag, len);
        let (head, rest) = buffer.split_at_mut(PacketHeader::LEN);
        let (eager_head, body) = rest.split_at_mut(EagerHeader::LEN);
        head.copy_from_slice(&packet.to_bytes());
        eager_head.copy_from_slice(&eager.to_bytes());
        if copied {
            body.copy_from_slice(data);
        }
        if let Some((gather, _)) = gather {
            gather.push(NowPart::Buffer(0..buffered));
            if !copied {
                gather.push(NowPart::Piece(0));
            }
        }
        g.stats.packets_sent += 1;
        g.stats.chunks_sent += 1;
        g.stats.bytes_sent += u64::from(packet.body_len);
    }

    /// Length of the packet [`Self::send_message_now`] writes for
    /// `pieces`.
    pub fn message_packet_len(pieces: &[NowPiece<'_>]) -> usize {
        pieces.iter().fold(PacketHeader::LEN, |sum, p| {
            sum + EagerHeader::LEN + p.data.len()
        })
    }

    /// Whether the whole message `out`, not started, made of `pieces`, may
    /// leave at once on `rail` in one packet: as [`Self::can_send_now`] for
    /// a tagged message, every piece eager and the packet within the
    /// rail's.
    #[inline]
    pub fn can_send_message_now(
        &mut self,
        out: &OutMsg,
        rail: RailId,
        pieces: &[NowPiece<'_>],
    ) -> bool {
        let body = Self::message_packet_len(pieces) - PacketHeader::LEN;
        self.gate_if_now(out, rail, pieces.len(), body)
            .is_some_and(|g| pieces.iter().all(|p| p.data.len() < g.rdv_threshold))
    }

    /// The gate of the whole message `out` if a packet of its `count`
    /// chunks and `body` bytes may leave at once on `rail`: the message
    /// not started, of at most [`MOST_PIECES_AT_ONCE`] pieces, the rail
    /// idle (see [`Self::idle_rail_max_packet`]) and the packet within
    /// its own, the gate's window empty. The caller checks the pieces.
    #[inline]
    pub(super) fn gate_if_now(
        &self,
        out: &OutMsg,
        rail: RailId,
        count: usize,
        body: usize,
    ) -> Option<&Gate> {
        if out.started() || count == 0 || count > MOST_PIECES_AT_ONCE {
            return None;
        }
        let max_packet = self.idle_rail_max_packet(rail, out.peer())?;
        let g = &self.gates[out.gate.0];
        let fits = body <= max_packet && u32::try_from(body).is_ok();
        (g.window.is_empty() && fits).then_some(g)
    }

    /// The largest packet `rail` takes, if it leads to `peer` and is open
    /// and idle: a packet may then go on it at once.
    #[inline]
    pub(super) fn idle_rail_max_packet(&self, rail: RailId, peer: Rank) -> Option<usize> {
        let r = self.rails.get(rail.0 as usize)?;
        let idle = r.peer == peer && !r.closed && r.in_flight.is_none();
        // Staged messages to the peer leave first (with the next round).
        (idle && !self.has_open_packet(peer)).then_some(r.caps.max_packet)
    }

    /// Writes the packet of the whole message `out` into `packet` (exactly
    /// [`Self::message_packet_len`] bytes), after
    /// [`Self::can_send_message_now`] said yes for it: its pieces take the
    /// gate's sequence numbers as if submitted one by one, and the message
    /// has left once the caller's transfer of `packet` has. No request is
    /// made. SAFER pieces are counted as copied: the message layer copied
    /// them when they were packed.
    ///
    /// # Panics
    /// If `packet` has another length, or `out` was started (caller bugs).
    pub fn send_message_now(
        &mut self,
        out: &mut OutMsg,
        pieces: &[NowPiece<'_>],
        packet: &mut [u8],
    ) {
        self.write_message_now(out, pieces, packet, None);
    }

    /// Bytes of the buffer [`Self::gather_message_now`] writes for `pieces`
    /// with `copy_max`: the packet's headers and every piece of at most
    /// `copy_max` bytes.
    pub fn message_buffer_len(pieces: &[NowPiece<'_>], copy_max: usize) -> usize {
        pieces.iter().fold(PacketHeader::LEN, |sum, p| {
            let copied = if p.data.len() <= copy_max {
                p.data.len()
            } else {
                0
            };
            sum + EagerHeader::LEN + copied
        })
    }

    /// [`Self::send_message_now`] for a driver that gathers: the pieces of
    /// more than `copy_max` bytes are not copied into `buffer` (exactly
    /// [`Self::message_buffer_len`] bytes), which holds the rest of the
    /// packet; the returned [`NowGather`] says in which order the buffer's
    /// ranges and those pieces make the packet. The message has left once
    /// the caller's transfer of all of them has.
    ///
    /// # Panics
    /// If `buffer` has another length, `out` was started, or there are more
    /// than [`MOST_PIECES_AT_ONCE`] pieces (caller bugs:
    /// [`Self::can_send_message_now`] refuses such a message).
    pub fn gather_message_now(
        &mut self,
        out: &mut OutMsg,
        pieces: &[NowPiece<'_>],
        copy_max: usize,
        buffer: &mut [u8],
    ) -> NowGather {
        let mut gather = NowGather::default();
        self.write_message_now(out, pieces, buffer, Some((&mut gather, copy_max)));
        gather
    }

    /// The packet of the whole message `out` sent at once, into `buffer`;
    /// with a gather and its copy bound, pieces above the bound are left
    /// out of the buffer and the parts go into the gather.
    fn write_message_now(
        &mut self,
        out: &mut OutMsg,
        pieces: &[NowPiece<'_>],
        buffer: &mut [u8],
        mut gather: Option<(&mut NowGather, usize)>,
    ) {
        assert!(!out.started(), "a message sent at once was not started");
        let packet_len = Self::message_packet_len(pieces);
        let buffered = match &gather {
            Some((_, copy_max)) => Self::message_buffer_len(pieces, *copy_max),
            None => packet_len,
        };
        assert_eq!(buffer.len(), buffered, "packet buffer length");
        let body_len = packet_len - PacketHeader::LEN;
        let g = &mut self.gates[out.gate.0];
        let count = pieces.len();
        write_packet_header(buffer, count, body_len);
        // The buffer's range not yet in `gather` starts here; it ends at `at`.
        let mut run = 0;
        let mut at = PacketHeader::LEN;
        for (i, piece) in pieces.iter().enumerate() {
            let eager = now_eager_header(g, out, i, count, piece);
            buffer[at..at + EagerHeader::LEN].copy_from_slice(&eager.to_bytes());
            at += EagerHeader::LEN;
            match &mut gather {
                Some((gather, copy_max)) if piece.data.len() > *copy_max => {
                    gather.push(NowPart::Buffer(run..at));
                    gather.push(NowPart::Piece(i));
                    run = at;
                }
                _ => {
                    buffer[at..at + piece.data.len()].copy_from_slice(piece.data);
                    at += piece.data.len();
                }
            }
        }
        if let Some((gather, _)) = gather
            && run < at
        {
            gather.push(NowPart::Buffer(run..at));
        }
        count_sent_now(g, count, body_len, pieces);
        out.started = true;
        out.ended = true;
    }

    /// Whether a tagged receive on `channel` from `source` may wait outside
    /// the engine ([`Self::recv_now`]): nothing is posted or unexpected on
    /// the channel, so nothing received so far could be matched before it,
    /// and its source is not known to be lost.
    #[inline]
    pub fn can_recv_now(&self, channel: ChannelId, source: Source) -> bool {
        let quiet = self
            .find_channel(channel)
            .is_none_or(|ch| ch.posted.is_empty() && ch.unexpected.is_empty());
        quiet && !self.source_is_lost(source)
    }

    /// Shows a packet received on `rail` to a receive waiting outside the
    /// engine, which [`Self::can_recv_now`] allowed. A packet made of one
    /// in-order eager message of one piece that `want` accepts and that
    /// fits lands at the start of `dest` (which the message may not fill),
    /// as the usual path would have landed it: it takes the gate's next
    /// sequence number and completes the receive. Otherwise see
    /// [`RecvNowOutcome`]. The receive's memory is the caller's, not the
    /// engine's [`crate::Memory`]: posted, it must be registered there.
    #[inline]
    pub fn recv_now(
        &mut self,
        rail: RailId,
        bytes: &[u8],
        want: &RecvNow,
        dest: &mut [u8],
    ) -> RecvNowOutcome {
        let peer = match self.rails.get(rail.0 as usize) {
            Some(r) if !r.closed => r.peer,
            // Ignored, or refused, by the usual path.
            _ => return RecvNowOutcome::Unrelated,
        };
        // A packet the usual path refuses fails its peer's requests, posted
        // ones included: post to be failed alike.
        let chunk = match Packet::decode_single(bytes, &self.config.limits) {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return self.recv_now_several(peer, bytes, want),
            Err(_) => return RecvNowOutcome::Post,
        };
        let Some((channel, flags, tag)) = sequenced(&chunk) else {
            return RecvNowOutcome::Unrelated;
        };
        if ChannelId(channel) != want.channel || !want.source.accepts(peer) {
            return RecvNowOutcome::Unrelated;
        }
        let gate = self.gate(want.channel, peer);
        let g = &self.gates[gate.0];
        // A chunk in order releases those held behind it, which may match.
        if !g.reorder.is_empty() {
            return RecvNowOutcome::Post;
        }
        if !flags.first() || !want.tag.matches(tag) {
            return RecvNowOutcome::Unrelated;
        }
        let Chunk::Eager(e) = chunk else {
            return RecvNowOutcome::Post;
        };
        let h = e.header;
        let fits = h.flags.last() && !h.flags.aborted() && e.data.len() <= dest.len();
        if !fits || !self.may_land_now(g, h.seq, h.msg) {
            return RecvNowOutcome::Post;
        }
        let status = self.land_in_turn(gate, peer, e.header.tag, e.data.len());
        dest[..e.data.len()].copy_from_slice(e.data);
        RecvNowOutcome::Landed(status)
    }

    /// [`Self::recv_now`] for a packet of several chunks (or none): only the
    /// usual path lands them, so the receive is posted if any of them might
    /// match it.
    fn recv_now_several(&mut self, peer: Rank, bytes: &[u8], want: &RecvNow) -> RecvNowOutcome {
        let Ok(packet) = Packet::decode(bytes, &self.config.limits) else {
            return RecvNowOutcome::Post;
        };
        if self.might_match(peer, want, packet.chunks().filter_map(|c| sequenced(&c))) {
            RecvNowOutcome::Post
        } else {
            RecvNowOutcome::Unrelated
        }
    }

    /// Whether any of `chunks` (channel, flags and tag of each sequenced
    /// one) from `peer` might, on the usual path, match the receive `want`
    /// or release chunks held for its gate that might.
    fn might_match(
        &self,
        peer: Rank,
        want: &RecvNow,
        mut chunks: impl Iterator<Item = (u16, PieceFlags, u64)>,
    ) -> bool {
        let held = self.holds_ahead(want.channel, peer);
        chunks.any(|(channel, flags, tag)| {
            let accepted = ChannelId(channel) == want.channel && want.source.accepts(peer);
            // In order, it releases chunks held behind it.
            accepted && (held || (flags.first() && want.tag.matches(tag)))
        })
    }

    /// [`Self::recv_now`] for a receive of a whole message (a Madeleine
    /// message's receive with nothing unpacked yet, [`Self::recv_begin`]'s),
    /// waiting outside the engine after [`Self::can_recv_now`] allowed it:
    /// a packet that is exactly one in-order message of up to
    /// [`MOST_PIECES_AT_ONCE`] eager pieces that `want` accepts leaves the
    /// engine at once as a [`WholeMessage`], its data copied back to back
    /// into storage the message keeps, taking the gate's sequence numbers
    /// as the usual path would have.
    pub fn recv_whole_now(
        &mut self,
        rail: RailId,
        bytes: &[u8],
        want: &RecvNow,
    ) -> WholeNowOutcome {
        let landed = self.take_whole_now(rail, bytes, want, |engine, gate, status, eager| {
            // Two copies: out of the packet now, into the receiver's
            // memory as it unpacks.
            engine.copied(gate, 2 * status.len);
            let pieces = eager.iter().map(|e| (e.header.flags, e.data));
            WholeMessage::packed(status, pieces)
        });
        landed.map_or_else(|outcome| outcome, WholeNowOutcome::Landed)
    }

    /// [`Self::recv_whole_now`] for the packet `buf[range]`, in a buffer
    /// whose other bytes the driver no longer needs, and that it may give
    /// away: a message of at least [`HAND_OVER_MIN`] bytes that lands keeps
    /// `buf` itself, its data copied nowhere, and leaves another buffer in
    /// its place (its bytes mean nothing), if this thread has one to give
    /// (see [`WholeMessage`]). Whether `buf` was taken comes with the
    /// outcome.
    pub fn recv_whole_now_in(
        &mut self,
        rail: RailId,
        buf: &mut Vec<u8>,
        range: Range<usize>,
        want: &RecvNow,
    ) -> (WholeNowOutcome, bool) {
        let Some(bytes) = buf.get(range.clone()) else {
            return (WholeNowOutcome::Unrelated, false);
        };
        // Its pieces are noted in 32 bits, where each one's data lies in
        // `buf` (then `buf` is free to move): the usual path takes a
        // packet further in.
        if u32::try_from(range.end).is_err() {
            return (WholeNowOutcome::Post, false);
        }
        let base = bytes.as_ptr() as usize;
        let taken = self.take_whole_now(rail, bytes, want, |_, gate, status, eager| {
            let pieces: WholePieces = eager
                .iter()
                .map(|e| {
                    let offset = e.data.as_ptr() as usize - base;
                    (e.header.flags, offset as u32, e.header.len)
                })
                .collect();
            (gate, status, pieces)
        });
        let (gate, status, pieces) = match taken {
            Ok(taken) => taken,
            Err(outcome) => return (outcome, false),
        };
        let handed = (range.len() >= HAND_OVER_MIN)
            .then(|| WholeMessage::handed_over(status, buf, range.start, &pieces))
            .flatten();
        if let Some(whole) = handed {
            // One copy, into the receiver's memory as it unpacks.
            self.copied(gate, status.len);
            return (WholeNowOutcome::Landed(whole), true);
        }
        // Two copies, as `recv_whole_now`'s.
        self.copied(gate, 2 * status.len);
        let bytes = &buf[range];
        let pieces = pieces.iter().map(|&(flags, offset, len)| {
            let at = offset as usize;
            (flags, &bytes[at..at + len as usize])
        });
        (
            WholeNowOutcome::Landed(WholeMessage::packed(status, pieces)),
            false,
        )
    }

    /// The checks of [`Self::recv_whole_now`]: if `bytes` is a message
    /// that lands, takes it off its gate and returns what `land` makes of
    /// it (given the gate, the message's status and its decoded chunks);
    /// else what to do with the packet.
    fn take_whole_now<R>(
        &mut self,
        rail: RailId,
        bytes: &[u8],
        want: &RecvNow,
        land: impl FnOnce(&mut Self, GateId, Status, &[Eager<'_>]) -> R,
    ) -> Result<R, WholeNowOutcome> {
        let peer = match self.rails.get(rail.0 as usize) {
            Some(r) if !r.closed => r.peer,
            _ => return Err(WholeNowOutcome::Unrelated),
        };
        let limits = self.config.limits;
        // A packet of one chunk (a tagged message, a small RPC's) is read
        // into room for one: room for more costs a tenth of the landing.
        let taken = if PacketHeader::peek_chunk_count(bytes) == Some(1) {
            Packet::with_eager_chunks::<1, _>(bytes, &limits, |eager| {
                let (gate, status) = self.take_eager_now(peer, eager, want)?;
                Ok(land(self, gate, status, eager))
            })
        } else {
            Packet::with_eager_chunks::<MOST_PIECES_AT_ONCE, _>(bytes, &limits, |eager| {
                let (gate, status) = self.take_eager_now(peer, eager, want)?;
                Ok(land(self, gate, status, eager))
            })
        };
        taken.unwrap_or_else(|| {
            Err(match self.recv_now_several(peer, bytes, want) {
                RecvNowOutcome::Unrelated => WholeNowOutcome::Unrelated,
                _ => WholeNowOutcome::Post,
            })
        })
    }

    /// [`Self::take_whole_now`] for a packet of 1 to
    /// [`MOST_PIECES_AT_ONCE`] eager chunks, `eager`, from `peer`: if they
    /// are one message that lands, takes it off its gate and returns the
    /// gate and the message's status.
    fn take_eager_now(
        &mut self,
        peer: Rank,
        eager: &[Eager<'_>],
        want: &RecvNow,
    ) -> Result<(GateId, Status), WholeNowOutcome> {
        let h = eager[0].header;
        let count = eager.len();
        let one_message = super::whole::is_one_message(eager);
        let accepted = ChannelId(h.channel) == want.channel
            && want.source.accepts(peer)
            && want.tag.matches(h.tag);
        if !one_message || !accepted {
            let chunks = eager.iter().map(|e| {
                let h = e.header;
                (h.channel, h.flags, h.tag)
            });
            return Err(if self.might_match(peer, want, chunks) {
                WholeNowOutcome::Post
            } else {
                WholeNowOutcome::Unrelated
            });
        }
        let len: usize = eager.iter().map(|e| e.data.len()).sum();
        // The usual path would have held it, and refuses what is beyond
        // its bound: it reports the overflow.
        let bounded = self.may_hold(count * super::piece::PIECE_COST + len);
        let gate = self.gate(want.channel, peer);
        if !bounded || !self.may_land_now(&self.gates[gate.0], h.seq, h.msg) {
            return Err(WholeNowOutcome::Post);
        }
        let g = &mut self.gates[gate.0];
        for _ in 0..count {
            g.reorder.take_next();
        }
        g.stats.chunks_received += count as u64;
        g.stats.messages_whole += 1;
        g.stats.messages_at_once += 1;
        let status = Status {
            peer,
            tag: h.tag,
            len,
        };
        Ok((gate, status))
    }
}

/// The steps shared by every receive waiting outside the engine: a
/// blocking one's ([`Engine::recv_now`]), a whole message's
/// ([`Engine::recv_whole_now`]) and those posted ahead
/// ([`Engine::land_posted_now`]).
impl Engine {
    /// Whether the gate of `channel` and `peer` holds chunks that came
    /// ahead of their turn: a chunk in order there releases them, and the
    /// usual path then handles them.
    pub(super) fn holds_ahead(&self, channel: ChannelId, peer: Rank) -> bool {
        self.gate_index
            .get(&(channel, peer))
            .is_some_and(|g| !self.gates[g.0].reorder.is_empty())
    }

    /// Whether the first chunk of message `msg`, with sequence number
    /// `seq`, on the gate `g` may land at once, as the usual path would
    /// have landed it: it is the gate's next chunk with nothing held ahead
    /// of it, its message is not already under way on the gate, and no
    /// receive is posted in the engine on its channel (the usual path
    /// would match that one first).
    // Always: on the per-packet path, its three callers left it out of
    // line (17 more instructions per packet landed, under callgrind).
    #[inline(always)]
    pub(super) fn may_land_now(&self, g: &Gate, seq: u32, msg: u32) -> bool {
        g.reorder.is_next(seq)
            && (g.incoming.is_empty() || !g.incoming.contains_key(&msg))
            && self.channel_at(g.channel_index).posted.is_empty()
    }

    /// Lands at once a whole one-piece message from `peer` on `gate` with
    /// `tag` and `len` bytes of data, which [`Self::may_land_now`] allowed,
    /// as the usual path would have landed it: the gate takes its sequence
    /// number and counts it, its data as copied (the caller copies it); its
    /// receive's status.
    #[inline]
    pub(super) fn land_in_turn(
        &mut self,
        gate: GateId,
        peer: Rank,
        tag: u64,
        len: usize,
    ) -> Status {
        let g = &mut self.gates[gate.0];
        g.reorder.take_next();
        g.stats.chunks_received += 1;
        g.stats.messages_at_once += 1;
        g.stats.bytes_copied += len as u64;
        Status { peer, tag, len }
    }

    /// Undoes [`Self::land_in_turn`] of a message of `len` bytes on
    /// `gate`, the last one it landed there: the gate gives its sequence
    /// number back and uncounts it.
    pub(super) fn unland_in_turn(&mut self, gate: GateId, len: usize) {
        let g = &mut self.gates[gate.0];
        g.reorder.untake();
        g.stats.chunks_received -= 1;
        g.stats.messages_at_once -= 1;
        g.stats.bytes_copied -= len as u64;
    }
}

/// Packets of at least this many bytes that land whole at once keep the
/// driver's buffer rather than a copy of their data
/// ([`Engine::recv_whole_now_in`]): below, a copy costs less than a
/// buffer of the driver's size moving to the message and back.
pub const HAND_OVER_MIN: usize = 4 << 10;

/// The pieces of a message landing at once: each one's flags, and the
/// offset and length of its data in its packet (kept small: it moves).
pub(super) type WholePieces = smallvec::SmallVec<[(PieceFlags, u32, u32); MOST_PIECES_AT_ONCE]>;

/// Channel, flags and tag of a sequenced chunk (a piece of a message).
pub(super) fn sequenced(chunk: &Chunk<'_>) -> Option<(u16, PieceFlags, u64)> {
    match chunk {
        Chunk::Eager(e) => Some((e.header.channel, e.header.flags, e.header.tag)),
        Chunk::RdvRequest(r) => Some((r.channel, r.flags, r.tag)),
        _ => None,
    }
}

/// Writes the header of a packet of `count` chunks and `body_len` bytes
/// sent at once (whose sender checked both fit).
pub(super) fn write_packet_header(buffer: &mut [u8], count: usize, body_len: usize) {
    let header = PacketHeader {
        chunk_count: u16::try_from(count).expect("at most MOST_PIECES_AT_ONCE chunks"),
        body_len: u32::try_from(body_len).expect("checked to fit the rail's packets"),
    };
    buffer[..PacketHeader::LEN].copy_from_slice(&header.to_bytes());
}

/// The eager header of `piece`, the `i`th of the `count` pieces of the
/// message `out` sent at once: it takes the gate's next sequence number,
/// as if submitted.
pub(super) fn now_eager_header(
    g: &mut Gate,
    out: &OutMsg,
    i: usize,
    count: usize,
    piece: &NowPiece<'_>,
) -> EagerHeader {
    EagerHeader {
        channel: g.channel.0,
        flags: PieceFlags::new(i == 0, i + 1 == count, piece.send, piece.recv),
        seq: g.take_seq(),
        msg: out.msg,
        tag: out.tag,
        len: u32::try_from(piece.data.len()).expect("an eager piece is below 4 GiB"),
    }
}

/// Counts a packet of `count` chunks and `body_len` bytes sent at once on
/// `g`, and the bytes of its SAFER `pieces` as copied (the message layer
/// copied them when they were packed).
pub(super) fn count_sent_now(g: &mut Gate, count: usize, body_len: usize, pieces: &[NowPiece<'_>]) {
    g.stats.packets_sent += 1;
    g.stats.chunks_sent += count as u64;
    g.stats.bytes_sent += body_len as u64;
    g.stats.bytes_copied += pieces
        .iter()
        .filter(|p| p.send == SendMode::Safer)
        .map(|p| p.data.len() as u64)
        .sum::<u64>();
}
