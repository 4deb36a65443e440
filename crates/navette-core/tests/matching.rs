//! Tag matching (exact, any source, masks), the unexpected queue, probe,
//! and order per (gate, tag) when two rails overtake each other.

mod common;

use common::{CH, Net, Order, Piece, caps, from, pieces};
use navette_core::{Rank, Source, Status, TagMatch};

/// Posts a one-piece receive of `len` bytes.
fn recv_one(
    net: &mut Net,
    node: usize,
    source: Source,
    tag: TagMatch,
    len: usize,
) -> common::Received {
    net.recv(node, source, tag, &[Piece::new(len, 0)], false)
}

fn matched(net: &Net, node: usize, r: &common::Received) -> (Rank, u64) {
    let s = net.ok(node, r.key);
    (s.peer, s.tag)
}

#[test]
fn exact_tag_skips_others() {
    let mut net = Net::new(2, 1, caps(64, 1000));
    let a = Piece::new(10, 1);
    let b = Piece::new(10, 2);
    net.send(0, 1, 1, std::slice::from_ref(&a));
    net.send(0, 1, 2, std::slice::from_ref(&b));
    net.run();
    let r2 = net.recv(
        1,
        from(0),
        TagMatch::exact(2),
        std::slice::from_ref(&b),
        false,
    );
    let r1 = net.recv(
        1,
        from(0),
        TagMatch::exact(1),
        std::slice::from_ref(&a),
        false,
    );
    net.run();
    net.check_received(1, 0, 2, &r2, &[b]);
    net.check_received(1, 0, 1, &r1, &[a]);
    let r3 = recv_one(&mut net, 1, from(0), TagMatch::exact(3), 10);
    net.run();
    assert!(net.pending(1, r3.key), "no message with tag 3");
}

#[test]
fn any_source_and_specific_source() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let only_2 = recv_one(&mut net, 1, from(2), TagMatch::exact(5), 10);
    let any = recv_one(&mut net, 1, Source::Any, TagMatch::exact(5), 10);
    net.send(0, 1, 5, &[Piece::new(10, 1)]);
    net.run();
    assert_eq!(
        matched(&net, 1, &any),
        (0, 5),
        "rank 0 skips the rank-2 receive"
    );
    assert!(net.pending(1, only_2.key));
    net.send(2, 1, 5, &[Piece::new(10, 2)]);
    net.run();
    net.check_received(1, 2, 5, &only_2, &[Piece::new(10, 2)]);
}

#[test]
fn masks() {
    let mut net = Net::new(2, 1, caps(64, 1000));
    // Low byte: kind; high bits: anything.
    let kind_7 = recv_one(&mut net, 1, from(0), TagMatch::masked(0x07, 0xff), 4);
    let anything = recv_one(&mut net, 1, from(0), TagMatch::any(), 4);
    net.send(0, 1, 0x1234_0008, &[Piece::new(4, 1)]);
    net.send(0, 1, 0xabcd_0007, &[Piece::new(4, 2)]);
    net.run();
    assert_eq!(matched(&net, 1, &anything), (0, 0x1234_0008));
    assert_eq!(matched(&net, 1, &kind_7), (0, 0xabcd_0007));
    net.check_received(1, 0, 0xabcd_0007, &kind_7, &[Piece::new(4, 2)]);
}

/// Posted receives match in posting order; unexpected messages in arrival order.
#[test]
fn first_posted_and_first_arrived_win() {
    let mut net = Net::new(2, 1, caps(64, 1000));
    let first = recv_one(&mut net, 1, Source::Any, TagMatch::any(), 4);
    let second = recv_one(&mut net, 1, Source::Any, TagMatch::any(), 4);
    net.send(0, 1, 10, &[Piece::new(4, 10)]);
    net.send(0, 1, 11, &[Piece::new(4, 11)]);
    net.run();
    assert_eq!(matched(&net, 1, &first), (0, 10));
    assert_eq!(matched(&net, 1, &second), (0, 11));

    for tag in [20, 21, 22] {
        net.send(0, 1, tag, &[Piece::new(4, tag)]);
    }
    net.run();
    for tag in [20, 21, 22] {
        let r = recv_one(&mut net, 1, Source::Any, TagMatch::masked(0x10, 0x10), 4);
        net.check_received(1, 0, tag, &r, &[Piece::new(4, tag)]);
    }
}

#[test]
fn probe() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    assert_eq!(net.engines[1].probe(CH, Source::Any, TagMatch::any()), None);
    net.send(0, 1, 3, &pieces(&[12, 5000], 1));
    net.send(2, 1, 4, &pieces(&[3000], 2));
    net.run();
    let probe = |net: &Net, source, tag| net.engines[1].probe(CH, source, tag);
    let st = |peer, tag, len| Some(Status { peer, tag, len });
    assert_eq!(probe(&net, Source::Any, TagMatch::any()), st(0, 3, 12));
    assert_eq!(probe(&net, from(2), TagMatch::any()), st(2, 4, 3000));
    assert_eq!(probe(&net, Source::Any, TagMatch::exact(4)), st(2, 4, 3000));
    assert_eq!(probe(&net, from(0), TagMatch::exact(4)), None);
    assert_eq!(
        probe(&net, Source::Any, TagMatch::any()),
        st(0, 3, 12),
        "probe consumes nothing"
    );
    let r = net.recv(
        1,
        Source::Any,
        TagMatch::any(),
        &pieces(&[12, 5000], 1),
        false,
    );
    net.run();
    net.check_received(1, 0, 3, &r, &pieces(&[12, 5000], 1));
    assert_eq!(probe(&net, Source::Any, TagMatch::any()), st(2, 4, 3000));
}

/// Many messages of two tags, mixing eager and rendezvous, over two rails
/// delivered in reverse or shuffled order: each tag's messages match in
/// send order, whether the receives were posted before or after.
#[test]
fn order_per_tag_across_rails() {
    let orders = [Order::Fifo, Order::Reverse]
        .into_iter()
        .chain((0..16).map(Order::Seeded));
    for order in orders {
        for posted_first in [true, false] {
            let mut net = Net::new(2, 2, caps(64, 700)).order(order);
            let sizes = [0, 5, 100, 63, 2000, 1, 64, 800];
            let msgs: Vec<(u64, Vec<Piece>)> = (0..24)
                .map(|i| {
                    (
                        i % 2,
                        pieces(&[sizes[i as usize % 8], sizes[(i as usize + 3) % 8]], i),
                    )
                })
                .collect();
            let mut received = Vec::new();
            // Receives name only the tag: order alone decides which message lands where.
            let post = |net: &mut Net, received: &mut Vec<_>| {
                for (tag, msg) in &msgs {
                    received.push(net.recv(1, from(0), TagMatch::exact(*tag), msg, false));
                }
            };
            if posted_first {
                post(&mut net, &mut received);
            }
            for (tag, msg) in &msgs {
                net.send(0, 1, *tag, msg);
            }
            net.run();
            if !posted_first {
                post(&mut net, &mut received);
                net.run();
            }
            for ((tag, msg), r) in msgs.iter().zip(&received) {
                net.check_received(1, 0, *tag, r, msg);
            }
        }
    }
}

/// Tagged receives, posted before or after their message, eager or
/// rendezvous, into a buffer as long as the message or longer: the data
/// lands and the request completes with the message's length. (Posted
/// first, a one-piece eager message takes the inline fast path; the other
/// cases go through a receive message.)
#[test]
fn tagged_receives_posted_before_or_after() {
    for threshold in [64, 100_000] {
        for len in [0, 10, 1000] {
            for posted_first in [true, false] {
                for spare in [0, 7] {
                    let case = format!(
                        "threshold {threshold}, len {len}, posted first {posted_first}, spare {spare}"
                    );
                    let mut net = Net::new(2, 1, caps(threshold, 300));
                    let data = common::pattern(len, 3);
                    let dest = net.alloc(1, vec![0; len + spare]);
                    let post = |net: &mut Net| {
                        net.engines[1].recv_tagged(
                            CH,
                            from(0),
                            TagMatch::exact(9),
                            dest,
                            &mut net.mems[1],
                        )
                    };
                    let early = posted_first.then(|| post(&mut net));
                    let src = net.alloc(0, data.clone());
                    let out = net.begin(0, 1, 9);
                    let sent = net.engines[0].send_tagged(out, src);
                    net.run();
                    let recv = early.unwrap_or_else(|| post(&mut net));
                    net.run();
                    net.ok(0, sent);
                    let status = net.ok(1, recv);
                    assert_eq!((status.peer, status.tag, status.len), (0, 9, len), "{case}");
                    assert_eq!(&net.read(1, dest)[..len], &data[..], "{case}");
                }
            }
        }
    }
}

/// A tagged receive matched by a message of several pieces fails as a
/// receive of one piece would, whether it was posted first or not.
#[test]
fn tagged_receive_of_a_multi_piece_message() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, caps(4096, 1000));
        let dest = net.alloc(1, vec![0; 64]);
        let post = |net: &mut Net| {
            net.engines[1].recv_tagged(CH, from(0), TagMatch::exact(4), dest, &mut net.mems[1])
        };
        let early = posted_first.then(|| post(&mut net));
        net.send(0, 1, 4, &[Piece::new(8, 1), Piece::new(8, 2)]);
        net.run();
        let recv = early.unwrap_or_else(|| post(&mut net));
        net.run();
        assert!(
            matches!(
                net.err(1, recv),
                navette_core::RequestError::PieceCountMismatch { .. }
            ),
            "posted first {posted_first}: {:?}",
            net.err(1, recv)
        );
    }
}
