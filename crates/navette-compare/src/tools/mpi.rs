//! The MPI comparison programs of multiseg, indexed, rpc, migrate and
//! rpc_rate (`bench/mpi/PATTERN.c`), built once with each MPI's compiler
//! wrapper, and what their rank 0 prints:
//!
//! - multiseg, one line per segment count and size:
//!   `segments=… size=… iterations=… latency_us=… bandwidth_mbps=…`, size
//!   per segment, latency the one-way time of a whole series;
//! - indexed, one line per large block:
//!   `size=… head=… large=… iterations=… latency_us=… bandwidth_mbps=…`,
//!   size both blocks;
//! - rpc, one line per argument size: `size=… iterations=… latency_us=…`,
//!   latency half a call's round trip;
//! - migrate, one line: `size=… iterations=… migrations=… latency_us=…`,
//!   latency the time of one migration (half a round trip);
//! - rpc_rate, one line per thread count and size:
//!   `threads=… size=… calls=… seconds=… rate_per_s=…`; or, when the
//!   library has no `MPI_THREAD_MULTIPLE`, `unavailable: …` and exit
//!   status [`UNAVAILABLE`].

use std::path::Path;
use std::process::Command;

use super::{Figure, ParseError, kv, mpich, openmpi};
use crate::args::Transport;
use crate::record::implementation as imp;
use crate::runner::Output;

/// The exit status of an MPI program that cannot run on this library (as
/// rpc_rate without `MPI_THREAD_MULTIPLE`): its rows are skipped as not
/// available, not failed.
pub const UNAVAILABLE: i32 = 77;

/// An MPI implementation from Debian's packages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpi {
    /// Open MPI (`mpicc.openmpi`, `mpirun.openmpi`).
    OpenMpi,
    /// MPICH (`mpicc.mpich`, `mpirun.mpich`).
    Mpich,
}

impl Mpi {
    /// Both, in table order.
    pub const ALL: [Self; 2] = [Self::OpenMpi, Self::Mpich];

    /// The name in the benchmark output (and in the programs' file names).
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenMpi => imp::OPENMPI,
            Self::Mpich => imp::MPICH,
        }
    }

    /// Its launcher starting `program` on two ranks, pinned to cores 0
    /// and 1, over `transport`; the program's arguments follow.
    pub fn launch(self, program: &Path, transport: Transport) -> Command {
        match self {
            Self::OpenMpi => openmpi::launch(program, transport),
            Self::Mpich => mpich::launch(program, transport),
        }
    }

    /// What it ran over: for Open MPI what its flags force; for MPICH the
    /// transports UCX logged (`None` when it logged none).
    pub fn transport_note(self, transport: Transport, output: &Output) -> Option<String> {
        match self {
            Self::OpenMpi => Some(openmpi::transport_note(transport).to_owned()),
            Self::Mpich => {
                let all = format!("{}\n{}", output.stdout, output.stderr);
                mpich::transports(&all).map(|lanes| mpich::transport_note(transport, &lanes))
            }
        }
    }
}

/// One multiseg figure: a series of `segments` segments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesFigure {
    /// Segments per series.
    pub segments: usize,
    /// Size per segment, one-way time of the series, its bytes over that.
    pub figure: Figure,
}

/// The lines of `bench/mpi/multiseg.c`, in order.
pub fn parse_multiseg(output: &str) -> Result<Vec<SeriesFigure>, ParseError> {
    let figures = kv::lines(output)
        .filter(|line| {
            line.head.is_none() && line.get("segments").is_some() && line.get("size").is_some()
        })
        .map(|line| {
            Ok(SeriesFigure {
                segments: line.number("segments")?,
                figure: Figure {
                    size: line.number("size")?,
                    latency_us: Some(line.number("latency_us")?),
                    bandwidth_mbps: Some(line.number("bandwidth_mbps")?),
                },
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    if figures.is_empty() {
        return Err(ParseError::NoResult(
            "expected segments=… size=… latency_us=… lines",
        ));
    }
    Ok(figures)
}

/// The lines of `bench/mpi/indexed.c`, in order; sizes are both blocks.
pub fn parse_indexed(output: &str) -> Result<Vec<Figure>, ParseError> {
    let figures = kv::lines(output)
        .filter(|line| {
            line.head.is_none() && line.get("size").is_some() && line.get("large").is_some()
        })
        .map(|line| {
            let size: usize = line.number("size")?;
            let head: usize = line.number("head")?;
            let large: usize = line.number("large")?;
            if head.checked_add(large) != Some(size) {
                return Err(ParseError::BadField {
                    line: line.text.trim().to_owned(),
                    field: "size",
                });
            }
            Ok(Figure {
                size,
                latency_us: Some(line.number("latency_us")?),
                bandwidth_mbps: Some(line.number("bandwidth_mbps")?),
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    if figures.is_empty() {
        return Err(ParseError::NoResult(
            "expected size=… head=… large=… latency_us=… lines",
        ));
    }
    Ok(figures)
}

/// The lines of `bench/mpi/rpc.c`, in order: the argument's size and
/// half a call's round trip.
pub fn parse_rpc(output: &str) -> Result<Vec<Figure>, ParseError> {
    let figures = kv::lines(output)
        .filter(|line| {
            line.head.is_none()
                && line.get("size").is_some()
                && line.get("latency_us").is_some()
                && line.get("migrations").is_none()
        })
        .map(|line| {
            Ok(Figure {
                size: line.number("size")?,
                latency_us: Some(line.number("latency_us")?),
                bandwidth_mbps: None,
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    if figures.is_empty() {
        return Err(ParseError::NoResult(
            "expected size=… iterations=… latency_us=… lines",
        ));
    }
    Ok(figures)
}

/// The line of `bench/mpi/migrate.c`: the task state's size and the time
/// of one migration.
pub fn parse_migrate(output: &str) -> Result<Figure, ParseError> {
    let line = kv::lines(output)
        .find(|line| line.head.is_none() && line.get("migrations").is_some())
        .ok_or(ParseError::NoResult(
            "expected a size=… migrations=… latency_us=… line",
        ))?;
    Ok(Figure {
        size: line.number("size")?,
        latency_us: Some(line.number("latency_us")?),
        bandwidth_mbps: None,
    })
}

/// One rpc_rate figure: calls per second from `threads` threads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateFigure {
    /// Client threads.
    pub threads: usize,
    /// Bytes of each call's argument.
    pub size: usize,
    /// Calls completed per second over all threads.
    pub rate_per_s: f64,
}

/// The lines of `bench/mpi/rpc_rate.c`, in order.
pub fn parse_rpc_rate(output: &str) -> Result<Vec<RateFigure>, ParseError> {
    let figures = kv::lines(output)
        .filter(|line| {
            line.head.is_none() && line.get("threads").is_some() && line.get("size").is_some()
        })
        .map(|line| {
            Ok(RateFigure {
                threads: line.number("threads")?,
                size: line.number("size")?,
                rate_per_s: line.number("rate_per_s")?,
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    if figures.is_empty() {
        return Err(ParseError::NoResult(
            "expected threads=… size=… rate_per_s=… lines",
        ));
    }
    Ok(figures)
}

/// Why a program said it cannot run on this library (its
/// `unavailable: …` line), if it did.
pub fn unavailable(output: &str) -> Option<String> {
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix("unavailable:"))
        .map(|why| why.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiseg_lines() {
        let out = "[vm:1] UCX  INFO  UCX_* env variables: UCX_TLS=sm,self\n\
                   segments=8 size=4 iterations=12500 latency_us=5.2691 bandwidth_mbps=6.07\n\
                   segments=16 size=1024 iterations=4096 latency_us=22.5221 bandwidth_mbps=727.46\n";
        let figures = parse_multiseg(out).unwrap();
        assert_eq!(figures.len(), 2);
        assert_eq!(figures[0].segments, 8);
        assert_eq!(figures[0].figure.size, 4);
        assert_eq!(figures[0].figure.latency_us, Some(5.2691));
        assert_eq!(figures[1].segments, 16);
        assert_eq!(figures[1].figure.bandwidth_mbps, Some(727.46));
        assert!(matches!(
            parse_multiseg("size=8 iterations=1 latency_us=1 bandwidth_mbps=1\n"),
            Err(ParseError::NoResult(_))
        ));
        assert!(matches!(
            parse_multiseg("segments=8 size=4 iterations=1 latency_us=nan? bandwidth_mbps=1\n"),
            Err(ParseError::BadField {
                field: "latency_us",
                ..
            })
        ));
    }

    #[test]
    fn indexed_lines() {
        let out = "size=262208 head=64 large=262144 iterations=4095 latency_us=127.5485 \
                   bandwidth_mbps=2055.75\n";
        assert_eq!(
            parse_indexed(out).unwrap(),
            vec![Figure {
                size: 262_208,
                latency_us: Some(127.5485),
                bandwidth_mbps: Some(2055.75)
            }]
        );
        let inconsistent = "size=100 head=64 large=64 iterations=1 latency_us=1 bandwidth_mbps=1\n";
        assert!(matches!(
            parse_indexed(inconsistent),
            Err(ParseError::BadField { field: "size", .. })
        ));
        assert!(parse_indexed("size=8 iterations=1 latency_us=1 bandwidth_mbps=1\n").is_err());
    }

    #[test]
    fn rpc_lines() {
        let out = "size=0 iterations=100000 latency_us=0.2657\n\
                   size=1048576 iterations=1024 latency_us=108.4419\n";
        let figures = parse_rpc(out).unwrap();
        assert_eq!(
            figures,
            vec![
                Figure {
                    size: 0,
                    latency_us: Some(0.2657),
                    bandwidth_mbps: None
                },
                Figure {
                    size: 1 << 20,
                    latency_us: Some(108.4419),
                    bandwidth_mbps: None
                }
            ]
        );
        assert!(matches!(
            parse_rpc("size=650 iterations=1000 migrations=2000 latency_us=0.3\n"),
            Err(ParseError::NoResult(_))
        ));
        assert!(matches!(
            parse_rpc("size=64 iterations=1 latency_us=-\n"),
            Err(ParseError::BadField {
                field: "latency_us",
                ..
            })
        ));
    }

    #[test]
    fn migrate_line() {
        let out = "[vm:1] UCX  INFO  UCX_* env variables: UCX_TLS=sm,self\n\
                   size=650 iterations=1000 migrations=2000 latency_us=0.2667\n";
        assert_eq!(
            parse_migrate(out).unwrap(),
            Figure {
                size: 650,
                latency_us: Some(0.2667),
                bandwidth_mbps: None
            }
        );
        assert!(parse_migrate("size=0 iterations=100 latency_us=0.3\n").is_err());
        assert!(matches!(
            parse_migrate("size=650 migrations=2 latency_us=x\n"),
            Err(ParseError::BadField {
                field: "latency_us",
                ..
            })
        ));
    }

    #[test]
    fn rpc_rate_lines_and_refusal() {
        let out = "threads=1 size=0 calls=100000 seconds=0.070516 rate_per_s=1418138.0\n\
                   threads=16 size=64 calls=100000 seconds=0.080653 rate_per_s=1239858.3\n";
        assert_eq!(
            parse_rpc_rate(out).unwrap(),
            vec![
                RateFigure {
                    threads: 1,
                    size: 0,
                    rate_per_s: 1_418_138.0
                },
                RateFigure {
                    threads: 16,
                    size: 64,
                    rate_per_s: 1_239_858.3
                }
            ]
        );
        assert_eq!(unavailable(out), None);
        let refused = "unavailable: MPI_THREAD_MULTIPLE not provided (provided: \
                       MPI_THREAD_SERIALIZED)\n";
        assert!(matches!(
            parse_rpc_rate(refused),
            Err(ParseError::NoResult(_))
        ));
        assert_eq!(
            unavailable(refused).as_deref(),
            Some("MPI_THREAD_MULTIPLE not provided (provided: MPI_THREAD_SERIALIZED)")
        );
        assert!(parse_rpc_rate("threads=4 size=0 calls=8 seconds=1\n").is_err());
    }

    #[test]
    fn launchers_name_their_mpi() {
        for (mpi, program) in [
            (Mpi::OpenMpi, "mpirun.openmpi"),
            (Mpi::Mpich, "mpirun.mpich"),
        ] {
            let command = mpi.launch(Path::new("x"), Transport::Shm);
            assert_eq!(command.get_program(), program);
        }
    }
}
