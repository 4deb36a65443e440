//! The engine: one per node, sans-IO.
//!
//! # Call order
//!
//! 1. [`Engine::add_rail`] for every driver connection to a peer.
//! 2. Interfaces submit work: [`Engine::send_begin`] / [`Engine::send_piece`]
//!    on the send side, [`Engine::recv_begin`] / [`Engine::recv_piece`] /
//!    [`Engine::recv_end`] on the receive side.
//! 3. The progress loop, in any order and as often as it likes:
//!    [`Engine::handle_packet`] for each packet a driver received,
//!    [`Engine::handle_send_complete`] when a driver finished sending the
//!    packet it was given, [`Engine::poll_transmit`] for each idle rail (one
//!    packet in flight per rail), and [`Engine::poll_event`] to collect
//!    completions.
//!
//! Time is an argument (`now`, since an arbitrary origin); the engine owns
//! no clock, socket or thread. User memory is reached only through
//! [`Memory`], by handle.

mod births;
mod failure;
mod incoming;
mod now;
mod open;
mod piece;
mod posted_now;
mod readable_now;
mod recv;
mod rendezvous;
mod report;
mod send;
mod spare;
mod transmit;
mod whole;

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use indexmap::IndexMap;
use navette_wire::{Chunk, Packet};
use rustc_hash::FxHashMap;

use crate::error::{ProtocolError, Violation};
use crate::plan::{PlanPool, SendProgress};
use crate::reorder::ReorderBuffer;
use crate::strategy::{RailInfo, Strategy};
use crate::{
    ChannelId, EngineConfig, Memory, RailCaps, RailId, Rank, ReqId, RequestError, Status, Window,
};

pub use now::{
    HAND_OVER_MIN, MOST_PIECES_AT_ONCE, NowGather, NowPart, NowPiece, RecvNow, RecvNowOutcome,
    WholeNowOutcome,
};
pub use open::{OPEN_MOST_BODY, OPEN_MOST_CHUNKS, OPEN_MOST_PIECE, OpenToSend, StagedSend};
pub use piece::PIECE_COST;
pub use posted_now::{MOST_LANDING, PostedBuffer, PostedList, PostedNow, PostedNowOutcome};
pub use readable_now::ReadableNow;
pub use recv::RecvPiece;
pub use rendezvous::RdvRead;
pub use report::{OutsideReceive, PendingRequest, PendingState, RailReport, Report};
pub use send::{OutMsg, PieceSpec};
pub use whole::WholeMessage;

use incoming::Incoming;
use piece::SeqPiece;
use recv::RecvMsg;
use rendezvous::{RdvRecv, RdvSend};

/// A completion: the request and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The request that completed.
    pub req: ReqId,
    /// Its outcome.
    pub outcome: Result<Status, RequestError>,
}

// Maps keyed by ids this engine allocates (requests, transfers) use the
// fast Fx hash; maps keyed by what a peer chooses (message numbers,
// channels) use aHash, randomly keyed per map against collision flooding
// and several times cheaper than std's SipHash on the receive path.

/// The hasher of maps keyed by what a peer chooses.
type PeerKeyed = ahash::RandomState;

/// The keys of `map` whose values satisfy `keep`, sorted: a deterministic
/// order for acting on a hash map's entries.
fn sorted_keys<K: Copy + Ord, V, S>(map: &HashMap<K, V, S>, keep: impl Fn(&V) -> bool) -> Vec<K> {
    let mut keys: Vec<K> = map
        .iter()
        .filter(|(_, v)| keep(v))
        .map(|(&k, _)| k)
        .collect();
    keys.sort_unstable();
    keys
}

/// Entries of the caches of [`Engine::gate`] and [`Engine::channel_index`].
const RECENT_GATES: usize = 64;

/// `channel` and `peer` as one word, never 0, for `Engine::recent_gates`:
/// a lookup compares one word rather than two fields and a tag.
#[inline]
fn gate_key(channel: ChannelId, peer: Rank) -> u64 {
    1 << 48 | u64::from(peer) << 16 | u64::from(channel.0)
}

/// Index of a gate in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct GateId(usize);

/// The protocol engine of one node.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    now: Duration,
    /// Keyed by the ranks of the rails the driver added, not by what a
    /// peer sends: the fast hash.
    peers: IndexMap<Rank, Peer, rustc_hash::FxBuildHasher>,
    rails: Vec<Rail>,
    gates: Vec<Gate>,
    gate_index: HashMap<(ChannelId, Rank), GateId, PeerKeyed>,
    /// Gates looked up lately, direct-mapped by channel and peer, each
    /// with its [`gate_key`] (0: none): flows on a few channels with a few
    /// peers find their gates without hashing (gates are never removed,
    /// so an entry never goes stale).
    recent_gates: [(u64, GateId); RECENT_GATES],
    /// Channels looked up lately, direct-mapped by number, with their
    /// index in `channels` (never removed either).
    recent_channels: [Option<(ChannelId, usize)>; RECENT_GATES],
    channels: IndexMap<ChannelId, Channel, PeerKeyed>,
    recv_msgs: FxHashMap<ReqId, RecvMsg>,
    deferred: FxHashMap<ReqId, recv::DeferredPiece>,
    rdv_sends: FxHashMap<u32, RdvSend>,
    rdv_recvs: FxHashMap<u32, RdvRecv>,
    /// Reads of readable rendezvous data for the driver to make.
    reads: VecDeque<RdvRead>,
    /// Readable rendezvous requests refused without a read (peer, send
    /// id): the driver forgets the address that came with each.
    unread: VecDeque<(Rank, u32)>,
    buffered: usize,
    /// When requests were made, for reports.
    births: births::Births,
    /// Buffers of sent packets, reused by the next ones.
    pool: PlanPool,
    /// Queues of finished receive messages, reused by the next ones.
    spare: spare::Spare,
    next_req: u64,
    next_transfer: u32,
    events: VecDeque<Event>,
    /// A window received a chunk since [`Engine::take_queued`] last asked.
    queued: bool,
    /// What strategies see of a peer's rails, kept between packets.
    rail_views: Vec<RailInfo>,
    /// The peers (their indices in `peers`) with staged messages waiting
    /// in open packets (see [`open`]), in no order: while none has any,
    /// sending at once looks no further, and a driver writing them at once
    /// visits these peers alone ([`Engine::staged_peer`]).
    staged_peers: Vec<usize>,
    /// Rails closed so far: while none is, no peer is lost.
    rails_closed: usize,
    /// See [`Engine::lost_detached_staged`].
    lost_detached: u64,
}

#[derive(Debug)]
struct Peer {
    rails: Vec<RailId>,
    gates: Vec<GateId>,
    next_gate: usize,
    /// Small messages staged for the next rails (see [`open`]).
    open: open::OpenPackets,
    /// Whether a window of one of `gates` may hold a chunk: set as a chunk
    /// joins one ([`Engine::window_joined`]), cleared by whoever finds them
    /// all empty. While it is clear, no window needs looking at.
    windows_busy: bool,
}

#[derive(Debug)]
struct Rail {
    peer: Rank,
    /// Where `peer` lies in `Engine::peers` (peers are never removed).
    peer_index: usize,
    caps: RailCaps,
    in_flight: Option<Vec<SendProgress>>,
    /// Bytes of the packet in flight, and when it was handed out.
    in_flight_len: usize,
    sent_at: Duration,
    meter: transmit::BandwidthMeter,
    closed: bool,
}

#[derive(Debug)]
struct Gate {
    channel: ChannelId,
    /// Index of the channel in `Engine::channels` (never removed).
    channel_index: usize,
    peer: Rank,
    window: Window,
    rdv_threshold: usize,
    next_seq: u32,
    next_msg: u32,
    reorder: ReorderBuffer<SeqPiece<Vec<u8>>>,
    incoming: HashMap<u32, Incoming, PeerKeyed>,
    stats: GateStats,
    /// Where the peer's state is in `Engine::peers` (peers are never
    /// removed), kept for staging. `None` would be a gate made before its
    /// peer had a rail, which never stages; gates are made only for peers
    /// that sent a packet or can be sent to.
    peer_index: Option<usize>,
    /// Whether the channel's strategy stages small messages
    /// ([`Strategy::stages_small`], kept here for [`Engine::stage_tagged`]).
    stages: bool,
    /// One more than the number of the peer's open packet that last
    /// counted among this gate's `packets_sent` (0: none did).
    open_counted: u64,
}

impl Gate {
    /// The gate's next sequence number, taken.
    fn take_seq(&mut self) -> u32 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    /// The header of a one-piece tagged message of `len` bytes with `tag`,
    /// the gate's next message: it takes the gate's next sequence and
    /// message numbers.
    fn next_tagged(&mut self, tag: u64, len: u32) -> navette_wire::EagerHeader {
        let (seq, msg) = (self.take_seq(), self.next_msg);
        self.next_msg = self.next_msg.wrapping_add(1);
        navette_wire::EagerHeader {
            channel: self.channel.0,
            flags: navette_wire::PieceFlags::TAGGED,
            seq,
            msg,
            tag,
            len,
        }
    }
}

/// Counters of one gate (one channel to one peer), since the engine
/// started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateStats {
    /// The gate's channel.
    pub channel: ChannelId,
    /// The gate's peer.
    pub peer: Rank,
    /// Packets that carried chunks of this gate (a packet shared by several
    /// gates counts for each). Chunks put in an open packet (see
    /// [`Engine::stage_tagged`]) count here, and in the next two, when
    /// they are put there.
    pub packets_sent: u64,
    /// Chunks of this gate sent.
    pub chunks_sent: u64,
    /// Bytes of those chunks (headers and data).
    pub bytes_sent: u64,
    /// Chunks of this gate received.
    pub chunks_received: u64,
    /// Data bytes of this gate that the engine copied: eager data into
    /// receive buffers, data held while unexpected or out of order, and
    /// rendezvous data that arrived inside packets. Rendezvous data that a
    /// driver lands itself is not copied by the engine. Also the copies
    /// the sender's message layer made before handing pieces over (SAFER
    /// pieces, also those of a message abandoned before it left; small
    /// CHEAPER ones that did not leave at once), counted
    /// with [`Engine::count_send_copy`] and, for messages sent at once, by
    /// [`Engine::send_message_now`]; and the data of small messages copied
    /// into open packets ([`Engine::stage_tagged`]).
    pub bytes_copied: u64,
    /// Messages of this gate received whole: unpacked out of the engine,
    /// with no request per piece (see [`WholeMessage`]).
    pub messages_whole: u64,
    /// Messages of this gate received at once, outside the engine: a
    /// blocking tagged receive's ([`Engine::recv_now`]), receives posted
    /// ahead ([`Engine::land_posted_now`]) and whole messages
    /// ([`Engine::recv_whole_now`], counted among `messages_whole` too).
    pub messages_at_once: u64,
}

impl GateStats {
    /// Chunks per packet sent (0 before the first packet).
    pub fn chunks_per_packet(&self) -> f64 {
        if self.packets_sent == 0 {
            0.0
        } else {
            self.chunks_sent as f64 / self.packets_sent as f64
        }
    }
}

#[derive(Debug)]
struct Channel {
    strategy: Box<dyn Strategy>,
    posted: VecDeque<recv::Posted>,
    unexpected: VecDeque<(GateId, u32)>,
    /// Messages queued in `unexpected` since the channel was created.
    unexpected_count: u64,
}

impl Engine {
    /// A new engine with no rail.
    pub fn new(config: EngineConfig) -> Self {
        Self {
            config,
            now: Duration::ZERO,
            peers: IndexMap::default(),
            rails: Vec::new(),
            gates: Vec::new(),
            gate_index: HashMap::default(),
            recent_gates: [(0, GateId(0)); RECENT_GATES],
            recent_channels: [None; RECENT_GATES],
            channels: IndexMap::default(),
            recv_msgs: FxHashMap::default(),
            deferred: FxHashMap::default(),
            rdv_sends: FxHashMap::default(),
            rdv_recvs: FxHashMap::default(),
            reads: VecDeque::new(),
            unread: VecDeque::new(),
            buffered: 0,
            births: births::Births::default(),
            pool: PlanPool::default(),
            spare: spare::Spare::default(),
            next_req: 1,
            next_transfer: 1,
            events: VecDeque::new(),
            queued: false,
            rail_views: Vec::new(),
            staged_peers: Vec::new(),
            rails_closed: 0,
            lost_detached: 0,
        }
    }

    /// This engine's rank.
    pub fn rank(&self) -> Rank {
        self.config.rank
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The time last given to the engine.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Declares a driver connection to `peer` and returns its id.
    ///
    /// Capabilities beyond what peers decode are lowered to fit the
    /// configured [`navette_wire::Limits`] (the peers' too: the ranks of a
    /// job share them): a packet's body is at most `max_body_len` bytes,
    /// an eager piece at most `max_eager_len` and small enough for its
    /// chunk to fit a body alone, a rendezvous fragment at most
    /// `max_fragment_len` and small enough for its packet's body to stay
    /// within `max_body_len`, and a fragment is at least one byte.
    pub fn add_rail(&mut self, peer: Rank, caps: RailCaps) -> RailId {
        let limits = self.config.limits;
        let body_max = limits.max_body_len as usize;
        let fragment_max = (limits.max_fragment_len as usize)
            .min(body_max.saturating_sub(navette_wire::RdvDataHeader::LEN))
            .max(1);
        let eager_max = (limits.max_eager_len as usize)
            .min(body_max.saturating_sub(navette_wire::EagerHeader::LEN));
        let caps = RailCaps {
            rdv_threshold: caps.rdv_threshold.min(eager_max + 1),
            max_fragment: caps.max_fragment.clamp(1, fragment_max),
            max_packet: caps.max_packet.min(body_max),
            ..caps
        };
        let id = RailId(u32::try_from(self.rails.len()).expect("fewer than 2^32 rails"));
        let entry = self.peers.entry(peer);
        let peer_index = entry.index();
        entry
            .or_insert_with(|| Peer {
                rails: Vec::new(),
                gates: Vec::new(),
                next_gate: 0,
                open: open::OpenPackets::default(),
                windows_busy: false,
            })
            .rails
            .push(id);
        self.rails.push(Rail {
            peer,
            peer_index,
            caps,
            in_flight: None,
            in_flight_len: 0,
            sent_at: Duration::ZERO,
            meter: transmit::BandwidthMeter::default(),
            closed: false,
        });
        let eager = self.rdv_threshold(peer);
        for gate in self.peers[&peer].gates.clone() {
            self.gates[gate.0].rdv_threshold = eager;
        }
        id
    }

    /// Reports that a rail is gone (cut, reset, or closed after a protocol
    /// error). Packets may have been lost on it and rails do not
    /// retransmit, so the whole peer is failed: see [`Self::fail_peer`].
    pub fn close_rail(&mut self, rail: RailId) {
        if let Some(r) = self.rails.get(rail.0 as usize)
            && !r.closed
        {
            self.fail_peer(r.peer);
        }
    }

    /// Whether some rail to `peer` is open.
    pub fn is_reachable(&self, peer: Rank) -> bool {
        self.peers
            .get(&peer)
            .is_some_and(|p| p.rails.iter().any(|r| !self.rails[r.0 as usize].closed))
    }

    /// The peer and capabilities of a rail.
    pub fn rail(&self, rail: RailId) -> Option<(Rank, RailCaps)> {
        self.rails.get(rail.0 as usize).map(|r| (r.peer, r.caps))
    }

    /// Every rail, in creation order.
    pub fn rails(&self) -> impl Iterator<Item = RailId> + '_ {
        (0..self.rails.len()).map(|i| RailId(i as u32))
    }

    /// Records the current time.
    pub fn handle_tick(&mut self, now: Duration) {
        self.now = self.now.max(now);
    }

    /// Feeds a packet received on `rail`. An error means the peer broke the
    /// protocol: close the rail ([`Self::close_rail`]). Chunks before the
    /// faulty one were applied. Packets on a closed rail are ignored.
    pub fn handle_packet(
        &mut self,
        now: Duration,
        rail: RailId,
        bytes: &[u8],
        mem: &mut dyn Memory,
    ) -> Result<(), ProtocolError> {
        self.handle_tick(now);
        let peer = match self.rails.get(rail.0 as usize) {
            Some(r) if r.closed => return Ok(()),
            Some(r) => r.peer,
            None => return Err(ProtocolError::UnknownRail(rail)),
        };
        // The usual small packet, eager chunks only, decoded once; one
        // whole message is handled in one step.
        let limits = self.config.limits;
        let eager = Packet::with_eager_chunks::<MOST_PIECES_AT_ONCE, _>(bytes, &limits, |eager| {
            if self.arrive_whole(peer, eager, mem) {
                return Ok(());
            }
            let chunks = eager.iter().map(|&e| Chunk::Eager(e));
            self.on_chunks(rail, peer, chunks, mem)
        });
        if let Some(handled) = eager {
            return handled;
        }
        // The usual large message's packet, its last piece a rendezvous
        // request, is handled in one step too.
        let tailed = Packet::with_eager_chunks_then_request::<MOST_PIECES_AT_ONCE, _>(
            bytes,
            &limits,
            |eager, request| self.arrive_whole_with_request(peer, eager, request, mem),
        );
        if tailed == Some(true) {
            return Ok(());
        }
        let packet = Packet::decode(bytes, &limits).map_err(|source| ProtocolError::Decode {
            rail,
            peer,
            source,
        })?;
        self.on_chunks(rail, peer, packet.chunks(), mem)
    }

    /// Handles the chunks of a packet received on `rail` from `peer`, in
    /// order; a violation means the rail must be closed.
    fn on_chunks<'c>(
        &mut self,
        rail: RailId,
        peer: Rank,
        chunks: impl Iterator<Item = Chunk<'c>>,
        mem: &mut dyn Memory,
    ) -> Result<(), ProtocolError> {
        for chunk in chunks {
            self.on_chunk(peer, chunk, mem)
                .map_err(|what| ProtocolError::Violation { rail, peer, what })?;
        }
        Ok(())
    }

    fn on_chunk(
        &mut self,
        peer: Rank,
        chunk: Chunk<'_>,
        mem: &mut dyn Memory,
    ) -> Result<(), Violation> {
        match chunk {
            Chunk::Eager(e) => {
                let gate = self.gate(ChannelId(e.header.channel), peer);
                self.gates[gate.0].stats.chunks_received += 1;
                self.on_sequenced(gate, SeqPiece::eager(&e), mem)
            }
            Chunk::RdvRequest(mut r) => {
                r.readable = self.keeps_readable(peer, &r);
                let gate = self.gate(ChannelId(r.channel), peer);
                self.gates[gate.0].stats.chunks_received += 1;
                self.on_sequenced(gate, SeqPiece::rdv(&r), mem)
            }
            Chunk::ClearToSend(cts) => self.on_clear_to_send(peer, cts),
            Chunk::RdvData(d) => self.on_rdv_data(peer, d.header, d.data, mem),
            // Rails are reliable and ordered today: acks and credits are
            // accepted for forward compatibility and have no effect yet.
            Chunk::Ack(_) | Chunk::Credit(_) => Ok(()),
        }
    }

    /// Whether `request` from `peer` stays readable here: only where this
    /// side's rail reads too (the rails of a job read each other's memory
    /// or none does). A peer that marks a request readable elsewhere is
    /// asked for the data as usual, and a driver that keeps offers is told
    /// to forget its offer.
    fn keeps_readable(&mut self, peer: Rank, request: &navette_wire::RdvRequest) -> bool {
        let len = usize::try_from(request.total_len).unwrap_or(usize::MAX);
        if !request.readable || self.readable_by(peer, len) {
            return request.readable;
        }
        if self.reads_from(peer) {
            self.forget_read(peer, request.send_id);
        }
        false
    }

    /// For a driver that reads rendezvous data straight into its
    /// destination: given the header of a packet's only chunk, a
    /// rendezvous data header received on `rail`, the user memory its
    /// `len` bytes go to. An error means the peer broke the protocol (close
    /// the rail). The driver then reads the bytes into that range (through
    /// [`Memory::get_mut`]; a range that no longer resolves was cancelled,
    /// and its bytes are read and dropped) and calls
    /// [`Self::handle_rdv_landed`].
    pub fn rdv_destination(
        &self,
        rail: RailId,
        header: &navette_wire::RdvDataHeader,
    ) -> Result<crate::MemRef, ProtocolError> {
        let peer = match self.rails.get(rail.0 as usize) {
            Some(r) => r.peer,
            None => return Err(ProtocolError::UnknownRail(rail)),
        };
        self.rdv_landing(peer, header)
            .map_err(|what| ProtocolError::Violation { rail, peer, what })
    }

    /// Reports that the data of `header` (checked by
    /// [`Self::rdv_destination`]) has been written to its destination.
    pub fn handle_rdv_landed(
        &mut self,
        now: Duration,
        rail: RailId,
        header: &navette_wire::RdvDataHeader,
    ) -> Result<(), ProtocolError> {
        self.rdv_destination(rail, header)?;
        self.handle_tick(now);
        self.rdv_landed(header);
        Ok(())
    }

    /// The next completion.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn complete(&mut self, req: ReqId, outcome: Result<Status, RequestError>) {
        self.events.push_back(Event { req, outcome });
    }

    fn new_req(&mut self) -> ReqId {
        let id = ReqId(self.next_req);
        self.next_req += 1;
        if self.births.is_full() {
            let oldest = self.oldest_pending();
            self.births.make_room(oldest);
        }
        self.births.note(id, self.now);
        id
    }

    fn new_transfer(&mut self) -> u32 {
        let id = self.next_transfer;
        self.next_transfer = self.next_transfer.wrapping_add(1).max(1);
        id
    }

    /// The rendezvous threshold towards `peer`: the smallest of its rails'.
    pub fn rdv_threshold(&self, peer: Rank) -> usize {
        self.peers.get(&peer).map_or(0, |p| {
            p.rails
                .iter()
                .map(|r| self.rails[r.0 as usize].caps.rdv_threshold)
                .min()
                .unwrap_or(0)
        })
    }

    /// The gate of `(channel, peer)`, created on first use.
    #[inline]
    fn gate(&mut self, channel: ChannelId, peer: Rank) -> GateId {
        match self.cached_gate(channel, peer) {
            Some(id) => id,
            None => self.gate_slow(channel, peer, Self::gate_slot(channel, peer)),
        }
    }

    /// The gate of `channel` and `peer` if [`Self::gate`]'s cache holds
    /// it (a gate looked up lately), without making one.
    #[inline]
    fn cached_gate(&self, channel: ChannelId, peer: Rank) -> Option<GateId> {
        let (key, id) = self.recent_gates[Self::gate_slot(channel, peer)];
        (key == gate_key(channel, peer)).then_some(id)
    }

    /// The entry of `channel` and `peer` in [`Self::gate`]'s cache.
    #[inline]
    fn gate_slot(channel: ChannelId, peer: Rank) -> usize {
        (usize::from(channel.0) + 7 * peer as usize) % RECENT_GATES
    }

    /// [`Self::gate`] past its cache.
    #[cold]
    fn gate_slow(&mut self, channel: ChannelId, peer: Rank, slot: usize) -> GateId {
        if let Some(&id) = self.gate_index.get(&(channel, peer)) {
            self.recent_gates[slot] = (gate_key(channel, peer), id);
            return id;
        }
        let id = GateId(self.gates.len());
        let rdv_threshold = self.rdv_threshold(peer);
        let channel_index = self.channel_index(channel);
        let stages = self.channels[channel_index].strategy.stages_small();
        let peer_index = self.peers.get_index_of(&peer);
        self.gates.push(Gate {
            channel,
            channel_index,
            peer,
            window: Window::default(),
            rdv_threshold,
            next_seq: 0,
            next_msg: 0,
            reorder: ReorderBuffer::default(),
            incoming: HashMap::default(),
            stats: GateStats {
                channel,
                peer,
                ..GateStats::default()
            },
            peer_index,
            stages,
            open_counted: 0,
        });
        self.gate_index.insert((channel, peer), id);
        if let Some(p) = self.peers.get_mut(&peer) {
            p.gates.push(id);
        }
        id
    }

    /// Counts `len` data bytes the engine copied for `gate`.
    fn copied(&mut self, gate: GateId, len: usize) {
        self.gates[gate.0].stats.bytes_copied += len as u64;
    }

    /// Counts `len` data bytes of `out` that the sender's message layer
    /// copied before handing them over (see [`GateStats::bytes_copied`]).
    pub fn count_send_copy(&mut self, out: &OutMsg, len: usize) {
        self.copied(out.gate, len);
    }

    /// Counters of every gate, in creation order.
    pub fn gate_stats(&self) -> impl Iterator<Item = GateStats> + '_ {
        self.gates.iter().map(|g| g.stats)
    }

    /// Whether rendezvous data from `peer` is awaited: a clear-to-send went
    /// to it and its data has not all come (a driver may then read a
    /// packet's headers alone, to read the data straight into place).
    pub fn awaits_rdv_data(&self, peer: Rank) -> bool {
        self.rdv_recvs.values().any(|r| r.peer == peer)
    }

    fn channel(&mut self, channel: ChannelId) -> &mut Channel {
        let index = self.channel_index(channel);
        &mut self.channels[index]
    }

    /// The channel at `index` in `channels` (a gate's `channel_index`).
    /// `IndexMap`'s own indexing is not inlined on the hot paths, and
    /// channels are never removed.
    #[inline]
    fn channel_at(&self, index: usize) -> &Channel {
        self.channels
            .get_index(index)
            .expect("channels are never removed")
            .1
    }

    /// The index of `channel` in `channels`, created on first use.
    #[inline]
    fn channel_index(&mut self, channel: ChannelId) -> usize {
        let slot = usize::from(channel.0) % RECENT_GATES;
        if let Some((c, index)) = self.recent_channels[slot]
            && c == channel
        {
            return index;
        }
        self.channel_index_slow(channel, slot)
    }

    /// The state of `channel`, if it was ever used: [`Self::channel_index`]'s
    /// cache first, without changing anything.
    #[inline]
    fn find_channel(&self, channel: ChannelId) -> Option<&Channel> {
        let slot = usize::from(channel.0) % RECENT_GATES;
        match self.recent_channels[slot] {
            Some((c, index)) if c == channel => Some(self.channel_at(index)),
            _ => self.channels.get(&channel),
        }
    }

    /// [`Self::channel_index`] past its cache.
    #[cold]
    fn channel_index_slow(&mut self, channel: ChannelId, slot: usize) -> usize {
        if let Some(index) = self.channels.get_index_of(&channel) {
            self.recent_channels[slot] = Some((channel, index));
            return index;
        }
        let entry = self.channels.entry(channel);
        let index = entry.index();
        let strategy = self.config.strategy_of(channel);
        entry.or_insert_with(|| Channel {
            strategy: strategy.build(),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            unexpected_count: 0,
        });
        // Cached from its creation: the paths outside the engine only read
        // it (`find_channel`), and would otherwise hash it on every receive.
        self.recent_channels[slot] = Some((channel, index));
        index
    }

    /// How many messages no receive awaited have arrived on `channel` so
    /// far (a count that only grows): a service that takes unexpected
    /// messages, such as RPC calls, looks for them only when it moved.
    pub fn unexpected_arrivals(&mut self, channel: ChannelId) -> u64 {
        let index = self.channel_index(channel);
        self.channels[index].unexpected_count
    }

    /// Sets the strategy of a channel (before or after its first use).
    pub fn set_strategy(&mut self, channel: ChannelId, strategy: Box<dyn Strategy>) {
        let index = self.channel_index(channel);
        let stages = strategy.stages_small();
        self.channels[index].strategy = strategy;
        for g in self.gates.iter_mut().filter(|g| g.channel_index == index) {
            g.stages = stages;
        }
    }

    /// Notes that a chunk joined `gate`'s window: the drivers have work
    /// ([`Self::take_queued`]), and the peer's windows are no longer known
    /// empty (`Peer::windows_busy`). Every push onto a window is followed
    /// by this.
    fn window_joined(&mut self, gate: GateId) {
        self.queued = true;
        if let Some(index) = self.gates[gate.0].peer_index {
            self.peers[index].windows_busy = true;
        }
    }

    /// Whether the engine may hold `len` more bytes of peer data (as
    /// `Piece::held` counts them) within `max_buffered_bytes`.
    fn may_hold(&self, len: usize) -> bool {
        self.buffered.saturating_add(len) <= self.config.max_buffered_bytes
    }

    fn hold_bytes(&mut self, len: usize) -> Result<(), Violation> {
        if !self.may_hold(len) {
            return Err(Violation::BufferOverflow(self.config.max_buffered_bytes));
        }
        self.buffered += len;
        Ok(())
    }

    fn release_bytes(&mut self, len: usize) {
        self.buffered -= len;
    }

    /// Bytes of peer data the engine holds (unexpected and out-of-order).
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }
}
