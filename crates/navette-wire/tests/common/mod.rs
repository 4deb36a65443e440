//! Proptest strategies shared by the wire tests.
//!
//! A [`Chunk`] borrows its data, so strategies generate an owned [`Spec`]
//! and tests borrow chunks from it with [`Spec::chunk`].

#![allow(dead_code, unreachable_pub)]

use navette_wire::{
    Ack, Chunk, ClearToSend, Credit, CtsFlags, Eager, EagerHeader, Limits, PieceFlags, RdvData,
    RdvDataHeader, RdvRequest, ReceiveMode, SendMode, encode_packet,
};
use proptest::prelude::*;

/// An owned chunk.
#[derive(Clone, Debug)]
pub enum Spec {
    Eager {
        header: EagerHeader,
        data: Vec<u8>,
    },
    RdvRequest(RdvRequest),
    ClearToSend(ClearToSend),
    RdvData {
        header: RdvDataHeader,
        data: Vec<u8>,
    },
    Ack(Ack),
    Credit(Credit),
}

impl Spec {
    pub fn chunk(&self) -> Chunk<'_> {
        match self {
            Self::Eager { header, data } => Chunk::Eager(Eager {
                header: *header,
                data,
            }),
            Self::RdvRequest(r) => Chunk::RdvRequest(*r),
            Self::ClearToSend(c) => Chunk::ClearToSend(*c),
            Self::RdvData { header, data } => Chunk::RdvData(RdvData {
                header: *header,
                data,
            }),
            Self::Ack(a) => Chunk::Ack(*a),
            Self::Credit(c) => Chunk::Credit(*c),
        }
    }

    /// Offsets, from the start of the chunk, of its length-like fields and
    /// their width in bytes.
    pub fn length_fields(&self) -> &'static [(usize, usize)] {
        match self {
            Self::Eager { .. } => &[(20, 4)],
            Self::RdvRequest(_) => &[(24, 8)],
            Self::ClearToSend(_) => &[(12, 8), (20, 8)],
            Self::RdvData { .. } => &[(8, 8), (16, 4)],
            Self::Ack(_) | Self::Credit(_) => &[],
        }
    }
}

pub fn chunks(specs: &[Spec]) -> Vec<Chunk<'_>> {
    specs.iter().map(Spec::chunk).collect()
}

pub fn encode(specs: &[Spec]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_packet(&chunks(specs), &mut out);
    out
}

/// Offsets and widths of every length field of the packet encoding `specs`,
/// the header's chunk count and body length included.
pub fn length_fields(specs: &[Spec]) -> Vec<(usize, usize)> {
    let mut fields = vec![(4, 2), (8, 4)];
    let mut at = navette_wire::PacketHeader::LEN;
    for spec in specs {
        fields.extend(spec.length_fields().iter().map(|&(o, w)| (at + o, w)));
        at += spec.chunk().encoded_len();
    }
    fields
}

pub fn send_mode() -> impl Strategy<Value = SendMode> {
    prop_oneof![
        Just(SendMode::Safer),
        Just(SendMode::Later),
        Just(SendMode::Cheaper)
    ]
}

pub fn receive_mode() -> impl Strategy<Value = ReceiveMode> {
    prop_oneof![Just(ReceiveMode::Express), Just(ReceiveMode::Cheaper)]
}

/// Every raw value that [`PieceFlags::from_bits`] accepts.
pub fn valid_piece_bits() -> Vec<u8> {
    (0..=u8::MAX)
        .filter(|&b| PieceFlags::from_bits(b).is_ok())
        .collect()
}

/// Piece flags built by the constructors, plus every other valid raw value.
pub fn piece_flags() -> impl Strategy<Value = PieceFlags> {
    prop_oneof![
        (any::<bool>(), any::<bool>(), send_mode(), receive_mode())
            .prop_map(|(f, l, s, r)| PieceFlags::new(f, l, s, r)),
        Just(PieceFlags::TAGGED),
        Just(PieceFlags::ABORT),
        prop::sample::select(valid_piece_bits())
            .prop_map(|b| PieceFlags::from_bits(b).expect("selected from the valid values")),
    ]
}

pub fn cts_flags() -> impl Strategy<Value = CtsFlags> {
    prop_oneof![
        Just(CtsFlags::ACCEPT),
        Just(CtsFlags::REJECT),
        Just(CtsFlags::READ)
    ]
}

/// A u64 within `max`, biased toward the edges.
pub fn bounded(max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(max), 0..=max]
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..48)
}

/// Any chunk that decodes under [`Limits::default`].
pub fn spec() -> impl Strategy<Value = Spec> {
    let max = Limits::default().max_message_len;
    prop_oneof![
        (
            any::<u16>(),
            piece_flags(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            data()
        )
            .prop_map(|(channel, flags, seq, msg, tag, mut data)| {
                if flags.aborted() {
                    // An abort is an empty piece.
                    data.clear();
                }
                Spec::Eager {
                    header: EagerHeader {
                        channel,
                        flags,
                        seq,
                        msg,
                        tag,
                        len: u32::try_from(data.len()).expect("short data"),
                    },
                    data,
                }
            }),
        (
            any::<u16>(),
            piece_flags(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            bounded(max),
            any::<bool>(),
        )
            .prop_map(
                |(channel, flags, seq, msg, tag, send_id, total_len, readable)| {
                    Spec::RdvRequest(RdvRequest {
                        channel,
                        flags,
                        seq,
                        msg,
                        tag,
                        send_id,
                        total_len,
                        readable,
                    })
                }
            ),
        (
            any::<u16>(),
            cts_flags(),
            any::<u32>(),
            any::<u32>(),
            bounded(max),
            bounded(max)
        )
            .prop_map(|(channel, flags, send_id, recv_id, offset, len)| {
                Spec::ClearToSend(ClearToSend {
                    channel,
                    flags,
                    send_id,
                    recv_id,
                    offset,
                    len,
                })
            }),
        (any::<u16>(), any::<u32>(), bounded(max), data()).prop_map(
            |(channel, recv_id, offset, data)| Spec::RdvData {
                header: RdvDataHeader {
                    channel,
                    recv_id,
                    offset,
                    len: u32::try_from(data.len()).expect("short data"),
                },
                data,
            }
        ),
        (any::<u16>(), any::<u32>()).prop_map(|(channel, seq)| Spec::Ack(Ack { channel, seq })),
        (any::<u16>(), any::<u32>())
            .prop_map(|(channel, credits)| Spec::Credit(Credit { channel, credits })),
    ]
}

/// A packet body: up to 12 chunks of any kinds.
pub fn specs() -> impl Strategy<Value = Vec<Spec>> {
    prop::collection::vec(spec(), 0..12)
}
