//! Engine configuration and rail capabilities.

use std::time::Duration;

use navette_wire::Limits;

use crate::strategy::StrategyKind;
use crate::{ChannelId, Rank};

/// Settings of one engine. Every field has a default.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// This process's rank.
    pub rank: Rank,
    /// The number of ranks in the job, if known (the session sets it per
    /// node). A send that finds no rail to its peer then says why: the
    /// peer is outside the job ([`crate::UsageError::NotInJob`]) rather
    /// than unreachable.
    pub size: Option<u32>,
    /// Bounds applied when decoding packets from peers.
    pub limits: Limits,
    /// Most bytes of unexpected eager data and out-of-order chunks held from
    /// peers, each kept piece also costing [`crate::PIECE_COST`]; a packet
    /// that would exceed it closes its rail.
    pub max_buffered_bytes: usize,
    /// Most out-of-order sequenced chunks held per gate.
    pub max_reorder_chunks: usize,
    /// The strategy of channels that do not name one.
    pub strategy: StrategyKind,
    /// Channels that name their own strategy.
    pub channel_strategies: Vec<(ChannelId, StrategyKind)>,
}

impl EngineConfig {
    /// The strategy `channel` starts with.
    pub fn strategy_of(&self, channel: ChannelId) -> StrategyKind {
        self.channel_strategies
            .iter()
            .rev()
            .find(|(c, _)| *c == channel)
            .map_or(self.strategy, |&(_, kind)| kind)
    }

    /// Applies a strategy setting: a strategy name for every channel, and
    /// `CHANNEL=NAME` for one channel, separated by commas (for instance
    /// `aggregate,3=split`); later items win.
    pub fn set_strategies(&mut self, setting: &str) -> Result<(), StrategySettingError> {
        for item in setting.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                None => self.strategy = item.parse()?,
                Some((channel, name)) => {
                    let channel = channel
                        .trim()
                        .parse::<u16>()
                        .map_err(|_| StrategySettingError::Channel(channel.to_owned()))?;
                    self.channel_strategies
                        .push((ChannelId(channel), name.parse()?));
                }
            }
        }
        Ok(())
    }
}

/// A strategy setting that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StrategySettingError {
    /// An unknown strategy name.
    #[error(transparent)]
    Unknown(#[from] crate::strategy::UnknownStrategy),
    /// `CHANNEL=NAME` whose channel is not a number in 0..=65535.
    #[error("strategy setting: channel {0:?} is not a number in 0..=65535")]
    Channel(String),
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            rank: 0,
            size: None,
            limits: Limits::default(),
            max_buffered_bytes: 1 << 30,
            max_reorder_chunks: 1 << 16,
            strategy: StrategyKind::Aggregate,
            channel_strategies: Vec::new(),
        }
    }
}

/// What a driver states about one rail; strategies read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RailCaps {
    /// Pieces of this many bytes or more go by rendezvous; smaller ones are
    /// sent eagerly (0: everything by rendezvous).
    pub rdv_threshold: usize,
    /// Largest rendezvous data chunk in one packet.
    pub max_fragment: usize,
    /// Largest packet body the driver accepts.
    pub max_packet: usize,
    /// One-way latency of a small packet.
    pub latency: Duration,
    /// Bandwidth in bytes per second (0: unknown).
    pub bandwidth: u64,
    /// The receiver on this rail can read rendezvous data straight from
    /// the sender's memory, pieces of this many bytes on (at most
    /// [`Self::max_fragment`]): a rendezvous request sent to a peer that
    /// this rail alone reaches is then marked readable, the driver gives
    /// the receiver the data's address beside it ([`crate::PacketPlan::offers`]),
    /// and the receiver reads it as soon as its destination is known,
    /// without a clear-to-send and a data packet in between (see
    /// [`crate::Engine::poll_read`]). `None`: the data is always sent.
    pub read_min: Option<usize>,
}

impl Default for RailCaps {
    fn default() -> Self {
        Self {
            rdv_threshold: 16 << 10,
            max_fragment: 1 << 20,
            max_packet: 2 << 20,
            latency: Duration::from_micros(1),
            bandwidth: 0,
            read_min: None,
        }
    }
}
