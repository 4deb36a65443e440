//! Same seed, same run; different seed, different jitter; and scale.

mod common;

use std::time::Duration;

use common::{deliveries, drain, us};
use navette_sim::{LinkSpec, SimEvent, SimNetwork};

/// A small jittery mesh with two rails per pair and traffic both ways.
fn scenario(seed: u64) -> Vec<(Duration, SimEvent)> {
    let mut net = SimNetwork::new(seed);
    let nodes = net.add_nodes(4);
    let mut links = Vec::new();
    for a in nodes.clone() {
        for b in (a + 1)..nodes.end {
            let spec = LinkSpec::new(us(2), 1_000_000_000).with_jitter(us(20));
            links.push(net.connect(a, b, spec.clone()).unwrap());
            links.push(net.connect(a, b, spec.with_jitter(us(3))).unwrap());
        }
    }
    let mut events = Vec::new();
    for round in 0..10u8 {
        for &link in &links {
            let ends = net.stats(link).unwrap();
            net.send(ends.a, link, vec![round; 64]).unwrap();
            net.send(ends.b, link, vec![round; 128]).unwrap();
        }
        net.advance_to(net.now() + us(3));
        while let Some(e) = net.poll_event() {
            events.push((net.now(), e));
        }
    }
    events.extend(drain(&mut net));
    events
}

#[test]
fn same_seed_gives_the_same_event_sequence() {
    for seed in [0, 1, 0xdead_beef] {
        let first = scenario(seed);
        let second = scenario(seed);
        assert_eq!(first.len(), 2 * 10 * 12 * 2);
        assert_eq!(first, second, "seed {seed} did not replay");
    }
}

#[test]
fn different_seed_gives_different_jitter() {
    let times =
        |seed| -> Vec<Duration> { deliveries(&scenario(seed)).iter().map(|d| d.0).collect() };
    assert_ne!(times(1), times(2));
}

#[test]
fn ring_of_5000_nodes_delivers_everything() {
    const N: u32 = 5000;
    let mut net = SimNetwork::new(2024);
    let nodes = net.add_nodes(N);
    let ring: Vec<_> = nodes
        .clone()
        .map(|i| {
            let spec = LinkSpec::default().with_jitter(Duration::from_nanos(500));
            net.connect(i, (i + 1) % N, spec).unwrap()
        })
        .collect();
    for i in nodes.clone() {
        // ring[i] joins i to its successor.
        net.send(i, ring[i as usize], i.to_le_bytes().to_vec())
            .unwrap();
    }
    assert_eq!(net.in_flight(), N as usize);

    let mut received = vec![false; N as usize];
    let mut done = 0;
    for (_, event) in drain(&mut net) {
        match event {
            SimEvent::Delivered {
                to, from, bytes, ..
            } => {
                assert_eq!(to, (from + 1) % N);
                assert_eq!(bytes, from.to_le_bytes());
                assert!(!received[to as usize], "node {to} received twice");
                received[to as usize] = true;
            }
            SimEvent::SendDone { .. } => done += 1,
        }
    }
    assert!(received.iter().all(|&r| r), "seed {}", net.seed());
    assert_eq!(done, N);
    assert_eq!(net.in_flight(), 0);
    assert_eq!(net.links_of(0).len(), 2);
}
