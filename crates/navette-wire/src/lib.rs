//! The Navette wire format: what travels on a rail, with no I/O.
//!
//! A **packet** is a 12-byte [`PacketHeader`] followed by a body of chunks;
//! a packet of one eager chunk has a shorter form for framed transports, the
//! lone packet ([`LONE`]).
//! A **chunk** is one protocol item: eager data, a rendezvous request, a
//! clear-to-send, rendezvous data, an ack or a credit grant. Kinds for RMA
//! operations and forwarded blocks are reserved ([`ChunkKind`]) and rejected
//! by this version's decoder. Every rail opens with a [`handshake`].
//!
//! All integers are little-endian. Decoding is strict, in the manner of
//! rustls: a shrinking [`Reader`] takes fields one by one, every length is
//! checked against the bytes present and against [`Limits`], unknown kinds,
//! flags and versions are typed errors naming the field, trailing bytes are
//! rejected, and nothing is allocated while decoding.
//!
//! ```
//! use navette_wire::{Chunk, Eager, EagerHeader, Limits, Packet, PieceFlags};
//!
//! let data = b"hello";
//! let chunk = Chunk::Eager(Eager {
//!     header: EagerHeader {
//!         channel: 0, flags: PieceFlags::TAGGED, seq: 1, msg: 7, tag: 42,
//!         len: data.len() as u32,
//!     },
//!     data,
//! });
//! let mut bytes = Vec::new();
//! navette_wire::encode_packet(&[chunk], &mut bytes);
//! let packet = Packet::decode(&bytes, &Limits::default()).unwrap();
//! assert_eq!(packet.chunks().next(), Some(chunk));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod chunk;
mod codec;
mod copy;
mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod handshake;
mod limits;
mod packet;
mod table;

pub use chunk::{
    Ack, Chunk, ChunkKind, ClearToSend, Credit, CtsFlags, Eager, EagerHeader, PieceFlags, RdvData,
    RdvDataHeader, RdvRequest, ReceiveMode, SendMode,
};
pub use codec::Reader;
pub use copy::copy_to_start;
pub use error::DecodeError;
pub use limits::Limits;
pub use packet::{
    Chunks, EagerChunks, FixedEagers, LONE, LONE_HEADER_LEN, Packet, PacketHeader, encode_lone,
    encode_lone_header, encode_packet,
};
pub use table::{PieceTable, TABLE_MOST_PIECE_LEN, TABLE_MOST_PIECES};
