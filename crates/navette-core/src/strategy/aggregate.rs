//! `aggregate`: many small chunks share one packet.
//!
//! After NewMadeleine's aggregation strategy: while a rail is busy, the
//! chunks submitted meanwhile wait in their gates' windows; when it goes
//! idle, they leave together, one packet header and one transfer for all.
//! Rendezvous requests and clear-to-sends ride along with eager data
//! (piggybacked), and control chunks and EXPRESS pieces lead the packet,
//! so that the receiver can act on them first.

use super::{Fill, RailView, Strategy, tactics};
use crate::{PacketBuilder, Pending, Window};

/// Coalesces the small chunks of several messages, tags and channels into
/// packets of up to the rail's eager limit
/// ([`tactics::aggregate_limit`]); a chunk too large to share (rendezvous
/// data, a piece near the limit) goes alone, as with `default`.
#[derive(Debug, Default)]
pub struct AggregateStrategy {
    /// Chunks on their way from the window to the packet.
    scratch: Vec<Pending>,
}

impl AggregateStrategy {
    /// Fills `packet` from `window` for the idle rail of `rails`.
    pub(super) fn fill(
        &mut self,
        window: &mut Window,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill {
        let caps = &rails.rail.caps;
        let limit = tactics::aggregate_limit(caps);
        let fill = tactics::aggregate(window, limit, packet, &mut self.scratch);
        if packet.is_empty() {
            // Nothing shares: the front goes alone.
            tactics::push_front(window, caps, packet);
            return Fill::Done;
        }
        fill
    }
}

impl Strategy for AggregateStrategy {
    fn name(&self) -> &'static str {
        "aggregate"
    }

    fn try_and_commit(
        &mut self,
        window: &mut Window,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill {
        self.fill(window, rails, packet)
    }

    fn stages_small(&self) -> bool {
        true
    }
}
