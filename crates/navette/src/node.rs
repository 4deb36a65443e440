//! The node: this process's endpoint, shared by every thread.
//!
//! All engine state sits behind one lock ([`NodeCore`]'s state): the engine,
//! the memory table and the completion slots. Any thread that waits drives
//! progress through the driver, outside that lock; drivers take it while
//! they feed the engine.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::lock::{Mutex, MutexGuard};
use navette_core::{
    ChannelId, Engine, EngineConfig, MemHandle, MemRef, Rank, ReqId, RequestError, StagedSend,
    Status,
};
use rustc_hash::FxHashMap;

use crate::driver::{Driver, Then};
use crate::memtable::MemTable;
use crate::{Error, Result};

/// Settings of a node's waiting and progress. Every field has a default.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// A wait that sees no progress for this long fails with
    /// [`Error::Stalled`]; `None` waits forever. A blocking send or
    /// message end that fails so gives the caller's memory back, and its
    /// message still leaves, from a copy. A blocking tagged receive that
    /// fails so is cancelled: a later message goes to a later receive, one
    /// already arriving into it is dropped, with a warning.
    pub wait_timeout: Option<Duration>,
    /// Idle progress rounds spent spinning before yielding the CPU, when
    /// every rank of the session can have a core of this host.
    pub spin_rounds: u32,
    /// The same when the session has more ranks than this host has cores:
    /// a spinning rank then holds a core another rank needs, so it yields
    /// sooner.
    pub oversubscribed_spin_rounds: u32,
    /// Idle rounds spent yielding before blocking in the driver. Yielding
    /// gives the core to any other runnable rank, so oversubscribed runs
    /// lose nothing; blocking costs a kernel wake-up (tens of microseconds
    /// on a virtual machine), so the default keeps a waiter yielding
    /// through a large transfer (a few milliseconds of rounds).
    pub yield_rounds: u32,
    /// Longest a waiting thread blocks in the driver at a time.
    pub block_for: Duration,
    /// A wait that sees no progress for this long logs what the node waits
    /// for ([`Node::report`]), and again after each further period.
    pub report_after: Duration,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            wait_timeout: None,
            spin_rounds: 1024,
            oversubscribed_spin_rounds: 64,
            yield_rounds: 4096,
            block_for: Duration::from_millis(1),
            report_after: Duration::from_secs(30),
        }
    }
}

/// How long a wait has seen no progress, for its stall report and
/// timeout ([`Node::check_stall`]). Clock reads cost on some machines: it
/// starts at the first check after progress, and waits read it every
/// [`StallClock::EVERY`] idle rounds only.
#[derive(Debug)]
pub(crate) struct StallClock {
    idle_since: Option<Instant>,
    next_report: Duration,
}

impl StallClock {
    /// Idle rounds between clock reads.
    const EVERY: u32 = 64;

    /// Whether a wait idle for `idle` rounds reads the clock: every
    /// [`Self::EVERY`] rounds, and every round once the count saturated
    /// (a wait spinning for ever).
    pub(crate) fn due(idle: u32) -> bool {
        idle.is_multiple_of(Self::EVERY) || idle == u32::MAX
    }

    /// A clock for a wait that has just seen progress.
    pub(crate) fn new(config: &NodeConfig) -> Self {
        Self {
            idle_since: None,
            next_report: config.report_after,
        }
    }
}

/// The idle rounds and stall clock of a wait that spins outside the
/// engine (see [`Node::spin_round`]).
#[derive(Debug)]
pub(crate) struct Spinning {
    /// Rounds since the last progress.
    pub(crate) idle: u32,
    stall: StallClock,
}

/// One peer as seen from a channel: where messages go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gate {
    /// The channel.
    pub channel: ChannelId,
    /// The peer's rank.
    pub peer: Rank,
}

impl Gate {
    /// The gate to `peer` on `channel`.
    pub fn new(channel: ChannelId, peer: Rank) -> Self {
        Self { channel, peer }
    }
}

/// Refuses a user's send, receive or message on a reserved channel
/// ([`ChannelId::RPC`]); the RPC module's own calls and replies go
/// around it.
pub(crate) fn user_channel(channel: ChannelId) -> Result<(), navette_core::UsageError> {
    if channel.is_reserved() {
        Err(navette_core::UsageError::ReservedChannel(channel))
    } else {
        Ok(())
    }
}

impl NodeCore {
    /// Refuses a user's receive from `from` as it is made: on a reserved
    /// channel (as [`user_channel`] does), or from a rank no message can
    /// come from, where it would wait for ever: one outside the job
    /// ([`navette_core::UsageError::NotInJob`]) or this process's own (no
    /// rail leads from a rank to itself:
    /// [`navette_core::UsageError::RecvFromSelf`]).
    ///
    /// On the path of every receive (`irecv`, `recv`, `begin_unpacking`),
    /// before it is posted outside the engine or in it: a receive from a
    /// rank costs a comparison with the job's size and one with this
    /// rank (two fields of this core, no lock); one from any rank, none.
    #[inline]
    pub(crate) fn user_source(&self, from: RecvFrom) -> Result<(), navette_core::UsageError> {
        user_channel(from.channel)?;
        self.possible_source(from.source)
    }

    /// Refuses a source no message can come from (see
    /// [`Self::user_source`]), on any channel.
    #[inline]
    pub(crate) fn possible_source(
        &self,
        source: navette_core::Source,
    ) -> Result<(), navette_core::UsageError> {
        match source {
            navette_core::Source::Rank(peer) if peer >= self.size || peer == self.rank => {
                Err(self.refused_source(peer))
            }
            _ => Ok(()),
        }
    }

    /// Why [`Self::user_source`] refused a receive from `peer`.
    #[cold]
    #[inline(never)]
    fn refused_source(&self, peer: Rank) -> navette_core::UsageError {
        if peer >= self.size {
            navette_core::UsageError::NotInJob {
                rank: peer,
                size: self.size,
            }
        } else {
            navette_core::UsageError::RecvFromSelf(peer)
        }
    }
}

/// Where a receive accepts messages from: a gate, or any peer of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvFrom {
    /// The channel.
    pub channel: ChannelId,
    /// The accepted senders.
    pub source: navette_core::Source,
}

impl RecvFrom {
    /// Any peer of the default channel.
    pub fn any() -> Self {
        Self::any_on(ChannelId::DEFAULT)
    }

    /// Any peer of `channel`.
    pub fn any_on(channel: ChannelId) -> Self {
        Self {
            channel,
            source: navette_core::Source::Any,
        }
    }
}

impl From<Gate> for RecvFrom {
    fn from(gate: Gate) -> Self {
        Self {
            channel: gate.channel,
            source: navette_core::Source::Rank(gate.peer),
        }
    }
}

/// The completion slot of a request made by the API.
#[derive(Debug)]
struct Slot {
    region: Option<MemHandle>,
    outcome: Option<Result<Status, RequestError>>,
    detached: bool,
}

/// An operation outside the engine that a future may await: no engine
/// completion tells when it is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outside {
    /// A receive posted ahead of its message ([`crate::lean_irecv`]), or
    /// the engine request it became.
    Irecv(crate::lean_irecv::LeanKey),
    /// A small send in its peer's open packet.
    Staged(StagedSend),
}

/// What a future waits on, for its waker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WakeOn {
    /// An engine request: its completion wakes it.
    Req(ReqId),
    /// An operation outside the engine: a collect that sees it done wakes
    /// it.
    Outside(Outside),
}

/// The state behind the node's lock.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) engine: Engine,
    pub(crate) mem: MemTable,
    slots: FxHashMap<ReqId, Slot>,
    /// At most one receive waits outside the engine at a time.
    pub(crate) lean: Option<crate::lean::LeanRecv>,
    /// Whole-message receives waiting outside the engine: an RPC reply's,
    /// and the next RPC call's (see [`crate::lean_whole`]).
    pub(crate) lean_whole: crate::lean_whole::LeanWholes,
    /// Non-blocking tagged receives waiting outside the engine (see
    /// [`crate::lean_irecv`]).
    pub(crate) lean_irecvs: crate::lean_irecv::LeanIrecvs,
    /// Wakers of requests awaited as futures, by request.
    wakers: FxHashMap<ReqId, Waker>,
    /// Wakers of futures awaiting operations outside the engine, checked
    /// at each [`Self::collect`] while there are any.
    outside_wakers: Vec<(Outside, Waker)>,
    /// Wakers whose requests completed, to wake once the lock is released
    /// (a waker may run anything, even code that locks the node).
    woken: Vec<Waker>,
    /// Requests that failed after whoever made them stopped waiting (a
    /// dropped send's request, say): each is logged, and finalize reports
    /// the count.
    pub(crate) unwaited_failures: u64,
}

impl State {
    /// Tracks `req`; `region` is freed when it completes (or returned by `take`).
    pub(crate) fn watch(&mut self, req: ReqId, region: Option<MemHandle>) {
        self.slots.insert(
            req,
            Slot {
                region,
                outcome: None,
                detached: false,
            },
        );
    }

    /// Moves engine completions into their slots.
    pub(crate) fn collect(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            let Some(slot) = self.slots.get_mut(&event.req) else {
                continue;
            };
            if slot.detached {
                let slot = self.slots.remove(&event.req).expect("looked up above");
                if let Some(region) = slot.region {
                    self.mem.remove(region);
                }
                // Nobody waits for it: its failure is reported here (a
                // cancelled one was given up on purpose).
                match event.outcome {
                    Ok(_) | Err(RequestError::Cancelled) => {}
                    // A piece of a message given up on.
                    Err(RequestError::MessageFailed(why)) if *why == RequestError::Cancelled => {}
                    Err(err) => {
                        self.unwaited_failures += 1;
                        tracing::warn!(req = %event.req, %err, "a request nobody waits for failed");
                    }
                }
            } else {
                slot.outcome = Some(event.outcome);
                if self.wakers.is_empty() {
                    continue;
                }
                if let Some(waker) = self.wakers.remove(&event.req) {
                    self.woken.push(waker);
                }
            }
        }
        if !self.outside_wakers.is_empty() {
            self.wake_outside();
        }
    }

    /// Moves the wakers of the operations outside the engine that are
    /// done to the wakers to wake.
    fn wake_outside(&mut self) {
        let mut i = 0;
        while let Some(&(on, _)) = self.outside_wakers.get(i) {
            if self.outside_done(on) {
                let (_, waker) = self.outside_wakers.swap_remove(i);
                self.woken.push(waker);
            } else {
                i += 1;
            }
        }
    }

    /// Whether `on` is done (its request may be taken).
    fn outside_done(&self, on: Outside) -> bool {
        match on {
            Outside::Irecv(key) => self.irecv_is_done(key),
            Outside::Staged(staged) => self.engine.staged_outcome(staged).is_some(),
        }
    }

    /// Has `waker` woken once `on` is done (by whoever collects then: the
    /// progress thread, see [`Node::wake_futures`]).
    fn wake_when(&mut self, on: WakeOn, waker: &Waker) {
        let known = match on {
            WakeOn::Req(req) => self.wakers.get_mut(&req),
            WakeOn::Outside(on) => self
                .outside_wakers
                .iter_mut()
                .find(|(o, _)| *o == on)
                .map(|(_, known)| known),
        };
        match (known, on) {
            (Some(known), _) => known.clone_from(waker),
            (None, WakeOn::Req(req)) => {
                self.wakers.insert(req, waker.clone());
            }
            (None, WakeOn::Outside(on)) => self.outside_wakers.push((on, waker.clone())),
        }
    }

    /// Whether futures wait for operations outside the engine (whose
    /// wakers must be forgotten as those are taken).
    pub(crate) fn has_outside_wakers(&self) -> bool {
        !self.outside_wakers.is_empty()
    }

    /// Forgets the waker of `on`, if any: its operation was taken or
    /// dropped.
    #[inline]
    pub(crate) fn forget_waker(&mut self, on: Outside) {
        if !self.outside_wakers.is_empty() {
            self.forget_outside_waker(on);
        }
    }

    /// [`Self::forget_waker`] where some future waits: out of the way of
    /// blocking waits, which have none.
    #[cold]
    fn forget_outside_waker(&mut self, on: Outside) {
        self.outside_wakers.retain(|(o, _)| *o != on);
    }

    /// Takes the outcome of the send in an open packet `staged`, if it
    /// left or was lost.
    pub(crate) fn take_staged(
        &mut self,
        staged: StagedSend,
    ) -> Option<std::result::Result<(), RequestError>> {
        let left = self.engine.staged_outcome(staged)?;
        self.forget_waker(Outside::Staged(staged));
        Some(left)
    }

    /// Forgets the send in an open packet `staged` (its request was
    /// dropped): it still leaves with its packet.
    pub(crate) fn drop_staged(&mut self, staged: StagedSend) {
        self.forget_waker(Outside::Staged(staged));
        self.engine.detach_staged(staged);
    }

    /// How many futures wait for a wake-up.
    fn futures_waiting(&self) -> usize {
        self.wakers.len() + self.outside_wakers.len()
    }

    /// A completed request's outcome, left in place.
    pub(crate) fn outcome(&self, req: ReqId) -> Option<&Result<Status, RequestError>> {
        self.slots.get(&req).and_then(|s| s.outcome.as_ref())
    }

    pub(crate) fn is_done(&self, req: ReqId) -> bool {
        self.slots.get(&req).is_some_and(|s| s.outcome.is_some())
    }

    /// Takes a completed request's outcome and its owned buffer, if any.
    pub(crate) fn take(&mut self, req: ReqId) -> Option<(Result<Status>, Option<Vec<u8>>)> {
        let std::collections::hash_map::Entry::Occupied(entry) = self.slots.entry(req) else {
            return None;
        };
        entry.get().outcome.as_ref()?;
        let slot = entry.remove();
        if !self.wakers.is_empty() {
            self.wakers.remove(&req);
        }
        let buf = slot.region.and_then(|r| self.mem.remove(r));
        let outcome = slot.outcome.expect("checked above").map_err(Error::from);
        Some((outcome, buf))
    }

    /// Moves completions into their slots, then takes every one of `reqs`
    /// if all are complete.
    pub(crate) fn take_all(&mut self, reqs: &[ReqId]) -> Option<Outcomes> {
        self.collect();
        if !reqs.iter().all(|&r| self.is_done(r)) {
            return None;
        }
        Some(
            reqs.iter()
                .map(|&r| self.take(r).expect("checked complete above").0)
                .collect(),
        )
    }

    /// Requests that failed with nobody waiting for them: the engine's
    /// requests, and small sends lost in their open packets.
    pub(crate) fn unwaited(&self) -> u64 {
        self.unwaited_failures + self.engine.lost_detached_staged()
    }

    /// The receives waiting outside the engine, for a report: the blocking
    /// receive, the receives posted ahead in posting order, then the whole
    /// messages'.
    fn outside_receives(&self) -> Vec<navette_core::OutsideReceive> {
        use crate::lean::LeanRecv;
        use crate::lean_whole::LeanWhole;
        let mut outside = Vec::new();
        if let Some(LeanRecv::Waiting { want, dest }) = &self.lean {
            outside.push(navette_core::OutsideReceive {
                kind: "blocking receive",
                want: *want,
                room: Some(dest.len()),
            });
        }
        outside.extend(self.lean_irecvs.outside());
        for slot in crate::lean_whole::SLOTS {
            if let Some(LeanWhole::Waiting(want)) = self.lean_whole[slot as usize] {
                outside.push(navette_core::OutsideReceive {
                    kind: slot.kind(),
                    want,
                    room: None,
                });
            }
        }
        outside
    }

    /// Forgets a request nobody will wait for; its buffer is freed at completion.
    pub(crate) fn detach(&mut self, req: ReqId) {
        self.wakers.remove(&req);
        if self.is_done(req) {
            self.take(req);
        } else if let Some(slot) = self.slots.get_mut(&req) {
            slot.detached = true;
        }
    }
}

/// The shared inside of a [`Node`]; drivers reach the engine through it.
pub struct NodeCore {
    /// This core, for the code that holds it by reference and needs a
    /// node (a driver's finalize serving RPC calls).
    this: std::sync::Weak<Self>,
    rank: Rank,
    size: u32,
    config: NodeConfig,
    /// Idle rounds spent spinning: `config`'s, for this session's ranks
    /// and this host's cores.
    spin_rounds: u32,
    state: Mutex<State>,
    driver: Arc<dyn Driver>,
    /// The driver's [`Driver::stages_up_to`], read once: a non-blocking
    /// send asks the driver nothing to know its way (see
    /// [`NodeCore::isend_tries_at_once`]).
    stages_up_to: Option<usize>,
    dirty: AtomicBool,
    /// Messages that came unexpected on the RPC channel (calls, late
    /// replies), kept on nodes with RPC: the dispatcher looks for calls
    /// only when it moved (read without the lock).
    pub(crate) arrivals: AtomicU64,
    /// What became of the receive waiting outside the engine (read without
    /// the lock by its spinning thread).
    pub(crate) lean_slot: crate::lean::LeanSlot,
    /// Whether each whole-message receive waiting outside the engine has
    /// settled (landed or posted) and its owner has not taken it yet: read
    /// without the lock. Set under the lock.
    pub(crate) lean_whole_settled: crate::lean_whole::SettledFlags,
    /// Progress threads running: while there is one, a pending future
    /// sleeps until its completion wakes it.
    pub(crate) progress_threads: AtomicUsize,
    /// Futures waiting for a wake-up (see `State::wakers`).
    pub(crate) futures: AtomicUsize,
    /// RPC services and calls, from the first registration or call on.
    pub(crate) rpc: OnceLock<crate::rpc::Rpc>,
    /// Where [`Node::finalize`] stands: [`RUNNING`], [`FINALIZING`] or
    /// [`FINALIZED`]. Read on each round of progress, send and call,
    /// which fail once the node is finalized ([`Self::running`]).
    pub(crate) life: AtomicU8,
}

/// [`NodeCore::life`]: not finalized.
pub(crate) const RUNNING: u8 = 0;
/// [`NodeCore::life`]: a handle is finalizing the node.
pub(crate) const FINALIZING: u8 = 1;
/// [`NodeCore::life`]: the node is finalized.
pub(crate) const FINALIZED: u8 = 2;

impl fmt::Debug for NodeCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeCore")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("driver", &self.driver.name())
            .finish_non_exhaustive()
    }
}

impl NodeCore {
    /// This node's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Serves the RPC calls that arrived (for a driver that makes progress
    /// on its own, as in its finalize: a server rank that finalizes keeps
    /// answering the ranks that still call it until all have finalized).
    pub(crate) fn serve_calls(&self) {
        let Some(rpc) = self.rpc.get() else {
            return;
        };
        if let Some(core) = self.this.upgrade() {
            rpc.dispatch(&Node { core });
        }
    }

    /// Locks the state for a driver.
    pub fn port(&self) -> crate::driver::DriverPort<'_> {
        crate::driver::DriverPort::new(self, self.state.lock())
    }

    /// Whether work was submitted since the last call (and clears the mark).
    pub fn take_dirty(&self) -> bool {
        // A load first: spinning rounds find the mark clear, and a load
        // does not take the cache line exclusive as a swap would.
        self.dirty.load(Ordering::Acquire) && self.dirty.swap(false, Ordering::AcqRel)
    }

    /// Whether work was submitted since the last [`Self::take_dirty`],
    /// without clearing the mark.
    pub(crate) fn has_work(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// The driver that serves this node.
    pub(crate) fn driver(&self) -> &Arc<dyn Driver> {
        &self.driver
    }

    /// Whether a non-blocking send of `len` bytes tries to leave at once
    /// first (past the driver's [`Driver::stages_up_to`]).
    #[inline]
    pub(crate) fn isend_tries_at_once(&self, len: usize) -> bool {
        self.stages_up_to.is_none_or(|most| len > most)
    }

    /// Whether a non-blocking send of `len` bytes goes to its peer's open
    /// packet first: within the driver's [`Driver::stages_up_to`] and what
    /// an open packet takes.
    #[inline]
    pub(crate) fn isend_stages_first(&self, len: usize) -> bool {
        len <= navette_core::OPEN_MOST_PIECE && !self.isend_tries_at_once(len)
    }

    /// Whether the driver sends non-blocking sends at once where it can
    /// (a packet is a copy: shm), as it does every one past its
    /// [`Driver::stages_up_to`].
    #[inline]
    pub(crate) fn sends_at_once(&self) -> bool {
        self.isend_tries_at_once(usize::MAX)
    }

    /// Refuses what would start on a finalized node (see
    /// [`Node::finalize`]): a round of progress, a send, a call. One
    /// relaxed load: `life` changes only at finalize, and what races with
    /// it breaks finalize's rule that no handle starts anything meanwhile.
    #[inline]
    pub(crate) fn running(&self) -> Result<(), navette_core::UsageError> {
        if self.life.load(Ordering::Relaxed) == FINALIZED {
            return Err(navette_core::UsageError::Finalized);
        }
        Ok(())
    }

    pub(crate) fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// See [`Node::report`].
    pub fn report(&self) -> navette_core::Report {
        let now = self.driver.now();
        let mut state = self.state.lock();
        if let Some(now) = now {
            state.engine.handle_tick(now);
        }
        let mut report = state.engine.report();
        // Listed, not posted: a report changes nothing.
        report.outside = state.outside_receives();
        report
    }
}

/// This process's endpoint. Cheap to clone; `Send + Sync`: many threads may
/// post and wait at once.
#[derive(Clone, Debug)]
pub struct Node {
    core: Arc<NodeCore>,
}

impl Node {
    /// A node of rank `rank` among `size`, moving data through `driver`.
    /// The driver adds rails through [`NodeCore::port`].
    pub fn new(
        rank: Rank,
        size: u32,
        engine: EngineConfig,
        config: NodeConfig,
        driver: Arc<dyn Driver>,
    ) -> Self {
        let engine = Engine::new(EngineConfig {
            rank,
            size: Some(size),
            ..engine
        });
        let cores = host_cores();
        let spin_rounds = if size as usize > cores {
            config.oversubscribed_spin_rounds
        } else {
            config.spin_rounds
        };
        let stages_up_to = driver.stages_up_to();
        Self {
            core: Arc::new_cyclic(|this| NodeCore {
                this: this.clone(),
                rank,
                size,
                config,
                spin_rounds,
                state: Mutex::new(State {
                    engine,
                    mem: MemTable::default(),
                    slots: FxHashMap::default(),
                    lean: None,
                    lean_whole: Default::default(),
                    lean_irecvs: Default::default(),
                    wakers: FxHashMap::default(),
                    outside_wakers: Vec::new(),
                    woken: Vec::new(),
                    unwaited_failures: 0,
                }),
                driver,
                stages_up_to,
                dirty: AtomicBool::new(false),
                arrivals: AtomicU64::new(0),
                lean_slot: crate::lean::LeanSlot::default(),
                lean_whole_settled: Default::default(),
                progress_threads: AtomicUsize::new(0),
                futures: AtomicUsize::new(0),
                rpc: OnceLock::new(),
                life: AtomicU8::new(RUNNING),
            }),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.core.rank
    }

    /// Number of ranks in the session.
    pub fn size(&self) -> u32 {
        self.core.size
    }

    /// The name of the driver this node runs over (`shm`, `tcp`, `sim`).
    pub fn driver_name(&self) -> &'static str {
        self.core.driver.name()
    }

    /// Sets the packet strategy of `channel` (before or after its first
    /// use): how its small messages share packets and its large ones
    /// share rails. See [`StrategyKind`](navette_core::StrategyKind).
    pub fn set_strategy(&self, channel: ChannelId, strategy: navette_core::StrategyKind) {
        self.set_custom_strategy(channel, strategy.build());
    }

    /// Sets a strategy of the caller's own making for `channel`: any
    /// [`Strategy`](crate::strategy::Strategy), built from the moves in
    /// [`tactics`](crate::strategy::tactics) or not. It runs under the
    /// node's lock, whenever a rail to a peer of the channel goes idle, so
    /// it must be quick and must not call back into the node.
    pub fn set_custom_strategy(
        &self,
        channel: ChannelId,
        strategy: Box<dyn navette_core::Strategy>,
    ) {
        // Marked as work: chunks already waiting may now leave otherwise.
        self.with_state(|s| s.engine.set_strategy(channel, strategy));
    }

    /// The gate to `peer` on the default channel.
    pub fn gate(&self, peer: Rank) -> Gate {
        Gate::new(ChannelId::DEFAULT, peer)
    }

    /// The shared core, for drivers.
    pub fn core(&self) -> &Arc<NodeCore> {
        &self.core
    }

    /// Runs `f` on the locked state, then marks the node as having work.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.core.lock();
        let out = f(&mut state);
        self.unlock_with_work(state);
        out
    }

    /// Releases the state, then marks the node as having work for the
    /// driver and wakes a thread sleeping in it.
    pub(crate) fn unlock_with_work(&self, state: MutexGuard<'_, State>) {
        unlock(state);
        self.core.mark_dirty();
        self.core.driver.wake();
    }

    /// What this node waits for: pending requests with their peer, tag,
    /// size, protocol state and age, the receives waiting outside the
    /// engine (listed as they are: a report changes nothing), and the
    /// state of every rail.
    pub fn report(&self) -> navette_core::Report {
        self.core.report()
    }

    /// Requests that failed after whoever made them stopped waiting for
    /// them (a dropped non-blocking send whose peer was lost, say), since
    /// the start; each was logged as a warning when it failed. Cancelled
    /// ones (given up on purpose) are not counted.
    pub fn unwaited_failures(&self) -> u64 {
        let mut state = self.core.lock();
        state.collect();
        let n = state.unwaited();
        unlock(state);
        n
    }

    /// Makes one round of progress; returns whether anything happened.
    /// Calls that arrived for this node's inline RPC services are served
    /// here too (see [`crate::rpc`]). Once the node is finalized (through
    /// any of its handles), fails with [`navette_core::UsageError::Finalized`],
    /// and so does every wait, test or call that needs progress.
    pub fn progress(&self) -> Result<bool> {
        self.core.running()?;
        let moved = self.core.driver.progress(&self.core)?;
        if let Some(rpc) = self.core.rpc.get() {
            rpc.dispatch(self);
        }
        Ok(moved)
    }

    /// Sends the small messages waiting in open packets now (see
    /// [`Driver::flush_staged`]): whether any left.
    pub(crate) fn flush_staged(&self) -> Result<bool> {
        self.core.driver.flush_staged(&self.core, Then::Waits)
    }

    /// Blocks in the driver for at most the configured `block_for`.
    pub(crate) fn block_in_driver(&self) -> Result<()> {
        self.core
            .driver
            .wait(&self.core, self.core.config.block_for)
    }

    /// Tells the driver a packet to `peer` is about to be written (see
    /// [`Driver::ready_to_push`]).
    #[inline]
    pub(crate) fn ready_to_push(&self, peer: navette_core::Rank) {
        self.core.driver.ready_to_push(peer);
    }

    /// Wakes threads blocked in the driver.
    pub(crate) fn wake_driver(&self) {
        self.core.driver.wake();
    }

    /// Whether `req` has completed, after one round of progress.
    pub(crate) fn test_id(&self, req: ReqId) -> Result<bool> {
        self.test_with(|state| state.is_done(req))
    }

    /// After one round of progress, what `done` tells of the state, its
    /// completions collected.
    pub(crate) fn test_with(&self, done: impl FnOnce(&State) -> bool) -> Result<bool> {
        self.progress()?;
        let mut state = self.core.lock();
        state.collect();
        let done = done(&state);
        unlock(state);
        Ok(done)
    }

    /// For a future awaiting `req`: after a round of progress, whether it
    /// has completed (see [`Self::poll_with`]).
    pub(crate) fn poll_id(&self, req: ReqId, waker: &Waker) -> Result<bool> {
        let done = |state: &mut State| state.is_done(req).then_some(());
        Ok(self.poll_with(WakeOn::Req(req), waker, done)?.is_ready())
    }

    /// For a future awaiting `on`: after a round of progress, what `take`
    /// takes of the state (the operation's outcome), if it is there; if
    /// not, `waker` is woken once `on` is done. With no progress thread to
    /// do it, the future is asked to poll again at once (each poll making
    /// a round of progress, as a spinning wait does).
    pub(crate) fn poll_with<R>(
        &self,
        on: WakeOn,
        waker: &Waker,
        take: impl FnOnce(&mut State) -> Option<R>,
    ) -> Result<Poll<R>> {
        self.progress()?;
        let mut state = self.core.lock();
        state.collect();
        let taken = take(&mut state);
        if taken.is_none() {
            state.wake_when(on, waker);
        }
        self.core
            .futures
            .store(state.futures_waiting(), Ordering::Release);
        unlock(state);
        let Some(taken) = taken else {
            if self.core.progress_threads.load(Ordering::Acquire) == 0 {
                waker.wake_by_ref();
            }
            return Ok(Poll::Pending);
        };
        Ok(Poll::Ready(taken))
    }

    /// Moves completions into their slots and wakes the futures whose
    /// requests completed (the progress thread's duty while futures wait).
    pub(crate) fn wake_futures(&self) {
        if self.core.futures.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut state = self.core.lock();
        state.collect();
        self.core
            .futures
            .store(state.futures_waiting(), Ordering::Release);
        unlock(state);
    }

    /// Drives progress until `check` returns something.
    pub(crate) fn wait_until<R>(
        &self,
        what: &dyn Fn() -> String,
        mut check: impl FnMut(&mut State) -> Option<R>,
    ) -> Result<R> {
        let mut idle: u32 = 0;
        let mut stall = self.stall_clock();
        loop {
            {
                let mut state = self.core.lock();
                state.collect();
                let out = check(&mut state);
                unlock(state);
                if let Some(out) = out {
                    return Ok(out);
                }
            }
            if self.progress()? {
                idle = 0;
                stall = self.stall_clock();
                continue;
            }
            idle = idle.saturating_add(1);
            self.back_off(idle)?;
            // Each blocking round lasts up to `block_for`: read the clock
            // at each.
            if StallClock::due(idle) || idle > self.blocking_after() {
                self.check_stall(&mut stall, what)?;
            }
        }
    }

    /// A stall clock for a wait that has just seen progress.
    pub(crate) fn stall_clock(&self) -> StallClock {
        StallClock::new(&self.core.config)
    }

    /// The state of a wait that spins outside the engine, starting.
    pub(crate) fn spinning(&self) -> Spinning {
        Spinning {
            idle: 0,
            stall: self.stall_clock(),
        }
    }

    /// Counts a round of a wait spinning outside the engine, which
    /// `progressed` or not: an idle one spins, and reads the stall clock
    /// as the usual wait does (reports, and fails past `wait_timeout`).
    pub(crate) fn spin_round(
        &self,
        spin: &mut Spinning,
        progressed: bool,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        if progressed {
            *spin = self.spinning();
            return Ok(());
        }
        spin.idle = spin.idle.saturating_add(1);
        std::hint::spin_loop();
        if StallClock::due(spin.idle) {
            self.check_stall(&mut spin.stall, what)?;
        }
        Ok(())
    }

    /// Reads the stall clock of a wait that saw no progress: logs what
    /// the node waits for once each `report_after`, and fails with
    /// [`Error::Stalled`] past `wait_timeout`.
    pub(crate) fn check_stall(
        &self,
        stall: &mut StallClock,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let waited = stall.idle_since.get_or_insert_with(Instant::now).elapsed();
        if waited >= stall.next_report {
            stall.next_report += self.core.config.report_after;
            tracing::warn!(
                "no progress for {waited:.1?} while waiting for {}\n{}",
                what(),
                self.report()
            );
        }
        match self.core.config.wait_timeout {
            Some(limit) if waited > limit => Err(Error::Stalled {
                waited,
                what: what(),
            }),
            _ => Ok(()),
        }
    }

    /// Idle rounds spent spinning before yielding.
    pub(crate) fn spin_rounds(&self) -> u32 {
        self.core.spin_rounds
    }

    /// Idle rounds after which waiting blocks in the driver.
    fn blocking_after(&self) -> u32 {
        // Saturating: `u32::MAX` rounds means spinning (or yielding) for ever.
        self.core
            .spin_rounds
            .saturating_add(self.core.config.yield_rounds)
    }

    /// Spins, then yields, then blocks in the driver: oversubscribed runs
    /// must not burn a core another rank needs.
    pub(crate) fn back_off(&self, idle: u32) -> Result<()> {
        let config = &self.core.config;
        if idle <= self.core.spin_rounds {
            std::hint::spin_loop();
        } else if idle <= self.blocking_after() {
            std::thread::yield_now();
        } else {
            self.core.driver.wait(&self.core, config.block_for)?;
        }
        Ok(())
    }

    /// Waits for one request and takes its outcome and buffer.
    pub(crate) fn wait_id(&self, req: ReqId) -> Result<(Result<Status>, Option<Vec<u8>>)> {
        self.wait_until(&|| format!("{req}"), |state| state.take(req))
    }

    /// Waits for a blocking call's request and takes its outcome, releasing
    /// the caller memory it borrowed under the same lock (one lock fewer
    /// on the latency path). If waiting fails, dropping `lent` releases it.
    pub(crate) fn wait_releasing(&self, req: ReqId, lent: Registration<'_>) -> Result<Status> {
        self.wait_lent(req, &mut Some(lent))?
    }

    /// [`Self::wait_releasing`] for send `req`: if waiting fails (a
    /// stall), the caller gets its memory back all the same, under one
    /// lock, and the send goes on from a copy
    /// ([`Registration::give_back_sending`]), unless it completed
    /// meanwhile (then its outcome is returned).
    pub(crate) fn wait_sending(&self, req: ReqId, lent: Registration<'_>) -> Result<Status> {
        self.wait_or_give_up(req, lent, |state, _, lent| {
            if let Some(lent) = lent {
                lent.give_back_sending(state, req);
            }
        })
    }

    /// Waits for `req` as [`Self::wait_releasing`]; if waiting fails (a
    /// stall), takes the lock once, takes `req`'s outcome if it completed
    /// meanwhile, and hands `give_up` the state, whether it did, and
    /// `lent` (still lent): then returns that outcome, else the error.
    fn wait_or_give_up<'b>(
        &self,
        req: ReqId,
        lent: Registration<'b>,
        give_up: impl FnOnce(&mut State, bool, Option<Registration<'b>>),
    ) -> Result<Status> {
        let mut lent = Some(lent);
        let err = match self.wait_lent(req, &mut lent) {
            Ok(outcome) => return outcome,
            Err(err) => err,
        };
        let mut state = self.core.lock();
        state.collect();
        let done = state.take(req);
        give_up(&mut state, done.is_some(), lent);
        unlock(state);
        match done {
            Some((outcome, _)) => outcome,
            None => Err(err),
        }
    }

    /// Waits for `req` and takes its outcome, releasing `lent` under the
    /// lock that sees it done; if waiting fails, `lent` is left in place.
    fn wait_lent(&self, req: ReqId, lent: &mut Option<Registration<'_>>) -> Result<Result<Status>> {
        let (outcome, _) = self.wait_until(&|| format!("{req}"), |state| {
            let out = state.take(req)?;
            if let Some(lent) = lent.take() {
                lent.release(state);
            }
            Some(out)
        })?;
        Ok(outcome)
    }

    /// [`Self::wait_releasing`] for tagged receive `req` on `channel`: if
    /// waiting fails (a stall), the receive is cancelled with its memory
    /// still lent, under one lock, unless it completed meanwhile (then its
    /// outcome is returned): a message it would have taken goes to a later
    /// receive, not into memory no longer lent; one that had matched it
    /// and was still arriving is dropped, with a warning.
    pub(crate) fn wait_receive(
        &self,
        channel: navette_core::ChannelId,
        req: ReqId,
        lent: Registration<'_>,
    ) -> Result<Status> {
        self.wait_or_give_up(req, lent, |state, done, lent| {
            if !done {
                if !state.engine.recv_tagged_cancel(channel, req) {
                    tracing::warn!("{req} gave up waiting: the message it had matched is dropped");
                }
                state.detach(req);
            }
            if let Some(lent) = lent {
                lent.release(state);
            }
        })
    }

    /// Waits for all of `reqs`; returns their outcomes in order, and
    /// releases `lent` under the lock that takes them (or, if waiting
    /// fails, as it drops).
    pub(crate) fn wait_ids_releasing(
        &self,
        reqs: &[ReqId],
        lent: LentMemory<'_>,
    ) -> Result<Outcomes> {
        let mut lent = Some(lent);
        self.wait_until(&|| format!("{} requests", reqs.len()), |state| {
            let outcomes = state.take_all(reqs)?;
            lent.take()
                .into_iter()
                .flatten()
                .for_each(|r| r.release(state));
            Some(outcomes)
        })
    }

    /// Lends caller memory, read-only, to the engine for one blocking call.
    pub(crate) fn lend<'b>(&self, state: &mut State, data: &'b [u8]) -> (MemRef, Registration<'b>) {
        let range = state.mem.borrow(data);
        (range, self.registration(range))
    }

    /// Lends caller memory that its owner may still change through the cells
    /// until the blocking call starts (LATER mode).
    pub(crate) fn lend_cells<'b>(
        &self,
        state: &mut State,
        data: &'b [std::cell::Cell<u8>],
    ) -> (MemRef, Registration<'b>) {
        let range = state.mem.borrow_cells(data);
        (range, self.registration(range))
    }

    /// Lends caller memory, writable, to the engine for one blocking call.
    pub(crate) fn lend_mut<'b>(
        &self,
        state: &mut State,
        data: &'b mut [u8],
    ) -> (MemRef, Registration<'b>) {
        let range = state.mem.borrow_mut(data);
        (range, self.registration(range))
    }

    pub(crate) fn registration<'b>(&self, range: MemRef) -> Registration<'b> {
        Registration {
            core: Arc::clone(&self.core),
            handle: Some(range.handle),
            _borrow: std::marker::PhantomData,
        }
    }
}

/// Releases the state's lock, then wakes the futures whose requests
/// completed meanwhile (a waker may run anything, even code that locks the
/// node).
#[inline]
pub(crate) fn unlock(state: MutexGuard<'_, State>) {
    // Inlined and without a frame in the usual case (no future to wake):
    // every `isend`, `irecv` and round of a wait ends here.
    if state.woken.is_empty() {
        drop(state);
    } else {
        unlock_waking(state);
    }
}

/// [`unlock`] with futures to wake, out of line.
#[cold]
#[inline(never)]
fn unlock_waking(mut state: MutexGuard<'_, State>) {
    let woken = std::mem::take(&mut state.woken);
    drop(state);
    woken.into_iter().for_each(Waker::wake);
}

/// The cores of this host: the online CPUs (`/sys/devices/system/cpu/online`,
/// e.g. `0-3,8-11`), else what this process may use. Not this process's
/// affinity alone: ranks pinned one to a core each (as MPI launchers and
/// `taskset` pin them) each see one core, yet do not share it.
fn host_cores() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|list| count_cpu_list(list.trim()))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// The CPUs of a kernel CPU list (`0-3,8,10-11`), if it is one.
fn count_cpu_list(list: &str) -> Option<usize> {
    list.split(',').try_fold(0usize, |count, part| {
        let n = match part.split_once('-') {
            Some((first, last)) => {
                let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
                last.checked_sub(first)? + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
        count.checked_add(n)
    })
}

/// The outcomes of the requests a message waits for together (its pieces,
/// and its end), in their order: kept inline up to five, so that a
/// message of a few pieces takes them with no allocation. Local to a
/// wait, never kept in a value that moves.
pub(crate) type Outcomes = smallvec::SmallVec<[Result<Status>; 5]>;

/// The caller's memory a message lends to one blocking wait, released
/// once it is done: inline up to two regions (a message usually lends its
/// one or two large pieces; the small ones are copied).
pub(crate) type LentMemory<'b> = smallvec::SmallVec<[Registration<'b>; 2]>;

/// A region of caller memory registered for one blocking call: removed from
/// the memory table when released or dropped, so no engine access can reach
/// it once the call returns — even if it returns by unwinding. It keeps the
/// caller's borrow alive (`'b`) for as long as it exists. Never drop one while
/// holding the state lock: release it with that state instead.
#[derive(Debug)]
pub(crate) struct Registration<'b> {
    core: Arc<NodeCore>,
    handle: Option<MemHandle>,
    _borrow: std::marker::PhantomData<&'b mut [u8]>,
}

impl Registration<'_> {
    /// Removes the region using an already locked state.
    pub(crate) fn release(mut self, state: &mut State) {
        if let Some(handle) = self.handle.take() {
            state.mem.remove(handle);
        }
    }

    /// Gives the caller its memory back when nobody waits for send `req`
    /// any more (its wait stalled, or the value waiting for it was
    /// dropped), using an already locked state. If the send is still in
    /// progress, the engine keeps a copy of the data, freed as the send
    /// completes: its message still leaves whole, where dropping the data
    /// would leave a receiver that matched it waiting for ever. Then `req`
    /// is detached (see [`State::detach`]).
    pub(crate) fn give_back_sending(mut self, state: &mut State, req: ReqId) {
        if let Some(handle) = self.handle.take() {
            // A piece's own region is its lent one: none is watched beside.
            let kept = !state.is_done(req)
                && state
                    .slots
                    .get(&req)
                    .is_some_and(|slot| slot.region.is_none())
                && state.mem.keep_copy(handle);
            match state.slots.get_mut(&req) {
                Some(slot) if kept => slot.region = Some(handle),
                _ => {
                    state.mem.remove(handle);
                }
            }
        }
        state.detach(req);
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.core.lock().mem.remove(handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::count_cpu_list;

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-3,8-11,16"), Some(9));
        for bad in ["", "a", "3-1", "0-", "0,,1"] {
            assert_eq!(count_cpu_list(bad), None, "{bad:?}");
        }
    }
}
