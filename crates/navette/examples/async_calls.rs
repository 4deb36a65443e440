//! Many concurrent RPCs from async tasks, on two executors that know
//! nothing of navette: the `futures` crate's single-threaded pool, and a
//! ten-line `block_on` written here with the standard library alone.
//!
//! Two nodes of a simulated cluster stand for two ranks (in a real job,
//! each rank calls `navette::init()`); rank 1 serves a `"square"` service
//! (typed: serde values) and a `"reverse"` one (zero-copy: the handler
//! unpacks the bytes where it wants them).
//!
//! ```sh
//! cargo run --example async_calls
//! ```

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use navette::rpc::HandlerMode;
use navette::sim::SimCluster;
use navette::{ReceiveMode, SendMode};

fn main() -> navette::Result<()> {
    let cluster = SimCluster::builder(2).build();
    let (client, server) = (cluster.node(0), cluster.node(1));

    server.register_typed_service("square", HandlerMode::Inline, |_, x: u64| Ok(x * x))?;
    server.register_service("reverse", HandlerMode::Inline, |call| {
        let (mut args, responder) = call.split();
        let mut len = [0u8; 8];
        args.unpack_express(&mut len, SendMode::Safer)?;
        let mut bytes = vec![0u8; usize::try_from(u64::from_le_bytes(len))?];
        args.unpack_cheaper(&mut bytes, SendMode::Cheaper)?;
        args.end_unpacking()?;
        bytes.reverse();
        responder.reply(|msg| msg.pack(&bytes, SendMode::Cheaper, ReceiveMode::Cheaper))?;
        Ok(())
    })?;

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> navette::Result<()> {
        // The server's rank serves until told to stop.
        s.spawn(|| server.serve_until(|| stop.load(Ordering::Acquire)));
        // A progress thread wakes pending calls when their replies come;
        // without one, they poll (each poll making a round of progress).
        let progress = client.spawn_progress_thread()?;

        // 100 calls at once from 100 tasks of one thread; each task
        // leaves its outcome for the end.
        let mut pool = LocalPool::new();
        let outcomes = Rc::new(RefCell::new(Vec::new()));
        for x in 0..100u64 {
            let (client, outcomes) = (client.clone(), Rc::clone(&outcomes));
            let task = async move {
                let y = client.call_typed_async::<_, u64>(1, "square", &x).await;
                outcomes.borrow_mut().push(y.map(|y| (x, y)));
            };
            if pool.spawner().spawn_local(task).is_err() {
                return Err(navette::Error::Config("the executor refused a task".into()));
            }
        }
        pool.run();
        for outcome in outcomes.take() {
            let (x, y) = outcome?;
            assert_eq!(y, x * x, "the service squares");
        }
        println!("100 concurrent typed calls: done");

        // The zero-copy layer, awaited on an executor of our own. A call
        // that returns at once borrows nothing: its body goes as shared
        // bytes (a `Vec<u8>`, a `Bytes` or, here, a static slice), which
        // the engine keeps until they have left, never copied.
        let text: &'static [u8] = b"navette carries messages";
        let len = (text.len() as u64).to_le_bytes();
        let reply = block_on(client.call(1, "reverse", |msg| {
            msg.pack(&len, SendMode::Safer, ReceiveMode::Express)?;
            msg.pack_bytes(text, ReceiveMode::Cheaper)
        })?)?;
        let mut back = vec![0u8; text.len()];
        let mut msg = reply.unpacking();
        msg.unpack_cheaper(&mut back, SendMode::Cheaper)?;
        msg.end_unpacking()?;
        println!("reversed: {}", String::from_utf8_lossy(&back));

        progress.stop()?;
        stop.store(true, Ordering::Release);
        Ok(())
    })
}

/// Runs a future to completion on this thread, sleeping while it is
/// pending until its waker says otherwise.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(out) => return out,
            Poll::Pending => std::thread::park(),
        }
    }
}
