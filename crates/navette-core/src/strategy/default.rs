//! `default`: send as submitted, one chunk per packet.

use super::{Fill, RailView, Strategy, tactics};
use crate::{PacketBuilder, Window};

/// Sends the oldest chunk alone; large rendezvous data goes in fragments of
/// the rail's `max_fragment`. It adds nothing to a packet another gate's
/// strategy started.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultStrategy;

impl Strategy for DefaultStrategy {
    fn name(&self) -> &'static str {
        "default"
    }

    fn try_and_commit(
        &mut self,
        window: &mut Window,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill {
        if packet.is_empty() {
            tactics::push_front(window, &rails.rail.caps, packet);
        }
        Fill::Done
    }
}
