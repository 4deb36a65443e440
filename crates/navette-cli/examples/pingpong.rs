//! `pingpong`: the smallest complete Navette program — read this one first.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 2 -- target/debug/examples/pingpong
//! ```
//!
//! Two ranks. Rank 0 sends a message, rank 1 sends it back, many times;
//! rank 0 prints half the round trip: the one-way time. Then the same with
//! an RPC-shaped Madeleine message: a header unpacked EXPRESS says how long
//! the body is, the receiver allocates the body's buffer and unpacks the
//! body CHEAPER straight into it, then answers the same way.
//!
//! Figures from a debug build are not worth quoting: use `--release`, or
//! `navette bench` for measurements beside a raw TCP baseline.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use navette::{Gate, Node, ReceiveMode, SendMode};
use navette_cli::sizes::{ShortSize, SizeList};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

const PING: u64 = 1;
const RPC: u64 = 2;

#[derive(Debug, Parser)]
#[command(about = "Two ranks: tagged ping-pong and an RPC-shaped round trip")]
struct Args {
    /// Message sizes (K, M: powers of 1024).
    #[arg(long, default_value = "0,8,1K,64K,1M")]
    sizes: SizeList,
    /// Round trips per size (default: fewer for larger sizes).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    iterations: Option<u32>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("pingpong: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    // Joins the job that `navette run` started.
    let node = navette::init()?;
    if node.size() != 2 {
        return Err(format!("run with 2 ranks, not {} (navette run -n 2)", node.size()).into());
    }
    let peer = node.gate(1 - node.rank());
    let iterations = |size: usize| {
        args.iterations.unwrap_or(if size <= 1024 {
            1000
        } else if size <= 64 << 10 {
            200
        } else {
            20
        })
    };
    if node.rank() == 0 {
        println!("pingpong: tagged send/recv, one-way time = round trip / 2");
        println!("{:>8} {:>6} {:>14}", "size", "iters", "one-way (us)");
        for &size in &args.sizes.0 {
            let n = iterations(size);
            let one_way = ping(&node, peer, size, n)?;
            println!(
                "{:>8} {n:>6} {:>14.1}",
                ShortSize(size).to_string(),
                micros(one_way)
            );
        }
        println!("rpc: header EXPRESS + body CHEAPER, echoed the same way");
        println!("{:>8} {:>6} {:>14}", "body", "iters", "one-way (us)");
        for &size in &args.sizes.0 {
            let n = iterations(size);
            let one_way = rpc_client(&node, peer, size, n)?;
            println!(
                "{:>8} {n:>6} {:>14.1}",
                ShortSize(size).to_string(),
                micros(one_way)
            );
        }
    } else {
        for &size in &args.sizes.0 {
            pong(&node, peer, size, iterations(size))?;
        }
        for &size in &args.sizes.0 {
            rpc_server(&node, peer, size, iterations(size))?;
        }
        println!("pingpong: rank 1 answered every message");
    }
    // Every rank must finalize: it waits for the other before closing.
    node.finalize()?;
    Ok(())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Rank 0: sends `size` bytes and waits for them back, `n` times (plus a
/// warm-up round that opens the connection); returns the one-way time.
fn ping(node: &Node, peer: Gate, size: usize, n: u32) -> Result<Duration> {
    let out: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut back = vec![0u8; size];
    let mut start = Instant::now();
    for i in 0..=n {
        if i == 1 {
            start = Instant::now();
        }
        // Blocking calls lend the slices for their duration: no copy.
        node.send(peer, PING, &out)?;
        let status = node.recv(peer, PING, &mut back)?;
        if status.len != size || back != out {
            return Err(format!("size {size}: the echo differs from what was sent").into());
        }
    }
    Ok(start.elapsed() / n / 2)
}

/// Rank 1: sends back what arrives.
fn pong(node: &Node, peer: Gate, size: usize, n: u32) -> Result<()> {
    let mut buf = vec![0u8; size];
    for _ in 0..=n {
        let status = node.recv(peer, PING, &mut buf)?;
        node.send(peer, PING, &buf[..status.len])?;
    }
    Ok(())
}

/// Packs one RPC-shaped message: the body's length EXPRESS, the body
/// CHEAPER (left in place; a large body goes by rendezvous).
fn send_rpc(node: &Node, peer: Gate, body: &[u8]) -> Result<()> {
    let len = (body.len() as u64).to_le_bytes();
    let mut msg = node.begin_packing(peer, RPC)?;
    msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
    msg.pack(body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
    msg.end_packing()?;
    Ok(())
}

/// Unpacks one RPC-shaped message: reads the length first, then allocates
/// the body and has it land there. `max` bounds what a peer may make us
/// allocate.
fn receive_rpc(node: &Node, peer: Gate, max: usize) -> Result<Vec<u8>> {
    let mut msg = node.begin_unpacking(peer, RPC)?;
    let mut len = [0u8; 8];
    msg.unpack_express(&mut len, SendMode::Safer)?;
    let len = usize::try_from(u64::from_le_bytes(len))
        .ok()
        .filter(|&n| n <= max)
        .ok_or("the header announces a body that is too large")?;
    let mut body = vec![0u8; len];
    msg.unpack_cheaper(&mut body, SendMode::Cheaper)?;
    msg.end_unpacking()?;
    Ok(body)
}

/// Rank 0: `n` RPC round trips (plus a warm-up); returns the one-way time.
fn rpc_client(node: &Node, peer: Gate, size: usize, n: u32) -> Result<Duration> {
    let request: Vec<u8> = (0..size).map(|i| (i * 7) as u8).collect();
    let mut start = Instant::now();
    for i in 0..=n {
        if i == 1 {
            start = Instant::now();
        }
        send_rpc(node, peer, &request)?;
        let reply = receive_rpc(node, peer, size)?;
        if reply != request {
            return Err(format!("rpc size {size}: the reply differs from the request").into());
        }
    }
    Ok(start.elapsed() / n / 2)
}

/// Rank 1: answers each request with its body.
fn rpc_server(node: &Node, peer: Gate, size: usize, n: u32) -> Result<()> {
    for _ in 0..=n {
        let body = receive_rpc(node, peer, size)?;
        send_rpc(node, peer, &body)?;
    }
    Ok(())
}
