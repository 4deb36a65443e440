//! `soak`: every rank mixes tagged messages, pack/unpack messages and RPCs
//! of random sizes from 0 B to 8 MiB with every other rank, for a given
//! time, every byte checked; it reports messages per second and that none
//! was lost or corrupted.
//!
//! ```sh
//! cargo build --release -p navette-cli --examples
//! NAVETTE_DRIVER=shm navette run -n 4 -- target/release/examples/soak --seconds 60
//! NAVETTE_DRIVER=tcp navette run -n 4 -- target/release/examples/soak --seconds 60
//! ```
//!
//! The job runs in rounds. In each round every rank, with every peer:
//!
//! - exchanges one tagged message each way (`irecv` posted, `isend`);
//! - exchanges one pack/unpack message each way: a header EXPRESS (round,
//!   sender, length), then the body CHEAPER into a buffer sized after it.
//!   A second thread packs while the main thread unpacks.
//!
//! Each rank also calls the `soak.check` service of one peer, chosen by
//! the round. Its handler (a pool thread) checks the arguments and replies
//! with a body of its own.
//!
//! Sizes and contents come from a seeded generator keyed by (seed, round,
//! sender, receiver, kind): every receiver knows what it must get. A
//! message that is missing, misrouted, of the wrong size or with one wrong
//! byte fails the rank. At the end of each round, rank 0 tells the others
//! whether to go on (until `--seconds` have passed). Each rank then prints
//! its counts:
//!
//! `soak: rank R: N rounds, M messages (… tagged, … packed, … calls), B
//! bytes in, T s, M/T messages/s, 0 lost, 0 corrupt`

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use navette::rpc::{Call, HandlerError, HandlerMode, HandlerResult};
use navette::{Node, ReceiveMode, RecvFrom, SendMode};
use navette_cli::sizes::ShortSize;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

const TAGGED: u64 = 0x10;
const PACKED: u64 = 0x11;
const ROUND_DONE: u64 = 0x12;
const GO_ON: u64 = 0x13;
const SERVICE: &str = "soak.check";

#[derive(Debug, Parser)]
#[command(about = "Mixed, checked traffic between every pair of ranks for a given time")]
struct Args {
    /// How long to run (rounds start until this has passed).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seed of sizes and contents.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest message, in bytes (K, M: powers of 1024; at most 64M).
    #[arg(long, default_value = "8M")]
    max: navette_cli::sizes::SizeList,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("soak: error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// What a message is, for its size and contents.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Tagged = 1,
    Packed = 2,
    Call = 3,
    Reply = 4,
}

/// The generator behind sizes and contents.
#[derive(Clone, Copy, Debug)]
struct Plan {
    seed: u64,
    max: usize,
}

impl Plan {
    fn key(&self, round: u64, from: u32, to: u32, kind: Kind) -> u64 {
        let mut k = splitmix(self.seed ^ round.rotate_left(17));
        k = splitmix(k ^ (u64::from(from) << 32 | u64::from(to)));
        splitmix(k ^ kind as u64)
    }

    /// Log-uniform from 0 to `max`: most messages small, some large.
    fn size(&self, round: u64, from: u32, to: u32, kind: Kind) -> usize {
        let k = self.key(round, from, to, kind);
        let bits = 1 + (k % u64::from(usize::BITS - self.max.leading_zeros())) as u32;
        let len = (splitmix(k) % (1u64 << bits)) as usize;
        len.min(self.max)
    }

    fn payload(&self, round: u64, from: u32, to: u32, kind: Kind, len: usize) -> Vec<u8> {
        let mut state = self.key(round, from, to, kind) ^ len as u64;
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            state = splitmix(state);
            out.extend_from_slice(&state.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Checks `got` against what `from` must have sent.
    fn check(&self, got: &[u8], round: u64, from: u32, to: u32, kind: Kind) -> Result<()> {
        let len = self.size(round, from, to, kind);
        if got.len() != len {
            return Err(format!(
                "round {round}: {kind:?} from rank {from}: {} bytes, expected {len}",
                got.len()
            )
            .into());
        }
        if got != self.payload(round, from, to, kind, len) {
            return Err(format!("round {round}: {kind:?} from rank {from}: corrupt").into());
        }
        Ok(())
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a rank counted.
#[derive(Debug, Default)]
struct Counts {
    tagged: u64,
    packed: u64,
    calls: u64,
    bytes: u64,
    /// Messages whose size or contents were not what their sender sent
    /// (each also logged on standard error).
    corrupt: u64,
}

impl Counts {
    /// Counts a checked message: `Err` is a corrupt one, logged.
    fn checked(&mut self, checked: Result<()>) {
        if let Err(err) = checked {
            eprintln!("soak: {err}");
            self.corrupt += 1;
        }
    }
}

fn run(args: &Args) -> Result<String> {
    let max = *args.max.0.first().ok_or("--max needs a size")?;
    if max > 64 << 20 {
        return Err(format!("--max {} is above 64M", ShortSize(max)).into());
    }
    let plan = Plan {
        seed: args.seed,
        max,
    };
    let node = navette::init()?;
    let (me, size) = (node.rank(), node.size());
    if size < 2 {
        return Err("soak needs at least 2 ranks".into());
    }
    let on_rank = |err: Error| -> Error { format!("rank {me}: {err}").into() };
    let served = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&served);
    node.register_service(SERVICE, HandlerMode::Pool, move |call| {
        let out = serve(plan, me, call);
        counter.fetch_add(1, Ordering::AcqRel);
        out
    })?;
    // Every service is registered before anyone calls.
    barrier(&node)?;
    let start = Instant::now();
    let until = Duration::from_secs_f64(args.seconds.max(0.0));
    let mut counts = Counts::default();
    let mut round = 0u64;
    loop {
        one_round(&node, plan, round, &mut counts).map_err(on_rank)?;
        round += 1;
        if !go_on(&node, round, start.elapsed() < until).map_err(on_rank)? {
            break;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Every rank has ended its rounds; the calls made to this one were all
    // answered before their callers went on.
    node.finalize().map_err(|e| on_rank(e.into()))?;
    let messages = counts.tagged + counts.packed + counts.calls;
    // Per round: a tagged and a packed message from each peer, a call.
    let expected = round * (2 * u64::from(size - 1) + 1);
    let lost = expected.saturating_sub(messages);
    let summary = format!(
        "soak: rank {me}: {round} rounds, {messages} messages ({} tagged, {} packed, {} calls, \
         {} served), {} bytes in, {elapsed:.1} s, {:.0} messages/s, {lost} lost, {} corrupt",
        counts.tagged,
        counts.packed,
        counts.calls,
        served.load(Ordering::Acquire),
        counts.bytes,
        messages as f64 / elapsed,
        counts.corrupt,
    );
    if lost > 0 || counts.corrupt > 0 {
        return Err(summary.into());
    }
    Ok(summary)
}

/// The other ranks, starting with the next one.
fn peers(node: &Node) -> impl Iterator<Item = u32> + use<> {
    let (me, size) = (node.rank(), node.size());
    (1..size).map(move |k| (me + k) % size)
}

fn barrier(node: &Node) -> Result<()> {
    go_on(node, u64::MAX, true).map(drop)
}

/// The end of a round: every rank tells rank 0, which answers whether to
/// go on (`more`, on rank 0).
fn go_on(node: &Node, round: u64, more: bool) -> Result<bool> {
    let word = round.to_le_bytes();
    if node.rank() != 0 {
        node.send(node.gate(0), ROUND_DONE, &word)?;
        let mut answer = [0u8; 1];
        node.recv(RecvFrom::from(node.gate(0)), GO_ON, &mut answer)?;
        return Ok(answer[0] == 1);
    }
    for peer in peers(node) {
        let mut got = [0u8; 8];
        node.recv(RecvFrom::from(node.gate(peer)), ROUND_DONE, &mut got)?;
        if got != word {
            return Err(format!("rank {peer} ended round {:?}", u64::from_le_bytes(got)).into());
        }
    }
    for peer in peers(node) {
        node.send(node.gate(peer), GO_ON, &[u8::from(more)])?;
    }
    Ok(more)
}

fn one_round(node: &Node, plan: Plan, round: u64, counts: &mut Counts) -> Result<()> {
    let me = node.rank();
    // Tagged: receives posted first, then the sends.
    let recvs: Vec<_> = peers(node)
        .map(|peer| {
            let len = plan.size(round, peer, me, Kind::Tagged);
            (peer, node.irecv(node.gate(peer), TAGGED, vec![0; len]))
        })
        .collect();
    let sends = peers(node)
        .map(|peer| {
            let len = plan.size(round, me, peer, Kind::Tagged);
            let data = plan.payload(round, me, peer, Kind::Tagged, len);
            node.isend(node.gate(peer), TAGGED, data)
        })
        .collect::<navette::Result<Vec<_>>>()?;
    // Pack/unpack, and this rank's call, while the tagged messages move.
    std::thread::scope(|scope| {
        let packer = scope.spawn(|| send_packed(node, plan, round));
        let caller = scope.spawn(|| call(node, plan, round));
        let unpacked = receive_packed(node, plan, round, counts);
        let packed = packer.join().map_err(|_| "the packing thread panicked")?;
        let called = caller.join().map_err(|_| "the calling thread panicked")?;
        unpacked.and(packed)?;
        // A call whose arguments or reply were corrupt is counted so.
        counts.checked(called);
        counts.calls += 1;
        Ok::<_, Error>(())
    })?;
    for (peer, recv) in recvs {
        let got = recv.wait()?;
        if got.status.peer != peer {
            return Err(format!(
                "a receive from rank {peer} matched rank {}",
                got.status.peer
            )
            .into());
        }
        counts.checked(plan.check(&got.data, round, peer, me, Kind::Tagged));
        counts.tagged += 1;
        counts.bytes += got.data.len() as u64;
    }
    for send in sends {
        send.wait()?;
    }
    Ok(())
}

/// A pack/unpack message's header (also a call's): the round, the
/// sender and the body's length.
fn header(round: u64, sender: u32, len: usize) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[..8].copy_from_slice(&round.to_le_bytes());
    out[8..12].copy_from_slice(&sender.to_le_bytes());
    out[12..].copy_from_slice(&(len as u64).to_le_bytes());
    out
}

fn read_header(raw: &[u8; 20]) -> (u64, u32, usize) {
    let (round, rest) = raw.split_at(8);
    let (sender, len) = rest.split_at(4);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let sender = u32::from_le_bytes(sender.try_into().unwrap_or_default());
    (
        word(round),
        sender,
        usize::try_from(word(len)).unwrap_or(usize::MAX),
    )
}

fn send_packed(node: &Node, plan: Plan, round: u64) -> Result<()> {
    let me = node.rank();
    for peer in peers(node) {
        let len = plan.size(round, me, peer, Kind::Packed);
        let head = header(round, me, len);
        let body = plan.payload(round, me, peer, Kind::Packed, len);
        let mut msg = node.begin_packing(node.gate(peer), PACKED)?;
        msg.pack(&head, SendMode::Safer, ReceiveMode::Express)?;
        msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
        msg.end_packing()?;
    }
    Ok(())
}

/// Receives one packed message from every peer, in the order they come
/// (a fixed order could wait on a peer whose packing thread waits, by
/// rendezvous, on a rank that waits on us).
fn receive_packed(node: &Node, plan: Plan, round: u64, counts: &mut Counts) -> Result<()> {
    let (me, size) = (node.rank(), node.size());
    let mut seen = vec![false; size as usize];
    for _ in peers(node) {
        let mut msg = node.begin_unpacking(RecvFrom::any(), PACKED)?;
        let peer = msg.status()?.peer;
        let mut raw = [0u8; 20];
        msg.unpack_express(&mut raw, SendMode::Safer)?;
        let (sent_round, sender, len) = read_header(&raw);
        let fresh = seen
            .get_mut(peer as usize)
            .is_some_and(|seen| !std::mem::replace(seen, true));
        if (sent_round, sender) != (round, peer) || len > plan.max || !fresh || peer == me {
            return Err(format!(
                "round {round}: a packed message from rank {peer} says round {sent_round}, \
                 rank {sender}, {len} bytes (seen from it before: {})",
                !fresh
            )
            .into());
        }
        let mut body = vec![0u8; len];
        msg.unpack_cheaper(&mut body, SendMode::Cheaper)?;
        msg.end_unpacking()?;
        counts.checked(plan.check(&body, round, peer, me, Kind::Packed));
        counts.packed += 1;
        counts.bytes += len as u64;
    }
    Ok(())
}

/// This rank's call of the round, to a peer chosen by the round.
fn call(node: &Node, plan: Plan, round: u64) -> Result<()> {
    let (me, size) = (node.rank(), node.size());
    let server = (me + 1 + (round % u64::from(size - 1)) as u32) % size;
    let len = plan.size(round, me, server, Kind::Call);
    let head = header(round, me, len);
    let body = plan.payload(round, me, server, Kind::Call, len);
    let reply = node.call_wait(server, SERVICE, |msg| {
        msg.pack(&head, SendMode::Safer, ReceiveMode::Express)?;
        msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
    })?;
    let mut back = vec![0u8; plan.size(round, server, me, Kind::Reply)];
    let mut msg = reply.unpacking();
    msg.unpack_cheaper(&mut back, SendMode::Cheaper)?;
    msg.end_unpacking()?;
    plan.check(&back, round, server, me, Kind::Reply)
}

/// The `soak.check` handler: checks the call's body, replies with a body
/// of its own.
fn serve(plan: Plan, me: u32, call: Call<'_>) -> HandlerResult {
    let (mut args, responder) = call.split();
    let mut raw = [0u8; 20];
    args.unpack_express(&mut raw, SendMode::Safer)?;
    let (round, caller, len) = read_header(&raw);
    if len > plan.max {
        return Err(HandlerError::new(format!("a call of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
    args.end_unpacking()?;
    plan.check(&body, round, caller, me, Kind::Call)
        .map_err(HandlerError::new)?;
    let len = plan.size(round, me, caller, Kind::Reply);
    let reply = plan.payload(round, me, caller, Kind::Reply, len);
    responder.reply(|msg| msg.pack(&reply, SendMode::Cheaper, ReceiveMode::Cheaper))?;
    Ok(())
}
