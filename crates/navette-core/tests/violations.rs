//! A peer that breaks the protocol gets a `ProtocolError` from
//! `handle_packet`, never a panic, and the engine goes on serving others.

mod common;

use common::{CH, Net, Piece, caps, from, pieces};
use navette_core::{
    EngineConfig, PIECE_COST, ProtocolError, RailId, ReceiveMode, SendMode, TagMatch, Violation,
};
use navette_wire::{
    Chunk, ClearToSend, CtsFlags, Eager, EagerHeader, Packet, PieceFlags, RdvData, RdvDataHeader,
    RdvRequest, encode_packet,
};

fn packet(chunks: &[Chunk<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_packet(chunks, &mut out);
    out
}

fn eager<'a>(seq: u32, msg: u32, flags: PieceFlags, data: &'a [u8]) -> Chunk<'a> {
    Chunk::Eager(Eager {
        header: EagerHeader {
            channel: CH.0,
            flags,
            seq,
            msg,
            tag: 1,
            len: data.len() as u32,
        },
        data,
    })
}

fn whole() -> PieceFlags {
    PieceFlags::new(true, true, SendMode::Cheaper, ReceiveMode::Cheaper)
}

fn rdv_request(seq: u32, msg: u32, send_id: u32, total_len: u64) -> Chunk<'static> {
    Chunk::RdvRequest(RdvRequest {
        channel: CH.0,
        flags: whole(),
        seq,
        msg,
        tag: 1,
        send_id,
        total_len,
        readable: false,
    })
}

fn rdv_data(recv_id: u32, offset: u64, data: &[u8]) -> Chunk<'_> {
    Chunk::RdvData(RdvData {
        header: RdvDataHeader {
            channel: CH.0,
            recv_id,
            offset,
            len: data.len() as u32,
        },
        data,
    })
}

fn violation(result: Result<(), ProtocolError>) -> Violation {
    match result {
        Err(ProtocolError::Violation { what, .. }) => what,
        other => panic!("expected a violation, got {other:?}"),
    }
}

/// Node 1's rail from node 0.
fn rail(net: &Net) -> RailId {
    net.rails_from(0, 1)[0]
}

/// Closes the rails between nodes 0 and 1 as a driver would after a
/// protocol error, then checks that node 2 can still send to node 1.
fn others_unaffected(net: &mut Net) {
    for link in &mut net.links {
        if (link.from, link.to) == (0, 1) || (link.from, link.to) == (1, 0) {
            link.queue.clear();
            let (from, rail) = (link.from, link.from_rail);
            net.engines[from].close_rail(rail);
        }
    }
    net.errors.clear();
    let msg = pieces(&[10, 3000], 77);
    let r = net.recv(1, from(2), TagMatch::exact(9), &msg, false);
    net.send(2, 1, 9, &msg);
    net.run();
    net.check_received(1, 2, 9, &r, &msg);
}

#[test]
fn garbage_bytes() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    for bytes in [
        &b""[..],
        b"NV",
        b"hello, world, this is not a packet",
        &[0xff; 64],
    ] {
        assert!(matches!(
            net.inject(1, rail, bytes),
            Err(ProtocolError::Decode { peer: 0, .. })
        ));
    }
    assert!(matches!(
        net.inject(1, RailId(99), &packet(&[])),
        Err(ProtocolError::UnknownRail(RailId(99)))
    ));
    others_unaffected(&mut net);
}

#[test]
fn replayed_packet_is_stale() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let msg = pieces(&[10, 20], 1);
    let r = net.recv(1, from(0), TagMatch::exact(1), &msg, false);
    net.send(0, 1, 1, &msg);
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 2);
    for (rail, bytes) in &packets {
        net.inject(1, *rail, bytes).expect("a valid packet");
    }
    net.check_received(1, 0, 1, &r, &msg);
    let (rail, bytes) = &packets[0];
    assert_eq!(
        violation(net.inject(1, *rail, bytes)),
        Violation::StaleSequence {
            seq: 0,
            expected: 2
        }
    );
    others_unaffected(&mut net);
}

#[test]
fn duplicate_ahead_of_order() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    let p = packet(&[eager(3, 3, whole(), b"abc")]);
    net.inject(1, rail, &p).expect("ahead is fine");
    assert!(matches!(
        violation(net.inject(1, rail, &p)),
        Violation::StaleSequence {
            seq: 3,
            expected: 0
        }
    ));
    others_unaffected(&mut net);
}

#[test]
fn piece_out_of_place() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    let middle = PieceFlags::new(false, false, SendMode::Cheaper, ReceiveMode::Cheaper);
    assert_eq!(
        violation(net.inject(1, rail, &packet(&[eager(0, 5, middle, b"x")]))),
        Violation::PieceOutOfPlace {
            msg: 5,
            first: false
        }
    );
    let first = PieceFlags::new(true, false, SendMode::Cheaper, ReceiveMode::Cheaper);
    net.inject(1, rail, &packet(&[eager(1, 6, first, b"x")]))
        .unwrap();
    assert_eq!(
        violation(net.inject(1, rail, &packet(&[eager(2, 6, first, b"y")]))),
        Violation::PieceOutOfPlace {
            msg: 6,
            first: true
        }
    );
    others_unaffected(&mut net);
}

#[test]
fn rendezvous_data_for_unknown_destination() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    assert_eq!(
        violation(net.inject(1, rail, &packet(&[rdv_data(12345, 0, b"data")]))),
        Violation::UnknownDestination(12345)
    );
    others_unaffected(&mut net);
}

#[test]
fn clear_to_send_for_unknown_transfer() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    let cts = Chunk::ClearToSend(ClearToSend {
        channel: CH.0,
        flags: CtsFlags::ACCEPT,
        send_id: 4242,
        recv_id: 1,
        offset: 0,
        len: 10,
    });
    assert_eq!(
        violation(net.inject(1, rail, &packet(&[cts]))),
        Violation::UnknownTransfer(4242)
    );
    others_unaffected(&mut net);
}

/// The receiver's clear-to-send for a forged request names a destination;
/// data outside it is refused, data inside it lands.
#[test]
fn rendezvous_data_out_of_bounds() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    let key = net.recv_begin(1, from(0), TagMatch::exact(1));
    let posted = net.unpack(1, key, 1000, SendMode::Cheaper, ReceiveMode::Cheaper, false);
    let end = net.recv_end(1, key);
    net.inject(1, rail, &packet(&[rdv_request(0, 0, 7, 1000)]))
        .unwrap();
    let answers = net.capture(1, 0);
    assert_eq!(answers.len(), 1);
    let recv_id = match Packet::decode(&answers[0].1, &Default::default())
        .unwrap()
        .chunks()
        .next()
    {
        Some(Chunk::ClearToSend(c)) => {
            assert_eq!((c.send_id, c.offset, c.len), (7, 0, 1000));
            c.recv_id
        }
        other => panic!("expected a clear-to-send, got {other:?}"),
    };
    let bytes = [5u8; 200];
    for (offset, len) in [(900, 200), (1000, 1), (u64::from(u32::MAX) * 2, 1)] {
        let what = violation(net.inject(
            1,
            rail,
            &packet(&[rdv_data(recv_id, offset, &bytes[..len])]),
        ));
        assert!(matches!(what, Violation::OutOfBounds { .. }), "{what:?}");
    }
    // In bounds, in two fragments, it completes; more after that is unknown.
    net.inject(1, rail, &packet(&[rdv_data(recv_id, 0, &[1; 600])]))
        .unwrap();
    let what = violation(net.inject(1, rail, &packet(&[rdv_data(recv_id, 0, &[1; 600])])));
    assert!(matches!(what, Violation::OutOfBounds { .. }), "{what:?}");
    net.inject(1, rail, &packet(&[rdv_data(recv_id, 600, &[2; 400])]))
        .unwrap();
    assert_eq!(net.ok(1, posted.req).len, 1000);
    assert_eq!(net.ok(1, end).len, 1000);
    assert_eq!(
        violation(net.inject(1, rail, &packet(&[rdv_data(recv_id, 0, &[1])]))),
        Violation::UnknownDestination(recv_id)
    );
    others_unaffected(&mut net);
}

/// Unexpected data beyond `max_buffered_bytes` is refused; what was
/// accepted before can still be received, and accounting stays exact.
#[test]
fn buffered_bytes_bounded() {
    let config = |_| EngineConfig {
        max_buffered_bytes: 1000,
        ..EngineConfig::default()
    };
    let mut net = Net::with_config(3, 1, caps(1 << 20, 1 << 20), config);
    let first = Piece::new(600, 1);
    net.send(0, 1, 1, std::slice::from_ref(&first));
    net.send(0, 1, 2, &[Piece::new(600, 2)]);
    net.run_allowing_errors();
    assert!(matches!(
        net.errors.as_slice(),
        [(
            1,
            ProtocolError::Violation {
                what: Violation::BufferOverflow(1000),
                ..
            }
        )]
    ));
    assert_eq!(net.engines[1].buffered_bytes(), 600 + PIECE_COST);
    net.errors.clear();
    let r = net.recv(
        1,
        from(0),
        TagMatch::exact(1),
        std::slice::from_ref(&first),
        false,
    );
    net.check_received(1, 0, 1, &r, &[first]);
    assert_eq!(net.engines[1].buffered_bytes(), 0);
    // The refused piece was not kept.
    let key = net.recv_begin(1, from(0), TagMatch::exact(2));
    let refused = net.unpack(1, key, 600, SendMode::Cheaper, ReceiveMode::Cheaper, false);
    assert!(net.pending(1, refused.req));
    net.engines[1].recv_abandon(key);
    assert_eq!(net.engines[1].buffered_bytes(), 0);
    others_unaffected(&mut net);
}

/// Data held for a matched message whose unpacks are not posted yet counts
/// too, and a refused piece is not kept.
#[test]
fn buffered_bytes_bounded_for_matched_messages() {
    let config = |_| EngineConfig {
        max_buffered_bytes: 1000,
        ..EngineConfig::default()
    };
    let mut net = Net::with_config(3, 1, caps(1 << 20, 1 << 20), config);
    let key = net.recv_begin(1, from(0), TagMatch::exact(1));
    let msg = pieces(&[600, 600], 3);
    net.send(0, 1, 1, &msg);
    net.run_allowing_errors();
    assert_eq!(net.errors.len(), 1);
    assert_eq!(net.engines[1].buffered_bytes(), 600 + PIECE_COST);
    net.errors.clear();
    let a = net.unpack(1, key, 600, SendMode::Cheaper, ReceiveMode::Cheaper, false);
    assert_eq!(net.read(1, a.dest), msg[0].data);
    assert_eq!(net.engines[1].buffered_bytes(), 0);
    net.engines[1].recv_abandon(key);
    others_unaffected(&mut net);
}

#[test]
fn reorder_chunks_bounded() {
    let config = |_| EngineConfig {
        max_reorder_chunks: 2,
        ..EngineConfig::default()
    };
    let mut net = Net::with_config(3, 1, caps(64, 1000), config);
    for tag in 0..4 {
        net.send(0, 1, tag, &[Piece::new(10, tag)]);
    }
    let mut packets = net.capture(0, 1);
    assert_eq!(packets.len(), 4);
    packets.reverse();
    let (rail, bytes) = &packets[0];
    net.inject(1, *rail, bytes).unwrap();
    net.inject(1, *rail, &packets[1].1).unwrap();
    assert_eq!(
        violation(net.inject(1, *rail, &packets[2].1)),
        Violation::ReorderOverflow(2)
    );
    assert_eq!(
        net.engines[1].buffered_bytes(),
        20 + 2 * PIECE_COST,
        "only accepted chunks are held"
    );
    others_unaffected(&mut net);
}

#[test]
fn chunks_before_the_faulty_one_apply() {
    let mut net = Net::new(3, 1, caps(64, 1000));
    let rail = rail(&net);
    let p = packet(&[eager(0, 0, whole(), b"ok"), rdv_data(999, 0, b"bad")]);
    assert_eq!(
        violation(net.inject(1, rail, &p)),
        Violation::UnknownDestination(999)
    );
    let status = net.engines[1].probe(CH, from(0), TagMatch::exact(1));
    assert_eq!(status.map(|s| s.len), Some(2));
    others_unaffected(&mut net);
}
