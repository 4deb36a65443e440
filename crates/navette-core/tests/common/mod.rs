//! A tiny deterministic in-memory network of engines.
//!
//! Every engine has a [`VecMemory`]. A *link* is one direction of a rail:
//! packets that [`Engine::poll_transmit`] hands out are gathered into bytes,
//! the send is completed at once, and the bytes wait in the link's queue
//! until delivered to the peer's [`Engine::handle_packet`]. Each link is
//! FIFO (rails are reliable and ordered); links are delivered in a chosen
//! [`Order`], which is how packets of two rails between the same pair
//! overtake each other. Completions are collected per node, and a request
//! completing twice fails the test.
//!
//! Readable rendezvous requests (rails with `read_min`) are served as a
//! shared-memory driver would: the data of each offer in a plan is noted
//! as it leaves, and each read an engine asks for copies it from the
//! sender's memory (unless `refuse_reads`, which answers that it could
//! not).

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::time::Duration;

use indexmap::IndexMap;
use navette_core::memory;
use navette_core::{
    ChannelId, Engine, EngineConfig, MemRef, NowPiece, OutMsg, PieceSpec, ProtocolError, RailCaps,
    RailId, Rank, ReceiveMode, RecvPiece, ReqId, RequestError, SendMode, Source, Status, TagMatch,
    VecMemory,
};

/// The channel every test uses unless it says otherwise.
pub const CH: ChannelId = ChannelId::DEFAULT;

/// Rail capabilities with a rendezvous threshold and a fragment size.
pub fn caps(rdv_threshold: usize, max_fragment: usize) -> RailCaps {
    RailCaps {
        rdv_threshold,
        max_fragment,
        ..RailCaps::default()
    }
}

/// Deterministic test data: `len` bytes that depend on `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9).wrapping_add(len as u64));
    (0..len).map(|_| rng.next() as u8).collect()
}

/// SplitMix64: small, seeded, good enough for delivery orders.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// In which order queued packets are delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Links in creation order, each drained in turn.
    Fifo,
    /// Links in reverse creation order, each drained in turn: with two rails
    /// the second rail's packets overtake the first's.
    Reverse,
    /// A seeded random link each time, and only part of the queue per round.
    Seeded(u64),
}

/// One direction of a rail.
#[derive(Debug)]
pub struct Link {
    pub from: usize,
    pub from_rail: RailId,
    pub to: usize,
    pub to_rail: RailId,
    pub queue: VecDeque<Vec<u8>>,
}

/// The engines, their memories and the links between them.
#[derive(Debug)]
pub struct Net {
    pub engines: Vec<Engine>,
    pub mems: Vec<VecMemory>,
    pub links: Vec<Link>,
    pub order: Order,
    rng: Rng,
    /// Completions per node, in completion order.
    pub events: Vec<IndexMap<ReqId, Result<Status, RequestError>>>,
    /// Protocol errors raised by `handle_packet`: (receiving node, error).
    pub errors: Vec<(usize, ProtocolError)>,
    pub now: Duration,
    /// Read offers that left with packets: (sender, receiver, send id,
    /// the data in the sender's memory).
    pub offers: Vec<(usize, usize, u32, MemRef)>,
    /// Reads made from offers.
    pub reads_made: usize,
    /// Readable requests the engines said will not be read
    /// (`Engine::poll_unread`); their offers, if noted, are dropped.
    pub reads_forgotten: usize,
    /// Answer every read as not made: the data is then asked for.
    pub refuse_reads: bool,
    /// Answer reads made with a packet written at once
    /// (`Engine::read_done_now`), queued on the link to the sender.
    pub answer_at_once: bool,
}

impl Net {
    /// `nodes` engines with default configuration, `rails` rails between
    /// every pair, all with `caps`.
    pub fn new(nodes: usize, rails: usize, caps: RailCaps) -> Self {
        Self::with_config(nodes, rails, caps, |_| EngineConfig::default())
    }

    /// As [`Self::new`], with the `default` strategy (one chunk per packet):
    /// for tests that look at or combine packets themselves.
    pub fn one_chunk_per_packet(nodes: usize, rails: usize, caps: RailCaps) -> Self {
        Self::with_config(nodes, rails, caps, |_| EngineConfig {
            strategy: navette_core::StrategyKind::Default,
            ..EngineConfig::default()
        })
    }

    /// As [`Self::new`], with each node's configuration from `config`
    /// (its rank and the job's size are set here).
    pub fn with_config(
        nodes: usize,
        rails: usize,
        caps: RailCaps,
        config: impl Fn(usize) -> EngineConfig,
    ) -> Self {
        let mut engines: Vec<Engine> = (0..nodes)
            .map(|i| {
                let mut c = config(i);
                c.rank = i as Rank;
                c.size = Some(nodes as u32);
                Engine::new(c)
            })
            .collect();
        let mut links = Vec::new();
        for a in 0..nodes {
            for b in a + 1..nodes {
                for _ in 0..rails {
                    let ra = engines[a].add_rail(b as Rank, caps);
                    let rb = engines[b].add_rail(a as Rank, caps);
                    links.push(Link::new(a, ra, b, rb));
                    links.push(Link::new(b, rb, a, ra));
                }
            }
        }
        Self {
            engines,
            mems: (0..nodes).map(|_| VecMemory::new()).collect(),
            links,
            order: Order::Fifo,
            rng: Rng::new(0),
            events: vec![IndexMap::new(); nodes],
            errors: Vec::new(),
            now: Duration::ZERO,
            offers: Vec::new(),
            reads_made: 0,
            reads_forgotten: 0,
            refuse_reads: false,
            answer_at_once: false,
        }
    }

    /// Sets the delivery order.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        if let Order::Seeded(seed) = order {
            self.rng = Rng::new(seed);
        }
        self
    }

    fn tick(&mut self) -> Duration {
        self.now += Duration::from_micros(1);
        self.now
    }

    /// Polls every rail, round-robin, until no engine has a packet left;
    /// each packet is gathered, completed and queued. Returns whether
    /// anything was queued.
    pub fn transmit(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut round = false;
            self.serve_reads();
            for i in 0..self.links.len() {
                let now = self.tick();
                let (from, rail) = (self.links[i].from, self.links[i].from_rail);
                let Some(plan) = self.engines[from].poll_transmit(now, rail) else {
                    continue;
                };
                for &send_id in &plan.offers {
                    let (to, data) = self.engines[from]
                        .offered_data(send_id)
                        .expect("an offered request is pending");
                    assert_eq!(to as usize, self.links[i].to, "offered to its peer");
                    self.offers.push((from, self.links[i].to, send_id, data));
                }
                let mut bytes = Vec::new();
                plan.gather(&self.mems[from], &mut bytes)
                    .expect("plans name live memory");
                assert_eq!(bytes.len(), plan.len(), "gathered length");
                self.engines[from].handle_send_complete(now, rail);
                self.links[i].queue.push_back(bytes);
                round = true;
            }
            self.collect();
            if !round {
                return any;
            }
            any = true;
        }
    }

    /// Packets waiting in links.
    pub fn queued(&self) -> usize {
        self.links.iter().map(|l| l.queue.len()).sum()
    }

    /// Delivers queued packets in the net's order (all of them, or part of
    /// them for a seeded order).
    pub fn deliver(&mut self) {
        match self.order {
            Order::Fifo => {
                for i in 0..self.links.len() {
                    self.drain(i);
                }
            }
            Order::Reverse => {
                for i in (0..self.links.len()).rev() {
                    self.drain(i);
                }
            }
            Order::Seeded(_) => {
                let count = 1 + self.rng.below(self.queued());
                self.deliver_some(count);
            }
        }
    }

    /// Delivers up to `count` queued packets, each from a link picked by
    /// the net's seeded generator.
    pub fn deliver_some(&mut self, count: usize) {
        for _ in 0..count {
            let busy: Vec<usize> = (0..self.links.len())
                .filter(|&i| !self.links[i].queue.is_empty())
                .collect();
            if busy.is_empty() {
                return;
            }
            let i = busy[self.rng.below(busy.len())];
            self.deliver_one(i);
        }
    }

    fn drain(&mut self, link: usize) {
        while !self.links[link].queue.is_empty() {
            self.deliver_one(link);
        }
    }

    /// Delivers the oldest packet of `link`.
    pub fn deliver_one(&mut self, link: usize) {
        let bytes = self.links[link]
            .queue
            .pop_front()
            .expect("a packet is queued");
        let (to, rail) = (self.links[link].to, self.links[link].to_rail);
        let _ = self.inject(to, rail, &bytes);
    }

    /// Feeds raw bytes to node `to` as if received on `rail`; records and
    /// returns the outcome.
    pub fn inject(&mut self, to: usize, rail: RailId, bytes: &[u8]) -> Result<(), ProtocolError> {
        let now = self.tick();
        let result = self.engines[to].handle_packet(now, rail, bytes, &mut self.mems[to]);
        if let Err(e) = &result {
            self.errors.push((to, e.clone()));
        }
        self.serve_reads();
        self.collect();
        result
    }

    /// Makes the reads the engines ask for, from the offers noted, after
    /// forgetting the offers of requests refused without a read.
    pub fn serve_reads(&mut self) {
        for node in 0..self.engines.len() {
            while let Some((peer, send_id)) = self.engines[node].poll_unread() {
                if let Some(at) = self.offer_of(peer, node, send_id) {
                    self.offers.swap_remove(at);
                }
                self.reads_forgotten += 1;
            }
            while let Some(read) = self.engines[node].poll_read() {
                let offer = self.offer_of(read.peer, node, read.send_id);
                let data = offer.map(|at| self.offers.swap_remove(at).3);
                let landed = match data {
                    Some(data) if !self.refuse_reads => {
                        assert_eq!(data.len, read.dest.len, "read length");
                        let bytes = memory::read(&self.mems[read.peer as usize], data)
                            .expect("offered data stays registered until read")
                            .to_vec();
                        memory::write(&mut self.mems[node], read.dest, 0, &bytes);
                        self.reads_made += 1;
                        true
                    }
                    _ => false,
                };
                let back = self
                    .links
                    .iter()
                    .position(|l| l.from == node && l.to == read.peer as usize);
                match back {
                    Some(link) if landed && self.answer_at_once => {
                        let mut packet = vec![0; Engine::READ_DONE_LEN];
                        self.engines[node].read_done_now(read, &mut packet);
                        self.links[link].queue.push_back(packet);
                    }
                    _ => self.engines[node].handle_read_done(read, landed),
                }
            }
        }
    }

    /// Where the offer of `peer`'s readable request `send_id` to `node`
    /// is kept.
    fn offer_of(&self, peer: Rank, node: usize, send_id: u32) -> Option<usize> {
        self.offers
            .iter()
            .position(|&(from, to, id, _)| (from, to, id) == (peer as usize, node, send_id))
    }

    /// Transmits and delivers until nothing moves, then checks that no
    /// protocol error happened.
    pub fn run(&mut self) {
        self.run_allowing_errors();
        assert!(self.errors.is_empty(), "protocol errors: {:?}", self.errors);
    }

    /// Transmits and delivers until nothing moves.
    pub fn run_allowing_errors(&mut self) {
        for _ in 0..1_000_000 {
            self.transmit();
            if self.queued() == 0 {
                return;
            }
            self.deliver();
        }
        panic!("the network never went idle");
    }

    /// Transmits and returns the packets queued from `from` to `to`, as
    /// (receiving rail, bytes), without delivering them.
    pub fn capture(&mut self, from: usize, to: usize) -> Vec<(RailId, Vec<u8>)> {
        self.transmit();
        let mut out = Vec::new();
        for link in &mut self.links {
            if link.from == from && link.to == to {
                out.extend(link.queue.drain(..).map(|b| (link.to_rail, b)));
            }
        }
        out
    }

    /// The receiving rails of node `to` from node `from`.
    pub fn rails_from(&self, from: usize, to: usize) -> Vec<RailId> {
        self.links
            .iter()
            .filter(|l| l.from == from && l.to == to)
            .map(|l| l.to_rail)
            .collect()
    }

    /// Moves the engines' completions into `events`.
    pub fn collect(&mut self) {
        for (node, engine) in self.engines.iter_mut().enumerate() {
            while let Some(event) = engine.poll_event() {
                let previous = self.events[node].insert(event.req, event.outcome.clone());
                assert!(
                    previous.is_none(),
                    "node {node}: {} completed twice: {previous:?} then {:?}",
                    event.req,
                    event.outcome
                );
            }
        }
    }

    /// The outcome of `req` on `node`, if it completed.
    pub fn outcome(&self, node: usize, req: ReqId) -> Option<&Result<Status, RequestError>> {
        self.events[node].get(&req)
    }

    /// The status of `req`, which must have succeeded.
    #[track_caller]
    pub fn ok(&self, node: usize, req: ReqId) -> Status {
        match self.outcome(node, req) {
            Some(Ok(status)) => *status,
            other => panic!("node {node}: {req} expected to succeed, got {other:?}"),
        }
    }

    /// The error of `req`, which must have failed.
    #[track_caller]
    pub fn err(&self, node: usize, req: ReqId) -> RequestError {
        match self.outcome(node, req) {
            Some(Err(e)) => e.clone(),
            other => panic!("node {node}: {req} expected to fail, got {other:?}"),
        }
    }

    /// Whether `req` has not completed.
    pub fn pending(&self, node: usize, req: ReqId) -> bool {
        self.outcome(node, req).is_none()
    }

    /// Copies `bytes` into a new region of `node`'s memory.
    pub fn alloc(&mut self, node: usize, bytes: Vec<u8>) -> MemRef {
        self.mems[node].insert(bytes)
    }

    /// The bytes of `range` on `node`.
    pub fn read(&self, node: usize, range: MemRef) -> Vec<u8> {
        memory::read(&self.mems[node], range)
            .expect("range resolves")
            .to_vec()
    }

    /// Starts a message.
    pub fn begin(&mut self, from: usize, to: usize, tag: u64) -> OutMsg {
        self.engines[from]
            .send_begin(CH, to as Rank, tag)
            .expect("a rail leads to the peer")
    }

    /// Packs one piece of `out`.
    pub fn pack(&mut self, from: usize, out: &mut OutMsg, piece: &Piece, last: bool) -> ReqId {
        let data = self.alloc(from, piece.data.clone());
        let spec = PieceSpec {
            data,
            send: piece.send,
            recv: piece.recv,
            last,
        };
        self.engines[from].send_piece(out, spec)
    }

    /// Sends a whole message of `pieces`; returns the pieces' requests.
    pub fn send(&mut self, from: usize, to: usize, tag: u64, pieces: &[Piece]) -> Vec<ReqId> {
        let mut out = self.begin(from, to, tag);
        let n = pieces.len();
        pieces
            .iter()
            .enumerate()
            .map(|(i, p)| self.pack(from, &mut out, p, i + 1 == n))
            .collect()
    }

    /// Sends a whole message of `pieces` at once with its last piece
    /// readable, as a shared-memory driver does
    /// ([`Engine::send_readable_now`]) on the first link to `to`, if the
    /// engine agrees: the packet is queued on the link and the offer
    /// noted. Returns the large piece's request, or `None` when the
    /// engine refuses (the message numbered, nothing of it sent).
    pub fn send_readable_now(
        &mut self,
        from: usize,
        to: usize,
        tag: u64,
        pieces: &[Piece],
    ) -> Option<ReqId> {
        let link = self
            .links
            .iter()
            .position(|l| l.from == from && l.to == to)
            .expect("a link leads to the peer");
        let rail = self.links[link].from_rail;
        let mut out = self.begin(from, to, tag);
        let now: Vec<NowPiece<'_>> = pieces
            .iter()
            .map(|p| NowPiece {
                data: &p.data,
                send: p.send,
                recv: p.recv,
            })
            .collect();
        if !self.engines[from].can_send_readable_now(&out, rail, &now) {
            return None;
        }
        let large = pieces.last().expect("a piece").data.clone();
        let data = self.alloc(from, large);
        let mut packet = vec![0; Engine::readable_packet_len(&now)];
        let sent = self.engines[from].send_readable_now(&mut out, &now, data, &mut packet);
        assert_eq!(
            self.engines[from].offered_data(sent.send_id),
            Some((to as Rank, data)),
            "the engine holds the transfer"
        );
        self.offers.push((from, to, sent.send_id, data));
        self.links[link].queue.push_back(packet);
        Some(sent.req)
    }

    /// Starts a receive.
    pub fn recv_begin(&mut self, node: usize, source: Source, tag: TagMatch) -> ReqId {
        self.engines[node].recv_begin(CH, source, tag)
    }

    /// Posts one unpack of `len` bytes with the given modes; with
    /// `deferred` the destination is given later with [`Self::fill`].
    pub fn unpack(
        &mut self,
        node: usize,
        key: ReqId,
        len: usize,
        send: SendMode,
        recv: ReceiveMode,
        deferred: bool,
    ) -> Posted {
        let dest = self.alloc(node, vec![0xee; len]);
        let spec = RecvPiece {
            dest: (!deferred).then_some(dest),
            len,
            send,
            recv,
            exact: true,
        };
        let req = self.engines[node]
            .recv_piece(key, spec, &mut self.mems[node])
            .expect("an open message accepts pieces");
        self.collect();
        Posted { req, dest }
    }

    /// Gives a deferred piece its destination.
    pub fn fill(&mut self, node: usize, key: ReqId, posted: Posted) {
        self.engines[node]
            .recv_fill(key, posted.req, posted.dest, &mut self.mems[node])
            .expect("the piece is deferred");
        self.collect();
    }

    /// Ends a receive.
    pub fn recv_end(&mut self, node: usize, key: ReqId) -> ReqId {
        let end = self.engines[node]
            .recv_end(key)
            .expect("an open message can end");
        self.collect();
        end
    }

    /// Receives a whole message mirroring `pieces`: begin, unpack each
    /// (deferred ones filled right away), end. Returns the key, the
    /// unpacks and the end request.
    pub fn recv(
        &mut self,
        node: usize,
        source: Source,
        tag: TagMatch,
        pieces: &[Piece],
        deferred: bool,
    ) -> Received {
        let key = self.recv_begin(node, source, tag);
        let posted: Vec<Posted> = pieces
            .iter()
            .map(|p| self.unpack(node, key, p.data.len(), p.send, p.recv, deferred))
            .collect();
        if deferred {
            for &p in &posted {
                self.fill(node, key, p);
            }
        }
        let end = self.recv_end(node, key);
        Received { key, posted, end }
    }

    /// Sends `msg` from node 0 to node 1 on `tag`, the receive posted
    /// before the send or after the message arrived, running the net
    /// until idle after each step; returns the receive and the send's
    /// requests.
    pub fn exchange(
        &mut self,
        tag: u64,
        msg: &[Piece],
        posted_first: bool,
    ) -> (Received, Vec<ReqId>) {
        if posted_first {
            let r = self.recv(1, from(0), TagMatch::exact(tag), msg, false);
            let sent = self.send(0, 1, tag, msg);
            self.run();
            (r, sent)
        } else {
            let sent = self.send(0, 1, tag, msg);
            self.run();
            let r = self.recv(1, from(0), TagMatch::exact(tag), msg, false);
            self.run();
            (r, sent)
        }
    }

    /// What became of each of `posted` on `node`, which all completed: its
    /// data, or its error.
    #[track_caller]
    pub fn landed(&self, node: usize, posted: &[Posted]) -> Vec<Result<Vec<u8>, RequestError>> {
        posted
            .iter()
            .map(|p| match self.outcome(node, p.req) {
                Some(Ok(_)) => Ok(self.read(node, p.dest)),
                Some(Err(e)) => Err(e.clone()),
                None => panic!("{} pending", p.req),
            })
            .collect()
    }

    /// Checks that `received` completed with exactly `pieces` from `from`.
    #[track_caller]
    pub fn check_received(
        &self,
        node: usize,
        from: usize,
        tag: u64,
        r: &Received,
        pieces: &[Piece],
    ) {
        let matched = self.ok(node, r.key);
        assert_eq!((matched.peer, matched.tag), (from as Rank, tag), "match");
        let mut total = 0;
        for (i, (posted, piece)) in r.posted.iter().zip(pieces).enumerate() {
            let status = self.ok(node, posted.req);
            assert_eq!(status.len, piece.data.len(), "piece {i} length");
            assert!(
                self.read(node, posted.dest) == piece.data,
                "piece {i} ({} bytes) differs",
                piece.data.len()
            );
            total += piece.data.len();
        }
        let end = self.ok(node, r.end);
        assert_eq!(end.len, total, "message length");
        assert_eq!((end.peer, end.tag), (from as Rank, tag), "end status");
    }
}

impl Link {
    fn new(from: usize, from_rail: RailId, to: usize, to_rail: RailId) -> Self {
        Self {
            from,
            from_rail,
            to,
            to_rail,
            queue: VecDeque::new(),
        }
    }
}

/// One piece to pack.
#[derive(Clone, Debug)]
pub struct Piece {
    pub data: Vec<u8>,
    pub send: SendMode,
    pub recv: ReceiveMode,
}

impl Piece {
    /// A CHEAPER/CHEAPER piece of `len` pattern bytes.
    pub fn new(len: usize, seed: u64) -> Self {
        Self {
            data: pattern(len, seed),
            send: SendMode::Cheaper,
            recv: ReceiveMode::Cheaper,
        }
    }

    /// The same piece with other modes.
    pub fn modes(mut self, send: SendMode, recv: ReceiveMode) -> Self {
        self.send = send;
        self.recv = recv;
        self
    }
}

/// Pieces of the given lengths, CHEAPER/CHEAPER, data seeded by `seed`.
pub fn pieces(lens: &[usize], seed: u64) -> Vec<Piece> {
    lens.iter()
        .enumerate()
        .map(|(i, &len)| Piece::new(len, seed * 1000 + i as u64))
        .collect()
}

/// One posted unpack: its request and where its data lands.
#[derive(Clone, Copy, Debug)]
pub struct Posted {
    pub req: ReqId,
    pub dest: MemRef,
}

/// A whole receive.
#[derive(Clone, Debug)]
pub struct Received {
    pub key: ReqId,
    pub posted: Vec<Posted>,
    pub end: ReqId,
}

/// Receives from a given rank.
pub fn from(rank: usize) -> Source {
    Source::Rank(rank as Rank)
}

/// One packet made of the chunks of `packets` (captured packets of one
/// rail), as an aggregating strategy would send them.
pub fn aggregate(packets: Vec<(RailId, Vec<u8>)>) -> Vec<(RailId, Vec<u8>)> {
    let rail = packets[0].0;
    let body: Vec<u8> = packets
        .iter()
        .flat_map(|(_, p)| p[navette_wire::PacketHeader::LEN..].iter().copied())
        .collect();
    let mut packet = Vec::new();
    navette_wire::PacketHeader {
        chunk_count: u16::try_from(packets.len()).expect("a few packets"),
        body_len: u32::try_from(body.len()).expect("a small body"),
    }
    .encode(&mut packet);
    packet.extend_from_slice(&body);
    vec![(rail, packet)]
}
