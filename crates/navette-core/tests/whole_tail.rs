//! Messages taken whole with a tail: a matched message whose last piece
//! is a rendezvous request, every other piece eager, leaves the engine in
//! one step (`Engine::take_matched_with_tail`); its eager pieces are
//! unpacked from it, and its tail goes back to the engine once, with its
//! destination (`Engine::unpack_whole_tail`). Same data, same errors, and
//! the same answers to the sender as the usual path, read or not.

mod common;

use common::{Net, Piece, caps, from};

use navette_core::{
    MemRef, RailCaps, ReceiveMode, ReqId, RequestError, SendMode, Status, TagMatch, WholeMessage,
};

/// Rendezvous from 1 000 bytes, fragments of 100 000.
fn plain_caps() -> RailCaps {
    caps(1000, 100_000)
}

/// As [`plain_caps`], and the receiver reads pieces from 1 000 bytes.
fn readable_caps() -> RailCaps {
    RailCaps {
        read_min: Some(1000),
        ..plain_caps()
    }
}

/// A 64-byte head, then a body of `body` bytes.
fn head_and_body(body: usize, seed: u64) -> Vec<Piece> {
    vec![Piece::new(64, seed), Piece::new(body, seed + 1)]
}

/// Node 1's receive of `msg` from node 0 on `tag`, sent and run, the
/// receive posted first or after the message came: its key.
fn arrived(net: &mut Net, tag: u64, msg: &[Piece], posted_first: bool) -> (ReqId, Vec<ReqId>) {
    let want = TagMatch::exact(tag);
    if posted_first {
        let key = net.recv_begin(1, from(0), want);
        let sent = net.send(0, 1, tag, msg);
        net.run();
        (key, sent)
    } else {
        let sent = net.send(0, 1, tag, msg);
        net.run();
        let key = net.recv_begin(1, from(0), want);
        net.collect();
        (key, sent)
    }
}

#[test]
fn a_head_and_a_body_are_taken_whole_and_the_body_read_or_asked_for() {
    for (caps, read) in [(readable_caps(), true), (plain_caps(), false)] {
        for posted_first in [true, false] {
            let what = format!("read: {read}, posted first: {posted_first}");
            let mut net = Net::new(2, 1, caps);
            let msg = head_and_body(50_000, 1);
            let (key, sent) = arrived(&mut net, 7, &msg, posted_first);
            assert!(
                net.engines[1].take_matched_whole(key).is_none(),
                "{what}: not whole without its tail"
            );
            let mut whole = net.engines[1]
                .take_matched_with_tail(key)
                .expect("taken whole with its tail");
            let status = whole.status();
            assert_eq!((status.peer, status.tag, status.len), (0, 7, 50_064));
            assert!(!whole.at_tail() && whole.tail_pending(), "{what}");
            let mut head = vec![0; 64];
            whole
                .unpack(&mut head, SendMode::Cheaper, ReceiveMode::Cheaper)
                .expect("the head");
            assert_eq!(head, msg[0].data, "{what}");
            assert!(whole.at_tail(), "{what}");

            let dest = net.alloc(1, vec![0xee; 50_000]);
            let reads = net.reads_made;
            let req = unpack_tail(&mut net, &mut whole, dest, SendMode::Cheaper);
            let req = req.expect("the tail is accepted");
            assert!(!whole.tail_pending(), "{what}");
            net.run();
            assert_eq!(net.ok(1, req).len, 50_000, "{what}");
            assert!(net.read(1, dest) == msg[1].data, "{what}: the body");
            assert_eq!(net.reads_made - reads, usize::from(read), "{what}");
            assert_eq!(whole.end(), Ok(status), "{what}");

            assert_eq!(net.ok(0, sent[1]).len, 50_000, "{what}: the send");
            assert!(net.offers.is_empty(), "{what}: every offer read or dropped");
            assert_eq!(net.engines[1].buffered_bytes(), 0, "{what}");
            assert!(!net.engines[0].has_pending(1) && !net.engines[1].has_pending(0));
            let whole_count: u64 = net.engines[1].gate_stats().map(|s| s.messages_whole).sum();
            assert_eq!(whole_count, 1, "{what}");
        }
    }
}

/// The tail alone, or behind several eager pieces, and eager pieces alone
/// still taken whole by both calls.
#[test]
fn any_number_of_eager_pieces_may_come_before_the_tail() {
    let mut net = Net::new(2, 1, readable_caps());
    for (tag, lens) in [&[5000][..], &[8, 0, 100, 5000], &[8, 16]]
        .into_iter()
        .enumerate()
    {
        let tag = tag as u64;
        let msg = common::pieces(lens, tag);
        let (key, sent) = arrived(&mut net, tag, &msg, tag.is_multiple_of(2));
        let mut whole = net.engines[1].take_matched_with_tail(key).expect("whole");
        let mut tail_req = None;
        for piece in &msg {
            if whole.at_tail() {
                let dest = net.alloc(1, vec![0; piece.data.len()]);
                let req = unpack_tail(&mut net, &mut whole, dest, piece.send);
                tail_req = Some((req.expect("accepted"), dest));
            } else {
                let mut got = vec![0; piece.data.len()];
                whole
                    .unpack(&mut got, piece.send, piece.recv)
                    .expect("eager");
                assert_eq!(got, piece.data, "{lens:?}");
            }
        }
        net.run();
        if let Some((req, dest)) = tail_req {
            assert_eq!(net.ok(1, req).len, 5000);
            assert!(net.read(1, dest) == msg.last().unwrap().data);
        }
        let total: usize = lens.iter().sum();
        assert_eq!(whole.end().map(|s| s.len), Ok(total), "{lens:?}");
        for req in sent {
            assert!(net.outcome(0, req).is_some_and(|o| o.is_ok()), "{lens:?}");
        }
    }
    assert_eq!(net.engines[1].buffered_bytes(), 0);
}

/// Messages that are not whole but for their tail stay in the engine.
#[test]
fn only_a_last_rendezvous_piece_makes_a_tail() {
    let mut net = Net::new(2, 1, readable_caps());
    // A rendezvous piece before the last.
    let msg = [Piece::new(5000, 1), Piece::new(8, 2)];
    let (key, _) = arrived(&mut net, 1, &msg, true);
    assert!(net.engines[1].take_matched_with_tail(key).is_none());
    // Two rendezvous pieces.
    let msg = [Piece::new(5000, 1), Piece::new(5000, 2)];
    let (key, _) = arrived(&mut net, 2, &msg, false);
    assert!(net.engines[1].take_matched_with_tail(key).is_none());
    // Not matched yet.
    let key = net.recv_begin(1, from(0), TagMatch::exact(3));
    assert!(net.engines[1].take_matched_with_tail(key).is_none());
    // Its last piece not come yet.
    let msg = head_and_body(5000, 4);
    let key = net.recv_begin(1, from(0), TagMatch::exact(4));
    let mut out = net.begin(0, 1, 4);
    net.pack(0, &mut out, &msg[0], false);
    net.run();
    assert!(net.engines[1].take_matched_with_tail(key).is_none());
}

/// Unpacks the tail of `whole` into `dest` with CHEAPER reception.
fn unpack_tail(
    net: &mut Net,
    whole: &mut WholeMessage,
    dest: MemRef,
    send: SendMode,
) -> Result<ReqId, RequestError> {
    let unpacked = net.engines[1].unpack_whole_tail(whole, dest, send, ReceiveMode::Cheaper);
    net.collect();
    unpacked.expect("at its tail")
}

/// One unpack the receiver makes.
#[derive(Clone, Copy, Debug)]
struct Unpack {
    len: usize,
    send: SendMode,
}

/// Each unpack's data (or error), the end's outcome, and the body's send.
type Outcomes = (
    Vec<Result<Vec<u8>, RequestError>>,
    Result<Status, RequestError>,
    Result<Status, RequestError>,
);

/// Unpacks `unpacks` from the message taken whole with its tail, refusing
/// a tail left pending before the end, as the node's messages do; with
/// `deferred`, the tail's destination is given after the other unpacks
/// (as CHEAPER pieces get theirs at the end).
fn taken_whole(
    net: &mut Net,
    key: ReqId,
    unpacks: &[Unpack],
    body: ReqId,
    deferred: bool,
) -> Outcomes {
    let mut whole = net.engines[1].take_matched_with_tail(key).expect("whole");
    let mut reads = Vec::new();
    let mut got = Vec::new();
    let mut later = None;
    for u in unpacks {
        if deferred && whole.at_tail() {
            match whole.defer_tail(u.len, u.send, ReceiveMode::Cheaper) {
                Some(Ok(())) => {
                    later = Some((got.len(), u));
                    got.push(Ok(Vec::new()));
                }
                Some(Err(err)) => {
                    // Refused at once, as the node's messages do.
                    net.engines[1].refuse_whole_tail(&mut whole);
                    net.collect();
                    got.push(Err(err));
                }
                None => unreachable!("at its tail"),
            }
        } else if whole.at_tail() {
            let dest = net.alloc(1, vec![0xee; u.len]);
            match unpack_tail(net, &mut whole, dest, u.send) {
                Ok(req) => {
                    reads.push((got.len(), req, dest));
                    got.push(Ok(Vec::new()));
                }
                Err(err) => got.push(Err(err)),
            }
        } else {
            let mut dest = vec![0xee; u.len];
            let unpacked = whole.unpack(&mut dest, u.send, ReceiveMode::Cheaper);
            got.push(unpacked.map(|()| dest));
        }
    }
    if let Some((i, u)) = later {
        let dest = net.alloc(1, vec![0xee; u.len]);
        let unpacked = net.engines[1].unpack_deferred_tail(&mut whole, dest);
        net.collect();
        match unpacked.expect("passed over") {
            Ok(req) => reads.push((i, req, dest)),
            Err(err) => got[i] = Err(err),
        }
    }
    net.engines[1].refuse_whole_tail(&mut whole);
    net.run();
    for (i, req, dest) in reads {
        got[i] = net
            .outcome(1, req)
            .expect("done")
            .clone()
            .map(|_| net.read(1, dest));
    }
    let sent = net.outcome(0, body).expect("the send ended").clone();
    (got, whole.end(), sent)
}

/// The same unpacks the usual way (`deferred`: the second piece's
/// destination, the tail's, given after all unpacks).
fn usual(net: &mut Net, key: ReqId, unpacks: &[Unpack], body: ReqId, deferred: bool) -> Outcomes {
    let posted: Vec<_> = unpacks
        .iter()
        .enumerate()
        .map(|(i, u)| {
            net.unpack(
                1,
                key,
                u.len,
                u.send,
                ReceiveMode::Cheaper,
                deferred && i == 1,
            )
        })
        .collect();
    if deferred && let Some(&tail) = posted.get(1) {
        // A piece that failed is no longer deferred: nothing to fill.
        let _ = net.engines[1].recv_fill(key, tail.req, tail.dest, &mut net.mems[1]);
        net.collect();
    }
    let end = net.recv_end(1, key);
    net.run();
    let got = net.landed(1, &posted);
    let end = net.outcome(1, end).expect("the end completed").clone();
    let sent = net.outcome(0, body).expect("the send ended").clone();
    (got, end, sent)
}

/// Each receiver mistake gives the same errors, piece by piece, at the
/// end and at the sender, whether the message is taken whole with its
/// tail or unpacked the usual way.
#[test]
fn mistakes_fail_as_the_usual_path_does() {
    let right = [
        Unpack {
            len: 64,
            send: SendMode::Cheaper,
        },
        Unpack {
            len: 5000,
            send: SendMode::Cheaper,
        },
    ];
    let mut short_head = right;
    short_head[0].len = 60;
    let mut short_body = right;
    short_body[1].len = 4000;
    let mut other_mode = right;
    other_mode[1].send = SendMode::Safer;
    let mut too_many = right.to_vec();
    too_many.push(right[0]);
    let mistakes: [(&str, &[Unpack]); 6] = [
        ("right", &right),
        ("short head", &short_head),
        ("short body", &short_body),
        ("other mode", &other_mode),
        ("too many", &too_many),
        ("too few", &right[..1]),
    ];
    for (caps, deferred) in [
        (readable_caps(), false),
        (plain_caps(), false),
        (readable_caps(), true),
        (plain_caps(), true),
    ] {
        for (i, (what, unpacks)) in mistakes.iter().enumerate() {
            let what = format!("{what}, deferred: {deferred}");
            let tag = i as u64;
            let msg = head_and_body(5000, tag);
            let mut net = Net::new(2, 1, caps);
            let (whole_key, whole_sent) = arrived(&mut net, tag, &msg, true);
            let taken = taken_whole(&mut net, whole_key, unpacks, whole_sent[1], deferred);
            let (usual_key, usual_sent) = arrived(&mut net, tag, &msg, true);
            let usual = usual(&mut net, usual_key, unpacks, usual_sent[1], deferred);
            assert_eq!(taken, usual, "{what}");
            let right = what.starts_with("right");
            assert_eq!(taken.1.is_ok(), right, "{what}: {taken:?}");
            assert!(net.offers.is_empty(), "{what}: every offer read or dropped");
            assert_eq!(net.engines[1].buffered_bytes(), 0, "{what}");
            assert!(!net.engines[1].has_reads(), "{what}");
        }
    }
}

/// A tail refused before anything of it is unpacked fails its send as
/// rejected; a readable one's offer is forgotten, never read.
#[test]
fn a_refused_tail_fails_its_send_as_rejected() {
    for caps in [readable_caps(), plain_caps()] {
        let mut net = Net::new(2, 1, caps);
        let msg = head_and_body(5000, 1);
        let (key, sent) = arrived(&mut net, 1, &msg, false);
        let mut whole = net.engines[1].take_matched_with_tail(key).expect("whole");
        net.engines[1].refuse_whole_tail(&mut whole);
        assert!(!whole.tail_pending());
        net.run();
        assert_eq!(net.err(0, sent[1]), RequestError::RejectedByReceiver);
        assert_eq!(net.reads_made, 0);
        assert!(net.offers.is_empty(), "the offer was forgotten");
        // Nothing was unpacked: the end says what a missing piece says.
        assert!(matches!(
            whole.end(),
            Err(RequestError::PieceCountMismatch { .. })
        ));
    }
}

/// A peer lost while its tail is read fails the tail's request.
#[test]
fn a_tail_whose_peer_is_lost_fails() {
    let mut net = Net::new(2, 1, plain_caps());
    let msg = head_and_body(5000, 1);
    let (key, _) = arrived(&mut net, 1, &msg, true);
    let mut whole = net.engines[1].take_matched_with_tail(key).expect("whole");
    let mut head = vec![0; 64];
    whole
        .unpack(&mut head, SendMode::Cheaper, ReceiveMode::Cheaper)
        .expect("the head");
    let dest = net.alloc(1, vec![0; 5000]);
    let req = unpack_tail(&mut net, &mut whole, dest, SendMode::Cheaper).expect("accepted");
    // The clear-to-send leaves, and the rail closes before the data comes.
    net.transmit();
    let rail = net.rails_from(1, 0)[0];
    net.engines[1].close_rail(rail);
    net.collect();
    assert!(matches!(
        net.err(1, req),
        RequestError::PeerUnreachable { peer: 0 }
    ));
}

/// A peer lost before its tail is unpacked: the tail fails at once (its
/// data never comes), and nothing is queued for the lost peer.
#[test]
fn a_tail_of_a_peer_already_lost_fails_at_once() {
    for refused in [false, true] {
        let mut net = Net::new(2, 1, readable_caps());
        let msg = head_and_body(5000, 1);
        let (key, _) = arrived(&mut net, 1, &msg, true);
        let mut whole = net.engines[1].take_matched_with_tail(key).expect("whole");
        let rail = net.rails_from(1, 0)[0];
        net.engines[1].close_rail(rail);
        if refused {
            net.engines[1].refuse_whole_tail(&mut whole);
        } else {
            let mut head = vec![0; 64];
            whole
                .unpack(&mut head, SendMode::Cheaper, ReceiveMode::Cheaper)
                .expect("the head");
            let dest = net.alloc(1, vec![0; 5000]);
            let failed = unpack_tail(&mut net, &mut whole, dest, SendMode::Cheaper);
            assert_eq!(
                failed,
                Err(RequestError::MessageFailed(Box::new(
                    RequestError::PeerUnreachable { peer: 0 }
                )))
            );
        }
        assert!(!net.engines[1].has_pending(0), "nothing for the lost peer");
        assert!(!net.engines[1].has_reads());
        assert!(whole.end().is_err());
    }
}

/// A message that came before its receive leaves the engine whole with its
/// tail from the unexpected queue, as from a matched receive; the first
/// matching message goes, and nothing of it stays behind.
#[test]
fn an_unexpected_message_is_taken_whole_with_its_tail() {
    for caps in [readable_caps(), plain_caps()] {
        let mut net = Net::new(2, 1, caps);
        let (first, second) = (head_and_body(5000, 1), head_and_body(5000, 3));
        let sent_first = net.send(0, 1, 7, &first);
        let sent_second = net.send(0, 1, 7, &second);
        net.run();
        let (ch, tag) = (common::CH, TagMatch::exact(7));
        assert!(
            net.engines[1]
                .take_unexpected_whole(ch, from(0), tag)
                .is_none(),
            "not whole without its tail"
        );
        for (msg, sent) in [(&first, &sent_first), (&second, &sent_second)] {
            let mut whole = net.engines[1]
                .take_unexpected_with_tail(ch, from(0), tag)
                .expect("the first message");
            let mut head = vec![0; 64];
            whole
                .unpack(&mut head, SendMode::Cheaper, ReceiveMode::Cheaper)
                .expect("the head");
            assert_eq!(head, msg[0].data, "in order");
            let dest = net.alloc(1, vec![0; 5000]);
            let req = unpack_tail(&mut net, &mut whole, dest, SendMode::Cheaper);
            net.run();
            assert_eq!(net.ok(1, req.expect("accepted")).len, 5000);
            assert!(net.read(1, dest) == msg[1].data);
            assert_eq!(whole.end().map(|s| s.len), Ok(5064));
            assert_eq!(net.ok(0, sent[1]).len, 5000);
        }
        assert!(
            net.engines[1]
                .take_unexpected_with_tail(ch, from(0), tag)
                .is_none()
        );
        assert_eq!(net.engines[1].buffered_bytes(), 0);
        assert!(net.offers.is_empty());
    }
}

/// The packet of the usual large message (a head, then the body's
/// rendezvous request) is handled in one step when it comes: the state it
/// leaves is the one its chunks one by one leave, receive posted first or
/// not, read or asked for.
#[test]
fn the_usual_large_message_arrives_in_one_step_as_chunk_by_chunk() {
    for (caps, read) in [(readable_caps(), true), (plain_caps(), false)] {
        for posted_first in [true, false] {
            let what = format!("read: {read}, posted first: {posted_first}");
            let msg = head_and_body(50_000, 1);
            let mut outcomes = Vec::new();
            for one_step in [true, false] {
                let mut net = Net::new(2, 1, caps);
                let want = TagMatch::exact(7);
                let early = posted_first.then(|| net.recv(1, from(0), want, &msg, false));
                net.send(0, 1, 7, &msg);
                let packets = net.capture(0, 1);
                assert_eq!(packets.len(), 1, "{what}: head and request in one packet");
                for (rail, bytes) in packets {
                    if one_step {
                        net.inject(1, rail, &bytes).expect("a valid packet");
                    } else {
                        // The same chunks, one packet each.
                        let packet = navette_wire::Packet::decode(&bytes, &Default::default())
                            .expect("a valid packet");
                        for chunk in packet.chunks() {
                            let mut one = Vec::new();
                            navette_wire::encode_packet(&[chunk], &mut one);
                            net.inject(1, rail, &one).expect("a valid chunk");
                        }
                    }
                }
                let r = early.unwrap_or_else(|| net.recv(1, from(0), want, &msg, false));
                net.run();
                net.check_received(1, 0, 7, &r, &msg);
                assert_eq!(net.engines[1].buffered_bytes(), 0, "{what}");
                assert!(net.offers.is_empty(), "{what}");
                let stats: Vec<_> = net.engines[1]
                    .gate_stats()
                    .map(|s| (s.chunks_received, s.bytes_copied))
                    .collect();
                outcomes.push((net.reads_made, stats));
            }
            assert_eq!(outcomes[0], outcomes[1], "{what}");
            assert_eq!(outcomes[0].0, usize::from(read), "{what}");
        }
    }
}
