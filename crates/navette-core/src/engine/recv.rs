//! The receive side: ordering, matching, pairing pieces with unpacks,
//! rendezvous into the posted destination.
//!
//! A sequenced piece (eager or rendezvous request) goes through the gate's
//! reorder buffer, then either starts a message (first piece: matched
//! against posted receives, else queued as unexpected) or joins one. Pieces
//! of a matched message are *paired* in order with the pieces the receiver
//! posted; pairing checks that sizes and modes mirror the sender's.

use std::collections::VecDeque;

use navette_wire::{ClearToSend, CtsFlags, Eager, PieceFlags, RdvDataHeader, RdvRequest};
use navette_wire::{ReceiveMode, SendMode};

use super::{Engine, GateId};
use crate::error::{UsageError, Violation};
use crate::memory::{self, Memory};
use crate::reorder::Arrival;
use crate::{ChannelId, MemRef, Pending, Rank, ReqId, RequestError, Source, Status, TagMatch};

/// A sequenced piece as it arrived; `D` is borrowed or owned data.
#[derive(Clone, Debug)]
pub(crate) struct SeqPiece<D> {
    seq: u32,
    msg: u32,
    tag: u64,
    piece: Piece<D>,
}

/// A piece's flags and body.
#[derive(Clone, Debug)]
pub(crate) struct Piece<D> {
    flags: PieceFlags,
    body: Body<D>,
}

#[derive(Clone, Debug)]
pub(crate) enum Body<D> {
    Eager(D),
    Rdv { send_id: u32, len: u64 },
}

impl<'a> SeqPiece<&'a [u8]> {
    pub(crate) fn eager(e: &Eager<'a>) -> Self {
        let h = e.header;
        Self {
            seq: h.seq,
            msg: h.msg,
            tag: h.tag,
            piece: Piece {
                flags: h.flags,
                body: Body::Eager(e.data),
            },
        }
    }

    pub(crate) fn rdv(r: &RdvRequest) -> Self {
        Self {
            seq: r.seq,
            msg: r.msg,
            tag: r.tag,
            piece: Piece {
                flags: r.flags,
                body: Body::Rdv {
                    send_id: r.send_id,
                    len: r.total_len,
                },
            },
        }
    }
}

impl<D: AsRef<[u8]>> Piece<D> {
    fn borrow(&self) -> Piece<&[u8]> {
        Piece {
            flags: self.flags,
            body: match &self.body {
                Body::Eager(d) => Body::Eager(d.as_ref()),
                Body::Rdv { send_id, len } => Body::Rdv {
                    send_id: *send_id,
                    len: *len,
                },
            },
        }
    }

    fn to_owned(&self) -> Piece<Vec<u8>> {
        Piece {
            flags: self.flags,
            body: match &self.body {
                Body::Eager(d) => Body::Eager(d.as_ref().to_vec()),
                Body::Rdv { send_id, len } => Body::Rdv {
                    send_id: *send_id,
                    len: *len,
                },
            },
        }
    }

    /// Length of the piece.
    fn len(&self) -> u64 {
        match &self.body {
            Body::Eager(d) => d.as_ref().len() as u64,
            Body::Rdv { len, .. } => *len,
        }
    }

    /// Bytes this piece holds in engine memory.
    fn held(&self) -> usize {
        match &self.body {
            Body::Eager(d) => d.as_ref().len(),
            Body::Rdv { .. } => 0,
        }
    }
}

/// A message known on a gate, by message number.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// No receive matched it yet: its pieces wait here.
    Unmatched {
        tag: u64,
        arrived: VecDeque<Piece<Vec<u8>>>,
        last_seen: bool,
    },
    /// Bound to a receive message.
    Matched(ReqId),
    /// Its receiver failed or left: later pieces are dropped.
    Discarding,
}

#[derive(Clone, Copy, Debug)]
struct Bound {
    gate: GateId,
    peer: Rank,
    tag: u64,
}

/// A receive message: from `recv_begin` to `recv_end`.
#[derive(Debug)]
pub(crate) struct RecvMsg {
    channel: ChannelId,
    source: Source,
    tag: TagMatch,
    bound: Option<Bound>,
    arrived: VecDeque<Piece<Vec<u8>>>,
    posted: VecDeque<PostedPiece>,
    paired: u32,
    last_paired: bool,
    outstanding: usize,
    total: usize,
    end: Option<ReqId>,
    failed: Option<RequestError>,
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
struct PostedPiece {
    req: ReqId,
    spec: RecvPiece,
}

/// A paired piece waiting for its destination.
#[derive(Debug)]
pub(crate) struct DeferredPiece {
    key: ReqId,
    gate: GateId,
    status: Status,
    declared: usize,
    body: Body<Vec<u8>>,
}

/// A rendezvous transfer on the receiver: clear-to-send sent, data landing.
#[derive(Debug)]
pub(crate) struct RdvRecv {
    peer: Rank,
    channel: u16,
    key: ReqId,
    req: ReqId,
    dest: MemRef,
    received: u64,
    status: Status,
}

impl Engine {
    /// Starts receiving a message on `channel` from `source` with a tag
    /// matching `tag`. The returned key completes once matched (its status
    /// names the sender and tag) and names the message in the calls below.
    pub fn recv_begin(&mut self, channel: ChannelId, source: Source, tag: TagMatch) -> ReqId {
        let key = self.new_req();
        self.recv_msgs.insert(
            key,
            RecvMsg {
                channel,
                source,
                tag,
                bound: None,
                arrived: VecDeque::new(),
                posted: VecDeque::new(),
                paired: 0,
                last_paired: false,
                outstanding: 0,
                total: 0,
                end: None,
                failed: None,
            },
        );
        self.channel(channel);
        let gates = &self.gates;
        let ch = self.channels.get_mut(&channel).expect("created above");
        let found = ch.unexpected.iter().position(|&(g, msg)| {
            let gate = &gates[g.0];
            source.accepts(gate.peer)
                && matches!(gate.incoming.get(&msg), Some(Incoming::Unmatched { tag: t, .. }) if tag.matches(*t))
        });
        match found {
            Some(i) => {
                let (gate, msg) = ch.unexpected.remove(i).expect("position is in range");
                self.bind(key, gate, msg);
            }
            None => ch.posted.push_back(key),
        }
        key
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
        let req = self.new_req();
        let msg = match self.recv_msgs.get_mut(&key) {
            Some(m) if m.end.is_none() => m,
            _ => return Err(UsageError::NotAMessage(key)),
        };
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
            match d.body {
                Body::Eager(data) => {
                    self.release_bytes(data.len());
                    memory::write(mem, dest, 0, &data);
                    self.complete(req, Ok(d.status));
                    self.piece_done(d.key);
                }
                Body::Rdv { send_id, len } => {
                    let dest = dest.slice(0, len as usize);
                    self.start_rdv_recv(d.gate, d.key, req, dest, send_id, d.status);
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
        let end = self.new_req();
        let msg = match self.recv_msgs.get_mut(&key) {
            Some(m) if m.end.is_none() => m,
            _ => return Err(UsageError::NotAMessage(key)),
        };
        if let Some(err) = msg.failed.clone() {
            self.recv_msgs.remove(&key);
            self.complete(end, Err(err));
            return Ok(end);
        }
        msg.end = Some(end);
        self.check_end(key);
        Ok(end)
    }

    /// Forgets message `key` (its owner went away): pending pieces are
    /// cancelled and the rest of the message is dropped on arrival.
    pub fn recv_abandon(&mut self, key: ReqId) {
        let Some(msg) = self.recv_msgs.get(&key) else {
            return;
        };
        if msg.bound.is_none() {
            let channel = msg.channel;
            self.channel(channel).posted.retain(|&k| k != key);
        }
        self.fail_msg(key, RequestError::Cancelled);
        self.recv_msgs.remove(&key);
    }

    /// A one-piece tagged receive into `dest` (which may be larger than the
    /// message). The returned request completes with the sender, tag and length.
    pub fn recv_tagged(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
        dest: MemRef,
        mem: &mut dyn Memory,
    ) -> ReqId {
        let key = self.recv_begin(channel, source, tag);
        let spec = RecvPiece {
            dest: Some(dest),
            len: dest.len,
            send: SendMode::Cheaper,
            recv: ReceiveMode::Cheaper,
            exact: false,
        };
        self.recv_piece(key, spec, mem)
            .expect("a message just begun accepts pieces");
        self.recv_end(key).expect("a message just begun can end")
    }

    /// The first unexpected message matching `source` and `tag`, without
    /// receiving it: sender, tag and length of its first piece.
    pub fn probe(&self, channel: ChannelId, source: Source, tag: TagMatch) -> Option<Status> {
        let ch = self.channels.get(&channel)?;
        ch.unexpected.iter().find_map(|&(g, msg)| {
            let gate = &self.gates[g.0];
            match gate.incoming.get(&msg) {
                Some(Incoming::Unmatched {
                    tag: t, arrived, ..
                }) if source.accepts(gate.peer) && tag.matches(*t) => Some(Status {
                    peer: gate.peer,
                    tag: *t,
                    len: arrived.front().map_or(0, |p| p.len() as usize),
                }),
                _ => None,
            }
        })
    }

    pub(super) fn on_sequenced(
        &mut self,
        gate: GateId,
        piece: SeqPiece<&[u8]>,
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        let max = self.config.max_reorder_chunks;
        match self.gates[gate.0].reorder.arrive(piece.seq, max)? {
            Arrival::Ahead => {
                self.hold_bytes(piece.piece.held())?;
                let owned = SeqPiece {
                    seq: piece.seq,
                    msg: piece.msg,
                    tag: piece.tag,
                    piece: piece.piece.to_owned(),
                };
                self.gates[gate.0].reorder.hold(piece.seq, owned);
                Ok(())
            }
            Arrival::InOrder => {
                self.on_piece(gate, piece.msg, piece.tag, piece.piece, mem)?;
                while let Some(next) = self.gates[gate.0].reorder.pop_ready() {
                    self.release_bytes(next.piece.held());
                    self.on_piece(gate, next.msg, next.tag, next.piece.borrow(), mem)?;
                }
                Ok(())
            }
        }
    }

    fn on_piece(
        &mut self,
        gate: GateId,
        msg: u32,
        tag: u64,
        piece: Piece<&[u8]>,
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        let first = piece.flags.first();
        let known = self.gates[gate.0].incoming.contains_key(&msg);
        if first == known {
            return Err(Violation::PieceOutOfPlace { msg, first });
        }
        if first {
            self.start_incoming(gate, msg, tag);
        }
        let last = piece.flags.last();
        let g = &self.gates[gate.0];
        if matches!(g.incoming.get(&msg), Some(Incoming::Unmatched { .. })) {
            // Counted before it is kept, so that a refused piece is not kept.
            self.hold_bytes(piece.held())?;
        }
        let g = &mut self.gates[gate.0];
        match g.incoming.get_mut(&msg).expect("started or known") {
            Incoming::Unmatched {
                arrived, last_seen, ..
            } => {
                *last_seen |= last;
                arrived.push_back(piece.to_owned());
            }
            Incoming::Matched(key) => {
                let key = *key;
                if last {
                    g.incoming.remove(&msg);
                }
                self.arrive_matched(key, piece, mem)?;
            }
            Incoming::Discarding => {
                if last {
                    g.incoming.remove(&msg);
                }
                self.reject(gate, &piece);
            }
        }
        Ok(())
    }

    /// A first piece: bind it to the first matching posted receive, or
    /// queue it as unexpected.
    fn start_incoming(&mut self, gate: GateId, msg: u32, tag: u64) {
        let (channel, peer) = (self.gates[gate.0].channel, self.gates[gate.0].peer);
        self.gates[gate.0].incoming.insert(
            msg,
            Incoming::Unmatched {
                tag,
                arrived: VecDeque::new(),
                last_seen: false,
            },
        );
        self.channel(channel);
        let recv_msgs = &self.recv_msgs;
        let ch = self.channels.get_mut(&channel).expect("created above");
        let found = ch.posted.iter().position(|k| {
            let m = &recv_msgs[k];
            m.source.accepts(peer) && m.tag.matches(tag)
        });
        match found {
            Some(i) => {
                let key = ch.posted.remove(i).expect("position is in range");
                self.bind(key, gate, msg);
            }
            None => ch.unexpected.push_back((gate, msg)),
        }
    }

    /// Binds receive `key` to the unmatched message `msg` of `gate`.
    fn bind(&mut self, key: ReqId, gate: GateId, msg: u32) {
        let g = &mut self.gates[gate.0];
        let Some(Incoming::Unmatched {
            tag,
            arrived,
            last_seen,
        }) = g.incoming.remove(&msg)
        else {
            unreachable!("only unmatched messages are bound");
        };
        if !last_seen {
            g.incoming.insert(msg, Incoming::Matched(key));
        }
        let peer = g.peer;
        let m = self
            .recv_msgs
            .get_mut(&key)
            .expect("binding a live receive");
        m.bound = Some(Bound { gate, peer, tag });
        m.arrived = arrived;
        self.complete(key, Ok(Status { peer, tag, len: 0 }));
    }

    fn arrive_matched(
        &mut self,
        key: ReqId,
        piece: Piece<&[u8]>,
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        let Some(msg) = self.recv_msgs.get_mut(&key) else {
            return Ok(());
        };
        if msg.failed.is_some() {
            let gate = msg.bound.expect("a matched message is bound").gate;
            self.reject(gate, &piece);
            return Ok(());
        }
        if msg.arrived.is_empty() && !msg.posted.is_empty() && !msg.last_paired {
            let posted = msg.posted.pop_front().expect("not empty");
            self.consume(key, posted, piece, mem);
        } else {
            // Counted before it is kept, so that a refused piece is not kept.
            self.hold_bytes(piece.held())?;
            let msg = self.recv_msgs.get_mut(&key).expect("looked up above");
            msg.arrived.push_back(piece.to_owned());
        }
        self.pair(key, mem);
        Ok(())
    }

    /// Pairs posted pieces with arrived ones, in order, then checks the end.
    fn pair(&mut self, key: ReqId, mem: &mut dyn Memory) {
        loop {
            let Some(msg) = self.recv_msgs.get_mut(&key) else {
                return;
            };
            if msg.failed.is_some() || msg.bound.is_none() || msg.posted.is_empty() {
                break;
            }
            if msg.last_paired {
                let err = RequestError::PieceCountMismatch {
                    sent: msg.paired.to_string(),
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
    fn consume(
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
        match (posted.spec.dest, piece.body) {
            (Some(dest), Body::Eager(data)) => {
                memory::write(mem, dest, 0, data);
                self.complete(posted.req, Ok(status));
            }
            (Some(dest), Body::Rdv { send_id, .. }) => {
                msg.outstanding += 1;
                self.start_rdv_recv(
                    bound.gate,
                    key,
                    posted.req,
                    dest.slice(0, len),
                    send_id,
                    status,
                );
            }
            (None, body) => {
                msg.outstanding += 1;
                let body = match body {
                    Body::Eager(data) => {
                        // Held until recv_fill; counted like unexpected data.
                        self.buffered += data.len();
                        Body::Eager(data.to_vec())
                    }
                    Body::Rdv { send_id, len } => Body::Rdv { send_id, len },
                };
                let deferred = DeferredPiece {
                    key,
                    gate: bound.gate,
                    status,
                    declared: posted.spec.len,
                    body,
                };
                self.deferred.insert(posted.req, deferred);
            }
        }
    }

    fn start_rdv_recv(
        &mut self,
        gate: GateId,
        key: ReqId,
        req: ReqId,
        dest: MemRef,
        send_id: u32,
        status: Status,
    ) {
        let recv_id = self.new_transfer();
        let g = &mut self.gates[gate.0];
        let channel = g.channel.0;
        g.window.push(Pending::ClearToSend(ClearToSend {
            channel,
            flags: CtsFlags::ACCEPT,
            send_id,
            recv_id,
            offset: 0,
            len: dest.len as u64,
        }));
        if dest.len == 0 {
            self.complete(req, Ok(status));
            self.piece_done(key);
            return;
        }
        let peer = g.peer;
        self.rdv_recvs.insert(
            recv_id,
            RdvRecv {
                peer,
                channel,
                key,
                req,
                dest,
                received: 0,
                status,
            },
        );
    }

    pub(super) fn on_rdv_data(
        &mut self,
        peer: Rank,
        header: RdvDataHeader,
        data: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        let Some(r) = self.rdv_recvs.get_mut(&header.recv_id) else {
            return Err(Violation::UnknownDestination(header.recv_id));
        };
        if r.peer != peer || r.channel != header.channel {
            return Err(Violation::UnknownDestination(header.recv_id));
        }
        let total = r.dest.len as u64;
        let len = u64::from(header.len);
        let fits = header
            .offset
            .checked_add(len)
            .is_some_and(|end| end <= total);
        if !fits || r.received + len > total {
            return Err(Violation::OutOfBounds {
                offset: header.offset,
                len,
                total,
            });
        }
        // A destination whose owner cancelled no longer resolves: dropped.
        memory::write(mem, r.dest, header.offset as usize, data);
        r.received += len;
        if r.received == total {
            let r = self
                .rdv_recvs
                .remove(&header.recv_id)
                .expect("looked up above");
            self.complete(r.req, Ok(r.status));
            self.piece_done(r.key);
            self.check_end(r.key);
        }
        Ok(())
    }

    fn piece_done(&mut self, key: ReqId) {
        if let Some(msg) = self.recv_msgs.get_mut(&key) {
            msg.outstanding -= 1;
        }
    }

    /// Completes the end request once everything posted has landed.
    fn check_end(&mut self, key: ReqId) {
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
            self.recv_msgs.remove(&key);
            self.complete(end, Ok(status));
        } else if msg.arrived.front().is_some_and(|p| p.flags.aborted()) {
            // The sender gave up right after the pieces unpacked so far.
            self.fail_msg(key, RequestError::Aborted);
        } else if !msg.arrived.is_empty() {
            let err = RequestError::PieceCountMismatch {
                sent: format!("more than {}", msg.paired),
                unpacked: msg.paired,
            };
            self.fail_msg(key, err);
        }
    }

    /// Fails message `key`: its posted and deferred pieces fail, its
    /// rendezvous requests are refused, the rest of it will be dropped.
    fn fail_msg(&mut self, key: ReqId, err: RequestError) {
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
        let mut deferred: Vec<ReqId> = self
            .deferred
            .iter()
            .filter(|(_, d)| d.key == key)
            .map(|(&req, _)| req)
            .collect();
        deferred.sort_unstable();
        for req in deferred {
            let d = self.deferred.remove(&req).expect("collected above");
            let piece = Piece {
                flags: PieceFlags::ABORT,
                body: d.body,
            };
            self.release_bytes(piece.held());
            self.reject(d.gate, &piece.borrow());
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
            self.recv_msgs.remove(&key);
            self.complete(end, Err(err));
        }
    }

    /// Refuses a rendezvous piece so its sender does not wait; eager data is
    /// simply dropped.
    fn reject(&mut self, gate: GateId, piece: &Piece<&[u8]>) {
        if let Body::Rdv { send_id, .. } = piece.body {
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
        }
    }
}

/// Whether a posted piece mirrors the sender's.
fn check_piece(
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
