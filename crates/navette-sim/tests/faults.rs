//! Cutting and restoring links, and the errors of every operation.

mod common;

use common::{deliveries, drain, us};
use navette_sim::{LinkId, LinkSpec, SimError, SimEvent, SimNetwork};

#[test]
fn cut_drops_in_flight_and_fails_sends_then_restore_works() {
    let mut net = SimNetwork::new(3);
    net.add_nodes(3);
    let link = net.connect(0, 1, LinkSpec::new(us(10), 0)).unwrap();
    let other = net.connect(1, 2, LinkSpec::new(us(10), 0)).unwrap();
    net.send(0, link, vec![1; 10]).unwrap();
    net.send(1, link, vec![2; 20]).unwrap();
    net.send(1, other, vec![3; 30]).unwrap();
    assert_eq!(net.in_flight(), 3);

    net.advance_to(us(5));
    net.cut(link).unwrap();
    assert!(net.is_cut(link));
    assert!(!net.is_cut(other));
    assert_eq!(net.in_flight(), 1);
    let stats = net.stats(link).unwrap();
    assert_eq!(stats.packets_dropped(), 2);
    assert_eq!(stats.bytes_dropped(), 30);
    assert_eq!(stats.a_to_b.packets_dropped, 1);
    assert_eq!(stats.b_to_a.bytes_dropped, 20);
    assert_eq!(net.send(0, link, vec![4]), Err(SimError::LinkCut(link)));
    assert_eq!(net.send(1, link, vec![4]), Err(SimError::LinkCut(link)));
    // Cutting again changes nothing.
    net.cut(link).unwrap();
    assert_eq!(net.stats(link).unwrap().packets_dropped(), 2);

    // Send completions stay; only the other link's packet arrives.
    let events = drain(&mut net);
    let done = events
        .iter()
        .filter(|(_, e)| matches!(e, SimEvent::SendDone { .. }));
    assert_eq!(done.count(), 3);
    assert_eq!(deliveries(&events), vec![(us(10), 2, 1, vec![3; 30])]);

    net.restore(link).unwrap();
    assert!(!net.is_cut(link));
    let sent_at = net.now();
    net.send(0, link, vec![5]).unwrap();
    let got = deliveries(&drain(&mut net));
    assert_eq!(got, vec![(sent_at + us(10), 1, 0, vec![5])]);
    let stats = net.stats(link).unwrap();
    assert_eq!(stats.a_to_b.packets_sent, 2);
    assert_eq!(stats.a_to_b.packets_delivered, 1);
    assert_eq!(stats.a_to_b.packets_dropped, 1);
    // Failed sends were not counted.
    assert_eq!(stats.b_to_a.packets_sent, 1);
}

#[test]
fn dropped_packets_do_not_delay_later_ones() {
    let mut net = SimNetwork::new(3);
    net.add_nodes(2);
    let link = net
        .connect(0, 1, LinkSpec::new(us(1), 0).with_jitter(us(1000)))
        .unwrap();
    for _ in 0..20 {
        net.send(0, link, vec![0]).unwrap();
    }
    net.cut(link).unwrap();
    net.restore(link).unwrap();
    net.send(0, link, vec![1]).unwrap();
    let got = deliveries(&drain(&mut net));
    assert_eq!(got.len(), 1);
    assert!(got[0].0 <= us(1001), "seed {}", net.seed());
}

#[test]
fn errors_name_what_is_wrong() {
    let mut net = SimNetwork::new(0);
    net.add_nodes(3);
    let link = net.connect(0, 1, LinkSpec::default()).unwrap();
    let missing = LinkId(7);

    assert_eq!(
        net.connect(0, 3, LinkSpec::default()),
        Err(SimError::UnknownNode(3))
    );
    assert_eq!(
        net.connect(9, 0, LinkSpec::default()),
        Err(SimError::UnknownNode(9))
    );
    assert_eq!(
        net.send(0, missing, vec![]),
        Err(SimError::UnknownLink(missing))
    );
    assert_eq!(
        net.send(2, link, vec![]),
        Err(SimError::NotAnEndpoint { node: 2, link })
    );
    assert_eq!(
        net.peer(2, link),
        Err(SimError::NotAnEndpoint { node: 2, link })
    );
    assert_eq!(net.peer(0, missing), Err(SimError::UnknownLink(missing)));
    assert_eq!(
        net.spec(missing).unwrap_err(),
        SimError::UnknownLink(missing)
    );
    assert_eq!(net.stats(missing), Err(SimError::UnknownLink(missing)));
    assert_eq!(net.cut(missing), Err(SimError::UnknownLink(missing)));
    assert_eq!(net.restore(missing), Err(SimError::UnknownLink(missing)));
    assert!(!net.is_cut(missing));
    assert!(net.links_of(42).is_empty());

    // Failed operations changed nothing.
    assert_eq!(net.in_flight(), 0);
    assert_eq!(net.next_event_time(), None);
    assert_eq!(net.links_of(0), &[link]);
    assert!(net.links_of(2).is_empty());

    assert_eq!(SimError::LinkCut(LinkId(4)).to_string(), "link 4 is cut");
    assert_eq!(
        SimError::NotAnEndpoint { node: 2, link }.to_string(),
        "node 2 is not an endpoint of link 0"
    );
}

#[test]
fn accessors_report_the_topology() {
    let mut net = SimNetwork::new(5);
    assert_eq!(net.add_node(), 0);
    assert_eq!(net.add_nodes(3), 1..4);
    assert_eq!(net.add_node(), 4);
    assert_eq!(net.node_count(), 5);
    let spec = LinkSpec::new(us(2), 1000).with_jitter(us(1));
    let a = net.connect(3, 1, spec.clone()).unwrap();
    let b = net.connect(1, 4, LinkSpec::default()).unwrap();
    assert_eq!((a, b), (LinkId(0), LinkId(1)));
    assert_eq!(net.spec(a), Ok(&spec));
    assert_eq!(net.peer(3, a), Ok(1));
    assert_eq!(net.peer(1, a), Ok(3));
    assert_eq!(net.links_of(1), &[a, b]);
    let stats = net.stats(a).unwrap();
    assert_eq!((stats.a, stats.b), (3, 1));
    assert_eq!(net.seed(), 5);
    let debug = format!("{net:?}");
    assert!(debug.contains("seed: 5"), "{debug}");
}
