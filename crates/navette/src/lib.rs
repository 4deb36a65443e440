//! Navette: a communication engine for distributed runtimes.
//!
//! A [`Node`] is this process's endpoint. It offers two interfaces over one
//! engine:
//!
//! - **Madeleine messages**: [`Node::begin_packing`] → [`Packing::pack`] … →
//!   [`Packing::end_packing`], mirrored by [`Node::begin_unpacking`] →
//!   [`Unpacking::unpack`] … → [`Unpacking::end_unpacking`]. Send modes
//!   (SAFER, LATER, CHEAPER) and receive modes (EXPRESS, CHEAPER) are
//!   lifetimes here: a buffer lent CHEAPER stays borrowed until the message
//!   ends, so misuse does not compile.
//! - **Tagged point-to-point**: [`Node::isend`], [`Node::irecv`],
//!   [`Request::test`], [`Request::wait`], [`wait_all`] ([`wait_all_into`]), [`wait_any`],
//!   [`Node::probe`], and blocking [`Node::send`] / [`Node::recv`].
//!
//! Nodes run over a driver; [`sim::SimCluster`] runs many in one process
//! over a deterministic simulated network.
//!
//! ```
//! use navette::{RecvFrom, ReceiveMode, SendMode, sim::SimCluster};
//!
//! let cluster = SimCluster::builder(2).build();
//! let (a, b) = (cluster.node(0), cluster.node(1));
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         let body = vec![7u8; 100_000]; // above the rendezvous threshold
//!         let len = (body.len() as u32).to_le_bytes();
//!         let mut msg = a.begin_packing(a.gate(1), 42).unwrap();
//!         msg.pack(&len, SendMode::Safer, ReceiveMode::Express).unwrap();
//!         msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper).unwrap();
//!         msg.end_packing().unwrap();
//!     });
//!     // The receiver reads the length, then allocates, then receives the
//!     // body straight into its new buffer.
//!     let mut msg = b.begin_unpacking(RecvFrom::any(), 42u64).unwrap();
//!     let mut len = [0u8; 4];
//!     msg.unpack_express(&mut len, SendMode::Safer).unwrap();
//!     let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
//!     msg.unpack_cheaper(&mut body, SendMode::Cheaper).unwrap();
//!     let status = msg.end_unpacking().unwrap();
//!     assert_eq!((status.peer, status.len), (0, 100_004));
//!     assert!(body.iter().all(|&x| x == 7));
//! });
//! ```
#![warn(missing_docs)]

mod clock;
mod counters;
pub mod diagnostics;
pub mod driver;
mod error;
mod lean;
mod lean_irecv;
mod lean_whole;
mod lock;
mod memtable;
pub mod message;
mod node;
mod p2p;
mod progress;
pub mod rpc;
mod runtime;
pub mod shm;
pub mod shm_tcp;
pub mod sim;
pub mod tcp;

/// Packet strategies: the trait to write one's own
/// ([`Node::set_custom_strategy`]), what it sees of windows, chunks and
/// rails, and the moves the shipped strategies are made of.
pub mod strategy {
    pub use navette_core::strategy::*;
    pub use navette_core::{ChunkInfo, PacketBuilder, Pending, Priority, Window};
}

pub use counters::STATS_VAR;
pub use error::{Error, PiecesSent, ProtocolError, RequestError, Result, UsageError};
pub use message::{Packing, Unpacking};
pub use navette_core::{
    ChannelId, EngineConfig, GateStats, Limits, OutsideReceive, PendingRequest, PendingState,
    RailCaps, RailReport, Rank, ReceiveMode, Report, SendMode, Source, Status, StrategyKind,
    TagMatch,
};
/// Memory for large messages: faster to move between local processes
/// (see [`HugeBuffer`]).
pub use navette_shm::{HugeBuffer, HugeBufferError};
pub use node::{Gate, Node, NodeConfig, NodeCore, RecvFrom};
pub use p2p::{Received, Request, wait_all, wait_all_into, wait_any};
pub use progress::ProgressThread;
pub use runtime::{
    DRIVER_VAR, DriverKind, LOG_VAR, RuntimeConfig, STRATEGY_VAR, init, init_shm, init_shm_tcp,
    init_tcp, init_with,
};
