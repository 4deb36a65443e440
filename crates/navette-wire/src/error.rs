//! Decoding errors: each names the field that failed.

/// Why bytes from a peer were rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes were present than the field needs.
    #[error("truncated {field}: need {needed} bytes, {available} present")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// The magic bytes are not Navette's.
    #[error("bad magic {found:02x?} in {field}")]
    BadMagic {
        /// Which structure's magic.
        field: &'static str,
        /// What was found.
        found: [u8; 4],
    },
    /// The protocol version is not one this build speaks.
    #[error("unsupported protocol version {found} (this build speaks {supported})")]
    UnsupportedVersion {
        /// Version found on the wire.
        found: u16,
        /// Version this build speaks.
        supported: u16,
    },
    /// The chunk kind is not known at all.
    #[error("unknown chunk kind {0:#04x}")]
    UnknownKind(u8),
    /// The chunk kind is reserved (RMA, forwarding) but not handled by this version.
    #[error("chunk kind {0:#04x} is reserved and not supported by this version")]
    UnsupportedKind(u8),
    /// A flags field has bits this version does not define, or an invalid combination.
    #[error("invalid {field} value {value:#x}")]
    InvalidFlags {
        /// The flags field.
        field: &'static str,
        /// Its raw value.
        value: u32,
    },
    /// A length is above the configured maximum.
    #[error("{field} of {len} exceeds the limit of {max}")]
    TooLarge {
        /// The length field.
        field: &'static str,
        /// The length found.
        len: u64,
        /// The configured maximum.
        max: u64,
    },
    /// A reserved field is not zero.
    #[error("reserved field {0} is not zero")]
    ReservedNotZero(&'static str),
    /// Bytes remain after the last field.
    #[error("{count} trailing bytes after {field}")]
    TrailingBytes {
        /// The structure that should have ended.
        field: &'static str,
        /// How many bytes remained.
        count: usize,
    },
}
