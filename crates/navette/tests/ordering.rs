//! Order per (gate, tag) when rails overtake each other.

mod common;

use std::time::Duration;

use common::{check, cluster, pattern};
use navette::sim::SimCluster;
use navette::{RecvFrom, TagMatch};
use navette_sim::LinkSpec;

/// Two rails between each pair: a slow one and a fast, jittery one, so
/// packets sent later on the fast rail overtake earlier ones on the slow.
fn reordering_cluster() -> SimCluster {
    cluster(2)
        .rails(vec![
            LinkSpec::new(Duration::from_micros(50), 1_000_000_000),
            LinkSpec::new(Duration::from_micros(1), 10_000_000_000)
                .with_jitter(Duration::from_micros(30)),
        ])
        .rdv_threshold(2048)
        .max_fragment(1000)
        .build()
}

#[test]
fn messages_of_one_tag_arrive_in_send_order_across_rails() {
    let cluster = reordering_cluster();
    let (a, b) = (cluster.node(0), cluster.node(1));
    // Mixed sizes: eager and rendezvous messages interleave on one tag.
    let sizes: Vec<usize> = (0..200).map(|i| [8, 100, 3000, 0, 1500][i % 5]).collect();
    let sends: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| a.isend(a.gate(1), 7, pattern(n, i as u64)).unwrap())
        .collect();
    // Receive with the catch-all tag: the n-th match is the n-th send.
    for (i, &n) in sizes.iter().enumerate() {
        let got = b
            .irecv(RecvFrom::any(), TagMatch::any(), vec![0u8; 4096])
            .wait()
            .unwrap();
        assert_eq!(got.status.tag, 7);
        check(&got.data, n, i as u64);
    }
    for s in sends {
        s.wait().unwrap();
    }
}

#[test]
fn the_network_really_reorders() {
    // The guard for the test above: on these rails, raw arrival order differs
    // from send order (otherwise the ordering test would prove nothing).
    let cluster = reordering_cluster();
    let links = cluster.links_between(0, 1);
    let arrivals = cluster.with_network(|net| {
        for i in 0..50u8 {
            net.send(0, links[i as usize % 2], vec![i]).unwrap();
        }
        let mut order = Vec::new();
        while net.advance() {
            while let Some(event) = net.poll_event() {
                if let navette_sim::SimEvent::Delivered { bytes, .. } = event {
                    order.push(bytes[0]);
                }
            }
        }
        order
    });
    assert_eq!(arrivals.len(), 50);
    assert!(arrivals.windows(2).any(|w| w[0] > w[1]), "{arrivals:?}");
}

#[test]
fn order_holds_per_tag_when_tags_interleave() {
    let cluster = reordering_cluster();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let count = 60;
    let sends: Vec<_> = (0..count)
        .flat_map(|i| (0..3u64).map(move |tag| (tag, i)))
        .map(|(tag, i)| {
            let n = if i % 7 == 0 { 3000 } else { 16 };
            a.isend(a.gate(1), tag, pattern(n, tag * 1000 + i)).unwrap()
        })
        .collect();
    // Drain the tags in the opposite order to their sending.
    for tag in (0..3u64).rev() {
        for i in 0..count {
            let n = if i % 7 == 0 { 3000 } else { 16 };
            let got = b.irecv(b.gate(0), tag, vec![0u8; 4096]).wait().unwrap();
            check(&got.data, n, tag * 1000 + i);
        }
    }
    for s in sends {
        s.wait().unwrap();
    }
}
