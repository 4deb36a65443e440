//! Errors of segment creation, attachment and removal.

use std::io;

/// What went wrong with a shared-memory segment.
///
/// Attaching to an object that is not a valid segment of the expected job
/// (foreign, corrupt, truncated, of another job or rank count) gives one of
/// these errors, never a panic or an out-of-bounds access.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    /// The requested geometry is invalid.
    #[error("invalid segment configuration: {0}")]
    Config(&'static str),
    /// `create` found the name taken (a live job, or debris of a crashed
    /// one: see [`crate::unlink_job`]).
    #[error("shared-memory object {name} already exists")]
    Exists {
        /// Object name.
        name: String,
    },
    /// The filesystem behind shared memory (`/dev/shm`, often capped in
    /// containers) has not room for the whole segment: the object would
    /// take its size, and a rank would die of SIGBUS when its ring first
    /// filled pages that cannot be had.
    #[error(
        "{name}: the segment needs {need} bytes, the shared-memory filesystem has {room} free \
         (raise the size of /dev/shm, or use fewer or smaller ring cells)"
    )]
    NoRoom {
        /// Object name.
        name: String,
        /// The segment's size.
        need: u64,
        /// Free bytes on the filesystem.
        room: u64,
    },
    /// `attach` found no object of that name.
    #[error("shared-memory object {name} does not exist")]
    NotFound {
        /// Object name.
        name: String,
    },
    /// The object is not private to this user (mode other than 0600, or
    /// another owner).
    #[error("{name}: refusing an object with mode {mode:o} owned by uid {uid}")]
    Permissions {
        /// Object name.
        name: String,
        /// Its permission bits.
        mode: u32,
        /// Its owner.
        uid: u32,
    },
    /// The object is smaller than its header says, or than a header.
    #[error("{name}: object is {found} bytes, expected {expected}")]
    Truncated {
        /// Object name.
        name: String,
        /// Its size.
        found: u64,
        /// The size its header (or a header) needs.
        expected: u64,
    },
    /// The magic number is 0: the creator has not finished initialising it.
    #[error("{name}: segment not initialised yet")]
    NotReady {
        /// Object name.
        name: String,
    },
    /// The magic number is not Navette's: a foreign object.
    #[error("{name}: not a Navette segment (magic {found:#018x})")]
    Foreign {
        /// Object name.
        name: String,
        /// The value found.
        found: u64,
    },
    /// A layout version this build does not read.
    #[error("{name}: layout version {found}, this build reads {expected}")]
    Version {
        /// Object name.
        name: String,
        /// Version found.
        found: u32,
        /// Version supported.
        expected: u32,
    },
    /// The header names another job.
    #[error("{name}: segment of job {found:#018x}, expected {expected:#018x}")]
    JobMismatch {
        /// Object name.
        name: String,
        /// Job id found.
        found: u64,
        /// Job id expected.
        expected: u64,
    },
    /// The header has another rank count.
    #[error("{name}: segment for {found} ranks, expected {expected}")]
    RankMismatch {
        /// Object name.
        name: String,
        /// Rank count found.
        found: u32,
        /// Rank count expected.
        expected: u32,
    },
    /// The header's geometry is invalid or inconsistent.
    #[error("{name}: corrupt header: {what}")]
    Corrupt {
        /// Object name.
        name: String,
        /// What is wrong.
        what: &'static str,
    },
    /// A system call failed.
    #[error("{op} {name}: {source}")]
    Io {
        /// The operation (`shm_open`, `ftruncate`, `mmap`, ...).
        op: &'static str,
        /// Object name.
        name: String,
        /// The error, errno kept.
        #[source]
        source: io::Error,
    },
}

impl ShmError {
    pub(crate) fn io(op: &'static str, name: &str, source: impl Into<io::Error>) -> Self {
        Self::Io {
            op,
            name: name.to_owned(),
            source: source.into(),
        }
    }
}
