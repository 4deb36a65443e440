//! The command line of `bench/compare` (and of `navette-compare`, which the
//! script calls with the paths of the programs it built).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
pub use navette_cli::bench::Memory;

use crate::patterns::{Pattern, parse_patterns};
use crate::sizes::SizeList;

/// Default message sizes of pingpong.
pub const DEFAULT_SIZES: &str = "8,64,512,4K,32K,256K,1M,4M,16M";

/// Default segments per series of multiseg.
pub const DEFAULT_SEGMENTS: &str = navette_cli::bench::command::DEFAULT_SEGMENTS;

/// Default client threads of rpc_rate.
pub const DEFAULT_THREADS: &str = crate::patterns::mpi::DEFAULT_THREADS;

/// A checked, non-empty list of patterns (`multiseg,indexed`), in order,
/// each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternList(pub Vec<Pattern>);

/// One segment count: 1 to the most `navette bench multiseg` takes.
fn parse_segments(item: &str) -> Result<usize, String> {
    let most = navette_cli::bench::multiseg::MAX_SEGMENTS;
    match item.trim().parse::<usize>() {
        Ok(n) if (1..=most).contains(&n) => Ok(n),
        _ => Err(format!("{item:?}: segments are counted from 1 to {most}")),
    }
}

/// One thread count of rpc_rate: 1 to the most `bench/mpi/rpc_rate.c`
/// takes.
fn parse_threads(item: &str) -> Result<usize, String> {
    let most = crate::patterns::mpi::MAX_THREADS;
    match item.trim().parse::<usize>() {
        Ok(n) if (1..=most).contains(&n) => Ok(n),
        _ => Err(format!("{item:?}: threads are counted from 1 to {most}")),
    }
}

impl std::str::FromStr for PatternList {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, String> {
        parse_patterns(list).map(Self)
    }
}

/// What is compared: Navette's driver and the peers' matching transports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Shared memory: navette's shm driver, Open MPI's vader BTL, UCX's
    /// sm transports (posix, sysv, cma; also MPICH's), and the physical
    /// floor.
    Shm,
    /// TCP over loopback: navette's tcp driver and its raw TCP baseline,
    /// Open MPI's tcp BTL, UCX's tcp transport (also MPICH's).
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

const ABOUT: &str = "Navette beside Open MPI, MPICH, UCX and the physical floor, in one run";

const LONG_ABOUT: &str = "\
Navette beside Open MPI, MPICH, UCX and the physical floor, in one run.

bench/compare installs what is missing (Debian's openmpi-bin, libopenmpi-dev,
mpich, libmpich-dev, ucx-utils, build-essential, fonts-dejavu-core; apt-get
update only if an install fails), builds navette, this tool,
bench/mpi/pingpong.c (mpicc.openmpi), bench/mpi/multiseg.c, indexed.c,
rpc.c, migrate.c and rpc_rate.c (each with mpicc.openmpi and with
mpicc.mpich) and bench/floor/floor.c (cc), then measures each pattern of
--patterns over the chosen transport.

pingpong (the default), for each message size:

  navette    `navette bench pingpong --sizes … --json FILE` with
             NAVETTE_DRIVER=shm|tcp, on 2 ranks of `navette run -n 2`, rank
             0 pinned to core 0 and rank 1 to core 1 (taskset); over tcp
             with `--baseline raw-tcp`, which gives the raw-tcp rows
  openmpi    bench/mpi/pingpong.c: blocking MPI_Send/MPI_Recv round trips,
             mpirun.openmpi -n 2 --bind-to core --map-by core --mca pml ob1
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

multiseg and indexed, navette beside both MPIs:

  multiseg   each ping and each pong is a series of S segments (--segments,
             8 then 16) of SIZE bytes (--sizes, default 4,64,1K), each sent
             by its own non-blocking send: navette bench multiseg puts
             segment k on its own channel with tag k; bench/mpi/multiseg.c on
             its own MPI_Comm_dup communicator (MPI_Irecv posted first,
             MPI_Isend per segment, MPI_Waitall). Rows carry `segments` and
             `size` = bytes per segment; latency_us is the one-way time of
             the whole series.
  indexed    one message made of a 64-byte block and a large block (--sizes,
             default 256K) in separate memory: navette bench indexed packs
             the first EXPRESS and the second CHEAPER (Madeleine pack/
             unpack); bench/mpi/indexed.c sends 1 element of an
             MPI_Type_create_hindexed over the two blocks. Rows carry `size`
             = both blocks (64 + 262144 by default). The large blocks (sent
             and received into) are in the memory --memory names: by
             default huge (navette bench indexed --memory huge, floor
             indexed -m huge: a mapping of their own backed by transparent
             huge pages, whose pages the kernel's single copy pins
             together), while each MPI runs in each round with -m heap and
             with -m huge (bench/mpi/indexed.c) and keeps the faster; with
             --memory heap, every tool on the heap.

  navette    as for pingpong, with NAVETTE_DRIVER=shm|tcp; its rows carry
             `strategy` (NAVETTE_STRATEGY, else aggregate)
  openmpi    mpirun.openmpi with the flags above (vader or tcp BTL)
  mpich      mpirun.mpich -launcher fork -n 2 -bind-to user:0,1. Debian's
             MPICH is ch4:ucx and its local ranks talk through UCX, so:
             shm: UCX_TLS=sm,self; tcp: MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self
             UCX_NET_DEVICES=lo. UCX_LOG_LEVEL=info logs the transports
             really used; they are printed and kept under \"notes\".
  floor      (multiseg over shm) bench/floor/floor.c series: the same
             series written plainly between two threads on cores 0 and 1
             (the segments written into ring cells whose stamps go last,
             each matched to its posted receive and copied out): about the
             least the pattern needs on this host. A note gives the faster
             MPI's µs / floor's µs: about the most any implementation could
             reach.
             (indexed over shm) bench/floor/floor.c indexed: the same
             message between two processes on cores 0 and 1, its large
             block moved only by the kernel's single copy (the head and the
             block's address through shared memory, then one
             process_vm_readv by the receiver, or the two halves read and
             written at once by both sides, whichever is faster): about the
             least an implementation that copies the large block zero times
             itself needs on this host. Its note gives the faster MPI's µs /
             floor's µs.

The table gives each one-way time and how many times faster navette is than
each MPI and than the faster of the two (MPI µs / navette µs: above 1
navette is faster). Every tool applies navette bench's iteration rule to
the bytes of a series, spread over its messages (so a series of 16 segments
counts as 16 round trips of the 100000 allowed).

rpc, migrate and rpc_rate, navette beside both MPIs, as multiseg and
indexed (same launchers, transports and turns):

  rpc        a call with an argument of S bytes (--sizes, default
             0,64,1K,16K,256K,1M): two messages each way, an 8-byte header
             holding S then the S-byte body (empty when S = 0). navette bench
             rpc; bench/mpi/rpc.c: the server MPI_Recv's the header from
             MPI_ANY_SOURCE, then the body into a buffer picked after
             reading the header (kept and grown when a header announces more,
             so no malloc under the clock), and replies the same way; so does
             the client. latency_us = half a call's round trip; size = S.
             Over tcp, navette bench runs with --baseline raw-tcp: raw-tcp
             rows are the call's bytes (header + body) as one ping-pong
             message over a plain socket, in turns with navette, the floor
             of any call over TCP.
  migrate    after PM2's thread migration: a 650-byte task state shipped to
             the other rank, where the task lands in a freshly chosen slot
             (bench/mpi/migrate.c: the next of 16, MPI_Recv from
             MPI_ANY_SOURCE), runs (checks and updates a hop count and a
             checksum in its state) and is shipped back. navette bench
             migrate (no --sizes: the state has its size). 1000 round trips
             unless --iterations; latency_us = time per migration (one
             shipment, half a round trip); size = 650.
  rpc_rate   T client threads (--threads, default 1,4,16) on rank 0 making
             calls of rpc back to back (S from --sizes, default 0), thread k
             on tag k; one server thread on rank 1 (header from
             MPI_ANY_SOURCE / MPI_ANY_TAG, body and reply on the header's
             tag). navette bench rpc_rate --threads …; bench/mpi/rpc_rate.c
             under MPI_Init_thread(MPI_THREAD_MULTIPLE): an MPI that does not
             provide it says so and exits with 77, and is skipped as not
             available. --iterations = calls per thread (default: navette
             bench's rule on S, 100000 calls for S = 0, shared among the
             threads). Rows carry `threads` and rate_per_s = calls completed
             per second over all threads. Every thread of a rank runs on that
             rank's core.

The rpc table gives each one-way time and MPI µs / navette µs as multiseg's
(over tcp also raw-tcp's µs, and the faster MPI's µs / raw-tcp's: the most
any call over TCP could reach);
migrate's has one row per tool (µs per migration, the tool's µs / navette's
µs); rpc_rate's has one row per thread count (each tool's calls/s, navette /
faster MPI). No plot for these three (sizes from 0 bytes, one size, rates
against threads). Until navette bench knows one of these patterns, navette's
rows are skipped as not available (\"navette bench has no pattern … yet\")
and the MPIs are measured all the same.

multirail (--transport tcp only), navette alone: the bandwidth of two tcp
links used together against the sum of each link alone, measured in the same
run. scripts/netns-rails (root, ip and tc from iproute2) makes two network
namespaces, nvcmpPID-0 and nvcmpPID-1, once for all rounds, joined by two
veth pairs rate-limited with tc tbf on both ends: link 1 at 2gbit, link 2 at
1gbit; nothing leaves the two namespaces. Each round runs, for each size
(--sizes, default 64M), `navette bench pingpong` on 2 ranks of `navette run
-n 2`, each rank put in its namespace by `scripts/netns-rails rank-exec`
(which sets NAVETTE_TCP_LINKS to its addresses, with the links' rates):

  1+2 split       both links, NAVETTE_STRATEGY=split
  1+2 aggregate   both links, the default strategy (NAVETTE_STRATEGY unset)
  1               link 1 alone
  2               link 2 alone

Rows carry `rails` (1+2, 1, 2) and `strategy`; bandwidth is size / one-way
time of the ping-pong. The table gives, per size, link 1, link 2, their sum,
both links with each strategy, and split / sum (the goal: at least 90 %).
The namespaces are removed at the end, also on failure; without root, ip or
tc (or when the system refuses a namespace: netns-rails exits with 77) the
pattern is skipped as not available. No plot.

A tool that cannot run is skipped with its reason, printed and recorded
under \"skipped\" in results.json; the rest is measured all the same. For
instance, as long as navette has no shared-memory driver, NAVETTE_DRIVER=shm
is refused and the shm navette rows are skipped as \"unavailable\"; they
appear, with no change here, once the driver exists.

Output in --out DIR:
  results.json           the benchmark output document of ARCHITECTURE.md
                         (navette_version, host, date, runs[], skipped[] and
                         notes[])
  raw/                   each tool's standard output (.out) and error (.err),
                         and commands.txt with every command line and its
                         environment (PATTERN-TRANSPORT-TOOL[-rN]; an MPI's
                         two runs of indexed in huge memory are TOOL-heap and
                         TOOL-huge)
  PATTERN-TRANSPORT.png  latency and bandwidth against size, log-log, one
                         curve per implementation (multiseg: one plot per
                         segment count, multiseg-8seg-TRANSPORT.png, …;
                         none for multirail, rpc, migrate, rpc_rate)

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
    /// multiseg: bytes per segment; indexed: the large block; rpc and
    /// rpc_rate: a call's argument (0 allowed, only there); migrate keeps
    /// its 650-byte task state. [default: pingpong
    /// 8,64,512,4K,32K,256K,1M,4M,16M; multiseg 4,64,1K; indexed 256K;
    /// multirail 64M; rpc 0,64,1K,16K,256K,1M; rpc_rate 0]
    #[arg(long)]
    pub sizes: Option<SizeList>,
    /// Segments per series of multiseg, comma-separated (1 to 1024 each).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SEGMENTS,
          value_parser = parse_segments)]
    pub segments: Vec<usize>,
    /// Client threads of rpc_rate, comma-separated (1 to 256 each).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_THREADS,
          value_parser = parse_threads)]
    pub threads: Vec<usize>,
    /// Memory of indexed's large blocks: huge (mappings of their own backed
    /// by transparent huge pages, as navette::HugeBuffer and bench/huge.h
    /// make them, for navette and the floor; each MPI runs in both heap and
    /// huge-page memory and keeps the faster) or heap (for every tool:
    /// malloc'd, a Vec in navette, whole heap pages for the floor).
    #[arg(long, value_enum, default_value_t = Memory::Huge)]
    pub memory: Memory,
    /// Timed round trips (series for multiseg, calls for rpc, calls per
    /// thread for rpc_rate, round trips of the task for migrate) per size
    /// for navette, the MPIs and UCX [default: navette bench's rule, 1 GiB
    /// of traffic per size, 8 to 100000 messages; rpc_rate: that many
    /// calls shared among the threads; migrate: 1000]; the floor picks its
    /// own.
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Rounds of the whole comparison, one tool after the other in each:
    /// every figure is the best of the rounds (lowest latency, highest
    /// bandwidth and rate), so that a host whose speed drifts (a virtual
    /// machine's neighbours) favours no tool. For multiseg, indexed, rpc
    /// and migrate, a note also gives navette's ratio to the faster MPI
    /// within each round: median, lowest and highest.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Patterns to compare, comma-separated: pingpong, multiseg, indexed,
    /// multirail (tcp only; needs root), rpc, migrate, rpc_rate.
    #[arg(long, default_value = "pingpong", value_name = "LIST")]
    pub patterns: PatternList,
    /// Seconds after which a tool that has not finished is killed and its
    /// rows skipped.
    #[arg(long, default_value_t = 180, value_name = "SECS")]
    pub timeout: u64,
    /// The navette binary (set by bench/compare).
    #[arg(long, default_value = "target/release-abort/navette")]
    pub navette: PathBuf,
    /// navette could not be built: skip its rows for this reason (set by
    /// bench/compare).
    #[arg(long, value_name = "REASON")]
    pub navette_unbuilt: Option<String>,
    /// Build navette with profile-guided optimization
    /// (`scripts/pgo-build`: trained on navette bench's patterns) and
    /// compare that build; every table says so in a note. Without it,
    /// navette is the plain `cargo build --profile release-abort` (the
    /// release profile, aborting on panic).
    #[arg(long)]
    pub pgo: bool,
    /// The MPI ping-pong built from bench/mpi/pingpong.c (set by bench/compare).
    #[arg(long, value_name = "PATH", default_value = "mpi-pingpong")]
    pub mpi_pingpong: PathBuf,
    /// Where bench/compare built bench/mpi/PATTERN.c with each MPI, as
    /// PATTERN-openmpi and PATTERN-mpich (set by bench/compare).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub mpi_build: PathBuf,
    /// The floor program built from bench/floor/floor.c (set by bench/compare).
    #[arg(long, value_name = "PATH", default_value = "floor")]
    pub floor: PathBuf,
    /// The script that makes the namespaces of multirail (bench/compare
    /// runs from the repository).
    #[arg(long, value_name = "PATH", default_value = "scripts/netns-rails")]
    pub netns_rails: PathBuf,
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
    /// The folder of the other MPI programs.
    pub mpi_build: PathBuf,
    /// The floor program.
    pub floor: PathBuf,
    /// scripts/netns-rails.
    pub netns_rails: PathBuf,
}

impl Programs {
    /// `bench/mpi/PATTERN.c` built with `mpi` (`openmpi`, `mpich`).
    pub fn mpi_program(&self, pattern: &str, mpi: &str) -> PathBuf {
        self.mpi_build.join(format!("{pattern}-{mpi}"))
    }
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
            mpi_build: self.mpi_build.clone(),
            floor: self.floor.clone(),
            netns_rails: self.netns_rails.clone(),
        }
    }

    /// The sizes of `pattern`: `--sizes` if given, else its defaults
    /// (migrate: always its task state's).
    pub fn sizes_of(&self, pattern: Pattern) -> Vec<usize> {
        match &self.sizes {
            Some(sizes) if pattern != Pattern::Migrate => sizes.0.clone(),
            _ => pattern
                .default_sizes()
                .parse::<SizeList>()
                .map(|list| list.0)
                .unwrap_or_default(),
        }
    }

    /// What the parser cannot see alone: a size of 0 is measured only by
    /// the patterns that take empty messages (rpc, rpc_rate); the others
    /// plot against size on a log scale.
    pub fn check(&self) -> Result<(), String> {
        let zero = self.sizes.as_ref().is_some_and(|s| s.0.contains(&0));
        let refusing: Vec<&str> = self
            .patterns
            .0
            .iter()
            .filter(|p| !p.takes_empty_messages() && **p != Pattern::Migrate)
            .map(|p| p.name())
            .collect();
        if zero && !refusing.is_empty() {
            return Err(format!(
                "--sizes: 0 bytes is measured by rpc and rpc_rate only, not by {} \
                 (plotted against size on a log scale)",
                refusing.join(", ")
            ));
        }
        Ok(())
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
        assert_eq!(cli.sizes_of(Pattern::Pingpong).len(), 9);
        assert_eq!(cli.patterns.0, vec![Pattern::Pingpong]);
        assert_eq!(cli.segments, vec![8, 16]);
        assert_eq!(cli.sizes_of(Pattern::Multiseg), vec![4, 64, 1024]);
        assert_eq!(cli.sizes_of(Pattern::Indexed), vec![256 << 10]);
        assert_eq!(cli.sizes_of(Pattern::Multirail), vec![64 << 20]);
        assert_eq!(cli.netns_rails, PathBuf::from("scripts/netns-rails"));
        assert_eq!(cli.memory, Memory::Huge);
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
            "--memory",
            "heap",
        ])
        .unwrap();
        assert_eq!(cli.transport, Transport::Tcp);
        assert_eq!(cli.memory, Memory::Heap);
        assert_eq!(cli.sizes_of(Pattern::Multiseg), vec![1024, 2 << 20]);
        assert_eq!(cli.iterations, Some(7));
        assert!(
            Cli::try_parse_from(["compare"]).is_err(),
            "--out is required"
        );
        assert!(Cli::try_parse_from(["compare", "--out", "d", "--patterns", "rcp"]).is_err());
        assert_eq!(cli.check(), Ok(()));
    }

    #[test]
    fn rpc_patterns_threads_and_empty_arguments() {
        let cli = Cli::try_parse_from([
            "compare",
            "--out",
            "d",
            "--patterns",
            "rpc,migrate,rpc_rate",
        ])
        .unwrap();
        assert_eq!(
            cli.patterns.0,
            vec![Pattern::Rpc, Pattern::Migrate, Pattern::RpcRate]
        );
        assert_eq!(cli.threads, vec![1, 4, 16]);
        assert_eq!(
            cli.sizes_of(Pattern::Rpc),
            vec![0, 64, 1024, 16 << 10, 256 << 10, 1 << 20]
        );
        assert_eq!(cli.sizes_of(Pattern::Migrate), vec![650]);
        assert_eq!(cli.sizes_of(Pattern::RpcRate), vec![0]);
        assert_eq!(cli.check(), Ok(()));
        let cli = Cli::try_parse_from([
            "compare",
            "--out",
            "d",
            "--patterns",
            "rpc-rate,migrate",
            "--threads",
            "2,8",
            "--sizes",
            "0,64",
        ])
        .unwrap();
        assert_eq!(cli.patterns.0, vec![Pattern::RpcRate, Pattern::Migrate]);
        assert_eq!(cli.threads, vec![2, 8]);
        assert_eq!(cli.sizes_of(Pattern::RpcRate), vec![0, 64]);
        assert_eq!(
            cli.sizes_of(Pattern::Migrate),
            vec![650],
            "--sizes does not change the task state"
        );
        assert_eq!(cli.check(), Ok(()));
        // 0 bytes on a log-log plot: refused for the other patterns.
        let cli = Cli::try_parse_from([
            "compare",
            "--out",
            "d",
            "--patterns",
            "rpc,multiseg",
            "--sizes",
            "0,64",
        ])
        .unwrap();
        let err = cli.check().unwrap_err();
        assert!(err.contains("not by multiseg"), "{err}");
        for bad in ["0", "257", "4,x", ""] {
            assert!(
                Cli::try_parse_from(["compare", "--out", "d", "--threads", bad]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn pattern_and_segment_lists() {
        let cli = Cli::try_parse_from([
            "compare",
            "--out",
            "d",
            "--patterns",
            "multiseg,indexed,multirail",
            "--segments",
            "2,4",
            "--mpi-build",
            "/b",
        ])
        .unwrap();
        assert_eq!(
            cli.patterns.0,
            vec![Pattern::Multiseg, Pattern::Indexed, Pattern::Multirail]
        );
        assert_eq!(cli.segments, vec![2, 4]);
        assert_eq!(
            cli.programs().mpi_program("multiseg", "mpich"),
            PathBuf::from("/b/multiseg-mpich")
        );
        assert!(Cli::try_parse_from(["compare", "--out", "d", "--segments", "8,x"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--out", "d", "--segments", "0"]).is_err());
        assert!(Cli::try_parse_from(["compare", "--out", "d", "--patterns", ""]).is_err());
    }
}
