//! One module per communication pattern. A pattern runs, for one
//! transport, navette and every peer that has that pattern, and returns
//! the rows (plus what it skipped and why). The patterns compared with the
//! two MPIs (multiseg, indexed, rpc, migrate, rpc_rate) share [`mpi`].

pub mod mpi;
pub mod multirail;
mod pingpong;

use crate::args::{Programs, Transport};
use crate::record::{Record, Skip, SkipKind};
use crate::runner::Runner;
use crate::tools::floor::{self, CoreRate};
use crate::tools::{Figure, navette};

/// A pattern that can be compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pattern {
    /// Ping-pong of one message: one-way latency and size / latency.
    Pingpong,
    /// Ping-pong of series of segments, each its own non-blocking send on
    /// its own channel (MPI: communicator): one-way time of a series.
    Multiseg,
    /// Ping-pong of one message of two blocks in separate memory (64 bytes
    /// and a large one): pack/unpack in navette, hindexed in MPI.
    Indexed,
    /// Bandwidth of two rate-limited tcp links between two network
    /// namespaces, used together (strategies split and aggregate) and each
    /// alone.
    Multirail,
    /// A remote call with an S-byte argument, two messages each way (an
    /// 8-byte header holding S, then the body, received into memory chosen
    /// after the header): one-way time, half a call's round trip.
    Rpc,
    /// A 650-byte task state shipped to the other rank, run there and
    /// shipped back (after PM2's thread migration): time per migration,
    /// half a round trip.
    Migrate,
    /// Back-to-back calls of rpc from T client threads at once to a
    /// one-thread server: calls completed per second over all threads.
    #[value(name = "rpc_rate", alias = "rpc-rate")]
    RpcRate,
}

impl Pattern {
    /// The name in the benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pingpong => "pingpong",
            Self::Multiseg => "multiseg",
            Self::Indexed => "indexed",
            Self::Multirail => "multirail",
            Self::Rpc => "rpc",
            Self::Migrate => "migrate",
            Self::RpcRate => "rpc_rate",
        }
    }

    /// Sizes measured when `--sizes` is not given: per segment for
    /// multiseg, the large block for indexed (as `navette bench`), the
    /// argument (body) of a call for rpc and rpc_rate, the task state for
    /// migrate (which always has this size).
    pub fn default_sizes(self) -> &'static str {
        match self {
            Self::Pingpong => crate::args::DEFAULT_SIZES,
            Self::Multirail => multirail::DEFAULT_SIZES,
            Self::Multiseg => navette_cli::bench::command::MULTISEG_SIZES,
            Self::Indexed => navette_cli::bench::command::INDEXED_SIZES,
            Self::Rpc => mpi::RPC_SIZES,
            Self::Migrate => mpi::MIGRATE_SIZES,
            Self::RpcRate => mpi::RPC_RATE_SIZES,
        }
    }

    /// Whether a size of 0 bytes can be measured: an empty body is a call
    /// like any other for rpc and rpc_rate (which draw no log-log plot);
    /// the other patterns plot against size on a log scale.
    pub fn takes_empty_messages(self) -> bool {
        matches!(self, Self::Rpc | Self::RpcRate)
    }
}

/// Patterns from a comma-separated list (`multiseg,indexed`), in order,
/// each once.
pub fn parse_patterns(list: &str) -> Result<Vec<Pattern>, String> {
    let mut patterns = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        let pattern = <Pattern as clap::ValueEnum>::from_str(item, true).map_err(|_| {
            let known: Vec<&str> = <Pattern as clap::ValueEnum>::value_variants()
                .iter()
                .map(|p| p.name())
                .collect();
            format!("unknown pattern {item:?} (known: {})", known.join(", "))
        })?;
        if !patterns.contains(&pattern) {
            patterns.push(pattern);
        }
    }
    Ok(patterns)
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
    /// Message sizes (per segment for multiseg, the large block for
    /// indexed).
    pub sizes: &'a [usize],
    /// Segments per series (multiseg).
    pub segments: &'a [usize],
    /// Client threads (rpc_rate).
    pub threads: &'a [usize],
    /// Timed iterations per size, if fixed.
    pub iterations: Option<u32>,
    /// The memory of indexed's large blocks, for every implementation.
    pub memory: crate::args::Memory,
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
    /// the lowest latency and the highest bandwidth and rate of the two; a skip
    /// stays only for sizes no round measured; notes once each.
    pub fn keep_best(&mut self, other: Self) {
        for record in other.records {
            match self.records.iter_mut().find(|r| r.same_row(&record)) {
                Some(kept) => {
                    kept.latency_us = best(kept.latency_us, record.latency_us, f64::min);
                    kept.bandwidth_mbps =
                        best(kept.bandwidth_mbps, record.bandwidth_mbps, f64::max);
                    kept.rate_per_s = best(kept.rate_per_s, record.rate_per_s, f64::max);
                    if kept.strategy.is_none() {
                        kept.strategy = record.strategy;
                    }
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
            let measured: Vec<usize> = records
                .iter()
                .filter(|r| skip.matches(r))
                .map(|r| r.size)
                .collect();
            skip.sizes.retain(|size| !measured.contains(size));
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
        self.push_series(ctx, pattern, imp, &Group::plain(Vec::new()), figures);
    }

    /// Adds `figures` of `imp` as rows of `group`'s variant (segments per
    /// series, threads), whatever the group's sizes.
    pub(crate) fn push_series(
        &mut self,
        ctx: &Context<'_>,
        pattern: Pattern,
        imp: &str,
        group: &Group,
        figures: &[Figure],
    ) {
        let (pattern, transport) = (pattern.name(), ctx.transport.name());
        self.records.extend(figures.iter().map(|f| Record {
            segments: group.segments,
            threads: group.threads,
            ..Record::new(
                pattern,
                transport,
                imp,
                f.size,
                f.latency_us,
                f.bandwidth_mbps,
            )
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
        let measured: Vec<usize> = figures.iter().map(|f| f.size).collect();
        let group = Group::plain(ctx.sizes.to_vec());
        self.skip_missing(ctx, pattern, imp, &group, &measured, failure);
    }

    /// Adds a skip for each size of `group` that `measured` lacks, for
    /// `failure` if the tool failed.
    pub(crate) fn skip_missing(
        &mut self,
        ctx: &Context<'_>,
        pattern: Pattern,
        imp: &str,
        group: &Group,
        measured: &[usize],
        failure: Option<String>,
    ) {
        let missing: Vec<usize> = group
            .sizes
            .iter()
            .copied()
            .filter(|s| !measured.contains(s))
            .collect();
        if !missing.is_empty() {
            let reason =
                failure.unwrap_or_else(|| "its output has no figure for these sizes".into());
            self.skip_series(ctx, pattern, imp, group, SkipKind::Failed, missing, reason);
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
        let plain = Group::plain(Vec::new());
        self.skip_series(ctx, pattern, imp, &plain, kind, sizes, reason);
    }

    /// Records that `imp` was not measured at `sizes` in `group`'s variant
    /// (segments per series, threads), whatever the group's sizes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn skip_series(
        &mut self,
        ctx: &Context<'_>,
        pattern: Pattern,
        imp: &str,
        group: &Group,
        kind: SkipKind,
        sizes: Vec<usize>,
        reason: String,
    ) {
        eprintln!("compare: {imp} skipped: {reason}");
        self.skipped.push(Skip {
            pattern: pattern.name().to_owned(),
            transport: ctx.transport.name().to_owned(),
            implementation: imp.to_owned(),
            segments: group.segments,
            threads: group.threads,
            rails: None,
            strategy: None,
            kind,
            sizes,
            reason,
        });
    }

    /// Adds `note` unless it is there already.
    pub(crate) fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

/// Rows expected of every implementation: the sizes of series of
/// `segments` (multiseg), of calls from `threads` threads (rpc_rate), or of
/// plain messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Segments per series, for multiseg.
    pub segments: Option<usize>,
    /// Client threads, for rpc_rate.
    pub threads: Option<usize>,
    /// The rows' sizes (per segment for multiseg, both blocks for indexed,
    /// a call's argument for rpc and rpc_rate, the task state for
    /// migrate).
    pub sizes: Vec<usize>,
}

impl Group {
    /// Plain messages of `sizes`.
    pub fn plain(sizes: Vec<usize>) -> Self {
        Self {
            segments: None,
            threads: None,
            sizes,
        }
    }
}

/// The better of two optional figures by `pick`.
fn best(a: Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    }
}

/// Runs `pattern` over `ctx.transport` once (one round).
pub fn run(pattern: Pattern, ctx: &mut Context<'_>) -> Outcome {
    match pattern {
        Pattern::Pingpong => pingpong::run(ctx),
        Pattern::Multirail => multirail::run(ctx, 1),
        Pattern::Multiseg
        | Pattern::Indexed
        | Pattern::Rpc
        | Pattern::Migrate
        | Pattern::RpcRate => mpi::run(ctx, pattern),
    }
}

/// Runs `pattern` over `ctx.transport` for `rounds` rounds (named in the
/// raw outputs when there are several) and keeps the best of each figure.
/// multirail sets its namespaces up once for all of its rounds.
///
/// Before each round of a pattern other than pingpong and multirail,
/// navette's 8-byte ping-pong over shared memory is measured as a check on
/// the host, with what each of the two cores runs (the floor program's
/// `cores`), and a note gives both per round: a host that slows everything
/// down for a while (a busy virtual machine's neighbours) then shows
/// beside the figures it disturbed.
pub fn run_rounds(pattern: Pattern, ctx: &mut Context<'_>, rounds: u32) -> Outcome {
    if pattern == Pattern::Multirail {
        return multirail::run(ctx, rounds);
    }
    // The patterns ranked against the faster MPI: their rounds are kept
    // for the paired note.
    let paired = matches!(
        pattern,
        Pattern::Multiseg | Pattern::Indexed | Pattern::Rpc | Pattern::Migrate
    );
    let mut outcome = Outcome::default();
    let mut checks = Vec::new();
    let mut each_round = Vec::new();
    for round in 1..=rounds {
        ctx.round = (rounds > 1).then_some(round);
        if pattern != Pattern::Pingpong {
            checks.push(HostCheck {
                ping_pong_us: host_check(ctx, pattern),
                cores: core_check(ctx, pattern),
            });
        }
        let this_round = run(pattern, ctx);
        if paired {
            each_round.push(this_round.records.clone());
        }
        outcome.keep_best(this_round);
    }
    if let Some(note) = host_note(&checks) {
        outcome.note(note);
    }
    if let Some(note) = paired_note(&each_round, &host_states(&checks)) {
        outcome.note(note);
    }
    outcome
}

/// The note that gives, for each of navette's rows, how many times faster
/// it was than the faster MPI *of the same round*: the median and the
/// range over the rounds that measured both (none with fewer than two
/// such rounds). The best-of-rounds figures pair each tool's fastest
/// round, which on a host whose speed drifts may fall in different
/// moments; a ratio taken within each round, where the tools ran minutes
/// apart at most, is paired, and its spread shows what one run's ratio is
/// worth. Where the rounds ran on hosts of more than one kind (`hosts`,
/// by round, from [`host_states`]), the median of each kind follows.
fn paired_note(rounds: &[Vec<Record>], hosts: &[Option<Host>]) -> Option<String> {
    use crate::record::implementation::NAVETTE;
    use crate::sizes::ShortSize;
    use crate::table::View;

    let mut rows: Vec<(&str, &str, Option<usize>, usize)> = rounds
        .iter()
        .flatten()
        .filter(|r| r.implementation == NAVETTE && r.latency_us.is_some())
        .map(|r| (r.pattern.as_str(), r.transport.as_str(), r.segments, r.size))
        .collect();
    rows.sort_unstable();
    rows.dedup();
    let mut cells = Vec::new();
    for (pattern, transport, segments, size) in rows {
        // Each round's ratio, with the host it ran on.
        let paired: Vec<(f64, Option<Host>)> = rounds
            .iter()
            .enumerate()
            .filter_map(|(i, records)| {
                let view = View::of_series(pattern, transport, segments, records);
                let (x, _) = view.speedup_vs_faster_mpi(size)?;
                Some((x, hosts.get(i).copied().flatten()))
            })
            .collect();
        if paired.len() < 2 {
            continue;
        }
        let mut ratios: Vec<f64> = paired.iter().map(|&(x, _)| x).collect();
        ratios.sort_by(f64::total_cmp);
        let (low, high) = (ratios[0], ratios[ratios.len() - 1]);
        let row = match segments {
            Some(n) => format!("{n}×{}", ShortSize(size)),
            None => ShortSize(size).to_string(),
        };
        cells.push(format!(
            "{row}: {:.2} ({low:.2}–{high:.2}, {} rounds{})",
            median(&ratios),
            ratios.len(),
            by_host(&paired)
        ));
    }
    (!cells.is_empty()).then(|| {
        format!(
            "navette × the faster MPI within each round (its µs / navette's µs), \
             median (lowest–highest) by size: {}",
            cells.join("; ")
        )
    })
}

/// The medians of `paired` ratios by the host their rounds ran on, as
/// "; steady host 2.10 in 3, slow cores 1.70 in 2", when they ran on hosts of
/// more than one kind (else nothing: the note's median says it all).
fn by_host(paired: &[(f64, Option<Host>)]) -> String {
    let kinds: Vec<Host> = Host::ALL
        .into_iter()
        .filter(|&kind| paired.iter().any(|&(_, host)| host == Some(kind)))
        .collect();
    if kinds.len() < 2 {
        return String::new();
    }
    let parts: Vec<String> = kinds
        .into_iter()
        .map(|kind| {
            let mut ratios: Vec<f64> = paired
                .iter()
                .filter(|&&(_, host)| host == Some(kind))
                .map(|&(x, _)| x)
                .collect();
            ratios.sort_by(f64::total_cmp);
            format!("{} {:.2} in {}", kind.name(), median(&ratios), ratios.len())
        })
        .collect();
    format!("; {}", parts.join(", "))
}

/// The median of `sorted` (not empty, ascending).
fn median(sorted: &[f64]) -> f64 {
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The one-way time of navette's 8-byte ping-pong over shared memory, in
/// µs, now, before a round of `pattern`; `None` if it could not tell (its
/// outputs are in `raw/`, as every tool's, under the runner's time limit).
fn host_check(ctx: &mut Context<'_>, pattern: Pattern) -> Option<f64> {
    if ctx.programs.navette_unbuilt.is_some() {
        return None;
    }
    let name = ctx.raw_name(pattern, "host-check");
    let json = ctx.runner.raw_dir().join(format!("{name}.json"));
    let _ = std::fs::remove_file(&json);
    let request = navette::BenchRequest {
        pattern: "pingpong",
        driver: "shm",
        sizes: &[HOST_CHECK_SIZE],
        segments: None,
        threads: None,
        iterations: Some(HOST_CHECK_ITERATIONS),
        raw_tcp: false,
        memory: None,
        json: &json,
    };
    let mut command = navette::command(&ctx.programs.navette, &request);
    let output = ctx.runner.run(&name, &mut command).ok()?;
    if !output.success() {
        return None;
    }
    let (records, _) = navette::read_run(&output, &json).ok()?;
    records
        .iter()
        .find(|r| {
            r.implementation == crate::record::implementation::NAVETTE && r.size == HOST_CHECK_SIZE
        })
        .and_then(|r| r.latency_us)
}

/// The host check's message size and round trips (a fraction of a second
/// in all, the start of its two ranks included).
const HOST_CHECK_SIZE: usize = 8;
const HOST_CHECK_ITERATIONS: u32 = 200_000;

/// What the host was like before a round.
#[derive(Clone, Debug)]
struct HostCheck {
    /// navette's 8-byte ping-pong over shm, one-way µs ([`host_check`]).
    ping_pong_us: Option<f64>,
    /// What each core runs ([`core_check`]).
    cores: Option<Vec<CoreRate>>,
}

/// The kind of host a round ran on, as its core check tells against the
/// run's fastest round (see [`host_states`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    /// Its slower core ran about as fast as in the run's fastest round,
    /// alone and with the other core busy.
    Steady,
    /// Its slower core ran well below the run's best: another guest's busy
    /// hyper-thread on its physical core, or a lower clock.
    SlowCores,
    /// Fast alone, about half of that with both cores busy: the two cores
    /// are hyper-threads of one physical core.
    Siblings,
}

impl Host {
    /// Every kind, in the order notes give them.
    const ALL: [Self; 3] = [Self::Steady, Self::SlowCores, Self::Siblings];

    fn name(self) -> &'static str {
        match self {
            Self::Steady => "steady host",
            Self::SlowCores => "slow cores",
            Self::Siblings => "sibling hyper-threads",
        }
    }
}

/// A core below this share of a rate it is compared with (the run's best
/// alone; its own alone, when both run at once) runs slow. On the 2-core
/// test machine a core reads 11-14 additions per ns on a steady host and
/// 5-8 beside a busy hyper-thread (docs/profiling.md, stops 45-47): the
/// kinds are far apart, and a few percent of noise stays steady.
const SLOW_SHARE: f64 = 0.75;

/// The kind of host of each round (`None` where its core check could not
/// tell). The reference is the run's own fastest round, so that a run on
/// a host slow throughout reads steady: the kinds tell rounds of one run
/// apart, not runs.
fn host_states(checks: &[HostCheck]) -> Vec<Option<Host>> {
    let slowest = |rates: &[CoreRate], pick: fn(&CoreRate) -> f64| {
        rates.iter().map(pick).min_by(f64::total_cmp)
    };
    let alone = |c: &HostCheck| slowest(c.cores.as_deref()?, |r| r.adds_per_ns);
    let best = checks.iter().filter_map(alone).max_by(f64::total_cmp);
    checks
        .iter()
        .map(|c| {
            let (best, own) = (best?, alone(c)?);
            let together = slowest(c.cores.as_deref()?, |r| r.together)?;
            Some(if own < SLOW_SHARE * best {
                Host::SlowCores
            } else if together < SLOW_SHARE * own {
                Host::Siblings
            } else {
                Host::Steady
            })
        })
        .collect()
}

/// Each core's additions per nanosecond now, from the floor program
/// (`None` if it could not tell: its outputs are in `raw/`).
fn core_check(ctx: &mut Context<'_>, pattern: Pattern) -> Option<Vec<CoreRate>> {
    let name = ctx.raw_name(pattern, "core-check");
    let mut command = floor::cores_command(&ctx.programs.floor);
    let output = ctx.runner.run(&name, &mut command).ok()?;
    if !output.success() {
        return None;
    }
    floor::parse_cores(&output.stdout).ok()
}

/// The note that reports the host checks of every round, in order (none
/// if no check could tell: navette and the floor unbuilt, or no shared
/// memory).
fn host_note(checks: &[HostCheck]) -> Option<String> {
    let told = |c: &HostCheck| c.ping_pong_us.is_some() || c.cores.is_some();
    if !checks.iter().any(told) {
        return None;
    }
    let ping_pongs: Vec<String> = checks
        .iter()
        .map(|c| {
            c.ping_pong_us
                .map_or_else(|| "?".to_owned(), |us| format!("{us:.3}"))
        })
        .collect();
    let cores: Vec<String> = checks
        .iter()
        .map(|c| match &c.cores {
            Some(rates) => {
                let each = |pick: fn(&CoreRate) -> f64| {
                    rates
                        .iter()
                        .map(|r| format!("{:.1}", pick(r)))
                        .collect::<Vec<_>>()
                        .join("/")
                };
                format!(
                    "{} ({} at once)",
                    each(|r| r.adds_per_ns),
                    each(|r| r.together)
                )
            }
            None => "?".to_owned(),
        })
        .collect();
    Some(format!(
        "host check before each round: navette's {HOST_CHECK_SIZE}-byte ping-pong over shm \
         took {} µs one-way (the same in every round on a steady host; a round that reads \
         much more ran while the host was slow); the two cores ran {} additions per ns, \
         each alone (both at once): a core well below its best round shared its physical \
         core with another guest's busy hyper-thread or ran at a lower clock, and at once \
         about half of alone means the two are hyper-threads of one physical core; code \
         bound by its instructions, as navette's small series are, slows down with such a \
         core more than code that waits on memory",
        ping_pongs.join(", "),
        cores.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::{
        CoreRate, Host, HostCheck, Outcome, Pattern, host_note, host_states, paired_note,
        parse_patterns,
    };
    use crate::record::{Record, Skip, SkipKind};

    #[test]
    fn paired_ratios_are_taken_within_each_round() {
        // One round: navette, then each MPI, at `size`, in µs.
        let round = |size: usize, navette: f64, openmpi: f64, mpich: Option<f64>| {
            let row = |imp: &str, lat: f64| Record::new("rpc", "shm", imp, size, Some(lat), None);
            let mut rows = vec![row("navette", navette), row("openmpi", openmpi)];
            rows.extend(mpich.map(|lat| row("mpich", lat)));
            rows
        };
        let rounds = vec![
            // The faster MPI is Open MPI here (×1.5), MPICH in the next
            // (×0.5), and the third round is the host's slow one (×2.0):
            // the median is the middle round's ratio, not a best-of-rounds
            // one (navette's best 1.0 over Open MPI's best 1.5 = 1.5).
            round(0, 1.0, 1.5, None),
            round(0, 2.0, 3.0, Some(1.0)),
            round(0, 4.0, 8.0, Some(9.0)),
        ];
        let note = paired_note(&rounds, &[]).expect("three paired rounds");
        assert!(note.contains("0: 1.50 (0.50–2.00, 3 rounds)"), "{note}");
        // An even count takes the mean of the middle two; a row with a
        // single paired round gets no entry.
        let mut four = rounds.clone();
        four.push(round(0, 1.0, 1.0, None));
        four[0].extend(round(64, 1.0, 2.0, None));
        let note = paired_note(&four, &[]).expect("four paired rounds");
        assert!(note.contains("0: 1.25 (0.50–2.00, 4 rounds)"), "{note}");
        assert!(!note.contains("64:"), "{note}");
        // Series of segments are named by their count.
        let multiseg = |navette: f64| {
            ["navette", "openmpi"].map(|imp| {
                let lat = if imp == "navette" { navette } else { 2.0 };
                let mut r = Record::new("multiseg", "shm", imp, 4, Some(lat), None);
                r.segments = Some(8);
                r
            })
        };
        let note = paired_note(&[multiseg(1.0).to_vec(), multiseg(4.0).to_vec()], &[]).unwrap();
        assert!(note.contains("8×4: 1.25 (0.50–2.00, 2 rounds)"), "{note}");
        // Nothing to pair: no note.
        assert_eq!(paired_note(&[round(0, 1.0, 2.0, None)], &[]), None);
    }

    fn record(imp: &str, size: usize, lat: Option<f64>, bw: Option<f64>) -> Record {
        Record::new("pingpong", "shm", imp, size, lat, bw)
    }

    fn skip(imp: &str, sizes: Vec<usize>) -> Skip {
        Skip {
            pattern: "pingpong".into(),
            transport: "shm".into(),
            implementation: imp.into(),
            segments: None,
            threads: None,
            rails: None,
            strategy: None,
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

    /// A host check of `us` (the ping-pong) and `cores` (each core's rate
    /// alone and at once).
    fn check(us: Option<f64>, cores: Option<&[(f64, f64)]>) -> HostCheck {
        HostCheck {
            ping_pong_us: us,
            cores: cores.map(|rates| {
                (0..)
                    .zip(rates)
                    .map(|(core, &(adds_per_ns, together))| CoreRate {
                        core,
                        adds_per_ns,
                        together,
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn rounds_are_told_apart_by_their_host() {
        let states = host_states(&[
            check(Some(0.2), Some(&[(12.0, 11.8), (12.4, 12.1)])),
            // The slower core well below the run's best (12.0).
            check(Some(0.3), Some(&[(6.1, 6.0), (11.9, 11.5)])),
            // Fast alone, about half at once.
            check(Some(0.2), Some(&[(11.6, 6.2), (11.8, 6.0)])),
            // A little below the best: noise, steady.
            check(Some(0.2), Some(&[(10.0, 9.8), (10.5, 9.9)])),
            check(Some(0.2), None),
        ]);
        assert_eq!(
            states,
            vec![
                Some(Host::Steady),
                Some(Host::SlowCores),
                Some(Host::Siblings),
                Some(Host::Steady),
                None
            ]
        );
        // A run slow throughout is compared with its own best round.
        let slow = host_states(&[
            check(None, Some(&[(6.0, 5.9), (6.2, 6.1)])),
            check(None, Some(&[(5.8, 5.7), (6.0, 5.9)])),
        ]);
        assert_eq!(slow, vec![Some(Host::Steady), Some(Host::Steady)]);
        assert_eq!(host_states(&[check(Some(0.2), None)]), vec![None]);
    }

    #[test]
    fn paired_ratios_are_given_by_host_when_hosts_differ() {
        let round = |navette: f64| {
            ["navette", "openmpi"]
                .map(|imp| {
                    let lat = if imp == "navette" { navette } else { 2.0 };
                    Record::new("rpc", "shm", imp, 0, Some(lat), None)
                })
                .to_vec()
        };
        // × 2.0, 2.5 and 1.6 (steady, steady, slow cores), × 1.0 on a
        // host the check could not tell.
        let rounds = [round(1.0), round(0.8), round(1.25), round(2.0)];
        let hosts = [
            Some(Host::Steady),
            Some(Host::Steady),
            Some(Host::SlowCores),
            None,
        ];
        let note = paired_note(&rounds, &hosts).expect("four paired rounds");
        assert!(
            note.contains(
                "0: 1.80 (1.00–2.50, 4 rounds; steady host 2.25 in 2, slow cores 1.60 in 1)"
            ),
            "{note}"
        );
        // One kind of host: the median alone.
        let note = paired_note(&rounds[..2], &hosts[..2]).expect("two paired rounds");
        assert!(note.contains("0: 2.25 (2.00–2.50, 2 rounds)"), "{note}");
    }

    #[test]
    fn host_checks_are_noted_per_round() {
        assert_eq!(host_note(&[]), None);
        assert_eq!(
            host_note(&[check(None, None), check(None, None)]),
            None,
            "no check could tell"
        );
        let note = host_note(&[
            check(Some(0.0512), Some(&[(10.54, 10.4), (10.96, 10.9)])),
            check(None, Some(&[(6.01, 5.5), (10.9, 5.6)])),
            check(Some(0.13), None),
        ])
        .expect("a note");
        assert!(note.contains("took 0.051, ?, 0.130 µs one-way"), "{note}");
        assert!(
            note.contains(
                "ran 10.5/11.0 (10.4/10.9 at once), 6.0/10.9 (5.5/5.6 at once), ? additions per ns"
            ),
            "{note}"
        );
        // The cores alone tell something too.
        let note = host_note(&[check(None, Some(&[(9.0, 9.0), (9.5, 9.4)]))]).expect("a note");
        assert!(
            note.contains("took ? µs") && note.contains("ran 9.0/9.5"),
            "{note}"
        );
    }

    #[test]
    fn pattern_lists() {
        assert_eq!(
            parse_patterns("multiseg,indexed,multirail"),
            Ok(vec![
                Pattern::Multiseg,
                Pattern::Indexed,
                Pattern::Multirail
            ])
        );
        assert_eq!(
            parse_patterns(" Pingpong , multiseg,pingpong"),
            Ok(vec![Pattern::Pingpong, Pattern::Multiseg]),
            "trimmed, any case, each once"
        );
        let err = parse_patterns("multiseg,rcp").unwrap_err();
        assert!(
            err.contains("\"rcp\"") && err.contains("known: pingpong"),
            "{err}"
        );
        assert!(
            err.contains("multirail, rpc, migrate, rpc_rate"),
            "the names of the output: {err}"
        );
        assert_eq!(
            parse_patterns("rpc,migrate,rpc_rate,RPC-rate"),
            Ok(vec![Pattern::Rpc, Pattern::Migrate, Pattern::RpcRate])
        );
        assert!(parse_patterns("").is_err());
        assert!(parse_patterns("multiseg,,indexed").is_err());
    }

    #[test]
    fn rounds_keep_series_of_different_lengths_apart() {
        let series = |imp: &str, segments, lat| Record {
            segments: Some(segments),
            strategy: (imp == "navette").then(|| "aggregate".to_owned()),
            ..Record::new("multiseg", "shm", imp, 64, Some(lat), None)
        };
        let missing = |segments| Skip {
            pattern: "multiseg".into(),
            segments: Some(segments),
            sizes: vec![64],
            ..skip("mpich", Vec::new())
        };
        let mut kept = Outcome {
            records: vec![series("navette", 8, 3.0), series("navette", 16, 5.0)],
            skipped: vec![missing(8), missing(16)],
            notes: Vec::new(),
        };
        kept.keep_best(Outcome {
            records: vec![series("navette", 16, 4.0), series("mpich", 8, 6.0)],
            skipped: Vec::new(),
            notes: Vec::new(),
        });
        assert_eq!(
            kept.records,
            vec![
                series("navette", 8, 3.0),
                series("navette", 16, 4.0),
                series("mpich", 8, 6.0)
            ]
        );
        assert_eq!(kept.skipped, vec![missing(16)], "mpich's 8 came in round 2");
    }

    #[test]
    fn rounds_keep_the_highest_rate_per_thread_count() {
        let rate = |imp: &str, threads, rate| Record {
            threads: Some(threads),
            rate_per_s: Some(rate),
            ..Record::new("rpc_rate", "shm", imp, 0, None, None)
        };
        let missing = |threads| Skip {
            pattern: "rpc_rate".into(),
            threads: Some(threads),
            sizes: vec![0],
            ..skip("openmpi", Vec::new())
        };
        let mut kept = Outcome {
            records: vec![rate("navette", 1, 5.0e5), rate("navette", 4, 9.0e5)],
            skipped: vec![missing(1), missing(4)],
            notes: Vec::new(),
        };
        kept.keep_best(Outcome {
            records: vec![
                rate("navette", 1, 6.0e5),
                rate("navette", 4, 8.0e5),
                rate("openmpi", 4, 7.0e5),
            ],
            skipped: Vec::new(),
            notes: Vec::new(),
        });
        assert_eq!(
            kept.records,
            vec![
                rate("navette", 1, 6.0e5),
                rate("navette", 4, 9.0e5),
                rate("openmpi", 4, 7.0e5)
            ]
        );
        assert_eq!(
            kept.skipped,
            vec![missing(1)],
            "openmpi's 4 came in round 2"
        );
    }
}
