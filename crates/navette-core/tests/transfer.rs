//! Eager and rendezvous transfers between engines, byte for byte: one-piece
//! and multi-piece messages, receives posted before or after arrival,
//! deferred destinations.

mod common;

use common::{CH, Net, Order, Piece, caps, from, pattern, pieces};
use std::time::Duration;

use navette_core::{
    Engine, MemRef, NowPart, RailId, Rank, ReceiveMode, ReqId, SendMode, Source, TagMatch,
};

/// Sizes around the fragment size (1000) and the eager threshold (64).
const SIZES: &[usize] = &[0, 1, 63, 64, 65, 999, 1000, 1001, 2500, 10_000];

fn one_piece_each_size(threshold: usize, rails: usize, order: Order, posted_first: bool) {
    let mut net = Net::new(2, rails, caps(threshold, 1000)).order(order);
    for (i, &len) in SIZES.iter().enumerate() {
        let tag = i as u64;
        let msg = [Piece::new(len, tag)];
        let (r, sent) = net.exchange(tag, &msg, posted_first);
        net.check_received(1, 0, tag, &r, &msg);
        assert_eq!(net.ok(0, sent[0]).len, len, "sender's status");
    }
    assert_eq!(net.engines[1].buffered_bytes(), 0);
    assert!(!net.engines[0].has_pending(1));
}

#[test]
fn eager_and_rendezvous_posted_first() {
    one_piece_each_size(64, 1, Order::Fifo, true);
}

#[test]
fn eager_and_rendezvous_unexpected() {
    one_piece_each_size(64, 1, Order::Fifo, false);
}

#[test]
fn everything_by_rendezvous_including_empty_pieces() {
    one_piece_each_size(0, 1, Order::Fifo, true);
    one_piece_each_size(0, 1, Order::Fifo, false);
}

#[test]
fn two_rails_reversed_and_shuffled() {
    for posted_first in [true, false] {
        one_piece_each_size(64, 2, Order::Reverse, posted_first);
        for seed in 0..8 {
            one_piece_each_size(64, 2, Order::Seeded(seed), posted_first);
        }
    }
}

#[test]
fn tagged_send_into_larger_buffer() {
    let mut net = Net::new(2, 1, caps(64, 1000));
    for len in [0, 10, 64, 3000] {
        let data = pattern(len, 7);
        let dest = net.alloc(1, vec![0; 4000]);
        let recv =
            net.engines[1].recv_tagged(CH, Source::Any, TagMatch::any(), dest, &mut net.mems[1]);
        let src = net.alloc(0, data.clone());
        let out = net.begin(0, 1, 5);
        let sent = net.engines[0].send_tagged(out, src);
        net.run();
        let status = net.ok(1, recv);
        assert_eq!((status.peer, status.tag, status.len), (0, 5, len));
        assert_eq!(net.read(1, dest)[..len], data[..]);
        assert_eq!(net.ok(0, sent).len, len);
    }
}

fn multi_piece(threshold: usize, rails: usize, order: Order, posted_first: bool, deferred: bool) {
    let mut net = Net::new(2, rails, caps(threshold, 1000)).order(order);
    let msgs = [
        pieces(&[8, 3000, 0, 70], 1),
        pieces(&[0], 2),
        pieces(&[2000, 2000, 1], 3),
        vec![
            Piece::new(16, 40).modes(SendMode::Safer, ReceiveMode::Express),
            Piece::new(5000, 41).modes(SendMode::Later, ReceiveMode::Cheaper),
        ],
    ];
    let mut received = Vec::new();
    if posted_first {
        for (tag, msg) in msgs.iter().enumerate() {
            received.push(net.recv(1, from(0), TagMatch::exact(tag as u64), msg, deferred));
        }
    }
    for (tag, msg) in msgs.iter().enumerate() {
        net.send(0, 1, tag as u64, msg);
    }
    net.run();
    if !posted_first {
        for (tag, msg) in msgs.iter().enumerate() {
            received.push(net.recv(1, from(0), TagMatch::exact(tag as u64), msg, deferred));
        }
        net.run();
    }
    for (tag, (r, msg)) in received.iter().zip(&msgs).enumerate() {
        net.check_received(1, 0, tag as u64, r, msg);
    }
    assert_eq!(net.engines[1].buffered_bytes(), 0);
}

#[test]
fn multi_piece_messages() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            for deferred in [false, true] {
                multi_piece(threshold, 1, Order::Fifo, posted_first, deferred);
                multi_piece(threshold, 2, Order::Reverse, posted_first, deferred);
                multi_piece(threshold, 2, Order::Seeded(9), posted_first, deferred);
            }
        }
    }
}

/// Pieces unpacked one at a time while the network runs between unpacks,
/// with deferred pieces filled only after later pieces were posted.
#[test]
fn deferred_pieces_filled_late() {
    for threshold in [0, 64] {
        let mut net = Net::new(2, 1, caps(threshold, 1000));
        let msg = pieces(&[10, 3000, 20, 0], 5);
        let sent = net.send(0, 1, 9, &msg);
        net.run();
        let key = net.recv_begin(1, from(0), TagMatch::exact(9));
        let header = net.unpack(1, key, 10, SendMode::Cheaper, ReceiveMode::Cheaper, false);
        net.run();
        assert_eq!(
            net.read(1, header.dest),
            msg[0].data,
            "header arrives first"
        );
        let body = net.unpack(1, key, 3000, SendMode::Cheaper, ReceiveMode::Cheaper, true);
        let trailer = net.unpack(1, key, 20, SendMode::Cheaper, ReceiveMode::Cheaper, true);
        let empty = net.unpack(1, key, 0, SendMode::Cheaper, ReceiveMode::Cheaper, false);
        let end = net.recv_end(1, key);
        net.run();
        assert!(net.pending(1, body.req) && net.pending(1, trailer.req) && net.pending(1, end));
        net.fill(1, key, trailer);
        net.run();
        assert_eq!(net.read(1, trailer.dest), msg[2].data);
        assert!(net.pending(1, end), "the body is still deferred");
        net.fill(1, key, body);
        net.run();
        assert_eq!(net.read(1, body.dest), msg[1].data);
        assert_eq!(net.ok(1, empty.req).len, 0);
        assert_eq!(net.ok(1, end).len, 3030);
        for req in sent {
            net.ok(0, req);
        }
        assert_eq!(net.engines[1].buffered_bytes(), 0);
    }
}

/// A deferred piece posted before its data arrived and filled before too.
#[test]
fn deferred_piece_filled_before_arrival() {
    for threshold in [0, 64] {
        let mut net = Net::new(2, 1, caps(threshold, 1000));
        let msg = pieces(&[30, 2000], 6);
        let key = net.recv_begin(1, from(0), TagMatch::exact(1));
        let a = net.unpack(1, key, 30, SendMode::Cheaper, ReceiveMode::Cheaper, true);
        let b = net.unpack(1, key, 2000, SendMode::Cheaper, ReceiveMode::Cheaper, true);
        net.fill(1, key, b);
        net.fill(1, key, a);
        let end = net.recv_end(1, key);
        net.send(0, 1, 1, &msg);
        net.run();
        assert_eq!(net.read(1, a.dest), msg[0].data);
        assert_eq!(net.read(1, b.dest), msg[1].data);
        assert_eq!(net.ok(1, end).len, 2030);
    }
}

/// Three nodes, each sending to both others, on two rails per pair.
#[test]
fn three_nodes_all_to_all() {
    let mut net = Net::new(3, 2, caps(64, 500)).order(Order::Seeded(3));
    let mut expect = Vec::new();
    for a in 0..3 {
        for b in 0..3 {
            if a != b {
                let msg = pieces(&[40, 1500], (a * 3 + b) as u64);
                net.send(a, b, 0, &msg);
                expect.push((a, b, msg));
            }
        }
    }
    net.run();
    for (a, b, msg) in &expect {
        let r = net.recv(*b, from(*a), TagMatch::exact(0), msg, false);
        net.run();
        net.check_received(*b, *a, 0, &r, msg);
    }
    let _: Rank = net.engines[2].rank();
}

/// Two messages open at once on one gate, their pieces interleaved: each
/// receive gets its own message's pieces, matched in first-piece order.
#[test]
fn interleaved_messages_on_one_gate() {
    for threshold in [0, 64] {
        let mut net = Net::new(2, 2, caps(threshold, 700)).order(Order::Seeded(threshold as u64));
        let a = pieces(&[10, 2000, 30], 1);
        let b = pieces(&[3000, 5], 2);
        let mut out_a = net.begin(0, 1, 4);
        let mut out_b = net.begin(0, 1, 4);
        // b's first piece goes first: b is the first message with tag 4.
        net.pack(0, &mut out_b, &b[0], false);
        net.pack(0, &mut out_a, &a[0], false);
        net.pack(0, &mut out_a, &a[1], false);
        net.pack(0, &mut out_b, &b[1], true);
        net.pack(0, &mut out_a, &a[2], true);
        let rb = net.recv(1, from(0), TagMatch::exact(4), &b, false);
        let ra = net.recv(1, from(0), TagMatch::exact(4), &a, true);
        net.run();
        net.check_received(1, 0, 4, &rb, &b);
        net.check_received(1, 0, 4, &ra, &a);
    }
}

/// A destination whose length differs from the declared one is refused.
#[test]
fn unpack_destination_of_wrong_length() {
    let mut net = Net::new(2, 1, caps(0, 1000));
    let key = net.recv_begin(1, from(0), TagMatch::exact(1));
    let dest = net.alloc(1, vec![0; 100]);
    let spec = navette_core::RecvPiece {
        dest: Some(dest),
        len: 200,
        send: SendMode::Cheaper,
        recv: ReceiveMode::Cheaper,
        exact: true,
    };
    assert_eq!(
        net.engines[1].recv_piece(key, spec, &mut net.mems[1]),
        Err(navette_core::UsageError::WrongLength {
            declared: 200,
            got: 100
        })
    );
    // The message is still open and receives normally.
    let msg = pieces(&[200], 1);
    let posted = net.unpack(1, key, 200, SendMode::Cheaper, ReceiveMode::Cheaper, false);
    let end = net.recv_end(1, key);
    net.send(0, 1, 1, &msg);
    net.run();
    assert_eq!(net.read(1, posted.dest), msg[0].data);
    assert_eq!(net.ok(1, end).len, 200);
}

/// A driver may land rendezvous data itself: the engine names the
/// destination of each data packet, the driver writes the bytes there, and
/// the engine counts them — the path of a driver that reads data straight
/// from its socket into the receive buffer.
#[test]
fn rendezvous_data_landed_by_the_driver() {
    use navette_core::Memory;
    use navette_wire::{Limits, PacketHeader, RdvDataHeader};
    let mut net = Net::new(2, 1, caps(64, 1000));
    let piece = Piece::new(2500, 7);
    let r = net.recv(
        1,
        from(0),
        TagMatch::exact(3),
        std::slice::from_ref(&piece),
        false,
    );
    net.send(0, 1, 3, std::slice::from_ref(&piece));
    let mut landed = 0;
    for _ in 0..100 {
        for (rail, bytes) in net.capture(0, 1) {
            let body = &bytes[PacketHeader::LEN..];
            let header = PacketHeader::decode(&bytes, &Limits::default()).unwrap();
            match RdvDataHeader::decode(body, &Limits::default()) {
                Ok(data) if header.chunk_count == 1 => {
                    let dest = net.engines[1].rdv_destination(rail, &data).unwrap();
                    let payload = &body[RdvDataHeader::LEN..];
                    let region = net.mems[1].get_mut(dest.handle).unwrap();
                    region[dest.offset..dest.offset + dest.len].copy_from_slice(payload);
                    net.engines[1]
                        .handle_rdv_landed(net.now, rail, &data)
                        .unwrap();
                    landed += 1;
                }
                _ => net.inject(1, rail, &bytes).unwrap(),
            }
        }
        net.deliver();
    }
    net.collect();
    assert_eq!(landed, 3, "2500 bytes in fragments of 1000");
    net.check_received(1, 0, 3, &r, &[piece]);
}

#[test]
fn landing_checks_the_destination() {
    use navette_wire::RdvDataHeader;
    let net = Net::new(2, 1, caps(64, 1000));
    let rail = net.rails_from(0, 1)[0];
    let header = RdvDataHeader {
        channel: 0,
        recv_id: 42,
        offset: 0,
        len: 10,
    };
    assert!(net.engines[1].rdv_destination(rail, &header).is_err());
}

/// Capabilities a peer could not decode are lowered to the limits: a huge
/// threshold still sends pieces above `max_eager_len` by rendezvous, and a
/// huge fragment size is cut to `max_fragment_len`.
#[test]
fn rail_capabilities_are_kept_within_the_limits() {
    let max_eager = navette_core::Limits::default().max_eager_len as usize;
    let mut net = Net::new(2, 1, caps(usize::MAX, usize::MAX));
    let piece = Piece::new(max_eager + 10, 5);
    let r = net.recv(
        1,
        from(0),
        TagMatch::exact(1),
        std::slice::from_ref(&piece),
        false,
    );
    net.send(0, 1, 1, std::slice::from_ref(&piece));
    net.run();
    net.check_received(1, 0, 1, &r, &[piece]);
}

/// A rail that would take fragments of any size gets ones whose packets
/// stay within the body limit: a message longer than the largest body
/// crosses in several fragments and lands whole.
#[test]
fn fragments_fit_the_packet_body_limit() {
    let limits = navette_core::Limits::default();
    let mut net = Net::new(2, 1, caps(1024, usize::MAX));
    let piece = Piece::new(limits.max_body_len as usize + 10, 9);
    let r = net.recv(
        1,
        from(0),
        TagMatch::exact(2),
        std::slice::from_ref(&piece),
        false,
    );
    net.send(0, 1, 2, std::slice::from_ref(&piece));
    net.run();
    net.check_received(1, 0, 2, &r, &[piece]);
}

/// Limits whose packet body is smaller than an eager piece may be: a rail
/// that would take any packet still gets ones the peer decodes. Pieces
/// too long for a body go by rendezvous, and small ones share packets
/// within the body limit.
#[test]
fn packets_fit_the_body_limit_below_the_eager_limit() {
    let limits = navette_core::Limits {
        max_body_len: 4096,
        max_fragment_len: 1024,
        ..navette_core::Limits::default()
    };
    let config = |_| navette_core::EngineConfig {
        limits,
        ..navette_core::EngineConfig::default()
    };
    let wide = navette_core::RailCaps {
        max_packet: usize::MAX,
        ..caps(usize::MAX, usize::MAX)
    };
    let mut net = Net::with_config(2, 1, wide, config);
    // One piece too long for a body, then many that fit one only together.
    let mut pieces = vec![Piece::new(3 * 4096, 1)];
    pieces.extend((0..40).map(|k| Piece::new(300, 10 + k)));
    let recvs: Vec<_> = pieces
        .iter()
        .enumerate()
        .map(|(k, piece)| {
            net.recv(
                1,
                from(0),
                TagMatch::exact(k as u64),
                std::slice::from_ref(piece),
                false,
            )
        })
        .collect();
    for (k, piece) in pieces.iter().enumerate() {
        net.send(0, 1, k as u64, std::slice::from_ref(piece));
    }
    net.run();
    for (k, (piece, r)) in pieces.iter().zip(&recvs).enumerate() {
        net.check_received(1, 0, k as u64, r, std::slice::from_ref(piece));
    }
}

/// A small message sent at once (no window, no request) reaches its
/// receive like any other and keeps its place in the gate's order; it is
/// refused while the window holds chunks, while the rail is busy, and for
/// rendezvous sizes.
#[test]
fn sending_at_once_when_the_rail_is_idle() {
    let mut net = Net::new(2, 1, caps(1024, 1000));
    let (rail_a, rail_b) = rails_0_to_1(&net);
    let posted = post_tag_5(&mut net, 3);
    // First through the window, then at once, then through the window.
    let first = net.alloc(0, b"first".to_vec());
    let out = net.begin(0, 1, 5);
    net.engines[0].send_tagged(out, first);
    assert!(
        !net.engines[0].can_send_now(CH, 1, rail_a, 6),
        "the window holds a chunk"
    );
    net.run();
    assert!(
        !net.engines[0].can_send_now(CH, 1, rail_a, 1024),
        "rendezvous size"
    );
    assert!(net.engines[0].can_send_now(CH, 1, rail_a, 6));
    let mut packet = vec![0u8; Engine::tagged_packet_len(6)];
    net.engines[0].send_tagged_now(CH, 1, 5, b"second", &mut packet);
    let last = net.alloc(0, b"third".to_vec());
    let out = net.begin(0, 1, 5);
    net.engines[0].send_tagged(out, last);
    let third = packet_in_flight(&mut net, rail_a);
    assert!(
        !net.engines[0].can_send_now(CH, 1, rail_a, 6),
        "the rail is busy"
    );
    net.engines[0].handle_send_complete(Duration::ZERO, rail_a);
    // The packet sent at once is delivered after the third: the receiver
    // reorders by sequence number.
    net.inject(1, rail_b, &third).expect("a valid packet");
    net.inject(1, rail_b, &packet).expect("a valid packet");
    net.collect();
    check_in_order(&net, &posted, &[b"first", b"second", b"third"]);
}

/// The rails of the link from node 0 to node 1: node 0's, then node 1's.
fn rails_0_to_1(net: &Net) -> (RailId, RailId) {
    let link = net
        .links
        .iter()
        .find(|l| l.from == 0)
        .expect("a link from 0");
    (link.from_rail, link.to_rail)
}

/// The next packet node 0's window sends on `rail`, as bytes: in flight
/// until the caller completes it.
fn packet_in_flight(net: &mut Net, rail: RailId) -> Vec<u8> {
    let plan = net.engines[0]
        .poll_transmit(Duration::ZERO, rail)
        .expect("a packet");
    let mut bytes = Vec::new();
    plan.gather(&net.mems[0], &mut bytes)
        .expect("memory resolves");
    bytes
}

/// Posts `count` receives of 16 bytes at node 1, from node 0 with tag 5:
/// each one's memory and key, in order.
fn post_tag_5(net: &mut Net, count: usize) -> Vec<(MemRef, ReqId)> {
    (0..count)
        .map(|_| {
            let dest = net.alloc(1, vec![0; 16]);
            let recv =
                net.engines[1].recv_tagged(CH, from(0), TagMatch::exact(5), dest, &mut net.mems[1]);
            (dest, recv)
        })
        .collect()
}

/// Checks that the receives `posted` at node 1 got `wants`, in order.
fn check_in_order(net: &Net, posted: &[(MemRef, ReqId)], wants: &[&[u8]]) {
    assert_eq!(posted.len(), wants.len());
    for (&(dest, recv), want) in posted.iter().zip(wants) {
        assert_eq!(net.ok(1, recv).len, want.len());
        assert_eq!(&net.read(1, dest)[..want.len()], *want);
    }
}

/// A tagged message sent at once in the lone form (a framed transport's),
/// its data given in parts, is read as the full form's: in order among
/// the packets of the window, its parts back to back.
#[test]
fn sending_at_once_as_a_lone_packet_of_parts() {
    let mut net = Net::new(2, 1, caps(1024, 1000));
    let (rail_a, rail_b) = rails_0_to_1(&net);
    let posted = post_tag_5(&mut net, 2);
    assert!(net.engines[0].can_send_now(CH, 1, rail_a, 5));
    let mut lone = vec![0u8; Engine::lone_packet_len(5)];
    assert_eq!(lone.len() + 16, Engine::tagged_packet_len(5));
    net.engines[0].send_lone_now(CH, 1, 5, &[b"fir", b"", b"st"], &mut lone);
    assert_eq!(lone[0], navette_wire::LONE);
    let second = net.alloc(0, b"second".to_vec());
    let out = net.begin(0, 1, 5);
    net.engines[0].send_tagged(out, second);
    let full = packet_in_flight(&mut net, rail_a);
    net.engines[0].handle_send_complete(Duration::ZERO, rail_a);
    // The second first: the lone packet's sequence number puts it before.
    net.inject(1, rail_b, &full).expect("a valid packet");
    net.inject(1, rail_b, &lone).expect("a valid packet");
    net.collect();
    check_in_order(&net, &posted, &[b"first", b"second"]);
}

/// A whole small message sent at once, in one packet with no request,
/// unpacks piece by piece like any other, after a message sent through the
/// window (in order by sequence numbers); it is refused for a started
/// message, while the window holds chunks, and for rendezvous sizes.
#[test]
fn sending_a_whole_message_at_once_when_the_rail_is_idle() {
    let mut net = Net::new(2, 1, caps(1024, 1000));
    let (rail_a, rail_b) = rails_0_to_1(&net);
    let first = pieces(&[10, 20], 1);
    let second = pieces(&[7, 0, 300], 2);
    let r1 = net.recv(1, from(0), TagMatch::exact(4), &first, false);
    let r2 = net.recv(1, from(0), TagMatch::exact(4), &second, false);
    // The first message through the window: not at once meanwhile.
    net.send(0, 1, 4, &first);
    let mut out = net.begin(0, 1, 4);
    assert!(
        !net.engines[0].can_send_message_now(&out, rail_a, &now(&second)),
        "the window holds chunks"
    );
    let plan = net.engines[0]
        .poll_transmit(Duration::ZERO, rail_a)
        .expect("a packet");
    net.engines[0].handle_send_complete(Duration::ZERO, rail_a);
    let big = pieces(&[2000], 3);
    assert!(
        !net.engines[0].can_send_message_now(&out, rail_a, &now(&big)),
        "rendezvous size"
    );
    let second_now = now(&second);
    assert!(net.engines[0].can_send_message_now(&out, rail_a, &second_now));
    let mut packet = vec![0u8; Engine::message_packet_len(&second_now)];
    net.engines[0].send_message_now(&mut out, &second_now, &mut packet);
    assert!(
        !net.engines[0].can_send_message_now(&out, rail_a, &second_now),
        "a message that has left"
    );
    // Delivered in the other order: the receiver reorders.
    let mut first_bytes = Vec::new();
    plan.gather(&net.mems[0], &mut first_bytes)
        .expect("memory resolves");
    net.inject(1, rail_b, &packet).expect("a valid packet");
    net.inject(1, rail_b, &first_bytes).expect("a valid packet");
    net.run();
    net.check_received(1, 0, 4, &r1, &first);
    net.check_received(1, 0, 4, &r2, &second);
}

/// A message sent at once by a driver that gathers: the pieces above the
/// copy bound stay out of the buffer, and the parts, put together in
/// order, are exactly the packet [`Engine::send_message_now`] writes (the
/// same message from a twin engine); the receiver unpacks it. Left out:
/// pieces between copied ones, an empty piece kept, the last piece; then
/// the first two in a row.
#[test]
fn a_message_sent_at_once_gathers_its_large_pieces() {
    let copy_max = 32;
    let cases: [(&[usize], &[usize]); 2] = [
        (&[3, 40, 0, 300, 7, 200], &[1, 3, 5]),
        (&[300, 200, 3], &[0, 1]),
    ];
    for (sizes, want_left_out) in cases {
        let mut net = Net::new(2, 1, caps(1024, 1000));
        let mut twin = Net::new(2, 1, caps(1024, 1000));
        let (rail_a, rail_b) = rails_0_to_1(&net);
        let message = pieces(sizes, 5);
        let posted = net.recv(1, from(0), TagMatch::exact(6), &message, false);
        let now_pieces = now(&message);

        let mut out = net.begin(0, 1, 6);
        assert!(net.engines[0].can_send_message_now(&out, rail_a, &now_pieces));
        let buffered = Engine::message_buffer_len(&now_pieces, copy_max);
        let mut buffer = vec![0u8; buffered];
        let gather =
            net.engines[0].gather_message_now(&mut out, &now_pieces, copy_max, &mut buffer);
        let mut packet = Vec::new();
        let mut left_out = Vec::new();
        for part in gather.parts() {
            match part {
                NowPart::Buffer(range) => {
                    assert!(!range.is_empty(), "{sizes:?}: an empty part");
                    packet.extend_from_slice(&buffer[range.clone()]);
                }
                NowPart::Piece(i) => {
                    left_out.push(*i);
                    packet.extend_from_slice(now_pieces[*i].data);
                }
            }
        }
        assert_eq!(left_out, want_left_out, "{sizes:?}: above {copy_max} bytes");
        let large: usize = left_out.iter().map(|&i| sizes[i]).sum();
        assert_eq!(buffered + large, packet.len());

        let mut twin_out = twin.begin(0, 1, 6);
        let (twin_rail, _) = rails_0_to_1(&twin);
        assert!(twin.engines[0].can_send_message_now(&twin_out, twin_rail, &now_pieces));
        let mut whole = vec![0u8; Engine::message_packet_len(&now_pieces)];
        twin.engines[0].send_message_now(&mut twin_out, &now_pieces, &mut whole);
        assert!(
            whole == packet,
            "{sizes:?}: gathered and copied packets differ"
        );

        net.inject(1, rail_b, &packet).expect("a valid packet");
        net.run();
        net.check_received(1, 0, 6, &posted, &message);
    }
}

/// A tagged message sent at once by a driver that gathers: data above the
/// copy bound stays out of the buffer (the headers alone), and buffer then
/// data make exactly the packet [`Engine::send_tagged_now`] writes; data
/// within the bound is copied, the buffer the whole packet.
#[test]
fn a_tagged_message_sent_at_once_gathers_large_data() {
    let data = pattern(100, 3);
    for copy_max in [99, 100] {
        let mut net = Net::new(2, 1, caps(1024, 1000));
        let mut twin = Net::new(2, 1, caps(1024, 1000));
        let copied = if data.len() <= copy_max {
            data.len()
        } else {
            0
        };
        let mut buffer = vec![0u8; Engine::tagged_packet_len(copied)];
        let gather = net.engines[0].gather_tagged_now(CH, 1, 8, &data, copy_max, &mut buffer);
        let mut packet = Vec::new();
        for part in gather.parts() {
            match part {
                NowPart::Buffer(range) => packet.extend_from_slice(&buffer[range.clone()]),
                NowPart::Piece(i) => {
                    assert_eq!(*i, 0, "one piece");
                    packet.extend_from_slice(&data);
                }
            }
        }
        let parts = if copied == 0 { 2 } else { 1 };
        assert_eq!(gather.parts().len(), parts, "copy bound {copy_max}");
        let mut whole = vec![0u8; Engine::tagged_packet_len(data.len())];
        twin.engines[0].send_tagged_now(CH, 1, 8, &data, &mut whole);
        assert!(whole == packet, "gathered and copied packets differ");
    }
}

/// The pieces of a message, as [`Engine::send_message_now`] takes them.
fn now(pieces: &[Piece]) -> Vec<navette_core::NowPiece<'_>> {
    pieces
        .iter()
        .map(|p| navette_core::NowPiece {
            data: &p.data,
            send: p.send,
            recv: p.recv,
        })
        .collect()
}
