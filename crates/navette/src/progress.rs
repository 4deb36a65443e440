//! An optional background progress thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::{Node, Result};

/// A thread that makes progress for a node while application threads
/// compute; stopped and joined when dropped (or by [`ProgressThread::stop`]).
#[derive(Debug)]
pub struct ProgressThread {
    node: Node,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<()>>>,
}

impl Node {
    /// Starts a background thread that drives progress, blocking in the
    /// driver when there is nothing to do. Waiting threads still make
    /// progress themselves; this one keeps rendezvous and incoming data
    /// moving while none waits, serves inline RPC handlers, and wakes the
    /// futures of requests it completes (so that they need not poll in a
    /// loop).
    pub fn spawn_progress_thread(&self) -> Result<ProgressThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let (node, flag) = (self.clone(), Arc::clone(&stop));
        self.core().progress_threads.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name(format!("navette-progress-{}", self.rank()))
            .spawn(move || {
                let run = || {
                    while !flag.load(Ordering::Acquire) {
                        let moved = node.progress()?;
                        node.wake_futures();
                        if !moved {
                            node.block_in_driver()?;
                        }
                    }
                    Ok(())
                };
                let ended = run();
                node.core().progress_threads.fetch_sub(1, Ordering::AcqRel);
                ended
            });
        let handle = spawned.map_err(|e| {
            self.core().progress_threads.fetch_sub(1, Ordering::AcqRel);
            crate::Error::Driver {
                driver: "progress",
                message: format!("cannot start the progress thread: {e}"),
            }
        })?;
        Ok(ProgressThread {
            node: self.clone(),
            stop,
            handle: Some(handle),
        })
    }
}

impl ProgressThread {
    /// Stops the thread and returns the error that ended it, if any.
    pub fn stop(mut self) -> Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        self.node.wake_driver();
        match self.handle.take() {
            Some(handle) => handle.join().unwrap_or_else(|_| {
                Err(crate::Error::Driver {
                    driver: "progress",
                    message: "the progress thread panicked".into(),
                })
            }),
            None => Ok(()),
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        if let Err(err) = self.halt() {
            tracing::warn!(%err, "progress thread ended with an error");
        }
    }
}
