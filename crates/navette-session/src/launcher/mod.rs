//! The embedded launcher: start the ranks of a job on this host, serve
//! them the bootstrap, forward their output, fail fast.
//!
//! [`launch`] draws a random job id and a 32-byte job key, starts a
//! [`BootstrapServer`], and spawns `ranks` copies of the program, each
//! with the [`env`](mod@crate::env) variables (`NAVETTE_RANK`, `NAVETTE_SIZE`,
//! `NAVETTE_JOB_ID`, `NAVETTE_JOB_KEY`, `NAVETTE_BOOTSTRAP`) and its
//! standard input closed (input is not forwarded). Each rank's standard
//! output and error are forwarded line by line to ours, prefixed with
//! `[rank] ` unless [`LaunchConfig::prefix_output`] is off.
//!
//! # Ending a job
//!
//! The launcher waits for every rank. With [`LaunchConfig::fail_fast`]
//! (the default), the first rank that exits with a non-zero status or by a
//! signal ends the job: the other ranks get SIGTERM, then SIGKILL after
//! [`LaunchConfig::grace`] (2 s by default). A [`LaunchConfig::timeout`]
//! ends the job the same way. Each rank leads a process group of its own
//! and signals go to the whole group, so what a rank started (the commands
//! of an `sh -c` script) goes too; once every rank has exited, anything
//! left in their groups is ended the same way. When [`launch`] returns, no
//! process of the job is running.
//!
//! The exit code ([`ExitReport::exit_code`]) is the first failing rank's
//! exit code (128 + the signal number if it was killed by a signal), 124
//! for a timeout, as `timeout(1)` does, 128 + the signal number for an
//! interruption, 0 if every rank succeeded, and 1 if they succeeded but
//! some of their output could not be written (a full disk, an I/O error:
//! [`ExitReport::lost_output`], which the launcher also prints; a reader
//! that went away, as `| head` does, is no failure).
//!
//! # Interruption
//!
//! The ranks do not belong to the launcher's process group, so a Ctrl-C
//! in a terminal reaches the launcher only. Pass an
//! [`LaunchConfig::interrupt`] flag that a signal handler sets to the
//! signal's number (`signal_hook::flag::register_usize` does this without
//! `unsafe`; the `navette run` command registers SIGINT, SIGTERM and
//! SIGHUP): the launcher then ends the job as for a failure. A launcher
//! killed by SIGKILL cannot clean up, and its ranks go on until they end
//! themselves.

mod group;
mod output;

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use self::group::Group;
use self::output::{Sink, forward};
use crate::secret::{random_job, to_hex};
use crate::{BootstrapError, BootstrapServer, JOB_KEY_LEN, env};

/// Most ranks of one job on this host. Each rank is a process with three
/// launcher threads (waiting for it, forwarding its output and its
/// errors); far past this the host runs out of threads or memory while
/// the job starts. The bootstrap server refuses larger jobs too.
pub const MAX_RANKS: u32 = crate::server::MAX_RANKS;

/// Exit code of a job that ran out of time, as `timeout(1)`.
pub const TIMEOUT_EXIT_CODE: i32 = 124;
/// Default time between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// How often the launcher looks at the interrupt flag.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);
/// How often the launcher looks whether a terminated group is empty.
const GROUP_POLL: Duration = Duration::from_millis(10);
/// Longest wait for the output of processes that left their group.
const DRAIN_WINDOW: Duration = Duration::from_secs(1);

/// What to launch and how.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    /// Number of ranks, from 1 to [`MAX_RANKS`].
    pub ranks: u32,
    /// The program each rank runs.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Prefix each line of output with `[rank] `.
    pub prefix_output: bool,
    /// End the job when the first rank fails.
    pub fail_fast: bool,
    /// End the job after this long.
    pub timeout: Option<Duration>,
    /// Extra environment variables for the ranks (the `NAVETTE_*` ones
    /// win over these).
    pub env: Vec<(OsString, OsString)>,
    /// Time between SIGTERM and SIGKILL when ending the job.
    pub grace: Duration,
    /// Set by a signal handler to the number of the signal received: the
    /// launcher then ends the job. See the module documentation.
    pub interrupt: Option<Arc<AtomicUsize>>,
    /// This rank writes to the launcher's own standard error instead of
    /// through the forwarder (unprefixed, and a terminal stays a terminal:
    /// progress bars draw).
    pub inherit_stderr: Option<u32>,
}

impl LaunchConfig {
    /// `ranks` copies of `program` with no arguments, prefixed output,
    /// fail-fast, no timeout.
    pub fn new(ranks: u32, program: impl Into<OsString>) -> Self {
        Self {
            ranks,
            program: program.into(),
            args: Vec::new(),
            prefix_output: true,
            fail_fast: true,
            timeout: None,
            env: Vec::new(),
            grace: DEFAULT_GRACE,
            interrupt: None,
            inherit_stderr: None,
        }
    }

    /// Sets the arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Every rank exited with status 0.
    Success,
    /// This rank failed first.
    RankFailed {
        /// The rank.
        rank: u32,
        /// How it ended.
        status: ExitStatus,
    },
    /// The timeout expired; every rank was ended.
    TimedOut,
    /// A signal interrupted the launcher; every rank was ended.
    Interrupted {
        /// The signal's number.
        signal: i32,
    },
}

/// One rank's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankExit {
    /// The rank.
    pub rank: u32,
    /// Its process id (now gone).
    pub pid: u32,
    /// How it ended; `None` if waiting for it failed.
    pub status: Option<ExitStatus>,
}

/// What [`launch`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitReport {
    /// How the job ended.
    pub outcome: Outcome,
    /// Every rank, in rank order.
    pub ranks: Vec<RankExit>,
    /// Why the ranks' output could not all be forwarded (a full disk, an
    /// I/O error), if it could not; the launcher has said so on its
    /// standard error. A reader that went away (a closed pipe) is not
    /// counted.
    pub lost_output: Option<String>,
}

impl ExitReport {
    /// The launcher's exit code; see the module documentation.
    pub fn exit_code(&self) -> i32 {
        match &self.outcome {
            Outcome::Success if self.lost_output.is_some() => 1,
            Outcome::Success => 0,
            Outcome::RankFailed { status, .. } => status_code(*status),
            Outcome::TimedOut => TIMEOUT_EXIT_CODE,
            Outcome::Interrupted { signal } => 128 + signal,
        }
    }
}

/// A status as a shell reports it: the exit code, or 128 + the signal.
pub fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

/// Why a job could not be launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The configuration cannot be run.
    #[error("{0}")]
    Config(String),
    /// The bootstrap server could not start.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A rank could not be started; the ranks already started were ended.
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        /// The rank.
        rank: u32,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A launcher thread could not be started.
    #[error("cannot start a launcher thread: {0}")]
    Thread(#[source] io::Error),
}

/// Runs a job, forwarding its output to our standard output and error.
pub fn launch(config: &LaunchConfig) -> Result<ExitReport, LaunchError> {
    launch_with_output(config, Box::new(io::stdout()), Box::new(io::stderr()))
}

/// Runs a job, forwarding its standard output to `out` and its standard
/// error to `err`.
pub fn launch_with_output(
    config: &LaunchConfig,
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
) -> Result<ExitReport, LaunchError> {
    if config.ranks == 0 {
        return Err(LaunchError::Config("a job needs at least one rank".into()));
    }
    if config.ranks > MAX_RANKS {
        return Err(LaunchError::Config(format!(
            "{} ranks asked for: the local launcher runs at most {MAX_RANKS} on one host",
            config.ranks
        )));
    }
    let (job_id, job_key) = random_job()?;
    let _segments = SegmentSweeper(job_id);
    let server = BootstrapServer::start(config.ranks, job_id, job_key)?;
    let mut job = Job::new(config, &server, Sink::new(out), Sink::new(err));
    for rank in 0..config.ranks {
        let started = spawn_rank(config, rank, &server, job_id, &job_key)
            .map_err(|source| LaunchError::Spawn {
                rank,
                program: config.program.to_string_lossy().into_owned(),
                source,
            })
            .and_then(|child| job.adopt(rank, child));
        if let Err(e) = started {
            job.end_all();
            job.finish();
            return Err(e);
        }
    }
    server.close_admissions();
    let outcome = job.supervise();
    job.end_all();
    let (out, err) = (job.out.clone(), job.err.clone());
    let ranks = job.finish();
    server.shutdown();
    let lost_output = match (out.lost(), err.lost()) {
        (Some(why), _) => Some(format!("the ranks' standard output: {why}")),
        (None, Some(why)) => Some(format!("the ranks' standard error: {why}")),
        (None, None) => None,
    };
    if let Some(why) = &lost_output {
        err.emit(
            "",
            format!("navette: output lost: cannot write {why}\n").as_bytes(),
        );
    }
    Ok(ExitReport {
        outcome,
        ranks,
        lost_output,
    })
}

/// The path of the shared-memory segment of job `job_id` (see the shm
/// driver): `/dev/shm/navette-<job id in 16 hex digits>`.
pub fn job_segment_path(job_id: u64) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/dev/shm/navette-{job_id:016x}"))
}

/// Removes the job's shared segment when the launcher is done with the job:
/// ranks unlink it as soon as all have mapped it, but a rank that dies
/// before that would leave it behind.
struct SegmentSweeper(u64);

impl Drop for SegmentSweeper {
    fn drop(&mut self) {
        let path = job_segment_path(self.0);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                eprintln!("navette: cannot remove {}: {e}", path.display());
            }
            _ => {}
        }
    }
}

fn spawn_rank(
    config: &LaunchConfig,
    rank: u32,
    server: &BootstrapServer,
    job_id: u64,
    job_key: &[u8; JOB_KEY_LEN],
) -> io::Result<Child> {
    Command::new(&config.program)
        .args(&config.args)
        .envs(config.env.iter().map(|(k, v)| (k, v)))
        .env(env::RANK, rank.to_string())
        .env(env::SIZE, config.ranks.to_string())
        .env(env::JOB_ID, format!("{job_id:016x}"))
        .env(env::JOB_KEY, to_hex(job_key))
        .env(env::BOOTSTRAP, server.socket_path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(if config.inherit_stderr == Some(rank) {
            Stdio::inherit()
        } else {
            Stdio::piped()
        })
        .process_group(0)
        .spawn()
}

/// The running job: its ranks, and the threads waiting for them and
/// forwarding their output.
struct Job<'a> {
    config: &'a LaunchConfig,
    /// Told of each rank's end (see [`BootstrapServer::exited`]).
    server: &'a BootstrapServer,
    out: Sink,
    err: Sink,
    pids: Vec<u32>,
    statuses: Vec<Option<ExitStatus>>,
    running: usize,
    exits_tx: Sender<(u32, io::Result<ExitStatus>)>,
    exits: Receiver<(u32, io::Result<ExitStatus>)>,
    drained_tx: Sender<()>,
    drained: Receiver<()>,
    threads: Vec<JoinHandle<()>>,
    forwarders: usize,
}

impl<'a> Job<'a> {
    fn new(config: &'a LaunchConfig, server: &'a BootstrapServer, out: Sink, err: Sink) -> Self {
        let (exits_tx, exits) = mpsc::channel();
        let (drained_tx, drained) = mpsc::channel();
        Self {
            config,
            server,
            out,
            err,
            pids: Vec::new(),
            statuses: Vec::new(),
            running: 0,
            exits_tx,
            exits,
            drained_tx,
            drained,
            threads: Vec::new(),
            forwarders: 0,
        }
    }

    /// Registers a started rank with the server and starts its threads.
    fn adopt(&mut self, rank: u32, mut child: Child) -> Result<(), LaunchError> {
        let pid = child.id();
        self.server.admit(rank, pid);
        self.pids.push(pid);
        self.statuses.push(None);
        self.running += 1;
        let prefix = if self.config.prefix_output {
            format!("[{rank}] ")
        } else {
            String::new()
        };
        let stdout = child
            .stdout
            .take()
            .map(|s| (Box::new(s) as Box<dyn io::Read + Send>, self.out.clone()));
        let stderr = child
            .stderr
            .take()
            .map(|s| (Box::new(s) as Box<dyn io::Read + Send>, self.err.clone()));
        let exits = self.exits_tx.clone();
        // If the waiter cannot start, the child is dropped unwaited: the
        // caller ends its group, and it stays a zombie until we exit.
        let waiter = spawn_thread("navette-rank-wait", move || {
            let status = child.wait();
            let _ = exits.send((rank, status));
        })
        .inspect_err(|_| self.running -= 1)?;
        self.threads.push(waiter);
        for (src, sink) in [stdout, stderr].into_iter().flatten() {
            let prefix = prefix.clone();
            let drained = self.drained_tx.clone();
            let forwarder = spawn_thread("navette-rank-output", move || {
                forward(src, &prefix, &sink);
                let _ = drained.send(());
            })?;
            self.threads.push(forwarder);
            self.forwarders += 1;
        }
        Ok(())
    }

    fn record(&mut self, rank: u32, status: io::Result<ExitStatus>) -> Option<ExitStatus> {
        self.running -= 1;
        // Gone, whether or not it ever connected: the other ranks' fences
        // fail rather than wait for it.
        self.server.exited(rank);
        match status {
            Ok(status) => {
                self.statuses[rank as usize] = Some(status);
                Some(status)
            }
            Err(e) => {
                self.err.emit(
                    "",
                    format!("navette: cannot wait for rank {rank}: {e}\n").as_bytes(),
                );
                None
            }
        }
    }

    /// Waits until the job ends: every rank exited, the first failure under
    /// fail-fast, the timeout, or an interruption.
    fn supervise(&mut self) -> Outcome {
        let deadline = self.config.timeout.map(|t| Instant::now() + t);
        let mut first_failure = None;
        while self.running > 0 {
            if let Some(signal) = self.interrupted() {
                return Outcome::Interrupted { signal };
            }
            let now = Instant::now();
            let mut wait = deadline.map(|d| d.saturating_duration_since(now));
            if wait == Some(Duration::ZERO) {
                return Outcome::TimedOut;
            }
            if self.config.interrupt.is_some() {
                wait = Some(wait.map_or(INTERRUPT_POLL, |w| w.min(INTERRUPT_POLL)));
            }
            let event = match wait {
                Some(wait) => self.exits.recv_timeout(wait),
                None => self
                    .exits
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            let (rank, status) = match event {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => continue,
                // Unreachable: `self` holds a sender.
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let failed = self.record(rank, status).is_none_or(|s| !s.success());
            if failed && first_failure.is_none() {
                let status =
                    self.statuses[rank as usize].unwrap_or_else(|| ExitStatus::from_raw(1 << 8));
                first_failure = Some(Outcome::RankFailed { rank, status });
                if self.config.fail_fast {
                    break;
                }
            }
        }
        first_failure.unwrap_or(Outcome::Success)
    }

    fn interrupted(&self) -> Option<i32> {
        let flag = self.config.interrupt.as_ref()?;
        match flag.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(i32::try_from(signal).unwrap_or(i32::MAX - 128)),
        }
    }

    /// Ends every process of the job: SIGTERM to each rank's group that
    /// still has processes, SIGKILL to what is left after the grace
    /// period, then waits for every rank.
    fn end_all(&mut self) {
        self.server.ending();
        let groups: Vec<Group> = self.pids.iter().filter_map(|&pid| Group::of(pid)).collect();
        let alive = |groups: &[Group]| groups.iter().any(|g| g.exists());
        if alive(&groups) {
            groups.iter().for_each(|g| g.terminate());
            let deadline = Instant::now() + self.config.grace;
            while Instant::now() < deadline && (self.running > 0 || alive(&groups)) {
                if self.running > 0 {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    if let Ok((rank, status)) = self.exits.recv_timeout(wait.min(GROUP_POLL)) {
                        self.record(rank, status);
                    }
                } else {
                    std::thread::sleep(GROUP_POLL);
                }
            }
            groups.iter().for_each(|g| g.kill());
        }
        while self.running > 0 {
            match self.exits.recv() {
                Ok((rank, status)) => {
                    self.record(rank, status);
                }
                Err(_) => break,
            }
        }
    }

    /// Joins the threads (output forwarders for at most [`DRAIN_WINDOW`]
    /// once every rank is gone: a process that left its group may hold a
    /// pipe open) and returns the ranks' ends.
    fn finish(self) -> Vec<RankExit> {
        let deadline = Instant::now() + DRAIN_WINDOW;
        let mut drained = 0;
        while drained < self.forwarders {
            let wait = deadline.saturating_duration_since(Instant::now());
            if self.drained.recv_timeout(wait).is_err() {
                break;
            }
            drained += 1;
        }
        if drained == self.forwarders {
            for thread in self.threads {
                let _ = thread.join();
            }
        }
        self.pids
            .iter()
            .zip(&self.statuses)
            .enumerate()
            .map(|(rank, (&pid, &status))| RankExit {
                rank: rank as u32,
                pid,
                status,
            })
            .collect()
    }
}

fn spawn_thread(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, LaunchError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(LaunchError::Thread)
}
