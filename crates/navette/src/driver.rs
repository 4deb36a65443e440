//! The contract between a node and a driver.
//!
//! A driver moves packets between its network and the engine: it feeds
//! received packets and send completions in, and asks for the next packet
//! of each idle rail. Protocol logic never lives in a driver.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

use navette_core::{
    Memory, OpenToSend, PacketPlan, ProtocolError, RailCaps, RailId, Rank, RecvNowOutcome,
};

use crate::Result;
use crate::lock::MutexGuard;
use crate::node::{NodeCore, State};

/// What a thread does once its packet has left at once: a hint for where
/// a driver leaves the packet's memory (see [`Driver::send_now`] and
/// [`Driver::flush_staged`]; messages and RPCs sent at once,
/// [`Driver::send_parts_now`] and [`Driver::send_message_now`], count as
/// [`Then::Waits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Then {
    /// It waits (a blocking send, an RPC, the end of a list of sends): the
    /// packet's memory is the receiver's to read next, and a driver whose
    /// transfer is a copy may hand it over (shm: out of the sender's own
    /// caches).
    Waits,
    /// It sends more at once (non-blocking sends in a row): its own time
    /// comes first.
    SendsMore,
}

/// A network technology's transfer layer.
pub trait Driver: Send + Sync + fmt::Debug {
    /// The driver's name (`sim`, `tcp`, `shm`).
    fn name(&self) -> &'static str;

    /// One round of progress on behalf of `node`'s waiting thread: receive,
    /// hand idle rails their next packet. Returns whether anything happened.
    fn progress(&self, node: &NodeCore) -> Result<bool>;

    /// [`Driver::progress`] for a thread whose blocking receive waits
    /// outside the engine (a blocking `Node::recv` with nothing before it
    /// on its channel): a driver may first show the next received packet
    /// to that receive alone, with less locking. The default is `progress`.
    fn progress_lean(&self, node: &NodeCore) -> Result<bool> {
        self.progress(node)
    }

    /// Blocks the calling thread until the driver may have progress to make
    /// (data arrived, a socket became writable, [`Driver::wake`] was called)
    /// or `timeout` passed. Called by waiting threads once spinning found
    /// nothing to do. The default sleeps for at most 50 µs.
    fn wait(&self, node: &NodeCore, timeout: Duration) -> Result<()> {
        let _ = node;
        std::thread::sleep(timeout.min(Duration::from_micros(50)));
        Ok(())
    }

    /// Wakes threads blocked in [`Driver::wait`]: work was submitted.
    fn wake(&self) {}

    /// Sends a small tagged message at once, without a request, if the
    /// driver can put it on its rail to `gate`'s peer right now (see
    /// [`navette_core::Engine::can_send_now`]): `Some(result)` when the
    /// message has left the caller's memory, `None` to go the usual way.
    /// `then` says what the sending thread does next, a hint for where
    /// the driver leaves the packet's memory. The default never sends.
    fn send_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
        then: Then,
    ) -> Option<Result<navette_core::Status>> {
        let _ = (node, gate, tag, data, then);
        None
    }

    /// The longest non-blocking send (`Node::isend`) that goes to its
    /// peer's open packet (or the window) without trying
    /// [`Driver::send_now`] first, as a blocking send does; `None` where
    /// every one tries it first. Where a packet costs little more than its
    /// bytes (a copy into shared memory), leaving at once lets the receiver
    /// start on a message while its sender goes on to the next; where each
    /// packet costs a system call (a socket write), or where the message is
    /// so small that its packet's fixed cost outweighs its bytes,
    /// non-blocking sends wait for the next round (in their peer's open
    /// packet, or the window), which sends them in one packet. Read once,
    /// as the node is made. The default, `Some(usize::MAX)`, is every
    /// length: non-blocking sends never try to leave at once.
    fn stages_up_to(&self) -> Option<usize> {
        Some(usize::MAX)
    }

    /// A hint that a packet to `peer` is about to be written: a thread is
    /// about to send a message at once, to pack a message or an RPC, or to
    /// flush the open packets it waits for. A driver whose transfer is a
    /// copy may ask for the memory it will write, so that it is on its way
    /// to this core by then. The default does nothing.
    fn ready_to_push(&self, peer: Rank) {
        let _ = peer;
    }

    /// Sends the small messages waiting in open packets (see
    /// `navette_core::Engine::stage_tagged`) now, for a thread about to wait
    /// for them or (where [`Driver::stages_up_to`] lets larger messages
    /// leave at once) to send one at once that must not overtake them:
    /// `then` says which (see [`Then`]). A driver whose transfer is a copy
    /// writes them without a whole round of progress and returns
    /// `Ok(true)` if any left; the default makes a round
    /// ([`Driver::progress`]), which sends them with the rest, and returns
    /// whether it moved anything.
    fn flush_staged(&self, node: &NodeCore, then: Then) -> Result<bool> {
        let _ = then;
        self.progress(node)
    }

    /// Sends the open packets that closed (full, see
    /// `navette_core::Engine::stage_tagged`) now, for a thread whose
    /// message closed one and that goes on sending: the receiver lands the
    /// full packet while the next one fills. A driver whose transfer is a
    /// copy writes them as [`Driver::flush_staged`] does, and leaves the
    /// packet taking messages open; the default makes a round
    /// ([`Driver::progress`]), which sends them with the rest. Whether it
    /// moved anything.
    fn send_closed(&self, node: &NodeCore) -> Result<bool> {
        self.progress(node)
    }

    /// Sends the whole small message `out` (not started) at once, in one
    /// packet and without requests, if the driver can put it on its rail
    /// to the peer right now (see
    /// [`navette_core::Engine::can_send_message_now`]): `Some(result)` when
    /// it has left the caller's memory or failed (then `out` is ended),
    /// `None` to go the usual way. The default never does.
    fn send_message_now(
        &self,
        node: &NodeCore,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> Option<Result<()>> {
        let _ = (node, out, pieces);
        None
    }

    /// [`Self::send_message_now`] of a message whose last piece is large
    /// and whose peer reads it from where it lies (see
    /// [`navette_core::Engine::send_readable_now`]): the small pieces go
    /// in the packet, the large one's address beside it. The large piece's
    /// bytes are lent to the node as they go: `Some(Ok((request, range)))`
    /// gives the large piece's request, which completes once the receiver
    /// has the data, and the range lent, which the caller must release
    /// (a `Registration`) before the bytes' borrow ends; `None` to go the
    /// usual way. The default never does.
    fn send_readable_now(
        &self,
        node: &NodeCore,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> Option<Result<(navette_core::ReqId, navette_core::MemRef)>> {
        let _ = (node, out, pieces);
        None
    }

    /// [`Self::send_now`] of a message whose data is `parts` back to
    /// back, each copied straight into the packet: an RPC call or reply
    /// sent as one tagged piece, its pieces' table then their data (see
    /// `Packing::try_send_table`). `arm` runs under the node's lock once
    /// the engine agrees that the message may leave at once, before it is
    /// written: what must be in place before an answer can come (an RPC
    /// call's reply receive). It may run for a message that then goes the
    /// usual way after all (a full ring), which must then not arm twice.
    /// The default never sends at once.
    fn send_parts_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        arm: &mut dyn FnMut(&mut DriverPort<'_>),
    ) -> Option<Result<navette_core::Status>> {
        let _ = (node, gate, tag, parts, arm);
        None
    }

    /// The driver's own counters, by name (bytes it copied among them),
    /// for the node's statistics. The default has none.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Bytes this driver copied itself so far: packets into shared cells,
    /// data out of a connection's buffer. Copies the kernel makes (socket
    /// reads and writes, single-copy reads between processes) are not
    /// counted. The default is 0.
    fn bytes_copied(&self) -> u64 {
        0
    }

    /// The driver's clock, the time it gives the engine, if it has one
    /// apart from events (reports read it so that ages grow during a stall).
    fn now(&self) -> Option<Duration> {
        None
    }

    /// Ends the session for `node`, once every send it accepted has
    /// completed: typically waits for the other ranks (while still serving
    /// them), then closes connections. The default does nothing.
    fn finalize(&self, node: &NodeCore) -> Result<()> {
        let _ = node;
        Ok(())
    }
}

/// Waits, while `driver` keeps serving peers for `node`, until every rank
/// of the job reached the bootstrap's fence: how a driver ends a session
/// without leaving a peer that still needs it (RPC services included).
pub(crate) fn serve_until_fenced(
    driver: &dyn Driver,
    node: &NodeCore,
    bootstrap: &dyn navette_session::Bootstrap,
) -> Result<()> {
    let fenced = std::thread::scope(|s| {
        let fence = s.spawn(|| bootstrap.fence());
        while !fence.is_finished() {
            let moved = driver.progress(node)?;
            node.serve_calls();
            if !moved {
                driver.wait(node, Duration::from_millis(1))?;
            }
        }
        Ok::<_, crate::Error>(fence.join())
    })?;
    match fenced {
        Ok(result) => Ok(result?),
        Err(_) => Err(crate::Error::Driver {
            driver: driver.name(),
            message: "the bootstrap fence panicked".into(),
        }),
    }
}

/// A received packet: its bytes, or where they lie in a buffer the driver
/// may give away (see [`DriverPort::handle_packet_in`]).
enum PacketIn<'b> {
    Bytes(&'b [u8]),
    Buf(&'b mut Vec<u8>, Range<usize>),
}

impl PacketIn<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Bytes(bytes) => bytes,
            Self::Buf(buf, range) => &buf[range.clone()],
        }
    }
}

/// A driver's locked access to a node's engine and memory.
#[derive(Debug)]
pub struct DriverPort<'a> {
    core: &'a NodeCore,
    state: MutexGuard<'a, State>,
}

impl<'a> DriverPort<'a> {
    pub(crate) fn new(core: &'a NodeCore, state: MutexGuard<'a, State>) -> Self {
        Self { core, state }
    }

    /// The node's state, for the interface layer's own work under the
    /// lock a driver holds (see [`Driver::send_parts_now`]'s `arm`).
    pub(crate) fn state(&mut self) -> &mut State {
        &mut self.state
    }

    /// Declares a rail to `peer`.
    pub fn add_rail(&mut self, peer: Rank, caps: RailCaps) -> RailId {
        self.state.engine.add_rail(peer, caps)
    }

    /// Feeds a received packet; an error means the rail must be closed.
    /// `now` reads the driver's clock: a packet that lands a receive
    /// waiting outside the engine needs no time, and does not read it.
    pub fn handle_packet(
        &mut self,
        now: impl FnOnce() -> Duration,
        rail: RailId,
        bytes: &[u8],
    ) -> Result<(), ProtocolError> {
        if self.land_now(rail, bytes) {
            return Ok(());
        }
        self.handle_unlanded(now, rail, bytes)
    }

    /// Hands the engine a packet that landed in no receive waiting outside
    /// it.
    fn handle_unlanded(
        &mut self,
        now: impl FnOnce() -> Duration,
        rail: RailId,
        bytes: &[u8],
    ) -> Result<(), ProtocolError> {
        let State { engine, mem, .. } = &mut *self.state;
        let out = engine.handle_packet(now(), rail, bytes, mem);
        // For the RPC dispatcher, if there is one: it looks only when a
        // call (or a late reply) came unexpected. Under the node's lock,
        // as every change of the count.
        if self.core.rpc.get().is_some() {
            let count = engine.unexpected_arrivals(crate::rpc::CHANNEL);
            self.core.arrivals.store(count, Ordering::Release);
        }
        self.mark_if_queued();
        out
    }

    /// [`Self::handle_packet`] for the packet `buf[range]`, in a buffer
    /// whose other bytes the driver no longer needs: a large message that
    /// lands whole at once may keep `buf` rather than a copy of its data
    /// (see [`navette_core::Engine::recv_whole_now_in`]), leaving another
    /// buffer in its place. `Ok(true)` then: the driver holds nothing in
    /// `buf` any more. `range` must lie within `buf` (the driver's own
    /// framing says where its packet is).
    pub fn handle_packet_in(
        &mut self,
        now: impl FnOnce() -> Duration,
        rail: RailId,
        buf: &mut Vec<u8>,
        range: Range<usize>,
    ) -> Result<bool, ProtocolError> {
        let mut packet = PacketIn::Buf(buf, range);
        match self.land_outside(rail, &mut packet) {
            (true, taken) => Ok(taken),
            (false, _) => self
                .handle_unlanded(now, rail, packet.bytes())
                .map(|()| false),
        }
    }

    /// Shows a packet to the receives waiting outside the engine only (a
    /// blocking tagged receive's, non-blocking ones', a whole message's):
    /// whether it landed in one (the packet is then handled). Otherwise
    /// the packet must still go through [`Self::handle_packet`].
    pub fn land_now(&mut self, rail: RailId, bytes: &[u8]) -> bool {
        self.land_outside(rail, &mut PacketIn::Bytes(bytes)).0
    }

    /// [`Self::land_now`] for either kind of packet: whether it landed,
    /// and whether a whole message took the driver's buffer.
    #[inline(always)]
    fn land_outside(&mut self, rail: RailId, packet: &mut PacketIn<'_>) -> (bool, bool) {
        // Oldest first: a blocking receive or a whole message waits outside
        // the engine only where no receive of the list waits on its
        // channel, so those of the list on a channel are the newer.
        if self.land_tagged_now(rail, packet.bytes()) {
            return (true, false);
        }
        let settled = &self.core.lean_whole_settled;
        let whole = match packet {
            PacketIn::Bytes(bytes) => (self.state.land_whole_now(rail, bytes, settled), false),
            PacketIn::Buf(buf, range) => {
                self.state
                    .land_whole_now_in(rail, buf, range.clone(), settled)
            }
        };
        if whole.0 {
            return whole;
        }
        (self.state.land_irecvs_now(rail, packet.bytes()), false)
    }

    /// Shows a packet to the blocking tagged receive waiting outside the
    /// engine, if any: whether it landed there.
    fn land_tagged_now(&mut self, rail: RailId, bytes: &[u8]) -> bool {
        let Some(outcome) = self.state.recv_now(rail, bytes) else {
            return false;
        };
        self.core.lean_slot.record(outcome);
        matches!(outcome, RecvNowOutcome::Landed(_))
    }

    /// Reports that the rail's packet has been sent.
    pub fn handle_send_complete(&mut self, now: Duration, rail: RailId) {
        let engine = &mut self.state.engine;
        engine.handle_send_complete(now, rail);
        let more = engine
            .rail(rail)
            .is_some_and(|(peer, _)| engine.has_pending(peer));
        if engine.take_queued() || more {
            self.core.mark_dirty();
        }
    }

    /// Marks the node as having packets to send if the last event queued a
    /// chunk: a received packet that only completes a receive (the usual
    /// case) sends the driver on no needless pass over its rails.
    fn mark_if_queued(&mut self) {
        if self.state.engine.take_queued() {
            self.core.mark_dirty();
        }
    }

    /// The next packet for an idle rail.
    pub fn poll_transmit(&mut self, now: Duration, rail: RailId) -> Option<PacketPlan> {
        self.state.engine.poll_transmit(now, rail)
    }

    /// Gives back a plan once its packet is sent, for reuse of its buffers.
    pub fn recycle_plan(&mut self, plan: PacketPlan) {
        self.state.engine.recycle_plan(plan);
    }

    /// The rails, in creation order.
    pub fn rails(&self) -> Vec<RailId> {
        self.state.engine.rails().collect()
    }

    /// Stops using a rail.
    pub fn close_rail(&mut self, rail: RailId) {
        self.state.engine.close_rail(rail);
        // Receives waiting outside the engine learn of a lost peer only
        // the usual way: posted, the engine fails them if they were its.
        // Oldest first, as `land_outside` shows them packets.
        if self.state.post_waiting_lean() {
            self.core.lean_slot.record(RecvNowOutcome::Post);
        }
        self.state
            .post_waiting_wholes(&self.core.lean_whole_settled);
        self.state.post_irecvs();
    }

    /// Where the data of a rendezvous data chunk received on `rail` goes
    /// (see [`navette_core::Engine::rdv_destination`]); an error means the
    /// peer broke the protocol.
    pub fn rdv_destination(
        &self,
        rail: RailId,
        header: &navette_wire::RdvDataHeader,
    ) -> Result<navette_core::MemRef, ProtocolError> {
        self.state.engine.rdv_destination(rail, header)
    }

    /// Reports that the data of `header` has been written to its destination.
    pub fn handle_rdv_landed(
        &mut self,
        now: Duration,
        rail: RailId,
        header: &navette_wire::RdvDataHeader,
    ) -> Result<(), ProtocolError> {
        let out = self.state.engine.handle_rdv_landed(now, rail, header);
        self.mark_if_queued();
        out
    }

    /// The next read of readable rendezvous data to make (see
    /// [`navette_core::Engine::poll_read`]).
    pub fn poll_read(&mut self) -> Option<navette_core::RdvRead> {
        self.state.engine.poll_read()
    }

    /// Reports a read from [`Self::poll_read`] (see
    /// [`navette_core::Engine::handle_read_done`]).
    pub fn handle_read_done(&mut self, read: navette_core::RdvRead, landed: bool) {
        self.state.engine.handle_read_done(read, landed);
        self.mark_if_queued();
    }

    /// See [`navette_core::Engine::poll_unread`].
    pub fn poll_unread(&mut self) -> Option<(Rank, u32)> {
        self.state.engine.poll_unread()
    }

    /// See [`navette_core::Engine::has_reads`].
    #[inline]
    pub fn has_reads(&self) -> bool {
        self.state.engine.has_reads()
    }

    /// See [`navette_core::Engine::read_done_now`].
    pub fn read_done_now(&mut self, read: navette_core::RdvRead, out: &mut [u8]) {
        self.state.engine.read_done_now(read, out);
    }

    /// See [`navette_core::Engine::offered_data`].
    pub fn offered_data(&self, send_id: u32) -> Option<(Rank, navette_core::MemRef)> {
        self.state.engine.offered_data(send_id)
    }

    /// See [`navette_core::Engine::awaits_rdv_data`].
    pub fn awaits_rdv_data(&self, peer: Rank) -> bool {
        self.state.engine.awaits_rdv_data(peer)
    }

    /// See [`navette_core::Engine::staged_peer`].
    pub fn staged_peer(&self, nth: usize) -> Option<Rank> {
        self.state.engine.staged_peer(nth)
    }

    /// See [`navette_core::Engine::closed_waiting`].
    pub fn closed_waiting(&self) -> bool {
        self.state.engine.closed_waiting()
    }

    /// See [`navette_core::Engine::send_open_now`].
    pub fn send_open_now(
        &mut self,
        rail: RailId,
        which: OpenToSend,
        write: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        self.state.engine.send_open_now(rail, which, write)
    }

    /// See [`navette_core::Engine::can_send_now`].
    pub fn can_send_now(&mut self, gate: crate::Gate, rail: RailId, len: usize) -> bool {
        self.state
            .engine
            .can_send_now(gate.channel, gate.peer, rail, len)
    }

    /// See [`navette_core::Engine::send_tagged_now`].
    pub fn send_tagged_now(&mut self, gate: crate::Gate, tag: u64, data: &[u8], out: &mut [u8]) {
        self.state
            .engine
            .send_tagged_now(gate.channel, gate.peer, tag, data, out);
    }

    /// See [`navette_core::Engine::send_lone_now`].
    pub fn send_lone_now(&mut self, gate: crate::Gate, tag: u64, parts: &[&[u8]], out: &mut [u8]) {
        self.state
            .engine
            .send_lone_now(gate.channel, gate.peer, tag, parts, out);
    }

    /// See [`navette_core::Engine::gather_tagged_now`].
    pub fn gather_tagged_now(
        &mut self,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
        copy_max: usize,
        buffer: &mut [u8],
    ) -> navette_core::NowGather {
        self.state
            .engine
            .gather_tagged_now(gate.channel, gate.peer, tag, data, copy_max, buffer)
    }

    /// See [`navette_core::Engine::gather_parts_now`].
    pub fn gather_parts_now(
        &mut self,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        buffer: &mut [u8],
    ) -> navette_core::NowGather {
        self.state
            .engine
            .gather_parts_now(gate.channel, gate.peer, tag, parts, buffer)
    }

    /// See [`navette_core::Engine::can_send_message_now`].
    pub fn can_send_message_now(
        &mut self,
        out: &navette_core::OutMsg,
        rail: RailId,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> bool {
        self.state.engine.can_send_message_now(out, rail, pieces)
    }

    /// See [`navette_core::Engine::send_message_now`].
    pub fn send_message_now(
        &mut self,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
        packet: &mut [u8],
    ) {
        self.state.engine.send_message_now(out, pieces, packet);
    }

    /// See [`navette_core::Engine::can_send_readable_now`].
    pub fn can_send_readable_now(
        &mut self,
        out: &navette_core::OutMsg,
        rail: RailId,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> bool {
        self.state.engine.can_send_readable_now(out, rail, pieces)
    }

    /// Lends the last of `pieces` to the node and writes the packet of
    /// `out` with it readable (see
    /// [`navette_core::Engine::send_readable_now`]); the node watches the
    /// large piece's request, and the lent region is marked offered (its
    /// address leaves with the packet). Returns the transfer and the range
    /// lent, which the caller releases before the piece's borrow ends (see
    /// [`Driver::send_readable_now`]).
    pub(crate) fn send_readable_now(
        &mut self,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
        packet: &mut [u8],
    ) -> (navette_core::ReadableNow, navette_core::MemRef) {
        let large = pieces.last().expect("a message has a piece").data;
        let data = self.state.mem.borrow(large);
        let sent = self
            .state
            .engine
            .send_readable_now(out, pieces, data, packet);
        self.state.watch(sent.req, None);
        self.state.mem.mark_offered(data.handle);
        (sent, data)
    }

    /// See [`navette_core::Engine::gather_message_now`].
    pub fn gather_message_now(
        &mut self,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
        copy_max: usize,
        buffer: &mut [u8],
    ) -> navette_core::NowGather {
        self.state
            .engine
            .gather_message_now(out, pieces, copy_max, buffer)
    }

    /// The memory that rendezvous data lands in, writable.
    pub fn memory_mut(&mut self) -> &mut dyn Memory {
        &mut self.state.mem
    }

    /// The memory that packet plans refer to.
    pub fn memory(&self) -> &dyn Memory {
        &self.state.mem
    }

    /// Notes that a peer was given the address of `handle`'s region, to
    /// read it: removing it calls the release hook first.
    pub(crate) fn mark_offered(&mut self, handle: navette_core::MemHandle) {
        self.state.mem.mark_offered(handle);
    }

    /// Notes that a peer given the address of `handle`'s region is done
    /// with it (see [`crate::memtable::MemTable::unmark_offered`]).
    pub(crate) fn unmark_offered(&mut self, handle: navette_core::MemHandle) {
        self.state.mem.unmark_offered(handle);
    }

    /// Sets what removing an offered region calls.
    pub(crate) fn set_release_hook(&mut self, hook: crate::memtable::ReleaseHook) {
        self.state.mem.set_release_hook(hook);
    }
}
