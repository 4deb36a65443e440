//! The Navette engine: matching, ordering, rendezvous and the optimization
//! window, with no I/O.
//!
//! The [`Engine`] consumes events (packets received on a rail, sends
//! completed, time passing) and hands back work (the next [`PacketPlan`] for
//! an idle rail, completion [`Event`]s). It never touches a socket, a
//! thread or a clock; user memory is reached through the [`Memory`] trait
//! by handle, so a driver can gather packets straight from user buffers.
//! See [`Engine`] for the call order.
//!
//! # Protocol in brief
//!
//! - A *message* is a series of *pieces* sent on a gate (a channel and a
//!   peer). Pieces smaller than the rail's rendezvous threshold travel
//!   eagerly; others send a rendezvous request, the receiver answers with a
//!   clear-to-send naming its destination once it is known, and the data
//!   lands there directly.
//! - Eager pieces and rendezvous requests carry a per-gate sequence number;
//!   the receiver restores submission order with a reorder buffer, so order
//!   per (gate, tag) holds even when rails overtake each other.
//! - The first piece of a message is matched against posted receives by
//!   source and tag (with a mask); unmatched messages wait in an unexpected
//!   queue. Later pieces are paired in order with the receiver's unpacks,
//!   which must mirror the sender's packs in count, sizes and modes.
//! - Submitted chunks wait in the gate's [`Window`]; when a rail is idle its
//!   channel's [`Strategy`] builds the next packet.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod engine;
mod error;
mod ids;
pub mod memory;
mod plan;
mod reorder;
pub mod strategy;
mod window;

pub use config::{EngineConfig, RailCaps, StrategySettingError};
pub use engine::{
    Engine, Event, GateStats, HAND_OVER_MIN, MOST_LANDING, MOST_PIECES_AT_ONCE, NowGather, NowPart,
    NowPiece, OPEN_MOST_BODY, OPEN_MOST_CHUNKS, OPEN_MOST_PIECE, OpenToSend, OutMsg,
    OutsideReceive, PIECE_COST, PendingRequest, PendingState, PieceSpec, PostedBuffer, PostedList,
    PostedNow, PostedNowOutcome, RailReport, RdvRead, ReadableNow, RecvNow, RecvNowOutcome,
    RecvPiece, Report, StagedSend, WholeMessage, WholeNowOutcome,
};
pub use error::{PiecesSent, ProtocolError, RequestError, UsageError, Violation};
pub use ids::{ChannelId, MemHandle, MemRef, RailId, Rank, ReqId, Source, Status, TagMatch};
pub use memory::{Memory, VecMemory};
pub use navette_wire::{Limits, ReceiveMode, SendMode};
pub use plan::{MissingMemory, PacketBuilder, PacketPlan, Segment};
pub use strategy::{
    AggregateStrategy, DefaultStrategy, Fill, RailInfo, RailView, SplitStrategy, Strategy,
    StrategyKind, UnknownStrategy,
};
pub use window::{ChunkInfo, Pending, Priority, Window};
