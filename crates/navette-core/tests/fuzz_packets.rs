//! Random and mutated packets fed to `handle_packet` of engines with
//! traffic in progress: errors are fine, panics are not, and the engines
//! keep answering the calls that follow.

mod common;

use common::{CH, Net, Piece, Posted, caps, from, pieces};
use navette_core::{EngineConfig, ReceiveMode, ReqId, SendMode, Source, TagMatch};
use navette_wire::{
    Chunk, ClearToSend, CtsFlags, Eager, EagerHeader, PieceFlags, RdvData, RdvDataHeader,
    RdvRequest, encode_packet,
};
use proptest::prelude::*;

/// Valid packets as (receiving node, its rail, bytes).
type Captured = Vec<(usize, navette_core::RailId, Vec<u8>)>;

/// Kind, flags, two ids, two numbers and data of a forged chunk.
type ChunkSpec = (u8, u8, u32, u32, u64, u64, Vec<u8>);

/// Two engines with receives posted (some deferred) and sends submitted, a
/// small buffer bound, and the valid packets of the first exchange round.
fn setup() -> (Net, Captured, Vec<(ReqId, Posted)>) {
    let config = |_| EngineConfig {
        max_buffered_bytes: 4000,
        max_reorder_chunks: 4,
        ..EngineConfig::default()
    };
    let mut net = Net::with_config(2, 2, caps(64, 500), config);
    let mut deferred = Vec::new();
    for tag in 0..3u64 {
        let msg = pieces(&[10, 1200, 0], tag);
        let key = net.recv_begin(1, from(0), TagMatch::exact(tag));
        for (i, p) in msg.iter().enumerate() {
            let posted = net.unpack(1, key, p.data.len(), p.send, p.recv, i == 1);
            if i == 1 {
                deferred.push((key, posted));
            }
        }
        net.recv_end(1, key);
        net.send(0, 1, tag, &msg);
    }
    net.send(0, 1, 7, &pieces(&[3000], 7));
    net.send(1, 0, 8, &pieces(&[900, 20], 8));
    let mut packets = Vec::new();
    for _ in 0..3 {
        net.transmit();
        let mut round = Vec::new();
        for link in &mut net.links {
            for bytes in link.queue.drain(..) {
                round.push((link.to, link.to_rail, bytes));
            }
        }
        for (to, rail, bytes) in &round {
            net.inject(*to, *rail, bytes).expect("valid traffic");
        }
        packets.extend(round);
    }
    (net, packets, deferred)
}

/// Gives every engine a chance to move after bad input: transmit, deliver,
/// fill deferred pieces, receive anything unexpected.
fn keep_going(net: &mut Net, deferred: &[(ReqId, Posted)]) {
    for &(key, posted) in deferred {
        let _ = net.engines[1].recv_fill(key, posted.req, posted.dest, &mut net.mems[1]);
    }
    for node in 0..2 {
        let _ = net.engines[node].probe(CH, Source::Any, TagMatch::any());
        let key = net.engines[node].recv_begin(CH, Source::Any, TagMatch::any());
        let _ = net.unpack(
            node,
            key,
            10,
            SendMode::Cheaper,
            ReceiveMode::Cheaper,
            false,
        );
        net.engines[node].recv_abandon(key);
    }
    for _ in 0..50 {
        net.transmit();
        if net.queued() == 0 {
            break;
        }
        net.deliver_some(net.queued());
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, xor: u8 },
    Truncate(usize),
    Extend(Vec<u8>),
    Set { at: usize, value: u8 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1..=255u8).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Extend),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Set { at, value }),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    match m {
        Mutation::Flip { at, xor } => bytes[at % n] ^= xor,
        Mutation::Truncate(at) => bytes.truncate(at % n),
        Mutation::Extend(more) => bytes.extend_from_slice(more),
        Mutation::Set { at, value } => bytes[at % n] = *value,
    }
}

/// A structurally valid chunk with small, colliding ids and numbers.
fn chunk() -> impl Strategy<Value = ChunkSpec> {
    (
        0..4u8,
        prop::sample::select(vec![0u8, 1, 2, 3, 0x0b, 0x1b, 0x42, 0x43, 0x29]),
        0..8u32,
        0..8u32,
        prop_oneof![0..4u64, 0..3000u64, Just(u64::from(u32::MAX))],
        prop_oneof![0..4u64, 0..3000u64],
        prop::collection::vec(any::<u8>(), 0..40),
    )
}

fn build(spec: &ChunkSpec) -> Option<Vec<u8>> {
    let (kind, flags, a, b, x, y, data) = spec;
    let piece_flags = PieceFlags::from_bits(*flags).ok()?;
    let chunk = match kind {
        0 => Chunk::Eager(Eager {
            header: EagerHeader {
                channel: CH.0,
                flags: piece_flags,
                seq: *a,
                msg: *b,
                tag: *x % 4,
                len: if piece_flags.aborted() {
                    0
                } else {
                    data.len() as u32
                },
            },
            data: if piece_flags.aborted() { &[] } else { data },
        }),
        1 => Chunk::RdvRequest(RdvRequest {
            channel: CH.0,
            flags: piece_flags,
            seq: *a,
            msg: *b,
            tag: *x % 4,
            send_id: *a,
            total_len: *y,
            readable: false,
        }),
        2 => Chunk::ClearToSend(ClearToSend {
            channel: CH.0,
            flags: if flags & 1 == 0 {
                CtsFlags::ACCEPT
            } else {
                CtsFlags::REJECT
            },
            send_id: *a,
            recv_id: *b,
            offset: *x,
            len: *y,
        }),
        _ => Chunk::RdvData(RdvData {
            header: RdvDataHeader {
                channel: CH.0,
                recv_id: *b,
                offset: *x,
                len: data.len() as u32,
            },
            data,
        }),
    };
    let mut out = Vec::new();
    encode_packet(&[chunk], &mut out);
    Some(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_packets_never_panic(
        picks in prop::collection::vec((any::<prop::sample::Index>(), mutation(), any::<bool>()), 1..12),
    ) {
        let (mut net, packets, deferred) = setup();
        for (pick, m, replay_only) in &picks {
            let (to, rail, bytes) = &packets[pick.index(packets.len())];
            let mut bytes = bytes.clone();
            if !replay_only {
                mutate(&mut bytes, m);
            }
            let _ = net.inject(*to, *rail, &bytes);
        }
        keep_going(&mut net, &deferred);
    }

    #[test]
    fn forged_chunks_never_panic(
        chunks in prop::collection::vec((chunk(), 0..2usize), 1..16),
    ) {
        let (mut net, _, deferred) = setup();
        for (spec, to) in &chunks {
            if let Some(bytes) = build(spec) {
                let rail = net.rails_from(1 - to, *to)[0];
                let _ = net.inject(*to, rail, &bytes);
            }
        }
        keep_going(&mut net, &deferred);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let (mut net, _, deferred) = setup();
        let rail = net.rails_from(0, 1)[0];
        let _ = net.inject(1, rail, &bytes);
        keep_going(&mut net, &deferred);
    }
}

/// The setup itself is sound: with no interference everything completes.
#[test]
fn setup_completes_without_interference() {
    let (mut net, _, deferred) = setup();
    for &(key, posted) in &deferred {
        net.fill(1, key, posted);
    }
    net.run();
    let r = net.recv(1, from(0), TagMatch::exact(7), &pieces(&[3000], 7), false);
    let r2 = net.recv(
        0,
        from(1),
        TagMatch::exact(8),
        &pieces(&[900, 20], 8),
        false,
    );
    net.run();
    net.check_received(1, 0, 7, &r, &pieces(&[3000], 7));
    net.check_received(0, 1, 8, &r2, &pieces(&[900, 20], 8));
    let _ = Piece::new(0, 0);
}
