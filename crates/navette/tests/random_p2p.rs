//! Random interleavings of the node's small-message paths over the
//! simulated network, both directions: tagged `isend`s (small ones share
//! open packets, large ones go by rendezvous), `irecv`s posted before or
//! after their message (waiting outside the engine, or posted, or matching
//! an unexpected message), packed messages of several pieces received
//! whole or piece by piece, rounds of progress and waits in any order.
//!
//! The network's seed is drawn too, and its rails: one, or two where a
//! fast jittery rail overtakes a slow one.
//!
//! The model: on each (channel, tag) of a direction, the k-th receive
//! posted gets the k-th message sent (messages do not overtake one another
//! between two ranks); every message arrives intact, every send and
//! receive completes, and nothing is left unmatched at the end.
//!
//! `shm` runs the same messages over shared memory, both ranks as threads
//! at once: sends written into the peer's ring at once and packets landed
//! at once by the driver, which the simulated network does not have; rank
//! 0 also makes RPC calls between its steps, which rank 1 serves inline
//! while it does its own sends and receives.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use common::{check, pattern};
use navette::sim::SimCluster;
use navette::{ChannelId, Gate, Node, Rank, ReceiveMode, Received, Request, SendMode, Status};
use navette_sim::LinkSpec;
use proptest::prelude::*;

/// Largest eager message of the cluster: longer ones go by rendezvous.
const RDV: usize = 4096;

#[derive(Clone, Debug)]
enum Kind {
    /// One `isend` of this many bytes, received by an `irecv`.
    Tagged(usize),
    /// A packed message of these pieces (length, sent SAFER or CHEAPER,
    /// received EXPRESS or CHEAPER), received by `begin_unpacking`.
    Packed(Vec<(usize, SendMode, ReceiveMode)>),
}

#[derive(Clone, Debug)]
struct Msg {
    /// 0: rank 0 to rank 1; 1: back.
    dir: usize,
    channel: u16,
    tag: u64,
    kind: Kind,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    /// Send the direction's next unsent message.
    Send(usize),
    /// Post the receive of the direction's next unreceived message (a
    /// packed one only once it was sent: its receive blocks).
    Recv(usize),
    /// A round of progress on a rank.
    Progress(usize),
    /// Wait for the oldest pending send of a direction.
    WaitSend(usize),
    /// Wait for the oldest pending receive of a direction.
    WaitRecv(usize),
}

fn piece() -> impl Strategy<Value = (usize, SendMode, ReceiveMode)> {
    (
        prop_oneof![3 => 0usize..64, 1 => 64usize..1500],
        prop_oneof![Just(SendMode::Safer), Just(SendMode::Cheaper)],
        prop_oneof![Just(ReceiveMode::Express), Just(ReceiveMode::Cheaper)],
    )
}

fn msg() -> impl Strategy<Value = Msg> {
    let tagged = prop_oneof![
        6 => 0usize..100,
        2 => 100usize..2000,
        1 => (RDV + 1)..(3 * RDV),
    ]
    .prop_map(Kind::Tagged);
    let packed = prop::collection::vec(piece(), 1..4).prop_map(Kind::Packed);
    (
        0..2usize,
        1..4u16,
        0..3u64,
        prop_oneof![4 => tagged, 1 => packed],
    )
        .prop_map(|(dir, channel, tag, kind)| Msg {
            dir,
            channel,
            tag,
            kind,
        })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => (0..2usize).prop_map(Action::Send),
        3 => (0..2usize).prop_map(Action::Recv),
        2 => (0..2usize).prop_map(Action::Progress),
        1 => (0..2usize).prop_map(Action::WaitSend),
        1 => (0..2usize).prop_map(Action::WaitRecv),
    ]
}

/// The data of piece `piece` of message `index`.
fn data(index: usize, piece: usize, len: usize) -> Vec<u8> {
    pattern(len, (index * 8 + piece) as u64)
}

type Pieces = [(usize, SendMode, ReceiveMode)];

/// Sends message `i`, packed of `pieces`, and ends it (eager pieces only:
/// it leaves without its receiver).
fn send_packed(node: &Node, gate: Gate, tag: u64, i: usize, pieces: &Pieces) {
    let owned: Vec<Vec<u8>> = pieces
        .iter()
        .enumerate()
        .map(|(p, &(len, ..))| data(i, p, len))
        .collect();
    let mut msg = node.begin_packing(gate, tag).expect("begin_packing");
    for (bytes, &(_, send, recv)) in owned.iter().zip(pieces) {
        msg.pack(bytes, send, recv).expect("pack");
    }
    msg.end_packing().expect("end_packing");
}

/// Receives message `i`, packed of `pieces` by rank `from`, and checks it.
fn recv_packed(node: &Node, gate: Gate, tag: u64, i: usize, pieces: &Pieces, from: Rank) {
    let mut bufs: Vec<Vec<u8>> = pieces.iter().map(|&(len, ..)| vec![0u8; len]).collect();
    let mut msg = node.begin_unpacking(gate, tag).expect("begin_unpacking");
    for (buf, &(_, send, recv)) in bufs.iter_mut().zip(pieces) {
        msg.unpack(buf, send, recv).expect("unpack");
    }
    let status = msg.end_unpacking().expect("end_unpacking");
    assert_eq!((status.peer, status.tag), (from, tag), "message {i}");
    for (p, (buf, &(len, ..))) in bufs.iter().zip(pieces).enumerate() {
        check(buf, len, (i * 8 + p) as u64);
    }
}

/// Checks what the receive of tagged message `i` (`len` bytes, `tag`,
/// from rank `from`) got.
fn check_tagged(got: &Received, i: usize, len: usize, tag: u64, from: Rank) {
    assert_eq!(
        (got.status.peer, got.status.tag, got.status.len),
        (from, tag, len),
        "message {i}"
    );
    check(&got.data[..len], len, (i * 8) as u64);
}

struct Run<'n> {
    nodes: [&'n Node; 2],
    msgs: Vec<Msg>,
    /// Next message to send / to receive, per direction (indices into
    /// `msgs` of that direction, in order).
    queue: [Vec<usize>; 2],
    next_send: [usize; 2],
    next_recv: [usize; 2],
    sends: [VecDeque<(usize, Request<'n, Status>)>; 2],
    recvs: [VecDeque<(usize, Request<'n, Received>)>; 2],
    done: Vec<bool>,
}

impl<'n> Run<'n> {
    fn new(nodes: [&'n Node; 2], msgs: Vec<Msg>) -> Self {
        let queue = [0, 1].map(|d| {
            (0..msgs.len())
                .filter(|&i| msgs[i].dir == d)
                .collect::<Vec<_>>()
        });
        let done = vec![false; msgs.len()];
        Self {
            nodes,
            msgs,
            queue,
            next_send: [0; 2],
            next_recv: [0; 2],
            sends: [VecDeque::new(), VecDeque::new()],
            recvs: [VecDeque::new(), VecDeque::new()],
            done,
        }
    }

    fn gate(&self, i: usize, towards: Rank) -> Gate {
        Gate::new(ChannelId(self.msgs[i].channel), towards)
    }

    fn send(&mut self, dir: usize) {
        let Some(&i) = self.queue[dir].get(self.next_send[dir]) else {
            return;
        };
        self.next_send[dir] += 1;
        let (node, gate, tag) = (
            self.nodes[dir],
            self.gate(i, (1 - dir) as Rank),
            self.msgs[i].tag,
        );
        match &self.msgs[i].kind {
            Kind::Tagged(len) => {
                let request = node.isend(gate, tag, data(i, 0, *len)).expect("isend");
                self.sends[dir].push_back((i, request));
            }
            Kind::Packed(pieces) => send_packed(node, gate, tag, i, pieces),
        }
    }

    fn recv(&mut self, dir: usize) {
        let Some(&i) = self.queue[dir].get(self.next_recv[dir]) else {
            return;
        };
        let node = self.nodes[1 - dir];
        let (gate, tag) = (self.gate(i, dir as Rank), self.msgs[i].tag);
        match &self.msgs[i].kind {
            Kind::Tagged(len) => {
                // Room to spare now and then: a message may be shorter
                // than its receive.
                let room = len + i % 3;
                let request = node.irecv(gate, tag, vec![0u8; room]);
                self.recvs[dir].push_back((i, request));
            }
            Kind::Packed(pieces) => {
                // Its receive blocks until it has come: only once sent.
                if self.next_send[dir] <= self.next_recv[dir] {
                    return;
                }
                recv_packed(node, gate, tag, i, pieces, dir as Rank);
                self.done[i] = true;
            }
        }
        self.next_recv[dir] += 1;
    }

    /// Position of message `i` in its direction's order.
    fn position(&self, i: usize) -> usize {
        let dir = self.msgs[i].dir;
        self.queue[dir]
            .iter()
            .position(|&j| j == i)
            .expect("queued")
    }

    fn wait_send(&mut self, dir: usize) {
        // A send by rendezvous completes once its receive is posted: this
        // thread is both ranks, so it waits only for one that can end.
        let Some(&(i, _)) = self.sends[dir].front() else {
            return;
        };
        let eager = matches!(self.msgs[i].kind, Kind::Tagged(len) if len < RDV);
        if !eager && self.position(i) >= self.next_recv[dir] {
            return;
        }
        if let Some((i, request)) = self.sends[dir].pop_front() {
            let status = request.wait().expect("send");
            let Kind::Tagged(len) = self.msgs[i].kind else {
                unreachable!("only tagged sends are kept");
            };
            assert_eq!(status.len, len, "send of message {i}");
        }
    }

    fn wait_recv(&mut self, dir: usize) {
        // Only for a message that was sent.
        let Some(&(i, _)) = self.recvs[dir].front() else {
            return;
        };
        if self.position(i) >= self.next_send[dir] {
            return;
        }
        if let Some((i, request)) = self.recvs[dir].pop_front() {
            let got = request.wait().expect("receive");
            let Kind::Tagged(len) = self.msgs[i].kind else {
                unreachable!("only tagged receives are kept");
            };
            check_tagged(&got, i, len, self.msgs[i].tag, dir as Rank);
            self.done[i] = true;
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Send(d) => self.send(d),
            Action::Recv(d) => self.recv(d),
            Action::Progress(d) => {
                self.nodes[d].progress().expect("progress");
            }
            Action::WaitSend(d) => self.wait_send(d),
            Action::WaitRecv(d) => self.wait_recv(d),
        }
    }

    /// Sends and receives what is left, then waits for everything.
    fn finish(&mut self) {
        for dir in 0..2 {
            while self.next_send[dir] < self.queue[dir].len() {
                self.send(dir);
            }
        }
        for dir in 0..2 {
            while self.next_recv[dir] < self.queue[dir].len() {
                self.recv(dir);
            }
        }
        for dir in 0..2 {
            while !self.sends[dir].is_empty() {
                self.wait_send(dir);
            }
            while !self.recvs[dir].is_empty() {
                self.wait_recv(dir);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    })]

    #[test]
    fn messages_arrive_in_order_whatever_the_interleaving(
        msgs in prop::collection::vec(msg(), 1..24),
        actions in prop::collection::vec(action(), 0..60),
        seed in any::<u64>(),
        two_rails in any::<bool>(),
    ) {
        // A wait with no progress at all for 10 s fails (a guard against a
        // hang, not a timing assertion): a lost message shows as an error.
        let guard = navette::NodeConfig {
            wait_timeout: Some(Duration::from_secs(10)),
            ..navette::NodeConfig::default()
        };
        let mut builder = SimCluster::builder(2)
            .seed(seed)
            .rdv_threshold(RDV)
            .node_config(guard);
        if two_rails {
            builder = builder.rails(vec![
                LinkSpec::new(Duration::from_micros(50), 1_000_000_000),
                LinkSpec::new(Duration::from_micros(1), 10_000_000_000)
                    .with_jitter(Duration::from_micros(30)),
            ]);
        }
        let cluster = builder.build();
        let nodes = [cluster.node(0), cluster.node(1)];
        let mut run = Run::new(nodes, msgs);
        for action in actions {
            run.act(action);
        }
        run.finish();
        prop_assert!(run.done.iter().all(|d| *d), "every message received");
        for (rank, node) in nodes.iter().enumerate() {
            for channel in 1..4u16 {
                let left = node.probe(
                    navette::RecvFrom { channel: ChannelId(channel), source: navette::Source::Any },
                    navette::TagMatch::any(),
                );
                prop_assert!(matches!(left, Ok(None)), "rank {rank}, channel {channel}: {left:?}");
            }
        }
    }
}

/// Over shared memory, ranks as threads of this process: what the sim
/// cannot show, sends written into the peer's ring at once and packets
/// landed at once by the driver, with both ranks running concurrently.
mod shm {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    use navette::rpc::{Call, HandlerMode, HandlerResult};
    use navette::shm::ShmDriver;
    use navette::{ChannelId, Gate, Node, Rank, ReceiveMode, SendMode, init_shm};
    use navette_session::JOB_KEY_LEN;
    use navette_session::local::LocalBootstrap;
    use proptest::prelude::*;

    use super::{Duration, Kind, Msg, check_tagged, data, msg, recv_packed, send_packed};

    /// Packed messages keep a channel of their own here: their receives
    /// block, so each rank takes them last, after its tagged ones.
    const PACKED_CHANNEL: u16 = 4;

    fn msg_shm() -> impl Strategy<Value = Msg> {
        // Some above the shm driver's rendezvous threshold (about 33 KiB).
        let large = (33_000usize..70_000).prop_map(Kind::Tagged);
        prop_oneof![9 => msg(), 1 => (0..2usize, 1..4u16, 0..3u64, large)
            .prop_map(|(dir, channel, tag, kind)| Msg { dir, channel, tag, kind })]
        .prop_map(|mut m| {
            if matches!(m.kind, Kind::Packed(_)) {
                m.channel = PACKED_CHANNEL;
            }
            m
        })
    }

    /// The echo service rank 1 serves: a call's 8-byte header (its body's
    /// length, EXPRESS) then its body (CHEAPER, into memory taken after
    /// the header), both sent back.
    const ECHO: &str = "random_p2p.echo";

    /// Body of call `k` of `len` bytes.
    fn call_body(k: usize, len: usize) -> Vec<u8> {
        data(1000 + k, 0, len)
    }

    /// [`super::common::echo`], counted in `served`.
    fn echo(call: Call<'_>, served: &AtomicUsize) -> HandlerResult {
        super::common::echo(call)?;
        served.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Rank 0's call `k` of a `len`-byte body to rank 1, checked.
    fn call(node: &Node, k: usize, len: usize) {
        let header = (len as u64).to_le_bytes();
        let body = call_body(k, len);
        let reply = node
            .call(1, ECHO, |msg| {
                msg.pack(&header, SendMode::Safer, ReceiveMode::Express)?;
                msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
            })
            .expect("call")
            .wait()
            .expect("reply");
        let mut msg = reply.unpacking();
        let mut back_header = [0u8; 8];
        msg.unpack_express(&mut back_header, SendMode::Safer)
            .expect("reply header");
        assert_eq!(back_header, header, "call {k}");
        let mut back = vec![0u8; len];
        msg.unpack_cheaper(&mut back, SendMode::Cheaper)
            .expect("reply body");
        msg.end_unpacking().expect("end of reply");
        assert!(back == body, "call {k}: body differs");
    }

    /// Rank `me`'s part: its sends and its receives' posts interleaved as
    /// `choices` say, with rounds of progress (and rank 0's `calls`); then
    /// every wait; then the packed messages' receives, in order.
    fn rank_part(node: &Node, me: usize, msgs: &[Msg], choices: &[u8], calls: &[usize]) {
        // Rank 0 makes its calls (each waited for) between its steps.
        let mut calls = if me == 0 { calls } else { &[][..] }
            .iter()
            .copied()
            .enumerate()
            .peekable();
        let peer = (1 - me) as Rank;
        let gate = |m: &Msg| Gate::new(ChannelId(m.channel), peer);
        let out: Vec<usize> = (0..msgs.len()).filter(|&i| msgs[i].dir == me).collect();
        let tagged_in: Vec<usize> = (0..msgs.len())
            .filter(|&i| msgs[i].dir != me && matches!(msgs[i].kind, Kind::Tagged(_)))
            .collect();
        let (mut next_out, mut next_in) = (0, 0);
        let (mut sends, mut recvs) = (Vec::new(), Vec::new());
        let mut choice = choices.iter().cycle();
        while next_out < out.len() || next_in < tagged_in.len() {
            // Each step sends or posts one (so the loop ends), after a
            // round of progress when the choice's high bit says so.
            let pick = *choice.next().unwrap_or(&0);
            if pick & 0x80 != 0 {
                node.progress().expect("progress");
            }
            if pick & 0x40 != 0
                && let Some((k, len)) = calls.next()
            {
                call(node, k, len);
            }
            if (pick & 1 == 0 && next_out < out.len()) || next_in == tagged_in.len() {
                let i = out[next_out];
                next_out += 1;
                let m = &msgs[i];
                match &m.kind {
                    Kind::Tagged(len) => {
                        let request = node.isend(gate(m), m.tag, data(i, 0, *len)).expect("isend");
                        sends.push((i, request));
                    }
                    Kind::Packed(pieces) => send_packed(node, gate(m), m.tag, i, pieces),
                }
            } else {
                let i = tagged_in[next_in];
                next_in += 1;
                let Kind::Tagged(len) = msgs[i].kind else {
                    unreachable!("tagged")
                };
                let request = node.irecv(gate(&msgs[i]), msgs[i].tag, vec![0u8; len + i % 3]);
                recvs.push((i, len, request));
            }
        }
        for (k, len) in calls {
            call(node, k, len);
        }
        for (i, request) in sends {
            let Kind::Tagged(len) = msgs[i].kind else {
                unreachable!("tagged")
            };
            assert_eq!(
                request.wait().expect("send").len,
                len,
                "send of message {i}"
            );
        }
        for (i, len, request) in recvs {
            check_tagged(&request.wait().expect("receive"), i, len, msgs[i].tag, peer);
        }
        for (i, m) in msgs.iter().enumerate().filter(|(_, m)| m.dir != me) {
            let Kind::Packed(pieces) = &m.kind else {
                continue;
            };
            recv_packed(node, gate(m), m.tag, i, pieces, peer);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 24,
            ..ProptestConfig::default()
        })]

        #[test]
        fn both_ranks_at_once_over_shm(
            msgs in prop::collection::vec(msg_shm(), 1..32),
            choices in [prop::collection::vec(any::<u8>(), 1..64), prop::collection::vec(any::<u8>(), 1..64)],
            calls in prop::collection::vec(prop_oneof![4 => 0usize..2000, 1 => 33_000usize..50_000], 0..8),
        ) {
            let mut job = [0u8; 8];
            getrandom::fill(&mut job).expect("random bytes");
            let ranks = LocalBootstrap::job(2, u64::from_le_bytes(job), [0x5a; JOB_KEY_LEN]);
            let config = super::common::test_config(Duration::from_secs(60));
            let (msgs, choices, calls) = (&msgs, &choices, &calls);
            // Rank 1 serves before rank 0 may call.
            let registered = Barrier::new(2);
            let served = Arc::new(AtomicUsize::new(0));
            super::common::run_ranks(ranks, &config, init_shm, |node: &Node, _: &ShmDriver| {
                let me = node.rank() as usize;
                if me == 1 {
                    let served = Arc::clone(&served);
                    node.register_service(ECHO, HandlerMode::Inline, move |c| echo(c, &served))
                        .expect("register");
                }
                registered.wait();
                rank_part(node, me, msgs, &choices[me], calls);
                if me == 1 {
                    node.serve_until(|| served.load(Ordering::Acquire) == calls.len())
                        .expect("serve");
                }
            });
        }
    }
}
