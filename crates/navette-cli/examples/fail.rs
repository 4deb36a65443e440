//! `fail`: one rank fails; `navette run` must end the others.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 4 -- target/debug/examples/fail 2; echo $?   # 3
//! ```
//!
//! Every rank prints its pid and tells the failing rank it is ready; the
//! failing rank waits until every other rank is ready, then exits with
//! status 3 without finalizing. The other ranks block in a receive that no
//! rank will ever match — from any source, so the failing rank's departure
//! does not end it either (a receive bound to that rank would fail with
//! `PeerUnreachable`). Only the launcher's fail-fast can end them: it
//! sends them SIGTERM and exits with the failing rank's status.

use std::process::ExitCode;

use clap::Parser;
use navette::RecvFrom;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// The failing rank's exit status.
const FAILURE_STATUS: u8 = 3;
const READY: u64 = 1;
/// No rank ever sends with this tag.
const NEVER: u64 = 2;

#[derive(Debug, Parser)]
#[command(about = "One rank exits with status 3; the others wait forever")]
struct Args {
    /// The rank that fails.
    rank: u32,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("fail: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let node = navette::init()?;
    let (me, size) = (node.rank(), node.size());
    if args.rank >= size {
        return Err(format!("rank {} is not in a job of {size}", args.rank).into());
    }
    // The test that runs this program reads these to check that no rank
    // process outlives the job.
    println!("fail: rank {me} pid {}", std::process::id());
    if me == args.rank {
        // Wait until every other rank has printed its pid and is about to
        // block, so that what happens next is the same in every run.
        for _ in 1..size {
            node.recv(RecvFrom::any(), READY, &mut [])?;
        }
        eprintln!("fail: rank {me} exits with status {FAILURE_STATUS} on purpose");
        // No finalize: this is the crash the launcher must handle.
        return Ok(ExitCode::from(FAILURE_STATUS));
    }
    node.send(node.gate(args.rank), READY, &[])?;
    node.recv(RecvFrom::any(), NEVER, &mut [])?;
    Err("a receive that no rank matches completed".into())
}
