//! Resources come back: after many sessions (each connects its ranks,
//! exchanges a message each way and finalizes, over tcp and over shm) and
//! after many messages in one session, this process has exactly the file
//! descriptors it had before. Resident memory is printed for the record
//! (`--nocapture`), not checked: the allocator keeps what it likes.
//!
//! The counts are small in CI; the long run is by hand:
//!
//! ```sh
//! NAVETTE_RESOURCE_CYCLES=10000 NAVETTE_RESOURCE_MESSAGES=1000000 \
//!     cargo test --release -p navette --test resources -- --nocapture
//! ```
//!
//! Everything runs in one test, so that no other test of this binary opens
//! descriptors meanwhile.

mod common;

use std::time::Duration;

use navette::{Node, RecvFrom, RuntimeConfig, init_shm, init_tcp};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;

const JOB_KEY: [u8; JOB_KEY_LEN] = [0x61; JOB_KEY_LEN];

fn count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Resident memory, KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn config() -> RuntimeConfig {
    common::test_config(Duration::from_secs(300))
}

#[derive(Clone, Copy, Debug)]
enum Driver {
    Tcp,
    Shm,
}

/// A job of 2 ranks (threads of this process) over `driver`: each runs
/// `f` between init and finalize.
fn session(driver: Driver, job: u64, f: impl Fn(&Node) + Sync) {
    let ranks = LocalBootstrap::job(2, job, JOB_KEY);
    match driver {
        Driver::Tcp => {
            common::run_ranks(ranks, &config(), init_tcp, |node, _| f(node));
        }
        Driver::Shm => {
            common::run_ranks(ranks, &config(), init_shm, |node, _| f(node));
        }
    }
}

/// One message each way: connects the ranks (tcp dials on first use).
fn exchange(node: &Node) {
    let peer = 1 - node.rank();
    let mut got = [0u8; 8];
    if node.rank() == 0 {
        node.send(node.gate(peer), 1, &[7; 8]).unwrap();
        node.recv(RecvFrom::from(node.gate(peer)), 1u64, &mut got)
            .unwrap();
    } else {
        node.recv(RecvFrom::from(node.gate(peer)), 1u64, &mut got)
            .unwrap();
        node.send(node.gate(peer), 1, &[7; 8]).unwrap();
    }
    assert_eq!(got, [7; 8]);
}

/// `messages` 8-byte messages from rank 0 to rank 1, every one checked.
fn stream(node: &Node, messages: u64) {
    let mut got = [0u8; 8];
    for i in 0..messages {
        if node.rank() == 0 {
            node.send(node.gate(1), 2, &i.to_le_bytes()).unwrap();
        } else {
            node.recv(RecvFrom::from(node.gate(0)), 2u64, &mut got)
                .unwrap();
            assert_eq!(u64::from_le_bytes(got), i);
        }
    }
}

#[test]
fn sessions_and_messages_leave_no_descriptor_open() {
    let cycles = count("NAVETTE_RESOURCE_CYCLES", 40);
    let messages = count("NAVETTE_RESOURCE_MESSAGES", 20_000);
    // Job ids of this process: distinct shared segments per session.
    let base = u64::from(std::process::id()) << 24;
    // The first sessions set up what lives as long as the process (the
    // tracing subscriber, thread-locals): the baseline is taken after.
    session(Driver::Tcp, base, exchange);
    session(Driver::Shm, base + 1, exchange);
    let (fds, rss) = (open_descriptors(), resident_kib());
    println!("baseline: {fds} descriptors, {rss} KiB resident");

    for cycle in 0..cycles {
        let driver = if cycle % 2 == 0 {
            Driver::Tcp
        } else {
            Driver::Shm
        };
        session(driver, base + 2 + cycle, exchange);
    }
    let after_cycles = (open_descriptors(), resident_kib());
    println!(
        "after {cycles} sessions (tcp and shm in turn): {} descriptors, {} KiB resident",
        after_cycles.0, after_cycles.1
    );
    assert_eq!(after_cycles.0, fds, "descriptors left open by sessions");

    for (i, driver) in [Driver::Tcp, Driver::Shm].into_iter().enumerate() {
        session(driver, base + 2 + cycles + i as u64, |node| {
            stream(node, messages);
        });
        let after = (open_descriptors(), resident_kib());
        println!(
            "after {messages} messages over {driver:?}: {} descriptors, {} KiB resident",
            after.0, after.1
        );
        assert_eq!(after.0, fds, "descriptors left open by {driver:?} messages");
    }
}
