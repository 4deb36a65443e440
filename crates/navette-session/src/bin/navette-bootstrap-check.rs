//! Checks the bootstrap from inside a rank, for the launcher's tests and
//! by hand (`navette run -n 4 -- navette-bootstrap-check`): every rank
//! puts its rank and a 64 KiB value, fences, reads every rank's values,
//! and does it again to check that fences count per generation. Prints
//! one line and exits 0 on success, 1 with the reason otherwise.
#![forbid(unsafe_code)]

use std::error::Error;
use std::process::ExitCode;

use navette_session::{BootstrapError, from_env, protocol::MAX_VALUE};

fn main() -> ExitCode {
    match check() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("navette-bootstrap-check: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A value that depends on the rank and the round, the largest allowed.
fn big_value(rank: u32, round: u32) -> Vec<u8> {
    (0..MAX_VALUE)
        .map(|i| (i as u32 ^ rank ^ round << 4) as u8)
        .collect()
}

fn check() -> Result<String, Box<dyn Error>> {
    let b = from_env()?;
    let (rank, size) = (b.rank(), b.size());
    for round in 0..2u32 {
        b.put("rank", format!("{rank}/{round}").as_bytes())?;
        b.put("big", &big_value(rank, round))?;
        b.fence()?;
        for r in 0..size {
            let got = b.get(r, "rank")?;
            if got != format!("{r}/{round}").as_bytes() {
                return Err(format!("round {round}: rank {r} put {got:?}").into());
            }
            if b.get(r, "big")? != big_value(r, round) {
                return Err(format!("round {round}: rank {r}'s big value differs").into());
            }
        }
        // Nobody overwrites a value before everyone has read it.
        b.fence()?;
    }
    match b.get(rank, "never put") {
        Err(BootstrapError::Missing { .. }) => {}
        other => return Err(format!("a key never put gave {other:?}").into()),
    }
    Ok(format!(
        "rank {rank} of {size}: bootstrap ok (job {:016x})",
        b.job_id()
    ))
}
