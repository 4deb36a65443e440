//! Thousands of simulated ranks in one process.

mod common;

use common::{check, cluster, pattern};
use navette::sim::Topology;

#[test]
fn two_thousand_ranks_pass_a_message_around_a_ring() {
    const N: u32 = 2000;
    let cluster = cluster(N).topology(Topology::Ring).build();
    // Every rank posts its receive from its predecessor, then sends to its
    // successor; one thread waits for everything.
    let recvs: Vec<_> = (0..N)
        .map(|r| {
            let node = cluster.node(r);
            node.irecv(node.gate((r + N - 1) % N), 1u64, vec![0u8; 256])
        })
        .collect();
    let sends: Vec<_> = (0..N)
        .map(|r| {
            let node = cluster.node(r);
            node.isend(
                node.gate((r + 1) % N),
                1,
                pattern(100 + (r as usize % 100), r.into()),
            )
            .unwrap()
        })
        .collect();
    for (r, recv) in recvs.into_iter().enumerate() {
        let from = (r as u32 + N - 1) % N;
        let got = recv.wait().unwrap();
        assert_eq!(got.status.peer, from);
        check(&got.data, 100 + (from as usize % 100), from.into());
    }
    for send in sends {
        send.wait().unwrap();
    }
}
