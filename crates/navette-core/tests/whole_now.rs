//! Whole messages received at once: a receive of a Madeleine message
//! waiting outside the engine ([`Engine::recv_whole_now`]) takes exactly
//! the message the usual path would have matched to it, whole, when its
//! packet is that message alone and in order; it asks to be posted whenever
//! only the usual path can tell, and is unrelated to what it cannot match.

mod common;

use common::{CH, Net, Order, Piece, aggregate, caps, from, pieces};
use navette_core::{
    ChannelId, Engine, RailId, ReceiveMode, RecvNow, RequestError, SendMode, Status, TagMatch,
    WholeMessage, WholeNowOutcome,
};

/// Two nodes, eager below 1000 bytes.
fn eager_below_1000() -> Net {
    Net::new(2, 1, caps(1000, 4000))
}

/// Node 1's receive of a message from node 0 with `tag`.
fn want(net: &Net, tag: u64) -> RecvNow {
    assert!(net.engines[1].can_recv_now(CH, from(0)), "a quiet channel");
    RecvNow {
        channel: CH,
        source: from(0),
        tag: TagMatch::exact(tag),
    }
}

/// What became of the waiting receive.
#[derive(Debug)]
enum Outcome {
    Landed(WholeMessage),
    /// Posted the usual way: its key.
    Posted(navette_core::ReqId),
}

/// Shows `packets` to `want` in order, as a node does: a landed message
/// ends the waiting, an unrelated packet is handled the usual way, and a
/// packet that might match posts the receive before it is handled. Every
/// packet is handled.
fn show(net: &mut Net, want: &RecvNow, packets: &[(RailId, Vec<u8>)]) -> Option<Outcome> {
    let mut outcome = None;
    for (rail, bytes) in packets {
        if outcome.is_none() {
            match net.engines[1].recv_whole_now(*rail, bytes, want) {
                WholeNowOutcome::Landed(whole) => {
                    outcome = Some(Outcome::Landed(whole));
                    continue;
                }
                WholeNowOutcome::Unrelated => {}
                WholeNowOutcome::Post => {
                    let key = net.recv_begin(1, want.source, want.tag);
                    outcome = Some(Outcome::Posted(key));
                }
            }
        }
        net.inject(1, *rail, bytes).expect("a valid packet");
    }
    outcome
}

/// Unpacks every piece of `whole` as `sent` was packed: their data, and
/// the end's status.
fn unpack_all(mut whole: WholeMessage, sent: &[Piece]) -> (Vec<Vec<u8>>, Status) {
    let data = sent
        .iter()
        .map(|p| {
            let mut dest = vec![0xee; p.data.len()];
            whole.unpack(&mut dest, p.send, p.recv).expect("unpacks");
            dest
        })
        .collect();
    (data, whole.end().expect("ends"))
}

/// Receives the message with `tag` from node 0 the usual way, and checks
/// that it is exactly `sent`.
#[track_caller]
fn recv_usual(net: &mut Net, tag: u64, sent: &[Piece]) {
    let received = net.recv(1, from(0), TagMatch::exact(tag), sent, false);
    net.run();
    net.check_received(1, 0, tag, &received, sent);
}

fn data(sent: &[Piece]) -> Vec<Vec<u8>> {
    sent.iter().map(|p| p.data.clone()).collect()
}

fn at_once(engine: &Engine) -> u64 {
    engine.gate_stats().map(|g| g.messages_at_once).sum()
}

#[test]
fn a_message_alone_in_its_packet_leaves_the_engine_whole() {
    let mut net = eager_below_1000();
    let other = pieces(&[4], 1);
    let mine = pieces(&[8, 0, 200, 600], 2);
    let next = pieces(&[16, 32], 3);
    // Each message in a packet of its own.
    let mut packets = Vec::new();
    for (tag, msg) in [(7, &other), (5, &mine), (5, &next)] {
        net.send(0, 1, tag, msg);
        let packet = net.capture(0, 1);
        assert_eq!(packet.len(), 1, "one packet per message");
        packets.extend(packet);
    }
    let w = want(&net, 5);
    let outcome = show(&mut net, &w, &packets);
    let Some(Outcome::Landed(whole)) = outcome else {
        panic!("the receive's message lands: {outcome:?} {:?}", net.errors);
    };
    let total = mine.iter().map(|p| p.data.len()).sum();
    let status = Status {
        peer: 0,
        tag: 5,
        len: total,
    };
    assert_eq!(whole.status(), status);
    assert_eq!(unpack_all(whole, &mine), (data(&mine), status));
    assert_eq!(at_once(&net.engines[1]), 1);
    // The message before it and the one after it wait, unexpected, in
    // order; the gate's sequence went on as if the usual path had run.
    recv_usual(&mut net, 7, &other);
    recv_usual(&mut net, 5, &next);
    let later = pieces(&[8], 4);
    net.send(0, 1, 5, &later);
    net.run();
    recv_usual(&mut net, 5, &later);
    assert!(net.errors.is_empty(), "{:?}", net.errors);
    assert_eq!(net.engines[1].buffered_bytes(), 0);
}

#[test]
fn other_tags_channels_and_peers_are_unrelated() {
    let mut net = Net::new(3, 1, caps(1000, 4000));
    let w = want(&net, 5);
    net.send(0, 1, 6, &pieces(&[8, 8], 1));
    let packets = net.capture(0, 1);
    assert!(show(&mut net, &w, &packets).is_none(), "another tag");
    let out = net.engines[0].send_begin(ChannelId(9), 1, 5).unwrap();
    let bytes = net.alloc(0, b"channel 9".to_vec());
    net.engines[0].send_tagged(out, bytes);
    let packets = net.capture(0, 1);
    assert!(show(&mut net, &w, &packets).is_none(), "another channel");
    net.send(2, 1, 5, &pieces(&[8], 2));
    let packets = net.capture(2, 1);
    assert!(show(&mut net, &w, &packets).is_none(), "another peer");
    let mine = pieces(&[3, 5], 3);
    net.send(0, 1, 5, &mine);
    let packets = net.capture(0, 1);
    let Some(Outcome::Landed(whole)) = show(&mut net, &w, &packets) else {
        panic!("the receive's own message lands");
    };
    assert_eq!(unpack_all(whole, &mine).0, data(&mine));
}

/// Shows `packets` to a receive of tag 5, which they must post (`why`),
/// then receives `sent` through the posted receive.
#[track_caller]
fn posted_and_received(net: &mut Net, packets: &[(RailId, Vec<u8>)], sent: &[Piece], why: &str) {
    let w = want(net, 5);
    let Some(Outcome::Posted(key)) = show(net, &w, packets) else {
        panic!("{why}");
    };
    assert_eq!(receive_posted(net, key, sent), 5, "{why}");
}

/// Receives `sent` through the receive message `key`, posted: checks each
/// piece's data and returns the tag it matched.
#[track_caller]
fn receive_posted(net: &mut Net, key: navette_core::ReqId, sent: &[Piece]) -> u64 {
    let posted: Vec<_> = sent
        .iter()
        .map(|p| net.unpack(1, key, p.data.len(), p.send, p.recv, false))
        .collect();
    let end = net.recv_end(1, key);
    net.run();
    for (posted, piece) in posted.iter().zip(sent) {
        assert!(net.read(1, posted.dest) == piece.data);
    }
    net.ok(1, end).tag
}

#[test]
fn what_only_the_usual_path_can_match_posts_the_receive() {
    // A rendezvous piece: its data is still at the sender.
    let mut net = eager_below_1000();
    let big = pieces(&[8, 5000], 1);
    net.send(0, 1, 5, &big);
    let packets = net.capture(0, 1);
    posted_and_received(&mut net, &packets, &big, "a rendezvous request");

    // A message cut over several packets.
    let mut net = Net::one_chunk_per_packet(2, 1, caps(1000, 4000));
    let split = pieces(&[8, 8], 2);
    net.send(0, 1, 5, &split);
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 2);
    posted_and_received(&mut net, &packets, &split, "a message cut in two");

    // Ahead of its sequence: the message before it is missing.
    let mut net = eager_below_1000();
    let first = pieces(&[8], 3);
    let second = pieces(&[4, 4], 4);
    net.send(0, 1, 5, &first);
    net.send(0, 1, 5, &second);
    let mut packets = net.capture(0, 1);
    packets.reverse();
    posted_and_received(&mut net, &packets, &first, "a message out of order");
    recv_usual(&mut net, 5, &second);

    // Two messages in one packet, as an aggregating window sends them.
    let mut net = Net::one_chunk_per_packet(2, 1, caps(1000, 4000)).order(Order::Fifo);
    let seven = pieces(&[8], 5);
    let five = pieces(&[8, 2], 6);
    net.send(0, 1, 7, &seven);
    net.send(0, 1, 5, &five);
    let packets = aggregate(net.capture(0, 1));
    posted_and_received(&mut net, &packets, &five, "two messages in one packet");
    recv_usual(&mut net, 7, &seven);
}

#[test]
fn only_a_quiet_channel_lets_a_receive_wait_outside() {
    let mut net = eager_below_1000();
    net.send(0, 1, 7, &pieces(&[8], 1));
    net.run();
    assert!(
        !net.engines[1].can_recv_now(CH, from(0)),
        "an unexpected message"
    );
    recv_usual(&mut net, 7, &pieces(&[8], 1));
    assert!(net.engines[1].can_recv_now(CH, from(0)));
    let key = net.recv_begin(1, from(0), TagMatch::exact(3));
    assert!(
        !net.engines[1].can_recv_now(CH, from(0)),
        "a posted receive"
    );
    // A receive posted after the waiting one started: its message goes
    // the usual way, which matches in posting order.
    let w = RecvNow {
        channel: CH,
        source: from(0),
        tag: TagMatch::exact(3),
    };
    let sent = pieces(&[8, 8], 2);
    net.send(0, 1, 3, &sent);
    let packets = net.capture(0, 1);
    assert!(matches!(
        show(&mut net, &w, &packets),
        Some(Outcome::Posted(_))
    ));
    let tag = receive_posted(&mut net, key, &sent);
    assert_eq!(tag, 3, "the first receive posted got it");
}

/// Sends `sent` with `tag` from node 0 in a packet of its own, and lands
/// it at once in node 1's receive waiting outside the engine.
#[track_caller]
fn land_alone(net: &mut Net, tag: u64, sent: &[Piece]) -> WholeMessage {
    net.send(0, 1, tag, sent);
    let packets = net.capture(0, 1);
    let w = want(net, tag);
    match show(net, &w, &packets) {
        Some(Outcome::Landed(whole)) => whole,
        other => panic!("expected a landing, got {other:?}"),
    }
}

/// Each receiver mistake gives the same errors, piece by piece and at the
/// end, whether the message came at once or was received the usual way.
#[test]
fn mistakes_fail_as_the_usual_path_does() {
    let sent = vec![
        Piece::new(8, 1).modes(SendMode::Safer, ReceiveMode::Express),
        Piece::new(100, 2),
    ];
    let unpack = |whole: &mut WholeMessage, len: usize, piece: usize| {
        let mut dest = vec![0; len];
        let sent = &sent[piece.min(1)];
        whole.unpack(&mut dest, sent.send, sent.recv)
    };
    let landed = |tag: u64| land_alone(&mut eager_below_1000(), tag, &sent);
    // Too short a destination: the piece fails, so do the next and the end.
    let mut whole = landed(1);
    let err = unpack(&mut whole, 4, 0).unwrap_err();
    assert!(matches!(err, RequestError::SizeMismatch { .. }), "{err:?}");
    let next = unpack(&mut whole, 100, 1).unwrap_err();
    assert!(matches!(next, RequestError::MessageFailed(_)), "{next:?}");
    assert!(whole.end().is_err());
    // Too many unpacks, then too few.
    let mut whole = landed(2);
    unpack(&mut whole, 8, 0).unwrap();
    unpack(&mut whole, 100, 1).unwrap();
    let extra = unpack(&mut whole, 100, 2).unwrap_err();
    assert!(matches!(extra, RequestError::MessageFailed(_)), "{extra:?}");
    let mut whole = landed(3);
    unpack(&mut whole, 8, 0).unwrap();
    let end = whole.end().unwrap_err();
    assert!(
        matches!(end, RequestError::PieceCountMismatch { unpacked: 1, .. }),
        "{end:?}"
    );
}

/// The status of a message from node 0.
fn from_0(tag: u64, len: usize) -> Status {
    Status { peer: 0, tag, len }
}

/// Whole messages reuse the storage of those their thread dropped: a
/// message dropped half unpacked, or failed and never ended, leaves
/// nothing behind for the next, whether the next came at once or was kept
/// by the engine.
#[test]
fn a_message_after_one_dropped_starts_clean() {
    let mut net = eager_below_1000();
    let first = pieces(&[8, 300, 40], 1);
    let second = pieces(&[8, 16], 2);
    let third = pieces(&[600], 3);
    // Dropped after one piece of three.
    let mut whole = land_alone(&mut net, 1, &first);
    let mut dest = vec![0; 8];
    whole
        .unpack(&mut dest, first[0].send, first[0].recv)
        .expect("the first piece unpacks");
    drop(whole);
    let whole = land_alone(&mut net, 2, &second);
    let status = from_0(2, 24);
    assert_eq!(unpack_all(whole, &second), (data(&second), status));
    // Failed (a destination too short), then dropped without its end.
    let mut whole = land_alone(&mut net, 3, &third);
    let mut short = vec![0; 10];
    assert!(
        whole
            .unpack(&mut short, third[0].send, third[0].recv)
            .is_err()
    );
    drop(whole);
    // The next, kept by the engine (it came before its receive), is
    // whole and intact.
    net.send(0, 1, 4, &first);
    net.run();
    let kept = net.engines[1]
        .take_unexpected_whole(CH, from(0), TagMatch::exact(4))
        .expect("the message came whole");
    let status = from_0(4, 348);
    assert_eq!(unpack_all(kept, &first), (data(&first), status));
    // And once more at once, after the kept one.
    let whole = land_alone(&mut net, 5, &third);
    let status = from_0(5, 600);
    assert_eq!(unpack_all(whole, &third), (data(&third), status));
}

/// A large message that lands whole from a buffer its driver may give
/// away keeps that buffer once its thread has a spare message, and leaves
/// the buffer the message before it kept in its place: buffers go round
/// between the driver and the messages, and the data is copied once (into
/// the receiver's memory) instead of twice. Small messages, and large ones
/// before any spare, are copied out of the buffer, which stays.
#[test]
fn a_large_message_keeps_the_buffer_its_driver_hands_over() {
    let mut net = Net::new(2, 1, caps(64 << 10, 64 << 10));
    let copied = |net: &Net| -> u64 { net.engines[1].gate_stats().map(|g| g.bytes_copied).sum() };
    let large = |seed| pieces(&[8, 16 << 10], seed);
    // Lands `sent` with `tag` from `buf`, the packet at `skip..`, and
    // checks the message unpacked; returns whether the buffer was taken
    // and the bytes counted as copied, and keeps the length of the buffer
    // given in `given_len`.
    let given_len = std::cell::Cell::new(0);
    let land = |net: &mut Net, tag: u64, sent: &[Piece], buf: &mut Vec<u8>, skip: usize| {
        net.send(0, 1, tag, sent);
        let mut packets = net.capture(0, 1);
        assert_eq!(packets.len(), 1, "one packet");
        let (rail, packet) = packets.pop().expect("one packet");
        buf.clear();
        buf.resize(skip, 0xaa);
        buf.extend_from_slice(&packet);
        // A driver's buffer is longer than its packet.
        buf.resize(skip + packet.len() + 100, 0xbb);
        given_len.set(buf.len());
        let w = want(net, tag);
        let before = copied(net);
        let range = skip..skip + packet.len();
        let (outcome, taken) = net.engines[1].recv_whole_now_in(rail, buf, range, &w);
        let WholeNowOutcome::Landed(whole) = outcome else {
            panic!("the message lands: {outcome:?}");
        };
        let status = from_0(tag, sent.iter().map(|p| p.data.len()).sum());
        assert_eq!(unpack_all(whole, sent), (data(sent), status));
        (taken, copied(net) - before)
    };
    let mut buf = Vec::new();
    // No spare yet on this thread: copied out, the buffer stays.
    let first = large(1);
    let len = 8 + (16 << 10) as u64;
    assert_eq!(land(&mut net, 1, &first, &mut buf, 0), (false, 2 * len));
    // Its message dropped, the next keeps the buffer: a new one, as long,
    // takes its place.
    let first_buffer = buf.as_ptr();
    assert_eq!(land(&mut net, 2, &large(2), &mut buf, 40), (true, len));
    assert_ne!(buf.as_ptr(), first_buffer, "another buffer in its place");
    assert_eq!(buf.len(), given_len.get(), "as long as the one given");
    // The next gets back the buffer given before.
    assert_eq!(land(&mut net, 3, &large(3), &mut buf, 0), (true, len));
    assert_eq!(buf.as_ptr(), first_buffer, "the buffer given before");
    // A small message is copied, whatever the spare: the buffer stays.
    let small = pieces(&[8, 100], 4);
    let given = buf.as_ptr();
    assert_eq!(land(&mut net, 4, &small, &mut buf, 0), (false, 2 * 108));
    assert_eq!(buf.as_ptr(), given);
    // And a large one after it is handed over again, intact.
    assert_eq!(land(&mut net, 5, &large(5), &mut buf, 7), (true, len));
}
