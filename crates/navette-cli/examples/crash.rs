//! `crash`: two ranks stream 1 MiB messages until one of them is killed.
//!
//! ```sh
//! cargo build -p navette-cli --examples
//! navette run -n 2 -- target/debug/examples/crash    # then kill -9 rank 1
//! ```
//!
//! Each rank prints its pid and the job id, then rank 0 sends 1 MiB
//! messages to rank 1 for ever and rank 1 receives them, checking each, and
//! says so after its first. A test kills rank 1 with SIGKILL in the middle
//! of this and checks that the launcher ends the job and that nothing of
//! the job is left in `/dev/shm`.

use std::process::ExitCode;

use navette::RecvFrom;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TAG: u64 = 7;
const SIZE: usize = 1 << 20;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crash: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Error> {
    let node = navette::init()?;
    if node.size() != 2 {
        return Err("crash needs 2 ranks".into());
    }
    let me = node.rank();
    let job = std::env::var(navette_session::env::JOB_ID).unwrap_or_default();
    println!(
        "crash: rank {me} pid {} job {job} driver {}",
        std::process::id(),
        node.driver_name()
    );
    let data: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let mut buf = vec![0u8; SIZE];
    for round in 0u64.. {
        if me == 0 {
            node.send(node.gate(1), TAG, &data)?;
        } else {
            node.recv(RecvFrom::from(node.gate(0)), TAG, &mut buf)?;
            if buf != data {
                return Err(format!("message {round} corrupted").into());
            }
            if round == 0 {
                println!("crash: rank 1 receiving");
            }
        }
    }
    Ok(())
}
