//! The `sim` driver: many nodes in one process over a simulated network.
//!
//! A [`SimCluster`] owns a seeded [`SimNetwork`] on virtual time and one
//! [`Node`] per rank. Any thread that waits on any node drives the whole
//! cluster: due packets are delivered to their node's engine, idle rails get
//! their next packet, and when nothing else can happen virtual time jumps to
//! the next event. Driven from one thread, a run is fully deterministic for
//! a given seed. Driven from several threads (one per rank, as blocking
//! calls need), outcomes are the same but virtual times may differ between
//! runs: time jumps to the next event whenever a waiting thread finds
//! nothing to do, even if another thread is about to submit work.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use navette_core::{EngineConfig, RailCaps, RailId, Rank};
use navette_sim::NodeId;
pub use navette_sim::{LinkId, LinkSpec, LinkStats, SimEvent, SimNetwork};
use parking_lot::Mutex;

use crate::driver::Driver;
use crate::node::{NodeConfig, NodeCore};
use crate::{Node, Result};

/// How ranks are linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// Every pair of ranks (N² links: for small clusters).
    FullMesh,
    /// Each rank to its successor, the last to the first (N links).
    Ring,
}

/// Builds a [`SimCluster`].
#[derive(Clone, Debug)]
pub struct SimClusterBuilder {
    size: u32,
    seed: u64,
    rails: Vec<LinkSpec>,
    caps: RailCaps,
    topology: Topology,
    engine: EngineConfig,
    node: NodeConfig,
}

impl SimClusterBuilder {
    /// The seed of the network's randomness (jitter).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// One rail per linked pair, with this latency and bandwidth.
    pub fn link(mut self, spec: LinkSpec) -> Self {
        self.rails = vec![spec];
        self
    }

    /// One rail per spec for every linked pair (multi-rail).
    pub fn rails(mut self, specs: Vec<LinkSpec>) -> Self {
        self.rails = specs;
        self
    }

    /// Pieces of this size or more go by rendezvous.
    pub fn rdv_threshold(mut self, bytes: usize) -> Self {
        self.caps.rdv_threshold = bytes;
        self
    }

    /// Largest rendezvous data chunk per packet.
    pub fn max_fragment(mut self, bytes: usize) -> Self {
        self.caps.max_fragment = bytes.max(1);
        self
    }

    /// Which pairs are linked.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = topology;
        self
    }

    /// Engine settings of every node (the rank is set per node).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine = config;
        self
    }

    /// Wait settings of every node.
    pub fn node_config(mut self, config: NodeConfig) -> Self {
        self.node = config;
        self
    }

    /// Creates the network and the nodes.
    pub fn build(self) -> SimCluster {
        let mut net = SimNetwork::new(self.seed);
        net.add_nodes(self.size);
        let world = Arc::new(SimWorld {
            state: Mutex::new(World {
                net,
                nodes: Vec::new(),
                rails: HashMap::new(),
                links: vec![Vec::new(); self.size as usize],
                faults: Vec::new(),
            }),
        });
        let nodes: Vec<Node> = (0..self.size)
            .map(|rank| {
                let driver: Arc<dyn Driver> = world.clone();
                Node::new(
                    rank,
                    self.size,
                    self.engine.clone(),
                    self.node.clone(),
                    driver,
                )
            })
            .collect();
        {
            let mut w = world.state.lock();
            w.nodes = nodes.iter().map(|n| Arc::downgrade(n.core())).collect();
            for (a, b) in self.pairs() {
                for spec in &self.rails {
                    w.connect(&nodes, a, b, spec.clone(), self.caps);
                }
            }
        }
        SimCluster { world, nodes }
    }

    fn pairs(&self) -> Vec<(Rank, Rank)> {
        let n = self.size;
        match self.topology {
            Topology::FullMesh => (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                .collect(),
            Topology::Ring if n < 2 => Vec::new(),
            Topology::Ring if n == 2 => vec![(0, 1)],
            Topology::Ring => (0..n).map(|a| (a, (a + 1) % n)).collect(),
        }
    }
}

/// A simulated cluster: the network and its nodes.
#[derive(Debug)]
pub struct SimCluster {
    world: Arc<SimWorld>,
    nodes: Vec<Node>,
}

impl SimCluster {
    /// A builder for `size` ranks, fully meshed with one default rail
    /// (1 µs, 10 GB/s), seed 0.
    pub fn builder(size: u32) -> SimClusterBuilder {
        SimClusterBuilder {
            size,
            seed: 0,
            rails: vec![LinkSpec::default()],
            caps: RailCaps {
                max_fragment: 256 << 10,
                ..RailCaps::default()
            },
            topology: Topology::FullMesh,
            engine: EngineConfig::default(),
            node: NodeConfig {
                wait_timeout: Some(Duration::from_secs(60)),
                ..NodeConfig::default()
            },
        }
    }

    /// The node of `rank`.
    ///
    /// # Panics
    /// If `rank` is not below the cluster's size.
    pub fn node(&self, rank: Rank) -> &Node {
        &self.nodes[rank as usize]
    }

    /// Every node, by rank.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        self.world.state.lock().net.now()
    }

    /// The network's seed.
    pub fn seed(&self) -> u64 {
        self.world.state.lock().net.seed()
    }

    /// The rails between `a` and `b`, in creation order.
    pub fn links_between(&self, a: Rank, b: Rank) -> Vec<LinkId> {
        let w = self.world.state.lock();
        w.net
            .links_of(a)
            .iter()
            .copied()
            .filter(|&l| w.net.peer(a, l) == Ok(b))
            .collect()
    }

    /// Cuts a link: packets in flight on it are lost and the engines at both
    /// ends are told, as a connection reset would tell them; every request
    /// that needs the peer on the other side then fails.
    pub fn cut(&self, link: LinkId) {
        self.world.state.lock().close_link(link);
    }

    /// Runs `f` on the network (to read statistics, inject packets…). A
    /// link cut here, unlike with [`Self::cut`], is noticed by the engines
    /// only when they next send on it.
    pub fn with_network<R>(&self, f: impl FnOnce(&mut SimNetwork) -> R) -> R {
        f(&mut self.world.state.lock().net)
    }

    /// Protocol errors that closed rails, in order.
    pub fn faults(&self) -> Vec<String> {
        self.world.state.lock().faults.clone()
    }

    /// Drives the cluster until no packet is in flight and no rail has work.
    pub fn run_until_idle(&self) {
        while self.world.state.lock().step() {}
    }
}

/// The driver shared by every node of a cluster.
#[derive(Debug)]
pub struct SimWorld {
    state: Mutex<World>,
}

#[derive(Debug)]
struct World {
    net: SimNetwork,
    nodes: Vec<Weak<NodeCore>>,
    rails: HashMap<(NodeId, LinkId), RailId>,
    links: Vec<Vec<LinkId>>,
    faults: Vec<String>,
}

impl Driver for SimWorld {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn progress(&self, _node: &NodeCore) -> Result<bool> {
        Ok(self.state.lock().step())
    }
}

impl World {
    fn connect(&mut self, nodes: &[Node], a: Rank, b: Rank, spec: LinkSpec, caps: RailCaps) {
        let caps = RailCaps {
            latency: spec.latency,
            bandwidth: spec.bandwidth,
            ..caps
        };
        let link = self
            .net
            .connect(a, b, spec)
            .expect("ranks of the cluster are nodes of its network");
        for (me, peer) in [(a, b), (b, a)] {
            let rail = nodes[me as usize].core().port().add_rail(peer, caps);
            debug_assert_eq!(rail.0 as usize, self.links[me as usize].len());
            self.links[me as usize].push(link);
            self.rails.insert((me, link), rail);
        }
    }

    /// One round: deliver what is due, send on idle rails, else let time pass.
    fn step(&mut self) -> bool {
        let delivered = self.deliver();
        let sent = self.transmit();
        delivered || sent || self.net.advance()
    }

    fn deliver(&mut self) -> bool {
        let mut any = false;
        while let Some(event) = self.net.poll_event() {
            any = true;
            let now = self.net.now();
            match event {
                SimEvent::Delivered {
                    to, link, bytes, ..
                } => {
                    let (Some(core), Some(&rail)) = (self.core(to), self.rails.get(&(to, link)))
                    else {
                        continue;
                    };
                    let result = core.port().handle_packet(|| now, rail, &bytes);
                    if let Err(err) = result {
                        tracing::warn!(rank = to, %link, %err, "closing rail");
                        self.faults.push(format!("rank {to}: {err}"));
                        self.close_link(link);
                    }
                }
                SimEvent::SendDone { node, link } => {
                    if let (Some(core), Some(&rail)) =
                        (self.core(node), self.rails.get(&(node, link)))
                    {
                        core.port().handle_send_complete(now, rail);
                    }
                }
            }
        }
        any
    }

    fn transmit(&mut self) -> bool {
        let mut any = false;
        let now = self.net.now();
        for rank in 0..self.nodes.len() {
            let Some(core) = self.core(rank as NodeId) else {
                continue;
            };
            if !core.take_dirty() {
                continue;
            }
            let mut port = core.port();
            for (index, &link) in self.links[rank].iter().enumerate() {
                let rail = RailId(index as u32);
                let Some(plan) = port.poll_transmit(now, rail) else {
                    continue;
                };
                any = true;
                let mut bytes = Vec::with_capacity(plan.len());
                if let Err(err) = plan.gather(port.memory(), &mut bytes) {
                    // Only a cancelled request's memory can be missing: the
                    // packet is dropped and the rail freed.
                    tracing::warn!(rank, %err, "dropping packet");
                    port.handle_send_complete(now, rail);
                    continue;
                }
                if let Err(err) = self.net.send(rank as NodeId, link, bytes) {
                    tracing::warn!(rank, %err, "rail down");
                    port.close_rail(rail);
                }
            }
        }
        any
    }

    /// Cuts `link` and tells the engines at both ends, as a connection
    /// reset would.
    fn close_link(&mut self, link: LinkId) {
        let _ = self.net.cut(link);
        let mut ends: Vec<(NodeId, RailId)> = self
            .rails
            .iter()
            .filter(|((_, l), _)| *l == link)
            .map(|(&(node, _), &rail)| (node, rail))
            .collect();
        ends.sort_unstable();
        for (node, rail) in ends {
            if let Some(core) = self.core(node) {
                core.port().close_rail(rail);
            }
        }
    }

    fn core(&self, rank: NodeId) -> Option<Arc<NodeCore>> {
        self.nodes.get(rank as usize)?.upgrade()
    }
}
