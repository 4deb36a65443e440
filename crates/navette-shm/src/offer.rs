//! Shared single-copy reads: the rank that pulls a long piece of data from
//! a peer may *offer* that peer a part of it to write itself
//! (`process_vm_writev`), so that both processes copy at once, each half of
//! the data, on two cores.
//!
//! A single `process_vm_readv` is bound by the kernel's page pinning and
//! per-page mapping, not by memory bandwidth: on this project's 2-core
//! test machine one call moved 10-13 GB/s, and a read of one half at the
//! same time as a `process_vm_writev` of the other, on two cores, about
//! twice that (a C program timing 256 KiB to 4 MiB).
//!
//! One offer slot per rank area, owned by the area's rank (the puller):
//!
//! ```text
//! state (u64) = taker rank << 8 | phase
//!   IDLE ──post──▶ OFFERED ──take (taker, CAS)──▶ TAKEN ──finish──▶ DONE | FAILED
//!                     │                                               │
//!                     └──settle (owner, CAS): revoked ─▶ IDLE ◀───────┘ settle
//! ```
//!
//! The owner posts an offer, copies its own part, then *settles*: if the
//! taker has not taken the offer yet, the owner revokes it (one CAS) and
//! copies that part too; if the taker is writing, the owner waits for it to
//! finish. So when `settle` returns no one writes into the owner's memory
//! any more, and the owner never leaves an offer behind (its destination
//! memory may be freed right after). The taker is named in the state word,
//! so a rank never takes an offer made to another; it reads the offer's
//! fields after its CAS, when they cannot change, and checks them against
//! what it is actually sending before writing anything.

use crate::sync::atomic::{AtomicU64, Ordering};

const IDLE: u64 = 0;
const OFFERED: u64 = 1;
const TAKEN: u64 = 2;
const DONE: u64 = 3;
const FAILED: u64 = 4;
const PHASE_BITS: u32 = 8;

fn word(taker: u32, phase: u64) -> u64 {
    (u64::from(taker) << PHASE_BITS) | phase
}

/// A part of a pull that its owner offers the sender to write itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The rank that may take it (the sender of the pulled data).
    pub taker: u32,
    /// Address of the part in the taker's memory (the pull's source
    /// address plus the part's offset).
    pub source: u64,
    /// Address of the part's destination in the owner's memory.
    pub dest: u64,
    /// Bytes of the part.
    pub len: u64,
}

/// How an offer ended, for its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Settled {
    /// Nobody took it: the owner copies the part itself.
    Revoked,
    /// The taker wrote the part.
    Written,
    /// The taker took it but could not write it (all, or at all): the
    /// owner copies the part itself.
    Failed,
    /// The taker took it and the owner's `keep_waiting` gave up (the taker
    /// died): the slot is free again; the part may be partly written.
    Abandoned,
}

/// The words of one offer slot, wherever they live (the segment, or the
/// heap under loom).
pub(crate) struct OfferWords<'a> {
    pub(crate) state: &'a AtomicU64,
    pub(crate) source: &'a AtomicU64,
    pub(crate) dest: &'a AtomicU64,
    pub(crate) len: &'a AtomicU64,
}

impl OfferWords<'_> {
    /// Owner: posts `offer`. The slot must be idle: the owner settles each
    /// offer before posting the next.
    pub(crate) fn post(&self, offer: &Offer) {
        self.source.store(offer.source, Ordering::Relaxed);
        self.dest.store(offer.dest, Ordering::Relaxed);
        self.len.store(offer.len, Ordering::Relaxed);
        // Publishes the fields with the phase.
        self.state
            .store(word(offer.taker, OFFERED), Ordering::Release);
    }

    /// Whether an offer to `me` waits (a hint: another look may find it
    /// revoked).
    pub(crate) fn is_offered_to(&self, me: u32) -> bool {
        self.state.load(Ordering::Relaxed) == word(me, OFFERED)
    }

    /// Taker `me`: takes the offer made to it, if one waits.
    pub(crate) fn take(&self, me: u32) -> Option<Offer> {
        // A plain load first: the common answer is no, and a load does not
        // take the owner's line exclusive as a CAS would.
        if !self.is_offered_to(me) {
            return None;
        }
        self.state
            .compare_exchange(
                word(me, OFFERED),
                word(me, TAKEN),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()?;
        // TAKEN: the owner neither changes these fields nor revokes until we
        // finish; the Acquire above saw the post that wrote them.
        Some(Offer {
            taker: me,
            source: self.source.load(Ordering::Relaxed),
            dest: self.dest.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
        })
    }

    /// Taker `me`: says that it wrote the part it took (`ok`) or not. A
    /// CAS from TAKEN, not a store: if the owner gave up on it (it took the
    /// taker for dead), the slot may hold a later offer, which this must
    /// not settle.
    pub(crate) fn finish(&self, me: u32, ok: bool) {
        let phase = if ok { DONE } else { FAILED };
        // Releases the writes into the owner's memory (made by this thread
        // through the kernel before this CAS).
        let _ = self.state.compare_exchange(
            word(me, TAKEN),
            word(me, phase),
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// Owner: ends the offer made to `taker`: revokes it if it was not
    /// taken, else waits (calling `keep_waiting` between looks; it returns
    /// `false` to give up on a dead taker) until the taker finishes. The
    /// slot is idle again on return.
    pub(crate) fn settle(&self, taker: u32, mut keep_waiting: impl FnMut() -> bool) -> Settled {
        let revoked = self.state.compare_exchange(
            word(taker, OFFERED),
            IDLE,
            Ordering::Relaxed,
            Ordering::Acquire,
        );
        let Err(mut seen) = revoked else {
            return Settled::Revoked;
        };
        loop {
            let settled = match seen {
                s if s == word(taker, DONE) => Settled::Written,
                // The taker is writing.
                s if s == word(taker, TAKEN) => {
                    if keep_waiting() {
                        seen = self.state.load(Ordering::Acquire);
                        continue;
                    }
                    Settled::Abandoned
                }
                // FAILED, or a word no correct taker writes: the owner
                // copies the part itself either way.
                _ => Settled::Failed,
            };
            self.state.store(IDLE, Ordering::Relaxed);
            return settled;
        }
    }
}
