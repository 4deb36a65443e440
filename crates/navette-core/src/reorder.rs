//! Restores per-gate submission order of sequenced chunks.
//!
//! Sequence numbers are u32 and wrap; a chunk is "ahead" when its distance
//! from the expected number, taken modulo 2^32, is below 2^31.

use std::collections::BTreeMap;

use crate::error::Violation;

/// Sequenced chunks of one gate that arrived ahead of a missing one.
#[derive(Debug)]
pub(crate) struct ReorderBuffer<T> {
    expected: u32,
    waiting: BTreeMap<u32, T>,
}

impl<T> Default for ReorderBuffer<T> {
    fn default() -> Self {
        Self {
            expected: 0,
            waiting: BTreeMap::new(),
        }
    }
}

/// What to do with an arriving chunk.
pub(crate) enum Arrival {
    /// It is the expected one: process it, then [`ReorderBuffer::pop_ready`].
    InOrder,
    /// It is ahead: keep it with [`ReorderBuffer::hold`].
    Ahead,
}

impl<T> ReorderBuffer<T> {
    /// Classifies `seq`.
    pub(crate) fn arrive(&mut self, seq: u32, max_waiting: usize) -> Result<Arrival, Violation> {
        let distance = seq.wrapping_sub(self.expected);
        if distance == 0 {
            self.expected = self.expected.wrapping_add(1);
            Ok(Arrival::InOrder)
        } else if distance >= 1 << 31 || self.waiting.contains_key(&seq) {
            Err(Violation::StaleSequence {
                seq,
                expected: self.expected,
            })
        } else if self.waiting.len() >= max_waiting {
            Err(Violation::ReorderOverflow(self.waiting.len()))
        } else {
            Ok(Arrival::Ahead)
        }
    }

    /// Whether `seq` is the expected number and nothing waits behind it:
    /// a chunk with it may be processed at once, after
    /// [`Self::take_next`].
    pub(crate) fn is_next(&self, seq: u32) -> bool {
        seq == self.expected && self.is_empty()
    }

    /// Whether no chunk is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Moves past the expected number (after [`Self::is_next`]).
    pub(crate) fn take_next(&mut self) {
        self.expected = self.expected.wrapping_add(1);
    }

    /// Gives back the number [`Self::take_next`] moved past.
    pub(crate) fn untake(&mut self) {
        self.expected = self.expected.wrapping_sub(1);
    }

    /// Keeps a chunk that arrived ahead (after [`Arrival::Ahead`]).
    pub(crate) fn hold(&mut self, seq: u32, chunk: T) {
        self.waiting.insert(seq, chunk);
    }

    /// Removes every chunk held (the peer is gone).
    pub(crate) fn take_all(&mut self) -> Vec<T> {
        std::mem::take(&mut self.waiting).into_values().collect()
    }

    /// The next chunk if it is now in order.
    pub(crate) fn pop_ready(&mut self) -> Option<T> {
        if self.waiting.is_empty() {
            return None;
        }
        let chunk = self.waiting.remove(&self.expected)?;
        self.expected = self.expected.wrapping_add(1);
        Some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_order_and_rejects_duplicates() {
        let mut buf = ReorderBuffer::default();
        assert!(matches!(buf.arrive(1, 8), Ok(Arrival::Ahead)));
        buf.hold(1, "b");
        assert!(matches!(buf.arrive(2, 8), Ok(Arrival::Ahead)));
        buf.hold(2, "c");
        assert!(matches!(buf.arrive(0, 8), Ok(Arrival::InOrder)));
        assert_eq!(buf.pop_ready(), Some("b"));
        assert_eq!(buf.pop_ready(), Some("c"));
        assert_eq!(buf.pop_ready(), None);
        assert!(buf.arrive(1, 8).is_err());
    }

    #[test]
    fn wraps_around() {
        let mut buf: ReorderBuffer<()> = ReorderBuffer {
            expected: u32::MAX,
            waiting: BTreeMap::new(),
        };
        assert!(matches!(buf.arrive(0, 8), Ok(Arrival::Ahead)));
        buf.hold(0, ());
        assert!(matches!(buf.arrive(u32::MAX, 8), Ok(Arrival::InOrder)));
        assert_eq!(buf.pop_ready(), Some(()));
    }

    #[test]
    fn bounded() {
        let mut buf = ReorderBuffer::default();
        buf.hold(5, ());
        assert!(matches!(
            buf.arrive(6, 1),
            Err(Violation::ReorderOverflow(1))
        ));
    }
}
