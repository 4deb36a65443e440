//! The `navette` command line tool.
//!
//! - `navette demo`: ping-pong and RPC-shaped messages between two ranks
//!   that it starts with the embedded launcher, over shared memory (over
//!   tcp with `NAVETTE_DRIVER=tcp`, beside raw TCP), timed in real time;
//!   see [`bench::command::demo`]. With `--sim`, between two ranks of a
//!   simulated cluster in one process, timed in virtual time; see
//!   [`demo`]. Every byte is checked.
//! - `navette bench PATTERN`: the benchmarks as rank programs; see
//!   [`mod@bench`].
//! - `navette info config`: every tunable with its default and help; see
//!   [`info`].
//! - `navette run -n N -- prog args…`: start `N` local ranks with the
//!   embedded launcher and exit with the job's code; see [`run`](mod@run).
//!
//! The logic lives here so that tests can call it; `main.rs` only parses
//! the arguments and reports errors.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod args;
pub mod bench;
mod buffers;
pub mod demo;
pub mod info;
pub mod json;
pub mod run;
pub mod sizes;
mod verify;

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::demo::{DemoConfig, DemoError};
use crate::json::BenchDocument;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "navette",
    version,
    about = "Navette: a communication engine for distributed runtimes"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Ping-pong and RPC-shaped messages between 2 ranks started by the
    /// embedded launcher, over shared memory (over tcp with
    /// NAVETTE_DRIVER=tcp, then beside raw TCP); with `--sim`, over the
    /// simulated network in virtual time. Every byte is verified.
    Demo(DemoArgs),
    /// Benchmarks as rank programs (alone, starts its own 2 ranks).
    Bench(bench::command::BenchArgs),
    /// Start N ranks of a program on this host, serve them the bootstrap,
    /// forward their output, and exit with the job's code.
    Run(run::RunArgs),
    /// Print reference information.
    Info {
        /// What to print.
        #[command(subcommand)]
        topic: InfoTopic,
    },
}

/// Arguments of `navette demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Run over the simulated network, in virtual time, in one process
    /// (`--seed`, `--latency-us`, `--bandwidth-gbps` and `--json` apply to
    /// this mode only, and need it).
    #[arg(long)]
    pub sim: bool,
    /// Message sizes, comma-separated; suffixes K, M, G are powers of 1024;
    /// each at most 1G.
    #[arg(long, default_value = demo::DEFAULT_SIZES)]
    pub sizes: sizes::SizeList,
    /// Timed round trips per size, at least 1 [default: with --sim, 20, or
    /// 5 from 1 MiB on; without, as navette bench: 1 GiB of traffic per
    /// size, from 8 to 100000 round trips].
    #[arg(long, value_parser = args::parse_iterations)]
    pub iterations: Option<u32>,
    /// Seed of the simulated network (--sim only).
    #[arg(long, default_value_t = 0, requires = "sim")]
    pub seed: u64,
    /// One-way link latency in microseconds (--sim only).
    #[arg(long, default_value_t = default_latency_us(), allow_negative_numbers = true, requires = "sim")]
    pub latency_us: f64,
    /// Link bandwidth in GB/s (10^9 bytes per second); 0 is infinite
    /// (--sim only).
    #[arg(long, default_value_t = default_bandwidth_gbps(), allow_negative_numbers = true, requires = "sim")]
    pub bandwidth_gbps: f64,
    /// Also write the results as a benchmark output JSON document (--sim
    /// only).
    #[arg(long, value_name = "FILE", requires = "sim")]
    pub json: Option<PathBuf>,
}

fn default_latency_us() -> f64 {
    navette_sim::LinkSpec::DEFAULT_LATENCY.as_secs_f64() * 1e6
}

fn default_bandwidth_gbps() -> f64 {
    navette_sim::LinkSpec::DEFAULT_BANDWIDTH as f64 / 1e9
}

/// Topics of `navette info`.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum InfoTopic {
    /// Every tunable with its default value and a line of help.
    Config,
}

/// What can make a command fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The demo failed.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// Writing the JSON document failed.
    #[error("cannot write {path}: {source}")]
    WriteJson {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Writing to the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// A benchmark failed.
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
}

/// Runs `cli`, writing what it prints to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<(), CliError> {
    match cli.command {
        Command::Demo(args) if args.sim => run_demo(args, out),
        Command::Demo(args) => {
            exit_with(bench::command::demo(&args.sizes.0, args.iterations, out)?)
        }
        Command::Bench(args) => exit_with(bench::command::run(&args, out)?),
        Command::Run(args) => run::run(args),
        Command::Info {
            topic: InfoTopic::Config,
        } => Ok(out.write_all(info::config_table().as_bytes())?),
    }
}

/// What `navette` prints on standard error when a command fails: the
/// error, then each cause in its chain that the lines before do not
/// already say (many messages end with their cause's text).
pub fn error_report(err: &dyn std::error::Error) -> String {
    let mut report = format!("navette: error: {err}\n");
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !report.contains(&text) {
            report.push_str(&format!("  caused by: {text}\n"));
        }
        source = cause.source();
    }
    report
}

/// Ends the process with a self-launched job's exit code, unless it is 0.
fn exit_with(code: Option<i32>) -> Result<(), CliError> {
    match code {
        Some(code) if code != 0 => std::process::exit(code),
        _ => Ok(()),
    }
}

fn run_demo(args: DemoArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let config = DemoConfig::new(
        args.sizes.0,
        args.iterations,
        args.seed,
        args.latency_us,
        args.bandwidth_gbps,
    )?;
    out.write_all(demo::header(&config).as_bytes())?;
    out.flush()?;
    let mut write_error = None;
    let report = demo::run(&config, |result| {
        let line = format!("{}\n", demo::row(result));
        if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            write_error.get_or_insert(e);
        }
    })?;
    if let Some(e) = write_error {
        return Err(e.into());
    }
    writeln!(
        out,
        "\nAll {} sizes verified byte for byte.",
        report.results.len()
    )?;
    if let Some(path) = args.json {
        BenchDocument::new(report.runs())
            .write(&path)
            .map_err(|source| CliError::WriteJson {
                path: path.clone(),
                source,
            })?;
        writeln!(out, "Wrote {}", path.display())?;
    }
    Ok(())
}
