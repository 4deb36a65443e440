//! Both ends of a rendezvous: the sender's request waits for a
//! clear-to-send naming the destination, then its data is queued in
//! fragments; the receiver's data lands straight in that destination.

use navette_wire::{ClearToSend, CtsFlags, RdvDataHeader};

use super::{Engine, GateId};
use crate::error::Violation;
use crate::memory::{self, Memory};
use crate::{ChannelId, MemRef, Pending, Rank, ReqId, RequestError, Status};

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
        if cts.flags.rejected() {
            let rdv = self
                .rdv_sends
                .remove(&cts.send_id)
                .expect("looked up above");
            self.complete(rdv.req, Err(RequestError::RejectedByReceiver));
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
            let rdv = self
                .rdv_sends
                .remove(&cts.send_id)
                .expect("looked up above");
            self.complete(rdv.req, Ok(rdv.status));
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
            let rdv = self.rdv_sends.remove(&send_id).expect("looked up above");
            self.complete(rdv.req, Ok(rdv.status));
        }
    }

    pub(super) fn start_rdv_recv(
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
        let (channel, peer) = (g.channel.0, g.peer);
        g.window.push(Pending::ClearToSend(ClearToSend {
            channel,
            flags: CtsFlags::ACCEPT,
            send_id,
            recv_id,
            offset: 0,
            len: dest.len as u64,
        }));
        self.window_joined(gate);
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
