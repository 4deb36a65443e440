//! Messages begun before they come (`Node::begin_unpacking` with nothing
//! posted or unexpected on its channel): their receive waits outside the
//! engine, and a message that comes whole in one packet is taken whole as
//! it lands. Checked here over the simulated network: the data and errors
//! are those of the usual path, receives keep their posting order against
//! every other kind of receive, and what cannot land at once (rendezvous,
//! a lost peer) goes the usual way.

mod common;

use common::{check, cluster, pattern};
use navette::{
    ChannelId, Error, Gate, ReceiveMode, RecvFrom, RequestError, SendMode, TagMatch, Unpacking,
};

/// Messages received at once by `node`, over all its gates.
fn at_once(node: &navette::Node) -> u64 {
    node.gate_stats().iter().map(|s| s.messages_at_once).sum()
}

/// The kinds of `node`'s receives waiting outside the engine.
fn waiting_kinds(node: &navette::Node) -> Vec<&'static str> {
    node.report().outside.iter().map(|o| o.kind).collect()
}

/// Sends a tagged message of `len` bytes drawn from `salt` and waits
/// until it has left.
fn send_tagged(node: &navette::Node, gate: Gate, tag: u64, len: usize, salt: u64) {
    node.isend(gate, tag, pattern(len, salt))
        .unwrap()
        .wait()
        .unwrap();
}

/// Sends a message of an 8-byte EXPRESS header and a `body`-byte CHEAPER
/// body, both drawn from `salt`.
fn send_message(node: &navette::Node, gate: Gate, tag: u64, body: usize, salt: u64) {
    let (head, data) = (pattern(8, salt), pattern(body, salt + 1));
    let mut msg = node.begin_packing(gate, tag).unwrap();
    msg.pack(&head, SendMode::Cheaper, ReceiveMode::Express)
        .unwrap();
    msg.pack(&data, SendMode::Cheaper, ReceiveMode::Cheaper)
        .unwrap();
    msg.end_packing().unwrap();
}

/// Unpacks a message sent by [`send_message`] (its body into `data`,
/// which is checked against `salt`): its tag.
fn receive_message<'a>(mut msg: Unpacking<'_, 'a>, data: &'a mut [u8], salt: u64) -> u64 {
    let body = data.len();
    let mut head = [0u8; 8];
    msg.unpack_express(&mut head, SendMode::Cheaper).unwrap();
    msg.unpack_cheaper(data, SendMode::Cheaper).unwrap();
    let status = msg.end_unpacking().unwrap();
    check(&head, 8, salt);
    assert_eq!(status.len, 8 + body);
    status.tag
}

/// Receives a message sent by [`send_message`] through `msg`, checking
/// its body against `salt`: its tag.
macro_rules! receive {
    ($msg:expr, $data:ident, $salt:expr) => {{
        let tag = receive_message($msg, &mut $data, $salt);
        check(&$data, $data.len(), $salt + 1);
        tag
    }};
}

/// `a` sends rank 1 a message with `tag` (a 8-byte head and a `len`-byte
/// body, from `salt`), then `b` begins and receives it, checked: the tag
/// it came with.
fn send_then_receive(a: &navette::Node, b: &navette::Node, tag: u64, len: usize, salt: u64) -> u64 {
    send_message(a, a.gate(1), tag, len, salt);
    let mut data = vec![0u8; len];
    let msg = b.begin_unpacking(b.gate(0), tag).unwrap();
    receive!(msg, data, salt)
}

#[test]
fn a_message_begun_before_it_comes_is_taken_whole_as_it_lands() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    for round in 0..50u64 {
        let mut data = vec![0u8; 100];
        let msg = b.begin_unpacking(b.gate(0), 7u64).unwrap();
        if round == 0 {
            let report = b.report();
            assert!(report.requests.is_empty(), "{report}");
            assert_eq!(report.outside.len(), 1, "{report}");
            assert_eq!(report.outside[0].kind, "begun message");
        }
        send_message(a, a.gate(1), 7, 100, round);
        assert_eq!(receive!(msg, data, round), 7);
    }
    assert_eq!(at_once(b), 50, "every message landed outside the engine");
    assert!(b.report().outside.is_empty());
}

#[test]
fn receives_made_after_a_begun_message_come_after_it() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    for round in 0..3u64 {
        // Any tag, on one channel: the first message is the begun one's.
        let mut data = vec![0u8; 16];
        let first = b.begin_unpacking(RecvFrom::any(), TagMatch::any()).unwrap();
        let salt = round * 10;
        send_message(a, a.gate(1), 0, 16, salt);
        send_tagged(a, a.gate(1), 1, 10, salt + 5);
        let mut second = vec![0u8; 10];
        match round {
            0 => {
                let got = b
                    .irecv(RecvFrom::any(), TagMatch::any(), second)
                    .wait()
                    .unwrap();
                assert_eq!(got.status.tag, 1);
                second = got.data;
            }
            1 => {
                let status = b
                    .recv(RecvFrom::any(), TagMatch::any(), &mut second)
                    .unwrap();
                assert_eq!(status.tag, 1);
            }
            _ => {
                let mut msg = b.begin_unpacking(RecvFrom::any(), TagMatch::any()).unwrap();
                msg.unpack(&mut second, SendMode::Cheaper, ReceiveMode::Cheaper)
                    .unwrap();
                assert_eq!(msg.end_unpacking().unwrap().tag, 1);
            }
        }
        check(&second, 10, salt + 5);
        assert_eq!(receive!(first, data, salt), 0);
    }
}

#[test]
fn a_begun_message_that_cannot_land_at_once_is_received_the_usual_way() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    // Its body comes by rendezvous: the packet has the receive posted.
    let body = 1 << 20;
    let mut data = vec![0u8; body];
    let msg = b.begin_unpacking(b.gate(0), 3u64).unwrap();
    assert_eq!(waiting_kinds(b), ["begun message"]);
    std::thread::scope(|s| {
        s.spawn(|| send_message(a, a.gate(1), 3, body, 1));
        assert_eq!(receive!(msg, data, 1), 3);
    });
    assert_eq!(at_once(b), 0);
    assert!(b.report().outside.is_empty());
}

#[test]
fn a_dropped_begun_message_leaves_its_message_to_the_next_receive() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let begun = b.begin_unpacking(b.gate(0), 5u64).unwrap();
    assert_eq!(waiting_kinds(b), ["begun message"]);
    drop(begun);
    assert!(b.report().outside.is_empty());
    assert_eq!(send_then_receive(a, b, 5, 24, 40), 5);
    assert_eq!(b.unwaited_failures(), 0);
}

#[test]
fn a_begun_message_from_a_lost_peer_fails_and_any_source_still_receives() {
    let cluster = cluster(3).build();
    let (a, b, c) = (cluster.node(0), cluster.node(1), cluster.node(2));
    let mut from_a = b.begin_unpacking(b.gate(0), 1u64).unwrap();
    assert_eq!(waiting_kinds(b), ["begun message"]);
    cluster.cut(cluster.links_between(0, 1)[0]);
    match from_a.status() {
        Err(Error::Request(RequestError::PeerUnreachable { peer })) => assert_eq!(peer, 0),
        other => panic!("expected peer 0 unreachable, got {other:?}"),
    }
    drop(from_a);
    let mut data = vec![0u8; 12];
    let from_any = b.begin_unpacking(RecvFrom::any(), 1u64).unwrap();
    send_message(c, c.gate(1), 1, 12, 60);
    assert_eq!(receive!(from_any, data, 60), 1);
    // The lost peer's node goes on without b.
    assert!(a.report().outside.is_empty());
}

#[test]
fn each_channel_keeps_its_own_order_beside_a_begun_message() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let on_4 = |peer| Gate::new(ChannelId(4), peer);
    // The begun message waits on channel 4; receives posted ahead on
    // another channel still wait outside the engine and land at once.
    let mut data = vec![0u8; 32];
    let msg = b.begin_unpacking(on_4(0), 2u64).unwrap();
    let other = b.irecv(b.gate(0), 2u64, vec![0u8; 8]);
    send_tagged(a, a.gate(1), 2, 8, 70);
    send_message(a, on_4(1), 2, 32, 71);
    check(&other.wait().unwrap().data, 8, 70);
    assert_eq!(receive!(msg, data, 71), 2);
    assert_eq!(at_once(b), 2);
}

#[test]
fn a_cheaper_first_piece_returns_before_its_message_comes() {
    // Spinning for ever: a CHEAPER piece that waited for its message
    // would fail by the guard's timeout instead of returning.
    let cluster = spinning_for_ever(Some(HANG_GUARD));
    let (a, b) = (cluster.node(0), cluster.node(1));
    let mut data = vec![0u8; 40];
    let mut msg = b.begin_unpacking(b.gate(0), 9u64).unwrap();
    assert_eq!(waiting_kinds(b), ["begun message"]);
    // Nothing was sent: the CHEAPER piece returns all the same, its
    // receive posted, and the data lands at the end.
    msg.unpack_cheaper(&mut data, SendMode::Cheaper).unwrap();
    assert!(b.report().outside.is_empty());
    let sent = pattern(40, 80);
    let mut out = a.begin_packing(a.gate(1), 9).unwrap();
    out.pack(&sent, SendMode::Cheaper, ReceiveMode::Cheaper)
        .unwrap();
    out.end_packing().unwrap();
    let status = msg.end_unpacking().unwrap();
    assert_eq!((status.tag, status.len), (9, 40));
    check(&data, 40, 80);
    assert_eq!(at_once(b), 0, "it was received the usual way");
}

#[test]
fn a_begun_message_taken_whole_checks_the_senders_pieces() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    // Unpacked as EXPRESS, packed for CHEAPER: the mode error of the
    // usual path, and the message is gone all the same.
    let msg = b.begin_unpacking(b.gate(0), 4u64).unwrap();
    send_message(a, a.gate(1), 4, 16, 90);
    let mut msg = msg;
    let mut head = [0u8; 8];
    msg.unpack_express(&mut head, SendMode::Cheaper).unwrap();
    let mut body = [0u8; 16];
    let err = msg
        .unpack_express(&mut body, SendMode::Cheaper)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Request(RequestError::ModeMismatch { piece: 1, .. })
        ),
        "{err:?}"
    );
    drop(msg);
    // One piece short: the count error at the end.
    let mut short = b.begin_unpacking(b.gate(0), 4u64).unwrap();
    send_message(a, a.gate(1), 4, 16, 91);
    short.unpack_express(&mut head, SendMode::Cheaper).unwrap();
    let err = short.end_unpacking().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Request(RequestError::PieceCountMismatch { unpacked: 1, .. })
        ),
        "{err:?}"
    );
    assert_eq!(at_once(b), 2, "both landed outside the engine");
    // Nothing is left behind: the next message is received in full.
    let mut data = vec![0u8; 16];
    let next = b.begin_unpacking(b.gate(0), 4u64).unwrap();
    send_message(a, a.gate(1), 4, 16, 92);
    assert_eq!(receive!(next, data, 92), 4);
}

#[test]
fn a_begun_message_dropped_after_it_landed_is_gone() {
    let cluster = cluster(2).build();
    let (a, b) = (cluster.node(0), cluster.node(1));
    let mut msg = b.begin_unpacking(b.gate(0), 6u64).unwrap();
    send_message(a, a.gate(1), 6, 20, 100);
    // Matched (it landed whole), then dropped unread.
    assert_eq!(msg.status().unwrap().tag, 6);
    drop(msg);
    assert!(b.report().outside.is_empty());
    assert_eq!(send_then_receive(a, b, 6, 20, 101), 6);
    assert_eq!(at_once(b), 2);
    assert_eq!(b.unwaited_failures(), 0);
}

#[test]
fn a_begun_message_spinning_for_ever_still_times_out() {
    // Spinning for ever, as configured, the wait outside the engine
    // honours the timeout as the usual wait does; the receive stays, to
    // be waited for again.
    let cluster = spinning_for_ever(Some(std::time::Duration::from_millis(200)));
    let b = cluster.node(1);
    let mut msg = b.begin_unpacking(b.gate(0), 2u64).unwrap();
    let mut head = [0u8; 8];
    match msg.unpack_express(&mut head, SendMode::Cheaper) {
        Err(Error::Stalled { what, .. }) => assert_eq!(what, "the begun message"),
        other => panic!("expected a stall, got {other:?}"),
    }
    assert_eq!(waiting_kinds(b), ["begun message"]);
    let a = cluster.node(0);
    send_message(a, a.gate(1), 2, 8, 120);
    msg.unpack_express(&mut head, SendMode::Cheaper).unwrap();
    check(&head, 8, 120);
    let mut body = [0u8; 8];
    msg.unpack_cheaper(&mut body, SendMode::Cheaper).unwrap();
    assert_eq!(msg.end_unpacking().unwrap().len, 16);
    check(&body, 8, 121);
}

#[test]
fn a_blocking_receive_waiting_outside_stays_first_on_its_channel() {
    // A thread's blocking receive waits outside the engine (spinning as
    // long as its spin phase lets it); meanwhile another thread begins a
    // message and posts a receive on the same channel the usual way. The
    // blocking receive, the oldest, gets the first message.
    let cluster = spinning_for_ever(Some(HANG_GUARD));
    let (a, b) = (cluster.node(0), cluster.node(1));
    std::thread::scope(|s| {
        let blocking = blocking_recv_outside(s, b, RecvFrom::any());
        let begun = b.begin_unpacking(RecvFrom::any(), TagMatch::any()).unwrap();
        let third = b.irecv(RecvFrom::any(), TagMatch::any(), vec![0u8; 8]);
        for tag in 0..3u64 {
            send_tagged(a, a.gate(1), tag, 8, 110 + tag);
        }
        // Sent in tag order 0, 1, 2; received in posting order.
        let (tag, first) = blocking.join().unwrap();
        assert_eq!(tag, 0);
        check(&first, 8, 110);
        let mut begun = begun;
        let mut second = [0u8; 8];
        begun
            .unpack(&mut second, SendMode::Cheaper, ReceiveMode::Cheaper)
            .unwrap();
        assert_eq!(begun.end_unpacking().unwrap().tag, 1);
        check(&second, 8, 111);
        let third = third.wait().unwrap();
        assert_eq!(third.status.tag, 2);
        check(&third.data, 8, 112);
    });
}

#[test]
fn a_blocking_receive_that_times_out_leaves_its_message_to_the_next() {
    let timeout = Some(std::time::Duration::from_millis(200));
    // Stalled while spinning outside the engine (for ever), or after the
    // spin, posted: either way it is gone.
    let default_spin = cluster(2)
        .node_config(navette::NodeConfig {
            wait_timeout: timeout,
            ..navette::NodeConfig::default()
        })
        .build();
    for (cluster, what) in [
        (spinning_for_ever(timeout), "a blocking receive"),
        (default_spin, "req#"),
    ] {
        let (a, b) = (cluster.node(0), cluster.node(1));
        let mut data = [0u8; 8];
        match b.recv(b.gate(0), 3u64, &mut data) {
            Err(Error::Stalled { what: got, .. }) => assert!(got.starts_with(what), "{got}"),
            other => panic!("expected a stall, got {other:?}"),
        }
        let report = b.report();
        assert!(
            report.outside.is_empty() && report.requests.is_empty(),
            "{report}"
        );
        send_tagged(a, a.gate(1), 3, 8, 130);
        b.recv(b.gate(0), 3u64, &mut data).unwrap();
        check(&data, 8, 130);
        assert_eq!(b.unwaited_failures(), 0);
    }
    // Posted behind an unexpected message (the usual path from the start).
    let cluster = spinning_for_ever(timeout);
    let (a, b) = (cluster.node(0), cluster.node(1));
    send_tagged(a, a.gate(1), 7, 8, 131);
    while b.probe(b.gate(0), 7u64).unwrap().is_none() {}
    let mut data = [0u8; 8];
    assert!(matches!(
        b.recv(b.gate(0), 3u64, &mut data),
        Err(Error::Stalled { .. })
    ));
    send_tagged(a, a.gate(1), 3, 8, 132);
    b.recv(b.gate(0), 3u64, &mut data).unwrap();
    check(&data, 8, 132);
    b.recv(b.gate(0), 7u64, &mut data).unwrap();
    check(&data, 8, 131);
    assert_eq!(b.unwaited_failures(), 0);
}

#[test]
fn a_blocking_receive_waiting_outside_is_posted_before_any_other_on_its_channel() {
    // While a blocking receive waits outside the engine on a channel, a
    // receive there of any kind is made the usual way, the blocking one
    // posted first; receives on other channels wait outside as usual.
    let cluster = spinning_for_ever(Some(HANG_GUARD));
    let (a, b) = (cluster.node(0), cluster.node(1));
    let on_4 = |peer| Gate::new(ChannelId(4), peer);
    std::thread::scope(|s| {
        let blocking = blocking_recv_outside(s, b, on_4(0).into());
        let mut begun = b.begin_unpacking(on_4(0), TagMatch::any()).unwrap();
        let mut second = vec![0u8; 8];
        // Returns at once, posted behind the blocking receive.
        begun
            .unpack_cheaper(&mut second, SendMode::Cheaper)
            .unwrap();
        let third = b.irecv(on_4(0), TagMatch::any(), vec![0u8; 8]);
        let elsewhere = b.irecv(b.gate(0), 9u64, vec![0u8; 8]);
        assert_eq!(waiting_kinds(b), ["irecv posted ahead"]);
        for tag in 0..3u64 {
            send_tagged(a, on_4(1), tag, 8, 140 + tag);
        }
        send_tagged(a, a.gate(1), 9, 8, 149);
        let (tag, first) = blocking.join().unwrap();
        assert_eq!(tag, 0);
        check(&first, 8, 140);
        assert_eq!(begun.end_unpacking().unwrap().tag, 1);
        check(&second, 8, 141);
        let third = third.wait().unwrap();
        assert_eq!(third.status.tag, 2);
        check(&third.data, 8, 142);
        check(&elsewhere.wait().unwrap().data, 8, 149);
    });
}

/// A guard against a regression that would wait for ever: the longest a
/// test's wait may see no progress.
const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts a thread whose blocking receive of 8 bytes from `from`, any
/// tag, waits outside the engine of `node`, and returns once it does; the
/// thread returns the tag and data it received.
fn blocking_recv_outside<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    node: &'scope navette::Node,
    from: RecvFrom,
) -> std::thread::ScopedJoinHandle<'scope, (u64, Vec<u8>)> {
    let blocking = s.spawn(move || {
        let mut data = vec![0u8; 8];
        let status = node.recv(from, TagMatch::any(), &mut data).unwrap();
        (status.tag, data)
    });
    let start = std::time::Instant::now();
    while !waiting_kinds(node).contains(&"blocking receive") {
        assert!(start.elapsed() < HANG_GUARD, "{}", node.report());
        std::thread::yield_now();
    }
    blocking
}

#[test]
fn an_irecv_beside_a_blocking_receive_waiting_outside_posts_it_first() {
    let cluster = spinning_for_ever(Some(HANG_GUARD));
    let (a, b) = (cluster.node(0), cluster.node(1));
    std::thread::scope(|s| {
        let blocking = blocking_recv_outside(s, b, b.gate(0).into());
        // Not beside it outside the engine: both are posted, in order.
        let second = b.irecv(b.gate(0), TagMatch::any(), vec![0u8; 8]);
        let report = b.report();
        assert!(report.outside.is_empty(), "{report}");
        assert_eq!(report.requests.len(), 2, "{report}");
        for tag in 0..2u64 {
            send_tagged(a, a.gate(1), tag, 8, 150 + tag);
        }
        let (tag, first) = blocking.join().unwrap();
        assert_eq!(tag, 0);
        check(&first, 8, 150);
        let second = second.wait().unwrap();
        assert_eq!(second.status.tag, 1);
        check(&second.data, 8, 151);
    });
}

/// Two nodes that spin for ever while they wait, with `timeout`.
fn spinning_for_ever(timeout: Option<std::time::Duration>) -> navette::sim::SimCluster {
    cluster(2)
        .node_config(navette::NodeConfig {
            wait_timeout: timeout,
            spin_rounds: u32::MAX,
            oversubscribed_spin_rounds: u32::MAX,
            ..navette::NodeConfig::default()
        })
        .build()
}
