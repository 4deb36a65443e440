//! Stall diagnostics on demand: `kill -USR1 <pid>` prints what every node of
//! the process waits for ([`Node::report`]) on standard error.
//!
//! The signal is caught by signal-hook's self-pipe, and a dedicated thread,
//! started on first use, prints the reports: nothing runs in the signal
//! handler itself.

use std::sync::{Mutex, OnceLock, Weak};

use signal_hook::consts::SIGUSR1;
use signal_hook::iterator::Signals;

use crate::node::NodeCore;
use crate::{Error, Node, Result};

static WATCHED: Mutex<Vec<Weak<NodeCore>>> = Mutex::new(Vec::new());
static LISTENER: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Prints `node`'s report on standard error whenever the process receives
/// SIGUSR1, for as long as the node lives. Calling it again for the same
/// node changes nothing.
pub fn report_on_sigusr1(node: &Node) -> Result<()> {
    let started = LISTENER.get_or_init(|| {
        let mut signals = Signals::new([SIGUSR1]).map_err(|e| e.to_string())?;
        std::thread::Builder::new()
            .name("navette-sigusr1".into())
            .spawn(move || {
                for _ in signals.forever() {
                    print_reports();
                }
            })
            .map(drop)
            .map_err(|e| e.to_string())
    });
    if let Err(message) = started {
        return Err(Error::Driver {
            driver: "diagnostics",
            message: format!("cannot watch SIGUSR1: {message}"),
        });
    }
    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    watched.retain(|n| n.strong_count() > 0);
    let core = std::sync::Arc::downgrade(node.core());
    if !watched.iter().any(|n| n.ptr_eq(&core)) {
        watched.push(core);
    }
    Ok(())
}

fn print_reports() {
    let nodes: Vec<_> = WATCHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for node in nodes {
        eprint!("navette: SIGUSR1 report\n{}", node.report());
    }
}
