//! The substrate's latency floor: two threads ping-pong 8-byte messages
//! through two rings of one segment (thread A pushes into rank 1's ring,
//! thread B echoes into rank 0's ring), busy-polling, no doorbells. Prints
//! nanoseconds per one-way trip. Threads are pinned to CPUs 0 and 1 when
//! the machine allows it.
//!
//! `cargo run --release -p navette-shm --example ring_latency [round trips]`

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Instant;

use navette_shm::{RankArea, Segment, SegmentConfig};

/// Pins the calling thread to `cpu`; returns whether it could.
fn pin(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

fn send(area: RankArea<'_>, v: u64) {
    while area
        .try_push(8, |b| b.copy_from_slice(&v.to_le_bytes()))
        .is_err()
    {
        std::hint::spin_loop();
    }
}

fn recv(area: RankArea<'_>) -> u64 {
    loop {
        if let Some(v) = area.pop(|b| u64::from_le_bytes(b.try_into().expect("8-byte message"))) {
            return v;
        }
        std::hint::spin_loop();
    }
}

/// `rounds` round trips from A; returns nanoseconds per one-way trip.
fn ping_pong(a_inbox: RankArea<'_>, b_inbox: RankArea<'_>, rounds: u64) -> f64 {
    let start = Instant::now();
    for i in 0..rounds {
        send(b_inbox, i);
        assert_eq!(recv(a_inbox), i);
    }
    start.elapsed().as_nanos() as f64 / (2 * rounds) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 200_000,
    };
    let warmup = rounds / 10;
    let job_id = RandomState::new().hash_one(std::process::id());
    let seg = Segment::create(job_id, 2, &SegmentConfig::default())?;
    seg.unlink()?;
    let (a_inbox, b_inbox) = (seg.area(0), seg.area(1));
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut pinned = false;
    let ns = std::thread::scope(|s| {
        s.spawn(|| {
            let _ = cpus >= 2 && pin(1);
            for _ in 0..warmup + rounds {
                let v = recv(b_inbox);
                send(a_inbox, v);
            }
        });
        pinned = cpus >= 2 && pin(0);
        ping_pong(a_inbox, b_inbox, warmup);
        ping_pong(a_inbox, b_inbox, rounds)
    });
    println!(
        "ring_latency: {rounds} round trips of 8-byte messages, {ns:.0} ns per one-way trip ({})",
        if pinned {
            "pinned to CPUs 0 and 1"
        } else {
            "not pinned"
        }
    );
    Ok(())
}
