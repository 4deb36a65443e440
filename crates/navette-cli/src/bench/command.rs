//! `navette bench PATTERN [options]`: run as a rank program under a
//! launcher (`navette run -n 2 -- navette bench pingpong`), or alone, in
//! which case it starts its own two ranks with the embedded launcher.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use navette::tcp::Congestion;
use navette::{RuntimeConfig, init_with};
use navette_session::{Bootstrap, env};

use super::document::{self, BenchOutput};
use super::{
    Baseline, BenchConfig, BenchError, Memory, Pattern, run_rank, table_header, table_row,
};
use crate::sizes::SizeList;

/// Environment variable that forces the driver: `tcp` or `shm`.
pub use navette::DRIVER_VAR;

/// Default sizes of `navette bench`: 1 B to 16 MiB.
pub const DEFAULT_SIZES: &str = "1,8,64,512,4K,32K,256K,1M,4M,16M";

/// Default sizes of `navette bench multiseg`: bytes per segment.
pub const MULTISEG_SIZES: &str = "4,64,1K";

/// Default size of `navette bench indexed`: the large block (the message
/// has 64 bytes more).
pub const INDEXED_SIZES: &str = "256K";

/// Default segments per series of `navette bench multiseg`.
pub const DEFAULT_SEGMENTS: &str = "8,16";

/// Default sizes of `navette bench rpc`: the call's body.
pub const RPC_SIZES: &str = "0,64,1K,16K,256K,1M";

/// Default size of `navette bench migrate`: the task's state, 650 bytes
/// as in PM2's thread migration measurements.
pub const MIGRATE_SIZES: &str = "650";

/// Default size of `navette bench rpc_rate`: the call's body.
pub const RPC_RATE_SIZES: &str = "0";

/// Default client threads of `navette bench rpc_rate`.
pub const DEFAULT_THREADS: &str = "1,4,16";

impl Pattern {
    /// The sizes measured when `--sizes` is not given.
    pub fn default_sizes(self) -> &'static str {
        match self {
            Self::Multiseg => MULTISEG_SIZES,
            Self::Indexed => INDEXED_SIZES,
            Self::Rpc => RPC_SIZES,
            Self::Migrate => MIGRATE_SIZES,
            Self::RpcRate => RPC_RATE_SIZES,
            Self::Pingpong | Self::Stream => DEFAULT_SIZES,
        }
    }
}

/// Arguments of `navette bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub pattern: Pattern,
    /// Message sizes, comma-separated; suffixes K, M, G are powers of 1024;
    /// each at most 1G. multiseg: bytes per segment; indexed: the large block (the message
    /// has a 64-byte block more); rpc, rpc_rate: the call's body; migrate:
    /// the task's state, 25 B to 64K [default: 1,8,64,512,4K,32K,256K,1M,4M,16M;
    /// multiseg 4,64,1K; indexed 256K; rpc 0,64,1K,16K,256K,1M; migrate
    /// 650; rpc_rate 0].
    #[arg(long)]
    pub sizes: Option<SizeList>,
    /// Segments per series of multiseg, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SEGMENTS)]
    pub segments: Vec<usize>,
    /// Client threads of rpc_rate, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_THREADS)]
    pub threads: Vec<usize>,
    /// Timed iterations per size, at least 1 [default: more for small
    /// sizes; migrate 1000 round trips; rpc_rate: calls over all threads].
    #[arg(long, value_parser = crate::args::parse_iterations)]
    pub iterations: Option<u32>,
    /// Messages in flight per iteration of `stream`: 1 to 4096, whose bytes
    /// (window × size) are at most 4 GiB.
    #[arg(long, default_value_t = 64, value_parser = crate::args::parse_window)]
    pub window: usize,
    /// Also measure this baseline between the same ranks, in the same run.
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// Memory of indexed's large blocks: heap (a Vec each) or huge (a
    /// navette::HugeBuffer each, backed by transparent huge pages, which
    /// the kernel's single copy over shm moves faster).
    #[arg(long, value_enum, default_value_t = Memory::Heap)]
    pub memory: Memory,
    /// Write the results as a benchmark output JSON document (rank 0).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs `navette bench`; the exit code when it launched its own ranks.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<Option<i32>, BenchError> {
    let sizes = match &args.sizes {
        Some(sizes) => sizes.0.clone(),
        None => {
            let list = args.pattern.default_sizes();
            crate::sizes::parse_sizes(list).map_err(|source| BenchError::DefaultSizes {
                pattern: args.pattern.name(),
                list,
                source,
            })?
        }
    };
    let mut config = BenchConfig {
        pattern: args.pattern,
        sizes,
        segments: args.segments.clone(),
        threads: args.threads.clone(),
        iterations: args.iterations,
        window: args.window,
        baseline: args.baseline,
        memory: args.memory,
        // Known once the node runs.
        transport: String::new(),
        tcp_congestion: Congestion::default(),
        strategy: document::strategy_from_env(),
    };
    // Checked before any rank starts: a bad set of cases is reported once,
    // by the command the user ran.
    let cases = super::cases(&config)?.len();
    if std::env::var_os(env::BOOTSTRAP).is_none() {
        return Ok(Some(self_launch()?));
    }
    let bootstrap: Arc<dyn Bootstrap> = Arc::from(navette_session::from_env()?);
    two_ranks(bootstrap.as_ref(), "navette bench")?;
    let runtime = RuntimeConfig::default();
    config.tcp_congestion = runtime.tcp.congestion.clone().from_env()?;
    let node = init_with(Arc::clone(&bootstrap), runtime)?;
    config.transport = node.driver_name().to_owned();
    let rank = node.rank();
    let progress = progress_bar(rank, cases);
    // While the bar draws on the terminal, the table goes there too, above
    // it (our standard output is the launcher's pipe: its lines would land
    // in the middle of the bar).
    let mut write_error = None;
    let mut emit = |text: &str| {
        if progress.is_hidden() {
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                write_error.get_or_insert(e);
            }
        } else {
            progress.println(text.trim_end());
        }
    };
    if rank == 0 {
        emit(&table_header(&config));
    }
    let figures = run_rank(&node, bootstrap.as_ref(), &config, |f| {
        progress.inc(1);
        emit(&format!("{}\n", table_row(f)));
    })?;
    progress.finish_and_clear();
    node.finalize()?;
    if let Some(e) = write_error {
        return Err(BenchError::Output(e));
    }
    if let (0, Some(path)) = (rank, &args.json) {
        BenchOutput::new(document::rows(&config, &figures))
            .write(path)
            .map_err(|source| BenchError::WriteJson {
                path: path.clone(),
                source,
            })?;
        writeln!(out, "Wrote {}", path.display()).map_err(BenchError::Output)?;
    }
    Ok(None)
}

/// Refuses a job of fewer than 2 ranks: rank 0 exchanges with rank 1
/// (ranks from 2 on take no part).
fn two_ranks(bootstrap: &dyn Bootstrap, command: &'static str) -> Result<(), BenchError> {
    match bootstrap.size() {
        ranks @ 0..2 => Err(BenchError::Ranks { command, ranks }),
        _ => Ok(()),
    }
}

/// `navette demo`: on two ranks of the embedded launcher, over the default
/// driver (shared memory; `NAVETTE_DRIVER=tcp` for tcp), a ping-pong and an
/// RPC-shaped message — over tcp each beside raw TCP between the same
/// ranks; rank 0 prints the tables. `iterations` as `navette bench`'s
/// (by default [`super::default_iterations`]: 1 GiB of traffic per size,
/// 8 to 100 000 round trips).
pub fn demo(
    sizes: &[usize],
    iterations: Option<u32>,
    out: &mut dyn Write,
) -> Result<Option<i32>, BenchError> {
    if std::env::var_os(env::BOOTSTRAP).is_none() {
        return Ok(Some(self_launch()?));
    }
    let bootstrap: Arc<dyn Bootstrap> = Arc::from(navette_session::from_env()?);
    two_ranks(bootstrap.as_ref(), "navette demo")?;
    let runtime = RuntimeConfig::default();
    let tcp_congestion = runtime.tcp.congestion.clone().from_env()?;
    let node = init_with(Arc::clone(&bootstrap), runtime)?;
    let rank = node.rank();
    let mut write_error = None;
    let mut emit = |text: std::fmt::Arguments<'_>| {
        if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
            write_error.get_or_insert(e);
        }
    };
    for pattern in [Pattern::Pingpong, Pattern::Rpc] {
        let config = BenchConfig {
            pattern,
            sizes: sizes.to_vec(),
            segments: Vec::new(),
            threads: Vec::new(),
            iterations,
            window: 1,
            baseline: (node.driver_name() == "tcp").then_some(Baseline::RawTcp),
            memory: Memory::Heap,
            transport: node.driver_name().into(),
            tcp_congestion: tcp_congestion.clone(),
            strategy: document::strategy_from_env(),
        };
        if rank == 0 {
            emit(format_args!("\n{}", table_header(&config)));
        }
        // Each row as it comes; a failed write ends nothing before the
        // peer is done (it would wait for us), and is reported at the end.
        run_rank(&node, bootstrap.as_ref(), &config, |f| {
            emit(format_args!("{}\n", table_row(f)));
        })?;
    }
    if rank == 0 {
        emit(format_args!(
            "\nEvery message was verified byte for byte.\n"
        ));
    }
    node.finalize()?;
    match write_error {
        Some(e) => Err(BenchError::Output(e)),
        None => Ok(None),
    }
}

/// A bar on rank 0's standard error, drawn only when it is a terminal.
fn progress_bar(rank: u32, cases: usize) -> indicatif::ProgressBar {
    if rank != 0 {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(cases as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} sizes, {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Starts two ranks of this very command with the embedded launcher and
/// returns the job's exit code.
fn self_launch() -> Result<i32, BenchError> {
    let program = std::env::current_exe().map_err(BenchError::Executable)?;
    let mut command: Vec<OsString> = vec![program.into_os_string()];
    command.extend(std::env::args_os().skip(1));
    let args = crate::run::RunArgs {
        ranks: 2,
        no_prefix: true,
        no_fail_fast: false,
        timeout: None,
        command,
    };
    let mut config = args.config();
    // Rank 0 draws the progress bar on our terminal, if we have one.
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        config.inherit_stderr = Some(0);
    }
    Ok(crate::run::launch_config(config))
}
