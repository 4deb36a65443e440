//! Unit tests over real segments (small geometries, small counts).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rustix::fs::Mode;
use rustix::shm;

use crate::ring::{self, RingMemory};
use crate::{
    Full, Offer, Segment, SegmentConfig, Settled, ShmError, can_pull_from, pull, push, unlink_job,
};

/// A job id no other test (or test run) uses.
fn job_id() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    RandomState::new().hash_one((std::process::id(), n, SystemTime::now()))
}

/// Removes the job's name when dropped, also on panic.
struct Cleanup(u64);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = unlink_job(self.0);
    }
}

fn small() -> SegmentConfig {
    SegmentConfig {
        ring_cells: 8,
        cell_size: 128,
    }
}

fn dev_shm_path(job: u64) -> String {
    format!("/dev/shm{}", Segment::name(job))
}

/// Writes `bytes` as a new object of job `job`'s name, with `mode`.
fn hand_made_object(job: u64, bytes: &[u8], mode: u32) {
    let flags = shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR;
    let fd = shm::open(Segment::name(job), flags, Mode::RUSR | Mode::WUSR).unwrap();
    rustix::fs::fchmod(&fd, Mode::from_bits_truncate(mode)).unwrap();
    std::fs::File::from(fd).write_all(bytes).unwrap();
}

#[test]
fn create_attach_unlink_round_trip() {
    let job = job_id();
    let _cleanup = Cleanup(job);
    let seg = Segment::create(job, 3, &small()).unwrap();
    let meta = std::fs::metadata(dev_shm_path(job)).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len() as usize, seg.mapped_bytes());

    let peer = Segment::attach(job, 3).unwrap();
    assert_eq!((peer.ranks(), peer.ring_cells()), (3, 8));
    assert_eq!(peer.cell_payload(), 116);
    assert_eq!(peer.mapped_bytes(), seg.mapped_bytes());
    peer.area(2).publish(1234, 0xdead_beef, 42);
    peer.area(2).set_can_pull(true);
    assert_eq!(seg.area(2).pid(), 1234);
    assert_eq!(seg.area(2).probe(), (0xdead_beef, 42));
    assert!(seg.area(2).can_pull());
    assert_eq!(seg.area(1).pid(), 0);

    seg.unlink().unwrap();
    assert!(std::fs::metadata(dev_shm_path(job)).is_err());
    seg.unlink().unwrap();
    peer.unlink().unwrap();
    assert!(!unlink_job(job).unwrap());
    // The mappings outlive the name.
    seg.area(0)
        .try_push(3, |b| b.copy_from_slice(b"abc"))
        .unwrap();
    assert_eq!(peer.area(0).pop(<[u8]>::to_vec).unwrap(), b"abc");
    assert!(matches!(
        Segment::attach(job, 3),
        Err(ShmError::NotFound { .. })
    ));
}

#[test]
fn creator_drop_removes_the_name() {
    let job = job_id();
    let _cleanup = Cleanup(job);
    drop(Segment::create(job, 1, &small()).unwrap());
    assert!(!unlink_job(job).unwrap());
}

#[test]
fn create_twice_is_exists() {
    let job = job_id();
    let _cleanup = Cleanup(job);
    let _seg = Segment::create(job, 2, &small()).unwrap();
    let err = Segment::create(job, 2, &small()).unwrap_err();
    assert!(matches!(err, ShmError::Exists { .. }), "{err}");
}

#[test]
fn bad_config_is_rejected_before_creating() {
    let job = job_id();
    let _cleanup = Cleanup(job);
    let cfg = SegmentConfig {
        ring_cells: 3,
        cell_size: 128,
    };
    assert!(matches!(
        Segment::create(job, 2, &cfg),
        Err(ShmError::Config(_))
    ));
    assert!(!unlink_job(job).unwrap());
}

#[test]
fn a_segment_larger_than_the_free_shared_memory_is_refused() {
    let job = job_id();
    let _cleanup = Cleanup(job);
    let vfs = rustix::fs::statvfs("/dev/shm").expect("statvfs /dev/shm");
    let free = vfs.f_bavail.saturating_mul(vfs.f_frsize);
    // Cells of 1 GiB, enough of them to exceed what is free.
    let cells = (free >> 30).saturating_add(1).next_power_of_two().max(2);
    let cfg = SegmentConfig {
        ring_cells: u32::try_from(cells).expect("less than 64 TiB of free shared memory"),
        cell_size: 1 << 30,
    };
    let err = Segment::create(job, 1, &cfg).unwrap_err();
    assert!(
        matches!(&err, ShmError::NoRoom { need, room, .. } if need > room),
        "{err}"
    );
    // Nothing is left behind.
    assert!(!unlink_job(job).unwrap());
}

#[test]
fn attach_missing_is_not_found() {
    let err = Segment::attach(job_id(), 2).unwrap_err();
    assert!(matches!(err, ShmError::NotFound { .. }), "{err}");
}

#[test]
fn attach_foreign_objects_is_a_clear_error() {
    let job = job_id();
    let _cleanup = Cleanup(job);
    // Non-zero garbage: foreign.
    hand_made_object(job, &[0x5a; 4096], 0o600);
    let err = Segment::attach(job, 2).unwrap_err();
    assert!(matches!(err, ShmError::Foreign { .. }), "{err}");
    unlink_job(job).unwrap();
    // All zero: not initialised.
    hand_made_object(job, &[0; 4096], 0o600);
    let err = Segment::attach(job, 2).unwrap_err();
    assert!(matches!(err, ShmError::NotReady { .. }), "{err}");
    unlink_job(job).unwrap();
    // Shorter than a header, and empty.
    for len in [0, 100] {
        hand_made_object(job, &vec![1; len], 0o600);
        let err = Segment::attach(job, 2).unwrap_err();
        assert!(matches!(err, ShmError::Truncated { .. }), "{err}");
        unlink_job(job).unwrap();
    }
    // Readable by others.
    hand_made_object(job, &[0; 4096], 0o644);
    let err = Segment::attach(job, 2).unwrap_err();
    assert!(matches!(err, ShmError::Permissions { .. }), "{err}");
}

/// A valid segment's bytes, to copy under other names or damage.
fn valid_image(ranks: u32) -> Vec<u8> {
    let job = job_id();
    let _cleanup = Cleanup(job);
    let _seg = Segment::create(job, ranks, &small()).unwrap();
    std::fs::read(dev_shm_path(job)).unwrap()
}

#[test]
fn attach_checks_job_ranks_geometry_and_size() {
    let image = valid_image(2);
    let job = job_id();
    let _cleanup = Cleanup(job);
    let try_image = |bytes: &[u8], ranks| {
        hand_made_object(job, bytes, 0o600);
        let r = Segment::attach(job, ranks);
        unlink_job(job).unwrap();
        r.unwrap_err()
    };
    // Another job's segment copied under this job's name.
    assert!(matches!(try_image(&image, 2), ShmError::JobMismatch { .. }));
    let mut ours = image.clone();
    ours[16..24].copy_from_slice(&job.to_ne_bytes());
    hand_made_object(job, &ours, 0o600);
    assert_eq!(Segment::attach(job, 2).unwrap().ranks(), 2);
    unlink_job(job).unwrap();

    assert!(matches!(try_image(&ours, 3), ShmError::RankMismatch { .. }));
    let version = {
        let mut v = ours.clone();
        v[8] = 99;
        v
    };
    assert!(matches!(try_image(&version, 2), ShmError::Version { .. }));
    let geometry = {
        let mut g = ours.clone();
        g[28..32].copy_from_slice(&100u32.to_ne_bytes()); // cell size
        g
    };
    assert!(matches!(try_image(&geometry, 2), ShmError::Corrupt { .. }));
    let total = {
        let mut t = ours.clone();
        t[40..48].copy_from_slice(&(1u64 << 40).to_ne_bytes());
        t
    };
    assert!(matches!(try_image(&total, 2), ShmError::Corrupt { .. }));
    let short = &ours[..ours.len() - 64];
    assert!(matches!(try_image(short, 2), ShmError::Truncated { .. }));
    let mut long = ours.clone();
    long.extend_from_slice(&[0; 4096]);
    assert!(matches!(try_image(&long, 2), ShmError::Corrupt { .. }));
}

/// A one-rank segment for ring tests.
fn ring_segment(cells: u32, cell_size: usize) -> (Segment, Cleanup) {
    let job = job_id();
    let cfg = SegmentConfig {
        ring_cells: cells,
        cell_size,
    };
    (Segment::create(job, 1, &cfg).unwrap(), Cleanup(job))
}

fn push_u64(seg: &Segment, v: u64) -> Result<(), Full> {
    seg.area(0)
        .try_push(8, |b| b.copy_from_slice(&v.to_le_bytes()))
}

fn pop_u64(seg: &Segment) -> Option<u64> {
    seg.area(0)
        .pop(|b| u64::from_le_bytes(b.try_into().expect("8-byte message")))
}

#[test]
fn ring_is_fifo_and_full_when_full() {
    let (seg, _c) = ring_segment(8, 64);
    let area = seg.area(0);
    assert!(area.is_empty());
    assert_eq!(pop_u64(&seg), None);
    for v in 0..8 {
        push_u64(&seg, v).unwrap();
    }
    assert_eq!(push_u64(&seg, 8), Err(Full));
    assert!(!area.is_empty());
    for v in 0..3 {
        assert_eq!(pop_u64(&seg), Some(v));
    }
    for v in 8..11 {
        push_u64(&seg, v).unwrap();
    }
    assert_eq!(push_u64(&seg, 11), Err(Full));
    for v in 3..11 {
        assert_eq!(pop_u64(&seg), Some(v));
    }
    assert_eq!(pop_u64(&seg), None);
    assert!(area.is_empty());
}

/// `pop_if` consumes what its closure takes and leaves the rest at head,
/// where the next pop finds it again; a skipped cell is never shown.
#[test]
fn pop_if_leaves_what_it_does_not_take_at_head() {
    let (seg, _c) = ring_segment(4, 64);
    let area = seg.area(0);
    let take_even = |b: &[u8]| {
        let v = u64::from_le_bytes(b.try_into().expect("8-byte message"));
        (v % 2 == 0).then_some(v)
    };
    assert_eq!(area.pop_if(take_even), None);
    for v in [0, 1, 2] {
        push_u64(&seg, v).unwrap();
    }
    assert_eq!(area.pop_if(take_even), Some(Some(0)));
    // 1 is left at head, as often as asked, and the ring stays as full.
    for _ in 0..3 {
        assert_eq!(area.pop_if(take_even), Some(None));
    }
    push_u64(&seg, 3).unwrap();
    push_u64(&seg, 4).unwrap();
    assert_eq!(push_u64(&seg, 5), Err(Full));
    assert_eq!(pop_u64(&seg), Some(1));
    assert_eq!(area.pop_if(take_even), Some(Some(2)));
    // A cell abandoned by its producer is skipped, not shown.
    let abandoned =
        std::panic::catch_unwind(|| area.try_push(8, |_| panic!("producer dies while filling")));
    assert!(abandoned.is_err());
    push_u64(&seg, 6).unwrap();
    assert_eq!(area.pop_if(take_even), Some(None));
    assert_eq!(pop_u64(&seg), Some(3));
    assert_eq!(area.pop_if(take_even), Some(Some(4)));
    assert_eq!(area.pop_if(take_even), Some(Some(6)));
    assert_eq!(area.skipped_cells(), 1);
    assert!(area.is_empty());
}

fn laps(seg: &Segment, start: u64, count: u64) {
    let mut next_push = start;
    let mut next_pop = start;
    let end = start + count;
    // Fill up to three messages ahead, then drain one: crosses every cell
    // at every fill level.
    while next_pop < end {
        while next_push < end && next_push - next_pop < 3 && push_u64(seg, next_push).is_ok() {
            next_push += 1;
        }
        assert_eq!(pop_u64(seg), Some(next_pop));
        next_pop += 1;
    }
    assert_eq!(pop_u64(seg), None);
}

#[test]
fn wrap_around_over_many_laps() {
    let (seg, _c) = ring_segment(4, 64);
    laps(&seg, 0, 1000);
}

#[test]
fn wrap_around_at_the_end_of_u64() {
    let (seg, _c) = ring_segment(4, 64);
    let area = seg.area(0);
    ring::reset_at(&area, u64::MAX - 9);
    laps(&seg, 0, 100);
    assert!(area.tail().load(Ordering::Relaxed) < 100);
    // Full is still detected across the wrap.
    ring::reset_at(&area, u64::MAX - 1);
    for v in 0..4 {
        push_u64(&seg, v).unwrap();
    }
    assert_eq!(push_u64(&seg, 4), Err(Full));
    assert_eq!(pop_u64(&seg), Some(0));
}

#[test]
fn payloads_of_zero_and_full_size() {
    let (seg, _c) = ring_segment(4, 256);
    let area = seg.area(0);
    let max = area.cell_payload();
    assert_eq!(max, 244);
    area.try_push(0, |b| assert!(b.is_empty())).unwrap();
    area.try_push(max, |b| b.fill(0xab)).unwrap();
    assert_eq!(area.pop(<[u8]>::len), Some(0));
    assert_eq!(area.pop(<[u8]>::to_vec), Some(vec![0xab; max]));
}

#[test]
fn a_push_handing_its_lines_over_delivers_the_same_bytes() {
    // Cells of 4 KiB: a payload of one line, of a few, and past the most
    // demoted; handed over or not, the consumer reads what was written.
    let (seg, _c) = ring_segment(4, 4096);
    let area = seg.area(0);
    let max = area.cell_payload();
    for (i, len) in [0, 8, 52, 53, 300, 2100, max].into_iter().enumerate() {
        for demote in [true, false] {
            let byte = (i * 2 + usize::from(demote)) as u8;
            area.try_push_handing_over(len, demote, |b| b.fill(byte))
                .expect("room");
            assert_eq!(
                area.pop(<[u8]>::to_vec),
                Some(vec![byte; len]),
                "{len} {demote}"
            );
        }
    }
    assert!(area.is_empty());
}

#[test]
fn asking_for_the_tail_cell_changes_nothing_in_the_ring() {
    let (seg, _c) = ring_segment(4, 128);
    let area = seg.area(0);
    // Empty, part full, full (the consumer may still read the tail's cell:
    // nothing is asked then), and after a wrap: a hint, never a write.
    area.prefetch_tail_cell();
    for v in 0..4 {
        push_u64(&seg, v).unwrap();
        area.prefetch_tail_cell();
    }
    assert_eq!(push_u64(&seg, 4), Err(Full));
    for v in 0..4 {
        assert_eq!(pop_u64(&seg), Some(v));
        area.prefetch_tail_cell();
    }
    push_u64(&seg, 9).unwrap();
    area.prefetch_tail_cell();
    assert_eq!(pop_u64(&seg), Some(9));
    assert!(area.is_empty());
    // After a push that filled its cell, the hint asks for the next cell
    // as far as that one went, and no further: the ring is as it was.
    let full = area.cell_payload();
    area.try_push(full, |b| b.fill(7)).unwrap();
    area.prefetch_tail_cell();
    assert_eq!(
        area.pop(|b| (b.len(), b.iter().all(|&x| x == 7))),
        Some((full, true))
    );
    push_u64(&seg, 10).unwrap();
    area.prefetch_tail_cell();
    assert_eq!(pop_u64(&seg), Some(10));
    assert!(area.is_empty());
}

#[test]
fn a_ping_pong_knows_the_tail_cell_free_at_every_push() {
    let (seg, _c) = ring_segment(4, 128);
    let area = seg.area(0);
    // One message at a time, over three laps: after each is consumed, the
    // cell of the next push reads as free by this process's cache of the
    // head (so the prefetches before that push ask for its lines and its
    // claim reads nothing of the consumer's), the lap's last one too.
    for v in 0..12 {
        push_u64(&seg, v).unwrap();
        assert_eq!(pop_u64(&seg), Some(v));
        assert_eq!(
            area.free_tail_cell(),
            Some((v as usize + 1) % 4),
            "after {v}"
        );
    }
    // A full ring still reads full: no cell is asked for from under the
    // consumer.
    for v in 0..4 {
        push_u64(&seg, v).unwrap();
    }
    assert_eq!(area.free_tail_cell(), None);
    assert_eq!(pop_u64(&seg), Some(0));
}

#[test]
#[should_panic(expected = "exceeds the cell payload")]
fn oversized_push_panics() {
    let (seg, _c) = ring_segment(4, 64);
    let _ = seg.area(0).try_push(53, |_| ());
}

#[test]
#[should_panic(expected = "out of range")]
fn area_out_of_range_panics() {
    let (seg, _c) = ring_segment(2, 64);
    let _ = seg.area(1);
}

#[test]
fn corrupt_lengths_are_skipped_never_handed_out() {
    let (seg, _c) = ring_segment(4, 64);
    let area = seg.area(0);
    push_u64(&seg, 1).unwrap();
    push_u64(&seg, 2).unwrap();
    // A buggy peer overwrites the first cell's length.
    area.len(0).store(53, Ordering::Relaxed);
    assert_eq!(pop_u64(&seg), Some(2));
    assert_eq!(area.skipped_cells(), 1);
    // A producer whose fill panics leaves an abandoned cell, skipped too.
    let r = std::panic::catch_unwind(|| area.try_push(8, |_| panic!("fill failed")));
    assert!(r.is_err());
    push_u64(&seg, 3).unwrap();
    assert_eq!(pop_u64(&seg), Some(3));
    assert_eq!(area.skipped_cells(), 2);
    assert_eq!(pop_u64(&seg), None);
}

#[test]
fn consumer_panic_frees_the_cell_and_lock() {
    let (seg, _c) = ring_segment(4, 64);
    push_u64(&seg, 1).unwrap();
    push_u64(&seg, 2).unwrap();
    let r = std::panic::catch_unwind(|| seg.area(0).pop(|_| panic!("consumer failed")));
    assert!(r.is_err());
    assert_eq!(pop_u64(&seg), Some(2));
}

#[test]
fn reentrant_pop_gets_nothing() {
    let (seg, _c) = ring_segment(4, 64);
    push_u64(&seg, 1).unwrap();
    push_u64(&seg, 2).unwrap();
    let inner = seg.area(0).pop(|_| pop_u64(&seg));
    assert_eq!(inner, Some(None));
    assert_eq!(pop_u64(&seg), Some(2));
}

#[test]
fn mpsc_stress_keeps_per_producer_order() {
    const PRODUCERS: u64 = 4;
    const PER: u64 = 5_000;
    let (seg, _c) = ring_segment(8, 64);
    let area = seg.area(0);
    std::thread::scope(|s| {
        for p in 0..PRODUCERS {
            s.spawn(move || {
                for i in 0..PER {
                    let len = 16 + (i % 33) as usize;
                    let mut msg = [0u8; 48];
                    msg[..8].copy_from_slice(&p.to_le_bytes());
                    msg[8..16].copy_from_slice(&i.to_le_bytes());
                    for (k, b) in msg[16..len].iter_mut().enumerate() {
                        *b = (p ^ i ^ k as u64) as u8;
                    }
                    while area
                        .try_push(len, |b| b.copy_from_slice(&msg[..len]))
                        .is_err()
                    {
                        std::thread::yield_now();
                    }
                    area.ring_doorbell();
                }
            });
        }
        let mut next = [0u64; PRODUCERS as usize];
        let mut received = 0;
        while received < PRODUCERS * PER {
            let got = area.pop(|b| {
                let p = u64::from_le_bytes(b[..8].try_into().unwrap());
                let i = u64::from_le_bytes(b[8..16].try_into().unwrap());
                assert_eq!(b.len(), 16 + (i % 33) as usize);
                for (k, &x) in b[16..].iter().enumerate() {
                    assert_eq!(x, (p ^ i ^ k as u64) as u8, "payload of {p}/{i}");
                }
                (p, i)
            });
            match got {
                Some((p, i)) => {
                    assert_eq!(i, next[p as usize], "order of producer {p}");
                    next[p as usize] += 1;
                    received += 1;
                }
                None => area.sleep(Duration::from_millis(50)).unwrap(),
            }
        }
    });
    assert_eq!(pop_u64(&seg), None);
    assert_eq!(seg.area(0).skipped_cells(), 0);
}

#[test]
fn doorbell_wakes_a_sleeper() {
    let (seg, _c) = ring_segment(4, 64);
    let area = seg.area(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for v in 0..100 {
                while push_u64(&seg, v).is_err() {
                    std::thread::yield_now();
                }
                area.ring_doorbell();
                if v % 10 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        for v in 0..100 {
            // A lost wake-up would show as a 30 s stall, not a failure.
            loop {
                if let Some(got) = pop_u64(&seg) {
                    assert_eq!(got, v);
                    break;
                }
                area.sleep(Duration::from_secs(30)).unwrap();
            }
        }
    });
}

#[test]
fn wake_after_ticket_makes_sleep_return() {
    let (seg, _c) = ring_segment(2, 64);
    let area = seg.area(0);
    let ticket = area.ticket();
    area.wake();
    // Returns at once: the doorbell moved since the ticket.
    area.sleep_until(ticket, Duration::from_secs(30)).unwrap();
    // A wake from another thread reaches a sleeper blocked in the futex.
    std::thread::scope(|s| {
        let ticket = area.ticket();
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            area.wake();
        });
        area.sleep_until(ticket, Duration::from_secs(30)).unwrap();
    });
    // Timeouts return Ok.
    area.sleep(Duration::from_millis(1)).unwrap();
}

#[test]
fn resident_memory_for_2_16_64_ranks() {
    for ranks in [2, 16, 64] {
        let job = job_id();
        let _cleanup = Cleanup(job);
        let seg = Segment::create(job, ranks, &SegmentConfig::default()).unwrap();
        let fresh = seg.resident_bytes().unwrap();
        for r in 0..ranks {
            let area = seg.area(r);
            for _ in 0..area.capacity() {
                area.try_push(8, |b| b.fill(1)).unwrap();
                area.pop(|_| ()).unwrap();
            }
        }
        let used = seg.resident_bytes().unwrap();
        println!(
            "ranks {ranks:2}: mapped {:6} KiB, resident fresh {:5} KiB, after a lap of 8-byte messages {:6} KiB",
            seg.mapped_bytes() / 1024,
            fresh / 1024,
            used / 1024
        );
        assert!(fresh < seg.mapped_bytes() / 16);
        assert!(used >= fresh && used <= seg.mapped_bytes());
    }
}

#[test]
fn pull_from_self() {
    let probe: u64 = 0x0123_4567_89ab_cdef;
    let addr = std::ptr::from_ref(&probe) as u64;
    let pid = std::process::id();
    let mut buf = [0u8; 8];
    pull(pid, addr, &mut buf).unwrap();
    assert_eq!(u64::from_ne_bytes(buf), probe);
    assert!(can_pull_from(pid, addr, probe));
    assert!(!can_pull_from(pid, addr, !probe));
    // Empty reads succeed without a system call.
    pull(pid, 8, &mut []).unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let mut copy = vec![0u8; big.len()];
    pull(pid, big.as_ptr() as u64, &mut copy).unwrap();
    assert_eq!(copy, big);
    let err = pull(pid, 8, &mut buf).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
    let err = pull(u32::MAX, addr, &mut buf).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
}

#[test]
fn liveness_of_processes() {
    assert!(crate::is_alive(std::process::id()));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    // Reaped: gone (unless the pid was reused at once, which is unlikely).
    assert!(!crate::is_alive(pid));
    assert!(!crate::is_alive(0) && !crate::is_alive(u32::MAX));
    // Exited but not reaped: a zombie, gone for our purpose.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
        std::thread::yield_now();
    }
    assert!(!crate::is_alive(pid), "a zombie");
    child.wait().unwrap();
}

#[test]
fn push_into_self() {
    let pid = std::process::id();
    let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let mut dest = vec![0u8; src.len()];
    push(pid, dest.as_mut_ptr() as u64, &src).unwrap();
    assert_eq!(dest, src);
    let err = push(pid, 8, &src[..8]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
}

#[test]
fn offers_go_only_to_their_taker_and_settle_once() {
    let (seg, _cleanup) = ring_segment(2, 64);
    let area = seg.area(0);
    let offer = Offer {
        taker: 3,
        source: 0x1000,
        dest: 0x2000,
        len: 77,
    };
    // Not taken: revoked, and gone for its taker.
    area.offer(&offer);
    assert!(area.is_offered_to(3) && !area.is_offered_to(4));
    assert_eq!(area.take_offer(4), None);
    assert_eq!(area.settle_offer(3, || unreachable!()), Settled::Revoked);
    assert_eq!(area.take_offer(3), None);
    // Taken and written.
    area.offer(&offer);
    assert_eq!(area.take_offer(3), Some(offer));
    assert_eq!(area.take_offer(3), None);
    area.finish_offer(3, true);
    assert_eq!(area.settle_offer(3, || unreachable!()), Settled::Written);
    // Taken and not written.
    area.offer(&offer);
    assert_eq!(area.take_offer(3), Some(offer));
    area.finish_offer(3, false);
    assert_eq!(area.settle_offer(3, || unreachable!()), Settled::Failed);
    // Taken by a taker that never finishes: the owner gives up.
    area.offer(&offer);
    assert_eq!(area.take_offer(3), Some(offer));
    let mut looks = 0;
    let settled = area.settle_offer(3, || {
        looks += 1;
        looks < 5
    });
    assert_eq!((settled, looks), (Settled::Abandoned, 5));
    // The slot is free again, and the late taker's finish does not settle
    // the next offer.
    area.offer(&offer);
    area.finish_offer(3, true);
    assert!(area.is_offered_to(3));
    assert_eq!(area.settle_offer(3, || unreachable!()), Settled::Revoked);
}

/// An owner pulls half of each message and offers the other half to a
/// taker thread that writes it with `push`, as the shm driver does across
/// processes; whether or not the taker is in time, every message arrives
/// whole.
#[test]
fn shared_pulls_deliver_every_byte() {
    let (seg, _cleanup) = ring_segment(2, 64);
    let pid = std::process::id();
    const LEN: usize = 64 * 1024;
    let rounds = 300;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sources: Vec<Vec<u8>> = (0..rounds)
        .map(|r| (0..LEN).map(|i| (i * 31 + r) as u8).collect())
        .collect();
    let mut outcomes = std::collections::HashMap::new();
    std::thread::scope(|s| {
        let area = seg.area(0);
        let stop = &stop;
        let sources = &sources;
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(offer) = area.take_offer(1) {
                    // The taker checks the offer names its own data.
                    let round = sources
                        .iter()
                        .position(|src| {
                            let at = src.as_ptr() as u64;
                            offer.source >= at && offer.source + offer.len <= at + LEN as u64
                        })
                        .expect("an offer of our data");
                    let from = (offer.source - sources[round].as_ptr() as u64) as usize;
                    let part = &sources[round][from..from + offer.len as usize];
                    area.finish_offer(1, push(pid, offer.dest, part).is_ok());
                }
                std::hint::spin_loop();
            }
        });
        for src in sources {
            let mut dest = vec![0u8; LEN];
            let half = LEN / 2;
            area.offer(&Offer {
                taker: 1,
                source: src.as_ptr() as u64 + half as u64,
                dest: dest.as_mut_ptr() as u64 + half as u64,
                len: (LEN - half) as u64,
            });
            pull(pid, src.as_ptr() as u64, &mut dest[..half]).unwrap();
            let settled = area.settle_offer(1, || {
                std::hint::spin_loop();
                true
            });
            if settled != Settled::Written {
                pull(pid, src.as_ptr() as u64 + half as u64, &mut dest[half..]).unwrap();
            }
            *outcomes.entry(settled).or_insert(0) += 1;
            assert!(dest == *src, "a message arrived damaged ({settled:?})");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    eprintln!("outcomes: {outcomes:?}");
}

#[test]
fn pushes_of_every_length_keep_to_their_cells() {
    // Each push asks for the next cell's lines as far as its own length
    // reaches: through every length, with the ring empty, half full and
    // full, those lines stay within the cell and the messages intact.
    let (seg, _c) = ring_segment(4, 320);
    let area = seg.area(0);
    let max = area.cell_payload();
    for len in 0..=max {
        let fill = |b: &mut [u8]| {
            b.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = (i + len) as u8)
        };
        let expect: Vec<u8> = (0..len).map(|i| (i + len) as u8).collect();
        for _ in 0..len % 4 + 1 {
            area.try_push(len, fill).unwrap();
        }
        while let Some(got) = area.pop(<[u8]>::to_vec) {
            assert_eq!(got, expect, "a message of {len} bytes");
        }
    }
}
