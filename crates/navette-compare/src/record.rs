//! The benchmark output document of ARCHITECTURE.md ("Benchmark output"):
//! `navette_version`, `host`, `date` and one row per (pattern, transport,
//! impl, size). Rows that could not be measured are not invented: the
//! document lists them under `skipped`, with the reason.

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Implementation names used in the rows.
pub mod implementation {
    /// Navette itself.
    pub const NAVETTE: &str = "navette";
    /// Open MPI (ob1 with the vader or tcp BTL).
    pub const OPENMPI: &str = "openmpi";
    /// UCX through ucx_perftest.
    pub const UCX: &str = "ucx";
    /// Plain TCP sockets between navette's two ranks.
    pub const RAW_TCP: &str = "raw-tcp";
    /// A cache line passed between two pinned threads.
    pub const CACHELINE: &str = "cacheline";
    /// Single-thread memcpy.
    pub const MEMCPY: &str = "memcpy";
    /// The peers navette is ranked against in the ratios.
    pub const PEERS: [&str; 2] = [OPENMPI, UCX];
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// pingpong, …
    pub pattern: String,
    /// shm, tcp, …
    pub transport: String,
    /// navette or the peer (see [`implementation`]).
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Message size in bytes.
    pub size: usize,
    /// One-way time in microseconds, if this implementation gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// 10^6 bytes per second, if this implementation gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
}

/// Whether a skip is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkipKind {
    /// The tool says this does not exist (yet): not an error.
    Unavailable,
    /// The tool failed, timed out or printed nothing usable.
    Failed,
}

/// Rows that were not measured, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skip {
    /// The pattern.
    pub pattern: String,
    /// The transport.
    pub transport: String,
    /// The implementation whose rows are missing.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Expected or not.
    pub kind: SkipKind,
    /// Sizes left out (every requested size when the tool did not run).
    pub sizes: Vec<usize>,
    /// What the tool said.
    pub reason: String,
}

/// The whole document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Document {
    /// The version of Navette measured.
    pub navette_version: String,
    /// The machine.
    pub host: String,
    /// When the run started, RFC 3339 in UTC.
    pub date: String,
    /// One row per measurement.
    pub runs: Vec<Record>,
    /// What could not be measured (absent when nothing was skipped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skip>,
}

impl Document {
    /// An empty document for this host and this instant.
    pub fn new(navette_version: String) -> Self {
        Self {
            navette_version,
            host: host_name(),
            date: rfc3339_utc(SystemTime::now()),
            runs: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Pretty-printed JSON, with a final newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self)
            .expect("the document holds only strings and numbers");
        text.push('\n');
        text
    }

    /// Writes the document to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_json())
    }
}

/// Just what is needed of another tool's benchmark output document.
#[derive(Debug, Deserialize)]
pub struct Runs {
    /// Its rows.
    pub runs: Vec<Record>,
}

pub use navette_cli::json::{host_name, rfc3339_utc};
