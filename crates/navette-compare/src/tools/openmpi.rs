//! Open MPI: the programs of `bench/mpi/` built with `mpicc.openmpi`, under
//! `mpirun.openmpi` (never the plain `mpirun`, which is whichever MPI the
//! Debian alternatives point at), two ranks bound to cores, the ob1
//! messaging layer over the vader (shared memory) or tcp (loopback only)
//! BTL; `--oversubscribe` is not needed with two cores and would not
//! combine with `--bind-to core`. The ping-pong's rank 0 prints one line per
//! size: `size=… iterations=… latency_us=… bandwidth_mbps=…`.

use std::path::Path;
use std::process::Command;

use super::{Figure, ParseError, kv};
use crate::args::Transport;

/// The ping-pong's command for `transport`.
pub fn command(
    program: &Path,
    transport: Transport,
    sizes: &[usize],
    iterations: Option<u32>,
) -> Command {
    let mut command = launch(program, transport);
    if let Some(n) = iterations {
        command.args(["-i", &n.to_string()]);
    }
    command.args(sizes.iter().map(usize::to_string));
    command
}

/// `mpirun.openmpi` starting `program` on two ranks over `transport`; its
/// own arguments follow.
pub fn launch(program: &Path, transport: Transport) -> Command {
    let mut command = Command::new("mpirun.openmpi");
    // We run as root in containers and CI; Open MPI refuses that unless
    // both variables are set (or --allow-run-as-root is given).
    command
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--allow-run-as-root", "-n", "2"])
        .args(["--bind-to", "core", "--map-by", "core"])
        .args(["--mca", "pml", "ob1"])
        // mpirun's own out-of-band channel stays on loopback.
        .args(["--mca", "oob_tcp_if_include", "lo"]);
    match transport {
        Transport::Shm => command.args(["--mca", "btl", "vader,self"]),
        Transport::Tcp => command.args([
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            "lo",
        ]),
    };
    command.arg(program);
    command
}

/// What Open MPI ran over, as its flags force it (a BTL that cannot run
/// fails the job rather than falling back).
pub fn transport_note(transport: Transport) -> &'static str {
    match transport {
        Transport::Shm => "ob1 over the vader BTL (shared memory)",
        Transport::Tcp => "ob1 over the tcp BTL on lo",
    }
}

/// The figures printed by rank 0, one per size, in order.
pub fn parse(output: &str) -> Result<Vec<Figure>, ParseError> {
    let figures = kv::lines(output)
        .filter(|line| line.head.is_none() && line.get("size").is_some())
        .map(|line| {
            Ok(Figure {
                size: line.number("size")?,
                latency_us: Some(line.number("latency_us")?),
                bandwidth_mbps: Some(line.number("bandwidth_mbps")?),
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    if figures.is_empty() {
        return Err(ParseError::NoResult("expected size=… latency_us=… lines"));
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::describe;

    #[test]
    fn command_lines() {
        let shm = describe(&command(Path::new("pp"), Transport::Shm, &[8, 64], None));
        assert_eq!(
            shm,
            "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi \
             --allow-run-as-root -n 2 --bind-to core --map-by core --mca pml ob1 \
             --mca oob_tcp_if_include lo --mca btl vader,self pp 8 64"
        );
        let tcp = describe(&command(Path::new("pp"), Transport::Tcp, &[8], Some(10)));
        assert!(
            tcp.ends_with("--mca btl tcp,self --mca btl_tcp_if_include lo pp -i 10 8"),
            "{tcp}"
        );
    }
}
