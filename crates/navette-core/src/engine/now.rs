//! Sending a small tagged message at once, when nothing waits for its rail.
//!
//! The window exists to optimize a flow of requests while rails are busy.
//! When a rail is idle and its gate's window empty, a one-piece eager
//! message has nothing to be scheduled against: the driver may ask
//! [`Engine::can_send_now`], then have [`Engine::send_tagged_now`] write the
//! packet straight into its transfer buffer (a shared-memory cell). The
//! message takes the gate's next message and sequence numbers like any
//! other, so the receiver sees no difference; the sender gets no request
//! (the caller's blocking send is done once its transfer is).

use navette_wire::{EagerHeader, PacketHeader, PieceFlags};

use super::Engine;
use crate::{ChannelId, RailId, Rank};

impl Engine {
    /// Length of the packet [`Self::send_tagged_now`] writes for `len`
    /// bytes of data.
    pub const fn tagged_packet_len(len: usize) -> usize {
        PacketHeader::LEN + EagerHeader::LEN + len
    }

    /// Whether a one-piece tagged message of `len` bytes to `peer` on
    /// `channel` may leave at once on `rail`: the rail leads to `peer`, is
    /// open and idle, the gate's window is empty, and the message is eager
    /// and fits the rail's packets.
    pub fn can_send_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        rail: RailId,
        len: usize,
    ) -> bool {
        let Some(r) = self.rails.get(rail.0 as usize) else {
            return false;
        };
        if r.peer != peer || r.closed || r.in_flight.is_some() {
            return false;
        }
        let max_packet = r.caps.max_packet;
        let gate = self.gate(channel, peer);
        let g = &self.gates[gate.0];
        g.window.is_empty()
            && len < g.rdv_threshold
            && EagerHeader::LEN + len <= max_packet
            && u32::try_from(len).is_ok()
    }

    /// Writes the packet of a one-piece tagged message into `out` (exactly
    /// [`Self::tagged_packet_len`]`(data.len())` bytes), after
    /// [`Self::can_send_now`] said yes for it. The message has left once the
    /// caller's transfer of `out` has.
    ///
    /// # Panics
    /// If `out` has another length (a caller bug).
    pub fn send_tagged_now(
        &mut self,
        channel: ChannelId,
        peer: Rank,
        tag: u64,
        data: &[u8],
        out: &mut [u8],
    ) {
        assert_eq!(
            out.len(),
            Self::tagged_packet_len(data.len()),
            "packet buffer length"
        );
        let gate = self.gate(channel, peer);
        let g = &mut self.gates[gate.0];
        let (seq, msg) = (g.next_seq, g.next_msg);
        g.next_seq = g.next_seq.wrapping_add(1);
        g.next_msg = g.next_msg.wrapping_add(1);
        let len = u32::try_from(data.len()).expect("checked by can_send_now");
        let mut headers = std::mem::take(&mut self.scratch);
        headers.clear();
        PacketHeader {
            chunk_count: 1,
            body_len: EagerHeader::LEN as u32 + len,
        }
        .encode(&mut headers);
        EagerHeader {
            channel: channel.0,
            flags: PieceFlags::TAGGED,
            seq,
            msg,
            tag,
            len,
        }
        .encode(&mut headers);
        let (head, body) = out.split_at_mut(headers.len());
        head.copy_from_slice(&headers);
        body.copy_from_slice(data);
        self.scratch = headers;
    }
}
