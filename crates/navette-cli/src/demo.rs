//! `navette demo`: ping-pong and RPC-shaped messages between two ranks of a
//! [`SimCluster`], timed in the simulation's virtual time.
//!
//! Rank 0 and rank 1 each run on their own thread, since a blocking call on
//! one rank waits for the other to post; whichever thread waits drives the
//! whole simulated cluster. Times are read from [`SimCluster::now`] by rank 0
//! only, so they measure the modelled network and engine protocol, never the
//! speed of the machine running the demo.
//!
//! Every payload is filled with a pattern that depends on the size, the
//! iteration and the direction, and every byte received is checked.

use std::fmt;
use std::time::Duration;

use navette::sim::SimCluster;
use navette::{Gate, Node, ReceiveMode, SendMode};
use navette_sim::LinkSpec;

use crate::json::BenchRun;
use crate::verify::{Direction, fill, first_mismatch};

/// Sizes of the default run.
pub const DEFAULT_SIZES: &str = "0,8,64,1K,16K,64K,1M,16M";
/// Iterations per size below [`LARGE`], unless the user gives a count.
pub const DEFAULT_ITERATIONS: u32 = 20;
/// Iterations per size of [`LARGE`] bytes or more, unless the user gives a count.
pub const DEFAULT_LARGE_ITERATIONS: u32 = 5;
/// From this size on a message counts as large.
pub const LARGE: usize = 1 << 20;
/// Untimed exchanges before each timed series.
pub const WARMUP: u32 = 1;

const TAG_PINGPONG: u64 = 1;
const TAG_RPC_REQUEST: u64 = 2;
const TAG_RPC_REPLY: u64 = 3;
const CLIENT: u32 = 0;
const SERVER: u32 = 1;

/// The two message patterns of the demo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pattern {
    /// Tagged `send`/`recv`, echoed back.
    Pingpong,
    /// A Madeleine message (EXPRESS header, CHEAPER body), answered alike.
    Rpc,
}

impl Pattern {
    /// The pattern's name in the benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pingpong => "pingpong",
            Self::Rpc => "rpc",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What can make the demo fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoError {
    /// `--latency-us` out of range.
    #[error("--latency-us must be a number of microseconds above 0 and at most 1e9, not {0}")]
    BadLatency(f64),
    /// `--bandwidth-gbps` out of range.
    #[error("--bandwidth-gbps must be 0 (infinite) or a number of GB/s from 1e-9 to 1e6, not {0}")]
    BadBandwidth(f64),
    /// `--iterations 0`.
    #[error("--iterations must be at least 1")]
    NoIterations,
    /// No size to run.
    #[error("no size to run")]
    NoSizes,
    /// A Navette call failed.
    #[error("{pattern} of {size} bytes: rank {rank}: {source}")]
    Navette {
        /// The pattern running.
        pattern: Pattern,
        /// The message size.
        size: usize,
        /// The rank whose call failed.
        rank: u32,
        /// What the call returned.
        #[source]
        source: navette::Error,
    },
    /// A message arrived with another length than was sent.
    #[error("{pattern} of {size} bytes, iteration {iteration}: rank {rank} received {got} bytes")]
    WrongLength {
        /// The pattern running.
        pattern: Pattern,
        /// The message size.
        size: usize,
        /// The iteration (warm-up included, from 0).
        iteration: u64,
        /// The receiving rank.
        rank: u32,
        /// The length received (for RPC, the length in the header).
        got: u64,
    },
    /// A byte received differs from the byte sent.
    #[error(
        "{pattern} of {size} bytes, iteration {iteration}: rank {rank} received a wrong byte at offset {offset}"
    )]
    Corrupt {
        /// The pattern running.
        pattern: Pattern,
        /// The message size.
        size: usize,
        /// The iteration (warm-up included, from 0).
        iteration: u64,
        /// The receiving rank.
        rank: u32,
        /// The first wrong byte's offset in the payload.
        offset: usize,
    },
    /// A message buffer could not be allocated.
    #[error("{pattern} of {size} bytes: cannot allocate a buffer of {len} bytes")]
    Alloc {
        /// The pattern running.
        pattern: Pattern,
        /// The message size.
        size: usize,
        /// The buffer's length.
        len: usize,
        /// Why.
        #[source]
        source: std::collections::TryReserveError,
    },
    /// A rank's thread panicked.
    #[error("{pattern} of {size} bytes: the thread of rank {rank} panicked")]
    Panicked {
        /// The pattern running.
        pattern: Pattern,
        /// The message size.
        size: usize,
        /// The rank whose thread panicked.
        rank: u32,
    },
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    /// Message sizes in bytes, in the order to run them.
    pub sizes: Vec<usize>,
    /// Timed exchanges per size; `None` picks [`DEFAULT_ITERATIONS`] or,
    /// from [`LARGE`] bytes on, [`DEFAULT_LARGE_ITERATIONS`].
    pub iterations: Option<u32>,
    /// Seed of the simulated network.
    pub seed: u64,
    /// The link between the two ranks.
    pub link: LinkSpec,
}

impl DemoConfig {
    /// A configuration over a link of `latency_us` microseconds and
    /// `bandwidth_gbps` GB/s (10^9 bytes per second; 0 for infinite).
    pub fn new(
        sizes: Vec<usize>,
        iterations: Option<u32>,
        seed: u64,
        latency_us: f64,
        bandwidth_gbps: f64,
    ) -> Result<Self, DemoError> {
        if sizes.is_empty() {
            return Err(DemoError::NoSizes);
        }
        if iterations == Some(0) {
            return Err(DemoError::NoIterations);
        }
        Ok(Self {
            sizes,
            iterations,
            seed,
            link: LinkSpec::new(latency(latency_us)?, bandwidth(bandwidth_gbps)?),
        })
    }

    /// Timed exchanges for messages of `size` bytes.
    pub fn iterations_for(&self, size: usize) -> u32 {
        match self.iterations {
            Some(n) => n,
            None if size >= LARGE => DEFAULT_LARGE_ITERATIONS,
            None => DEFAULT_ITERATIONS,
        }
    }

    /// The model's floor for one message: latency + size / bandwidth.
    pub fn floor(&self, size: usize) -> Duration {
        self.link.latency + self.link.transmit_time(size)
    }
}

impl Default for DemoConfig {
    /// The default run over the sim's default link.
    fn default() -> Self {
        Self {
            sizes: crate::sizes::parse_sizes(DEFAULT_SIZES).expect("the default sizes parse"),
            iterations: None,
            seed: 0,
            link: LinkSpec::default(),
        }
    }
}

fn latency(us: f64) -> Result<Duration, DemoError> {
    if !(us.is_finite() && us > 0.0 && us <= 1e9) {
        return Err(DemoError::BadLatency(us));
    }
    Ok(Duration::from_nanos(((us * 1e3).round() as u64).max(1)))
}

fn bandwidth(gbps: f64) -> Result<u64, DemoError> {
    if gbps == 0.0 {
        return Ok(0);
    }
    if !(gbps.is_finite() && (1e-9..=1e6).contains(&gbps)) {
        return Err(DemoError::BadBandwidth(gbps));
    }
    Ok((gbps * 1e9).round() as u64)
}

/// The measurements of one size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeResult {
    /// Message size in bytes.
    pub size: usize,
    /// Timed exchanges of each pattern.
    pub iterations: u32,
    /// Simulated one-way time of a tagged message.
    pub pingpong: Duration,
    /// Simulated one-way time of an RPC-shaped message.
    pub rpc: Duration,
    /// latency + size / bandwidth of the link.
    pub floor: Duration,
}

impl SizeResult {
    /// Ping-pong bandwidth in MB/s (10^6 bytes per second).
    pub fn pingpong_mbps(&self) -> f64 {
        mbps(self.size, self.pingpong)
    }

    /// Ping-pong time over the model's floor.
    pub fn ratio(&self) -> f64 {
        self.pingpong.as_secs_f64() / self.floor.as_secs_f64()
    }
}

fn mbps(size: usize, time: Duration) -> f64 {
    if size == 0 || time.is_zero() {
        0.0
    } else {
        size as f64 / time.as_secs_f64() / 1e6
    }
}

fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}

/// The results of a whole run.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoReport {
    /// What was run.
    pub config: DemoConfig,
    /// One entry per size, in the order run.
    pub results: Vec<SizeResult>,
}

impl DemoReport {
    /// The rows of the benchmark output document: per size, navette's
    /// pingpong and rpc, each beside the model's floor (impl `model`).
    pub fn runs(&self) -> Vec<BenchRun> {
        let row = |pattern: Pattern, implementation: &str, size: usize, time: Duration| BenchRun {
            pattern: pattern.name().to_owned(),
            transport: "sim".to_owned(),
            implementation: implementation.to_owned(),
            size,
            latency_us: micros(time),
            bandwidth_mbps: mbps(size, time),
        };
        let mut runs = Vec::new();
        for r in &self.results {
            for (pattern, time) in [(Pattern::Pingpong, r.pingpong), (Pattern::Rpc, r.rpc)] {
                runs.push(row(pattern, "navette", r.size, time));
                runs.push(row(pattern, "model", r.size, r.floor));
            }
        }
        runs
    }

    /// The whole table: [`Self::header`] then one row per size.
    pub fn table(&self) -> String {
        let mut out = self.header();
        for r in &self.results {
            out.push_str(&row(r));
            out.push('\n');
        }
        out
    }

    /// What was run and how to read the figures, then the column titles.
    pub fn header(&self) -> String {
        header(&self.config)
    }
}

/// The first line of the column titles, by which tests find the table.
pub const TABLE_HEADER: &str =
    "    size  iters   pingpong µs       MB/s        rpc µs     floor µs  pingpong/floor";
const TABLE_SUBHEADER: &str = "                 one-way, sim  pingpong   one-way, sim  lat+size/bw";

/// The explanation and column titles printed before the rows.
pub fn header(config: &DemoConfig) -> String {
    let link = &config.link;
    let bandwidth = match link.bandwidth {
        0 => "infinite".to_owned(),
        b => format!("{} MB/s", b as f64 / 1e6),
    };
    format!(
        "navette demo: 2 ranks over the sim driver, seed {seed}\n\
         Times are SIMULATED virtual time of the sim driver (no real network, \
         not wall-clock time).\n\
         Link: latency {lat} µs, bandwidth {bandwidth}. One-way time = \
         virtual time of the timed round trips / (2 × iterations), after {WARMUP} \
         warm-up round trip.\n\
         pingpong: tagged send/recv echoed back. rpc: 8-byte header EXPRESS, then \
         the body CHEAPER into a buffer allocated after the header; reply alike.\n\n\
         {TABLE_HEADER}\n{TABLE_SUBHEADER}\n",
        seed = config.seed,
        lat = micros(link.latency),
    )
}

/// One table row.
pub fn row(r: &SizeResult) -> String {
    format!(
        "{:>8} {:>6} {:>13.3} {:>10.1} {:>13.3} {:>12.3} {:>15.3}",
        crate::sizes::ShortSize(r.size),
        r.iterations,
        micros(r.pingpong),
        r.pingpong_mbps(),
        micros(r.rpc),
        micros(r.floor),
        r.ratio(),
    )
}

/// Runs the demo, calling `on_result` after each size.
pub fn run(
    config: &DemoConfig,
    mut on_result: impl FnMut(&SizeResult),
) -> Result<DemoReport, DemoError> {
    let cluster = SimCluster::builder(2)
        .seed(config.seed)
        .link(config.link.clone())
        .build();
    let mut results = Vec::with_capacity(config.sizes.len());
    for &size in &config.sizes {
        let iterations = config.iterations_for(size);
        let series = Series {
            cluster: &cluster,
            size,
            iterations,
        };
        let result = SizeResult {
            size,
            iterations,
            pingpong: series.run(Pattern::Pingpong)?,
            rpc: series.run(Pattern::Rpc)?,
            floor: config.floor(size),
        };
        on_result(&result);
        results.push(result);
    }
    Ok(DemoReport {
        config: config.clone(),
        results,
    })
}

/// One timed series: a pattern at one size.
#[derive(Clone, Copy, Debug)]
struct Series<'c> {
    cluster: &'c SimCluster,
    size: usize,
    iterations: u32,
}

/// A rank's view of a series while it runs.
#[derive(Debug)]
struct Side<'c> {
    series: Series<'c>,
    pattern: Pattern,
    node: &'c Node,
    peer: Gate,
    /// The first bad byte or length seen; the exchange goes on so that the
    /// peer is not left waiting.
    damage: Option<DemoError>,
}

impl Series<'_> {
    /// Runs `pattern` on both ranks; returns the one-way time.
    fn run(self, pattern: Pattern) -> Result<Duration, DemoError> {
        let side = |rank: u32| Side {
            series: self,
            pattern,
            node: self.cluster.node(rank),
            peer: self.cluster.node(rank).gate(1 - rank),
            damage: None,
        };
        let (client, server) = std::thread::scope(|s| {
            let server = s.spawn(|| side(SERVER).serve());
            let client = side(CLIENT).call();
            (client, server.join())
        });
        let panicked = DemoError::Panicked {
            pattern,
            size: self.size,
            rank: SERVER,
        };
        let server = server.map_err(|_| panicked);
        let elapsed = client?;
        server??;
        Ok(crate::buffers::per(elapsed, 2 * u64::from(self.iterations)))
    }

    /// Exchanges of the series, warm-up included.
    fn exchanges(self) -> u64 {
        u64::from(WARMUP) + u64::from(self.iterations)
    }
}

impl Side<'_> {
    /// Rank 0: sends first, times the series.
    fn call(mut self) -> Result<Duration, DemoError> {
        let mut start = self.series.cluster.now();
        for iteration in 0..self.series.exchanges() {
            if iteration == u64::from(WARMUP) {
                start = self.series.cluster.now();
            }
            self.send(iteration, Direction::Request)?;
            self.receive(iteration, Direction::Reply)?;
        }
        let elapsed = self.series.cluster.now() - start;
        self.damage.map_or(Ok(elapsed), Err)
    }

    /// Rank 1: answers every message.
    fn serve(mut self) -> Result<(), DemoError> {
        for iteration in 0..self.series.exchanges() {
            self.receive(iteration, Direction::Request)?;
            self.send(iteration, Direction::Reply)?;
        }
        self.damage.map_or(Ok(()), Err)
    }

    fn send(&mut self, iteration: u64, dir: Direction) -> Result<(), DemoError> {
        let size = self.series.size;
        let mut body = self.zeroed(size)?;
        fill(&mut body, size, iteration, dir);
        let (tag, node, peer) = (tag(self.pattern, dir), self.node, self.peer);
        let sent = match self.pattern {
            Pattern::Pingpong => node.send(peer, tag, &body).map(drop),
            Pattern::Rpc => send_rpc(node, peer, tag, &body),
        };
        sent.map_err(|e| self.failed(e))
    }

    fn receive(&mut self, iteration: u64, dir: Direction) -> Result<(), DemoError> {
        let (tag, node, peer) = (tag(self.pattern, dir), self.node, self.peer);
        let size = self.series.size;
        let (len, body) = match self.pattern {
            Pattern::Pingpong => {
                let mut body = self.zeroed(size)?;
                let status = node
                    .recv(peer, tag, &mut body)
                    .map_err(|e| self.failed(e))?;
                (status.len as u64, body)
            }
            // Allocate no more than the expected size plus one, so that a
            // wrong header still shows as a wrong length.
            Pattern::Rpc => self.receive_rpc(tag, size as u64 + 1)?,
        };
        self.check(iteration, dir, len, &body);
        Ok(())
    }

    /// Reads the header EXPRESS, allocates the body it announces (at most
    /// `max_len` bytes), and receives the body CHEAPER straight into it.
    /// Returns the announced length and the body (empty when over
    /// `max_len`).
    fn receive_rpc(&self, tag: u64, max_len: u64) -> Result<(u64, Vec<u8>), DemoError> {
        let failed = |e| self.failed(e);
        let mut msg = self.node.begin_unpacking(self.peer, tag).map_err(failed)?;
        let mut header = [0u8; 8];
        msg.unpack_express(&mut header, SendMode::Later)
            .map_err(failed)?;
        let len = u64::from_le_bytes(header);
        let Some(fits) = usize::try_from(len).ok().filter(|_| len <= max_len) else {
            // Dropping the message abandons it; the caller reports the length.
            return Ok((len, Vec::new()));
        };
        let mut body = self.zeroed(fits)?;
        msg.unpack_cheaper(&mut body, SendMode::Cheaper)
            .map_err(failed)?;
        msg.end_unpacking().map_err(failed)?;
        Ok((len, body))
    }

    fn check(&mut self, iteration: u64, dir: Direction, len: u64, body: &[u8]) {
        if self.damage.is_some() {
            return;
        }
        let (pattern, size, rank) = (self.pattern, self.series.size, self.node.rank());
        if len != size as u64 || body.len() != size {
            self.damage = Some(DemoError::WrongLength {
                pattern,
                size,
                iteration,
                rank,
                got: len,
            });
        } else if let Some(offset) = first_mismatch(body, size, iteration, dir) {
            self.damage = Some(DemoError::Corrupt {
                pattern,
                size,
                iteration,
                rank,
                offset,
            });
        }
    }

    /// `len` zero bytes, or the error saying they could not be allocated.
    fn zeroed(&self, len: usize) -> Result<Vec<u8>, DemoError> {
        crate::buffers::filled(len, |_| 0).map_err(|source| DemoError::Alloc {
            pattern: self.pattern,
            size: self.series.size,
            len,
            source,
        })
    }

    fn failed(&self, source: navette::Error) -> DemoError {
        DemoError::Navette {
            pattern: self.pattern,
            size: self.series.size,
            rank: self.node.rank(),
            source,
        }
    }
}

fn tag(pattern: Pattern, dir: Direction) -> u64 {
    match (pattern, dir) {
        (Pattern::Pingpong, _) => TAG_PINGPONG,
        (Pattern::Rpc, Direction::Request) => TAG_RPC_REQUEST,
        (Pattern::Rpc, Direction::Reply) => TAG_RPC_REPLY,
    }
}

/// An RPC-shaped message: the body's length as 8 little-endian bytes, for
/// the receiver to read at once, then the body, lent until the end.
///
/// The header goes LATER rather than SAFER so that both pieces are handed
/// to the engine together by `end_packing`. A SAFER piece is submitted as
/// soon as the next one is packed; in the multi-threaded sim the peer's
/// thread may then let virtual time run on before this thread submits the
/// body, which made the RPC figures vary from run to run.
fn send_rpc(node: &Node, peer: Gate, tag: u64, body: &[u8]) -> navette::Result<()> {
    let header = (body.len() as u64).to_le_bytes();
    let mut msg = node.begin_packing(peer, tag)?;
    msg.pack(&header, SendMode::Later, ReceiveMode::Express)?;
    msg.pack(body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
    msg.end_packing()
}
