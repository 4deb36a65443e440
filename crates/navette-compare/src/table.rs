//! The printed comparison: one row per size, each implementation's latency
//! and bandwidth, and navette's ratios to the best peer (lowest latency,
//! highest bandwidth among Open MPI and UCX) for pingpong; for multiseg and
//! indexed ([`render_vs_mpi`]), each one-way time and how many times faster
//! navette is than each MPI and than the faster of the two (also for
//! rpc); for migrate ([`render_migrate`]) one row per tool; for rpc_rate
//! ([`render_rpc_rate`]) calls per second per thread count; for multirail
//! ([`render_multirail`]), each link alone, their sum and both links
//! together.

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
    /// Segments per series (multiseg: one view per segment count).
    pub segments: Option<usize>,
    /// Sizes with at least one row, ascending.
    pub sizes: Vec<usize>,
    /// Implementations with at least one row, navette first, then peers.
    pub implementations: Vec<&'a str>,
    records: &'a [Record],
}

/// The order of columns and curves.
const ORDER: [&str; 7] = [
    imp::NAVETTE,
    imp::OPENMPI,
    imp::MPICH,
    imp::UCX,
    imp::RAW_TCP,
    imp::MEMCPY,
    imp::CACHELINE,
];

impl<'a> View<'a> {
    /// The rows of `records` that belong to `pattern` over `transport`.
    pub fn new(pattern: &'a str, transport: &'a str, records: &'a [Record]) -> Self {
        Self::of_series(pattern, transport, None, records)
    }

    /// The rows of `records` that belong to `pattern` over `transport` in
    /// series of `segments` (`None`: rows without segments).
    pub fn of_series(
        pattern: &'a str,
        transport: &'a str,
        segments: Option<usize>,
        records: &'a [Record],
    ) -> Self {
        let mine = || {
            records.iter().filter(move |r| {
                r.pattern == pattern && r.transport == transport && r.segments == segments
            })
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
            segments,
            sizes,
            implementations,
            records,
        }
    }

    /// `pattern over transport`, with the segments per series if any.
    pub fn title(&self) -> String {
        match self.segments {
            Some(n) => format!(
                "{} ({n} segments per series) over {}",
                self.pattern, self.transport
            ),
            None => format!("{} over {}", self.pattern, self.transport),
        }
    }

    /// Whether `skip` is about this view's rows.
    pub fn concerns(&self, skip: &Skip) -> bool {
        skip.pattern == self.pattern
            && skip.transport == self.transport
            && skip.segments == self.segments
    }

    fn holds(&self, r: &Record) -> bool {
        r.pattern == self.pattern && r.transport == self.transport && r.segments == self.segments
    }

    /// The row of `implementation` at `size`.
    pub fn get(&self, implementation: &str, size: usize) -> Option<&'a Record> {
        self.records
            .iter()
            .find(|r| self.holds(r) && r.implementation == implementation && r.size == size)
    }

    /// Every row of `implementation`, by ascending size.
    pub fn series(&self, implementation: &str) -> Vec<&'a Record> {
        let mut rows: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| self.holds(r) && r.implementation == implementation)
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
        self.best_of(&imp::PEERS, size, value, better)
    }

    fn best_of(
        &self,
        peers: &[&'static str],
        size: usize,
        value: impl Fn(&Record) -> Option<f64>,
        better: impl Fn(f64, f64) -> bool,
    ) -> Option<(f64, &'static str)> {
        peers
            .iter()
            .filter_map(|&peer| {
                let v = value(self.get(peer, size)?)?;
                (v > 0.0).then_some((v, peer))
            })
            .reduce(|a, b| if better(b.0, a.0) { b } else { a })
    }

    /// How many times faster navette is than `peer` at `size`: the peer's
    /// one-way time over navette's.
    pub fn speedup(&self, size: usize, peer: &str) -> Option<f64> {
        let navette = self.get(imp::NAVETTE, size)?.latency_us?;
        let theirs = self.get(peer, size)?.latency_us?;
        (navette > 0.0 && theirs > 0.0).then(|| theirs / navette)
    }

    /// How many times faster navette is than the faster MPI at `size`, and
    /// that MPI.
    pub fn speedup_vs_faster_mpi(&self, size: usize) -> Option<(f64, &'static str)> {
        self.faster_mpi_over(imp::NAVETTE, size)
    }

    /// The faster MPI's latency over `implementation`'s at `size` (how many
    /// times faster `implementation` is), and that MPI.
    fn faster_mpi_over(&self, implementation: &str, size: usize) -> Option<(f64, &'static str)> {
        let ours = self.get(implementation, size)?.latency_us?;
        let (best, mpi) = self.best_of(&imp::MPIS, size, |r| r.latency_us, |a, b| a < b)?;
        (ours > 0.0).then(|| (best / ours, mpi))
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
        "\n{}: one-way latency in µs, bandwidth in MB/s (10^6 B/s); \
         ratios are navette / best of {} (lowest latency, highest bandwidth)\n",
        view.title(),
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
    if let Some(line) = view.series(imp::CACHELINE).first()
        && let Some(latency) = line.latency_us
    {
        let _ = writeln!(
            text,
            "floor: a {}-byte cache line crosses between cores 0 and 1 in {latency:.3} µs one-way",
            line.size
        );
    }
    skips_and_notes(&mut text, view, skipped, notes);
    text
}

/// For multiseg, indexed and rpc: each implementation's one-way time (of
/// a whole series for multiseg, half a call's round trip for rpc), then
/// how many times faster navette is than each MPI and than the faster of
/// the two (MPI µs / navette µs).
pub fn render_vs_mpi(view: &View<'_>, skipped: &[Skip], notes: &[String]) -> String {
    let what = if view.segments.is_some() {
        "one-way µs of a whole series, size per segment"
    } else if view.pattern == "rpc" {
        "one-way µs = half a call's round trip (8-byte header + body, each way), \
         size = the call's argument (body)"
    } else {
        "one-way µs, size = both blocks"
    };
    let mut text = format!(
        "\n{}: {what}; ×MPI = how many times faster navette is (MPI µs / navette µs; \
         below 1: slower)\n",
        view.title()
    );
    let _ = write!(text, "{:>8}", "size");
    let shown: Vec<&str> = std::iter::once(imp::NAVETTE)
        .chain(imp::MPIS)
        .chain(
            view.implementations
                .iter()
                .copied()
                .filter(|i| *i != imp::NAVETTE && !imp::MPIS.contains(i)),
        )
        .collect();
    for i in &shown {
        let _ = write!(text, " {:>12}", format!("{i} µs"));
    }
    for mpi in imp::MPIS {
        let _ = write!(text, " {:>10}", format!("×{mpi}"));
    }
    let _ = writeln!(text, " {:>16}", "×faster MPI");
    for &size in &view.sizes {
        let _ = write!(text, "{:>8}", ShortSize(size));
        for i in &shown {
            let value = view.get(i, size).and_then(|r| r.latency_us);
            let _ = write!(text, " {:>12}", number(value, true));
        }
        for mpi in imp::MPIS {
            let cell = view
                .speedup(size, mpi)
                .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"));
            let _ = write!(text, " {cell:>10}");
        }
        let cell = view
            .speedup_vs_faster_mpi(size)
            .map_or_else(|| "-".to_owned(), |(x, mpi)| format!("{x:.2} {mpi}"));
        let _ = writeln!(text, " {cell:>16}");
    }
    if let Some(strategy) = view
        .series(imp::NAVETTE)
        .iter()
        .find_map(|r| r.strategy.as_deref())
    {
        let _ = writeln!(text, "navette strategy: {strategy}");
    }
    let copies: Vec<String> = view
        .sizes
        .iter()
        .filter_map(|&size| {
            let copies = view.get(imp::NAVETTE, size)?.copies?;
            Some(format!("{} {copies:.0} B", ShortSize(size)))
        })
        .collect();
    if !copies.is_empty() {
        let _ = writeln!(
            text,
            "navette copies per message (bytes copied by Navette at both ends): {}",
            copies.join(", ")
        );
    }
    // Per size, the faster MPI's time over a floor's.
    let ceilings = |floor: &str| -> Vec<String> {
        view.sizes
            .iter()
            .filter_map(|&size| {
                let (x, _) = view.faster_mpi_over(floor, size)?;
                Some(format!("{} {x:.2}", ShortSize(size)))
            })
            .collect()
    };
    let floor = ceilings(imp::RAW_TCP);
    if !floor.is_empty() {
        let _ = writeln!(
            text,
            "raw-tcp: the same bytes (8-byte header + body) as one ping-pong message over a \
             plain socket, in turns with navette: the floor of any call over TCP; the faster \
             MPI's µs / raw-tcp's µs, the most any call could reach: {}",
            floor.join(", ")
        );
    }
    let pattern_floor = ceilings(imp::PATTERN_FLOOR);
    if !pattern_floor.is_empty() {
        let (what, most) = if view.pattern == "indexed" {
            (
                "the same message between two processes with its large block moved only by \
                 the kernel (bench/floor/floor.c indexed: the head and the block's address \
                 through shared memory, then one process_vm_readv, or the block's halves read \
                 and written at once by both sides, whichever is faster)",
                "any implementation that copies the large block zero times itself",
            )
        } else {
            (
                "the same series written plainly between two threads (bench/floor/floor.c \
                 series: the segments written into ring cells whose stamps go last, each \
                 matched to its posted receive and copied out)",
                "any implementation",
            )
        };
        let _ = writeln!(
            text,
            "floor: {what}, in turns with the others: about the least the pattern needs on \
             this host; the faster MPI's µs / floor's µs, about the most {most} could reach: {}",
            pattern_floor.join(", ")
        );
    }
    skips_and_notes(&mut text, view, skipped, notes);
    text
}

/// For migrate: one row per tool, its time per migration (one shipment of
/// the task state, half a round trip) and how many times faster navette is
/// (the tool's µs / navette's µs); then against the faster MPI.
pub fn render_migrate(view: &View<'_>, skipped: &[Skip], notes: &[String]) -> String {
    let size = view
        .sizes
        .first()
        .copied()
        .unwrap_or(crate::patterns::mpi::MIGRATE_STATE);
    let mut text = format!(
        "\n{}: µs per migration (one shipment of the {size}-byte task state: half a round \
         trip); × = the tool's µs / navette's µs (above 1: navette is faster)\n",
        view.title()
    );
    let _ = writeln!(text, "{:<10} {:>14} {:>8}", "tool", "µs/migration", "×");
    let shown: Vec<&str> = std::iter::once(imp::NAVETTE)
        .chain(imp::MPIS)
        .chain(
            view.implementations
                .iter()
                .copied()
                .filter(|i| *i != imp::NAVETTE && !imp::MPIS.contains(i)),
        )
        .collect();
    for i in shown {
        let value = view.get(i, size).and_then(|r| r.latency_us);
        let ratio = (i != imp::NAVETTE)
            .then(|| view.speedup(size, i))
            .flatten()
            .map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"));
        let _ = writeln!(text, "{i:<10} {:>14} {ratio:>8}", number(value, true));
    }
    if let Some((x, mpi)) = view.speedup_vs_faster_mpi(size) {
        let _ = writeln!(
            text,
            "against the faster MPI ({mpi}): {x:.2} (its µs / navette's µs)"
        );
    }
    skips_and_notes(&mut text, view, skipped, notes);
    text
}

/// For rpc_rate: per argument size and thread count, each tool's calls per
/// second over all threads, and navette's over the faster MPI's.
pub fn render_rpc_rate(
    transport: &str,
    records: &[Record],
    skipped: &[Skip],
    notes: &[String],
) -> String {
    let pattern = "rpc_rate";
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.pattern == pattern && r.transport == transport)
        .collect();
    let mut text = format!(
        "\n{pattern} over {transport}: calls per second over all client threads (each call \
         an 8-byte header + body each way, back to back; one server thread); \
         ratio = navette / faster MPI (above 1: navette is faster)\n"
    );
    let mut cases: Vec<(usize, usize)> = mine
        .iter()
        .filter_map(|r| Some((r.size, r.threads?)))
        .collect();
    cases.sort_unstable();
    cases.dedup();
    let get = |i: &str, (size, threads): (usize, usize)| {
        mine.iter()
            .find(|r| r.implementation == i && r.size == size && r.threads == Some(threads))
            .and_then(|r| r.rate_per_s)
            .filter(|v| *v > 0.0)
    };
    let tools: Vec<&str> = std::iter::once(imp::NAVETTE).chain(imp::MPIS).collect();
    if cases.is_empty() {
        text.push_str("not measured\n");
    } else {
        let _ = write!(text, "{:>7} {:>6}", "threads", "size");
        for i in &tools {
            let _ = write!(text, " {:>15}", format!("{i} calls/s"));
        }
        let _ = writeln!(text, " {:>18}", "navette/faster MPI");
    }
    for &case in &cases {
        let _ = write!(text, "{:>7} {:>6}", case.1, ShortSize(case.0));
        for i in &tools {
            let cell = get(i, case).map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
            let _ = write!(text, " {cell:>15}");
        }
        let faster = imp::MPIS
            .iter()
            .filter_map(|&mpi| Some((get(mpi, case)?, mpi)))
            .reduce(|a, b| if b.0 > a.0 { b } else { a });
        let cell = match (get(imp::NAVETTE, case), faster) {
            (Some(navette), Some((best, mpi))) => format!("{:.2} {mpi}", navette / best),
            _ => "-".to_owned(),
        };
        let _ = writeln!(text, " {cell:>18}");
    }
    // One line per tool, kind and reason, with the thread counts it
    // concerns.
    let mut lines: Vec<(&str, &str, &str, Vec<String>)> = Vec::new();
    for skip in skipped
        .iter()
        .filter(|s| s.pattern == pattern && s.transport == transport)
    {
        let kind = match skip.kind {
            SkipKind::Unavailable => "not available",
            SkipKind::Failed => "FAILED",
        };
        let threads = skip
            .threads
            .map_or_else(|| "all".to_owned(), |t| t.to_string());
        let what = (skip.implementation.as_str(), kind, skip.reason.as_str());
        match lines.iter_mut().find(|l| (l.0, l.1, l.2) == what) {
            Some(line) => line.3.push(threads),
            None => lines.push((what.0, what.1, what.2, vec![threads])),
        }
    }
    for (tool, kind, reason, threads) in lines {
        let _ = writeln!(
            text,
            "skipped {tool} ({kind}, threads {}): {reason}",
            threads.join(", ")
        );
    }
    for note in notes {
        let _ = writeln!(text, "note: {note}");
    }
    text
}

/// For multirail: per size, the bandwidth of each link alone, their sum,
/// both links with the split and the aggregate strategies, and each of
/// those over the sum; then what was skipped and the notes.
pub fn render_multirail(
    transport: &str,
    records: &[Record],
    skipped: &[Skip],
    notes: &[String],
) -> String {
    use crate::patterns::multirail::{RATES, summaries};
    let mut text = format!(
        "\nmultirail over {transport}: bandwidth in MB/s (10^6 B/s) = size / one-way time \
         of a ping-pong; link 1 at {}, link 2 at {} (tc tbf)\n",
        RATES[0], RATES[1]
    );
    let heads = [
        "link 1",
        "link 2",
        "1 + 2 sum",
        "1+2 split",
        "1+2 aggregate",
        "split/sum",
        "aggregate/sum",
    ];
    let all = summaries(records, transport);
    if all.is_empty() {
        text.push_str("not measured\n");
    } else {
        let _ = write!(text, "{:>6}", "size");
        for head in heads {
            let _ = write!(text, " {head:>13}");
        }
        text.push('\n');
    }
    for s in &all {
        let _ = write!(text, "{:>6}", ShortSize(s.size));
        for value in [s.link1, s.link2, s.sum(), s.split, s.aggregate] {
            let _ = write!(text, " {:>13}", number(value, false));
        }
        for ratio in [s.split_ratio(), s.aggregate_ratio()] {
            let _ = write!(text, " {:>13}", percent(ratio));
        }
        text.push('\n');
    }
    for s in &all {
        if let Some(ratio) = s.split_ratio() {
            let verdict = if ratio >= 0.9 {
                "reached"
            } else {
                "NOT reached"
            };
            let _ = writeln!(
                text,
                "{}: split gives {} of the sum of the links alone (goal: at least 90 %, {verdict})",
                ShortSize(s.size),
                percent(Some(ratio)).trim()
            );
        }
    }
    for skip in skipped
        .iter()
        .filter(|s| s.pattern == "multirail" && s.transport == transport)
    {
        let kind = match skip.kind {
            SkipKind::Unavailable => "not available",
            SkipKind::Failed => "FAILED",
        };
        let what: Vec<&str> = [
            Some(skip.implementation.as_str()),
            skip.rails.as_deref(),
            skip.strategy.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = writeln!(
            text,
            "skipped {} ({kind}, {} sizes): {}",
            what.join(" "),
            skip.sizes.len(),
            skip.reason
        );
    }
    for note in notes {
        let _ = writeln!(text, "note: {note}");
    }
    text
}

/// A ratio as a percentage with one decimal.
fn percent(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_owned(), |r| format!("{:.1} %", r * 100.0))
}

fn skips_and_notes(text: &mut String, view: &View<'_>, skipped: &[Skip], notes: &[String]) {
    for skip in skipped.iter().filter(|s| view.concerns(s)) {
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
        Record::new("pingpong", "shm", implementation, size, lat, bw)
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
            segments: None,
            threads: None,
            rails: None,
            strategy: None,
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

    #[test]
    fn multiseg_speedups_against_the_faster_mpi() {
        let series = |imp: &str, segments, size, lat| Record {
            segments: Some(segments),
            strategy: (imp == imp::NAVETTE).then(|| "aggregate".to_owned()),
            copies: (imp == imp::NAVETTE).then_some(40.0),
            ..Record::new("multiseg", "shm", imp, size, Some(lat), None)
        };
        let records = vec![
            series(imp::NAVETTE, 8, 4, 2.0),
            series(imp::OPENMPI, 8, 4, 5.0),
            series(imp::MPICH, 8, 4, 4.0),
            series(imp::NAVETTE, 16, 4, 10.0),
            series(imp::OPENMPI, 16, 4, 5.0),
        ];
        let view = View::of_series("multiseg", "shm", Some(8), &records);
        assert_eq!(view.sizes, [4]);
        assert_eq!(
            view.implementations,
            [imp::NAVETTE, imp::OPENMPI, imp::MPICH]
        );
        assert_eq!(view.speedup(4, imp::OPENMPI), Some(2.5));
        assert_eq!(view.speedup_vs_faster_mpi(4), Some((2.0, imp::MPICH)));
        let skip = Skip {
            pattern: "multiseg".into(),
            transport: "shm".into(),
            implementation: imp::MPICH.into(),
            segments: Some(16),
            threads: None,
            rails: None,
            strategy: None,
            kind: SkipKind::Failed,
            sizes: vec![4],
            reason: "it failed".into(),
        };
        assert!(!view.concerns(&skip), "another segment count");
        let text = render_vs_mpi(&view, std::slice::from_ref(&skip), &[]);
        assert!(
            text.contains("multiseg (8 segments per series) over shm"),
            "{text}"
        );
        assert!(text.contains("2.00 mpich"), "{text}");
        assert!(text.contains("navette strategy: aggregate"), "{text}");
        assert!(
            text.contains(
                "navette copies per message (bytes copied by Navette at both ends): 4 40 B"
            ),
            "{text}"
        );
        assert!(!text.contains("skipped"), "{text}");
        // 16 segments: navette slower than Open MPI, MPICH missing.
        let view = View::of_series("multiseg", "shm", Some(16), &records);
        assert_eq!(view.speedup_vs_faster_mpi(4), Some((0.5, imp::OPENMPI)));
        assert_eq!(view.speedup(4, imp::MPICH), None);
        let text = render_vs_mpi(&view, &[skip], &[]);
        assert!(text.contains("0.50 openmpi"), "{text}");
        assert!(
            text.contains("skipped mpich (FAILED, 1 sizes): it failed"),
            "{text}"
        );
    }

    #[test]
    fn multirail_table() {
        use crate::patterns::multirail::SETUPS;
        let row = |i: usize, bw| {
            SETUPS[i].row(&Record::new(
                "pingpong",
                "tcp",
                "navette",
                64 << 20,
                Some(1.0),
                Some(bw),
            ))
        };
        let records = vec![row(0, 342.0), row(1, 318.6), row(2, 240.0), row(3, 120.0)];
        let skip = Skip {
            pattern: "multirail".into(),
            transport: "tcp".into(),
            implementation: imp::NAVETTE.into(),
            segments: None,
            threads: None,
            rails: Some("2".into()),
            strategy: Some("aggregate".into()),
            kind: SkipKind::Failed,
            sizes: vec![1 << 20],
            reason: "it failed".into(),
        };
        let text = render_multirail("tcp", &records, &[skip], &["a note".into()]);
        let mut lines = text.lines().skip(1);
        let title = lines.next().unwrap();
        assert!(title.contains("link 1 at 2gbit, link 2 at 1gbit"), "{text}");
        assert!(lines.next().unwrap().contains("split/sum"), "{text}");
        let cells: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "64M", "240.0", "120.0", "360.0", "342.0", "318.6", "95.0", "%", "88.5", "%"
            ],
            "{text}"
        );
        assert!(
            text.contains("64M: split gives 95.0 % of the sum of the links alone (goal: at least 90 %, reached)"),
            "{text}"
        );
        assert!(
            text.contains("skipped navette 2 aggregate (FAILED, 1 sizes): it failed"),
            "{text}"
        );
        assert!(text.contains("note: a note"), "{text}");
        let empty = render_multirail("shm", &records, &[], &[]);
        assert!(empty.ends_with("(tc tbf)\nnot measured\n"), "{empty}");
    }

    #[test]
    fn rpc_table_starts_at_empty_arguments() {
        let call = |imp: &str, size, lat| Record::new("rpc", "shm", imp, size, Some(lat), None);
        let records = vec![
            call(imp::NAVETTE, 0, 0.5),
            call(imp::OPENMPI, 0, 0.25),
            call(imp::MPICH, 0, 1.0),
            call(imp::NAVETTE, 1 << 20, 100.0),
            call(imp::MPICH, 1 << 20, 150.0),
        ];
        let view = View::new("rpc", "shm", &records);
        assert_eq!(view.sizes, [0, 1 << 20]);
        assert_eq!(view.speedup_vs_faster_mpi(0), Some((0.5, imp::OPENMPI)));
        let text = render_vs_mpi(&view, &[], &[]);
        assert!(text.contains("half a call's round trip"), "{text}");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("0 "))
            .unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "0", "0.500", "0.250", "1.000", "0.50", "2.00", "0.50", "openmpi"
            ],
            "{text}"
        );
        assert!(text.contains("1.50 mpich"), "{text}");
        assert!(!text.contains("raw-tcp"), "{text}");
    }

    /// Renders the vs-MPI table of `view` and checks its row of `size`
    /// (the floor a column of its own after the MPIs; the ratios stay
    /// navette's) and its floor's note: the table.
    fn check_floor_row(view: &View<'_>, size: &str, cells: [&str; 9], note: &str) -> String {
        let text = render_vs_mpi(view, &[], &[]);
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{size} ")))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(row, cells, "{text}");
        assert!(text.contains(note), "{text}");
        text
    }

    /// Records of navette, the two MPIs and `floor`, in that order, of
    /// one-way times `lats`, each made by `record`.
    fn beside_floor(
        floor: &str,
        lats: [f64; 4],
        record: impl Fn(&str, f64) -> Record,
    ) -> [Record; 4] {
        let tools = [imp::NAVETTE, imp::OPENMPI, imp::MPICH, floor];
        std::array::from_fn(|i| record(tools[i], lats[i]))
    }

    #[test]
    fn multiseg_over_shm_shows_the_floor_of_a_series() {
        let records = beside_floor(imp::PATTERN_FLOOR, [0.8, 1.2, 1.5, 0.3], |tool, lat| {
            Record {
                segments: Some(8),
                ..Record::new("multiseg", "shm", tool, 4, Some(lat), None)
            }
        });
        let view = View::of_series("multiseg", "shm", Some(8), &records);
        let text = check_floor_row(
            &view,
            "4",
            [
                "4", "0.800", "1.200", "1.500", "0.300", "1.50", "1.88", "1.50", "openmpi",
            ],
            "about the most any implementation could reach: 4 4.00",
        );
        assert!(!text.contains("raw-tcp:"), "{text}");
    }

    #[test]
    fn indexed_over_shm_shows_the_floor_of_a_message_copied_zero_times() {
        let size = 64 + (256 << 10);
        let records = beside_floor(imp::PATTERN_FLOOR, [18.0, 16.0, 21.0, 14.0], |tool, lat| {
            Record::new("indexed", "shm", tool, size, Some(lat), None)
        });
        let view = View::new("indexed", "shm", &records);
        let text = check_floor_row(
            &view,
            "262208",
            [
                "262208", "18.00", "16.00", "21.00", "14.00", "0.89", "1.17", "0.89", "openmpi",
            ],
            "about the most any implementation that copies the large block zero times itself \
             could reach: 262208 1.14",
        );
        assert!(text.contains("bench/floor/floor.c indexed"), "{text}");
        assert!(
            !text.contains("written plainly between two threads"),
            "{text}"
        );
    }

    #[test]
    fn rpc_over_tcp_shows_the_raw_socket_floor() {
        let records = beside_floor(imp::RAW_TCP, [8.0, 13.0, 12.0, 6.0], |tool, lat| {
            Record::new("rpc", "tcp", tool, 16 << 10, Some(lat), None)
        });
        let view = View::new("rpc", "tcp", &records);
        check_floor_row(
            &view,
            "16K",
            [
                "16K", "8.000", "13.00", "12.00", "6.000", "1.62", "1.50", "1.50", "mpich",
            ],
            "the most any call could reach: 16K 2.00",
        );
    }

    #[test]
    fn migrate_table_has_a_row_per_tool() {
        let records = vec![
            Record::new("migrate", "tcp", imp::NAVETTE, 650, Some(4.0), None),
            Record::new("migrate", "tcp", imp::OPENMPI, 650, Some(6.0), None),
        ];
        let skip = Skip {
            pattern: "migrate".into(),
            transport: "tcp".into(),
            implementation: imp::MPICH.into(),
            segments: None,
            threads: None,
            rails: None,
            strategy: None,
            kind: SkipKind::Failed,
            sizes: vec![650],
            reason: "it failed".into(),
        };
        let view = View::new("migrate", "tcp", &records);
        let text = render_migrate(&view, &[skip], &["a note".into()]);
        assert!(text.contains("650-byte task state"), "{text}");
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(3)
            .take(3)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec!["navette", "4.000", "-"],
                vec!["openmpi", "6.000", "1.50"],
                vec!["mpich", "-", "-"]
            ],
            "{text}"
        );
        assert!(
            text.contains("against the faster MPI (openmpi): 1.50"),
            "{text}"
        );
        assert!(
            text.contains("skipped mpich (FAILED, 1 sizes): it failed"),
            "{text}"
        );
        assert!(text.contains("note: a note"), "{text}");
    }

    #[test]
    fn rpc_rate_table_per_thread_count() {
        let rate = |imp: &str, threads, rate| Record {
            threads: Some(threads),
            rate_per_s: Some(rate),
            ..Record::new("rpc_rate", "shm", imp, 0, None, None)
        };
        let records = vec![
            rate(imp::NAVETTE, 1, 2_000_000.0),
            rate(imp::OPENMPI, 1, 1_000_000.0),
            rate(imp::MPICH, 1, 800_000.0),
            rate(imp::OPENMPI, 16, 1_200_000.0),
            rate(imp::MPICH, 16, 1_500_000.0),
            rate(imp::NAVETTE, 4, 900_000.0),
        ];
        let skip = |threads| Skip {
            pattern: "rpc_rate".into(),
            transport: "shm".into(),
            implementation: imp::NAVETTE.into(),
            segments: None,
            threads: Some(threads),
            rails: None,
            strategy: None,
            kind: SkipKind::Unavailable,
            sizes: vec![0],
            reason: "navette bench has no pattern rpc_rate yet".into(),
        };
        let text = render_rpc_rate("shm", &records, &[skip(16), skip(64)], &[]);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(3)
            .take(3)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec!["1", "0", "2000000", "1000000", "800000", "2.00", "openmpi"],
                vec!["4", "0", "900000", "-", "-", "-"],
                vec!["16", "0", "-", "1200000", "1500000", "-"]
            ],
            "{text}"
        );
        assert!(
            text.contains(
                "skipped navette (not available, threads 16, 64): \
                 navette bench has no pattern rpc_rate yet"
            ),
            "{text}"
        );
        let empty = render_rpc_rate("tcp", &records, &[], &[]);
        assert!(empty.ends_with("is faster)\nnot measured\n"), "{empty}");
    }
}
