//! The patterns compared with the two MPIs, Open MPI and MPICH:
//!
//! - multiseg: each ping and each pong is a series of segments (8, then 16,
//!   by default) of 4, 64 and 1024 bytes, each its own non-blocking send on
//!   its own channel (navette) or duplicated communicator (MPI); the figure
//!   is the one-way time of a whole series; over shm, the floor of a series
//!   (`bench/floor/floor.c series`: what any implementation must do,
//!   written plainly) runs after the MPIs in each round;
//! - indexed: one message made of a 64-byte block and a large block
//!   (256 KiB by default) in separate memory: pack/unpack in navette, an
//!   hindexed datatype in MPI; the size is both blocks; over shm, the
//!   floor of an implementation that copies the large block zero times
//!   itself (`bench/floor/floor.c indexed`: the block moved by the
//!   kernel's single copy alone) runs after the MPIs in each round;
//! - rpc: a call with an S-byte argument (0, 64, 1K, 16K, 256K, 1M by
//!   default), two messages each way: an 8-byte header holding S, then the
//!   body, received into memory chosen after the header; the figure is half
//!   a call's round trip; over tcp, navette brings its raw TCP baseline
//!   (the call's bytes as one ping-pong message over a plain socket, in
//!   turns with navette): the floor of any call over TCP;
//! - migrate: a 650-byte task state shipped to the other rank, run there
//!   and shipped back; the figure is the time of one migration (half a
//!   round trip);
//! - rpc_rate: T client threads (1, 4, 16 by default) making calls of rpc
//!   back to back (argument of 0 bytes by default) to a one-thread server;
//!   the figure is calls per second over all threads. An MPI without
//!   `MPI_THREAD_MULTIPLE` is skipped as not available.
//!
//! In each round, navette (`navette bench PATTERN`), then Open MPI, then
//! MPICH (`bench/mpi/PATTERN.c` built with each), over the same transport.
//! Indexed's large blocks are in the memory `--memory` names; in huge
//! pages (the default), each MPI runs twice, its blocks on the heap and in
//! huge pages, and keeps its faster row (`in_both_memories`).

use std::process::Command;

use super::{Context, Group, Outcome, Pattern};
use crate::args::Memory;
use crate::record::{Record, SkipKind, implementation as imp};
use crate::runner::Output;
use crate::tools::mpi::{self, Mpi};
use crate::tools::{ParseError, floor, navette};

/// Default argument sizes of rpc: the body of a call (and of its reply).
pub const RPC_SIZES: &str = "0,64,1K,16K,256K,1M";

/// The size of migrate's task state, in bytes.
pub const MIGRATE_STATE: usize = 650;

/// migrate's only size: the task state's (`--sizes` does not change it).
pub const MIGRATE_SIZES: &str = "650";

/// Default argument size of rpc_rate's calls.
pub const RPC_RATE_SIZES: &str = "0";

/// Default client thread counts of rpc_rate.
pub const DEFAULT_THREADS: &str = "1,4,16";

/// The most client threads of rpc_rate (as `bench/mpi/rpc_rate.c`).
pub const MAX_THREADS: usize = 256;

/// `pattern` (multiseg, indexed, rpc, migrate, rpc_rate) over
/// `ctx.transport`.
pub(super) fn run(ctx: &mut Context<'_>, pattern: Pattern) -> Outcome {
    let mut outcome = Outcome::default();
    if pattern == Pattern::Indexed {
        outcome.note(memory_note(ctx.memory));
    }
    let groups = groups(ctx, pattern);
    measure_navette(ctx, pattern, &groups, &mut outcome);
    for mpi in Mpi::ALL {
        measure_mpi(ctx, pattern, mpi, &groups, &mut outcome);
    }
    if has_floor(ctx, pattern) {
        measure_floor(ctx, pattern, &groups, &mut outcome);
    }
    outcome
}

/// Whether the round of `pattern` brings its floor: multiseg and indexed
/// over shm (over tcp the kernel's path is the floor, and each MPI pays it
/// per message).
fn has_floor(ctx: &Context<'_>, pattern: Pattern) -> bool {
    matches!(pattern, Pattern::Multiseg | Pattern::Indexed)
        && ctx.transport == crate::args::Transport::Shm
}

/// The floor of `pattern` (`bench/floor/floor.c series` for multiseg,
/// `indexed` for indexed): its rows, in the MPI programs' format, join
/// the table as `floor`.
fn measure_floor(ctx: &mut Context<'_>, pattern: Pattern, groups: &[Group], outcome: &mut Outcome) {
    let turn = Turn {
        pattern,
        name: imp::PATTERN_FLOOR,
        groups,
    };
    let program = &ctx.programs.floor;
    let mut command = match pattern {
        Pattern::Indexed => floor::indexed_command(program, ctx.memory.name(), ctx.sizes),
        _ => floor::series_command(program, ctx.segments, ctx.sizes),
    };
    let Some(output) = turn.run(ctx, outcome, &mut command) else {
        return;
    };
    let failure = (!output.success()).then(|| output.failure());
    turn.settle_output(ctx, outcome, &output.stdout, failure);
}

/// The rows every implementation should give: per segment count for
/// multiseg; for indexed, the sizes of whole messages (the large blocks
/// asked for, and the 64-byte block); per thread count for rpc_rate; the
/// task state's size for migrate.
pub fn groups(ctx: &Context<'_>, pattern: Pattern) -> Vec<Group> {
    match pattern {
        Pattern::Multiseg => ctx
            .segments
            .iter()
            .map(|&segments| Group {
                segments: Some(segments),
                ..Group::plain(ctx.sizes.to_vec())
            })
            .collect(),
        Pattern::Indexed => vec![Group::plain(
            ctx.sizes
                .iter()
                .map(|&large| large.saturating_add(navette_cli::bench::indexed::HEAD))
                .collect(),
        )],
        Pattern::RpcRate => ctx
            .threads
            .iter()
            .map(|&threads| Group {
                threads: Some(threads),
                ..Group::plain(ctx.sizes.to_vec())
            })
            .collect(),
        Pattern::Migrate => vec![Group::plain(vec![MIGRATE_STATE])],
        Pattern::Pingpong | Pattern::Multirail | Pattern::Rpc => {
            vec![Group::plain(ctx.sizes.to_vec())]
        }
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
                group,
                kind,
                group.sizes.clone(),
                reason.to_owned(),
            );
        }
    }

    /// Keeps the rows a program printed in the MPI programs' format
    /// (`stdout`), or skips every row if it printed none that parse (for
    /// `failure` if it failed).
    fn settle_output(
        &self,
        ctx: &Context<'_>,
        outcome: &mut Outcome,
        stdout: &str,
        failure: Option<String>,
    ) {
        self.settle_rows(ctx, outcome, parse(self.pattern, stdout), failure);
    }

    /// Keeps `rows`, or skips every row if there are none (for `failure`
    /// if the program failed).
    fn settle_rows(
        &self,
        ctx: &Context<'_>,
        outcome: &mut Outcome,
        rows: Result<Vec<Row>, ParseError>,
        failure: Option<String>,
    ) {
        match rows {
            Ok(rows) => {
                let records: Vec<Record> = rows
                    .into_iter()
                    .map(|row| row.record(self.pattern, ctx.transport.name(), self.name))
                    .collect();
                settle_groups(
                    ctx,
                    self.pattern,
                    self.name,
                    self.groups,
                    &records,
                    failure,
                    outcome,
                );
            }
            Err(e) => {
                let reason = failure.unwrap_or_else(|| e.to_string());
                self.skip(ctx, outcome, SkipKind::Failed, &reason);
            }
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
        // migrate's task state has its own size.
        sizes: if pattern == Pattern::Migrate {
            &[]
        } else {
            ctx.sizes
        },
        segments: (pattern == Pattern::Multiseg).then_some(ctx.segments),
        threads: (pattern == Pattern::RpcRate).then_some(ctx.threads),
        iterations: ctx.iterations,
        raw_tcp: raw_floor(ctx, pattern),
        memory: (pattern == Pattern::Indexed).then(|| ctx.memory.name()),
        json: &json,
    };
    let mut command = navette::command(&ctx.programs.navette, &request);
    let Some(output) = turn.run(ctx, outcome, &mut command) else {
        return;
    };
    let (records, failure) = match navette::read_run(&output, &json) {
        Ok(read) => read,
        Err((kind, reason)) => {
            // A pattern navette bench does not have yet is not a failure.
            let (kind, reason) = match navette::unknown_pattern(&output, pattern.name()) {
                Some(why) => (SkipKind::Unavailable, why),
                None => (kind, reason),
            };
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
    let ours: Vec<Record> = records.iter().filter(mine).cloned().collect();
    if request.raw_tcp {
        let floor: Vec<Record> = records
            .iter()
            .filter(|r| r.implementation == imp::RAW_TCP && r.pattern == pattern.name())
            .cloned()
            .collect();
        settle_groups(
            ctx,
            pattern,
            imp::RAW_TCP,
            groups,
            &floor,
            failure.clone(),
            outcome,
        );
    }
    settle_groups(ctx, pattern, name, groups, &ours, failure, outcome);
}

/// Whether navette's run of `pattern` brings its raw TCP baseline: rpc over
/// tcp, whose floor is one plain socket's ping-pong of the call's bytes.
fn raw_floor(ctx: &Context<'_>, pattern: Pattern) -> bool {
    pattern == Pattern::Rpc && ctx.transport == crate::args::Transport::Tcp
}

/// Keeps the rows of `records` that each group expects, and skips the
/// group's sizes that they lack (for `failure` if the tool failed).
fn settle_groups(
    ctx: &Context<'_>,
    pattern: Pattern,
    name: &str,
    groups: &[Group],
    records: &[Record],
    failure: Option<String>,
    outcome: &mut Outcome,
) {
    for group in groups {
        let rows: Vec<Record> = records
            .iter()
            .filter(|r| {
                r.segments == group.segments
                    && r.threads == group.threads
                    && group.sizes.contains(&r.size)
            })
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
    if in_both_memories(ctx.memory, pattern) {
        measure_in_both_memories(ctx, &turn, mpi, &program, outcome);
        return;
    }
    let mut command = mpi.launch(&program, ctx.transport);
    command.args(program_args(ctx, pattern, ctx.memory));
    let Some(output) = turn.run(ctx, outcome, &mut command) else {
        return;
    };
    if let Some(reason) = refusal(name, &output) {
        turn.skip(ctx, outcome, SkipKind::Unavailable, &reason);
        return;
    }
    let failure = (!output.success()).then(|| output.failure());
    if let Some(note) = mpi.transport_note(ctx.transport, &output) {
        outcome.note(format!("{name}: {note}"));
    }
    turn.settle_output(ctx, outcome, &output.stdout, failure);
}

/// One MPI's turn at indexed with its large blocks on the heap and in huge
/// pages (see [`in_both_memories`]), one run after the other (which goes first
/// alternates with the round, so that neither always follows navette):
/// each size keeps the faster row of the runs that succeeded, a failed
/// run's rows count only when no run succeeded, and every failure is noted
/// (so that it shows even when the other run gave every size). A note per
/// size says what each memory took.
fn measure_in_both_memories(
    ctx: &mut Context<'_>,
    turn: &Turn<'_>,
    mpi: Mpi,
    program: &std::path::Path,
    outcome: &mut Outcome,
) {
    let name = mpi.name();
    let mut order = [Memory::Heap, Memory::Huge];
    if ctx.round.is_some_and(|round| round % 2 == 0) {
        order.reverse();
    }
    let mut good: Vec<(Memory, Vec<Row>)> = Vec::new();
    let mut failed_rows: Option<Vec<Row>> = None;
    let mut failures: Vec<String> = Vec::new();
    for memory in order {
        let mut command = mpi.launch(program, ctx.transport);
        command.args(program_args(ctx, turn.pattern, memory));
        let raw = ctx.raw_name(turn.pattern, &format!("{name}-{}", memory.name()));
        let output = match ctx.runner.run(&raw, &mut command) {
            Ok(output) => output,
            Err(e) => {
                failures.push(format!("{} memory: could not run: {e}", memory.name()));
                continue;
            }
        };
        if let Some(reason) = refusal(name, &output) {
            turn.skip(ctx, outcome, SkipKind::Unavailable, &reason);
            return;
        }
        if let Some(note) = mpi.transport_note(ctx.transport, &output) {
            outcome.note(format!("{name}: {note}"));
        }
        let parsed = parse(turn.pattern, &output.stdout);
        match (output.success(), parsed) {
            (true, Ok(rows)) => good.push((memory, rows)),
            (true, Err(e)) => failures.push(format!("{} memory: {e}", memory.name())),
            (false, parsed) => {
                failures.push(format!("{} memory: {}", memory.name(), output.failure()));
                if let (None, Ok(rows)) = (&failed_rows, parsed) {
                    failed_rows = Some(rows);
                }
            }
        }
    }
    for failure in &failures {
        outcome.note(format!(
            "{name}: {} failed with its blocks in {failure}",
            turn.pattern.name()
        ));
    }
    if let [first, second] = good.as_slice() {
        note_memories(ctx, outcome, name, first, second);
    }
    let failure = (!failures.is_empty()).then(|| failures.join("; "));
    turn.settle_rows(ctx, outcome, pair_rows(good, failed_rows), failure);
}

/// The rows of an MPI's runs in both memories: each size's faster row of
/// the runs that succeeded (`good`); a failed run's rows only when none
/// did.
fn pair_rows(
    good: Vec<(Memory, Vec<Row>)>,
    failed_rows: Option<Vec<Row>>,
) -> Result<Vec<Row>, ParseError> {
    good.into_iter()
        .map(|(_, rows)| rows)
        .reduce(faster_rows)
        .or(failed_rows)
        .ok_or(ParseError::NoResult("no run printed a figure"))
}

/// Notes, per size, what an MPI's two runs of indexed took in each memory.
fn note_memories(
    ctx: &Context<'_>,
    outcome: &mut Outcome,
    name: &str,
    (first, first_rows): &(Memory, Vec<Row>),
    (second, second_rows): &(Memory, Vec<Row>),
) {
    let round = ctx
        .round
        .map(|r| format!(", round {r}"))
        .unwrap_or_default();
    for a in first_rows {
        let Some(b) = second_rows.iter().find(|b| b.size == a.size) else {
            continue;
        };
        let (Some(la), Some(lb)) = (a.latency_us, b.latency_us) else {
            continue;
        };
        outcome.note(format!(
            "{name}: indexed {} B{round}: {la:.2} µs in {} memory, {lb:.2} in {} memory",
            a.size,
            first.name(),
            second.name()
        ));
    }
}

/// Whether an MPI program runs `pattern` in both memories, each row
/// keeping the faster: indexed with `memory` huge (Open MPI is often
/// slower with its blocks in huge pages: the peers get the memory they do
/// best in). Otherwise it runs once, in `memory` (which only indexed
/// reads).
fn in_both_memories(memory: Memory, pattern: Pattern) -> bool {
    pattern == Pattern::Indexed && memory == Memory::Huge
}

/// The note of indexed's memory under the table.
fn memory_note(memory: Memory) -> String {
    match memory {
        Memory::Huge => "indexed: the large blocks are in huge-page memory for navette (and the \
                         floor, over shm) (--memory huge); each MPI runs in each round with them \
                         on the heap and in huge pages, and keeps the faster"
            .to_owned(),
        Memory::Heap => {
            "indexed: the large blocks are in heap memory for every implementation (--memory heap)"
                .to_owned()
        }
    }
}

/// `kept`, each row replaced by the row of `these` of the same case
/// (segments, threads, size) where that one is faster (lower latency,
/// or higher rate); rows of `these` for other cases are added.
fn faster_rows(mut kept: Vec<Row>, these: Vec<Row>) -> Vec<Row> {
    for row in these {
        let same =
            |k: &&mut Row| (k.segments, k.threads, k.size) == (row.segments, row.threads, row.size);
        match kept.iter_mut().find(|k| same(k)) {
            Some(k) if row.is_faster_than(k) => *k = row,
            Some(_) => {}
            None => kept.push(row),
        }
    }
    kept
}

/// Why an MPI program said it cannot run on this library (rpc_rate
/// without `MPI_THREAD_MULTIPLE`: an `unavailable: …` line, exit status
/// [`mpi::UNAVAILABLE`]), if it did.
pub fn refusal(name: &str, output: &Output) -> Option<String> {
    let said = mpi::unavailable(&output.stdout);
    let status = output.status.and_then(|s| s.code());
    match (said, status) {
        (Some(why), _) => Some(format!("{name}: {why}")),
        (None, Some(mpi::UNAVAILABLE)) => Some(format!(
            "{name}: the program exited with status {} (not available with this library)",
            mpi::UNAVAILABLE
        )),
        (None, _) => None,
    }
}

/// The MPI program's arguments: `[-i N] [-s SEGMENTS] [-t THREADS]
/// [-m MEMORY] SIZE…` (`-m` for indexed alone); migrate's only `[-i N]`.
pub fn program_args(ctx: &Context<'_>, pattern: Pattern, memory: Memory) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(n) = ctx.iterations {
        args.extend(["-i".to_owned(), n.to_string()]);
    }
    if pattern == Pattern::Indexed {
        args.extend(["-m".to_owned(), memory.name().to_owned()]);
    }
    if pattern == Pattern::Multiseg {
        let segments: Vec<String> = ctx.segments.iter().map(usize::to_string).collect();
        args.extend(["-s".to_owned(), segments.join(",")]);
    }
    if pattern == Pattern::RpcRate {
        let threads: Vec<String> = ctx.threads.iter().map(usize::to_string).collect();
        args.extend(["-t".to_owned(), threads.join(",")]);
    }
    if pattern != Pattern::Migrate {
        args.extend(ctx.sizes.iter().map(usize::to_string));
    }
    args
}

/// One row an MPI program printed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Row {
    segments: Option<usize>,
    threads: Option<usize>,
    size: usize,
    latency_us: Option<f64>,
    bandwidth_mbps: Option<f64>,
    rate_per_s: Option<f64>,
}

impl Row {
    /// Whether it is faster than `other`, a row of the same case: a lower
    /// latency, or a higher rate (a row without either is not).
    fn is_faster_than(&self, other: &Self) -> bool {
        match (
            self.latency_us,
            other.latency_us,
            self.rate_per_s,
            other.rate_per_s,
        ) {
            (Some(mine), Some(theirs), ..) => mine < theirs,
            (Some(_), None, ..) => true,
            (None, _, Some(mine), Some(theirs)) => mine > theirs,
            _ => false,
        }
    }

    fn of(figure: crate::tools::Figure) -> Self {
        Self {
            segments: None,
            threads: None,
            size: figure.size,
            latency_us: figure.latency_us,
            bandwidth_mbps: figure.bandwidth_mbps,
            rate_per_s: None,
        }
    }

    fn record(self, pattern: Pattern, transport: &str, name: &str) -> Record {
        Record {
            segments: self.segments,
            threads: self.threads,
            rate_per_s: self.rate_per_s,
            ..Record::new(
                pattern.name(),
                transport,
                name,
                self.size,
                self.latency_us,
                self.bandwidth_mbps,
            )
        }
    }
}

fn parse(pattern: Pattern, stdout: &str) -> Result<Vec<Row>, ParseError> {
    Ok(match pattern {
        Pattern::Multiseg => mpi::parse_multiseg(stdout)?
            .into_iter()
            .map(|s| Row {
                segments: Some(s.segments),
                ..Row::of(s.figure)
            })
            .collect(),
        Pattern::Rpc => mpi::parse_rpc(stdout)?.into_iter().map(Row::of).collect(),
        Pattern::Migrate => vec![Row::of(mpi::parse_migrate(stdout)?)],
        Pattern::RpcRate => mpi::parse_rpc_rate(stdout)?
            .into_iter()
            .map(|f| Row {
                segments: None,
                threads: Some(f.threads),
                size: f.size,
                latency_us: None,
                bandwidth_mbps: None,
                rate_per_s: Some(f.rate_per_s),
            })
            .collect(),
        Pattern::Indexed => mpi::parse_indexed(stdout)?
            .into_iter()
            .map(Row::of)
            .collect(),
        Pattern::Pingpong | Pattern::Multirail => {
            return Err(ParseError::NoResult(
                "no program of bench/mpi/ for this pattern",
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::path::PathBuf;
    use std::process::ExitStatus;
    use std::time::Duration;

    use super::*;
    use crate::args::{Programs, Transport};
    use crate::runner::Runner;

    fn output(code: i32, stdout: &str) -> Output {
        Output {
            status: Some(ExitStatus::from_raw(code << 8)),
            stdout: stdout.to_owned(),
            stderr: String::new(),
        }
    }

    #[test]
    fn each_case_keeps_its_faster_row() {
        let row = |size, latency_us, rate_per_s| Row {
            segments: None,
            threads: None,
            size,
            latency_us,
            bandwidth_mbps: None,
            rate_per_s,
        };
        let heap = vec![row(64, Some(5.0), None), row(1000, Some(20.0), None)];
        let huge = vec![
            row(64, Some(6.0), None),
            row(1000, Some(10.0), None),
            row(2000, Some(30.0), None),
        ];
        assert_eq!(
            faster_rows(heap, huge),
            [
                row(64, Some(5.0), None),
                row(1000, Some(10.0), None),
                row(2000, Some(30.0), None)
            ]
        );
        // Rates: the higher is faster; a row with no figure never wins.
        let kept = faster_rows(
            vec![row(0, None, Some(10.0))],
            vec![row(0, None, Some(20.0))],
        );
        assert_eq!(kept, [row(0, None, Some(20.0))]);
        let kept = faster_rows(vec![row(0, Some(1.0), None)], vec![row(0, None, None)]);
        assert_eq!(kept, [row(0, Some(1.0), None)]);
        // Of two runs, the faster of those that succeeded; a failed run's
        // rows only when none did.
        let heap = (Memory::Heap, vec![row(64, Some(5.0), None)]);
        let huge = (Memory::Huge, vec![row(64, Some(4.0), None)]);
        let failed = Some(vec![row(64, Some(1.0), None)]);
        assert_eq!(
            pair_rows(vec![heap.clone(), huge], failed.clone()).unwrap(),
            [row(64, Some(4.0), None)]
        );
        assert_eq!(
            pair_rows(vec![heap], failed.clone()).unwrap(),
            [row(64, Some(5.0), None)]
        );
        assert_eq!(
            pair_rows(vec![], failed).unwrap(),
            [row(64, Some(1.0), None)]
        );
        assert!(pair_rows(vec![], None).is_err());
        assert!(memory_note(Memory::Huge).contains("keeps the faster"));
        assert!(memory_note(Memory::Heap).contains("heap memory for every implementation"));
    }

    #[test]
    fn an_mpi_without_thread_multiple_is_not_available() {
        let said = output(
            mpi::UNAVAILABLE,
            "unavailable: MPI_THREAD_MULTIPLE not provided (provided: MPI_THREAD_SERIALIZED)\n",
        );
        assert_eq!(
            refusal("mpich", &said).as_deref(),
            Some("mpich: MPI_THREAD_MULTIPLE not provided (provided: MPI_THREAD_SERIALIZED)")
        );
        let silent = output(mpi::UNAVAILABLE, "");
        assert!(
            refusal("openmpi", &silent)
                .unwrap()
                .contains("exited with status 77"),
        );
        assert_eq!(refusal("openmpi", &output(1, "")), None);
        assert_eq!(
            refusal("openmpi", &output(0, "threads=1 size=0 rate_per_s=1\n")),
            None
        );
    }

    #[test]
    fn arguments_and_rows_of_the_rpc_patterns() {
        let raw = std::env::temp_dir().join(format!("navette-compare-mpi-{}", std::process::id()));
        std::fs::create_dir_all(&raw).unwrap();
        let mut runner = Runner::new(&raw, Duration::from_secs(1)).unwrap();
        let programs = Programs {
            navette: PathBuf::from("navette"),
            navette_unbuilt: None,
            mpi_pingpong: PathBuf::new(),
            mpi_build: PathBuf::from("/b"),
            floor: PathBuf::new(),
            netns_rails: PathBuf::new(),
        };
        let ctx = Context {
            runner: &mut runner,
            programs,
            transport: Transport::Tcp,
            sizes: &[0, 64],
            segments: &[8],
            threads: &[1, 4],
            iterations: Some(100),
            memory: crate::args::Memory::Huge,
            round: None,
        };
        let args = |pattern| program_args(&ctx, pattern, ctx.memory).join(" ");
        assert_eq!(args(Pattern::Rpc), "-i 100 0 64");
        assert_eq!(args(Pattern::Migrate), "-i 100");
        assert_eq!(args(Pattern::RpcRate), "-i 100 -t 1,4 0 64");
        assert_eq!(args(Pattern::Multiseg), "-i 100 -s 8 0 64");
        // indexed's large blocks in the memory asked for; in huge pages,
        // the MPIs run in heap memory too and keep the faster.
        assert_eq!(args(Pattern::Indexed), "-i 100 -m huge 0 64");
        assert_eq!(
            program_args(&ctx, Pattern::Indexed, Memory::Heap).join(" "),
            "-i 100 -m heap 0 64"
        );
        assert!(in_both_memories(Memory::Huge, Pattern::Indexed));
        assert!(!in_both_memories(Memory::Heap, Pattern::Indexed));
        assert!(!in_both_memories(Memory::Huge, Pattern::Rpc));
        // Over tcp, navette's rpc run brings the raw socket's floor; the
        // floors of multiseg and indexed come over shm alone.
        assert!(raw_floor(&ctx, Pattern::Rpc));
        assert!(!has_floor(&ctx, Pattern::Multiseg));
        assert!(!has_floor(&ctx, Pattern::Indexed));
        let line = |command: std::process::Command| {
            let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
            args.join(" ")
        };
        let program = std::path::Path::new("floor");
        let series = floor::series_command(program, &[8, 16], &[4, 64]);
        assert_eq!(line(series), "-c 0,1 series -s 8,16 4 64");
        // The indexed floor takes the large blocks, as the MPI programs do.
        let indexed = floor::indexed_command(program, "huge", &[0, 1024, 256 << 10]);
        assert_eq!(line(indexed), "-c 0,1 indexed -m huge 0 1024 262144");
        assert!(!raw_floor(&ctx, Pattern::Migrate));
        assert!(!raw_floor(&ctx, Pattern::RpcRate));
        assert_eq!(groups(&ctx, Pattern::Rpc), [Group::plain(vec![0, 64])]);
        assert_eq!(
            groups(&ctx, Pattern::Migrate),
            [Group::plain(vec![MIGRATE_STATE])]
        );
        let rate = groups(&ctx, Pattern::RpcRate);
        assert_eq!(
            rate.iter().map(|g| g.threads).collect::<Vec<_>>(),
            [Some(1), Some(4)]
        );
        assert!(
            rate.iter()
                .all(|g| g.sizes == [0, 64] && g.segments.is_none())
        );
        // rpc_rate's lines become rows with threads and a rate; a thread
        // count the program did not print is skipped.
        let stdout = "threads=1 size=0 calls=100 seconds=0.0001 rate_per_s=1000000.0\n\
                      threads=1 size=64 calls=100 seconds=0.0001 rate_per_s=900000.0\n\
                      threads=4 size=0 calls=400 seconds=0.0004 rate_per_s=950000.0\n";
        let records: Vec<Record> = parse(Pattern::RpcRate, stdout)
            .unwrap()
            .into_iter()
            .map(|row| row.record(Pattern::RpcRate, "tcp", "mpich"))
            .collect();
        let mut outcome = Outcome::default();
        settle_groups(
            &ctx,
            Pattern::RpcRate,
            "mpich",
            &rate,
            &records,
            None,
            &mut outcome,
        );
        assert_eq!(outcome.records.len(), 3);
        assert_eq!(outcome.records[2].threads, Some(4));
        assert_eq!(outcome.records[2].rate_per_s, Some(950_000.0));
        assert_eq!(outcome.records[2].latency_us, None);
        assert_eq!(outcome.skipped.len(), 1);
        assert_eq!(
            (outcome.skipped[0].threads, outcome.skipped[0].sizes.clone()),
            (Some(4), vec![64])
        );
        let migrate = parse(
            Pattern::Migrate,
            "size=650 iterations=10 migrations=20 latency_us=0.5\n",
        )
        .unwrap();
        assert_eq!(
            migrate[0].record(Pattern::Migrate, "tcp", "openmpi").size,
            650
        );
        drop(ctx);
        std::fs::remove_dir_all(&raw).unwrap();
    }
}
