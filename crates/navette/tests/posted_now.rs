//! Non-blocking receives posted outside the engine, and small sends that
//! share open packets, through the node's API over the simulated network:
//! what the engine-level tests (`navette-core/tests/posted_now.rs`,
//! `open.rs`) show of the protocol holds for the calls that use it —
//! posting order against other kinds of receive, dropped and awaited
//! requests, lost peers, reports.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use common::{check, cluster, pattern};
use navette::{ChannelId, Error, Gate, RecvFrom, RequestError, TagMatch, wait_all, wait_all_into};

fn gate_on(channel: u16, peer: navette::Rank) -> Gate {
    Gate::new(ChannelId(channel), peer)
}

/// Sends from `a` to rank 1 one message of `len` bytes on each of
/// `channels`, with the channel's number as its tag.
fn isend_on_channels(
    a: &navette::Node,
    channels: std::ops::RangeInclusive<u16>,
    len: usize,
) -> Vec<navette::Request<'_, navette::Status>> {
    channels
        .map(|c| {
            a.isend(gate_on(c, 1), u64::from(c), pattern(len, u64::from(c)))
                .unwrap()
        })
        .collect()
}

/// Packets rank 0 sent to rank 1 over their first link.
fn packets_from_0_to_1(cluster: &navette::sim::SimCluster) -> u64 {
    let link = cluster.links_between(0, 1)[0];
    cluster.with_network(|net| {
        let stats = net.stats(link).unwrap();
        stats.sent_by(0).unwrap().packets_sent
    })
}

/// Messages received at once by `node`, over all its gates.
fn at_once(node: &navette::Node) -> u64 {
    node.gate_stats().iter().map(|s| s.messages_at_once).sum()
}

#[test]
fn receives_posted_ahead_land_at_once_from_one_packet() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let mut recvs: Vec<_> = (1..=8u16)
        .map(|c| b.irecv(gate_on(c, 0), u64::from(c), vec![0u8; 64]))
        .collect();
    let sends = isend_on_channels(a, 1..=8, 4);
    let mut landed = Vec::new();
    wait_all_into(&mut recvs, &mut landed);
    for (c, got) in (1..=8u64).zip(landed) {
        let got = got.unwrap();
        assert_eq!((got.status.peer, got.status.tag), (0, c));
        check(&got.data, 4, c);
    }
    for sent in wait_all(sends) {
        assert_eq!(sent.unwrap().len, 4);
    }
    assert_eq!(at_once(b), 8, "no receive went through the engine");
    // The eight small sends shared one packet.
    assert_eq!(packets_from_0_to_1(&cluster), 1);
}

#[test]
fn a_blocking_receive_or_unpacking_after_an_irecv_comes_after_it() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    for round in 0..2 {
        // Any tag, on one channel: the first message is the irecv's.
        let first = b.irecv(RecvFrom::any(), TagMatch::any(), vec![0u8; 16]);
        for i in 0..2u64 {
            a.isend(a.gate(1), i, pattern(10, i))
                .unwrap()
                .wait()
                .unwrap();
        }
        let mut second = [0u8; 10];
        if round == 0 {
            let status = b
                .recv(RecvFrom::any(), TagMatch::any(), &mut second)
                .unwrap();
            assert_eq!(status.tag, 1);
        } else {
            let mut msg = b.begin_unpacking(RecvFrom::any(), TagMatch::any()).unwrap();
            msg.unpack(
                &mut second,
                navette::SendMode::Cheaper,
                navette::ReceiveMode::Cheaper,
            )
            .unwrap();
            assert_eq!(msg.end_unpacking().unwrap().tag, 1);
        }
        check(&second, 10, 1);
        let got = first.wait().unwrap();
        assert_eq!(got.status.tag, 0);
        check(&got.data, 10, 0);
    }
}

#[test]
fn a_dropped_irecv_still_takes_its_message() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    drop(b.irecv(b.gate(0), 5u64, vec![0u8; 8]));
    let kept = b.irecv(b.gate(0), 5u64, vec![0u8; 8]);
    for i in 0..2u64 {
        a.isend(a.gate(1), 5, pattern(8, i))
            .unwrap()
            .wait()
            .unwrap();
    }
    let got = kept.wait().unwrap();
    check(&got.data, 8, 1);
    assert_eq!(b.unwaited_failures(), 0);
}

#[test]
fn requests_test_and_await_as_futures() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let recv = b.irecv(b.gate(0), 3u64, vec![0u8; 32]);
    assert!(!recv.test().unwrap(), "nothing sent yet");
    let send = a.isend(a.gate(1), 3, pattern(20, 3)).unwrap();
    let sent = futures::executor::block_on(send).unwrap();
    assert_eq!(sent.len, 20);
    let got = futures::executor::block_on(recv).unwrap();
    check(&got.data, 20, 3);
}

/// A waker that counts its wake-ups and unparks the thread that made it.
struct Counting {
    wakes: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

impl Counting {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            wakes: AtomicUsize::new(0),
            thread: std::thread::current(),
        })
    }

    fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    /// Parks this thread until woken at least once.
    fn park_until_woken(&self) {
        while self.wakes() == 0 {
            std::thread::park();
        }
    }
}

/// Polls `request` once with `waker`.
fn poll_once<F: Future + Unpin>(request: &mut F, waker: &Arc<Counting>) -> Poll<F::Output> {
    let waker = Waker::from(Arc::clone(waker));
    Pin::new(request).poll(&mut Context::from_waker(&waker))
}

#[test]
fn an_irecv_awaited_with_a_progress_thread_sleeps_until_it_lands() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let progress = b.spawn_progress_thread().unwrap();
    let mut recv = b.irecv(b.gate(0), 4u64, vec![0u8; 32]);
    let waker = Counting::new();
    assert!(
        poll_once(&mut recv, &waker).is_pending(),
        "nothing sent yet"
    );
    // It sleeps (no wake-up asked for at once), and stays outside the
    // engine.
    assert_eq!(waker.wakes(), 0);
    assert_eq!(b.report().outside.len(), 1);
    a.isend(a.gate(1), 4, pattern(12, 4))
        .unwrap()
        .wait()
        .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            // The sim network moves only when some node makes progress.
            while waker.wakes() == 0 {
                a.progress().unwrap();
                std::thread::yield_now();
            }
        });
        waker.park_until_woken();
    });
    let Poll::Ready(got) = poll_once(&mut recv, &waker) else {
        panic!("woken before it landed");
    };
    check(&got.unwrap().data, 12, 4);
    assert_eq!(at_once(b), 1, "it landed outside the engine");
    progress.stop().unwrap();
}

#[test]
fn a_staged_send_awaited_with_a_progress_thread_is_woken_once_it_left() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let progress = a.spawn_progress_thread().unwrap();
    let recv = b.irecv(b.gate(0), 5u64, vec![0u8; 32]);
    for round in 0..50u64 {
        let mut send = a.isend(a.gate(1), 5, pattern(8, round)).unwrap();
        let waker = Counting::new();
        // A wake-up comes only once the send is done: never at once
        // for a send still in its open packet.
        if poll_once(&mut send, &waker).is_pending() {
            waker.park_until_woken();
            let Poll::Ready(sent) = poll_once(&mut send, &waker) else {
                panic!("woken before the send left");
            };
            assert_eq!(sent.unwrap().len, 8);
        }
    }
    drop(recv);
    progress.stop().unwrap();
}

#[test]
fn a_lost_peer_fails_receives_posted_ahead_and_staged_sends() {
    let cluster = cluster(3).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let from_a = b.irecv(b.gate(0), 1u64, vec![0u8; 8]);
    let from_any = b.irecv(RecvFrom::any(), 1u64, vec![0u8; 8]);
    let staged = a.isend(a.gate(1), 2, vec![1u8; 4]).unwrap();
    // Dropped: nobody waits for it, and its loss is counted.
    drop(a.isend(a.gate(1), 3, vec![1u8; 4]).unwrap());
    cluster.cut(cluster.links_between(0, 1)[0]);
    let unreachable = |r: navette::Result<_>, peer| match r {
        Err(Error::Request(RequestError::PeerUnreachable { peer: p })) => assert_eq!(p, peer),
        other => panic!("expected peer {peer} unreachable, got {other:?}"),
    };
    unreachable(from_a.wait().map(drop), 0);
    unreachable(staged.wait().map(drop), 1);
    assert_eq!(a.unwaited_failures(), 1);
    // Any source still receives from rank 2.
    let c = cluster.node(2);
    c.isend(c.gate(1), 1, pattern(8, 2))
        .unwrap()
        .wait()
        .unwrap();
    check(&from_any.wait().unwrap().data, 8, 2);
}

#[test]
fn a_report_lists_receives_posted_ahead_and_leaves_them_waiting() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let recv = b.irecv(b.gate(0), 9u64, vec![0u8; 8]);
    let report = b.report();
    assert!(report.requests.is_empty(), "{report}");
    assert_eq!(report.outside.len(), 1, "{report}");
    let listed = &report.outside[0];
    assert_eq!(listed.want.channel, ChannelId::DEFAULT);
    assert_eq!(listed.want.tag, TagMatch::exact(9));
    assert_eq!(listed.room, Some(8));
    let shown = report.to_string();
    assert!(
        shown.contains("1 receives waiting outside the engine")
            && shown.contains("irecv posted ahead on channel 0, room 8 bytes"),
        "{shown}"
    );
    // Still outside the engine: its message lands at once.
    a.send(a.gate(1), 9, &pattern(8, 9)).unwrap();
    check(&recv.wait().unwrap().data, 8, 9);
    assert_eq!(at_once(b), 1);
    assert!(b.report().outside.is_empty());
}

#[test]
fn receives_posted_ahead_land_in_any_order_and_keep_landing() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    // Messages come in the reverse order of the channels' receives, and
    // one receive stays posted while others come and go.
    let mut keep = b.irecv(gate_on(9, 0), 9u64, vec![0u8; 8]);
    for round in 0..200u64 {
        let recvs: Vec<_> = (1..=3u16)
            .map(|c| b.irecv(gate_on(c, 0), u64::from(c), vec![0u8; 16]))
            .collect();
        for c in (1..=3u16).rev() {
            a.isend(
                gate_on(c, 1),
                u64::from(c),
                pattern(12, round * 4 + u64::from(c)),
            )
            .unwrap()
            .wait()
            .unwrap();
        }
        for (c, got) in (1..=3u64).zip(wait_all(recvs)) {
            check(&got.unwrap().data, 12, round * 4 + c);
        }
        if round % 50 == 49 {
            a.isend(gate_on(9, 1), 9, pattern(8, round))
                .unwrap()
                .wait()
                .unwrap();
            check(&keep.wait().unwrap().data, 8, round);
            keep = b.irecv(gate_on(9, 0), 9u64, vec![0u8; 8]);
        }
    }
    drop(keep);
    assert!(at_once(b) >= 600, "{}", at_once(b));
}

/// A packet whose first messages land in receives posted ahead, one of
/// them dropped, and whose last does not fit its receive lands in none of
/// them at once: the list is posted, the usual path lands the packet, the
/// kept receive gets its message, the last one fails as truncated, and the
/// dropped one's message is taken and let go of, not left for a later
/// receive.
#[test]
fn a_packet_that_lands_in_part_keeps_a_dropped_receive_dropped() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    drop(b.irecv(gate_on(1, 0), 1u64, vec![0u8; 64]));
    let kept = b.irecv(gate_on(2, 0), 2u64, vec![0u8; 64]);
    let short = b.irecv(gate_on(3, 0), 3u64, vec![0u8; 4]);
    let sends = isend_on_channels(a, 1..=3, 10);
    let got = kept.wait().unwrap();
    check(&got.data, 10, 2);
    assert!(
        matches!(
            short.wait(),
            Err(Error::Request(RequestError::Truncated { .. }))
        ),
        "the last message is longer than its receive"
    );
    for sent in wait_all(sends) {
        assert_eq!(sent.unwrap().len, 10);
    }
    assert_eq!(at_once(b), 0, "nothing landed at once");
    assert_eq!(
        packets_from_0_to_1(&cluster),
        1,
        "the three shared one packet"
    );
    // The dropped receive took the first message: a new one on its
    // channel gets the next.
    a.isend(gate_on(1, 1), 1, pattern(10, 7))
        .unwrap()
        .wait()
        .unwrap();
    let next = b.irecv(gate_on(1, 0), 1u64, vec![0u8; 64]).wait().unwrap();
    check(&next.data, 10, 7);
    assert_eq!(b.unwaited_failures(), 0);
}
