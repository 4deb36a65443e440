//! `default`: send as submitted, one chunk per packet.

use super::{Strategy, tactics};
use crate::{PacketBuilder, RailCaps, Window};

/// Sends the oldest chunk alone; large rendezvous data goes in fragments of
/// the rail's `max_fragment`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultStrategy;

impl Strategy for DefaultStrategy {
    fn name(&self) -> &'static str {
        "default"
    }

    fn try_and_commit(&mut self, window: &mut Window, caps: &RailCaps, packet: &mut PacketBuilder) {
        tactics::push_front(window, caps, packet);
    }
}
