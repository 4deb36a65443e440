//! Errors of the engine, by who caused them.

use navette_wire::{DecodeError, ReceiveMode, SendMode};

use crate::{RailId, Rank};

/// A peer broke the protocol: the rail it came on must be closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The packet did not decode.
    #[error("rail {rail:?} from rank {peer}: {source}")]
    Decode {
        /// The rail.
        rail: RailId,
        /// The peer on it.
        peer: Rank,
        /// Why.
        source: DecodeError,
    },
    /// A rule of the protocol was broken.
    #[error("rail {rail:?} from rank {peer}: {what}")]
    Violation {
        /// The rail.
        rail: RailId,
        /// The peer on it.
        peer: Rank,
        /// What was wrong.
        what: Violation,
    },
    /// The rail is not known to this engine.
    #[error("unknown rail {0:?}")]
    UnknownRail(RailId),
}

/// The protocol rule a peer broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A sequenced chunk repeated one already delivered.
    #[error("sequence number {seq} already delivered (expecting {expected})")]
    StaleSequence {
        /// The sequence found.
        seq: u32,
        /// The next one expected.
        expected: u32,
    },
    /// Too many chunks arrived ahead of a missing one.
    #[error("{0} chunks waiting for a missing sequence number")]
    ReorderOverflow(usize),
    /// The peer sent more unexpected data than this engine buffers.
    #[error("buffered data from the peer exceeds {0} bytes")]
    BufferOverflow(usize),
    /// A piece named a message that has not started, or started twice.
    #[error("piece of message {msg} is out of place (first flag {first})")]
    PieceOutOfPlace {
        /// The message number.
        msg: u32,
        /// Whether it was flagged first.
        first: bool,
    },
    /// A clear-to-send names a transfer this engine does not have.
    #[error("clear-to-send for unknown transfer {0}")]
    UnknownTransfer(u32),
    /// Data names a destination this engine does not have.
    #[error("rendezvous data for unknown destination {0}")]
    UnknownDestination(u32),
    /// A range lies outside its piece.
    #[error("range {offset}+{len} outside a piece of {total} bytes")]
    OutOfBounds {
        /// Offset in the piece.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Length of the piece.
        total: u64,
    },
}

/// How many pieces a sender packed, as far as its receiver can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PiecesSent {
    /// This many.
    Exactly(u32),
    /// More than this many (the receiver ended before the rest).
    MoreThan(u32),
}

impl std::fmt::Display for PiecesSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exactly(n) => write!(f, "{n}"),
            Self::MoreThan(n) => write!(f, "more than {n}"),
        }
    }
}

impl PiecesSent {
    fn less(self, hidden: u32) -> Self {
        match self {
            Self::Exactly(n) => Self::Exactly(n.saturating_sub(hidden)),
            Self::MoreThan(n) => Self::MoreThan(n.saturating_sub(hidden)),
        }
    }
}

/// Why one request failed; the others go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The sender packed a piece of another size than the receiver unpacks.
    #[error("piece {piece} is {sent} bytes but {posted} bytes were unpacked")]
    SizeMismatch {
        /// Index of the piece in its message.
        piece: u32,
        /// Bytes the sender packed.
        sent: u64,
        /// Bytes the receiver unpacked.
        posted: u64,
    },
    /// The message is larger than the receive buffer.
    #[error("message of {sent} bytes does not fit a {posted}-byte buffer")]
    Truncated {
        /// Bytes sent.
        sent: u64,
        /// Buffer size.
        posted: u64,
    },
    /// Send or receive modes differ between packing and unpacking.
    #[error(
        "piece {piece} packed {sent_send:?}/{sent_recv:?} but unpacked {posted_send:?}/{posted_recv:?}"
    )]
    ModeMismatch {
        /// Index of the piece in its message.
        piece: u32,
        /// Sender's send mode.
        sent_send: SendMode,
        /// Sender's receive mode.
        sent_recv: ReceiveMode,
        /// Receiver's send mode.
        posted_send: SendMode,
        /// Receiver's receive mode.
        posted_recv: ReceiveMode,
    },
    /// The number of pieces differs between packing and unpacking.
    #[error("the sender packed {sent} pieces, the receiver unpacked {unpacked}")]
    PieceCountMismatch {
        /// Pieces packed, as far as the receiver can tell.
        sent: PiecesSent,
        /// Pieces unpacked so far.
        unpacked: u32,
    },
    /// The receiver refused this piece (its unpack did not match).
    #[error("the receiver refused the piece (its unpack sequence did not match)")]
    RejectedByReceiver,
    /// The sender abandoned the message before ending it.
    #[error("the sender abandoned the message")]
    Aborted,
    /// An earlier error on the same message ended it.
    #[error("the message already failed: {0}")]
    MessageFailed(Box<Self>),
    /// The message's table of pieces is malformed
    /// ([`navette_wire::PieceTable`]): the peer's bug.
    #[error("malformed message: {0}")]
    Malformed(navette_wire::DecodeError),
    /// The request was cancelled by its owner.
    #[error("cancelled")]
    Cancelled,
    /// A rail to the peer closed (cut, refused, or the peer broke the
    /// protocol); rails carry no retransmission, so the peer is gone.
    #[error("rank {peer} is unreachable: its rail closed")]
    PeerUnreachable {
        /// The peer.
        peer: Rank,
    },
    /// A receive no message can match: its source is this engine's own
    /// rank ([`UsageError::RecvFromSelf`]) or a rank outside the job
    /// ([`UsageError::NotInJob`]). It fails as it is posted rather than
    /// wait for ever.
    #[error("refused: {0}")]
    Refused(UsageError),
}

impl RequestError {
    /// The same failure told to a reader who never sees the message's
    /// first `hidden` pieces (an RPC's call and reply begin with the
    /// library's header): piece numbers and counts are theirs.
    #[must_use]
    pub fn hiding_pieces(self, hidden: u32) -> Self {
        match self {
            Self::SizeMismatch {
                piece,
                sent,
                posted,
            } => Self::SizeMismatch {
                piece: piece.saturating_sub(hidden),
                sent,
                posted,
            },
            Self::ModeMismatch {
                piece,
                sent_send,
                sent_recv,
                posted_send,
                posted_recv,
            } => Self::ModeMismatch {
                piece: piece.saturating_sub(hidden),
                sent_send,
                sent_recv,
                posted_send,
                posted_recv,
            },
            Self::PieceCountMismatch { sent, unpacked } => Self::PieceCountMismatch {
                sent: sent.less(hidden),
                unpacked: unpacked.saturating_sub(hidden),
            },
            Self::MessageFailed(first) => {
                Self::MessageFailed(Box::new(first.hiding_pieces(hidden)))
            }
            other => other,
        }
    }
}

/// A misuse of the engine's API by its caller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// No open rail leads to the rank: a peer lost, or one no network
    /// reaches. (A rank outside the job, or this process's own, gets
    /// [`Self::NotInJob`] or [`Self::SendToSelf`] instead, where the
    /// engine knows the job's size: [`crate::EngineConfig::size`].)
    #[error("no open rail to rank {0}")]
    NoRail(Rank),
    /// A send to, or a receive from, a rank outside the job: ranks run
    /// from 0 to the job's size, excluded.
    #[error("rank {rank} is not in the job of {size} ranks")]
    NotInJob {
        /// The rank named.
        rank: Rank,
        /// The job's size.
        size: u32,
    },
    /// A send to this process's own rank: no rail leads from a rank to
    /// itself.
    #[error(
        "sending to oneself (rank {0}) is not supported: no rail leads from a rank to itself \
         (copy the data instead)"
    )]
    SendToSelf(Rank),
    /// A receive from this process's own rank: no rail leads from a rank
    /// to itself, so no message could ever match it.
    #[error(
        "receiving from oneself (rank {0}) is not supported: no rail leads from a rank to itself, \
         so no message could come"
    )]
    RecvFromSelf(Rank),
    /// The node was finalized (by another handle, or this is its second
    /// finalize): nothing more moves on it.
    #[error("this node was finalized: no operation that needs progress can run on it any more")]
    Finalized,
    /// The request is not a pending receive message.
    #[error("{0} is not an open receive message")]
    NotAMessage(crate::ReqId),
    /// The request is not a deferred piece waiting for its destination.
    #[error("{0} is not a deferred piece")]
    NotDeferred(crate::ReqId),
    /// The destination's length does not equal the piece's declared length.
    #[error("destination of {got} bytes for a piece declared as {declared}")]
    WrongLength {
        /// The declared length.
        declared: usize,
        /// The destination's length.
        got: usize,
    },
    /// A user's message or receive on a reserved channel
    /// ([`crate::ChannelId::RPC`]): taking or adding traffic there would
    /// break the RPC calls and replies it carries.
    #[error("channel {} is reserved for RPC calls and replies (use `navette::rpc`)", .0 .0)]
    ReservedChannel(crate::ChannelId),
}
