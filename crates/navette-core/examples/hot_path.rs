//! The engine's small-message path, hot in cache, without any driver: one
//! engine sends 8-byte tagged messages to another through a byte vector,
//! the receive posted first. Prints the mean time of each step (each
//! includes the ~20 ns of reading the clock twice):
//!
//! ```sh
//! cargo run --release -p navette-core --example hot_path
//! ```
//!
//! A figure to compare before and after a change to the engine, on the same
//! machine and in the same minute; not a test.

use std::time::{Duration, Instant};

use navette_core::*;

mod pair;

fn main() {
    let caps = RailCaps {
        rdv_threshold: 256 * 1024,
        max_fragment: 1 << 20,
        ..RailCaps::default()
    };
    let (mut a, mut b, ra, rb) = pair::connected(caps);
    let mut ma = VecMemory::new();
    let mut mb = VecMemory::new();
    let src = ma.insert(vec![7u8; 8]);
    let dst = mb.insert(vec![0u8; 8]);
    let mut wire = Vec::new();
    let n = 1_000_000u32;
    let (mut t_send, mut t_tx, mut t_recv, mut t_rx, mut t_ev, mut t_now) =
        (0u128, 0u128, 0u128, 0u128, 0u128, 0u128);
    let now = Duration::ZERO;
    let t = || Instant::now();
    for _ in 0..n {
        let t0 = t();
        let out = a
            .send_begin(ChannelId::DEFAULT, 1, 5)
            .expect("the engines are connected");
        let _req = a.send_tagged(out, src);
        let t1 = t();
        let plan = a.poll_transmit(now, ra).expect("the engines are connected");
        wire.clear();
        plan.gather(&ma, &mut wire)
            .expect("the engines are connected");
        a.recycle_plan(plan);
        a.handle_send_complete(now, ra);
        while a.poll_event().is_some() {}
        let t2 = t();
        let rq = b.recv_tagged(
            ChannelId::DEFAULT,
            Source::Rank(0),
            TagMatch::exact(5),
            dst,
            &mut mb,
        );
        let t3 = t();
        b.handle_packet(now, rb, &wire, &mut mb)
            .expect("the engines are connected");
        let t4 = t();
        let ev = b.poll_event().expect("the engines are connected");
        assert_eq!(ev.req, rq);
        let t5 = t();
        t_send += (t1 - t0).as_nanos();
        t_tx += (t2 - t1).as_nanos();
        t_recv += (t3 - t2).as_nanos();
        t_rx += (t4 - t3).as_nanos();
        t_ev += (t5 - t4).as_nanos();
        // The same message again, to a receive waiting outside the engine.
        wire.resize(Engine::tagged_packet_len(8), 0);
        assert!(a.can_send_now(ChannelId::DEFAULT, 1, ra, 8));
        a.send_tagged_now(ChannelId::DEFAULT, 1, 5, &[7u8; 8], &mut wire);
        let want = RecvNow {
            channel: ChannelId::DEFAULT,
            source: Source::Rank(0),
            tag: TagMatch::exact(5),
        };
        let dest = mb.get_mut(dst.handle).expect("the destination resolves");
        let t6 = t();
        assert!(b.can_recv_now(want.channel, want.source));
        let landed = b.recv_now(rb, &wire, &want, dest);
        let t7 = t();
        assert!(matches!(landed, RecvNowOutcome::Landed(_)));
        t_now += (t7 - t6).as_nanos();
    }
    let n = n as u128;
    println!(
        "submit {} ns, transmit {} ns, post recv {} ns, handle_packet {} ns, event {} ns; \
         received at once (recv_now) {} ns",
        t_send / n,
        t_tx / n,
        t_recv / n,
        t_rx / n,
        t_ev / n,
        t_now / n
    );
}
