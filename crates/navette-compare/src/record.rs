//! The benchmark output document of ARCHITECTURE.md ("Benchmark output"):
//! `navette_version`, `host`, `date` and one row per (pattern, transport,
//! impl, size), with the optional keys `segments` (multiseg: segments per
//! series, `size` being per segment), `threads` and `rate_per_s`
//! (rpc_rate: client threads, calls per second), `strategy` (navette's
//! rows of multiseg, indexed and multirail) and `rails` (multirail: the
//! links used, `1+2`, `1` or `2`). Rows that could not be measured are not
//! invented: the document lists them under `skipped`, with the reason; facts about
//! how the peers ran (which transport each MPI used) are under `notes`.

use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Implementation names used in the rows.
pub mod implementation {
    /// Navette itself.
    pub const NAVETTE: &str = "navette";
    /// Open MPI (ob1 with the vader or tcp BTL).
    pub const OPENMPI: &str = "openmpi";
    /// MPICH (Debian's: ch4 over UCX, whose transports are chosen).
    pub const MPICH: &str = "mpich";
    /// UCX through ucx_perftest.
    pub const UCX: &str = "ucx";
    /// Plain TCP sockets between navette's two ranks.
    pub const RAW_TCP: &str = "raw-tcp";
    /// A cache line passed between two pinned threads.
    pub const CACHELINE: &str = "cacheline";
    /// Single-thread memcpy.
    pub const MEMCPY: &str = "memcpy";
    /// A pattern's floor over shared memory, written plainly in C
    /// (`bench/floor/floor.c`: `series` for multiseg, `indexed` for
    /// indexed).
    pub const PATTERN_FLOOR: &str = "floor";
    /// The peers navette is ranked against in the ratios of pingpong.
    pub const PEERS: [&str; 2] = [OPENMPI, UCX];
    /// The peers of multiseg and indexed: the two MPIs.
    pub const MPIS: [&str; 2] = [OPENMPI, MPICH];
}

/// What identifies a row (see [`Record::key`]): pattern, transport, impl,
/// segments, threads, rails, size.
pub type RowKey<'a> = (
    &'a str,
    &'a str,
    &'a str,
    Option<usize>,
    Option<usize>,
    Option<&'a str>,
    usize,
);

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
    /// Message size in bytes (per segment for multiseg).
    pub size: usize,
    /// One-way time in microseconds, if this implementation gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// 10^6 bytes per second, if this implementation gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_mbps: Option<f64>,
    /// Segments per series (multiseg).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<usize>,
    /// Client threads making calls at once (rpc_rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Calls completed per second over all threads (rpc_rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The strategy that built navette's packets (multiseg, indexed,
    /// multirail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// The links used (multirail): `1+2`, `1`, `2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rails: Option<String>,
    /// Bytes copied by Navette per message (navette's rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<f64>,
}

impl Record {
    /// A row of `implementation` without the optional keys.
    pub fn new(
        pattern: &str,
        transport: &str,
        implementation: &str,
        size: usize,
        latency_us: Option<f64>,
        bandwidth_mbps: Option<f64>,
    ) -> Self {
        Self {
            pattern: pattern.to_owned(),
            transport: transport.to_owned(),
            implementation: implementation.to_owned(),
            size,
            latency_us,
            bandwidth_mbps,
            segments: None,
            threads: None,
            rate_per_s: None,
            strategy: None,
            rails: None,
            copies: None,
        }
    }

    /// What identifies the row, but for the strategy (see
    /// [`same_row`](Self::same_row)): pattern, transport, impl, segments,
    /// threads, rails, size.
    pub fn key(&self) -> RowKey<'_> {
        (
            &self.pattern,
            &self.transport,
            &self.implementation,
            self.segments,
            self.threads,
            self.rails.as_deref(),
            self.size,
        )
    }

    /// Whether `other` is a measurement of the same row (in another round):
    /// the same [`key`](Self::key) and no other strategy (a row without
    /// one matches any: multirail's rows on the same links differ only by
    /// their strategy).
    pub fn same_row(&self, other: &Self) -> bool {
        self.key() == other.key() && same_strategy(&self.strategy, &other.strategy)
    }
}

/// Whether two optional strategies do not contradict each other.
fn same_strategy(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
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
    /// The segments per series of the missing rows (multiseg).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<usize>,
    /// The client threads of the missing rows (rpc_rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// The links of the missing rows (multirail).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rails: Option<String>,
    /// The strategy of the missing rows (multirail).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Expected or not.
    pub kind: SkipKind,
    /// Sizes left out (every requested size when the tool did not run).
    pub sizes: Vec<usize>,
    /// What the tool said.
    pub reason: String,
}

impl Skip {
    /// Whether `record` is of the implementation and variant (segments,
    /// threads, rails, strategy) this skip is about, whatever its size.
    pub fn matches(&self, record: &Record) -> bool {
        (
            self.pattern.as_str(),
            self.transport.as_str(),
            self.implementation.as_str(),
            self.segments,
            self.threads,
            self.rails.as_deref(),
        ) == (
            record.pattern.as_str(),
            record.transport.as_str(),
            record.implementation.as_str(),
            record.segments,
            record.threads,
            record.rails.as_deref(),
        ) && same_strategy(&self.strategy, &record.strategy)
    }

    /// Whether `record` is one of the rows this skip says are missing.
    pub fn covers(&self, record: &Record) -> bool {
        self.matches(record) && self.sizes.contains(&record.size)
    }
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
    /// How the figures were obtained, where it matters to read them (such
    /// as the transport each MPI ran over); absent when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
}

/// A fact printed under a table, kept in the document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    /// The pattern.
    pub pattern: String,
    /// The transport.
    pub transport: String,
    /// What is noted.
    pub note: String,
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
            notes: Vec::new(),
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
