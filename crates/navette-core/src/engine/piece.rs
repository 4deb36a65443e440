//! Sequenced pieces as they arrive: borrowed from a packet, or owned once
//! the engine has to keep them.

use navette_wire::{Eager, PieceFlags, RdvRequest};

/// The fixed charge of a kept piece against `max_buffered_bytes`, on top
/// of its data.
pub const PIECE_COST: usize = 64;

/// A sequenced piece as it arrived; `D` is borrowed or owned data.
#[derive(Clone, Debug)]
pub(crate) struct SeqPiece<D> {
    pub(super) seq: u32,
    pub(super) msg: u32,
    pub(super) tag: u64,
    pub(super) piece: Piece<D>,
}

/// A piece's flags and body.
#[derive(Clone, Debug)]
pub(crate) struct Piece<D> {
    pub(super) flags: PieceFlags,
    pub(super) body: Body<D>,
}

#[derive(Clone, Debug)]
pub(crate) enum Body<D> {
    Eager(D),
    /// `readable`: see [`navette_wire::RdvRequest::readable`].
    Rdv {
        send_id: u32,
        len: u64,
        readable: bool,
    },
}

impl<'a> SeqPiece<&'a [u8]> {
    pub(crate) fn eager(e: &Eager<'a>) -> Self {
        let h = e.header;
        Self {
            seq: h.seq,
            msg: h.msg,
            tag: h.tag,
            piece: Piece {
                flags: h.flags,
                body: Body::Eager(e.data),
            },
        }
    }

    pub(crate) fn rdv(r: &RdvRequest) -> Self {
        Self {
            seq: r.seq,
            msg: r.msg,
            tag: r.tag,
            piece: Piece {
                flags: r.flags,
                body: Body::Rdv {
                    send_id: r.send_id,
                    len: r.total_len,
                    readable: r.readable,
                },
            },
        }
    }
}

impl<D: AsRef<[u8]>> Piece<D> {
    pub(super) fn borrow(&self) -> Piece<&[u8]> {
        Piece {
            flags: self.flags,
            body: match &self.body {
                Body::Eager(d) => Body::Eager(d.as_ref()),
                Body::Rdv {
                    send_id,
                    len,
                    readable,
                } => Body::Rdv {
                    send_id: *send_id,
                    len: *len,
                    readable: *readable,
                },
            },
        }
    }

    pub(super) fn to_owned(&self) -> Piece<Vec<u8>> {
        Piece {
            flags: self.flags,
            body: match &self.body {
                Body::Eager(d) => Body::Eager(d.as_ref().to_vec()),
                Body::Rdv {
                    send_id,
                    len,
                    readable,
                } => Body::Rdv {
                    send_id: *send_id,
                    len: *len,
                    readable: *readable,
                },
            },
        }
    }

    /// Bytes of data the piece carries (none for rendezvous).
    pub(super) fn data_len(&self) -> usize {
        match &self.body {
            Body::Eager(d) => d.as_ref().len(),
            Body::Rdv { .. } => 0,
        }
    }

    /// Whether the piece's data is still at the sender (rendezvous).
    pub(super) fn is_rdv(&self) -> bool {
        matches!(self.body, Body::Rdv { .. })
    }

    /// Length of the piece.
    pub(super) fn len(&self) -> u64 {
        match &self.body {
            Body::Eager(d) => d.as_ref().len() as u64,
            Body::Rdv { len, .. } => *len,
        }
    }

    /// What keeping this piece costs against `max_buffered_bytes`: its data
    /// and a fixed charge for the bookkeeping, so that a flood of empty
    /// pieces or rendezvous requests is bounded too.
    pub(super) fn held(&self) -> usize {
        PIECE_COST
            + match &self.body {
                Body::Eager(d) => d.as_ref().len(),
                Body::Rdv { .. } => 0,
            }
    }
}
