//! Readable rendezvous requests: on a rail whose receiver reads the
//! sender's memory (`RailCaps::read_min`), the receiver reads the piece as
//! soon as its destination is known and a clear-to-send of `READ`
//! completes the send, with no data packet; everything else keeps the
//! request / clear-to-send / data exchange.

mod common;

use common::{Net, Piece, Received, caps, from};
use navette_core::{
    ProtocolError, RailCaps, RailId, ReceiveMode, RequestError, SendMode, TagMatch, Violation,
};
use navette_wire::{Chunk, ClearToSend, CtsFlags, Limits, Packet, encode_packet};

/// Rendezvous from 64 bytes, fragments of 100 000, reads from 1 000.
fn readable_caps() -> RailCaps {
    RailCaps {
        read_min: Some(1000),
        ..caps(64, 100_000)
    }
}

/// Sends one piece of `len` bytes from 0 to 1 (the receive posted first or
/// not) and checks it whole at both ends; returns whether it was read.
fn one_piece(net: &mut Net, len: usize, tag: u64, posted_first: bool) -> bool {
    let msg = [Piece::new(len, tag)];
    let reads = net.reads_made;
    let (received, sent) = net.exchange(tag, &msg, posted_first);
    net.check_received(1, 0, tag, &received, &msg);
    assert_eq!(net.ok(0, sent[0]).len, len, "sender's status");
    assert!(net.offers.is_empty(), "every offer was read or dropped");
    net.reads_made > reads
}

#[test]
fn pieces_from_read_min_to_a_fragment_are_read_at_the_request() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, readable_caps());
        for (tag, (len, read)) in [
            (500, false),
            (999, false),
            (1000, true),
            (5000, true),
            (100_000, true),
            (100_001, false),
            (250_000, false),
        ]
        .into_iter()
        .enumerate()
        {
            let got = one_piece(&mut net, len, tag as u64, posted_first);
            assert_eq!(got, read, "{len} bytes, posted first: {posted_first}");
        }
        assert_eq!(net.engines[1].buffered_bytes(), 0);
        assert!(!net.engines[0].has_pending(1));
    }
}

/// Posts node 1's receive of a piece of `len` bytes on `tag`, then sends
/// it from node 0; returns the receive, the message and node 0's packets,
/// not delivered.
fn posted_then_sent(net: &mut Net, len: usize, tag: u64) -> (Received, [Piece; 1], Packets) {
    let msg = [Piece::new(len, tag)];
    let r = net.recv(1, from(0), TagMatch::exact(tag), &msg, false);
    net.send(0, 1, tag, &msg);
    let packets = net.capture(0, 1);
    (r, msg, packets)
}

type Packets = Vec<(RailId, Vec<u8>)>;

/// A read piece costs one packet each way: the request, and the
/// clear-to-send that says it was read.
#[test]
fn a_read_piece_crosses_as_two_packets() {
    let mut net = Net::one_chunk_per_packet(2, 1, readable_caps());
    let (r, msg, requests) = posted_then_sent(&mut net, 50_000, 1);
    assert_eq!(requests.len(), 1, "the request alone");
    for (rail, bytes) in requests {
        net.inject(1, rail, &bytes).expect("a valid request");
    }
    assert_eq!(net.reads_made, 1, "read as the request landed");
    let answers = net.capture(1, 0);
    assert_eq!(answers.len(), 1, "the clear-to-send alone");
    let cts = only_chunk(&answers[0].1);
    assert!(
        matches!(cts, Some(Chunk::ClearToSend(c)) if c.flags == CtsFlags::READ && c.len == 50_000),
        "{cts:?}"
    );
    for (rail, bytes) in answers {
        net.inject(0, rail, &bytes).expect("a valid clear-to-send");
    }
    assert!(net.capture(0, 1).is_empty(), "no data follows");
    net.collect();
    net.check_received(1, 0, 1, &r, &msg);
}

/// A driver may answer a read with a packet of its own, written at once:
/// the same clear-to-send, nothing queued for the gate's strategy.
#[test]
fn a_read_answered_at_once_completes_the_send() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, readable_caps());
        net.answer_at_once = true;
        for (tag, len) in [1000, 5000, 100_000].into_iter().enumerate() {
            assert!(one_piece(&mut net, len, tag as u64, posted_first));
        }
        assert!(!net.engines[1].has_pending(0), "nothing queued");
        let answers: u64 = net.engines[1].gate_stats().map(|s| s.packets_sent).sum();
        assert_eq!(answers, 3, "one answer a read, counted");
    }
}

/// A readable request that its receive refuses (shorter than the piece)
/// is never read: the engine hands its driver the request to forget
/// (`Engine::poll_unread`), whose offer the driver then drops, and the
/// send fails as rejected. Nothing is left of it at either end.
#[test]
fn a_readable_request_refused_is_forgotten() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, readable_caps());
        let (sent, short) = ([Piece::new(50_000, 1)], [Piece::new(40_000, 1)]);
        let tag = TagMatch::exact(1);
        let (r, send) = if posted_first {
            let r = net.recv(1, from(0), tag, &short, false);
            (r, net.send(0, 1, 1, &sent))
        } else {
            let send = net.send(0, 1, 1, &sent);
            net.run();
            (net.recv(1, from(0), tag, &short, false), send)
        };
        net.run();
        assert!(
            matches!(net.err(1, r.end), RequestError::SizeMismatch { .. }),
            "posted first: {posted_first}"
        );
        assert_eq!(net.err(0, send[0]), RequestError::RejectedByReceiver);
        assert_eq!((net.reads_made, net.reads_forgotten), (0, 1));
        assert!(net.offers.is_empty(), "the offer was forgotten");
        assert!(!net.engines[1].has_reads());
        // The gate still works, and reads.
        assert!(one_piece(&mut net, 5000, 2, posted_first));
    }
}

#[test]
fn a_read_that_could_not_be_made_asks_for_the_data() {
    let mut net = Net::new(2, 1, readable_caps());
    net.refuse_reads = true;
    for posted_first in [true, false] {
        assert!(!one_piece(
            &mut net,
            50_000,
            u64::from(posted_first),
            posted_first
        ));
    }
}

/// With two rails to the peer, strategies may split the data: requests
/// are never readable.
#[test]
fn two_rails_send_the_data() {
    let mut net = Net::new(2, 2, readable_caps());
    assert!(!one_piece(&mut net, 50_000, 1, true));
    assert!(!one_piece(&mut net, 50_000, 2, false));
}

/// The only chunk of a packet, decoded.
fn only_chunk(bytes: &[u8]) -> Option<Chunk<'_>> {
    let packet = Packet::decode(bytes, &Limits::default()).ok()?;
    let mut chunks = packet.chunks();
    let chunk = chunks.next()?;
    chunks.next().is_none().then_some(chunk)
}

/// A packet of one clear-to-send from node 1's engine.
fn cts_packet(flags: CtsFlags, send_id: u32, len: u64) -> Vec<u8> {
    let cts = Chunk::ClearToSend(ClearToSend {
        channel: common::CH.0,
        flags,
        send_id,
        recv_id: 1,
        offset: 0,
        len,
    });
    let mut out = Vec::new();
    encode_packet(&[cts], &mut out);
    out
}

/// Sends a piece of `len` bytes from 0 and returns its request's transfer
/// id and readability, with the rail node 0 receives node 1's packets on.
fn request_of(net: &mut Net, len: usize) -> (u32, bool, RailId) {
    net.send(0, 1, 9, &[Piece::new(len, 9)]);
    let packets = net.capture(0, 1);
    let Some(Chunk::RdvRequest(r)) = only_chunk(&packets[0].1) else {
        panic!("not a lone rendezvous request");
    };
    (r.send_id, r.readable, net.rails_from(1, 0)[0])
}

/// A readable request reaching a node whose rails do not read (a peer
/// that marks it where reads are not made): the data is asked for.
#[test]
fn a_node_whose_rails_do_not_read_asks_for_the_data() {
    let mut plain = Net::one_chunk_per_packet(2, 1, caps(64, 100_000));
    let (r, msg, packets) = posted_then_sent(&mut plain, 5000, 9);
    inject_as_readable(&mut plain, packets);
    assert_eq!(plain.engines[1].poll_read(), None, "no read asked for");
    plain.run();
    assert_eq!(plain.reads_made, 0);
    // Its driver keeps no offers: none to forget either.
    assert_eq!(plain.reads_forgotten, 0);
    plain.check_received(1, 0, 9, &r, &msg);
}

/// A request marked readable that the receiver's rail would not read
/// (below its `read_min`, as when the two ranks' settings differ) is
/// asked for as usual, and handed to the driver to forget its offer.
#[test]
fn a_readable_request_this_side_would_not_read_is_forgotten() {
    let mut net = Net::one_chunk_per_packet(2, 1, readable_caps());
    let (r, msg, packets) = posted_then_sent(&mut net, 500, 9);
    inject_as_readable(&mut net, packets);
    assert_eq!(net.reads_forgotten, 1);
    net.run();
    assert_eq!(net.reads_made, 0);
    net.check_received(1, 0, 9, &r, &msg);
}

/// Delivers node 0's lone rendezvous requests to node 1 marked readable,
/// as a peer whose rails read would send them.
fn inject_as_readable(net: &mut Net, packets: Packets) {
    for (rail, bytes) in packets {
        let Some(Chunk::RdvRequest(mut req)) = only_chunk(&bytes) else {
            panic!("not a lone request");
        };
        req.readable = true;
        let mut packet = Vec::new();
        encode_packet(&[Chunk::RdvRequest(req)], &mut packet);
        net.inject(1, rail, &packet).expect("a valid request");
    }
}

fn violation(net: &Net) -> Option<&Violation> {
    match net.errors.last() {
        Some((0, ProtocolError::Violation { what, .. })) => Some(what),
        _ => None,
    }
}

#[test]
fn a_read_answer_to_a_request_not_readable_breaks_the_protocol() {
    let mut net = Net::one_chunk_per_packet(2, 1, readable_caps());
    let (send_id, readable, rail) = request_of(&mut net, 500);
    assert!(!readable, "below read_min");
    let _ = net.inject(0, rail, &cts_packet(CtsFlags::READ, send_id, 500));
    assert_eq!(violation(&net), Some(&Violation::UnknownTransfer(send_id)));
}

#[test]
fn a_read_answer_covers_the_whole_piece() {
    let mut net = Net::one_chunk_per_packet(2, 1, readable_caps());
    let (send_id, readable, rail) = request_of(&mut net, 5000);
    assert!(readable);
    let _ = net.inject(0, rail, &cts_packet(CtsFlags::READ, send_id, 4999));
    assert_eq!(
        violation(&net),
        Some(&Violation::OutOfBounds {
            offset: 0,
            len: 4999,
            total: 5000
        })
    );
}

/// A peer lost before the read is made: the read is dropped with
/// everything else of that peer, and the receive fails.
#[test]
fn reads_of_a_lost_peer_are_dropped() {
    let mut net = Net::one_chunk_per_packet(2, 1, readable_caps());
    let (r, _, packets) = posted_then_sent(&mut net, 5000, 3);
    let now = net.now;
    for (rail, bytes) in &packets {
        net.engines[1]
            .handle_packet(now, *rail, bytes, &mut net.mems[1])
            .expect("a valid request");
    }
    let rail = packets[0].0;
    net.engines[1].close_rail(rail);
    assert_eq!(net.engines[1].poll_read(), None);
    net.collect();
    assert!(net.outcome(1, r.posted[0].req).is_some_and(|o| o.is_err()));
}

/// The usual large message: an EXPRESS head (eager), then a body to read.
fn head_and_body(body: usize, seed: u64) -> [Piece; 2] {
    [
        Piece::new(32, seed).modes(SendMode::Cheaper, ReceiveMode::Express),
        Piece::new(body, seed + 1),
    ]
}

/// [`readable_caps`] with eager pieces up to 999 bytes, as a shared-memory
/// rail aggregates a head and a request into one packet.
fn aggregating_readable_caps() -> RailCaps {
    RailCaps {
        read_min: Some(1000),
        ..caps(1000, 100_000)
    }
}

/// A message whose last piece is readable may leave at once, in one
/// packet written by the driver, with no round of the window: the packet
/// is the one the aggregating strategy builds for the same message, the
/// receiver reads the body at its request, and the clear-to-send that
/// says so completes the large piece's request.
#[test]
fn a_message_sent_at_once_with_its_body_readable_is_read_at_its_request() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, aggregating_readable_caps());
        for tag in 0..3u64 {
            let msg = head_and_body(50_000, tag * 10);
            let mut usual = Net::new(2, 1, aggregating_readable_caps());
            for earlier in 0..tag {
                // The same numbering as `net` by now.
                let _ = usual.send(0, 1, earlier, &head_and_body(50_000, 0));
                usual.capture(0, 1);
            }
            usual.send(0, 1, tag, &msg);
            let usual_packets = usual.capture(0, 1);
            let r = posted_first.then(|| net.recv(1, from(0), TagMatch::exact(tag), &msg, false));
            let reads = net.reads_made;
            let req = net
                .send_readable_now(0, 1, tag, &msg)
                .expect("an idle rail that reads, an empty window");
            let link = &net.links[0];
            assert_eq!(
                (link.from, link.to, link.queue.len()),
                (0, 1, 1),
                "one packet"
            );
            assert_eq!(
                usual_packets,
                vec![(link.to_rail, link.queue[0].clone())],
                "the packet aggregate builds"
            );
            net.run();
            let r = r.unwrap_or_else(|| {
                let r = net.recv(1, from(0), TagMatch::exact(tag), &msg, false);
                net.run();
                r
            });
            net.check_received(1, 0, tag, &r, &msg);
            assert_eq!(net.ok(0, req).len, 50_000, "the large piece's status");
            assert_eq!(net.reads_made, reads + 1, "read at its request");
            assert!(net.offers.is_empty(), "every offer was read");
            assert!(!net.engines[0].has_pending(1), "nothing queued");
        }
        let sent = net.engines[0]
            .gate_stats()
            .map(|s| s.packets_sent)
            .sum::<u64>();
        assert_eq!(sent, 3, "one packet a message, counted");
    }
}

/// A message sent at once whose read fails (or is declined) has its data
/// asked for, and sent, the usual way.
#[test]
fn a_message_sent_at_once_whose_read_fails_is_sent_the_usual_way() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, readable_caps());
        net.refuse_reads = true;
        let msg = head_and_body(50_000, 7);
        let r = posted_first.then(|| net.recv(1, from(0), TagMatch::exact(3), &msg, false));
        let req = net.send_readable_now(0, 1, 3, &msg).expect("sent at once");
        net.run();
        let r = r.unwrap_or_else(|| {
            let r = net.recv(1, from(0), TagMatch::exact(3), &msg, false);
            net.run();
            r
        });
        net.check_received(1, 0, 3, &r, &msg);
        assert_eq!(net.ok(0, req).len, 50_000);
        assert_eq!(net.reads_made, 0);
    }
}

/// What keeps a message from leaving at once with its body readable: it
/// then goes the usual way, untouched.
#[test]
fn messages_that_cannot_leave_at_once_readable_are_refused() {
    let refused = |net: &mut Net, pieces: &[Piece], why: &str| {
        assert!(net.send_readable_now(0, 1, 9, pieces).is_none(), "{why}");
        assert!(
            net.links.iter().all(|l| l.queue.is_empty()),
            "{why}: nothing sent"
        );
    };
    let mut net = Net::new(2, 1, readable_caps());
    refused(&mut net, &[Piece::new(63, 1)], "a small last piece");
    refused(
        &mut net,
        &[Piece::new(64, 1), Piece::new(5000, 2)],
        "a rendezvous piece before the last",
    );
    refused(&mut net, &[Piece::new(999, 1)], "below the rail's reads");
    refused(&mut net, &[Piece::new(100_001, 1)], "above a fragment");
    refused(
        &mut net,
        &common::pieces(&[8, 8, 8, 8, 8, 8, 8, 8, 5000], 1),
        "nine pieces",
    );
    // Something in the window: it leaves first.
    net.send(0, 1, 1, &[Piece::new(8, 1)]);
    refused(&mut net, &head_and_body(5000, 1), "a window not empty");
    // A packet in flight on the rail.
    let now = std::time::Duration::from_secs(1);
    let rail = net.links[0].from_rail;
    assert!(net.engines[0].poll_transmit(now, rail).is_some());
    refused(&mut net, &head_and_body(5000, 1), "a busy rail");
    net.engines[0].handle_send_complete(now, rail);
    // A small message staged in the peer's open packet: it leaves first.
    let staged = net.engines[0].stage_tagged(common::CH, 1, 2, b"staged");
    assert!(staged.is_some(), "staged");
    refused(&mut net, &head_and_body(5000, 1), "an open packet");
    assert!(net.engines[0].poll_transmit(now, rail).is_some());
    net.engines[0].handle_send_complete(now, rail);
    assert!(
        net.send_readable_now(0, 1, 9, &head_and_body(5000, 1))
            .is_some(),
        "idle again"
    );
    // Two rails to the peer, or one that does not read.
    for mut net in [
        Net::new(2, 2, readable_caps()),
        Net::new(2, 1, caps(64, 100_000)),
    ] {
        refused(
            &mut net,
            &head_and_body(5000, 1),
            "no single rail that reads",
        );
    }
}
