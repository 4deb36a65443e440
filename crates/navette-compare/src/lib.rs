//! `bench/compare`: Navette measured beside its peers in one run.
//!
//! The shell script `bench/compare` installs what is missing (Open MPI,
//! MPICH, UCX's tools, a C compiler, a font), builds `navette`, this tool
//! and small C programs (`bench/mpi/*.c`, all but the ping-pong once per
//! MPI, and `bench/floor/floor.c`), then hands over to the
//! `navette-compare` binary, whose logic lives here:
//!
//! - [`tools`]: one module per measured program: how it is started and how
//!   its output is parsed (pure functions, tested on captured outputs);
//! - [`patterns`]: one module per communication pattern, which runs the
//!   tools for that pattern and turns their figures into [`record::Record`]s;
//! - [`record`]: the benchmark output document of ARCHITECTURE.md;
//! - [`table`] and [`plot`]: the printed table (with navette / best-peer
//!   ratios) and the PNG plots;
//! - [`runner`]: runs a program with a time limit and keeps its raw output.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod args;
pub mod patterns;
pub mod plot;
pub mod record;
pub mod runner;
pub mod sizes;
pub mod table;
pub mod tools;

use std::io::Write;
use std::path::Path;

use crate::args::{Cli, Transport};
use crate::patterns::{Context, Pattern};
use crate::record::{Document, Note, SkipKind};
use crate::runner::Runner;

/// Why a comparison could not run at all (a tool that fails only skips
/// its rows; see [`record::Skip`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// The output folder or a file in it could not be written.
    #[error("{path}: {source}")]
    Output {
        /// The file or folder.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
}

impl CompareError {
    fn output(path: &Path, source: std::io::Error) -> Self {
        Self::Output {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Runs every requested pattern, prints the tables, writes `results.json`,
/// `raw/` and the plots under `--out`. Returns the process exit code: 0 when
/// every tool ran or was skipped for a known reason (such as a driver that
/// does not exist yet), 1 when a tool failed.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<i32, CompareError> {
    let raw = cli.out.join("raw");
    std::fs::create_dir_all(&raw).map_err(|e| CompareError::output(&raw, e))?;
    let mut runner = Runner::new(&raw, cli.timeout()).map_err(|e| CompareError::output(&raw, e))?;
    let version = match cli.navette_unbuilt {
        Some(_) => env!("CARGO_PKG_VERSION").to_owned(),
        None => tools::navette::version(&cli.navette),
    };
    let mut document = Document::new(version);
    let transport = cli.transport;
    let busy = busy_machine();
    if let Some(warning) = &busy {
        write_out(out, &format!("compare: warning: {warning}\n"));
    }
    let mut segments = cli.segments.clone();
    dedup(&mut segments);
    let mut threads = cli.threads.clone();
    dedup(&mut threads);
    for &pattern in &cli.patterns.0 {
        let sizes = cli.sizes_of(pattern);
        let mut ctx = Context {
            runner: &mut runner,
            programs: cli.programs(),
            transport,
            sizes: &sizes,
            segments: &segments,
            threads: &threads,
            iterations: cli.iterations,
            memory: cli.memory,
            round: None,
        };
        let mut outcome = patterns::run_rounds(pattern, &mut ctx, cli.rounds);
        if cli.rounds > 1 && (pattern != Pattern::Multirail || !outcome.records.is_empty()) {
            let best = match pattern {
                Pattern::Rpc | Pattern::Migrate => "lowest time",
                Pattern::RpcRate => "highest rate",
                _ => "lowest latency, highest bandwidth",
            };
            outcome.notes.push(format!(
                "each figure is the best of {} rounds ({best}); \
                 the tools take turns within each round",
                cli.rounds
            ));
        }
        if pattern != Pattern::Multirail {
            outcome.notes.extend(congestion_note(transport));
        }
        outcome.notes.extend(busy.clone());
        outcome.notes.extend(build_note(cli));
        let (name, transport_name) = (pattern.name(), transport.name());
        let own_table = match pattern {
            Pattern::Multirail => Some(table::render_multirail(
                transport_name,
                &outcome.records,
                &outcome.skipped,
                &outcome.notes,
            )),
            Pattern::RpcRate => Some(table::render_rpc_rate(
                transport_name,
                &outcome.records,
                &outcome.skipped,
                &outcome.notes,
            )),
            Pattern::Migrate => {
                let view = table::View::new(name, transport_name, &outcome.records);
                Some(table::render_migrate(
                    &view,
                    &outcome.skipped,
                    &outcome.notes,
                ))
            }
            _ => None,
        };
        if let Some(text) = own_table {
            write_out(out, &text);
        }
        let groups: Vec<Option<usize>> = match pattern {
            Pattern::Multiseg => segments.iter().copied().map(Some).collect(),
            Pattern::Pingpong | Pattern::Indexed | Pattern::Rpc => vec![None],
            // Their own tables, above; no plot (multirail: one or few
            // sizes, four setups; migrate: one size; rpc_rate: against
            // threads, not size).
            Pattern::Multirail | Pattern::Migrate | Pattern::RpcRate => Vec::new(),
        };
        for group in groups {
            let view = table::View::of_series(name, transport_name, group, &outcome.records);
            let text = match pattern {
                Pattern::Pingpong => table::render(&view, &outcome.skipped, &outcome.notes),
                _ => table::render_vs_mpi(&view, &outcome.skipped, &outcome.notes),
            };
            write_out(out, &text);
            if pattern == Pattern::Rpc {
                // Sizes start at 0 bytes: no log-log plot.
                continue;
            }
            let png = cli.out.join(plot_name(pattern, group, transport));
            match plot::draw(&png, &view, &outcome.skipped, &document) {
                Ok(()) => write_out(out, &format!("Wrote {}\n", png.display())),
                Err(e) => write_out(out, &format!("No plot {}: {e}\n", png.display())),
            }
        }
        document.notes.extend(outcome.notes.iter().map(|note| Note {
            pattern: pattern.name().to_owned(),
            transport: transport.name().to_owned(),
            note: note.clone(),
        }));
        document.runs.extend(outcome.records);
        document.skipped.extend(outcome.skipped);
    }
    let json = cli.out.join("results.json");
    document
        .write(&json)
        .map_err(|e| CompareError::output(&json, e))?;
    write_out(
        out,
        &format!(
            "Wrote {} ({} records), raw outputs and commands in {}\n",
            json.display(),
            document.runs.len(),
            raw.display()
        ),
    );
    let failed = document.skipped.iter().any(|s| s.kind == SkipKind::Failed);
    Ok(i32::from(failed))
}

/// `PATTERN-TRANSPORT.png`, or `multiseg-8seg-TRANSPORT.png` for the
/// series of 8 segments.
pub fn plot_name(pattern: Pattern, segments: Option<usize>, transport: Transport) -> String {
    match segments {
        Some(n) => format!("{}-{n}seg-{}.png", pattern.name(), transport.name()),
        None => format!("{}-{}.png", pattern.name(), transport.name()),
    }
}

/// Keeps the first of each value, in order.
fn dedup(values: &mut Vec<usize>) {
    let mut seen = Vec::new();
    values.retain(|v| {
        let first = !seen.contains(v);
        seen.push(*v);
        first
    });
}

/// Over tcp, the congestion control of each side's connections: it bounds
/// large loopback transfers (see `navette::tcp::Congestion`), and Navette
/// chooses its own while the MPIs and UCX keep the system's.
fn congestion_note(transport: Transport) -> Option<String> {
    if transport != Transport::Tcp {
        return None;
    }
    let path = "/proc/sys/net/ipv4/tcp_congestion_control";
    let system = std::fs::read_to_string(path).ok()?;
    let navette = match navette::tcp::Congestion::default().from_env() {
        Ok(congestion) => congestion.to_string(),
        Err(e) => e.to_string(),
    };
    Some(format!(
        "tcp congestion control: navette and raw-tcp {navette} (NAVETTE_TCP_CONGESTION), \
         openmpi, mpich and ucx the system's ({})",
        system.trim()
    ))
}

/// How navette was built (by bench/compare): its figures are those of
/// that build, not of `cargo build --release`.
fn build_note(cli: &Cli) -> Option<String> {
    if cli.navette_unbuilt.is_some() {
        return None;
    }
    Some(if cli.pgo {
        "navette built with profile-guided optimization (scripts/pgo-build, trained on \
         navette bench over shm and tcp, the release-abort profile): the same code as the \
         plain build, laid out otherwise (docs/profiling.md, \"Built with a profile\"). These are \
         one build's figures: each build's layout follows its own training run, and two \
         builds of one commit differed by up to 15 % on small series (docs/profiling.md, \
         stop 40)"
            .to_owned()
    } else {
        "navette built with `cargo build --profile release-abort`: the release profile, \
         aborting on panic (why: Cargo.toml; docs/profiling.md, stop 42)"
            .to_owned()
    })
}

/// A warning when other processes keep the machine busy (the 1-minute
/// load average from `/proc/loadavg` is above half a core): they steal
/// the cores the benchmarks are pinned to.
fn busy_machine() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load: f64 = text.split_whitespace().next()?.parse().ok()?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (load > 0.5).then(|| {
        format!(
            "load average {load:.2} on {cores} cores before the run: other processes \
             compete for the cores, so the figures are disturbed"
        )
    })
}

/// Progress and tables go to the terminal as they come; a closed standard
/// output must not stop the measurements.
fn write_out(out: &mut dyn Write, text: &str) {
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_names_and_segment_lists() {
        assert_eq!(
            plot_name(Pattern::Pingpong, None, Transport::Shm),
            "pingpong-shm.png"
        );
        assert_eq!(
            plot_name(Pattern::Multiseg, Some(16), Transport::Tcp),
            "multiseg-16seg-tcp.png"
        );
        let mut segments = vec![8, 16, 8, 4];
        dedup(&mut segments);
        assert_eq!(segments, [8, 16, 4]);
    }

    #[test]
    fn each_build_of_navette_says_what_it_is() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut args = vec!["compare", "--out", "/tmp/x"];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).unwrap()
        };
        let plain = build_note(&parse(&[])).expect("a note for the plain build");
        assert!(plain.contains("--profile release-abort"), "{plain}");
        let note = build_note(&parse(&["--pgo"])).expect("a note for --pgo");
        assert!(note.contains("profile-guided"), "{note}");
        assert!(note.contains("scripts/pgo-build"), "{note}");
        assert!(note.contains("one build's figures"), "{note}");
        // No navette rows, nothing to say about its build.
        assert_eq!(
            build_note(&parse(&["--pgo", "--navette-unbuilt", "failed"])),
            None
        );
    }

    #[test]
    fn tcp_comparisons_say_which_congestion_control_each_side_uses() {
        assert_eq!(congestion_note(Transport::Shm), None);
        let sysctl = std::path::Path::new("/proc/sys/net/ipv4/tcp_congestion_control");
        let note = congestion_note(Transport::Tcp);
        assert_eq!(note.is_some(), sysctl.exists());
        if let Some(note) = note {
            assert!(note.contains("navette and raw-tcp"), "{note}");
            assert!(note.contains("the system's ("), "{note}");
        }
    }
}
