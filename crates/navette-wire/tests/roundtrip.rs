//! Properties of valid packets: they round-trip, every strict prefix is
//! rejected, and mutations never panic and never decode to something that
//! re-encodes differently.

mod common;

use common::{Spec, chunks, encode, length_fields, specs};
use navette_wire::{Chunk, DecodeError, Limits, Packet, PacketHeader, encode_packet};
use proptest::prelude::*;

/// `Packet::eager_chunks` (the fast path of packets of eager chunks only)
/// accepts exactly what `Packet::decode` accepts as 1 to 8 eager chunks,
/// and reads the same chunks.
fn eager_chunks_agree_with_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
    let limits = Limits::default();
    let fast = Packet::eager_chunks::<8>(bytes, &limits);
    let general: Option<Vec<Chunk<'_>>> = Packet::decode(bytes, &limits)
        .ok()
        .map(|p| p.chunks().collect());
    let eager_only = general.as_ref().filter(|chunks| {
        (1..=8).contains(&chunks.len()) && chunks.iter().all(|c| matches!(c, Chunk::Eager(_)))
    });
    match (fast, eager_only) {
        (Some(found), Some(chunks)) => {
            let found: Vec<Chunk<'_>> = found.as_slice().iter().map(|&e| Chunk::Eager(e)).collect();
            prop_assert_eq!(&found, chunks);
        }
        (None, None) => {}
        (fast, general) => prop_assert!(
            false,
            "eager_chunks {:?} but decode {:?}",
            fast.map(|f| f.as_slice().len()),
            general.map(Vec::len)
        ),
    }
    Ok(())
}

/// `Packet::with_eager_chunks_then_request` (the fast path of the usual
/// large message's packet) accepts exactly what `Packet::decode` accepts as
/// 1 to 8 eager chunks then one rendezvous request, and reads the same.
fn eager_then_request_agrees_with_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
    let limits = Limits::default();
    let fast: Option<Vec<Chunk<'_>>> =
        Packet::with_eager_chunks_then_request::<8, _>(bytes, &limits, |eager, request| {
            let eager = eager.iter().map(|&e| Chunk::Eager(e));
            eager.chain([Chunk::RdvRequest(*request)]).collect()
        });
    let general: Option<Vec<Chunk<'_>>> = Packet::decode(bytes, &limits)
        .ok()
        .map(|p| p.chunks().collect())
        .filter(|chunks: &Vec<Chunk<'_>>| match chunks.split_last() {
            Some((Chunk::RdvRequest(_), eager)) => {
                (1..=8).contains(&eager.len()) && eager.iter().all(|c| matches!(c, Chunk::Eager(_)))
            }
            _ => false,
        });
    prop_assert_eq!(fast, general);
    Ok(())
}

#[test]
fn a_whole_message_in_one_packet_is_read_by_the_fast_path() {
    use navette_wire::{Eager, EagerHeader, PieceFlags, ReceiveMode, SendMode};
    let data: [&[u8]; 3] = [b"header", b"", b"the body"];
    let chunks: Vec<Chunk<'_>> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Chunk::Eager(Eager {
                header: EagerHeader {
                    channel: 2,
                    flags: PieceFlags::new(i == 0, i == 2, SendMode::Safer, ReceiveMode::Express),
                    seq: 10 + i as u32,
                    msg: 4,
                    tag: 99,
                    len: d.len() as u32,
                },
                data: d,
            })
        })
        .collect();
    let mut bytes = Vec::new();
    encode_packet(&chunks, &mut bytes);
    let limits = Limits::default();
    let found = Packet::eager_chunks::<8>(&bytes, &limits).expect("read");
    assert_eq!(found.as_slice().len(), 3);
    let found: Vec<Chunk<'_>> = found.as_slice().iter().map(|&e| Chunk::Eager(e)).collect();
    assert_eq!(found, chunks);
    // More chunks than asked for, or a trailing byte: the general path.
    assert!(Packet::eager_chunks::<2>(&bytes, &limits).is_none());
    bytes.push(0);
    assert!(Packet::eager_chunks::<8>(&bytes, &limits).is_none());
}

/// Decodes `bytes` and, on success, checks that the chunks re-encode to them.
fn decode_and_reencode(bytes: &[u8]) -> Result<Vec<Chunk<'_>>, DecodeError> {
    let packet = Packet::decode(bytes, &Limits::default())?;
    let decoded: Vec<Chunk<'_>> = packet.chunks().collect();
    let mut again = Vec::new();
    match decoded.as_slice() {
        [Chunk::Eager(lone)] if packet.is_lone() => navette_wire::encode_lone(lone, &mut again),
        _ => encode_packet(&decoded, &mut again),
    }
    assert_eq!(again, bytes, "accepted bytes must re-encode identically");
    Ok(decoded)
}

/// One way to damage an encoding.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit {
        at: prop::sample::Index,
        bit: u8,
    },
    SetByte {
        at: prop::sample::Index,
        value: u8,
    },
    Insert {
        at: prop::sample::Index,
        value: u8,
    },
    Remove {
        at: prop::sample::Index,
    },
    HugeLength {
        field: prop::sample::Index,
        value: u64,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let huge = prop_oneof![
        Just(u64::MAX),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u16::MAX)),
        Just(Limits::default().max_message_len + 1),
        any::<u64>(),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        (any::<prop::sample::Index>(), any::<u8>())
            .prop_map(|(at, value)| Mutation::SetByte { at, value }),
        (any::<prop::sample::Index>(), any::<u8>())
            .prop_map(|(at, value)| Mutation::Insert { at, value }),
        any::<prop::sample::Index>().prop_map(|at| Mutation::Remove { at }),
        (any::<prop::sample::Index>(), huge)
            .prop_map(|(field, value)| Mutation::HugeLength { field, value }),
    ]
}

fn apply(bytes: &mut Vec<u8>, specs: &[Spec], m: &Mutation) {
    match m {
        Mutation::FlipBit { at, bit } => {
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
        }
        Mutation::SetByte { at, value } => {
            let i = at.index(bytes.len());
            bytes[i] = *value;
        }
        Mutation::Insert { at, value } => {
            let i = at.index(bytes.len() + 1);
            bytes.insert(i, *value);
        }
        Mutation::Remove { at } => {
            let i = at.index(bytes.len());
            bytes.remove(i);
        }
        Mutation::HugeLength { field, value } => {
            // Length fields of the original layout; earlier mutations may have
            // shifted them, which only makes the input more arbitrary.
            let fields = length_fields(specs);
            let (offset, width) = fields[field.index(fields.len())];
            let le = value.to_le_bytes();
            let end = (offset + width).min(bytes.len());
            if offset < end {
                bytes[offset..end].copy_from_slice(&le[..end - offset]);
            }
        }
    }
}

proptest! {
    #[test]
    fn packets_round_trip(specs in specs()) {
        let bytes = encode(&specs);
        let input = chunks(&specs);
        let packet = Packet::decode(&bytes, &Limits::default()).unwrap();
        prop_assert_eq!(packet.header().chunk_count as usize, input.len());
        prop_assert_eq!(packet.header().total_len(), bytes.len());
        prop_assert_eq!(PacketHeader::peek_chunk_count(&bytes), Some(input.len() as u16));
        prop_assert_eq!(packet.chunks().size_hint(), (input.len(), Some(input.len())));
        let single = (input.len() == 1).then(|| input[0]);
        prop_assert_eq!(Packet::decode_single(&bytes, &Limits::default()), Ok(single));
        prop_assert_eq!(packet.chunks().collect::<Vec<_>>(), input);
    }

    #[test]
    fn every_strict_prefix_of_a_packet_is_rejected(specs in specs()) {
        let bytes = encode(&specs);
        for end in 0..bytes.len() {
            prop_assert!(
                Packet::decode(&bytes[..end], &Limits::default()).is_err(),
                "prefix of {} bytes out of {} accepted", end, bytes.len()
            );
        }
        for end in 0..PacketHeader::LEN {
            prop_assert!(PacketHeader::decode(&bytes[..end], &Limits::default()).is_err());
            prop_assert_eq!(PacketHeader::peek_chunk_count(&bytes[..end]), None);
        }
    }

    #[test]
    fn trailing_bytes_are_rejected(specs in specs(), extra in prop::collection::vec(any::<u8>(), 1..16)) {
        let mut bytes = encode(&specs);
        bytes.extend_from_slice(&extra);
        prop_assert_eq!(
            Packet::decode(&bytes, &Limits::default()).unwrap_err(),
            DecodeError::TrailingBytes { field: "packet", count: extra.len() }
        );
    }

    #[test]
    fn a_stream_of_packets_splits_on_header_lengths(a in specs(), b in specs()) {
        let mut stream = encode(&a);
        stream.extend_from_slice(&encode(&b));
        let first = PacketHeader::decode(&stream, &Limits::default()).unwrap();
        let (one, rest) = stream.split_at(first.total_len());
        prop_assert_eq!(decode_and_reencode(one).unwrap(), chunks(&a));
        prop_assert_eq!(decode_and_reencode(rest).unwrap(), chunks(&b));
    }

    #[test]
    fn mutated_packets_never_panic_and_reencode_when_accepted(
        specs in specs(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut bytes = encode(&specs);
        for m in &mutations {
            if bytes.is_empty() {
                break;
            }
            apply(&mut bytes, &specs, m);
        }
        let _ = decode_and_reencode(&bytes);
        let _ = navette_wire::fuzzing::fuzz_decode(&bytes);
        eager_chunks_agree_with_decode(&bytes)?;
        eager_then_request_agrees_with_decode(&bytes)?;
    }

    /// Eager chunks then one rendezvous request, valid or spoilt by a
    /// mutation, as the fast path and the general one read them.
    #[test]
    fn eager_chunks_then_a_request_are_read_as_decode_reads_them(
        specs in specs(),
        mutation in prop::option::of(mutation()),
    ) {
        let eager: Vec<&Spec> = specs
            .iter()
            .filter(|s| matches!(s, Spec::Eager { .. }))
            .take(8)
            .collect();
        let request = specs.iter().find(|s| matches!(s, Spec::RdvRequest(_)));
        prop_assume!(!eager.is_empty() && request.is_some());
        let mut chunks: Vec<Chunk<'_>> = eager.iter().map(|s| s.chunk()).collect();
        chunks.extend(request.map(Spec::chunk));
        let mut bytes = Vec::new();
        encode_packet(&chunks, &mut bytes);
        if let Some(m) = &mutation {
            let spoilt: Vec<Spec> = eager.into_iter().chain(request).cloned().collect();
            apply(&mut bytes, &spoilt, m);
        } else {
            let fast = Packet::with_eager_chunks_then_request::<8, _>(&bytes, &Limits::default(), |e, _| e.len());
            prop_assert_eq!(fast, Some(chunks.len() - 1));
        }
        eager_then_request_agrees_with_decode(&bytes)?;
    }

    #[test]
    fn valid_packets_of_eager_chunks_are_read_by_the_fast_path(specs in specs()) {
        eager_chunks_agree_with_decode(&encode(&specs))?;
    }
}

/// Any eager chunk that decodes under [`Limits::default`] (the shared
/// strategy's).
fn lone_chunks() -> impl Strategy<Value = (navette_wire::EagerHeader, Vec<u8>)> {
    common::spec().prop_filter_map("an eager chunk", |spec| match spec {
        Spec::Eager { header, data } => Some((header, data)),
        _ => None,
    })
}

proptest! {
    /// A lone packet reads as the full form's packet of its one chunk, by
    /// every decoder, and 16 bytes shorter.
    #[test]
    fn lone_packets_read_as_their_full_form((header, data) in lone_chunks()) {
        use navette_wire::{Eager, LONE, encode_lone};
        let chunk = Eager { header, data: &data };
        let mut lone = Vec::new();
        encode_lone(&chunk, &mut lone);
        let mut full = Vec::new();
        encode_packet(&[Chunk::Eager(chunk)], &mut full);
        prop_assert_eq!(lone[0], LONE);
        prop_assert_eq!(lone.len() + 16, full.len());
        let limits = Limits::default();
        let packet = Packet::decode(&lone, &limits).unwrap();
        prop_assert!(packet.is_lone());
        prop_assert_eq!(packet.header(), Packet::decode(&full, &limits).unwrap().header());
        prop_assert_eq!(packet.chunks().collect::<Vec<_>>(), vec![Chunk::Eager(chunk)]);
        prop_assert_eq!(Packet::decode_single(&lone, &limits), Ok(Some(Chunk::Eager(chunk))));
        prop_assert_eq!(PacketHeader::peek_chunk_count(&lone), Some(1));
        let fast = Packet::eager_chunks::<8>(&lone, &limits).unwrap();
        prop_assert_eq!(fast.as_slice(), &[chunk][..]);
        prop_assert_eq!(decode_and_reencode(&lone).unwrap(), vec![Chunk::Eager(chunk)]);
        eager_chunks_agree_with_decode(&lone)?;
        // Its header cut short is refused; its data is the rest of the
        // frame, so any longer prefix is another (shorter) message.
        for end in 0..navette_wire::LONE_HEADER_LEN {
            prop_assert!(Packet::decode(&lone[..end], &limits).is_err());
            prop_assert!(Packet::eager_chunks::<1>(&lone[..end], &limits).is_none());
        }
    }

    /// The fast path reads a lone packet with one byte changed exactly as
    /// the general decoder does: it accepts the same packets (flags,
    /// lengths, limits) and reads the same chunk.
    #[test]
    fn mutated_lone_packets_read_alike_by_both_paths(
        (header, data) in lone_chunks(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        use navette_wire::{Eager, encode_lone};
        let mut lone = Vec::new();
        encode_lone(&Eager { header, data: &data }, &mut lone);
        let i = at.index(lone.len());
        lone[i] = byte;
        eager_chunks_agree_with_decode(&lone)?;
    }
}

#[test]
fn lone_packets_are_checked_as_full_ones() {
    use navette_wire::{Eager, EagerHeader, PieceFlags, ReceiveMode, SendMode, encode_lone};
    let header = |flags, len| EagerHeader {
        channel: 1,
        flags,
        seq: 2,
        msg: 3,
        tag: 4,
        len,
    };
    let flags = PieceFlags::new(true, true, SendMode::Safer, ReceiveMode::Express);
    let data = [7u8; 65];
    let mut bytes = Vec::new();
    encode_lone(
        &Eager {
            header: header(flags, 65),
            data: &data,
        },
        &mut bytes,
    );
    let tight = Limits {
        max_eager_len: 64,
        ..Limits::default()
    };
    assert!(matches!(
        Packet::decode(&bytes, &tight),
        Err(DecodeError::TooLarge {
            field: "eager len",
            len: 65,
            max: 64
        })
    ));
    assert_eq!(
        Packet::decode_single(&bytes, &tight),
        Packet::decode(&bytes, &tight).map(|_| None)
    );
    assert!(Packet::eager_chunks::<1>(&bytes, &tight).is_none());
    // Flags no piece has.
    bytes[1] = 0xff;
    assert!(matches!(
        Packet::decode(&bytes, &Limits::default()),
        Err(DecodeError::InvalidFlags { .. })
    ));
    // An aborted piece carries no data.
    let aborted = PieceFlags::ABORT_UNSENT;
    bytes.clear();
    encode_lone(
        &Eager {
            header: header(aborted, 1),
            data: &[1],
        },
        &mut bytes,
    );
    assert!(matches!(
        Packet::decode(&bytes, &Limits::default()),
        Err(DecodeError::InvalidFlags {
            field: "abort piece with data",
            ..
        })
    ));
}
