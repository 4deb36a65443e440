//! A node is Send + Sync: many threads post and wait at once.

mod common;

use common::{check, cluster, pattern};
use navette::Node;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn node_is_send_and_sync() {
    assert_send_sync::<Node>();
}

#[test]
fn eight_threads_times_a_thousand_messages_on_one_node() {
    const THREADS: u64 = 8;
    const MESSAGES: u64 = 1000;
    let cluster = cluster(2).rdv_threshold(2048).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let size = |t: u64, i: u64| ((t * 131 + i * 17) % 3000) as usize;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            // Eight senders on rank 0, each on its own tag, posting at once.
            s.spawn(move || {
                let mut pending = Vec::new();
                for i in 0..MESSAGES {
                    let data = pattern(size(t, i), t << 32 | i);
                    pending.push(a.isend(a.gate(1), t, data).unwrap());
                    if pending.len() == 16 {
                        pending.drain(..).for_each(|r| {
                            r.wait().unwrap();
                        });
                    }
                }
                pending.into_iter().for_each(|r| {
                    r.wait().unwrap();
                });
            });
            // Eight receivers on rank 1, one per tag.
            s.spawn(move || {
                for i in 0..MESSAGES {
                    let got = b.irecv(b.gate(0), t, vec![0u8; 4096]).wait().unwrap();
                    check(&got.data, size(t, i), t << 32 | i);
                }
            });
        }
    });
}

#[test]
fn many_threads_share_any_source_receives() {
    // Four ranks send to rank 0, whose threads all receive from any source.
    let cluster = cluster(4).build();
    let total: usize = std::thread::scope(|s| {
        for r in 1..4u32 {
            let node = cluster.node(r);
            s.spawn(move || {
                for i in 0..200u64 {
                    node.send(node.gate(0), 1, &pattern(64, u64::from(r) << 32 | i))
                        .unwrap();
                }
            });
        }
        let receivers: Vec<_> = (0..4)
            .map(|_| {
                let node = cluster.node(0);
                s.spawn(move || {
                    let mut seen = 0;
                    for _ in 0..150 {
                        let got = node
                            .irecv(navette::RecvFrom::any(), 1u64, vec![0u8; 64])
                            .wait()
                            .unwrap();
                        assert_eq!(got.data.len(), 64);
                        seen += 1;
                    }
                    seen
                })
            })
            .collect();
        receivers.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(total, 600);
}

#[test]
fn a_progress_thread_runs_beside_application_threads_and_stops() {
    let cluster = cluster(2).rdv_threshold(1024).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let progress = a.spawn_progress_thread().unwrap();
    let sends: Vec<_> = (0..50u64)
        .map(|i| a.isend(a.gate(1), i, pattern(3000, i)).unwrap())
        .collect();
    for i in 0..50u64 {
        let got = b.irecv(b.gate(0), i, vec![0u8; 3000]).wait().unwrap();
        check(&got.data, 3000, i);
    }
    for s in sends {
        s.wait().unwrap();
    }
    progress.stop().unwrap();
}
