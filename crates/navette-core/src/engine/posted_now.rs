//! Non-blocking tagged receives posted outside the engine.
//!
//! A runtime that posts its receives ahead of their messages (the usual
//! MPI-like pattern: `irecv` on several channels, then send, then wait
//! for all) pays the engine's receive machinery on each: a request, a
//! posted entry, a registered buffer, a completion. When a receive is
//! made on a channel where nothing is posted or unexpected in the engine,
//! the caller may instead keep it in a list of its own, in posting order
//! (of [`PostedNow`] entries, or any [`PostedList`]), and show each
//! received packet to [`Engine::land_posted_now`] first. A packet whose
//! every chunk is a whole eager one-piece message, in order on its gate,
//! that the first receive of its channel accepting it (in posting order)
//! has room for, lands there: each receive takes its message, the gates
//! their sequence numbers, as the usual path would have done — with no
//! request, posted entry, memory registration or completion event.
//!
//! Any packet whose chunks might match one of these receives in a way
//! only the usual path handles (a message that does not fit, one in
//! several pieces or by rendezvous, one out of order, one that no
//! receive of its channel accepts and that would wait unexpected, a
//! chunk that releases chunks held ahead of it on its gate, a packet
//! mixing such chunks with others) asks for the whole list to be posted
//! the usual way ([`Engine::recv_tagged`], in order) before the packet is
//! handled: matching then happens as if the receives had been posted all
//! along. A packet whose chunks on the list's channels are all later
//! pieces of messages under way, on gates holding nothing ahead, is
//! unrelated to it.

use navette_wire::{Eager, Packet, PieceFlags};

use super::{Engine, GateId, OPEN_MOST_CHUNKS};
use crate::{ChannelId, RailId, Rank, RecvNow, Status};

/// A tagged receive posted outside the engine, one of a list kept in
/// posting order (see [`Engine::land_posted_now`]). The list holds
/// waiting receives only: one that lands is removed before the next
/// packet.
pub trait PostedNow {
    /// What it accepts.
    fn want(&self) -> &RecvNow;
    /// The most bytes its message may have.
    fn room(&self) -> usize;
    /// Its message arrived: `data` (at most [`Self::room`] bytes) goes to
    /// the start of its destination, and the receive completes with
    /// `status`.
    /// The caller then removes it from the list.
    fn land(&mut self, data: &[u8], status: Status);
}

/// A list of tagged receives posted outside the engine, in posting order
/// (see [`Engine::land_posted_now`]): a slice of [`PostedNow`] receives,
/// or a list of the caller's that keeps its receives' buffers elsewhere
/// (so that a buffer stays where its caller takes it from, with nothing
/// to move once its message landed). It holds waiting receives only: one
/// that lands is removed before the next packet.
pub trait PostedList {
    /// How many receives wait.
    fn count(&self) -> usize;
    /// What receive `i` accepts.
    fn want(&self, i: usize) -> &RecvNow;
    /// The most bytes the message of receive `i` may have.
    fn room(&self, i: usize) -> usize;
    /// The message of receive `i` arrived: `data` (at most
    /// [`Self::room`] bytes) goes to the start of its destination, and
    /// the receive completes with `status`. The caller then removes it
    /// from the list.
    fn land(&mut self, i: usize, data: &[u8], status: Status);
}

impl<P: PostedNow> PostedList for [P] {
    #[inline]
    fn count(&self) -> usize {
        self.len()
    }

    #[inline]
    fn want(&self, i: usize) -> &RecvNow {
        self[i].want()
    }

    #[inline]
    fn room(&self, i: usize) -> usize {
        self[i].room()
    }

    #[inline]
    fn land(&mut self, i: usize, data: &[u8], status: Status) {
        self[i].land(data, status);
    }
}

/// The usual [`PostedNow`]: a receive into a buffer of its own, with a key
/// of the caller's (to find what waits for it once it lands).
#[derive(Debug)]
pub struct PostedBuffer<K> {
    /// What it accepts.
    pub want: RecvNow,
    /// Where its message lands; its length is the receive's room.
    pub buf: Vec<u8>,
    /// The caller's key.
    pub key: K,
    /// Set when its message lands (the caller then takes it out of the
    /// list).
    pub landed: Option<Status>,
}

impl<K> PostedBuffer<K> {
    /// A receive of `want` into `buf`, not landed.
    pub fn new(want: RecvNow, buf: Vec<u8>, key: K) -> Self {
        Self {
            want,
            buf,
            key,
            landed: None,
        }
    }
}

impl<K> PostedNow for PostedBuffer<K> {
    fn want(&self) -> &RecvNow {
        &self.want
    }

    fn room(&self) -> usize {
        self.buf.len()
    }

    fn land(&mut self, data: &[u8], status: Status) {
        navette_wire::copy_to_start(&mut self.buf, data);
        self.landed = Some(status);
    }
}

/// What [`Engine::land_posted_now`] made of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostedNowOutcome {
    /// Every chunk landed in a receive of the list (each
    /// [`PostedNow::land`] was called): the packet is handled.
    Landed,
    /// No chunk can match a receive of the list: handle the packet with
    /// [`Engine::handle_packet`], the list keeps waiting.
    Unrelated,
    /// Some chunk might match a receive of the list in a way only the
    /// usual path handles: post every receive of the list with
    /// [`Engine::recv_tagged`], in posting order, then handle the packet
    /// with [`Engine::handle_packet`]. Nothing landed.
    Post,
}

/// Where one chunk of a packet lands: its receive in the list, its gate,
/// and what the receive is given.
#[derive(Clone, Copy, Debug)]
struct Landing<'a> {
    receive: usize,
    gate: GateId,
    tag: u64,
    data: &'a [u8],
}

impl Landing<'_> {
    /// A slot not assigned yet.
    const NONE: Self = Self {
        receive: usize::MAX,
        gate: GateId(0),
        tag: 0,
        data: &[],
    };
}

/// The bit of `gate` in a mask of the gates some chunks are on (by its
/// number modulo 64: a clear bit says none of them is on it).
fn gate_bit(gate: GateId) -> u64 {
    1 << (gate.0 % 64)
}

/// Receives of the list past this many are never landed at once (a
/// packet that one of them would take is posted): the ones taken by a
/// packet are noted in a 64-bit mask. A list kept this short lands all.
pub const MOST_LANDING: usize = 64;

impl Engine {
    /// Shows a packet received on `rail` to the receives of `posted`, kept
    /// outside the engine in posting order, each made when nothing was
    /// posted or unexpected on its channel ([`Self::can_recv_now`]).
    ///
    /// A packet whose every chunk is a whole eager one-piece message, in
    /// order on its gate, that the first receive of its channel accepting
    /// it (in posting order) has room for, lands there: each receive takes
    /// its message ([`PostedNow::land`]), the gates their sequence numbers,
    /// as the usual path would have done, with no request, posted entry or
    /// completion. A packet whose chunks might match one of these receives
    /// in a way only the usual path handles asks for the whole list to be
    /// posted the usual way first (a chunk that would release chunks held
    /// ahead of it on its gate among them); one whose chunks on the list's
    /// channels are all later pieces of messages under way is unrelated to
    /// it. See [`PostedNowOutcome`].
    pub fn land_posted_now<L: PostedList + ?Sized>(
        &mut self,
        rail: RailId,
        bytes: &[u8],
        posted: &mut L,
    ) -> PostedNowOutcome {
        let peer = match self.rails.get(rail.0 as usize) {
            Some(r) if !r.closed => r.peer,
            // Ignored by the usual path (closed), or refused by it.
            _ => return PostedNowOutcome::Unrelated,
        };
        if posted.count() == 0 {
            return PostedNowOutcome::Unrelated;
        }
        let limits = self.config.limits;
        // The usual packet, a message sent at once, is read into room for
        // one chunk: room for more costs as much as the rest of the work.
        let eager = Packet::with_eager_chunks::<1, _>(bytes, &limits, |eager| {
            let [e] = eager else {
                unreachable!("a packet read into room for one chunk has one")
            };
            self.land_eager(peer, e, posted)
        })
        .or_else(|| self.land_many(peer, bytes, posted));
        if let Some(outcome) = eager {
            return outcome;
        }
        // Any other packet: only the usual path handles it. A packet it
        // refuses fails its peer's receives, which must be posted for that.
        let Ok(packet) = Packet::decode(bytes, &limits) else {
            return PostedNowOutcome::Post;
        };
        let sequenced = packet
            .chunks()
            .filter_map(|chunk| super::now::sequenced(&chunk).map(|(c, flags, _)| (c, flags)));
        self.unlanded(peer, sequenced, posted)
    }

    /// Lands `e`, the chunk of a packet of one from `peer`, in `posted` if
    /// it lands, else says what to do with the packet.
    fn land_eager<L: PostedList + ?Sized>(
        &mut self,
        peer: Rank,
        e: &Eager<'_>,
        posted: &mut L,
    ) -> PostedNowOutcome {
        match self.assign(peer, e, posted, 0, 0, &[]) {
            Some(landing) => {
                self.land(peer, &landing, posted);
                PostedNowOutcome::Landed
            }
            None => self.unlanded(
                peer,
                [(e.header.channel, e.header.flags)].into_iter(),
                posted,
            ),
        }
    }

    /// Lands a packet of 2 to [`OPEN_MOST_CHUNKS`] eager chunks from
    /// `peer` in `posted` if every one lands, each chunk read once and
    /// landed in a second pass: `None`, with nothing landed, for any other
    /// packet or if one does not land (the general path then decides, as
    /// for any packet).
    fn land_many<L: PostedList + ?Sized>(
        &mut self,
        peer: Rank,
        bytes: &[u8],
        posted: &mut L,
    ) -> Option<PostedNowOutcome> {
        let mut chunks = Packet::fixed_eagers(bytes, &self.config.limits)?;
        let count = usize::from(chunks.left());
        if !(2..=OPEN_MOST_CHUNKS).contains(&count) {
            return None;
        }
        let mut landings = [Landing::NONE; OPEN_MOST_CHUNKS];
        let mut taken = 0u64;
        // A bit per gate of the chunks before (by its number modulo 64):
        // where a chunk's is clear, none of them is on its gate.
        let mut gates = 0u64;
        for (i, e) in (&mut chunks).enumerate() {
            let landing = self.assign(peer, &e, posted, taken, gates, &landings[..i])?;
            taken |= 1 << landing.receive;
            gates |= gate_bit(landing.gate);
            landings[i] = landing;
        }
        if !chunks.is_complete() {
            return None;
        }
        for landing in &landings[..count] {
            self.land(peer, landing, posted);
        }
        Some(PostedNowOutcome::Landed)
    }

    /// Where `e`, a chunk of a packet from `peer`, lands in `posted`, if
    /// it does: a whole eager message, in order on its gate (counting the
    /// chunks of the same gate before it in the packet, `earlier`, whose
    /// gates `gates` marks by [`gate_bit`]) with
    /// nothing held or under way there and nothing posted or unexpected on
    /// its channel, taken by the first receive of the list that accepts it
    /// (not `taken` by an earlier chunk, a bit per receive) and has room
    /// for it. Changes nothing but creating gates.
    #[inline(always)]
    fn assign<'a, L: PostedList + ?Sized>(
        &mut self,
        peer: Rank,
        e: &Eager<'a>,
        posted: &L,
        taken: u64,
        gates: u64,
        earlier: &[Landing<'_>],
    ) -> Option<Landing<'a>> {
        let h = e.header;
        let channel = ChannelId(h.channel);
        if !(h.flags.first() && h.flags.last()) || h.flags.aborted() {
            return None;
        }
        let accepts = |i: usize| {
            let want = posted.want(i);
            want.channel == channel && want.source.accepts(peer) && want.tag.matches(h.tag)
        };
        // Receives before the first one not taken are all taken. Where
        // chunk i goes to receive i (a series of messages, each to the
        // receive posted for it), that first one takes it: checked alone,
        // without the search.
        let first = taken.trailing_ones() as usize;
        let end = posted.count().min(MOST_LANDING);
        let receive = if first < end && accepts(first) {
            first
        } else {
            (first + 1..end).find(|&i| taken & (1 << i) == 0 && accepts(i))?
        };
        if e.data.len() > posted.room(receive) {
            return None;
        }
        let gate = self.gate(channel, peer);
        let before = if gates & gate_bit(gate) == 0 {
            0
        } else {
            earlier.iter().filter(|l| l.gate == gate).count() as u32
        };
        let g = &self.gates[gate.0];
        // Nothing unexpected on its channel either, as when the list's
        // receives were made (`can_recv_now`).
        let unexpected = !self.channel_at(g.channel_index).unexpected.is_empty();
        if unexpected || !self.may_land_now(g, h.seq.wrapping_sub(before), h.msg) {
            return None;
        }
        Some(Landing {
            receive,
            gate,
            tag: h.tag,
            data: e.data,
        })
    }

    /// Lands a chunk in its receive of `posted`, as [`Self::assign`]
    /// found: its gate takes the sequence number.
    #[inline]
    fn land<L: PostedList + ?Sized>(&mut self, peer: Rank, landing: &Landing<'_>, posted: &mut L) {
        let status = self.land_in_turn(landing.gate, peer, landing.tag, landing.data.len());
        posted.land(landing.receive, landing.data, status);
    }
}

impl Engine {
    /// What to do with a packet from `peer` that does not land whole,
    /// given the channel and flags of its sequenced chunks: post the list
    /// if one of them is on a channel where a receive of the list waits
    /// and starts a message (it would match one, or wait unexpected before
    /// it) or comes to a gate holding chunks ahead of it (in order, it
    /// releases them, and they might), else leave the list.
    fn unlanded<L: PostedList + ?Sized>(
        &self,
        peer: Rank,
        mut sequenced: impl Iterator<Item = (u16, PieceFlags)>,
        posted: &L,
    ) -> PostedNowOutcome {
        let touches = sequenced.any(|(channel, flags)| {
            let channel = ChannelId(channel);
            let listed = (0..posted.count()).any(|i| posted.want(i).channel == channel);
            listed && (flags.first() || self.holds_ahead(channel, peer))
        });
        if touches {
            PostedNowOutcome::Post
        } else {
            PostedNowOutcome::Unrelated
        }
    }
}
