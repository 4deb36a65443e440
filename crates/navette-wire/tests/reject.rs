//! Invalid input: arbitrary bytes never panic, limits are enforced before
//! any data is read, and each kind of malformation gets its own error.

mod common;

use common::bounded;
use navette_wire::handshake::{Hello, PROTOCOL_VERSION, Proof};
use navette_wire::{
    Chunk, ChunkKind, ClearToSend, CtsFlags, DecodeError, EagerHeader, Limits, Packet,
    PacketHeader, PieceFlags, RdvDataHeader, RdvRequest, ReceiveMode, SendMode,
};
use proptest::prelude::*;

/// A packet whose body is `body`, announced as `chunk_count` chunks.
fn packet(chunk_count: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketHeader {
        chunk_count,
        body_len: u32::try_from(body.len()).unwrap(),
    }
    .encode(&mut out);
    out.extend_from_slice(body);
    out
}

fn decode_with(bytes: &[u8], limits: &Limits) -> Result<usize, DecodeError> {
    Packet::decode(bytes, limits).map(|p| p.chunks().count())
}

fn too_large(field: &'static str, len: u64, max: u64) -> Result<usize, DecodeError> {
    Err(DecodeError::TooLarge { field, len, max })
}

/// Limits of arbitrary (but not maximal) size.
fn limits() -> impl Strategy<Value = Limits> {
    (
        0..u32::MAX,
        0..u16::MAX,
        0..u32::MAX,
        0..u32::MAX,
        0..u64::MAX,
    )
        .prop_map(
            |(max_body_len, max_chunks, max_eager_len, max_fragment_len, max_message_len)| Limits {
                max_body_len,
                max_chunks,
                max_eager_len,
                max_fragment_len,
                max_message_len,
            },
        )
}

fn eager_header(len: u32) -> Vec<u8> {
    let mut body = Vec::new();
    EagerHeader {
        channel: 1,
        flags: PieceFlags::TAGGED,
        seq: 2,
        msg: 3,
        tag: 4,
        len,
    }
    .encode(&mut body);
    body
}

fn rdv_data_header(offset: u64, len: u32) -> Vec<u8> {
    let mut body = Vec::new();
    RdvDataHeader {
        channel: 1,
        recv_id: 2,
        offset,
        len,
    }
    .encode(&mut body);
    body
}

fn rdv_request(total_len: u64) -> Vec<u8> {
    let mut body = Vec::new();
    Chunk::RdvRequest(RdvRequest {
        channel: 1,
        flags: PieceFlags::new(true, false, SendMode::Later, ReceiveMode::Express),
        seq: 2,
        msg: 3,
        tag: 4,
        send_id: 5,
        total_len,
        readable: false,
    })
    .encode(&mut body);
    body
}

fn cts(offset: u64, len: u64) -> Vec<u8> {
    let mut body = Vec::new();
    Chunk::ClearToSend(ClearToSend {
        channel: 1,
        flags: CtsFlags::ACCEPT,
        send_id: 2,
        recv_id: 3,
        offset,
        len,
    })
    .encode(&mut body);
    body
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = navette_wire::fuzzing::fuzz_decode(&bytes);
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_header_never_panic(
        count in 0u16..6,
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let _ = navette_wire::fuzzing::fuzz_decode(&packet(count, &body));
    }

    /// Lengths above each limit are rejected from the length field alone: the
    /// bytes it announces are absent, so the error must be `TooLarge`, not
    /// `Truncated` (nothing was read or reserved for them).
    #[test]
    fn lengths_above_their_limit_are_too_large(l in limits(), excess in 1u64..1000) {
        // max_body_len and max_chunks, from the header alone.
        let body_len = u64::from(l.max_body_len) + excess.min(u64::from(u32::MAX - l.max_body_len));
        let mut header = packet(0, &[]);
        header[8..12].copy_from_slice(&u32::try_from(body_len).unwrap().to_le_bytes());
        prop_assert_eq!(
            decode_with(&header, &l),
            too_large("packet body length", body_len, l.max_body_len.into())
        );
        let count = u64::from(l.max_chunks) + excess.min(u64::from(u16::MAX - l.max_chunks));
        let header = packet(u16::try_from(count).unwrap(), &[]);
        prop_assert_eq!(
            decode_with(&header, &l),
            too_large("packet chunk count", count, l.max_chunks.into())
        );

        // The chunk-level limits, with generous packet limits.
        let l = Limits { max_body_len: u32::MAX, max_chunks: u16::MAX, ..l };
        let eager = u64::from(l.max_eager_len) + excess.min(u64::from(u32::MAX - l.max_eager_len));
        prop_assert_eq!(
            decode_with(&packet(1, &eager_header(u32::try_from(eager).unwrap())), &l),
            too_large("eager len", eager, l.max_eager_len.into())
        );
        let frag = u64::from(l.max_fragment_len)
            + excess.min(u64::from(u32::MAX - l.max_fragment_len));
        prop_assert_eq!(
            decode_with(&packet(1, &rdv_data_header(0, u32::try_from(frag).unwrap())), &l),
            too_large("rdv data len", frag, l.max_fragment_len.into())
        );
        let msg = l.max_message_len + excess.min(u64::MAX - l.max_message_len);
        let max = l.max_message_len;
        prop_assert_eq!(
            decode_with(&packet(1, &rdv_request(msg)), &l),
            too_large("rdv request total_len", msg, max)
        );
        prop_assert_eq!(decode_with(&packet(1, &cts(msg, 0)), &l), too_large("cts offset", msg, max));
        prop_assert_eq!(decode_with(&packet(1, &cts(0, msg)), &l), too_large("cts len", msg, max));
        prop_assert_eq!(
            decode_with(&packet(1, &rdv_data_header(msg, 0)), &l),
            too_large("rdv data offset", msg, max)
        );
    }

    /// Lengths at or below their limit pass the limit check.
    #[test]
    fn lengths_within_their_limit_are_accepted(
        (max_message_len, len) in any::<u64>().prop_flat_map(|max| (Just(max), bounded(max))),
    ) {
        let l = Limits { max_message_len, ..Limits::default() };
        prop_assert_eq!(decode_with(&packet(1, &rdv_request(len)), &l), Ok(1));
        prop_assert_eq!(decode_with(&packet(1, &cts(len, len)), &l), Ok(1));
        prop_assert_eq!(decode_with(&packet(1, &rdv_data_header(len, 0)), &l), Ok(1));
    }
}

#[test]
fn limits_are_inclusive_at_small_sizes() {
    let l = Limits {
        max_body_len: 64,
        max_chunks: 2,
        max_eager_len: 8,
        max_fragment_len: 16,
        max_message_len: 100,
    };
    let mut body = eager_header(8);
    body.extend_from_slice(&[7; 8]);
    assert_eq!(decode_with(&packet(1, &body), &l), Ok(1));
    let mut body = eager_header(9);
    body.extend_from_slice(&[7; 9]);
    assert_eq!(
        decode_with(&packet(1, &body), &l),
        too_large("eager len", 9, 8)
    );

    let mut body = rdv_data_header(100, 16);
    body.extend_from_slice(&[7; 16]);
    assert_eq!(decode_with(&packet(1, &body), &l), Ok(1));
    let mut body = rdv_data_header(100, 17);
    body.extend_from_slice(&[7; 17]);
    assert_eq!(
        decode_with(&packet(1, &body), &l),
        too_large("rdv data len", 17, 16)
    );

    assert_eq!(
        decode_with(&packet(2, &[cts(1, 2), cts(3, 4)].concat()), &l),
        Ok(2)
    );
    let three = [cts(1, 2), cts(3, 4), cts(5, 6)].concat();
    assert_eq!(
        decode_with(&packet(3, &three), &l),
        too_large("packet chunk count", 3, 2)
    );
    let big = packet(0, &[0; 65]);
    assert_eq!(
        decode_with(&big, &l),
        too_large("packet body length", 65, 64)
    );
}

/// A packet with one chunk of `kind`, followed by enough zero bytes for any
/// fixed-size chunk.
fn one_chunk_of_kind(kind: u8) -> Vec<u8> {
    let mut body = vec![kind, 0, 0, 0];
    body.resize(64, 0);
    packet(1, &body)
}

#[test]
fn chunk_kinds_are_known_reserved_or_unknown() {
    let known = [
        ChunkKind::EAGER,
        ChunkKind::RDV_REQUEST,
        ChunkKind::CLEAR_TO_SEND,
        ChunkKind::RDV_DATA,
        ChunkKind::ACK,
        ChunkKind::CREDIT,
    ];
    let reserved = [
        ChunkKind::RMA_PUT,
        ChunkKind::RMA_GET,
        ChunkKind::RMA_GET_REPLY,
        ChunkKind::RMA_NOTIFY,
        ChunkKind::FORWARD,
    ];
    for kind in 0..=u8::MAX {
        let got = decode_with(&one_chunk_of_kind(kind), &Limits::default());
        if known.contains(&ChunkKind(kind)) {
            // Known kinds get past the kind check; the zero padding then
            // leaves trailing bytes.
            assert!(
                matches!(
                    got,
                    Err(DecodeError::TrailingBytes {
                        field: "packet body",
                        ..
                    })
                ),
                "kind {kind:#04x}: {got:?}"
            );
        } else if reserved.contains(&ChunkKind(kind)) {
            assert_eq!(got, Err(DecodeError::UnsupportedKind(kind)));
        } else {
            assert_eq!(got, Err(DecodeError::UnknownKind(kind)));
        }
    }
    for kind in [0x10, 0x11, 0x12, 0x13, 0x20] {
        assert_eq!(
            decode_with(&one_chunk_of_kind(kind), &Limits::default()),
            Err(DecodeError::UnsupportedKind(kind))
        );
    }
}

#[test]
fn bad_packet_version_is_unsupported() {
    for version in (0..=u8::MAX).filter(|&v| v != PacketHeader::VERSION) {
        let mut bytes = packet(0, &[]);
        bytes[2] = version;
        let expected = DecodeError::UnsupportedVersion {
            found: version.into(),
            supported: PacketHeader::VERSION.into(),
        };
        assert_eq!(
            PacketHeader::decode(&bytes, &Limits::default()),
            Err(expected.clone())
        );
        assert_eq!(decode_with(&bytes, &Limits::default()), Err(expected));
    }
}

#[test]
fn bad_packet_magic_is_rejected() {
    let mut bytes = packet(0, &[]);
    bytes[0] = b'X';
    assert_eq!(
        decode_with(&bytes, &Limits::default()),
        Err(DecodeError::BadMagic {
            field: "packet magic",
            found: [b'X', b'V', 0, 0]
        })
    );
}

#[test]
fn nonzero_reserved_packet_fields_are_rejected() {
    for bit in 0..8 {
        let mut bytes = packet(0, &[]);
        bytes[3] = 1 << bit;
        assert_eq!(
            decode_with(&bytes, &Limits::default()),
            Err(DecodeError::ReservedNotZero("packet flags"))
        );
    }
    for byte in [6, 7] {
        let mut bytes = packet(0, &[]);
        bytes[byte] = 0x80;
        assert_eq!(
            decode_with(&bytes, &Limits::default()),
            Err(DecodeError::ReservedNotZero("packet reserved"))
        );
    }
}

#[test]
fn trailing_bytes_are_rejected_after_packet_body_hello_and_proof() {
    let ack = [ChunkKind::ACK.0, 0, 0, 0, 1, 0, 0, 0];
    let mut bytes = packet(1, &ack);
    assert_eq!(decode_with(&bytes, &Limits::default()), Ok(1));
    bytes.push(0);
    assert_eq!(
        decode_with(&bytes, &Limits::default()),
        Err(DecodeError::TrailingBytes {
            field: "packet",
            count: 1
        })
    );
    // Body longer than its chunks.
    let mut body = ack.to_vec();
    body.extend_from_slice(&[0, 0, 0]);
    assert_eq!(
        decode_with(&packet(1, &body), &Limits::default()),
        Err(DecodeError::TrailingBytes {
            field: "packet body",
            count: 3
        })
    );

    let mut hello = Vec::new();
    Hello {
        version: PROTOCOL_VERSION,
        job_id: 1,
        rank: 2,
        nonce: [3; 16],
    }
    .encode(&mut hello);
    hello.push(9);
    assert_eq!(
        Hello::decode(&hello),
        Err(DecodeError::TrailingBytes {
            field: "hello",
            count: 1
        })
    );
    let mut proof = Vec::new();
    Proof { mac: [4; 32] }.encode(&mut proof);
    proof.extend_from_slice(&[1, 2]);
    assert_eq!(
        Proof::decode(&proof),
        Err(DecodeError::TrailingBytes {
            field: "proof",
            count: 2
        })
    );
}

#[test]
fn fewer_chunks_than_announced_is_truncated() {
    let ack = [ChunkKind::ACK.0, 0, 0, 0, 1, 0, 0, 0];
    assert!(matches!(
        decode_with(&packet(2, &ack), &Limits::default()),
        Err(DecodeError::Truncated {
            field: "chunk kind",
            ..
        })
    ));
}

#[test]
fn invalid_flags_are_rejected_per_kind() {
    let valid = common::valid_piece_bits();
    let refused = |bits: u8| {
        Err(DecodeError::InvalidFlags {
            field: "piece flags",
            value: bits.into(),
        })
    };
    for bits in 0..=u8::MAX {
        let mut body = eager_header(0);
        body[1] = bits;
        let got = decode_with(&packet(1, &body), &Limits::default());
        if valid.contains(&bits) {
            assert_eq!(got, Ok(1), "piece flags {bits:#x}");
        } else {
            assert_eq!(got, refused(bits));
        }
        // A rendezvous request takes the same piece flags, and bit 7 too:
        // the request is readable.
        let mut body = rdv_request(0);
        body[1] = bits;
        let got = decode_with(&packet(1, &body), &Limits::default());
        if valid.contains(&(bits & 0x7f)) {
            assert_eq!(got, Ok(1), "rdv request flags {bits:#x}");
            let bytes = packet(1, &body);
            let decoded = Packet::decode(&bytes, &Limits::default())
                .expect("checked above")
                .chunks()
                .next()
                .expect("one chunk");
            let Chunk::RdvRequest(r) = decoded else {
                panic!("not a rendezvous request: {decoded:?}");
            };
            assert_eq!(
                (r.flags.bits(), r.readable),
                (bits & 0x7f, bits & 0x80 != 0)
            );
        } else {
            assert_eq!(got, refused(bits));
        }
        let mut body = cts(0, 0);
        body[1] = bits;
        let got = decode_with(&packet(1, &body), &Limits::default());
        if bits <= 2 {
            assert_eq!(got, Ok(1));
        } else {
            assert_eq!(
                got,
                Err(DecodeError::InvalidFlags {
                    field: "clear-to-send flags",
                    value: bits.into()
                })
            );
        }
    }
    for (kind, field) in [
        (ChunkKind::RDV_DATA, "rdv data flags"),
        (ChunkKind::ACK, "ack flags"),
        (ChunkKind::CREDIT, "credit flags"),
    ] {
        let mut body = [kind.0, 0, 0, 0, 0, 0, 0, 0].to_vec();
        body.resize(if kind == ChunkKind::RDV_DATA { 20 } else { 8 }, 0);
        assert_eq!(decode_with(&packet(1, &body), &Limits::default()), Ok(1));
        body[1] = 0x40;
        assert_eq!(
            decode_with(&packet(1, &body), &Limits::default()),
            Err(DecodeError::InvalidFlags { field, value: 0x40 })
        );
    }
}

/// The accepted piece flags are exactly: no unknown bit, a defined send
/// mode, the tagged bit only on a first-and-last piece, and the abort bit
/// only on a last piece that is not tagged. The constructors produce
/// accepted values that read back as given.
#[test]
fn piece_flags_accept_exactly_the_documented_values() {
    const FIRST_LAST: u8 = 0x03;
    const TAGGED: u8 = 0x20;
    const ABORT: u8 = 0x40;
    for bits in 0..=u8::MAX {
        let documented = bits & !0x7f == 0
            && (bits >> 2) & 3 != 3
            && (bits & TAGGED == 0 || bits & FIRST_LAST == FIRST_LAST)
            && (bits & ABORT == 0 || (bits & PieceFlags::LAST != 0 && bits & TAGGED == 0));
        let decoded = PieceFlags::from_bits(bits);
        assert_eq!(decoded.is_ok(), documented, "bits {bits:#x}");
        if let Ok(flags) = decoded {
            assert_eq!(flags.bits(), bits);
        }
    }
    let sends = [SendMode::Safer, SendMode::Later, SendMode::Cheaper];
    let recvs = [ReceiveMode::Express, ReceiveMode::Cheaper];
    for first in [false, true] {
        for last in [false, true] {
            for send in sends {
                for recv in recvs {
                    let flags = PieceFlags::new(first, last, send, recv);
                    assert_eq!(PieceFlags::from_bits(flags.bits()), Ok(flags));
                    assert_eq!(
                        (
                            flags.first(),
                            flags.last(),
                            flags.send_mode(),
                            flags.receive_mode()
                        ),
                        (first, last, send, recv)
                    );
                    assert!(!flags.tagged() && !flags.aborted());
                }
            }
        }
    }
    let t = PieceFlags::TAGGED;
    assert_eq!(PieceFlags::from_bits(t.bits()), Ok(t));
    assert!(t.tagged() && t.first() && t.last());
    assert_eq!(
        (t.send_mode(), t.receive_mode()),
        (SendMode::Cheaper, ReceiveMode::Cheaper)
    );
    let a = PieceFlags::ABORT;
    assert_eq!(PieceFlags::from_bits(a.bits()), Ok(a));
    assert!(a.aborted() && a.last() && !a.first() && !a.tagged());
    assert!(!t.aborted());
    assert!(CtsFlags::REJECT.rejected() && !CtsFlags::ACCEPT.rejected());
}
