//! The send side: pieces into the window, rendezvous from request to done.

use navette_wire::{EagerHeader, PieceFlags, RdvRequest, ReceiveMode, SendMode};

use super::rendezvous::RdvSend;
use super::{Engine, GateId};
use crate::error::UsageError;
use crate::{ChannelId, MemHandle, MemRef, Pending, Rank, ReqId, RequestError, Status};

/// A message being sent: created by [`Engine::send_begin`], fed to
/// [`Engine::send_piece`].
#[derive(Debug)]
pub struct OutMsg {
    pub(super) gate: GateId,
    peer: Rank,
    pub(super) msg: u32,
    pub(super) tag: u64,
    pub(super) started: bool,
    pub(super) ended: bool,
}

impl OutMsg {
    /// Whether a piece has been submitted.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The destination rank.
    pub fn peer(&self) -> Rank {
        self.peer
    }

    /// The message's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }
}

/// One piece to send.
#[derive(Clone, Copy, Debug)]
pub struct PieceSpec {
    /// Where the bytes are; they must stay readable until the piece's request completes.
    pub data: MemRef,
    /// Send mode declared to the receiver.
    pub send: SendMode,
    /// Receive mode declared to the receiver.
    pub recv: ReceiveMode,
    /// Whether this is the message's last piece.
    pub last: bool,
}

impl Engine {
    /// Starts a message to `peer` on `channel`. With no open rail to
    /// `peer` it is refused, saying why: [`UsageError::SendToSelf`] for
    /// this engine's own rank, [`UsageError::NotInJob`] for a rank past
    /// the job's size ([`crate::EngineConfig::size`]), else
    /// [`UsageError::NoRail`] (a peer lost, or one no rail reaches).
    pub fn send_begin(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
    ) -> Result<OutMsg, UsageError> {
        if !self.is_reachable(peer) {
            return Err(self.no_rail(peer));
        }
        let gate = self.gate(channel, peer);
        let g = &mut self.gates[gate.0];
        let msg = g.next_msg;
        g.next_msg = g.next_msg.wrapping_add(1);
        Ok(OutMsg {
            gate,
            peer,
            msg,
            tag,
            started: false,
            ended: false,
        })
    }

    /// Why no open rail leads to `peer` (see [`Self::send_begin`]): asked
    /// only once a send is refused, so one that finds its rail pays for
    /// none of it.
    #[cold]
    #[inline(never)]
    fn no_rail(&self, peer: Rank) -> UsageError {
        self.not_a_peer(peer, UsageError::SendToSelf)
            .unwrap_or(UsageError::NoRail(peer))
    }

    /// Why `peer` is no peer of this engine, if it is not: this engine's
    /// own rank (told by `to_self`) or a rank past the job's size.
    pub(super) fn not_a_peer(
        &self,
        peer: Rank,
        to_self: fn(Rank) -> UsageError,
    ) -> Option<UsageError> {
        match self.config.size {
            _ if peer == self.config.rank => Some(to_self(peer)),
            Some(size) if peer >= size => Some(UsageError::NotInJob { rank: peer, size }),
            _ => None,
        }
    }

    /// Submits the next piece of `out`; its request completes when the data
    /// has left user memory for good.
    ///
    /// # Panics
    /// If `out` already had its last piece: a bug of the interface layer.
    pub fn send_piece(&mut self, out: &mut OutMsg, piece: PieceSpec) -> ReqId {
        self.submit(out, piece, false)
    }

    /// Sends a one-piece tagged message (the point-to-point interface).
    pub fn send_tagged(&mut self, mut out: OutMsg, data: MemRef) -> ReqId {
        let piece = PieceSpec {
            data,
            send: SendMode::Cheaper,
            recv: ReceiveMode::Cheaper,
            last: true,
        };
        self.submit(&mut out, piece, true)
    }

    fn submit(&mut self, out: &mut OutMsg, piece: PieceSpec, tagged: bool) -> ReqId {
        assert!(!out.ended, "no piece after the last one");
        let flags = if tagged {
            PieceFlags::TAGGED
        } else {
            PieceFlags::new(!out.started, piece.last, piece.send, piece.recv)
        };
        out.started = true;
        out.ended = piece.last;
        let req = self.new_req();
        let status = Status {
            peer: out.peer,
            tag: out.tag,
            len: piece.data.len,
        };
        if !self.is_reachable(out.peer) {
            let peer = out.peer;
            self.complete(req, Err(RequestError::PeerUnreachable { peer }));
            return req;
        }
        let gate = &mut self.gates[out.gate.0];
        if piece.data.len < gate.rdv_threshold {
            let header = EagerHeader {
                channel: gate.channel.0,
                flags,
                seq: gate.take_seq(),
                msg: out.msg,
                tag: out.tag,
                len: u32::try_from(piece.data.len).expect("rendezvous threshold below 4 GiB"),
            };
            gate.window.push(Pending::Eager {
                header,
                data: piece.data,
                done: Some((req, status)),
            });
        } else {
            let readable = self.readable_by(out.peer, piece.data.len);
            let request = self.open_rdv_send(out, flags, piece.data, req, readable);
            self.gates[out.gate.0]
                .window
                .push(Pending::RdvRequest(request));
        }
        self.window_joined(out.gate);
        req
    }

    /// Opens the rendezvous transfer of a piece of `out` with `flags`,
    /// whose data is `data` and whose request is `req` (`readable` where
    /// the peer reads the data from where it lies): the piece takes the
    /// gate's next sequence number, and the sender's state waits for the
    /// receiver's clear-to-send. Returns the request chunk that announces
    /// it, for the caller to send.
    pub(super) fn open_rdv_send(
        &mut self,
        out: &OutMsg,
        flags: PieceFlags,
        data: MemRef,
        req: ReqId,
        readable: bool,
    ) -> RdvRequest {
        let send_id = self.new_transfer();
        let g = &mut self.gates[out.gate.0];
        let (channel, seq) = (g.channel.0, g.take_seq());
        let status = Status {
            peer: out.peer,
            tag: out.tag,
            len: data.len,
        };
        self.rdv_sends.insert(
            send_id,
            RdvSend {
                peer: out.peer,
                channel,
                data,
                req,
                status,
                requested: 0,
                sent: 0,
                readable,
            },
        );
        RdvRequest {
            channel,
            flags,
            seq,
            msg: out.msg,
            tag: out.tag,
            send_id,
            total_len: data.len as u64,
            readable,
        }
    }

    /// Abandons a message before its last piece: the receiver gets an
    /// error instead of waiting for pieces that will never come. A message
    /// none of whose pieces was submitted sends nothing (see
    /// [`Self::send_abort_unsent`]).
    pub fn send_abort(&mut self, out: OutMsg) {
        if out.started && !out.ended {
            self.push_abort(&out, PieceFlags::ABORT);
        }
    }

    /// Abandons a message none of whose pieces was submitted (its sender
    /// gave up while packing it) by sending an empty aborted message in its
    /// place: the receive that matches it fails with `Aborted` rather than
    /// waiting. A started message is abandoned as by [`Self::send_abort`].
    pub fn send_abort_unsent(&mut self, out: OutMsg) {
        if out.started {
            self.send_abort(out);
        } else {
            self.push_abort(&out, PieceFlags::ABORT_UNSENT);
        }
    }

    /// Queues the empty piece with `flags` that abandons `out`.
    fn push_abort(&mut self, out: &OutMsg, flags: PieceFlags) {
        let gate = &mut self.gates[out.gate.0];
        let header = EagerHeader {
            channel: gate.channel.0,
            flags,
            seq: gate.take_seq(),
            msg: out.msg,
            tag: out.tag,
            len: 0,
        };
        gate.window.push(Pending::Eager {
            header,
            data: MemRef::whole(MemHandle(u64::MAX), 0),
            done: None,
        });
        self.window_joined(out.gate);
    }
}
