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
    /// `status`. The caller then removes it from the list, unless the
    /// packet does not land whole after all ([`Self::unland`]).
    fn land(&mut self, data: &[u8], status: Status);
    /// The packet its message came in did not land whole after all: the
    /// receive waits again, as before [`Self::land`] (what its destination
    /// holds is unspecified: a message lands there later).
    fn unland(&mut self);
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
    /// from the list, unless the packet does not land whole after all
    /// ([`Self::unland`]).
    fn land(&mut self, i: usize, data: &[u8], status: Status);
    /// The packet the message of receive `i` came in did not land whole
    /// after all: receive `i` waits again, as before [`Self::land`] (what
    /// its destination holds is unspecified: a message lands there later).
    fn unland(&mut self, i: usize);
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

    fn unland(&mut self, i: usize) {
        self[i].unland();
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

    fn unland(&mut self) {
        self.landed = None;
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

/// A chunk of a packet landed in a receive of the list, as it is kept
/// until the whole packet has landed: what undoes it if a later chunk does
/// not land (see [`Engine::land_many`]).
#[derive(Clone, Copy, Debug)]
struct Landed {
    /// Its receive's place in the list.
    receive: u8,
    /// The gate whose sequence number it took.
    gate: GateId,
    /// Its length.
    len: u32,
}

impl Landed {
    /// A slot not assigned yet.
    const NONE: Self = Self {
        receive: 0,
        gate: GateId(0),
        len: 0,
    };
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
        if self.land_chunk(peer, e, posted, 0).is_some() {
            PostedNowOutcome::Landed
        } else {
            self.unlanded(
                peer,
                [(e.header.channel, e.header.flags)].into_iter(),
                posted,
            )
        }
    }

    /// Lands a packet of 2 to [`OPEN_MOST_CHUNKS`] eager chunks from
    /// `peer` in `posted` if every one lands: `None`, with nothing landed,
    /// for any other packet or if one does not land (the general path then
    /// decides, as for any packet).
    ///
    /// One pass: each chunk is read and landed in turn (its gate takes its
    /// number, its receive its data), and what it changed is kept; a chunk
    /// that does not land undoes the ones before it. The usual packet
    /// lands whole, and a second pass over kept landings cost it more
    /// (docs/profiling.md, stop 57).
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
        let mut landed = [Landed::NONE; OPEN_MOST_CHUNKS];
        let mut done = 0;
        let mut taken = 0u64;
        // The reader stops after `count` chunks: `done` stays within them.
        for e in &mut chunks {
            let Some(landing) = self.land_chunk(peer, &e, posted, taken) else {
                break;
            };
            taken |= 1 << landing.receive;
            landed[done] = landing;
            done += 1;
        }
        if done < count || !chunks.is_complete() {
            for l in &landed[..done] {
                self.unland_chunk(l, posted);
            }
            return None;
        }
        Some(PostedNowOutcome::Landed)
    }

    /// Lands `e`, a chunk of a packet from `peer`, in `posted` if it may:
    /// a whole eager message, in order on its gate with nothing held or
    /// under way there and nothing posted or unexpected on its channel,
    /// taken by the first receive of the list that accepts it (not `taken`
    /// by an earlier chunk of the packet, a bit per receive) and has room
    /// for it. Its gate then takes its sequence number and counts it, and
    /// its receive gets its data ([`PostedList::land`]). `None` changes
    /// nothing but creating gates.
    #[inline(always)]
    fn land_chunk<L: PostedList + ?Sized>(
        &mut self,
        peer: Rank,
        e: &Eager<'_>,
        posted: &mut L,
        taken: u64,
    ) -> Option<Landed> {
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
        let g = &self.gates[gate.0];
        // Nothing unexpected on its channel either, as when the list's
        // receives were made (`can_recv_now`). Chunks of the packet before
        // it on its gate took their numbers already.
        let unexpected = !self.channel_at(g.channel_index).unexpected.is_empty();
        if unexpected || !self.may_land_now(g, h.seq, h.msg) {
            return None;
        }
        let status = self.land_in_turn(gate, peer, h.tag, e.data.len());
        posted.land(receive, e.data, status);
        Some(Landed {
            // Below MOST_LANDING (64).
            receive: receive as u8,
            gate,
            // Within the eager limit, a u32.
            len: e.data.len() as u32,
        })
    }

    /// Undoes [`Self::land_chunk`]'s landing `l`: its gate gives its
    /// number back, its receive waits again.
    #[cold]
    fn unland_chunk<L: PostedList + ?Sized>(&mut self, l: &Landed, posted: &mut L) {
        self.unland_in_turn(l.gate, l.len as usize);
        posted.unland(usize::from(l.receive));
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
