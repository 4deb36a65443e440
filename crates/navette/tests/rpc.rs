//! RPC services over the simulated network: handler-driven receive,
//! failures that reach the caller as typed errors, one-way calls,
//! deadlines, handler threads, futures and the typed layer.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{call_echo, check, cluster, echo, pattern, receive_echo, start_echo};
use navette::rpc::{HandlerError, HandlerMode, RpcError, ServiceName};
use navette::sim::SimCluster;
use navette::{
    ChannelId, Error, Node, PiecesSent, ReceiveMode, RecvFrom, RequestError, SendMode, TagMatch,
    UsageError,
};

const RDV: usize = 4096;

fn ranks(n: u32) -> SimCluster {
    cluster(n).rdv_threshold(RDV).build()
}

/// Runs `client` while every other node serves, then stops them (also
/// when `client` panics: its failure is then reported, not a hang).
fn serving<R>(cluster: &SimCluster, client: impl FnOnce(&Node) -> R) -> R {
    struct Stop<'s>(&'s AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for node in &cluster.nodes()[1..] {
            let stop = &stop;
            s.spawn(move || node.serve_until(|| stop.load(Ordering::Acquire)).unwrap());
        }
        let _stop = Stop(&stop);
        client(cluster.node(0))
    })
}

/// Registers on `node` the pool service `name`, which waits until the
/// returned flag is raised, then replies "late" (with `reply`) or returns
/// without replying.
fn register_held(node: &Node, name: &str, reply: bool) -> Arc<AtomicBool> {
    let release = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&release);
    node.register_service(name, HandlerMode::Pool, move |call| {
        while !gate.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        if reply {
            call.split()
                .1
                .reply(|msg| msg.pack_safer(b"late", ReceiveMode::Express))?;
        }
        Ok(())
    })
    .unwrap();
    release
}

/// Two ranks, rank 1 serving "slow" (held until the returned flag is
/// raised, then replying) and "echo".
fn slow_and_echo() -> (SimCluster, Arc<AtomicBool>) {
    let cluster = ranks(2);
    let release = register_held(cluster.node(1), "slow", true);
    register_echo(cluster.node(1));
    (cluster, release)
}

/// Registers the inline service "echo" ([`echo`]) on `node`.
fn register_echo(node: &Node) {
    node.register_service("echo", HandlerMode::Inline, echo)
        .unwrap();
}

fn rpc_error<T: std::fmt::Debug>(result: navette::Result<T>) -> RpcError {
    match result {
        Err(Error::Rpc(err)) => err,
        other => panic!("expected an RPC error, got {other:?}"),
    }
}

#[test]
fn calls_carry_arguments_and_replies_of_every_size_both_ways() {
    let cluster = ranks(2);
    for mode in [HandlerMode::Inline, HandlerMode::Pool] {
        let name = format!("echo-{mode:?}");
        cluster.node(1).register_service(&name, mode, echo).unwrap();
        serving(&cluster, |node| {
            for (salt, len) in [0usize, 1, 64, RDV - 1, RDV, 100_000, 1 << 20]
                .into_iter()
                .enumerate()
            {
                let body = pattern(len, salt as u64);
                let got = call_echo(node, 1, &name, &body).unwrap();
                check(&got, len, salt as u64);
            }
        });
    }
    // Small calls and replies came in one packet each, and were unpacked
    // whole, with no request per piece.
    for rank in [0, 1] {
        let whole: u64 = cluster
            .node(rank)
            .gate_stats()
            .iter()
            .filter(|g| g.channel == navette::ChannelId::RPC)
            .map(|g| g.messages_whole)
            .sum();
        assert!(whole >= 2 * 3, "rank {rank}: {whole} messages whole");
    }
}

#[test]
fn failures_at_the_server_reach_the_caller_as_typed_errors() {
    let cluster = ranks(2);
    let server = cluster.node(1);
    server
        .register_service("refuse", HandlerMode::Inline, |_| {
            Err(HandlerError::new("not today"))
        })
        .unwrap();
    server
        .register_service("explicit", HandlerMode::Inline, |call| {
            let (args, responder) = call.split();
            drop(args);
            responder.fail("explicitly refused")?;
            Ok(())
        })
        .unwrap();
    server
        .register_service("silent", HandlerMode::Pool, |_| Ok(()))
        .unwrap();
    server
        .register_service("panics", HandlerMode::Inline, |_| panic!("handler bug"))
        .unwrap();
    server
        .register_service("echo", HandlerMode::Inline, echo)
        .unwrap();
    serving(&cluster, |node| {
        let message = |service: &str| match rpc_error(call_echo(node, 1, service, b"x")) {
            RpcError::Handler {
                peer: 1, message, ..
            } => message,
            other => panic!("{service}: expected a handler error, got {other:?}"),
        };
        assert_eq!(message("refuse"), "not today");
        assert_eq!(message("explicit"), "explicitly refused");
        assert_eq!(message("silent"), "the handler returned without replying");
        assert!(message("panics").contains("handler bug"));
        // Unknown services, with small and rendezvous-sized arguments
        // (which the server refuses unread).
        for len in [3, 3 * RDV] {
            match rpc_error(call_echo(node, 1, "missing", &pattern(len, 0))) {
                RpcError::UnknownService { peer, service } => {
                    assert_eq!((peer, service.as_str()), (1, "missing"));
                }
                other => panic!("expected an unknown service, got {other:?}"),
            }
        }
        // The server still serves.
        check(&call_echo(node, 1, "echo", &pattern(10, 7)).unwrap(), 10, 7);
    });
}

#[test]
fn registrations_are_checked_and_can_be_undone() {
    let cluster = ranks(2);
    let server = cluster.node(1);
    server
        .register_service("echo", HandlerMode::Inline, echo)
        .unwrap();
    assert!(matches!(
        server.register_service("echo", HandlerMode::Pool, echo),
        Err(Error::Rpc(RpcError::AlreadyRegistered { .. }))
    ));
    serving(&cluster, |node| {
        check(&call_echo(node, 1, "echo", &pattern(5, 1)).unwrap(), 5, 1);
        assert!(cluster.node(1).unregister_service("echo"));
        assert!(matches!(
            rpc_error(call_echo(node, 1, "echo", b"x")),
            RpcError::UnknownService { .. }
        ));
    });
}

/// Whether `result` is the refusal of the reserved RPC channel.
fn refused_rpc_channel<T: std::fmt::Debug>(result: navette::Result<T>) -> bool {
    match result {
        Err(Error::Usage(err @ UsageError::ReservedChannel(channel))) => {
            assert_eq!(channel, ChannelId::RPC);
            assert!(err.to_string().contains("reserved for RPC"), "{err}");
            true
        }
        other => panic!("expected the reserved channel's refusal, got {other:?}"),
    }
}

#[test]
fn users_sends_receives_and_messages_on_the_rpc_channel_are_refused() {
    let cluster = ranks(2);
    register_echo(cluster.node(1));
    serving(&cluster, |node| {
        // A call under way: none of the refused operations below may take
        // its reply, nor send anything its server would read as a call.
        let body = pattern(48, 7);
        let call = start_echo(node, 1, "echo", &body).unwrap();
        let gate = navette::Gate::new(ChannelId::RPC, 1);
        let any = RecvFrom::any_on(ChannelId::RPC);
        assert!(refused_rpc_channel(node.isend(gate, 0, vec![1u8; 8])));
        assert!(refused_rpc_channel(node.isend_safer(gate, 0, &[1u8; 8])));
        assert!(refused_rpc_channel(node.send(gate, 0, b"call?")));
        assert!(refused_rpc_channel(node.recv(
            any,
            TagMatch::any(),
            &mut [0; 64]
        )));
        assert!(refused_rpc_channel(node.begin_packing(gate, 0)));
        assert!(refused_rpc_channel(
            node.begin_unpacking(any, TagMatch::any())
        ));
        // A receive request fails from its start, by every way of asking.
        let tested = node.irecv(any, TagMatch::any(), vec![0; 64]);
        assert!(refused_rpc_channel(tested.test()));
        assert!(refused_rpc_channel(tested.wait()));
        let polled = node.irecv(any, TagMatch::any(), vec![0; 64]);
        assert!(refused_rpc_channel(futures::executor::block_on(polled)));
        let mut among = vec![
            node.irecv(any, TagMatch::any(), vec![0; 64]),
            node.irecv(RecvFrom::any(), 3, vec![0; 64]),
        ];
        let (first, outcome) = navette::wait_any(&mut among).unwrap();
        assert_eq!(first, 0);
        assert!(refused_rpc_channel(outcome));
        drop(among);
        // The call's reply came to its caller, whole.
        check(&receive_echo(call.wait().unwrap()).unwrap(), 48, 7);
        check(&call_echo(node, 1, "echo", &pattern(16, 8)).unwrap(), 16, 8);
        // Probing the channel is allowed: nothing is left there.
        node.progress().unwrap();
        assert_eq!(node.probe(any, TagMatch::any()).unwrap(), None);
    });
}

#[test]
fn one_way_calls_run_their_handler_and_send_nothing_back() {
    let cluster = ranks(2);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    cluster
        .node(1)
        .register_service("count", HandlerMode::Inline, move |call| {
            assert!(call.is_one_way());
            let (mut args, responder) = call.split();
            let mut n = [0u8; 8];
            args.unpack_express(&mut n, SendMode::Safer)?;
            args.end_unpacking()?;
            counter.fetch_add(u64::from_le_bytes(n) as usize, Ordering::AcqRel);
            // A reply to a one-way call goes nowhere.
            responder.reply(|msg| msg.pack_safer(b"ignored", ReceiveMode::Express))?;
            Ok(())
        })
        .unwrap();
    serving(&cluster, |node| {
        for i in 1..=10u64 {
            node.call_one_way(1, "count", |msg| {
                msg.pack_safer(&i.to_le_bytes(), ReceiveMode::Express)
            })
            .unwrap();
        }
        // Ordered per sender: a two-way call after them finds them done.
        cluster
            .node(1)
            .register_service("sync", HandlerMode::Inline, |call| {
                call.split().1.reply(|_| Ok(()))?;
                Ok(())
            })
            .unwrap();
        node.call(1, "sync", |_| Ok(()))
            .unwrap()
            .wait()
            .unwrap()
            .end()
            .unwrap();
        assert_eq!(seen.load(Ordering::Acquire), 55);
        // Nothing came back to the caller.
        node.progress().unwrap();
        let any = RecvFrom::any_on(ChannelId::RPC);
        assert_eq!(node.probe(any, TagMatch::any()).unwrap(), None);
    });
}

#[test]
fn a_call_past_its_deadline_fails_and_its_late_reply_is_dropped() {
    let (cluster, release) = slow_and_echo();
    serving(&cluster, |node| {
        let call = node
            .call(1, "slow", |_| Ok(()))
            .unwrap()
            .timeout(Duration::from_millis(20));
        match rpc_error(call.wait()) {
            RpcError::DeadlineExceeded {
                peer,
                service,
                after,
            } => {
                assert_eq!((peer, service.as_str()), (1, "slow"));
                assert_eq!(after, Duration::from_millis(20));
            }
            other => panic!("expected a deadline, got {other:?}"),
        }
        // The reply comes after all; the next calls are unaffected and the
        // late reply is dropped, not left waiting.
        release.store(true, Ordering::Release);
        for salt in 0..20 {
            check(
                &call_echo(node, 1, "echo", &pattern(100, salt)).unwrap(),
                100,
                salt,
            );
        }
        let any = RecvFrom::any_on(ChannelId::RPC);
        while node.probe(any, TagMatch::any()).unwrap().is_some() {}
        assert_eq!(node.probe(any, TagMatch::any()).unwrap(), None);
    });
}

#[test]
fn a_call_to_a_lost_peer_fails_with_peer_unreachable() {
    let cluster = ranks(3);
    register_echo(cluster.node(1));
    register_echo(cluster.node(2));
    serving(&cluster, |node| {
        // A call in flight when the link goes: the server never answers.
        let release = register_held(cluster.node(1), "hang", false);
        let pending = node.call(1, "hang", |_| Ok(())).unwrap();
        cluster.cut(cluster.links_between(0, 1)[0]);
        match pending.wait() {
            Err(Error::Request(RequestError::PeerUnreachable { peer: 1 })) => {}
            other => panic!("expected the peer unreachable, got {other:?}"),
        }
        release.store(true, Ordering::Release);
        assert!(call_echo(node, 1, "echo", b"x").is_err());
        // The other server is unaffected.
        check(&call_echo(node, 2, "echo", &pattern(50, 3)).unwrap(), 50, 3);
    });
}

#[test]
fn pool_handlers_may_block_and_make_calls_of_their_own() {
    let cluster = ranks(3);
    cluster
        .node(2)
        .register_typed_service("double", HandlerMode::Inline, |_, x: u64| Ok(2 * x))
        .unwrap();
    let relay = cluster.node(1).clone();
    cluster
        .node(1)
        .register_typed_service("quadruple", HandlerMode::Pool, move |_, x: u64| {
            let twice: u64 = relay.call_typed(2, "double", &x)?;
            Ok(relay.call_typed::<_, u64>(2, "double", &twice)?)
        })
        .unwrap();
    serving(&cluster, |node| {
        for x in [0u64, 1, 21, 1 << 40] {
            assert_eq!(
                node.call_typed::<_, u64>(1, "quadruple", &x).unwrap(),
                4 * x
            );
        }
    });
}

#[test]
fn many_threads_call_at_once_and_get_their_own_replies() {
    let cluster = ranks(2);
    register_echo(cluster.node(1));
    serving(&cluster, |node| {
        std::thread::scope(|s| {
            for thread in 0..4u64 {
                s.spawn(move || {
                    for i in 0..25u64 {
                        let salt = thread * 1000 + i;
                        let len = [8, 300, 2 * RDV][(i % 3) as usize];
                        let got = call_echo(node, 1, "echo", &pattern(len, salt)).unwrap();
                        check(&got, len, salt);
                    }
                });
            }
        });
    });
}

#[test]
fn calls_are_futures_on_any_executor() {
    use futures::executor::LocalPool;
    use futures::task::LocalSpawnExt;

    let cluster = ranks(2);
    register_echo(cluster.node(1));
    serving(&cluster, |node| {
        // With and without a progress thread to wake the pending calls.
        for with_thread in [false, true] {
            let progress = with_thread.then(|| node.spawn_progress_thread().unwrap());
            let mut pool = LocalPool::new();
            let done = Arc::new(AtomicUsize::new(0));
            for task in 0..16u64 {
                let (done, node) = (Arc::clone(&done), node.clone());
                pool.spawner()
                    .spawn_local(async move {
                        let body = pattern(100 + task as usize * 500, task);
                        let request = start_echo(&node, 1, "echo", &body).unwrap();
                        let got = receive_echo(request.await.unwrap()).unwrap();
                        assert_eq!(got, body);
                        // Point-to-point requests are futures too.
                        let sent = node.isend(node.gate(1), 99, vec![1u8; 4]).unwrap();
                        sent.await.unwrap();
                        done.fetch_add(1, Ordering::AcqRel);
                    })
                    .unwrap();
            }
            pool.run();
            assert_eq!(done.load(Ordering::Acquire), 16);
            let typed = futures::executor::block_on(node.call_typed_async::<_, String>(
                1,
                &ServiceName::new("greet"),
                &"you",
            ));
            assert!(matches!(
                typed,
                Err(Error::Rpc(RpcError::UnknownService { .. }))
            ));
            // Arguments the server refuses unread (rendezvous-sized): the
            // future still ends with the reply's reason.
            let big = pattern(3 * RDV, 5);
            let refused = futures::executor::block_on(
                node.call(1, "missing", |msg| {
                    msg.pack(&big, SendMode::Cheaper, ReceiveMode::Cheaper)
                })
                .unwrap(),
            );
            assert!(
                matches!(refused, Err(Error::Rpc(RpcError::UnknownService { .. }))),
                "{refused:?}"
            );
            drop(progress);
        }
        // The 32 tagged messages arrived at the server.
        for _ in 0..32 {
            cluster
                .node(1)
                .recv(cluster.node(1).gate(0), 99u64, &mut [0u8; 4])
                .unwrap();
        }
    });
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Account {
    owner: String,
    balance: i64,
    history: Vec<i64>,
}

#[test]
fn typed_services_exchange_serde_values() {
    let cluster = ranks(2);
    cluster
        .node(1)
        .register_typed_service(
            "deposit",
            HandlerMode::Inline,
            |from, (mut account, amount): (Account, i64)| {
                if amount <= 0 {
                    return Err(HandlerError::new(format!("rank {from}: amount {amount}")));
                }
                account.balance += amount;
                account.history.push(amount);
                Ok(account)
            },
        )
        .unwrap();
    serving(&cluster, |node| {
        let account = Account {
            owner: "ada".into(),
            balance: 10,
            history: (0..5000).collect(), // large enough for rendezvous
        };
        let after: Account = node.call_typed(1, "deposit", &(account, 5i64)).unwrap();
        assert_eq!(after.balance, 15);
        assert_eq!(after.history.len(), 5001);
        let refused = node.call_typed::<_, Account>(
            1,
            "deposit",
            &(
                Account {
                    owner: "bob".into(),
                    balance: 0,
                    history: vec![],
                },
                -1i64,
            ),
        );
        match rpc_error(refused) {
            RpcError::Handler { message, .. } => assert_eq!(message, "rank 0: amount -1"),
            other => panic!("expected a handler error, got {other:?}"),
        }
        // Arguments of the wrong type are the handler's error, not a crash.
        match rpc_error(node.call_typed::<_, Account>(1, "deposit", &"not an account")) {
            RpcError::Handler { message, .. } => assert!(message.contains("arguments")),
            other => panic!("expected a handler error, got {other:?}"),
        }
        node.call_typed_one_way(1, "deposit", &(after, 1i64))
            .unwrap();
    });
}

/// A call whose packing fails is abandoned: the caller gets the packing's
/// error, the server drops the call without running the handler (nothing
/// of it left, it receives an empty aborted message), and serves the next
/// call.
#[test]
fn a_call_abandoned_while_packing_runs_no_handler() {
    let cluster = ranks(2);
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    cluster
        .node(1)
        .register_service("echo", HandlerMode::Inline, move |call| {
            counted.fetch_add(1, Ordering::SeqCst);
            echo(call)
        })
        .unwrap();
    serving(&cluster, |node| {
        let len = 4u64.to_le_bytes();
        let failed = node.call(1, "echo", |msg| {
            msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
            Err(Error::EmptyMessage)
        });
        assert!(matches!(failed, Err(Error::EmptyMessage)), "{failed:?}");
        let body = pattern(4, 7);
        assert_eq!(call_echo(node, 1, "echo", &body).unwrap(), body);
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// Messages of `node` on the RPC channel that were received at once,
/// outside the engine.
fn rpc_at_once(node: &Node) -> u64 {
    node.gate_stats()
        .iter()
        .filter(|g| g.channel == ChannelId::RPC)
        .map(|g| g.messages_at_once)
        .sum()
}

#[test]
fn lone_small_calls_and_their_replies_are_received_at_once() {
    // A reply is never posted for having taken long (on a busy machine).
    let cluster = spinning_ranks(2);
    register_echo(cluster.node(1));
    const CALLS: u64 = 20;
    serving(&cluster, |node| {
        for salt in 0..CALLS {
            let body = pattern(100, salt);
            check(&call_echo(node, 1, "echo", &body).unwrap(), 100, salt);
        }
        // Awaited with no progress thread: the same.
        let body = pattern(100, CALLS);
        let request = start_echo(node, 1, "echo", &body).unwrap();
        let reply = futures::executor::block_on(request).unwrap();
        check(&receive_echo(reply).unwrap(), 100, CALLS);
    });
    // Every reply waited outside the engine and came whole in one packet;
    // so did every call but the first, if it came before the server first
    // looked for calls.
    assert_eq!(rpc_at_once(cluster.node(0)), CALLS + 1);
    let calls = rpc_at_once(cluster.node(1));
    assert!(calls >= CALLS, "{calls} calls received at once");
}

#[test]
fn overlapping_calls_and_large_ones_keep_their_order_and_replies() {
    let cluster = ranks(2);
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&order);
    cluster
        .node(1)
        .register_service("note", HandlerMode::Inline, move |call| {
            let (mut args, responder) = call.split();
            let mut n = [0u8; 8];
            args.unpack_express(&mut n, SendMode::Safer)?;
            let mut len = [0u8; 8];
            args.unpack_express(&mut len, SendMode::Safer)?;
            let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
            args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
            args.end_unpacking()?;
            seen.lock().unwrap().push(u64::from_le_bytes(n));
            responder.reply(|msg| msg.pack_safer(&n, ReceiveMode::Express))?;
            Ok(())
        })
        .unwrap();
    serving(&cluster, |node| {
        // Calls in flight together, small and large (rendezvous) mixed:
        // the first one's reply waits outside the engine, the others'
        // are posted; each gets its own reply, whatever order they are
        // waited for in.
        let bodies: Vec<Vec<u8>> = (0..6u64)
            .map(|i| pattern(if i % 3 == 1 { 3 * RDV } else { 16 }, i))
            .collect();
        let lens: Vec<[u8; 8]> = bodies
            .iter()
            .map(|b| (b.len() as u64).to_le_bytes())
            .collect();
        let numbers: Vec<[u8; 8]> = (0..6u64).map(u64::to_le_bytes).collect();
        let calls: Vec<_> = (0..6)
            .map(|i| {
                node.call(1, "note", |msg| {
                    msg.pack(&numbers[i], SendMode::Safer, ReceiveMode::Express)?;
                    msg.pack(&lens[i], SendMode::Safer, ReceiveMode::Express)?;
                    msg.pack(&bodies[i], SendMode::Cheaper, ReceiveMode::Cheaper)
                })
                .unwrap()
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate().rev() {
            let mut reply = call.wait().unwrap().unpacking();
            let mut n = [0u8; 8];
            reply.unpack_express(&mut n, SendMode::Safer).unwrap();
            reply.end_unpacking().unwrap();
            assert_eq!(u64::from_le_bytes(n), i as u64, "call {i}'s own reply");
        }
    });
    // Calls from one sender are served in the order they were made, the
    // large ones (which cannot come at once) among them.
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<u64>>());
}

#[test]
fn a_call_given_up_while_its_reply_waits_outside_the_engine_drops_it() {
    let (cluster, release) = slow_and_echo();
    serving(&cluster, |node| {
        // Dropped before its reply: the reply, when it comes, is dropped
        // and does not stand in the way of the next call's.
        let call = node.call(1, "slow", |_| Ok(())).unwrap();
        assert!(!call.test().unwrap());
        drop(call);
        release.store(true, Ordering::Release);
        for salt in 0..5 {
            let body = pattern(32, salt);
            check(&call_echo(node, 1, "echo", &body).unwrap(), 32, salt);
        }
        node.progress().unwrap();
        let any = RecvFrom::any_on(ChannelId::RPC);
        assert_eq!(node.probe(any, TagMatch::any()).unwrap(), None);
    });
}

/// A cluster whose waits spin for ever: a reply's receive waiting outside
/// the engine is never posted for having waited long.
fn spinning_ranks(n: u32) -> SimCluster {
    let spin = navette::NodeConfig {
        spin_rounds: u32::MAX,
        oversubscribed_spin_rounds: u32::MAX,
        ..navette::NodeConfig::default()
    };
    cluster(n).rdv_threshold(RDV).node_config(spin).build()
}

#[test]
fn a_reply_waiting_outside_the_engine_learns_that_its_server_is_lost() {
    let cluster = spinning_ranks(2);
    let release = register_held(cluster.node(1), "hang", false);
    serving(&cluster, |node| {
        let pending = node.call(1, "hang", |_| Ok(())).unwrap();
        assert!(!pending.test().unwrap(), "no reply yet");
        // A report lists the reply's receive, and leaves it outside.
        let report = node.report();
        let reply =
            |r: &navette::OutsideReceive| r.kind == "RPC reply" && r.want.channel == ChannelId::RPC;
        assert!(report.outside.iter().any(reply), "{report}");
        assert!(node.report().outside.iter().any(reply));
        cluster.cut(cluster.links_between(0, 1)[0]);
        // Ready: waiting would not block, and fails.
        while !pending.test().unwrap() {}
        match pending.wait() {
            Err(Error::Request(RequestError::PeerUnreachable { peer: 1 })) => {}
            other => panic!("expected the peer unreachable, got {other:?}"),
        }
        release.store(true, Ordering::Release);
    });
}

#[test]
fn a_deadline_past_what_an_instant_holds_is_none() {
    let (cluster, _release) = slow_and_echo();
    serving(&cluster, |node| {
        let body = pattern(100, 3);
        let reply = start_echo(node, 1, "echo", &body)
            .unwrap()
            .timeout(Duration::MAX)
            .wait()
            .unwrap();
        check(&receive_echo(reply).unwrap(), 100, 3);
    });
}

/// Registers on `node` the inline service "keep", which keeps the body of
/// each call (in the echo's shape) in the returned list and replies with
/// nothing.
fn register_keep(node: &Node) -> Arc<std::sync::Mutex<Vec<Vec<u8>>>> {
    let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
    let list = Arc::clone(&kept);
    node.register_service("keep", HandlerMode::Inline, move |call| {
        let (_, body, responder) = common::unpack_echo_args(call, SendMode::Safer)?;
        list.lock().unwrap().push(body);
        responder.reply(|_| Ok(()))?;
        Ok(())
    })
    .unwrap();
    kept
}

/// Bytes `node` copied while `run` ran.
fn copied_by<R>(node: &Node, run: impl FnOnce() -> R) -> (R, u64) {
    let before = node.bytes_copied();
    let out = run();
    (out, node.bytes_copied() - before)
}

/// A call that returns at once borrows none of its arguments: a request
/// leaked with `mem::forget` (its borrow then ends with nothing run) leaves
/// the engine reading nothing of the caller's. The large body was copied
/// as it was submitted, so the handler gets what was packed, not what the
/// caller wrote over it afterwards (before, it read the new bytes, or
/// crashed once they were freed).
#[test]
fn a_leaked_call_reads_nothing_of_its_callers_memory() {
    let cluster = ranks(2);
    let kept = register_keep(cluster.node(1));
    let len = 16 * RDV;
    serving(&cluster, |node| {
        let mut body = pattern(len, 7);
        let (request, copied) = copied_by(node, || start_echo(node, 1, "keep", &body).unwrap());
        std::mem::forget(request);
        assert!(copied >= len as u64, "the body was copied: {copied} bytes");
        body.fill(0);
        drop(body);
        // Calls to one inline service run in order: once this one's reply
        // has come, the leaked call's handler has kept its body.
        start_echo(node, 1, "keep", b"after")
            .unwrap()
            .wait()
            .unwrap();
    });
    let kept = kept.lock().unwrap();
    assert_eq!(kept.len(), 2);
    check(&kept[0], len, 7);
}

/// Large arguments go without a copy by the caller's node both ways that
/// keep them safe: shared bytes, which the engine keeps until they have
/// left (even past a leaked request), and a blocking call, which lends
/// them until its reply.
#[test]
fn shared_and_lent_arguments_leave_without_a_copy() {
    let cluster = ranks(2);
    let kept = register_keep(cluster.node(1));
    let len = 16 * RDV;
    let header = (len as u64).to_le_bytes();
    serving(&cluster, |node| {
        let (request, shared) = copied_by(node, || {
            node.call(1, "keep", |msg| {
                msg.pack_safer(&header, ReceiveMode::Express)?;
                msg.pack_bytes(pattern(len, 8), ReceiveMode::Cheaper)
            })
            .unwrap()
        });
        std::mem::forget(request);
        let body = pattern(len, 9);
        let (_, lent) = copied_by(node, || {
            node.call_wait(1, "keep", |msg| {
                msg.pack_safer(&header, ReceiveMode::Express)?;
                msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
            })
            .unwrap()
            .end()
            .unwrap();
        });
        assert!(shared < len as u64, "shared bytes copied: {shared}");
        assert!(lent < len as u64, "lent bytes copied: {lent}");
    });
    let kept = kept.lock().unwrap();
    assert_eq!(kept.len(), 2);
    check(&kept[0], len, 8);
    check(&kept[1], len, 9);
}

/// [`Node::call_wait_timeout`] gives up as a call's timeout does, and
/// releases the arguments it lent.
#[test]
fn a_blocking_call_past_its_deadline_fails() {
    let (cluster, release) = slow_and_echo();
    serving(&cluster, |node| {
        let body = pattern(16 * RDV, 4);
        let late = node.call_wait_timeout(1, "slow", Duration::from_millis(20), |msg| {
            msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
        });
        assert!(matches!(
            rpc_error(late),
            RpcError::DeadlineExceeded { peer: 1, .. }
        ));
        release.store(true, Ordering::Release);
        let reply = node.call_wait(1, "echo", |msg| {
            msg.pack_safer(&(5u64).to_le_bytes(), ReceiveMode::Express)?;
            msg.pack(b"fresh", SendMode::Cheaper, ReceiveMode::Cheaper)
        });
        assert_eq!(receive_echo(reply.unwrap()).unwrap(), b"fresh");
    });
}

/// Errors about pieces number them as the program packed them: an RPC's
/// header, read by the library, is not counted (it was: the handler's
/// first piece was "piece 1", and counts were one too many).
#[test]
fn piece_errors_number_the_programs_pieces_not_the_header() {
    let cluster = ranks(2);
    let seen = Arc::new(std::sync::Mutex::new(None));
    let slot = Arc::clone(&seen);
    cluster
        .node(1)
        .register_service("short", HandlerMode::Inline, move |call| {
            let (mut args, responder) = call.split();
            let mut first = [0u8; 4];
            *slot.lock().unwrap() = args.unpack_express(&mut first, SendMode::Safer).err();
            drop(args);
            responder.reply(|msg| {
                msg.pack_safer(b"one", ReceiveMode::Express)?;
                msg.pack_safer(b"two", ReceiveMode::Express)
            })?;
            Ok(())
        })
        .unwrap();
    serving(&cluster, |node| {
        let reply = node
            .call_wait(1, "short", |msg| {
                msg.pack_safer(&[0u8; 8], ReceiveMode::Express)
            })
            .unwrap();
        let mut msg = reply.unpacking();
        let mut one = [0u8; 3];
        msg.unpack_express(&mut one, SendMode::Safer).unwrap();
        let end = msg.end_unpacking().unwrap_err();
        assert!(
            matches!(
                end,
                Error::Request(RequestError::PieceCountMismatch {
                    sent: PiecesSent::MoreThan(1),
                    unpacked: 1
                })
            ),
            "{end:?}"
        );
        assert_eq!(
            end.to_string(),
            "the sender packed more than 1 pieces, the receiver unpacked 1"
        );
    });
    let seen = seen.lock().unwrap().take();
    assert!(
        matches!(
            seen,
            Some(Error::Request(RequestError::SizeMismatch {
                piece: 0,
                sent: 8,
                posted: 4
            }))
        ),
        "{seen:?}"
    );
}
