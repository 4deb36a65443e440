//! Real TCP on loopback: ranks are threads of this process, each owning its
//! node, found through an in-process bootstrap.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use common::{check, pattern};
use navette::tcp::{Congestion, TcpDriver};
use navette::{
    Node, NodeConfig, ReceiveMode, RecvFrom, RuntimeConfig, SendMode, TagMatch, init_tcp,
};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;
use navette_wire::handshake::{Hello, PROTOCOL_VERSION, Proof};
use navette_wire::{EagerHeader, PacketHeader};

const JOB_ID: u64 = 0x7c9_0001;
const JOB_KEY: [u8; JOB_KEY_LEN] = [0x5a; JOB_KEY_LEN];

fn config() -> RuntimeConfig {
    RuntimeConfig {
        node: NodeConfig {
            // A hang guard, not a timing assertion.
            wait_timeout: Some(Duration::from_secs(300)),
            ..NodeConfig::default()
        },
        ..RuntimeConfig::default()
    }
}

/// Runs `f` on `size` ranks, one thread each, between init and finalize;
/// returns what each rank returned, by rank.
fn run<R: Send>(
    size: u32,
    config: RuntimeConfig,
    f: impl Fn(&Node, &TcpDriver) -> R + Sync,
) -> Vec<R> {
    let ranks = LocalBootstrap::job(size, JOB_ID, JOB_KEY);
    common::run_ranks(ranks, &config, init_tcp, f)
}

const SIZES: [usize; 10] = [
    0,
    1,
    100,
    4096,
    (32 << 10) - 1,
    32 << 10,
    100_000,
    1 << 20,
    (1 << 20) + 3,
    16 << 20,
];

fn salt(from: u32, to: u32, index: usize) -> u64 {
    (u64::from(from) * 1000 + u64::from(to)) * 64 + index as u64
}

/// Every rank sends a message of every size to every other rank at once.
fn all_to_all(node: &Node, sizes: &[usize]) {
    let (me, size) = (node.rank(), node.size());
    for (index, &len) in sizes.iter().enumerate() {
        let tag = index as u64;
        let recvs: Vec<_> = (0..size)
            .filter(|&p| p != me)
            .map(|p| (p, node.irecv(node.gate(p), tag, vec![0; len])))
            .collect();
        let sends: Vec<_> = (0..size)
            .filter(|&p| p != me)
            .map(|p| {
                let data = Bytes::from(pattern(len, salt(me, p, index)));
                node.isend(node.gate(p), tag, data).unwrap()
            })
            .collect();
        for (p, recv) in recvs {
            let got = recv.wait().unwrap();
            assert_eq!((got.status.peer, got.status.len), (p, len));
            check(&got.data, len, salt(p, me, index));
        }
        for send in sends {
            assert_eq!(send.wait().unwrap().len, len);
        }
    }
}

/// Both ranks have packets for each other at once, so both usually dial:
/// the pair then talks over two connections, which must work too.
#[test]
fn all_to_all_two_ranks() {
    let counts = run(2, config(), |node, driver| {
        all_to_all(node, &SIZES);
        driver.connection_count()
    });
    assert!(counts.iter().all(|c| (1..=2).contains(c)), "{counts:?}");
}

#[test]
fn all_to_all_four_ranks() {
    run(4, config(), |node, _| all_to_all(node, &SIZES));
}

#[test]
fn eight_ranks_oversubscribed() {
    run(8, config(), |node, _| {
        all_to_all(node, &[0, 100, 64 << 10, 1 << 20]);
    });
}

#[test]
fn any_source_receives_take_every_sender_in_order() {
    const PER_PEER: u32 = 20;
    run(4, config(), |node, _| {
        let me = node.rank();
        if me != 0 {
            for i in 0..PER_PEER {
                let len = if i % 5 == 4 { 50_000 } else { 8 + i as usize };
                let mut data = pattern(len, salt(me, 0, i as usize));
                data[..4].copy_from_slice(&i.to_le_bytes());
                node.send(node.gate(0), 9, &data).unwrap();
            }
            return;
        }
        let mut next = [0u32; 4];
        for _ in 0..3 * PER_PEER {
            let mut buf = vec![0u8; 64 << 10];
            let status = node.recv(RecvFrom::any(), 9u64, &mut buf).unwrap();
            let from = status.peer;
            let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
            assert_eq!(i, next[from as usize], "order from rank {from}");
            next[from as usize] += 1;
            let mut want = pattern(status.len, salt(from, 0, i as usize));
            want[..4].copy_from_slice(&i.to_le_bytes());
            assert!(buf[..status.len] == want[..], "data of {i} from {from}");
        }
        assert_eq!(next, [0, PER_PEER, PER_PEER, PER_PEER]);
    });
}

#[test]
fn madeleine_rpc_reads_the_header_then_receives_the_body_in_place() {
    const CALLS: u32 = 6;
    run(2, config(), |node, _| {
        if node.rank() == 1 {
            for call in 0..CALLS {
                let len = [10usize, 300_000, 0, 1 << 20, 33_000, 5][call as usize];
                let body = pattern(len, u64::from(call));
                let mut header = [0u8; 8];
                header[..4].copy_from_slice(&call.to_le_bytes());
                header[4..].copy_from_slice(&(len as u32).to_le_bytes());
                let mut msg = node.begin_packing(node.gate(0), 77).unwrap();
                msg.pack(&header, SendMode::Safer, ReceiveMode::Express)
                    .unwrap();
                msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
                    .unwrap();
                msg.end_packing().unwrap();
                let mut reply = [0u8; 8];
                node.recv(node.gate(0), 78u64, &mut reply).unwrap();
                assert_eq!(u64::from_le_bytes(reply), sum(&body));
            }
        } else {
            for call in 0..CALLS {
                let mut msg = node.begin_unpacking(RecvFrom::any(), 77u64).unwrap();
                let mut header = [0u8; 8];
                msg.unpack_express(&mut header, SendMode::Safer).unwrap();
                let got_call = u32::from_le_bytes(header[..4].try_into().unwrap());
                let len = u32::from_le_bytes(header[4..].try_into().unwrap()) as usize;
                assert_eq!(got_call, call);
                // Allocated only now that the header told its size.
                let mut body = vec![0u8; len];
                msg.unpack_cheaper(&mut body, SendMode::Cheaper).unwrap();
                let status = msg.end_unpacking().unwrap();
                assert_eq!((status.peer, status.len), (1, 8 + len));
                check(&body, len, u64::from(call));
                node.send(node.gate(1), 78, &sum(&body).to_le_bytes())
                    .unwrap();
            }
        }
    });
}

/// Small RPC calls and replies over tcp leave as one tagged piece holding
/// their pieces' table, each written by one system call (see
/// [`common::rpc_in_one_piece`]).
#[test]
fn small_calls_and_replies_travel_as_one_tagged_piece() {
    run(2, config(), |node, _| common::rpc_in_one_piece(node));
}

fn sum(data: &[u8]) -> u64 {
    data.iter().enumerate().fold(0u64, |acc, (i, &b)| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b) ^ i as u64)
    })
}

#[test]
fn connections_are_opened_only_between_ranks_that_talk() {
    let counts = run(8, config(), |node, driver| {
        ping_pong(node);
        let stats = driver.stats();
        (driver.connection_count(), stats.dialed)
    });
    let total: usize = counts.iter().map(|c| c.0).sum();
    assert_eq!(total, 2, "one connection, seen from both ends: {counts:?}");
    assert_eq!(counts[0], (1, 1));
    assert_eq!(
        counts[1],
        (1, 0),
        "rank 1 answers on the accepted connection"
    );
}

/// Rank 0 sends `b"ping!"` to rank 1, which answers `b"pong!"`.
fn ping_pong(node: &Node) {
    let mut buf = [0u8; 5];
    match node.rank() {
        0 => {
            node.send(node.gate(1), 1, b"ping!").unwrap();
            node.recv(node.gate(1), 2u64, &mut buf).unwrap();
            assert_eq!(&buf, b"pong!");
        }
        1 => {
            node.recv(node.gate(0), 1u64, &mut buf).unwrap();
            assert_eq!(&buf, b"ping!");
            node.send(node.gate(0), 2, b"pong!").unwrap();
        }
        _ => {}
    }
}

/// (An algorithm the kernel refuses is refused at bind: `tcp_config.rs`.)
#[test]
fn loopback_connections_get_reno_and_the_system_setting_sets_nothing() {
    let set = run(2, config(), |node, driver| {
        ping_pong(node);
        driver.stats().congestion_set
    });
    assert_eq!(set, [1, 1], "the dialed and the accepted end");
    let mut config = config();
    config.tcp.congestion = Congestion::System;
    let set = run(2, config, |node, driver| {
        ping_pong(node);
        driver.stats().congestion_set
    });
    assert_eq!(set, [0, 0]);
}

/// Spinning rounds read established connections outside epoll; a thread
/// that blocks puts them back first. Whether every wait blocks at once or
/// none ever does, small and large messages both ways all arrive. A missed
/// wake-up would not go unseen: a blocked wait sleeps up to a minute, far
/// past the stall limit, and fails as `Stalled`.
#[test]
fn waits_that_block_at_once_or_never_miss_nothing() {
    for (spin_rounds, yield_rounds) in [(0, 0), (u32::MAX, 0)] {
        let mut config = config();
        config.node.spin_rounds = spin_rounds;
        config.node.oversubscribed_spin_rounds = spin_rounds;
        config.node.yield_rounds = yield_rounds;
        config.node.block_for = Duration::from_secs(60);
        config.node.wait_timeout = Some(Duration::from_secs(20));
        run(2, config, |node, _| {
            let (me, other) = (node.rank(), 1 - node.rank());
            let peer = node.gate(other);
            let mut buf = vec![0u8; 1 << 20];
            for round in 0..200usize {
                let n = if round % 50 == 49 { 1 << 20 } else { round };
                let tag = round as u64;
                if (round % 2 == 0) == (me == 0) {
                    node.send(peer, tag, &pattern(n, salt(me, other, round)))
                        .unwrap();
                } else {
                    let status = node.recv(peer, tag, &mut buf).unwrap();
                    assert_eq!(status.len, n, "round {round}, spin {spin_rounds}");
                    check(&buf[..n], n, salt(other, me, round));
                }
            }
        });
    }
}

/// A thread that blocks puts the connections it spun on back in epoll,
/// which reports their writability at once: that report must not send it
/// straight back to spinning and registering again. While one rank waits
/// 300 ms for a message, it registers its connection once, not at every
/// turn of a busy loop.
#[test]
fn a_blocked_wait_registers_its_connections_once() {
    let mut config = config();
    config.node.spin_rounds = 0;
    config.node.oversubscribed_spin_rounds = 0;
    config.node.yield_rounds = 0;
    let registrations = run(2, config, |node, driver| {
        let peer = node.gate(1 - node.rank());
        let mut buf = [0u8; 8];
        // Connect, and go through a wait or two.
        ping_pong(node);
        let before = driver.stats().parked_registrations;
        if node.rank() == 0 {
            std::thread::sleep(Duration::from_millis(300));
            node.send(peer, 9, b"at last!").unwrap();
        } else {
            node.recv(peer, 9u64, &mut buf).unwrap();
            assert_eq!(&buf, b"at last!");
        }
        driver.stats().parked_registrations - before
    });
    assert!(registrations[1] <= 2, "{registrations:?}");
}

#[test]
fn eager_connection_opens_one_connection_per_pair() {
    let mut config = config();
    config.tcp.eager_connect = true;
    let counts = run(4, config, |node, driver| {
        all_to_all(node, &[0, 10, 40_000]);
        driver.connection_count()
    });
    assert_eq!(counts, [3, 3, 3, 3]);
}

/// A raw client that speaks the handshake with the given job id and key.
/// Returns once the server has closed the connection.
fn intruder(addr: SocketAddr, job_id: u64, key: &[u8; JOB_KEY_LEN]) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mine = Hello {
        version: PROTOCOL_VERSION,
        job_id,
        rank: 1,
        nonce: [3; 16],
    };
    let mut out = Vec::new();
    mine.encode(&mut out);
    stream.write_all(&out).unwrap();
    let mut theirs = [0u8; Hello::LEN];
    if stream.read_exact(&mut theirs).is_ok()
        && let Ok(theirs) = Hello::decode(&theirs)
    {
        let mut proof = Vec::new();
        Proof::compute(key, &mine, &theirs).encode(&mut proof);
        let _ = stream.write_all(&proof);
    }
    // Whatever the server sent (its proof, if it got that far), then the end.
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(
        rest.len() <= Proof::LEN,
        "the server sent packets to an intruder"
    );
}

#[test]
fn peers_without_the_job_key_are_refused_and_the_session_goes_on() {
    let (addr_tx, addr_rx) = mpsc::channel::<SocketAddr>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (addr_tx, done_rx) = (
        std::sync::Mutex::new(addr_tx),
        std::sync::Mutex::new(done_rx),
    );
    std::thread::scope(|s| {
        s.spawn(move || {
            let addr = addr_rx.recv().unwrap();
            intruder(addr, JOB_ID, &[0x11; JOB_KEY_LEN]); // wrong key
            intruder(addr, JOB_ID + 1, &JOB_KEY); // wrong job
            let mut junk = TcpStream::connect(addr).unwrap();
            let _ = junk.write_all(b"GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxx");
            let _ = junk.read_to_end(&mut Vec::new());
            done_tx.send(()).unwrap();
        });
        run(2, config(), |node, driver| {
            let mut buf = [0u8; 4];
            if node.rank() == 0 {
                addr_tx.lock().unwrap().send(driver.local_addr()).unwrap();
                node.recv(node.gate(1), 3u64, &mut buf).unwrap();
                assert_eq!(&buf, b"okay");
                assert_eq!(driver.stats().refused, 3);
                node.send(node.gate(1), 4, b"done").unwrap();
            } else {
                done_rx.lock().unwrap().recv().unwrap();
                node.send(node.gate(0), 3, b"okay").unwrap();
                node.recv(node.gate(0), 4u64, &mut buf).unwrap();
                assert_eq!(&buf, b"done");
            }
            assert_eq!(driver.connection_count(), 1);
        });
    });
}

#[test]
fn finalize_flushes_sends_nobody_waited_for() {
    const COUNT: usize = 100;
    let len = |i: usize| if i % 10 == 9 { 100_000 + i } else { i * 37 };
    run(2, config(), |node, _| {
        if node.rank() == 0 {
            for i in 0..COUNT {
                let data = Bytes::from(pattern(len(i), i as u64));
                // Dropped at once: detached, never waited for.
                drop(node.isend(node.gate(1), 5, data).unwrap());
            }
            return;
        }
        // Let rank 0 reach finalize first, with everything in flight.
        std::thread::sleep(Duration::from_millis(50));
        for i in 0..COUNT {
            let mut buf = vec![0u8; len(i)];
            let status = node.recv(node.gate(0), 5u64, &mut buf).unwrap();
            assert_eq!(status.len, len(i));
            check(&buf, len(i), i as u64);
        }
    });
}

#[test]
fn a_silent_connection_is_dropped_at_its_handshake_deadline() {
    let (addr_tx, addr_rx) = mpsc::channel::<SocketAddr>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (addr_tx, done_rx) = (
        std::sync::Mutex::new(addr_tx),
        std::sync::Mutex::new(done_rx),
    );
    let mut quick = config();
    quick.tcp.handshake_timeout = Duration::from_millis(50);
    std::thread::scope(|s| {
        s.spawn(move || {
            let addr = addr_rx.recv().unwrap();
            // Connects, says nothing, and waits for the server to hang up.
            let mut silent = TcpStream::connect(addr).unwrap();
            let mut hello = [0u8; Hello::LEN];
            silent.read_exact(&mut hello).unwrap();
            assert_eq!(silent.read_to_end(&mut Vec::new()).unwrap(), 0);
            done_tx.send(()).unwrap();
        });
        run(2, quick, |node, driver| {
            let mut buf = [0u8; 4];
            if node.rank() == 0 {
                addr_tx.lock().unwrap().send(driver.local_addr()).unwrap();
                node.recv(node.gate(1), 3u64, &mut buf).unwrap();
                assert_eq!(driver.stats().refused, 1);
            } else {
                done_rx.lock().unwrap().recv().unwrap();
                node.send(node.gate(0), 3, b"okay").unwrap();
            }
        });
    });
}

#[test]
fn rendezvous_data_is_read_straight_into_the_receive_buffer() {
    const LEN: usize = 8 << 20;
    let landed = run(2, config(), |node, driver| {
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        if node.rank() == 0 {
            node.send(node.gate(1), 1, &data).unwrap();
            None
        } else {
            let mut buf = vec![0u8; LEN];
            node.recv(node.gate(0), 1u64, &mut buf).unwrap();
            assert!(buf == data, "the received bytes differ");
            Some(driver.stats())
        }
    });
    let stats = landed[1].expect("rank 1 reports");
    // Every byte of the message came by rendezvous and landed in place:
    // while its data was awaited, each packet's headers were read alone,
    // so none of it went through the connection's buffer.
    assert_eq!(stats.landed_direct, LEN as u64, "{stats:?}");
    assert_eq!(stats.landed_copied, 0, "{stats:?}");
}

/// Small blocking sends go out at once, one `write` each, 4-byte ones and
/// 16 KiB ones alike, and so do Madeleine messages of a 4-byte piece and a
/// 16 KiB one (gathered: the large piece is written from the caller's
/// memory); when the peer stops reading and the socket fills, a message
/// the socket does not take whole waits as the connection's packet in
/// progress, and every message still arrives, whole and in order.
#[test]
fn small_sends_at_once_survive_a_full_socket() {
    const END: u32 = u32::MAX;
    // Message `i` of `len` bytes: `i`, then bytes that depend on it.
    let message = |i: u32, len: usize| -> Vec<u8> {
        let mut m = i.to_le_bytes().to_vec();
        m.extend((4..len).map(|k| (k as u32 ^ i.wrapping_mul(31)) as u8));
        m
    };
    // Sends message `m` tagged, or as a message of its first 4 bytes and
    // the rest.
    let send = |node: &Node, m: &[u8], pieces: bool| {
        if !pieces {
            return node.send(node.gate(1), 9, m).map(drop);
        }
        let mut msg = node.begin_packing(node.gate(1), 9)?;
        msg.pack(&m[..4], SendMode::Safer, ReceiveMode::Express)?;
        msg.pack(&m[4..], SendMode::Cheaper, ReceiveMode::Cheaper)?;
        msg.end_packing()
    };
    let recv = |node: &Node, buf: &mut [u8], pieces: bool| {
        let from = RecvFrom::from(node.gate(0));
        if !pieces {
            return node.recv(from, 9u64, buf).map(drop);
        }
        let mut msg = node.begin_unpacking(from, TagMatch::exact(9))?;
        let (head, rest) = buf.split_at_mut(4);
        msg.unpack_express(head, SendMode::Safer)?;
        msg.unpack_cheaper(rest, SendMode::Cheaper)?;
        msg.end_unpacking().map(drop)
    };
    for (len, pieces) in [(4usize, false), (16 << 10, false), (16 << 10, true)] {
        let stuck = std::sync::atomic::AtomicBool::new(false);
        let stats = run(2, config(), |node, driver| {
            let flag = std::sync::atomic::Ordering::SeqCst;
            if node.rank() == 0 {
                // The connection first (its handshake needs the peer), then
                // messages until the socket refuses one (the peer does not
                // read), then a few more (through the window), then the end.
                node.send(node.gate(1), 8, b"hello").expect("send");
                let mut i = 0u32;
                while !stuck.load(flag) {
                    send(node, &message(i, len), pieces).expect("send");
                    i += 1;
                    // The next send would wait for the reader: say so first.
                    if driver.stats().sent_now_deferred > 0 {
                        stuck.store(true, flag);
                    }
                    assert!(i < 50_000_000, "the socket never filled");
                }
                for _ in 0..16 {
                    send(node, &message(i, len), pieces).expect("send");
                    i += 1;
                }
                send(node, &message(END, len), pieces).expect("send");
            } else {
                let mut hello = [0u8; 5];
                node.recv(RecvFrom::from(node.gate(0)), 8u64, &mut hello)
                    .expect("recv");
                while !stuck.load(flag) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let mut buf = vec![0u8; len];
                for i in 0u32.. {
                    recv(node, &mut buf, pieces).expect("recv");
                    let got = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
                    assert!(
                        buf == message(got, len),
                        "message {i} ({len} bytes) corrupt"
                    );
                    match got {
                        END => break,
                        got => assert_eq!(got, i, "message {i} out of order"),
                    }
                }
            }
            driver.stats()
        });
        assert!(stats[0].sent_now > 0, "{len} bytes: {:?}", stats[0]);
        assert!(
            stats[0].sent_now_deferred > 0,
            "{len} bytes: {:?}",
            stats[0]
        );
        // The driver copied each packet's headers and small data, not its
        // 16 KiB piece, but for the rests of the packets the socket did not
        // take whole.
        let s = &stats[0];
        let headers = PacketHeader::LEN + EagerHeader::LEN * if pieces { 2 } else { 1 };
        let small = match (pieces, len) {
            (true, _) => 4,
            (false, 4) => 4,
            (false, _) => 0,
        };
        let (buffered, whole) = ((headers + small) as u64, (headers + len) as u64);
        // The first packet at once is the 5-byte hello, tagged.
        assert!(s.sent_now_bytes >= (s.sent_now - 1) * buffered, "{s:?}");
        assert!(
            s.sent_now_bytes <= s.sent_now * buffered + s.sent_now_deferred * whole,
            "{s:?}"
        );
    }
}

/// RPC calls and replies of 16 KiB over tcp, each a whole message that
/// lands at once: once a rank has a spare message, the packet keeps the
/// connection's buffer instead of a copy of its data, so the data is copied
/// once (into the handler's or the caller's memory), not twice; every body
/// comes back intact.
#[test]
fn large_rpc_messages_keep_the_connections_buffer() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use navette::rpc::HandlerMode;

    const CALLS: u32 = 20;
    /// Calls before the counting starts: the connection opens, and each
    /// rank gets its spare message.
    const WARM: u32 = 3;
    const LEN: usize = 16 << 10;
    let counters = |node: &Node| -> (u64, u64) {
        node.gate_stats().iter().fold((0, 0), |(c, a), g| {
            (c + g.bytes_copied, a + g.messages_at_once)
        })
    };
    // The service is registered before any call.
    let registered = std::sync::Barrier::new(2);
    // Waits spin for ever: a reply's receive is never posted for having
    // waited long (which a loaded test machine would make happen), so
    // every message lands at once.
    let mut spinning = config();
    spinning.node.spin_rounds = u32::MAX;
    spinning.node.oversubscribed_spin_rounds = u32::MAX;
    let ranks = run(2, spinning, |node, _| {
        let served = Arc::new(AtomicU32::new(0));
        let count = Arc::clone(&served);
        node.register_service("echo16", HandlerMode::Inline, move |call| {
            let (mut args, responder) = call.split();
            let mut body = vec![0u8; LEN];
            args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
            args.end_unpacking()?;
            responder.reply(|msg| msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper))?;
            count.fetch_add(1, Ordering::AcqRel);
            Ok(())
        })
        .unwrap();
        registered.wait();
        let warm = std::cell::Cell::new(None);
        let warmed = |served: u32| {
            if served == WARM && warm.get().is_none() {
                warm.set(Some(counters(node)));
            }
        };
        if node.rank() == 0 {
            for call in 0..CALLS {
                warmed(call);
                let body = pattern(LEN, u64::from(call));
                let reply = node
                    .call(1, "echo16", |msg| {
                        msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
                    })
                    .unwrap()
                    .wait()
                    .unwrap();
                let mut back = vec![0u8; LEN];
                let mut msg = reply.unpacking();
                msg.unpack_cheaper(&mut back, SendMode::Cheaper).unwrap();
                msg.end_unpacking().unwrap();
                check(&back, LEN, u64::from(call));
            }
        } else {
            node.serve_until(|| {
                let done = served.load(Ordering::Acquire);
                warmed(done);
                done == CALLS
            })
            .unwrap();
        }
        let (copied, at_once) = counters(node);
        let (warm_copied, warm_at_once) = warm.get().expect("counted after the warm calls");
        (copied - warm_copied, at_once - warm_at_once)
    });
    let counted = u64::from(CALLS - WARM);
    for (rank, &(bytes_copied, at_once)) in ranks.iter().enumerate() {
        // Each rank received a message (a call, or a reply) per call, at
        // once. Copied twice, they would count 2 * LEN each; kept in the
        // connection's buffer, one copy each, and a few header bytes.
        assert_eq!(at_once, counted, "rank {rank}");
        let most = counted * (LEN as u64 + 64);
        assert!(
            (counted * LEN as u64..=most).contains(&bytes_copied),
            "rank {rank}: {bytes_copied} bytes copied, expected at most {most}"
        );
    }
}
