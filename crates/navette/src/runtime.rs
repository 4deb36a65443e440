//! Starting and ending a session: a node over tcp, found through a
//! bootstrap.
//!
//! [`init`] takes the bootstrap from the environment; [`init_with`] binds the tcp listener, publishes its address, creates the
//! node and its rails (one per peer, no socket yet), then fences so that
//! every rank's address is known before anyone dials. [`Node::finalize`]
//! waits until every send the node accepted has completed, fences again
//! (still serving peers meanwhile, so none is left waiting for data), and
//! closes the connections.

use std::sync::Arc;

use navette_core::EngineConfig;
use navette_session::Bootstrap;

use crate::tcp::{TcpConfig, TcpDriver};
use crate::{Node, NodeConfig, Result};

/// Settings of a session's node. Every field has a default.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Waiting and progress.
    pub node: NodeConfig,
    /// The engine (the rank is taken from the bootstrap).
    pub engine: EngineConfig,
    /// The tcp driver.
    pub tcp: TcpConfig,
    /// Print warnings (stalls, refused connections) on standard error
    /// unless the program installed a `tracing` subscriber of its own; the
    /// level comes from `NAVETTE_LOG` (default `warn`).
    pub log_to_stderr: bool,
    /// Print the node's report on standard error on SIGUSR1.
    pub report_on_sigusr1: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            node: NodeConfig::default(),
            engine: EngineConfig::default(),
            tcp: TcpConfig::default(),
            log_to_stderr: true,
            report_on_sigusr1: true,
        }
    }
}

/// Sends `tracing` events to standard error, filtered by `NAVETTE_LOG`,
/// unless a subscriber is already installed.
fn log_to_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("NAVETTE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Joins the session this process was started in: under `navette run`,
/// the launcher's job; started alone, a job of one (see
/// [`navette_session::from_env`]). Default settings.
pub fn init() -> Result<Node> {
    init_with(
        Arc::from(navette_session::from_env()?),
        RuntimeConfig::default(),
    )
}

/// Joins the session that `bootstrap` describes, over tcp. Every rank of
/// the job must call it (it fences).
pub fn init_with(bootstrap: Arc<dyn Bootstrap>, config: RuntimeConfig) -> Result<Node> {
    Ok(init_tcp(bootstrap, config)?.0)
}

/// As [`init_with`], also returning the tcp driver (for its statistics).
pub fn init_tcp(
    bootstrap: Arc<dyn Bootstrap>,
    config: RuntimeConfig,
) -> Result<(Node, Arc<TcpDriver>)> {
    if config.log_to_stderr {
        log_to_stderr();
    }
    let driver = TcpDriver::bind(Arc::clone(&bootstrap), &config.tcp)?;
    let node = Node::new(
        bootstrap.rank(),
        bootstrap.size(),
        config.engine,
        config.node,
        driver.clone(),
    );
    driver.attach(node.core());
    if config.report_on_sigusr1 {
        crate::diagnostics::report_on_sigusr1(&node)?;
    }
    bootstrap.fence()?;
    driver.connect_eagerly(node.core());
    Ok((node, driver))
}

impl Node {
    /// Leaves the session: waits until every send this node accepted has
    /// completed (detached non-blocking sends included), then lets the
    /// driver end the session — over tcp, a fence of every rank, then the
    /// connections close. Every rank must call it. Other handles on this
    /// node must not start new operations meanwhile.
    pub fn finalize(self) -> Result<()> {
        self.wait_until(&|| "every accepted send to complete".to_owned(), |state| {
            state.engine.sends_flushed().then_some(())
        })?;
        let core = self.core();
        core.driver().finalize(core)
    }
}
