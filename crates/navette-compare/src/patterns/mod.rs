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

/// Runs `pattern` over `ctx.transport`.
pub fn run(pattern: Pattern, ctx: &mut Context<'_>) -> Outcome {
    match pattern {
        Pattern::Pingpong => pingpong::run(ctx),
    }
}
