//! The session layer: how a rank learns who it is and finds its peers.
//!
//! A [`Bootstrap`] serves three operations to the ranks of one job —
//! [`Bootstrap::put`] a value under a key, [`Bootstrap::fence`] until every
//! rank has reached the same point, [`Bootstrap::get`] a value another rank
//! put — plus the job's identity (rank, size, job id, job key). The
//! embedded launcher (`navette run`) serves them over a Unix socket; PMIx
//! (under `mpirun` or Slurm) will serve the same operations later.
//!
//! - [`from_env`]: the bootstrap this process was started with — a
//!   [`LauncherClient`] under `navette run`, a [`Singleton`] when started
//!   alone, an [`BootstrapError::Unsupported`] error under a launcher
//!   Navette cannot talk to yet (Slurm, Open MPI, MPICH, PMIx).
//! - [`launcher`]: starting the ranks of a job on this host, serving them
//!   a [`BootstrapServer`], forwarding their output, and failing fast.
//! - [`protocol`]: the bootstrap wire protocol over the Unix socket.
//! - [`local::LocalBootstrap`]: ranks that are threads of one process.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

/// Environment variables set by the embedded launcher for each rank.
pub mod env {
    /// The rank of the process.
    pub const RANK: &str = "NAVETTE_RANK";
    /// The number of ranks.
    pub const SIZE: &str = "NAVETTE_SIZE";
    /// The job id, in hexadecimal.
    pub const JOB_ID: &str = "NAVETTE_JOB_ID";
    /// The job key, 32 bytes in hexadecimal.
    pub const JOB_KEY: &str = "NAVETTE_JOB_KEY";
    /// Path of the launcher's bootstrap Unix socket.
    pub const BOOTSTRAP: &str = "NAVETTE_BOOTSTRAP";
}

/// Length of a job key in bytes.
pub const JOB_KEY_LEN: usize = 32;

/// Why a bootstrap operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// The process was started by a launcher Navette cannot talk to.
    #[error(
        "started by {launcher} without a bootstrap Navette can use ({hint}); \
         refusing to run as a lone singleton"
    )]
    Unsupported {
        /// What launched us.
        launcher: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// An environment variable is missing or malformed.
    #[error("environment variable {name}: {problem}")]
    BadEnvironment {
        /// The variable.
        name: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The bootstrap server could not be reached or answered badly.
    #[error("bootstrap server: {0}")]
    Server(String),
    /// No rank put a value under this key.
    #[error("rank {rank} put nothing under {key:?}")]
    Missing {
        /// The rank asked about.
        rank: u32,
        /// The key.
        key: String,
    },
    /// The server refused this process.
    #[error("the launcher refused this process: {0}")]
    Refused(String),
    /// A message could not be encoded or decoded (a key or value too long,
    /// a malformed reply).
    #[error("bootstrap protocol: {0}")]
    Protocol(#[from] protocol::ProtocolError),
    /// The operating system's random source failed.
    #[error("cannot draw a random job key: {0}")]
    Random(String),
    /// An I/O error talking to the server.
    #[error("bootstrap I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// The operations a launcher serves to the ranks of a job.
pub trait Bootstrap: Send + Sync + fmt::Debug {
    /// This process's rank, `0..size`.
    fn rank(&self) -> u32;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// The job's id, shared by its ranks.
    fn job_id(&self) -> u64;
    /// The job's secret key, shared by its ranks only.
    fn job_key(&self) -> &[u8; JOB_KEY_LEN];
    /// Publishes `value` under `key` for this rank.
    fn put(&self, key: &str, value: &[u8]) -> Result<(), BootstrapError>;
    /// Waits until every rank of the job has called `fence`; values put
    /// before a fence are visible to every rank after it.
    fn fence(&self) -> Result<(), BootstrapError>;
    /// The value `rank` put under `key` (before the last fence).
    fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>, BootstrapError>;
}

/// The bootstrap this process was started with, from its environment.
///
/// Under `navette run` (the `NAVETTE_*` variables of [`env`](mod@env) are set),
/// connects to the launcher's bootstrap server. Under a launcher Navette
/// cannot talk to yet (Slurm's `srun`, Open MPI's `mpirun`, an MPICH/Hydra
/// PMI or a PMIx server starting several processes), fails with
/// [`BootstrapError::Unsupported`] rather than running each process as a
/// lone singleton. Started alone, a [`Singleton`]: rank 0 of 1. See
/// [`detect::from_vars`] for the exact rules.
pub fn from_env() -> Result<Box<dyn Bootstrap>, BootstrapError> {
    let var = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
    match detect::from_vars(var)? {
        detect::Detected::Launcher(env) => Ok(Box::new(LauncherClient::connect(&env)?)),
        detect::Detected::Singleton => Ok(Box::new(Singleton::new()?)),
    }
}

mod client;
pub mod detect;
pub mod launcher;
pub mod local;
pub mod protocol;
mod secret;
pub mod server;
mod singleton;

pub use client::{HELLO_TIMEOUT, LauncherClient};
pub use server::{BootstrapServer, REGISTRATION_WINDOW};
pub use singleton::Singleton;
