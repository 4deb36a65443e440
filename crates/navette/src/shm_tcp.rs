//! The `shm+tcp` driver: shared memory and tcp at once, so that every peer
//! of this host is reachable over two rails (`NAVETTE_DRIVER=shm+tcp`).
//!
//! Each inner driver declares its rail to every peer on the same node:
//! the engine then owns two rails per peer and hands a packet to whichever
//! of them is idle when its driver asks. This driver asks the shm rails
//! first in every round, so tcp carries what comes while the shm rail to
//! that peer is busy (a full ring, a long rendezvous being copied). Both
//! rails feed the same gate, whose sequence numbers put messages back in
//! order whatever rail they took. Weighing the rails by their measured
//! speed is a scheduling strategy's job, not a driver's.
//!
//! Failures: the engine fails a peer as a whole when any of its rails
//! closes (a rail does not retransmit, so a packet may be lost with it).
//! A tcp rail that fails (its connection refused, reset or timed out)
//! therefore makes the peer unreachable over shm too.
//!
//! Waiting: a thread that blocks sleeps on the shm doorbell, which peers
//! ring for shm packets and [`Driver::wake`] rings for local work; tcp
//! has no say in that sleep, so it lasts at most [`TCP_LOOK_EVERY`] and tcp
//! traffic is seen at the latest then (only a thread that found nothing to
//! do for thousands of rounds blocks; see [`crate::NodeConfig`]).

use std::sync::Arc;
use std::time::Duration;

use navette_session::Bootstrap;

use crate::Result;
use crate::driver::Driver;
use crate::node::NodeCore;
use crate::shm::ShmDriver;
use crate::tcp::TcpDriver;

/// Longest a blocked thread sleeps on the shm doorbell before it looks at
/// the tcp connections again.
pub const TCP_LOOK_EVERY: Duration = Duration::from_millis(1);

/// The shm and tcp drivers of one rank, run together.
#[derive(Debug)]
pub struct ShmTcpDriver {
    shm: Arc<ShmDriver>,
    tcp: Arc<TcpDriver>,
    bootstrap: Arc<dyn Bootstrap>,
}

impl ShmTcpDriver {
    /// Both drivers, each already set up with the other ranks
    /// ([`ShmDriver::open`], [`TcpDriver::bind`]).
    pub fn new(shm: Arc<ShmDriver>, tcp: Arc<TcpDriver>, bootstrap: Arc<dyn Bootstrap>) -> Self {
        Self {
            shm,
            tcp,
            bootstrap,
        }
    }

    /// Declares both drivers' rails on `node`: shm first, then tcp.
    pub fn attach(&self, node: &NodeCore) {
        self.shm.attach(node);
        self.tcp.attach(node);
    }

    /// The shared-memory driver (for its statistics).
    pub fn shm(&self) -> &ShmDriver {
        &self.shm
    }

    /// The tcp driver (for its statistics).
    pub fn tcp(&self) -> &TcpDriver {
        &self.tcp
    }
}

impl Driver for ShmTcpDriver {
    fn name(&self) -> &'static str {
        "shm+tcp"
    }

    fn bytes_copied(&self) -> u64 {
        self.shm.bytes_copied() + self.tcp.bytes_copied()
    }

    fn progress(&self, node: &NodeCore) -> Result<bool> {
        // Shared memory first: its idle rails take the packets waiting.
        let shm = self.shm.progress(node)?;
        let tcp = self.tcp.progress(node)?;
        Ok(shm || tcp)
    }

    fn wait(&self, node: &NodeCore, timeout: Duration) -> Result<()> {
        self.shm.wait(node, timeout.min(TCP_LOOK_EVERY))
    }

    fn wake(&self) {
        self.shm.wake();
        self.tcp.wake();
    }

    fn send_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        data: &[u8],
        then: crate::driver::Then,
    ) -> Option<Result<navette_core::Status>> {
        self.shm.send_now(node, gate, tag, data, then)
    }

    fn send_parts_now(
        &self,
        node: &NodeCore,
        gate: crate::Gate,
        tag: u64,
        parts: &[&[u8]],
        arm: &mut dyn FnMut(&mut crate::driver::DriverPort<'_>),
    ) -> Option<Result<navette_core::Status>> {
        self.shm.send_parts_now(node, gate, tag, parts, arm)
    }

    /// As shm's: an isend above `ShmConfig::stage_max` leaves at once on a
    /// shared-memory rail (a peer reached by tcp alone takes its open
    /// packet or the window, as with tcp).
    fn stages_up_to(&self) -> Option<usize> {
        self.shm.stages_up_to()
    }

    fn ready_to_push(&self, peer: navette_core::Rank) {
        self.shm.ready_to_push(peer);
    }

    /// Open packets go over shm at once where its rails are idle; the rest
    /// (to peers reached by tcp alone, or behind a busy rail) leave with
    /// the next round of progress, on either rail.
    fn flush_staged(&self, node: &NodeCore, then: crate::driver::Then) -> Result<bool> {
        Ok(self
            .shm
            .send_staged(node, navette_core::OpenToSend::All, then))
    }

    /// As [`Self::flush_staged`], for the closed open packets alone; those
    /// that no shm rail took (a full ring, a busy rail, a peer reached by
    /// tcp alone) leave with a round of tcp at once, rather than wait for
    /// the thread's next round.
    fn send_closed(&self, node: &NodeCore) -> Result<bool> {
        let sent = self.shm.send_staged(
            node,
            navette_core::OpenToSend::Closed,
            crate::driver::Then::SendsMore,
        );
        let waiting = node.port().closed_waiting();
        if waiting {
            return Ok(self.tcp.progress(node)? || sent);
        }
        Ok(sent)
    }

    fn now(&self) -> Option<Duration> {
        self.shm.now()
    }

    fn finalize(&self, node: &NodeCore) -> Result<()> {
        // Both keep serving peers until every rank is done, then the tcp
        // connections close (the shm segment goes with the driver).
        self.tcp.begin_finalizing();
        let fenced = crate::driver::serve_until_fenced(self, node, &*self.bootstrap);
        self.tcp.close();
        fenced
    }
}
