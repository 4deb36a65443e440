//! The physical floor of shared memory, from `bench/floor/floor.c`:
//!
//! - `cacheline size=64 iterations=… latency_us=…`: a cache line passed
//!   back and forth between two threads pinned to cores 0 and 1, one-way;
//! - `memcpy size=… iterations=… latency_us=… bandwidth_mbps=…`: one
//!   thread copying `size` bytes between two buffers, per size;
//! - with `series`, `segments=… size=… iterations=… latency_us=… …` (as
//!   `bench/mpi/multiseg.c` prints them, read by
//!   [`super::mpi::parse_multiseg`]): the floor of a multiseg series, what
//!   any implementation of the pattern must do, written plainly.

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
