//! The `shm` driver: ranks of one host talk through a shared segment.
//!
//! One POSIX shared-memory object per job (`/dev/shm/navette-<job id>`,
//! mode 0600) holds a receive ring per rank ([`navette_shm`]: a bounded
//! multi-producer single-consumer queue of fixed-size cells, so memory grows
//! as N, not N²). Rank 0 creates it; every rank maps it; rank 0 unlinks the
//! name as soon as all have attached, so nothing of the job is left in
//! `/dev/shm` after a crash.
//!
//! Data path, one rail per peer rank:
//! - **eager** (small pieces, every control chunk): the sender copies the
//!   packet into a cell of the receiver's ring, its send completes at once;
//!   the receiver's engine copies the data out into the destination.
//! - **rendezvous, two copies** (fragments below
//!   [`ShmConfig::single_copy_min`]): after the engine's request /
//!   clear-to-send exchange, the driver cuts the data chunk into cell-sized
//!   chunks at their offsets, pipelined through the ring: the sender's copy
//!   into a cell overlaps the receiver's copy out of the previous one.
//! - **rendezvous, single copy** (longer fragments): the data chunk travels
//!   as a *pull* cell naming the data's address in the sender; the receiver
//!   reads it straight into the destination with `process_vm_readv` and
//!   answers with a *pulled* cell, which completes the send. The pull
//!   carries the sender's *release epoch* (below): a receiver that finds
//!   it moved, before or after its read, declines the pull, and the
//!   sender pushes the data through the ring instead (if its memory is
//!   still there: a cancelled send's is not, and its data is dropped as
//!   any cancelled request's is). Each rank
//!   tests a read from a peer once at start-up and publishes whether it
//!   can pull; when the kernel refuses (ptrace policy) every fragment takes
//!   two copies. [`ShmConfig::copy`] forces either path.
//! - **single copy at the request** (a piece that one pull would read,
//!   to a peer this rail alone reaches): the engine marks the rendezvous
//!   request readable ([`navette_core::RailCaps::read_min`]) and the
//!   driver writes it in an *offering* cell that also gives the data's
//!   address. The receiver reads the data as soon as its engine knows the
//!   destination (at once for a receive posted ahead), and its
//!   clear-to-send, which says the data was read, completes the send: one
//!   cell each way instead of a request, a clear-to-send, a pull and a
//!   pulled cell. The usual message of that kind (small pieces, then the
//!   large one) does not even wait for a round: when its rail is idle
//!   and its gate's window empty, the sending thread writes the offering
//!   cell itself, as it writes a small message's packet
//!   ([`navette_core::Engine::send_readable_now`]). The offer carries the
//!   sender's *release epoch*, which
//!   the sender bumps in its area before it lets go of any memory it
//!   offered (a blocking send that stalled, say): the receiver reads only
//!   while the epoch holds, before and after the read. An offer the
//!   receiver cannot use (none came, dropped when too many were kept, the
//!   epoch moved, the read failed) makes its engine ask for the data the
//!   usual way.
//! - **shared single copy** (pulls of [`ShmConfig::share_min`] bytes or
//!   more): the receiver offers the sender, through its area's offer slot
//!   ([`navette_shm::Offer`]), to write the second part of the data into
//!   the destination itself (`process_vm_writev`) while the receiver reads
//!   the first (about half each: the cut follows which side finished first
//!   on the last read from that peer); the sender, waiting for its pulled
//!   cell (or its request's clear-to-send) anyway, takes it on its next
//!   round. One such call is bound by page pinning, not by
//!   memory bandwidth, so two cores move the data about twice as fast.
//!   If the sender has not taken the offer by the time the receiver's part
//!   is in, the receiver revokes it and reads the rest itself: a sender
//!   busy elsewhere does not hold the receiver up (one that took the offer
//!   is writing, and the receiver waits for that write). No one writes
//!   into the destination after the receiver has settled the offer.
//!
//! Peer failure: a peer process that is gone (killed, crashed) writes to
//! no ring again, so each rank checks every
//! [`ShmConfig::liveness_interval`] that its peers' processes still run
//! (one peer at a time, spread over the interval; idle rounds look at the
//! clock every few dozen rounds, busy ones far more rarely; a thread about
//! to block looks first). A peer that is gone has its rail closed:
//! every request that needs it fails with
//! [`crate::RequestError::PeerUnreachable`], and the other rails carry on.
//! A failed single-copy read from a peer closes its rail at once.
//!
//! Hot path (small message, peer ready): no allocation, no system call —
//! the doorbell (a shared futex) is rung only when the receiver sleeps.
//! Waiting threads block on their own doorbell after the node's spin phase.

mod cell;
mod inner;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use navette_core::{OpenToSend, RailCaps, RailId, Rank};
use navette_session::Bootstrap;
use navette_shm::{RankArea, Segment, SegmentConfig};
use navette_wire::{EagerHeader, PacketHeader, RdvDataHeader};
use parking_lot::Mutex;

use crate::clock::Clock;
use crate::driver::{Driver, Then};
use crate::node::NodeCore;
use crate::runtime::env_setting;
use crate::{Error, Result};
use inner::Inner;

/// How rendezvous data crosses between processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CopyMode {
    /// Single copy for rendezvous fragments of
    /// [`ShmConfig::single_copy_min`] bytes or more where the kernel allows
    /// it, two copies otherwise.
    #[default]
    Auto,
    /// Single copy (`process_vm_readv`) for every rendezvous fragment;
    /// start-up fails if the kernel refuses it.
    Single,
    /// Two copies through cells of the shared rings.
    Fallback,
}

impl FromStr for CopyMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "" | "auto" => Ok(Self::Auto),
            "single" => Ok(Self::Single),
            "fallback" => Ok(Self::Fallback),
            other => Err(Error::Config(format!(
                "{COPY_VAR}={other}: expected auto, single or fallback"
            ))),
        }
    }
}

/// Environment variable that forces the rendezvous copy path
/// (`auto`, `single`, `fallback`).
pub const COPY_VAR: &str = "NAVETTE_SHM_COPY";

/// Environment variable that turns shared single-copy reads `off` (or
/// `on`, the default): see [`ShmConfig::share_min`].
pub const SHARE_VAR: &str = "NAVETTE_SHM_SHARE";

/// Environment variable: how often peers' processes are checked, in
/// milliseconds ([`ShmConfig::liveness_interval`]).
pub const LIVENESS_VAR: &str = "NAVETTE_SHM_LIVENESS_MS";

/// Environment variable: the largest non-blocking send that waits in its
/// peer's open packet ([`ShmConfig::stage_max`]; a byte count, or `off`).
pub const STAGE_VAR: &str = "NAVETTE_SHM_STAGE_MAX";

/// Settings of the shm driver. Every field has a default.
#[derive(Clone, Debug)]
pub struct ShmConfig {
    /// Cells in each rank's receive ring (a power of two).
    pub ring_cells: u32,
    /// Bytes per cell, its header included (a multiple of 64): bounds the
    /// eager size and the two-copy fragment size. The default, 33 KiB,
    /// takes a 32 KiB piece and its headers eagerly in one cell. Measured
    /// one-way on the 2-core test machine against 16 KiB cells: a 16 KiB
    /// ping-pong 3.5 → 1.35 µs and an RPC with a 16 KiB body 4.8 → 2.6
    /// (no rendezvous handshake any more), 32 KiB 4.4 → 1.9, 64 KiB 7.1 →
    /// 5.2–6.0 and 128 KiB 10.3 → 6.4–7.0 (two copies through fewer,
    /// larger cells); 1 KiB, 256 KiB and streaming unchanged. Each rank's
    /// ring then takes 64 × 33 KiB, 2.1 MiB.
    pub cell_size: usize,
    /// Pieces of this many bytes or more go by rendezvous (lowered to what
    /// fits a cell). Default 33 KiB: up to 32 KiB and a little more go
    /// eagerly.
    pub rdv_threshold: usize,
    /// Longest rendezvous fragment: read by one single-copy pull, or cut
    /// into cell-sized pieces by the driver.
    pub pull_fragment: usize,
    /// Rendezvous fragments of at least this many bytes are pulled
    /// single-copy (where the kernel allows it, in [`CopyMode::Auto`]),
    /// shared by both ranks' cores from [`Self::share_min`] on; smaller
    /// ones cross as two pipelined copies through the cells, whose fixed
    /// cost is lower (on a virtual machine `process_vm_readv` costs about
    /// 2 µs a call plus page pinning). Measured on the 2-core test machine
    /// with 16 KiB cells, one-way: 64 KiB 7.1 µs through cells, 8.9
    /// single-copy shared; a 64 B + 256 KiB message 12.7 through cells,
    /// 13.7 shared. A ping-pong that sends back the very buffer it
    /// received into (its lines dirty in the other core's cache) favours
    /// the cells up to 4 MiB (256 KiB: 15 against 25 µs); from 16 MiB both
    /// are even. Measured again on 2026-11-23, the host's copies faster:
    /// the same message 6.9–7.8 µs through cells, 12–15 shared, a
    /// 256 KiB ping-pong 6.1 against 14 (a `process_vm_readv` of 256 KiB
    /// takes 23–24 µs here, a `memcpy` 2.7: see `docs/profiling.md`). The
    /// default takes single copy from 256 KiB: no copy by Navette and half
    /// the memory traffic for large data, as MPI's shared-memory paths do
    /// where the kernel's single copy is cheap.
    pub single_copy_min: usize,
    /// Single or two copies for rendezvous data; `NAVETTE_SHM_COPY`
    /// overrides it (see [`ShmConfig::from_env`]).
    pub copy: CopyMode,
    /// Single-copy reads of at least this many bytes are *shared*: the
    /// receiver offers the sender to write the second part itself
    /// (`process_vm_writev`) while it reads the first (about half each),
    /// so that the sender's core, otherwise waiting, copies too; if the
    /// sender does not take the offer by the time the first part is in,
    /// the receiver reads the rest itself. One such call is bound by the kernel's page pinning,
    /// not by memory bandwidth: on the 2-core test machine one call moves
    /// 10-13 GB/s, two at once about twice that. `None` never shares
    /// this rank's reads (it still writes its part of the reads that peers
    /// share with it); `NAVETTE_SHM_SHARE=off` sets `None`. With the
    /// defaults every single-copy read is shared (`share_min` is below
    /// [`Self::single_copy_min`]).
    pub share_min: Option<usize>,
    /// How often each rank checks that its peers' processes still run: a
    /// peer that is gone (killed, crashed) has its rail closed, and every
    /// request that needs it fails with
    /// [`crate::RequestError::PeerUnreachable`] within about this time (a
    /// thread blocked in a wait looks when it wakes, at least every
    /// `NodeConfig::block_for`). Each check costs a `kill(pid, 0)` and a read
    /// of `/proc/<pid>/stat` per peer. `NAVETTE_SHM_LIVENESS_MS` overrides
    /// it.
    pub liveness_interval: Duration,
    /// Non-blocking sends of at most this many bytes wait in their peer's
    /// open packet until a thread waits for one of them or makes progress,
    /// or a send that may leave at once goes to the same peer (or the
    /// packet fills), so that a burst of small `isend`s crosses as one ring
    /// cell; larger ones are copied into the ring at once, where
    /// the receiver starts on each while the sender writes the next. A
    /// packet's fixed cost (claiming a cell, publishing it, ringing the
    /// doorbell, landing it) outweighs the bytes of a small message; above
    /// a few hundred bytes the copy dominates and the overlap wins. `None`
    /// sends every small `isend` at once. Above
    /// [`navette_core::OPEN_MOST_PIECE`] (512 bytes) a message never stages:
    /// a larger value acts as that. `NAVETTE_SHM_STAGE_MAX` overrides it (a
    /// byte count, or `off`).
    pub stage_max: Option<usize>,
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self {
            ring_cells: SegmentConfig::default().ring_cells,
            cell_size: 33 << 10,
            rdv_threshold: 33 << 10,
            pull_fragment: 32 << 20,
            single_copy_min: 256 << 10,
            copy: CopyMode::Auto,
            share_min: Some(64 << 10),
            liveness_interval: Duration::from_millis(100),
            stage_max: Some(256),
        }
    }
}

impl ShmConfig {
    /// This configuration with the copy mode from `NAVETTE_SHM_COPY`, the
    /// sharing of reads from `NAVETTE_SHM_SHARE` (`on`, `off`), the
    /// liveness interval from `NAVETTE_SHM_LIVENESS_MS` (milliseconds, at
    /// least 1) and the largest staged send from `NAVETTE_SHM_STAGE_MAX`
    /// (bytes, or `off`), where set.
    pub fn from_env(mut self) -> Result<Self> {
        if let Some(value) = env_setting(LIVENESS_VAR)? {
            self.liveness_interval = match value.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(Error::Config(format!(
                        "{LIVENESS_VAR}={value}: expected a number of milliseconds, at least 1"
                    )));
                }
            };
        }
        if let Some(value) = env_setting(COPY_VAR)? {
            self.copy = value.parse()?;
        }
        if let Some(value) = env_setting(STAGE_VAR)? {
            self.stage_max = parse_stage_max(&value)?;
        }
        match env_setting(SHARE_VAR)?.as_deref() {
            None | Some("" | "on") => {}
            Some("off") => self.share_min = None,
            Some(other) => {
                return Err(Error::Config(format!(
                    "{SHARE_VAR}={other}: expected on or off"
                )));
            }
        }
        Ok(self)
    }
}

/// The value of `NAVETTE_SHM_STAGE_MAX`: a number of bytes, or `off`.
fn parse_stage_max(value: &str) -> Result<Option<usize>> {
    match value.trim() {
        "off" => Ok(None),
        bytes => bytes.parse().map(Some).map_err(|_| {
            Error::Config(format!(
                "{STAGE_VAR}={value}: expected a number of bytes, or off"
            ))
        }),
    }
}

/// Counters of the shm driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShmStats {
    /// Packets copied into peers' rings.
    pub packets_sent: u64,
    /// Bytes of those packets.
    pub bytes_copied_in: u64,
    /// Rendezvous data bytes this rank read from peers, single-copy (a
    /// read declined once made, its sender having let memory go meanwhile,
    /// counts in `reads_declined` instead).
    pub bytes_pulled: u64,
    /// Pull cells this rank sent: rendezvous fragments that peers read
    /// from its memory (or declined to).
    pub pulls_sent: u64,
    /// Bytes of this rank's single-copy reads that their sender wrote
    /// (shared reads, [`ShmConfig::share_min`]; declined ones apart, as
    /// in `bytes_pulled`).
    pub bytes_written_by_peers: u64,
    /// Bytes this rank wrote into peers for their shared reads of its data
    /// (also for reads the peer then declined).
    pub bytes_written_for_peers: u64,
    /// Rendezvous pieces this rank read on the request's offer (the
    /// address came with the request: no clear-to-send, no pull cell);
    /// their bytes count in `bytes_pulled`.
    pub reads_at_request: u64,
    /// Reads at the request, and pulls, not made, or made and not
    /// trusted: the sender let memory it had offered go meanwhile, or (a
    /// read at the request) the read failed. Their data was asked for the
    /// usual way (a read at the request), or the sender was asked to push
    /// it through the ring (a pull).
    pub reads_declined: u64,
    /// Readable requests sent without their read offer, which did not fit
    /// the cell beside the rest of their packet: their receivers asked
    /// for the data.
    pub offers_dropped: u64,
    /// Peers' read offers kept now, their requests not yet read nor
    /// refused (a gauge, not a count).
    pub offers_held: usize,
    /// Times a peer's ring was full and a packet had to wait.
    pub ring_full: u64,
    /// Packets that landed straight in a receive waiting outside the
    /// engine (a blocking tagged receive, an RPC reply or call), taken
    /// from the ring under the node's lock alone (see
    /// [`Driver::progress_lean`]).
    pub landed_at_once: u64,
    /// Packets written straight into a peer's ring by the sending thread,
    /// with no request (small tagged sends and whole small Madeleine
    /// messages to an idle rail), or with the one request of a Madeleine
    /// message's large last piece, read by the peer where it lies (its
    /// offering cell), or by a thread about to wait for the small
    /// messages of an open packet (counted in `packets_sent` too).
    pub sent_at_once: u64,
    /// Whether this rank can read peers' memory (single copy).
    pub can_pull: bool,
    /// Bytes of the shared segment mapped by this rank.
    pub segment_bytes: usize,
}

fn shm_error(what: &str, err: impl std::fmt::Display) -> Error {
    Error::Driver {
        driver: "shm",
        message: format!("{what}: {err}"),
    }
}

/// The shm driver of one rank.
#[derive(Debug)]
pub struct ShmDriver {
    inner: Mutex<Inner>,
    /// `None` in a job of one: no peer, no segment.
    /// Shared with the memory table's release hook (see `attach`).
    segment: Option<Arc<Segment>>,
    rank: Rank,
    bootstrap: Arc<dyn Bootstrap>,
    config: ShmConfig,
    start: Clock,
    /// The rail to each peer rank, once attached (read without the
    /// driver's lock by [`Driver::send_now`]).
    rails: OnceLock<Vec<Option<RailId>>>,
    /// Packets and bytes sent at once by the sending thread
    /// ([`Driver::send_now`] and its kin).
    sent_now: AtomicU64,
    bytes_now: AtomicU64,
    /// Packets landed by [`Driver::progress_lean`].
    landed_now: AtomicU64,
    /// A word of this process's memory that peers read once to test single
    /// copy; boxed so that its address is stable.
    _probe: Box<u64>,
}

impl ShmDriver {
    /// Sets up the job's segment with every other rank (every rank of the
    /// job must call it: it fences three times). Rank 0 creates the
    /// segment, the others attach, each publishes its pid, then each tests
    /// a single-copy read from its next rank and says whether it can pull;
    /// rank 0 then unlinks the segment's name.
    pub fn open(bootstrap: Arc<dyn Bootstrap>, config: &ShmConfig) -> Result<Arc<Self>> {
        let (rank, size, job) = (bootstrap.rank(), bootstrap.size(), bootstrap.job_id());
        if size > cell::MAX_RANKS {
            return Err(shm_error(
                "open",
                format!("{size} ranks: at most {} on one host", cell::MAX_RANKS),
            ));
        }
        let probe = Box::new(rand_u64()?);
        let segment = if size > 1 {
            Some(set_up(&*bootstrap, config, &probe)?)
        } else {
            None
        };
        let limits = navette_wire::Limits::default();
        let start = Clock::start();
        let piece_max = segment.as_ref().map_or(0, |s| {
            s.cell_payload() - cell::HEADER_LEN - PacketHeader::LEN - RdvDataHeader::LEN
        });
        let inner = Inner::new(
            rank,
            limits,
            start,
            piece_max,
            config.share_min,
            config.liveness_interval,
        );
        tracing::debug!(rank, size, job, "shm: segment ready");
        Ok(Arc::new(Self {
            inner: Mutex::new(inner),
            segment: segment.map(Arc::new),
            rank,
            bootstrap,
            config: config.clone(),
            start,
            rails: OnceLock::new(),
            sent_now: AtomicU64::new(0),
            bytes_now: AtomicU64::new(0),
            landed_now: AtomicU64::new(0),
            _probe: probe,
        }))
    }

    /// Declares one rail per peer rank on `node` (the node this driver
    /// serves), single-copy for long fragments towards peers that can pull.
    pub fn attach(&self, node: &NodeCore) {
        let Some(segment) = &self.segment else {
            return;
        };
        let payload = segment.cell_payload() - cell::HEADER_LEN;
        let eager_max = payload - PacketHeader::LEN - EagerHeader::LEN;
        let mut inner = self.inner.lock();
        let mut port = node.port();
        // Memory whose address went to a peer to read is let go only
        // after our area says so: the peer checks before trusting what
        // it read (see `Inner::read_offered`).
        let released = Arc::clone(segment);
        let me = self.rank;
        port.set_release_hook(crate::memtable::ReleaseHook(Arc::new(move || {
            released.area(me).note_release();
        })));
        let mut rails = vec![None; segment.ranks() as usize];
        for peer in 0..segment.ranks() {
            if peer == self.rank {
                continue;
            }
            let pulls = segment.area(peer).can_pull();
            let pull_min = pulls.then_some(match self.config.copy {
                CopyMode::Single => 0,
                _ => self.config.single_copy_min,
            });
            let caps = RailCaps {
                rdv_threshold: self.config.rdv_threshold.min(eager_max + 1),
                // Long fragments either way: the driver cuts those it
                // copies into cell-sized pieces itself, without a packet
                // round through the engine for each.
                max_fragment: self.config.pull_fragment,
                max_packet: payload - PacketHeader::LEN,
                latency: Duration::from_nanos(300),
                bandwidth: 10_000_000_000,
                // A peer that pulls our data reads it as soon as it knows
                // where it goes: the address rides with the request.
                read_min: pull_min,
            };
            let rail = port.add_rail(peer, caps);
            // A peer in another pid namespace shows no process here: the
            // liveness check cannot tell about it, and leaves it alone.
            let watched = navette_shm::is_alive(segment.area(peer).pid());
            inner.add_peer(peer, rail, pull_min, watched);
            rails[peer as usize] = Some(rail);
        }
        // A second attach (a caller bug) keeps the first rails.
        let _ = self.rails.set(rails);
    }

    /// The shared-memory rail to `peer`, once attached: `None` for a rank
    /// out of the job, this rank, or a peer reached by another driver
    /// alone (shm+tcp).
    #[inline]
    fn shm_rail(&self, peer: Rank) -> Option<RailId> {
        *self.rails.get()?.get(peer as usize)?
    }

    /// Writes a packet of `packet` bytes straight into a cell of `peer`'s
    /// ring, if it fits a cell, the engine agrees (`can`, under the node's
    /// lock) and the ring has room: `write` fills the packet. Both see the
    /// sender's `message`. `None` when it cannot: the caller goes the
    /// usual way.
    #[allow(clippy::too_many_arguments)]
    fn write_at_once<M: ?Sized>(
        &self,
        node: &NodeCore,
        peer: Rank,
        packet: usize,
        then: Then,
        message: &mut M,
        can: impl FnOnce(&mut crate::driver::DriverPort<'_>, RailId, &M) -> bool,
        write: impl FnOnce(&mut crate::driver::DriverPort<'_>, &mut M, &mut [u8]),
    ) -> Option<()> {
        let segment = self.segment.as_ref()?;
        let rail = self.shm_rail(peer)?;
        let len = cell::packet_len(packet);
        if len > segment.cell_payload() {
            return None;
        }
        let mut port = node.port();
        if !can(&mut port, rail, message) {
            return None;
        }
        // A full ring: the usual way waits for room.
        let pushed = self.push_packet(&segment.area(peer), packet, then, |out| {
            write(&mut port, message, out);
        });
        drop(port);
        pushed.then_some(())
    }

    /// Pushes a packet cell of `packet` bytes, which `fill` writes, into
    /// `area`'s ring, rings its doorbell and counts it sent at once:
    /// whether the ring took it. The caller checked that it fits a cell,
    /// and holds the node's lock, under which the counts are kept: a load
    /// and a store, not a locked read-modify-write (which would wait for
    /// the cell's stores to leave the store buffer).
    fn push_packet(
        &self,
        area: &RankArea<'_>,
        packet: usize,
        then: Then,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        let me = self.rank;
        // A sender that waits next hands the cell's lines over to the
        // shared cache, where the receiver reads them sooner; one that
        // sends more keeps its time for that.
        let pushed = area
            .try_push_handing_over(cell::packet_len(packet), then == Then::Waits, |out| {
                // The header lies in the first line: written last (see
                // `copy_first_line_last`).
                fill(&mut out[cell::HEADER_LEN..]);
                cell::write_packet_header(out, me);
            })
            .is_ok();
        if pushed {
            area.ring_doorbell();
            count(&self.sent_now, 1);
            count(&self.bytes_now, packet as u64);
        }
        pushed
    }

    /// Writes the lone packet of the message `parts` (whose receive or
    /// reply `arm` arms, under the lock, before the cell is claimed) into
    /// `gate`'s peer's ring at once, if it can (see [`Self::write_at_once`]);
    /// `then` says what the sending thread does next.
    fn send_lone_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        then: Then,
        arm: &mut dyn FnMut(&mut crate::driver::DriverPort<'_>),
    ) -> Option<Result<navette_core::Status>> {
        let len = parts.iter().map(|part| part.len()).sum();
        // The lone form: a ring cell frames its packet.
        let packet = navette_core::Engine::lone_packet_len(len);
        self.write_at_once(
            node,
            gate.peer,
            packet,
            then,
            &mut (),
            // Armed before the cell is claimed: the receiver polls the
            // cell's first line, so the time from the first write to it to
            // publication is kept to the copy alone.
            |port, rail, ()| {
                let can = port.can_send_now(gate, rail, len);
                if can {
                    arm(port);
                }
                can
            },
            |port, (), out| port.send_lone_now(gate, tag, parts, out),
        )?;
        Some(Ok(navette_core::Status {
            peer: gate.peer,
            tag,
            len,
        }))
    }

    /// Copies `which` open packets of small messages into their peers'
    /// rings (one cell each), under the node's lock alone: a thread about
    /// to wait for them, or going on sending after it closed one, needs no
    /// whole round of progress. Whether any left (a full ring or a busy
    /// rail leaves the rest to the next round). Only the peers with
    /// packets waiting are visited, however many the job has. `then`: what
    /// the thread does next (see [`Then`]).
    pub(crate) fn send_staged(&self, node: &NodeCore, which: OpenToSend, then: Then) -> bool {
        let Some(segment) = self.segment.as_ref() else {
            return false;
        };
        let mut port = node.port();
        let max = segment.cell_payload();
        let mut sent = 0;
        // A peer whose packets all leave goes out of the list, the last one
        // taking its place: the same `nth` is asked again.
        let mut nth = 0;
        while let Some(peer) = port.staged_peer(nth) {
            // A peer reached by another driver alone (shm+tcp) waits for
            // that driver's round.
            let Some(rail) = self.shm_rail(peer) else {
                nth += 1;
                continue;
            };
            let area = segment.area(peer);
            let all_left = port.send_open_now(rail, which, |packet| {
                let pushed = cell::packet_len(packet.len()) <= max
                    && self.push_packet(&area, packet.len(), then, |out| {
                        copy_first_line_last(out, packet);
                    });
                sent += usize::from(pushed);
                pushed
            });
            // (Checked, not assumed: a peer left in the list would be
            // asked again forever.)
            if !all_left || port.staged_peer(nth) == Some(peer) {
                nth += 1;
            }
        }
        sent > 0
    }

    /// The driver's counters.
    pub fn stats(&self) -> ShmStats {
        let inner = self.inner.lock();
        let mut stats = inner.stats;
        stats.offers_held = inner.offers_held();
        drop(inner);
        stats.packets_sent += self.sent_now.load(Ordering::Relaxed);
        stats.bytes_copied_in += self.bytes_now.load(Ordering::Relaxed);
        stats.landed_at_once = self.landed_now.load(Ordering::Relaxed);
        stats.sent_at_once = self.sent_now.load(Ordering::Relaxed);
        if let Some(segment) = &self.segment {
            stats.can_pull = segment.area(self.rank).can_pull();
            stats.segment_bytes = segment.mapped_bytes();
        }
        stats
    }

    /// Bytes of the shared segment actually in memory (pages touched by
    /// any rank), if there is a segment.
    pub fn resident_bytes(&self) -> Result<Option<usize>> {
        self.segment
            .as_ref()
            .map(|s| s.resident_bytes())
            .transpose()
            .map_err(|e| shm_error("resident pages", e))
    }

    /// Ends the session for `node`: waits, while still serving peers, until
    /// every rank reached the bootstrap's fence.
    fn shut_down(&self, node: &NodeCore) -> Result<()> {
        crate::driver::serve_until_fenced(self, node, &*self.bootstrap)
    }
}

/// Copies `packet` into `out`, a packet cell's packet bytes, the bytes
/// that lie in the cell's first line last. That line is the one the
/// receiver polls, which takes it back from this core while it waits:
/// written first, it is taken from the receiver for the copy, and again
/// for the stamp if the receiver looked meanwhile; the other lines, asked
/// for ahead ([`RankArea::prefetch_tail_cell`]), are this core's. Written
/// last, with the header and the stamp, it is taken once.
fn copy_first_line_last(out: &mut [u8], packet: &[u8]) {
    let head = (navette_shm::FIRST_LINE_PAYLOAD - cell::HEADER_LEN).min(packet.len());
    let (first, rest) = packet.split_at(head);
    out[head..].copy_from_slice(rest);
    out[..head].copy_from_slice(first);
}

/// Creates or attaches the segment, publishes this rank, tests single copy.
fn set_up(bootstrap: &dyn Bootstrap, config: &ShmConfig, probe: &u64) -> Result<Segment> {
    let (rank, size, job) = (bootstrap.rank(), bootstrap.size(), bootstrap.job_id());
    let geometry = SegmentConfig {
        ring_cells: config.ring_cells,
        cell_size: config.cell_size,
    };
    // Checked on every rank, not only by the creator: each refuses a bad
    // geometry itself instead of waiting in the fence below for rank 0.
    geometry
        .check(size)
        .map_err(|e| shm_error("configuration", e))?;
    let created = if rank == 0 {
        Some(Segment::create(job, size, &geometry).map_err(|e| shm_error("create", e))?)
    } else {
        None
    };
    bootstrap.fence()?;
    let segment = match created {
        Some(segment) => segment,
        None => Segment::attach(job, size).map_err(|e| {
            shm_error(
                "attach (are all ranks on one host? NAVETTE_DRIVER=tcp works across hosts)",
                e,
            )
        })?,
    };
    let probe_addr = std::ptr::from_ref(probe) as u64;
    segment
        .area(rank)
        .publish(std::process::id(), probe_addr, *probe);
    bootstrap.fence()?;
    if rank == 0 {
        segment.unlink().map_err(|e| shm_error("unlink", e))?;
    }
    let next = segment.area((rank + 1) % size);
    let (addr, value) = next.probe();
    let can =
        config.copy != CopyMode::Fallback && navette_shm::can_pull_from(next.pid(), addr, value);
    if config.copy == CopyMode::Single && !can {
        return Err(shm_error(
            "single copy",
            "the kernel refuses process_vm_readv between ranks (ptrace policy); \
             use NAVETTE_SHM_COPY=auto or fallback",
        ));
    }
    segment.area(rank).set_can_pull(can);
    bootstrap.fence()?;
    Ok(segment)
}

/// Adds `n` to a counter that only one thread updates at a time.
fn count(counter: &AtomicU64, n: u64) {
    let v = counter.load(Ordering::Relaxed);
    counter.store(v.wrapping_add(n), Ordering::Relaxed);
}

fn rand_u64() -> Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| shm_error("random probe", e))?;
    Ok(u64::from_le_bytes(bytes))
}

impl Driver for ShmDriver {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn progress(&self, node: &NodeCore) -> Result<bool> {
        match (self.segment.as_ref(), self.inner.try_lock()) {
            (Some(segment), Some(mut inner)) => Ok(inner.progress(segment, node)),
            _ => Ok(false),
        }
    }

    /// The cell at the head of this rank's ring is shown to the receives
    /// waiting outside the engine under the node's lock alone (not the
    /// driver's): a packet cell that lands there is consumed; anything
    /// else stays at head for the usual round that follows, so order is
    /// kept. Every consumer of the ring holds the node's lock while it
    /// pops, so no other thread takes the cell meanwhile (and the ring's
    /// own consumer lock would refuse it anyway).
    fn progress_lean(&self, node: &NodeCore) -> Result<bool> {
        if let Some(segment) = self.segment.as_ref() {
            let own = segment.area(self.rank);
            if !own.is_empty() {
                let mut port = node.port();
                let landed = own.pop_if(|bytes| match cell::Cell::parse(bytes) {
                    Ok(cell::Cell::Packet { from, packet }) => {
                        let rail = self.shm_rail(from)?;
                        port.land_now(rail, packet).then_some(())
                    }
                    _ => None,
                });
                if landed == Some(Some(())) {
                    // Under the node's lock (`port`), as every update.
                    count(&self.landed_now, 1);
                    return Ok(true);
                }
            }
        }
        self.progress(node)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("packets_sent", s.packets_sent),
            ("bytes_copied_in", s.bytes_copied_in),
            ("bytes_pulled", s.bytes_pulled),
            ("pulls_sent", s.pulls_sent),
            ("bytes_written_by_peers", s.bytes_written_by_peers),
            ("bytes_written_for_peers", s.bytes_written_for_peers),
            ("reads_at_request", s.reads_at_request),
            ("reads_declined", s.reads_declined),
            ("offers_dropped", s.offers_dropped),
            ("ring_full", s.ring_full),
            ("landed_at_once", s.landed_at_once),
            ("sent_at_once", s.sent_at_once),
        ]
    }

    fn bytes_copied(&self) -> u64 {
        self.stats().bytes_copied_in
    }

    fn now(&self) -> Option<Duration> {
        Some(self.start.now())
    }

    fn wait(&self, node: &NodeCore, timeout: Duration) -> Result<()> {
        let Some(segment) = &self.segment else {
            std::thread::sleep(timeout.min(Duration::from_micros(50)));
            return Ok(());
        };
        let Some(mut inner) = self.inner.try_lock_for(timeout) else {
            return Ok(());
        };
        // A peer that is gone would never ring us: look before sleeping.
        inner.check_liveness(segment, node);
        // A packet waiting for room in a peer's ring: that peer does not
        // ring us when it frees a cell, so look again soon.
        let timeout = if inner.is_stuck() {
            timeout.min(Duration::from_micros(100))
        } else {
            timeout
        };
        drop(inner);
        let own = segment.area(self.rank);
        // Work submitted by another thread is marked before `wake` rings
        // the doorbell; the sleep checks the mark after announcing itself,
        // so one of the two sees the other.
        own.sleep_unless(own.ticket(), timeout, || node.has_work())
            .map_err(|e| shm_error("sleep", e))
    }

    fn send_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
        then: Then,
    ) -> Option<Result<navette_core::Status>> {
        self.send_lone_now(node, gate, tag, &[data], then, &mut |_| ())
    }

    fn send_parts_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        arm: &mut dyn FnMut(&mut crate::driver::DriverPort<'_>),
    ) -> Option<Result<navette_core::Status>> {
        // A message's thread waits for it, or for the call it carries.
        self.send_lone_now(node, gate, tag, parts, Then::Waits, arm)
    }

    /// Asks for the first line of the next cell of `peer`'s ring, the one
    /// its consumer polls (and so holds): the push's first write to it
    /// then finds it on its way back (docs/profiling.md, stop 38).
    fn ready_to_push(&self, peer: Rank) {
        if let Some(segment) = self.segment.as_ref()
            && self.shm_rail(peer).is_some()
        {
            segment.area(peer).prefetch_tail_cell();
        }
    }

    /// A packet is one copy into the peer's ring: all but the smallest
    /// messages leave at once ([`ShmConfig::stage_max`]).
    fn stages_up_to(&self) -> Option<usize> {
        self.config
            .stage_max
            .map(|max| max.min(navette_core::OPEN_MOST_PIECE))
    }

    /// Writes the open packets into the rings under the node's lock: no
    /// round of progress (the wait that follows makes those; a full ring
    /// or a busy rail leaves the rest to it).
    fn flush_staged(&self, node: &NodeCore, then: Then) -> Result<bool> {
        Ok(self.send_staged(node, OpenToSend::All, then))
    }

    /// Writes the closed open packets into the rings as
    /// [`Self::flush_staged`] does: a closed packet costs a copy, not a
    /// round of progress.
    fn send_closed(&self, node: &NodeCore) -> Result<bool> {
        Ok(self.send_staged(node, OpenToSend::Closed, Then::SendsMore))
    }

    fn send_message_now(
        &self,
        node: &NodeCore,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> Option<Result<()>> {
        let packet = navette_core::Engine::message_packet_len(pieces);
        // A message's thread waits for it, or for the call it carries.
        self.write_at_once(
            node,
            out.peer(),
            packet,
            Then::Waits,
            out,
            |port, rail, out| port.can_send_message_now(out, rail, pieces),
            |port, out, cell| port.send_message_now(out, pieces, cell),
        )?;
        Some(Ok(()))
    }

    /// The offering cell of a usual rendezvous message (see
    /// [`navette_core::Engine::send_readable_now`]), written at once as a
    /// small message's packet is (`write_at_once`), with the large
    /// piece's offer.
    fn send_readable_now(
        &self,
        node: &NodeCore,
        out: &mut navette_core::OutMsg,
        pieces: &[navette_core::NowPiece<'_>],
    ) -> Option<Result<(navette_core::ReqId, navette_core::MemRef)>> {
        let segment = self.segment.as_ref()?;
        let peer = out.peer();
        let rail = self.shm_rail(peer)?;
        let large = pieces.last()?.data;
        let at = cell::offering_len(1, 0);
        let len = cell::offering_len(1, navette_core::Engine::readable_packet_len(pieces));
        if len > segment.cell_payload() {
            return None;
        }
        // The driver's state, which keeps what we offered, before the
        // node's lock, as the driver's rounds take them; busy (a round is
        // under way), the message goes the usual way.
        let mut inner = self.inner.try_lock()?;
        let mut port = node.port();
        if !port.can_send_readable_now(out, rail, pieces) {
            return None;
        }
        // Read under the lock, before the region is marked offered: the
        // release hook moves it past this value before the memory can go.
        let source = cell::PullSource {
            addr: large.as_ptr() as u64,
            len: large.len() as u64,
            epoch: segment.area(self.rank).release_epoch(),
        };
        let area = segment.area(peer);
        let mut sent = None;
        // A full ring: the usual way waits for room.
        let _ = area.try_push_handing_over(len, true, |cell| {
            let (now, data) = port.send_readable_now(out, pieces, &mut cell[at..]);
            let offer = cell::ReadOffer {
                send_id: now.send_id,
                source,
            };
            cell::write_offering(cell, self.rank, &[offer]);
            sent = Some((now, data));
        });
        let (now, data) = sent?;
        area.ring_doorbell();
        // Under the node's lock, as `push_packet` counts.
        count(&self.sent_now, 1);
        count(&self.bytes_now, (len - at) as u64);
        drop(port);
        inner.offered_now(peer, now.send_id, data.handle);
        Some(Ok((now.req, data)))
    }

    fn wake(&self) {
        // Only if one of our threads sleeps (no write to the doorbell's
        // line otherwise: peers read it on every message they send us).
        if let Some(segment) = &self.segment {
            segment.area(self.rank).ring_doorbell();
        }
    }

    fn finalize(&self, node: &NodeCore) -> Result<()> {
        self.shut_down(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_copied_first_line_last_is_the_packet() {
        for len in 0..200 {
            let packet: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut out = vec![0xAA; len];
            copy_first_line_last(&mut out, &packet);
            assert_eq!(out, packet, "{len} bytes");
        }
    }

    #[test]
    fn the_largest_staged_send_reads_bytes_or_off() {
        assert_eq!(parse_stage_max("256").expect("bytes"), Some(256));
        assert_eq!(parse_stage_max(" 0 ").expect("bytes"), Some(0));
        assert_eq!(parse_stage_max("off").expect("off"), None);
        for bad in ["", "-1", "1K", "on", "256 bytes"] {
            let err = parse_stage_max(bad).expect_err(bad).to_string();
            assert!(err.contains(STAGE_VAR) && err.contains("off"), "{err}");
        }
    }
}
