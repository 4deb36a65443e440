//! A rendezvous message at once: the usual large message over a rail whose
//! receiver reads the sender's memory (a few small pieces, then one large
//! piece) leaves in one packet written straight into the driver's transfer
//! buffer, as a small message does ([`Engine::send_message_now`]), when
//! its rail is idle and its gate's window empty: its small pieces eager,
//! its large one as a readable rendezvous request ([`RdvRequest::readable`])
//! whose address the driver gives beside the packet.
//!
//! Nothing waits in the window, so no strategy has anything to weigh: the
//! packet is the one `aggregate` would build (the pieces in order, the
//! request piggybacked on them), without the window's round, and the
//! sender's engine opens the same transfer (`Engine::open_rdv_send`) as for a request
//! submitted the usual way: the receiver's clear-to-send that says it read
//! the data completes it, and one that asks for the data gets it the
//! usual way.

use navette_wire::{EagerHeader, PacketHeader, PieceFlags, RdvRequest};

use super::now::{count_sent_now, now_eager_header, write_packet_header};
use super::{Engine, NowPiece, OutMsg};
use crate::{MemRef, RailId, ReqId};

/// The transfer of the large piece of a message sent at once by
/// [`Engine::send_readable_now`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadableNow {
    /// The large piece's request: it completes once the receiver has read
    /// the data (or had it sent), or fails as any rendezvous send's does.
    pub req: ReqId,
    /// The transfer's id, as in the request: the driver's offer names it.
    pub send_id: u32,
}

impl Engine {
    /// Length of the packet [`Self::send_readable_now`] writes for
    /// `pieces`: every piece but the last eager, the last a rendezvous
    /// request.
    pub fn readable_packet_len(pieces: &[NowPiece<'_>]) -> usize {
        let Some((_, small)) = pieces.split_last() else {
            return PacketHeader::LEN;
        };
        Self::message_packet_len(small) + RdvRequest::LEN
    }

    /// Whether the whole message `out`, not started, made of `pieces` may
    /// leave at once on `rail` in one packet with its last piece read by
    /// the receiver from where it lies: as [`Self::can_send_message_now`],
    /// except that the last piece is at or above the rendezvous threshold
    /// and `rail` is the one rail to the peer, which reads a piece of its
    /// length (as a request submitted the usual way would be marked
    /// readable).
    pub fn can_send_readable_now(
        &mut self,
        out: &OutMsg,
        rail: RailId,
        pieces: &[NowPiece<'_>],
    ) -> bool {
        let Some((large, small)) = pieces.split_last() else {
            return false;
        };
        let body = Self::readable_packet_len(pieces) - PacketHeader::LEN;
        self.gate_if_now(out, rail, pieces.len(), body)
            .is_some_and(|g| {
                large.data.len() >= g.rdv_threshold
                    && small.iter().all(|p| p.data.len() < g.rdv_threshold)
            })
            && self.readable_by(out.peer(), large.data.len())
    }

    /// Writes the packet of the whole message `out` into `packet` (exactly
    /// [`Self::readable_packet_len`] bytes), after
    /// [`Self::can_send_readable_now`] said yes for it: its small pieces
    /// eager, its last a readable rendezvous request for `data` (the large
    /// piece's bytes in the memory the driver resolves: they must stay
    /// there until the returned request completes). The pieces take the
    /// gate's sequence numbers as if submitted one by one; the small ones
    /// have left once the caller's transfer of `packet` has, and the large
    /// one's request waits for the receiver's answer. The driver gives the
    /// receiver the data's address beside the packet.
    ///
    /// # Panics
    /// If `packet` has another length, `out` was started, or `pieces` is
    /// empty (caller bugs).
    pub fn send_readable_now(
        &mut self,
        out: &mut OutMsg,
        pieces: &[NowPiece<'_>],
        data: MemRef,
        packet: &mut [u8],
    ) -> ReadableNow {
        assert!(!out.started(), "a message sent at once was not started");
        let (large, small) = pieces.split_last().expect("a message has a piece");
        assert_eq!(
            packet.len(),
            Self::readable_packet_len(pieces),
            "packet length"
        );
        let req = self.new_req();
        let count = pieces.len();
        let body_len = packet.len() - PacketHeader::LEN;
        let g = &mut self.gates[out.gate.0];
        write_packet_header(packet, count, body_len);
        let mut at = PacketHeader::LEN;
        for (i, piece) in small.iter().enumerate() {
            let eager = now_eager_header(g, out, i, count, piece);
            packet[at..at + EagerHeader::LEN].copy_from_slice(&eager.to_bytes());
            at += EagerHeader::LEN;
            packet[at..at + piece.data.len()].copy_from_slice(piece.data);
            at += piece.data.len();
        }
        count_sent_now(g, count, body_len, small);
        let flags = PieceFlags::new(small.is_empty(), true, large.send, large.recv);
        let request = self.open_rdv_send(out, flags, data, req, true);
        packet[at..].copy_from_slice(&request.to_bytes());
        out.started = true;
        out.ended = true;
        let send_id = request.send_id;
        ReadableNow { req, send_id }
    }
}
