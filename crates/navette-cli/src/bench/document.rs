//! What `navette bench --json FILE` writes: the benchmark output document
//! of ARCHITECTURE.md ("Benchmark output"), whose rows carry the common
//! keys of [`BenchRun`] and, where they apply, the optional keys
//! `segments` (multiseg: segments per series, `size` being per segment) and
//! `strategy` (navette's rows of multiseg and indexed: the strategy that
//! built the packets), and `copies` on navette's rows (bytes copied by
//! Navette per message, both ends of it).

use std::path::Path;

use serde::Serialize;

use super::{BenchConfig, Pattern, SizeFigures, runs};
use crate::json::{BenchDocument, BenchRun};

/// Environment variable naming the engine's strategy, read for the
/// `strategy` key of the rows.
pub const STRATEGY_VAR: &str = "NAVETTE_STRATEGY";

/// The strategy when [`STRATEGY_VAR`] is not set: the engine's default.
pub const DEFAULT_STRATEGY: &str = "aggregate";

/// The strategy named in the rows: [`STRATEGY_VAR`] if set (and not
/// empty), else [`DEFAULT_STRATEGY`].
pub fn strategy_from_env() -> String {
    std::env::var(STRATEGY_VAR)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_STRATEGY.to_owned())
}

/// One row: the common keys, and the optional ones of its pattern.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchRow {
    /// pattern, transport, impl, size, latency_us, bandwidth_mbps.
    #[serde(flatten)]
    pub run: BenchRun,
    /// Segments per series (multiseg).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<usize>,
    /// Client threads (rpc_rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Calls per second over all threads (rpc_rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The strategy (navette's rows of multiseg and indexed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Bytes copied by Navette per message (navette's rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copies: Option<f64>,
}

/// The whole document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchOutput {
    /// The version of Navette that produced the figures.
    pub navette_version: String,
    /// The machine the run happened on.
    pub host: String,
    /// When the document was made, RFC 3339 in UTC.
    pub date: String,
    /// One row per measurement.
    pub runs: Vec<BenchRow>,
}

impl BenchOutput {
    /// A document of `runs` for this build, this host and this instant.
    pub fn new(runs: Vec<BenchRow>) -> Self {
        let BenchDocument {
            navette_version,
            host,
            date,
            ..
        } = BenchDocument::new(Vec::new());
        Self {
            navette_version,
            host,
            date,
            runs,
        }
    }

    /// Writes the document, pretty-printed, to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        text.push('\n');
        std::fs::write(path, text)
    }
}

/// The rows of `figures`: those of [`runs`], with `segments` on every row
/// of a multiseg case and `strategy` on navette's rows of multiseg and
/// indexed.
pub fn rows(config: &BenchConfig, figures: &[SizeFigures]) -> Vec<BenchRow> {
    let strategy = matches!(config.pattern, Pattern::Multiseg | Pattern::Indexed)
        .then(|| config.strategy.clone());
    let mut rows = Vec::new();
    for f in figures {
        for run in runs(config, std::slice::from_ref(f)) {
            let ours = run.implementation == "navette";
            let strategy = strategy.clone().filter(|_| ours);
            rows.push(BenchRow {
                run,
                segments: f.segments,
                threads: f.threads,
                rate_per_s: f.rate_per_s.filter(|_| ours),
                strategy,
                copies: f.copies.filter(|_| ours),
            });
        }
    }
    rows
}
