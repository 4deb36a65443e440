//! The benchmark output document of ARCHITECTURE.md ("Benchmark output"):
//! `navette_version`, `host`, `date` and one row per (pattern, transport,
//! impl, size). Rows that could not be measured are not invented: the
//! document lists them under `skipped`, with the reason.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// This machine's name, or `unknown`.
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `time` as RFC 3339 in UTC to the second (`2025-01-31T12:00:00Z`).
pub fn rfc3339_utc(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

/// The Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, eras of 400 years).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn dates() {
        let at = |secs| rfc3339_utc(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_709_251_199), "2024-02-29T23:59:59Z");
    }
}
