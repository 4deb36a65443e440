//! Errors of the public API.

use std::time::Duration;

pub use navette_core::{PiecesSent, ProtocolError, RequestError, UsageError};

/// What can go wrong with a call on a [`crate::Node`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request failed (mismatched unpack, truncation, refusal, …).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The call was not valid in the engine's current state.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// `end_packing` on a message with no piece: nothing would be sent.
    #[error("a message needs at least one piece")]
    EmptyMessage,
    /// A wait made no progress within the node's `wait_timeout`.
    #[error("no progress for {waited:?} while waiting for {what}")]
    Stalled {
        /// How long the wait lasted.
        waited: Duration,
        /// What was awaited.
        what: String,
    },
    /// The bootstrap (launcher or PMIx) failed.
    #[error(transparent)]
    Bootstrap(#[from] navette_session::BootstrapError),
    /// A setting (from the environment or a configuration) is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// An RPC failed at the server or could not be made.
    #[error(transparent)]
    Rpc(#[from] crate::rpc::RpcError),
    /// The driver failed.
    #[error("driver {driver}: {message}")]
    Driver {
        /// The driver's name.
        driver: &'static str,
        /// What happened.
        message: String,
    },
}

/// Result of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
