//! Moves shared by strategies.

use navette_wire::{Chunk, RdvDataHeader};

use crate::plan::SendProgress;
use crate::{PacketBuilder, Pending, RailCaps, Window};

/// Moves the window's oldest chunk into `packet`; rendezvous data larger
/// than the rail's fragment size leaves its remainder at the front.
/// Returns whether anything was pushed.
pub fn push_front(window: &mut Window, caps: &RailCaps, packet: &mut PacketBuilder) -> bool {
    let fragment = caps.max_fragment.max(1);
    match window.front_mut() {
        None => return false,
        Some(Pending::RdvData {
            channel,
            recv_id,
            send_id,
            offset,
            data,
        }) if data.len > fragment => {
            let head = data.slice(0, fragment);
            push_rdv(packet, *channel, *recv_id, *send_id, *offset, head);
            *offset += fragment as u64;
            *data = data.slice(fragment, data.len - fragment);
            return true;
        }
        Some(_) => {}
    }
    let chunk = window.pop_front().expect("front exists");
    push_pending(packet, chunk);
    true
}

/// Pushes a whole pending chunk.
pub fn push_pending(packet: &mut PacketBuilder, chunk: Pending) {
    match chunk {
        Pending::Eager { header, data, done } => {
            let done = match done {
                Some((req, status)) => SendProgress::Piece { req, status },
                None => SendProgress::Internal,
            };
            packet.push_eager(&header, data, done);
        }
        Pending::RdvRequest(r) => packet.push_control(&Chunk::RdvRequest(r)),
        Pending::ClearToSend(c) => packet.push_control(&Chunk::ClearToSend(c)),
        Pending::RdvData {
            channel,
            recv_id,
            send_id,
            offset,
            data,
        } => push_rdv(packet, channel, recv_id, send_id, offset, data),
    }
}

fn push_rdv(
    packet: &mut PacketBuilder,
    channel: u16,
    recv_id: u32,
    send_id: u32,
    offset: u64,
    data: crate::MemRef,
) {
    let header = RdvDataHeader {
        channel,
        recv_id,
        offset,
        len: u32::try_from(data.len).expect("fragments are below 4 GiB"),
    };
    packet.push_rdv_data(&header, data, send_id);
}
