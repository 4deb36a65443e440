//! Strategies: how a gate's window becomes the next packet for an idle rail.
//!
//! When a rail goes idle, the engine asks the strategies of the gates that
//! share it (the gates of its peer, one per channel, in turns) to fill one
//! [`PacketBuilder`] from their windows. A strategy sees the window and
//! each chunk's attributes ([`crate::window::ChunkInfo`]: tag, sequence,
//! length, receive mode, priority), the idle rail and every open rail to
//! the same peer ([`RailView`]), and answers whether the packet may take
//! chunks of the next gate too ([`Fill`]). Shared moves live in [`tactics`]
//! so that a new strategy is one file composed from them.
//!
//! Set-up: a channel's strategy is built by [`StrategyKind::build`] when
//! the channel is first used (or given with
//! [`crate::Engine::set_strategy`]) and keeps whatever state it likes
//! between calls. A strategy need not ship with the engine: any type that
//! implements [`Strategy`] can be given to a channel (in `navette`, with
//! `Node::set_custom_strategy`; its tests have one, in a few lines, built
//! from [`tactics`]).
//!
//! Shipped:
//! * `default` ([`DefaultStrategy`]): one chunk per packet, as submitted;
//! * `aggregate` ([`AggregateStrategy`], the default): small chunks of
//!   several messages, tags and channels share a packet up to the rail's
//!   eager limit, control chunks and EXPRESS pieces first;
//! * `split` ([`SplitStrategy`]): multi-rail; small packets go to the rail
//!   that delivers them soonest, rendezvous data is cut over the rails in
//!   proportion to their bandwidth.

mod aggregate;
mod default;
mod split;
pub mod tactics;

use std::fmt;
use std::time::Duration;

pub use aggregate::AggregateStrategy;
pub use default::DefaultStrategy;
pub use split::SplitStrategy;

use crate::{PacketBuilder, RailCaps, RailId, Window};

/// The policy that turns windows into packets.
pub trait Strategy: Send + fmt::Debug {
    /// The name used in configuration.
    fn name(&self) -> &'static str;

    /// Pushes chunks of `window` into `packet` for the idle rail
    /// `rails.rail`. `packet` may already hold chunks of other gates of the
    /// same peer. Pushing nothing leaves the window to a later packet (or
    /// another rail). Returns whether the packet may take more chunks from
    /// the next gate's strategy.
    fn try_and_commit(
        &mut self,
        window: &mut Window,
        rails: &RailView<'_>,
        packet: &mut PacketBuilder,
    ) -> Fill;

    /// Whether the small one-piece tagged messages of this strategy's
    /// channel go, as they are submitted, into their peer's open packet,
    /// which the next idle rail takes before the windows (see
    /// `Engine::stage_tagged`): aggregation built as messages come rather
    /// than from the window, for the same packets. The default is false:
    /// they go through the window, to [`Self::try_and_commit`].
    fn stages_small(&self) -> bool {
        false
    }
}

/// Whether a packet is complete after a strategy's turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Send it as it is.
    Done,
    /// Other gates' strategies may add chunks.
    Open,
}

/// What a strategy sees of one rail to the peer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RailInfo {
    /// The rail.
    pub id: RailId,
    /// What its driver states about it.
    pub caps: RailCaps,
    /// Whether it can take a packet now (else it is sending one).
    pub idle: bool,
    /// Bytes of the packet it is sending (0 when idle).
    pub in_flight: usize,
    /// Bytes per second: measured on the rail's large packets once there
    /// is a measure, else what its driver states (0: unknown).
    pub bandwidth: u64,
}

impl RailInfo {
    /// How long, from now, a packet of `len` bytes given to this rail
    /// would take to arrive: the packet in flight first, then the rail's
    /// latency and `len` at its bandwidth (unknown bandwidth counts as
    /// free, so that rails that state nothing compare by latency alone).
    pub fn delivery_time(&self, len: usize) -> Duration {
        let wire = |bytes: usize| match self.bandwidth {
            0 => Duration::ZERO,
            bw => Duration::from_secs_f64(bytes as f64 / bw as f64),
        };
        wire(self.in_flight) + self.caps.latency + wire(len)
    }
}

/// The idle rail that asks for a packet, among the open rails to its peer.
#[derive(Clone, Copy, Debug)]
pub struct RailView<'a> {
    /// The idle rail.
    pub rail: RailInfo,
    /// Every open rail to the same peer, this one included.
    pub rails: &'a [RailInfo],
}

/// The strategies this build knows, by configuration name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StrategyKind {
    /// Send chunks one per packet, in submission order.
    Default,
    /// Coalesce small chunks into shared packets.
    #[default]
    Aggregate,
    /// Spread packets over the rails by speed.
    Split,
}

impl StrategyKind {
    /// Every kind, in configuration-name order of documentation.
    pub const ALL: [Self; 3] = [Self::Default, Self::Aggregate, Self::Split];

    /// A fresh strategy of this kind.
    pub fn build(self) -> Box<dyn Strategy> {
        match self {
            Self::Default => Box::new(DefaultStrategy),
            Self::Aggregate => Box::new(AggregateStrategy::default()),
            Self::Split => Box::new(SplitStrategy::default()),
        }
    }

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Aggregate => "aggregate",
            Self::Split => "split",
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy name that no strategy answers to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {0:?} (known: default, aggregate, split)")]
pub struct UnknownStrategy(pub String);

impl std::str::FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == s.trim())
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}

#[cfg(test)]
mod tests;
