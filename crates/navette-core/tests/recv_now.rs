//! Receiving at once: a tagged receive waiting outside the engine
//! ([`Engine::recv_now`]) lands exactly the messages the usual path would
//! have given it, in the same order, and asks to be posted whenever only
//! the usual path can tell. The engines send one chunk per packet
//! (`default` strategy); the tests aggregate packets themselves where they
//! need to.

mod common;

use common::{CH, Net, Order, Piece, aggregate, caps, from};
use navette_core::{
    ChannelId, MemRef, Memory, RailId, RecvNow, RecvNowOutcome, RequestError, Status, TagMatch,
};

/// What became of a receive that waited outside the engine.
#[derive(Debug)]
enum Outcome {
    Landed(Status),
    /// Posted the usual way: its request.
    Posted(navette_core::ReqId),
}

/// A receive waiting outside the engine and its destination.
struct Want {
    recv: RecvNow,
    dest: MemRef,
}

/// Node 1's receive from node 0 with `tag`, into a fresh `len`-byte buffer.
fn want(net: &mut Net, tag: u64, len: usize) -> Want {
    assert!(net.engines[1].can_recv_now(CH, from(0)), "a quiet channel");
    Want {
        recv: RecvNow {
            channel: CH,
            source: from(0),
            tag: TagMatch::exact(tag),
        },
        dest: net.alloc(1, vec![0xee; len]),
    }
}

/// Shows `packets` to `want` in order, as a node does: a landed message
/// ends the waiting, an unrelated packet is handled the usual way, and a
/// packet that might match posts the receive before it is handled. Every
/// packet is handled.
fn show(net: &mut Net, want: &Want, packets: &[(RailId, Vec<u8>)]) -> Option<Outcome> {
    let mut outcome = None;
    for (rail, bytes) in packets {
        if outcome.is_none() {
            let dest = net.mems[1]
                .get_mut(want.dest.handle)
                .expect("the destination resolves");
            match net.engines[1].recv_now(*rail, bytes, &want.recv, dest) {
                RecvNowOutcome::Landed(status) => {
                    outcome = Some(Outcome::Landed(status));
                    continue;
                }
                RecvNowOutcome::Unrelated => {}
                RecvNowOutcome::Post => {
                    let RecvNow {
                        channel,
                        source,
                        tag,
                    } = want.recv;
                    let req = net.engines[1].recv_tagged(
                        channel,
                        source,
                        tag,
                        want.dest,
                        &mut net.mems[1],
                    );
                    outcome = Some(Outcome::Posted(req));
                }
            }
        }
        net.inject(1, *rail, bytes).expect("a valid packet");
    }
    outcome
}

fn send(net: &mut Net, tag: u64, data: &[u8]) {
    let piece = Piece {
        data: data.to_vec(),
        ..Piece::new(0, 0)
    };
    net.send(0, 1, tag, &[piece]);
}

/// A usual tagged receive on node 1, run to completion: status and bytes.
fn recv_usual(net: &mut Net, tag: u64, len: usize) -> (Status, Vec<u8>) {
    let dest = net.alloc(1, vec![0; len]);
    let req = net.engines[1].recv_tagged(CH, from(0), TagMatch::exact(tag), dest, &mut net.mems[1]);
    net.run();
    let status = net.ok(1, req);
    (status, net.read(1, dest)[..status.len].to_vec())
}

/// Shows `packets` to `want`, which they must post (`why`), and returns
/// what the usual path then received.
#[track_caller]
fn posted_and_received(
    net: &mut Net,
    want: &Want,
    packets: &[(RailId, Vec<u8>)],
    why: &str,
) -> Vec<u8> {
    let Some(Outcome::Posted(req)) = show(net, want, packets) else {
        panic!("{why}");
    };
    net.collect();
    let status = net.ok(1, req);
    landed_bytes(net, want.dest, status)
}

fn landed_bytes(net: &Net, dest: MemRef, status: Status) -> Vec<u8> {
    net.read(1, dest)[..status.len].to_vec()
}

#[test]
fn a_matching_message_lands_and_others_go_the_usual_way() {
    let mut net = Net::one_chunk_per_packet(2, 1, caps(1024, 1000));
    send(&mut net, 7, b"other tag");
    send(&mut net, 5, b"mine");
    send(&mut net, 5, b"next");
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 3, "one packet per message");
    let w = want(&mut net, 5, 16);
    match show(&mut net, &w, &packets) {
        Some(Outcome::Landed(status)) => {
            assert_eq!((status.peer, status.tag, status.len), (0, 5, 4));
            assert_eq!(landed_bytes(&net, w.dest, status), b"mine");
        }
        other => panic!("expected a landing, got {other:?}"),
    }
    // The message before it and the one after it wait, unexpected, in
    // order; the gate's sequence went on as if the usual path had run.
    assert_eq!(recv_usual(&mut net, 7, 16).1, b"other tag");
    assert_eq!(recv_usual(&mut net, 5, 16).1, b"next");
    send(&mut net, 5, b"later");
    assert_eq!(recv_usual(&mut net, 5, 16).1, b"later");
    assert!(net.errors.is_empty(), "{:?}", net.errors);
}

#[test]
fn other_channels_and_peers_are_unrelated() {
    let mut net = Net::one_chunk_per_packet(3, 1, caps(1024, 1000));
    let other = ChannelId(9);
    let out = net.engines[0]
        .send_begin(other, 1, 5)
        .expect("a rail leads to the peer");
    let data = net.alloc(0, b"channel 9".to_vec());
    net.engines[0].send_tagged(out, data);
    let packets = net.capture(0, 1);
    let w = want(&mut net, 5, 16);
    assert!(show(&mut net, &w, &packets).is_none(), "still waiting");
    // From rank 2, which the receive does not accept.
    let out = net.engines[2]
        .send_begin(CH, 1, 5)
        .expect("a rail leads to the peer");
    let data = net.alloc(2, b"from 2".to_vec());
    net.engines[2].send_tagged(out, data);
    let packets = net.capture(2, 1);
    assert!(show(&mut net, &w, &packets).is_none(), "still waiting");
    assert!(
        !net.engines[1].can_recv_now(CH, from(2)),
        "rank 2's is unexpected"
    );
    assert!(
        !net.engines[1].can_recv_now(other, from(0)),
        "so is channel 9's"
    );
    send(&mut net, 5, b"mine");
    let packets = net.capture(0, 1);
    let Some(Outcome::Landed(status)) = show(&mut net, &w, &packets) else {
        panic!("the receive's own message lands");
    };
    assert_eq!(landed_bytes(&net, w.dest, status), b"mine");
}

/// Shows what node 0 sent to a receive of tag 5 into `len` bytes, which
/// it must post (`why`), then runs the net: the request and destination.
#[track_caller]
fn post_and_run(net: &mut Net, len: usize, why: &str) -> (navette_core::ReqId, MemRef) {
    let packets = net.capture(0, 1);
    let w = want(net, 5, len);
    let Some(Outcome::Posted(req)) = show(net, &w, &packets) else {
        panic!("{why}");
    };
    net.run();
    (req, w.dest)
}

#[test]
fn rendezvous_too_long_and_multi_piece_messages_are_posted() {
    // Rendezvous: the request is a first piece only the usual path serves.
    let mut net = Net::one_chunk_per_packet(2, 1, caps(64, 1000));
    let big = common::pattern(300, 1);
    send(&mut net, 5, &big);
    let (req, dest) = post_and_run(&mut net, 300, "a rendezvous request posts the receive");
    assert_eq!(net.ok(1, req).len, 300);
    assert_eq!(net.read(1, dest), big);

    // Too long for the destination: the usual path reports truncation.
    send(&mut net, 5, b"0123456789");
    let (req, _) = post_and_run(&mut net, 4, "a message too long posts the receive");
    assert!(
        matches!(net.err(1, req), RequestError::Truncated { .. }),
        "{:?}",
        net.err(1, req)
    );

    // Two pieces: the first is not the whole message, and the usual path
    // tells a tagged receive so.
    net.send(0, 1, 5, &[Piece::new(8, 2), Piece::new(8, 3)]);
    let (req, _) = post_and_run(&mut net, 16, "a message of two pieces posts the receive");
    assert!(
        matches!(net.err(1, req), RequestError::PieceCountMismatch { .. }),
        "{:?}",
        net.err(1, req)
    );
}

/// Messages held for a missing earlier one are matched in order: the
/// receive waiting outside the engine never takes a later message first.
#[test]
fn reordered_messages_keep_their_order() {
    // The second message arrives first: ahead of its sequence.
    let mut net = Net::one_chunk_per_packet(2, 1, caps(1024, 1000));
    send(&mut net, 5, b"first");
    send(&mut net, 5, b"second");
    let mut packets = net.capture(0, 1);
    packets.reverse();
    let w = want(&mut net, 5, 16);
    let why = "a message ahead of its sequence posts the receive";
    assert_eq!(posted_and_received(&mut net, &w, &packets, why), b"first");
    assert_eq!(recv_usual(&mut net, 5, 16).1, b"second");

    // A matching message is already held when the receive starts waiting;
    // the unrelated message that fills the gap releases it.
    send(&mut net, 7, b"gap");
    send(&mut net, 5, b"held");
    let packets = net.capture(0, 1);
    net.inject(1, packets[1].0, &packets[1].1)
        .expect("a valid packet");
    let w = want(&mut net, 5, 16);
    let why = "a packet that releases held chunks posts the receive";
    assert_eq!(
        posted_and_received(&mut net, &w, &packets[..1], why),
        b"held"
    );
    assert_eq!(recv_usual(&mut net, 7, 16).1, b"gap");
}

#[test]
fn a_packet_of_several_chunks_that_might_match_is_posted() {
    // Two messages in one packet, as an aggregating strategy sends them.
    let mut net = Net::one_chunk_per_packet(2, 1, caps(1024, 1000)).order(Order::Fifo);
    send(&mut net, 7, b"seven");
    send(&mut net, 5, b"five");
    let packets = aggregate(net.capture(0, 1));
    let w = want(&mut net, 5, 16);
    let why = "an aggregated packet with a matching chunk posts the receive";
    assert_eq!(posted_and_received(&mut net, &w, &packets, why), b"five");
    assert_eq!(recv_usual(&mut net, 7, 16).1, b"seven");

    // None of them matches: the receive keeps waiting.
    send(&mut net, 7, b"seven");
    send(&mut net, 8, b"eight");
    let packets = aggregate(net.capture(0, 1));
    let w = want(&mut net, 5, 16);
    assert!(show(&mut net, &w, &packets).is_none(), "still waiting");
    assert_eq!(recv_usual(&mut net, 8, 16).1, b"eight");
}

#[test]
fn only_a_quiet_channel_lets_a_receive_wait_outside() {
    let mut net = Net::one_chunk_per_packet(2, 1, caps(1024, 1000));
    assert!(net.engines[1].can_recv_now(CH, from(0)));
    // An unexpected message waits.
    send(&mut net, 7, b"seven");
    net.run();
    assert!(!net.engines[1].can_recv_now(CH, from(0)));
    assert_eq!(recv_usual(&mut net, 7, 16).1, b"seven");
    assert!(net.engines[1].can_recv_now(CH, from(0)));
    // A receive is posted.
    let dest = net.alloc(1, vec![0; 8]);
    let posted =
        net.engines[1].recv_tagged(CH, from(0), TagMatch::exact(1), dest, &mut net.mems[1]);
    assert!(!net.engines[1].can_recv_now(CH, from(0)));
    assert!(net.engines[1].can_recv_now(ChannelId(3), from(0)));
    // The peer is lost: the receive must fail, which only the usual path does.
    let rail = net.rails_from(0, 1)[0];
    net.engines[1].close_rail(rail);
    net.collect();
    assert!(matches!(
        net.err(1, posted),
        RequestError::PeerUnreachable { .. }
    ));
    assert!(!net.engines[1].can_recv_now(CH, from(0)));
}
