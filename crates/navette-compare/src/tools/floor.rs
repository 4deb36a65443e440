//! The physical floor of shared memory, from `bench/floor/floor.c`:
//!
//! - `cacheline size=64 iterations=… latency_us=…`: a cache line passed
//!   back and forth between two threads pinned to cores 0 and 1, one-way;
//! - `memcpy size=… iterations=… latency_us=… bandwidth_mbps=…`: one
//!   thread copying `size` bytes between two buffers, per size;
//! - with `series`, `segments=… size=… iterations=… latency_us=… …` (as
//!   `bench/mpi/multiseg.c` prints them, read by
//!   [`super::mpi::parse_multiseg`]): the floor of a multiseg series, what
//!   any implementation of the pattern must do, written plainly;
//! - with `indexed`, `size=… head=64 large=… iterations=… latency_us=… …`
//!   (as `bench/mpi/indexed.c` prints them, read by
//!   [`super::mpi::parse_indexed`]): the floor of indexed for an
//!   implementation that copies the large block zero times itself, the
//!   block moved only by the kernel's single copy between the two
//!   processes, shared between them or read whole, whichever is faster;
//! - with `cores`, `core core=… adds_per_ns=… together=…`: how many
//!   instructions each of the two cores runs now, alone and while the other
//!   runs too (a host check: a core whose hyper-thread sibling is busy, or
//!   whose clock is lowered, runs fewer alone; two virtual cores that are
//!   hyper-threads of one physical core run about half as much together).

use std::path::Path;
use std::process::Command;

use super::{CORES, Figure, ParseError, kv};

/// What the floor program measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Floor {
    /// The cache-line hand-off: size 64, latency only.
    pub cacheline: Option<Figure>,
    /// memcpy per size: bandwidth (and the time of one copy).
    pub memcpy: Vec<Figure>,
}

/// The floor program on the benchmark's two cores.
fn pinned(program: &Path) -> Command {
    let mut command = Command::new(program);
    command.args(["-c", &format!("{},{}", CORES.0, CORES.1)]);
    command
}

/// The command for `sizes`.
pub fn command(program: &Path, sizes: &[usize]) -> Command {
    let mut command = pinned(program);
    command.args(sizes.iter().map(usize::to_string));
    command
}

/// The command of the series floor for `segments` and `sizes` (bytes per
/// segment).
pub fn series_command(program: &Path, segments: &[usize], sizes: &[usize]) -> Command {
    let mut command = pinned(program);
    let counts: Vec<String> = segments.iter().map(usize::to_string).collect();
    command
        .args(["series", "-s", &counts.join(",")])
        .args(sizes.iter().map(usize::to_string));
    command
}

/// The command of the indexed floor for large blocks of `larges` bytes in
/// `memory` (`heap`, `huge`; its head is 64 bytes, as navette's and the
/// MPI programs').
pub fn indexed_command(program: &Path, memory: &str, larges: &[usize]) -> Command {
    let mut command = pinned(program);
    command
        .args(["indexed", "-m", memory])
        .args(larges.iter().map(usize::to_string));
    command
}

/// The command that measures each core's additions per nanosecond.
pub fn cores_command(program: &Path) -> Command {
    let mut command = pinned(program);
    command.arg("cores");
    command
}

/// Reads the output of [`cores_command`]: each core's additions per
/// nanosecond, in the order printed.
pub fn parse_cores(output: &str) -> Result<Vec<CoreRate>, ParseError> {
    let rates = kv::lines(output)
        .filter(|line| line.head == Some("core"))
        .map(|line| {
            Ok(CoreRate {
                core: line.number("core")?,
                adds_per_ns: line.number("adds_per_ns")?,
                together: line.number("together")?,
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    if rates.is_empty() {
        return Err(ParseError::NoResult("expected core lines"));
    }
    Ok(rates)
}

/// What one core ran at one moment: alone, and while the other ran too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoreRate {
    /// The core's number.
    pub core: usize,
    /// Independent additions per nanosecond, alone.
    pub adds_per_ns: f64,
    /// The same while the other core runs the same loop.
    pub together: f64,
}

/// Reads the floor program's output.
pub fn parse(output: &str) -> Result<Floor, ParseError> {
    let mut floor = Floor {
        cacheline: None,
        memcpy: Vec::new(),
    };
    for line in kv::lines(output) {
        match line.head {
            Some("cacheline") => {
                floor.cacheline = Some(Figure {
                    size: line.number("size")?,
                    latency_us: Some(line.number("latency_us")?),
                    bandwidth_mbps: None,
                });
            }
            Some("memcpy") => floor.memcpy.push(Figure {
                size: line.number("size")?,
                latency_us: None,
                bandwidth_mbps: Some(line.number("bandwidth_mbps")?),
            }),
            _ => {}
        }
    }
    if floor.cacheline.is_none() && floor.memcpy.is_empty() {
        return Err(ParseError::NoResult("expected cacheline and memcpy lines"));
    }
    Ok(floor)
}

#[cfg(test)]
mod tests {
    use super::{CoreRate, parse_cores};

    #[test]
    fn core_rates_are_read_in_order() {
        let out = "core core=0 adds_per_ns=10.512 together=5.5\n\
                   core core=1 adds_per_ns=6.250 together=6.0\n";
        assert_eq!(
            parse_cores(out),
            Ok(vec![
                CoreRate {
                    core: 0,
                    adds_per_ns: 10.512,
                    together: 5.5
                },
                CoreRate {
                    core: 1,
                    adds_per_ns: 6.25,
                    together: 6.0
                },
            ])
        );
        assert!(parse_cores("cacheline size=64 latency_us=0.1\n").is_err());
        assert!(parse_cores("core core=0 adds_per_ns=fast together=1\n").is_err());
        assert!(parse_cores("core core=0 adds_per_ns=1.0\n").is_err());
    }
}
