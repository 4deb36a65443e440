//! A cut link or a misbehaving peer turns pending requests into typed
//! errors; other gates carry on.

mod common;

use common::{check, cluster, pattern};
use navette::sim::SimCluster;
use navette::{Error, ReceiveMode, RequestError, SendMode, UsageError};

fn unreachable(peer: u32) -> RequestError {
    RequestError::PeerUnreachable { peer }
}

fn request_error<T: std::fmt::Debug>(result: navette::Result<T>) -> RequestError {
    match result {
        Err(Error::Request(err)) => err,
        other => panic!("expected a request error, got {other:?}"),
    }
}

fn three_ranks() -> SimCluster {
    cluster(3).rdv_threshold(4096).build()
}

#[test]
fn cutting_a_link_fails_what_depends_on_it_and_nothing_else() {
    let cluster = three_ranks();
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    // In progress between 0 and 1: a rendezvous send whose receive is posted,
    // a receive waiting for a message never sent, an unexpected eager message.
    let big_recv = b.irecv(b.gate(0), 1u64, vec![0u8; 1 << 20]);
    let big_send = a.isend(a.gate(1), 1, pattern(1 << 20, 1)).unwrap();
    let never = b.irecv(b.gate(0), 2u64, vec![0u8; 8]);
    let from_b = a.irecv(a.gate(1), 3u64, vec![0u8; 8]);
    // Let the transfer start, then cut the only link between 0 and 1.
    for _ in 0..5 {
        a.progress().unwrap();
    }
    let link = cluster.links_between(0, 1)[0];
    cluster.cut(link);
    assert_eq!(request_error(big_send.wait()), unreachable(1));
    assert_eq!(request_error(big_recv.wait()), unreachable(0));
    assert_eq!(request_error(never.wait()), unreachable(0));
    assert_eq!(request_error(from_b.wait()), unreachable(1));
    // Later calls towards the lost peer fail at once.
    assert!(matches!(
        a.isend(a.gate(1), 4, vec![1]),
        Err(Error::Usage(UsageError::NoRail(1)))
    ));
    assert_eq!(
        request_error(b.irecv(b.gate(0), 5u64, vec![0u8; 8]).wait()),
        unreachable(0)
    );
    // A message begun after the loss fails at its first piece.
    let mut msg = b.begin_unpacking(b.gate(0), 6u64).unwrap();
    let first = msg.unpack_express(&mut [0u8; 4], SendMode::Safer);
    assert!(matches!(first, Err(Error::Request(_))), "{first:?}");
    assert_eq!(request_error(msg.status()), unreachable(0));
    // Rank 2 still talks to both.
    for peer in [a, b] {
        let rank = peer.rank();
        let send = peer
            .isend(peer.gate(2), 9, pattern(10_000, rank.into()))
            .unwrap();
        let got = c
            .irecv(c.gate(rank), 9u64, vec![0u8; 10_000])
            .wait()
            .unwrap();
        check(&got.data, 10_000, rank.into());
        send.wait().unwrap();
    }
}

#[test]
fn a_blocked_madeleine_exchange_ends_with_an_error() {
    let cluster = three_ranks();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let link = cluster.links_between(0, 1)[0];
    let cut = std::sync::atomic::AtomicBool::new(false);
    let big = vec![2u8; 100_000]; // above the rendezvous threshold
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let mut msg = b.begin_unpacking(b.gate(0), 7u64)?;
            let mut head = [0u8; 8];
            msg.unpack_express(&mut head, SendMode::Safer)?;
            while !cut.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::yield_now();
            }
            // The second piece's data never comes: the link is cut first.
            let mut body = vec![0u8; 100_000];
            msg.unpack_express(&mut body, SendMode::Cheaper)?;
            msg.end_unpacking()
        });
        let sender = s.spawn(|| {
            let head = [1u8; 8];
            let mut msg = a.begin_packing(a.gate(1), 7)?;
            msg.pack_safer(&head, ReceiveMode::Express)?;
            msg.pack(&big, SendMode::Cheaper, ReceiveMode::Express)?;
            // The first piece and the second's rendezvous request leave;
            // its data waits for the receiver.
            msg.end_packing()
        });
        while !first_piece_delivered(&cluster, link) {
            std::thread::yield_now();
        }
        cluster.cut(link);
        cut.store(true, std::sync::atomic::Ordering::Release);
        assert_eq!(request_error(sender.join().unwrap()), unreachable(1));
        let err = request_error(receiver.join().unwrap());
        let root = match err {
            RequestError::MessageFailed(inner) => *inner,
            other => other,
        };
        assert_eq!(root, unreachable(0));
    });
}

/// A message whose head came and whose body's data never comes (the link
/// cut once the head is unpacked), its body unpacked CHEAPER or EXPRESS:
/// the body's error set aside, the message's end fails too, as the usual
/// path fails a message whose peer is lost.
#[test]
fn a_message_whose_body_never_comes_ends_with_an_error() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for express in [false, true] {
        let cluster = three_ranks();
        let (a, b) = (cluster.node(0), cluster.node(1));
        let link = cluster.links_between(0, 1)[0];
        let (headed, cut) = (AtomicBool::new(false), AtomicBool::new(false));
        let big = vec![2u8; 100_000];
        std::thread::scope(|s| {
            let receiver = s.spawn(|| {
                let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
                let mut head = [0u8; 8];
                msg.unpack_express(&mut head, SendMode::Safer).unwrap();
                headed.store(true, Ordering::Release);
                while !cut.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                let mut body = vec![0u8; 100_000];
                let unpacked = if express {
                    msg.unpack_express(&mut body, SendMode::Cheaper)
                } else {
                    msg.unpack_cheaper(&mut body, SendMode::Cheaper)
                };
                (unpacked, msg.end_unpacking())
            });
            let sender = s.spawn(|| {
                let head = [1u8; 8];
                let mut msg = a.begin_packing(a.gate(1), 7)?;
                msg.pack_safer(&head, ReceiveMode::Express)?;
                let mode = if express {
                    ReceiveMode::Express
                } else {
                    ReceiveMode::Cheaper
                };
                msg.pack(&big, SendMode::Cheaper, mode)?;
                msg.end_packing()
            });
            while !headed.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            cluster.cut(link);
            cut.store(true, Ordering::Release);
            assert_eq!(request_error(sender.join().unwrap()), unreachable(1));
            let (unpacked, ended) = receiver.join().unwrap();
            let root = |err: RequestError| match err {
                RequestError::MessageFailed(inner) => *inner,
                other => other,
            };
            if express {
                assert_eq!(root(request_error(unpacked)), unreachable(0));
            } else {
                unpacked.expect("a CHEAPER unpack reports at the end");
            }
            assert_eq!(
                root(request_error(ended)),
                unreachable(0),
                "express: {express}"
            );
        });
    }
}

fn first_piece_delivered(cluster: &SimCluster, link: navette::sim::LinkId) -> bool {
    cluster.with_network(|net| net.stats(link).map(|s| s.a_to_b.packets_delivered > 0)) == Ok(true)
}

#[test]
fn a_peer_that_breaks_the_protocol_is_cut_off() {
    let cluster = three_ranks();
    let (b, c) = (cluster.node(1), cluster.node(2));
    let waiting = b.irecv(b.gate(0), 1u64, vec![0u8; 8]);
    // Rank 0 "sends" garbage on its rail to rank 1.
    let link = cluster.links_between(0, 1)[0];
    cluster.with_network(|net| {
        net.send(0, link, b"garbage, not a navette packet".to_vec())
            .unwrap()
    });
    assert_eq!(request_error(waiting.wait()), unreachable(0));
    let faults = cluster.faults();
    assert_eq!(faults.len(), 1);
    assert!(faults[0].contains("bad magic"), "{faults:?}");
    // Rank 1 and rank 2 are unaffected.
    let send = c.isend(c.gate(1), 2, b"fine".to_vec()).unwrap();
    assert_eq!(
        b.irecv(b.gate(2), 2u64, vec![0u8; 4]).wait().unwrap().data,
        b"fine"
    );
    send.wait().unwrap();
}

/// Requests nobody waits for (dropped: detached, not cancelled) that fail
/// when their peer is lost do not fail silently: each is counted and
/// logged, and finalize reports the count. Pieces of a message given up on
/// are not counted.
#[test]
fn a_failure_nobody_waits_for_is_counted() {
    let cluster = three_ranks();
    let (a, b) = (cluster.node(0), cluster.node(1));
    drop(a.isend(a.gate(1), 1, pattern(1 << 20, 1)).unwrap());
    drop(a.irecv(a.gate(1), 2u64, vec![0u8; 8]));
    // Given up on purpose: a message dropped with a piece posted.
    let mut buf = [0u8; 16];
    let mut given_up = a.begin_unpacking(a.gate(2), 9u64).unwrap();
    given_up
        .unpack_cheaper(&mut buf, SendMode::Cheaper)
        .unwrap();
    drop(given_up);
    assert_eq!(a.unwaited_failures(), 0);
    cluster.cut(cluster.links_between(0, 1)[0]);
    // Something to wait for that ends once the loss is known.
    let probe = a.irecv(a.gate(1), 3u64, vec![0u8; 8]);
    assert_eq!(request_error(probe.wait()), unreachable(1));
    assert_eq!(a.unwaited_failures(), 2, "the send and the receive");
    assert_eq!(b.unwaited_failures(), 0);
}

/// Two ranks whose waits give up after a second without progress (long
/// enough that only a wait that cannot end does).
fn impatient_pair() -> SimCluster {
    cluster(2)
        .rdv_threshold(4096)
        .node_config(navette::NodeConfig {
            wait_timeout: Some(std::time::Duration::from_secs(1)),
            ..navette::NodeConfig::default()
        })
        .build()
}

fn expect_stall<T: std::fmt::Debug>(result: navette::Result<T>) {
    match result {
        Err(Error::Stalled { .. }) => {}
        other => panic!("expected a stall, got {other:?}"),
    }
}

/// A blocking send of a rendezvous message whose receive is posted only
/// after the send gave up (its wait stalled): the caller's memory is its
/// own again at once, and the message still arrives whole, from a copy
/// made as the send gave that memory back, rather than leaving its
/// receiver waiting for data that never comes.
#[test]
fn a_rendezvous_send_given_up_on_still_delivers_its_message() {
    let n = 1 << 20;
    let cluster = impatient_pair();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let mut data = pattern(n, 11);
    expect_stall(a.send(a.gate(1), 5, &data));
    data.fill(0);
    let mut got = vec![0u8; n];
    let status = b.recv(b.gate(0), 5u64, &mut got).unwrap();
    assert_eq!(status.len, n);
    check(&got, n, 11);
}

/// The same for a packed message whose end stalled, its large piece lent
/// (CHEAPER): it arrives whole, head and body.
#[test]
fn a_message_whose_end_stalled_still_arrives_whole() {
    let n = 1 << 20;
    let cluster = impatient_pair();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let mut body = pattern(n, 12);
    let head = (n as u64).to_le_bytes();
    let mut msg = a.begin_packing(a.gate(1), 6).unwrap();
    msg.pack(&head, SendMode::Safer, ReceiveMode::Express)
        .unwrap();
    msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
        .unwrap();
    expect_stall(msg.end_packing());
    body.fill(0);
    let mut msg = b.begin_unpacking(b.gate(0), 6u64).unwrap();
    let mut len = [0u8; 8];
    msg.unpack_express(&mut len, SendMode::Safer).unwrap();
    assert_eq!(u64::from_le_bytes(len), n as u64);
    let mut got = vec![0u8; n];
    msg.unpack_cheaper(&mut got, SendMode::Cheaper).unwrap();
    msg.end_unpacking().unwrap();
    check(&got, n, 12);
}
