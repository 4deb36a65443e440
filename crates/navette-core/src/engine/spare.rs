//! Queues of finished receive messages kept for the next ones: a message
//! received through the engine piece by piece (its pieces posted, or
//! arrived before its receive) then usually allocates no queue of its own,
//! as sent packets reuse their buffers ([`crate::plan::PlanPool`]). A
//! message taken whole keeps its queue of arrived pieces, which goes back
//! to the allocator with it.

use std::collections::VecDeque;

use super::piece::Piece;
use super::recv::{PostedPiece, RecvMsg};

/// Most queues of each kind kept.
const MOST_KEPT: usize = 16;

/// A queue that grew past this many entries (a message of many pieces)
/// goes back to the allocator rather than staying on hold.
const MOST_KEPT_CAPACITY: usize = 16;

/// The pieces that arrived for a message before their destinations.
pub(super) type Arrived = VecDeque<Piece<Vec<u8>>>;

/// Queues kept for reuse, empty.
#[derive(Debug, Default)]
pub(super) struct Spare {
    arrived: Vec<Arrived>,
    posted: Vec<VecDeque<PostedPiece>>,
}

impl Spare {
    /// An empty queue of arrived pieces.
    pub(super) fn arrived(&mut self) -> Arrived {
        self.arrived.pop().unwrap_or_default()
    }

    /// An empty queue of posted pieces.
    pub(super) fn posted(&mut self) -> VecDeque<PostedPiece> {
        self.posted.pop().unwrap_or_default()
    }

    /// Keeps `queue` (emptied) if it is worth keeping and there is room.
    pub(super) fn keep_arrived(&mut self, queue: Arrived) {
        keep(&mut self.arrived, queue);
    }

    /// Keeps the queues of a finished message.
    pub(super) fn keep(&mut self, msg: RecvMsg) {
        keep(&mut self.arrived, msg.arrived);
        keep(&mut self.posted, msg.posted);
    }
}

/// Keeps `queue` for reuse if it holds memory, not too much, and there is
/// room. Queues come here empty: a finished message's pieces were all
/// delivered or taken (a failed one's are taken as it fails).
fn keep<T>(kept: &mut Vec<VecDeque<T>>, mut queue: VecDeque<T>) {
    debug_assert!(queue.is_empty(), "a queue kept with pieces in it");
    let capacity = queue.capacity();
    if capacity > 0 && capacity <= MOST_KEPT_CAPACITY && kept.len() < MOST_KEPT {
        queue.clear();
        kept.push(queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_emptied_queues_within_bounds() {
        let mut kept: Vec<VecDeque<u32>> = Vec::new();
        // An unused queue holds no memory: nothing to keep.
        keep(&mut kept, VecDeque::new());
        assert!(kept.is_empty());
        // A used one, emptied, is kept with its memory.
        let mut used = VecDeque::with_capacity(4);
        used.push_back(7);
        used.pop_front();
        keep(&mut kept, used);
        assert_eq!(kept.len(), 1);
        assert!(kept[0].is_empty() && kept[0].capacity() >= 4);
        // One that grew large goes back to the allocator.
        keep(&mut kept, VecDeque::with_capacity(MOST_KEPT_CAPACITY + 1));
        assert_eq!(kept.len(), 1);
        // At most MOST_KEPT are kept.
        for _ in 0..2 * MOST_KEPT {
            keep(&mut kept, VecDeque::with_capacity(2));
        }
        assert_eq!(kept.len(), MOST_KEPT);
    }
}
