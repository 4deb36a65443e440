//! Strategies: what packets the windows become.
//!
//! The `aggregate` strategy (the default) coalesces small chunks of many
//! messages, tags and channels into shared packets, control chunks and
//! EXPRESS pieces first, within the rail's eager limit; rendezvous data
//! travels alone. `default` sends one chunk per packet. Every message
//! arrives whole and in order whatever the packets were.

mod common;

use common::{CH, Net, Order, caps, from, pattern};
use navette_core::{
    ChannelId, EngineConfig, PieceSpec, RailId, ReceiveMode, ReqId, SendMode, StrategyKind,
    TagMatch,
};
use navette_wire::{Chunk, Limits, Packet};

/// The chunks of a captured packet, as (kind, channel, tag) where known.
fn chunks(bytes: &[u8]) -> Vec<Chunk<'_>> {
    let packet = Packet::decode(bytes, &Limits::default()).expect("the engine's packets decode");
    packet.chunks().collect()
}

/// Node 0 sends `data` to node 1 on `channel` with `tag`, as one piece
/// with receive mode `recv`.
fn send_on(net: &mut Net, channel: ChannelId, tag: u64, data: Vec<u8>, recv: ReceiveMode) -> ReqId {
    let mut out = net.engines[0]
        .send_begin(channel, 1, tag)
        .expect("a rail leads to the peer");
    let data = net.alloc(0, data);
    let spec = PieceSpec {
        data,
        send: SendMode::Cheaper,
        recv,
        last: true,
    };
    net.engines[0].send_piece(&mut out, spec)
}

/// Node 1 posts a tagged receive of up to `len` bytes; its request and
/// destination.
fn recv_on(
    net: &mut Net,
    channel: ChannelId,
    tag: u64,
    len: usize,
) -> (ReqId, navette_core::MemRef) {
    let dest = net.alloc(1, vec![0; len]);
    let req = net.engines[1].recv_tagged(
        channel,
        from(0),
        TagMatch::exact(tag),
        dest,
        &mut net.mems[1],
    );
    (req, dest)
}

/// Delivers captured packets to node 1 in order.
fn deliver(net: &mut Net, packets: &[(RailId, Vec<u8>)]) {
    for (rail, bytes) in packets {
        net.inject(1, *rail, bytes).expect("a valid packet");
    }
    net.run();
}

#[test]
fn small_messages_of_many_tags_and_channels_share_one_packet() {
    let mut net = Net::new(2, 1, caps(4096, 4096)).order(Order::Fifo);
    let channels = [CH, ChannelId(3), ChannelId(9)];
    let mut sends = Vec::new();
    for i in 0..12u64 {
        let channel = channels[i as usize % 3];
        sends.push((
            channel,
            i,
            send_on(&mut net, channel, i, pattern(16, i), ReceiveMode::Cheaper),
        ));
    }
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 1, "one packet for all");
    assert_eq!(chunks(&packets[0].1).len(), 12);
    let recvs: Vec<_> = sends
        .iter()
        .map(|&(channel, tag, _)| (tag, recv_on(&mut net, channel, tag, 16)))
        .collect();
    deliver(&mut net, &packets);
    for (tag, (req, dest)) in recvs {
        assert_eq!(net.ok(1, req).len, 16);
        assert_eq!(net.read(1, dest), pattern(16, tag));
    }
    for (_, _, req) in sends {
        net.ok(0, req);
    }
    let stats: Vec<_> = net.engines[0].gate_stats().collect();
    assert_eq!(stats.len(), 3, "one gate per channel: {stats:?}");
    for s in &stats {
        assert_eq!((s.packets_sent, s.chunks_sent), (1, 4), "{s:?}");
        assert_eq!(s.chunks_per_packet(), 4.0);
    }
    let received: u64 = net.engines[1].gate_stats().map(|s| s.chunks_received).sum();
    assert_eq!(received, 12);
}

#[test]
fn the_default_strategy_sends_one_chunk_per_packet() {
    let mut net = Net::one_chunk_per_packet(2, 1, caps(4096, 4096));
    for i in 0..5u64 {
        send_on(&mut net, CH, i, pattern(16, i), ReceiveMode::Cheaper);
    }
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 5);
    assert!(packets.iter().all(|(_, p)| chunks(p).len() == 1));
}

#[test]
fn control_chunks_and_express_pieces_lead_the_packet() {
    let mut net = Net::new(2, 1, caps(1024, 1 << 20)).order(Order::Fifo);
    send_on(&mut net, CH, 1, pattern(32, 1), ReceiveMode::Cheaper);
    // A rendezvous request rides with the eager data.
    send_on(&mut net, CH, 2, pattern(8192, 2), ReceiveMode::Cheaper);
    send_on(&mut net, CH, 3, pattern(32, 3), ReceiveMode::Express);
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 1);
    let kinds: Vec<_> = chunks(&packets[0].1)
        .iter()
        .map(|c| match c {
            Chunk::RdvRequest(r) => ("request", r.tag),
            Chunk::Eager(e) => ("eager", e.header.tag),
            other => panic!("unexpected chunk {other:?}"),
        })
        .collect();
    assert_eq!(kinds, [("request", 2), ("eager", 3), ("eager", 1)]);
    let recvs: Vec<_> = [(1, 32), (2, 8192), (3, 32)]
        .into_iter()
        .map(|(tag, len)| (tag, len, recv_on(&mut net, CH, tag, len)))
        .collect();
    deliver(&mut net, &packets);
    for (tag, len, (req, dest)) in recvs {
        assert_eq!(net.ok(1, req).len, len);
        assert_eq!(net.read(1, dest), pattern(len, tag));
    }
}

#[test]
fn packets_stop_at_the_eager_limit_and_keep_order() {
    // 200-byte messages: four fit a 1024-byte body with their headers.
    let mut net = Net::new(2, 1, caps(1024, 1 << 20)).order(Order::Fifo);
    for i in 0..20u64 {
        send_on(&mut net, CH, 7, pattern(200, i), ReceiveMode::Cheaper);
    }
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 5);
    for (_, p) in &packets {
        assert!(p.len() - navette_wire::PacketHeader::LEN <= 1024);
        assert_eq!(chunks(p).len(), 4);
    }
    let recvs: Vec<_> = (0..20).map(|_| recv_on(&mut net, CH, 7, 200)).collect();
    deliver(&mut net, &packets);
    for (i, (req, dest)) in recvs.into_iter().enumerate() {
        net.ok(1, req);
        assert_eq!(net.read(1, dest), pattern(200, i as u64), "message {i}");
    }
}

#[test]
fn rendezvous_data_travels_alone_and_small_chunks_overtake_it() {
    let mut net = Net::new(2, 1, caps(1024, 4096)).order(Order::Fifo);
    let (big, big_dest) = recv_on(&mut net, CH, 1, 20_000);
    send_on(&mut net, CH, 1, pattern(20_000, 1), ReceiveMode::Cheaper);
    net.run();
    // The clear-to-send came back: the data waits in the window. Small
    // messages submitted now leave before the rest of it.
    let small: Vec<_> = (0..3)
        .map(|i| send_on(&mut net, CH, 10 + i, pattern(8, i), ReceiveMode::Cheaper))
        .collect();
    let packets = net.capture(0, 1);
    let shapes: Vec<_> = packets
        .iter()
        .map(|(_, p)| {
            let c = chunks(p);
            let data = c.iter().filter(|c| matches!(c, Chunk::RdvData(_))).count();
            assert!(data == 0 || c.len() == 1, "rendezvous data shares a packet");
            (data, c.len())
        })
        .collect();
    assert!(
        shapes.iter().any(|&(data, n)| data == 0 && n == 3),
        "{shapes:?}"
    );
    let recvs: Vec<_> = (0..3u64)
        .map(|i| (i, recv_on(&mut net, CH, 10 + i, 8)))
        .collect();
    deliver(&mut net, &packets);
    assert_eq!(net.ok(1, big).len, 20_000);
    assert_eq!(net.read(1, big_dest), pattern(20_000, 1));
    for (i, (req, dest)) in recvs {
        net.ok(1, req);
        assert_eq!(net.read(1, dest), pattern(8, i));
    }
    for req in small {
        net.ok(0, req);
    }
    // None of it was copied by the engine on the sending side; the
    // receiver copied the eager bytes and the rendezvous data that came
    // inside packets.
    let copied: u64 = net.engines[1].gate_stats().map(|s| s.bytes_copied).sum();
    assert_eq!(copied, 20_000 + 24);
}

#[test]
fn a_window_of_many_chunks_needs_several_packets() {
    let mut net = Net::new(2, 1, caps(64 << 10, 1 << 20)).order(Order::Fifo);
    for i in 0..600u64 {
        send_on(&mut net, CH, i, Vec::new(), ReceiveMode::Cheaper);
    }
    let packets = net.capture(0, 1);
    let counts: Vec<usize> = packets.iter().map(|(_, p)| chunks(p).len()).collect();
    assert_eq!(counts.iter().sum::<usize>(), 600);
    assert!(counts.iter().all(|&n| n <= 256), "{counts:?}");
    assert_eq!(counts.len(), 3);
    let recvs: Vec<_> = (0..600).map(|i| recv_on(&mut net, CH, i, 0).0).collect();
    deliver(&mut net, &packets);
    for req in recvs {
        assert_eq!(net.ok(1, req).len, 0);
    }
}

#[test]
fn strategies_are_chosen_by_name_and_per_channel() {
    assert_eq!(StrategyKind::default(), StrategyKind::Aggregate);
    assert_eq!(EngineConfig::default().strategy, StrategyKind::Aggregate);
    for kind in StrategyKind::ALL {
        assert_eq!(kind.name().parse::<StrategyKind>(), Ok(kind));
        assert_eq!(kind.build().name(), kind.name());
    }
    assert!("fastest".parse::<StrategyKind>().is_err());
    // Channel 5 sends one chunk per packet, the others aggregate.
    let mut net = Net::new(2, 1, caps(4096, 4096)).order(Order::Fifo);
    net.engines[0].set_strategy(ChannelId(5), StrategyKind::Default.build());
    for i in 0..4u64 {
        send_on(
            &mut net,
            ChannelId(5),
            i,
            pattern(8, i),
            ReceiveMode::Cheaper,
        );
    }
    let packets = net.capture(0, 1);
    assert_eq!(packets.len(), 4);
    for i in 0..4u64 {
        send_on(&mut net, CH, i, pattern(8, i), ReceiveMode::Cheaper);
    }
    assert_eq!(net.capture(0, 1).len(), 1);
}

/// Random sizes, tags and channels under every strategy, delivered in a
/// seeded order over two rails: every message arrives whole, in order
/// per (channel, tag).
#[test]
fn every_strategy_delivers_everything_in_order() {
    for kind in StrategyKind::ALL {
        for seed in 0..8u64 {
            let config = |_| EngineConfig {
                strategy: kind,
                ..EngineConfig::default()
            };
            let mut net =
                Net::with_config(2, 2, caps(2048, 3000), config).order(Order::Seeded(seed));
            let mut rng = common::Rng::new(seed);
            let mut expected = Vec::new();
            for i in 0..150u64 {
                let channel = ChannelId(rng.below(3) as u16);
                let tag = rng.below(4) as u64;
                let len = [0, 8, 100, 1500, 2100, 9000][rng.below(6)];
                send_on(
                    &mut net,
                    channel,
                    tag,
                    pattern(len, i),
                    ReceiveMode::Cheaper,
                );
                expected.push((channel, tag, len, i));
                if rng.below(4) == 0 {
                    net.transmit();
                }
            }
            let recvs: Vec<_> = expected
                .iter()
                .map(|&(channel, tag, len, i)| (len, i, recv_on(&mut net, channel, tag, len)))
                .collect();
            net.run();
            for (len, i, (req, dest)) in recvs {
                assert_eq!(net.ok(1, req).len, len, "{kind} seed {seed} message {i}");
                assert_eq!(
                    net.read(1, dest),
                    pattern(len, i),
                    "{kind} seed {seed} message {i}"
                );
            }
        }
    }
}

#[test]
fn strategy_settings_name_a_default_and_per_channel_choices() {
    let mut config = EngineConfig::default();
    config
        .set_strategies("split, 3=default,7=aggregate")
        .unwrap();
    assert_eq!(config.strategy_of(CH), StrategyKind::Split);
    assert_eq!(config.strategy_of(ChannelId(3)), StrategyKind::Default);
    assert_eq!(config.strategy_of(ChannelId(7)), StrategyKind::Aggregate);
    config.set_strategies("3=split").unwrap();
    assert_eq!(config.strategy_of(ChannelId(3)), StrategyKind::Split);
    for bad in ["fastest", "3=fastest", "x=split", "70000=split"] {
        let err = EngineConfig::default().set_strategies(bad).unwrap_err();
        assert!(!err.to_string().is_empty(), "{bad}");
    }
    // A channel created from the configuration gets its strategy.
    let config = |_| {
        let mut c = EngineConfig::default();
        c.set_strategies("aggregate,5=default").unwrap();
        c
    };
    let mut net = Net::with_config(2, 1, caps(4096, 4096), config).order(Order::Fifo);
    for i in 0..3u64 {
        send_on(
            &mut net,
            ChannelId(5),
            i,
            pattern(8, i),
            ReceiveMode::Cheaper,
        );
    }
    assert_eq!(net.capture(0, 1).len(), 3);
}
