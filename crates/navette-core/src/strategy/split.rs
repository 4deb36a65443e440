//! `split`: several rails to one peer, used by speed.
//!
//! After NewMadeleine's multi-rail split: small packets take the rail that
//! delivers them soonest (its latency, what it is sending, its bandwidth),
//! aggregated as `aggregate` does; rendezvous data is cut over the rails
//! in proportion to their bandwidth, so that the parts of a large message
//! finish together. The receiver puts each part at its offset.

use super::{AggregateStrategy, Fill, RailInfo, RailView, Strategy, tactics};
use crate::{PacketBuilder, Pending, Window};

/// Smallest part of rendezvous data a rail is given (unless less remains):
/// below it, a part's packet costs more than it saves.
pub(super) const MIN_PART: usize = 64 << 10;

/// Sends small packets on the soonest rail and cuts rendezvous data over
/// all rails in proportion to their bandwidth.
#[derive(Debug, Default)]
pub struct SplitStrategy {
    aggregate: AggregateStrategy,
}

impl Strategy for SplitStrategy {
    fn name(&self) -> &'static str {
        "split"
    }

    fn try_and_commit(
        &mut self,
        window: &mut Window,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill {
        let Some(front) = window.front() else {
            return Fill::Open;
        };
        if let Pending::RdvData { .. } = front {
            return self.cut(window, 0, rails, packet);
        }
        if is_soonest(rails, front.wire_len()) {
            return self.aggregate.fill(window, rails, packet);
        }
        // Another rail delivers small packets sooner: this one only takes
        // bulk data, if some waits behind them.
        let bulk = window
            .iter()
            .position(|c| matches!(c, Pending::RdvData { .. }));
        match bulk {
            Some(index) => self.cut(window, index, rails, packet),
            None => Fill::Done,
        }
    }
}

impl SplitStrategy {
    /// Gives the rail its share of the rendezvous data at `index`.
    fn cut(
        &mut self,
        window: &mut Window,
        index: usize,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill {
        if !packet.is_empty() {
            // Bulk data travels alone (a driver may then move it without a
            // copy); another packet will take it.
            return Fill::Done;
        }
        let Some(Pending::RdvData { data, .. }) = window.get(index) else {
            return Fill::Done;
        };
        let part = share(rails, data.len).min(rails.rail.caps.max_fragment);
        tactics::cut_rdv_data(window, index, part, packet);
        Fill::Done
    }
}

/// Whether no other rail would deliver a packet of `len` bytes sooner than
/// the idle one.
fn is_soonest(rails: &RailView<'_>, len: usize) -> bool {
    let mine = rails.rail.delivery_time(len);
    rails
        .rails
        .iter()
        .all(|r| r.id == rails.rail.id || r.delivery_time(len) >= mine)
}

/// The idle rail's part of `remaining` bytes: in proportion to its
/// bandwidth among all the rails' (a rail that states none counts as the
/// mean of those that do, or all as equal), at least [`MIN_PART`].
fn share(rails: &RailView<'_>, remaining: usize) -> usize {
    let (sum, count) = rails
        .rails
        .iter()
        .filter(|r| r.bandwidth > 0)
        .fold((0u64, 0u64), |(sum, count), r| {
            (sum.saturating_add(r.bandwidth), count + 1)
        });
    let fallback = sum.checked_div(count).unwrap_or(1);
    let bandwidth = |r: &RailInfo| {
        if r.bandwidth > 0 {
            r.bandwidth
        } else {
            fallback
        }
    };
    let total: u128 = rails.rails.iter().map(|r| u128::from(bandwidth(r))).sum();
    let mine = u128::from(bandwidth(&rails.rail));
    let part = (remaining as u128 * mine / total.max(1)) as usize;
    part.max(MIN_PART).min(remaining)
}
