//! Identifiers and the small value types shared by the engine's API.

use std::fmt;

/// A process's number in the session.
pub type Rank = u32;

/// A communication space, like a communicator. Channel 0 is `default`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u16);

impl ChannelId {
    /// The channel that always exists.
    pub const DEFAULT: Self = Self(0);
    /// The channel of RPC calls and replies (`navette::rpc`), reserved:
    /// `navette`'s sends, receives and messages on it are refused
    /// ([`crate::UsageError::ReservedChannel`]); probing it is allowed.
    pub const RPC: Self = Self(u16::MAX);

    /// Whether it is reserved ([`Self::RPC`]).
    pub const fn is_reserved(self) -> bool {
        self.0 == Self::RPC.0
    }
}

/// One driver connection to a peer, as numbered by this engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RailId(pub u32);

/// A handle on a non-blocking operation; completions name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req#{}", self.0)
    }
}

/// Names a region of memory owned outside the engine (see [`crate::Memory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemHandle(pub u64);

/// A byte range inside a memory region: what packet plans and receives refer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemRef {
    /// The region.
    pub handle: MemHandle,
    /// First byte.
    pub offset: usize,
    /// Number of bytes.
    pub len: usize,
}

impl MemRef {
    /// The whole region `handle`, `len` bytes long.
    pub fn whole(handle: MemHandle, len: usize) -> Self {
        Self {
            handle,
            offset: 0,
            len,
        }
    }

    /// The sub-range `[start, start + len)` of this range.
    pub fn slice(&self, start: usize, len: usize) -> Self {
        debug_assert!(start + len <= self.len, "sub-range inside its range");
        Self {
            handle: self.handle,
            offset: self.offset + start,
            len,
        }
    }
}

/// Which senders a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Any rank.
    Any,
    /// Only this rank.
    Rank(Rank),
}

impl Source {
    /// Whether a message from `rank` is accepted.
    #[inline]
    pub fn accepts(self, rank: Rank) -> bool {
        match self {
            Self::Any => true,
            Self::Rank(r) => r == rank,
        }
    }

    /// The one rank accepted, if the source names one.
    pub fn rank(self) -> Option<Rank> {
        match self {
            Self::Any => None,
            Self::Rank(r) => Some(r),
        }
    }
}

impl From<Rank> for Source {
    fn from(rank: Rank) -> Self {
        Self::Rank(rank)
    }
}

/// A tag pattern: an incoming tag `t` matches when `t & mask == tag & mask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TagMatch {
    /// The tag bits to compare.
    pub tag: u64,
    /// Which bits to compare.
    pub mask: u64,
}

impl TagMatch {
    /// Exactly `tag`.
    #[inline]
    pub fn exact(tag: u64) -> Self {
        Self {
            tag,
            mask: u64::MAX,
        }
    }

    /// Any tag.
    pub fn any() -> Self {
        Self { tag: 0, mask: 0 }
    }

    /// The bits of `tag` selected by `mask`.
    pub fn masked(tag: u64, mask: u64) -> Self {
        Self { tag, mask }
    }

    /// Whether `tag` matches.
    #[inline]
    pub fn matches(&self, tag: u64) -> bool {
        (tag ^ self.tag) & self.mask == 0
    }
}

impl fmt::Display for TagMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mask {
            0 => write!(f, "any tag"),
            u64::MAX => write!(f, "tag {}", self.tag),
            mask => write!(f, "tag {:#x} under mask {mask:#x}", self.tag & mask),
        }
    }
}

impl From<u64> for TagMatch {
    fn from(tag: u64) -> Self {
        Self::exact(tag)
    }
}

/// What a completed request reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// The peer: the sender of a receive, the destination of a send.
    pub peer: Rank,
    /// The message's tag.
    pub tag: u64,
    /// Bytes moved by this request (0 for a match).
    pub len: usize,
}
