//! The Hello/Proof handshake: encodings are strict, and a proof verifies
//! only with the right key over this very exchange, in the right order.

use navette_wire::DecodeError;
use navette_wire::handshake::{HandshakeError, Hello, PROTOCOL_VERSION, Proof};
use proptest::prelude::*;

fn hello() -> impl Strategy<Value = Hello> {
    (any::<u64>(), any::<u32>(), any::<[u8; 16]>()).prop_map(|(job_id, rank, nonce)| Hello {
        version: PROTOCOL_VERSION,
        job_id,
        rank,
        nonce,
    })
}

/// Two hellos of one job with different nonces, as two honest ranks send.
fn pair() -> impl Strategy<Value = (Hello, Hello)> {
    (hello(), any::<u32>(), any::<[u8; 16]>())
        .prop_filter("nonces must differ", |(a, _, nonce)| a.nonce != *nonce)
        .prop_map(|(a, rank, nonce)| {
            let b = Hello { rank, nonce, ..a };
            (a, b)
        })
}

/// A job key. Keys have one fixed length: HMAC pads short keys with zeros,
/// so `b"k"` and `b"k\0"` are the same key (documented on `Proof::compute`).
fn key() -> impl Strategy<Value = Vec<u8>> {
    any::<[u8; 32]>().prop_map(Vec::from)
}

/// Keys of any length, to check that long ones (hashed by HMAC) work too.
fn any_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..100)
}

fn encode_hello(h: &Hello) -> Vec<u8> {
    let mut out = Vec::new();
    h.encode(&mut out);
    out
}

fn encode_proof(p: &Proof) -> Vec<u8> {
    let mut out = Vec::new();
    p.encode(&mut out);
    out
}

fn is_bad_proof(r: Result<(), HandshakeError>, claimed: u32) -> bool {
    matches!(r, Err(HandshakeError::BadProof { rank }) if rank == claimed)
}

proptest! {
    #[test]
    fn hello_and_proof_round_trip(h in hello(), mac in any::<[u8; 32]>()) {
        let bytes = encode_hello(&h);
        prop_assert_eq!(bytes.len(), Hello::LEN);
        prop_assert_eq!(Hello::decode(&bytes), Ok(h));
        let p = Proof { mac };
        let bytes = encode_proof(&p);
        prop_assert_eq!(bytes.len(), Proof::LEN);
        prop_assert_eq!(Proof::decode(&bytes), Ok(p));
    }

    #[test]
    fn every_strict_prefix_of_hello_and_proof_is_rejected(h in hello(), mac in any::<[u8; 32]>()) {
        let bytes = encode_hello(&h);
        for end in 0..bytes.len() {
            let err = Hello::decode(&bytes[..end]).unwrap_err();
            prop_assert!(matches!(err, DecodeError::Truncated { .. }), "{:?}", err);
        }
        let bytes = encode_proof(&Proof { mac });
        for end in 0..bytes.len() {
            let err = Proof::decode(&bytes[..end]).unwrap_err();
            prop_assert!(matches!(err, DecodeError::Truncated { .. }), "{:?}", err);
        }
    }

    #[test]
    fn hello_of_another_version_is_rejected(h in hello(), version in any::<u16>()) {
        prop_assume!(version != PROTOCOL_VERSION);
        let bytes = encode_hello(&Hello { version, ..h });
        prop_assert_eq!(
            Hello::decode(&bytes),
            Err(DecodeError::UnsupportedVersion { found: version, supported: PROTOCOL_VERSION })
        );
    }

    #[test]
    fn a_proof_verifies_with_the_right_key_in_the_right_order((a, b) in pair(), k in any_key()) {
        a.check_peer(&b).unwrap();
        b.check_peer(&a).unwrap();
        // Each side proves to the other; the proofs travel encoded.
        let from_a = Proof::decode(&encode_proof(&Proof::compute(&k, &a, &b))).unwrap();
        let from_b = Proof::decode(&encode_proof(&Proof::compute(&k, &b, &a))).unwrap();
        prop_assert!(from_a.verify(&k, &a, &b).is_ok());
        prop_assert!(from_b.verify(&k, &b, &a).is_ok());
        prop_assert_ne!(from_a, from_b);
    }

    #[test]
    fn a_proof_fails_with_a_wrong_key((a, b) in pair(), k in key(), other in key()) {
        prop_assume!(k != other);
        let proof = Proof::compute(&k, &a, &b);
        prop_assert!(is_bad_proof(proof.verify(&other, &a, &b), a.rank));
    }

    /// Replaying the peer's own proof back to it (or checking a proof with
    /// the hellos swapped) fails.
    #[test]
    fn a_proof_fails_with_swapped_hellos((a, b) in pair(), k in key()) {
        let from_b = Proof::compute(&k, &b, &a);
        // An impostor claiming to be `a` echoes b's proof back to b.
        prop_assert!(is_bad_proof(from_b.verify(&k, &a, &b), a.rank));
        let from_a = Proof::compute(&k, &a, &b);
        prop_assert!(is_bad_proof(from_a.verify(&k, &b, &a), b.rank));
    }

    /// A proof recorded in one exchange does not verify in another.
    #[test]
    fn a_proof_fails_with_a_different_nonce(
        (a, b) in pair(),
        k in key(),
        nonce in any::<[u8; 16]>(),
        which in any::<bool>(),
    ) {
        let proof = Proof::compute(&k, &a, &b);
        let (a2, b2) = if which {
            (Hello { nonce, ..a }, b)
        } else {
            (a, Hello { nonce, ..b })
        };
        prop_assume!(a2 != a || b2 != b);
        prop_assert!(is_bad_proof(proof.verify(&k, &a2, &b2), a.rank));
    }

    /// A peer that echoes our own hello and then our own proof is refused.
    #[test]
    fn a_reflected_hello_and_proof_fail(a in hello(), k in key()) {
        let ours = Proof::compute(&k, &a, &a);
        prop_assert!(is_bad_proof(ours.verify(&k, &a, &a), a.rank));
        // Same nonce, other fields changed: still refused.
        let b = Hello { rank: a.rank.wrapping_add(1), ..a };
        let theirs = Proof::compute(&k, &b, &a);
        prop_assert!(is_bad_proof(theirs.verify(&k, &b, &a), b.rank));
    }

    #[test]
    fn check_peer_rejects_another_job(a in hello(), job in any::<u64>()) {
        prop_assume!(job != a.job_id);
        let peer = Hello { job_id: job, rank: a.rank.wrapping_add(1), ..a };
        let got = a.check_peer(&peer);
        let ok = matches!(
            got,
            Err(HandshakeError::WrongJob { found, expected }) if found == job && expected == a.job_id
        );
        prop_assert!(ok, "{:?}", got);
    }

    #[test]
    fn check_peer_rejects_our_own_rank(a in hello(), nonce in any::<[u8; 16]>()) {
        let reflected = Hello { nonce, ..a };
        let got = a.check_peer(&reflected);
        let ok = matches!(got, Err(HandshakeError::OwnRank { rank }) if rank == a.rank);
        prop_assert!(ok, "{:?}", got);
    }

    #[test]
    fn bad_magic_is_rejected(h in hello(), at in 0usize..4, flip in 1u8..=255) {
        let mut bytes = encode_hello(&h);
        bytes[at] ^= flip;
        let got = Hello::decode(&bytes);
        let ok = matches!(got, Err(DecodeError::BadMagic { field: "hello magic", .. }));
        prop_assert!(ok, "{:?}", got);
        let mut bytes = encode_proof(&Proof { mac: h.nonce.repeat(2).try_into().unwrap() });
        bytes[at] ^= flip;
        let got = Proof::decode(&bytes);
        let ok = matches!(got, Err(DecodeError::BadMagic { field: "proof magic", .. }));
        prop_assert!(ok, "{:?}", got);
    }
}

#[test]
fn handshake_errors_name_what_failed() {
    let a = Hello {
        version: PROTOCOL_VERSION,
        job_id: 0x11,
        rank: 3,
        nonce: [1; 16],
    };
    let b = Hello {
        job_id: 0x22,
        rank: 4,
        ..a
    };
    let err = a.check_peer(&b).unwrap_err();
    assert_eq!(err.to_string(), "peer is in job 0x22, expected 0x11");
    let err = Proof { mac: [0; 32] }
        .verify(
            b"key",
            &a,
            &Hello {
                nonce: [2; 16],
                ..a
            },
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "peer rank 3 failed to prove the job key");
}

/// HMAC's zero padding of short keys, pinned so that a change of the MAC
/// construction is noticed (and the doc on `Proof::compute` updated).
#[test]
fn keys_differing_by_trailing_zeros_are_the_same_key() {
    let a = Hello {
        version: PROTOCOL_VERSION,
        job_id: 1,
        rank: 0,
        nonce: [1; 16],
    };
    let b = Hello {
        rank: 1,
        nonce: [2; 16],
        ..a
    };
    let proof = Proof::compute(b"k", &a, &b);
    assert!(proof.verify(b"k\0", &a, &b).is_ok());
    assert!(proof.verify(b"K", &a, &b).is_err());
}
