//! UCX: `ucx_perftest`, a server and a client on this host, each pinned to
//! one core with `taskset`. The client connects to the server over
//! 127.0.0.1 on a free port (ucx_perftest's own bootstrap), then the test
//! runs over the transports in `UCX_TLS`. One pair of processes per test
//! and size: `-t tag_lat` (ping-pong; UCX reports the one-way latency) and
//! `-t tag_bw` (streaming bandwidth).
//!
//! The client's last line is `Final: iterations p50 avg overall avg-bw
//! overall-bw avg-rate overall-rate`, with bandwidth in MiB/s. With
//! `UCX_LOG_LEVEL=info` it also logs the transports the endpoint uses
//! (`ep_cfg[0]: tag(sysv/memory cma/memory)`).

use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;

use super::{CORES, ParseError};
use crate::args::Transport;

/// The two ucx_perftest tests used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// Tag-matched ping-pong: latency.
    TagLat,
    /// Tag-matched stream: bandwidth.
    TagBw,
}

impl Test {
    /// The name for `-t`.
    pub fn name(self) -> &'static str {
        match self {
            Self::TagLat => "tag_lat",
            Self::TagBw => "tag_bw",
        }
    }
}

/// The overall figures of one test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Final {
    /// Timed iterations.
    pub iterations: u64,
    /// Overall latency in µs: one-way for `tag_lat`, per message for
    /// `tag_bw`.
    pub latency_us: f64,
    /// Overall bandwidth in 10^6 B/s (converted from UCX's MiB/s).
    pub bandwidth_mbps: f64,
}

/// UCX's environment for `transport`: shared memory (posix, sysv, cma)
/// or TCP restricted to the loopback device.
pub fn environment(transport: Transport) -> Vec<(&'static str, &'static str)> {
    match transport {
        Transport::Shm => vec![("UCX_TLS", "sm,self")],
        Transport::Tcp => vec![("UCX_TLS", "tcp,self"), ("UCX_NET_DEVICES", "lo")],
    }
}

/// The server: waits for one client on `port`, runs what it asks, exits.
pub fn server(transport: Transport, port: u16) -> Command {
    let mut command = Command::new("taskset");
    command
        .envs(environment(transport))
        .args(["-c", &CORES.0.to_string(), "ucx_perftest"])
        .args(["-p", &port.to_string()]);
    command
}

/// The client: runs `test` at `size` against the server on 127.0.0.1.
pub fn client(
    transport: Transport,
    port: u16,
    test: Test,
    size: usize,
    iterations: u32,
    warmup: u32,
) -> Command {
    let mut command = Command::new("taskset");
    command
        .envs(environment(transport))
        .env("UCX_LOG_LEVEL", "info")
        .args(["-c", &CORES.1.to_string(), "ucx_perftest", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-t", test.name()])
        .args(["-s", &size.to_string()])
        .args(["-n", &iterations.to_string(), "-w", &warmup.to_string()]);
    command
}

/// A TCP port that is free on loopback now.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Whether the contents of `/proc/net/tcp` (or `tcp6`) show a socket
/// listening on `port`. Looking there, rather than connecting, leaves the
/// server's single accept to the client.
pub fn listening(proc_net_tcp: &str, port: u16) -> bool {
    let port = format!(":{port:04X}");
    proc_net_tcp.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1).unwrap_or("");
        let state = fields.nth(1).unwrap_or("");
        local.ends_with(&port) && state == "0A"
    })
}

/// The client's final figures.
pub fn parse(output: &str) -> Result<Final, ParseError> {
    // The "Final:" line; without it (an older or newer format), the last
    // line made of exactly eight numbers.
    let numbers = |line: &str| -> Option<Vec<f64>> {
        let line = line.trim().trim_start_matches("Final:");
        let values: Option<Vec<f64>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
        values.filter(|v| v.len() == 8)
    };
    let row = output
        .lines()
        .filter(|l| l.trim_start().starts_with("Final:"))
        .find_map(numbers)
        .or_else(|| output.lines().rev().find_map(numbers))
        .ok_or(ParseError::NoResult(
            "expected a `Final:` line of eight numbers",
        ))?;
    Ok(Final {
        iterations: row[0] as u64,
        latency_us: row[3],
        bandwidth_mbps: row[5] * MIB / 1e6,
    })
}

const MIB: f64 = (1 << 20) as f64;

/// UCX's last `ERROR` log line, without its prefix (UCX also logs `DIAG`
/// lines that say "failed" on every run, about absent RDMA devices).
pub fn error(output: &str) -> Option<String> {
    output
        .lines()
        .rfind(|l| l.contains(" ERROR "))
        .and_then(|l| l.split_once(" ERROR "))
        .map(|(_, said)| said.trim().to_owned())
}

/// The transports UCX chose, from the `ep_cfg` log line.
pub fn lanes(output: &str) -> Option<String> {
    let at = output.find("ep_cfg[")?;
    let line = output[at..].lines().next()?;
    let start = line.find("tag(")? + 4;
    let end = line[start..].find(')')? + start;
    Some(line[start..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::describe;

    #[test]
    fn command_lines() {
        assert_eq!(
            describe(&server(Transport::Tcp, 4000)),
            "UCX_NET_DEVICES=lo UCX_TLS=tcp,self taskset -c 0 ucx_perftest -p 4000"
        );
        assert_eq!(
            describe(&client(Transport::Shm, 4000, Test::TagBw, 1024, 50, 5)),
            "UCX_LOG_LEVEL=info UCX_TLS=sm,self taskset -c 1 ucx_perftest 127.0.0.1 \
             -p 4000 -t tag_bw -s 1024 -n 50 -w 5"
        );
    }

    #[test]
    fn listening_sockets() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            \x20  0: 00000000:0FA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
            \x20  1: 0100007F:0FA1 0100007F:0FA0 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listening(table, 4000));
        assert!(!listening(table, 4001), "established, not listening");
        assert!(!listening(table, 40));
        assert!(!listening("", 4000));
    }
}
