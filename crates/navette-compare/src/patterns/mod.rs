//! One module per communication pattern. A pattern runs, for one
//! transport, navette and every peer that has that pattern, and returns
//! the rows (plus what it skipped and why). Later patterns (multiseg,
//! indexed, multirail, rpc, migrate, rpc_rate) are one file each here and
//! one arm in [`run`].

mod pingpong;

use crate::args::{Programs, Transport};
use crate::record::{Record, Skip, SkipKind};
use crate::runner::Runner;
use crate::tools::Figure;

/// A pattern that can be compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pattern {
    /// Ping-pong of one message: one-way latency and size / latency.
    Pingpong,
}

impl Pattern {
    /// The name in the benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pingpong => "pingpong",
        }
    }
}

/// What a pattern needs.
#[derive(Debug)]
pub struct Context<'a> {
    /// Starts programs, keeps their outputs.
    pub runner: &'a mut Runner,
    /// The programs built by bench/compare.
    pub programs: Programs,
    /// What is compared.
    pub transport: Transport,
    /// Message sizes.
    pub sizes: &'a [usize],
    /// Timed iterations per size, if fixed.
    pub iterations: Option<u32>,
    /// Which of several rounds this is (it names the raw outputs), if
    /// there are several.
    pub round: Option<u32>,
}

impl Context<'_> {
    /// The stem of a tool's raw output files: `PATTERN-TRANSPORT-TOOL`,
    /// with `-rN` in round N of several.
    pub(crate) fn raw_name(&self, pattern: Pattern, tool: &str) -> String {
        let stem = format!("{}-{}-{tool}", pattern.name(), self.transport.name());
        match self.round {
            Some(round) => format!("{stem}-r{round}"),
            None => stem,
        }
    }
}

/// What a pattern measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The rows.
    pub records: Vec<Record>,
    /// What could not be measured, and why.
    pub skipped: Vec<Skip>,
    /// Facts worth printing under the table (such as UCX's transports).
    pub notes: Vec<String>,
}

impl Outcome {
    /// Merges the outcome of another round: per implementation and size,
    /// the lowest latency and the highest bandwidth of the two; a skip
    /// stays only for sizes no round measured; notes once each.
    pub fn keep_best(&mut self, other: Self) {
        for record in other.records {
            let same = self.records.iter_mut().find(|r| {
                (&r.pattern, &r.transport, &r.implementation, r.size)
                    == (
                        &record.pattern,
                        &record.transport,
                        &record.implementation,
                        record.size,
                    )
            });
            match same {
                Some(kept) => {
                    kept.latency_us = best(kept.latency_us, record.latency_us, f64::min);
                    kept.bandwidth_mbps =
                        best(kept.bandwidth_mbps, record.bandwidth_mbps, f64::max);
                }
                None => self.records.push(record),
            }
        }
        for skip in other.skipped {
            if !self.skipped.contains(&skip) {
                self.skipped.push(skip);
            }
        }
        let records = &self.records;
        for skip in &mut self.skipped {
            skip.sizes.retain(|&size| {
                !records.iter().any(|r| {
                    (&r.pattern, &r.transport, &r.implementation, r.size)
                        == (&skip.pattern, &skip.transport, &skip.implementation, size)
                })
            });
        }
        // A skip of every size of a size-less implementation (the cache
        // line) has no sizes to begin with: keep those unless measured.
        self.skipped.retain(|s| {
            !s.sizes.is_empty()
                || !records.iter().any(|r| {
                    (&r.pattern, &r.transport, &r.implementation)
                        == (&s.pattern, &s.transport, &s.implementation)
                })
        });
        for note in other.notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
    }

    /// Adds `figures` of `imp` as rows.
    pub(crate) fn push(
        &mut self,
        ctx: &Context<'_>,
        pattern: Pattern,
        imp: &str,
        figures: &[Figure],
    ) {
        self.records.extend(figures.iter().map(|f| Record {
            pattern: pattern.name().to_owned(),
            transport: ctx.transport.name().to_owned(),
            implementation: imp.to_owned(),
            size: f.size,
            latency_us: f.latency_us,
            bandwidth_mbps: f.bandwidth_mbps,
        }));
    }

    /// Adds `figures` of `imp` as rows, and a skip for each requested size
    /// they lack, for `failure` if the tool failed.
    pub(crate) fn settle(
        &mut self,
        ctx: &Context<'_>,
        pattern: Pattern,
        imp: &str,
        figures: &[Figure],
        failure: Option<String>,
    ) {
        self.push(ctx, pattern, imp, figures);
        let missing: Vec<usize> = ctx
            .sizes
            .iter()
            .copied()
            .filter(|s| !figures.iter().any(|f| f.size == *s))
            .collect();
        if !missing.is_empty() {
            let reason =
                failure.unwrap_or_else(|| "its output has no figure for these sizes".into());
            self.skip(ctx, pattern, imp, SkipKind::Failed, missing, reason);
        }
    }

    /// Records that `imp` was not measured at `sizes`.
    pub(crate) fn skip(
        &mut self,
        ctx: &Context<'_>,
        pattern: Pattern,
        imp: &str,
        kind: SkipKind,
        sizes: Vec<usize>,
        reason: String,
    ) {
        eprintln!("compare: {imp} skipped: {reason}");
        self.skipped.push(Skip {
            pattern: pattern.name().to_owned(),
            transport: ctx.transport.name().to_owned(),
            implementation: imp.to_owned(),
            kind,
            sizes,
            reason,
        });
    }
}

/// The better of two optional figures by `pick`.
fn best(a: Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    }
}

/// Runs `pattern` over `ctx.transport`.
pub fn run(pattern: Pattern, ctx: &mut Context<'_>) -> Outcome {
    match pattern {
        Pattern::Pingpong => pingpong::run(ctx),
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use crate::record::{Record, Skip, SkipKind};

    fn record(imp: &str, size: usize, lat: Option<f64>, bw: Option<f64>) -> Record {
        Record {
            pattern: "pingpong".into(),
            transport: "shm".into(),
            implementation: imp.into(),
            size,
            latency_us: lat,
            bandwidth_mbps: bw,
        }
    }

    fn skip(imp: &str, sizes: Vec<usize>) -> Skip {
        Skip {
            pattern: "pingpong".into(),
            transport: "shm".into(),
            implementation: imp.into(),
            kind: SkipKind::Failed,
            sizes,
            reason: "it failed".into(),
        }
    }

    #[test]
    fn rounds_keep_the_best_figure_and_only_what_no_round_measured() {
        let mut kept = Outcome {
            records: vec![
                record("navette", 8, Some(0.3), Some(26.0)),
                record("openmpi", 8, Some(0.2), None),
            ],
            skipped: vec![skip("navette", vec![64]), skip("cacheline", Vec::new())],
            notes: vec!["a note".into()],
        };
        kept.keep_best(Outcome {
            records: vec![
                record("navette", 8, Some(0.2), Some(40.0)),
                record("navette", 64, Some(0.4), Some(160.0)),
                record("openmpi", 8, Some(0.5), Some(16.0)),
            ],
            skipped: vec![skip("openmpi", vec![64])],
            notes: vec!["a note".into(), "another".into()],
        });
        assert_eq!(
            kept.records,
            vec![
                record("navette", 8, Some(0.2), Some(40.0)),
                record("openmpi", 8, Some(0.2), Some(16.0)),
                record("navette", 64, Some(0.4), Some(160.0)),
            ]
        );
        // navette's 64 was measured in the second round; the cache line
        // never was; openmpi's 64 never was.
        assert_eq!(
            kept.skipped,
            vec![skip("cacheline", Vec::new()), skip("openmpi", vec![64])]
        );
        assert_eq!(kept.notes, vec!["a note".to_owned(), "another".to_owned()]);
    }
}
