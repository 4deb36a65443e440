//! `peerloss`: rank 3 of 4 is killed (SIGKILL) in the middle of a
//! rendezvous transfer and of an RPC; the three others get a typed error
//! for everything that needed it, then carry on among themselves.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 4 --no-fail-fast -- target/debug/examples/peerloss; echo $?   # 137
//! ```
//!
//! - Rank 3 streams 4 MiB messages (rendezvous) to rank 0, and serves
//!   the RPC service `die`, whose handler kills its own process with
//!   SIGKILL — while one of those messages is in flight.
//! - Rank 0 receives the stream; once the first message is in, it tells
//!   rank 1, which calls `die` at rank 3. Rank 0's receive under way then
//!   fails, and so does rank 1's call: both with `PeerUnreachable`.
//! - Rank 2 waits for a message from rank 3 that never comes: that
//!   receive fails the same way.
//! - Then ranks 0, 1 and 2 pass a token around their ring and call an
//!   `echo` service at rank 0, checking every byte.
//!
//! Each survivor prints one line per outcome (`peerloss: rank R: ...`),
//! with the time from the kill's request to its error, and exits with 0
//! if every outcome was the expected one. A job that lost a rank cannot
//! fence, so the survivors leave without `finalize`, once each has heard
//! from the others that they are done; the launcher
//! (`--no-fail-fast`) reports that rank 3 was killed by signal 9.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use navette::rpc::HandlerMode;
use navette::{Error, Node, ReceiveMode, RecvFrom, RequestError, SendMode};

type Failure = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Failure>;

const VICTIM: u32 = 3;
const STREAM: u64 = 1;
const STREAMING: u64 = 2;
const NEVER: u64 = 3;
const TOKEN: u64 = 4;
const SIZE: usize = 4 << 20;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("peerloss: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let node = navette::init()?;
    if node.size() != 4 {
        return Err("peerloss needs 4 ranks".into());
    }
    let me = node.rank();
    println!("peerloss: rank {me} pid {}", std::process::id());
    let echoed = register(&node)?;
    // Every service is registered before anyone calls.
    ready(&node)?;
    match me {
        VICTIM => stream(&node),
        0 => {
            receive_stream(&node)?;
            survive(&node, Some(&echoed))
        }
        1 => {
            node.recv(RecvFrom::from(node.gate(0)), STREAMING, &mut [0u8; 1])?;
            let asked = Instant::now();
            let call = node.call(VICTIM, "die", |_| Ok(()))?.wait().map(drop);
            expect_lost(me, "the call of die at rank 3", call, asked)?;
            survive(&node, None)
        }
        _ => {
            let asked = Instant::now();
            let never = node.recv(RecvFrom::from(node.gate(VICTIM)), NEVER, &mut [0u8; 1]);
            expect_lost(me, "the receive from rank 3", never.map(drop), asked)?;
            survive(&node, None)
        }
    }
}

/// Rank 3's `die`, rank 0's `echo` (counting the calls it served).
fn register(node: &Node) -> Result<std::sync::Arc<AtomicU32>> {
    let echoed = std::sync::Arc::new(AtomicU32::new(0));
    match node.rank() {
        VICTIM => node.register_service("die", HandlerMode::Inline, |_| {
            println!("peerloss: rank 3: killing itself in the middle of a transfer");
            // A signal to this very process: SIGKILL, as `kill -9` would.
            let me = rustix::process::getpid();
            let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
            Ok(())
        })?,
        0 => {
            let count = std::sync::Arc::clone(&echoed);
            node.register_service("echo", HandlerMode::Inline, move |call| {
                let (mut args, responder) = call.split();
                let mut len = [0u8; 8];
                args.unpack_express(&mut len, SendMode::Safer)?;
                let mut body = vec![0u8; usize::try_from(u64::from_le_bytes(len))?];
                args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
                args.end_unpacking()?;
                responder.reply(|msg| msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper))?;
                count.fetch_add(1, Ordering::AcqRel);
                Ok(())
            })?;
        }
        _ => {}
    }
    Ok(echoed)
}

/// Every rank tells every other it is ready, and waits for their word.
fn ready(node: &Node) -> Result<()> {
    const READY: u64 = 9;
    let me = node.rank();
    for peer in (0..node.size()).filter(|&p| p != me) {
        node.send(node.gate(peer), READY, &[])?;
    }
    for peer in (0..node.size()).filter(|&p| p != me) {
        node.recv(RecvFrom::from(node.gate(peer)), READY, &mut [])?;
    }
    Ok(())
}

/// Rank 3: streams to rank 0 until its `die` handler kills it.
fn stream(node: &Node) -> Result<()> {
    let data = pattern(0);
    loop {
        node.send(node.gate(0), STREAM, &data)?;
    }
}

/// Rank 0: receives the stream until it fails, as it must, with rank 3
/// unreachable.
fn receive_stream(node: &Node) -> Result<()> {
    let mut buf = vec![0u8; SIZE];
    let from = RecvFrom::from(node.gate(VICTIM));
    node.recv(from, STREAM, &mut buf)?;
    if buf != pattern(0) {
        return Err("the first streamed message is corrupt".into());
    }
    node.send(node.gate(1), STREAMING, &[1])?;
    let asked = Instant::now();
    loop {
        match node.recv(from, STREAM, &mut buf) {
            Ok(_) if buf == pattern(0) => continue,
            Ok(_) => return Err("a streamed message is corrupt".into()),
            Err(err) => return expect_lost(0, "the stream from rank 3", Err(err), asked),
        }
    }
}

/// Checks that `outcome` is rank 3 found unreachable, and says so.
fn expect_lost(me: u32, what: &str, outcome: navette::Result<()>, asked: Instant) -> Result<()> {
    let after = asked.elapsed();
    match outcome {
        Err(Error::Request(RequestError::PeerUnreachable { peer: VICTIM })) => {
            println!(
                "peerloss: rank {me}: {what} failed: rank 3 unreachable, {after:.1?} after it was asked"
            );
            Ok(())
        }
        other => {
            Err(format!("rank {me}: {what}: expected rank 3 unreachable, got {other:?}").into())
        }
    }
}

/// Ranks 0, 1, 2: a token around their ring, then ranks 1 and 2 call
/// `echo` at rank 0, which serves both calls.
fn survive(node: &Node, echoed: Option<&AtomicU32>) -> Result<()> {
    let me = node.rank();
    let (next, prev) = ((me + 1) % VICTIM, (me + VICTIM - 1) % VICTIM);
    let token = pattern(u64::from(me));
    let mut got = vec![0u8; SIZE];
    if me == 0 {
        node.send(node.gate(next), TOKEN, &token)?;
        node.recv(RecvFrom::from(node.gate(prev)), TOKEN, &mut got)?;
    } else {
        node.recv(RecvFrom::from(node.gate(prev)), TOKEN, &mut got)?;
        node.send(node.gate(next), TOKEN, &token)?;
    }
    if got != pattern(u64::from(prev)) {
        return Err(format!("rank {me}: the token from rank {prev} is corrupt").into());
    }
    match echoed {
        Some(echoed) => node.serve_until(|| echoed.load(Ordering::Acquire) == 2)?,
        None => {
            let body = pattern(u64::from(me) + 10);
            let len = (body.len() as u64).to_le_bytes();
            let reply = node.call_wait(0, "echo", |msg| {
                msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
                msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
            })?;
            let mut back = vec![0u8; body.len()];
            let mut msg = reply.unpacking();
            msg.unpack_cheaper(&mut back, SendMode::Cheaper)?;
            msg.end_unpacking()?;
            if back != body {
                return Err(format!("rank {me}: the echo is corrupt").into());
            }
        }
    }
    println!("peerloss: rank {me}: the survivors carried on");
    farewell(node)
}

/// The survivors leave together: without the fence of `finalize` (rank 3
/// will never reach it), a rank that left while another still sent to it
/// would close its connections with data unread, and a tcp reset could
/// destroy what it had just sent. After every survivor's word, none sends
/// again.
fn farewell(node: &Node) -> Result<()> {
    const BYE: u64 = 5;
    let me = node.rank();
    let others = || (0..VICTIM).filter(move |&p| p != me);
    for peer in others() {
        node.send(node.gate(peer), BYE, &[])?;
    }
    for peer in others() {
        node.recv(RecvFrom::from(node.gate(peer)), BYE, &mut [])?;
    }
    Ok(())
}

/// `SIZE` bytes seeded by `seed`.
fn pattern(seed: u64) -> Vec<u8> {
    (0..SIZE as u64)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}
