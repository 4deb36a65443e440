//! Errors of the simulated network.

use crate::{LinkId, NodeId};

/// Why a [`SimNetwork`](crate::SimNetwork) operation was refused.
///
/// An operation that fails changes nothing: no event is scheduled, no counter
/// moves and no randomness is drawn.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimError {
    /// The link exists but is cut ([`SimNetwork::cut`](crate::SimNetwork::cut)).
    #[error("{0} is cut")]
    LinkCut(LinkId),
    /// No link with this id was ever created by `connect`.
    #[error("unknown {0}")]
    UnknownLink(LinkId),
    /// The node is not one of the link's two endpoints.
    #[error("node {node} is not an endpoint of {link}")]
    NotAnEndpoint {
        /// The node that was named.
        node: NodeId,
        /// The link it was named with.
        link: LinkId,
    },
    /// No node with this id was added.
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
}
