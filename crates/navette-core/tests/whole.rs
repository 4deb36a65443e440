//! Messages taken whole: a message whose pieces have all arrived eager
//! leaves the engine in one step, matched or unexpected, and unpacking it
//! checks each piece exactly as pairing does — same data, same errors.

mod common;

use common::{CH, Net, Piece, caps, from, pieces};

use navette_core::{ReceiveMode, RequestError, SendMode, Source, Status, TagMatch, WholeMessage};

/// Eager up to 1000 bytes.
fn net() -> Net {
    Net::new(2, 1, caps(1000, 4000))
}

/// One unpack the receiver makes: a length and the modes it expects.
#[derive(Clone, Copy, Debug)]
struct Unpack {
    len: usize,
    send: SendMode,
    recv: ReceiveMode,
}

fn mirror(pieces: &[Piece]) -> Vec<Unpack> {
    pieces
        .iter()
        .map(|p| Unpack {
            len: p.data.len(),
            send: p.send,
            recv: p.recv,
        })
        .collect()
}

/// Each unpack's data (or error), then the end's outcome.
type Outcomes = (
    Vec<Result<Vec<u8>, RequestError>>,
    Result<Status, RequestError>,
);

/// Unpacks `unpacks` from `whole`: each piece's data (or error), then the
/// end's outcome.
fn unpack_whole(mut whole: WholeMessage, unpacks: &[Unpack]) -> Outcomes {
    let got = unpacks
        .iter()
        .map(|u| {
            let mut dest = vec![0xee; u.len];
            whole.unpack(&mut dest, u.send, u.recv).map(|()| dest)
        })
        .collect();
    (got, whole.end())
}

/// The same unpacks the usual way, on a message that has arrived.
fn unpack_usual(net: &mut Net, tag: u64, unpacks: &[Unpack]) -> Outcomes {
    let key = net.recv_begin(1, from(0), TagMatch::exact(tag));
    let posted: Vec<_> = unpacks
        .iter()
        .map(|u| net.unpack(1, key, u.len, u.send, u.recv, false))
        .collect();
    let end = net.recv_end(1, key);
    net.run();
    let got = net.landed(1, &posted);
    let end = net.outcome(1, end).expect("the end completed").clone();
    (got, end)
}

#[test]
fn a_matched_message_that_arrived_is_taken_whole() {
    let mut net = net();
    let msg = pieces(&[8, 0, 200, 1000 - 1], 1);
    let key = net.recv_begin(1, from(0), TagMatch::exact(7));
    net.send(0, 1, 7, &msg);
    net.run();
    assert_eq!(net.ok(1, key).peer, 0, "the match completed");
    assert!(net.engines[1].buffered_bytes() > 0);
    let whole = net.engines[1].take_matched_whole(key).expect("whole");
    assert_eq!(net.engines[1].buffered_bytes(), 0, "released by the engine");
    let total = msg.iter().map(|p| p.data.len()).sum();
    assert_eq!(
        whole.status(),
        Status {
            peer: 0,
            tag: 7,
            len: total
        }
    );
    let (got, end) = unpack_whole(whole, &mirror(&msg));
    for (got, piece) in got.into_iter().zip(&msg) {
        assert_eq!(got.unwrap(), piece.data);
    }
    assert_eq!(end.unwrap().len, total);
    let counted: u64 = net.engines[1].gate_stats().map(|g| g.messages_whole).sum();
    assert_eq!(counted, 1);
    // The key names nothing any more.
    assert!(net.engines[1].take_matched_whole(key).is_none());
    assert!(!net.engines[1].recv_unmatched(key));
}

#[test]
fn unexpected_messages_are_taken_whole_in_order() {
    let mut net = net();
    let first = pieces(&[4, 16], 2);
    let second = pieces(&[32], 3);
    let other = pieces(&[5], 4);
    net.send(0, 1, 9, &other);
    net.send(0, 1, 3, &first);
    net.send(0, 1, 3, &second);
    net.run();
    let engine = &mut net.engines[1];
    assert!(
        engine
            .take_unexpected_whole(CH, from(0), TagMatch::exact(8))
            .is_none()
    );
    let take = |engine: &mut navette_core::Engine| {
        engine
            .take_unexpected_whole(CH, Source::Any, TagMatch::exact(3))
            .expect("whole")
    };
    let (got, end) = unpack_whole(take(engine), &mirror(&first));
    assert_eq!(got[1].as_ref().unwrap(), &first[1].data);
    assert_eq!(end.unwrap().len, 20);
    let (got, _) = unpack_whole(take(engine), &mirror(&second));
    assert_eq!(got[0].as_ref().unwrap(), &second[0].data);
    // The other tag is still there for the usual path.
    let (got, end) = unpack_usual(&mut net, 9, &mirror(&other));
    assert_eq!(got[0].as_ref().unwrap(), &other[0].data);
    assert!(end.is_ok());
    assert_eq!(net.engines[1].buffered_bytes(), 0);
}

#[test]
fn a_message_not_all_there_or_begun_stays_in_the_engine() {
    let mut net = net();
    // A rendezvous piece: its data is still at the sender.
    let big = pieces(&[8, 5000], 5);
    net.send(0, 1, 1, &big);
    net.run();
    assert!(
        net.engines[1]
            .take_unexpected_whole(CH, Source::Any, TagMatch::exact(1))
            .is_none()
    );
    let (got, end) = unpack_usual(&mut net, 1, &mirror(&big));
    assert_eq!(got[1].as_ref().unwrap(), &big[1].data);
    assert!(end.is_ok());

    // Posted before it came, and one piece unpacked already.
    let small = pieces(&[8, 8], 6);
    let key = net.recv_begin(1, from(0), TagMatch::exact(2));
    let first = net.unpack(1, key, 8, SendMode::Cheaper, ReceiveMode::Cheaper, false);
    net.send(0, 1, 2, &small);
    net.run();
    assert!(net.engines[1].take_matched_whole(key).is_none());
    let second = net.unpack(1, key, 8, SendMode::Cheaper, ReceiveMode::Cheaper, false);
    let end = net.recv_end(1, key);
    net.run();
    assert_eq!(net.read(1, first.dest), small[0].data);
    assert_eq!(net.read(1, second.dest), small[1].data);
    assert!(net.outcome(1, end).unwrap().is_ok());

    // Not matched yet: nothing to take.
    let key = net.recv_begin(1, from(0), TagMatch::exact(3));
    assert!(net.engines[1].take_matched_whole(key).is_none());
}

/// Each receiver mistake gives the same errors, piece by piece and at the
/// end, whether the message is taken whole or unpacked the usual way.
#[test]
fn mistakes_fail_as_the_usual_path_does() {
    let sent = vec![
        Piece::new(8, 1).modes(SendMode::Safer, ReceiveMode::Express),
        Piece::new(100, 2),
    ];
    let right = mirror(&sent);
    let mut too_short = right.clone();
    too_short[0].len = 4;
    let mut other_mode = right.clone();
    other_mode[1].recv = ReceiveMode::Express;
    let mut too_many = right.clone();
    too_many.push(right[1]);
    let too_few = right[..1].to_vec();
    let mistakes = [
        ("right", right),
        ("too short", too_short),
        ("other mode", other_mode),
        ("too many", too_many),
        ("too few", too_few),
    ];
    for (i, (what, unpacks)) in mistakes.iter().enumerate() {
        let tag = i as u64;
        let mut net = net();
        net.send(0, 1, tag, &sent);
        net.send(0, 1, tag, &sent);
        net.run();
        let whole = net.engines[1]
            .take_unexpected_whole(CH, Source::Any, TagMatch::exact(tag))
            .expect("whole");
        let taken = unpack_whole(whole, unpacks);
        let usual = unpack_usual(&mut net, tag, unpacks);
        assert_eq!(taken, usual, "{what}");
        assert_eq!(taken.1.is_ok(), *what == "right", "{what}: {taken:?}");
    }
}

/// A message of several pieces arriving in one packet is handled in one
/// step; the state it leaves is the one piece by piece would have left:
/// a receive ended with no unpack learns that pieces came, and memory
/// held for peers stays bounded.
#[test]
fn a_whole_packet_arrives_as_pieces_would() {
    // Ended before anything came, with no piece unpacked: the sender's
    // pieces are too many.
    let mut net = net();
    let key = net.recv_begin(1, from(0), TagMatch::exact(4));
    let end = net.recv_end(1, key);
    net.send(0, 1, 4, &pieces(&[8, 8], 9));
    net.run();
    assert!(
        matches!(
            net.err(1, end),
            RequestError::PieceCountMismatch { unpacked: 0, .. }
        ),
        "{:?}",
        net.outcome(1, end)
    );

    // Beyond max_buffered_bytes: refused as a violation, nothing kept.
    let config = |_| navette_core::EngineConfig {
        max_buffered_bytes: 300,
        ..navette_core::EngineConfig::default()
    };
    let mut net = Net::with_config(2, 1, caps(1000, 4000), config);
    net.send(0, 1, 5, &pieces(&[100, 100, 100], 10));
    net.run_allowing_errors();
    assert!(
        matches!(
            net.errors.as_slice(),
            [(
                1,
                navette_core::ProtocolError::Violation {
                    what: navette_core::Violation::BufferOverflow(300),
                    ..
                }
            )]
        ),
        "{:?}",
        net.errors
    );
    assert!(net.engines[1].buffered_bytes() <= 300);
}
