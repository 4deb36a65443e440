//! Madeleine messages over the simulated network: every send mode × receive
//! mode, the paper's example, LATER semantics, and mismatched unpacks.

mod common;

use std::cell::Cell;

use common::{check, cluster, gate_copies, pattern};
use navette::sim::SimCluster;
use navette::{Error, Node, ReceiveMode, RecvFrom, RequestError, SendMode};

const SEND_MODES: [SendMode; 3] = [SendMode::Safer, SendMode::Later, SendMode::Cheaper];
const RECV_MODES: [ReceiveMode; 2] = [ReceiveMode::Express, ReceiveMode::Cheaper];
const THRESHOLD: usize = 1024;

fn two_ranks() -> SimCluster {
    cluster(2)
        .rdv_threshold(THRESHOLD)
        .max_fragment(4096)
        .build()
}

/// Runs `sender` on rank 0 and `receiver` on rank 1, each on its own thread.
fn exchange<S, R, T>(cluster: &SimCluster, sender: S, receiver: R) -> T
where
    S: FnOnce(&Node) + Send,
    R: FnOnce(&Node) -> T + Send,
    T: Send,
{
    let (a, b) = (cluster.node(0), cluster.node(1));
    std::thread::scope(|s| {
        let tx = s.spawn(|| sender(a));
        let out = receiver(b);
        tx.join().expect("sender thread");
        out
    })
}

#[test]
fn every_send_mode_with_every_receive_mode() {
    let cluster = two_ranks();
    // Sizes on both sides of the rendezvous threshold, and empty.
    let sizes = [0usize, 1, 100, THRESHOLD - 1, THRESHOLD, 50_000];
    let combos: Vec<(SendMode, ReceiveMode)> = SEND_MODES
        .iter()
        .flat_map(|&s| RECV_MODES.iter().map(move |&r| (s, r)))
        .collect();
    let payloads: Vec<Vec<u8>> = (0..combos.len() * sizes.len())
        .map(|i| pattern(sizes[i % sizes.len()], i as u64))
        .collect();
    exchange(
        &cluster,
        |a| {
            // One message holding every combination and size, in order.
            let mut msg = a.begin_packing(a.gate(1), 1).unwrap();
            for (i, data) in payloads.iter().enumerate() {
                let (send, recv) = combos[i / sizes.len()];
                msg.pack(data, send, recv).unwrap();
            }
            msg.end_packing().unwrap();
        },
        |b| {
            let mut bufs: Vec<Vec<u8>> = (0..payloads.len())
                .map(|i| vec![0u8; sizes[i % sizes.len()]])
                .collect();
            let mut msg = b.begin_unpacking(b.gate(0), 1u64).unwrap();
            for (i, buf) in bufs.iter_mut().enumerate() {
                let (send, recv) = combos[i / sizes.len()];
                match recv {
                    ReceiveMode::Express => {
                        msg.unpack_express(buf, send).unwrap();
                        // EXPRESS: the data is there as soon as unpack returns.
                        check(buf, sizes[i % sizes.len()], i as u64);
                    }
                    ReceiveMode::Cheaper => msg.unpack(buf, send, recv).unwrap(),
                }
            }
            let status = msg.end_unpacking().unwrap();
            assert_eq!(status.peer, 0);
            assert_eq!(status.len, payloads.iter().map(Vec::len).sum::<usize>());
            for (i, buf) in bufs.iter().enumerate() {
                check(buf, sizes[i % sizes.len()], i as u64);
            }
        },
    );
}

/// The Madeleine paper's example: two strings, each preceded by its length
/// unpacked EXPRESS, each string unpacked CHEAPER into memory allocated
/// after reading its length.
#[test]
fn paper_example_two_strings_with_express_lengths() {
    let cluster = two_ranks();
    let first = "Madeleine: an efficient and portable communication interface".to_owned();
    let second = "x".repeat(200_000); // large: goes by rendezvous, in place
    let (first_ref, second_ref) = (&first, &second);
    let received = exchange(
        &cluster,
        |a| {
            let n1 = (first_ref.len() as u64).to_le_bytes();
            let n2 = (second_ref.len() as u64).to_le_bytes();
            let mut msg = a.begin_packing(a.gate(1), 99).unwrap();
            msg.pack(&n1, SendMode::Cheaper, ReceiveMode::Express)
                .unwrap();
            msg.pack(
                first_ref.as_bytes(),
                SendMode::Cheaper,
                ReceiveMode::Cheaper,
            )
            .unwrap();
            msg.pack(&n2, SendMode::Cheaper, ReceiveMode::Express)
                .unwrap();
            msg.pack(
                second_ref.as_bytes(),
                SendMode::Cheaper,
                ReceiveMode::Cheaper,
            )
            .unwrap();
            msg.end_packing().unwrap();
        },
        |b| {
            let mut msg = b.begin_unpacking(RecvFrom::any(), 99u64).unwrap();
            let mut n = [0u8; 8];
            msg.unpack_express(&mut n, SendMode::Cheaper).unwrap();
            let mut s1 = vec![0u8; u64::from_le_bytes(n) as usize];
            msg.unpack_cheaper(&mut s1, SendMode::Cheaper).unwrap();
            msg.unpack_express(&mut n, SendMode::Cheaper).unwrap();
            let mut s2 = vec![0u8; u64::from_le_bytes(n) as usize];
            msg.unpack_cheaper(&mut s2, SendMode::Cheaper).unwrap();
            msg.end_unpacking().unwrap();
            (
                String::from_utf8(s1).unwrap(),
                String::from_utf8(s2).unwrap(),
            )
        },
    );
    assert_eq!(received, (first, second));
}

/// LATER data is read at end_packing: changes made after pack are sent.
#[test]
fn later_reads_the_buffer_at_end_packing() {
    let cluster = two_ranks();
    for len in [16usize, 10_000] {
        let got = exchange(
            &cluster,
            |a| {
                let mut buf = vec![1u8; len];
                let cells = Cell::from_mut(buf.as_mut_slice()).as_slice_of_cells();
                let mut msg = a.begin_packing(a.gate(1), 5).unwrap();
                msg.pack_later(cells, ReceiveMode::Cheaper).unwrap();
                // Still ours to change until end_packing.
                cells.iter().for_each(|c| c.set(2));
                msg.end_packing().unwrap();
            },
            |b| {
                let mut buf = vec![0u8; len];
                let mut msg = b.begin_unpacking(b.gate(0), 5u64).unwrap();
                msg.unpack_cheaper(&mut buf, SendMode::Later).unwrap();
                msg.end_unpacking().unwrap();
                buf
            },
        );
        assert!(got.iter().all(|&x| x == 2), "len {len}");
    }
}

/// SAFER copies at pack time: the caller's buffer may be reused at once.
#[test]
fn safer_copies_at_pack_time() {
    let cluster = two_ranks();
    let got = exchange(
        &cluster,
        |a| {
            let mut msg = a.begin_packing(a.gate(1), 6).unwrap();
            let mut scratch = vec![3u8; 5000];
            msg.pack_safer(&scratch, ReceiveMode::Cheaper).unwrap();
            scratch.fill(4);
            msg.pack_safer(&scratch, ReceiveMode::Cheaper).unwrap();
            msg.end_packing().unwrap();
        },
        |b| {
            let (mut x, mut y) = (vec![0u8; 5000], vec![0u8; 5000]);
            let mut msg = b.begin_unpacking(b.gate(0), 6u64).unwrap();
            msg.unpack_cheaper(&mut x, SendMode::Safer).unwrap();
            msg.unpack_cheaper(&mut y, SendMode::Safer).unwrap();
            msg.end_unpacking().unwrap();
            (x, y)
        },
    );
    assert!(got.0.iter().all(|&v| v == 3) && got.1.iter().all(|&v| v == 4));
}

/// Small SAFER pieces are copied into the message itself while its own
/// store (64 bytes in all) has room for them, others each into a buffer:
/// here 40 B inline, 30 B a buffer, 16 and 8 B inline (filling the store),
/// 1 B a buffer; five pieces are also more than the message holds inline.
/// Every piece carries what its source held when it was packed (the source
/// changes after each pack), and the copies count: each inline piece
/// twice (into the message, then into its own buffer on this path, where
/// the message does not leave at once).
#[test]
fn small_safer_copies_around_the_inline_bound() {
    const SIZES: [usize; 5] = [40, 30, 16, 8, 1];
    let cluster = two_ranks();
    let got = exchange(
        &cluster,
        |a| {
            let mut msg = a.begin_packing(a.gate(1), 7).unwrap();
            let mut scratch = [0u8; 40];
            for (i, &len) in SIZES.iter().enumerate() {
                scratch.fill(i as u8 + 1);
                msg.pack_safer(&scratch[..len], ReceiveMode::Express)
                    .unwrap();
            }
            scratch.fill(0xee);
            let before = gate_copies(a);
            msg.end_packing().unwrap();
            assert_eq!(gate_copies(a) - before, 2 * (40 + 16 + 8) + 30 + 1);
        },
        |b| {
            let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
            let got: Vec<Vec<u8>> = SIZES
                .iter()
                .map(|&len| {
                    let mut piece = vec![0u8; len];
                    msg.unpack_express(&mut piece, SendMode::Safer).unwrap();
                    piece
                })
                .collect();
            msg.end_unpacking().unwrap();
            got
        },
    );
    for (i, piece) in got.iter().enumerate() {
        assert_eq!(piece.len(), SIZES[i]);
        assert!(piece.iter().all(|&v| v == i as u8 + 1), "piece {i}");
    }
}

/// Sends `sizes` as one message with modes (Cheaper, Cheaper), then a
/// well-formed follow-up message on the same gate.
fn send_then_follow_up(a: &Node, sizes: &[usize]) {
    let data: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, n as u64)).collect();
    let mut msg = a.begin_packing(a.gate(1), 7).unwrap();
    for d in &data {
        msg.pack(d, SendMode::Cheaper, ReceiveMode::Cheaper)
            .unwrap();
    }
    // The receiver refuses mismatched rendezvous pieces: the sender sees
    // an error instead of hanging; eager pieces have left already.
    let _ = msg.end_packing();
    a.send(a.gate(1), 8, b"after").unwrap();
}

fn receive_follow_up(b: &Node) {
    let mut buf = [0u8; 5];
    let status = b.recv(b.gate(0), 8u64, &mut buf).unwrap();
    assert_eq!((&buf, status.len), (b"after", 5));
}

fn request_error(result: navette::Result<impl std::fmt::Debug>) -> RequestError {
    match result {
        Err(Error::Request(err)) => err,
        other => panic!("expected a request error, got {other:?}"),
    }
}

#[test]
fn mismatched_size_is_a_typed_error() {
    for size in [100usize, 100_000] {
        let cluster = two_ranks();
        exchange(
            &cluster,
            |a| send_then_follow_up(a, &[size]),
            |b| {
                let mut buf = vec![0u8; size + 1];
                let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
                msg.unpack_cheaper(&mut buf, SendMode::Cheaper).unwrap();
                let err = request_error(msg.end_unpacking());
                assert_eq!(
                    err,
                    RequestError::SizeMismatch {
                        piece: 0,
                        sent: size as u64,
                        posted: size as u64 + 1
                    }
                );
                receive_follow_up(b);
            },
        );
    }
}

#[test]
fn mismatched_mode_is_a_typed_error() {
    let cluster = two_ranks();
    exchange(
        &cluster,
        |a| send_then_follow_up(a, &[64]),
        |b| {
            let mut buf = vec![0u8; 64];
            let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
            let err = request_error(msg.unpack_express(&mut buf, SendMode::Cheaper));
            assert!(
                matches!(err, RequestError::ModeMismatch { piece: 0, .. }),
                "{err:?}"
            );
            assert!(msg.end_unpacking().is_err());
            receive_follow_up(b);
        },
    );
}

#[test]
fn unpacking_fewer_pieces_than_packed_is_a_typed_error() {
    let cluster = two_ranks();
    exchange(
        &cluster,
        |a| send_then_follow_up(a, &[10, 20_000, 30]),
        |b| {
            let mut buf = vec![0u8; 10];
            let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
            msg.unpack_cheaper(&mut buf, SendMode::Cheaper).unwrap();
            let err = request_error(msg.end_unpacking());
            assert!(
                matches!(err, RequestError::PieceCountMismatch { unpacked: 1, .. }),
                "{err:?}"
            );
            receive_follow_up(b);
        },
    );
}

#[test]
fn unpacking_more_pieces_than_packed_is_a_typed_error() {
    let cluster = two_ranks();
    exchange(
        &cluster,
        |a| send_then_follow_up(a, &[10]),
        |b| {
            let (mut x, mut y) = (vec![0u8; 10], vec![0u8; 10]);
            let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
            msg.unpack_cheaper(&mut x, SendMode::Cheaper).unwrap();
            msg.unpack_cheaper(&mut y, SendMode::Cheaper).unwrap();
            let err = request_error(msg.end_unpacking());
            assert!(
                matches!(err, RequestError::PieceCountMismatch { unpacked: 2, .. }),
                "{err:?}"
            );
            receive_follow_up(b);
        },
    );
}

#[test]
fn an_abandoned_message_fails_at_the_receiver() {
    let cluster = two_ranks();
    exchange(
        &cluster,
        |a| {
            let head = [1u8; 8];
            let mut msg = a.begin_packing(a.gate(1), 9).unwrap();
            msg.pack(&head, SendMode::Safer, ReceiveMode::Express)
                .unwrap();
            msg.pack(&head, SendMode::Safer, ReceiveMode::Express)
                .unwrap();
            let large = [2u8; 100];
            msg.pack_safer(&large, ReceiveMode::Express).unwrap();
            let before = gate_copies(a);
            drop(msg); // abandoned before end_packing
            // Its SAFER copies were made (two inline, one in its own
            // buffer) and count, though nothing of them left.
            assert_eq!(gate_copies(a) - before, 8 + 8 + 100);
            a.send(a.gate(1), 8, b"after").unwrap();
        },
        |b| {
            // Nothing of it left: its first unpack fails.
            let mut buf = [0u8; 8];
            let mut msg = b.begin_unpacking(b.gate(0), 9u64).unwrap();
            let err = request_error(msg.unpack_express(&mut buf, SendMode::Safer));
            assert_eq!(err, RequestError::Aborted);
            drop(msg);
            receive_follow_up(b);
        },
    );
}

#[test]
fn a_message_abandoned_before_anything_was_packed_sends_nothing() {
    let cluster = two_ranks();
    exchange(
        &cluster,
        |a| {
            drop(a.begin_packing(a.gate(1), 9).unwrap());
            a.send(a.gate(1), 8, b"after").unwrap();
        },
        |b| {
            receive_follow_up(b);
            // Anything sent for it would have come first on this gate.
            assert_eq!(b.probe(b.gate(0), 9u64).unwrap(), None);
        },
    );
}

#[test]
fn an_empty_message_is_refused() {
    let cluster = two_ranks();
    let a = cluster.node(0);
    let msg = a.begin_packing(a.gate(1), 1).unwrap();
    assert!(matches!(msg.end_packing(), Err(Error::EmptyMessage)));
}

#[test]
fn a_dropped_receiver_lets_the_sender_finish() {
    let cluster = two_ranks();
    exchange(
        &cluster,
        |a| {
            let big = pattern(100_000, 1);
            let mut msg = a.begin_packing(a.gate(1), 3).unwrap();
            msg.pack(&big, SendMode::Cheaper, ReceiveMode::Cheaper)
                .unwrap();
            assert_eq!(
                request_error(msg.end_packing()),
                RequestError::RejectedByReceiver
            );
            a.send(a.gate(1), 8, b"after").unwrap();
        },
        |b| {
            let mut msg = b.begin_unpacking(b.gate(0), 3u64).unwrap();
            msg.status().unwrap(); // matched, then abandoned
            drop(msg);
            receive_follow_up(b);
        },
    );
}

/// Messages taken whole by the receiver with their large last piece (the
/// usual head and body: eager pieces, then one rendezvous piece) count
/// among the gate's whole messages.
fn messages_whole(node: &Node) -> u64 {
    node.gate_stats().iter().map(|g| g.messages_whole).sum()
}

/// Sends a 64-byte head EXPRESS and a 100 000-byte body (received
/// `body_mode`) on tag 7, then the follow-up: what `end_packing` said.
fn send_head_and_body(a: &Node, body_mode: ReceiveMode) -> navette::Result<()> {
    let (head, body) = (pattern(64, 1), pattern(100_000, 2));
    let mut msg = a.begin_packing(a.gate(1), 7).unwrap();
    msg.pack(&head, SendMode::Cheaper, ReceiveMode::Express)
        .unwrap();
    msg.pack(&body, SendMode::Cheaper, body_mode).unwrap();
    let ended = msg.end_packing();
    a.send(a.gate(1), 8, b"after").unwrap();
    ended
}

/// Waits until the message on tag 7 has come, unexpected.
fn await_arrival(b: &Node) {
    while b.probe(b.gate(0), 7u64).unwrap().is_none() {
        std::thread::yield_now();
    }
}

/// The usual large message, its body unpacked CHEAPER or EXPRESS, arrived
/// before its receive or not: the head is taken from the message whole,
/// the body lands from where the sender keeps it.
#[test]
fn a_head_and_a_large_body_are_taken_whole_with_their_tail() {
    for (arrived_first, body_mode) in [
        (true, ReceiveMode::Cheaper),
        (true, ReceiveMode::Express),
        (false, ReceiveMode::Cheaper),
    ] {
        let cluster = two_ranks();
        let whole_before = messages_whole(cluster.node(1));
        exchange(
            &cluster,
            |a| send_head_and_body(a, body_mode).unwrap(),
            |b| {
                if arrived_first {
                    await_arrival(b);
                }
                let (mut head, mut body) = (vec![0u8; 64], vec![0u8; 100_000]);
                let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
                if arrived_first {
                    // Out of the engine as it began: no request for it.
                    let report = b.report();
                    assert!(report.requests.is_empty(), "{report}");
                }
                msg.unpack_express(&mut head, SendMode::Cheaper).unwrap();
                match body_mode {
                    ReceiveMode::Cheaper => msg.unpack_cheaper(&mut body, SendMode::Cheaper),
                    ReceiveMode::Express => msg.unpack_express(&mut body, SendMode::Cheaper),
                }
                .unwrap();
                let status = msg.end_unpacking().unwrap();
                assert_eq!((status.peer, status.tag, status.len), (0, 7, 100_064));
                check(&head, 64, 1);
                check(&body, 100_000, 2);
                receive_follow_up(b);
            },
        );
        // Taken whole at the head's unpack when the message was there.
        let taken = messages_whole(cluster.node(1)) - whole_before;
        if arrived_first {
            assert_eq!(taken, 1, "{body_mode:?}");
        }
    }
}

/// A receiver that stops at the tail (dropping the message, or ending it
/// with the body not unpacked, or unpacking it into memory of another
/// size, or unpacking a piece more before the end) refuses it: its
/// sender's message fails as rejected instead of waiting, and the gate
/// carries on.
#[test]
fn a_tail_not_unpacked_is_refused() {
    for mistake in ["dropped", "too few", "too short", "too many"] {
        let cluster = two_ranks();
        exchange(
            &cluster,
            |a| {
                let ended = send_head_and_body(a, ReceiveMode::Cheaper);
                assert_eq!(
                    request_error(ended),
                    RequestError::RejectedByReceiver,
                    "{mistake}"
                );
            },
            |b| {
                await_arrival(b);
                let mut head = vec![0u8; 64];
                let mut msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
                msg.unpack_express(&mut head, SendMode::Cheaper).unwrap();
                let (mut short, mut body, mut more) =
                    (vec![0u8; 99_999], vec![0u8; 100_000], vec![0u8; 8]);
                let err = match mistake {
                    "dropped" => {
                        drop(msg);
                        None
                    }
                    "too few" => Some(request_error(msg.end_unpacking())),
                    "too short" => {
                        msg.unpack_cheaper(&mut short, SendMode::Cheaper).unwrap();
                        Some(request_error(msg.end_unpacking()))
                    }
                    _ => {
                        msg.unpack_cheaper(&mut body, SendMode::Cheaper).unwrap();
                        // The message fails there, before its body's data
                        // was asked for, as the usual path fails it.
                        let extra = msg.unpack_cheaper(&mut more, SendMode::Cheaper);
                        let extra = match request_error(extra) {
                            RequestError::MessageFailed(inner) => *inner,
                            other => other,
                        };
                        assert!(
                            matches!(extra, RequestError::PieceCountMismatch { unpacked: 3, .. }),
                            "{mistake}: {extra:?}"
                        );
                        Some(request_error(msg.end_unpacking()))
                    }
                };
                match (mistake, err) {
                    ("dropped", None) => {}
                    ("too few", Some(err)) => assert!(
                        matches!(err, RequestError::PieceCountMismatch { unpacked: 1, .. }),
                        "{err:?}"
                    ),
                    ("too short", Some(err)) => assert_eq!(
                        err,
                        RequestError::SizeMismatch {
                            piece: 1,
                            sent: 100_000,
                            posted: 99_999
                        }
                    ),
                    ("too many", Some(err)) => assert!(
                        matches!(err, RequestError::PieceCountMismatch { .. }),
                        "{err:?}"
                    ),
                    (mistake, err) => panic!("{mistake}: {err:?}"),
                }
                receive_follow_up(b);
                assert_eq!(messages_whole(b), 1, "{mistake}: taken whole");
            },
        );
    }
}
