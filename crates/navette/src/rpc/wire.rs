//! What an RPC adds to Madeleine messages: the reserved channel, tags that
//! name the service (calls) or the call (replies), and one header piece at
//! the front of each message, unpacked EXPRESS.
//!
//! A call is a message to the server on [`ChannelId::RPC`] whose tag is the
//! service's wire id (32 bits, bit 63 clear), made of a [`CallHeader`] and
//! then the pieces the caller packed. A reply is a message back on the
//! same channel whose tag is [`REPLY_BIT`] | the call's number, made of a
//! [`ReplyHeader`] and then either the pieces the handler packed or, for a
//! failure, one piece of UTF-8 text.

use navette_core::{ChannelId, TagMatch};

use super::ServiceId;

/// The channel of calls and replies.
pub(crate) const CHANNEL: ChannelId = ChannelId::RPC;

/// Set in the tag of replies, clear in the tag of calls.
pub(crate) const REPLY_BIT: u64 = 1 << 63;

/// Matches every call.
pub(crate) const CALLS: TagMatch = TagMatch {
    tag: 0,
    mask: REPLY_BIT,
};

/// Matches every reply.
pub(crate) const REPLIES: TagMatch = TagMatch {
    tag: REPLY_BIT,
    mask: REPLY_BIT,
};

/// The tag of a call to `service`.
pub(crate) fn call_tag(service: ServiceId) -> u64 {
    u64::from(service.wire())
}

/// The tag of the reply to call number `call` (below 2^63).
pub(crate) fn reply_tag(call: u64) -> u64 {
    REPLY_BIT | call
}

/// Bytes of text a failure reply may carry; longer text is cut.
pub(crate) const MAX_DETAIL: usize = 4096;

/// A header that did not decode: the peer does not speak this protocol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The version field is not this library's.
    #[error("RPC header version {0}, expected {VERSION}")]
    Version(u16),
    /// Flags this library does not know.
    #[error("unknown RPC call flags {0:#x}")]
    Flags(u16),
    /// The tag of the call names no service (wire ids are 32 bits).
    #[error("the call's header names service {header:#x}, its tag {tag:#x}")]
    Service {
        /// The service id of the header.
        header: u64,
        /// The tag of the message.
        tag: u64,
    },
    /// An unknown reply kind.
    #[error("unknown RPC reply kind {0}")]
    Kind(u16),
    /// A failure text longer than 4 KiB, or text on a success.
    #[error("RPC reply text of {0} bytes")]
    DetailLength(u32),
}

/// The protocol version in every header (2: the call header of 11
/// bytes).
const VERSION: u16 = 2;

/// The first piece of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallHeader {
    /// The full id of the service called (the tag carries its wire id).
    pub(crate) service: ServiceId,
    /// The caller's number for this call (below 2^48); the reply's tag
    /// carries it.
    pub(crate) call: u64,
    /// No reply is wanted.
    pub(crate) one_way: bool,
}

/// Call numbers count modulo 2^48 (six bytes of the header): a call would
/// share its number only with one made 2^48 calls later, decades of calls
/// at today's rates.
pub(crate) const CALL_MASK: u64 = (1 << 48) - 1;

const ONE_WAY: u8 = 1;

impl CallHeader {
    /// Eleven bytes: the version (high four bits) and flags (low four) in
    /// one, the service id's high half (the tag holds its wire id, from
    /// which the low half follows), the call number in six. Every byte
    /// counts: a call of a word-sized argument then fits one cache line
    /// of a shared-memory ring, which crosses between cores in one
    /// transfer where two lines take two.
    pub(crate) const LEN: usize = 11;

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        let flags = if self.one_way { ONE_WAY } else { 0 };
        out[0] = (VERSION as u8) << 4 | flags;
        out[1..5].copy_from_slice(&((self.service.0 >> 32) as u32).to_le_bytes());
        out[5..11].copy_from_slice(&(self.call & CALL_MASK).to_le_bytes()[..6]);
        out
    }

    /// Decodes the header of a call that came with `tag`.
    pub(crate) fn decode(raw: &[u8; Self::LEN], tag: u64) -> Result<Self, HeaderError> {
        let version = u16::from(raw[0] >> 4);
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let flags = raw[0] & 0x0f;
        if flags & !ONE_WAY != 0 {
            return Err(HeaderError::Flags(flags.into()));
        }
        let high = u32::from_le_bytes([raw[1], raw[2], raw[3], raw[4]]);
        let Ok(wire) = u32::try_from(tag) else {
            return Err(HeaderError::Service {
                header: u64::from(high) << 32,
                tag,
            });
        };
        // `ServiceId::wire` is the halves xor-ed.
        let service = ServiceId(u64::from(high) << 32 | u64::from(wire ^ high));
        debug_assert_eq!(call_tag(service), tag);
        let mut call = [0u8; 8];
        call[..6].copy_from_slice(&raw[5..11]);
        Ok(Self {
            service,
            call: u64::from_le_bytes(call),
            one_way: flags & ONE_WAY != 0,
        })
    }
}

/// How a call ended, as the reply says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplyKind {
    /// The handler's pieces follow.
    Ok,
    /// The handler failed; its text follows.
    Failed,
    /// No service of that id is registered at the server.
    UnknownService,
}

/// The first piece of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyHeader {
    pub(crate) kind: ReplyKind,
    /// Bytes of the failure text that follows (0 for [`ReplyKind::Ok`]).
    pub(crate) detail: u32,
}

impl ReplyHeader {
    pub(crate) const LEN: usize = 8;

    pub(crate) const OK: Self = Self {
        kind: ReplyKind::Ok,
        detail: 0,
    };

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let kind: u16 = match self.kind {
            ReplyKind::Ok => 0,
            ReplyKind::Failed => 1,
            ReplyKind::UnknownService => 2,
        };
        let mut out = [0u8; Self::LEN];
        out[0..2].copy_from_slice(&VERSION.to_le_bytes());
        out[2..4].copy_from_slice(&kind.to_le_bytes());
        out[4..8].copy_from_slice(&self.detail.to_le_bytes());
        out
    }

    pub(crate) fn decode(raw: &[u8; Self::LEN]) -> Result<Self, HeaderError> {
        let version = u16::from_le_bytes([raw[0], raw[1]]);
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let kind = match u16::from_le_bytes([raw[2], raw[3]]) {
            0 => ReplyKind::Ok,
            1 => ReplyKind::Failed,
            2 => ReplyKind::UnknownService,
            other => return Err(HeaderError::Kind(other)),
        };
        let detail = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
        let fits = match kind {
            ReplyKind::Ok => detail == 0,
            ReplyKind::Failed | ReplyKind::UnknownService => detail as usize <= MAX_DETAIL,
        };
        if !fits {
            return Err(HeaderError::DetailLength(detail));
        }
        Ok(Self { kind, detail })
    }

    /// A failure reply carrying `text`, cut to [`MAX_DETAIL`] bytes at a
    /// character boundary.
    pub(crate) fn failure(kind: ReplyKind, text: &str) -> (Self, &str) {
        let mut end = text.len().min(MAX_DETAIL);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = &text[..end];
        let detail = u32::try_from(text.len()).expect("at most MAX_DETAIL");
        (Self { kind, detail }, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_headers_round_trip() {
        let service = ServiceId::of("echo");
        for one_way in [false, true] {
            let header = CallHeader {
                service,
                call: 77,
                one_way,
            };
            let decoded = CallHeader::decode(&header.encode(), call_tag(service));
            assert_eq!(decoded, Ok(header));
        }
    }

    #[test]
    fn call_headers_that_lie_are_refused() {
        let service = ServiceId::of("echo");
        let good = CallHeader {
            service,
            call: 5,
            one_way: false,
        }
        .encode();
        let tag = call_tag(service);
        // Another tag names another service: the registry knows it not.
        let other = CallHeader::decode(&good, call_tag(ServiceId::of("other"))).unwrap();
        assert_ne!(other.service, service);
        assert!(matches!(
            CallHeader::decode(&good, 1 << 40),
            Err(HeaderError::Service { .. })
        ));
        let mut bad = good;
        bad[0] = 9 << 4;
        assert_eq!(CallHeader::decode(&bad, tag), Err(HeaderError::Version(9)));
        let mut bad = good;
        bad[0] |= 0x08;
        assert_eq!(CallHeader::decode(&bad, tag), Err(HeaderError::Flags(0x08)));
    }

    #[test]
    fn call_numbers_take_48_bits() {
        let service = ServiceId::of("echo");
        let header = CallHeader {
            service,
            call: CALL_MASK,
            one_way: true,
        };
        let decoded = CallHeader::decode(&header.encode(), call_tag(service)).unwrap();
        assert_eq!(decoded, header);
    }

    #[test]
    fn reply_headers_round_trip_and_bound_their_text() {
        for kind in [ReplyKind::Failed, ReplyKind::UnknownService] {
            let (header, text) = ReplyHeader::failure(kind, "no such thing");
            assert_eq!(text, "no such thing");
            assert_eq!(ReplyHeader::decode(&header.encode()), Ok(header));
        }
        assert_eq!(
            ReplyHeader::decode(&ReplyHeader::OK.encode()),
            Ok(ReplyHeader::OK)
        );
        let long = "é".repeat(MAX_DETAIL);
        let (header, text) = ReplyHeader::failure(ReplyKind::Failed, &long);
        assert!(text.len() <= MAX_DETAIL && text.len() > MAX_DETAIL - 2);
        assert_eq!(header.detail as usize, text.len());

        let mut raw = ReplyHeader::OK.encode();
        raw[4] = 1;
        assert_eq!(ReplyHeader::decode(&raw), Err(HeaderError::DetailLength(1)));
        let mut raw = header.encode();
        raw[4..8].copy_from_slice(&(MAX_DETAIL as u32 + 1).to_le_bytes());
        assert!(ReplyHeader::decode(&raw).is_err());
        raw[2] = 7;
        assert_eq!(ReplyHeader::decode(&raw), Err(HeaderError::Kind(7)));
    }
}
