//! The printed comparison: one row per size, each implementation's latency
//! and bandwidth, and navette's ratios to the best peer (lowest latency,
//! highest bandwidth among Open MPI and UCX).

use std::fmt::Write;

use crate::record::{Record, Skip, SkipKind, implementation as imp};
use crate::sizes::ShortSize;

/// The rows of one pattern over one transport, arranged by size and
/// implementation.
#[derive(Clone, Debug)]
pub struct View<'a> {
    /// The pattern.
    pub pattern: &'a str,
    /// The transport.
    pub transport: &'a str,
    /// Sizes with at least one row, ascending.
    pub sizes: Vec<usize>,
    /// Implementations with at least one row, navette first, then peers.
    pub implementations: Vec<&'a str>,
    records: &'a [Record],
}

/// The order of columns and curves.
const ORDER: [&str; 6] = [
    imp::NAVETTE,
    imp::OPENMPI,
    imp::UCX,
    imp::RAW_TCP,
    imp::MEMCPY,
    imp::CACHELINE,
];

impl<'a> View<'a> {
    /// The rows of `records` that belong to `pattern` over `transport`.
    pub fn new(pattern: &'a str, transport: &'a str, records: &'a [Record]) -> Self {
        let mine = || {
            records
                .iter()
                .filter(move |r| r.pattern == pattern && r.transport == transport)
        };
        let mut sizes: Vec<usize> = mine()
            .filter(|r| r.implementation != imp::CACHELINE)
            .map(|r| r.size)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut implementations: Vec<&str> = mine().map(|r| r.implementation.as_str()).collect();
        implementations
            .sort_by_key(|i| (ORDER.iter().position(|o| o == i).unwrap_or(ORDER.len()), *i));
        implementations.dedup();
        Self {
            pattern,
            transport,
            sizes,
            implementations,
            records,
        }
    }

    /// The row of `implementation` at `size`.
    pub fn get(&self, implementation: &str, size: usize) -> Option<&'a Record> {
        self.records.iter().find(|r| {
            r.pattern == self.pattern
                && r.transport == self.transport
                && r.implementation == implementation
                && r.size == size
        })
    }

    /// Every row of `implementation`, by ascending size.
    pub fn series(&self, implementation: &str) -> Vec<&'a Record> {
        let mut rows: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| {
                r.pattern == self.pattern
                    && r.transport == self.transport
                    && r.implementation == implementation
            })
            .collect();
        rows.sort_by_key(|r| r.size);
        rows
    }

    /// navette's latency over the best peer's at `size`, and that peer.
    pub fn latency_ratio(&self, size: usize) -> Option<(f64, &'static str)> {
        let navette = self.get(imp::NAVETTE, size)?.latency_us?;
        let (best, peer) = self.best_peer(size, |r| r.latency_us, |a, b| a < b)?;
        Some((navette / best, peer))
    }

    /// navette's bandwidth over the best peer's at `size`, and that peer.
    pub fn bandwidth_ratio(&self, size: usize) -> Option<(f64, &'static str)> {
        let navette = self.get(imp::NAVETTE, size)?.bandwidth_mbps?;
        let (best, peer) = self.best_peer(size, |r| r.bandwidth_mbps, |a, b| a > b)?;
        Some((navette / best, peer))
    }

    fn best_peer(
        &self,
        size: usize,
        value: impl Fn(&Record) -> Option<f64>,
        better: impl Fn(f64, f64) -> bool,
    ) -> Option<(f64, &'static str)> {
        imp::PEERS
            .iter()
            .filter_map(|&peer| {
                let v = value(self.get(peer, size)?)?;
                (v > 0.0).then_some((v, peer))
            })
            .reduce(|a, b| if better(b.0, a.0) { b } else { a })
    }

    fn has(&self, implementation: &str, value: impl Fn(&Record) -> Option<f64>) -> bool {
        self.series(implementation)
            .iter()
            .any(|r| value(r).is_some())
    }
}

/// The whole printed block: title, table, floor, skips, notes.
pub fn render(view: &View<'_>, skipped: &[Skip], notes: &[String]) -> String {
    let mut text = format!(
        "\n{} over {}: one-way latency in µs, bandwidth in MB/s (10^6 B/s); \
         ratios are navette / best of {} (lowest latency, highest bandwidth)\n",
        view.pattern,
        view.transport,
        imp::PEERS.join(", ")
    );
    type Column<'a> = (&'a str, bool);
    // navette's columns are there even when it was skipped: its "-" and
    // the skip line below say so.
    let navette = (!view.implementations.contains(&imp::NAVETTE)).then_some(imp::NAVETTE);
    let columns: Vec<Column<'_>> = navette
        .iter()
        .chain(&view.implementations)
        .filter(|&&i| i != imp::CACHELINE)
        .flat_map(|&i| {
            let always = i == imp::NAVETTE;
            let lat = (always || view.has(i, |r| r.latency_us)).then_some((i, true));
            let bw = (always || view.has(i, |r| r.bandwidth_mbps)).then_some((i, false));
            lat.into_iter().chain(bw)
        })
        .collect();
    let _ = write!(text, "{:>6}", "size");
    for &(i, latency) in &columns {
        let head = if latency {
            format!("{i} µs")
        } else {
            format!("{i} MB/s")
        };
        let _ = write!(text, " {head:>13}");
    }
    let _ = writeln!(text, " {:>13} {:>13}", "lat ratio", "bw ratio");
    for &size in &view.sizes {
        let _ = write!(text, "{:>6}", ShortSize(size));
        for &(i, latency) in &columns {
            let value = view.get(i, size).and_then(|r| {
                if latency {
                    r.latency_us
                } else {
                    r.bandwidth_mbps
                }
            });
            let _ = write!(text, " {:>13}", number(value, latency));
        }
        for ratio in [view.latency_ratio(size), view.bandwidth_ratio(size)] {
            let cell = ratio.map_or_else(|| "-".to_owned(), |(r, peer)| format!("{r:.2} {peer}"));
            let _ = write!(text, " {cell:>13}");
        }
        text.push('\n');
    }
    if let Some(line) = view.series(imp::CACHELINE).first() {
        if let Some(latency) = line.latency_us {
            let _ = writeln!(
                text,
                "floor: a {}-byte cache line crosses between cores 0 and 1 in {latency:.3} µs one-way",
                line.size
            );
        }
    }
    for skip in skipped
        .iter()
        .filter(|s| s.pattern == view.pattern && s.transport == view.transport)
    {
        let kind = match skip.kind {
            SkipKind::Unavailable => "not available",
            SkipKind::Failed => "FAILED",
        };
        let _ = writeln!(
            text,
            "skipped {} ({kind}, {} sizes): {}",
            skip.implementation,
            skip.sizes.len(),
            skip.reason
        );
    }
    for note in notes {
        let _ = writeln!(text, "note: {note}");
    }
    text
}

/// A figure with a precision that suits its magnitude.
fn number(value: Option<f64>, latency: bool) -> String {
    match value {
        None => "-".to_owned(),
        Some(v) if latency && v < 10.0 => format!("{v:.3}"),
        Some(v) if v < 100.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.1}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(implementation: &str, size: usize, lat: Option<f64>, bw: Option<f64>) -> Record {
        Record {
            pattern: "pingpong".into(),
            transport: "shm".into(),
            implementation: implementation.into(),
            size,
            latency_us: lat,
            bandwidth_mbps: bw,
        }
    }

    #[test]
    fn ratios_to_the_best_peer() {
        let records = vec![
            row(imp::UCX, 8, Some(0.5), Some(900.0)),
            row(imp::NAVETTE, 8, Some(1.0), Some(8.0)),
            row(imp::OPENMPI, 8, Some(0.25), Some(32.0)),
            row(imp::MEMCPY, 8, None, Some(5000.0)),
            row(imp::CACHELINE, 64, Some(0.05), None),
        ];
        let view = View::new("pingpong", "shm", &records);
        assert_eq!(
            view.implementations,
            [
                imp::NAVETTE,
                imp::OPENMPI,
                imp::UCX,
                imp::MEMCPY,
                imp::CACHELINE
            ]
        );
        assert_eq!(view.sizes, [8], "the cache line is no message size");
        assert_eq!(view.latency_ratio(8), Some((4.0, imp::OPENMPI)));
        let (ratio, peer) = view.bandwidth_ratio(8).unwrap();
        assert_eq!(peer, imp::UCX, "memcpy is a floor, not a peer");
        assert!((ratio - 8.0 / 900.0).abs() < 1e-12);
        let text = render(&view, &[], &[]);
        assert!(text.contains("4.00 openmpi"), "{text}");
        assert!(text.contains("0.050 µs one-way"), "{text}");
    }

    #[test]
    fn a_skipped_navette_keeps_its_columns() {
        let records = vec![row(imp::OPENMPI, 4096, Some(2.0), Some(2048.0))];
        let skipped = [Skip {
            pattern: "pingpong".into(),
            transport: "shm".into(),
            implementation: imp::NAVETTE.into(),
            kind: SkipKind::Unavailable,
            sizes: vec![4096],
            reason: "the shared-memory driver is not available yet".into(),
        }];
        let view = View::new("pingpong", "shm", &records);
        assert_eq!(view.latency_ratio(4096), None);
        let text = render(&view, &skipped, &["a note".into()]);
        let header = text.lines().nth(2).unwrap();
        assert!(
            header.contains("navette µs") && header.contains("navette MB/s"),
            "{text}"
        );
        assert!(
            text.contains("skipped navette (not available, 1 sizes)"),
            "{text}"
        );
        assert!(text.contains("note: a note"), "{text}");
    }
}
