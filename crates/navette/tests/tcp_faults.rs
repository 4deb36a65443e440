//! A byte-mangling proxy between two tcp ranks: rank 0 reaches rank 1
//! through it, and it spoils the bytes one way — a garbage handshake, a
//! flipped bit in a packet's length or in a chunk's kind, a length 4
//! bytes off either way, an oversized
//! length, a packet cut short. Each fault closes that connection with a
//! logged reason at rank 1. The ranks on either side of it find each
//! other unreachable (a typed error, no hang, no panic), and both still
//! exchange checked messages with rank 2.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{check, pattern};
use navette::tcp::{ADDR_KEY, LINKS_KEY, TcpDriver};
use navette::{Error, Node, RecvFrom, RequestError, RuntimeConfig, UsageError, init_tcp};
use navette_session::local::LocalBootstrap;
use navette_session::{Bootstrap, BootstrapError, JOB_KEY_LEN};
use navette_wire::PacketHeader;
use navette_wire::handshake::{Hello, Proof};

const JOB_KEY: [u8; JOB_KEY_LEN] = [0x2e; JOB_KEY_LEN];
/// What rank 0 sends on a connection before its first packet.
const HANDSHAKE: usize = Hello::LEN + Proof::LEN;

/// How the proxy spoils the bytes from rank 0 to rank 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Every byte of the hello inverted.
    GarbageHello,
    /// A high bit of the first packet's body length flipped.
    FlippedLength,
    /// It made 4 bytes longer: the packet takes the next one's first
    /// bytes.
    Lengthened,
    /// It made 4 bytes shorter: the packet's chunk overruns it.
    Shortened,
    /// The first chunk's kind byte flipped.
    FlippedKind,
    /// The first packet's body length set to the largest u32.
    OversizedLength,
    /// The connection closed 5 bytes into the first packet.
    Truncated,
}

impl Fault {
    /// Spoils `byte`, the `at`-th of the stream; `None` ends the stream
    /// before it.
    fn apply(self, at: usize, byte: u8) -> Option<u8> {
        let packet = at.checked_sub(HANDSHAKE);
        Some(match (self, packet) {
            (Self::GarbageHello, _) if at < Hello::LEN => !byte,
            (Self::FlippedLength, Some(11)) => byte ^ 0x40,
            // The low byte of a small packet's length: no carry.
            (Self::Lengthened, Some(8)) => byte + 4,
            (Self::Shortened, Some(8)) => byte - 4,
            (Self::FlippedKind, Some(PacketHeader::LEN)) => byte ^ 0xee,
            (Self::OversizedLength, Some(8..=11)) => 0xff,
            (Self::Truncated, Some(5..)) => return None,
            _ => byte,
        })
    }

    /// What rank 1 logs when it closes the connection.
    fn logged(self) -> &'static str {
        match self {
            Self::GarbageHello => "refused connection",
            Self::Truncated => "in the middle of a packet",
            Self::FlippedLength | Self::OversizedLength => "bad packet header",
            Self::FlippedKind | Self::Lengthened | Self::Shortened => "closing connection",
        }
    }
}

/// Rank 0's bootstrap: rank 1's address is the proxy's.
#[derive(Debug)]
struct ThroughProxy {
    inner: LocalBootstrap,
    proxy: SocketAddr,
    /// Rank 1's real address, for the proxy, once rank 0 looks it up.
    target: Arc<OnceLock<String>>,
}

impl Bootstrap for ThroughProxy {
    fn rank(&self) -> u32 {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn job_id(&self) -> u64 {
        self.inner.job_id()
    }
    fn job_key(&self) -> &[u8; JOB_KEY_LEN] {
        self.inner.job_key()
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        self.inner.put(key, value)
    }
    fn fence(&self) -> Result<(), BootstrapError> {
        self.inner.fence()
    }
    fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        let value = self.inner.get(rank, key)?;
        if rank != 1 || (key != LINKS_KEY && key != ADDR_KEY) {
            return Ok(value);
        }
        let _ = self
            .target
            .set(String::from_utf8_lossy(&value).into_owned());
        Ok(self.proxy.to_string().into_bytes())
    }
}

/// Forwards one connection from rank 0 to rank 1, spoiling it as `fault`
/// says; the other way untouched.
fn proxy(listener: &TcpListener, target: &OnceLock<String>, fault: Fault) {
    let (mut up_in, _) = listener.accept().expect("rank 0 connects");
    let to = target.get().expect("rank 0 looked rank 1 up");
    let mut up_out = TcpStream::connect(to.as_str()).expect("rank 1 listens");
    let (mut down_in, mut down_out) = (up_out.try_clone().unwrap(), up_in.try_clone().unwrap());
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = std::io::copy(&mut down_in, &mut down_out);
            let _ = down_out.shutdown(Shutdown::Both);
        });
        let mut at = 0;
        let mut buf = [0u8; 4096];
        'stream: loop {
            let n = match up_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut out = Vec::with_capacity(n);
            for &byte in &buf[..n] {
                match fault.apply(at, byte) {
                    Some(b) => out.push(b),
                    None => {
                        let _ = up_out.write_all(&out);
                        break 'stream;
                    }
                }
                at += 1;
            }
            if up_out.write_all(&out).is_err() {
                break;
            }
        }
        let _ = up_out.shutdown(Shutdown::Both);
        let _ = up_in.shutdown(Shutdown::Both);
    });
}

/// Log lines, from every rank of this process.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    let subscriber = tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
}

fn config() -> RuntimeConfig {
    common::test_config(Duration::from_secs(120))
}

fn lost(outcome: &navette::Result<impl std::fmt::Debug>, peer: u32) -> bool {
    matches!(outcome, Err(Error::Request(RequestError::PeerUnreachable { peer: p })) if *p == peer)
}

/// Ranks 0 and 1 each exchange a 1 KiB and a 1 MiB message with rank 2,
/// checked.
fn with_rank_2(node: &Node) {
    let me = node.rank();
    let peers: &[u32] = if me == 2 { &[0, 1] } else { &[2] };
    for &peer in peers {
        for (i, len) in [1usize << 10, 1 << 20].into_iter().enumerate() {
            let salt = u64::from(me * 10 + peer) * 4 + i as u64;
            let back = u64::from(peer * 10 + me) * 4 + i as u64;
            let mut got = vec![0u8; len];
            let from = RecvFrom::from(node.gate(peer));
            if me < peer {
                node.send(node.gate(peer), 7, &pattern(len, salt)).unwrap();
                node.recv(from, 7u64, &mut got).unwrap();
            } else {
                node.recv(from, 7u64, &mut got).unwrap();
                node.send(node.gate(peer), 7, &pattern(len, salt)).unwrap();
            }
            check(&got, len, back);
        }
    }
}

fn one_fault(fault: Fault, job: u64) {
    LOG.lock().unwrap().clear();
    let mut ranks = LocalBootstrap::job(3, job, JOB_KEY);
    let (two, one, zero) = (
        ranks.pop().unwrap(),
        ranks.pop().unwrap(),
        ranks.pop().unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = Arc::new(OnceLock::new());
    let zero = ThroughProxy {
        inner: zero,
        proxy: listener.local_addr().unwrap(),
        target: Arc::clone(&target),
    };
    let bootstraps: Vec<Arc<dyn Bootstrap>> = vec![Arc::new(zero), Arc::new(one), Arc::new(two)];
    let refused = std::thread::scope(|s| {
        s.spawn(|| proxy(&listener, &target, fault));
        let ranks: Vec<_> = bootstraps
            .into_iter()
            .map(|b| {
                s.spawn(move || {
                    let (node, driver): (Node, Arc<TcpDriver>) = init_tcp(b, config()).unwrap();
                    let me = node.rank();
                    match me {
                        0 => {
                            // Through the proxy: the sends may leave before
                            // rank 1 closes; a receive from it then fails.
                            // The second one frames the bytes after the
                            // first packet (a length made longer waits for
                            // them).
                            for tag in [1, 3] {
                                let sent = node.send(node.gate(1), tag, &[5; 8]);
                                // Once the rail is closed: no rail to rank 1.
                                let refused =
                                    matches!(sent, Err(Error::Usage(UsageError::NoRail(1))));
                                assert!(
                                    sent.is_ok() || lost(&sent, 1) || refused,
                                    "{fault:?}: {sent:?}"
                                );
                            }
                            let mut byte = [0u8; 1];
                            let got = node.recv(RecvFrom::from(node.gate(1)), 2u64, &mut byte);
                            assert!(lost(&got, 1), "{fault:?}: {got:?}");
                        }
                        1 if fault != Fault::GarbageHello => {
                            let mut got = [0u8; 8];
                            let got = node.recv(RecvFrom::from(node.gate(0)), 1u64, &mut got);
                            assert!(lost(&got, 0), "{fault:?}: {got:?}");
                        }
                        // A garbage hello names no rank: rank 1 refuses a
                        // stranger, and has nothing to fail.
                        _ => {}
                    }
                    with_rank_2(&node);
                    let refused = driver.stats().refused;
                    node.finalize().unwrap();
                    (me, refused)
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|r| r.join().expect("no rank panicked"))
            .find(|&(me, _)| me == 1)
            .map(|(_, refused)| refused)
    });
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
    let reason = log
        .lines()
        .find(|l| l.contains("rank=1") && l.contains(fault.logged()));
    assert!(
        reason.is_some(),
        "{fault:?}: rank 1 logged no reason:\n{log}"
    );
    println!("{fault:?}: {}", reason.unwrap_or_default());
    if fault == Fault::GarbageHello {
        assert_eq!(refused, Some(1), "{fault:?}");
    }
}

#[test]
fn a_mangling_proxy_closes_that_connection_and_nothing_else() {
    capture_logs();
    let base = u64::from(std::process::id()) << 16;
    let faults = [
        Fault::GarbageHello,
        Fault::FlippedLength,
        Fault::Lengthened,
        Fault::Shortened,
        Fault::FlippedKind,
        Fault::OversizedLength,
        Fault::Truncated,
    ];
    for (i, fault) in faults.into_iter().enumerate() {
        one_fault(fault, base + i as u64);
    }
}
