//! Two processes share a segment: the test binary re-runs itself as the
//! child (`child_role`, a no-op unless the environment names a job), and
//! the two exchange messages through each other's rings, sleeping on their
//! doorbells when idle.

// The segment API is compiled out under loom.
#![cfg(not(loom))]

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use navette_shm::{RankArea, Segment, SegmentConfig, can_pull_from, unlink_job};

const CHILD_ENV: &str = "NAVETTE_SHM_TEST_CHILD_JOB";
const MESSAGES: u64 = 3_000;
/// Bounds every wait: a hang fails the test instead of stalling CI.
const DEADLINE: Duration = Duration::from_secs(20);

fn config() -> SegmentConfig {
    SegmentConfig {
        ring_cells: 8,
        cell_size: 256,
    }
}

/// Message `i`: its index, then a pattern, of a length that varies with `i`.
fn message(i: u64, payload: usize) -> Vec<u8> {
    let len = 8 + (i as usize * 7) % (payload - 8 + 1);
    let mut m: Vec<u8> = (0..len).map(|k| (k as u64 ^ i) as u8).collect();
    m[..8].copy_from_slice(&i.to_le_bytes());
    m
}

fn echo(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().map(|b| b ^ 0x5a).collect()
}

fn push_retrying(area: RankArea<'_>, bytes: &[u8], start: Instant) {
    while area
        .try_push(bytes.len(), |b| b.copy_from_slice(bytes))
        .is_err()
    {
        assert!(start.elapsed() < DEADLINE, "ring stayed full");
        std::thread::yield_now();
    }
    area.ring_doorbell();
}

/// Kills the child if the parent's test fails.
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn child_role() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return;
    };
    let start = Instant::now();
    let seg = Segment::attach(job.parse().unwrap(), 2).unwrap();
    let probe = Box::new(0xfeed_f00d_u64 ^ u64::from(std::process::id()));
    let parent = seg.area(0);
    let (addr, value) = parent.probe();
    seg.area(1)
        .set_can_pull(can_pull_from(parent.pid(), addr, value));
    seg.area(1).publish(
        std::process::id(),
        std::ptr::from_ref(&*probe) as u64,
        *probe,
    );
    let inbox = seg.area(1);
    loop {
        match inbox.pop(echo) {
            Some(reply) if reply.is_empty() => break,
            Some(reply) => push_retrying(parent, &reply, start),
            None => inbox.sleep(Duration::from_millis(200)).unwrap(),
        }
        assert!(start.elapsed() < DEADLINE, "child: parent went silent");
    }
}

#[test]
fn two_processes_exchange_through_rings_and_doorbells() {
    let job = RandomState::new().hash_one((std::process::id(), SystemTime::now()));
    let seg = Segment::create(job, 2, &config()).unwrap();
    let probe = Box::new(0x1234_5678_u64 << 16);
    seg.area(0).publish(
        std::process::id(),
        std::ptr::from_ref(&*probe) as u64,
        *probe,
    );
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, job.to_string())
        // The child's test-harness summary would read as this run's; its
        // panics still reach stderr.
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Reap(child);
    let start = Instant::now();

    // The child publishes its pid once attached: then the name can go.
    while seg.area(1).pid() == 0 {
        assert!(child.0.try_wait().unwrap().is_none(), "child exited early");
        assert!(start.elapsed() < DEADLINE, "child never attached");
        std::thread::sleep(Duration::from_millis(1));
    }
    seg.unlink().unwrap();
    assert!(!unlink_job(job).unwrap());
    let (addr, value) = seg.area(1).probe();
    let parent_pulls = can_pull_from(seg.area(1).pid(), addr, value);
    println!(
        "single copy: parent from child {parent_pulls}, child from parent {}",
        seg.area(1).can_pull()
    );

    let (inbox, outbox) = (seg.area(0), seg.area(1));
    let payload = seg.cell_payload();
    let (mut sent, mut received) = (0, 0);
    while received < MESSAGES {
        let mut progress = false;
        while sent < MESSAGES {
            let m = message(sent, payload);
            if outbox.try_push(m.len(), |b| b.copy_from_slice(&m)).is_err() {
                break;
            }
            sent += 1;
            progress = true;
        }
        if progress {
            outbox.ring_doorbell();
        }
        while let Some(reply) = inbox.pop(echo) {
            assert_eq!(reply, message(received, payload), "reply {received}");
            received += 1;
            progress = true;
        }
        if !progress {
            inbox.sleep(Duration::from_millis(200)).unwrap();
        }
        assert!(start.elapsed() < DEADLINE, "parent: child went silent");
    }
    push_retrying(outbox, &[], start);
    let status = child.0.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    assert_eq!(inbox.skipped_cells() + outbox.skipped_cells(), 0);
}
