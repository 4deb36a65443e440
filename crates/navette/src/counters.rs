//! Counters a node exposes: per gate (the engine's) and per driver, and
//! their JSON dump at finalize when `NAVETTE_STATS` asks for it.
//!
//! `NAVETTE_STATS=PATH` writes one JSON document per rank at finalize;
//! `{rank}` in `PATH` is replaced by the rank, and a job of several ranks
//! whose path has no `{rank}` gets `.RANK` appended. `-` writes to standard
//! error instead.

use std::fmt::Write as _;

use navette_core::GateStats;

use crate::{Error, Node, Result};

/// The environment variable that asks for the dump.
pub const STATS_VAR: &str = "NAVETTE_STATS";

impl Node {
    /// Counters of every gate of this node: packets, chunks and bytes
    /// sent, chunks received, and data bytes copied, by the engine and by
    /// the message layer (see [`GateStats`]).
    pub fn gate_stats(&self) -> Vec<GateStats> {
        self.core().lock().engine.gate_stats().collect()
    }

    /// Bytes of data and packets Navette copied so far, on this rank: the
    /// engine's and the message layer's copies (every gate's
    /// [`GateStats::bytes_copied`]: SAFER pieces included) and the
    /// driver's own (packets copied into shared cells, data copied out of
    /// a connection's buffer). Copies made by the kernel (socket reads and
    /// writes, single-copy reads between processes) are not Navette's.
    pub fn bytes_copied(&self) -> u64 {
        let engine: u64 = (self.core().lock().engine.gate_stats())
            .map(|g| g.bytes_copied)
            .sum();
        engine + self.core().driver().bytes_copied()
    }

    /// The node's counters as one JSON document: rank, driver, the
    /// driver's own counters (its copies among them) and every gate's.
    pub fn stats_json(&self) -> String {
        let core = self.core();
        let mut out = String::new();
        let _ = write!(
            out,
            "{{\"rank\":{},\"size\":{},\"driver\":\"{}\",\"driver_counters\":{{",
            self.rank(),
            self.size(),
            core.driver().name()
        );
        for (i, (name, value)) in core.driver().counters().iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(out, "{comma}\"{name}\":{value}");
        }
        out.push_str("},\"gates\":[");
        for (i, g) in self.gate_stats().iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(
                out,
                "{comma}{{\"channel\":{},\"peer\":{},\"packets_sent\":{},\"chunks_sent\":{},\
                 \"bytes_sent\":{},\"chunks_per_packet\":{:.3},\"chunks_received\":{},\
                 \"bytes_copied\":{},\"messages_whole\":{},\"messages_at_once\":{}}}",
                g.channel.0,
                g.peer,
                g.packets_sent,
                g.chunks_sent,
                g.bytes_sent,
                g.chunks_per_packet(),
                g.chunks_received,
                g.bytes_copied,
                g.messages_whole,
                g.messages_at_once
            );
        }
        out.push_str("]}");
        out
    }

    /// Writes [`Self::stats_json`] where `NAVETTE_STATS` says, if it is set.
    pub(crate) fn dump_stats_if_asked(&self) -> Result<()> {
        let Some(target) = crate::runtime::env_setting(STATS_VAR)? else {
            return Ok(());
        };
        if target.is_empty() {
            return Ok(());
        }
        let json = self.stats_json();
        if target == "-" {
            eprintln!("{json}");
            return Ok(());
        }
        let path = stats_path(&target, self.rank(), self.size());
        std::fs::write(&path, json + "\n")
            .map_err(|e| Error::Config(format!("{STATS_VAR}: cannot write to {path}: {e}")))
    }
}

/// Where rank `rank` of `size` writes its counters for a `NAVETTE_STATS`
/// value.
fn stats_path(target: &str, rank: u32, size: u32) -> String {
    if target.contains("{rank}") {
        target.replace("{rank}", &rank.to_string())
    } else if size > 1 {
        format!("{target}.{rank}")
    } else {
        target.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::stats_path;

    #[test]
    fn each_rank_gets_its_own_file() {
        assert_eq!(stats_path("/tmp/s-{rank}.json", 3, 4), "/tmp/s-3.json");
        assert_eq!(stats_path("/tmp/s.json", 3, 4), "/tmp/s.json.3");
        assert_eq!(stats_path("/tmp/s.json", 0, 1), "/tmp/s.json");
    }
}
