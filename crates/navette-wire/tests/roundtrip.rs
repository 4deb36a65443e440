//! Properties of valid packets: they round-trip, every strict prefix is
//! rejected, and mutations never panic and never decode to something that
//! re-encodes differently.

mod common;

use common::{Spec, chunks, encode, length_fields, specs};
use navette_wire::{Chunk, DecodeError, Limits, Packet, PacketHeader, encode_packet};
use proptest::prelude::*;

/// Decodes `bytes` and, on success, checks that the chunks re-encode to them.
fn decode_and_reencode(bytes: &[u8]) -> Result<Vec<Chunk<'_>>, DecodeError> {
    let packet = Packet::decode(bytes, &Limits::default())?;
    let decoded: Vec<Chunk<'_>> = packet.chunks().collect();
    let mut again = Vec::new();
    encode_packet(&decoded, &mut again);
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
    }
}
