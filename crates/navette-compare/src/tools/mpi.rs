//! The MPI comparison programs of multiseg and indexed
//! (`bench/mpi/multiseg.c`, `bench/mpi/indexed.c`), built once with each
//! MPI's compiler wrapper, and what their rank 0 prints:
//!
//! - multiseg, one line per segment count and size:
//!   `segments=… size=… iterations=… latency_us=… bandwidth_mbps=…`, size
//!   per segment, latency the one-way time of a whole series;
//! - indexed, one line per large block:
//!   `size=… head=… large=… iterations=… latency_us=… bandwidth_mbps=…`,
//!   size both blocks.

use std::path::Path;
use std::process::Command;

use super::{Figure, ParseError, kv, mpich, openmpi};
use crate::args::Transport;
use crate::record::implementation as imp;
use crate::runner::Output;

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
