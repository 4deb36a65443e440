//! The bootstrap wire protocol between a rank and the embedded launcher.
//!
//! Hand-rolled on purpose: there are six small messages made of a few
//! integers and at most two byte strings, and a length-prefixed binary
//! format read through the wire crate's shrinking [`Reader`] bounds every length *before*
//! allocating; a serialization framework would add a dependency to the
//! session layer and hide those bounds.
//!
//! # Framing
//!
//! Every message is a frame: a `u32` little-endian body length (at most
//! [`MAX_FRAME`]), then the body. A body is a one-byte tag then the fields,
//! integers little-endian; a key is a `u16` length (at most [`MAX_KEY`])
//! then UTF-8 bytes; a value is a `u32` length (at most [`MAX_VALUE`]) then
//! bytes; a text (a refusal or failure reason) is a `u16` length (at most
//! [`MAX_TEXT`]) then UTF-8 bytes. Decoding rejects unknown tags, over-long
//! fields, missing bytes and trailing bytes, and never panics.
//!
//! | tag | request | fields |
//! |---|---|---|
//! | `0x01` | hello | magic `u32` (`"NVBS"`), version `u16`, rank `u32`, job key `[u8; 32]` |
//! | `0x02` | put | key, value |
//! | `0x03` | get | rank `u32`, key |
//! | `0x04` | fence | — |
//!
//! | tag | reply | fields |
//! |---|---|---|
//! | `0x81` | welcome (hello accepted) | — |
//! | `0x82` | done (put or fence completed) | — |
//! | `0x83` | value (get) | value |
//! | `0x84` | missing (get of a key not put) | — |
//! | `0x85` | refused (hello rejected; the server then closes) | text |
//! | `0x86` | failed (the operation failed) | text |
//!
//! The first request on a connection must be a hello, answered by welcome
//! or refused; then any number of put, get and fence, each answered in
//! order.

use std::fmt;
use std::io::{self, Read, Write};

use navette_wire::{DecodeError, Reader};

use crate::JOB_KEY_LEN;

/// Longest key, in bytes.
pub const MAX_KEY: usize = 256;
/// Longest value, in bytes.
pub const MAX_VALUE: usize = 64 << 10;
/// Longest refusal or failure text, in bytes.
pub const MAX_TEXT: usize = 1024;
/// Longest frame body: a put with the longest key and value.
pub const MAX_FRAME: usize = 1 + 2 + MAX_KEY + 4 + MAX_VALUE;
/// The hello's magic number, `"NVBS"`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"NVBS");
/// The protocol version this crate speaks.
pub const VERSION: u16 = 1;

/// Message tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tag(u8);

impl Tag {
    const HELLO: Self = Self(0x01);
    const PUT: Self = Self(0x02);
    const GET: Self = Self(0x03);
    const FENCE: Self = Self(0x04);
    const WELCOME: Self = Self(0x81);
    const DONE: Self = Self(0x82);
    const VALUE: Self = Self(0x83);
    const MISSING: Self = Self(0x84);
    const REFUSED: Self = Self(0x85);
    const FAILED: Self = Self(0x86);
}

/// Why bytes could not be decoded or a message could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The message ended in the middle of a field.
    #[error("message truncated in field {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// A length exceeds its limit.
    #[error("{field} is {len} bytes long, more than the limit of {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes remain after the last field.
    #[error("{count} unexpected bytes after the message")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The tag names no message of this direction.
    #[error("unknown message tag {tag:#04x}")]
    UnknownTag {
        /// The tag.
        tag: u8,
    },
    /// The hello does not start with the magic number.
    #[error("not a Navette bootstrap hello (magic {magic:#010x})")]
    BadMagic {
        /// What was read instead.
        magic: u32,
    },
    /// The peer speaks another version of the protocol.
    #[error("bootstrap protocol version {version}, expected {VERSION}")]
    BadVersion {
        /// The peer's version.
        version: u16,
    },
    /// A key or text is not UTF-8.
    #[error("{field} is not UTF-8")]
    NotUtf8 {
        /// The field.
        field: &'static str,
    },
}

/// The first request on a connection: who the rank claims to be, and the
/// proof that it belongs to the job.
#[derive(Clone, PartialEq, Eq)]
pub struct Hello {
    /// The rank claimed.
    pub rank: u32,
    /// The job key, sent as is over the private socket (see
    /// [`crate::server`] for why this is enough).
    pub job_key: [u8; JOB_KEY_LEN],
}

impl fmt::Debug for Hello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hello")
            .field("rank", &self.rank)
            .field("job_key", &"<redacted>")
            .finish()
    }
}

/// A message from a rank to the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// Authenticate; must come first.
    Hello(Hello),
    /// Publish `value` under `key` for the sending rank.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// Read what `rank` put under `key`.
    Get {
        /// The rank asked about.
        rank: u32,
        /// The key.
        key: String,
    },
    /// Wait for every rank.
    Fence,
}

/// A message from the launcher to a rank.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The hello was accepted.
    Welcome,
    /// The put or fence completed.
    Done,
    /// The value asked for.
    Value(Vec<u8>),
    /// Nothing was put under that key by that rank.
    Missing,
    /// The hello was refused; the connection closes.
    Refused(String),
    /// The operation failed.
    Failed(String),
}

/// The shrinking reader's errors in this protocol's terms: a read past the
/// end is a truncation, bytes after the last field are trailing bytes.
impl From<DecodeError> for ProtocolError {
    fn from(err: DecodeError) -> Self {
        match err {
            DecodeError::Truncated { field, .. } => Self::Truncated { field },
            DecodeError::TrailingBytes { count, .. } => Self::TrailingBytes { count },
            other => unreachable!("the reader reports only truncation and trailing bytes: {other}"),
        }
    }
}

/// The byte strings of this protocol, read from the wire crate's
/// shrinking [`Reader`].
trait Strings<'a> {
    /// A byte string with a `u16` (`wide == false`) or `u32` length prefix,
    /// at most `max` bytes; the limit is checked before anything is taken.
    fn bytes(
        &mut self,
        field: &'static str,
        max: usize,
        wide: bool,
    ) -> Result<&'a [u8], ProtocolError>;

    /// A UTF-8 string with a `u16` length prefix, at most `max` bytes.
    fn text(&mut self, field: &'static str, max: usize) -> Result<String, ProtocolError>;
}

impl<'a> Strings<'a> for Reader<'a> {
    fn bytes(
        &mut self,
        field: &'static str,
        max: usize,
        wide: bool,
    ) -> Result<&'a [u8], ProtocolError> {
        let len = if wide {
            self.u32(field)? as usize
        } else {
            usize::from(self.u16(field)?)
        };
        if len > max {
            return Err(ProtocolError::TooLong { field, len, max });
        }
        Ok(self.take(len, field)?)
    }

    fn text(&mut self, field: &'static str, max: usize) -> Result<String, ProtocolError> {
        let bytes = self.bytes(field, max, false)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| ProtocolError::NotUtf8 { field })
    }
}

/// Checks a length against its limit.
pub fn check_len(field: &'static str, len: usize, max: usize) -> Result<(), ProtocolError> {
    if len > max {
        Err(ProtocolError::TooLong { field, len, max })
    } else {
        Ok(())
    }
}

fn put_short(
    out: &mut Vec<u8>,
    field: &'static str,
    bytes: &[u8],
    max: usize,
) -> Result<(), ProtocolError> {
    check_len(field, bytes.len(), max)?;
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

fn put_value(out: &mut Vec<u8>, bytes: &[u8]) -> Result<(), ProtocolError> {
    check_len("value", bytes.len(), MAX_VALUE)?;
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

impl Request {
    /// The frame body; fails if a key or value exceeds its limit.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        let mut out = Vec::new();
        match self {
            Self::Hello(hello) => {
                out.push(Tag::HELLO.0);
                out.extend_from_slice(&MAGIC.to_le_bytes());
                out.extend_from_slice(&VERSION.to_le_bytes());
                out.extend_from_slice(&hello.rank.to_le_bytes());
                out.extend_from_slice(&hello.job_key);
            }
            Self::Put { key, value } => {
                out.push(Tag::PUT.0);
                put_short(&mut out, "key", key.as_bytes(), MAX_KEY)?;
                put_value(&mut out, value)?;
            }
            Self::Get { rank, key } => {
                out.push(Tag::GET.0);
                out.extend_from_slice(&rank.to_le_bytes());
                put_short(&mut out, "key", key.as_bytes(), MAX_KEY)?;
            }
            Self::Fence => out.push(Tag::FENCE.0),
        }
        Ok(out)
    }

    /// Decodes a frame body.
    pub fn decode(body: &[u8]) -> Result<Self, ProtocolError> {
        let mut r = Reader::new(body);
        let request = match Tag(r.u8("tag")?) {
            Tag::HELLO => {
                let magic = r.u32("magic")?;
                if magic != MAGIC {
                    return Err(ProtocolError::BadMagic { magic });
                }
                let version = r.u16("version")?;
                if version != VERSION {
                    return Err(ProtocolError::BadVersion { version });
                }
                let rank = r.u32("rank")?;
                let job_key = r.array("job key")?;
                Self::Hello(Hello { rank, job_key })
            }
            Tag::PUT => {
                let key = r.text("key", MAX_KEY)?;
                let value = r.bytes("value", MAX_VALUE, true)?.to_vec();
                Self::Put { key, value }
            }
            Tag::GET => {
                let rank = r.u32("rank")?;
                let key = r.text("key", MAX_KEY)?;
                Self::Get { rank, key }
            }
            Tag::FENCE => Self::Fence,
            Tag(tag) => return Err(ProtocolError::UnknownTag { tag }),
        };
        r.finish("message")?;
        Ok(request)
    }
}

impl Reply {
    /// The frame body; texts longer than [`MAX_TEXT`] are cut at a
    /// character boundary, values longer than [`MAX_VALUE`] are refused.
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        let mut out = Vec::new();
        match self {
            Self::Welcome => out.push(Tag::WELCOME.0),
            Self::Done => out.push(Tag::DONE.0),
            Self::Value(value) => {
                out.push(Tag::VALUE.0);
                put_value(&mut out, value)?;
            }
            Self::Missing => out.push(Tag::MISSING.0),
            Self::Refused(text) | Self::Failed(text) => {
                let tag = if matches!(self, Self::Refused(_)) {
                    Tag::REFUSED
                } else {
                    Tag::FAILED
                };
                out.push(tag.0);
                put_short(
                    &mut out,
                    "text",
                    truncate(text, MAX_TEXT).as_bytes(),
                    MAX_TEXT,
                )?;
            }
        }
        Ok(out)
    }

    /// Decodes a frame body.
    pub fn decode(body: &[u8]) -> Result<Self, ProtocolError> {
        let mut r = Reader::new(body);
        let reply = match Tag(r.u8("tag")?) {
            Tag::WELCOME => Self::Welcome,
            Tag::DONE => Self::Done,
            Tag::VALUE => Self::Value(r.bytes("value", MAX_VALUE, true)?.to_vec()),
            Tag::MISSING => Self::Missing,
            Tag::REFUSED => Self::Refused(r.text("text", MAX_TEXT)?),
            Tag::FAILED => Self::Failed(r.text("text", MAX_TEXT)?),
            Tag(tag) => return Err(ProtocolError::UnknownTag { tag }),
        };
        r.finish("message")?;
        Ok(reply)
    }
}

/// The longest prefix of `text` of at most `max` bytes ending on a
/// character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The stream failed or ended inside a frame.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The announced length exceeds [`MAX_FRAME`].
    #[error("frame of {len} bytes announced, more than the limit of {MAX_FRAME}")]
    TooLong {
        /// The announced length.
        len: usize,
    },
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    debug_assert!(body.len() <= MAX_FRAME, "encoders bound every field");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame body; `Ok(None)` if the stream ended cleanly before
/// the frame. The length is checked before the body is allocated.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLong { len });
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests() -> Vec<Request> {
        vec![
            Request::Hello(Hello {
                rank: 3,
                job_key: [0xa5; JOB_KEY_LEN],
            }),
            Request::Put {
                key: "addr".into(),
                value: vec![1, 2, 3],
            },
            Request::Put {
                key: "k".repeat(MAX_KEY),
                value: vec![9; MAX_VALUE],
            },
            Request::Put {
                key: String::new(),
                value: Vec::new(),
            },
            Request::Get {
                rank: 7,
                key: "é".into(),
            },
            Request::Fence,
        ]
    }

    fn replies() -> Vec<Reply> {
        vec![
            Reply::Welcome,
            Reply::Done,
            Reply::Value(vec![4, 5]),
            Reply::Value(vec![0; MAX_VALUE]),
            Reply::Missing,
            Reply::Refused("bad job key".into()),
            Reply::Failed("rank 2 left".into()),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for request in requests() {
            let body = request.encode().unwrap();
            assert!(body.len() <= MAX_FRAME);
            assert_eq!(Request::decode(&body).unwrap(), request);
        }
        for reply in replies() {
            let body = reply.encode().unwrap();
            assert_eq!(Reply::decode(&body).unwrap(), reply);
        }
    }

    #[test]
    fn every_truncation_and_extension_is_rejected() {
        for request in requests() {
            let body = request.encode().unwrap();
            for end in 0..body.len() {
                assert!(
                    Request::decode(&body[..end]).is_err(),
                    "{request:?} cut at {end}"
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            assert_eq!(
                Request::decode(&longer),
                Err(ProtocolError::TrailingBytes { count: 1 })
            );
        }
        for reply in replies() {
            let body = reply.encode().unwrap();
            for end in 0..body.len() {
                assert!(
                    Reply::decode(&body[..end]).is_err(),
                    "{reply:?} cut at {end}"
                );
            }
        }
    }

    #[test]
    fn oversized_fields_are_refused_both_ways() {
        let long_key = Request::Put {
            key: "k".repeat(MAX_KEY + 1),
            value: Vec::new(),
        };
        assert!(matches!(
            long_key.encode(),
            Err(ProtocolError::TooLong { field: "key", .. })
        ));
        let long_value = Request::Put {
            key: "k".into(),
            value: vec![0; MAX_VALUE + 1],
        };
        assert!(matches!(
            long_value.encode(),
            Err(ProtocolError::TooLong { field: "value", .. })
        ));
        // A hand-made put announcing a 4 GiB value is refused before any
        // allocation.
        let mut body = vec![Tag::PUT.0, 1, 0, b'k'];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Request::decode(&body),
            Err(ProtocolError::TooLong {
                field: "value",
                len: u32::MAX as usize,
                max: MAX_VALUE
            })
        );
        let mut body = vec![Tag::GET.0, 0, 0, 0, 0];
        body.extend_from_slice(&(MAX_KEY as u16 + 1).to_le_bytes());
        assert!(matches!(
            Request::decode(&body),
            Err(ProtocolError::TooLong { field: "key", .. })
        ));
        // Long texts are cut, not refused.
        let text = "é".repeat(MAX_TEXT);
        let body = Reply::Failed(text).encode().unwrap();
        let Reply::Failed(cut) = Reply::decode(&body).unwrap() else {
            panic!("a failure decodes as a failure");
        };
        assert!(cut.len() <= MAX_TEXT && cut.len() >= MAX_TEXT - 1);
    }

    #[test]
    fn malformed_input_gives_typed_errors() {
        assert_eq!(
            Request::decode(&[]),
            Err(ProtocolError::Truncated { field: "tag" })
        );
        assert_eq!(
            Request::decode(&[0x42]),
            Err(ProtocolError::UnknownTag { tag: 0x42 })
        );
        assert_eq!(
            Reply::decode(&[0x01]),
            Err(ProtocolError::UnknownTag { tag: 0x01 })
        );
        let mut hello = Request::Hello(Hello {
            rank: 0,
            job_key: [0; JOB_KEY_LEN],
        })
        .encode()
        .unwrap();
        hello[1] ^= 1;
        assert!(matches!(
            Request::decode(&hello),
            Err(ProtocolError::BadMagic { .. })
        ));
        hello[1] ^= 1;
        hello[5] = 9;
        assert_eq!(
            Request::decode(&hello),
            Err(ProtocolError::BadVersion { version: 9 })
        );
        let body = [Tag::GET.0, 0, 0, 0, 0, 2, 0, 0xff, 0xfe];
        assert_eq!(
            Request::decode(&body),
            Err(ProtocolError::NotUtf8 { field: "key" })
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator (xorshift) over short bodies and
        // every single-byte mutation of valid ones.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 48) as usize;
            let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = Request::decode(&body);
            let _ = Reply::decode(&body);
        }
        for request in requests()
            .into_iter()
            .filter(|r| !matches!(r, Request::Put { value, .. } if value.len() > 8))
        {
            let body = request.encode().unwrap();
            for i in 0..body.len() {
                for b in [0u8, 1, 0x7f, 0x80, 0xff] {
                    let mut m = body.clone();
                    m[i] = b;
                    let _ = Request::decode(&m);
                }
            }
        }
    }

    #[test]
    fn frames_are_bounded() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"abc").unwrap();
        let mut r = &wire[..];
        assert_eq!(read_frame(&mut r).unwrap(), Some(b"abc".to_vec()));
        assert_eq!(read_frame(&mut r).unwrap(), None);
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..]),
            Err(FrameError::TooLong { .. })
        ));
        assert!(matches!(
            read_frame(&mut &huge[..2]),
            Err(FrameError::Io(_))
        ));
        assert!(matches!(
            read_frame(&mut &wire[..5]),
            Err(FrameError::Io(_))
        ));
    }
}
