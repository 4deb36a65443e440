//! `intruder`: a connection that cannot prove the job key is refused, and
//! the session goes on.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 3 -- target/debug/examples/intruder
//! ```
//!
//! Every tcp connection between ranks opens with a handshake: each side
//! sends a hello (version, job id, rank, fresh nonce), then an HMAC of both
//! hellos under the job key that the launcher gave every rank. Here rank 0
//! plays an intruder against rank 1: it reads rank 1's listening address
//! from the bootstrap (under `navette::tcp::ADDR_KEY`) and dials it with a
//! raw socket, twice:
//!
//! 1. the right job id, but a proof made with a wrong key (the job key with
//!    one bit flipped);
//! 2. a wrong job id.
//!
//! Each time rank 1 must close the connection, and its driver logs the
//! refusal with the reason (a warning on standard error; `NAVETTE_LOG`
//! sets the level). Rank 1 then checks its tcp driver counted two refused
//! connections, and every rank runs a normal ring exchange and finalizes:
//! a refused intruder disturbs nobody.
//!
//! With `--foreign`, the intruder is a process outside the job instead
//! (the test that runs this program): rank 1 prints the launcher's
//! bootstrap socket (`intruder: rank 1 bootstrap at PATH`) and the address
//! it listens on (`intruder: rank 1 listens at ADDR`), waits until it has
//! refused a connection, then goes on as above.
//!
//! To reach the bootstrap and the driver's counters, this program starts
//! its node with `navette::init_tcp` on a bootstrap it keeps, instead of
//! `navette::init()`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use navette::{Node, RuntimeConfig};
use navette_session::Bootstrap;
use navette_wire::handshake::{Hello, PROTOCOL_VERSION, Proof};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// Rank 0 tells rank 1 that it is done knocking.
const DONE: u64 = 1;
const RING: u64 = 2;
/// The attempts rank 0 makes, each of which rank 1 must refuse.
const ATTEMPTS: usize = 2;
/// How long the intruder waits on its socket before concluding that the
/// connection was left open (a failure): a safety net, not a measurement.
const PATIENCE: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("intruder: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    // The bootstrap this process was started with; we keep a handle on it.
    let bootstrap: Arc<dyn Bootstrap> = Arc::from(navette_session::from_env()?);
    let (node, driver) = navette::init_tcp(Arc::clone(&bootstrap), RuntimeConfig::default())?;
    let me = node.rank();
    if node.size() < 2 {
        return Err("run with at least 2 ranks (navette run -n 2)".into());
    }
    let foreign = std::env::args().any(|a| a == "--foreign");
    match me {
        1 if foreign => {
            let addr = String::from_utf8(bootstrap.get(1, navette::tcp::ADDR_KEY)?)?;
            let socket = std::env::var(navette_session::env::BOOTSTRAP).unwrap_or_default();
            println!("intruder: rank 1 bootstrap at {socket}");
            println!("intruder: rank 1 listens at {addr}");
            // Progress serves the foreigner's connection meanwhile.
            let since = std::time::Instant::now();
            while driver.stats().refused == 0 {
                if since.elapsed() > 3 * PATIENCE {
                    return Err("no foreign connection came to be refused".into());
                }
                if !node.progress()? {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            let refused = driver.stats().refused;
            println!("intruder: rank 1: refused {refused} connections");
        }
        _ if foreign => {}
        0 => {
            let addr: SocketAddr =
                String::from_utf8(bootstrap.get(1, navette::tcp::ADDR_KEY)?)?.parse()?;
            let mut wrong_key = *bootstrap.job_key();
            wrong_key[0] ^= 1;
            let attempts = [
                ("wrong key", bootstrap.job_id(), wrong_key),
                ("wrong job id", bootstrap.job_id() ^ 1, *bootstrap.job_key()),
            ];
            for (what, job_id, key) in attempts {
                let ending = knock(addr, job_id, &key)?;
                println!("intruder: rank 0: {what}: rank 1 at {addr} {ending}");
            }
            node.send(node.gate(1), DONE, &[ATTEMPTS as u8])?;
        }
        1 => {
            // Waiting drives progress: rank 1 serves the intruder's
            // connections while it waits for rank 0's word.
            let mut count = [0u8; 1];
            node.recv(node.gate(0), DONE, &mut count)?;
            let refused = driver.stats().refused;
            println!("intruder: rank 1: refused {refused} connections");
            if refused < usize::from(count[0]) {
                return Err(format!(
                    "rank 1 refused {refused} connections, expected {}",
                    count[0]
                )
                .into());
            }
        }
        _ => {}
    }
    ring(&node)?;
    println!("intruder: rank {me}: ring exchange ok");
    node.finalize()?;
    Ok(())
}

/// Dials `addr` and runs our side of the handshake with `job_id` and
/// `key`; returns how the connection ended, or an error if it stayed open.
fn knock(addr: SocketAddr, job_id: u64, key: &[u8]) -> Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, PATIENCE)?;
    stream.set_read_timeout(Some(PATIENCE))?;
    // A real rank draws a fresh random nonce; any value will do to fail.
    let nonce = *b"intruder nonce!!";
    let mine = Hello {
        version: PROTOCOL_VERSION,
        job_id,
        // Rank 0 is a rank of this job: only the proof can tell us apart.
        rank: 0,
        nonce,
    };
    let mut out = Vec::new();
    mine.encode(&mut out);
    stream.write_all(&out)?;
    // Rank 1 sends its hello as soon as it accepts.
    let mut theirs = [0u8; Hello::LEN];
    stream.read_exact(&mut theirs)?;
    let theirs = Hello::decode(&theirs)?;
    let mut proof = Vec::new();
    Proof::compute(key, &mine, &theirs).encode(&mut proof);
    // Rank 1 may have closed already (wrong job id): a failed write is
    // fine, the read below tells.
    let _ = stream.write_all(&proof);
    // Rank 1 may send its own proof, then must close on ours.
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => Ok(format!(
            "closed the connection after sending {} more bytes",
            rest.len()
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
            Ok("reset the connection".to_owned())
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err(format!("rank 1 at {addr} kept an unauthenticated connection open").into())
        }
        Err(e) => Err(e.into()),
    }
}

/// A normal exchange: each rank sends to the next and receives from the
/// previous, a small message and one large enough for rendezvous.
fn ring(node: &Node) -> Result<()> {
    let (me, size) = (node.rank(), node.size());
    let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
    for len in [16, 100_000] {
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ me) as u8).collect();
        let send = node.isend(node.gate(next), RING, data)?;
        let got = node.irecv(node.gate(prev), RING, vec![0; len]).wait()?;
        let expected: Vec<u8> = (0..len).map(|i| (i as u32 ^ prev) as u8).collect();
        if got.data != expected {
            return Err(format!("the {len}-byte ring message from rank {prev} is corrupt").into());
        }
        send.wait()?;
    }
    Ok(())
}
