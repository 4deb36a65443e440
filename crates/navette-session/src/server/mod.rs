//! The launcher's side of the bootstrap: [`BootstrapServer`].
//!
//! # The socket
//!
//! The server listens on a Unix stream socket `bootstrap.sock` in a fresh
//! directory `navette-<job id>` made with mode 0700 under
//! `$XDG_RUNTIME_DIR` (or `/tmp` when unset or unusable); the socket
//! itself is made mode 0600. Both are removed when the server shuts down.
//!
//! # How a rank is authenticated
//!
//! The first request on a connection is a hello carrying the rank claimed
//! and the job key. The server admits the connection only if all hold:
//!
//! 1. the peer's uid, read by the kernel (`SO_PEERCRED`), is ours;
//! 2. the peer's pid, also from `SO_PEERCRED`, is a process the launcher
//!    registered with [`BootstrapServer::admit`] for that rank, or a
//!    descendant of one (so `sh -c 'prog; …'` works); since a child may
//!    connect before the launcher has registered its pid, the server waits
//!    for the registration while admissions are open
//!    ([`BootstrapServer::close_admissions`], or [`REGISTRATION_WINDOW`]);
//! 3. the job key matches, compared in constant time;
//! 4. the rank has not connected before.
//!
//! Otherwise it answers `refused` with the reason, logs it on standard
//! error, records it ([`BootstrapServer::refusals`]) and closes.
//!
//! The key travels as is, not as an HMAC over a challenge: the socket is
//! reachable by our user only (0700 directory, 0600 socket, uid checked),
//! the key was handed to each rank in its environment, which that same
//! user can already read in `/proc`, and the client trusts the server it
//! found through its own environment. A challenge–response would protect
//! the key only from a server impersonator, who would need to be our user
//! already.
//!
//! # Threads
//!
//! One thread accepts, and one thread serves each connection: a job has a
//! handful of local ranks, each connection spends its life blocked in a
//! read or in a fence, and a blocking thread makes the fence a plain wait
//! on a condition variable. None of this runs on the launcher's thread.

mod peer;
mod state;

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use self::state::{Admission, Fence, State};
use crate::protocol::{self, Hello, Reply, Request};
use crate::secret::keys_equal;
use crate::{BootstrapError, JOB_KEY_LEN};

/// Longest wait for the launcher to register a connecting process.
pub const REGISTRATION_WINDOW: Duration = Duration::from_secs(30);
/// Longest wait for a connection's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest socket path (`sun_path` holds 108 bytes with the final NUL).
const MAX_SOCKET_PATH: usize = 100;

struct Shared {
    job_key: [u8; JOB_KEY_LEN],
    uid: u32,
    state: Mutex<State>,
    /// Signalled on every change of `state` a thread may wait for.
    changed: Condvar,
    refusals: Mutex<Vec<String>>,
    /// The launcher is ending the job (see [`BootstrapServer::ending`]):
    /// read without the state's lock, which a refusal's caller may hold.
    ending: AtomicBool,
    /// Clones of the open connections, to shut them down, by number.
    streams: Mutex<HashMap<u64, UnixStream>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A worker panicking while holding the lock leaves the state as
        // consistent as any single update makes it; go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refuse(&self, stream: &mut UnixStream, pid: Option<u32>, reason: String) {
        let who = pid.map_or("an unknown process".into(), |p| format!("process {p}"));
        let line = format!("refused a bootstrap connection from {who}: {reason}");
        // While the job ends, ranks killed as they connect are refused as a
        // matter of course: kept, not printed.
        if !self.ending.load(Ordering::Relaxed) {
            // Not `eprintln!`: a closed standard error must not panic.
            let _ = writeln!(io::stderr(), "navette: {line}");
        }
        self.refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
        if let Ok(body) = Reply::Refused(reason).encode() {
            let _ = protocol::write_frame(stream, &body);
        }
    }
}

/// Most ranks one server serves (its state keeps a few bytes per rank,
/// and each connected rank has a thread).
pub const MAX_RANKS: u32 = 4096;

/// The bootstrap server of one job; see the module documentation.
pub struct BootstrapServer {
    shared: Arc<Shared>,
    dir: PathBuf,
    path: PathBuf,
    acceptor: Option<JoinHandle<()>>,
}

impl fmt::Debug for BootstrapServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapServer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl BootstrapServer {
    /// Creates the socket for a job of `size` ranks and starts serving.
    pub fn start(
        size: u32,
        job_id: u64,
        job_key: [u8; JOB_KEY_LEN],
    ) -> Result<Self, BootstrapError> {
        if size == 0 {
            return Err(BootstrapError::Server(
                "a job needs at least one rank".into(),
            ));
        }
        if size > MAX_RANKS {
            return Err(BootstrapError::Server(format!(
                "a job of {size} ranks: one server serves at most {MAX_RANKS}"
            )));
        }
        let dir = runtime_dir().join(format!("navette-{job_id:016x}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| server_error(&dir, "cannot create", e))?;
        let path = dir.join("bootstrap.sock");
        let listener = bind_private(&path).inspect_err(|_| {
            let _ = std::fs::remove_dir(&dir);
        })?;
        let shared = Arc::new(Shared {
            job_key,
            uid: peer::own_uid(),
            state: Mutex::new(State::new(size)),
            changed: Condvar::new(),
            refusals: Mutex::new(Vec::new()),
            ending: AtomicBool::new(false),
            streams: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("navette-bootstrap".into())
                .spawn(move || accept_loop(&listener, &shared))?
        };
        Ok(Self {
            shared,
            dir,
            path,
            acceptor: Some(acceptor),
        })
    }

    /// The socket's path, for the ranks' `NAVETTE_BOOTSTRAP`.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Lets process `pid` (and its descendants) connect as `rank`.
    pub fn admit(&self, rank: u32, pid: u32) {
        self.shared.state().admit(rank, pid);
        self.shared.changed.notify_all();
    }

    /// The process of `rank` has ended: the rank has left the job, as when
    /// its connection closes (fences it has not entered fail, for the
    /// ranks waiting in them), even if it never connected. Without this a
    /// rank that ends before its first fence, cleanly or not, would leave
    /// the others waiting there for ever.
    pub fn exited(&self, rank: u32) {
        self.shared.state().depart(rank);
        self.shared.changed.notify_all();
    }

    /// The launcher is ending the job (a rank failed, the timeout, an
    /// interruption, or every rank is done): connections refused from now
    /// on are kept in [`Self::refusals`] but not printed, as the ranks
    /// being killed while they connect are refused as a matter of course.
    pub fn ending(&self) {
        self.shared.ending.store(true, Ordering::Relaxed);
    }

    /// Every rank has been admitted: refuse unknown processes at once
    /// instead of waiting for their registration.
    pub fn close_admissions(&self) {
        self.shared.state().admissions_open = false;
        self.shared.changed.notify_all();
    }

    /// The connections refused so far, one line each.
    pub fn refusals(&self) -> Vec<String> {
        self.shared
            .refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops serving, closes every connection (pending fences fail), joins
    /// the threads and removes the socket and its directory.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(acceptor) = self.acceptor.take() else {
            return;
        };
        self.shared.state().shutting_down = true;
        self.shared.changed.notify_all();
        // Wake the acceptor, which then sees the flag; if the connection
        // fails the acceptor is already gone.
        let _ = UnixStream::connect(&self.path);
        let _ = acceptor.join();
        for (_, stream) in self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        let workers = std::mem::take(
            &mut *self
                .shared
                .workers
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for worker in workers {
            let _ = worker.join();
        }
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Drop for BootstrapServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn server_error(path: &Path, what: &str, e: io::Error) -> BootstrapError {
    BootstrapError::Server(format!("{what} {}: {e}", path.display()))
}

/// `$XDG_RUNTIME_DIR` if it is an absolute directory short enough for a
/// socket path, else `/tmp`.
fn runtime_dir() -> PathBuf {
    let tmp = PathBuf::from("/tmp");
    let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) else {
        return tmp;
    };
    // Room for "/navette-<16 hex>/bootstrap.sock".
    let fits = xdg
        .to_str()
        .is_some_and(|s| s.len() + 41 <= MAX_SOCKET_PATH);
    if xdg.is_absolute() && xdg.is_dir() && fits {
        xdg
    } else {
        tmp
    }
}

fn bind_private(path: &Path) -> Result<UnixListener, BootstrapError> {
    let listener =
        UnixListener::bind(path).map_err(|e| server_error(path, "cannot listen on", e))?;
    // The directory is 0700 already, so nobody else can reach the socket
    // between bind and chmod.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| server_error(path, "cannot restrict", e))?;
    Ok(listener)
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    for (number, stream) in (0u64..).zip(listener.incoming()) {
        if shared.state().shutting_down {
            return;
        }
        let Ok(stream) = stream else {
            // Out of file descriptors and the like: the ranks concerned
            // see a failed connect; keep serving the others.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(number, clone);
        let worker = {
            let shared = Arc::clone(shared);
            std::thread::Builder::new()
                .name("navette-bootstrap-conn".into())
                .spawn(move || {
                    serve(stream, &shared);
                    // Close our clone too, so that the peer sees the end.
                    let clone = shared
                        .streams
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&number);
                    if let Some(clone) = clone {
                        let _ = clone.shutdown(std::net::Shutdown::Both);
                    }
                })
        };
        if let Ok(worker) = worker {
            shared
                .workers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(worker);
        }
    }
}

/// Serves one connection: authenticate, then answer requests until it
/// closes.
fn serve(mut stream: UnixStream, shared: &Shared) {
    let Some(rank) = authenticate(&mut stream, shared) else {
        return;
    };
    loop {
        let request = match protocol::read_frame(&mut stream) {
            Ok(Some(body)) => Request::decode(&body).map_err(|e| e.to_string()),
            Ok(None) => break,
            // The connection failed or ended inside a frame: the rank is
            // gone (killed, or its job ending after another rank failed),
            // not misbehaving. It leaves, as at a clean end; the launcher
            // reports how its process ended.
            Err(protocol::FrameError::Io(_)) => break,
            Err(e) => Err(e.to_string()),
        };
        let reply = match request {
            Ok(Request::Put { key, value }) => shared.state().put(rank, key, value),
            Ok(Request::Get { rank: of, key }) => shared.state().get(of, &key),
            Ok(Request::Fence) => fence(shared, rank),
            Ok(Request::Hello(_)) => Reply::Failed("already authenticated".into()),
            Err(e) => {
                // A malformed frame: say why, then close this connection.
                eprintln!("navette: bootstrap: rank {rank} sent a bad request: {e}");
                send(&mut stream, &Reply::Failed(format!("bad request: {e}")));
                break;
            }
        };
        if !send(&mut stream, &reply) {
            break;
        }
    }
    shared.state().depart(rank);
    shared.changed.notify_all();
}

fn send(stream: &mut UnixStream, reply: &Reply) -> bool {
    reply
        .encode()
        .is_ok_and(|body| protocol::write_frame(stream, &body).is_ok())
}

/// Reads the hello and admits the connection, answering welcome, or
/// refuses it; the rank admitted.
fn authenticate(stream: &mut UnixStream, shared: &Shared) -> Option<u32> {
    let peer = match peer::peer(stream) {
        Ok(peer) => peer,
        Err(e) => {
            shared.refuse(stream, None, format!("cannot read its credentials: {e}"));
            return None;
        }
    };
    let pid = Some(peer.pid);
    let hello = match read_hello(stream) {
        Ok(hello) => hello,
        Err(reason) => {
            shared.refuse(stream, pid, reason);
            return None;
        }
    };
    if peer.uid != shared.uid {
        shared.refuse(
            stream,
            pid,
            format!("it runs as uid {}, not {}", peer.uid, shared.uid),
        );
        return None;
    }
    // Check the key whatever the pid, so a refusal for the pid says
    // nothing about the key.
    let key_ok = keys_equal(&hello.job_key, &shared.job_key);
    if let Err(reason) = wait_admission(shared, peer.pid, hello.rank) {
        shared.refuse(stream, pid, reason);
        return None;
    }
    if !key_ok {
        shared.refuse(
            stream,
            pid,
            format!("wrong job key for rank {}", hello.rank),
        );
        return None;
    }
    if let Err(reason) = shared.state().connect(hello.rank) {
        shared.refuse(stream, pid, reason);
        return None;
    }
    let _ = stream.set_read_timeout(None);
    send(stream, &Reply::Welcome).then_some(hello.rank)
}

fn read_hello(stream: &mut UnixStream) -> Result<Hello, String> {
    stream
        .set_read_timeout(Some(HELLO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    match protocol::read_frame(stream) {
        Ok(Some(body)) => match Request::decode(&body) {
            Ok(Request::Hello(hello)) => Ok(hello),
            Ok(_) => Err("the first request is not a hello".into()),
            Err(e) => Err(format!("bad hello: {e}")),
        },
        Ok(None) => Err("closed before its hello".into()),
        Err(e) => Err(format!("no hello: {e}")),
    }
}

/// Waits until `pid` may claim `rank`, or is refused.
fn wait_admission(shared: &Shared, pid: u32, rank: u32) -> Result<(), String> {
    let lineage = peer::lineage(pid);
    let deadline = Instant::now() + REGISTRATION_WINDOW;
    let mut state = shared.state();
    loop {
        match state.admission(&lineage, rank) {
            Admission::Admitted => return Ok(()),
            Admission::Refused(reason) => return Err(reason),
            Admission::Unknown => {}
        }
        let now = Instant::now();
        if !state.admissions_open || state.shutting_down || now >= deadline {
            return Err(format!("process {pid} is not a rank of this job"));
        }
        state = shared
            .changed
            .wait_timeout(state, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn fence(shared: &Shared, rank: u32) -> Reply {
    let mut state = shared.state();
    let generation = match state.enter_fence(rank) {
        Fence::Decided(reply) => {
            shared.changed.notify_all();
            return reply;
        }
        Fence::Wait(generation) => generation,
    };
    loop {
        state = shared
            .changed
            .wait(state)
            .unwrap_or_else(|e| e.into_inner());
        if let Some(reply) = state.check_fence(rank, generation) {
            return reply;
        }
    }
}
