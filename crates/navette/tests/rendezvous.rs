//! Rendezvous from 0 bytes to 64 MiB, every byte checked: data goes
//! straight into the posted buffer.

mod common;

use common::{check, cluster, pattern};
use navette::{ReceiveMode, SendMode};

#[test]
fn rendezvous_from_zero_bytes_to_64_mib() {
    // Threshold 0: every message, even an empty one, takes the rendezvous path.
    let cluster = cluster(2).rdv_threshold(0).max_fragment(1 << 20).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let mut sizes = vec![0usize, 1, 2, 7, 4095, 4096, 4097, (1 << 20) - 1, 1 << 20];
    sizes.extend([(1 << 20) + 1, 3 << 20, 64 << 20]);
    std::thread::scope(|s| {
        let sizes = &sizes;
        s.spawn(move || {
            for &n in sizes {
                a.send(a.gate(1), n as u64, &pattern(n, n as u64)).unwrap();
            }
        });
        for &n in sizes {
            let mut buf = vec![0u8; n];
            let status = b.recv(b.gate(0), n as u64, &mut buf).unwrap();
            assert_eq!(status.len, n);
            check(&buf, n, n as u64);
        }
    });
}

#[test]
fn rendezvous_lands_in_a_buffer_allocated_after_the_header() {
    let cluster = cluster(2).rdv_threshold(32 << 10).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let n = 64 << 20;
    let body = pattern(n, 64);
    std::thread::scope(|s| {
        s.spawn(|| {
            let len = (n as u64).to_le_bytes();
            let mut msg = a.begin_packing(a.gate(1), 1).unwrap();
            msg.pack(&len, SendMode::Safer, ReceiveMode::Express)
                .unwrap();
            msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
                .unwrap();
            msg.end_packing().unwrap();
        });
        let mut msg = b.begin_unpacking(b.gate(0), 1u64).unwrap();
        let mut len = [0u8; 8];
        msg.unpack_express(&mut len, SendMode::Safer).unwrap();
        let mut got = vec![0u8; u64::from_le_bytes(len) as usize];
        msg.unpack_cheaper(&mut got, SendMode::Cheaper).unwrap();
        msg.end_unpacking().unwrap();
        check(&got, n, 64);
    });
}
