//! The shm driver with ranks as threads of this process (the segment and
//! single-copy reads work within one process as between processes; the
//! multi-process tests are `navette-cli`'s `launch` tests).

mod common;

use std::time::Duration;

use common::{check, gate_copies, pattern};
use navette::shm::{CopyMode, ShmConfig, ShmDriver};
use navette::{Node, NodeConfig, ReceiveMode, RecvFrom, RuntimeConfig, SendMode, init_shm};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;

const JOB_KEY: [u8; JOB_KEY_LEN] = [0x3c; JOB_KEY_LEN];

/// A job id of its own for every job, so tests running at once (here or
/// in other processes) never share a segment name.
fn fresh_job_id() -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("random bytes");
    u64::from_le_bytes(bytes)
}

fn config(copy: CopyMode) -> RuntimeConfig {
    RuntimeConfig {
        node: NodeConfig {
            // A hang guard, not a timing assertion.
            wait_timeout: Some(Duration::from_secs(300)),
            ..NodeConfig::default()
        },
        shm: ShmConfig {
            copy,
            ..ShmConfig::default()
        },
        log_to_stderr: false,
        report_on_sigusr1: false,
        ..RuntimeConfig::default()
    }
}

/// Runs `f` on `size` ranks, one thread each, between init and finalize;
/// returns what each rank returned, by rank.
fn run<R: Send>(
    size: u32,
    config: RuntimeConfig,
    f: impl Fn(&Node, &ShmDriver, u64) -> R + Sync,
) -> Vec<R> {
    let job = fresh_job_id();
    let ranks = LocalBootstrap::job(size, job, JOB_KEY);
    common::run_ranks(ranks, &config, init_shm, |node, driver| {
        f(node, driver, job)
    })
}

/// Sizes on both sides of each boundary: the rendezvous threshold (about
/// 33 KiB by default) and single copy (256 KiB).
const SIZES: [usize; 10] = [
    0,
    1,
    8,
    4096,
    16 << 10,
    32 << 10,
    40 << 10,
    64 << 10,
    1 << 20,
    5 << 20,
];

/// Every size both ways, checked; returns the driver's counters.
fn exchange(node: &Node, driver: &ShmDriver) -> navette::shm::ShmStats {
    let peer = 1 - node.rank();
    for (i, &size) in SIZES.iter().enumerate() {
        let tag = i as u64;
        let data = pattern(size, tag + u64::from(node.rank()));
        let recv = node.irecv(RecvFrom::from(node.gate(peer)), tag, vec![0u8; size]);
        node.send(node.gate(peer), tag, &data).expect("send");
        let got = recv.wait().expect("recv");
        check(&got.data, size, tag + u64::from(peer));
    }
    driver.stats()
}

fn total_bytes() -> u64 {
    SIZES.iter().map(|&s| s as u64).sum()
}

/// Bytes of [`SIZES`] that go by rendezvous (from the default threshold on).
fn rendezvous_bytes() -> u64 {
    rendezvous_sizes().map(|s| s as u64).sum()
}

/// The sizes of [`SIZES`] that go by rendezvous.
fn rendezvous_sizes() -> impl Iterator<Item = usize> {
    let threshold = ShmConfig::default().rdv_threshold;
    SIZES.iter().copied().filter(move |&s| s >= threshold)
}

/// What each rank's peer wrote for its shared reads, the peer counted as
/// written for it.
fn writes_match(stats: &[navette::shm::ShmStats]) {
    assert_eq!(
        stats[0].bytes_written_by_peers,
        stats[1].bytes_written_for_peers
    );
    assert_eq!(
        stats[1].bytes_written_by_peers,
        stats[0].bytes_written_for_peers
    );
}

/// Forced single copy: every rendezvous byte is read by the receiver
/// from the sender's memory; nothing large goes through the rings. Each
/// piece is one pull fragment or less, so each is read at its request.
#[test]
fn single_copy_pulls_rendezvous_data() {
    let stats = run(2, config(CopyMode::Single), |node, driver, _| {
        exchange(node, driver)
    });
    let rdv = rendezvous_bytes();
    for s in &stats {
        assert!(s.can_pull);
        assert_eq!(s.bytes_pulled + s.bytes_written_by_peers, rdv, "{s:?}");
        assert!(s.bytes_copied_in < total_bytes() - rdv + 64 * 1024, "{s:?}");
        assert_eq!(s.reads_at_request, rendezvous_sizes().count() as u64);
    }
    writes_match(&stats);
}

/// Pieces longer than a pull fragment are not read at the request: their
/// data is asked for and pulled fragment by fragment; shorter ones are
/// still read at theirs. Every byte is read once either way.
#[test]
fn pieces_longer_than_a_pull_fragment_are_pulled_by_fragments() {
    let mut config = config(CopyMode::Single);
    config.shm.pull_fragment = 1 << 20;
    let stats = run(2, config, |node, driver, _| exchange(node, driver));
    let at_request = rendezvous_sizes().filter(|&s| s <= 1 << 20).count();
    assert!(at_request < rendezvous_sizes().count(), "some longer piece");
    for s in &stats {
        assert_eq!(
            s.bytes_pulled + s.bytes_written_by_peers,
            rendezvous_bytes(),
            "{s:?}"
        );
        assert_eq!(s.reads_at_request, at_request as u64, "{s:?}");
    }
    writes_match(&stats);
}

/// Shared reads turned off: the receiver reads every byte itself.
#[test]
fn unshared_single_copy_reads_everything_itself() {
    let mut config = config(CopyMode::Single);
    config.shm.share_min = None;
    let stats = run(2, config, |node, driver, _| exchange(node, driver));
    let rdv = rendezvous_bytes();
    for s in &stats {
        assert_eq!(s.bytes_pulled, rdv, "{s:?}");
        assert_eq!(s.bytes_written_by_peers + s.bytes_written_for_peers, 0);
    }
}

/// Shared reads from the smallest rendezvous size on, many times, while
/// each rank's thread spins in its blocking send (so that it takes offers)
/// or sits in its application between messages (so that some offers are
/// revoked): every message arrives whole, and the bytes each side copied
/// add up.
#[test]
fn shared_reads_deliver_every_byte() {
    let mut config = config(CopyMode::Single);
    config.shm.share_min = Some(0);
    let rounds = 40;
    let size = 256 << 10;
    let stats = run(2, config, |node, driver, _| {
        let peer = 1 - node.rank();
        for round in 0..rounds {
            let tag = round as u64;
            let data = pattern(size, tag * 2 + u64::from(node.rank()));
            let recv = node.irecv(RecvFrom::from(node.gate(peer)), tag, vec![0u8; size]);
            if round % 3 == 0 {
                // Busy elsewhere for a while: the peer's offer may wait.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            node.send(node.gate(peer), tag, &data).expect("send");
            let got = recv.wait().expect("recv");
            check(&got.data, size, tag * 2 + u64::from(peer));
        }
        driver.stats()
    });
    for s in &stats {
        assert_eq!(
            s.bytes_pulled + s.bytes_written_by_peers,
            (rounds * size) as u64,
            "{s:?}"
        );
        assert_eq!(s.reads_at_request, rounds as u64, "{s:?}");
    }
    writes_match(&stats);
}

/// Forced two copies: nothing is pulled, everything goes through cells.
#[test]
fn two_copies_go_through_the_rings() {
    let stats = run(2, config(CopyMode::Fallback), |node, driver, _| {
        exchange(node, driver)
    });
    for s in &stats {
        assert!(!s.can_pull);
        assert_eq!(s.bytes_pulled, 0, "{s:?}");
        assert!(s.bytes_copied_in >= total_bytes(), "{s:?}");
    }
}

/// Automatic: rendezvous fragments below `single_copy_min` cross in pieces
/// through the cells, longer ones are pulled.
#[test]
fn automatic_copy_pulls_only_long_fragments() {
    let single_copy_min = 1 << 20;
    let mut config = config(CopyMode::Auto);
    config.shm.single_copy_min = single_copy_min;
    let stats = run(2, config, |node, driver, _| exchange(node, driver));
    let pulled: u64 = SIZES
        .iter()
        .filter(|&&s| s >= single_copy_min)
        .map(|&s| s as u64)
        .sum();
    for s in &stats {
        assert!(s.can_pull);
        assert_eq!(s.bytes_pulled + s.bytes_written_by_peers, pulled, "{s:?}");
        assert_eq!(s.reads_at_request, 2, "1 MiB and 5 MiB, {s:?}");
        assert!(s.bytes_copied_in >= total_bytes() - pulled, "{s:?}");
        assert!(
            s.bytes_copied_in < total_bytes() - pulled + 64 * 1024,
            "{s:?}"
        );
    }
}

/// The segment's name is gone once every rank has attached; the ranks
/// talk on regardless.
#[test]
fn the_segment_is_unlinked_once_all_ranks_attached() {
    let found = run(3, config(CopyMode::Auto), |node, _, job| {
        let path = format!("/dev/shm/navette-{job:016x}");
        let exists = std::path::Path::new(&path).exists();
        let next = (node.rank() + 1) % 3;
        let prev = (node.rank() + 2) % 3;
        let recv = node.irecv(RecvFrom::from(node.gate(prev)), 1u64, vec![0u8; 8]);
        node.send(node.gate(next), 1, b"around!!").expect("send");
        assert_eq!(recv.wait().expect("recv").data, b"around!!");
        exists
    });
    assert_eq!(found, vec![false; 3]);
}

/// Queue memory grows as the number of ranks, not its square.
#[test]
fn segment_memory_is_linear_in_ranks() {
    let mapped = |ranks: u32| {
        run(ranks, config(CopyMode::Auto), |_, driver, _| {
            driver.stats().segment_bytes
        })[0]
    };
    let (two, sixteen) = (mapped(2), mapped(16));
    let per_rank = (sixteen - two) / 14;
    assert!(per_rank > 0);
    // Affine in the rank count: the header, then a fixed area per rank.
    assert!(two >= 2 * per_rank && two < 3 * per_rank, "{two} {sixteen}");
}

/// A job of one has no peer and no segment.
#[test]
fn a_job_of_one_needs_no_segment() {
    let stats = run(1, config(CopyMode::Auto), |node, driver, _| {
        assert_eq!(node.size(), 1);
        driver.stats()
    });
    assert_eq!(stats[0].segment_bytes, 0);
}

/// Blocking receives that never stop spinning: each waits outside the
/// engine until its message comes (no fallback to the usual path while
/// it waits).
fn spinning_forever(copy: CopyMode) -> RuntimeConfig {
    let mut config = config(copy);
    config.node.spin_rounds = u32::MAX;
    config.node.oversubscribed_spin_rounds = u32::MAX;
    config
}

/// [`spinning_forever`], every small `isend` leaving at once (none waits
/// in its peer's open packet: [`ShmConfig::stage_max`] off).
fn unstaged() -> RuntimeConfig {
    let mut config = spinning_forever(CopyMode::Auto);
    config.shm.stage_max = None;
    config
}

/// A blocking ping-pong: the messages land straight in the waiting
/// receives, taken from the ring under the node's lock alone, whole and
/// in order.
#[test]
fn blocking_receives_take_their_messages_from_the_ring_at_once() {
    const ROUNDS: u64 = 200;
    let stats = run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        let mut buf = [0u8; 8];
        for i in 0..ROUNDS {
            if node.rank() == 0 {
                node.send(peer, i, &i.to_le_bytes()).expect("send");
                let got = node.recv(peer, i, &mut buf).expect("recv");
                assert_eq!((got.tag, got.len), (i, 8));
            } else {
                let got = node.recv(peer, i, &mut buf).expect("recv");
                assert_eq!((got.tag, got.len), (i, 8));
                node.send(peer, i, &buf).expect("send");
            }
            assert_eq!(buf, i.to_le_bytes());
        }
        driver.stats()
    });
    for s in &stats {
        assert!(s.landed_at_once > 0, "{s:?}");
        assert!(s.landed_at_once <= ROUNDS, "{s:?}");
    }
}

/// What a waiting blocking receive does not take stays in the ring for the
/// usual path, in order: a message for another tag (matched later from the
/// unexpected ones), a rendezvous request for the receive itself (posted,
/// then its data lands), and messages for the receive behind them.
#[test]
fn cells_a_waiting_receive_does_not_take_go_the_usual_way_in_order() {
    const BIG: usize = 1 << 20;
    run(2, spinning_forever(CopyMode::Auto), |node, _, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 1 {
            for round in 0..20u64 {
                node.send(peer, 9, &pattern(64, round)).expect("send");
                node.send(peer, 5, &pattern(8, round)).expect("send");
                node.send(peer, 7, &pattern(BIG, round)).expect("send");
                node.send(peer, 7, &pattern(100, round)).expect("send");
            }
            return;
        }
        let mut small = [0u8; 8];
        let mut big = vec![0u8; BIG];
        let mut other = [0u8; 64];
        for round in 0..20u64 {
            let got = node.recv(peer, 5, &mut small).expect("recv 5");
            check(&small[..got.len], 8, round);
            let got = node.recv(peer, 7, &mut big).expect("recv 7, big");
            check(&big[..got.len], BIG, round);
            let got = node.recv(peer, 7, &mut big).expect("recv 7, small");
            check(&big[..got.len], 100, round);
            let got = node.recv(peer, 9, &mut other).expect("recv 9");
            check(&other[..got.len], 64, round);
        }
    });
}

/// Small Madeleine messages leave whole, in one packet written straight
/// into the peer's ring with no request; interleaved with tagged messages
/// and with messages too large for it, everything arrives intact and in
/// order.
#[test]
fn small_messages_leave_whole_at_once_and_in_order() {
    const ROUNDS: u64 = 100;
    let stats = run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        for round in 0..ROUNDS {
            // A large piece takes the usual way every tenth round.
            let body_len = if round % 10 == 9 { 4 << 20 } else { 100 };
            let body = pattern(body_len, round);
            let head = (body_len as u64).to_le_bytes();
            if (node.rank() == 0) == (round % 2 == 0) {
                let mut msg = node.begin_packing(peer, 3).expect("begin");
                msg.pack(&head, SendMode::Safer, ReceiveMode::Express)
                    .expect("pack");
                msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
                    .expect("pack");
                msg.pack_safer(b"end", ReceiveMode::Express).expect("pack");
                msg.end_packing().expect("end");
                // A send at once too, when the rail is idle.
                let sent = node.isend(peer, 4, round.to_le_bytes().to_vec());
                sent.expect("isend").wait().expect("sent");
            } else {
                let mut msg = node.begin_unpacking(peer, 3u64).expect("begin");
                let mut len = [0u8; 8];
                msg.unpack_express(&mut len, SendMode::Safer).expect("head");
                let mut got = vec![0u8; u64::from_le_bytes(len) as usize];
                msg.unpack_cheaper(&mut got, SendMode::Cheaper)
                    .expect("body");
                let mut end = [0u8; 3];
                msg.unpack_express(&mut end, SendMode::Safer).expect("end");
                msg.end_unpacking().expect("end_unpacking");
                check(&got, body_len, round);
                assert_eq!(&end, b"end");
                let mut tagged = [0u8; 8];
                node.recv(peer, 4, &mut tagged).expect("recv");
                assert_eq!(u64::from_le_bytes(tagged), round);
            }
        }
        driver.stats()
    });
    // Rank 0 sent 50 small messages and 50 tagged ones, rank 1 45 small
    // and 5 large ones and 50 tagged ones; the first one at least found
    // its rail idle.
    assert!((1..=100).contains(&stats[0].sent_at_once), "{stats:?}");
    assert!((1..=95).contains(&stats[1].sent_at_once), "{stats:?}");
}

/// The length of the `i`th message of the ordering tests: small ones
/// below and above [`ShmConfig::stage_max`]'s default, every sixth one by
/// rendezvous.
fn mixed_len(i: u64) -> usize {
    if i % 6 == 5 {
        100 << 10
    } else {
        (i as usize * 13) % 300
    }
}

/// A small non-blocking send to an idle rail leaves at once (no send is
/// staged here): its request is complete from its start, before the
/// receiver has done anything. Mixed with sends too large for it
/// (rendezvous, whose data leaves later), including small ones that leave
/// at once while such a rendezvous is pending, every message arrives
/// intact and in order.
#[test]
fn small_isends_leave_at_once_and_in_order() {
    const SENDS: u64 = 60;
    let len = mixed_len;
    run(2, unstaged(), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            // Nothing went to the peer yet: the rail is idle.
            let first = node.isend(peer, 1, pattern(8, 99)).expect("isend");
            assert_eq!(driver.stats().sent_at_once, 1);
            let mut sends = Vec::new();
            for i in 0..SENDS {
                sends.push(node.isend(peer, 2, pattern(len(i), i)).expect("isend"));
                if len(i) > 300 {
                    // Its rendezvous request leaves: the window is empty
                    // again, and the next small sends leave at once.
                    node.progress().expect("progress");
                }
            }
            assert!(first.test().expect("test"), "complete from its start");
            // Five before the first large send, one at least after it.
            assert!(driver.stats().sent_at_once > 6, "{:?}", driver.stats());
            let (i, sent) = navette::wait_any(&mut sends).expect("wait_any");
            assert_eq!((i, sent.expect("sent").len), (0, len(0)));
            for outcome in navette::wait_all(sends) {
                outcome.expect("sent");
            }
            assert_eq!(first.wait().expect("sent").len, 8);
            // The peer takes the first only after all the others: it had
            // left before any receive was posted.
            node.recv(peer, 3, &mut []).expect("done");
            return;
        }
        for i in 0..SENDS {
            let got = node
                .irecv(peer, 2u64, vec![0u8; 100 << 10])
                .wait()
                .expect("recv");
            check(&got.data, len(i), i);
        }
        let mut first = [0u8; 8];
        node.recv(peer, 1, &mut first).expect("first");
        check(&first, 8, 99);
        node.send(peer, 3, &[]).expect("done");
    });
}

/// A small `isend_safer` to an idle rail leaves at once (no send is
/// staged here), straight from the caller's slice: complete from its
/// start, the buffer free as it returns.
#[test]
fn small_isend_safer_leaves_at_once() {
    run(2, unstaged(), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            let mut buf = pattern(40, 7);
            let sent = node.isend_safer(peer, 5, &buf).expect("isend_safer");
            buf.fill(0);
            assert_eq!(driver.stats().sent_at_once, 1);
            assert!(sent.test().expect("test"), "complete from its start");
            assert_eq!(sent.wait().expect("sent").len, 40);
            node.recv(peer, 6, &mut []).expect("done");
            return;
        }
        let got = node.irecv(peer, 5u64, vec![0u8; 64]).wait().expect("recv");
        check(&got.data, 40, 7);
        node.send(peer, 6, &[]).expect("done");
    });
}

/// The receiving rank of the open-packet tests: posts a receive of
/// `room` bytes for each message `k` of `count` (on `gate(k)` with tag
/// `tag(k)`), tells its peer (on the default channel, tag 1) that they
/// are posted, and checks that each gets `len(k)` bytes of pattern `k`.
fn receive_posted_ahead(
    node: &Node,
    count: u16,
    (gate, tag): (impl Fn(u16) -> navette::Gate, impl Fn(u16) -> u64),
    len: impl Fn(u16) -> usize,
    room: usize,
) {
    let recvs: Vec<_> = (0..count)
        .map(|k| node.irecv(gate(k), tag(k), vec![0u8; room]))
        .collect();
    node.send(node.gate(1 - node.rank()), 1, &[])
        .expect("ready");
    for (k, got) in (0..count).zip(navette::wait_all(recvs)) {
        let got = got.expect("recv");
        check(&got.data, len(k), u64::from(k));
    }
}

/// Small non-blocking sends (at most [`ShmConfig::stage_max`] bytes) to
/// one peer, on several channels and tags, wait in the peer's open packet:
/// none has left when the last returns, and the wait for them sends them
/// all in one ring cell. Their buffers are free as each returns (SAFER),
/// and each lands intact in its receive.
#[test]
fn small_isends_wait_in_one_open_packet_until_waited_for() {
    const SEGMENTS: u16 = 8;
    let len = |k: u16| usize::from(k) * 36 % 257;
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let other = 1 - node.rank();
        let gate = |k: u16| navette::Gate::new(navette::ChannelId(k + 1), other);
        if node.rank() == 1 {
            let tag = |k: u16| u64::from(k) + 10;
            receive_posted_ahead(node, SEGMENTS, (gate, tag), len, 256);
            return;
        }
        node.recv(node.gate(other), 1, &mut []).expect("ready");
        let before = driver.stats();
        let mut sends = Vec::new();
        let mut buf = Vec::new();
        for k in 0..SEGMENTS {
            buf.clone_from(&pattern(len(k), u64::from(k)));
            sends.push(
                node.isend_safer(gate(k), u64::from(k) + 10, &buf)
                    .expect("isend_safer"),
            );
            buf.fill(0xee);
        }
        assert_eq!(driver.stats().packets_sent, before.packets_sent, "staged");
        for (k, sent) in (0..SEGMENTS).zip(navette::wait_all(sends)) {
            assert_eq!(sent.expect("sent").len, len(k));
        }
        let after = driver.stats();
        assert_eq!(after.packets_sent, before.packets_sent + 1, "one cell");
        assert_eq!(after.sent_at_once, before.sent_at_once + 1, "{after:?}");
    });
}

/// A series of small isends longer than an open packet takes
/// ([`navette_core::OPEN_MOST_CHUNKS`]): each full packet is written into
/// the ring as soon as it closes, the way a wait writes the last one (at
/// once, without a round of progress), while the sends go on filling the
/// next; the wait writes the last. Every message lands intact and in
/// order.
#[test]
fn a_full_open_packet_leaves_at_once_while_the_next_fills() {
    const FULL: u16 = navette_core::OPEN_MOST_CHUNKS as u16;
    const SEGMENTS: u16 = 2 * FULL + 3;
    let len = |k: u16| usize::from(k) * 7 % 60;
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let other = 1 - node.rank();
        // Four channels, each message its own tag: each gate's order is
        // the order of its messages' tags.
        let gate = |k: u16| navette::Gate::new(navette::ChannelId(k % 4 + 1), other);
        if node.rank() == 1 {
            receive_posted_ahead(node, SEGMENTS, (gate, u64::from), len, 64);
            return;
        }
        node.recv(node.gate(other), 1, &mut []).expect("ready");
        let before = driver.stats();
        let mut sends = Vec::new();
        for k in 0..SEGMENTS {
            node.isend_safer_into(
                gate(k),
                u64::from(k),
                &pattern(len(k), u64::from(k)),
                &mut sends,
            )
            .expect("isend_safer_into");
            // The message after a full packet closes it: it leaves.
            let full = u64::from(k / FULL);
            let now = driver.stats();
            assert_eq!(now.packets_sent, before.packets_sent + full, "after {k}");
            assert_eq!(
                now.sent_at_once,
                before.sent_at_once + full,
                "after {k}: {now:?}"
            );
        }
        for (k, sent) in (0..SEGMENTS).zip(navette::wait_all(sends)) {
            assert_eq!(sent.expect("sent").len, len(k));
        }
        let after = driver.stats();
        assert_eq!(after.packets_sent, before.packets_sent + 3, "three cells");
        assert_eq!(after.sent_at_once, before.sent_at_once + 3, "{after:?}");
    });
}

/// Small isends staged to several peers of a larger job all leave with
/// the wait for them: the flush visits each peer that has an open packet
/// (and those alone), one cell each.
#[test]
fn one_wait_sends_the_open_packets_of_every_staged_peer() {
    const RANKS: u32 = 4;
    run(
        RANKS,
        spinning_forever(CopyMode::Auto),
        |node, driver, _| {
            let me = node.rank();
            // Rank 0 stages to ranks 3 and 1, rank 2 hears nothing.
            let targets = [3, 1];
            if me == 0 {
                for &peer in &targets {
                    node.recv(node.gate(peer), 1, &mut []).expect("ready");
                }
                let before = driver.stats();
                let sends: Vec<_> = targets
                    .iter()
                    .flat_map(|&peer| (0..3u64).map(move |tag| (peer, tag)))
                    .map(|(peer, tag)| {
                        node.isend_safer(node.gate(peer), tag, &pattern(16, u64::from(peer) + tag))
                            .expect("isend_safer")
                    })
                    .collect();
                assert_eq!(driver.stats().packets_sent, before.packets_sent, "staged");
                for sent in navette::wait_all(sends) {
                    assert_eq!(sent.expect("sent").len, 16);
                }
                let after = driver.stats();
                assert_eq!(
                    after.packets_sent,
                    before.packets_sent + 2,
                    "a cell per peer"
                );
                assert_eq!(after.sent_at_once, before.sent_at_once + 2, "{after:?}");
            } else if targets.contains(&me) {
                let recvs: Vec<_> = (0..3u64)
                    .map(|tag| node.irecv(node.gate(0), tag, vec![0u8; 64]))
                    .collect();
                node.send(node.gate(0), 1, &[]).expect("ready");
                for (tag, got) in (0..3u64).zip(navette::wait_all(recvs)) {
                    check(&got.expect("recv").data, 16, u64::from(me) + tag);
                }
            }
        },
    );
}

/// The hint before a flush asks for memory and nothing else: any peer,
/// even one the job does not have, and the messages still go through.
#[test]
fn the_hint_before_a_push_is_harmless_for_any_peer() {
    use navette::driver::Driver;
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let me = node.rank();
        let peer = 1 - me;
        for rank in [0, 1, 2, 77, u32::MAX] {
            driver.ready_to_push(rank);
        }
        let sends: Vec<_> = (0..4u64)
            .map(|tag| {
                node.isend_safer(node.gate(peer), tag, &pattern(8, tag + u64::from(me)))
                    .expect("isend_safer")
            })
            .collect();
        let recvs: Vec<_> = (0..4u64)
            .map(|tag| node.irecv(node.gate(peer), tag, vec![0u8; 8]))
            .collect();
        for sent in navette::wait_all(sends) {
            assert_eq!(sent.expect("sent").len, 8);
        }
        for (tag, got) in (0..4u64).zip(navette::wait_all(recvs)) {
            check(&got.expect("recv").data, 8, tag + u64::from(peer));
        }
    });
}

/// A send that may leave at once (a larger `isend`, a blocking `send`)
/// sends the small messages staged to its peer before it rather than
/// waiting behind them: each leaves at once, in order behind them.
#[test]
fn a_send_at_once_sends_the_staged_messages_first() {
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            let before = driver.stats().sent_at_once;
            let header = node.isend_safer(peer, 4, &pattern(8, 1)).expect("isend");
            let body = node.isend(peer, 4, pattern(1000, 2)).expect("isend");
            assert!(body.test().expect("test"), "complete from its start");
            assert_eq!(
                driver.stats().sent_at_once,
                before + 2,
                "the staged one, then it"
            );
            node.isend_safer(peer, 4, &pattern(8, 3))
                .expect("isend")
                .wait()
                .expect("sent");
            node.send(peer, 4, &pattern(1000, 4)).expect("send");
            assert_eq!(driver.stats().sent_at_once, before + 4);
            assert_eq!(header.wait().expect("sent").len, 8);
            body.wait().expect("sent");
            return;
        }
        for (salt, len) in [(1, 8), (2, 1000), (3, 8), (4, 1000)] {
            let got = node
                .irecv(peer, 4u64, vec![0u8; 1000])
                .wait()
                .expect("recv");
            check(&got.data, len, salt);
        }
    });
}

/// A small `isend` on a channel whose strategy does not stage (`default`)
/// leaves at once where it can, as a larger one does.
#[test]
fn small_isends_a_strategy_does_not_stage_leave_at_once() {
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let channel = navette::ChannelId(3);
        node.set_strategy(channel, navette_core::StrategyKind::Default);
        let peer = navette::Gate::new(channel, 1 - node.rank());
        if node.rank() == 0 {
            let before = driver.stats().sent_at_once;
            let sent = node.isend_safer(peer, 4, &pattern(16, 6)).expect("isend");
            assert_eq!(driver.stats().sent_at_once, before + 1);
            assert_eq!(sent.wait().expect("sent").len, 16);
            return;
        }
        let got = node.irecv(peer, 4u64, vec![0u8; 64]).wait().expect("recv");
        check(&got.data, 16, 6);
    });
}

/// A `stage_max` above what an open packet takes acts as that bound: a
/// message too large to stage still leaves at once.
#[test]
fn sends_too_large_to_stage_leave_at_once_whatever_the_bound() {
    let mut config = spinning_forever(CopyMode::Auto);
    config.shm.stage_max = Some(64 << 10);
    run(2, config, |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            let len = navette_core::OPEN_MOST_PIECE + 1;
            let before = driver.stats().sent_at_once;
            let sent = node.isend(peer, 4, pattern(len, 5)).expect("isend");
            assert_eq!(driver.stats().sent_at_once, before + 1);
            assert_eq!(sent.wait().expect("sent").len, len);
            return;
        }
        let got = node
            .irecv(peer, 4u64, vec![0u8; 1024])
            .wait()
            .expect("recv");
        check(&got.data, navette_core::OPEN_MOST_PIECE + 1, 5);
    });
}

/// Staged sends, sends at once and rendezvous on one gate and tag, none
/// waited for in between, arrive intact and in order; a staged send
/// whose request was dropped unwaited still leaves, with its packet.
#[test]
fn staged_sends_keep_their_order_and_leave_unwaited() {
    const SENDS: u64 = 60;
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            let sends: Vec<_> = (0..SENDS)
                .map(|i| {
                    node.isend(peer, 2, pattern(mixed_len(i), i))
                        .expect("isend")
                })
                .collect();
            let before = driver.stats().packets_sent;
            drop(node.isend(peer, 2, pattern(7, 99)).expect("isend"));
            assert_eq!(driver.stats().packets_sent, before, "staged");
            for (i, sent) in (0..SENDS).zip(navette::wait_all(sends)) {
                assert_eq!(sent.expect("sent").len, mixed_len(i));
            }
            node.recv(peer, 3, &mut []).expect("done");
            return;
        }
        for i in 0..=SENDS {
            let got = node
                .irecv(peer, 2u64, vec![0u8; 100 << 10])
                .wait()
                .expect("recv");
            if i < SENDS {
                check(&got.data, mixed_len(i), i);
            } else {
                check(&got.data, 7, 99);
            }
        }
        node.send(peer, 3, &[]).expect("done");
    });
}

/// The sender's copies count among Navette's: a SAFER piece is copied when
/// packed (a small one into the message itself), and again into a buffer
/// of its own if its message cannot leave at once (here because a
/// rendezvous piece goes with it); a small CHEAPER one is copied only then,
/// when it is submitted.
#[test]
fn copies_made_when_packing_are_counted() {
    const SAFER: usize = 40;
    const CHEAPER: usize = 200;
    const LARGE: usize = 64 << 10;
    let copied = run(2, spinning_forever(CopyMode::Auto), |node, _, _| {
        let peer = node.gate(1 - node.rank());
        let (safer, cheaper, large) = (pattern(SAFER, 1), pattern(CHEAPER, 2), pattern(LARGE, 3));
        if node.rank() == 1 {
            for large_too in [false, true] {
                let mut msg = node.begin_unpacking(peer, 5u64).expect("begin");
                let mut got = vec![0u8; SAFER];
                msg.unpack_express(&mut got, SendMode::Safer)
                    .expect("safer");
                check(&got, SAFER, 1);
                let mut got = vec![0u8; CHEAPER];
                msg.unpack_express(&mut got, SendMode::Cheaper)
                    .expect("cheaper");
                check(&got, CHEAPER, 2);
                if large_too {
                    let mut got = vec![0u8; LARGE];
                    msg.unpack_express(&mut got, SendMode::Cheaper)
                        .expect("large");
                    check(&got, LARGE, 3);
                }
                msg.end_unpacking().expect("end");
            }
            return Vec::new();
        }
        let mut copied = Vec::new();
        for large_too in [false, true] {
            let before = gate_copies(node);
            let mut msg = node.begin_packing(peer, 5).expect("begin");
            msg.pack(&safer, SendMode::Safer, ReceiveMode::Express)
                .expect("pack");
            msg.pack(&cheaper, SendMode::Cheaper, ReceiveMode::Express)
                .expect("pack");
            if large_too {
                msg.pack(&large, SendMode::Cheaper, ReceiveMode::Express)
                    .expect("pack");
            }
            msg.end_packing().expect("end");
            copied.push(gate_copies(node) - before);
        }
        copied
    });
    // At once: the SAFER copy alone; the usual way: the SAFER piece twice,
    // the small CHEAPER one once.
    assert_eq!(copied[0], [SAFER as u64, (2 * SAFER + CHEAPER) as u64]);
}

/// A message of small SAFER pieces, some copied into the message itself
/// and some (past its 64 bytes) each into a buffer, leaves at once over
/// shared memory with every piece as its source held it when packed, each
/// copied once.
#[test]
fn small_safer_copies_leave_at_once() {
    const SIZES: [usize; 5] = [40, 30, 16, 8, 1];
    run(2, spinning_forever(CopyMode::Auto), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 1 {
            let mut msg = node.begin_unpacking(peer, 8u64).expect("begin");
            for (i, &len) in SIZES.iter().enumerate() {
                let mut piece = vec![0u8; len];
                msg.unpack_express(&mut piece, SendMode::Safer)
                    .expect("unpack");
                assert!(piece.iter().all(|&v| v == i as u8 + 1), "piece {i}");
            }
            msg.end_unpacking().expect("end");
            return;
        }
        let before = driver.stats().sent_at_once;
        let mut msg = node.begin_packing(peer, 8).expect("begin");
        let mut scratch = [0u8; 40];
        for (i, &len) in SIZES.iter().enumerate() {
            scratch.fill(i as u8 + 1);
            msg.pack_safer(&scratch[..len], ReceiveMode::Express)
                .expect("pack");
        }
        scratch.fill(0xee);
        let copied_before = gate_copies(node);
        msg.end_packing().expect("end");
        assert_eq!(driver.stats().sent_at_once, before + 1, "left at once");
        // Each SAFER piece copied once, when packed: read from there.
        assert_eq!(
            gate_copies(node) - copied_before,
            SIZES.iter().sum::<usize>() as u64
        );
    });
}

/// A server rank that finalizes while another still calls it keeps
/// answering until that one finalizes too.
#[test]
fn a_finalizing_server_still_answers_calls() {
    run(2, config(CopyMode::Auto), |node, _, _| {
        if node.rank() == 1 {
            node.register_typed_service(
                "add",
                navette::rpc::HandlerMode::Inline,
                |_, (a, b): (u64, u64)| Ok(a + b),
            )
            .expect("register");
            // Straight to finalize (the caller of `run`).
            return;
        }
        for i in 0..50u64 {
            let sum: u64 = node.call_typed(1, "add", &(i, 1u64)).expect("call");
            assert_eq!(sum, i + 1);
        }
    });
}

/// `Node::bytes_copied` counts Navette's copies, not the kernel's: a
/// 1 MiB message crosses through the cells with a copy on each side, or is
/// read by the kernel with none.
#[test]
fn bytes_copied_counts_navettes_copies_only() {
    const SIZE: usize = 1 << 20;
    for (mode, copied) in [(CopyMode::Fallback, true), (CopyMode::Single, false)] {
        let copies = run(2, config(mode), |node, _, _| {
            let before = node.bytes_copied();
            let peer = 1 - node.rank();
            if node.rank() == 0 {
                node.send(node.gate(peer), 7, &pattern(SIZE, 7))
                    .expect("send");
            } else {
                let mut buf = vec![0u8; SIZE];
                node.recv(node.gate(peer), 7, &mut buf).expect("recv");
                check(&buf, SIZE, 7);
            }
            node.bytes_copied() - before
        });
        for (rank, &n) in copies.iter().enumerate() {
            if copied {
                assert!(n >= SIZE as u64, "{mode:?}: rank {rank} copied {n}");
            } else {
                assert!(n < 4096, "{mode:?}: rank {rank} copied {n}");
            }
        }
    }
}

/// Small RPC calls and replies over shm leave as one tagged piece holding
/// their pieces' table (see [`common::rpc_in_one_piece`]).
#[test]
fn small_calls_and_replies_travel_as_one_tagged_piece() {
    run(2, config(CopyMode::Auto), |node, _, _| {
        common::rpc_in_one_piece(node)
    });
}

/// Over shared memory an RPC message is numbered, and a call's reply
/// receive made, only as it leaves (with no lock of its own as it
/// begins): calls past a table's size, rendezvous-sized ones, calls
/// abandoned while packing, replies abandoned while packing and handlers
/// that fail keep their meaning, and each CHEAPER piece is copied or lent
/// by its size, as when the message was numbered first.
#[test]
fn rpc_messages_numbered_as_they_leave_keep_their_meaning() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use navette::Error;
    use navette::rpc::{HandlerError, HandlerMode};

    let sunk = Arc::new(AtomicUsize::new(0));
    let sunk_at_server = Arc::clone(&sunk);
    run(2, config(CopyMode::Auto), move |node, _, _| {
        if node.rank() == 1 {
            node.register_service("echo", HandlerMode::Inline, common::echo)
                .expect("register");
            // One-way: the echo's shape, its length packed LATER; counts
            // the bytes.
            let sunk = Arc::clone(&sunk_at_server);
            node.register_service("sink", HandlerMode::Inline, move |call| {
                let (_, body, _) = common::unpack_echo_args(call, SendMode::Later)?;
                sunk.fetch_add(body.len(), Ordering::SeqCst);
                Ok(())
            })
            .expect("register");
            // Packs part of its reply, then gives up.
            node.register_service("half", HandlerMode::Inline, |call| {
                let (args, responder) = call.split();
                drop(args);
                responder.reply(|msg| {
                    msg.pack_safer(b"part", ReceiveMode::Express)?;
                    Err(Error::EmptyMessage)
                })?;
                Ok(())
            })
            .expect("register");
            node.register_service("refuse", HandlerMode::Inline, |_| {
                Err(HandlerError::new("not today"))
            })
            .expect("register");
            // Serves until rank 0 finalizes too (the caller of `run`).
            return;
        }
        // Every size, the table's limit and the rendezvous threshold
        // crossed.
        for (salt, size) in [0usize, 4000, 6000, 20 << 10, 40 << 10, 1 << 20]
            .into_iter()
            .enumerate()
        {
            let got = common::call_echo(node, 1, "echo", &pattern(size, salt as u64));
            check(&got.expect("echo"), size, salt as u64);
        }
        // A message with a LATER piece is submitted to the engine (it
        // never leaves at once): there a CHEAPER body below the rendezvous
        // threshold is copied, one above is lent, copied by nobody at the
        // caller.
        let sent_copies = |size: usize| {
            let body = pattern(size, 3);
            let len: Vec<std::cell::Cell<u8>> = (size as u64)
                .to_le_bytes()
                .into_iter()
                .map(std::cell::Cell::new)
                .collect();
            let before = gate_copies(node);
            node.call_one_way(1, "sink", |msg| {
                msg.pack_later(&len, ReceiveMode::Express)?;
                msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
            })
            .expect("one-way call");
            gate_copies(node) - before
        };
        let small = sent_copies(20 << 10);
        let large = sent_copies(40 << 10);
        assert!(small >= 20 << 10, "a 20 KiB body copied: {small} bytes");
        assert!(large < 1 << 10, "a 40 KiB body lent: {large} bytes copied");
        // A call abandoned while packing: the packing's error, no handler.
        let len = 4u64.to_le_bytes();
        let failed = node.call(1, "sink", |msg| {
            msg.pack(&len, SendMode::Later, ReceiveMode::Express)?;
            Err(Error::EmptyMessage)
        });
        assert!(matches!(failed, Err(Error::EmptyMessage)), "{failed:?}");
        // A reply abandoned while packing, and a handler's error, fail
        // their calls; the server still serves.
        assert!(common::call_echo(node, 1, "half", b"x").is_err());
        assert!(common::call_echo(node, 1, "refuse", b"x").is_err());
        check(
            &common::call_echo(node, 1, "echo", &pattern(10, 7)).expect("echo"),
            10,
            7,
        );
        // The one-way calls ran (they come in order, before the echo's
        // reply); the abandoned one did not.
        assert_eq!(sunk.load(Ordering::SeqCst), (20 << 10) + (40 << 10));
    });
}

/// Calls made while the server's ring is full: a call that the engine lets
/// leave at once has its reply receive made first, then finds no cell and
/// goes the usual way, armed once; every call gets its own reply.
#[test]
fn calls_that_find_the_ring_full_go_the_usual_way_and_get_their_replies() {
    use std::sync::Barrier;

    const CALLS: usize = 12;
    let mut config = config(CopyMode::Auto);
    config.shm.ring_cells = 4;
    let held = Barrier::new(2);
    run(2, config, |node, _, _| {
        if node.rank() == 1 {
            node.register_service("echo", navette::rpc::HandlerMode::Inline, common::echo)
                .expect("register");
            // Not progressing until the client has made every call.
            held.wait();
            return;
        }
        let bodies: Vec<Vec<u8>> = (0..CALLS).map(|i| pattern(16 + i, i as u64)).collect();
        let calls: Vec<_> = bodies
            .iter()
            .map(|body| common::start_echo(node, 1, "echo", body).expect("call"))
            .collect();
        held.wait();
        for (i, request) in calls.into_iter().enumerate() {
            let got = common::receive_echo(request.wait().expect("reply")).expect("echo");
            check(&got, 16 + i, i as u64);
        }
    });
}

/// A geometry the segment cannot have is refused by every rank, each with
/// the reason, before the job's first fence: no rank waits there for a
/// creator that failed.
#[test]
fn a_bad_geometry_is_refused_by_every_rank() {
    let ranks = LocalBootstrap::job(2, fresh_job_id(), JOB_KEY);
    let mut config = RuntimeConfig::default();
    config.shm.ring_cells = 3;
    let outcomes: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|rank| {
                let config = config.clone();
                s.spawn(move || match init_shm(std::sync::Arc::new(rank), config) {
                    Ok(_) => "initialized".to_owned(),
                    Err(e) => e.to_string(),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for outcome in &outcomes {
        assert!(
            outcome.contains("configuration") && outcome.contains("power of two"),
            "{outcomes:?}"
        );
    }
}

/// Sends `size` bytes (`pattern(size, 1)`) to rank `to` with `tag` from a
/// buffer of its own, in a blocking send that must stall (past the test's
/// short wait timeout); the buffer is then reused, filled with 0xaa, which
/// `to` must never receive: the send goes on from the copy it kept as it
/// gave the buffer back.
fn send_until_stalled(node: &Node, to: u32, size: usize, tag: u64) {
    let mut data = pattern(size, 1);
    let mut msg = node.begin_packing(node.gate(to), tag).expect("begin");
    msg.pack(&data, SendMode::Cheaper, ReceiveMode::Cheaper)
        .expect("pack");
    assert!(msg.end_packing().is_err(), "the send stalls");
    data.fill(0xaa);
}

/// A readable request whose sender lets its memory go before the
/// receiver reads it (a blocking send that stalled, its buffer then
/// reused): the receiver sees the sender's release epoch moved, declines
/// the read, and asks for the data instead, so what the address holds
/// now is never delivered; the data comes from the copy the send kept.
#[test]
fn memory_let_go_after_its_offer_is_not_read() {
    let size = 512 << 10;
    let mut config = config(CopyMode::Single);
    config.node.wait_timeout = Some(Duration::from_millis(300));
    let stats = run(2, config, |node, driver, _| {
        if node.rank() == 0 {
            // Nobody receives yet: the send stalls.
            send_until_stalled(node, 1, size, 7);
            node.send(node.gate(1), 8, b"go").expect("go");
        } else {
            let mut go = [0u8; 2];
            // Until the sender has given up (each wait is short).
            while node
                .recv(RecvFrom::from(node.gate(0)), 8u64, &mut go)
                .is_err()
            {}
            let mut got = vec![0u8; size];
            let mut msg = node.begin_unpacking(node.gate(0), 7).expect("begin");
            msg.unpack_cheaper(&mut got, SendMode::Cheaper)
                .and_then(|()| msg.end_unpacking())
                .expect("delivered from the sender's copy");
            check(&got, size, 1);
        }
        driver.stats()
    });
    assert_eq!(stats[1].reads_declined, 1, "{:?}", stats[1]);
    assert_eq!(stats[1].reads_at_request, 0, "{:?}", stats[1]);
}

/// Pulls are cut at 512 KiB here: a message of 1 MiB is pulled in two
/// fragments, one of 256 KiB is read at its request.
fn pulled_by_fragments() -> RuntimeConfig {
    let mut config = config(CopyMode::Single);
    config.shm.pull_fragment = 512 << 10;
    config.node.wait_timeout = Some(Duration::from_millis(300));
    config
}

/// Progresses `node` until its driver has sent a packet more than
/// `before` (the clear-to-send of a receive posted before), and no
/// further: a round handles the ring before it sends, so a pull that
/// answers that packet stays unread.
fn progress_until_a_packet_left(node: &Node, driver: &ShmDriver, before: u64) {
    while driver.stats().packets_sent == before {
        node.progress().expect("progress");
    }
}

/// Waits for rank `from`'s word that it is done (each wait is short: the
/// peer may be waiting out a stalled receive).
fn until_done(node: &Node, from: u32) {
    let mut done = [0u8; 4];
    while node
        .recv(RecvFrom::from(node.gate(from)), 8u64, &mut done)
        .is_err()
    {}
}

/// A pull whose sender lets its memory go before the receiver reads it (a
/// blocking send that stalled once its clear-to-send came, its buffer then
/// reused): the receiver sees the sender's release epoch moved and
/// declines the pull, so what the address holds now is never delivered;
/// the sender pushes the data from the copy it kept instead, and the
/// message arrives whole.
///
/// The send stalls on its own clock, which starts before the receiver
/// answers: a receiver held up past it (an oversubscribed host) leaves
/// nothing pulled, and the attempt is made again with the next tag, once
/// that message too has arrived whole (from the copy).
#[test]
fn a_pull_of_memory_let_go_is_declined() {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicBool, Ordering};

    let size = 1 << 20;
    let stalled = Barrier::new(2);
    let pulled = AtomicBool::new(false);
    // Each rank's counters before and after the round that pulled.
    let stats = run(2, pulled_by_fragments(), |node, driver, _| {
        // (Tag 8 is the word that the receiver has the message.)
        for tag in 100.. {
            let before = driver.stats();
            if node.rank() == 0 {
                // The first fragment's pull is never answered: the send
                // stalls.
                send_until_stalled(node, 1, size, tag);
                let made = driver.stats().pulls_sent > before.pulls_sent;
                pulled.store(made, Ordering::SeqCst);
                stalled.wait();
                // Progressing meanwhile: the answer to the pull comes, and
                // the data from the copy.
                until_done(node, 1);
            } else {
                let recv = node.irecv(RecvFrom::from(node.gate(0)), tag, vec![0u8; size]);
                progress_until_a_packet_left(node, driver, before.packets_sent);
                stalled.wait();
                let got = recv.wait().expect("delivered from the sender's copy");
                check(&got.data, size, 1);
                node.send(node.gate(0), 8, b"done").expect("done");
            }
            if pulled.load(Ordering::SeqCst) {
                return (before, driver.stats());
            }
            // Both ranks have read `pulled` before the next round stores it.
            stalled.wait();
        }
        unreachable!("the loop returns")
    });
    let (before, after) = stats[1];
    assert_eq!(after.reads_declined - before.reads_declined, 1, "{after:?}");
    // The first fragment came through the ring; the second was pulled
    // from the copy, offered after the release (read by the receiver,
    // perhaps partly written by the sender: a shared read).
    let half = size as u64 / 2;
    let (sent_before, sent_after) = stats[0];
    assert!(
        sent_after.bytes_copied_in - sent_before.bytes_copied_in >= half,
        "{sent_after:?}"
    );
    let read = (after.bytes_pulled - before.bytes_pulled)
        + (after.bytes_written_by_peers - before.bytes_written_by_peers);
    assert_eq!(read, half, "{after:?}");
}

/// A pull made before the sender let go of other memory it had offered
/// (the data of a readable request to a third rank, whose send stalled):
/// the epoch moved, so the receiver declines the pull, though this data is
/// still there; the sender then pushes it through the ring, and it
/// arrives whole. The next fragment, pulled after the release, is read as
/// usual; the third rank declines its own read, and gets the data from
/// the copy its sender kept.
#[test]
fn a_pull_declined_for_another_release_comes_through_the_ring() {
    use std::sync::Barrier;

    let (size, readable) = (1 << 20, 256 << 10);
    let stalled = Barrier::new(3);
    let stats = run(3, pulled_by_fragments(), |node, driver, _| {
        match node.rank() {
            0 => {
                let pulled = node
                    .isend(node.gate(1), 2, pattern(size, 2))
                    .expect("isend");
                while driver.stats().pulls_sent == 0 {
                    node.progress().expect("progress");
                }
                // Rank 2 receives nothing yet: the send stalls, lets its
                // data go, and the release epoch moves after the pull's.
                send_until_stalled(node, 2, readable, 3);
                stalled.wait();
                pulled.wait().expect("sent through the ring");
                until_done(node, 1);
                until_done(node, 2);
            }
            1 => {
                let recv = node.irecv(RecvFrom::from(node.gate(0)), 2, vec![0u8; size]);
                progress_until_a_packet_left(node, driver, 0);
                stalled.wait();
                let got = recv.wait().expect("received");
                check(&got.data, size, 2);
                node.send(node.gate(0), 8, b"done").expect("done");
            }
            _ => {
                stalled.wait();
                // Its read is declined (the epoch moved since the offer),
                // and the data comes from the sender's copy.
                let recv = node.irecv(RecvFrom::from(node.gate(0)), 3, vec![0u8; readable]);
                let got = recv.wait().expect("delivered from the sender's copy");
                check(&got.data, readable, 1);
                node.send(node.gate(0), 8, b"done").expect("done");
            }
        }
        driver.stats()
    });
    assert_eq!(stats[1].reads_declined, 1, "{:?}", stats[1]);
    assert_eq!(
        stats[1].bytes_pulled + stats[1].bytes_written_by_peers,
        512 << 10,
        "{:?}",
        stats[1]
    );
    assert!(stats[0].bytes_copied_in >= 512 << 10, "{:?}", stats[0]);
    assert_eq!(stats[2].reads_declined, 1, "{:?}", stats[2]);
}

/// Sends that end as usual (one read at its request, one pulled) let
/// their memory go without moving the release epoch, since their peer
/// was done with the address: a readable request made before them, its
/// receive posted after, is still read at its request.
#[test]
fn ordinary_completions_leave_other_offers_readable() {
    let mut config = config(CopyMode::Single);
    config.shm.pull_fragment = 512 << 10;
    let (readable, pulled) = (256 << 10, 1 << 20);
    let stats = run(2, config, |node, driver, _| {
        if node.rank() == 0 {
            let first = node
                .isend(node.gate(1), 1, pattern(readable, 1))
                .expect("isend");
            node.send(node.gate(1), 2, &pattern(readable, 2))
                .expect("read");
            node.send(node.gate(1), 3, &pattern(pulled, 3))
                .expect("pulled");
            // Both let go of their memory before returning.
            node.send(node.gate(1), 4, &pattern(8, 4))
                .expect("released");
            first.wait().expect("read last");
        } else {
            for (tag, size) in [(2, readable), (3, pulled), (4, 8), (1, readable)] {
                let mut got = vec![0u8; size];
                node.recv(RecvFrom::from(node.gate(0)), tag, &mut got)
                    .expect("received");
                check(&got, size, tag);
            }
        }
        driver.stats()
    });
    assert_eq!(stats[0].pulls_sent, 2, "{:?}", stats[0]);
    assert_eq!(stats[1].reads_at_request, 2, "{:?}", stats[1]);
    assert_eq!(stats[1].reads_declined, 0, "{:?}", stats[1]);
}

/// Sends rank 1 a message of an EXPRESS head of `head` bytes and a
/// CHEAPER body of `body` bytes on `tag` (see [`receive_head_and_body`]).
fn send_head_and_body(node: &Node, tag: u64, head: usize, body: usize) {
    let (h, b) = (pattern(head, tag), pattern(body, tag + 1));
    let mut msg = node.begin_packing(node.gate(1), tag).expect("begin");
    msg.pack(&h, SendMode::Cheaper, ReceiveMode::Express)
        .expect("head");
    msg.pack(&b, SendMode::Cheaper, ReceiveMode::Cheaper)
        .expect("body");
    msg.end_packing().expect("sent");
}

/// Receives from rank 0 and checks the message of
/// [`send_head_and_body`].
fn receive_head_and_body(node: &Node, tag: u64, head: usize, body: usize) {
    let (mut h, mut b) = (vec![0u8; head], vec![0u8; body]);
    let mut msg = node.begin_unpacking(node.gate(0), tag).expect("begin");
    msg.unpack_express(&mut h, SendMode::Cheaper).expect("head");
    msg.unpack_cheaper(&mut b, SendMode::Cheaper).expect("body");
    msg.end_unpacking().expect("received");
    check(&h, head, tag);
    check(&b, body, tag + 1);
}

/// The usual large message (an EXPRESS head, then a body read at its
/// request) leaves at once, in one offering cell written by the sending
/// thread, and the receiver reads the body at its request. Its
/// completion takes its mark back as the usual way's does: a readable
/// request made before them, received after, is still read at its
/// request.
#[test]
fn heads_and_bodies_leave_at_once_and_are_read_at_their_request() {
    let (head, body, count) = (64, 256 << 10, 5u64);
    let stats = run(2, config(CopyMode::Single), |node, driver, _| {
        if node.rank() == 0 {
            let first = node
                .isend(node.gate(1), 100, pattern(body, 100))
                .expect("isend");
            // Once this blocking send has returned, what was submitted
            // before it has left too: the window is empty.
            node.send(node.gate(1), 101, b"go").expect("go");
            let before = driver.stats().sent_at_once;
            for tag in 0..count {
                send_head_and_body(node, tag, head, body);
            }
            let after = driver.stats();
            assert_eq!(after.sent_at_once, before + count, "{after:?}");
            first.wait().expect("read last");
        } else {
            let mut go = [0u8; 2];
            node.recv(RecvFrom::from(node.gate(0)), 101u64, &mut go)
                .expect("go");
            for tag in 0..count {
                receive_head_and_body(node, tag, head, body);
            }
            let mut got = vec![0u8; body];
            node.recv(RecvFrom::from(node.gate(0)), 100u64, &mut got)
                .expect("received");
            check(&got, body, 100);
        }
        driver.stats()
    });
    assert_eq!(stats[1].reads_at_request, count + 1, "{:?}", stats[1]);
    assert_eq!(stats[1].reads_declined, 0, "{:?}", stats[1]);
    assert_eq!(stats[1].offers_held, 0, "{:?}", stats[1]);
}

/// A readable request that shares its packet with an EXPRESS head so long
/// that its read offer no longer fits the cell: the offer is dropped and
/// counted, and the receiver asks for the data, which is then pulled.
/// Heads of every length (by 4 bytes) over a span where head and request
/// together about fill a small cell are sent, all below the rendezvous
/// threshold, so that some packets leave just too little room for the
/// offer.
#[test]
fn offers_that_do_not_fit_their_cell_are_dropped_and_counted() {
    let mut config = config(CopyMode::Single);
    config.shm.cell_size = 1024;
    let body = 256 << 10;
    let heads: Vec<usize> = (860..960).step_by(4).collect();
    let stats = run(2, config, |node, driver, _| {
        for (i, &head) in heads.iter().enumerate() {
            let tag = i as u64;
            if node.rank() == 0 {
                send_head_and_body(node, tag, head, body);
            } else {
                receive_head_and_body(node, tag, head, body);
            }
        }
        driver.stats()
    });
    let dropped = stats[0].offers_dropped;
    assert!(
        dropped > 0,
        "no packet left too little room: {:?}",
        stats[0]
    );
    assert_eq!(
        stats[1].reads_at_request + dropped,
        heads.len() as u64,
        "every body read at its request or asked for: {:?}",
        stats[1]
    );
    assert_eq!(stats[1].reads_declined, 0, "{:?}", stats[1]);
}

/// A readable request that its receive refuses (too short) is never read,
/// and its offer is not kept: the receiver's engine hands the driver the
/// request to forget. The next one is read at its request as usual.
#[test]
fn offers_of_refused_requests_are_not_kept() {
    let size = 256 << 10;
    let stats = run(2, config(CopyMode::Single), |node, driver, _| {
        if node.rank() == 0 {
            let refused = node.send(node.gate(1), 1, &pattern(size, 1));
            assert!(refused.is_err(), "the receive was too short");
            node.send(node.gate(1), 2, &pattern(size, 2)).expect("sent");
        } else {
            let mut short = vec![0u8; size / 2];
            let truncated = node.recv(RecvFrom::from(node.gate(0)), 1u64, &mut short);
            assert!(truncated.is_err(), "{truncated:?}");
            let mut got = vec![0u8; size];
            node.recv(RecvFrom::from(node.gate(0)), 2u64, &mut got)
                .expect("received");
            check(&got, size, 2);
        }
        driver.stats()
    });
    assert_eq!(stats[1].reads_at_request, 1, "{:?}", stats[1]);
    assert_eq!(stats[1].offers_held, 0, "{:?}", stats[1]);
}

/// The indexed message between buffers in huge pages (`HugeBuffer`): a
/// 64-byte head EXPRESS and a 256 KiB block CHEAPER, from and into huge
/// pages, back and forth. Every block arrives whole, read at its request
/// by the kernel's single copy (shared between the two sides), and
/// Navette copies no byte of it: its copies are the heads'.
#[test]
fn indexed_messages_between_huge_buffers_copy_the_block_zero_times() {
    const HEAD: usize = 64;
    const LARGE: usize = 256 << 10;
    const ROUNDS: u64 = 20;
    let stats = run(2, config(CopyMode::Auto), |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        let mine = u64::from(node.rank());
        let mut body_out = navette::HugeBuffer::zeroed(LARGE).expect("huge buffer");
        let mut body_in = navette::HugeBuffer::zeroed(LARGE).expect("huge buffer");
        let mut head_in = [0u8; HEAD];
        let copied_before = gate_copies(node);
        for round in 0..ROUNDS {
            let mut send = || {
                let salt = round * 2 + mine;
                let head = pattern(HEAD, salt);
                body_out.copy_from_slice(&pattern(LARGE, salt));
                let mut msg = node.begin_packing(peer, 9).expect("begin packing");
                msg.pack(&head, SendMode::Cheaper, ReceiveMode::Express)
                    .expect("pack head");
                msg.pack(&body_out, SendMode::Cheaper, ReceiveMode::Cheaper)
                    .expect("pack body");
                msg.end_packing().expect("end packing");
            };
            let mut receive = || {
                let mut msg = node.begin_unpacking(peer, 9u64).expect("begin unpacking");
                msg.unpack_express(&mut head_in, SendMode::Cheaper)
                    .expect("unpack head");
                msg.unpack_cheaper(&mut body_in, SendMode::Cheaper)
                    .expect("unpack body");
                msg.end_unpacking().expect("end unpacking");
                let salt = round * 2 + (1 - mine);
                check(&head_in, HEAD, salt);
                check(&body_in, LARGE, salt);
            };
            if node.rank() == 0 {
                send();
                receive();
            } else {
                receive();
                send();
            }
        }
        (driver.stats(), gate_copies(node) - copied_before)
    });
    for (s, copied) in &stats {
        assert_eq!(
            s.bytes_pulled + s.bytes_written_by_peers,
            ROUNDS * LARGE as u64,
            "{s:?}"
        );
        assert_eq!(s.reads_at_request, ROUNDS, "{s:?}");
        assert!(
            *copied <= 2 * ROUNDS * HEAD as u64,
            "copied {copied}: {s:?}"
        );
    }
    writes_match(&stats.iter().map(|(s, _)| *s).collect::<Vec<_>>());
}

/// A blocking send of a large message whose receive is posted only after
/// the send stalled: its request offered the receiver the caller's memory
/// to read where it lies. The send gives that memory back as it fails,
/// and the caller overwrites it at once; the receiver's read of it is not
/// trusted, and the message comes from the copy the send kept, whole and
/// as sent.
#[test]
fn a_send_that_stalled_arrives_as_sent_though_its_buffer_changed() {
    let n = 1 << 20;
    let mut config = config(CopyMode::Auto);
    // Long enough that the waits after the stall do not stall too.
    config.node.wait_timeout = Some(Duration::from_secs(1));
    let stalled = std::sync::Barrier::new(2);
    let stats = run(2, config, |node, driver, _| {
        let peer = node.gate(1 - node.rank());
        if node.rank() == 0 {
            let mut data = pattern(n, 13);
            match node.send(peer, 7, &data) {
                Err(navette::Error::Stalled { .. }) => {}
                other => panic!("expected a stall, got {other:?}"),
            }
            data.fill(0);
            stalled.wait();
            // Serves the receiver until it has the message.
            node.recv(peer, 8u64, &mut [0u8; 1]).unwrap();
        } else {
            stalled.wait();
            let mut got = vec![0u8; n];
            assert_eq!(node.recv(peer, 7u64, &mut got).unwrap().len, n);
            check(&got, n, 13);
            node.send(peer, 8, &[1]).unwrap();
        }
        driver.stats()
    });
    if stats[1].can_pull {
        assert_eq!(stats[1].reads_declined, 1, "{:?}", stats[1]);
    }
}
