//! The `split` strategy on a simulated pair of rails of different speeds:
//! large messages are cut over both in proportion to their bandwidth and
//! reassembled whole; small ones take the rail that delivers them soonest;
//! order holds per tag. Deterministic: virtual time, seeded network.

mod common;

use std::time::Duration;

use common::{check, cluster, pattern};
use navette::sim::SimCluster;
use navette::{EngineConfig, StrategyKind};
use navette_sim::{DirectionStats, LinkSpec};

fn engine(strategy: StrategyKind) -> EngineConfig {
    EngineConfig {
        strategy,
        ..EngineConfig::default()
    }
}

/// Two rails from rank 0 to rank 1: `fast` carries 2 GB/s, `slow` 1 GB/s.
fn two_speeds(strategy: StrategyKind) -> SimCluster {
    cluster(2)
        .rails(vec![
            LinkSpec::new(Duration::from_micros(5), 2_000_000_000),
            LinkSpec::new(Duration::from_micros(5), 1_000_000_000),
        ])
        .rdv_threshold(16 << 10)
        .max_fragment(256 << 10)
        .engine_config(engine(strategy))
        .build()
}

/// What rank 0 put on each link to rank 1, as `count` reads it from the
/// link's counters for that direction.
fn sent_per_link(cluster: &SimCluster, count: impl Fn(&DirectionStats) -> u64) -> Vec<u64> {
    cluster
        .links_between(0, 1)
        .into_iter()
        .map(|link| {
            cluster.with_network(|net| {
                net.stats(link)
                    .expect("a link of the cluster")
                    .sent_by(0)
                    .map_or(0, &count)
            })
        })
        .collect()
}

/// Bytes rank 0 put on each link to rank 1.
fn bytes_per_link(cluster: &SimCluster) -> Vec<u64> {
    sent_per_link(cluster, |d| d.bytes_sent)
}

/// Sends `len` bytes from rank 0 to rank 1 `count` times; checks each
/// message; returns the virtual time it took.
fn transfer(cluster: &SimCluster, len: usize, count: u64) -> Duration {
    let (a, b) = (cluster.node(0), cluster.node(1));
    let start = cluster.now();
    for i in 0..count {
        let recv = b.irecv(b.gate(0), i, vec![0u8; len]);
        let send = a.isend(a.gate(1), i, pattern(len, i)).expect("send");
        let got = recv.wait().expect("recv");
        check(&got.data, len, i);
        send.wait().expect("send completes");
    }
    cluster.now() - start
}

#[test]
fn large_messages_are_cut_over_both_rails_in_proportion_to_their_bandwidth() {
    const LEN: usize = 16 << 20;
    let cluster = two_speeds(StrategyKind::Split);
    let took = transfer(&cluster, LEN, 4);
    let bytes = bytes_per_link(&cluster);
    let (fast, slow) = (bytes[0] as f64, bytes[1] as f64);
    assert!(slow > 0.0, "{bytes:?}");
    let ratio = fast / slow;
    assert!(
        (1.7..2.3).contains(&ratio),
        "fast/slow bytes {ratio:.2}: {bytes:?}"
    );
    // Both rails busy all along: close to the sum of the two bandwidths
    // (3 GB/s), in virtual time.
    let ideal = Duration::from_secs_f64(4.0 * LEN as f64 / 3e9);
    assert!(took < ideal.mul_f64(1.15), "{took:?} against {ideal:?}");
    // Each rail's bandwidth was measured on its packets.
    let node = cluster.node(0);
    let stats = node.gate_stats();
    assert!(
        stats.iter().any(|g| g.peer == 1 && g.packets_sent > 0),
        "{stats:?}"
    );
}

#[test]
fn one_rail_alone_takes_its_own_time() {
    // The comparison for the test above: the fast rail alone.
    const LEN: usize = 16 << 20;
    let cluster = cluster(2)
        .link(LinkSpec::new(Duration::from_micros(5), 2_000_000_000))
        .rdv_threshold(16 << 10)
        .max_fragment(256 << 10)
        .engine_config(engine(StrategyKind::Split))
        .build();
    let took = transfer(&cluster, LEN, 2);
    let alone = Duration::from_secs_f64(2.0 * LEN as f64 / 2e9);
    assert!(took >= alone, "{took:?} against {alone:?}");
}

/// Two rails of equal bandwidth, one far slower to deliver a packet.
fn two_latencies(strategy: StrategyKind) -> SimCluster {
    cluster(2)
        .rails(vec![
            LinkSpec::new(Duration::from_micros(50), 1_000_000_000),
            LinkSpec::new(Duration::from_micros(2), 1_000_000_000),
        ])
        .rdv_threshold(16 << 10)
        .max_fragment(256 << 10)
        .engine_config(engine(strategy))
        .build()
}

/// Packets rank 0 put on each link to rank 1.
fn packets_per_link(cluster: &SimCluster) -> Vec<u64> {
    sent_per_link(cluster, |d| d.packets_sent)
}

/// Bursts of small messages, each burst received before the next.
fn small_bursts(cluster: &SimCluster) {
    let (a, b) = (cluster.node(0), cluster.node(1));
    for burst in 0..50u64 {
        let recvs: Vec<_> = (0..4)
            .map(|k| b.irecv(b.gate(0), burst, vec![0u8; 64 + k]))
            .collect();
        let sends: Vec<_> = (0..4)
            .map(|k| {
                a.isend(a.gate(1), burst, pattern(64 + k, burst * 4 + k as u64))
                    .expect("send")
            })
            .collect();
        for (k, recv) in recvs.into_iter().enumerate() {
            let got = recv.wait().expect("recv");
            check(&got.data, 64 + k, burst * 4 + k as u64);
        }
        for send in sends {
            send.wait().expect("send completes");
        }
    }
}

#[test]
fn small_messages_take_the_rail_that_delivers_them_soonest() {
    let cluster = two_latencies(StrategyKind::Split);
    small_bursts(&cluster);
    let packets = packets_per_link(&cluster);
    assert_eq!(
        packets[0], 0,
        "the slow rail carried small packets: {packets:?}"
    );
    assert!(packets[1] > 0, "{packets:?}");
}

#[test]
fn without_split_small_messages_use_both_rails() {
    // The guard for the test above: on these rails, a strategy that does
    // not weigh them sends small packets over the slow one too.
    let cluster = two_latencies(StrategyKind::Default);
    small_bursts(&cluster);
    let packets = packets_per_link(&cluster);
    assert!(packets[0] > 0 && packets[1] > 0, "{packets:?}");
}

#[test]
fn split_keeps_order_per_tag_across_rails_with_mixed_sizes() {
    let cluster = two_speeds(StrategyKind::Split);
    let (a, b) = (cluster.node(0), cluster.node(1));
    let sizes: Vec<usize> = (0..120)
        .map(|i| [8, 300_000, 100, 20_000, 0, 1 << 20][i % 6])
        .collect();
    let sends: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| a.isend(a.gate(1), 3, pattern(n, i as u64)).expect("send"))
        .collect();
    for (i, &n) in sizes.iter().enumerate() {
        let got = b
            .irecv(b.gate(0), 3, vec![0u8; 1 << 20])
            .wait()
            .expect("recv");
        check(&got.data, n, i as u64);
    }
    for s in sends {
        s.wait().expect("send completes");
    }
    let bytes = bytes_per_link(&cluster);
    assert!(bytes.iter().all(|&b| b > 0), "{bytes:?}");
}
