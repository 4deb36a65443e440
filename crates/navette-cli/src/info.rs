//! `navette info config`: every tunable, its default and what it does.
//!
//! Defaults are read from the `Default` impls (and from the sim builder's
//! documented settings), never restated here. Each struct is destructured
//! field by field, so a field added to one of them stops this module from
//! compiling until it is described.

use std::fmt::Write as _;
use std::time::Duration;

use navette::sim::Topology;
use navette::{EngineConfig, NodeConfig, RailCaps};
use navette_sim::LinkSpec;
use navette_wire::Limits;

/// One tunable: where it lives, its name, its default and a line of help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tunable {
    /// The struct or builder holding it.
    pub section: &'static str,
    /// The field or method name.
    pub name: &'static str,
    /// The default, written for people.
    pub default: String,
    /// One line of help.
    pub help: &'static str,
}

fn tunable(
    section: &'static str,
    name: &'static str,
    default: impl Into<String>,
    help: &'static str,
) -> Tunable {
    Tunable {
        section,
        name,
        default: default.into(),
        help,
    }
}

/// Every tunable, by section.
pub fn tunables() -> Vec<Tunable> {
    let mut all = engine_config();
    all.extend(rail_caps("RailCaps", RailCaps::default()));
    all.extend(node_config("NodeConfig", NodeConfig::default()));
    all.extend(runtime_config());
    all.extend(shm_config());
    all.extend(tcp_config());
    all.extend(sim_builder());
    all
}

fn runtime_config() -> Vec<Tunable> {
    let driver = navette::RuntimeConfig::default().driver;
    vec![
        tunable(
            "RuntimeConfig",
            "driver (env NAVETTE_DRIVER)",
            format!("{driver:?}").to_lowercase(),
            "auto (shared memory between the ranks of one host), shm, tcp or shm+tcp (both rails to every peer)",
        ),
        tunable(
            "RuntimeConfig",
            "log filter (env NAVETTE_LOG)",
            "warn",
            "what the log on standard error shows: a tracing filter such as debug or \
             navette::shm=trace (one that does not parse is said, and warnings are logged)",
        ),
        tunable(
            "RuntimeConfig",
            "counters at finalize (env NAVETTE_STATS)",
            "off",
            "PATH writes each rank's counters as JSON at finalize, to PATH with {rank} \
             replaced, else PATH.RANK (PATH alone for a job of one); - to standard error",
        ),
    ]
}

fn shm_config() -> Vec<Tunable> {
    let section = "ShmConfig";
    let navette::shm::ShmConfig {
        ring_cells,
        cell_size,
        rdv_threshold,
        pull_fragment,
        single_copy_min,
        copy,
        share_min,
        liveness_interval,
        stage_max,
    } = navette::shm::ShmConfig::default();
    vec![
        tunable(
            section,
            "ring_cells",
            ring_cells.to_string(),
            "cells in each rank's receive ring (a power of two)",
        ),
        tunable(
            section,
            "cell_size",
            bytes(cell_size as u64),
            "bytes per cell, header included: bounds eager packets and two-copy fragments",
        ),
        tunable(
            section,
            "rdv_threshold",
            bytes(rdv_threshold as u64),
            "pieces this long or longer go by rendezvous (lowered to what fits a cell)",
        ),
        tunable(
            section,
            "pull_fragment",
            bytes(pull_fragment as u64),
            "longest rendezvous fragment: one single-copy pull (process_vm_readv), or cut into cells",
        ),
        tunable(
            section,
            "single_copy_min",
            bytes(single_copy_min as u64),
            "rendezvous fragments this long or longer are pulled single-copy; shorter ones \
             cross as two pipelined copies through the cells",
        ),
        tunable(
            section,
            "copy (env NAVETTE_SHM_COPY)",
            format!("{copy:?}").to_lowercase(),
            "auto, single (process_vm_readv) or fallback (two copies through the rings)",
        ),
        tunable(
            section,
            "share_min (env NAVETTE_SHM_SHARE=off)",
            share_min.map_or("off".into(), |min| bytes(min as u64)),
            "single-copy reads this long or longer are shared: the sender writes the second \
             half (process_vm_writev) while the receiver reads the first",
        ),
        tunable(
            section,
            "liveness_interval (env NAVETTE_SHM_LIVENESS_MS)",
            duration(liveness_interval),
            "how often peers' processes are checked: the rail of a peer that is gone closes, \
             and what needs it fails with PeerUnreachable",
        ),
        tunable(
            section,
            "stage_max (env NAVETTE_SHM_STAGE_MAX)",
            stage_max.map_or("off".into(), |max| bytes(max as u64)),
            "isends this short or shorter wait in their peer's open packet until the sender \
             waits or makes progress, so that a burst crosses as one cell; longer ones go at once",
        ),
    ]
}

fn tcp_config() -> Vec<Tunable> {
    let section = "TcpConfig";
    let navette::tcp::TcpConfig {
        bind,
        links,
        eager_connect,
        caps,
        max_handshakes,
        handshake_timeout,
        congestion,
        keepalive,
    } = navette::tcp::TcpConfig::default();
    let mut all = vec![
        tunable(
            section,
            "bind",
            bind.to_string(),
            "address to listen on (port 0: any free one); peers dial it",
        ),
        tunable(
            section,
            "links (env NAVETTE_TCP_LINKS)",
            tcp_links(&links),
            "this rank's address on each network, same order on every rank, ADDR[@RATE] \
             comma-separated (e.g. 10.231.1.1@2gbit,10.231.2.1@1gbit): one rail per peer and link",
        ),
        tunable(
            section,
            "eager_connect",
            eager_connect.to_string(),
            "connect to every peer at start-up instead of on first use",
        ),
        tunable(
            section,
            "max_handshakes",
            max_handshakes.to_string(),
            "most connections in their handshake at once; more are refused",
        ),
        tunable(
            section,
            "handshake_timeout",
            duration(handshake_timeout),
            "a connection still in its handshake after this long is dropped",
        ),
        tunable(
            section,
            "congestion (env NAVETTE_TCP_CONGESTION)",
            congestion.to_string(),
            "congestion control: system, NAME (every connection) or loopback:NAME",
        ),
        tunable(
            section,
            "keepalive (env NAVETTE_TCP_KEEPALIVE_S)",
            keepalive.map_or("off".into(), duration),
            "idle connections are probed after this long: a peer host that vanished without a \
             reset is found within about twice it",
        ),
    ];
    all.extend(rail_caps("TcpConfig.caps", caps));
    all
}

/// The links setting for people: the default is one link on `bind`.
fn tcp_links(links: &[navette::tcp::TcpLink]) -> String {
    if links.is_empty() {
        return "none (one link, on bind)".to_owned();
    }
    let text: Vec<String> = links.iter().map(ToString::to_string).collect();
    text.join(",")
}

fn engine_config() -> Vec<Tunable> {
    let section = "EngineConfig";
    let EngineConfig {
        rank,
        size,
        limits,
        max_buffered_bytes,
        max_reorder_chunks,
        strategy,
        channel_strategies,
    } = EngineConfig::default();
    let Limits {
        max_body_len,
        max_chunks,
        max_eager_len,
        max_fragment_len,
        max_message_len,
    } = limits;
    vec![
        tunable(
            section,
            "rank",
            rank.to_string(),
            "this process's rank (set per node by the session)",
        ),
        tunable(
            section,
            "size",
            size.map_or_else(|| "unset".to_owned(), |size| size.to_string()),
            "number of ranks in the job (set per node by the session)",
        ),
        tunable(
            section,
            "limits.max_body_len",
            bytes(u64::from(max_body_len)),
            "largest packet body accepted from a peer (header excluded)",
        ),
        tunable(
            section,
            "limits.max_chunks",
            max_chunks.to_string(),
            "largest number of chunks in one packet from a peer",
        ),
        tunable(
            section,
            "limits.max_eager_len",
            bytes(u64::from(max_eager_len)),
            "largest data payload of one eager chunk from a peer",
        ),
        tunable(
            section,
            "limits.max_fragment_len",
            bytes(u64::from(max_fragment_len)),
            "largest data payload of one rendezvous data chunk from a peer",
        ),
        tunable(
            section,
            "limits.max_message_len",
            bytes(max_message_len),
            "largest total length a peer's rendezvous request may announce",
        ),
        tunable(
            section,
            "max_buffered_bytes",
            bytes(max_buffered_bytes as u64),
            "most unexpected eager and out-of-order bytes held from peers; more closes the rail",
        ),
        tunable(
            section,
            "max_reorder_chunks",
            max_reorder_chunks.to_string(),
            "most out-of-order sequenced chunks held per gate",
        ),
        tunable(
            section,
            "strategy",
            strategy.name(),
            "strategy of channels that name none: default, aggregate or split \
             (env NAVETTE_STRATEGY, e.g. aggregate,3=split)",
        ),
        tunable(
            section,
            "channel_strategies",
            format!("{channel_strategies:?}"),
            "channels that name their own strategy (env NAVETTE_STRATEGY's CHANNEL=NAME)",
        ),
    ]
}

fn rail_caps(section: &'static str, caps: RailCaps) -> Vec<Tunable> {
    let RailCaps {
        rdv_threshold,
        max_fragment,
        max_packet,
        latency,
        bandwidth,
        read_min,
    } = caps;
    vec![
        tunable(
            section,
            "rdv_threshold",
            bytes(rdv_threshold as u64),
            "pieces of this size or more go by rendezvous, smaller ones eagerly (0: all by rendezvous)",
        ),
        tunable(
            section,
            "max_fragment",
            bytes(max_fragment as u64),
            "largest rendezvous data chunk in one packet",
        ),
        tunable(
            section,
            "max_packet",
            bytes(max_packet as u64),
            "largest packet body the driver accepts",
        ),
        tunable(
            section,
            "latency",
            duration(latency),
            "one-way latency of a small packet (read by strategies)",
        ),
        tunable(
            section,
            "bandwidth",
            rate(bandwidth),
            "bandwidth in bytes per second, 0 if unknown (read by strategies)",
        ),
        tunable(
            section,
            "read_min",
            read_min.map_or_else(|| "none".to_owned(), |min| bytes(min as u64)),
            "the receiver reads rendezvous data of this size or more from the sender's memory \
             at the request (set by the shm driver where the kernel allows it)",
        ),
    ]
}

fn node_config(section: &'static str, config: NodeConfig) -> Vec<Tunable> {
    let NodeConfig {
        wait_timeout,
        spin_rounds,
        oversubscribed_spin_rounds,
        yield_rounds,
        block_for,
        report_after,
    } = config;
    vec![
        tunable(
            section,
            "wait_timeout",
            wait_timeout.map_or("none (wait forever)".to_owned(), duration),
            "a wait with no progress for this long fails as Stalled",
        ),
        tunable(
            section,
            "spin_rounds",
            spin_rounds.to_string(),
            "idle progress rounds spent spinning before yielding the CPU (a core per rank)",
        ),
        tunable(
            section,
            "oversubscribed_spin_rounds",
            oversubscribed_spin_rounds.to_string(),
            "the same when the session has more ranks than this host has cores",
        ),
        tunable(
            section,
            "yield_rounds",
            yield_rounds.to_string(),
            "idle rounds spent yielding before blocking in the driver",
        ),
        tunable(
            section,
            "block_for",
            duration(block_for),
            "longest a waiting thread blocks in the driver at a time",
        ),
        tunable(
            section,
            "report_after",
            duration(report_after),
            "a wait with no progress this long logs what the node waits for",
        ),
    ]
}

/// The settings `SimCluster::builder` starts from where they differ from
/// the `Default` impls above. The builder has no accessors, so they are
/// restated here; a test checks them against the builder's `Debug` output.
pub const SIM_MAX_FRAGMENT: usize = 256 << 10;
/// See [`SIM_MAX_FRAGMENT`].
pub const SIM_WAIT_TIMEOUT: Duration = Duration::from_secs(60);
/// See [`SIM_MAX_FRAGMENT`].
pub const SIM_SEED: u64 = 0;
/// See [`SIM_MAX_FRAGMENT`].
pub const SIM_TOPOLOGY: Topology = Topology::FullMesh;

fn sim_builder() -> Vec<Tunable> {
    let section = "SimClusterBuilder";
    let LinkSpec {
        latency,
        bandwidth,
        jitter,
    } = LinkSpec::default();
    let RailCaps { rdv_threshold, .. } = RailCaps::default();
    vec![
        tunable(
            section,
            "seed",
            SIM_SEED.to_string(),
            "seed of the network's randomness (jitter)",
        ),
        tunable(
            section,
            "topology",
            format!("{SIM_TOPOLOGY:?}"),
            "which pairs of ranks are linked (FullMesh or Ring)",
        ),
        tunable(
            section,
            "link.latency",
            duration(latency),
            "propagation delay added to every packet (also the rails' RailCaps::latency)",
        ),
        tunable(
            section,
            "link.bandwidth",
            rate(bandwidth),
            "serialization rate in bytes per second, 0 infinite (also the rails' RailCaps::bandwidth)",
        ),
        tunable(
            section,
            "link.jitter",
            duration(jitter),
            "upper bound of a uniform random extra delay per packet",
        ),
        tunable(
            section,
            "rails",
            "1 (the link above)",
            "one rail per link spec for every linked pair (multi-rail)",
        ),
        tunable(
            section,
            "rdv_threshold",
            bytes(rdv_threshold as u64),
            "RailCaps::rdv_threshold of every sim rail",
        ),
        tunable(
            section,
            "max_fragment",
            bytes(SIM_MAX_FRAGMENT as u64),
            "RailCaps::max_fragment of every sim rail",
        ),
        tunable(
            section,
            "node_config.wait_timeout",
            duration(SIM_WAIT_TIMEOUT),
            "NodeConfig::wait_timeout of every sim node",
        ),
    ]
}

/// A byte count with its binary short form: `16384 (16 KiB)`.
fn bytes(n: u64) -> String {
    let short = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")]
        .into_iter()
        .find(|&(shift, _)| n != 0 && n.is_multiple_of(1u64 << shift))
        .map(|(shift, unit)| format!(" ({} {unit})", n >> shift));
    format!("{n}{}", short.unwrap_or_default())
}

fn duration(d: Duration) -> String {
    format!("{d:?}")
}

fn rate(bytes_per_s: u64) -> String {
    match bytes_per_s {
        0 => "0".to_owned(),
        b => format!("{b} B/s ({} GB/s)", b as f64 / 1e9),
    }
}

/// The table printed by `navette info config`.
pub fn config_table() -> String {
    let all = tunables();
    let width = |f: fn(&Tunable) -> usize| all.iter().map(f).max().unwrap_or(0);
    let (name_w, default_w) = (width(|t| t.name.len()), width(|t| t.default.len()));
    let mut out = String::new();
    let mut section = "";
    for t in &all {
        if t.section != section {
            section = t.section;
            let _ = writeln!(out, "{}[{section}]", if out.is_empty() { "" } else { "\n" });
        }
        let _ = writeln!(
            out,
            "  {:name_w$}  {:default_w$}  {}",
            t.name, t.default, t.help
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use navette::sim::SimCluster;

    use super::*;

    #[test]
    fn sim_builder_settings_match_the_builder() {
        let debug = format!("{:?}", SimCluster::builder(2));
        for expected in [
            format!("max_fragment: {SIM_MAX_FRAGMENT},"),
            format!("wait_timeout: Some({SIM_WAIT_TIMEOUT:?})"),
            format!("seed: {SIM_SEED},"),
            format!("topology: {SIM_TOPOLOGY:?},"),
            format!("rails: [{:?}]", LinkSpec::default()),
        ] {
            assert!(debug.contains(&expected), "{expected} not in {debug}");
        }
    }

    #[test]
    fn bytes_are_readable() {
        assert_eq!(bytes(16384), "16384 (16 KiB)");
        assert_eq!(bytes(1000), "1000");
        assert_eq!(bytes(0), "0");
    }
}
