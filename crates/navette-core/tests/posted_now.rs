//! Receives posted outside the engine ([`Engine::land_posted_now`]) get
//! exactly what the same receives posted in the engine would have got, in
//! the same order, whatever the packets: each test runs twin networks, one
//! posting every receive the usual way, the other keeping them in a list
//! as a node does (posting the list first wherever the engine says so),
//! and compares what every receive got.

mod common;

use common::{CH, Net, Piece, Rng, caps, from, pattern};
use navette_core::{
    ChannelId, Engine, MemRef, PostedBuffer, PostedNowOutcome, RailId, ReceiveMode, RecvNow, ReqId,
    RequestError, SendMode, Source, Status, StrategyKind, TagMatch,
};

/// A receive of the list, as a node keeps it; its key is its index
/// among the receives made (the test's handle on it).
type Waiting = PostedBuffer<usize>;

/// What became of a receive.
#[derive(Debug)]
enum Got {
    /// In the list, waiting.
    Listed,
    /// Landed from the list: status and bytes.
    Landed(Status, Vec<u8>),
    /// Posted in the engine: its request and destination.
    Posted(ReqId, MemRef),
}

/// Node 1 of a two-node network receiving from node 0, with or without a
/// list.
struct Side {
    net: Net,
    /// Whether receives go to a list when they may.
    listing: bool,
    list: Vec<Waiting>,
    got: Vec<Got>,
}

impl Side {
    fn new(strategy: StrategyKind, rails: usize, listing: bool) -> Self {
        let net = Net::with_config(2, rails, caps(1024, 600), |_| navette_core::EngineConfig {
            strategy,
            ..navette_core::EngineConfig::default()
        });
        Self {
            net,
            listing,
            list: Vec::new(),
            got: Vec::new(),
        }
    }

    fn engine(&mut self) -> &mut Engine {
        &mut self.net.engines[1]
    }

    /// Makes receive `want` into `len` bytes, as a node's `irecv` does:
    /// into the list where nothing is posted or unexpected on its channel
    /// in the engine, else the usual way after the list's receives of its
    /// channel (the whole list, as a node posts it).
    fn recv(&mut self, want: RecvNow, len: usize) -> usize {
        let index = self.got.len();
        let may = self.engine().can_recv_now(want.channel, want.source);
        if self.listing && may {
            self.list.push(Waiting::new(want, vec![0xee; len], index));
            self.got.push(Got::Listed);
            return index;
        }
        if self.list.iter().any(|w| w.want.channel == want.channel) {
            self.post_list();
        }
        let got = self.post(want, vec![0xee; len]);
        self.got.push(got);
        index
    }

    /// Posts every receive of the list, in order.
    fn post_list(&mut self) {
        for w in std::mem::take(&mut self.list) {
            self.got[w.key] = self.post(w.want, w.buf);
        }
    }

    /// Posts `want` into `buf` the usual way.
    fn post(&mut self, want: RecvNow, buf: Vec<u8>) -> Got {
        let dest = self.net.alloc(1, buf);
        let req = self.net.engines[1].recv_tagged(
            want.channel,
            want.source,
            want.tag,
            dest,
            &mut self.net.mems[1],
        );
        Got::Posted(req, dest)
    }

    /// Shows a packet to the list, then to the engine if it did not land.
    fn arrive(&mut self, rail: RailId, bytes: &[u8]) -> PostedNowOutcome {
        let outcome = if self.list.is_empty() {
            PostedNowOutcome::Unrelated
        } else {
            self.net.engines[1].land_posted_now(rail, bytes, self.list.as_mut_slice())
        };
        match outcome {
            PostedNowOutcome::Landed => {
                let got = &mut self.got;
                self.list.retain_mut(|w| match w.landed {
                    Some(status) => {
                        got[w.key] = Got::Landed(status, std::mem::take(&mut w.buf));
                        false
                    }
                    None => true,
                });
            }
            PostedNowOutcome::Unrelated => {
                let _ = self.net.inject(1, rail, bytes);
            }
            PostedNowOutcome::Post => {
                self.post_list();
                let _ = self.net.inject(1, rail, bytes);
            }
        }
        outcome
    }

    /// Moves every packet both ways until nothing moves; returns what the
    /// packets to node 1 made of the list.
    fn run(&mut self) -> Vec<PostedNowOutcome> {
        let mut outcomes = Vec::new();
        loop {
            let to_1 = self.net.capture(0, 1);
            let to_0 = self.net.capture(1, 0);
            if to_1.is_empty() && to_0.is_empty() {
                return outcomes;
            }
            for (rail, bytes) in to_1 {
                outcomes.push(self.arrive(rail, &bytes));
            }
            for (rail, bytes) in to_0 {
                let _ = self.net.inject(0, rail, &bytes);
            }
        }
    }

    /// Node 0 sends `data` on `channel` with `tag`.
    fn send(&mut self, channel: ChannelId, tag: u64, data: &[u8]) {
        let out = self.net.engines[0]
            .send_begin(channel, 1, tag)
            .expect("a rail leads to node 1");
        let data = self.net.alloc(0, data.to_vec());
        self.net.engines[0].send_tagged(out, data);
    }

    /// Node 0 sends a message of `pieces` on `channel` with `tag`.
    fn send_pieces(&mut self, channel: ChannelId, tag: u64, pieces: &[Piece]) {
        let mut out = self.net.engines[0]
            .send_begin(channel, 1, tag)
            .expect("a rail leads to node 1");
        for (i, piece) in pieces.iter().enumerate() {
            self.net.pack(0, &mut out, piece, i + 1 == pieces.len());
        }
    }

    /// Node 0 sends `data` on `channel` with `tag` through its open packet
    /// if it may (as `isend` does), else the usual way.
    fn stage(&mut self, channel: ChannelId, tag: u64, data: &[u8]) {
        if self.net.engines[0]
            .stage_tagged(channel, 1, tag, data)
            .is_none()
        {
            self.send(channel, tag, data);
        }
    }

    /// What receive `index` got: its outcome and bytes; `None` while it
    /// waits.
    fn outcome(&mut self, index: usize) -> Option<(Result<Status, RequestError>, Vec<u8>)> {
        self.net.collect();
        match &self.got[index] {
            Got::Listed => None,
            Got::Landed(status, bytes) => Some((Ok(*status), bytes[..status.len].to_vec())),
            &Got::Posted(req, dest) => {
                let outcome = self.net.outcome(1, req)?.clone();
                let bytes = match &outcome {
                    Ok(status) => self.net.read(1, dest)[..status.len].to_vec(),
                    Err(_) => Vec::new(),
                };
                Some((outcome, bytes))
            }
        }
    }
}

/// Twin networks, one listing its receives; every operation is applied to
/// both.
struct Twins {
    usual: Side,
    listed: Side,
}

impl Twins {
    fn new(strategy: StrategyKind, rails: usize) -> Self {
        Self {
            usual: Side::new(strategy, rails, false),
            listed: Side::new(strategy, rails, true),
        }
    }

    fn recv(&mut self, want: RecvNow, len: usize) -> usize {
        let index = self.usual.recv(want, len);
        assert_eq!(self.listed.recv(want, len), index);
        index
    }

    fn stage(&mut self, channel: ChannelId, tag: u64, data: &[u8]) {
        self.usual.stage(channel, tag, data);
        self.listed.stage(channel, tag, data);
    }

    fn send_pieces(&mut self, channel: ChannelId, tag: u64, pieces: &[Piece]) {
        self.usual.send_pieces(channel, tag, pieces);
        self.listed.send_pieces(channel, tag, pieces);
    }

    fn run(&mut self) -> Vec<PostedNowOutcome> {
        self.usual.run();
        self.listed.run()
    }

    /// Every receive got the same on both sides; returns how many landed
    /// from the list.
    #[track_caller]
    fn check(&mut self) -> usize {
        assert!(
            self.usual.net.errors.is_empty(),
            "{:?}",
            self.usual.net.errors
        );
        assert!(
            self.listed.net.errors.is_empty(),
            "{:?}",
            self.listed.net.errors
        );
        for index in 0..self.usual.got.len() {
            let listed = self.listed.outcome(index);
            let usual = self.usual.outcome(index);
            assert_eq!(listed, usual, "receive {index}");
        }
        self.listed
            .got
            .iter()
            .filter(|g| matches!(g, Got::Landed(..)))
            .count()
    }
}

fn want(channel: u16, source: Source, tag: TagMatch) -> RecvNow {
    RecvNow {
        channel: ChannelId(channel),
        source,
        tag,
    }
}

#[test]
fn a_burst_on_eight_channels_lands_from_one_packet() {
    let mut twins = Twins::new(StrategyKind::Aggregate, 1);
    let channels: Vec<u16> = (1..=8).collect();
    for &c in &channels {
        twins.recv(want(c, from(0), TagMatch::exact(u64::from(c))), 64);
    }
    for &c in &channels {
        twins.stage(ChannelId(c), u64::from(c), &pattern(4, u64::from(c)));
    }
    let outcomes = twins.run();
    assert_eq!(
        outcomes,
        [PostedNowOutcome::Landed],
        "one packet, landed whole"
    );
    assert_eq!(twins.check(), 8);
    for (index, &c) in channels.iter().enumerate() {
        let (status, bytes) = twins.listed.outcome(index).expect("landed");
        assert_eq!(status.expect("ok").tag, u64::from(c));
        assert_eq!(bytes, pattern(4, u64::from(c)));
    }
    // Each gate's numbers went on: the next burst lands too.
    for &c in &channels {
        twins.recv(want(c, from(0), TagMatch::exact(u64::from(c))), 64);
        twins.stage(ChannelId(c), u64::from(c), b"again");
    }
    assert!(twins.run().iter().all(|o| *o == PostedNowOutcome::Landed));
    assert_eq!(twins.check(), 16);
    let stats: Vec<_> = twins.listed.net.engines[1].gate_stats().collect();
    assert!(stats.iter().all(|s| s.messages_at_once == 2), "{stats:?}");
}

#[test]
fn one_channel_lands_in_posting_order_with_wildcards() {
    let mut twins = Twins::new(StrategyKind::Aggregate, 1);
    // The first receive takes any tag, the second tag 2 only, the third
    // any sender.
    twins.recv(want(0, from(0), TagMatch::any()), 16);
    twins.recv(want(0, from(0), TagMatch::exact(2)), 16);
    twins.recv(want(0, Source::Any, TagMatch::any()), 16);
    twins.stage(CH, 2, b"first");
    twins.stage(CH, 2, b"second");
    twins.stage(CH, 7, b"third");
    let outcomes = twins.run();
    assert_eq!(outcomes, [PostedNowOutcome::Landed]);
    assert_eq!(twins.check(), 3);
    let (_, first) = twins.listed.outcome(0).expect("landed");
    assert_eq!(first, b"first");
}

#[test]
fn what_only_the_usual_path_handles_posts_the_list() {
    // Too long for its buffer: truncated, as posted receives are.
    let mut twins = Twins::new(StrategyKind::Default, 1);
    twins.recv(want(0, from(0), TagMatch::exact(5)), 4);
    twins.stage(CH, 5, b"0123456789");
    assert_eq!(twins.run(), [PostedNowOutcome::Post]);
    assert_eq!(twins.check(), 0);
    let (outcome, _) = twins.listed.outcome(0).expect("failed");
    assert!(
        matches!(outcome, Err(RequestError::Truncated { .. })),
        "{outcome:?}"
    );

    // Rendezvous: the request matches the receive in the engine.
    let mut twins = Twins::new(StrategyKind::Aggregate, 1);
    twins.recv(want(0, from(0), TagMatch::exact(5)), 4096);
    twins.usual.send(CH, 5, &pattern(3000, 1));
    twins.listed.send(CH, 5, &pattern(3000, 1));
    assert_eq!(twins.run()[0], PostedNowOutcome::Post);
    assert_eq!(twins.check(), 0);

    // A message no receive of the list takes waits unexpected: the list
    // is posted first, and the next receive goes the usual way.
    let mut twins = Twins::new(StrategyKind::Aggregate, 1);
    twins.recv(want(0, from(0), TagMatch::exact(5)), 16);
    twins.stage(CH, 6, b"unexpected");
    assert_eq!(twins.run(), [PostedNowOutcome::Post]);
    twins.recv(want(0, from(0), TagMatch::exact(6)), 16);
    twins.stage(CH, 5, b"mine");
    twins.run();
    assert_eq!(twins.check(), 0);
    assert!(
        matches!(twins.listed.got[1], Got::Posted(..)),
        "the channel is not quiet"
    );
}

#[test]
fn other_channels_are_unrelated_to_the_list() {
    let mut twins = Twins::new(StrategyKind::Default, 1);
    twins.recv(want(1, from(0), TagMatch::exact(5)), 16);
    twins.stage(ChannelId(2), 5, b"elsewhere");
    assert_eq!(twins.run(), [PostedNowOutcome::Unrelated]);
    assert!(matches!(twins.listed.got[0], Got::Listed), "still waiting");
    twins.stage(ChannelId(1), 5, b"mine");
    assert_eq!(twins.run(), [PostedNowOutcome::Landed]);
    assert_eq!(twins.check(), 1);
}

#[test]
fn chunks_overtaken_across_rails_are_posted() {
    // Two rails, the second overtaking the first: a chunk ahead of its
    // gate's next number is left to the reorder buffer of the usual path.
    let mut twins = Twins::new(StrategyKind::Default, 2);
    for side in [&mut twins.usual, &mut twins.listed] {
        side.net.order = common::Order::Reverse;
    }
    for tag in 0..4 {
        twins.recv(want(0, from(0), TagMatch::exact(tag)), 16);
    }
    for tag in 0..4 {
        twins.stage(CH, tag, &pattern(8, tag));
    }
    let outcomes = twins.run();
    assert!(outcomes.contains(&PostedNowOutcome::Post), "{outcomes:?}");
    twins.check();
}

/// Random receives (channels, wildcards, sizes) and messages (eager,
/// staged, rendezvous), interleaved with deliveries, over one or two rails
/// and every shipped strategy: every receive gets the same both ways.
#[test]
fn listed_receives_get_what_posted_ones_get() {
    let strategies = [
        StrategyKind::Default,
        StrategyKind::Aggregate,
        StrategyKind::Split,
    ];
    let mut landed = 0;
    let mut seen = Vec::new();
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        let strategy = strategies[rng.below(3)];
        let rails = 1 + rng.below(2);
        let mut twins = Twins::new(strategy, rails);
        for step in 0..40 {
            match rng.below(10) {
                0..=3 => {
                    let channel = rng.below(3) as u16;
                    let source = if rng.below(4) == 0 {
                        Source::Any
                    } else {
                        from(0)
                    };
                    let tag = if rng.below(5) == 0 {
                        TagMatch::any()
                    } else {
                        TagMatch::exact(rng.below(3) as u64)
                    };
                    let len = [0, 8, 64, 2048][rng.below(4)];
                    twins.recv(want(channel, source, tag), len);
                }
                4..=6 => {
                    let channel = ChannelId(rng.below(3) as u16);
                    let tag = rng.below(3) as u64;
                    let len = [0, 4, 60, 700, 1500][rng.below(5)];
                    twins.stage(channel, tag, &pattern(len, seed * 64 + step));
                }
                7 => {
                    // A message of two pieces: its second piece may come
                    // to a gate holding chunks ahead of it.
                    let channel = ChannelId(rng.below(3) as u16);
                    let tag = rng.below(3) as u64;
                    let pieces = [Piece::new(8, step), Piece::new(rng.below(900), step + 1)];
                    twins.send_pieces(channel, tag, &pieces);
                }
                _ => seen.extend(twins.run()),
            }
        }
        seen.extend(twins.run());
        landed += twins.check();
    }
    // Every way a packet meets a list was taken, many times.
    for outcome in [
        PostedNowOutcome::Landed,
        PostedNowOutcome::Unrelated,
        PostedNowOutcome::Post,
    ] {
        let times = seen.iter().filter(|&&o| o == outcome).count();
        assert!(times >= 20, "{outcome:?} {times} times");
    }
    assert!(landed >= 50, "the lists landed {landed} messages in all");
}

/// A later piece that releases a message held ahead of its turn: that
/// message would wait unexpected before the list's receive, so the list is
/// posted first, and the next message of the gate goes to the receive
/// after it, as posted receives would have it.
#[test]
fn a_piece_that_releases_held_chunks_posts_the_list() {
    let mut twins = Twins::new(StrategyKind::Default, 1);
    // A receive of a two-piece message, posted the usual way on both
    // sides, then that message, then a tagged one.
    let mut first_pieces = Vec::new();
    for side in [&mut twins.usual, &mut twins.listed] {
        let key = side.net.recv_begin(1, from(0), TagMatch::exact(1));
        for _ in 0..2 {
            let (send, recv) = (SendMode::Cheaper, ReceiveMode::Cheaper);
            side.net.unpack(1, key, 4, send, recv, false);
        }
        side.net.recv_end(1, key);
        side.net
            .send(0, 1, 1, &[Piece::new(4, 1), Piece::new(4, 2)]);
        side.send(CH, 2, b"second");
        let net = &mut side.net;
        let packets = net.capture(0, 1);
        assert_eq!(packets.len(), 3, "one chunk per packet");
        let rail = packets[0].0;
        net.inject(1, rail, &packets[0].1).expect("valid");
        // The tagged message, ahead of the second piece: held.
        net.inject(1, rail, &packets[2].1).expect("valid");
        first_pieces.push((rail, packets[1].1.clone()));
    }
    let index = twins.recv(want(0, from(0), TagMatch::exact(2)), 16);
    assert!(matches!(twins.listed.got[index], Got::Listed));
    let (rail, piece) = first_pieces.pop().expect("listed side's");
    assert_eq!(twins.listed.arrive(rail, &piece), PostedNowOutcome::Post);
    let (rail, piece) = first_pieces.pop().expect("usual side's");
    twins.usual.arrive(rail, &piece);
    twins.stage(CH, 2, b"third");
    twins.run();
    twins.check();
    let (_, got) = twins.listed.outcome(index).expect("received");
    assert_eq!(got, b"second");
}

/// A packet whose first chunks land in the list and whose last does not
/// (too long for its receive) undoes the ones before it: the list is
/// posted whole, the usual path lands the packet, and the gates count and
/// number its messages once, as the usual side's do.
#[test]
fn a_packet_that_lands_in_part_undoes_its_first_chunks() {
    let mut twins = Twins::new(StrategyKind::Aggregate, 1);
    let channels = [1u16, 2, 1];
    for (i, &c) in channels.iter().enumerate() {
        let room = if i == 2 { 4 } else { 64 };
        twins.recv(want(c, from(0), TagMatch::exact(i as u64)), room);
    }
    for (i, &c) in channels.iter().enumerate() {
        twins.stage(ChannelId(c), i as u64, &pattern(10, i as u64));
    }
    assert_eq!(twins.run(), [PostedNowOutcome::Post], "one packet");
    assert_eq!(twins.check(), 0, "nothing landed from the list");
    let (outcome, _) = twins.listed.outcome(2).expect("complete");
    assert!(
        matches!(outcome, Err(RequestError::Truncated { .. })),
        "{outcome:?}"
    );
    let stats = |side: &Side| side.net.engines[1].gate_stats().collect::<Vec<_>>();
    assert_eq!(stats(&twins.listed), stats(&twins.usual));
    // The gates' numbers are where the usual path left them: the next
    // series lands from the list.
    for (i, &c) in channels.iter().enumerate() {
        twins.recv(want(c, from(0), TagMatch::exact(i as u64)), 64);
    }
    for (i, &c) in channels.iter().enumerate() {
        twins.stage(ChannelId(c), i as u64, b"again");
    }
    assert_eq!(twins.run(), [PostedNowOutcome::Landed]);
    assert_eq!(twins.check(), 3);
}
