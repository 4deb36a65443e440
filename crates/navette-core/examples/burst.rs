//! The engine's side of a burst of small messages, hot in cache, without
//! any driver: one engine stages a series of small tagged messages (one per
//! channel, as `navette bench multiseg` sends them) in its peer's open
//! packet and sends the packet at once; the other lands it in receives
//! posted ahead, kept outside the engine. Each step is a function of its
//! own, so that an instruction count attributes it:
//!
//! ```sh
//! cargo run --release -p navette-core --example burst               # ns per segment
//! valgrind --tool=callgrind target/release/examples/burst 10000     # instructions
//! ```
//!
//! A figure to compare before and after a change to the engine, on the same
//! machine and in the same minute; not a test.

use std::time::Instant;

use navette_core::*;

mod pair;

/// Segments per series.
const SEGMENTS: usize = 16;
/// Bytes per segment.
const SIZE: usize = 4;

/// Stages one series.
#[inline(never)]
fn stage(a: &mut Engine, data: &[u8]) {
    for k in 0..SEGMENTS {
        let staged = a.stage_tagged(ChannelId(k as u16 + 1), 1, k as u64, data);
        assert!(staged.is_some(), "staged");
    }
}

/// Sends the open packet into `wire`.
#[inline(never)]
fn flush(a: &mut Engine, rail: RailId, wire: &mut Vec<u8>) {
    let all = a.send_open_now(rail, OpenToSend::All, |packet| {
        wire.clear();
        wire.extend_from_slice(packet);
        true
    });
    assert!(all, "sent");
}

/// Posts one series' receives.
#[inline(never)]
fn post(posted: &mut Vec<PostedBuffer<usize>>, bufs: &mut Vec<Vec<u8>>) {
    for k in 0..SEGMENTS {
        let want = RecvNow {
            channel: ChannelId(k as u16 + 1),
            source: Source::Rank(0),
            tag: TagMatch::exact(k as u64),
        };
        let buf = bufs.pop().expect("a buffer per segment");
        posted.push(PostedBuffer::new(want, buf, k));
    }
}

/// Lands the packet in the receives.
#[inline(never)]
fn land(b: &mut Engine, rail: RailId, wire: &[u8], posted: &mut [PostedBuffer<usize>]) {
    let outcome = b.land_posted_now(rail, wire, posted);
    assert_eq!(outcome, PostedNowOutcome::Landed);
}

/// Takes the buffers back.
#[inline(never)]
fn take(posted: &mut Vec<PostedBuffer<usize>>, bufs: &mut Vec<Vec<u8>>) {
    for p in posted.drain(..) {
        assert!(p.landed.is_some(), "landed");
        bufs.push(p.buf);
    }
}

fn main() {
    let series: u32 = std::env::args()
        .nth(1)
        .map_or(1_000_000, |n| n.parse().expect("a number of series"));
    let caps = RailCaps {
        rdv_threshold: 32 << 10,
        ..RailCaps::default()
    };
    let (mut a, mut b, ra, rb) = pair::connected(caps);
    let data = [7u8; SIZE];
    let mut wire = Vec::new();
    let mut posted = Vec::with_capacity(SEGMENTS);
    let mut bufs: Vec<Vec<u8>> = (0..SEGMENTS).map(|_| vec![0u8; SIZE]).collect();
    let start = Instant::now();
    for _ in 0..series {
        post(&mut posted, &mut bufs);
        stage(&mut a, &data);
        flush(&mut a, ra, &mut wire);
        land(&mut b, rb, &wire, &mut posted);
        take(&mut posted, &mut bufs);
    }
    let per = start.elapsed().as_nanos() as f64 / f64::from(series) / SEGMENTS as f64;
    println!("{SEGMENTS} x {SIZE} B: {per:.1} ns per segment (stage, send, post, land, take)");
}
