//! Losing a peer: every request that depends on it fails, nothing waits.

use super::incoming::Incoming;
use super::piece::Piece;
use super::recv::Posted;
use super::{Engine, GateId, sorted_keys};
use crate::plan::SendProgress;
use crate::{Pending, Rank, RequestError, Source};

impl Engine {
    /// Fails `peer`: its rails close, and every request that needs it fails
    /// with [`RequestError::PeerUnreachable`]: sends waiting in its windows
    /// or in flight, rendezvous in either direction, receive messages bound
    /// to it, and posted receives that only it could match. Complete
    /// unexpected messages from it stay receivable; partial ones are dropped.
    /// Later sends to it are refused.
    pub fn fail_peer(&mut self, peer: Rank) {
        let err = RequestError::PeerUnreachable { peer };
        let Some((peer_index, _, p)) = self.peers.get_full_mut(&peer) else {
            return;
        };
        let (rails, gates) = (p.rails.clone(), p.gates.clone());
        // Staged messages are lost with their packets: `staged_outcome`
        // reports it.
        let (waited, lost) = p.open.drop_all();
        if waited {
            super::open::unstage_peer(&mut self.staged_peers, peer_index);
        }
        if lost > 0 {
            self.lost_detached += lost as u64;
            tracing::warn!(
                peer,
                lost,
                "small sends nobody waits for were lost with their peer"
            );
        }
        for rail in rails {
            let r = &mut self.rails[rail.0 as usize];
            if !r.closed {
                r.closed = true;
                self.rails_closed += 1;
            }
            for item in r.in_flight.take().into_iter().flatten() {
                if let SendProgress::Piece { req, .. } = item {
                    self.complete(req, Err(err.clone()));
                }
            }
        }
        self.fail_windows(&gates, &err);
        self.fail_rendezvous(peer, &err);
        self.fail_receives(peer, &gates, &err);
        self.drop_partial_unexpected(&gates);
        // Failing receives may have queued refusals for the dead peer.
        for gate in &gates {
            while self.gates[gate.0].window.pop_front().is_some() {}
        }
    }

    fn fail_windows(&mut self, gates: &[GateId], err: &RequestError) {
        for gate in gates {
            while let Some(chunk) = self.gates[gate.0].window.pop_front() {
                if let Pending::Eager {
                    done: Some((req, _)),
                    ..
                } = chunk
                {
                    self.complete(req, Err(err.clone()));
                }
            }
        }
    }

    fn fail_rendezvous(&mut self, peer: Rank, err: &RequestError) {
        for id in sorted_keys(&self.rdv_sends, |r| r.peer == peer) {
            let rdv = self.rdv_sends.remove(&id).expect("collected above");
            self.complete(rdv.req, Err(err.clone()));
        }
        self.reads.retain(|r| r.peer != peer);
        for id in sorted_keys(&self.rdv_recvs, |r| r.peer == peer) {
            let rdv = self.rdv_recvs.remove(&id).expect("collected above");
            self.complete(rdv.req, Err(err.clone()));
            self.piece_done(rdv.key);
        }
    }

    fn fail_receives(&mut self, peer: Rank, gates: &[GateId], err: &RequestError) {
        let keys = sorted_keys(&self.recv_msgs, |m| match m.bound {
            Some(bound) => bound.peer == peer,
            None => m.source == Source::Rank(peer),
        });
        for key in keys {
            let channel = self.recv_msgs[&key].channel;
            if let Some(ch) = self.channels.get_mut(&channel) {
                ch.posted
                    .retain(|p| !matches!(p, Posted::Msg(k) if *k == key));
            }
            // A receive still waiting for its match will never be matched:
            // whoever waits for the match learns why.
            let msg = &self.recv_msgs[&key];
            if msg.bound.is_none() && !msg.quiet {
                self.complete(key, Err(err.clone()));
            }
            self.fail_msg(key, err.clone());
        }
        let mut lost = Vec::new();
        for ch in self.channels.values_mut() {
            ch.posted.retain(|p| match p {
                Posted::Tagged(t) if t.source == Source::Rank(peer) => {
                    lost.push(t.req);
                    false
                }
                _ => true,
            });
        }
        lost.sort_unstable();
        for req in lost {
            self.complete(req, Err(err.clone()));
        }
        for gate in gates {
            self.gates[gate.0]
                .incoming
                .retain(|_, i| matches!(i, Incoming::Unmatched { .. }));
        }
    }

    /// Unexpected messages that cannot complete any more (a piece never came,
    /// or a rendezvous piece that the dead peer would have to send) are
    /// dropped, and so are chunks waiting for a missing sequence number.
    fn drop_partial_unexpected(&mut self, gates: &[GateId]) {
        let mut released = 0;
        for gate in gates {
            let g = &mut self.gates[gate.0];
            released += g
                .reorder
                .take_all()
                .iter()
                .map(|p| p.piece.held())
                .sum::<usize>();
            g.incoming.retain(|_, i| match i {
                Incoming::Unmatched {
                    arrived, last_seen, ..
                } if !*last_seen || arrived.iter().any(Piece::is_rdv) => {
                    released += arrived.iter().map(Piece::held).sum::<usize>();
                    false
                }
                _ => true,
            });
        }
        self.release_bytes(released);
        let gates_state = &self.gates;
        for ch in self.channels.values_mut() {
            ch.unexpected
                .retain(|(g, msg)| gates_state[g.0].incoming.contains_key(msg));
        }
    }
}
