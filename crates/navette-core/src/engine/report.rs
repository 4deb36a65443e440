//! What the engine is waiting for: a report of pending requests and rails,
//! for stall diagnostics (logged after a long wait, on demand, on SIGUSR1).

use std::fmt;
use std::time::Duration;

use super::recv::Posted;
use super::{Engine, RecvNow};
use crate::plan::SendProgress;
use crate::{ChannelId, Pending, RailId, Rank, ReqId, TagMatch};

/// Where a pending request stands in its protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PendingState {
    /// An eager send waiting in its gate's window for a rail.
    Queued,
    /// An eager send in a packet the driver has not finished sending.
    OnTheWire,
    /// A rendezvous send waiting for the receiver's clear-to-send.
    AwaitingClearToSend,
    /// A rendezvous send streaming its data.
    Sending {
        /// Bytes sent so far.
        sent: u64,
    },
    /// A receive waiting for a matching message.
    AwaitingMatch {
        /// Accepted sender (`None`: any).
        source: Option<Rank>,
        /// Accepted tags.
        tag: TagMatch,
    },
    /// A matched receive message waiting for pieces or their data.
    Unpacking {
        /// Pieces posted and not yet arrived.
        posted: usize,
        /// Pieces arrived whose data is still landing.
        outstanding: usize,
    },
    /// A paired piece waiting for its destination (`end_unpacking`).
    AwaitingDestination,
    /// Rendezvous data landing in the destination.
    Landing {
        /// Bytes received so far.
        received: u64,
    },
}

/// One pending request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRequest {
    /// The request.
    pub req: ReqId,
    /// The peer, once known.
    pub peer: Option<Rank>,
    /// The channel, when known.
    pub channel: Option<ChannelId>,
    /// The message tag, once known.
    pub tag: Option<u64>,
    /// Bytes the request moves.
    pub len: usize,
    /// Where it stands.
    pub state: PendingState,
    /// Time since it was submitted, when known: to within a millisecond,
    /// more coarsely only while some request has been pending through a
    /// long busy run (see the engine's birth marks); never less than the
    /// true age.
    pub age: Option<Duration>,
}

/// The state of one rail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailReport {
    /// The rail.
    pub rail: RailId,
    /// Its peer.
    pub peer: Rank,
    /// Closed after a failure.
    pub closed: bool,
    /// A packet is being sent on it.
    pub busy: bool,
    /// Chunks waiting in the windows of its peer.
    pub waiting_chunks: usize,
}

/// A receive that the layer above the engine keeps outside it until its
/// message comes (a receive posted ahead of its message, say): the engine
/// knows nothing of it, so that layer adds it to its reports
/// ([`Report::outside`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutsideReceive {
    /// What kind of receive it is, for people.
    pub kind: &'static str,
    /// What it accepts.
    pub want: RecvNow,
    /// Bytes its buffer has room for, when it has a buffer.
    pub room: Option<usize>,
}

/// Everything the engine waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// This engine's rank.
    pub rank: Rank,
    /// The engine's time.
    pub now: Duration,
    /// Pending requests, oldest first.
    pub requests: Vec<PendingRequest>,
    /// Receives waiting outside the engine, in posting order: none from
    /// [`Engine::report`], listed by the layer above it.
    pub outside: Vec<OutsideReceive>,
    /// Every rail.
    pub rails: Vec<RailReport>,
    /// Bytes of peer data held (unexpected, out of order).
    pub buffered_bytes: usize,
}

impl Engine {
    /// What the engine waits for, for diagnostics.
    pub fn report(&self) -> Report {
        let mut requests = Vec::new();
        let age = |req: &ReqId| self.births.born(*req).map(|t| self.now.saturating_sub(t));
        self.for_each_pending(|req, peer, channel, tag, len, state| {
            requests.push(PendingRequest {
                req,
                peer,
                channel,
                tag,
                len,
                state,
                age: age(&req),
            });
        });
        requests.sort_by_key(|r| (std::cmp::Reverse(r.age), r.req));
        let rails = self
            .rails
            .iter()
            .enumerate()
            .map(|(i, r)| RailReport {
                rail: RailId(i as u32),
                peer: r.peer,
                closed: r.closed,
                busy: r.in_flight.is_some(),
                waiting_chunks: self.peers.get(&r.peer).map_or(0, |p| {
                    p.gates.iter().map(|g| self.gates[g.0].window.len()).sum()
                }),
            })
            .collect();
        Report {
            rank: self.config.rank,
            now: self.now,
            requests,
            outside: Vec::new(),
            rails,
            buffered_bytes: self.buffered,
        }
    }

    /// Calls `push` with every pending request: its id, peer, channel,
    /// tag and length when known, and where it stands.
    fn for_each_pending(
        &self,
        mut push: impl FnMut(ReqId, Option<Rank>, Option<ChannelId>, Option<u64>, usize, PendingState),
    ) {
        for gate in &self.gates {
            for chunk in gate.window.iter() {
                if let Pending::Eager {
                    done: Some((req, status)),
                    ..
                } = chunk
                {
                    let (peer, tag) = (Some(status.peer), Some(status.tag));
                    push(
                        *req,
                        peer,
                        Some(gate.channel),
                        tag,
                        status.len,
                        PendingState::Queued,
                    );
                }
            }
        }
        for rail in &self.rails {
            for item in rail.in_flight.iter().flatten() {
                if let SendProgress::Piece { req, status } = item {
                    let (peer, tag) = (Some(status.peer), Some(status.tag));
                    push(*req, peer, None, tag, status.len, PendingState::OnTheWire);
                }
            }
        }
        for rdv in self.rdv_sends.values() {
            let state = if rdv.requested == 0 {
                PendingState::AwaitingClearToSend
            } else {
                PendingState::Sending { sent: rdv.sent }
            };
            let (peer, tag) = (Some(rdv.peer), Some(rdv.status.tag));
            let channel = Some(ChannelId(rdv.channel));
            push(rdv.req, peer, channel, tag, rdv.data.len, state);
        }
        for (&key, msg) in &self.recv_msgs {
            let (peer, tag, state) = match msg.bound {
                None => (
                    None,
                    None,
                    PendingState::AwaitingMatch {
                        source: msg.source.rank(),
                        tag: msg.tag,
                    },
                ),
                Some(bound) => (
                    Some(bound.peer),
                    Some(bound.tag),
                    PendingState::Unpacking {
                        posted: msg.posted.len(),
                        outstanding: msg.outstanding,
                    },
                ),
            };
            let req = msg.end.unwrap_or(key);
            push(req, peer, Some(msg.channel), tag, msg.total, state);
        }
        for (&channel, ch) in &self.channels {
            for posted in &ch.posted {
                if let Posted::Tagged(t) = posted {
                    let state = PendingState::AwaitingMatch {
                        source: t.source.rank(),
                        tag: t.tag,
                    };
                    push(t.req, None, Some(channel), None, t.dest.len, state);
                }
            }
        }
        for (&req, d) in &self.deferred {
            let (peer, tag) = (Some(d.status.peer), Some(d.status.tag));
            push(
                req,
                peer,
                None,
                tag,
                d.declared,
                PendingState::AwaitingDestination,
            );
        }
        for r in self.rdv_recvs.values() {
            let state = PendingState::Landing {
                received: r.received,
            };
            let (peer, tag) = (Some(r.peer), Some(r.status.tag));
            push(
                r.req,
                peer,
                Some(ChannelId(r.channel)),
                tag,
                r.dest.len,
                state,
            );
        }
    }

    /// The oldest pending request, if any: no report will ask the age of
    /// an older one.
    pub(super) fn oldest_pending(&self) -> Option<ReqId> {
        let mut oldest: Option<ReqId> = None;
        self.for_each_pending(|req, _, _, _, _, _| {
            oldest = Some(oldest.map_or(req, |o| o.min(req)));
        });
        oldest
    }
}

impl fmt::Display for PendingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Queued => write!(f, "queued in the window"),
            Self::OnTheWire => write!(f, "on the wire"),
            Self::AwaitingClearToSend => write!(f, "rendezvous: waiting for clear-to-send"),
            Self::Sending { sent } => write!(f, "rendezvous: {sent} bytes sent"),
            Self::AwaitingMatch { source, tag } => match source {
                Some(r) => write!(f, "waiting for a message from rank {r}, {tag}"),
                None => write!(f, "waiting for a message from any rank, {tag}"),
            },
            Self::Unpacking {
                posted,
                outstanding,
            } => write!(
                f,
                "unpacking: {posted} pieces not arrived, {outstanding} landing"
            ),
            Self::AwaitingDestination => write!(f, "waiting for its destination"),
            Self::Landing { received } => write!(f, "rendezvous: {received} bytes landed"),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "rank {}: {} pending requests, {} receives waiting outside the engine, \
             {} bytes buffered (engine time {:?})",
            self.rank,
            self.requests.len(),
            self.outside.len(),
            self.buffered_bytes,
            self.now
        )?;
        for r in &self.requests {
            let peer = r.peer.map_or("-".to_owned(), |p| p.to_string());
            let tag = r.tag.map_or("-".to_owned(), |t| t.to_string());
            let age = r.age.map_or("-".to_owned(), |a| format!("{a:.1?}"));
            writeln!(
                f,
                "  {} peer {peer} tag {tag} {} bytes, age {age}: {}",
                r.req, r.len, r.state
            )?;
        }
        for r in &self.outside {
            let awaiting = PendingState::AwaitingMatch {
                source: r.want.source.rank(),
                tag: r.want.tag,
            };
            let room = r.room.map_or("-".to_owned(), |n| n.to_string());
            writeln!(
                f,
                "  {} on channel {}, room {room} bytes: {awaiting}",
                r.kind, r.want.channel.0
            )?;
        }
        for r in &self.rails {
            let state = match (r.closed, r.busy) {
                (true, _) => "closed",
                (false, true) => "sending",
                (false, false) => "idle",
            };
            writeln!(
                f,
                "  rail {} to rank {}: {state}, {} chunks waiting",
                r.rail.0, r.peer, r.waiting_chunks
            )?;
        }
        Ok(())
    }
}
