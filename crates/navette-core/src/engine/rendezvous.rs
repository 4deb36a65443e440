//! Both ends of a rendezvous: the sender's request waits for a
//! clear-to-send naming the destination, then its data is queued in
//! fragments; the receiver's data lands straight in that destination.
//!
//! A *readable* request (on a rail whose receiver reads the sender's
//! memory, [`crate::RailCaps::read_min`]) skips the two middle steps: the
//! driver gives the receiver the data's address beside the request, the
//! receiver's engine hands its driver a read ([`RdvRead`]) as soon as the
//! destination is known, and the clear-to-send that follows the read
//! ([`CtsFlags::READ`]) completes the send. One crossing each way, as
//! MPI's and UCX's single-copy "get" protocols, instead of three.

use navette_wire::{Chunk, ClearToSend, CtsFlags, PacketHeader, RdvDataHeader};

use super::{Engine, GateId};
use crate::error::Violation;
use crate::memory::{self, Memory};
use crate::{ChannelId, MemRef, Pending, Rank, ReqId, RequestError, Status};

/// A read the driver is to make: the data of the peer's readable
/// rendezvous request `send_id` (whose address came with the request)
/// into `dest`, then [`Engine::handle_read_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdvRead {
    /// The sender.
    pub peer: Rank,
    /// The sender's transfer id, as in its request.
    pub send_id: u32,
    /// Where the data goes: the whole piece.
    pub dest: MemRef,
    channel: u16,
    recv_id: u32,
}

/// A rendezvous transfer on the sender, from request to completion.
#[derive(Debug)]
pub(crate) struct RdvSend {
    pub(super) peer: Rank,
    pub(super) channel: u16,
    pub(super) data: MemRef,
    pub(super) req: ReqId,
    pub(super) status: Status,
    pub(super) requested: u64,
    pub(super) sent: u64,
    /// The request went out readable: the receiver may read the data and
    /// answer [`CtsFlags::READ`].
    pub(super) readable: bool,
}

/// A rendezvous transfer on the receiver: clear-to-send sent, data landing.
#[derive(Debug)]
pub(crate) struct RdvRecv {
    pub(super) peer: Rank,
    pub(super) channel: u16,
    pub(super) key: ReqId,
    pub(super) req: ReqId,
    pub(super) dest: MemRef,
    pub(super) received: u64,
    pub(super) status: Status,
}

impl Engine {
    pub(super) fn on_clear_to_send(
        &mut self,
        peer: Rank,
        cts: ClearToSend,
    ) -> Result<(), Violation> {
        let Some(rdv) = self.rdv_sends.get_mut(&cts.send_id) else {
            return Err(Violation::UnknownTransfer(cts.send_id));
        };
        if rdv.peer != peer || rdv.channel != cts.channel {
            return Err(Violation::UnknownTransfer(cts.send_id));
        }
        if cts.flags.read() {
            // Only a readable request may be answered so, and only for the
            // whole piece, before any of it was asked for.
            if !rdv.readable {
                return Err(Violation::UnknownTransfer(cts.send_id));
            }
            let total = rdv.data.len as u64;
            if cts.offset != 0 || cts.len != total || rdv.requested != 0 {
                return Err(Violation::OutOfBounds {
                    offset: cts.offset,
                    len: cts.len,
                    total,
                });
            }
            self.end_rdv_send(cts.send_id, None);
            return Ok(());
        }
        if cts.flags.rejected() {
            self.end_rdv_send(cts.send_id, Some(RequestError::RejectedByReceiver));
            return Ok(());
        }
        let total = rdv.data.len as u64;
        let in_bounds = cts
            .offset
            .checked_add(cts.len)
            .is_some_and(|end| end <= total && rdv.requested + cts.len <= total);
        if !in_bounds {
            return Err(Violation::OutOfBounds {
                offset: cts.offset,
                len: cts.len,
                total,
            });
        }
        rdv.requested += cts.len;
        if total == 0 {
            self.end_rdv_send(cts.send_id, None);
            return Ok(());
        }
        let data = rdv.data.slice(cts.offset as usize, cts.len as usize);
        let chunk = Pending::RdvData {
            channel: cts.channel,
            recv_id: cts.recv_id,
            send_id: cts.send_id,
            offset: cts.offset,
            data,
        };
        let gate = self.gate(super::ChannelId(cts.channel), peer);
        self.gates[gate.0].window.push(chunk);
        self.window_joined(gate);
        Ok(())
    }

    pub(super) fn on_rdv_sent(&mut self, send_id: u32, len: usize) {
        let Some(rdv) = self.rdv_sends.get_mut(&send_id) else {
            return;
        };
        rdv.sent += len as u64;
        if rdv.sent >= rdv.data.len as u64 {
            self.end_rdv_send(send_id, None);
        }
    }

    /// Completes the rendezvous send `send_id` (which the caller found)
    /// with its status, or with `err`.
    fn end_rdv_send(&mut self, send_id: u32, err: Option<RequestError>) {
        let rdv = self
            .rdv_sends
            .remove(&send_id)
            .expect("looked up by the caller");
        self.complete(rdv.req, err.map_or(Ok(rdv.status), Err));
    }

    /// Starts receiving the rendezvous piece `send_id` into `dest`: asks
    /// for its data, or, for a `readable` request, hands the driver a read.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_rdv_recv(
        &mut self,
        gate: GateId,
        key: ReqId,
        req: ReqId,
        dest: MemRef,
        send_id: u32,
        readable: bool,
        status: Status,
    ) {
        let recv_id = self.new_transfer();
        let g = &self.gates[gate.0];
        let (channel, peer) = (g.channel.0, g.peer);
        // (A piece is read whole: its length is a fragment's, below 4 GiB.)
        if readable && dest.len > 0 && u32::try_from(dest.len).is_ok() {
            self.reads.push_back(RdvRead {
                peer,
                send_id,
                dest,
                channel,
                recv_id,
            });
            // The driver looks for reads where it looks for packets.
            self.queued = true;
        } else {
            if readable {
                self.forget_read(peer, send_id);
            }
            self.push_cts(gate, CtsFlags::ACCEPT, send_id, recv_id, dest.len);
        }
        if dest.len == 0 {
            self.complete(req, Ok(status));
            self.piece_done(key);
            return;
        }
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

    /// Queues a clear-to-send of `flags` for the whole piece `send_id`.
    fn push_cts(&mut self, gate: GateId, flags: CtsFlags, send_id: u32, recv_id: u32, len: usize) {
        let g = &mut self.gates[gate.0];
        let cts = whole_cts(g.channel.0, flags, send_id, recv_id, len);
        g.window.push(Pending::ClearToSend(cts));
        self.window_joined(gate);
    }

    /// Whether a rendezvous request of `len` bytes to `peer` goes out
    /// readable: one open rail reaches the peer (with several, strategies
    /// may split the data over them), and its receiver reads pieces of
    /// this size ([`crate::RailCaps::read_min`], up to one fragment).
    pub(super) fn readable_by(&self, peer: Rank, len: usize) -> bool {
        let Some(p) = self.peers.get(&peer) else {
            return false;
        };
        let mut open = p
            .rails
            .iter()
            .map(|r| &self.rails[r.0 as usize])
            .filter(|r| !r.closed);
        match (open.next(), open.next()) {
            (Some(rail), None) => rail
                .caps
                .read_min
                .is_some_and(|min| len >= min && len <= rail.caps.max_fragment),
            _ => false,
        }
    }

    /// Whether a rail to `peer` reads its memory, so that its driver keeps
    /// the offers of readable requests ([`Self::poll_unread`] tells it
    /// which to forget); drivers whose rails do not read never see one.
    pub(super) fn reads_from(&self, peer: Rank) -> bool {
        self.peers.get(&peer).is_some_and(|p| {
            p.rails
                .iter()
                .any(|r| self.rails[r.0 as usize].caps.read_min.is_some())
        })
    }

    /// The next read for the driver to make, oldest first (see
    /// [`RdvRead`]); the driver asks after each event that may have
    /// matched a readable request, as it asks for packets
    /// ([`Self::take_queued`]).
    pub fn poll_read(&mut self) -> Option<RdvRead> {
        self.reads.pop_front()
    }

    /// Hands the driver the readable request `send_id` of `peer`, which
    /// will not be read, to forget its offer ([`Self::poll_unread`]).
    pub(super) fn forget_read(&mut self, peer: Rank, send_id: u32) {
        self.unread.push_back((peer, send_id));
        // The driver looks for these where it looks for packets.
        self.queued = true;
    }

    /// The next readable request that will not be read (its receive
    /// rejected it or was dropped, or this side's rail does not read
    /// it): the peer and its transfer id, whose address the driver may
    /// forget; oldest first. Each readable request ends in exactly one
    /// [`Self::poll_read`] or one of these, unless its peer is lost
    /// first (the driver then forgets everything of that peer).
    pub fn poll_unread(&mut self) -> Option<(Rank, u32)> {
        self.unread.pop_front()
    }

    /// Whether a read waits for [`Self::poll_read`], or a refused request
    /// for [`Self::poll_unread`]: a driver's round asks this first, at the
    /// cost of a load or two.
    #[inline]
    pub fn has_reads(&self) -> bool {
        !self.reads.is_empty() || !self.unread.is_empty()
    }

    /// Reports the read of `read`: its data is in place (`landed`), or the
    /// driver could not read it (no address came for it, or the read
    /// failed in a way that is not the peer's fault), in which case the
    /// data is asked for the usual way and sent. A read whose destination
    /// its owner cancelled meanwhile counts as landed: the sender is told
    /// it is done.
    pub fn handle_read_done(&mut self, read: RdvRead, landed: bool) {
        let gate = self.gate(ChannelId(read.channel), read.peer);
        let flags = if landed {
            CtsFlags::READ
        } else {
            CtsFlags::ACCEPT
        };
        self.push_cts(gate, flags, read.send_id, read.recv_id, read.dest.len);
        if landed {
            self.read_landed(&read);
        }
    }

    /// Counts the data of `read` as landed.
    fn read_landed(&mut self, read: &RdvRead) {
        // A whole piece, within u32 like every fragment (checked when the
        // read was queued).
        let Ok(len) = u32::try_from(read.dest.len) else {
            return;
        };
        self.rdv_landed(&RdvDataHeader {
            channel: read.channel,
            recv_id: read.recv_id,
            offset: 0,
            len,
        });
    }

    /// Bytes of the packet that [`Self::read_done_now`] writes.
    pub const READ_DONE_LEN: usize = PacketHeader::LEN + ClearToSend::LEN;

    /// Reports the landed read of `read` as [`Self::handle_read_done`]
    /// does, for a driver that sends its answer at once: writes into `out`
    /// (exactly [`Self::READ_DONE_LEN`] bytes) the packet of the
    /// clear-to-send that tells the sender its data was read, instead of
    /// queuing it for the gate's strategy. The caller must send those
    /// bytes (the sender waits for them); one that has no room calls
    /// [`Self::handle_read_done`] instead. A control chunk needs no
    /// order among the gate's other chunks.
    ///
    /// # Panics
    /// If `out` has another length (a caller bug).
    pub fn read_done_now(&mut self, read: RdvRead, out: &mut [u8]) {
        let cts = whole_cts(
            read.channel,
            CtsFlags::READ,
            read.send_id,
            read.recv_id,
            read.dest.len,
        );
        // Built as every packet is, in a recycled plan: a control chunk's
        // plan holds the whole packet in its own bytes.
        let mut packet = self.pool.builder();
        packet.push_control(&Chunk::ClearToSend(cts));
        let (plan, progress) = packet.finish();
        out.copy_from_slice(&plan.bytes);
        self.pool.put_plan(plan);
        self.pool.put_progress(progress);
        let gate = self.gate(ChannelId(read.channel), read.peer);
        let stats = &mut self.gates[gate.0].stats;
        stats.packets_sent += 1;
        stats.chunks_sent += 1;
        stats.bytes_sent += ClearToSend::LEN as u64;
        self.read_landed(&read);
    }

    /// The data of our readable rendezvous request `send_id` while the
    /// receiver may still read it: what a driver gives the receiver the
    /// address of (see [`crate::PacketPlan::offers`]), and checks a peer's
    /// offer to share the read against.
    pub fn offered_data(&self, send_id: u32) -> Option<(Rank, MemRef)> {
        self.rdv_sends
            .get(&send_id)
            .filter(|r| r.readable && r.requested == 0)
            .map(|r| (r.peer, r.data))
    }

    pub(super) fn on_rdv_data(
        &mut self,
        peer: Rank,
        header: RdvDataHeader,
        data: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        let dest = self.rdv_landing(peer, &header)?;
        // A destination whose owner cancelled no longer resolves: dropped.
        memory::write(mem, dest, 0, data);
        if let Some(&gate) = self.gate_index.get(&(ChannelId(header.channel), peer)) {
            self.copied(gate, data.len());
        }
        self.rdv_landed(&header);
        Ok(())
    }

    /// Where the data of `header` goes, after checking that `peer` may send
    /// it: the transfer exists, is the peer's, and the range fits.
    pub(super) fn rdv_landing(
        &self,
        peer: Rank,
        header: &RdvDataHeader,
    ) -> Result<MemRef, Violation> {
        let Some(r) = self.rdv_recvs.get(&header.recv_id) else {
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
        Ok(r.dest.slice(header.offset as usize, len as usize))
    }

    /// Counts the data of `header` as landed (checked by [`Self::rdv_landing`]).
    pub(super) fn rdv_landed(&mut self, header: &RdvDataHeader) {
        let len = u64::from(header.len);
        let Some(r) = self.rdv_recvs.get_mut(&header.recv_id) else {
            return;
        };
        r.received += len;
        if r.received == r.dest.len as u64 {
            let r = self
                .rdv_recvs
                .remove(&header.recv_id)
                .expect("looked up above");
            self.complete(r.req, Ok(r.status));
            self.piece_done(r.key);
            self.check_end(r.key);
        }
    }
}

/// A clear-to-send for the whole piece `send_id` of `len` bytes.
fn whole_cts(channel: u16, flags: CtsFlags, send_id: u32, recv_id: u32, len: usize) -> ClearToSend {
    ClearToSend {
        channel,
        flags,
        send_id,
        recv_id,
        offset: 0,
        len: len as u64,
    }
}
