//! `stall`: ask a stuck rank what it waits for, with SIGUSR1.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 2 --timeout 30 -- target/debug/examples/stall &
//! kill -USR1 <pid printed by rank 0>
//! ```
//!
//! `navette::init()` installs `navette::diagnostics::report_on_sigusr1` for
//! the node it returns (turn it off with `RuntimeConfig::report_on_sigusr1`
//! and `navette::init_with`). Each rank prints its pid, then waits for a
//! message from the next rank that never comes. On SIGUSR1 a rank prints
//! its node's report on standard error: every pending request with its
//! peer, tag, size, state and age, then every rail — here "waiting for a
//! message from rank 1". Nothing ends the job but a signal or
//! `navette run --timeout`.

use std::process::ExitCode;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// No rank ever sends with this tag.
const NEVER: u64 = 0x57a11;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("stall: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let node = navette::init()?;
    let (me, size) = (node.rank(), node.size());
    if size < 2 {
        return Err("run with at least 2 ranks (navette run -n 2)".into());
    }
    // The SIGUSR1 handler is in place once `init` returns: only now may
    // anyone learn our pid (without the handler, SIGUSR1 kills).
    println!("stall: rank {me} pid {} waiting", std::process::id());
    let next = (me + 1) % size;
    node.recv(node.gate(next), NEVER, &mut [])?;
    Err(format!("a receive from rank {next} that no rank matches completed").into())
}
