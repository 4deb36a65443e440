//! RPC benchmarks over navette's services (`navette::rpc`).
//!
//! - `rpc`: a call whose argument is an 8-byte header (EXPRESS) and an
//!   S-byte body (CHEAPER) that the handler receives into memory it chose
//!   after reading the header (by rendezvous, straight into it), and whose
//!   reply is the same body back from there.
//! - `migrate`: after PM2's thread migration, a task's 650-byte state is
//!   shipped by a one-way call; at the peer the handler queues it, the
//!   rank's loop starts the task (checks and updates its state) and the
//!   task ships itself back.
//! - `rpc_rate`: calls per second with T client threads making calls of an
//!   S-byte body back to back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Weak};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use navette::rpc::{Call, HandlerError, HandlerMode, HandlerResult, ServiceName};
use navette::{Node, NodeCore, Rank, ReceiveMode, SendMode};
use parking_lot::Mutex;

use super::{BenchError, Role, payload, reserved};

const RPC: &str = "navette.bench.rpc";
const MIGRATE: &str = "navette.bench.migrate";

/// Most tasks waiting to start on a rank (one migrates in this benchmark;
/// MPI's program has 16 slots).
const RUN_QUEUE: usize = 16;

/// Bytes of an rpc call's header: the body's length.
pub(super) const HEADER: usize = 8;

/// The services of this process, registered on first use.
struct Services {
    rpc: ServiceName,
    migrate: ServiceName,
    /// Calls served by the rpc handler.
    served: AtomicU64,
    /// Calls the rpc handler will have served at the end of the current
    /// case (a count from the start: the dispatcher may serve the next
    /// case's first call before the current case's serving loop looks).
    expected: AtomicU64,
    /// Task states that arrived, waiting for their task to start: a queue
    /// with no lock, which the loop waiting for a task reads at every
    /// round of progress (a mutex cost four atomic read-modify-writes per
    /// migration, and one lock per round).
    arrived: ArrayQueue<Vec<u8>>,
}

/// The services of `node`, registered on its first use. Several nodes may
/// share a process (the tests run both ranks in one), so each has its own;
/// they live as long as the process (two per process at most, outside
/// tests).
fn services(node: &Node) -> Result<&'static Services, BenchError> {
    type Registered = Vec<(Weak<NodeCore>, &'static Services)>;
    static REGISTERED: Mutex<Registered> = Mutex::new(Vec::new());
    let mut registered = REGISTERED.lock();
    registered.retain(|(core, _)| core.strong_count() > 0);
    let core = Arc::downgrade(node.core());
    if let Some((_, services)) = registered.iter().find(|(c, _)| c.ptr_eq(&core)) {
        return Ok(services);
    }
    let services: &'static Services = Box::leak(Box::new(Services {
        rpc: ServiceName::from_static(RPC),
        migrate: ServiceName::from_static(MIGRATE),
        served: AtomicU64::new(0),
        expected: AtomicU64::new(0),
        arrived: ArrayQueue::new(RUN_QUEUE),
    }));
    node.register_service(RPC, HandlerMode::Inline, move |call| {
        serve_rpc(services, call)
    })?;
    node.register_service(MIGRATE, HandlerMode::Inline, move |call| {
        arrive(services, call)
    })?;
    registered.push((core, services));
    Ok(services)
}

thread_local! {
    /// Bodies the rpc handler receives into, reused from call to call on
    /// the thread that runs it (inline handlers run on whichever thread
    /// makes progress), as MPI's program reuses its buffer: no allocation
    /// is timed, and no lock (a mutex here took four atomic
    /// read-modify-writes per call).
    static BODIES: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Memory for arriving task states, reused as MPI's slots are: the
    /// migrate handler takes one, and the task that leaves gives its own
    /// back, on the thread that serves calls (which runs the handler in
    /// this benchmark; elsewhere arrivals would allocate), with no lock.
    static FREE_STATES: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The rpc handler: header, then the body into a buffer sized after it,
/// then the same back from that buffer.
fn serve_rpc(services: &Services, call: Call<'_>) -> HandlerResult {
    let (mut args, responder) = call.split();
    let mut header = [0u8; HEADER];
    args.unpack_express(&mut header, SendMode::Safer)?;
    let len = usize::try_from(u64::from_le_bytes(header))?;
    let mut body = BODIES.with_borrow_mut(Vec::pop).unwrap_or_default();
    body.try_reserve_exact(len.saturating_sub(body.len()))
        .map_err(|e| HandlerError::new(format!("a body of {len} bytes: {e}")))?;
    body.resize(len, 0);
    if len > 0 {
        args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
    }
    args.end_unpacking()?;
    let replied = responder.reply(|msg| pack_rpc(msg, &header, &body));
    BODIES.with_borrow_mut(|bodies| bodies.push(body));
    services.served.fetch_add(1, Ordering::AcqRel);
    replied?;
    Ok(())
}

fn pack_rpc<'a>(
    msg: &mut navette::Packing<'_, 'a>,
    header: &'a [u8; HEADER],
    body: &'a [u8],
) -> navette::Result<()> {
    msg.pack(header, SendMode::Safer, ReceiveMode::Express)?;
    if !body.is_empty() {
        msg.pack(body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
    }
    Ok(())
}

/// One call of the rpc shape from `node` to `peer`; the reply's body lands
/// in `back`, which must have room for `body` (a reply of another length
/// is an error of `pattern`).
fn call_rpc(
    node: &Node,
    services: &Services,
    peer: Rank,
    body: &[u8],
    back: &mut Vec<u8>,
    pattern: &'static str,
) -> Result<(), BenchError> {
    let header = (body.len() as u64).to_le_bytes();
    let reply = node.call_wait(peer, &services.rpc, |msg| pack_rpc(msg, &header, body))?;
    let mut msg = reply.unpacking();
    let mut len = [0u8; HEADER];
    msg.unpack_express(&mut len, SendMode::Safer)?;
    if u64::from_le_bytes(len) != body.len() as u64 {
        return Err(corrupt(pattern, body.len()));
    }
    back.resize(body.len(), 0);
    if !back.is_empty() {
        msg.unpack_cheaper(back, SendMode::Cheaper)?;
    }
    msg.end_unpacking()?;
    Ok(())
}

/// Serves until `calls` more rpc calls than the cases before expected
/// have been served.
fn serve(node: &Node, services: &Services, calls: u64) -> navette::Result<()> {
    let target = services.expected.fetch_add(calls, Ordering::AcqRel) + calls;
    node.serve_until(|| services.served.load(Ordering::Acquire) >= target)
}

/// The server serves a case's `calls` (then `None`: it times nothing);
/// the client gets the services and the server's rank.
fn client_side(
    node: &Node,
    role: Role,
    calls: u64,
) -> Result<Option<(&'static Services, Rank)>, BenchError> {
    let services = services(node)?;
    if role == Role::Server {
        serve(node, services, calls)?;
        return Ok(None);
    }
    Ok(Some((services, role.peer(node).peer)))
}

/// One-way time of an RPC round trip with a `size`-byte body.
pub(super) fn navette_rpc(
    node: &Node,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let Some((services, peer)) = client_side(node, role, u64::from(warm) + u64::from(count))?
    else {
        return Ok(Duration::ZERO);
    };
    let body = payload(size)?;
    let mut back = reserved(size)?;
    let elapsed = super::time_rounds(warm, count, || {
        call_rpc(node, services, peer, &body, &mut back, "rpc")
    })?;
    if back != body {
        return Err(corrupt("rpc", size));
    }
    Ok(elapsed)
}

/// The time of `count` calls made by `threads` client threads in all
/// (after `warm` untimed ones), from the first thread's start to the last
/// one's end.
pub(super) fn navette_rpc_rate(
    node: &Node,
    role: Role,
    threads: usize,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let Some((services, peer)) = client_side(node, role, u64::from(warm) + u64::from(count))?
    else {
        return Ok(Duration::ZERO);
    };
    let body = payload(size)?;
    let mut back = reserved(size)?;
    for _ in 0..warm {
        call_rpc(node, services, peer, &body, &mut back, "rpc_rate")?;
    }
    let threads = threads.max(1);
    let start = Barrier::new(threads);
    let first = Mutex::new(None::<Instant>);
    let ends = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let calls = share(count, threads, t);
                let (body, start, first) = (&body, &start, &first);
                s.spawn(move || -> Result<Instant, BenchError> {
                    let back = reserved(body.len());
                    start.wait();
                    // After the barrier, which every thread must reach.
                    let mut back = back?;
                    first.lock().get_or_insert_with(Instant::now);
                    for _ in 0..calls {
                        call_rpc(node, services, peer, body, &mut back, "rpc_rate")?;
                    }
                    if calls > 0 && back != *body {
                        return Err(corrupt("rpc_rate", body.len()));
                    }
                    Ok(Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().map_err(|_| BenchError::Internal {
                    pattern: "rpc_rate",
                    what: "a client thread panicked",
                })?
            })
            .collect::<Result<Vec<Instant>, BenchError>>()
    })?;
    let first = first.into_inner().unwrap_or_else(Instant::now);
    let last = ends.into_iter().max().unwrap_or(first);
    Ok(last.saturating_duration_since(first))
}

/// Thread `t`'s share of `count` calls among `threads`.
fn share(count: u32, threads: usize, t: usize) -> u32 {
    let threads = u32::try_from(threads).unwrap_or(u32::MAX);
    let t = u32::try_from(t).unwrap_or(u32::MAX);
    count / threads + u32::from(t < count % threads)
}

/// The smallest task state: its header (id, hops, checksum) and the
/// marker byte.
pub(super) const TASK_MIN: usize = 25;

/// The largest task state, as MPI's program's slots (`MAX_STATE`): the
/// handler refuses a longer one before it takes memory for it.
pub(super) const TASK_MAX: usize = 64 << 10;

/// Round trips of a task by default (two migrations each).
pub(super) const MIGRATIONS: u32 = 1000;

/// Time of `count` round trips of a task between the two ranks (two
/// migrations each), after `warm` untimed ones.
pub(super) fn navette_migrate(
    node: &Node,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let services = services(node)?;
    let peer = role.peer(node).peer;
    let mut state = Task::new(size.max(TASK_MIN))?;
    let elapsed = super::time_rounds(warm, count, || -> Result<(), BenchError> {
        if role == Role::Client {
            ship(node, services, peer, &state.bytes)?;
            start_next(node, services, &mut state)?;
        } else {
            start_next(node, services, &mut state)?;
            ship(node, services, peer, &state.bytes)?;
        }
        Ok(())
    })?;
    Ok(elapsed)
}

/// Ships a task's state to `peer` (a one-way call).
fn ship(node: &Node, services: &Services, peer: Rank, state: &[u8]) -> navette::Result<()> {
    let len = (state.len() as u64).to_le_bytes();
    node.call_one_way(peer, &services.migrate, |msg| {
        msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
        msg.pack(state, SendMode::Cheaper, ReceiveMode::Cheaper)
    })
}

/// The migrate handler: takes memory for the arriving state, receives it
/// there and queues the task to start.
fn arrive(services: &Services, call: Call<'_>) -> HandlerResult {
    let (mut args, _) = call.split();
    let mut len = [0u8; 8];
    args.unpack_express(&mut len, SendMode::Safer)?;
    let len = usize::try_from(u64::from_le_bytes(len))?;
    if len > TASK_MAX {
        return Err(HandlerError::new(format!(
            "a task state of {len} bytes: at most {TASK_MAX}"
        )));
    }
    let mut state = FREE_STATES.with_borrow_mut(Vec::pop).unwrap_or_default();
    state.resize(len, 0);
    args.unpack_cheaper(&mut state, SendMode::Cheaper)?;
    args.end_unpacking()?;
    if services.arrived.push(state).is_err() {
        return Err(HandlerError::new(format!(
            "the run queue holds {RUN_QUEUE} tasks already"
        )));
    }
    Ok(())
}

/// Waits for the next task to arrive and starts it in place of `task`,
/// the one that left: it checks that it is that one (one hop on) and
/// records its hop.
fn start_next(node: &Node, services: &Services, task: &mut Task) -> Result<(), BenchError> {
    node.serve_until(|| !services.arrived.is_empty())?;
    let arrived = services.arrived.pop().ok_or(BenchError::Internal {
        pattern: "migrate",
        what: "a task vanished from the run queue",
    })?;
    let previous = std::mem::replace(task, Task { bytes: arrived });
    if !task.follows(&previous) {
        return Err(corrupt("migrate", task.bytes.len()));
    }
    task.hop();
    // Kept to the run queue's length: where the handler runs on another
    // thread, states given back here are never taken.
    FREE_STATES.with_borrow_mut(|free| {
        if free.len() < RUN_QUEUE {
            free.push(previous.bytes);
        }
    });
    Ok(())
}

/// A migrating task's state, laid out and checked as `bench/mpi/migrate.c`
/// does, so that both do the same work per hop: a header (id, hop count,
/// a checksum mixed in at each hop), then the task's stack, whose last
/// byte is a marker.
struct Task {
    bytes: Vec<u8>,
}

/// The task's id, as in the MPI program.
const TASK_ID: u64 = 42;
/// The last byte of a task's state.
const TASK_END: u8 = 0xa5;

/// The checksum after a hop, as in the MPI program.
fn mix(checksum: u64, hops: u64) -> u64 {
    (checksum ^ hops).wrapping_mul(0x0000_0100_0000_01b3)
}

impl Task {
    fn new(size: usize) -> Result<Self, BenchError> {
        let mut task = Self {
            bytes: payload(size)?,
        };
        task.set(0, TASK_ID);
        task.set(1, 0);
        task.set(2, 0);
        if let Some(last) = task.bytes.last_mut() {
            *last = TASK_END;
        }
        Ok(task)
    }

    /// Header word `i` (id, hops, checksum).
    fn word(&self, i: usize) -> u64 {
        self.bytes
            .get(8 * i..8 * i + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    }

    fn set(&mut self, i: usize, value: u64) {
        self.bytes[8 * i..8 * i + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn hops(&self) -> u64 {
        self.word(1)
    }

    /// The task runs one step at its new place.
    fn hop(&mut self) {
        let hops = self.hops() + 1;
        let checksum = mix(self.word(2), hops);
        self.set(1, hops);
        self.set(2, checksum);
    }

    /// Whether this is `previous` having hopped once since (or, in the
    /// other direction, the same state shipped back): what the MPI
    /// program checks on arrival.
    fn follows(&self, previous: &Self) -> bool {
        let (hops, checksum) = (self.hops(), self.word(2));
        let hopped = hops == previous.hops() + 1 && checksum == mix(previous.word(2), hops);
        let same = hops == previous.hops() && checksum == previous.word(2);
        self.word(0) == TASK_ID
            && self.bytes.len() == previous.bytes.len()
            && self.bytes.last() == Some(&TASK_END)
            && (hopped || same)
    }
}

fn corrupt(pattern: &'static str, size: usize) -> BenchError {
    BenchError::Corrupt {
        pattern,
        implementation: "navette",
        size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_shared_among_threads_exactly() {
        for (count, threads) in [(100_000, 16), (7, 4), (3, 16), (0, 1)] {
            let total: u32 = (0..threads).map(|t| share(count, threads, t)).sum();
            assert_eq!(total, count);
        }
    }

    #[test]
    fn a_task_follows_itself_one_hop_on_and_nothing_else() {
        let start = Task::new(650).unwrap();
        let mut moved = Task {
            bytes: start.bytes.clone(),
        };
        moved.hop();
        assert!(moved.follows(&start));
        for damaged in [9, 17, 649] {
            let mut broken = Task {
                bytes: moved.bytes.clone(),
            };
            broken.bytes[damaged] ^= 1;
            assert!(!broken.follows(&start), "byte {damaged}");
        }
        let mut twice = Task {
            bytes: moved.bytes.clone(),
        };
        twice.hop();
        assert!(!twice.follows(&start), "a hop lost");
    }
}
