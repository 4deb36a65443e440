//! One module per measured program: the command that starts it and the
//! parser of what it prints. Parsers are pure functions of the program's
//! output, tested on outputs captured from real runs (`tests/fixtures/`).

pub mod floor;
pub mod kv;
pub mod mpi;
pub mod mpich;
pub mod navette;
pub mod openmpi;
pub mod ucx;

/// The cores the two sides of every exchange are pinned to, where the tool
/// allows it.
pub const CORES: (u32, u32) = (0, 1);

/// One size's figures from one tool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figure {
    /// Message size in bytes.
    pub size: usize,
    /// One-way time in microseconds.
    pub latency_us: Option<f64>,
    /// 10^6 bytes per second.
    pub bandwidth_mbps: Option<f64>,
}

/// Timed iterations per size when none is given, and warm-up iterations
/// before a timed series: the rules of `navette bench`, so that every tool
/// runs the same exchanges.
pub use navette_cli::bench::{default_iterations, warmup};

/// Why a tool's output could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Nothing in the output had the expected shape.
    #[error("no result line in the output ({0})")]
    NoResult(&'static str),
    /// A field is missing or not a number.
    #[error("line {line:?}: field {field} is missing or not a number")]
    BadField {
        /// The line.
        line: String,
        /// The field.
        field: &'static str,
    },
    /// A JSON document that does not parse.
    #[error("JSON: {0}")]
    Json(String),
}
