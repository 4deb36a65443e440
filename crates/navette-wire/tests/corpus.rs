//! The seed corpus of the `decode` fuzz target, generated and replayed.
//!
//! [`seeds`] is the source of truth for `tests/corpus/decode/`; see the
//! README there. Every file in that folder is replayed through
//! [`fuzz_decode`], the function the fuzz target calls: `valid-*` seeds must
//! be accepted, `invalid-*` seeds rejected, and any other file (a crash
//! reproduction copied from `fuzz/artifacts/`, say) must merely not panic.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Once;

use navette_wire::fuzzing::fuzz_decode;
use navette_wire::handshake::{Hello, PROTOCOL_VERSION, Proof};
use navette_wire::{
    Ack, Chunk, ChunkKind, ClearToSend, Credit, CtsFlags, Eager, EagerHeader, PacketHeader,
    PieceFlags, RdvData, RdvDataHeader, RdvRequest, ReceiveMode, SendMode, encode_packet,
};

/// Set to regenerate the committed corpus from [`seeds`].
const REGENERATE: &str = "NAVETTE_REGENERATE_CORPUS";

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/decode")
}

fn packet(chunks: &[Chunk<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_packet(chunks, &mut out);
    out
}

fn eager(data: &[u8]) -> Chunk<'_> {
    Chunk::Eager(Eager {
        header: EagerHeader {
            channel: 1,
            flags: PieceFlags::TAGGED,
            seq: 1,
            msg: 1,
            tag: 42,
            len: u32::try_from(data.len()).unwrap(),
        },
        data,
    })
}

fn rdv_request() -> Chunk<'static> {
    Chunk::RdvRequest(RdvRequest {
        channel: 1,
        flags: PieceFlags::new(true, true, SendMode::Cheaper, ReceiveMode::Express),
        seq: 2,
        msg: 2,
        tag: 43,
        send_id: 7,
        total_len: 1 << 20,
        readable: false,
    })
}

fn cts() -> Chunk<'static> {
    Chunk::ClearToSend(ClearToSend {
        channel: 1,
        flags: CtsFlags::ACCEPT,
        send_id: 7,
        recv_id: 9,
        offset: 0,
        len: 1 << 20,
    })
}

fn rdv_data(data: &[u8]) -> Chunk<'_> {
    Chunk::RdvData(RdvData {
        header: RdvDataHeader {
            channel: 1,
            recv_id: 9,
            offset: 4096,
            len: u32::try_from(data.len()).unwrap(),
        },
        data,
    })
}

fn hello() -> Vec<u8> {
    let mut out = Vec::new();
    Hello {
        version: PROTOCOL_VERSION,
        job_id: 0x5eed,
        rank: 3,
        nonce: *b"0123456789abcdef",
    }
    .encode(&mut out);
    out
}

/// The seed corpus: file name and contents. Names start with `valid-` or
/// `invalid-`.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let ack = Chunk::Ack(Ack { channel: 1, seq: 2 });
    let credit = Chunk::Credit(Credit {
        channel: 1,
        credits: 16,
    });
    let multi = packet(&[
        eager(b"first"),
        rdv_request(),
        cts(),
        rdv_data(b"bulk bytes"),
        ack,
        credit,
    ]);
    let mut proof = Vec::new();
    Proof { mac: [0xa5; 32] }.encode(&mut proof);

    let mut bad_magic = packet(&[ack]);
    bad_magic[0] = b'X';
    let mut reserved_kind = packet(&[ack]);
    reserved_kind[PacketHeader::LEN] = ChunkKind::RMA_PUT.0;
    let mut unknown_kind = packet(&[ack]);
    unknown_kind[PacketHeader::LEN] = 0x7f;
    let mut huge_eager = packet(&[eager(b"x")]);
    let len_at = PacketHeader::LEN + EagerHeader::LEN - 4;
    huge_eager[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut trailing = packet(&[credit]);
    trailing.push(0);

    vec![
        ("valid-empty-packet.bin", packet(&[])),
        ("valid-eager.bin", packet(&[eager(b"hello, navette")])),
        ("valid-rdv-request.bin", packet(&[rdv_request()])),
        ("valid-clear-to-send.bin", packet(&[cts()])),
        (
            "valid-rdv-data.bin",
            packet(&[rdv_data(b"some rendezvous data")]),
        ),
        ("valid-ack.bin", packet(&[ack])),
        ("valid-credit.bin", packet(&[credit])),
        ("valid-multi-chunk.bin", multi.clone()),
        ("valid-hello.bin", hello()),
        ("valid-proof.bin", proof.clone()),
        (
            "invalid-truncated-packet.bin",
            multi[..multi.len() - 1].to_vec(),
        ),
        ("invalid-truncated-header.bin", multi[..7].to_vec()),
        (
            "invalid-truncated-hello.bin",
            hello()[..Hello::LEN - 1].to_vec(),
        ),
        (
            "invalid-truncated-proof.bin",
            proof[..Proof::LEN - 1].to_vec(),
        ),
        ("invalid-bad-magic.bin", bad_magic),
        ("invalid-reserved-kind.bin", reserved_kind),
        ("invalid-unknown-kind.bin", unknown_kind),
        ("invalid-huge-eager-len.bin", huge_eager),
        ("invalid-trailing-byte.bin", trailing),
        ("invalid-empty.bin", Vec::new()),
    ]
}

/// Rewrites the committed corpus from [`seeds`] when `NAVETTE_REGENERATE_CORPUS`
/// is set (once, before any test reads it); otherwise does nothing.
fn regenerate_if_asked() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os(REGENERATE).is_none() {
            return;
        }
        let dir = corpus_dir();
        fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds() {
            fs::write(dir.join(name), bytes).unwrap();
        }
    });
}

/// The committed corpus holds exactly what [`seeds`] generates.
#[test]
fn committed_seeds_match_the_generator() {
    regenerate_if_asked();
    for (name, bytes) in seeds() {
        let path = corpus_dir().join(name);
        let committed = fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; regenerate with {REGENERATE}=1", path.display()));
        assert_eq!(
            committed,
            bytes,
            "{} is stale; regenerate with {REGENERATE}=1",
            path.display()
        );
    }
}

/// Every corpus file goes through the fuzz target's function: valid seeds are
/// accepted, invalid ones rejected, and nothing panics.
#[test]
fn corpus_replays_through_the_fuzz_entry_point() {
    regenerate_if_asked();
    let mut replayed = 0;
    for entry in fs::read_dir(corpus_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "README.md" {
            continue;
        }
        let outcome = fuzz_decode(&fs::read(&path).unwrap());
        if name.starts_with("valid-") {
            assert!(outcome.accepted(), "{name} rejected: {outcome:?}");
        } else if name.starts_with("invalid-") {
            assert!(!outcome.accepted(), "{name} accepted: {outcome:?}");
        }
        replayed += 1;
    }
    assert!(
        replayed >= seeds().len(),
        "corpus missing: {replayed} files"
    );
}

/// The seeds exercise what they say: each valid packet seed decodes to the
/// intended chunks, and each invalid seed fails in the intended way.
#[test]
fn seeds_fail_for_the_reason_in_their_name() {
    use navette_wire::DecodeError;
    let seeds = seeds();
    let get = |name: &str| {
        let (_, bytes) = seeds.iter().find(|(n, _)| *n == name).unwrap();
        fuzz_decode(bytes)
    };
    assert_eq!(get("valid-multi-chunk.bin").packet, Ok(6));
    assert!(get("valid-hello.bin").hello.is_ok());
    assert!(get("valid-proof.bin").proof.is_ok());
    assert_eq!(
        get("invalid-reserved-kind.bin").packet,
        Err(DecodeError::UnsupportedKind(ChunkKind::RMA_PUT.0))
    );
    assert_eq!(
        get("invalid-unknown-kind.bin").packet,
        Err(DecodeError::UnknownKind(0x7f))
    );
    assert!(matches!(
        get("invalid-bad-magic.bin").packet,
        Err(DecodeError::BadMagic { .. })
    ));
    assert!(matches!(
        get("invalid-huge-eager-len.bin").packet,
        Err(DecodeError::TooLarge {
            field: "eager len",
            ..
        })
    ));
    assert!(matches!(
        get("invalid-trailing-byte.bin").packet,
        Err(DecodeError::TrailingBytes { .. })
    ));
    for name in [
        "invalid-truncated-packet.bin",
        "invalid-truncated-header.bin",
    ] {
        assert!(matches!(
            get(name).packet,
            Err(DecodeError::Truncated { .. })
        ));
    }
}
