//! `navette bench`: benchmarks as rank programs.
//!
//! Both ranks run the same code; rank 0 (the client) times and reports,
//! rank 1 (the server) echoes or drains. With `--baseline raw-tcp`, each
//! size is also measured over plain TCP sockets between the same two ranks,
//! the two taking turns in eight slices of the iterations (so that a host
//! whose speed drifts weighs on both alike), and the table shows the ratio.
//!
//! Patterns: `pingpong`, `stream`, `rpc` (here and in `rpc.rs`), `multiseg`
//! (several messages per ping, [`multiseg`]) and `indexed` (one message of
//! two separate blocks, [`indexed`]). Each measured [`Case`] is a message
//! size, with a segment count for multiseg.

pub mod command;
pub mod document;
pub mod indexed;
pub mod multiseg;
pub mod raw_tcp;
mod rpc;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use navette::tcp::Congestion;
use navette::{Node, wait_all};
use navette_session::{Bootstrap, BootstrapError};

use crate::buffers::per;
use crate::json::BenchRun;
use raw_tcp::RawTcp;

const TAG: u64 = 0xbe_4c;

/// Which side of the exchange a rank plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Rank 0: sends first, times, reports.
    Client,
    /// Rank 1: answers.
    Server,
}

impl Role {
    /// The gate to the other rank.
    fn peer(self, node: &Node) -> navette::Gate {
        node.gate(match self {
            Self::Client => 1,
            Self::Server => 0,
        })
    }
}

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pattern {
    /// One-way latency and ping-pong bandwidth.
    Pingpong,
    /// Windowed streaming bandwidth.
    Stream,
    /// RPC round trip: a call of an 8-byte header (EXPRESS) and a body
    /// (CHEAPER) that the handler receives where it chose, and the same
    /// body back.
    Rpc,
    /// Task migration: a task's state (650 bytes by default) shipped by a
    /// one-way call, started at the peer, and shipped back.
    Migrate,
    /// RPC throughput: calls per second with several client threads.
    #[value(name = "rpc_rate")]
    RpcRate,
    /// Ping-pong of series of segments, each its own non-blocking send on
    /// its own channel and tag.
    Multiseg,
    /// Ping-pong of one Madeleine message made of a 64-byte block (EXPRESS)
    /// and a large block (CHEAPER) in separate memory.
    Indexed,
}

impl Pattern {
    /// The name in the benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pingpong => "pingpong",
            Self::Stream => "stream",
            Self::Rpc => "rpc",
            Self::Migrate => "migrate",
            Self::RpcRate => "rpc_rate",
            Self::Multiseg => "multiseg",
            Self::Indexed => "indexed",
        }
    }
}

/// What a Navette figure is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Baseline {
    /// Plain TCP, non-blocking, TCP_NODELAY, busy polling: each exchange
    /// one ping-pong message of the pattern's bytes (an RPC's: its 8-byte
    /// header and its body).
    RawTcp,
}

/// The memory of indexed's large blocks (both the one sent and the one
/// received into).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Memory {
    /// A `Vec<u8>` each, from the process's allocator.
    #[default]
    Heap,
    /// A `navette::HugeBuffer` each: memory of their own, backed by
    /// transparent huge pages where the system grants them.
    Huge,
}

impl Memory {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Heap => "heap",
            Self::Huge => "huge",
        }
    }
}

/// Settings of one benchmark run.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The pattern.
    pub pattern: Pattern,
    /// Message sizes in bytes: per segment for multiseg, of the large
    /// block for indexed (see [`cases`]).
    pub sizes: Vec<usize>,
    /// Segments per series of multiseg (ignored by the other patterns).
    pub segments: Vec<usize>,
    /// Client threads of rpc_rate (ignored by the other patterns).
    pub threads: Vec<usize>,
    /// Timed iterations per size; `None` picks by size.
    pub iterations: Option<u32>,
    /// Messages in flight per iteration of `stream`.
    pub window: usize,
    /// The comparison, if any.
    pub baseline: Option<Baseline>,
    /// The memory of indexed's large blocks (the other patterns take
    /// [`Memory::Heap`] alone).
    pub memory: Memory,
    /// The transport's name in the output (the driver in use).
    pub transport: String,
    /// The congestion control of the tcp driver's connections, which the
    /// raw TCP baseline's connection gets too: the baseline is the same
    /// kernel path without Navette, so the ratio measures Navette alone.
    pub tcp_congestion: Congestion,
    /// The strategy named in multiseg's and indexed's rows (see
    /// [`document::strategy_from_env`]).
    pub strategy: String,
}

/// Why a benchmark failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// Navette failed.
    #[error(transparent)]
    Navette(#[from] navette::Error),
    /// The bootstrap failed.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// The baseline's sockets failed.
    #[error("raw TCP baseline: {0}")]
    RawTcp(#[source] std::io::Error),
    /// Writing the table or the closing lines to the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
    /// The command runs on a job of fewer than 2 ranks.
    #[error(
        "{command} needs 2 ranks, and this job has {ranks}: run it alone (it starts its own 2) \
         or under `navette run -n 2`"
    )]
    Ranks {
        /// The command, as `navette bench`.
        command: &'static str,
        /// The job's ranks.
        ranks: u32,
    },
    /// `iterations` of `Some(0)`.
    #[error("--iterations must be at least 1")]
    NoIterations,
    /// A stream's window or a series of segments would hold too much.
    #[error(
        "{pattern}: {count} {what} of {} each hold {} bytes at once, over the 4 GiB \
         ({MAX_IN_FLIGHT} bytes) allowed: lower {option} or --sizes",
        crate::sizes::ShortSize(*.size),
        (*.count as u128) * (*.size as u128)
    )]
    TooMuchInFlight {
        /// The pattern.
        pattern: &'static str,
        /// Messages of the window, or segments of the series.
        count: usize,
        /// `"messages in flight"` or `"segments"`.
        what: &'static str,
        /// The option that sets `count`.
        option: &'static str,
        /// Bytes per message.
        size: usize,
    },
    /// `stream` with a window of 0.
    #[error("stream: --window must be at least 1")]
    NoWindow,
    /// A buffer for the messages could not be allocated.
    #[error("cannot allocate a message buffer of {size} bytes")]
    Alloc {
        /// The buffer's length.
        size: usize,
        /// Why.
        #[source]
        source: std::collections::TryReserveError,
    },
    /// A buffer in huge pages could not be mapped.
    #[error(transparent)]
    Huge(#[from] navette::HugeBufferError),
    /// `--memory` other than heap for a pattern whose buffers it does not
    /// choose.
    #[error("{pattern}: --memory {memory} applies to indexed's large blocks only")]
    Memory {
        /// The pattern.
        pattern: &'static str,
        /// The memory asked for.
        memory: &'static str,
    },
    /// The pattern's built-in default sizes do not parse. They are
    /// constants, so this is a bug in navette, not in the command line.
    #[error("{pattern}: default sizes {list:?}: {source}")]
    DefaultSizes {
        /// The pattern.
        pattern: &'static str,
        /// The default size list, as written in the source.
        list: &'static str,
        /// Why it does not parse.
        #[source]
        source: crate::sizes::SizeError,
    },
    /// Writing the benchmark output JSON document failed.
    #[error("cannot write {path}: {source}")]
    WriteJson {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The path of the running navette executable, which the command
    /// starts its own two ranks with, is unknown.
    #[error("cannot find the navette executable: {0}")]
    Executable(#[source] std::io::Error),
    /// The address that rank 1 published for the raw TCP baseline is not a
    /// socket address.
    #[error("bad baseline address {address:?}: {source}")]
    BaselineAddress {
        /// What rank 1 published (invalid UTF-8 replaced).
        address: String,
        /// Why it does not parse.
        #[source]
        source: std::net::AddrParseError,
    },
    /// The kernel refused to give the raw TCP baseline's connection the
    /// congestion control that Navette's connections get.
    #[error("congestion control {congestion}: {source}")]
    CongestionRefused {
        /// The setting, as given for the tcp driver.
        congestion: Congestion,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// A count per case (multiseg's segments, rpc_rate's client threads)
    /// outside 1 to `max`.
    #[error("{count} {what}: {pattern} takes 1 to {max} {what}")]
    Count {
        /// The pattern.
        pattern: &'static str,
        /// What is counted: `"segments per series"` or `"client threads"`.
        what: &'static str,
        /// The count refused.
        count: usize,
        /// The most the pattern takes.
        max: usize,
    },
    /// A size that the pattern cannot take.
    #[error("{pattern}: {what} of {size} bytes: {limit}")]
    Size {
        /// The pattern.
        pattern: &'static str,
        /// What has the size, as `"a task state"`.
        what: &'static str,
        /// The size refused, in bytes.
        size: usize,
        /// The bound it breaks.
        limit: SizeLimit,
    },
    /// Multiseg has no channel number left for a segment (channels are
    /// numbered in 16 bits, and segment k takes channel k + 1).
    #[error("multiseg: segment {segment}: no channel number left")]
    NoChannel {
        /// The segment's index in its series, from 0.
        segment: usize,
    },
    /// The benchmark's own code failed, not Navette nor the settings: a
    /// bug in navette.
    #[error("internal failure of the benchmark, {pattern}: {what}")]
    Internal {
        /// The pattern.
        pattern: &'static str,
        /// What went wrong, as `"a client thread panicked"`.
        what: &'static str,
    },
    /// A received message was not the one sent.
    #[error("{pattern} {implementation} size {size}: received data differs from what was sent")]
    Corrupt {
        /// The pattern.
        pattern: &'static str,
        /// navette or the baseline.
        implementation: &'static str,
        /// The size.
        size: usize,
    },
}

/// The bound that a refused size breaks ([`BenchError::Size`]). Each is
/// set by a header that every message or state of the pattern holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizeLimit {
    /// Sizes run from `header` bytes to `max` bytes.
    Range {
        /// The smallest size: the header alone.
        header: usize,
        /// The largest size.
        max: usize,
    },
    /// The size is under the header's bytes, which it must include.
    UnderHeader {
        /// The header's bytes.
        header: usize,
    },
    /// The size and the header's bytes added to it overflow a `usize`.
    Overflow {
        /// The header's bytes.
        header: usize,
    },
}

impl std::fmt::Display for SizeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Range { header, max } => write!(f, "from {header} (its header) to {max} bytes"),
            Self::UnderHeader { header } => write!(f, "under its {header}-byte header"),
            Self::Overflow { header } => {
                write!(f, "too large with the {header}-byte header added")
            }
        }
    }
}

/// One case's figures: Navette's, and the baseline's if asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeFigures {
    /// Message size (per segment for multiseg; both blocks for indexed).
    pub size: usize,
    /// Segments per series (multiseg only).
    pub segments: Option<usize>,
    /// Client threads (rpc_rate only).
    pub threads: Option<usize>,
    /// Calls per second over all threads (rpc_rate only).
    pub rate_per_s: Option<f64>,
    /// Timed iterations (rpc_rate: calls over all threads).
    pub iterations: u32,
    /// Navette.
    pub navette: Figure,
    /// The baseline, measured in turns with Navette.
    pub baseline: Option<Figure>,
    /// Bytes Navette copied per message on this rank, both ways (its
    /// sends' copies and its receives'; [`Node::bytes_copied`]), over
    /// every round trip including the warm-up; a message of multiseg is one
    /// segment. Not counted for `stream`.
    pub copies: Option<f64>,
}

/// A measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    /// One-way time per message, in microseconds.
    pub latency_us: f64,
    /// 10^6 bytes per second.
    pub bandwidth_mbps: f64,
}

impl Figure {
    fn from_one_way(size: usize, one_way: Duration) -> Self {
        let secs = one_way.as_secs_f64();
        Self {
            latency_us: secs * 1e6,
            bandwidth_mbps: if secs > 0.0 {
                size as f64 / secs / 1e6
            } else {
                0.0
            },
        }
    }
}

/// Default iteration count: 1 GiB of traffic per size, between 8 and
/// 100 000 round trips (a fraction of a second per size over shared
/// memory, up to a second or two for small messages over tcp). Fewer
/// would be too short on a virtual machine, where one scheduling hiccup
/// moves a figure: 20 000 round trips of 8 bytes over shared memory last
/// 6 ms, 64 of 4 MiB over tcp 80 ms.
pub fn default_iterations(size: usize) -> u32 {
    let budget = 1usize << 30;
    (budget / size.max(1)).clamp(8, 100_000) as u32
}

/// Default count of timed series of `segments` messages of `size` bytes
/// each: [`default_iterations`] of the series' bytes, divided among its
/// messages (so that a series of 16 small segments counts as 16 round trips
/// of the budget, not one), and at least 8. One segment is a ping-pong.
pub fn series_iterations(segments: usize, size: usize) -> u32 {
    let segments = segments.max(1);
    let per_series = default_iterations(segments.saturating_mul(size));
    (per_series / u32::try_from(segments).unwrap_or(u32::MAX)).max(8)
}

/// What one row measures: a message size and, for multiseg, the number of
/// segments of a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Segments per series (multiseg only).
    pub segments: Option<usize>,
    /// Client threads (rpc_rate only).
    pub threads: Option<usize>,
    /// Bytes per message: per segment for multiseg, both blocks for indexed.
    pub size: usize,
}

impl Case {
    /// Bytes that cross one way in one exchange.
    pub fn bytes(self) -> usize {
        self.size.saturating_mul(self.segments.unwrap_or(1))
    }

    /// Timed iterations when none is given ([`series_iterations`]).
    pub fn default_iterations(self) -> u32 {
        series_iterations(self.segments.unwrap_or(1), self.size)
    }
}

/// The rows `config` measures, in order: for multiseg every size for each
/// segment count; for indexed each size taken as the large block, the row's
/// size being both blocks ([`indexed::HEAD`] more); else each size.
///
/// Also checks what every case shares: at least 1 iteration if a count is
/// given, and for stream a window of 1 or more messages whose bytes stay
/// within [`MAX_IN_FLIGHT`].
pub fn cases(config: &BenchConfig) -> Result<Vec<Case>, BenchError> {
    let plain = |size| Case {
        segments: None,
        threads: None,
        size,
    };
    if config.iterations == Some(0) {
        return Err(BenchError::NoIterations);
    }
    if config.memory != Memory::Heap && config.pattern != Pattern::Indexed {
        return Err(BenchError::Memory {
            pattern: config.pattern.name(),
            memory: config.memory.name(),
        });
    }
    // A count per case (`what`) outside 1 to `max`, the first one.
    let out_of_range = |counts: &[usize], what: &'static str, max: usize| {
        let count = *counts.iter().find(|&&c| !(1..=max).contains(&c))?;
        Some(BenchError::Count {
            pattern: config.pattern.name(),
            what,
            count,
            max,
        })
    };
    // Bytes held at once by `count` messages of each size.
    let too_much = |count: usize, what: &'static str, option: &'static str| {
        config
            .sizes
            .iter()
            .find(|&&size| (count as u128) * (size as u128) > u128::from(MAX_IN_FLIGHT))
            .map(|&size| BenchError::TooMuchInFlight {
                pattern: config.pattern.name(),
                count,
                what,
                option,
                size,
            })
    };
    match config.pattern {
        Pattern::Multiseg => {
            if let Some(err) = out_of_range(
                &config.segments,
                "segments per series",
                multiseg::MAX_SEGMENTS,
            ) {
                return Err(err);
            }
            if let Some(err) = config
                .segments
                .iter()
                .find_map(|&segments| too_much(segments, "segments", "--segments"))
            {
                return Err(err);
            }
            Ok(config
                .segments
                .iter()
                .flat_map(|&segments| {
                    config.sizes.iter().map(move |&size| Case {
                        segments: Some(segments),
                        threads: None,
                        size,
                    })
                })
                .collect())
        }
        Pattern::Indexed => config
            .sizes
            .iter()
            .map(|&large| {
                large
                    .checked_add(indexed::HEAD)
                    .map(plain)
                    .ok_or(BenchError::Size {
                        pattern: config.pattern.name(),
                        what: "a block",
                        size: large,
                        limit: SizeLimit::Overflow {
                            header: indexed::HEAD,
                        },
                    })
            })
            .collect(),
        Pattern::RpcRate => {
            if let Some(err) = out_of_range(&config.threads, "client threads", MAX_THREADS) {
                return Err(err);
            }
            Ok(config
                .threads
                .iter()
                .flat_map(|&threads| {
                    config.sizes.iter().map(move |&size| Case {
                        segments: None,
                        threads: Some(threads),
                        size,
                    })
                })
                .collect())
        }
        Pattern::Migrate => {
            let bad = |&&s: &&usize| !(rpc::TASK_MIN..=rpc::TASK_MAX).contains(&s);
            match config.sizes.iter().find(bad) {
                Some(&bad) => Err(BenchError::Size {
                    pattern: config.pattern.name(),
                    what: "a task state",
                    size: bad,
                    limit: SizeLimit::Range {
                        header: rpc::TASK_MIN,
                        max: rpc::TASK_MAX,
                    },
                }),
                None => Ok(config.sizes.iter().copied().map(plain).collect()),
            }
        }
        Pattern::Stream => {
            if config.window == 0 {
                return Err(BenchError::NoWindow);
            }
            if let Some(err) = too_much(config.window, "messages in flight", "--window") {
                return Err(err);
            }
            Ok(config.sizes.iter().copied().map(plain).collect())
        }
        Pattern::Pingpong | Pattern::Rpc => Ok(config.sizes.iter().copied().map(plain).collect()),
    }
}

/// Most bytes a case holds in its messages at once: a stream's window
/// (messages in flight times their size) or a multiseg series (segments
/// times their size), 4 GiB. Each size is at most
/// [`crate::sizes::MAX_SIZE`] already.
pub const MAX_IN_FLIGHT: u64 = 4 << 30;

/// Most client threads of rpc_rate.
pub const MAX_THREADS: usize = 256;

/// An empty vector with room for `len` bytes (see [`crate::buffers`]).
fn reserved(len: usize) -> Result<Vec<u8>, BenchError> {
    crate::buffers::with_room(len).map_err(|source| BenchError::Alloc { size: len, source })
}

/// `len` bytes for a message, byte `i` being `fill(i)`.
fn buffer(len: usize, fill: impl Fn(usize) -> u8) -> Result<Vec<u8>, BenchError> {
    crate::buffers::filled(len, fill).map_err(|source| BenchError::Alloc { size: len, source })
}

/// `len` zero bytes to receive into.
fn zeroed(len: usize) -> Result<Vec<u8>, BenchError> {
    buffer(len, |_| 0)
}

/// The bytes sent at `size`: a pattern the receiver can check.
fn payload(size: usize) -> Result<Vec<u8>, BenchError> {
    pattern(size, size, 0)
}

/// `len` bytes of the pattern of piece `index` (a segment, a block) of an
/// exchange of `size`: different pieces differ, so one landing in
/// another's place is caught. Piece 0 of `size` bytes is [`payload`].
fn pattern(len: usize, size: usize, index: usize) -> Result<Vec<u8>, BenchError> {
    buffer(len, pattern_fill(size, index))
}

/// Byte `i` of [`pattern`]'s piece `index` of an exchange of `size`.
fn pattern_fill(size: usize, index: usize) -> impl Fn(usize) -> u8 {
    let salt = size ^ index.wrapping_mul(101);
    move |i| (i.wrapping_mul(31) ^ salt) as u8
}

/// Whether `got` is the pattern of piece `index` of `len` bytes of an
/// exchange of `size` (see [`pattern`]), without allocating it.
fn is_pattern(got: &[u8], len: usize, size: usize, index: usize) -> bool {
    let fill = pattern_fill(size, index);
    got.len() == len && got.iter().enumerate().all(|(i, &b)| b == fill(i))
}

/// Runs the benchmark on this rank; rank 0 gets a row per size through
/// `on_size` as it completes. Only ranks 0 and 1 take part.
pub fn run_rank(
    node: &Node,
    bootstrap: &dyn Bootstrap,
    config: &BenchConfig,
    mut on_size: impl FnMut(&SizeFigures),
) -> Result<Vec<SizeFigures>, BenchError> {
    let role = match node.rank() {
        0 => Role::Client,
        1 => Role::Server,
        _ => return Ok(Vec::new()),
    };
    // Checked before the baseline connects: both ranks refuse alike,
    // neither waiting for the other.
    let cases = cases(config)?;
    let mut raw = match config.baseline {
        Some(Baseline::RawTcp) => Some(RawTcp::connect(bootstrap, role, &config.tcp_congestion)?),
        None => None,
    };
    let mut results = Vec::new();
    for case in cases {
        let (size, bytes) = (case.size, case.bytes());
        // An RPC's raw baseline carries its header too: the same bytes as
        // the call (and as MPI's two messages).
        let raw_bytes = match config.pattern {
            Pattern::Rpc => bytes + rpc::HEADER,
            _ => bytes,
        };
        let iterations = config.iterations.unwrap_or_else(|| match config.pattern {
            Pattern::Migrate => rpc::MIGRATIONS,
            _ => case.default_iterations(),
        });
        // Plain TCP cannot send an empty message: no baseline at size 0;
        // nor of a rate of threads.
        let mut raw = raw
            .as_mut()
            .filter(|_| raw_bytes > 0 && config.pattern != Pattern::RpcRate);
        // With a baseline, the two alternate in slices of the iterations:
        // a host whose speed drifts during the run (a virtual machine's
        // neighbours) then weighs on both alike, and the ratio stays fair.
        let slices = if raw.is_some() { SLICES } else { 1 };
        let (mut navette, mut baseline) = (Duration::ZERO, Duration::ZERO);
        let copied_before = node.bytes_copied();
        let mut round_trips = 0u64;
        for (i, count) in split(iterations, slices).enumerate() {
            let warm = if i == 0 { warmup(iterations) } else { 0 };
            round_trips += u64::from(warm) + u64::from(count);
            let window = config.window;
            navette += match config.pattern {
                Pattern::Pingpong => navette_pingpong(node, role, size, warm, count)?,
                Pattern::Stream => navette_stream(node, role, size, warm, count, window)?,
                Pattern::Rpc => rpc::navette_rpc(node, role, size, warm, count)?,
                Pattern::Migrate => rpc::navette_migrate(node, role, size, warm, count)?,
                Pattern::RpcRate => {
                    let threads = case.threads.unwrap_or(1);
                    rpc::navette_rpc_rate(node, role, threads, size, warm, count)?
                }
                Pattern::Multiseg => {
                    let segments = case.segments.unwrap_or(1);
                    multiseg::navette_multiseg(node, role, segments, size, warm, count)?
                }
                Pattern::Indexed => {
                    indexed::navette_indexed(node, role, size, config.memory, warm, count)?
                }
            };
            if let Some(raw) = raw.as_deref_mut() {
                baseline += match config.pattern {
                    // The raw baseline of an RPC, a series of segments or
                    // an indexed message is the same bytes as one
                    // ping-pong message.
                    Pattern::Pingpong
                    | Pattern::Rpc
                    | Pattern::Migrate
                    | Pattern::RpcRate
                    | Pattern::Multiseg
                    | Pattern::Indexed => raw_pingpong(raw, role, raw_bytes, warm, count)?,
                    Pattern::Stream => raw_stream(raw, role, size, warm, count, window)?,
                };
            }
        }
        let iterations_64 = u64::from(iterations);
        let figure = |elapsed: Duration| match config.pattern {
            Pattern::Pingpong
            | Pattern::Rpc
            | Pattern::Migrate
            | Pattern::Multiseg
            | Pattern::Indexed => Figure::from_one_way(bytes, per(elapsed, 2 * iterations_64)),
            // A call's time, over all threads: the inverse of the rate.
            Pattern::RpcRate => Figure::from_one_way(bytes, per(elapsed, iterations_64)),
            Pattern::Stream => per_message(size, elapsed, iterations, config.window),
        };
        let rate_per_s = (config.pattern == Pattern::RpcRate && !navette.is_zero())
            .then(|| f64::from(iterations) / navette.as_secs_f64());
        let navette = figure(navette);
        let baseline = raw.is_some().then(|| figure(baseline));
        // Each round trip sends one message (or series) each way: this
        // rank made the copies of one send and one receive per message.
        let messages = round_trips * case.segments.unwrap_or(1) as u64;
        let copies = (config.pattern != Pattern::Stream && messages > 0)
            .then(|| node.bytes_copied().saturating_sub(copied_before) as f64 / messages as f64);
        let figures = SizeFigures {
            size,
            segments: case.segments,
            threads: case.threads,
            rate_per_s,
            iterations,
            navette,
            baseline,
            copies,
        };
        if role == Role::Client {
            on_size(&figures);
            results.push(figures);
        }
    }
    Ok(results)
}

/// Slices of the iterations that Navette and a baseline take in turns.
const SLICES: u32 = 8;

/// Warm-up round trips before a timed series: a tenth of them, between 2
/// and 100.
pub fn warmup(iterations: u32) -> u32 {
    (iterations / 10).clamp(2, 100)
}

/// `iterations` cut into at most `slices` non-empty counts.
fn split(iterations: u32, slices: u32) -> impl Iterator<Item = u32> {
    let slices = slices.clamp(1, iterations.max(1));
    let (each, extra) = (iterations / slices, iterations % slices);
    (0..slices).map(move |i| each + u32::from(i < extra))
}

/// Runs `series` for a warm-up of `warm` iterations (if any), then for
/// `count` under the clock; the time of the timed series.
fn time_series<E>(
    warm: u32,
    count: u32,
    mut series: impl FnMut(u32) -> Result<(), E>,
) -> Result<Duration, E> {
    if warm > 0 {
        series(warm)?;
    }
    let start = Instant::now();
    series(count)?;
    Ok(start.elapsed())
}

/// Runs `round` `warm` times, then `count` times under the clock; the time
/// of the timed rounds.
fn time_rounds<E>(
    warm: u32,
    count: u32,
    mut round: impl FnMut() -> Result<(), E>,
) -> Result<Duration, E> {
    time_series(warm, count, |n| (0..n).try_for_each(|_| round()))
}

/// The one-way figure of a stream: time per message sent.
fn per_message(size: usize, elapsed: Duration, iterations: u32, window: usize) -> Figure {
    let window = u64::try_from(window).unwrap_or(u64::MAX);
    let messages = u64::from(iterations).saturating_mul(window);
    Figure::from_one_way(size, per(elapsed, messages))
}

fn check(got: &[u8], size: usize, implementation: &'static str) -> Result<(), BenchError> {
    if is_pattern(got, size, size, 0) {
        Ok(())
    } else {
        Err(BenchError::Corrupt {
            pattern: "pingpong",
            implementation,
            size,
        })
    }
}

/// Times `count` ping-pongs after `warm` untimed ones.
fn navette_pingpong(
    node: &Node,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let peer = role.peer(node);
    let mut buf = payload(size)?;
    let elapsed = time_rounds(warm, count, || -> navette::Result<()> {
        if role == Role::Client {
            node.send(peer, TAG, &buf)?;
            node.recv(peer, TAG, &mut buf)?;
        } else {
            node.recv(peer, TAG, &mut buf)?;
            node.send(peer, TAG, &buf)?;
        }
        Ok(())
    })?;
    check(&buf, size, "navette")?;
    Ok(elapsed)
}

fn raw_pingpong(
    raw: &mut RawTcp,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let mut buf = payload(size)?;
    let elapsed = time_rounds(warm, count, || -> std::io::Result<()> {
        if role == Role::Client {
            raw.send(&buf)?;
            raw.recv(&mut buf)
        } else {
            raw.recv(&mut buf)?;
            raw.send(&buf)
        }
    })
    .map_err(BenchError::RawTcp)?;
    check(&buf, size, "raw-tcp")?;
    Ok(elapsed)
}

/// Times `count` windows of streamed messages after `warm` untimed ones.
fn navette_stream(
    node: &Node,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
    window: usize,
) -> Result<Duration, BenchError> {
    let peer = role.peer(node);
    let data = Bytes::from(payload(size)?);
    // Only the server receives into them.
    let held = if role == Role::Server { window } else { 0 };
    let mut buffers = (0..held)
        .map(|_| zeroed(size))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ack = [0u8; 1];
    let series = |count: u32| -> Result<(), BenchError> {
        for _ in 0..count {
            if role == Role::Client {
                let sends: navette::Result<Vec<_>> = (0..window)
                    .map(|_| node.isend(peer, TAG, data.clone()))
                    .collect();
                for outcome in wait_all(sends?) {
                    outcome?;
                }
            } else {
                let recvs = buffers
                    .drain(..)
                    .map(|b| node.irecv(peer, TAG, b))
                    .collect();
                for outcome in wait_all(recvs) {
                    buffers.push(outcome?.data);
                }
            }
        }
        if role == Role::Client {
            node.recv(peer, TAG + 1, &mut ack)?;
        } else {
            node.send(peer, TAG + 1, &ack)?;
        }
        Ok(())
    };
    let elapsed = time_series(warm, count, series)?;
    if role == Role::Server && buffers.iter().any(|b| b.as_slice() != &data[..]) {
        return Err(BenchError::Corrupt {
            pattern: "stream",
            implementation: "navette",
            size,
        });
    }
    Ok(elapsed)
}

fn raw_stream(
    raw: &mut RawTcp,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
    window: usize,
) -> Result<Duration, BenchError> {
    let data = payload(size)?;
    let mut buf = zeroed(size)?;
    let mut ack = [0u8; 1];
    let series = |count: u32| -> std::io::Result<()> {
        for _ in 0..u64::from(count).saturating_mul(window as u64) {
            if role == Role::Client {
                raw.send(&data)?;
            } else {
                raw.recv(&mut buf)?;
            }
        }
        if role == Role::Client {
            raw.recv(&mut ack)
        } else {
            raw.send(&ack)
        }
    };
    let elapsed = time_series(warm, count, series).map_err(BenchError::RawTcp)?;
    if role == Role::Server && buf != data {
        return Err(BenchError::Corrupt {
            pattern: "stream",
            implementation: "raw-tcp",
            size,
        });
    }
    Ok(elapsed)
}

/// The table header.
pub fn table_header(config: &BenchConfig) -> String {
    let (baseline, ratios) = match config.baseline {
        Some(Baseline::RawTcp) => (
            "   raw-tcp µs  raw MB/s   lat ratio  bw ratio",
            format!(
                "; ratios are navette / raw; tcp congestion control {}, raw alike",
                config.tcp_congestion
            ),
        ),
        None => ("", String::new()),
    };
    let (what, segments) = match config.pattern {
        Pattern::Multiseg => (
            "; size is per segment, µs the one-way time of a whole series, \
             MB/s its bytes over that",
            format!("{:>5} ", "segs"),
        ),
        Pattern::Indexed => (
            "; size is both blocks: 64 B EXPRESS and the rest CHEAPER, in separate memory",
            String::new(),
        ),
        Pattern::RpcRate => (
            "; T client threads calling at once, µs per call over all of them",
            format!("{:>5} ", "T"),
        ),
        Pattern::Migrate => (
            "; size is the task's state, µs per migration",
            String::new(),
        ),
        Pattern::Pingpong | Pattern::Stream | Pattern::Rpc => ("", String::new()),
    };
    let rate = if config.pattern == Pattern::RpcRate {
        format!(" {:>12}", "calls/s")
    } else {
        String::new()
    };
    format!(
        "navette bench {} over {} (one-way µs, MB/s = 10^6 B/s{what}{ratios})\n\
         {segments}{:>9} {:>7} {:>12} {:>10}{rate}{baseline}\n",
        config.pattern.name(),
        config.transport,
        "size",
        "iters",
        "navette µs",
        "MB/s"
    )
}

/// One table row.
pub fn table_row(f: &SizeFigures) -> String {
    let mut row = f
        .segments
        .or(f.threads)
        .map_or_else(String::new, |s| format!("{s:>5} "));
    row += &format!(
        "{:>9} {:>7} {:>12.3} {:>10.1}",
        crate::sizes::ShortSize(f.size),
        f.iterations,
        f.navette.latency_us,
        f.navette.bandwidth_mbps
    );
    if let Some(rate) = f.rate_per_s {
        row += &format!(" {rate:>12.0}");
    }
    if let Some(b) = f.baseline {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        row.push_str(&format!(
            " {:>12.3} {:>9.1} {:>11.3} {:>9.3}",
            b.latency_us,
            b.bandwidth_mbps,
            ratio(f.navette.latency_us, b.latency_us),
            ratio(f.navette.bandwidth_mbps, b.bandwidth_mbps)
        ));
    }
    row
}

/// The rows of the benchmark output document.
pub fn runs(config: &BenchConfig, figures: &[SizeFigures]) -> Vec<BenchRun> {
    let mut runs = Vec::new();
    for f in figures {
        let mut push = |implementation: &str, figure: Figure| {
            runs.push(BenchRun {
                pattern: config.pattern.name().to_owned(),
                transport: config.transport.clone(),
                implementation: implementation.to_owned(),
                size: f.size,
                latency_us: figure.latency_us,
                bandwidth_mbps: figure.bandwidth_mbps,
            });
        };
        push("navette", f.navette);
        if let Some(b) = f.baseline {
            push("raw-tcp", b);
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{BenchError, Pattern, SizeLimit, is_pattern, pattern, per_message, split};
    use crate::buffers::per;

    #[test]
    fn every_pattern_has_default_sizes_that_parse() {
        // What makes `BenchError::DefaultSizes` a bug rather than a user's
        // mistake.
        for &p in <Pattern as clap::ValueEnum>::value_variants() {
            let list = p.default_sizes();
            assert!(
                crate::sizes::parse_sizes(list).is_ok(),
                "{}: {list}",
                p.name()
            );
        }
    }

    #[test]
    fn setup_errors_say_what_they_carry() {
        let io = || std::io::Error::other("refused here");
        let cases = [
            (
                BenchError::WriteJson {
                    path: "/out/bench.json".into(),
                    source: io(),
                },
                "cannot write /out/bench.json: refused here",
            ),
            (
                BenchError::Executable(io()),
                "cannot find the navette executable: refused here",
            ),
            (
                BenchError::BaselineAddress {
                    address: "nowhere".into(),
                    source: "nowhere"
                        .parse::<std::net::SocketAddr>()
                        .expect_err("not an address"),
                },
                "bad baseline address \"nowhere\": invalid socket address syntax",
            ),
            (
                BenchError::CongestionRefused {
                    congestion: "loopback:reno".parse().expect("a setting"),
                    source: io(),
                },
                "congestion control loopback:reno: refused here",
            ),
            (
                BenchError::Size {
                    pattern: "indexed",
                    what: "a message",
                    size: 10,
                    limit: SizeLimit::UnderHeader { header: 64 },
                },
                "indexed: a message of 10 bytes: under its 64-byte header",
            ),
            (
                BenchError::NoChannel { segment: 65535 },
                "multiseg: segment 65535: no channel number left",
            ),
            (
                BenchError::Internal {
                    pattern: "rpc_rate",
                    what: "a client thread panicked",
                },
                "internal failure of the benchmark, rpc_rate: a client thread panicked",
            ),
        ];
        for (err, text) in cases {
            assert_eq!(err.to_string(), text);
            // The cause is in the message, and still reachable as a source
            // for whoever walks the chain.
            if let Some(source) = std::error::Error::source(&err) {
                assert!(text.ends_with(&source.to_string()), "{text}");
            }
        }
    }

    #[test]
    fn huge_counts_divide_without_overflow() {
        let hour = Duration::from_secs(3600);
        // 2 × u32::MAX round trips' halves: no u32 product to overflow.
        let each = per(hour, 2 * u64::from(u32::MAX));
        assert_eq!(each, Duration::from_nanos(419));
        assert_eq!(per(hour, 0), Duration::ZERO, "nothing to divide");
        // 10^15 ns over u32::MAX × 4096 messages: 56 ns each.
        let figure = per_message(8, Duration::from_secs(1_000_000), u32::MAX, 4096);
        assert!((figure.latency_us - 0.056).abs() < 1e-9, "{figure:?}");
        let none = per_message(8, hour, 0, 64);
        assert_eq!(none.latency_us, 0.0);
    }

    #[test]
    fn patterns_are_checked_in_place() {
        let piece = pattern(1000, 5000, 3).unwrap();
        assert!(is_pattern(&piece, 1000, 5000, 3));
        assert!(!is_pattern(&piece, 1000, 5000, 2), "another piece");
        assert!(!is_pattern(&piece[1..], 1000, 5000, 3), "shorter");
        let mut damaged = piece;
        damaged[999] ^= 1;
        assert!(!is_pattern(&damaged, 1000, 5000, 3));
    }

    #[test]
    fn slices_cover_the_iterations_without_empty_ones() {
        for (iterations, slices) in [(20_000, 8), (16, 8), (9, 8), (3, 8), (1, 8), (10, 1)] {
            let counts: Vec<u32> = split(iterations, slices).collect();
            assert_eq!(
                counts.iter().sum::<u32>(),
                iterations,
                "{iterations} in {slices}"
            );
            assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
            assert!(counts.len() <= slices as usize);
            let (min, max) = (counts.iter().min(), counts.iter().max());
            assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{counts:?}");
        }
    }
}
