//! Arrival of sequenced pieces: per-gate ordering, then matching of a
//! message's first piece against posted receives (else the unexpected
//! queue), then handing later pieces to their receive message.

use super::piece::{Body, Piece, SeqPiece};
use super::recv::{Bound, Posted, TaggedRecv};
use super::spare::Arrived;
use super::{Engine, GateId};
use crate::error::Violation;
use crate::memory::{self, Memory};
use crate::reorder::Arrival;
use crate::{ChannelId, ReqId, Source, Status, TagMatch};

/// A message known on a gate, by message number.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// No receive matched it yet: its pieces wait here.
    Unmatched {
        tag: u64,
        arrived: Arrived,
        last_seen: bool,
    },
    /// Bound to a receive message.
    Matched(ReqId),
    /// Its receiver failed or left: later pieces are dropped.
    Discarding,
}

/// What [`Engine::land_tagged`] did.
enum Landed {
    /// The receive completed.
    Done,
    /// The message needs a receive message.
    Promote,
}

impl Engine {
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
                self.copied(gate, piece.piece.data_len());
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

    pub(super) fn on_piece(
        &mut self,
        gate: GateId,
        msg: u32,
        tag: u64,
        piece: Piece<&[u8]>,
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        let first = piece.flags.first();
        let incoming = &self.gates[gate.0].incoming;
        let known = !incoming.is_empty() && incoming.contains_key(&msg);
        if first == known {
            return Err(Violation::PieceOutOfPlace { msg, first });
        }
        let last = piece.flags.last();
        if first {
            if let Some(posted) = self.match_posted(gate, tag) {
                let key = match posted {
                    Posted::Msg(key) => key,
                    Posted::Tagged(recv) => match self.land_tagged(gate, tag, recv, &piece, mem) {
                        Landed::Done => return Ok(()),
                        Landed::Promote => {
                            let channel = self.gates[gate.0].channel;
                            self.promote(channel, recv, mem, false)
                        }
                    },
                };
                // The usual case, a receive posted in advance: bind at once.
                // The gate keeps the message only if more pieces follow, so
                // a one-piece message costs one map insertion at most.
                if !last {
                    let incoming = &mut self.gates[gate.0].incoming;
                    incoming.insert(msg, Incoming::Matched(key));
                }
                self.bind_arrived(key, gate, tag, None);
                return self.arrive_matched(key, piece, mem);
            }
            let arrived = self.spare.arrived();
            self.start_unexpected(gate, msg, tag, arrived, false);
        }
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
                self.copied(gate, piece.data_len());
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

    /// Removes and returns the first posted receive of `gate`'s channel
    /// that accepts a message from the gate's peer with `tag`.
    fn match_posted(&mut self, gate: GateId, tag: u64) -> Option<Posted> {
        let g = &self.gates[gate.0];
        let peer = g.peer;
        let ch = &mut self.channels[g.channel_index];
        let recv_msgs = &self.recv_msgs;
        let i = ch
            .posted
            .iter()
            .position(|p| p.accepts(recv_msgs, peer, tag))?;
        ch.posted.remove(i)
    }

    /// The fast path of a tagged receive matched by a message's first
    /// piece: a whole message (one eager piece, not aborted) that fits is
    /// written to the destination and completes the receive. Anything else
    /// needs a receive message.
    fn land_tagged(
        &mut self,
        gate: GateId,
        tag: u64,
        recv: TaggedRecv,
        piece: &Piece<&[u8]>,
        mem: &mut dyn Memory,
    ) -> Landed {
        let flags = piece.flags;
        let Body::Eager(data) = piece.body else {
            return Landed::Promote;
        };
        if !flags.last() || flags.aborted() || data.len() > recv.dest.len {
            return Landed::Promote;
        }
        memory::write(mem, recv.dest, 0, data);
        self.copied(gate, data.len());
        let status = Status {
            peer: self.gates[gate.0].peer,
            tag,
            len: data.len(),
        };
        self.complete(recv.req, Ok(status));
        Landed::Done
    }

    /// A first piece that no posted receive matched: queue its message as
    /// unexpected, with the pieces that came so far (`last_seen` if its
    /// last one did).
    pub(super) fn start_unexpected(
        &mut self,
        gate: GateId,
        msg: u32,
        tag: u64,
        arrived: Arrived,
        last_seen: bool,
    ) {
        let g = &mut self.gates[gate.0];
        g.incoming.insert(
            msg,
            Incoming::Unmatched {
                tag,
                arrived,
                last_seen,
            },
        );
        let ch = &mut self.channels[g.channel_index];
        ch.unexpected.push_back((gate, msg));
        ch.unexpected_count += 1;
    }

    /// Binds receive `key` to the unmatched message `msg` of `gate`.
    pub(super) fn bind(&mut self, key: ReqId, gate: GateId, msg: u32) {
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
        self.bind_arrived(key, gate, tag, Some(arrived));
    }

    /// Gives receive `key` the message of `gate` with `tag` and the pieces
    /// that arrived before the binding, if any (else the receive keeps its
    /// empty queue); the receive's match completes.
    pub(super) fn bind_arrived(
        &mut self,
        key: ReqId,
        gate: GateId,
        tag: u64,
        arrived: Option<Arrived>,
    ) {
        let peer = self.gates[gate.0].peer;
        let m = self
            .recv_msgs
            .get_mut(&key)
            .expect("binding a live receive");
        m.bound = Some(Bound { gate, peer, tag });
        if let Some(arrived) = arrived {
            // A receive not bound yet holds no piece.
            debug_assert!(m.arrived.is_empty());
            let unused = std::mem::replace(&mut m.arrived, arrived);
            self.spare.keep_arrived(unused);
        }
        if !m.quiet {
            self.complete(key, Ok(Status { peer, tag, len: 0 }));
        }
    }

    pub(super) fn arrive_matched(
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
            if let Some(bound) = msg.bound {
                self.copied(bound.gate, piece.data_len());
            }
        }
        self.pair(key, mem);
        Ok(())
    }
}
