//! The shm driver's progress: cells in from this rank's ring, packets out
//! into peers' rings, behind the driver's lock.
//!
//! Lock order: this state's lock (the driver's) first, then the node's
//! state lock through [`NodeCore::port`] — once per round for everything
//! received, once per packet sent.
//!
//! Per peer, one packet is in flight at a time (the engine's rule for a
//! rail): *queued* until its cell finds room in the peer's ring, then done
//! at once (copied in), or, for a single-copy pull, *pulling* until the
//! peer's pulled cell comes back. While pulling, the peer may offer us to
//! write part of the data into its destination ourselves (a shared read,
//! see [`Inner::read_pulled`]).
//!
//! A readable rendezvous request (see [`navette_core::RdvRead`]) leaves in
//! an offering cell that gives the data's address: the receiver keeps it
//! until its engine asks for the read ([`Inner::serve_reads`]), reads
//! (shared the same way, the sender serving the offer while its request
//! waits), and its engine's clear-to-send then completes the send.

use std::collections::VecDeque;
use std::time::Duration;

use navette_core::memory;
use navette_core::{MemHandle, Memory, PacketPlan, RailId, Rank, RdvRead, Segment as PlanSegment};
use navette_shm::Segment;
use navette_wire::{ChunkKind, Limits, PacketHeader, RdvDataHeader};
use smallvec::SmallVec;

use super::ShmStats;
use super::cell::{self, Cell, PullSource, Pulled, ReadOffer};
use crate::clock::Clock;
use crate::driver::DriverPort;
use crate::node::NodeCore;

/// Cells handled per round, so that a flood does not starve sending.
const RECV_BUDGET: usize = 64;
/// Send passes per round: a completed packet frees its rail for the next.
const SEND_PASSES: usize = 4;
/// Rounds between two looks at the clock for the peers' liveness check
/// (a spinning round lasts tens of nanoseconds).
const LIVENESS_ROUNDS: u32 = 64;
/// Read offers kept from all peers at most: past it, the oldest is
/// dropped, and its data, if a receive ever matches its request, is asked
/// for and sent the usual way (a sender may make many requests that nobody
/// has posted a receive for yet; an offer costs 40 bytes here).
const MOST_SOURCES: usize = 4096;

/// One peer rank as the driver sees it.
#[derive(Debug)]
struct PeerSlot {
    rail: RailId,
    /// The peer reads our rendezvous data itself (single copy) from
    /// fragments of this many bytes on.
    pull_min: Option<usize>,
    out: Option<Out>,
    closed: bool,
    /// Its process was visible when this rank attached: the liveness
    /// check looks at it.
    watched: bool,
    /// Our part of a shared read of its data, in 1/[`SHARE_WHOLE`]ths
    /// (see [`Inner::read_pulled`]).
    read_share: u32,
}

/// The packet in flight to a peer.
#[derive(Debug)]
enum Out {
    /// Waiting for a free cell in the peer's ring; for rendezvous data
    /// copied through several cells, the bytes already pushed (`sent`).
    /// Data the peer declined to pull (`copy`) goes through the ring even
    /// where the peer pulls.
    Queued {
        plan: PacketPlan,
        sent: usize,
        copy: bool,
    },
    /// Its data is being read by the peer; done when it says so.
    Pulling(PacketPlan),
}

/// Everything behind the driver's lock.
#[derive(Debug)]
pub(super) struct Inner {
    me: Rank,
    peers: Vec<Option<PeerSlot>>,
    /// Pulled cells waiting for room in their peer's ring.
    acks: VecDeque<(Rank, Pulled)>,
    /// Rendezvous data bytes that fit in one cell beside their headers.
    piece_max: usize,
    /// Pulls of at least this many bytes are shared: the sender writes
    /// the second part while we read the first (see [`Inner::read_pulled`]).
    share_min: Option<usize>,
    /// Packets of ours that peers are pulling: while there are any, each
    /// round looks for their offers.
    pulls_out: usize,
    /// Peers' read offers (the data of their readable rendezvous
    /// requests), until our engine asks for the read.
    sources: Vec<(Rank, ReadOffer)>,
    /// Our readable rendezvous requests whose offer went out (peer, send
    /// id, the data's region), while our engine still waits for them: each
    /// round looks for the peer's offer to share the read, as for a pull.
    offered: Vec<(Rank, u32, MemHandle)>,
    limits: Limits,
    start: Clock,
    liveness: Liveness,
    pub(super) stats: ShmStats,
}

/// The check that peers still run: a peer process that is gone (killed,
/// crashed) never writes to our ring again, so without it whatever waits
/// for that peer would wait for ever.
#[derive(Debug)]
struct Liveness {
    /// Time between two checks.
    every: Duration,
    /// The driver's time at the last check.
    last: Duration,
    /// Rounds since the clock was last read.
    rounds: u32,
    /// The peer looked at last.
    next: usize,
}

impl Inner {
    pub(super) fn new(
        me: Rank,
        limits: Limits,
        start: Clock,
        piece_max: usize,
        share_min: Option<usize>,
        liveness: Duration,
    ) -> Self {
        Self {
            me,
            peers: Vec::new(),
            acks: VecDeque::new(),
            piece_max,
            share_min,
            pulls_out: 0,
            sources: Vec::new(),
            offered: Vec::new(),
            limits,
            start,
            liveness: Liveness {
                every: liveness,
                last: start.now(),
                rounds: 0,
                next: 0,
            },
            stats: ShmStats::default(),
        }
    }

    /// Declares `peer`'s rail; a peer already declared keeps its slot
    /// (its packet in flight among it).
    pub(super) fn add_peer(
        &mut self,
        peer: Rank,
        rail: RailId,
        pull_min: Option<usize>,
        watched: bool,
    ) {
        let index = peer as usize;
        if self.peers.len() <= index {
            self.peers.resize_with(index + 1, || None);
        }
        if self.peers[index].is_some() {
            return;
        }
        self.peers[index] = Some(PeerSlot {
            rail,
            pull_min,
            out: None,
            closed: false,
            watched,
            read_share: SHARE_WHOLE / 2,
        });
    }

    /// Whether work waits for room in a peer's ring (a peer that frees a
    /// cell does not ring us).
    pub(super) fn is_stuck(&self) -> bool {
        !self.acks.is_empty()
            || self
                .peers
                .iter()
                .flatten()
                .any(|s| matches!(s.out, Some(Out::Queued { .. })))
    }

    /// One round: write the parts of our pulled data that peers offer us,
    /// receive, send back acknowledgements, send.
    pub(super) fn progress(&mut self, segment: &Segment, node: &NodeCore) -> bool {
        let serving = self.pulls_out > 0 || !self.offered.is_empty();
        let mut any = serving && self.serve_offers(segment, node);
        any |= self.receive(segment, node);
        any |= self.flush_acks(segment);
        for _ in 0..SEND_PASSES {
            let dirty = node.take_dirty();
            if !dirty && !self.is_stuck() {
                break;
            }
            let sent = self.transmit(segment, node);
            any |= sent;
            if !sent {
                break;
            }
        }
        // The liveness check looks at the clock on idle rounds, and on busy
        // ones (a flood from other peers) far more rarely.
        self.liveness.rounds += 1;
        let due = if any {
            LIVENESS_ROUNDS * LIVENESS_ROUNDS
        } else {
            LIVENESS_ROUNDS
        };
        if self.liveness.rounds >= due {
            self.check_liveness(segment, node);
        }
        any
    }

    fn slot_mut(&mut self, peer: Rank) -> Option<&mut PeerSlot> {
        self.peers.get_mut(peer as usize)?.as_mut()
    }

    /// Handles the cells of this rank's ring.
    fn receive(&mut self, segment: &Segment, node: &NodeCore) -> bool {
        let own = segment.area(self.me);
        if own.is_empty() {
            return false;
        }
        let mut port = node.port();
        let mut handled = 0;
        while handled < RECV_BUDGET {
            if own
                .pop(|bytes| self.on_cell(segment, &mut port, bytes))
                .is_none()
            {
                break;
            }
            handled += 1;
            // A blocking receive's message landed: back to its thread at
            // once. Looking at the next cell now would pull in its line,
            // which the sender is about to write.
            if node.lean_slot.is_settled() {
                break;
            }
        }
        // Our readable requests that the cells completed (their
        // clear-to-send came) need serving no more, and their peer reads
        // them no more.
        if !self.offered.is_empty() {
            self.offered.retain(|&(_, send_id, handle)| {
                let waits = port.offered_data(send_id).is_some();
                if !waits {
                    port.unmark_offered(handle);
                }
                waits
            });
        }
        handled > 0
    }

    fn on_cell(&mut self, segment: &Segment, port: &mut DriverPort<'_>, bytes: &[u8]) {
        match Cell::parse(bytes) {
            Err(e) => tracing::warn!(rank = self.me, %e, "shm: dropping a malformed cell"),
            Ok(Cell::Packet { from, packet }) => {
                let Some(rail) = self.open_rail(from) else {
                    return;
                };
                if let Err(e) = port.handle_packet(|| self.start.now(), rail, packet) {
                    self.fail(port, from, &e);
                }
            }
            Ok(Cell::Pull {
                from,
                source,
                headers,
            }) => {
                let outcome = self.on_pull(segment, port, from, source, headers);
                self.acks.push_back((from, outcome));
            }
            Ok(Cell::Pulled { from, outcome }) => self.on_pulled(port, from, outcome),
            Ok(Cell::Offering {
                from,
                offers,
                packet,
            }) => {
                let Some(rail) = self.open_rail(from) else {
                    return;
                };
                for offer in cell::offers(offers) {
                    self.keep_source(from, offer);
                }
                if let Err(e) = port.handle_packet(|| self.start.now(), rail, packet) {
                    self.fail(port, from, &e);
                    return;
                }
                // A receive posted ahead matched a request at once.
                self.serve_reads(segment, port);
            }
        }
    }

    /// Keeps a peer's read offer until our engine asks for its read (one
    /// offer per request: a repeated id replaces the first).
    fn keep_source(&mut self, from: Rank, offer: ReadOffer) {
        let same = |(peer, o): &&mut (Rank, ReadOffer)| *peer == from && o.send_id == offer.send_id;
        if let Some(kept) = self.sources.iter_mut().find(same) {
            kept.1 = offer;
            return;
        }
        // Full (offers of requests rejected or never received, or a peer
        // flooding us): the oldest goes, and its read, if ever asked for,
        // is declined.
        if self.sources.len() >= MOST_SOURCES {
            self.sources.remove(0);
        }
        self.sources.push((from, offer));
    }

    /// Makes the reads our engine asks for (see [`RdvRead`]), each from the
    /// offer that came with its request; without one, or when the read
    /// fails (the kernel refusing it, say), the engine asks for the data
    /// the usual way, and the sender learns of any failure there. A read
    /// for a peer this driver does not reach (shm+tcp) is declined the
    /// same way; one for a closed rail was dropped with the peer. The
    /// offers of requests refused without a read are forgotten first.
    fn serve_reads(&mut self, segment: &Segment, port: &mut DriverPort<'_>) {
        while let Some((peer, send_id)) = port.poll_unread() {
            if let Some(at) = self.source_of(peer, send_id) {
                self.sources.swap_remove(at);
            }
        }
        while let Some(read) = port.poll_read() {
            match self.peers.get(read.peer as usize) {
                Some(Some(slot)) if slot.closed => continue,
                Some(Some(_)) => {}
                _ => {
                    port.handle_read_done(read, false);
                    continue;
                }
            }
            match self.read_offered(segment, port, &read) {
                Ok(true) => self.answer_read(segment, port, read),
                Ok(false) => port.handle_read_done(read, false),
                Err(what) => self.fail(port, read.peer, &what),
            }
        }
    }

    /// Notes that the offer of our readable request `send_id`, whose data
    /// is `handle`'s region (marked offered), went to `peer` in a cell
    /// written at once: rounds look for the peer's offer to share the read
    /// and take the mark back, as for one this driver wrote.
    pub(super) fn offered_now(&mut self, peer: Rank, send_id: u32, handle: MemHandle) {
        self.offered.push((peer, send_id, handle));
    }

    /// Peers' read offers kept now.
    pub(super) fn offers_held(&self) -> usize {
        self.sources.len()
    }

    /// Where the offer of `peer`'s readable request `send_id` is kept.
    fn source_of(&self, peer: Rank, send_id: u32) -> Option<usize> {
        self.sources
            .iter()
            .position(|(from, o)| *from == peer && o.send_id == send_id)
    }

    /// Tells the sender of `read` that its data was read: a packet cell
    /// written at once, the way back to the waiting thread being shorter
    /// than through the engine's window and strategy; when the peer's
    /// ring is full, the engine queues the answer.
    fn answer_read(&mut self, segment: &Segment, port: &mut DriverPort<'_>, read: RdvRead) {
        const LEN: usize = navette_core::Engine::READ_DONE_LEN;
        let area = segment.area(read.peer);
        let me = self.me;
        let pushed = area.try_push(cell::packet_len(LEN), |out| {
            cell::write_packet_header(out, me);
            port.read_done_now(read, &mut out[cell::HEADER_LEN..]);
        });
        if pushed.is_ok() {
            area.ring_doorbell();
            self.stats.packets_sent += 1;
            self.stats.bytes_copied_in += LEN as u64;
        } else {
            self.stats.ring_full += 1;
            port.handle_read_done(read, true);
        }
    }

    /// Reads the data of `read` from its offer: whether it landed (false
    /// when no offer came for it, the sender let it go or the read
    /// failed), or why the peer's rail must close (an offer that does not
    /// match its request).
    fn read_offered(
        &mut self,
        segment: &Segment,
        port: &mut DriverPort<'_>,
        read: &RdvRead,
    ) -> Result<bool, String> {
        let Some(at) = self.source_of(read.peer, read.send_id) else {
            return Ok(false);
        };
        let (_, ReadOffer { source, .. }) = self.sources.swap_remove(at);
        if source.len != read.dest.len as u64 {
            return Err(format!(
                "a read offer of {} bytes for a request of {}",
                source.len, read.dest.len
            ));
        }
        let area = segment.area(read.peer);
        // The sender let memory it offered go since this offer (its
        // request abandoned, say): the address may hold something else
        // now, so the data is asked for instead.
        if self.epoch_moved(area, source) {
            return Ok(false);
        }
        let pid = area.pid();
        let at = read.dest.offset..read.dest.offset + read.dest.len;
        // A destination its owner cancelled no longer resolves: nothing is
        // read, and the sender is told it is done.
        if let Some(target) = port
            .memory_mut()
            .get_mut(read.dest.handle)
            .and_then(|r| r.get_mut(at))
        {
            let bytes = match self.read_pulled(segment, read.peer, pid, source.addr, target) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::debug!(rank = self.me, peer = read.peer, %e, "shm: a read at the request failed");
                    self.stats.reads_declined += 1;
                    return Ok(false);
                }
            };
            // Let go during the read: what was read may not be the data
            // (it is overwritten when the data comes the usual way).
            if self.epoch_moved(area, source) {
                return Ok(false);
            }
            self.count_read(bytes);
            self.stats.reads_at_request += 1;
        }
        Ok(true)
    }

    /// Whether the sender (`area`'s owner) let memory it offered go since
    /// it gave `source`: the address may then hold something else, and
    /// the read is declined (and counted so).
    fn epoch_moved(&mut self, area: navette_shm::RankArea<'_>, source: PullSource) -> bool {
        let moved = area.release_epoch() != source.epoch;
        self.stats.reads_declined += u64::from(moved);
        moved
    }

    /// The rail of an open peer; a cell from an unknown rank is dropped.
    fn open_rail(&self, from: Rank) -> Option<RailId> {
        match self.peers.get(from as usize) {
            Some(Some(slot)) if !slot.closed => Some(slot.rail),
            Some(Some(_)) => None,
            _ => {
                tracing::warn!(rank = self.me, from, "shm: cell from an unknown rank");
                None
            }
        }
    }

    /// Reads the data of a pull cell into its destination: what the
    /// sender is told ([`Pulled`]). Read while the sender's release epoch
    /// holds, as reads at the request are (see [`Self::read_offered`]):
    /// otherwise the pull is declined, and the sender sends the data
    /// through the ring, if it still has it.
    fn on_pull(
        &mut self,
        segment: &Segment,
        port: &mut DriverPort<'_>,
        from: Rank,
        source: PullSource,
        headers: &[u8],
    ) -> Pulled {
        let Some(rail) = self.open_rail(from) else {
            return Pulled::Failed;
        };
        let header = match pull_header(headers, source.len, &self.limits) {
            Ok(header) => header,
            Err(what) => {
                self.fail(port, from, &what);
                return Pulled::Failed;
            }
        };
        let dest = match port.rdv_destination(rail, &header) {
            Ok(dest) => dest,
            Err(e) => {
                self.fail(port, from, &e);
                return Pulled::Failed;
            }
        };
        let area = segment.area(from);
        let at = dest.offset..dest.offset + dest.len;
        // A destination its owner cancelled no longer resolves: the data is
        // not read (nothing is lost that anyone waits for).
        if let Some(target) = port
            .memory_mut()
            .get_mut(dest.handle)
            .and_then(|r| r.get_mut(at))
        {
            // The sender let memory it offered go since the pull (a send
            // abandoned, say): the address may hold something else. Checked
            // again after the read, which may have raced the release (what
            // was read is then overwritten when the data comes).
            if self.epoch_moved(area, source) {
                return Pulled::Declined;
            }
            let bytes = match self.read_pulled(segment, from, area.pid(), source.addr, target) {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.fail(port, from, &format!("single-copy read failed: {e}"));
                    return Pulled::Failed;
                }
            };
            if self.epoch_moved(area, source) {
                return Pulled::Declined;
            }
            self.count_read(bytes);
        }
        if let Err(e) = port.handle_rdv_landed(self.start.now(), rail, &header) {
            self.fail(port, from, &e);
            return Pulled::Failed;
        }
        Pulled::Read
    }

    /// Reads pulled data at `addr` in `from` (process `pid`) into `target`.
    /// A long read is shared: we offer `from` to write the second part
    /// itself while we read the first (about half each, the cut moved by
    /// which side finished first last time, see [`balance`]), so that two
    /// cores copy at once; if it has not taken the offer by the time our
    /// part is in, we revoke it and read the rest too. Either way, when
    /// this returns nobody writes into `target` any more. Who copied what,
    /// for the counters once the read is trusted ([`Self::count_read`]).
    fn read_pulled(
        &mut self,
        segment: &Segment,
        from: Rank,
        pid: u32,
        addr: u64,
        target: &mut [u8],
    ) -> std::io::Result<ReadBytes> {
        let len = target.len();
        // Whether the sender may write into us, we guess from whether it
        // could read its neighbour at start-up (the same ptrace permission,
        // the other way): a wrong guess costs one failed write, after which
        // we read its half ourselves.
        let shared = self.share_min.is_some_and(|min| len >= min)
            && len >= 2 * SHARE_ALIGN
            && segment.area(from).can_pull();
        if !shared {
            navette_shm::pull(pid, addr, target)?;
            return Ok(ReadBytes {
                pulled: len,
                written_by_peer: 0,
            });
        }
        // A cut on a page boundary of the destination (each side pins
        // whole pages), where both sides should finish together: the
        // share learnt from the last reads from this peer.
        let share = self
            .slot_mut(from)
            .map_or(SHARE_WHOLE / 2, |s| s.read_share);
        let dest = target.as_mut_ptr() as u64;
        let cut = (len as u64 * u64::from(share)) / u64::from(SHARE_WHOLE);
        let half = ((dest + cut).next_multiple_of(SHARE_ALIGN as u64) - dest) as usize;
        let half = half.min(len - 1);
        // The peer's address, past the cut (a bad one fails as a read
        // would, before anything is offered).
        let rest_addr = addr
            .checked_add(half as u64)
            .ok_or(std::io::Error::from(rustix::io::Errno::FAULT))?;
        let own = segment.area(self.me);
        own.offer(&navette_shm::Offer {
            taker: from,
            source: rest_addr,
            dest: dest + half as u64,
            len: (len - half) as u64,
        });
        segment.area(from).ring_doorbell();
        // `target` stays borrowed until the offer is settled: the peer
        // writes its second part only meanwhile, and we touch only the
        // first.
        let ours = navette_shm::pull(pid, addr, &mut target[..half]);
        // The sender, once it took the offer, is writing: a few µs, unless
        // it lost its core (to us, oversubscribed), hence the yields.
        let mut looks = 0u32;
        let settled = own.settle_offer(from, || {
            looks = looks.wrapping_add(1);
            if looks < SPIN_LOOKS {
                std::hint::spin_loop();
                return true;
            }
            std::thread::yield_now();
            !looks.is_multiple_of(LIVENESS_EVERY) || navette_shm::is_alive(pid)
        });
        ours?;
        if settled == navette_shm::Settled::Written
            && let Some(slot) = self.slot_mut(from)
        {
            slot.read_share = balance(slot.read_share, looks > 0);
        }
        match settled {
            navette_shm::Settled::Written => Ok(ReadBytes {
                pulled: half,
                written_by_peer: len - half,
            }),
            navette_shm::Settled::Revoked | navette_shm::Settled::Failed => {
                navette_shm::pull(pid, rest_addr, &mut target[half..])?;
                Ok(ReadBytes {
                    pulled: len,
                    written_by_peer: 0,
                })
            }
            navette_shm::Settled::Abandoned => Err(std::io::Error::other(
                "the peer died while writing its part of a shared read",
            )),
        }
    }

    /// Counts a single-copy read whose data was trusted (the sender's
    /// release epoch held): a declined one's bytes were not the data.
    fn count_read(&mut self, read: ReadBytes) {
        self.stats.bytes_pulled += read.pulled as u64;
        self.stats.bytes_written_by_peers += read.written_by_peer as u64;
    }

    /// Writes the parts of our data that peers offer us (see
    /// [`Self::read_pulled`]): of the packet they pull, or of a readable
    /// request of ours they read; whether any was written. The offer is
    /// taken under the node's lock, which keeps our data's memory
    /// resolved, and written at once: its owner waits for it. The write
    /// (up to three quarters of a pull fragment, some milliseconds for
    /// the largest)
    /// holds the lock: our other threads wait meanwhile, but no request
    /// can release the memory it reads.
    fn serve_offers(&mut self, segment: &Segment, node: &NodeCore) -> bool {
        let mut any = false;
        for (peer, slot) in self.peers.iter().enumerate() {
            let peer = peer as Rank;
            let pulling = match slot {
                Some(PeerSlot {
                    out: Some(Out::Pulling(plan)),
                    ..
                }) => Some(plan),
                _ => None,
            };
            let read = || self.offered.iter().filter(move |&&(p, ..)| p == peer);
            if pulling.is_none() && read().next().is_none() {
                continue;
            }
            let area = segment.area(peer);
            if !area.is_offered_to(self.me) {
                continue;
            }
            // Taken under the lock only: a rank that takes an offer then
            // waits for nothing, so two ranks sharing reads with each other
            // never wait for each other's locks.
            let port = node.port();
            let Some(offer) = area.take_offer(self.me) else {
                continue;
            };
            let mem = port.memory();
            let pulled = || {
                pulling
                    .and_then(|plan| pull_source(plan, mem))
                    .and_then(|(_, data)| offered_part(&offer, data))
            };
            let requested = || {
                read()
                    .filter_map(|&(_, send_id, _)| port.offered_data(send_id))
                    .filter_map(|(_, data)| memory::read(mem, data))
                    .find_map(|data| offered_part(&offer, data))
            };
            let written = pulled()
                .or_else(requested)
                .is_some_and(|part| navette_shm::push(area.pid(), offer.dest, part).is_ok());
            area.finish_offer(self.me, written);
            drop(port);
            if written {
                self.stats.bytes_written_for_peers += offer.len;
            }
            any = true;
        }
        any
    }

    /// The peer is done with our pulled data: the packet is sent, its
    /// rail closes (the read failed), or, the pull declined, the data is
    /// queued to go through the ring.
    fn on_pulled(&mut self, port: &mut DriverPort<'_>, from: Rank, outcome: Pulled) {
        let now = self.start.now();
        let Some(slot) = self.slot_mut(from) else {
            tracing::warn!(
                rank = self.me,
                from,
                "shm: pulled cell from an unknown rank"
            );
            return;
        };
        match slot.out.take() {
            Some(Out::Pulling(plan)) => {
                let rail = slot.rail;
                if let Some(handle) = pulled_region(&plan) {
                    port.unmark_offered(handle);
                }
                match outcome {
                    Pulled::Read => {
                        port.recycle_plan(plan);
                        port.handle_send_complete(now, rail);
                    }
                    // The rail stays busy with the packet until the
                    // ring has taken all its data.
                    Pulled::Declined => {
                        slot.out = Some(Out::Queued {
                            plan,
                            sent: 0,
                            copy: true,
                        });
                    }
                    Pulled::Failed => port.recycle_plan(plan),
                }
                self.pulls_out -= 1;
                if outcome == Pulled::Failed {
                    self.fail(port, from, &"the peer could not read our data");
                }
            }
            other => {
                slot.out = other;
                self.fail(port, from, &"a pulled cell for nothing pulled");
            }
        }
    }

    /// Closes the rails of peers whose process is gone: the engine fails
    /// what waits for them with
    /// [`navette_core::RequestError::PeerUnreachable`]. Each call past its
    /// turn looks at one peer (in turn, so that no round pays for all of
    /// them): every peer is looked at once per
    /// [`ShmConfig::liveness_interval`]. Peers whose process this rank could
    /// not see when it attached (another pid namespace) are not looked at.
    /// Called on idle rounds, every [`LIVENESS_ROUNDS`] of them, on busy
    /// ones more rarely, and before a thread blocks.
    ///
    /// [`ShmConfig::liveness_interval`]: super::ShmConfig::liveness_interval
    pub(super) fn check_liveness(&mut self, segment: &Segment, node: &NodeCore) {
        self.liveness.rounds = 0;
        let watched = self.peers.iter().flatten().filter(|s| s.watched).count();
        let Some(turn) = u32::try_from(watched)
            .ok()
            .filter(|&n| n > 0)
            .map(|n| self.liveness.every / n)
        else {
            return;
        };
        let now = self.start.now();
        if now.saturating_sub(self.liveness.last) < turn {
            return;
        }
        self.liveness.last = now;
        // The next watched peer after the last one looked at.
        let count = self.peers.len();
        let Some(peer) = (1..=count)
            .map(|k| (self.liveness.next + k) % count)
            .find(|&p| self.peers[p].as_ref().is_some_and(|s| s.watched))
        else {
            return;
        };
        self.liveness.next = peer;
        let open = self.peers[peer].as_ref().is_some_and(|s| !s.closed);
        let pid = segment.area(peer as Rank).pid();
        if open && !navette_shm::is_alive(pid) {
            let what = format!("its process ({pid}) is gone");
            self.fail(&mut node.port(), peer as Rank, &what);
        }
    }

    /// Closes the rail of a peer that broke the protocol (or whose data
    /// cannot be read): the engine fails what needs it.
    fn fail(&mut self, port: &mut DriverPort<'_>, peer: Rank, what: &dyn std::fmt::Display) {
        let me = self.me;
        let Some(slot) = self.slot_mut(peer) else {
            return;
        };
        if slot.closed {
            return;
        }
        tracing::warn!(rank = me, peer, %what, "shm: closing the rail");
        slot.closed = true;
        let rail = slot.rail;
        let plan = match slot.out.take() {
            Some(Out::Queued { plan, .. }) => Some(plan),
            Some(Out::Pulling(plan)) => {
                self.pulls_out -= 1;
                Some(plan)
            }
            None => None,
        };
        if let Some(plan) = plan {
            port.recycle_plan(plan);
        }
        self.sources.retain(|&(from, _)| from != peer);
        self.offered.retain(|&(to, ..)| to != peer);
        port.close_rail(rail);
    }

    /// Sends the pulled cells that wait for room.
    fn flush_acks(&mut self, segment: &Segment) -> bool {
        let mut any = false;
        while let Some(&(peer, outcome)) = self.acks.front() {
            let area = segment.area(peer);
            let pushed = area.try_push(cell::PULLED_LEN, |out| {
                cell::write_pulled(out, self.me, outcome);
            });
            if pushed.is_err() {
                self.stats.ring_full += 1;
                break;
            }
            area.ring_doorbell();
            self.acks.pop_front();
            any = true;
        }
        any
    }

    /// Gives idle rails their next packet and pushes queued packets;
    /// whether a packet left.
    fn transmit(&mut self, segment: &Segment, node: &NodeCore) -> bool {
        let mut port = node.port();
        // Reads first: a receive posted since matched a readable request,
        // and the clear-to-send that follows the read leaves below.
        if port.has_reads() {
            self.serve_reads(segment, &mut port);
        }
        let now = self.start.now();
        let mut any = false;
        for peer in 0..self.peers.len() {
            let Some(slot) = self.peers[peer].as_mut() else {
                continue;
            };
            if slot.closed {
                continue;
            }
            if slot.out.is_none() {
                match port.poll_transmit(now, slot.rail) {
                    Some(plan) => {
                        slot.out = Some(Out::Queued {
                            plan,
                            sent: 0,
                            copy: false,
                        });
                    }
                    None => continue,
                }
            }
            any |= self.push_queued(segment, &mut port, peer as Rank, now);
        }
        any
    }

    /// Pushes the queued packet of `peer` into its ring, if there is room.
    fn push_queued(
        &mut self,
        segment: &Segment,
        port: &mut DriverPort<'_>,
        peer: Rank,
        now: Duration,
    ) -> bool {
        let Some(slot) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) else {
            return false;
        };
        let Some(Out::Queued { plan, sent, copy }) = &mut slot.out else {
            return false;
        };
        let area = segment.area(peer);
        let way = Way {
            pull_min: slot.pull_min.filter(|_| !*copy),
            piece_max: self.piece_max,
            own: segment.area(self.me),
        };
        let (offers, dropped) = read_offers(plan, peer, port, way.own);
        let before = *sent;
        let pushed = push_packet(area, self.me, plan, way, sent, port.memory(), &offers);
        let pieces = (*sent - before) as u64;
        self.stats.bytes_copied_in += pieces;
        let rail = slot.rail;
        let plan = match pushed {
            Pushed::Full => {
                self.stats.ring_full += 1;
                if pieces > 0 {
                    area.ring_doorbell();
                }
                return pieces > 0;
            }
            Pushed::Pull => {
                area.ring_doorbell();
                if let Some(Out::Queued { plan, .. }) = slot.out.take() {
                    // Under the node's lock, as any release is: marked
                    // before the memory can go.
                    if let Some(handle) = pulled_region(&plan) {
                        port.mark_offered(handle);
                    }
                    slot.out = Some(Out::Pulling(plan));
                    self.pulls_out += 1;
                    self.stats.pulls_sent += 1;
                }
                return true;
            }
            Pushed::Copied => {
                area.ring_doorbell();
                // Under the node's lock, as any release is: marked before
                // the memory can go.
                for offer in &offers {
                    if let Some((_, data)) = port.offered_data(offer.send_id) {
                        port.mark_offered(data.handle);
                        self.offered.push((peer, offer.send_id, data.handle));
                    }
                }
                self.stats.offers_dropped += dropped;
                if let Some(Out::Queued { plan, .. }) = &slot.out {
                    self.stats.packets_sent += 1;
                    if pieces == 0 {
                        self.stats.bytes_copied_in += plan.len() as u64;
                    }
                }
                slot.out.take()
            }
            Pushed::Missing => {
                // Only a cancelled request's memory can be missing: the
                // packet is dropped and the rail freed.
                tracing::warn!(
                    rank = self.me,
                    peer,
                    "shm: dropping a packet of a cancelled request"
                );
                slot.out.take()
            }
        };
        if let Some(Out::Queued { plan, .. } | Out::Pulling(plan)) = plan {
            port.recycle_plan(plan);
        }
        port.handle_send_complete(now, rail);
        true
    }
}

/// Shared reads cut the destination on a page boundary.
const SHARE_ALIGN: usize = 4096;
/// The unit of a shared read's parts ([`PeerSlot::read_share`]).
const SHARE_WHOLE: u32 = 1024;
/// How far one shared read moves the next one's cut, and the bounds of
/// the receiver's part: between a quarter and three quarters.
const SHARE_STEP: u32 = 8;
const SHARE_LEAST: u32 = SHARE_WHOLE / 4;
const SHARE_MOST: u32 = SHARE_WHOLE * 3 / 4;

/// The receiver's next part of a shared read (in 1/[`SHARE_WHOLE`]ths)
/// after one where it finished `first` (and waited for the sender's
/// write) or not: a step more for the side that finished first. The
/// kernel's read and write of a part need not cost the same: on the
/// 2-core test machine (2026-12-07) the reader's half took about 8 %
/// longer than the writer's, and each of the two finishes at the cut's
/// mercy. Settling around the balance costs a step back and forth.
fn balance(share: u32, first: bool) -> u32 {
    let next = if first {
        share + SHARE_STEP
    } else {
        share.saturating_sub(SHARE_STEP)
    };
    next.clamp(SHARE_LEAST, SHARE_MOST)
}
/// While waiting for a peer writing its part of a shared read, spin this
/// many looks (tens of µs: a write of a few MiB), then yield at each look,
/// and check every [`LIVENESS_EVERY`] looks that the peer still runs.
const SPIN_LOOKS: u32 = 1 << 10;
const LIVENESS_EVERY: u32 = 1 << 10;

/// The bytes of `data` that `offer` asks us to write, if it names a part
/// of it (a peer's offer is checked before we act on it).
fn offered_part<'a>(offer: &navette_shm::Offer, data: &'a [u8]) -> Option<&'a [u8]> {
    let from = usize::try_from(offer.source.checked_sub(data.as_ptr() as u64)?).ok()?;
    let len = usize::try_from(offer.len).ok()?;
    data.get(from..from.checked_add(len)?)
}

/// What [`push_packet`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pushed {
    /// The peer's ring is full: try again later.
    Full,
    /// The packet was copied into a cell.
    Copied,
    /// A pull cell describes the packet's data.
    Pull,
    /// The packet's user memory is gone (its request was cancelled).
    Missing,
}

/// How a peer takes rendezvous data.
#[derive(Clone, Copy)]
struct Way<'s> {
    /// It pulls fragments of this many bytes on (single copy).
    pull_min: Option<usize>,
    /// Data bytes of a rendezvous data chunk that fit in one cell.
    piece_max: usize,
    /// Our own area, whose release epoch a pull cell carries.
    own: navette_shm::RankArea<'s>,
}

/// The read offers of `plan`'s readable requests to `peer` (see
/// [`PacketPlan::offers`]), each with our release epoch (read from
/// `own`, our area), if they fit a cell beside the packet: otherwise
/// none, and the receiver asks for the data; beside them, how many were
/// dropped for want of room. The caller marks the regions offered once
/// the offers are out, so that letting one go bumps the epoch first.
fn read_offers(
    plan: &PacketPlan,
    peer: Rank,
    port: &DriverPort<'_>,
    own: navette_shm::RankArea<'_>,
) -> (SmallVec<[ReadOffer; 2]>, u64) {
    let mut offers = SmallVec::new();
    if plan.offers.is_empty() {
        return (offers, 0);
    }
    let epoch = own.release_epoch();
    for &send_id in &plan.offers {
        let data = port
            .offered_data(send_id)
            .filter(|&(to, _)| to == peer)
            .and_then(|(_, data)| memory::read(port.memory(), data));
        if let Some(data) = data {
            let source = PullSource {
                addr: data.as_ptr() as u64,
                len: data.len() as u64,
                epoch,
            };
            offers.push(ReadOffer { send_id, source });
        }
    }
    if cell::offering_len(offers.len(), plan.len()) > own.cell_payload() {
        let dropped = offers.len() as u64;
        offers.clear();
        return (offers, dropped);
    }
    (offers, 0)
}

/// Pushes one packet into `area`'s ring: a pull cell when the packet is one
/// rendezvous data chunk that the peer pulls, pieces of it cell by cell
/// when it is one that the peer does not pull (or too small to pull; `sent`
/// counts the data bytes pushed so far, across calls when the ring fills),
/// else a copy of the packet, in an offering cell with `offers` if any.
fn push_packet(
    area: navette_shm::RankArea<'_>,
    me: Rank,
    plan: &PacketPlan,
    way: Way,
    sent: &mut usize,
    mem: &dyn Memory,
    offers: &[ReadOffer],
) -> Pushed {
    let result = match pull_source(plan, mem) {
        Some((headers, data)) if way.pull_min.is_some_and(|min| data.len() >= min) => {
            let source = PullSource {
                addr: data.as_ptr() as u64,
                len: data.len() as u64,
                epoch: way.own.release_epoch(),
            };
            area.try_push(cell::pull_len(headers.len()), |out| {
                cell::write_pull(out, me, source, headers);
            })
            .map(|()| Pushed::Pull)
        }
        Some((headers, data)) if data.len() > way.piece_max => {
            return push_pieces(area, me, headers, data, way.piece_max, sent);
        }
        _ => {
            let Some(len) = resolved_len(plan, mem) else {
                return Pushed::Missing;
            };
            if offers.is_empty() {
                area.try_push(cell::packet_len(len), |out| {
                    cell::write_packet_header(out, me);
                    // The memory resolved just above, under the same lock.
                    let _ = plan.gather_into(mem, &mut out[cell::HEADER_LEN..]);
                })
            } else {
                area.try_push(cell::offering_len(offers.len(), len), |out| {
                    let at = cell::write_offering(out, me, offers);
                    let _ = plan.gather_into(mem, &mut out[at..]);
                })
            }
            .map(|()| Pushed::Copied)
        }
    };
    result.unwrap_or(Pushed::Full)
}

/// The bytes of one single-copy read (see `Inner::read_pulled`): those
/// this rank read, and those its peer wrote for it (a shared read).
#[derive(Clone, Copy, Debug)]
struct ReadBytes {
    pulled: usize,
    written_by_peer: usize,
}

/// Pushes the rendezvous data chunk of `headers` and `data` as chunks of at
/// most `piece_max` bytes, one cell each, from byte `*sent` on: the
/// receiver's engine takes each as a fragment at its offset. `Copied` once
/// all are pushed, `Full` (with `*sent` advanced) when the ring fills.
///
/// The engine still decides the fragment and its destination; how its
/// bytes cross is the transport's choice, as for a pull cell. Cutting here
/// rather than with cell-sized engine fragments saves a packet plan and a
/// round through the engine per cell.
fn push_pieces(
    area: navette_shm::RankArea<'_>,
    me: Rank,
    headers: &[u8],
    data: &[u8],
    piece_max: usize,
    sent: &mut usize,
) -> Pushed {
    let whole = RdvDataHeader::decode(&headers[PacketHeader::LEN..], &Limits::default())
        .expect("our engine encodes rendezvous data headers within the default limits");
    while *sent < data.len() {
        let piece = &data[*sent..(*sent + piece_max).min(data.len())];
        // Both fit: a piece is at most `piece_max`, a cell's data bytes.
        let len = piece.len() as u32;
        let offset = whole.offset + *sent as u64;
        let packet = PacketHeader {
            chunk_count: 1,
            body_len: RdvDataHeader::LEN as u32 + len,
        };
        let chunk = RdvDataHeader {
            offset,
            len,
            ..whole
        };
        let cell_len = cell::packet_len(PacketHeader::LEN + RdvDataHeader::LEN + piece.len());
        let pushed = area.try_push(cell_len, |out| {
            cell::write_packet_header(out, me);
            let out = &mut out[cell::HEADER_LEN..];
            let (head, rest) = out.split_at_mut(PacketHeader::LEN);
            let (chunk_head, body) = rest.split_at_mut(RdvDataHeader::LEN);
            head.copy_from_slice(&packet.to_bytes());
            chunk_head.copy_from_slice(&chunk.to_bytes());
            body.copy_from_slice(piece);
        });
        if pushed.is_err() {
            return Pushed::Full;
        }
        *sent += piece.len();
    }
    Pushed::Copied
}

/// The region of a packet's rendezvous data, if it is one that a peer
/// pulls (see [`pull_source`]).
fn pulled_region(plan: &PacketPlan) -> Option<MemHandle> {
    match plan.segments.as_slice() {
        [PlanSegment::Local(_), PlanSegment::User(data)] => Some(data.handle),
        _ => None,
    }
}

/// The headers and data of a packet that is one rendezvous data chunk
/// (the packet a single-copy pull replaces), if `plan` is one.
fn pull_source<'a>(plan: &'a PacketPlan, mem: &'a dyn Memory) -> Option<(&'a [u8], &'a [u8])> {
    let [PlanSegment::Local(local), PlanSegment::User(data)] = plan.segments.as_slice() else {
        return None;
    };
    let headers = plan.bytes.get(local.clone())?;
    let is_rdv_data = headers.len() == PacketHeader::LEN + RdvDataHeader::LEN
        && headers[PacketHeader::LEN] == ChunkKind::RDV_DATA.0;
    if !is_rdv_data {
        return None;
    }
    Some((headers, memory::read(mem, *data)?))
}

/// The packet's length, if all its user memory still resolves.
fn resolved_len(plan: &PacketPlan, mem: &dyn Memory) -> Option<usize> {
    plan.segments
        .iter()
        .try_fold(0, |len, segment| match segment {
            PlanSegment::Local(range) => Some(len + range.len()),
            PlanSegment::User(range) => memory::read(mem, *range).map(|_| len + range.len),
        })
}

/// Checks a pull cell's packet headers: one rendezvous data chunk whose
/// length is the pull's.
fn pull_header(headers: &[u8], len: u64, limits: &Limits) -> Result<RdvDataHeader, String> {
    if headers.len() != PacketHeader::LEN + RdvDataHeader::LEN {
        return Err(format!("pull cell with {} header bytes", headers.len()));
    }
    let packet = PacketHeader::decode(headers, limits).map_err(|e| e.to_string())?;
    let data =
        RdvDataHeader::decode(&headers[PacketHeader::LEN..], limits).map_err(|e| e.to_string())?;
    let body = RdvDataHeader::LEN as u64 + u64::from(data.len);
    if packet.chunk_count != 1 || u64::from(packet.body_len) != body || u64::from(data.len) != len {
        return Err("pull cell whose headers do not describe its data".into());
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receiver's part grows while it finishes first, shrinks while
    /// the sender does, and stays between a quarter and three quarters.
    #[test]
    fn shared_reads_balance_their_parts() {
        let even = SHARE_WHOLE / 2;
        assert_eq!(balance(even, true), even + SHARE_STEP);
        assert_eq!(balance(even, false), even - SHARE_STEP);
        let mut share = even;
        for _ in 0..1000 {
            share = balance(share, true);
        }
        assert_eq!(share, SHARE_MOST);
        for _ in 0..1000 {
            share = balance(share, false);
        }
        assert_eq!(share, SHARE_LEAST);
        // Finishing first and last in turns keeps the cut where it is,
        // give or take a step.
        let mut share = even;
        for round in 0..100 {
            share = balance(share, round % 2 == 0);
            assert!(share.abs_diff(even) <= SHARE_STEP);
        }
    }
}
