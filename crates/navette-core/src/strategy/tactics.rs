//! Moves shared by strategies.

use navette_wire::{Chunk, EagerHeader, RdvDataHeader};

use super::Fill;
use crate::plan::SendProgress;
use crate::window::Priority;
use crate::{PacketBuilder, Pending, RailCaps, Window};

/// Most chunks one packet carries: far below what receivers accept by
/// default ([`navette_wire::Limits::max_chunks`]), and enough to share a
/// packet's header among many small messages.
pub const MAX_CHUNKS: u16 = 256;

/// Moves the window's oldest chunk into `packet`; rendezvous data larger
/// than the rail's fragment size leaves its remainder at the front.
/// Returns whether anything was pushed.
pub fn push_front(window: &mut Window, caps: &RailCaps, packet: &mut PacketBuilder) -> bool {
    if matches!(window.front(), Some(Pending::RdvData { .. })) {
        return cut_rdv_data(window, 0, caps.max_fragment, packet);
    }
    match window.pop_front() {
        Some(chunk) => {
            push_pending(packet, chunk);
            true
        }
        None => false,
    }
}

/// Pushes at most `fragment` bytes (at least one) of the rendezvous data
/// chunk at `index` of the window; the rest stays in its place. Returns
/// whether there was such a chunk.
pub fn cut_rdv_data(
    window: &mut Window,
    index: usize,
    fragment: usize,
    packet: &mut PacketBuilder,
) -> bool {
    let fragment = fragment.max(1);
    match window.get_mut(index) {
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
            true
        }
        Some(Pending::RdvData { .. }) => {
            let chunk = window.remove(index).expect("the chunk is there");
            push_pending(packet, chunk);
            true
        }
        _ => false,
    }
}

/// Body bytes up to which a rail's packets aggregate chunks: its eager
/// limit (pieces below the rendezvous threshold travel in packets), within
/// its largest packet.
pub fn aggregate_limit(caps: &RailCaps) -> usize {
    let smallest = EagerHeader::LEN + 1;
    caps.max_packet.min(caps.rdv_threshold.max(smallest))
}

/// Moves into `packet` the window's chunks that fit in it, below `limit`
/// body bytes: control chunks and EXPRESS pieces first, then the others,
/// each group in window order. The walk skips rendezvous data (unsequenced
/// bulk, left for packets of its own) and stops at the first piece that
/// does not fit, so that no later piece of this gate overtakes it.
/// `scratch` is storage the caller keeps between calls (no allocation once
/// it has grown). Returns [`Fill::Open`] while the packet has room.
pub fn aggregate(
    window: &mut Window,
    limit: usize,
    packet: &mut PacketBuilder,
    scratch: &mut Vec<Pending>,
) -> Fill {
    let mut room = limit.saturating_sub(packet.body_len());
    let mut count = packet.chunk_count();
    let mut stopped = false;
    // The chunks picked are those before `at` but rendezvous data.
    let mut at = 0;
    // Whether rendezvous data or an urgent chunk is among them.
    let (mut skipped, mut urgent) = (false, false);
    for chunk in window.iter() {
        // Rendezvous data skipped counts too: a window of many transfers
        // is not walked in full for every packet.
        if count >= MAX_CHUNKS || at >= usize::from(MAX_CHUNKS) {
            stopped = true;
            break;
        }
        at += 1;
        if matches!(chunk, Pending::RdvData { .. }) {
            skipped = true;
            continue;
        }
        let len = chunk.wire_len();
        if len > room {
            stopped = true;
            at -= 1;
            break;
        }
        room -= len;
        count += 1;
        urgent |= is_urgent(chunk);
    }
    if !skipped && !urgent {
        // The usual case: the window's front, in order.
        for _ in 0..at {
            push_pending(packet, window.pop_front().expect("picked from the window"));
        }
    } else {
        take_urgent_first(window, at, packet, scratch);
    }
    let more_fit = room > EagerHeader::LEN && count < MAX_CHUNKS;
    if stopped || !more_fit {
        Fill::Done
    } else {
        Fill::Open
    }
}

/// Whether a chunk leads its packet.
fn is_urgent(chunk: &Pending) -> bool {
    chunk.priority() >= Priority::Express
}

/// Moves the window's first `at` chunks but rendezvous data into `packet`,
/// urgent ones first, each group in window order.
fn take_urgent_first(
    window: &mut Window,
    at: usize,
    packet: &mut PacketBuilder,
    scratch: &mut Vec<Pending>,
) {
    scratch.clear();
    let mut index = 0;
    for _ in 0..at {
        if matches!(window.get(index), Some(Pending::RdvData { .. })) {
            index += 1;
        } else {
            scratch.push(window.remove(index).expect("picked from the window"));
        }
    }
    if scratch.iter().any(is_urgent) {
        for chunk in scratch.iter().filter(|c| is_urgent(c)) {
            push_pending(packet, chunk.clone());
        }
        scratch.retain(|c| !is_urgent(c));
    }
    for chunk in scratch.drain(..) {
        push_pending(packet, chunk);
    }
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
