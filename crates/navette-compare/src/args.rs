//! The command line of `bench/compare` (and of `navette-compare`, which the
//! script calls with the paths of the programs it built).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::patterns::Pattern;
use crate::sizes::SizeList;

/// Default message sizes.
pub const DEFAULT_SIZES: &str = "8,64,512,4K,32K,256K,1M,4M,16M";

/// What is compared: Navette's driver and the peers' matching transports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Shared memory: navette's shm driver, Open MPI's vader BTL, UCX's
    /// sm transports (posix, sysv, cma), and the physical floor.
    Shm,
    /// TCP over loopback: navette's tcp driver and its raw TCP baseline,
    /// Open MPI's tcp BTL, UCX's tcp transport.
    Tcp,
}

impl Transport {
    /// The name in the benchmark output and in `NAVETTE_DRIVER`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Shm => "shm",
            Self::Tcp => "tcp",
        }
    }
}

const ABOUT: &str = "Navette beside Open MPI, UCX and the physical floor, in one run";

const LONG_ABOUT: &str = "\
Navette beside Open MPI, UCX and the physical floor, in one run.

bench/compare installs what is missing (Debian's openmpi-bin, libopenmpi-dev,
ucx-utils, build-essential, fonts-dejavu-core; apt-get update only if an
install fails), builds navette, this tool, bench/mpi/pingpong.c (mpicc) and
bench/floor/floor.c (cc), then measures, for each message size, over the
chosen transport:

  navette    `navette bench pingpong --sizes … --json FILE` with
             NAVETTE_DRIVER=shm|tcp, on 2 ranks of `navette run -n 2`, rank
             0 pinned to core 0 and rank 1 to core 1 (taskset); over tcp
             with `--baseline raw-tcp`, which gives the raw-tcp rows
  openmpi    bench/mpi/pingpong.c: blocking MPI_Send/MPI_Recv round trips,
             mpirun -n 2 --bind-to core --map-by core --mca pml ob1
             --mca oob_tcp_if_include lo and --mca btl vader,self (shm) or
             --mca btl tcp,self --mca btl_tcp_if_include lo (tcp)
  ucx        ucx_perftest server and client on 127.0.0.1, pinned to cores 0
             and 1 (taskset), UCX_TLS=sm,self (shm) or tcp,self with
             UCX_NET_DEVICES=lo (tcp); latency from -t tag_lat (ping-pong,
             one-way), bandwidth from -t tag_bw (streaming: many messages
             in flight, so above size / latency at small sizes)
  cacheline  (shm) a cache line passed back and forth between two threads
             pinned to cores 0 and 1: the one-way floor of any shm latency
  memcpy     (shm) single-thread memcpy bandwidth per size

Latency is one-way (half a round trip) in µs; bandwidth is in MB/s = 10^6
bytes per second (navette and Open MPI: size / one-way time; UCX's MiB/s are
converted). The table gives navette / best peer for latency (best = lowest of
openmpi and ucx) and for bandwidth (best = highest).

A tool that cannot run is skipped with its reason, printed and recorded
under \"skipped\" in results.json; the rest is measured all the same. For
instance, as long as navette has no shared-memory driver, NAVETTE_DRIVER=shm
is refused and the shm navette rows are skipped as \"unavailable\"; they
appear, with no change here, once the driver exists.

Output in --out DIR:
  results.json           the benchmark output document of ARCHITECTURE.md
                         (navette_version, host, date, runs[], and skipped[])
  raw/                   each tool's standard output (.out) and error (.err),
                         and commands.txt with every command line and its
                         environment
  PATTERN-TRANSPORT.png  latency and bandwidth against size, log-log, one
                         curve per implementation

Exit status: 0 when everything ran or was skipped for a known reason, 1 when
a tool failed (its rows are skipped, the rest is still written), 2 on bad
arguments.";

/// `bench/compare [options] --out DIR`.
#[derive(Debug, Parser)]
#[command(
    name = "bench/compare",
    bin_name = "bench/compare",
    about = ABOUT,
    long_about = LONG_ABOUT,
    disable_help_flag = true
)]
pub struct Cli {
    /// Where results.json, raw/ and the plots go (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// What is compared.
    #[arg(long, value_enum, default_value_t = Transport::Shm)]
    pub transport: Transport,
    /// Message sizes in bytes, comma-separated; K, M, G are powers of 1024.
    #[arg(long, default_value = DEFAULT_SIZES)]
    pub sizes: SizeList,
    /// Timed round trips per size for navette, Open MPI and UCX [default:
    /// navette bench's rule, 1 GiB of traffic per size, 8 to 100000]; the
    /// floor picks its own.
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Rounds of the whole comparison, one tool after the other in each:
    /// every figure is the best of the rounds (lowest latency, highest
    /// bandwidth), so that a host whose speed drifts (a virtual machine's
    /// neighbours) favours no tool.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Patterns to compare, comma-separated (only pingpong so far).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pingpong")]
    pub patterns: Vec<Pattern>,
    /// Seconds after which a tool that has not finished is killed and its
    /// rows skipped.
    #[arg(long, default_value_t = 180, value_name = "SECS")]
    pub timeout: u64,
    /// The navette binary (set by bench/compare).
    #[arg(long, default_value = "target/release/navette")]
    pub navette: PathBuf,
    /// navette could not be built: skip its rows for this reason (set by
    /// bench/compare).
    #[arg(long, value_name = "REASON")]
    pub navette_unbuilt: Option<String>,
    /// The MPI ping-pong built from bench/mpi/pingpong.c (set by bench/compare).
    #[arg(long, value_name = "PATH", default_value = "mpi-pingpong")]
    pub mpi_pingpong: PathBuf,
    /// The floor program built from bench/floor/floor.c (set by bench/compare).
    #[arg(long, value_name = "PATH", default_value = "floor")]
    pub floor: PathBuf,
    /// Print this help.
    #[arg(short = 'h', long = "help", action = ArgAction::HelpLong)]
    pub help: Option<bool>,
}

/// The programs a pattern may start.
#[derive(Clone, Debug)]
pub struct Programs {
    /// `navette`.
    pub navette: PathBuf,
    /// Why there is no `navette` to run, if so.
    pub navette_unbuilt: Option<String>,
    /// The MPI ping-pong.
    pub mpi_pingpong: PathBuf,
    /// The floor program.
    pub floor: PathBuf,
}

impl Cli {
    /// The time limit of one tool run.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }

    /// The programs, as given.
    pub fn programs(&self) -> Programs {
        Programs {
            navette: self.navette.clone(),
            navette_unbuilt: self.navette_unbuilt.clone(),
            mpi_pingpong: self.mpi_pingpong.clone(),
            floor: self.floor.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_and_overrides() {
        let cli = Cli::try_parse_from(["compare", "--out", "/tmp/x"]).unwrap();
        assert_eq!(cli.transport, Transport::Shm);
        assert_eq!(cli.sizes.0.len(), 9);
        assert_eq!(cli.patterns, vec![Pattern::Pingpong]);
        let cli = Cli::try_parse_from([
            "compare",
            "--out",
            "d",
            "--transport",
            "tcp",
            "--sizes",
            "1K,2M",
            "--iterations",
            "7",
        ])
        .unwrap();
        assert_eq!(cli.transport, Transport::Tcp);
        assert_eq!(cli.sizes.0, vec![1024, 2 << 20]);
        assert_eq!(cli.iterations, Some(7));
        assert!(
            Cli::try_parse_from(["compare"]).is_err(),
            "--out is required"
        );
        assert!(Cli::try_parse_from(["compare", "--out", "d", "--patterns", "rpc"]).is_err());
    }
}
