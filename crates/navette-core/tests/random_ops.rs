//! Random sequences of sends, receives and partial deliveries between two
//! engines, both directions, on one to three rails: every message arrives
//! intact, in send order per tag, and nothing panics.

mod common;

use common::{Net, Order, Piece, Received, caps, from};
use navette_core::{ReceiveMode, ReqId, SendMode, TagMatch};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Msg {
    from: usize,
    tag: u64,
    pieces: Vec<Piece>,
    deferred: bool,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    /// Send the next unsent message of a direction.
    Send(usize),
    /// Post the receive of the next unreceived message of a direction.
    Recv(usize),
    /// Transmit, then deliver up to this many packets.
    Deliver(usize),
}

fn mode() -> impl Strategy<Value = (SendMode, ReceiveMode)> {
    (
        prop_oneof![
            Just(SendMode::Safer),
            Just(SendMode::Later),
            Just(SendMode::Cheaper)
        ],
        prop_oneof![Just(ReceiveMode::Express), Just(ReceiveMode::Cheaper)],
    )
}

fn msg() -> impl Strategy<Value = Msg> {
    let len = prop_oneof![3 => 0usize..80, 2 => 80usize..3000];
    (
        0..2usize,
        0..3u64,
        prop::collection::vec((len, mode(), any::<u64>()), 1..4),
        any::<bool>(),
    )
        .prop_map(|(from, tag, pieces, deferred)| Msg {
            from,
            tag,
            pieces: pieces
                .into_iter()
                .map(|(len, (send, recv), seed)| Piece::new(len, seed).modes(send, recv))
                .collect(),
            deferred,
        })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (0..2usize).prop_map(Action::Send),
        (0..2usize).prop_map(Action::Recv),
        (1..6usize).prop_map(Action::Deliver),
    ]
}

struct Run {
    net: Net,
    msgs: Vec<Msg>,
    sent: Vec<Option<Vec<ReqId>>>,
    received: Vec<Option<Received>>,
}

impl Run {
    /// The next message of direction `dir` lacking a send (or a receive).
    fn next(&self, dir: usize, sends: bool) -> Option<usize> {
        (0..self.msgs.len()).find(|&i| {
            self.msgs[i].from == dir
                && if sends {
                    self.sent[i].is_none()
                } else {
                    self.received[i].is_none()
                }
        })
    }

    fn send(&mut self, i: usize) {
        let m = &self.msgs[i];
        self.sent[i] = Some(self.net.send(m.from, 1 - m.from, m.tag, &m.pieces));
    }

    fn recv(&mut self, i: usize) {
        let m = &self.msgs[i];
        let tag = TagMatch::exact(m.tag);
        self.received[i] =
            Some(
                self.net
                    .recv(1 - m.from, from(m.from), tag, &m.pieces, m.deferred),
            );
    }

    fn apply(&mut self, action: Action) {
        match action {
            Action::Send(dir) => {
                if let Some(i) = self.next(dir, true) {
                    self.send(i);
                }
            }
            Action::Recv(dir) => {
                if let Some(i) = self.next(dir, false) {
                    self.recv(i);
                }
            }
            Action::Deliver(count) => {
                self.net.transmit();
                self.net.deliver_some(count);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_operations(
        msgs in prop::collection::vec(msg(), 1..12),
        actions in prop::collection::vec(action(), 0..60),
        rails in 1..4usize,
        threshold in prop_oneof![Just(0usize), Just(64), Just(1 << 20)],
        fragment in prop_oneof![Just(100usize), Just(1000), Just(1 << 20)],
        seed in any::<u64>(),
    ) {
        let net = Net::new(2, rails, caps(threshold, fragment)).order(Order::Seeded(seed));
        let n = msgs.len();
        let mut run = Run { net, msgs, sent: vec![None; n], received: vec![None; n] };
        for action in actions {
            run.apply(action);
        }
        for i in 0..n {
            if run.sent[i].is_none() {
                run.send(i);
            }
            if run.received[i].is_none() {
                run.recv(i);
            }
        }
        run.net.run();
        for (i, m) in run.msgs.iter().enumerate() {
            let r = run.received[i].as_ref().expect("posted");
            run.net.check_received(1 - m.from, m.from, m.tag, r, &m.pieces);
            for &req in run.sent[i].as_ref().expect("sent") {
                run.net.ok(m.from, req);
            }
        }
        for node in 0..2 {
            prop_assert_eq!(run.net.engines[node].buffered_bytes(), 0);
            prop_assert!(!run.net.engines[node].has_pending(1 - node as u32));
        }
    }
}
