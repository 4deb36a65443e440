//! A rank's side of the embedded launcher's bootstrap: [`LauncherClient`].

use std::fmt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::detect::LauncherEnv;
use crate::protocol::{self, Hello, MAX_KEY, MAX_VALUE, Reply, Request};
use crate::{Bootstrap, BootstrapError, JOB_KEY_LEN};

/// Longest wait for the server's answer to a rank's hello: the server
/// may wait up to [`REGISTRATION_WINDOW`](crate::REGISTRATION_WINDOW) for
/// the launcher to register the rank's process, then answers at once.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to the launcher's [`BootstrapServer`](crate::server::BootstrapServer).
///
/// One per process: the server accepts one connection per rank. Calls from
/// several threads are serialized (a `fence` holds the connection until
/// every rank has fenced).
pub struct LauncherClient {
    rank: u32,
    size: u32,
    job_id: u64,
    job_key: [u8; JOB_KEY_LEN],
    stream: Mutex<UnixStream>,
}

impl fmt::Debug for LauncherClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LauncherClient")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("job_id", &format_args!("{:016x}", self.job_id))
            .field("job_key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl LauncherClient {
    /// Connects to the server named by `env` and proves membership of the
    /// job with its key.
    pub fn connect(env: &LauncherEnv) -> Result<Self, BootstrapError> {
        Self::connect_to(&env.socket, env.rank, env.size, env.job_id, env.job_key)
    }

    /// Connects to the server at `socket` as `rank` of a job of `size`.
    /// A server that does not answer the hello within [`HELLO_TIMEOUT`]
    /// is an error (the socket is not a live launcher's).
    pub fn connect_to(
        socket: &Path,
        rank: u32,
        size: u32,
        job_id: u64,
        job_key: [u8; JOB_KEY_LEN],
    ) -> Result<Self, BootstrapError> {
        Self::connect_within(socket, rank, size, job_id, job_key, HELLO_TIMEOUT)
    }

    /// [`Self::connect_to`], the hello answered within `hello_timeout`.
    #[doc(hidden)]
    pub fn connect_within(
        socket: &Path,
        rank: u32,
        size: u32,
        job_id: u64,
        job_key: [u8; JOB_KEY_LEN],
        hello_timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            BootstrapError::Server(format!("cannot connect to {}: {e}", socket.display()))
        })?;
        // Only the hello has a deadline: a fence may wait as long as the
        // slowest rank takes to reach it.
        stream.set_read_timeout(Some(hello_timeout))?;
        let client = Self {
            rank,
            size,
            job_id,
            job_key,
            stream: Mutex::new(stream),
        };
        let reply = client
            .call(&Request::Hello(Hello { rank, job_key }))
            .map_err(|e| match e {
                BootstrapError::Io(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    BootstrapError::Server(format!(
                        "no answer from {} within {hello_timeout:?}: not a running launcher's socket",
                        socket.display()
                    ))
                }
                e => e,
            })?;
        match reply {
            Reply::Welcome => {
                client.stream()?.set_read_timeout(None)?;
                Ok(client)
            }
            Reply::Refused(reason) => Err(BootstrapError::Refused(reason)),
            other => Err(unexpected(&other)),
        }
    }

    /// The connection, locked: calls from several threads go one by one.
    fn stream(&self) -> Result<std::sync::MutexGuard<'_, UnixStream>, BootstrapError> {
        self.stream
            .lock()
            .map_err(|_| BootstrapError::Server("a thread panicked during a call".into()))
    }

    /// Sends one request and reads its reply.
    fn call(&self, request: &Request) -> Result<Reply, BootstrapError> {
        let body = request.encode()?;
        let mut stream = self.stream()?;
        protocol::write_frame(&mut *stream, &body)?;
        match protocol::read_frame(&mut *stream) {
            Ok(Some(body)) => Ok(Reply::decode(&body)?),
            Ok(None) => Err(BootstrapError::Server(
                "the launcher closed the connection".into(),
            )),
            Err(protocol::FrameError::Io(e)) => Err(e.into()),
            Err(e) => Err(BootstrapError::Server(e.to_string())),
        }
    }
}

fn unexpected(reply: &Reply) -> BootstrapError {
    BootstrapError::Server(format!("unexpected reply {reply:?}"))
}

fn check_key(key: &str) -> Result<(), BootstrapError> {
    Ok(protocol::check_len("key", key.len(), MAX_KEY)?)
}

impl Bootstrap for LauncherClient {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn job_id(&self) -> u64 {
        self.job_id
    }

    fn job_key(&self) -> &[u8; JOB_KEY_LEN] {
        &self.job_key
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        check_key(key)?;
        protocol::check_len("value", value.len(), MAX_VALUE)?;
        let request = Request::Put {
            key: key.to_owned(),
            value: value.to_vec(),
        };
        match self.call(&request)? {
            Reply::Done => Ok(()),
            Reply::Failed(reason) => Err(BootstrapError::Server(reason)),
            other => Err(unexpected(&other)),
        }
    }

    fn fence(&self) -> Result<(), BootstrapError> {
        match self.call(&Request::Fence)? {
            Reply::Done => Ok(()),
            Reply::Failed(reason) => Err(BootstrapError::Server(reason)),
            other => Err(unexpected(&other)),
        }
    }

    fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        check_key(key)?;
        let request = Request::Get {
            rank,
            key: key.to_owned(),
        };
        match self.call(&request)? {
            Reply::Value(value) => Ok(value),
            Reply::Missing => Err(BootstrapError::Missing {
                rank,
                key: key.to_owned(),
            }),
            Reply::Failed(reason) => Err(BootstrapError::Server(reason)),
            other => Err(unexpected(&other)),
        }
    }
}
