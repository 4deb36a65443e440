//! The receive side: ordering, matching, pairing pieces with unpacks,
//! rendezvous into the posted destination.
//!
//! A sequenced piece (eager or rendezvous request) goes through the gate's
//! reorder buffer, then either starts a message (first piece: matched
//! against posted receives, else queued as unexpected) or joins one. Pieces
//! of a matched message are *paired* in order with the pieces the receiver
//! posted; pairing checks that sizes and modes mirror the sender's.

use std::collections::VecDeque;

use navette_wire::{ClearToSend, CtsFlags, PieceFlags};
use navette_wire::{ReceiveMode, SendMode};

use super::incoming::Incoming;
use super::piece::{Body, Piece};
use super::spare::Arrived;
use super::{Engine, GateId, sorted_keys};
use crate::error::UsageError;
use crate::memory::{self, Memory};
use rustc_hash::FxHashMap;

use crate::{
    ChannelId, MemRef, Pending, PiecesSent, Rank, ReqId, RequestError, Source, Status, TagMatch,
};

#[derive(Clone, Copy, Debug)]
pub(super) struct Bound {
    pub(super) gate: GateId,
    pub(super) peer: Rank,
    pub(super) tag: u64,
}

/// A receive message: from `recv_begin` to `recv_end`.
#[derive(Debug)]
pub(crate) struct RecvMsg {
    pub(super) channel: ChannelId,
    pub(super) source: Source,
    pub(super) tag: TagMatch,
    pub(super) bound: Option<Bound>,
    pub(super) arrived: Arrived,
    pub(super) posted: VecDeque<PostedPiece>,
    pub(super) paired: u32,
    pub(super) last_paired: bool,
    pub(super) outstanding: usize,
    pub(super) total: usize,
    pub(super) end: Option<ReqId>,
    pub(super) failed: Option<RequestError>,
    /// Only the end request reports success (a tagged receive): the match
    /// and piece completions nobody waits for are not built.
    pub(super) quiet: bool,
}

/// A receive waiting in its channel's posted queue, in posting order.
#[derive(Debug)]
pub(super) enum Posted {
    /// A receive message ([`Engine::recv_begin`]): its state is in
    /// `recv_msgs`.
    Msg(ReqId),
    /// A one-piece tagged receive, kept inline: a one-piece eager message
    /// that fits lands in its destination and completes it without a
    /// receive message being built. Anything else promotes it to one.
    Tagged(TaggedRecv),
}

/// See [`Posted::Tagged`].
#[derive(Clone, Copy, Debug)]
pub(super) struct TaggedRecv {
    pub(super) req: ReqId,
    pub(super) source: Source,
    pub(super) tag: TagMatch,
    pub(super) dest: MemRef,
}

impl Posted {
    /// Whether this receive accepts a message from `peer` with `tag`.
    pub(super) fn accepts(
        &self,
        recv_msgs: &FxHashMap<ReqId, RecvMsg>,
        peer: Rank,
        tag: u64,
    ) -> bool {
        let (source, pattern) = match self {
            Self::Msg(key) => {
                let m = &recv_msgs[key];
                (m.source, m.tag)
            }
            Self::Tagged(t) => (t.source, t.tag),
        };
        source.accepts(peer) && pattern.matches(tag)
    }
}

/// One piece the receiver unpacks.
#[derive(Clone, Copy, Debug)]
pub struct RecvPiece {
    /// Destination; `None` defers it to [`Engine::recv_fill`].
    pub dest: Option<MemRef>,
    /// Length the receiver expects (the destination's length).
    pub len: usize,
    /// Send mode the receiver expects.
    pub send: SendMode,
    /// Receive mode the receiver expects.
    pub recv: ReceiveMode,
    /// Whether the length must match exactly (unpack) or bound the piece
    /// (a tagged receive into a larger buffer; modes are then not checked).
    pub exact: bool,
}

#[derive(Debug)]
pub(super) struct PostedPiece {
    pub(super) req: ReqId,
    pub(super) spec: RecvPiece,
}

/// A paired piece waiting for its destination.
#[derive(Debug)]
pub(crate) struct DeferredPiece {
    pub(super) key: ReqId,
    pub(super) gate: GateId,
    pub(super) status: Status,
    pub(super) declared: usize,
    pub(super) piece: Piece<Vec<u8>>,
}

impl Engine {
    /// Starts receiving a message on `channel` from `source` with a tag
    /// matching `tag`. The returned key completes once matched (its status
    /// names the sender and tag) and names the message in the calls below.
    /// From a rank no message can come from, it fails at once: this
    /// engine's own or one outside the job ([`RequestError::Refused`]), or
    /// a peer lost ([`RequestError::PeerUnreachable`]).
    pub fn recv_begin(&mut self, channel: ChannelId, source: Source, tag: TagMatch) -> ReqId {
        self.begin_receive(channel, source, tag, false)
    }

    fn begin_receive(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
        quiet: bool,
    ) -> ReqId {
        let key = self.new_req();
        self.new_recv_msg(key, channel, source, tag, quiet);
        self.post_recv_msg(key, channel, source, tag);
        key
    }

    /// Removes receive message `key`, its queues kept for the next ones.
    fn forget_msg(&mut self, key: ReqId) {
        if let Some(msg) = self.recv_msgs.remove(&key) {
            self.spare.keep(msg);
        }
    }

    /// Creates receive message `key`, neither matched nor posted.
    fn new_recv_msg(
        &mut self,
        key: ReqId,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
        quiet: bool,
    ) {
        self.recv_msgs.insert(
            key,
            RecvMsg {
                channel,
                source,
                tag,
                bound: None,
                arrived: self.spare.arrived(),
                posted: self.spare.posted(),
                paired: 0,
                last_paired: false,
                outstanding: 0,
                total: 0,
                end: None,
                failed: None,
                quiet,
            },
        );
    }

    /// Binds receive message `key` to the first unexpected message it
    /// matches, else posts it (or fails it if its only source is lost).
    fn post_recv_msg(&mut self, key: ReqId, channel: ChannelId, source: Source, tag: TagMatch) {
        self.channel(channel);
        match self.find_unexpected(channel, source, tag) {
            Some((gate, msg)) => self.bind(key, gate, msg),
            None if self.source_is_lost(source) => {
                let err = self.lost_source(source.rank().expect("a lost source is a rank"));
                // It will never be matched: whoever waits for the match
                // learns why, as when the peer is lost while it waits.
                if !self.recv_msgs.get(&key).is_some_and(|m| m.quiet) {
                    self.complete(key, Err(err.clone()));
                }
                self.fail_msg(key, err);
            }
            None => self.channel(channel).posted.push_back(Posted::Msg(key)),
        }
    }

    /// Removes from `channel`'s unexpected queue the first message that a
    /// receive from `source` with `tag` matches.
    fn find_unexpected(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
    ) -> Option<(GateId, u32)> {
        let i = self.unexpected_index(channel, source, tag)?;
        self.channels.get_mut(&channel)?.unexpected.remove(i)
    }

    /// Where, in `channel`'s unexpected queue, is the first message that a
    /// receive from `source` with `tag` matches.
    pub(super) fn unexpected_index(
        &self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
    ) -> Option<usize> {
        let ch = self.channels.get(&channel)?;
        ch.unexpected.iter().position(|&(g, msg)| {
            let gate = &self.gates[g.0];
            source.accepts(gate.peer)
                && matches!(gate.incoming.get(&msg), Some(Incoming::Unmatched { tag: t, .. }) if tag.matches(*t))
        })
    }

    /// Whether `source` names one rank no message can come from any more:
    /// a receive from it would wait forever, so it fails as it is posted
    /// ([`Self::lost_source`] says why).
    pub(super) fn source_is_lost(&self, source: Source) -> bool {
        let Some(peer) = source.rank() else {
            return false;
        };
        // This engine's own rank or one outside the job, then a known peer
        // whose every rail is closed (none while no rail is).
        peer == self.config.rank
            || self.config.size.is_some_and(|size| peer >= size)
            || (self.rails_closed > 0
                && self
                    .peers
                    .get(&peer)
                    .is_some_and(|p| p.rails.iter().all(|r| self.rails[r.0 as usize].closed)))
    }

    /// Why no message can come from `peer` (see [`Self::source_is_lost`]).
    #[cold]
    #[inline(never)]
    fn lost_source(&self, peer: Rank) -> RequestError {
        self.not_a_peer(peer, UsageError::RecvFromSelf).map_or(
            RequestError::PeerUnreachable { peer },
            RequestError::Refused,
        )
    }

    /// Posts the next piece of message `key`. With a destination (whose
    /// length must be `spec.len`) the data lands there; without one the
    /// piece is deferred until [`Self::recv_fill`].
    pub fn recv_piece(
        &mut self,
        key: ReqId,
        spec: RecvPiece,
        mem: &mut dyn Memory,
    ) -> Result<ReqId, UsageError> {
        if let Some(dest) = spec.dest.filter(|d| d.len != spec.len) {
            return Err(UsageError::WrongLength {
                declared: spec.len,
                got: dest.len,
            });
        }
        if self.recv_msgs.get(&key).is_none_or(|m| m.end.is_some()) {
            return Err(UsageError::NotAMessage(key));
        }
        let req = self.new_req();
        let msg = self.recv_msgs.get_mut(&key).expect("checked above");
        if let Some(err) = &msg.failed {
            let err = RequestError::MessageFailed(Box::new(err.clone()));
            self.complete(req, Err(err));
            return Ok(req);
        }
        msg.posted.push_back(PostedPiece { req, spec });
        self.pair(key, mem);
        Ok(req)
    }

    /// Gives a deferred piece its destination (`dest.len` must equal the
    /// length it was posted with). A piece that already failed is left alone.
    pub fn recv_fill(
        &mut self,
        key: ReqId,
        req: ReqId,
        dest: MemRef,
        mem: &mut dyn Memory,
    ) -> Result<(), UsageError> {
        if let Some(d) = self.deferred.remove(&req) {
            if dest.len != d.declared {
                self.deferred.insert(req, d);
                return Err(UsageError::WrongLength {
                    declared: self.deferred[&req].declared,
                    got: dest.len,
                });
            }
            self.release_bytes(d.piece.held());
            match d.piece.body {
                Body::Eager(data) => {
                    memory::write(mem, dest, 0, &data);
                    self.copied(d.gate, data.len());
                    self.complete(req, Ok(d.status));
                    self.piece_done(d.key);
                }
                Body::Rdv {
                    send_id,
                    len,
                    readable,
                } => {
                    let dest = dest.slice(0, len as usize);
                    self.start_rdv_recv(d.gate, d.key, req, dest, send_id, readable, d.status);
                }
            }
            self.check_end(d.key);
            return Ok(());
        }
        let Some(msg) = self.recv_msgs.get_mut(&key) else {
            return Ok(());
        };
        if let Some(p) = msg.posted.iter_mut().find(|p| p.req == req) {
            if p.spec.dest.is_some() {
                return Err(UsageError::NotDeferred(req));
            }
            if dest.len != p.spec.len {
                return Err(UsageError::WrongLength {
                    declared: p.spec.len,
                    got: dest.len,
                });
            }
            p.spec.dest = Some(dest);
        }
        Ok(())
    }

    /// Ends message `key`: the returned request completes when every posted
    /// piece has landed, with the total length, or fails if the sender
    /// packed another number of pieces.
    pub fn recv_end(&mut self, key: ReqId) -> Result<ReqId, UsageError> {
        if self.recv_msgs.get(&key).is_none_or(|m| m.end.is_some()) {
            return Err(UsageError::NotAMessage(key));
        }
        let end = self.new_req();
        self.end_as(key, end)
    }

    /// [`Self::recv_end`] under an existing request id.
    fn end_as(&mut self, key: ReqId, end: ReqId) -> Result<ReqId, UsageError> {
        let Some(msg) = self.recv_msgs.get_mut(&key).filter(|m| m.end.is_none()) else {
            return Err(UsageError::NotAMessage(key));
        };
        if let Some(err) = msg.failed.clone() {
            self.forget_msg(key);
            self.complete(end, Err(err));
            return Ok(end);
        }
        msg.end = Some(end);
        self.check_end(key);
        Ok(end)
    }

    /// Whether the receive `key` is posted and not matched yet.
    pub fn recv_unmatched(&self, key: ReqId) -> bool {
        self.recv_msgs
            .get(&key)
            .is_some_and(|m| m.bound.is_none() && m.failed.is_none())
    }

    /// Forgets message `key` (its owner went away): pending pieces are
    /// cancelled and the rest of the message is dropped on arrival.
    pub fn recv_abandon(&mut self, key: ReqId) {
        let Some(msg) = self.recv_msgs.get(&key) else {
            return;
        };
        if msg.bound.is_none() {
            let channel = msg.channel;
            self.channel(channel)
                .posted
                .retain(|p| !matches!(p, Posted::Msg(k) if *k == key));
        }
        self.fail_msg(key, RequestError::Cancelled);
        self.forget_msg(key);
    }

    /// A one-piece tagged receive into `dest` (which may be larger than the
    /// message). The returned request completes with the sender, tag and
    /// length; it is the only one that reports success (the inner match and
    /// piece requests complete silently, errors aside). From a rank no
    /// message can come from, it fails at once, as [`Self::recv_begin`].
    ///
    /// Posted before its message arrives, the receive waits inline in the
    /// channel's queue: the usual one-piece eager
    /// message then costs no receive message at all.
    pub fn recv_tagged(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
        dest: MemRef,
        mem: &mut dyn Memory,
    ) -> ReqId {
        let req = self.new_req();
        let recv = TaggedRecv {
            req,
            source,
            tag,
            dest,
        };
        let index = self.channel_index(channel);
        if self.channels[index].unexpected.is_empty() && !self.source_is_lost(source) {
            self.channels[index].posted.push_back(Posted::Tagged(recv));
        } else {
            self.promote(channel, recv, mem, true);
        }
        req
    }

    /// Cancels tagged receive `req` (from [`Self::recv_tagged`] on
    /// `channel`), not complete, for a waiter that gives up (a stalled
    /// wait): its request completes with [`RequestError::Cancelled`] and
    /// nothing is written into its memory any more. Returns whether no
    /// message had matched it (the next one it would have taken goes to a
    /// later receive); one that had, still arriving (a rendezvous, more
    /// pieces), is dropped as it arrives, as an abandoned message is.
    pub fn recv_tagged_cancel(&mut self, channel: ChannelId, req: ReqId) -> bool {
        // Kept inline in its channel's queue while no message came.
        if let Some(ch) = self.find_channel(channel) {
            let inline = ch
                .posted
                .iter()
                .position(|p| matches!(p, Posted::Tagged(t) if t.req == req));
            if let Some(i) = inline {
                self.channel(channel).posted.remove(i);
                self.complete(req, Err(RequestError::Cancelled));
                return true;
            }
        }
        // Promoted to a receive message (posted behind unexpected messages,
        // or matched by a message of more than one eager piece), whose end
        // request is the receive's: abandoned, posted or bound.
        let key = self
            .recv_msgs
            .iter()
            .find_map(|(key, m)| (m.end == Some(req)).then_some(*key));
        let Some(key) = key else {
            return false;
        };
        let unmatched = self.recv_unmatched(key);
        self.recv_abandon(key);
        unmatched
    }

    /// Turns a tagged receive into a receive message of one piece, whose
    /// end request is the tagged receive's own; returns the message's key.
    /// With `post`, the message is bound to an unexpected message or posted
    /// like any new receive; without, the caller binds it to the message
    /// that matched it.
    pub(super) fn promote(
        &mut self,
        channel: ChannelId,
        recv: TaggedRecv,
        mem: &mut dyn Memory,
        post: bool,
    ) -> ReqId {
        let key = self.new_req();
        self.new_recv_msg(key, channel, recv.source, recv.tag, true);
        if post {
            self.post_recv_msg(key, channel, recv.source, recv.tag);
        }
        let spec = RecvPiece {
            dest: Some(recv.dest),
            len: recv.dest.len,
            send: SendMode::Cheaper,
            recv: ReceiveMode::Cheaper,
            exact: false,
        };
        self.recv_piece(key, spec, mem)
            .expect("a message just begun accepts pieces");
        self.end_as(key, recv.req)
            .expect("a message just begun can end");
        key
    }

    /// Pairs posted pieces with arrived ones, in order, then checks the end.
    pub(super) fn pair(&mut self, key: ReqId, mem: &mut dyn Memory) {
        loop {
            let Some(msg) = self.recv_msgs.get_mut(&key) else {
                return;
            };
            if msg.failed.is_some() || msg.bound.is_none() || msg.posted.is_empty() {
                break;
            }
            if msg.last_paired {
                let err = RequestError::PieceCountMismatch {
                    sent: PiecesSent::Exactly(msg.paired),
                    unpacked: msg.paired + msg.posted.len() as u32,
                };
                self.fail_msg(key, err);
                break;
            }
            let Some(piece) = msg.arrived.pop_front() else {
                break;
            };
            let posted = msg.posted.pop_front().expect("not empty");
            self.release_bytes(piece.held());
            self.consume(key, posted, piece.borrow(), mem);
        }
        self.check_end(key);
    }

    /// Checks one pairing and moves the data (or defers it).
    pub(super) fn consume(
        &mut self,
        key: ReqId,
        posted: PostedPiece,
        piece: Piece<&[u8]>,
        mem: &mut dyn Memory,
    ) {
        let msg = self
            .recv_msgs
            .get_mut(&key)
            .expect("pairing a live receive");
        let bound = msg.bound.expect("pairing needs a bound message");
        let index = msg.paired;
        msg.paired += 1;
        let checked = if piece.flags.aborted() {
            Err(RequestError::Aborted)
        } else {
            check_piece(index, &posted.spec, piece.flags, piece.len())
        };
        if let Err(err) = checked {
            self.reject(bound.gate, &piece);
            self.complete(posted.req, Err(err.clone()));
            self.fail_msg(key, err);
            return;
        }
        msg.last_paired = piece.flags.last();
        let len = piece.len() as usize;
        msg.total += len;
        let status = Status {
            peer: bound.peer,
            tag: bound.tag,
            len,
        };
        let flags = piece.flags;
        match (posted.spec.dest, piece.body) {
            (Some(dest), Body::Eager(data)) => {
                memory::write(mem, dest, 0, data);
                self.gates[bound.gate.0].stats.bytes_copied += data.len() as u64;
                if !msg.quiet {
                    self.complete(posted.req, Ok(status));
                }
            }
            (
                Some(dest),
                Body::Rdv {
                    send_id, readable, ..
                },
            ) => {
                msg.outstanding += 1;
                self.start_rdv_recv(
                    bound.gate,
                    key,
                    posted.req,
                    dest.slice(0, len),
                    send_id,
                    readable,
                    status,
                );
            }
            (None, body) => {
                msg.outstanding += 1;
                let piece = Piece { flags, body }.to_owned();
                self.gates[bound.gate.0].stats.bytes_copied += piece.data_len() as u64;
                // Held until recv_fill; counted like unexpected data (the
                // limit was checked when it arrived or was released).
                self.buffered += piece.held();
                let deferred = DeferredPiece {
                    key,
                    gate: bound.gate,
                    status,
                    declared: posted.spec.len,
                    piece,
                };
                self.deferred.insert(posted.req, deferred);
            }
        }
    }

    pub(super) fn piece_done(&mut self, key: ReqId) {
        if let Some(msg) = self.recv_msgs.get_mut(&key) {
            msg.outstanding -= 1;
        }
    }

    /// Completes the end request once everything posted has landed.
    pub(super) fn check_end(&mut self, key: ReqId) {
        let Some(msg) = self.recv_msgs.get(&key) else {
            return;
        };
        let Some(end) = msg.end else {
            return;
        };
        if msg.failed.is_some() || msg.outstanding > 0 || !msg.posted.is_empty() {
            return;
        }
        if msg.last_paired {
            let bound = msg.bound.expect("a paired message is bound");
            let status = Status {
                peer: bound.peer,
                tag: bound.tag,
                len: msg.total,
            };
            self.forget_msg(key);
            self.complete(end, Ok(status));
        } else if msg.arrived.front().is_some_and(|p| p.flags.aborted()) {
            // The sender gave up right after the pieces unpacked so far.
            self.fail_msg(key, RequestError::Aborted);
        } else if !msg.arrived.is_empty() {
            let err = RequestError::PieceCountMismatch {
                sent: PiecesSent::MoreThan(msg.paired),
                unpacked: msg.paired,
            };
            self.fail_msg(key, err);
        }
    }

    /// Fails message `key`: its posted and deferred pieces fail, its
    /// rendezvous requests are refused, the rest of it will be dropped.
    pub(super) fn fail_msg(&mut self, key: ReqId, err: RequestError) {
        let Some(msg) = self.recv_msgs.get_mut(&key) else {
            return;
        };
        if msg.failed.is_some() {
            return;
        }
        msg.failed = Some(err.clone());
        let posted = std::mem::take(&mut msg.posted);
        let arrived = std::mem::take(&mut msg.arrived);
        let (bound, end) = (msg.bound, msg.end);
        let wrapped = || Err(RequestError::MessageFailed(Box::new(err.clone())));
        for p in posted {
            self.complete(p.req, wrapped());
        }
        for req in sorted_keys(&self.deferred, |d| d.key == key) {
            let d = self.deferred.remove(&req).expect("collected above");
            self.release_bytes(d.piece.held());
            self.reject(d.gate, &d.piece.borrow());
            self.complete(req, wrapped());
        }
        if let Some(bound) = bound {
            for piece in arrived {
                self.release_bytes(piece.held());
                self.reject(bound.gate, &piece.borrow());
            }
            let g = &mut self.gates[bound.gate.0];
            if let Some(slot) = g
                .incoming
                .values_mut()
                .find(|i| matches!(i, Incoming::Matched(k) if *k == key))
            {
                *slot = Incoming::Discarding;
            }
        }
        if let Some(end) = end {
            self.forget_msg(key);
            self.complete(end, Err(err));
        }
    }

    /// Refuses a rendezvous piece so its sender does not wait (and, for a
    /// readable one, tells the driver to forget its address); eager data
    /// is simply dropped.
    pub(super) fn reject(&mut self, gate: GateId, piece: &Piece<&[u8]>) {
        if let Body::Rdv {
            send_id, readable, ..
        } = piece.body
        {
            if readable {
                self.forget_read(self.gates[gate.0].peer, send_id);
            }
            let g = &mut self.gates[gate.0];
            let channel = g.channel.0;
            g.window.push(Pending::ClearToSend(ClearToSend {
                channel,
                flags: CtsFlags::REJECT,
                send_id,
                recv_id: 0,
                offset: 0,
                len: 0,
            }));
            self.window_joined(gate);
        }
    }
}

/// Whether a posted piece mirrors the sender's.
pub(super) fn check_piece(
    index: u32,
    posted: &RecvPiece,
    flags: PieceFlags,
    len: u64,
) -> Result<(), RequestError> {
    let posted_len = posted.len as u64;
    if !posted.exact {
        return if len > posted_len {
            Err(RequestError::Truncated {
                sent: len,
                posted: posted_len,
            })
        } else {
            Ok(())
        };
    }
    if flags.send_mode() != posted.send || flags.receive_mode() != posted.recv {
        return Err(RequestError::ModeMismatch {
            piece: index,
            sent_send: flags.send_mode(),
            sent_recv: flags.receive_mode(),
            posted_send: posted.send,
            posted_recv: posted.recv,
        });
    }
    if len != posted_len {
        return Err(RequestError::SizeMismatch {
            piece: index,
            sent: len,
            posted: posted_len,
        });
    }
    Ok(())
}
