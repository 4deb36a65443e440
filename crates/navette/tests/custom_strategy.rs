//! A strategy written outside the library: the trait, the moves of
//! `tactics`, and `Node::set_custom_strategy`. In the simulator, so that
//! packets are counted the same on every run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{check, cluster, pattern};
use navette::strategy::{Fill, PacketBuilder, RailView, Strategy, Window, tactics};
use navette::{ChannelId, GateStats, Node};

/// At most two chunks per packet, oldest first; counts its turns.
#[derive(Debug)]
struct Pairs {
    turns: Arc<AtomicUsize>,
}

impl Strategy for Pairs {
    fn name(&self) -> &'static str {
        "pairs"
    }

    fn try_and_commit(
        &mut self,
        window: &mut Window,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill {
        self.turns.fetch_add(1, Ordering::Relaxed);
        while packet.chunk_count() < 2 && tactics::push_front(window, &rails.rail.caps, packet) {}
        Fill::Done
    }
}

const MESSAGES: u64 = 10;
const LEN: usize = 100;

/// Rank 0 queues every message before any progress, then rank 1 takes
/// them; returns rank 0's counters of its gate to rank 1.
fn send_all(custom: Option<Arc<AtomicUsize>>) -> GateStats {
    let cluster = cluster(2).build();
    let (a, b): (&Node, &Node) = (cluster.node(0), cluster.node(1));
    if let Some(turns) = custom {
        a.set_custom_strategy(ChannelId::DEFAULT, Box::new(Pairs { turns }));
    }
    let sends: Vec<_> = (0..MESSAGES)
        .map(|i| a.isend(a.gate(1), i, pattern(LEN, i)).expect("send"))
        .collect();
    for i in 0..MESSAGES {
        let got = b.irecv(b.gate(0), i, vec![0u8; LEN]).wait().expect("recv");
        check(&got.data, LEN, i);
    }
    for send in sends {
        send.wait().expect("sent");
    }
    a.gate_stats()
        .into_iter()
        .find(|g| g.channel == ChannelId::DEFAULT && g.peer == 1)
        .expect("the gate to rank 1")
}

#[test]
fn a_strategy_of_ones_own_decides_the_packets() {
    let turns = Arc::new(AtomicUsize::new(0));
    let pairs = send_all(Some(Arc::clone(&turns)));
    assert_eq!(pairs.chunks_sent, MESSAGES, "{pairs:?}");
    assert_eq!(
        pairs.packets_sent,
        MESSAGES / 2,
        "two chunks a packet: {pairs:?}"
    );
    assert!(turns.load(Ordering::Relaxed) as u64 >= MESSAGES / 2);
    // The default strategy, on the same traffic, shares packets more.
    let aggregate = send_all(None);
    assert_eq!(aggregate.chunks_sent, MESSAGES);
    assert!(aggregate.packets_sent < MESSAGES / 2, "{aggregate:?}");
}
