//! Open packets ([`Engine::stage_tagged`]): small messages staged as they
//! are submitted share packets, leave before anything of the windows, keep
//! their gates' order, and are what the receiver would have got from the
//! window.

mod common;

use common::{CH, Net, caps, from, pattern};
use navette_core::{
    ChannelId, EngineConfig, OPEN_MOST_BODY, OPEN_MOST_CHUNKS, OPEN_MOST_PIECE, OpenToSend,
    RequestError, StagedSend, StrategyKind, TagMatch,
};
use navette_wire::Packet;

fn net(strategy: StrategyKind) -> Net {
    Net::with_config(2, 1, caps(1024, 600), |_| EngineConfig {
        strategy,
        ..EngineConfig::default()
    })
}

fn stage(net: &mut Net, channel: u16, tag: u64, data: &[u8]) -> Option<StagedSend> {
    net.engines[0].stage_tagged(ChannelId(channel), 1, tag, data)
}

/// Receives on node 1, the usual way, the message `tag` on `channel`:
/// the request and its destination.
fn recv_into(
    net: &mut Net,
    channel: u16,
    tag: u64,
    len: usize,
) -> (navette_core::ReqId, navette_core::MemRef) {
    let dest = net.alloc(1, vec![0; len]);
    let req = net.engines[1].recv_tagged(
        ChannelId(channel),
        from(0),
        TagMatch::exact(tag),
        dest,
        &mut net.mems[1],
    );
    (req, dest)
}

/// Stages one message more than an open packet takes, and one more:
/// message `i`, 8 bytes of pattern `i`, on channel `i % 4` with tag `i`.
fn stage_past_one_packet(net: &mut Net) -> Vec<StagedSend> {
    (0..OPEN_MOST_CHUNKS + 2)
        .map(|i| stage(net, (i % 4) as u16, i as u64, &pattern(8, i as u64)).expect("staged"))
        .collect()
}

fn recv(net: &mut Net, channel: u16, tag: u64, len: usize) -> navette_core::ReqId {
    recv_into(net, channel, tag, len).0
}

fn chunk_counts(packets: &[(navette_core::RailId, Vec<u8>)]) -> Vec<u16> {
    chunk_counts_of(packets.iter().map(|(_, p)| p))
}

/// The chunk count of each packet of `packets`.
fn chunk_counts_of<P: AsRef<[u8]>>(packets: impl IntoIterator<Item = P>) -> Vec<u16> {
    packets
        .into_iter()
        .map(|p| {
            Packet::decode(p.as_ref(), &Default::default())
                .expect("a valid packet")
                .header()
                .chunk_count
        })
        .collect()
}

#[test]
fn a_burst_shares_one_packet_and_arrives_in_order() {
    let mut net = net(StrategyKind::Aggregate);
    let staged: Vec<_> = (0..6)
        .map(|i| stage(&mut net, (i % 3) as u16, i, &pattern(10 + i as usize, i)).expect("staged"))
        .collect();
    assert!(staged.iter().all(|s| s.packet == staged[0].packet));
    assert!(staged[0].opened && !staged[1].opened);
    assert!(!net.engines[0].sends_flushed(), "staged messages wait");
    assert!(
        staged
            .iter()
            .all(|&s| net.engines[0].staged_outcome(s).is_none())
    );
    let packets = net.capture(0, 1);
    assert_eq!(chunk_counts(&packets), [6]);
    assert!(
        staged
            .iter()
            .all(|&s| net.engines[0].staged_outcome(s) == Some(Ok(())))
    );
    assert!(net.engines[0].sends_flushed());
    for (rail, bytes) in packets {
        net.inject(1, rail, &bytes).expect("valid");
    }
    // Unexpected at node 1, received in order per gate.
    for i in 0..6u64 {
        let req = recv(&mut net, (i % 3) as u16, i, 64);
        net.run();
        let status = net.ok(1, req);
        assert_eq!(status.len, 10 + i as usize);
    }
    let stats: Vec<_> = net.engines[0].gate_stats().collect();
    assert_eq!(stats.iter().map(|s| s.chunks_sent).sum::<u64>(), 6);
    assert_eq!(
        stats.iter().map(|s| s.packets_sent).sum::<u64>(),
        3,
        "one per gate"
    );
    assert_eq!(
        stats.iter().map(|s| s.bytes_copied).sum::<u64>(),
        (0..6).map(|i| 10 + i).sum::<u64>(),
        "staging copies the data"
    );
}

#[test]
fn only_small_eager_messages_of_an_aggregating_channel_with_an_empty_window_stage() {
    // `default` sends one chunk per packet: nothing stages.
    let mut plain = net(StrategyKind::Default);
    assert!(stage(&mut plain, 0, 1, b"x").is_none());
    let mut net = net(StrategyKind::Aggregate);
    assert!(
        stage(&mut net, 0, 1, &vec![0; OPEN_MOST_PIECE + 1]).is_none(),
        "too large"
    );
    assert!(stage(&mut net, 0, 1, &vec![0; OPEN_MOST_PIECE]).is_some());
    // A message in the window: later ones of its gate wait behind it.
    let out = net.engines[0].send_begin(CH, 1, 9).expect("rail");
    let data = net.alloc(0, pattern(700, 1));
    net.engines[0].send_tagged(out, data);
    assert!(stage(&mut net, 0, 2, b"behind").is_none());
    // Nor one of another gate: they join the windows (see
    // `small_messages_join_the_windows_while_they_wait`).
    assert!(stage(&mut net, 5, 2, b"other gate").is_none());
}

#[test]
fn a_peer_without_rails_gets_no_gate_and_stages_once_it_has_one() {
    let mut net = net(StrategyKind::Aggregate);
    let gates = net.engines[0].gate_stats().count();
    assert!(net.engines[0].stage_tagged(CH, 2, 1, b"nowhere").is_none());
    let peers: Vec<_> = net.engines[0].gate_stats().map(|s| s.peer).collect();
    assert_eq!(
        peers.len(),
        gates,
        "a gate to a peer without rails: {peers:?}"
    );
    // Rank 1 is node 1; rank 2 gets a rail of its own now (to nowhere):
    // its gate is made as any other, and the message leaves on it.
    let rail = net.engines[0].add_rail(2, caps(1024, 600));
    let staged = net.engines[0]
        .stage_tagged(CH, 2, 1, b"somewhere")
        .expect("staged");
    assert!(staged.opened);
    let plan = net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rail)
        .expect("the open packet");
    let packet = Packet::decode(&plan.bytes, &Default::default()).expect("a valid packet");
    assert_eq!(packet.header().chunk_count, 1);
    net.engines[0].handle_send_complete(std::time::Duration::ZERO, rail);
    assert_eq!(net.engines[0].staged_outcome(staged), Some(Ok(())));
}

#[test]
fn staged_messages_leave_before_the_window_and_keep_their_gate_order() {
    let mut net = net(StrategyKind::Aggregate);
    stage(&mut net, 0, 1, b"first").expect("staged");
    // Large: rendezvous, through the window.
    let out = net.engines[0].send_begin(CH, 1, 1).expect("rail");
    let data = net.alloc(0, pattern(5000, 2));
    net.engines[0].send_tagged(out, data);
    let first = recv(&mut net, 0, 1, 16);
    let second = recv(&mut net, 0, 1, 5000);
    net.run();
    assert_eq!(net.ok(1, first).len, 5);
    assert_eq!(net.ok(1, second).len, 5000);
}

#[test]
fn a_full_packet_closes_and_the_next_opens() {
    let mut net = net(StrategyKind::Aggregate);
    let count = OPEN_MOST_CHUNKS + 3;
    let staged: Vec<_> = (0..count)
        .map(|i| stage(&mut net, 0, 1, &[i as u8; 4]).expect("staged"))
        .collect();
    assert_eq!(staged[OPEN_MOST_CHUNKS].packet, staged[0].packet + 1);
    assert!(staged[OPEN_MOST_CHUNKS].closed && !staged[1].closed);
    // Large messages fill a packet by bytes.
    let big = OPEN_MOST_PIECE;
    let per_packet = OPEN_MOST_BODY / (big + navette_wire::EagerHeader::LEN);
    let more: Vec<_> = (0..per_packet + 1)
        .map(|_| stage(&mut net, 0, 1, &vec![7; big]).expect("staged"))
        .collect();
    assert_eq!(more[per_packet].packet, more[0].packet + 1);
    let packets = net.capture(0, 1);
    assert_eq!(
        chunk_counts(&packets),
        [OPEN_MOST_CHUNKS as u16, 3 + per_packet as u16, 1]
    );
    for (rail, bytes) in packets {
        net.inject(1, rail, &bytes).expect("valid");
    }
    for i in 0..count {
        let (req, dest) = recv_into(&mut net, 0, 1, 4);
        net.run();
        net.ok(1, req);
        assert_eq!(net.read(1, dest), [i as u8; 4]);
    }
}

#[test]
fn a_staged_message_left_once_its_packet_was_sent_not_before() {
    let mut net = net(StrategyKind::Aggregate);
    let staged = stage(&mut net, 0, 1, b"in flight").expect("staged");
    let rail = net.rails_from(1, 0)[0];
    let plan = net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rail)
        .expect("the open packet");
    assert!(!plan.is_empty());
    assert_eq!(
        net.engines[0].staged_outcome(staged),
        None,
        "handed out, not sent"
    );
    // Lost while it was being sent: it failed.
    net.engines[0].close_rail(rail);
    assert_eq!(
        net.engines[0].staged_outcome(staged),
        Some(Err(RequestError::PeerUnreachable { peer: 1 }))
    );
    let mut net = self::net(StrategyKind::Aggregate);
    let staged = stage(&mut net, 0, 1, b"sent").expect("staged");
    net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rail)
        .expect("the open packet");
    net.engines[0].handle_send_complete(std::time::Duration::ZERO, rail);
    assert_eq!(net.engines[0].staged_outcome(staged), Some(Ok(())));
    net.engines[0].close_rail(rail);
    assert_eq!(
        net.engines[0].staged_outcome(staged),
        Some(Ok(())),
        "it had left"
    );
}

#[test]
fn a_lost_peer_fails_its_staged_messages_and_sends_at_once_wait_for_them() {
    let mut net = net(StrategyKind::Aggregate);
    let staged = stage(&mut net, 0, 1, b"never").expect("staged");
    let rail = net.rails_from(1, 0)[0];
    assert!(
        !net.engines[0].can_send_now(CH, 1, rail, 4),
        "a message sent at once would overtake the staged one"
    );
    net.engines[0].close_rail(rail);
    assert_eq!(
        net.engines[0].staged_outcome(staged),
        Some(Err(RequestError::PeerUnreachable { peer: 1 }))
    );
    assert!(net.engines[0].sends_flushed(), "nothing left to send");
    assert!(stage(&mut net, 0, 1, b"refused").is_none());
    assert_eq!(
        net.engines[0].lost_detached_staged(),
        0,
        "it was waited for"
    );
}

#[test]
fn staged_messages_nobody_waits_for_count_when_lost_not_when_sent() {
    // Their packet sent the usual way (a rail's round), or written at once.
    for at_once in [false, true] {
        let mut net = net(StrategyKind::Aggregate);
        let rail = net.rails_from(1, 0)[0];
        let sent = stage(&mut net, 0, 1, b"sent").expect("staged");
        net.engines[0].detach_staged(sent);
        if at_once {
            assert!(net.engines[0].send_open_now(rail, OpenToSend::All, |_| true));
        } else {
            net.capture(0, 1);
        }
        let lost = stage(&mut net, 0, 1, b"lost").expect("staged");
        net.engines[0].detach_staged(lost);
        // Detached once it left: nothing to count.
        net.engines[0].detach_staged(sent);
        net.engines[0].close_rail(rail);
        assert_eq!(
            net.engines[0].lost_detached_staged(),
            1,
            "at once: {at_once}"
        );
    }
}

#[test]
fn small_messages_join_the_windows_while_they_wait() {
    let mut net = net(StrategyKind::Aggregate);
    let staged = stage(&mut net, 1, 1, b"before").expect("staged");
    // A message too large to stage waits in channel 0's window: small
    // ones of any channel join the windows behind it, so that the open
    // packets drain and the windows are not held back by a stream of
    // small sends.
    let out = net.engines[0].send_begin(CH, 1, 9).expect("rail");
    let data = net.alloc(0, pattern(700, 1));
    let big = net.engines[0].send_tagged(out, data);
    assert!(stage(&mut net, 1, 2, b"after").is_none());
    assert!(stage(&mut net, 2, 2, b"after").is_none());
    let packets = net.capture(0, 1);
    assert_eq!(
        chunk_counts(&packets),
        [1, 1],
        "the open packet, then the window's"
    );
    assert_eq!(net.engines[0].staged_outcome(staged), Some(Ok(())));
    net.ok(0, big);
    assert!(stage(&mut net, 1, 3, b"again").is_some(), "windows empty");
}

#[test]
fn open_packets_written_at_once_leave_oldest_first_and_complete_their_sends() {
    let mut net = net(StrategyKind::Aggregate);
    let rail = net.rails_from(0, 1)[0];
    let staged = stage_past_one_packet(&mut net);
    let count = staged.len();
    // No room now: nothing leaves, the packets wait for the usual round.
    let mut offered = 0;
    let all = net.engines[0].send_open_now(rail, OpenToSend::All, |_| {
        offered += 1;
        false
    });
    assert!(!all);
    assert_eq!(offered, 1, "the oldest packet first, then it stops");
    assert!(staged.iter().all(|&s| !net.engines[0].staged_left(s)));
    assert!(net.engines[0].has_staged());
    // Room: both packets (a full one and the one after) leave in order.
    let mut written = Vec::new();
    let all = net.engines[0].send_open_now(rail, OpenToSend::All, |packet| {
        written.push(packet.to_vec());
        true
    });
    assert!(all, "nothing waits any more");
    assert!(!net.engines[0].has_staged());
    assert!(staged.iter().all(|&s| net.engines[0].staged_left(s)));
    assert!(
        staged
            .iter()
            .all(|&s| net.engines[0].staged_outcome(s) == Some(Ok(())))
    );
    assert_eq!(chunk_counts_of(&written), [OPEN_MOST_CHUNKS as u16, 2]);
    assert!(
        net.engines[0]
            .poll_transmit(std::time::Duration::ZERO, rail)
            .is_none()
    );
    let rail_in = net.rails_from(1, 0)[0];
    for bytes in &written {
        net.inject(1, rail_in, bytes).expect("valid");
    }
    for i in 0..count {
        let (req, dest) = recv_into(&mut net, (i % 4) as u16, i as u64, 8);
        net.run();
        net.ok(1, req);
        assert_eq!(net.read(1, dest), pattern(8, i as u64));
    }
}

#[test]
fn closed_packets_leave_alone_while_the_open_one_takes_messages() {
    let mut net = net(StrategyKind::Aggregate);
    let rail = net.rails_from(0, 1)[0];
    let staged = stage_past_one_packet(&mut net);
    let count = staged.len();
    assert!(staged[OPEN_MOST_CHUNKS].closed, "it closed the full packet");
    // No room: the closed packet waits.
    assert!(!net.engines[0].send_open_now(rail, OpenToSend::Closed, |_| false));
    assert!(!net.engines[0].staged_left(staged[0]));
    assert!(net.engines[0].closed_waiting(), "the refused packet waits");
    // Room: the closed packet leaves, alone.
    let mut written = Vec::new();
    let none_closed = net.engines[0].send_open_now(rail, OpenToSend::Closed, |packet| {
        written.push(packet.to_vec());
        true
    });
    assert!(none_closed);
    assert_eq!(written.len(), 1);
    assert!(
        staged[..OPEN_MOST_CHUNKS]
            .iter()
            .all(|&s| net.engines[0].staged_left(s))
    );
    assert!(
        staged[OPEN_MOST_CHUNKS..]
            .iter()
            .all(|&s| !net.engines[0].staged_left(s))
    );
    assert!(net.engines[0].has_staged(), "the open packet still waits");
    assert!(!net.engines[0].closed_waiting(), "but no closed one");
    assert_eq!(
        net.engines[0].staged_left_below(staged[0]),
        staged[OPEN_MOST_CHUNKS].packet
    );
    // Nothing closed waits: nothing is written.
    assert!(net.engines[0].send_open_now(rail, OpenToSend::Closed, |_| unreachable!()));
    // The open packet goes on taking messages, then leaves with them.
    let last = stage(&mut net, 1, count as u64, &pattern(8, count as u64)).expect("staged");
    assert_eq!(last.packet, staged[count - 1].packet);
    assert!(!last.opened && !last.closed);
    assert!(
        net.engines[0].send_open_now(rail, OpenToSend::All, |packet| {
            written.push(packet.to_vec());
            true
        })
    );
    assert!(!net.engines[0].has_staged());
    assert_eq!(chunk_counts_of(&written), [OPEN_MOST_CHUNKS as u16, 3]);
    let rail_in = net.rails_from(1, 0)[0];
    for bytes in &written {
        net.inject(1, rail_in, bytes).expect("valid");
    }
    for i in 0..=count {
        let channel = if i == count { 1 } else { (i % 4) as u16 };
        let (req, dest) = recv_into(&mut net, channel, i as u64, 8);
        net.run();
        net.ok(1, req);
        assert_eq!(net.read(1, dest), pattern(8, i as u64));
    }
}

#[test]
fn the_bound_of_packets_left_never_counts_one_in_flight() {
    let mut net = Net::with_config(2, 2, caps(1024, 600), |_| EngineConfig::default());
    let rails = net.rails_from(0, 1);
    let first = stage(&mut net, 1, 1, b"first").expect("staged");
    let bound = |net: &Net| net.engines[0].staged_left_below(first);
    assert_eq!(bound(&net), first.packet, "waiting");
    net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rails[0])
        .expect("the first packet");
    let second = stage(&mut net, 1, 2, b"second").expect("staged");
    assert_eq!(second.packet, first.packet + 1);
    net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rails[1])
        .expect("the second packet, on the other rail");
    assert_eq!(bound(&net), first.packet, "both in flight");
    // The second's rail completes first: it has left, but the bound stays
    // below the first, still in flight.
    net.engines[0].handle_send_complete(std::time::Duration::ZERO, rails[1]);
    assert!(net.engines[0].staged_left(second));
    assert!(!net.engines[0].staged_left(first));
    assert_eq!(bound(&net), first.packet);
    net.engines[0].handle_send_complete(std::time::Duration::ZERO, rails[0]);
    assert!(net.engines[0].staged_left(first));
    assert_eq!(bound(&net), second.packet + 1, "both left");
}

#[test]
fn open_packets_wait_for_a_busy_or_closed_rail() {
    let mut net = net(StrategyKind::Aggregate);
    let rail = net.rails_from(0, 1)[0];
    // A packet of the window in flight on the rail: it is busy.
    let out = net.engines[0].send_begin(CH, 1, 9).expect("rail");
    let data = net.alloc(0, pattern(700, 1));
    net.engines[0].send_tagged(out, data);
    net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rail)
        .expect("the window's packet");
    net.engines[0].handle_send_complete(std::time::Duration::ZERO, rail);
    let staged = stage(&mut net, 1, 1, b"small").expect("staged");
    net.engines[0]
        .poll_transmit(std::time::Duration::ZERO, rail)
        .expect("the open packet");
    let staged_next = stage(&mut net, 1, 2, b"next").expect("staged");
    let mut offered = false;
    assert!(!net.engines[0].send_open_now(rail, OpenToSend::All, |_| {
        offered = true;
        true
    }));
    assert!(!offered, "the rail is busy");
    net.engines[0].handle_send_complete(std::time::Duration::ZERO, rail);
    assert!(net.engines[0].staged_left(staged));
    net.engines[0].close_rail(rail);
    assert!(!net.engines[0].send_open_now(rail, OpenToSend::All, |_| {
        offered = true;
        true
    }));
    assert!(!offered, "the rail is closed");
    assert_eq!(
        net.engines[0].staged_outcome(staged_next),
        Some(Err(RequestError::PeerUnreachable { peer: 1 }))
    );
}

#[test]
fn a_packet_refused_by_the_writer_goes_on_taking_messages() {
    let mut net = net(StrategyKind::Aggregate);
    let rail = net.rails_from(0, 1)[0];
    let first = stage(&mut net, 1, 1, b"first").expect("staged");
    assert!(!net.engines[0].send_open_now(rail, OpenToSend::All, |_| false));
    let second = stage(&mut net, 2, 1, b"second").expect("staged");
    assert_eq!(second.packet, first.packet, "still open");
    let mut chunks = Vec::new();
    assert!(
        net.engines[0].send_open_now(rail, OpenToSend::All, |packet| {
            let decoded = Packet::decode(packet, &Default::default()).expect("a valid packet");
            chunks.push(decoded.header().chunk_count);
            true
        })
    );
    assert_eq!(chunks, [2]);
    // The next message opens the next packet, in the same buffer.
    let third = stage(&mut net, 1, 2, b"third").expect("staged");
    assert_eq!(third.packet, first.packet + 1);
    assert!(third.opened);
}

#[test]
fn only_peers_with_open_packets_are_listed_until_their_packets_leave_or_are_lost() {
    let mut net = Net::with_config(4, 1, caps(1024, 600), |_| EngineConfig::default());
    let staged = |net: &Net| -> Vec<u32> {
        let mut peers: Vec<u32> = (0..)
            .map_while(|nth| net.engines[0].staged_peer(nth))
            .collect();
        peers.sort_unstable();
        peers
    };
    assert_eq!(staged(&net), [] as [u32; 0]);
    for (peer, tag) in [(3, 1), (1, 2), (3, 3)] {
        net.engines[0]
            .stage_tagged(CH, peer, tag, b"small")
            .expect("staged");
    }
    assert_eq!(staged(&net), [1, 3], "each peer once, the others not");
    let to_3 = net.rails_from(3, 0)[0];
    assert!(net.engines[0].send_open_now(to_3, OpenToSend::All, |_| true));
    assert_eq!(staged(&net), [1], "peer 3's packet left");
    let to_1 = net.rails_from(1, 0)[0];
    net.engines[0].close_rail(to_1);
    assert_eq!(staged(&net), [] as [u32; 0], "peer 1's packet was lost");
    assert!(!net.engines[0].has_staged());
    net.engines[0]
        .stage_tagged(CH, 2, 4, b"again")
        .expect("staged");
    assert_eq!(staged(&net), [2]);
    net.capture(0, 2);
    assert_eq!(staged(&net), [] as [u32; 0], "taken by the rail's round");
}
