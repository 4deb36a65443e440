//! Tagged point-to-point over the simulated network: matching by source and
//! tag (with masks), unexpected messages, probe, and the request calls.

mod common;

use common::{check, cluster, pattern};
use navette::sim::SimCluster;
use navette::{
    ChannelId, Error, Gate, RecvFrom, RequestError, TagMatch, wait_all, wait_all_into, wait_any,
};

fn three_ranks() -> SimCluster {
    cluster(3).rdv_threshold(4096).build()
}

#[test]
fn unexpected_messages_wait_for_their_receive() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    // Everything is sent and delivered before any receive is posted.
    let sends: Vec<_> = [10usize, 5000, 0]
        .iter()
        .enumerate()
        .map(|(i, &n)| a.isend(a.gate(2), i as u64, pattern(n, i as u64)).unwrap())
        .collect();
    cluster.run_until_idle();
    // Receives in another order than the sends: matched by tag.
    for (i, n) in [(2u64, 0usize), (0, 10), (1, 5000)] {
        let got = c.irecv(c.gate(0), i, vec![0u8; 8192]).wait().unwrap();
        assert_eq!((got.status.peer, got.status.tag, got.status.len), (0, i, n));
        check(&got.data, n, i);
    }
    for status in wait_all(sends) {
        status.unwrap();
    }
}

#[test]
fn receives_posted_first_are_matched_on_arrival() {
    let cluster = three_ranks();
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let from_a = c.irecv(c.gate(0), 5u64, vec![0u8; 100]);
    let from_any = c.irecv(RecvFrom::any(), 5u64, vec![0u8; 100]);
    b.isend(b.gate(2), 5, pattern(30, 1))
        .unwrap()
        .wait()
        .unwrap();
    // Rank 1's message cannot match the receive reserved for rank 0.
    let got = from_any.wait().unwrap();
    assert_eq!(got.status.peer, 1);
    check(&got.data, 30, 1);
    assert!(!from_a.test().unwrap());
    a.isend(a.gate(2), 5, pattern(40, 2))
        .unwrap()
        .wait()
        .unwrap();
    let got = from_a.wait().unwrap();
    assert_eq!(got.status.peer, 0);
    check(&got.data, 40, 2);
}

#[test]
fn masks_select_tag_bits() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    // Tags carry a "kind" in the high 32 bits and a sequence in the low bits.
    let tag = |kind: u64, seq: u64| (kind << 32) | seq;
    for (kind, seq) in [(1, 7), (2, 8), (1, 9)] {
        a.isend(a.gate(2), tag(kind, seq), vec![seq as u8])
            .unwrap()
            .wait()
            .unwrap();
    }
    let kind_one = TagMatch::masked(tag(1, 0), 0xffff_ffff_0000_0000);
    let mut seqs = Vec::new();
    for _ in 0..2 {
        let got = c
            .irecv(RecvFrom::any(), kind_one, vec![0u8; 1])
            .wait()
            .unwrap();
        seqs.push(got.status.tag & 0xffff_ffff);
    }
    assert_eq!(seqs, [7, 9]);
    let got = c
        .irecv(c.gate(0), TagMatch::any(), vec![0u8; 1])
        .wait()
        .unwrap();
    assert_eq!(got.status.tag, tag(2, 8));
}

#[test]
fn channels_are_separate_spaces() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    let other = ChannelId(3);
    a.isend(Gate::new(other, 2), 1, b"other".to_vec())
        .unwrap()
        .wait()
        .unwrap();
    a.isend(a.gate(2), 1, b"default".to_vec())
        .unwrap()
        .wait()
        .unwrap();
    let got = c.irecv(c.gate(0), 1u64, vec![0u8; 16]).wait().unwrap();
    assert_eq!(got.data, b"default");
    let got = c
        .irecv(RecvFrom::any_on(other), 1u64, vec![0u8; 16])
        .wait()
        .unwrap();
    assert_eq!(got.data, b"other");
}

#[test]
fn probe_reports_without_receiving() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    assert_eq!(c.probe(RecvFrom::any(), 4u64).unwrap(), None);
    // Above the rendezvous threshold: only the request travels until the
    // receive is posted, and probe reports the whole length.
    let send = a.isend(a.gate(2), 4, pattern(6000, 4)).unwrap();
    cluster.run_until_idle();
    let status = c.probe(RecvFrom::any(), 4u64).unwrap().expect("arrived");
    assert_eq!((status.peer, status.tag, status.len), (0, 4, 6000));
    // Probing twice finds it again; receiving consumes it.
    assert!(c.probe(c.gate(0), 4u64).unwrap().is_some());
    let mut buf = vec![0u8; status.len];
    c.recv(c.gate(0), 4u64, &mut buf).unwrap();
    check(&buf, 6000, 4);
    send.wait().unwrap();
    assert_eq!(c.probe(RecvFrom::any(), 4u64).unwrap(), None);
}

#[test]
fn blocking_send_and_recv_lend_their_buffers() {
    let cluster = three_ranks();
    let (a, b) = (cluster.node(0), cluster.node(1));
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in [0usize, 1, 4095, 4096, 100_000] {
                a.send(a.gate(1), n as u64, &pattern(n, 7)).unwrap();
            }
        });
        for n in [0usize, 1, 4095, 4096, 100_000] {
            let mut buf = vec![0u8; n];
            let status = b.recv(b.gate(0), n as u64, &mut buf).unwrap();
            assert_eq!(status.len, n);
            check(&buf, n, 7);
        }
    });
}

#[test]
fn a_message_longer_than_the_buffer_is_truncation_error() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    for n in [100usize, 10_000] {
        let send = a.isend(a.gate(2), 1, pattern(n, 0)).unwrap();
        let err = c
            .irecv(c.gate(0), 1u64, vec![0u8; n - 1])
            .wait()
            .unwrap_err();
        assert!(
            matches!(err, Error::Request(RequestError::Truncated { sent, posted })
                if sent == n as u64 && posted == n as u64 - 1),
            "{err:?}"
        );
        // An eager sender is done; a rendezvous sender is refused.
        let sent = send.wait();
        assert!(n < 4096 || matches!(sent, Err(Error::Request(RequestError::RejectedByReceiver))));
    }
}

#[test]
fn wait_any_returns_the_first_completed() {
    let cluster = three_ranks();
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let mut recvs = vec![
        c.irecv(c.gate(0), 1u64, vec![0u8; 8]),
        c.irecv(c.gate(1), 1u64, vec![0u8; 8]),
    ];
    b.isend(b.gate(2), 1, b"from b".to_vec())
        .unwrap()
        .wait()
        .unwrap();
    let (index, got) = wait_any(&mut recvs).unwrap();
    assert_eq!((index, got.unwrap().data.as_slice()), (1, &b"from b"[..]));
    assert_eq!(recvs.len(), 1);
    a.isend(a.gate(2), 1, b"from a".to_vec())
        .unwrap()
        .wait()
        .unwrap();
    let (index, got) = wait_any(&mut recvs).unwrap();
    assert_eq!((index, got.unwrap().data.as_slice()), (0, &b"from a"[..]));
}

#[test]
fn dropped_requests_still_complete() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    drop(c.irecv(c.gate(0), 1u64, vec![0u8; 8]));
    drop(a.isend(a.gate(2), 1, b"ignored".to_vec()).unwrap());
    a.isend(a.gate(2), 2, b"kept".to_vec())
        .unwrap()
        .wait()
        .unwrap();
    let got = c.irecv(c.gate(0), 2u64, vec![0u8; 8]).wait().unwrap();
    assert_eq!(got.data, b"kept");
}

#[test]
fn sending_to_an_unlinked_rank_is_an_error() {
    // A rank of the job that no link reaches (not a neighbour on a ring).
    let ring = cluster(4).topology(navette::sim::Topology::Ring).build();
    let a = ring.node(0);
    assert!(matches!(
        a.isend(a.gate(2), 1, vec![1]),
        Err(Error::Usage(navette::UsageError::NoRail(2)))
    ));
    // A rank outside the job says so (the misuse tests have the rest).
    let cluster = three_ranks();
    let a = cluster.node(0);
    assert!(matches!(
        a.isend(a.gate(9), 1, vec![1]),
        Err(Error::Usage(navette::UsageError::NotInJob {
            rank: 9,
            size: 3
        }))
    ));
}

#[test]
fn the_report_says_what_is_pending() {
    use navette::PendingState;
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    let recv = c.irecv(c.gate(0), 77u64, vec![0u8; 8]);
    let send = a.isend(a.gate(2), 5, pattern(10_000, 5)).unwrap();
    cluster.run_until_idle();
    let report = c.report();
    assert_eq!(report.requests.len(), 1, "{report}");
    assert!(matches!(
        report.requests[0].state,
        PendingState::AwaitingMatch {
            source: Some(0),
            ..
        }
    ));
    let report = a.report();
    let pending = &report.requests[0];
    assert_eq!(
        (pending.peer, pending.tag, pending.len),
        (Some(2), Some(5), 10_000)
    );
    assert_eq!(pending.state, PendingState::AwaitingClearToSend);
    assert!(
        report.to_string().contains("waiting for clear-to-send"),
        "{report}"
    );
    assert_eq!(report.rails.len(), 2);
    drop(recv);
    let got = c.irecv(c.gate(0), 5u64, vec![0u8; 10_000]).wait().unwrap();
    check(&got.data, 10_000, 5);
    send.wait().unwrap();
    assert!(a.report().requests.is_empty());
}

/// Blocking receives keep the order of posting whether they land at once
/// (waiting outside the engine while they spin) or wait as requests (no
/// spin phase, or a receive posted before them on the channel).
#[test]
fn blocking_receives_keep_posting_order_spinning_or_not() {
    for spin_rounds in [0u32, u32::MAX] {
        let cluster = cluster(2)
            .rdv_threshold(4096)
            .node_config(navette::NodeConfig {
                spin_rounds,
                oversubscribed_spin_rounds: spin_rounds,
                ..navette::NodeConfig::default()
            })
            .build();
        let (a, b) = (cluster.node(0), cluster.node(1));
        // Posted first: it takes the first message with tag 2.
        let early = b.irecv(b.gate(0), 2u64, vec![0u8; 64]);
        std::thread::scope(|s| {
            s.spawn(|| {
                for (tag, n, salt) in [
                    (2u64, 20usize, 1u64),
                    (2, 30, 2),
                    (3, 10_000, 3),
                    (3, 40, 4),
                ] {
                    a.send(a.gate(1), tag, &pattern(n, salt)).unwrap();
                }
            });
            let mut buf = vec![0u8; 10_000];
            for (tag, n, salt) in [(2u64, 30usize, 2u64), (3, 10_000, 3), (3, 40, 4)] {
                let status = b.recv(b.gate(0), tag, &mut buf).unwrap();
                assert_eq!(
                    (status.tag, status.len),
                    (tag, n),
                    "spin_rounds {spin_rounds}"
                );
                check(&buf[..n], n, salt);
            }
        });
        check(&early.wait().unwrap().data, 20, 1);
    }
}

#[test]
fn wait_all_into_gives_each_outcome_in_request_order() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    // Receives for tags 0, 1, 2, the one for tag 1 too short for its
    // message; the messages arrive in the order 2, 0, 1.
    let mut recvs: Vec<_> = [(0u64, 16usize), (1, 4), (2, 16)]
        .iter()
        .map(|&(tag, room)| c.irecv(c.gate(0), tag, vec![0u8; room]))
        .collect();
    let mut sends: Vec<_> = [2u64, 0, 1]
        .iter()
        .map(|&tag| a.isend(a.gate(2), tag, pattern(10, tag)).unwrap())
        .collect();
    let mut outcomes = Vec::new();
    wait_all_into(&mut recvs, &mut outcomes);
    assert!(recvs.is_empty());
    assert_eq!(outcomes.len(), 3);
    for (tag, outcome) in [0u64, 2].into_iter().zip([&outcomes[0], &outcomes[2]]) {
        let got = outcome.as_ref().unwrap();
        assert_eq!((got.status.tag, got.status.len), (tag, 10));
        check(&got.data, 10, tag);
    }
    assert!(
        matches!(
            outcomes[1],
            Err(Error::Request(RequestError::Truncated {
                sent: 10,
                posted: 4
            }))
        ),
        "{:?}",
        outcomes[1]
    );
    // Outcomes are appended; an empty list waits for nothing.
    let mut sent = vec![Ok(navette::Status {
        peer: 9,
        tag: 9,
        len: 9,
    })];
    wait_all_into(&mut sends, &mut sent);
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[0].as_ref().unwrap().peer, 9);
    assert!(
        sent[1..]
            .iter()
            .all(|s| s.as_ref().is_ok_and(|s| s.len == 10))
    );
    wait_all_into(&mut sends, &mut sent);
    assert_eq!(sent.len(), 4);
}

#[test]
fn a_stalled_wait_all_still_gives_what_completed() {
    let cluster = cluster(2)
        .node_config(navette::NodeConfig {
            wait_timeout: Some(std::time::Duration::from_millis(50)),
            ..navette::NodeConfig::default()
        })
        .build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let recvs = vec![
        b.irecv(b.gate(0), 1u64, vec![0u8; 8]),
        b.irecv(b.gate(0), 2u64, vec![0u8; 8]),
    ];
    a.isend(a.gate(1), 1, pattern(8, 1))
        .unwrap()
        .wait()
        .unwrap();
    // Nothing is ever sent with tag 2.
    let outcomes = wait_all(recvs);
    check(&outcomes[0].as_ref().unwrap().data, 8, 1);
    assert!(
        matches!(outcomes[1], Err(Error::Stalled { .. })),
        "{:?}",
        outcomes[1]
    );
}

/// `isend_safer` copies: the caller's buffer is free as the call returns,
/// for a small message (copied into its peer's open packet here, where
/// nothing leaves at once) as for one beyond the rendezvous threshold
/// (copied into a buffer of its own).
#[test]
fn isend_safer_frees_the_callers_buffer_as_it_returns() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    let sizes = [0usize, 24, 700, 20_000];
    let sends: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut buf = pattern(n, i as u64);
            let sent = a.isend_safer(a.gate(2), i as u64, &buf).unwrap();
            // Reused at once, before anything was delivered.
            buf.fill(0xee);
            sent
        })
        .collect();
    cluster.run_until_idle();
    for (i, &n) in sizes.iter().enumerate() {
        let got = c
            .irecv(c.gate(0), i as u64, vec![0u8; 32 << 10])
            .wait()
            .unwrap();
        assert_eq!((got.status.tag, got.status.len), (i as u64, n));
        check(&got.data, n, i as u64);
    }
    for (status, &n) in wait_all(sends).into_iter().zip(&sizes) {
        assert_eq!(status.unwrap().len, n);
    }
}

#[test]
fn sends_into_a_request_list_complete_as_returned_ones_and_add_nothing_on_error() {
    let cluster = three_ranks();
    let (a, c) = (cluster.node(0), cluster.node(2));
    let mut sends = Vec::new();
    // A small one (staged in the open packet) and a large one (the usual
    // path, by rendezvous).
    a.isend_into(a.gate(2), 1, pattern(10, 1), &mut sends)
        .unwrap();
    a.isend_safer_into(a.gate(2), 2, &pattern(5000, 2), &mut sends)
        .unwrap();
    let refused = a.isend_safer_into(Gate::new(ChannelId::RPC, 2), 3, b"x", &mut sends);
    assert!(matches!(refused, Err(Error::Usage(_))), "{refused:?}");
    assert_eq!(sends.len(), 2, "a refused send adds no request");
    cluster.run_until_idle();
    for (tag, n) in [(1u64, 10usize), (2, 5000)] {
        let got = c.irecv(c.gate(0), tag, vec![0u8; 8192]).wait().unwrap();
        check(&got.data, n, tag);
    }
    let mut outcomes = Vec::new();
    wait_all_into(&mut sends, &mut outcomes);
    let statuses: Vec<_> = outcomes
        .into_iter()
        .map(|outcome| {
            let status = outcome.unwrap();
            (status.peer, status.tag, status.len)
        })
        .collect();
    assert_eq!(statuses, [(2, 1, 10), (2, 2, 5000)]);
    assert!(sends.is_empty());
}
