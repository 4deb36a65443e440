//! `alltoall`: every rank exchanges checked messages with every other rank.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 4 -- target/debug/examples/alltoall
//! navette run -n 2 -- target/debug/examples/alltoall --sizes 64M --large
//! ```
//!
//! Three phases, every byte checked at the receiver:
//!
//! 1. **Tagged**: for each size, every rank posts a receive from every peer,
//!    then sends to every peer (`irecv` / `isend` / `wait`). Posting the
//!    receives first lets large messages land straight in their buffers.
//! 2. **Any source**: every rank sends one 1-byte message to each peer and
//!    receives `size - 1` messages from `RecvFrom::any()`; it checks that
//!    exactly one came from each peer.
//! 3. **Pack/unpack**, shaped like an RPC: a header unpacked EXPRESS carries
//!    the body's length, so the receiver can allocate the body's buffer and
//!    then unpack the body CHEAPER straight into it. Bodies above the tcp
//!    driver's rendezvous threshold (32 KiB) go by rendezvous. A sending
//!    thread packs while the main thread unpacks: `end_packing` waits for
//!    the receiver of a rendezvous body, so one thread doing both in turn
//!    could wait on a peer that waits on it.
//!
//! Payloads are a pseudo-random stream seeded by (phase, sender, receiver,
//! size): a message delivered to the wrong rank, from the wrong rank, of
//! the wrong size or with a single wrong byte fails the check. Each rank
//! prints one summary line and exits with 0, or prints what went wrong and
//! exits with 1.

use std::process::ExitCode;

use clap::Parser;
use navette::{Node, ReceiveMode, RecvFrom, SendMode};
use navette_cli::sizes::{ShortSize, SizeList};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// Largest size accepted without `--large`.
const DEFAULT_MAX: usize = 1 << 20;
/// Largest size accepted with `--large`.
const LARGE_MAX: usize = 64 << 20;

/// Tags: one range per phase, so that a message of one phase can never
/// match a receive of another. Within a range, the size's index is added.
const TAGGED: u64 = 0x100;
const ANY_SOURCE: u64 = 0x200;
const PACKED: u64 = 0x300;

#[derive(Debug, Parser)]
#[command(about = "Every rank exchanges checked messages with every other rank")]
struct Args {
    /// Message sizes (K, M: powers of 1024).
    #[arg(long, default_value = "0,1,1K,64K,1M")]
    sizes: SizeList,
    /// Allow sizes up to 64M (default limit: 1M).
    #[arg(long)]
    large: bool,
    /// Run over the shm driver and, on rank 0, print the shared memory the
    /// job's segment maps and the part of it in memory after the exchanges.
    #[arg(long)]
    shm_report: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("alltoall: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<String> {
    let sizes = &args.sizes.0;
    let max = if args.large { LARGE_MAX } else { DEFAULT_MAX };
    if let Some(&big) = sizes.iter().find(|&&s| s > max) {
        let hint = if args.large {
            ""
        } else {
            " (--large allows 64M)"
        };
        return Err(format!("size {} is above {}{hint}", ShortSize(big), ShortSize(max)).into());
    }
    // Joins the job started by `navette run` (or a job of one, alone).
    let (node, shm) = if args.shm_report {
        let bootstrap = std::sync::Arc::from(navette_session::from_env()?);
        let (node, driver) = navette::init_shm(bootstrap, navette::RuntimeConfig::default())?;
        (node, Some(driver))
    } else {
        (navette::init()?, None)
    };
    let (me, size) = (node.rank(), node.size());
    // Errors from here on name the rank that saw them.
    let on_rank = |err: Error| -> Error { format!("rank {me}: {err}").into() };

    let tagged = tagged_phase(&node, sizes).map_err(on_rank)?;
    any_source_phase(&node).map_err(on_rank)?;
    let packed = packed_phase(&node, sizes).map_err(on_rank)?;
    if let (0, Some(shm)) = (me, &shm) {
        let mapped = shm.stats().segment_bytes;
        let resident = shm.resident_bytes()?.unwrap_or(0);
        println!(
            "alltoall: shm segment of {size} ranks: {} KiB mapped, {} KiB in memory",
            mapped >> 10,
            resident >> 10
        );
    }
    // Waits until every send this rank accepted has completed, then for
    // every other rank: nobody leaves while a peer still needs it.
    node.finalize().map_err(|e| on_rank(e.into()))?;

    let peers = size - 1;
    Ok(format!(
        "alltoall: rank {me} of {size} ok: tagged {} sizes x {peers} peers ({tagged} bytes in), \
         any-source {peers}/{peers} peers, pack/unpack {} sizes x {peers} peers ({packed} bytes in)",
        sizes.len(),
        sizes.len(),
    ))
}

/// The other ranks, starting with the next one, so that not every rank
/// talks to rank 0 first.
fn peers(node: &Node) -> impl Iterator<Item = u32> + use<> {
    let (me, size) = (node.rank(), node.size());
    (1..size).map(move |k| (me + k) % size)
}

/// Phase 1: tagged non-blocking sends and receives; returns the bytes
/// received.
fn tagged_phase(node: &Node, sizes: &[usize]) -> Result<usize> {
    let me = node.rank();
    let mut received = 0;
    for (index, &len) in sizes.iter().enumerate() {
        let tag = TAGGED + index as u64;
        // A receive owns its buffer until it completes, then gives it back.
        let recvs: Vec<_> = peers(node)
            .map(|peer| (peer, node.irecv(node.gate(peer), tag, vec![0; len])))
            .collect();
        // A send owns its data (`Bytes`), so the request may outlive it here.
        let sends = peers(node)
            .map(|peer| node.isend(node.gate(peer), tag, payload(Phase::Tagged, me, peer, len)))
            .collect::<navette::Result<Vec<_>>>()?;
        for (peer, recv) in recvs {
            let got = recv.wait()?;
            if got.status.peer != peer {
                return Err(format!(
                    "a receive from rank {peer} matched rank {}",
                    got.status.peer
                )
                .into());
            }
            check(&got.data, Phase::Tagged, peer, me, len)?;
            received += got.data.len();
        }
        for send in sends {
            send.wait()?;
        }
    }
    Ok(received)
}

/// Phase 2: receives from any source must deliver exactly one message from
/// each peer.
fn any_source_phase(node: &Node) -> Result<()> {
    let (me, size) = (node.rank(), node.size());
    let sends = peers(node)
        .map(|peer| {
            node.isend(
                node.gate(peer),
                ANY_SOURCE,
                payload(Phase::AnySource, me, peer, 1),
            )
        })
        .collect::<navette::Result<Vec<_>>>()?;
    let mut seen = vec![false; size as usize];
    for _ in peers(node) {
        let mut byte = [0u8; 1];
        let status = node.recv(RecvFrom::any(), ANY_SOURCE, &mut byte)?;
        let from = status.peer;
        match seen.get_mut(from as usize) {
            _ if from == me => return Err("an any-source receive matched our own rank".into()),
            Some(seen) if !*seen => *seen = true,
            Some(_) => return Err(format!("two any-source messages from rank {from}").into()),
            None => {
                return Err(
                    format!("an any-source message from rank {from}, not in the job").into(),
                );
            }
        }
        check(&byte[..status.len], Phase::AnySource, from, me, 1)?;
    }
    for send in sends {
        send.wait()?;
    }
    Ok(())
}

/// Phase 3: RPC-shaped Madeleine messages, packed by a second thread
/// while this one unpacks; returns the body bytes received.
fn packed_phase(node: &Node, sizes: &[usize]) -> Result<usize> {
    // A `Node` is `Send + Sync`: both threads use the same one.
    std::thread::scope(|scope| {
        let sender = scope.spawn(|| send_packed(node, sizes));
        let received = receive_packed(node, sizes);
        let sent = sender
            .join()
            .map_err(|_| Error::from("the packing thread panicked"))?;
        sent?;
        received
    })
}

/// The header of an RPC-shaped message: who sends it and how long the
/// body that follows is.
struct Header {
    sender: u32,
    body_len: u64,
}

impl Header {
    const LEN: usize = 12;

    fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[..4].copy_from_slice(&self.sender.to_le_bytes());
        out[4..].copy_from_slice(&self.body_len.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8; Self::LEN]) -> Self {
        let (sender, body_len) = bytes.split_at(4);
        Self {
            sender: u32::from_le_bytes(sender.try_into().expect("4 bytes")),
            body_len: u64::from_le_bytes(body_len.try_into().expect("8 bytes")),
        }
    }
}

fn send_packed(node: &Node, sizes: &[usize]) -> Result<()> {
    let me = node.rank();
    for (index, &len) in sizes.iter().enumerate() {
        for peer in peers(node) {
            // Declared before the message: CHEAPER and LATER pieces stay
            // borrowed by the message until `end_packing` returns.
            let header = Header {
                sender: me,
                body_len: len as u64,
            }
            .encode();
            let body = payload(Phase::Packed, me, peer, len);
            let mut msg = node.begin_packing(node.gate(peer), PACKED + index as u64)?;
            // The header is small and read at once by the receiver: SAFER
            // (copied now) and EXPRESS (available when unpack returns).
            msg.pack(&header, SendMode::Safer, ReceiveMode::Express)?;
            // The body is left in place (CHEAPER) and may land late
            // (CHEAPER): a large body goes by rendezvous, straight from
            // this buffer into the receiver's.
            msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
            msg.end_packing()?;
        }
    }
    Ok(())
}

fn receive_packed(node: &Node, sizes: &[usize]) -> Result<usize> {
    let me = node.rank();
    // The header comes from a peer: bound what it may make us allocate.
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut received = 0;
    for (index, &len) in sizes.iter().enumerate() {
        let mut seen = vec![false; node.size() as usize];
        for _ in peers(node) {
            let mut msg = node.begin_unpacking(RecvFrom::any(), PACKED + index as u64)?;
            // Mirror the sender: same pieces, same order, same modes.
            let mut raw = [0u8; Header::LEN];
            msg.unpack_express(&mut raw, SendMode::Safer)?;
            let header = Header::decode(&raw);
            let body_len = usize::try_from(header.body_len)
                .ok()
                .filter(|&n| n <= largest)
                .ok_or_else(|| format!("a header announces a {}-byte body", header.body_len))?;
            // Allocated only now that the length is known; the body lands
            // here, at the latest when `end_unpacking` returns.
            let mut body = vec![0u8; body_len];
            msg.unpack_cheaper(&mut body, SendMode::Cheaper)?;
            let status = msg.end_unpacking()?;
            let from = status.peer;
            if header.sender != from {
                return Err(
                    format!("rank {from} sent a header naming rank {}", header.sender).into(),
                );
            }
            if from == me || std::mem::replace(&mut seen[from as usize], true) {
                return Err(
                    format!("a second packed message of size {len} from rank {from}").into(),
                );
            }
            if status.len != Header::LEN + body_len {
                return Err(format!(
                    "message of {} bytes, expected {}",
                    status.len,
                    Header::LEN + body_len
                )
                .into());
            }
            check(&body, Phase::Packed, from, me, len)?;
            received += body_len;
        }
    }
    Ok(received)
}

/// The phases, part of every payload's seed.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Tagged = 1,
    AnySource = 2,
    Packed = 3,
}

/// The `len` bytes that `sender` sends to `receiver` in `phase`.
fn payload(phase: Phase, sender: u32, receiver: u32, len: usize) -> Vec<u8> {
    let mut stream = Stream::new(phase, sender, receiver, len);
    let mut data = vec![0u8; len];
    for chunk in data.chunks_mut(8) {
        chunk.copy_from_slice(&stream.next_word()[..chunk.len()]);
    }
    data
}

/// Checks `data` against the payload, byte for byte, without building a
/// second copy (bodies may be 64 MiB); names the first difference.
fn check(data: &[u8], phase: Phase, sender: u32, receiver: u32, len: usize) -> Result<()> {
    let what = || format!("{phase:?} message from rank {sender} ({len} bytes)");
    if data.len() != len {
        return Err(format!("{} arrived with {} bytes", what(), data.len()).into());
    }
    let mut stream = Stream::new(phase, sender, receiver, len);
    for (index, chunk) in data.chunks(8).enumerate() {
        let expected = stream.next_word();
        let expected = &expected[..chunk.len()];
        if chunk == expected {
            continue;
        }
        if let Some(at) = (0..chunk.len()).find(|&i| chunk[i] != expected[i]) {
            let offset = index * 8 + at;
            return Err(format!(
                "{}: byte {offset} is {:#04x}, expected {:#04x}",
                what(),
                chunk[at],
                expected[at]
            )
            .into());
        }
    }
    Ok(())
}

/// splitmix64: a fast pseudo-random stream, fine for test data (not for
/// secrets).
struct Stream(u64);

impl Stream {
    fn new(phase: Phase, sender: u32, receiver: u32, len: usize) -> Self {
        let seed = (phase as u64) << 56 ^ u64::from(sender) << 36 ^ u64::from(receiver) << 16;
        let mut stream = Self(seed ^ (len as u64).rotate_left(40));
        stream.next_word();
        stream
    }

    fn next_word(&mut self) -> [u8; 8] {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)).to_le_bytes()
    }
}
