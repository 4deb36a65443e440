//! Starting and ending a session: a node over shared memory or tcp, found
//! through a bootstrap.
//!
//! [`init`] takes the bootstrap from the environment; [`init_with`] picks
//! the driver ([`DriverKind`]: shared memory by default, since the ranks of
//! a session started by the embedded launcher share a host; `tcp` on
//! request, or `NAVETTE_DRIVER=tcp|shm`), sets it up with the other ranks,
//! creates the node and its rails (one per peer), then fences so that every
//! rank is ready before anyone sends. Over tcp, setting up binds the
//! listener and publishes its address (no socket to peers yet); over shm it
//! maps the job's segment. [`Node::finalize`] waits until every send the
//! node accepted has completed, fences again (still serving peers
//! meanwhile, so none is left waiting for data), and closes the rails.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use navette_core::EngineConfig;
use navette_session::Bootstrap;

use crate::shm::{ShmConfig, ShmDriver};
use crate::shm_tcp::ShmTcpDriver;
use crate::tcp::{TcpConfig, TcpDriver};
use crate::{Error, Node, NodeConfig, Result};

/// Environment variable that forces the driver: `tcp`, `shm`, `shm+tcp` or
/// `auto`.
pub const DRIVER_VAR: &str = "NAVETTE_DRIVER";

/// The environment variable that chooses packet strategies: a strategy
/// for every channel and `CHANNEL=NAME` overrides (see
/// [`EngineConfig::set_strategies`]), e.g. `aggregate,3=split`.
pub const STRATEGY_VAR: &str = "NAVETTE_STRATEGY";

/// The environment variable that filters the log on standard error
/// (`tracing_subscriber`'s filter syntax, e.g. `debug` or
/// `navette::shm=trace`; warnings by default).
pub const LOG_VAR: &str = "NAVETTE_LOG";

/// Which driver a session's node runs over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriverKind {
    /// Shared memory: every rank started by the embedded launcher is on
    /// this host.
    #[default]
    Auto,
    /// The shared-memory driver (every rank on this host).
    Shm,
    /// The tcp driver.
    Tcp,
    /// Both: shared memory and a tcp rail to every peer (see
    /// [`crate::shm_tcp`]).
    ShmTcp,
}

impl std::str::FromStr for DriverKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "" | "auto" => Ok(Self::Auto),
            "shm" => Ok(Self::Shm),
            "tcp" => Ok(Self::Tcp),
            "shm+tcp" => Ok(Self::ShmTcp),
            "sim" => Err(Error::Config(format!(
                "{DRIVER_VAR}=sim: the simulated network runs inside one process \
                 (navette::sim::SimCluster, or `navette demo --sim`)"
            ))),
            other => Err(Error::Config(format!(
                "{DRIVER_VAR}={other}: unknown driver (auto, shm, tcp, shm+tcp)"
            ))),
        }
    }
}

impl DriverKind {
    /// `self`, unless `NAVETTE_DRIVER` names a driver.
    pub fn from_env(self) -> Result<Self> {
        match env_setting(DRIVER_VAR)? {
            Some(value) if !value.is_empty() => value.parse(),
            _ => Ok(self),
        }
    }
}

/// The value of the environment variable `var`, `None` if it is unset; a
/// value that is not UTF-8 is an error naming the variable (never taken
/// for unset: a setting the user made is never ignored silently).
pub(crate) fn env_setting(var: &str) -> Result<Option<String>> {
    match std::env::var(var) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(value)) => Err(Error::Config(format!(
            "{var}={}: not valid UTF-8",
            value.to_string_lossy()
        ))),
    }
}

/// Settings of a session's node. Every field has a default.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Waiting and progress.
    pub node: NodeConfig,
    /// The engine (the rank is taken from the bootstrap);
    /// `NAVETTE_STRATEGY` adds to its strategy settings.
    pub engine: EngineConfig,
    /// The driver; `NAVETTE_DRIVER` overrides it.
    pub driver: DriverKind,
    /// The tcp driver; `NAVETTE_TCP_CONGESTION` overrides its congestion
    /// control, and `NAVETTE_TCP_LINKS` its links (one rail per peer and
    /// network: see [`crate::tcp`]).
    pub tcp: TcpConfig,
    /// The shm driver; `NAVETTE_SHM_COPY` overrides its copy mode.
    pub shm: ShmConfig,
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
            driver: DriverKind::Auto,
            tcp: TcpConfig::default(),
            shm: ShmConfig::default(),
            log_to_stderr: true,
            report_on_sigusr1: true,
        }
    }
}

/// Sends `tracing` events to standard error, filtered by `NAVETTE_LOG`,
/// unless a subscriber is already installed. A filter that does not parse
/// is said so on standard error, and warnings are logged, as when the
/// variable is unset or empty.
fn log_to_stderr() {
    use std::io::Write;
    use tracing_subscriber::EnvFilter;
    let set = std::env::var_os(LOG_VAR).is_some_and(|v| !v.is_empty());
    let filter = if set {
        EnvFilter::try_from_env(LOG_VAR).unwrap_or_else(|e| {
            // Not `eprintln!`: a closed standard error must not panic.
            let _ = writeln!(
                std::io::stderr(),
                "navette: {LOG_VAR} is not a log filter ({e}): only warnings are logged"
            );
            EnvFilter::new("warn")
        })
    } else {
        EnvFilter::new("warn")
    };
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

/// Joins the session that `bootstrap` describes, over the driver the
/// configuration (or `NAVETTE_DRIVER`) names. Every rank of the job must
/// call it (it fences).
pub fn init_with(bootstrap: Arc<dyn Bootstrap>, config: RuntimeConfig) -> Result<Node> {
    match config.driver.from_env()? {
        DriverKind::Tcp => Ok(init_tcp(bootstrap, config)?.0),
        DriverKind::ShmTcp => Ok(init_shm_tcp(bootstrap, config)?.0),
        DriverKind::Auto | DriverKind::Shm => Ok(init_shm(bootstrap, config)?.0),
    }
}

/// As [`init_with`] over the shm driver, also returning the driver (for
/// its statistics).
pub fn init_shm(
    bootstrap: Arc<dyn Bootstrap>,
    config: RuntimeConfig,
) -> Result<(Node, Arc<ShmDriver>)> {
    start(bootstrap, config, |bootstrap, config| {
        ShmDriver::open(bootstrap, &config.shm.clone().from_env()?)
    })
}

/// As [`init_with`] over the tcp driver, also returning the driver (for
/// its statistics).
pub fn init_tcp(
    bootstrap: Arc<dyn Bootstrap>,
    config: RuntimeConfig,
) -> Result<(Node, Arc<TcpDriver>)> {
    let (node, driver) = start(bootstrap, config, |bootstrap, config| {
        TcpDriver::bind(bootstrap, &config.tcp.clone().from_env()?)
    })?;
    driver.connect_eagerly(node.core());
    Ok((node, driver))
}

/// As [`init_with`] over shared memory and tcp together (a shm rail and a
/// tcp rail to every peer), also returning the driver (for statistics).
pub fn init_shm_tcp(
    bootstrap: Arc<dyn Bootstrap>,
    config: RuntimeConfig,
) -> Result<(Node, Arc<ShmTcpDriver>)> {
    let (node, driver) = start(bootstrap, config, |bootstrap, config| {
        let shm = ShmDriver::open(Arc::clone(&bootstrap), &config.shm.clone().from_env()?)?;
        let tcp = TcpDriver::bind(Arc::clone(&bootstrap), &config.tcp.clone().from_env()?)?;
        Ok(Arc::new(ShmTcpDriver::new(shm, tcp, bootstrap)))
    })?;
    driver.tcp().connect_eagerly(node.core());
    Ok((node, driver))
}

/// What [`start`] needs of a driver beyond [`crate::driver::Driver`].
trait Attach {
    /// Declares the driver's rails on the node it serves.
    fn declare_rails(&self, node: &crate::NodeCore);
}

impl Attach for ShmDriver {
    fn declare_rails(&self, node: &crate::NodeCore) {
        self.attach(node);
    }
}

impl Attach for TcpDriver {
    fn declare_rails(&self, node: &crate::NodeCore) {
        self.attach(node);
    }
}

impl Attach for ShmTcpDriver {
    fn declare_rails(&self, node: &crate::NodeCore) {
        self.attach(node);
    }
}

/// Sets up logging, the driver that `open` makes, the node over it and its
/// rails, then fences with every rank.
fn start<D: crate::driver::Driver + Attach + 'static>(
    bootstrap: Arc<dyn Bootstrap>,
    config: RuntimeConfig,
    open: impl FnOnce(Arc<dyn Bootstrap>, &RuntimeConfig) -> Result<Arc<D>>,
) -> Result<(Node, Arc<D>)> {
    if config.log_to_stderr {
        log_to_stderr();
    }
    let driver = open(Arc::clone(&bootstrap), &config)?;
    let mut engine = config.engine;
    if let Some(setting) = env_setting(STRATEGY_VAR)? {
        engine
            .set_strategies(&setting)
            .map_err(|e| Error::Config(format!("{STRATEGY_VAR}={setting:?}: {e}")))?;
    }
    let node = Node::new(
        bootstrap.rank(),
        bootstrap.size(),
        engine,
        config.node,
        driver.clone(),
    );
    driver.declare_rails(node.core());
    if config.report_on_sigusr1 {
        crate::diagnostics::report_on_sigusr1(&node)?;
    }
    bootstrap.fence()?;
    Ok((node, driver))
}

impl Node {
    /// Leaves the session: waits until every send this node accepted has
    /// completed (detached non-blocking sends included: those that failed
    /// with nobody waiting were logged as they did, and their count is
    /// logged again here, see [`Node::unwaited_failures`]), then lets the
    /// driver end the session — over tcp, a fence of every rank, then the
    /// connections close. Every rank must call it, once. Other handles on
    /// this node must not start new operations meanwhile.
    ///
    /// A second finalize (through another handle) fails at once with
    /// [`UsageError::Finalized`](crate::UsageError::Finalized), and so
    /// does, afterwards, anything on any handle that sends or needs a
    /// round of progress: sends, RPC calls, waits, tests, serving.
    pub fn finalize(self) -> Result<()> {
        use crate::node::{FINALIZED, FINALIZING, RUNNING};
        let life = &self.core().life;
        if life
            .compare_exchange(RUNNING, FINALIZING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(crate::UsageError::Finalized.into());
        }
        let ended = self.end_session();
        life.store(FINALIZED, Ordering::Release);
        ended
    }

    /// [`Self::finalize`] once it is this handle's to make.
    fn end_session(&self) -> Result<()> {
        let unwaited = self
            .wait_until(&|| "every accepted send to complete".to_owned(), |state| {
                state.engine.sends_flushed().then_some(state.unwaited())
            })?;
        if unwaited > 0 {
            tracing::warn!(
                rank = self.rank(),
                "{unwaited} requests nobody waited for failed (each was logged when it did)"
            );
        }
        self.dump_stats_if_asked()?;
        let core = self.core();
        core.driver().finalize(core)
    }
}
