//! The benchmark output document of ARCHITECTURE.md ("Benchmark output"):
//! one JSON object with the Navette version, the host, the date and one row
//! per measured (pattern, transport, impl, size).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The whole document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchDocument {
    /// The version of Navette that produced the figures.
    pub navette_version: String,
    /// The machine the run happened on.
    pub host: String,
    /// When the document was made, RFC 3339 in UTC.
    pub date: String,
    /// One row per measurement.
    pub runs: Vec<BenchRun>,
}

/// One measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchRun {
    /// pingpong, stream, rpc, …
    pub pattern: String,
    /// sim, shm, tcp, ofi, …
    pub transport: String,
    /// navette, or the peer it is compared with (here `model`).
    #[serde(rename = "impl")]
    pub implementation: String,
    /// Message size in bytes.
    pub size: usize,
    /// One-way time in microseconds.
    pub latency_us: f64,
    /// Bytes per second / 10^6.
    pub bandwidth_mbps: f64,
}

impl BenchDocument {
    /// A document for this build, this host and this instant.
    pub fn new(runs: Vec<BenchRun>) -> Self {
        Self {
            navette_version: env!("CARGO_PKG_VERSION").to_owned(),
            host: host_name(),
            date: rfc3339_utc(SystemTime::now()),
            runs,
        }
    }

    /// The document as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the document holds only strings and numbers")
    }

    /// Writes the document to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut text = self.to_json();
        text.push('\n');
        std::fs::write(path, text)
    }
}

/// This machine's name (the kernel's, else `/etc/hostname`), or `unknown`.
pub fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `time` as RFC 3339 in UTC to the second, e.g. `2025-01-31T12:00:00Z`.
/// Times before 1970 are written as the epoch.
pub fn rfc3339_utc(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

/// The proleptic Gregorian date of a day count since 1970-01-01, after
/// Howard Hinnant's `civil_from_days` (eras of 400 years).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
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
        assert_eq!(at(4_102_444_800), "2100-01-01T00:00:00Z");
    }
}
