//! Strategies: how a gate's window becomes the next packet for an idle rail.
//!
//! A [`Strategy`] is asked, when a rail is idle, to fill a [`PacketBuilder`]
//! from the window. Shared moves live in [`tactics`] so that a new strategy
//! is one file composed from them.

mod default;
pub mod tactics;

use std::fmt;

pub use default::DefaultStrategy;

use crate::{PacketBuilder, RailCaps, Window};

/// The policy that turns a window into packets.
pub trait Strategy: Send + fmt::Debug {
    /// The name used in configuration.
    fn name(&self) -> &'static str;

    /// Pushes the next packet's chunks for a rail with `caps` into `packet`,
    /// taking them from `window`. Pushing nothing means there is nothing to send.
    fn try_and_commit(&mut self, window: &mut Window, caps: &RailCaps, packet: &mut PacketBuilder);
}

/// The strategies this build knows, by configuration name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StrategyKind {
    /// Send chunks one per packet, in submission order.
    #[default]
    Default,
}

impl StrategyKind {
    /// A fresh strategy of this kind.
    pub fn build(self) -> Box<dyn Strategy> {
        match self {
            Self::Default => Box::new(DefaultStrategy),
        }
    }

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
        }
    }
}

/// A strategy name that no strategy answers to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {0:?} (known: default)")]
pub struct UnknownStrategy(pub String);

impl std::str::FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "default" => Ok(Self::Default),
            other => Err(UnknownStrategy(other.to_owned())),
        }
    }
}
