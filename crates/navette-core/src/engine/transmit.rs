//! Transmitting: a rail that goes idle takes the peer's next packet — its
//! open packet of staged small messages first, else one the channels'
//! strategies fill from the windows, the gates taking turns — and a packet
//! whose sending completes completes what it carried and measures its
//! rail's bandwidth.

use std::time::Duration;

use super::Engine;
use crate::plan::SendProgress;
use crate::strategy::{Fill, RailInfo, RailView};
use crate::{PacketPlan, Pending, RailId, Rank};

impl Engine {
    /// The next packet for `rail`, if it is idle and a window has work for
    /// it: the strategies of the peer's gates fill it in turns, starting
    /// after the gate served last, while they leave it open.
    pub fn poll_transmit(&mut self, now: Duration, rail: RailId) -> Option<PacketPlan> {
        self.handle_tick(now);
        let r = self.rails.get(rail.0 as usize)?;
        if r.closed || r.in_flight.is_some() {
            return None;
        }
        let peer = r.peer;
        let peer_state = self.peers.get(&peer)?;
        if peer_state.open.is_waiting() {
            // Staged messages were numbered before anything of the windows.
            let (plan, progress) = self.take_open_plan(peer)?;
            self.set_in_flight(rail, &plan, progress);
            return Some(plan);
        }
        let gates = &self.gates;
        if peer_state
            .gates
            .iter()
            .all(|g| gates[g.0].window.is_empty())
        {
            // The common answer after a packet completes: nothing to send.
            return None;
        }
        let mut views = std::mem::take(&mut self.rail_views);
        views.clear();
        views.extend(
            peer_state
                .rails
                .iter()
                .map(|&id| (id, &self.rails[id.0 as usize]))
                .filter(|(_, r)| !r.closed)
                .map(|(id, r)| RailInfo {
                    id,
                    caps: r.caps,
                    idle: r.in_flight.is_none(),
                    in_flight: r.in_flight_len,
                    bandwidth: r.meter.bandwidth().unwrap_or(r.caps.bandwidth),
                }),
        );
        let Some(&this) = views.iter().find(|v| v.id == rail) else {
            self.rail_views = views;
            return None;
        };
        let view = RailView {
            rail: this,
            rails: &views,
        };
        let peer_state = self.peers.get_mut(&peer)?;
        let count = peer_state.gates.len();
        let mut packet = self.pool.builder();
        let mut last = None;
        for step in 0..count {
            let index = (peer_state.next_gate + step) % count;
            let gate_id = peer_state.gates[index];
            let gate = &mut self.gates[gate_id.0];
            if gate.window.is_empty() {
                continue;
            }
            let channel = &mut self.channels[gate.channel_index];
            let (chunks, body) = (packet.chunk_count(), packet.body_len());
            let span = tracing::trace_span!(
                "strategy",
                name = channel.strategy.name(),
                rail = rail.0,
                peer,
                channel = gate.channel.0,
                window = gate.window.len(),
            );
            let _entered = span.enter();
            let fill = channel
                .strategy
                .try_and_commit(&mut gate.window, &view, &mut packet);
            let added = packet.chunk_count() - chunks;
            if added > 0 {
                gate.stats.packets_sent += 1;
                gate.stats.chunks_sent += u64::from(added);
                gate.stats.bytes_sent += (packet.body_len() - body) as u64;
                last = Some(index);
                tracing::trace!(
                    chunks = added,
                    packet_chunks = packet.chunk_count(),
                    packet_bytes = packet.body_len(),
                    ?fill,
                    "strategy filled a packet"
                );
            }
            if fill == Fill::Done && !packet.is_empty() {
                break;
            }
        }
        self.rail_views = views;
        let Some(last) = last else {
            let (plan, progress) = packet.into_parts();
            self.pool.put_plan(plan);
            self.pool.put_progress(progress);
            return None;
        };
        peer_state.next_gate = (last + 1) % count;
        let (plan, progress) = packet.finish();
        self.set_in_flight(rail, &plan, progress);
        Some(plan)
    }

    /// Notes `plan` in flight on `rail`, with what completes when it is sent.
    fn set_in_flight(&mut self, rail: RailId, plan: &PacketPlan, progress: Vec<SendProgress>) {
        let r = &mut self.rails[rail.0 as usize];
        r.in_flight = Some(progress);
        r.in_flight_len = plan.len();
        r.sent_at = self.now;
    }

    /// Gives back a plan from [`Self::poll_transmit`] once the driver is
    /// done with it, so that later packets reuse its buffers (optional:
    /// a plan simply dropped costs allocations, nothing else).
    pub fn recycle_plan(&mut self, plan: PacketPlan) {
        self.pool.put_plan(plan);
    }

    /// Reports that the packet last returned by [`Self::poll_transmit`] for
    /// `rail` has been sent: its user memory is no longer needed.
    pub fn handle_send_complete(&mut self, now: Duration, rail: RailId) {
        self.handle_tick(now);
        let now = self.now;
        let Some(mut progress) = self.rails.get_mut(rail.0 as usize).and_then(|r| {
            let progress = r.in_flight.take()?;
            r.meter
                .record(r.in_flight_len, now.saturating_sub(r.sent_at));
            r.in_flight_len = 0;
            Some(progress)
        }) else {
            return;
        };
        for item in progress.drain(..) {
            match item {
                SendProgress::Piece { req, status } => self.complete(req, Ok(status)),
                SendProgress::Internal => {}
                SendProgress::RdvBytes { send_id, len } => self.on_rdv_sent(send_id, len),
                SendProgress::OpenPacket { peer_index, packet } => {
                    self.open_packet_sent(peer_index, packet);
                }
            }
        }
        self.pool.put_progress(progress);
    }

    /// Whether a window received a chunk since the last call (and clears
    /// the mark): after feeding the engine an event, a driver polls its
    /// idle rails only if this, or [`Self::has_pending`] for a rail that
    /// just went idle, says there may be a packet.
    pub fn take_queued(&mut self) -> bool {
        std::mem::take(&mut self.queued)
    }

    /// Whether some window holds chunks for `peer`.
    pub fn has_pending(&self, peer: Rank) -> bool {
        self.peers.get(&peer).is_some_and(|p| {
            p.open.is_waiting() || p.gates.iter().any(|g| !self.gates[g.0].window.is_empty())
        })
    }

    /// Whether every send accepted so far has completed (or failed): what
    /// `finalize` waits for.
    pub fn sends_flushed(&self) -> bool {
        self.rdv_sends.is_empty()
            && self.rails.iter().all(|r| r.in_flight.is_none())
            && self.peers.values().all(|p| !p.open.is_waiting())
            && self.gates.iter().all(|g| {
                g.window
                    .iter()
                    .all(|c| !matches!(c, Pending::Eager { done: Some(_), .. }))
            })
    }

    /// The bandwidth measured on `rail`'s large packets, in bytes per
    /// second, once there is a measure.
    pub fn measured_bandwidth(&self, rail: RailId) -> Option<u64> {
        self.rails.get(rail.0 as usize)?.meter.bandwidth()
    }
}

/// A rail's bandwidth as its large packets show it: bytes over the time
/// from hand-out to completion, summed over recent packets (the engine's
/// clock may be coarse: sums average its steps out).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BandwidthMeter {
    bytes: u64,
    nanos: u64,
}

impl BandwidthMeter {
    /// Packets below this size say more about latency than bandwidth.
    const MIN_PACKET: usize = 64 << 10;
    /// Past this many bytes, older packets count half.
    const WINDOW: u64 = 256 << 20;

    pub(super) fn record(&mut self, len: usize, elapsed: Duration) {
        if len < Self::MIN_PACKET || elapsed.is_zero() {
            return;
        }
        self.bytes = self.bytes.saturating_add(len as u64);
        self.nanos = self
            .nanos
            .saturating_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
        if self.bytes > Self::WINDOW {
            self.bytes /= 2;
            self.nanos /= 2;
        }
    }

    /// Bytes per second measured, if any.
    pub(super) fn bandwidth(&self) -> Option<u64> {
        (self.nanos > 0).then(|| {
            let bw = u128::from(self.bytes) * 1_000_000_000 / u128::from(self.nanos);
            u64::try_from(bw).unwrap_or(u64::MAX).max(1)
        })
    }
}
