//! MPICH from Debian (`mpich`, `libmpich-dev`): the programs of
//! `bench/mpi/` built with `mpicc.mpich`, under `mpirun.mpich` (hydra; the
//! fork launcher, ranks bound to cores 0 and 1 with `-bind-to user:0,1`).
//! Root needs no flag.
//!
//! Debian builds MPICH 4 with the ch4:ucx device only, and its two local
//! ranks talk through the UCX netmod (with `UCX_TLS=tcp,self` and nothing
//! else, a local ping-pong takes TCP's time): the transport is UCX's, chosen
//! as for ucx_perftest:
//!
//! - shm: `UCX_TLS=sm,self` (shared segments and cma);
//! - tcp: `UCX_TLS=tcp,self`, `UCX_NET_DEVICES=lo`, and
//!   `MPIR_CVAR_NOLOCAL=1` so that MPICH treats the other rank as remote
//!   (no shared-memory path of its own, whatever the build).
//!
//! `UCX_LOG_LEVEL=info` makes UCX log each endpoint's transports
//! (`ep_cfg[1]: tag(sysv/memory cma/memory) …`): [`transports`] reads them
//! from the run's output, so the document says what MPICH really used.

use std::path::Path;
use std::process::Command;

use super::{CORES, ucx};
use crate::args::Transport;

/// `mpirun.mpich` starting `program` on two ranks over `transport`; the
/// program's arguments follow.
pub fn launch(program: &Path, transport: Transport) -> Command {
    let mut command = Command::new("mpirun.mpich");
    command
        .envs(ucx::environment(transport))
        .env("UCX_LOG_LEVEL", "info");
    if transport == Transport::Tcp {
        command.env("MPIR_CVAR_NOLOCAL", "1");
    }
    command
        .args(["-launcher", "fork", "-n", "2"])
        .args(["-bind-to", &format!("user:{},{}", CORES.0, CORES.1)])
        .arg(program);
    command
}

/// The transports of the endpoints between the two ranks, from UCX's
/// `ep_cfg` log lines (an endpoint of a rank to itself goes through
/// `self/…` and is left out): distinct, in order of appearance.
pub fn transports(output: &str) -> Option<String> {
    let mut found: Vec<&str> = Vec::new();
    for line in output.lines().filter(|l| l.contains("ep_cfg[")) {
        let Some(start) = line.find("tag(").map(|at| at + 4) else {
            continue;
        };
        let Some(len) = line[start..].find(')') else {
            continue;
        };
        let lanes = &line[start..start + len];
        if !lanes.contains("self/") && !found.contains(&lanes) {
            found.push(lanes);
        }
    }
    (!found.is_empty()).then(|| found.join("; "))
}

/// The note on what MPICH ran over, from the transports UCX logged.
pub fn transport_note(transport: Transport, lanes: &str) -> String {
    let asked = match transport {
        Transport::Shm => "UCX_TLS=sm,self",
        Transport::Tcp => "MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo",
    };
    format!("ch4:ucx, UCX transports {lanes} ({asked})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::describe;

    #[test]
    fn command_lines() {
        assert_eq!(
            describe(&launch(Path::new("ms"), Transport::Shm)),
            "UCX_LOG_LEVEL=info UCX_TLS=sm,self mpirun.mpich -launcher fork -n 2 \
             -bind-to user:0,1 ms"
        );
        assert_eq!(
            describe(&launch(Path::new("ms"), Transport::Tcp)),
            "MPIR_CVAR_NOLOCAL=1 UCX_LOG_LEVEL=info UCX_NET_DEVICES=lo UCX_TLS=tcp,self \
             mpirun.mpich -launcher fork -n 2 -bind-to user:0,1 ms"
        );
    }

    #[test]
    fn transports_between_the_ranks() {
        // Captured from `mpirun.mpich` runs of bench/mpi/multiseg.c.
        let shm = "\
[1795359620.408209] [vm:28129:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(self/memory0 cma/memory) rma(self/memory0 sysv/memory posix/memory) am(self/memory0 cma/memory)
[1795359620.408395] [vm:28129:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: tag(sysv/memory cma/memory) rma(sysv/memory posix/memory) am(sysv/memory cma/memory)
segments=8 size=4 iterations=20000 latency_us=5.2691 bandwidth_mbps=6.07
[1795359620.408301] [vm:28130:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(sysv/memory cma/memory) rma(sysv/memory posix/memory) am(sysv/memory cma/memory)
";
        assert_eq!(transports(shm).as_deref(), Some("sysv/memory cma/memory"));
        let tcp = "\
[1795359604.277788] [vm:27108:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(self/memory0 tcp/lo) rma(self/memory0) am(self/memory0 tcp/lo)
[1795359604.278168] [vm:27109:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(tcp/lo) rma_am(tcp/lo) am(tcp/lo)
";
        assert_eq!(transports(tcp).as_deref(), Some("tcp/lo"));
        assert_eq!(
            transports("segments=8 size=4\nep_cfg[0]: tag(broken\n"),
            None
        );
        assert!(transport_note(Transport::Tcp, "tcp/lo").contains("MPIR_CVAR_NOLOCAL=1"));
    }
}
