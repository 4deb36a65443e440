//! Driven from one thread, a simulated run is a function of its seed.

mod common;

use std::time::Duration;

use common::pattern;
use navette::sim::SimCluster;
use navette_sim::LinkSpec;

/// Runs a fixed exchange and returns the virtual time of every completion.
fn trace(seed: u64) -> Vec<Duration> {
    let cluster = SimCluster::builder(3)
        .seed(seed)
        .link(
            LinkSpec::new(Duration::from_micros(2), 1_000_000_000)
                .with_jitter(Duration::from_micros(5)),
        )
        .rdv_threshold(1000)
        .build();
    let mut times = Vec::new();
    for round in 0..20u64 {
        let (from, to) = ((round % 3) as u32, ((round + 1) % 3) as u32);
        let (src, dst) = (cluster.node(from), cluster.node(to));
        let recv = dst.irecv(dst.gate(from), round, vec![0u8; 4000]);
        let send = src
            .isend(
                src.gate(to),
                round,
                pattern((round as usize * 397) % 4000, round),
            )
            .unwrap();
        send.wait().unwrap();
        times.push(cluster.now());
        recv.wait().unwrap();
        times.push(cluster.now());
    }
    times
}

#[test]
fn same_seed_same_run() {
    assert_eq!(trace(7), trace(7));
}

#[test]
fn another_seed_another_run() {
    assert_ne!(trace(7), trace(8));
}
