//! Sends to and receives from a rank no message can reach or come from are
//! refused at once, with an error that says what is wrong: a rank outside
//! the job ([`UsageError::NotInJob`]), or this process's own
//! ([`UsageError::SendToSelf`], [`UsageError::RecvFromSelf`]), where a send
//! said "no open rail" and a receive waited for ever. Over the simulated
//! network and over the shm and tcp drivers (whose sends try to leave at
//! once before the engine is asked).

mod common;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use common::{cluster, run_ranks, test_config};
use navette::{
    Error, Node, Rank, ReceiveMode, RecvFrom, Result, RuntimeConfig, SendMode, TagMatch,
    UsageError, init_shm, init_tcp,
};
use navette_session::JOB_KEY_LEN;
use navette_session::local::LocalBootstrap;

/// A wait that makes no progress for this long fails: a guard against the
/// hang these tests are about, not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// The usage error `result` failed with.
fn usage<T: Debug>(what: &str, result: Result<T>) -> UsageError {
    match result {
        Err(Error::Usage(err)) => err,
        other => panic!("{what}: expected a usage error, got {other:?}"),
    }
}

/// Every kind of send from `node` to `peer` fails at once with `expected`:
/// non-blocking, blocking, a message, an RPC call; small (for an open
/// packet or to leave at once) and large (by rendezvous).
fn every_send_is_refused(node: &Node, peer: Rank, expected: &UsageError) {
    let gate = node.gate(peer);
    for len in [8, 1000, 1 << 20] {
        let data = vec![7u8; len];
        let what = |call: &str| format!("{call} of {len} bytes to rank {peer}");
        assert_eq!(
            &usage(&what("isend"), node.isend(gate, 1, data.clone())),
            expected
        );
        assert_eq!(
            &usage(&what("isend_safer"), node.isend_safer(gate, 1, &data)),
            expected
        );
        let mut requests = Vec::new();
        assert_eq!(
            &usage(
                &what("isend_into"),
                node.isend_into(gate, 1, data.clone(), &mut requests)
            ),
            expected
        );
        assert!(requests.is_empty(), "a refused send adds no request");
        assert_eq!(&usage(&what("send"), node.send(gate, 1, &data)), expected);
    }
    let packing = node.begin_packing(gate, 1).map(drop);
    assert_eq!(&usage("begin_packing", packing), expected);
    let call = node
        .call(peer, "anything", |msg| {
            msg.pack(b"args", SendMode::Safer, ReceiveMode::Express)
        })
        .map(drop);
    assert_eq!(&usage("call", call), expected);
    let big = vec![3u8; 1 << 20];
    let call_wait = node
        .call_wait(peer, "anything", |msg| {
            msg.pack(&big, SendMode::Cheaper, ReceiveMode::Cheaper)
        })
        .map(drop);
    assert_eq!(&usage("call_wait", call_wait), expected);
    let one_way = node.call_one_way(peer, "anything", |msg| {
        msg.pack(b"args", SendMode::Safer, ReceiveMode::Express)
    });
    assert_eq!(&usage("call_one_way", one_way), expected);
}

/// Every kind of receive on `node` from `peer` fails at once with
/// `expected`: its request is complete from its start (tested, waited for,
/// awaited), a blocking receive and a message return the error.
fn every_receive_is_refused(node: &Node, peer: Rank, expected: &UsageError) {
    let gate = node.gate(peer);
    let tag = TagMatch::exact(1);
    let request = node.irecv(gate, tag, vec![0; 8]);
    assert_eq!(&usage("irecv's test", request.test()), expected);
    assert_eq!(&usage("irecv's wait", request.wait()), expected);
    let awaited = futures::executor::block_on(node.irecv(gate, tag, vec![0; 8]));
    assert_eq!(&usage("irecv awaited", awaited), expected);
    assert_eq!(&usage("recv", node.recv(gate, tag, &mut [0; 8])), expected);
    let unpacking = node.begin_unpacking(gate, tag).map(drop);
    assert_eq!(&usage("begin_unpacking", unpacking), expected);
    assert_eq!(&usage("probe", node.probe(gate, tag)), expected);
}

/// `node`, of a job of `size`, refuses whatever goes to or comes from
/// itself or a rank past the job; then it still exchanges with `peer`
/// (the usual paths were left as they were).
fn refuses_misuse(node: &Node, peer: Rank) {
    let (me, size) = (node.rank(), node.size());
    let to_self = UsageError::SendToSelf(me);
    assert!(
        to_self.to_string().starts_with(&format!(
            "sending to oneself (rank {me}) is not supported: "
        )),
        "{to_self}"
    );
    every_send_is_refused(node, me, &to_self);
    every_receive_is_refused(node, me, &UsageError::RecvFromSelf(me));
    for rank in [size, size + 1, Rank::MAX] {
        let outside = UsageError::NotInJob { rank, size };
        assert_eq!(
            outside.to_string(),
            format!("rank {rank} is not in the job of {size} ranks")
        );
        every_send_is_refused(node, rank, &outside);
        every_receive_is_refused(node, rank, &outside);
    }
    let report = node.report();
    assert!(
        report.requests.is_empty() && report.outside.is_empty(),
        "nothing refused was left pending: {report:?}"
    );
    // A receive from any rank is not refused, nor are a peer's messages.
    let tag = u64::from(me);
    let from_any = node.irecv(
        RecvFrom::any(),
        TagMatch::exact(u64::from(peer)),
        vec![0; 8],
    );
    node.send(node.gate(peer), tag, b"still ok")
        .expect("send to a peer");
    let got = from_any.wait().expect("a peer's message");
    assert_eq!(
        (got.data.as_slice(), got.status.peer),
        (&b"still ok"[..], peer)
    );
}

#[test]
fn the_sim_driver_refuses_sends_and_receives_outside_the_job() {
    let cluster = cluster(3)
        .rdv_threshold(4096)
        .node_config(test_config(HANG_GUARD).node)
        .build();
    let nodes = cluster.nodes();
    std::thread::scope(|s| {
        // Ranks 0 and 1 exchange after their refusals; rank 2 has none.
        s.spawn(|| refuses_misuse(&nodes[0], 1));
        refuses_misuse(&nodes[1], 0);
    });
    assert!(matches!(
        nodes[2].isend(nodes[2].gate(3), 1, vec![1]),
        Err(Error::Usage(UsageError::NotInJob { rank: 3, size: 3 }))
    ));
}

/// A job of two ranks, threads of this test, over `init`.
fn job_of_two<D>(
    config: &RuntimeConfig,
    init: impl Fn(Arc<dyn navette_session::Bootstrap>, RuntimeConfig) -> Result<(Node, Arc<D>)> + Sync,
) {
    let mut id = [0u8; 8];
    getrandom::fill(&mut id).expect("random bytes");
    let ranks = LocalBootstrap::job(2, u64::from_le_bytes(id), [0x5a; JOB_KEY_LEN]);
    run_ranks(ranks, config, init, |node, _| {
        refuses_misuse(node, 1 - node.rank());
    });
}

#[test]
fn the_shm_driver_refuses_sends_and_receives_outside_the_job() {
    job_of_two(&test_config(HANG_GUARD), init_shm);
}

#[test]
fn the_tcp_driver_refuses_sends_and_receives_outside_the_job() {
    job_of_two(&test_config(HANG_GUARD), init_tcp);
}

/// A node finalized through one handle refuses a second finalize, and
/// anything that would wait or send on its other handles, at once: the
/// second finalize waited in a fence no other rank would join, a receive
/// for ever, and a small send was written where no one would read it.
#[test]
fn a_finalized_node_refuses_what_would_wait_or_send() {
    let mut id = [0u8; 8];
    getrandom::fill(&mut id).expect("random bytes");
    let ranks = LocalBootstrap::job(2, u64::from_le_bytes(id), [0x5b; JOB_KEY_LEN]);
    let config = test_config(HANG_GUARD);
    std::thread::scope(|s| {
        for rank in ranks {
            let config = config.clone();
            s.spawn(move || {
                let (node, _) = init_shm(Arc::new(rank), config).expect("init");
                let other = node.clone();
                node.finalize().expect("finalize");
                let peer = 1 - other.rank();
                let finalized = |what: &str, error: UsageError| {
                    assert_eq!(error, UsageError::Finalized, "{what}");
                };
                let mut buf = [0u8; 8];
                let recv = other.recv(other.gate(peer), 1u64, &mut buf);
                finalized("recv", usage("recv", recv));
                let irecv = other.irecv(other.gate(peer), 2u64, vec![0; 8]).wait();
                finalized("irecv", usage("irecv", irecv));
                finalized("progress", usage("progress", other.progress()));
                // A small send would leave at once, with no progress: it
                // is refused all the same, as every way of sending is.
                every_send_is_refused(&other, peer, &UsageError::Finalized);
                finalized("finalize", usage("finalize", other.finalize()));
            });
        }
    });
}
