//! Several tcp links between the same ranks, on loopback: links on
//! 127.0.0.1 and 127.0.0.2 (Linux routes all of 127/8 to `lo`, so no
//! privilege is needed). Ranks are threads of this process, each owning its
//! node, found through an in-process bootstrap.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use bytes::Bytes;
use common::{check, pattern};
use navette::tcp::links::LinkHello;
use navette::tcp::{LINKS_KEY, TcpDriver, TcpLink, TcpStats};
use navette::{
    Error, Node, RequestError, RuntimeConfig, StrategyKind, UsageError, init_tcp, wait_all,
};
use navette_session::local::LocalBootstrap;
use navette_session::{Bootstrap, JOB_KEY_LEN};
use navette_wire::handshake::{Hello, PROTOCOL_VERSION, Proof};

const JOB_KEY: [u8; JOB_KEY_LEN] = [0x3c; JOB_KEY_LEN];

/// The two loopback links.
fn loopback_links() -> Vec<TcpLink> {
    [1, 2]
        .map(|last| TcpLink::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))))
        .to_vec()
}

fn config(links: Vec<TcpLink>) -> RuntimeConfig {
    let mut config = common::test_config(Duration::from_secs(120));
    config.tcp.links = links;
    // Cuts every large message over all the links, so that each link's
    // share does not depend on which rail happens to be idle first.
    config.engine.strategy = StrategyKind::Split;
    config
}

fn job_id() -> u64 {
    let mut job = [0u8; 8];
    getrandom::fill(&mut job).expect("random bytes");
    u64::from_le_bytes(job)
}

/// Runs `f` on `size` ranks, one thread each, rank `r` set up with
/// `config(r)`, between init and finalize; returns what each rank
/// returned, by rank.
fn run<R: Send>(
    size: u32,
    config: impl Fn(u32) -> RuntimeConfig + Sync,
    f: impl Fn(&Node, &TcpDriver) -> R + Sync,
) -> Vec<R> {
    let ranks = LocalBootstrap::job(size, job_id(), JOB_KEY);
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|b| {
                let (f, config) = (&f, &config);
                s.spawn(move || {
                    let rank = b.rank();
                    let (node, driver) = init_tcp(Arc::new(b), config(rank)).expect("init");
                    let out = f(&node, &driver);
                    node.finalize().expect("finalize");
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

const SIZES: [usize; 12] = [
    0,
    1,
    100,
    4096,
    (64 << 10) + 1,
    (256 << 10) - 1,
    256 << 10,
    (1 << 20) + 3,
    4 << 20,
    (16 << 20) - 5,
    32 << 20,
    64 << 20,
];

fn salt(from: u32, to: u32, index: usize) -> u64 {
    (u64::from(from) * 1000 + u64::from(to)) * 64 + index as u64
}

/// A checksum of the bytes and their positions (Fletcher-like), printed
/// when a message differs, besides the first wrong byte.
fn checksum(data: &[u8]) -> u64 {
    data.iter().enumerate().fold(0u64, |acc, (i, &b)| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b) ^ i as u64)
    })
}

/// Both ranks send each other a message of every size at once, several in
/// flight, and check what they receive.
fn exchange(node: &Node, sizes: &[usize]) {
    let (me, other) = (node.rank(), 1 - node.rank());
    let peer = node.gate(other);
    // A few at a time, so that large ones overlap.
    for (round, batch) in sizes.chunks(4).enumerate() {
        let base = round * 4;
        let recvs: Vec<_> = batch
            .iter()
            .enumerate()
            .map(|(i, &len)| node.irecv(peer, (base + i) as u64, vec![0; len]))
            .collect();
        let sends: Vec<_> = batch
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let data = Bytes::from(pattern(len, salt(me, other, base + i)));
                node.isend(peer, (base + i) as u64, data).unwrap()
            })
            .collect();
        for (i, recv) in recvs.into_iter().enumerate() {
            let len = batch[i];
            let got = recv.wait().unwrap();
            assert_eq!(got.status.len, len, "message {} from {other}", base + i);
            let want = checksum(&pattern(len, salt(other, me, base + i)));
            if checksum(&got.data) != want {
                check(&got.data, len, salt(other, me, base + i));
            }
        }
        for sent in wait_all(sends) {
            sent.unwrap();
        }
    }
}

/// Asserts that both links of `stats` carried packets both ways.
fn assert_both_links_used(rank: usize, stats: &TcpStats) {
    for link in 0..2 {
        let l = &stats.links[link];
        assert!(
            l.packets_sent > 0 && l.bytes_sent > 0,
            "rank {rank}: nothing sent on link {link}: {stats:?}"
        );
        assert!(
            l.packets_received > 0 && l.bytes_received > 0,
            "rank {rank}: nothing received on link {link}: {stats:?}"
        );
    }
    assert!(stats.links[2..].iter().all(|l| *l == Default::default()));
}

/// Messages of every size up to 64 MiB, both ways at once, over two
/// links: all arrive whole, and both links carry a share (the `split`
/// strategy cuts large messages over both).
#[test]
fn two_loopback_links_carry_messages_of_every_size_both_ways() {
    let stats = run(
        2,
        |_| config(loopback_links()),
        |node, driver| {
            assert_eq!(driver.link_count(), 2);
            let addrs = driver.link_addrs();
            assert_eq!(addrs[0].ip(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)));
            assert_eq!(addrs[1].ip(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
            assert_eq!(driver.local_addr(), addrs[0]);
            exchange(node, &SIZES);
            driver.stats()
        },
    );
    for (rank, s) in stats.iter().enumerate() {
        assert_both_links_used(rank, s);
        let sent: u64 = s.links.iter().map(|l| l.bytes_sent).sum();
        let total: u64 = SIZES.iter().map(|&n| n as u64).sum();
        assert!(sent >= total, "rank {rank} sent {sent} bytes for {total}");
        assert_eq!(s.refused, 0, "rank {rank}: {s:?}");
        // One connection per link, or two where both ranks dialed at once.
        assert!((2..=4).contains(&s.established_total), "rank {rank}: {s:?}");
        for link in &s.links[..2] {
            assert!((1..=2).contains(&link.established), "rank {rank}: {s:?}");
        }
    }
}

/// The published link addresses are the listeners', in link order, and
/// each link's connections leave from this rank's address on that link.
#[test]
fn links_are_published_and_connections_leave_from_their_link() {
    let bootstraps: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());
    let ranks = LocalBootstrap::job(2, job_id(), JOB_KEY);
    std::thread::scope(|s| {
        for b in ranks {
            let bootstraps = &bootstraps;
            s.spawn(move || {
                let b: Arc<dyn Bootstrap> = Arc::new(b);
                let (node, driver) =
                    init_tcp(Arc::clone(&b), config(loopback_links())).expect("init");
                let other = 1 - node.rank();
                let value = String::from_utf8(b.get(other, LINKS_KEY).unwrap()).unwrap();
                bootstraps.lock().unwrap().push((other, value));
                let mine: Vec<String> = driver.link_addrs().iter().map(|a| a.to_string()).collect();
                assert_eq!(
                    String::from_utf8(b.get(node.rank(), LINKS_KEY).unwrap()).unwrap(),
                    mine.join(",")
                );
                exchange(&node, &[10, 8 << 20]);
                let connections = driver.connections();
                assert!(connections.len() >= 2, "{connections:?}");
                for c in &connections {
                    let ip = driver.link_addrs()[c.link].ip();
                    assert_eq!(c.peer, other);
                    assert_eq!(c.local.ip(), ip, "{c:?}");
                    assert_eq!(c.remote.ip(), ip, "the peer's end of {c:?}");
                }
                node.finalize().expect("finalize");
            });
        }
    });
    let values = bootstraps.into_inner().unwrap();
    for (rank, value) in values {
        let addrs: Vec<SocketAddr> = value.split(',').map(|a| a.parse().unwrap()).collect();
        assert_eq!(addrs.len(), 2, "rank {rank}: {value}");
        assert_eq!(addrs[0].ip().to_string(), "127.0.0.1");
        assert_eq!(addrs[1].ip().to_string(), "127.0.0.2");
    }
}

/// With eager connection, every rank dials the higher ranks on every link
/// at start-up.
#[test]
fn eager_connection_opens_one_connection_per_pair_and_link() {
    let counts = run(
        3,
        |_| {
            let mut config = config(loopback_links());
            config.tcp.eager_connect = true;
            config
        },
        |node, driver| {
            let (me, size) = (node.rank(), node.size());
            let next = node.gate((me + 1) % size);
            let prev = node.gate((me + size - 1) % size);
            let recv = node.irecv(prev, 1u64, vec![0; 3 << 20]);
            node.send(next, 1, &pattern(3 << 20, u64::from(me)))
                .unwrap();
            check(&recv.wait().unwrap().data, 3 << 20, u64::from((me + 2) % 3));
            driver.connection_count()
        },
    );
    assert_eq!(counts, [4, 4, 4], "2 peers × 2 links each");
}

/// Ranks that do not have the same number of links cannot pair their
/// rails: each refuses the other's published list, fails that peer, and
/// sends to it fail at once instead of hanging.
#[test]
fn ranks_with_different_link_counts_fail_each_other() {
    let results = run(
        2,
        |rank| {
            if rank == 0 {
                config(loopback_links())
            } else {
                config(Vec::new())
            }
        },
        |node, driver| {
            let peer = node.gate(1 - node.rank());
            let err = node.send(peer, 1, b"hello?").unwrap_err();
            (err, driver.stats().dialed)
        },
    );
    for (rank, (err, dialed)) in results.iter().enumerate() {
        assert!(
            matches!(
                err,
                Error::Request(RequestError::PeerUnreachable { peer }) if *peer == 1 - rank as u32
            ),
            "rank {rank}: {err:?}"
        );
        assert_eq!(*dialed, 0, "rank {rank} dialed a peer it cannot pair with");
    }
}

/// A raw client's view of a refused handshake: sends `hello` and `link`,
/// then reads to the end what the server sends (its hello and link hello,
/// and nothing after: no proof to a refused peer).
fn claim(addr: SocketAddr, job_id: u64, link: LinkHello) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut out = Vec::new();
    Hello {
        version: PROTOCOL_VERSION,
        job_id,
        rank: 1,
        nonce: [9; 16],
    }
    .encode(&mut out);
    link.encode(&mut out);
    stream.write_all(&out).unwrap();
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    assert!(
        got.len() <= Hello::LEN + LinkHello::LEN,
        "the server went on with a peer it should refuse ({} bytes)",
        got.len()
    );
    if got.len() == Hello::LEN + LinkHello::LEN {
        let theirs = LinkHello::decode(&got[Hello::LEN..]).unwrap();
        assert_eq!(theirs.links, 2);
    }
}

/// A connection that claims a link the rank does not have, another link
/// than the listener it reached, or another number of links, is refused
/// before any proof; the session goes on over both links.
#[test]
fn a_peer_claiming_an_unknown_or_wrong_link_is_refused() {
    let job = job_id();
    let (addr_tx, addr_rx) = mpsc::channel::<Vec<SocketAddr>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (addr_tx, done_rx) = (Mutex::new(addr_tx), Mutex::new(done_rx));
    let ranks = LocalBootstrap::job(2, job, JOB_KEY);
    std::thread::scope(|s| {
        s.spawn(move || {
            let addrs = addr_rx.recv().unwrap();
            claim(addrs[1], job, LinkHello { link: 7, links: 2 });
            claim(addrs[1], job, LinkHello { link: 0, links: 2 });
            claim(addrs[0], job, LinkHello { link: 0, links: 3 });
            done_tx.send(()).unwrap();
        });
        for b in ranks {
            let (addr_tx, done_rx) = (&addr_tx, &done_rx);
            s.spawn(move || {
                let (node, driver) = init_tcp(Arc::new(b), config(loopback_links())).unwrap();
                if node.rank() == 0 {
                    let addrs = driver.link_addrs().to_vec();
                    addr_tx.lock().unwrap().send(addrs).unwrap();
                    // Waiting serves the intruder's connections.
                    let mut buf = [0u8; 4];
                    node.recv(node.gate(1), 3u64, &mut buf).unwrap();
                    assert_eq!(driver.stats().refused, 3, "{:?}", driver.stats());
                } else {
                    done_rx.lock().unwrap().recv().unwrap();
                    node.send(node.gate(0), 3, b"okay").unwrap();
                }
                exchange(&node, &[5, 12 << 20]);
                let stats = driver.stats();
                assert!(
                    stats.links[..2].iter().all(|l| l.packets_received > 0),
                    "{stats:?}"
                );
                node.finalize().unwrap();
            });
        }
    });
}

/// A 64 MiB message one way over two links: the receiver gets it whole,
/// and both links delivered part of it.
#[test]
fn a_64_mib_message_is_split_over_both_links() {
    const LEN: usize = 64 << 20;
    let stats = run(
        2,
        |_| config(loopback_links()),
        |node, driver| {
            if node.rank() == 0 {
                node.send(node.gate(1), 1, &pattern(LEN, 64)).unwrap();
            } else {
                let mut buf = vec![0u8; LEN];
                let status = node.recv(node.gate(0), 1u64, &mut buf).unwrap();
                assert_eq!(status.len, LEN);
                check(&buf, LEN, 64);
            }
            driver.stats()
        },
    );
    // Data, not only control packets, on each link.
    for link in 0..2 {
        assert!(
            stats[0].links[link].bytes_sent >= 1 << 20,
            "link {link} carried no data: {:?}",
            stats[0]
        );
        assert!(
            stats[1].links[link].bytes_received >= 1 << 20,
            "{:?}",
            stats[1]
        );
    }
}

/// The proof key of link `link` of `links`, as `navette::tcp::links`
/// documents it: the job key, `navette tcp link`, then both numbers
/// (little-endian u16).
fn link_key(link: u16, links: u16) -> Vec<u8> {
    let mut key = JOB_KEY.to_vec();
    key.extend_from_slice(b"navette tcp link");
    key.extend_from_slice(&link.to_le_bytes());
    key.extend_from_slice(&links.to_le_bytes());
    key
}

/// Runs our side of a two-link handshake as rank 1 on a connection to
/// `addr`, link `link`; returns the established stream.
fn join_as_rank_1(addr: SocketAddr, job_id: u64, link: u16) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).unwrap();
    let mine = Hello {
        version: PROTOCOL_VERSION,
        job_id,
        rank: 1,
        nonce,
    };
    let mut out = Vec::new();
    mine.encode(&mut out);
    LinkHello { link, links: 2 }.encode(&mut out);
    stream.write_all(&out).unwrap();
    let mut theirs = [0u8; Hello::LEN + LinkHello::LEN];
    stream.read_exact(&mut theirs).unwrap();
    let (hello, claim) = theirs.split_at(Hello::LEN);
    let hello = Hello::decode(hello).unwrap();
    assert_eq!(
        LinkHello::decode(claim).unwrap(),
        LinkHello { link, links: 2 }
    );
    let key = link_key(link, 2);
    let mut proof = Vec::new();
    Proof::compute(&key, &mine, &hello).encode(&mut proof);
    stream.write_all(&proof).unwrap();
    let mut theirs = [0u8; Proof::LEN];
    stream.read_exact(&mut theirs).unwrap();
    Proof::decode(&theirs)
        .unwrap()
        .verify(&key, &hello, &mine)
        .expect("rank 0 proves the job key under link's key");
    stream
}

/// Plays rank 1 of a two-link job with raw sockets: publishes two
/// (unused) listening links, meets rank 0 at its fence, and joins rank 0
/// on both of its links; returns the two connections, and the listeners
/// (kept open while they live).
fn fake_rank_1(fake: &LocalBootstrap, job: u64) -> (TcpStream, TcpStream, Vec<TcpListener>) {
    let listeners: Vec<_> = ["127.0.0.1:0", "127.0.0.2:0"]
        .map(|a| TcpListener::bind(a).unwrap())
        .into_iter()
        .collect();
    let addrs: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    fake.put(navette::tcp::ADDR_KEY, addrs[0].as_bytes())
        .unwrap();
    fake.put(LINKS_KEY, addrs.join(",").as_bytes()).unwrap();
    fake.fence().unwrap();
    let value = String::from_utf8(fake.get(0, LINKS_KEY).unwrap()).unwrap();
    let theirs: Vec<SocketAddr> = value.split(',').map(|a| a.parse().unwrap()).collect();
    (
        join_as_rank_1(theirs[0], job, 0),
        join_as_rank_1(theirs[1], job, 1),
        listeners,
    )
}

/// When one link to a peer fails, the engine fails the peer as a whole
/// (a rail does not retransmit): a receive waiting for it fails with
/// `PeerUnreachable` although the other link was up, and rank 0 closes that
/// other link too, so that the peer learns of it. Rank 1 is played by raw
/// sockets that speak the documented two-link handshake.
#[test]
fn a_failed_link_fails_the_peer_on_every_link() {
    let job = job_id();
    let mut ranks = LocalBootstrap::job(2, job, JOB_KEY);
    let fake = ranks.pop().unwrap();
    let real = ranks.pop().unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            let (mut link0, link1, _listeners) = fake_rank_1(&fake, job);
            // Link 1 goes down: rank 0 closes link 0 as well (a hang guard
            // on the read, not a timing assertion).
            drop(link1);
            link0
                .set_read_timeout(Some(std::time::Duration::from_secs(120)))
                .unwrap();
            let mut byte = [0u8; 1];
            assert_eq!(
                link0.read(&mut byte).unwrap(),
                0,
                "rank 0 closed link 0 after link 1 failed"
            );
            fake.fence().unwrap();
            drop(link0);
        });
        // Checked after finalize: the fake rank waits at the fence.
        let (node, driver) = init_tcp(Arc::new(real), config(loopback_links())).unwrap();
        let got = node.irecv(node.gate(1), 1u64, vec![0u8; 16]).wait();
        let stats = driver.stats();
        // Later sends to the peer are refused at once, whatever link they
        // would take: no rail to it is open.
        let sent = node.send(node.gate(1), 2, &[0u8; 1 << 20]);
        node.finalize().unwrap();
        assert!(
            matches!(
                got,
                Err(Error::Request(RequestError::PeerUnreachable { peer: 1 }))
            ),
            "{got:?}"
        );
        assert_eq!(stats.established_total, 2, "{stats:?}");
        assert_eq!(stats.refused, 0, "{stats:?}");
        assert!(
            matches!(sent, Err(Error::Usage(UsageError::NoRail(1)))),
            "{sent:?}"
        );
    });
}

/// A peer whose packet header announces a body longer than any packet
/// our rails make (but within the wire format's own limit) is cut off at
/// that header: rank 0 closes the connection without reading or
/// allocating for the body, and a receive waiting for the peer fails with
/// `PeerUnreachable`. Rank 1 is played by raw sockets.
#[test]
fn a_packet_longer_than_the_rails_make_closes_the_connection() {
    let job = job_id();
    let mut ranks = LocalBootstrap::job(2, job, JOB_KEY);
    let fake = ranks.pop().unwrap();
    let real = ranks.pop().unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            let (mut link0, link1, _listeners) = fake_rank_1(&fake, job);
            // 60 MiB: below the wire format's 64 MiB, far above the rails'
            // packets (a rendezvous fragment of 4 MiB and its header).
            let header = navette_wire::PacketHeader {
                chunk_count: 1,
                body_len: 60 << 20,
            };
            link0.write_all(&header.to_bytes()).unwrap();
            // A hang guard on the read, not a timing assertion.
            link0
                .set_read_timeout(Some(std::time::Duration::from_secs(120)))
                .unwrap();
            let mut byte = [0u8; 1];
            let closed = matches!(link0.read(&mut byte), Ok(0) | Err(_));
            assert!(closed, "rank 0 closed the connection at the header");
            fake.fence().unwrap();
            drop((link0, link1));
        });
        let (node, _driver) = init_tcp(Arc::new(real), config(loopback_links())).unwrap();
        let got = node.irecv(node.gate(1), 1u64, vec![0u8; 16]).wait();
        node.finalize().unwrap();
        assert!(
            matches!(
                got,
                Err(Error::Request(RequestError::PeerUnreachable { peer: 1 }))
            ),
            "{got:?}"
        );
    });
}
