//! Timing of packets: serialization, latency, jitter and ordering.

mod common;

use common::{deliveries, drain, ns, us};
use navette_sim::{LinkId, LinkSpec, SimEvent, SimNetwork};

#[test]
fn one_packet_takes_latency_plus_size_over_bandwidth() {
    let mut net = SimNetwork::new(1);
    let n = net.add_nodes(2);
    assert_eq!(n, 0..2);
    // 125 MB/s: 1500 bytes take 12 µs; latency 5 µs.
    let link = net
        .connect(0, 1, LinkSpec::new(us(5), 125_000_000))
        .unwrap();
    net.send(0, link, vec![0xab; 1500]).unwrap();
    assert_eq!(net.in_flight(), 1);

    let events = drain(&mut net);
    assert_eq!(
        events,
        vec![
            (us(12), SimEvent::SendDone { node: 0, link }),
            (
                us(17),
                SimEvent::Delivered {
                    to: 1,
                    from: 0,
                    link,
                    bytes: vec![0xab; 1500]
                }
            ),
        ]
    );
    assert_eq!(net.in_flight(), 0);
    assert_eq!(net.now(), us(17));
}

#[test]
fn huge_packet_on_slow_link_does_not_overflow() {
    let mut net = SimNetwork::new(1);
    net.add_nodes(2);
    // 3 bytes per second: 9 bytes take exactly 3 s, computed in u128 ns.
    let link = net.connect(0, 1, LinkSpec::new(ns(0), 3)).unwrap();
    net.send(0, link, vec![0; 9]).unwrap();
    let events = drain(&mut net);
    assert_eq!(events[1].0, std::time::Duration::from_secs(3));
}

#[test]
fn packets_serialize_fifo_per_direction() {
    let mut net = SimNetwork::new(1);
    net.add_nodes(2);
    // 1 GB/s: 1000 bytes take 1 µs each; latency 10 µs.
    let link = net
        .connect(0, 1, LinkSpec::new(us(10), 1_000_000_000))
        .unwrap();
    for i in 0..3 {
        net.send(0, link, vec![i; 1000]).unwrap();
    }
    // The other direction has its own serializer.
    net.send(1, link, vec![9; 1000]).unwrap();

    let events = drain(&mut net);
    let done: Vec<_> = events
        .iter()
        .filter(|(_, e)| matches!(e, SimEvent::SendDone { node: 0, .. }))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(done, vec![us(1), us(2), us(3)]);
    let got = deliveries(&events);
    let to_1: Vec<_> = got
        .iter()
        .filter(|d| d.1 == 1)
        .map(|d| (d.0, d.3[0]))
        .collect();
    assert_eq!(to_1, vec![(us(11), 0), (us(12), 1), (us(13), 2)]);
    let to_0: Vec<_> = got.iter().filter(|d| d.1 == 0).map(|d| d.0).collect();
    assert_eq!(to_0, vec![us(11)]);
}

#[test]
fn infinite_bandwidth_costs_only_latency() {
    let mut net = SimNetwork::new(1);
    net.add_nodes(2);
    let link = net.connect(0, 1, LinkSpec::new(us(3), 0)).unwrap();
    net.send(0, link, vec![1; 1 << 20]).unwrap();
    net.send(0, link, vec![2; 1 << 20]).unwrap();
    let times: Vec<_> = deliveries(&drain(&mut net)).iter().map(|d| d.0).collect();
    assert_eq!(times, vec![us(3), us(3)]);
}

#[test]
fn jitter_never_reorders_one_link() {
    let mut net = SimNetwork::new(99);
    net.add_nodes(2);
    let spec = LinkSpec::new(us(1), 0).with_jitter(us(50));
    let link = net.connect(0, 1, spec).unwrap();
    for i in 0..200u8 {
        net.send(0, link, vec![i]).unwrap();
    }
    let got = deliveries(&drain(&mut net));
    let order: Vec<u8> = got.iter().map(|d| d.3[0]).collect();
    assert_eq!(order, (0..200).collect::<Vec<_>>(), "seed {}", net.seed());
    assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
    // Jitter actually spread the arrivals.
    assert!(got.iter().any(|d| d.0 > us(1)), "seed {}", net.seed());
    assert!(got.iter().all(|d| d.0 <= us(51)));
}

#[test]
fn two_links_of_different_latency_reorder() {
    let mut net = SimNetwork::new(1);
    net.add_nodes(2);
    let slow = net.connect(0, 1, LinkSpec::new(us(100), 0)).unwrap();
    let fast = net.connect(0, 1, LinkSpec::new(us(1), 0)).unwrap();
    assert_eq!(net.links_of(0), &[slow, fast]);
    assert_eq!(net.links_of(1), &[slow, fast]);
    net.send(0, slow, b"first".to_vec()).unwrap();
    net.send(0, fast, b"second".to_vec()).unwrap();
    let got = deliveries(&drain(&mut net));
    let order: Vec<&[u8]> = got.iter().map(|d| d.3.as_slice()).collect();
    assert_eq!(order, vec![&b"second"[..], &b"first"[..]]);
}

#[test]
fn send_done_comes_before_delivered() {
    let mut net = SimNetwork::new(1);
    net.add_nodes(2);
    // Zero latency and infinite bandwidth: both events are due at once, and
    // SendDone still comes first.
    let link = net.connect(0, 1, LinkSpec::new(ns(0), 0)).unwrap();
    net.send(0, link, vec![1]).unwrap();
    assert_eq!(net.next_event_time(), Some(ns(0)));
    assert_eq!(net.poll_event(), Some(SimEvent::SendDone { node: 0, link }));
    assert!(matches!(
        net.poll_event(),
        Some(SimEvent::Delivered { to: 1, .. })
    ));
    assert_eq!(net.poll_event(), None);
    assert!(!net.advance());
}

#[test]
fn poll_only_returns_due_events_and_time_never_goes_back() {
    let mut net = SimNetwork::new(1);
    net.add_nodes(2);
    let link = net.connect(0, 1, LinkSpec::default()).unwrap();
    net.send(1, link, vec![5; 100]).unwrap();
    assert_eq!(net.poll_event(), None, "nothing is due at time zero");
    assert_eq!(net.next_event_time(), Some(ns(10)));
    net.advance_to(us(1000));
    net.advance_to(us(1));
    assert_eq!(net.now(), us(1000));
    // Both events were passed over; they come out in order.
    assert_eq!(net.poll_event(), Some(SimEvent::SendDone { node: 1, link }));
    assert!(matches!(
        net.poll_event(),
        Some(SimEvent::Delivered { to: 0, from: 1, .. })
    ));
    let stats = net.stats(link).unwrap();
    assert_eq!(stats.b_to_a.packets_delivered, 1);
    assert_eq!(stats.sent_by(1).unwrap().bytes_sent, 100);
}

#[test]
fn loop_link_delivers_to_self() {
    let mut net = SimNetwork::new(1);
    let a = net.add_node();
    let link = net.connect(a, a, LinkSpec::default()).unwrap();
    assert_eq!(link, LinkId(0));
    assert_eq!(net.links_of(a), &[link]);
    assert_eq!(net.peer(a, link), Ok(a));
    // 1 byte at 10 GB/s rounds up to 1 ns, plus 1 µs latency.
    net.send(a, link, vec![3]).unwrap();
    let got = deliveries(&drain(&mut net));
    assert_eq!(got, vec![(ns(1001), a, a, vec![3])]);
}
