//! The one module that chooses the atomics: std's in every build, loom's
//! under `cfg(loom)`, so that the lock-free code in [`crate::ring`] and
//! [`crate::bell`] is model-checked exactly as it is compiled.
//!
//! Only code that is generic over where its words live uses this facade.
//! The shared-memory layout itself ([`crate::layout`]) always uses std's
//! atomics, because loom's cannot be placed in a mapping; it is compiled out
//! under `cfg(loom)`.

/// `std::sync::atomic`, or `loom::sync::atomic` under `cfg(loom)`.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
}
