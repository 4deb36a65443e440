//! The patterns compared with the two MPIs, Open MPI and MPICH:
//!
//! - multiseg: each ping and each pong is a series of segments (8, then 16,
//!   by default) of 4, 64 and 1024 bytes, each its own non-blocking send on
//!   its own channel (navette) or duplicated communicator (MPI); the figure
//!   is the one-way time of a whole series;
//! - indexed: one message made of a 64-byte block and a large block
//!   (256 KiB by default) in separate memory: pack/unpack in navette, an
//!   hindexed datatype in MPI; the size is both blocks.
//!
//! In each round, navette (`navette bench PATTERN`), then Open MPI, then
//! MPICH (`bench/mpi/PATTERN.c` built with each), over the same transport.

use std::process::Command;

use super::{Context, Group, Outcome, Pattern};
use crate::record::{Record, SkipKind, implementation as imp};
use crate::runner::Output;
use crate::tools::mpi::{self, Mpi};
use crate::tools::{Figure, ParseError, navette};

/// multiseg over `ctx.transport`.
pub(super) fn run_multiseg(ctx: &mut Context<'_>) -> Outcome {
    run(ctx, Pattern::Multiseg)
}

/// indexed over `ctx.transport`.
pub(super) fn run_indexed(ctx: &mut Context<'_>) -> Outcome {
    run(ctx, Pattern::Indexed)
}

fn run(ctx: &mut Context<'_>, pattern: Pattern) -> Outcome {
    let mut outcome = Outcome::default();
    let groups = groups(ctx, pattern);
    measure_navette(ctx, pattern, &groups, &mut outcome);
    for mpi in Mpi::ALL {
        measure_mpi(ctx, pattern, mpi, &groups, &mut outcome);
    }
    outcome
}

/// The rows every implementation should give: per segment count for
/// multiseg; for indexed, the sizes of whole messages (the large blocks
/// asked for, and the 64-byte block).
pub fn groups(ctx: &Context<'_>, pattern: Pattern) -> Vec<Group> {
    match pattern {
        Pattern::Multiseg => ctx
            .segments
            .iter()
            .map(|&segments| Group {
                segments: Some(segments),
                sizes: ctx.sizes.to_vec(),
            })
            .collect(),
        Pattern::Indexed => vec![Group {
            segments: None,
            sizes: ctx
                .sizes
                .iter()
                .map(|&large| large.saturating_add(navette_cli::bench::indexed::HEAD))
                .collect(),
        }],
        Pattern::Pingpong | Pattern::Multirail => vec![Group {
            segments: None,
            sizes: ctx.sizes.to_vec(),
        }],
    }
}

/// One implementation's turn at a pattern: the rows it owes.
#[derive(Clone, Copy)]
struct Turn<'a> {
    pattern: Pattern,
    name: &'a str,
    groups: &'a [Group],
}

impl Turn<'_> {
    /// Skips the implementation at every row of the turn.
    fn skip(&self, ctx: &Context<'_>, outcome: &mut Outcome, kind: SkipKind, reason: &str) {
        for group in self.groups {
            outcome.skip_series(
                ctx,
                self.pattern,
                self.name,
                group.segments,
                kind,
                group.sizes.clone(),
                reason.to_owned(),
            );
        }
    }

    /// Runs the implementation's command; on a start failure, skips it at
    /// every row.
    fn run(
        &self,
        ctx: &mut Context<'_>,
        outcome: &mut Outcome,
        command: &mut Command,
    ) -> Option<Output> {
        let raw = ctx.raw_name(self.pattern, self.name);
        match ctx.runner.run(&raw, command) {
            Ok(output) => Some(output),
            Err(e) => {
                self.skip(
                    ctx,
                    outcome,
                    SkipKind::Failed,
                    &format!("could not run: {e}"),
                );
                None
            }
        }
    }
}

fn measure_navette(
    ctx: &mut Context<'_>,
    pattern: Pattern,
    groups: &[Group],
    outcome: &mut Outcome,
) {
    let name = imp::NAVETTE;
    let turn = Turn {
        pattern,
        name,
        groups,
    };
    if let Some(reason) = ctx.programs.navette_unbuilt.clone() {
        turn.skip(ctx, outcome, SkipKind::Failed, &reason);
        return;
    }
    let json = ctx
        .runner
        .raw_dir()
        .join(format!("{}.json", ctx.raw_name(pattern, name)));
    let _ = std::fs::remove_file(&json);
    let request = navette::BenchRequest {
        pattern: pattern.name(),
        driver: ctx.transport.name(),
        sizes: ctx.sizes,
        segments: (pattern == Pattern::Multiseg).then_some(ctx.segments),
        iterations: ctx.iterations,
        raw_tcp: false,
        json: &json,
    };
    let mut command = navette::command(&ctx.programs.navette, &request);
    let Some(output) = turn.run(ctx, outcome, &mut command) else {
        return;
    };
    let (records, failure) = match navette::read_run(&output, &json) {
        Ok(read) => read,
        Err((kind, reason)) => {
            turn.skip(ctx, outcome, kind, &reason);
            return;
        }
    };
    let transport = ctx.transport.name();
    let mine = |r: &&Record| r.implementation == name && r.pattern == pattern.name();
    if let Some(other) = records
        .iter()
        .filter(mine)
        .find(|r| r.transport != transport)
    {
        let reason = format!(
            "navette ran over {}, not {transport}: its rows are not used",
            other.transport
        );
        turn.skip(ctx, outcome, SkipKind::Failed, &reason);
        return;
    }
    for group in groups {
        let rows: Vec<Record> = records
            .iter()
            .filter(mine)
            .filter(|r| r.segments == group.segments && group.sizes.contains(&r.size))
            .cloned()
            .collect();
        let measured: Vec<usize> = rows.iter().map(|r| r.size).collect();
        outcome.records.extend(rows);
        outcome.skip_missing(ctx, pattern, name, group, &measured, failure.clone());
    }
}

fn measure_mpi(
    ctx: &mut Context<'_>,
    pattern: Pattern,
    mpi: Mpi,
    groups: &[Group],
    outcome: &mut Outcome,
) {
    let name = mpi.name();
    let turn = Turn {
        pattern,
        name,
        groups,
    };
    let program = ctx.programs.mpi_program(pattern.name(), name);
    if !program.is_file() {
        let reason = format!(
            "{} was not built (bench/compare builds it with mpicc.{name})",
            program.display()
        );
        turn.skip(ctx, outcome, SkipKind::Failed, &reason);
        return;
    }
    let mut command = mpi.launch(&program, ctx.transport);
    command.args(program_args(ctx, pattern));
    let Some(output) = turn.run(ctx, outcome, &mut command) else {
        return;
    };
    let failure = (!output.success()).then(|| output.failure());
    if let Some(note) = mpi.transport_note(ctx.transport, &output) {
        outcome.note(format!("{name}: {note}"));
    }
    let series = parse(pattern, &output.stdout);
    let series = match series {
        Ok(series) => series,
        Err(e) => {
            let reason = failure.unwrap_or_else(|| e.to_string());
            turn.skip(ctx, outcome, SkipKind::Failed, &reason);
            return;
        }
    };
    for group in groups {
        let figures: Vec<Figure> = series
            .iter()
            .filter(|s| s.segments == group.segments && group.sizes.contains(&s.figure.size))
            .map(|s| s.figure)
            .collect();
        outcome.push_series(ctx, pattern, name, group.segments, &figures);
        let measured: Vec<usize> = figures.iter().map(|f| f.size).collect();
        outcome.skip_missing(ctx, pattern, name, group, &measured, failure.clone());
    }
}

/// The MPI program's arguments: `[-i N] [-s SEGMENTS] SIZE…`.
pub fn program_args(ctx: &Context<'_>, pattern: Pattern) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(n) = ctx.iterations {
        args.extend(["-i".to_owned(), n.to_string()]);
    }
    if pattern == Pattern::Multiseg {
        let segments: Vec<String> = ctx.segments.iter().map(usize::to_string).collect();
        args.extend(["-s".to_owned(), segments.join(",")]);
    }
    args.extend(ctx.sizes.iter().map(usize::to_string));
    args
}

/// A figure and the segments of its series (none for indexed).
struct Series {
    segments: Option<usize>,
    figure: Figure,
}

fn parse(pattern: Pattern, stdout: &str) -> Result<Vec<Series>, ParseError> {
    if pattern == Pattern::Multiseg {
        Ok(mpi::parse_multiseg(stdout)?
            .into_iter()
            .map(|s| Series {
                segments: Some(s.segments),
                figure: s.figure,
            })
            .collect())
    } else {
        Ok(mpi::parse_indexed(stdout)?
            .into_iter()
            .map(|figure| Series {
                segments: None,
                figure,
            })
            .collect())
    }
}
