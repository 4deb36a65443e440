//! `rails`: two ranks over the tcp driver with one link or several
//! (`NAVETTE_TCP_LINKS`): checked exchanges both ways, an optional timed
//! one-way stream, and what each link carried.
//!
//! ```sh
//! cargo build --release -p navette-cli --examples
//! # two loopback links (no privilege needed):
//! NAVETTE_TCP_LINKS=127.0.0.1,127.0.0.2 \
//!     navette run -n 2 -- target/release/examples/rails --expect-links 2
//! # two rate-limited networks between two namespaces (root; see
//! # docs/multirail.md):
//! scripts/netns-rails up rails --rates 2gbit,1gbit
//! navette run -n 2 -- scripts/netns-rails rank-exec rails -- \
//!     target/release/examples/rails --stream 64M --count 4 --repeat 3
//! scripts/netns-rails down rails
//! ```
//!
//! 1. **Checked exchange**: for each size, both ranks send each other a
//!    message at once; every byte is checked at the receiver.
//!    `--expect-links N` then fails unless each of N links carried at least
//!    1 MiB each way.
//! 2. **Stream** (`--stream SIZE`): rank 1 posts `--count` receives of
//!    SIZE, rank 0 sends them all at once and times until rank 1 says it
//!    has them all; repeated `--repeat` times. Rank 0 prints the time, the
//!    rate (10^6 bytes per second) and each link's share of the bytes.
//!
//! Each rank then prints, per link, the bytes and packets it sent and
//! received, and its connections (local address → remote address), so the
//! network each link's traffic took can be seen. Lines start with
//! `rails: `; the last one is `rails: rank R ok`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use navette::tcp::TcpDriver;
use navette::{Node, RuntimeConfig};
use navette_cli::sizes::{ShortSize, SizeList, parse_size};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

const CHECKED: u64 = 0x100;
const READY: u64 = 0x200;
const DONE: u64 = 0x201;
const STREAM: u64 = 0x300;
/// Largest message size accepted.
const MAX_SIZE: usize = 256 << 20;
/// What a link must carry each way for `--expect-links`.
const EXPECTED_SHARE: u64 = 1 << 20;

#[derive(Debug, Parser)]
#[command(about = "Two ranks over tcp links: checked exchanges, a timed stream, per-link counts")]
struct Args {
    /// Sizes exchanged both ways and checked (K, M: powers of 1024).
    #[arg(long, default_value = "0,1,4K,300K,4M,64M")]
    sizes: SizeList,
    /// Fail unless each of this many links carried at least 1 MiB each way
    /// during the checked exchange.
    #[arg(long, value_name = "N")]
    expect_links: Option<usize>,
    /// Then time `--count` messages of this size sent one way, rank 0 to
    /// rank 1.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    stream: Option<usize>,
    /// Messages per timed stream.
    #[arg(long, default_value_t = 4)]
    count: usize,
    /// Timed streams.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rails: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    let too_big = args
        .sizes
        .0
        .iter()
        .chain(&args.stream)
        .find(|&&s| s > MAX_SIZE);
    if let Some(&size) = too_big {
        return Err(format!("size {} is above {}", ShortSize(size), ShortSize(MAX_SIZE)).into());
    }
    let bootstrap = Arc::from(navette_session::from_env()?);
    let (node, driver) = navette::init_tcp(bootstrap, RuntimeConfig::default())?;
    let me = node.rank();
    if node.size() != 2 {
        return Err("run with 2 ranks (navette run -n 2)".into());
    }
    let on_rank = |err: Error| -> Error { format!("rank {me}: {err}").into() };
    let addrs: Vec<String> = driver
        .link_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    println!(
        "rails: rank {me}: {} link(s): {}",
        addrs.len(),
        addrs.join(", ")
    );

    let before = driver.stats();
    exchange(&node, &args.sizes.0).map_err(on_rank)?;
    let after = driver.stats();
    println!(
        "rails: rank {me}: checked {} size(s) both ways",
        args.sizes.0.len()
    );
    if let Some(expected) = args.expect_links {
        expect_links(&driver, expected, &before, &after).map_err(on_rank)?;
        println!("rails: rank {me}: all {expected} links carried data both ways");
    }
    if let Some(size) = args.stream {
        // Receive buffers, written once first: the timed streams do not
        // pay for their pages' first touch.
        let mut buffers = vec![vec![1u8; size]; if me == 1 { args.count } else { 0 }];
        for round in 0..args.repeat {
            stream(&node, &driver, size, args.count, round, &mut buffers).map_err(on_rank)?;
        }
    }
    report(&driver, me);
    node.finalize().map_err(|e| on_rank(e.into()))?;
    println!("rails: rank {me} ok");
    Ok(())
}

/// Both ranks send each other a message of each size at once; every byte
/// is checked.
fn exchange(node: &Node, sizes: &[usize]) -> Result<()> {
    let (me, other) = (node.rank(), 1 - node.rank());
    let peer = node.gate(other);
    for (index, &len) in sizes.iter().enumerate() {
        let tag = CHECKED + index as u64;
        let recv = node.irecv(peer, tag, vec![0; len]);
        let send = node.isend(peer, tag, Bytes::from(pattern(len, seed(me, index))))?;
        let got = recv.wait()?;
        let want = pattern(len, seed(other, index));
        if got.data != want {
            let at = got.data.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "the {len}-byte message from rank {other} differs (length {}, first wrong byte \
                 {at:?}, checksum {:#x}, expected {:#x})",
                got.data.len(),
                checksum(&got.data),
                checksum(&want),
            )
            .into());
        }
        send.wait()?;
    }
    Ok(())
}

/// Fails unless each of `expected` links carried [`EXPECTED_SHARE`] bytes
/// each way between `before` and `after`.
fn expect_links(
    driver: &TcpDriver,
    expected: usize,
    before: &navette::tcp::TcpStats,
    after: &navette::tcp::TcpStats,
) -> Result<()> {
    if driver.link_count() != expected {
        return Err(format!(
            "{} link(s) set up, {expected} expected (NAVETTE_TCP_LINKS)",
            driver.link_count()
        )
        .into());
    }
    for link in 0..expected {
        let sent = after.links[link].bytes_sent - before.links[link].bytes_sent;
        let received = after.links[link].bytes_received - before.links[link].bytes_received;
        if sent < EXPECTED_SHARE || received < EXPECTED_SHARE {
            return Err(format!(
                "link {link} carried {sent} bytes out and {received} in during the exchange; \
                 at least {EXPECTED_SHARE} each way expected"
            )
            .into());
        }
    }
    Ok(())
}

/// One timed stream of `count` messages of `size`, rank 0 to rank 1.
/// Rank 1 receives into `buffers` (`count` of `size` bytes), and gives
/// them back there.
fn stream(
    node: &Node,
    driver: &TcpDriver,
    size: usize,
    count: usize,
    round: usize,
    buffers: &mut Vec<Vec<u8>>,
) -> Result<()> {
    let me = node.rank();
    let peer = node.gate(1 - me);
    let total = (size * count) as f64;
    if me == 1 {
        let recvs: Vec<_> = std::mem::take(buffers)
            .into_iter()
            .enumerate()
            .map(|(i, buffer)| node.irecv(peer, STREAM + i as u64, buffer))
            .collect();
        node.send(peer, READY, &[1])?;
        for recv in recvs {
            let got = recv.wait()?;
            if got.status.len != size {
                return Err(format!("stream message of {} bytes", got.status.len).into());
            }
            buffers.push(got.data);
        }
        node.send(peer, DONE, &[1])?;
        return Ok(());
    }
    let data = Bytes::from(pattern(size, seed(me, 1000 + round)));
    let mut byte = [0u8; 1];
    node.recv(peer, READY, &mut byte)?;
    let before = driver.stats();
    let start = Instant::now();
    let sends = (0..count)
        .map(|i| node.isend(peer, STREAM + i as u64, data.clone()))
        .collect::<navette::Result<Vec<_>>>()?;
    for send in sends {
        send.wait()?;
    }
    node.recv(peer, DONE, &mut byte)?;
    let elapsed = start.elapsed();
    let after = driver.stats();
    let links = driver.link_count();
    let sent: Vec<u64> = (0..links)
        .map(|l| after.links[l].bytes_sent - before.links[l].bytes_sent)
        .collect();
    let all: u64 = sent.iter().sum::<u64>().max(1);
    let shares: Vec<String> = sent
        .iter()
        .enumerate()
        .map(|(l, &b)| format!("link {l} {:.1} %", 100.0 * b as f64 / all as f64))
        .collect();
    println!(
        "rails: stream {round}: {count} x {} one way in {:.3} s: {:.1} MB/s ({})",
        ShortSize(size),
        seconds(elapsed),
        total / seconds(elapsed) / 1e6,
        shares.join(", ")
    );
    Ok(())
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}

/// Per link, what this rank sent and received, and its connections.
fn report(driver: &TcpDriver, me: u32) {
    let stats = driver.stats();
    for (link, l) in stats.links.iter().take(driver.link_count()).enumerate() {
        println!(
            "rails: rank {me} link {link}: sent {} bytes in {} packets, received {} bytes in {} \
             packets",
            l.bytes_sent, l.packets_sent, l.bytes_received, l.packets_received
        );
    }
    for c in driver.connections() {
        println!(
            "rails: rank {me} link {} connection: {} -> {} (rank {})",
            c.link, c.local, c.remote, c.peer
        );
    }
}

fn seed(rank: u32, index: usize) -> u64 {
    (u64::from(rank) << 32) ^ index as u64 ^ 0x5241_494c
}

/// Pseudo-random bytes (xorshift64, eight at a time) that depend on `seed`
/// and `len`.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64 | 1;
    let mut out = vec![0u8; len];
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    out
}

/// A position-dependent checksum, for error messages.
fn checksum(data: &[u8]) -> u64 {
    data.iter().enumerate().fold(0u64, |acc, (i, &b)| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b) ^ i as u64)
    })
}
