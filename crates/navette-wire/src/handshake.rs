//! The connection handshake.
//!
//! Each side of a new rail sends a [`Hello`] (protocol version, job id, rank
//! and a fresh random nonce), then, once it has the peer's hello, a
//! [`Proof`]: HMAC-SHA256 under the job key over both hellos, its own first.
//! A side accepts the rail only if the peer's proof verifies, which shows
//! that the peer holds the job key and answered this very exchange (the
//! nonces defeat replay). The comparison is constant-time.
//!
//! Layouts: hello = magic `"NAVH"`, version u16, job id u64, rank u32,
//! nonce `[u8; 16]`; proof = magic `"NAVP"`, mac `[u8; 32]`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::DecodeError;
use crate::codec::{Reader, put_u16, put_u32, put_u64};

/// The handshake protocol version.
pub const PROTOCOL_VERSION: u16 = 1;

const HELLO_MAGIC: [u8; 4] = *b"NAVH";
const PROOF_MAGIC: [u8; 4] = *b"NAVP";
const PROOF_CONTEXT: &[u8] = b"navette handshake proof v1";

/// The first message on every rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version spoken by the sender.
    pub version: u16,
    /// The job this rank belongs to.
    pub job_id: u64,
    /// The sender's rank.
    pub rank: u32,
    /// Fresh random bytes for this exchange.
    pub nonce: [u8; 16],
}

/// The proof that the sender holds the job key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    /// HMAC-SHA256 over both hellos.
    pub mac: [u8; 32],
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The bytes are not a well-formed handshake message.
    #[error("malformed handshake: {0}")]
    Decode(#[from] DecodeError),
    /// The peer belongs to another job.
    #[error("peer is in job {found:#x}, expected {expected:#x}")]
    WrongJob {
        /// The peer's job id.
        found: u64,
        /// Ours.
        expected: u64,
    },
    /// The peer claims our own rank (a reflection of our own messages).
    #[error("peer claims our own rank {rank}")]
    OwnRank {
        /// The rank claimed.
        rank: u32,
    },
    /// The peer's proof does not verify: it does not hold the job key.
    #[error("peer rank {rank} failed to prove the job key")]
    BadProof {
        /// The rank the peer claimed.
        rank: u32,
    },
}

impl Hello {
    /// Encoded size.
    pub const LEN: usize = 4 + 2 + 8 + 4 + 16;

    /// Appends the hello.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&HELLO_MAGIC);
        put_u16(out, self.version);
        put_u64(out, self.job_id);
        put_u32(out, self.rank);
        out.extend_from_slice(&self.nonce);
    }

    /// Decodes exactly one hello and checks its version.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        magic(&mut r, HELLO_MAGIC, "hello magic")?;
        let version = r.u16("hello version")?;
        if version != PROTOCOL_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: PROTOCOL_VERSION,
            });
        }
        let hello = Self {
            version,
            job_id: r.u64("hello job id")?,
            rank: r.u32("hello rank")?,
            nonce: r.array("hello nonce")?,
        };
        r.finish("hello")?;
        Ok(hello)
    }

    /// Checks that `peer` is in our job (call on receipt of the peer's hello).
    ///
    /// A peer claiming our own rank is refused: a rank never opens a rail to
    /// itself, and accepting it would let an attacker reflect our own hello
    /// and proof back at us from another connection.
    pub fn check_peer(&self, peer: &Self) -> Result<(), HandshakeError> {
        if peer.rank == self.rank {
            return Err(HandshakeError::OwnRank { rank: peer.rank });
        }
        if peer.job_id != self.job_id {
            return Err(HandshakeError::WrongJob {
                found: peer.job_id,
                expected: self.job_id,
            });
        }
        Ok(())
    }
}

impl Proof {
    /// Encoded size.
    pub const LEN: usize = 4 + 32;

    /// The proof `sender` sends once it has `receiver`'s hello.
    ///
    /// `job_key` should be a fixed-length random secret (32 bytes, say). As
    /// with any HMAC, keys of up to 64 bytes that differ only by trailing
    /// zero bytes are the same key: `b"k"` and `b"k\0"` prove each other.
    pub fn compute(job_key: &[u8], sender: &Hello, receiver: &Hello) -> Self {
        Self {
            mac: transcript_mac(job_key, sender, receiver)
                .finalize()
                .into_bytes()
                .into(),
        }
    }

    /// Verifies, in constant time, the proof received from `sender`.
    ///
    /// Fails with [`HandshakeError::BadProof`] when the MAC does not verify,
    /// and also when both hellos carry the same nonce: a peer that echoes our
    /// own hello back would otherwise pass by echoing our own proof back
    /// (a reflection), since both transcripts would then be identical.
    pub fn verify(
        &self,
        job_key: &[u8],
        sender: &Hello,
        receiver: &Hello,
    ) -> Result<(), HandshakeError> {
        if sender.nonce == receiver.nonce {
            return Err(HandshakeError::BadProof { rank: sender.rank });
        }
        transcript_mac(job_key, sender, receiver)
            .verify_slice(&self.mac)
            .map_err(|_| HandshakeError::BadProof { rank: sender.rank })
    }

    /// Appends the proof.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&PROOF_MAGIC);
        out.extend_from_slice(&self.mac);
    }

    /// Decodes exactly one proof.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        magic(&mut r, PROOF_MAGIC, "proof magic")?;
        let proof = Self {
            mac: r.array("proof mac")?,
        };
        r.finish("proof")?;
        Ok(proof)
    }
}

fn transcript_mac(job_key: &[u8], sender: &Hello, receiver: &Hello) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(job_key)
        .expect("HMAC accepts keys of any length");
    let mut transcript = Vec::with_capacity(PROOF_CONTEXT.len() + 2 * Hello::LEN);
    transcript.extend_from_slice(PROOF_CONTEXT);
    sender.encode(&mut transcript);
    receiver.encode(&mut transcript);
    mac.update(&transcript);
    mac
}

fn magic(r: &mut Reader<'_>, expected: [u8; 4], field: &'static str) -> Result<(), DecodeError> {
    let found = r.array::<4>(field)?;
    if found != expected {
        return Err(DecodeError::BadMagic { field, found });
    }
    Ok(())
}
