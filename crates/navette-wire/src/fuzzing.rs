//! The decoding entry point shared by the `decode` fuzz target
//! (`fuzz/fuzz_targets/decode.rs`) and the corpus replay test
//! (`tests/corpus.rs`), so that both exercise exactly the same code.
//!
//! Not part of the stable API: hidden from the docs, free to change.

use crate::handshake::{Hello, Proof};
use crate::{Chunk, DecodeError, Limits, Packet, PacketHeader, encode_packet};

/// What each decoder made of one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuzzOutcome {
    /// [`Packet::decode`] under [`Limits::default`]: the number of chunks, or the error.
    pub packet: Result<usize, DecodeError>,
    /// [`PacketHeader::decode`] under [`Limits::default`].
    pub header: Result<PacketHeader, DecodeError>,
    /// [`Hello::decode`].
    pub hello: Result<Hello, DecodeError>,
    /// [`Proof::decode`].
    pub proof: Result<Proof, DecodeError>,
}

impl FuzzOutcome {
    /// Whether a whole-message decoder (packet, hello or proof) accepted the input.
    ///
    /// The header decoder is left out: it reads only a prefix by design.
    pub fn accepted(&self) -> bool {
        self.packet.is_ok() || self.hello.is_ok() || self.proof.is_ok()
    }
}

/// Limits small enough that fuzzed inputs reach the `TooLarge` paths.
const TIGHT: Limits = Limits {
    max_body_len: 512,
    max_chunks: 8,
    max_eager_len: 64,
    max_fragment_len: 128,
    max_message_len: 4096,
};

/// Checks that [`Packet::decode_single`] agrees with [`Packet::decode`]:
/// the same chunk for a valid packet of one chunk, `None` for a valid
/// header announcing another count, the same error otherwise.
fn check_single(bytes: &[u8], limits: &Limits) {
    let single = Packet::decode_single(bytes, limits);
    match PacketHeader::decode(bytes, limits) {
        Ok(h) if h.chunk_count != 1 => assert_eq!(
            single,
            Ok(None),
            "single chunk of a packet of {}",
            h.chunk_count
        ),
        _ => {
            let full = Packet::decode(bytes, limits).map(|p| p.chunks().next());
            assert_eq!(
                single, full,
                "single-chunk decoding disagrees with packet decoding"
            );
        }
    }
}

/// Feeds `bytes` to every decoder and checks the decoders' invariants.
///
/// # Panics
/// Only on a decoder bug, which is what the fuzzer looks for: an accepted
/// input that does not re-encode to the same bytes, a chunk iterator that
/// disagrees with the header, a packet accepted under tight limits but
/// rejected under the (larger) default ones, or a packet whose header
/// decoder disagrees with it (lone packets have no such header).
pub fn fuzz_decode(bytes: &[u8]) -> FuzzOutcome {
    let limits = Limits::default();
    let packet = Packet::decode(bytes, &limits).map(|p| check_packet(&p, bytes));
    if Packet::decode(bytes, &TIGHT).is_ok() {
        assert!(
            packet.is_ok(),
            "accepted under tight limits, rejected under default ones"
        );
    }
    let header = PacketHeader::decode(bytes, &limits);
    check_single(bytes, &limits);
    let lone = bytes.first() == Some(&crate::LONE);
    if packet.is_ok() && !lone {
        let h = header
            .as_ref()
            .expect("a decoded packet has a decodable header");
        assert_eq!(
            h.total_len(),
            bytes.len(),
            "header length disagrees with packet"
        );
    }
    let hello = Hello::decode(bytes);
    if let Ok(h) = &hello {
        let mut out = Vec::with_capacity(Hello::LEN);
        h.encode(&mut out);
        assert_eq!(out, bytes, "hello does not re-encode to its input");
    }
    let proof = Proof::decode(bytes);
    if let Ok(p) = &proof {
        let mut out = Vec::with_capacity(Proof::LEN);
        p.encode(&mut out);
        assert_eq!(out, bytes, "proof does not re-encode to its input");
    }
    FuzzOutcome {
        packet,
        header,
        hello,
        proof,
    }
}

/// Walks the chunks of an accepted packet, re-encodes them and returns their number.
fn check_packet(packet: &Packet<'_>, bytes: &[u8]) -> usize {
    let chunks: Vec<Chunk<'_>> = packet.chunks().collect();
    assert_eq!(
        chunks.len(),
        usize::from(packet.header().chunk_count),
        "chunk iterator disagrees with the header"
    );
    let mut out = Vec::with_capacity(bytes.len());
    match (packet.is_lone(), chunks.as_slice()) {
        (true, [Chunk::Eager(eager)]) => crate::encode_lone(eager, &mut out),
        (true, _) => panic!("a lone packet of another chunk than one eager"),
        (false, _) => encode_packet(&chunks, &mut out),
    }
    assert_eq!(out, bytes, "packet does not re-encode to its input");
    chunks.len()
}
