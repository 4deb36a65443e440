//! Two engines joined by one rail each way, for the examples that time the
//! engine without a driver (a packet is a byte vector handed across).

use navette_core::{Engine, EngineConfig, RailCaps, RailId};

/// Ranks 0 and 1, each with a rail of `caps` to the other: the engines and
/// their rails.
pub(crate) fn connected(caps: RailCaps) -> (Engine, Engine, RailId, RailId) {
    let engine = |rank| {
        Engine::new(EngineConfig {
            rank,
            ..EngineConfig::default()
        })
    };
    let (mut a, mut b) = (engine(0), engine(1));
    let ra = a.add_rail(1, caps);
    let rb = b.add_rail(0, caps);
    (a, b, ra, rb)
}
