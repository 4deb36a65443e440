//! The `shm+tcp` driver with ranks as threads of this process: a shm rail
//! and a tcp rail to every peer, both carrying traffic of the same gates.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{check, pattern};
use navette::shm_tcp::ShmTcpDriver;
use navette::{Node, RuntimeConfig, init_shm_tcp, wait_all};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;

const JOB_KEY: [u8; JOB_KEY_LEN] = [0x6e; JOB_KEY_LEN];

fn config() -> RuntimeConfig {
    common::test_config(Duration::from_secs(300))
}

fn run<R: Send>(size: u32, f: impl Fn(&Node, &ShmTcpDriver) -> R + Sync) -> Vec<R> {
    let mut job = [0u8; 8];
    getrandom::fill(&mut job).expect("random bytes");
    let ranks = LocalBootstrap::job(size, u64::from_le_bytes(job), JOB_KEY);
    common::run_ranks(ranks, &config(), init_shm_tcp, f)
}

fn salt(from: u32, to: u32, index: usize) -> u64 {
    (u64::from(from) * 1000 + u64::from(to)) * 10_000 + index as u64
}

/// Every rank sends many messages at once to every other (small ones, and
/// a few from rendezvous sizes up to 4 MiB): more than the shm rail takes
/// in one round, so the tcp rail carries a share. Each arrives whole, on
/// its tag, in the order sent.
#[test]
fn both_rails_carry_messages_that_arrive_whole_and_in_order() {
    const COUNT: usize = 600;
    let size = |i: usize| match i % 100 {
        99 => 4 << 20,
        49 => 300_000,
        _ => i % 700,
    };
    let stats = run(3, |node, driver| {
        let me = node.rank();
        let peers: Vec<u32> = (0..3).filter(|&r| r != me).collect();
        let sends: Vec<_> = peers
            .iter()
            .flat_map(|&to| (0..COUNT).map(move |i| (to, i)))
            .map(|(to, i)| {
                let data = Bytes::from(pattern(size(i), salt(me, to, i)));
                node.isend(node.gate(to), 7, data).unwrap()
            })
            .collect();
        let mut buf = vec![0u8; 4 << 20];
        for &from in &peers {
            for i in 0..COUNT {
                // One tag for all: the order of arrival is the order sent.
                let status = node.recv(node.gate(from), 7u64, &mut buf).unwrap();
                assert_eq!(status.len, size(i), "message {i} from {from}");
                check(&buf[..status.len], size(i), salt(from, me, i));
            }
        }
        for sent in wait_all(sends) {
            sent.unwrap();
        }
        (driver.shm().stats(), driver.tcp().stats())
    });
    for (rank, (shm, tcp)) in stats.iter().enumerate() {
        assert!(shm.packets_sent > 0, "rank {rank}: nothing over shm");
        assert!(tcp.established_total > 0, "rank {rank}: nothing over tcp");
    }
}

/// The ping-pong of a session whose shm rails are always idle: shm alone
/// carries it, and tcp never even connects.
#[test]
fn an_idle_shm_rail_takes_every_packet_of_a_ping_pong() {
    let stats = run(2, |node, driver| {
        let peer = node.gate(1 - node.rank());
        let mut buf = [0u8; 64];
        for round in 0..200u64 {
            if (round % 2 == 0) == (node.rank() == 0) {
                node.send(peer, round, &round.to_le_bytes()).unwrap();
            } else {
                node.recv(peer, round, &mut buf).unwrap();
                assert_eq!(buf[..8], round.to_le_bytes());
            }
        }
        driver.tcp().stats()
    });
    assert!(stats.iter().all(|s| s.dialed == 0), "{stats:?}");
}

/// Small sends to a peer whose ring is full, none waited for: each packet
/// that fills up and finds no room over shm leaves over tcp at once, while
/// the sender goes on sending, rather than at its first wait. All arrive
/// whole and in order once the receiver reads.
#[test]
fn a_full_packet_that_finds_the_ring_full_leaves_over_tcp_at_once() {
    const CELLS: u32 = 4;
    // Enough packets of 16 messages to fill the ring and two more.
    const COUNT: u64 = (CELLS as u64 + 2) * 16 + 1;
    let mut config = config();
    config.shm.ring_cells = CELLS;
    let mut job = [0u8; 8];
    getrandom::fill(&mut job).expect("random bytes");
    let ranks = LocalBootstrap::job(2, u64::from_le_bytes(job), JOB_KEY);
    // Rank 1 reads nothing until rank 0 has made all its sends.
    let sent = std::sync::Barrier::new(2);
    common::run_ranks(ranks, &config, init_shm_tcp, |node, driver| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            assert_eq!(driver.tcp().stats().dialed, 0, "tcp is dialed on demand");
            let sends: Vec<_> = (0..COUNT)
                .map(|i| node.isend_safer(peer, 3, &i.to_le_bytes()).unwrap())
                .collect();
            let tcp = driver.tcp().stats();
            sent.wait();
            for done in wait_all(sends) {
                done.unwrap();
            }
            // Checked once the receiver has all: a failure does not hang it.
            assert_eq!(tcp.dialed, 1, "no packet was handed to tcp before the wait");
        } else {
            sent.wait();
            let mut buf = [0u8; 8];
            for i in 0..COUNT {
                node.recv(peer, 3u64, &mut buf).unwrap();
                assert_eq!(u64::from_le_bytes(buf), i, "message {i}");
            }
        }
    });
}
