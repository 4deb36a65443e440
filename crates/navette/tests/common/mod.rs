//! Helpers shared by the sim tests.
#![allow(dead_code, unreachable_pub)]

use navette::rpc::{Call, HandlerError, HandlerResult, Responder};
use navette::sim::{SimCluster, SimClusterBuilder};
use navette::{ReceiveMode, SendMode};

/// The seed of this run: `NAVETTE_SIM_SEED` if set, else `default`. Printed
/// so that a failure can be replayed.
pub fn seed(default: u64) -> u64 {
    let seed = std::env::var("NAVETTE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("sim seed: {seed} (replay with NAVETTE_SIM_SEED={seed})");
    seed
}

/// A cluster builder with the run's seed.
pub fn cluster(size: u32) -> SimClusterBuilder {
    SimCluster::builder(size).seed(seed(0x5eed))
}

/// Bytes that depend on every input, so that misplaced data is caught.
pub fn pattern(len: usize, salt: u64) -> Vec<u8> {
    let mut x = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Asserts that `got` is `pattern(len, salt)`, naming the first wrong byte.
pub fn check(got: &[u8], len: usize, salt: u64) {
    let want = pattern(len, salt);
    assert_eq!(got.len(), want.len(), "length (salt {salt})");
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("byte {i} of {len} differs (salt {salt})");
    }
}

/// Runs `f` on the `ranks` of one job, a thread each, between `init` and
/// finalize; returns what each rank returned, by rank.
pub fn run_ranks<D, R: Send>(
    ranks: Vec<navette_session::local::LocalBootstrap>,
    config: &navette::RuntimeConfig,
    init: impl Fn(
        std::sync::Arc<dyn navette_session::Bootstrap>,
        navette::RuntimeConfig,
    ) -> navette::Result<(navette::Node, std::sync::Arc<D>)>
    + Sync,
    f: impl Fn(&navette::Node, &D) -> R + Sync,
) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .into_iter()
            .map(|b| {
                let (init, f, config) = (&init, &f, config.clone());
                s.spawn(move || {
                    let (node, driver) = init(std::sync::Arc::new(b), config).expect("init");
                    let out = f(&node, &driver);
                    node.finalize().expect("finalize");
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A configuration for ranks run as threads of a test: a wait that makes
/// no progress for `hang_guard` fails (a guard against hangs, not a timing
/// assertion), and the runtime installs no logger or signal handler.
pub fn test_config(hang_guard: std::time::Duration) -> navette::RuntimeConfig {
    navette::RuntimeConfig {
        node: navette::NodeConfig {
            wait_timeout: Some(hang_guard),
            ..navette::NodeConfig::default()
        },
        log_to_stderr: false,
        report_on_sigusr1: false,
        ..navette::RuntimeConfig::default()
    }
}

/// Data bytes copied so far by `node`'s engine and message layer, over all
/// its gates (`GateStats::bytes_copied`; the driver's own copies apart).
pub fn gate_copies(node: &navette::Node) -> u64 {
    node.gate_stats().iter().map(|g| g.bytes_copied).sum()
}

/// The echo handler: an 8-byte length EXPRESS, then that many bytes
/// CHEAPER into memory allocated after reading it; replies with the same
/// two pieces from that memory.
pub fn echo(call: Call<'_>) -> HandlerResult {
    let (len, body, responder) = unpack_echo_args(call, SendMode::Safer)?;
    responder.reply(|msg| {
        msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
        msg.pack(&body, SendMode::Cheaper, ReceiveMode::Cheaper)
    })?;
    Ok(())
}

/// Unpacks a call's arguments in the echo's shape ([`echo`]), the length
/// sent with `len_mode`: returns the length's bytes, the body and the
/// call's responder.
pub fn unpack_echo_args(
    call: Call<'_>,
    len_mode: SendMode,
) -> Result<([u8; 8], Vec<u8>, Responder<'_>), HandlerError> {
    let (mut args, responder) = call.split();
    let mut len = [0u8; 8];
    args.unpack_express(&mut len, len_mode)?;
    let mut body = vec![0u8; usize::try_from(u64::from_le_bytes(len))?];
    args.unpack_cheaper(&mut body, SendMode::Cheaper)?;
    args.end_unpacking()?;
    Ok((len, body, responder))
}

/// Calls `service` at `peer` with `body` in the echo shape ([`echo`]);
/// returns the body of the reply.
pub fn call_echo(
    node: &navette::Node,
    peer: u32,
    service: &str,
    body: &[u8],
) -> navette::Result<Vec<u8>> {
    receive_echo(start_echo(node, peer, service, body)?.wait()?)
}

/// Calls `service` at `peer` with `body` in the echo shape, without
/// waiting.
pub fn start_echo<'n>(
    node: &'n navette::Node,
    peer: u32,
    service: &str,
    body: &[u8],
) -> navette::Result<navette::rpc::CallRequest<'n>> {
    let len = (body.len() as u64).to_le_bytes();
    node.call(peer, service, |msg| {
        msg.pack_safer(&len, ReceiveMode::Express)?;
        msg.pack(body, SendMode::Cheaper, ReceiveMode::Cheaper)
    })
}

/// The body of an echo-shaped reply.
pub fn receive_echo(reply: navette::rpc::Reply<'_>) -> navette::Result<Vec<u8>> {
    let mut msg = reply.unpacking();
    let mut len = [0u8; 8];
    msg.unpack_express(&mut len, SendMode::Safer)?;
    let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
    msg.unpack_cheaper(&mut body, SendMode::Cheaper)?;
    msg.end_unpacking()?;
    Ok(body)
}

/// Rank 1 serves `echo` and `fails`; rank 0 checks that small RPC calls and
/// replies leave as one tagged piece holding their pieces' table, unfolded
/// by the RPC layer at the other end: bodies on both sides of the bound
/// (4 KiB) come back intact, whichever way each message was taken (at
/// once, queued at a busy server, posted for calls made together); a
/// handler's error and unpacks that do not mirror the packs still reach
/// the caller as typed errors. For a driver that sends small messages at
/// once (shm, tcp); the ranks finalize after it.
pub fn rpc_in_one_piece(node: &navette::Node) {
    use navette::rpc::{HandlerError, HandlerMode, RpcError};
    use navette::{ChannelId, Error, RequestError};

    if node.rank() == 1 {
        node.register_service("echo", HandlerMode::Inline, echo)
            .expect("register");
        node.register_service("fails", HandlerMode::Inline, |_| {
            Err(HandlerError::new("not today"))
        })
        .expect("register");
        // Serves until rank 0 finalizes too (the caller of `run`).
        return;
    }
    let rpc_chunks = || -> u64 {
        node.gate_stats()
            .iter()
            .filter(|g| g.channel == ChannelId::RPC)
            .map(|g| g.chunks_sent)
            .sum()
    };
    // A first call opens the connection where there is one to open (tcp):
    // until then nothing leaves at once.
    check(
        &call_echo(node, 1, "echo", &pattern(3, 3)).expect("echo"),
        3,
        3,
    );
    // A call of three pieces (the RPC header, the length, the body)
    // is one chunk when small, three when large.
    for (salt, size) in [0usize, 1, 64, 1000, 4000, 4100, 6000]
        .into_iter()
        .enumerate()
    {
        let before = rpc_chunks();
        check(
            &call_echo(node, 1, "echo", &pattern(size, salt as u64)).expect("echo"),
            size,
            salt as u64,
        );
        let chunks = rpc_chunks() - before;
        let want = if size <= 4000 { 1 } else { 3 };
        assert_eq!(chunks, want, "a call of {size} bytes");
    }
    // Calls made together: their replies are posted, and the calls
    // queue at the server while it serves the first.
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| pattern(100 + i, i as u64)).collect();
    let calls: Vec<_> = bodies
        .iter()
        .map(|body| start_echo(node, 1, "echo", body).expect("call"))
        .collect();
    for (i, request) in calls.into_iter().enumerate() {
        let got = receive_echo(request.wait().expect("reply")).expect("echo");
        check(&got, 100 + i, i as u64);
    }
    // A handler's error.
    match node.call(1, "fails", |_| Ok(())).expect("call").wait() {
        Err(Error::Rpc(RpcError::Handler { message, .. })) => assert_eq!(message, "not today"),
        other => panic!("expected the handler's error, got {other:?}"),
    }
    // A reply unpacked with another size than packed.
    let len = 5u64.to_le_bytes();
    let reply = node
        .call(1, "echo", |msg| {
            msg.pack_safer(&len, ReceiveMode::Express)?;
            msg.pack(b"12345", SendMode::Cheaper, ReceiveMode::Cheaper)
        })
        .expect("call")
        .wait()
        .expect("reply");
    let mut msg = reply.unpacking();
    let mut wrong = [0u8; 4];
    match msg.unpack_express(&mut wrong, SendMode::Safer) {
        Err(Error::Request(RequestError::SizeMismatch {
            sent: 8, posted: 4, ..
        })) => {}
        other => panic!("expected a size mismatch, got {other:?}"),
    }
}
