//! Chunk kinds and their encodings.
//!
//! Every chunk starts with a 4-byte common header: kind (u8), flags (u8),
//! channel (u16). The fields that follow depend on the kind:
//!
//! | kind | fields after the common header | then |
//! |---|---|---|
//! | `EAGER` | seq u32, msg u32, tag u64, len u32 | `len` data bytes |
//! | `RDV_REQUEST` | seq u32, msg u32, tag u64, send_id u32, total_len u64 | |
//! | `CLEAR_TO_SEND` | send_id u32, recv_id u32, offset u64, len u64 | |
//! | `RDV_DATA` | recv_id u32, offset u64, len u32 | `len` data bytes |
//! | `ACK` | seq u32 | |
//! | `CREDIT` | credits u32 | |
//!
//! `seq` numbers the sequenced chunks (eager and rendezvous requests) of one
//! gate so the receiver can restore submission order across rails; `msg`
//! names the message a piece belongs to, so pieces of concurrent messages on
//! one gate may interleave.
//!
//! The flags byte of eager chunks and rendezvous requests holds
//! [`PieceFlags`]; a rendezvous request also uses bit 7: readable (the
//! receiver may read the data from the sender's memory, whose address its
//! transport gave it, [`RdvRequest::readable`]). A clear-to-send's flags
//! byte is 0 (send the data), 1 (rejected) or 2 (read by the receiver: the
//! transfer is done), [`CtsFlags`].

use crate::codec::{Reader, check_len, put_u16, put_u32, put_u64};
use crate::{DecodeError, Limits};

/// The kind byte of a chunk; a newtype so that unknown values stay representable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkKind(pub u8);

impl ChunkKind {
    /// Message data carried in the packet.
    pub const EAGER: Self = Self(0x01);
    /// Request to send a piece too large for eager.
    pub const RDV_REQUEST: Self = Self(0x02);
    /// Receiver's answer to a rendezvous request, naming the destination.
    pub const CLEAR_TO_SEND: Self = Self(0x03);
    /// Rendezvous data, written straight into the named destination.
    pub const RDV_DATA: Self = Self(0x04);
    /// Acknowledges sequenced chunks up to a sequence number.
    pub const ACK: Self = Self(0x05);
    /// Grants flow-control credits.
    pub const CREDIT: Self = Self(0x06);
    /// Reserved: RMA put.
    pub const RMA_PUT: Self = Self(0x10);
    /// Reserved: RMA get.
    pub const RMA_GET: Self = Self(0x11);
    /// Reserved: RMA get reply.
    pub const RMA_GET_REPLY: Self = Self(0x12);
    /// Reserved: RMA notification.
    pub const RMA_NOTIFY: Self = Self(0x13);
    /// Reserved: a block forwarded by a gateway.
    pub const FORWARD: Self = Self(0x20);

    fn is_reserved(self) -> bool {
        matches!(self.0, 0x10..=0x13 | 0x20)
    }
}

/// How the sender hands a piece over (Madeleine send modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendMode {
    /// Copied at pack time: the caller may reuse its buffer at once.
    Safer,
    /// Read when the message is ended: the caller may change it until then.
    Later,
    /// The library's choice: the buffer stays untouched until the message completes.
    Cheaper,
}

/// When the receiver needs a piece (Madeleine receive modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReceiveMode {
    /// Available as soon as unpack returns.
    Express,
    /// May land as late as end of unpacking.
    Cheaper,
}

/// Flags of a sequenced piece (eager or rendezvous request).
///
/// Bits: 0 first piece of its message, 1 last piece, 2–3 send mode
/// (0 SAFER, 1 LATER, 2 CHEAPER), 4 receive mode CHEAPER (else EXPRESS),
/// 5 tagged (a one-piece point-to-point message whose receiver may post a
/// larger buffer), 6 abort (the sender abandoned the message: an empty last
/// piece, its only one if none had left, that the receiver turns into an
/// error). Other bits must be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PieceFlags(u8);

impl PieceFlags {
    /// First piece of a message: it carries the matching information.
    pub const FIRST: u8 = 0x01;
    /// Last piece of a message.
    pub const LAST: u8 = 0x02;
    const SEND_SHIFT: u8 = 2;
    const SEND_MASK: u8 = 0x0c;
    const RECV_CHEAPER: u8 = 0x10;
    const TAGGED_BIT: u8 = 0x20;
    const ABORT_BIT: u8 = 0x40;
    const KNOWN: u8 = 0x7f;

    /// The flags of a tagged point-to-point message: one piece, CHEAPER both ways.
    pub const TAGGED: Self =
        Self(Self::FIRST | Self::LAST | (2 << 2) | Self::RECV_CHEAPER | Self::TAGGED_BIT);

    /// Flags for a piece.
    pub fn new(first: bool, last: bool, send: SendMode, recv: ReceiveMode) -> Self {
        let mut bits = match send {
            SendMode::Safer => 0,
            SendMode::Later => 1,
            SendMode::Cheaper => 2,
        } << Self::SEND_SHIFT;
        if first {
            bits |= Self::FIRST;
        }
        if last {
            bits |= Self::LAST;
        }
        if recv == ReceiveMode::Cheaper {
            bits |= Self::RECV_CHEAPER;
        }
        Self(bits)
    }

    /// The flags of the empty last piece that abandons a started message.
    pub const ABORT: Self = Self(Self::LAST | Self::ABORT_BIT);

    /// The flags of the empty piece that stands for a message abandoned
    /// before any of its pieces left: its first and last.
    pub const ABORT_UNSENT: Self = Self(Self::FIRST | Self::LAST | Self::ABORT_BIT);

    /// Decodes flags, rejecting unknown bits, the undefined send mode, a
    /// tagged piece that is not a whole message and an abort that is not a
    /// last, untagged piece.
    #[inline]
    pub fn from_bits(bits: u8) -> Result<Self, DecodeError> {
        // One look into the table rather than the rules in turn: every
        // chunk received is read through here.
        if Self::VALID[bits as usize] {
            Ok(Self(bits))
        } else {
            Err(DecodeError::InvalidFlags {
                field: "piece flags",
                value: bits.into(),
            })
        }
    }

    /// Whether each byte is valid flags ([`Self::is_valid`]): one load
    /// (a 128-bit mask cost more, its shift done in several instructions).
    const VALID: [bool; 256] = {
        let mut table = [false; 256];
        let mut bits = 0;
        while bits < 256 {
            table[bits] = Self::is_valid(bits as u8);
            bits += 1;
        }
        table
    };

    /// The rules of [`Self::from_bits`].
    const fn is_valid(bits: u8) -> bool {
        let first = bits & Self::FIRST != 0;
        let last = bits & Self::LAST != 0;
        let tagged = bits & Self::TAGGED_BIT != 0;
        let aborted = bits & Self::ABORT_BIT != 0;
        bits & !Self::KNOWN == 0
            && (bits & Self::SEND_MASK) >> Self::SEND_SHIFT != 3
            && (!tagged || (first && last))
            && (!aborted || (last && !tagged))
    }

    /// What an entry of a table of pieces ([`crate::PieceTable`]) keeps
    /// of these flags: the send mode (two bits) and the receive mode (one),
    /// the low three bits of the result. First and last follow from the
    /// entry's place, and a table's pieces are never tagged or abort.
    #[inline]
    pub(crate) fn table_modes(self) -> u8 {
        (self.0 & (Self::SEND_MASK | Self::RECV_CHEAPER)) >> Self::SEND_SHIFT
    }

    /// The flags of piece `i` of `count` in a table of pieces whose entry
    /// keeps `modes` (as [`Self::table_modes`] gives them; higher bits are
    /// ignored). A few instructions: a table is read on every small RPC.
    /// Its send mode may be the undefined one
    /// ([`Self::has_defined_send_mode`] tells).
    #[inline]
    pub(crate) fn table_entry(modes: u8, i: usize, count: usize) -> Self {
        let placed = u8::from(i == 0) | (u8::from(i + 1 == count) << 1);
        Self(((modes & 0b111) << Self::SEND_SHIFT) | placed)
    }

    /// Whether the send mode is one of the three defined ones.
    #[inline]
    pub(crate) fn has_defined_send_mode(self) -> bool {
        (self.0 & Self::SEND_MASK) >> Self::SEND_SHIFT != 3
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// First piece of its message.
    #[inline]
    pub fn first(self) -> bool {
        self.0 & Self::FIRST != 0
    }

    /// Last piece of its message.
    #[inline]
    pub fn last(self) -> bool {
        self.0 & Self::LAST != 0
    }

    /// A tagged point-to-point message.
    pub fn tagged(self) -> bool {
        self.0 & Self::TAGGED_BIT != 0
    }

    /// The sender abandoned the message; this empty piece ends it.
    #[inline]
    pub fn aborted(self) -> bool {
        self.0 & Self::ABORT_BIT != 0
    }

    /// The sender's send mode.
    pub fn send_mode(self) -> SendMode {
        match (self.0 & Self::SEND_MASK) >> Self::SEND_SHIFT {
            0 => SendMode::Safer,
            1 => SendMode::Later,
            _ => SendMode::Cheaper,
        }
    }

    /// The receive mode the sender declared.
    pub fn receive_mode(self) -> ReceiveMode {
        if self.0 & Self::RECV_CHEAPER != 0 {
            ReceiveMode::Cheaper
        } else {
            ReceiveMode::Express
        }
    }
}

/// Flags of a clear-to-send, one of three values. 0: data may be sent.
/// 1: the receiver rejects the piece (its unpack did not match); no data
/// must follow. 2: the receiver has read the whole piece itself, from the
/// sender's memory, on a rendezvous request marked readable
/// ([`RdvRequest::readable`]); no data must follow, the transfer is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtsFlags(u8);

impl CtsFlags {
    /// Data may be sent.
    pub const ACCEPT: Self = Self(0);
    /// The receiver refused the piece.
    pub const REJECT: Self = Self(1);
    /// The receiver read the piece itself: the transfer is complete.
    pub const READ: Self = Self(2);

    #[inline]
    fn from_bits(bits: u8) -> Result<Self, DecodeError> {
        if bits > 2 {
            return Err(DecodeError::InvalidFlags {
                field: "clear-to-send flags",
                value: bits.into(),
            });
        }
        Ok(Self(bits))
    }

    /// Whether the receiver refused the piece.
    pub fn rejected(self) -> bool {
        self == Self::REJECT
    }

    /// Whether the receiver read the piece itself.
    pub fn read(self) -> bool {
        self == Self::READ
    }
}

/// Header of an eager chunk; its `len` data bytes follow it on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerHeader {
    /// Channel of the message.
    pub channel: u16,
    /// Piece flags.
    pub flags: PieceFlags,
    /// Gate sequence number.
    pub seq: u32,
    /// Message number on the gate.
    pub msg: u32,
    /// Matching tag.
    pub tag: u64,
    /// Data length.
    pub len: u32,
}

/// An eager chunk: header and data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eager<'a> {
    /// The header.
    pub header: EagerHeader,
    /// The data, `header.len` bytes.
    pub data: &'a [u8],
}

impl<'a> Eager<'a> {
    /// The eager chunk at the start of `bytes` and its encoded length,
    /// read at fixed offsets with the checks of [`Chunk::decode`] but
    /// without its error reporting: `None` for anything else, valid or not
    /// (the general path then decides).
    #[inline]
    pub(crate) fn read_fixed(bytes: &'a [u8], limits: &Limits) -> Option<(Self, usize)> {
        // The lone form's header, then the data length.
        let (head, rest) = bytes.split_first_chunk::<{ crate::LONE_HEADER_LEN }>()?;
        let (len, rest) = rest.split_first_chunk::<4>()?;
        if head[0] != ChunkKind::EAGER.0 {
            return None;
        }
        let data = rest.get(..u32::from_le_bytes(*len) as usize)?;
        let eager = Self::from_fixed(head, data, limits)?;
        Some((eager, EagerHeader::LEN + data.len()))
    }

    /// The chunk of a lone packet, `bytes` (see [`crate::LONE`]), read at
    /// fixed offsets with the checks of the full form's packet of that
    /// chunk but without their error reporting: `None` for anything else,
    /// valid or not (the general path then decides). A small message over
    /// shared memory comes this way.
    #[inline]
    pub(crate) fn read_lone(bytes: &'a [u8], limits: &Limits) -> Option<Self> {
        let (head, data) = bytes.split_first_chunk::<{ crate::LONE_HEADER_LEN }>()?;
        let fits = head[0] == crate::LONE
            && limits.max_chunks >= 1
            && EagerHeader::LEN + data.len() <= limits.max_body_len as usize;
        if !fits {
            return None;
        }
        Self::from_fixed(head, data, limits)
    }

    /// The chunk of `data` under the header fields that both forms lay out
    /// alike in `head` (its first byte, kind or marker, is not read), with
    /// their checks.
    #[inline]
    fn from_fixed(
        head: &[u8; crate::LONE_HEADER_LEN],
        data: &'a [u8],
        limits: &Limits,
    ) -> Option<Self> {
        let u32_at =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let len = u32::try_from(data.len()).ok()?;
        let header = EagerHeader {
            channel: u16::from_le_bytes([head[2], head[3]]),
            flags: PieceFlags::from_bits(head[1]).ok()?,
            seq: u32_at(4),
            msg: u32_at(8),
            tag: u64::from_le_bytes(head[12..20].try_into().ok()?),
            len,
        };
        if len > limits.max_eager_len || (header.flags.aborted() && len != 0) {
            return None;
        }
        Some(Self { header, data })
    }
}

/// A request to send a piece by rendezvous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdvRequest {
    /// Channel of the message.
    pub channel: u16,
    /// Piece flags.
    pub flags: PieceFlags,
    /// Gate sequence number.
    pub seq: u32,
    /// Message number on the gate.
    pub msg: u32,
    /// Matching tag.
    pub tag: u64,
    /// Sender's id for this transfer, echoed by the clear-to-send.
    pub send_id: u32,
    /// Length of the piece.
    pub total_len: u64,
    /// The sender offers the piece for reading: its transport gave the
    /// receiver's transport the data's address beside the request (a
    /// shared-memory rail whose receiver reads the sender's memory), so
    /// the receiver may read it at once and answer with a clear-to-send of
    /// [`CtsFlags::READ`] instead of asking for the data. Encoded as bit 7
    /// of the chunk's flags byte, which piece flags leave free.
    pub readable: bool,
}

/// The bit of a rendezvous request's flags byte that marks it readable
/// ([`RdvRequest::readable`]); an eager chunk with it set is refused as
/// unknown piece flags.
const READABLE_BIT: u8 = 0x80;

/// The receiver's answer to a rendezvous request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClearToSend {
    /// Channel of the message.
    pub channel: u16,
    /// Accept or reject.
    pub flags: CtsFlags,
    /// The sender's transfer id.
    pub send_id: u32,
    /// The receiver's destination id, carried by the data chunks.
    pub recv_id: u32,
    /// First byte of the piece that may be sent.
    pub offset: u64,
    /// Number of bytes that may be sent.
    pub len: u64,
}

/// Header of a rendezvous data chunk; its `len` data bytes follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdvDataHeader {
    /// Channel of the message.
    pub channel: u16,
    /// The receiver's destination id.
    pub recv_id: u32,
    /// Offset of these bytes in the piece.
    pub offset: u64,
    /// Data length.
    pub len: u32,
}

/// Rendezvous data: header and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdvData<'a> {
    /// The header.
    pub header: RdvDataHeader,
    /// The data, `header.len` bytes.
    pub data: &'a [u8],
}

/// Acknowledges sequenced chunks of a channel up to `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// Channel.
    pub channel: u16,
    /// Highest sequence number delivered in order.
    pub seq: u32,
}

/// Grants flow-control credits on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credit {
    /// Channel.
    pub channel: u16,
    /// Credits granted.
    pub credits: u32,
}

/// One decoded chunk, borrowing its data from the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Eager data.
    Eager(Eager<'a>),
    /// Rendezvous request.
    RdvRequest(RdvRequest),
    /// Clear-to-send.
    ClearToSend(ClearToSend),
    /// Rendezvous data.
    RdvData(RdvData<'a>),
    /// Acknowledgement.
    Ack(Ack),
    /// Credit grant.
    Credit(Credit),
}

impl EagerHeader {
    /// Encoded size of the header, data excluded.
    pub const LEN: usize = 4 + 4 + 4 + 8 + 4;

    /// Appends the header; the caller appends `len` data bytes after it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The encoded header, for a caller that writes it in place.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ChunkKind::EAGER.0;
        b[1] = self.flags.bits();
        b[2..4].copy_from_slice(&self.channel.to_le_bytes());
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..12].copy_from_slice(&self.msg.to_le_bytes());
        b[12..20].copy_from_slice(&self.tag.to_le_bytes());
        b[20..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }
}

impl RdvRequest {
    /// Encoded size.
    pub const LEN: usize = 4 + 4 + 4 + 8 + 4 + 8;

    /// The encoded chunk, for a caller that writes it in place.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let readable = if self.readable { READABLE_BIT } else { 0 };
        let mut b = [0u8; Self::LEN];
        b[0] = ChunkKind::RDV_REQUEST.0;
        b[1] = self.flags.bits() | readable;
        b[2..4].copy_from_slice(&self.channel.to_le_bytes());
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..12].copy_from_slice(&self.msg.to_le_bytes());
        b[12..20].copy_from_slice(&self.tag.to_le_bytes());
        b[20..24].copy_from_slice(&self.send_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.total_len.to_le_bytes());
        b
    }

    /// The request at the start of `bytes`, read at fixed offsets with the
    /// checks of [`Chunk::decode`] but without its error reporting: `None`
    /// for anything else, valid or not (the general path then decides).
    #[inline]
    pub(crate) fn read_fixed(bytes: &[u8], limits: &Limits) -> Option<Self> {
        let b = bytes.first_chunk::<{ Self::LEN }>()?;
        if b[0] != ChunkKind::RDV_REQUEST.0 {
            return None;
        }
        let req = Self {
            channel: u16::from_le_bytes([b[2], b[3]]),
            flags: PieceFlags::from_bits(b[1] & !READABLE_BIT).ok()?,
            seq: le_u32(b, 4),
            msg: le_u32(b, 8),
            tag: le_u64(b, 12),
            send_id: le_u32(b, 20),
            total_len: le_u64(b, 24),
            readable: b[1] & READABLE_BIT != 0,
        };
        (req.total_len <= limits.max_message_len).then_some(req)
    }
}

impl ClearToSend {
    /// Encoded size.
    pub const LEN: usize = 4 + 4 + 4 + 8 + 8;

    /// The clear-to-send at the start of `bytes`, read at fixed offsets as
    /// [`RdvRequest::read_fixed`] reads a request.
    #[inline]
    pub(crate) fn read_fixed(bytes: &[u8], limits: &Limits) -> Option<Self> {
        let b = bytes.first_chunk::<{ Self::LEN }>()?;
        if b[0] != ChunkKind::CLEAR_TO_SEND.0 {
            return None;
        }
        let cts = Self {
            channel: u16::from_le_bytes([b[2], b[3]]),
            flags: CtsFlags::from_bits(b[1]).ok()?,
            send_id: le_u32(b, 4),
            recv_id: le_u32(b, 8),
            offset: le_u64(b, 12),
            len: le_u64(b, 20),
        };
        let max = limits.max_message_len;
        (cts.offset <= max && cts.len <= max).then_some(cts)
    }
}

/// The little-endian `u32` at `at` in `b` (in bounds: callers read fixed
/// offsets of a fixed-size array).
#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut v = [0; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(v)
}

/// The little-endian `u64` at `at` in `b`, as [`le_u32`].
#[inline]
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut v = [0; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

impl RdvDataHeader {
    /// Encoded size of the header, data excluded.
    pub const LEN: usize = 4 + 4 + 8 + 4;

    /// Appends the header; the caller appends `len` data bytes after it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The encoded header, for a caller that writes it in place.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = ChunkKind::RDV_DATA.0;
        // b[1], flags, stays zero.
        b[2..4].copy_from_slice(&self.channel.to_le_bytes());
        b[4..8].copy_from_slice(&self.recv_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }
}

impl RdvDataHeader {
    /// Decodes the header of a rendezvous data chunk from the first
    /// [`Self::LEN`] bytes of `bytes` (its data may follow, or not yet be
    /// read): a driver that reads data straight into its destination learns
    /// from it where the data goes. Rejects another kind, flags, and
    /// lengths above `limits`.
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let kind = ChunkKind(r.u8("chunk kind")?);
        if kind != ChunkKind::RDV_DATA {
            return Err(DecodeError::InvalidFlags {
                field: "rendezvous data kind",
                value: kind.0.into(),
            });
        }
        let flags = r.u8("chunk flags")?;
        if flags != 0 {
            return Err(DecodeError::InvalidFlags {
                field: "rdv data flags",
                value: flags.into(),
            });
        }
        let channel = r.u16("chunk channel")?;
        Self::decode_fields(&mut r, channel, limits)
    }

    fn decode_fields(
        r: &mut Reader<'_>,
        channel: u16,
        limits: &Limits,
    ) -> Result<Self, DecodeError> {
        let header = Self {
            channel,
            recv_id: r.u32("rdv data recv_id")?,
            offset: r.u64("rdv data offset")?,
            len: r.u32("rdv data len")?,
        };
        check_len("rdv data offset", header.offset, limits.max_message_len)?;
        check_len(
            "rdv data len",
            header.len.into(),
            limits.max_fragment_len.into(),
        )?;
        Ok(header)
    }
}

impl Ack {
    /// Encoded size.
    pub const LEN: usize = 4 + 4;
}

impl Credit {
    /// Encoded size.
    pub const LEN: usize = 4 + 4;
}

fn common(out: &mut Vec<u8>, kind: ChunkKind, flags: u8, channel: u16) {
    out.push(kind.0);
    out.push(flags);
    put_u16(out, channel);
}

impl<'a> Chunk<'a> {
    /// Encoded size of the whole chunk, data included.
    pub fn encoded_len(&self) -> usize {
        match self {
            Chunk::Eager(e) => EagerHeader::LEN + e.data.len(),
            Chunk::RdvRequest(_) => RdvRequest::LEN,
            Chunk::ClearToSend(_) => ClearToSend::LEN,
            Chunk::RdvData(d) => RdvDataHeader::LEN + d.data.len(),
            Chunk::Ack(_) => Ack::LEN,
            Chunk::Credit(_) => Credit::LEN,
        }
    }

    /// Appends the chunk. For data chunks the header's `len` must equal the data length.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Chunk::Eager(e) => {
                debug_assert_eq!(e.header.len as usize, e.data.len(), "eager len");
                e.header.encode(out);
                out.extend_from_slice(e.data);
            }
            Chunk::RdvRequest(r) => out.extend_from_slice(&r.to_bytes()),
            Chunk::ClearToSend(c) => {
                common(out, ChunkKind::CLEAR_TO_SEND, c.flags.0, c.channel);
                put_u32(out, c.send_id);
                put_u32(out, c.recv_id);
                put_u64(out, c.offset);
                put_u64(out, c.len);
            }
            Chunk::RdvData(d) => {
                debug_assert_eq!(d.header.len as usize, d.data.len(), "rdv data len");
                d.header.encode(out);
                out.extend_from_slice(d.data);
            }
            Chunk::Ack(a) => {
                common(out, ChunkKind::ACK, 0, a.channel);
                put_u32(out, a.seq);
            }
            Chunk::Credit(c) => {
                common(out, ChunkKind::CREDIT, 0, c.channel);
                put_u32(out, c.credits);
            }
        }
    }

    /// Decodes one chunk from the front of `r`.
    pub fn decode(r: &mut Reader<'a>, limits: &Limits) -> Result<Self, DecodeError> {
        // The commonest chunks, read at fixed offsets.
        let rest = r.rest();
        if let Some((eager, len)) = Eager::read_fixed(rest, limits) {
            r.skip(len);
            return Ok(Chunk::Eager(eager));
        }
        if let Some(req) = RdvRequest::read_fixed(rest, limits) {
            r.skip(RdvRequest::LEN);
            return Ok(Chunk::RdvRequest(req));
        }
        if let Some(cts) = ClearToSend::read_fixed(rest, limits) {
            r.skip(ClearToSend::LEN);
            return Ok(Chunk::ClearToSend(cts));
        }
        Self::decode_reporting(r, limits)
    }

    /// [`Self::decode`] field by field, naming what is wrong.
    fn decode_reporting(r: &mut Reader<'a>, limits: &Limits) -> Result<Self, DecodeError> {
        let kind = ChunkKind(r.u8("chunk kind")?);
        let flags = r.u8("chunk flags")?;
        let channel = r.u16("chunk channel")?;
        let no_flags = |name| {
            if flags == 0 {
                Ok(())
            } else {
                Err(DecodeError::InvalidFlags {
                    field: name,
                    value: flags.into(),
                })
            }
        };
        Ok(match kind {
            ChunkKind::EAGER => {
                let header = EagerHeader {
                    channel,
                    flags: PieceFlags::from_bits(flags)?,
                    seq: r.u32("eager seq")?,
                    msg: r.u32("eager msg")?,
                    tag: r.u64("eager tag")?,
                    len: r.u32("eager len")?,
                };
                check_len("eager len", header.len.into(), limits.max_eager_len.into())?;
                if header.flags.aborted() && header.len != 0 {
                    return Err(DecodeError::InvalidFlags {
                        field: "abort piece with data",
                        value: header.flags.bits().into(),
                    });
                }
                let data = r.take(header.len as usize, "eager data")?;
                Chunk::Eager(Eager { header, data })
            }
            ChunkKind::RDV_REQUEST => {
                let req = RdvRequest {
                    channel,
                    flags: PieceFlags::from_bits(flags & !READABLE_BIT).map_err(|_| {
                        DecodeError::InvalidFlags {
                            field: "piece flags",
                            value: flags.into(),
                        }
                    })?,
                    seq: r.u32("rdv request seq")?,
                    msg: r.u32("rdv request msg")?,
                    tag: r.u64("rdv request tag")?,
                    send_id: r.u32("rdv request send_id")?,
                    total_len: r.u64("rdv request total_len")?,
                    readable: flags & READABLE_BIT != 0,
                };
                check_len(
                    "rdv request total_len",
                    req.total_len,
                    limits.max_message_len,
                )?;
                Chunk::RdvRequest(req)
            }
            ChunkKind::CLEAR_TO_SEND => {
                let cts = ClearToSend {
                    channel,
                    flags: CtsFlags::from_bits(flags)?,
                    send_id: r.u32("cts send_id")?,
                    recv_id: r.u32("cts recv_id")?,
                    offset: r.u64("cts offset")?,
                    len: r.u64("cts len")?,
                };
                check_len("cts offset", cts.offset, limits.max_message_len)?;
                check_len("cts len", cts.len, limits.max_message_len)?;
                Chunk::ClearToSend(cts)
            }
            ChunkKind::RDV_DATA => {
                no_flags("rdv data flags")?;
                let header = RdvDataHeader::decode_fields(r, channel, limits)?;
                let data = r.take(header.len as usize, "rdv data")?;
                Chunk::RdvData(RdvData { header, data })
            }
            ChunkKind::ACK => {
                no_flags("ack flags")?;
                Chunk::Ack(Ack {
                    channel,
                    seq: r.u32("ack seq")?,
                })
            }
            ChunkKind::CREDIT => {
                no_flags("credit flags")?;
                Chunk::Credit(Credit {
                    channel,
                    credits: r.u32("credit credits")?,
                })
            }
            other if other.is_reserved() => return Err(DecodeError::UnsupportedKind(other.0)),
            other => return Err(DecodeError::UnknownKind(other.0)),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The table of valid flags says what the rules say, byte by byte:
    /// the flags of every piece the senders make are valid, and each rule
    /// broken alone is refused.
    #[test]
    fn piece_flags_are_valid_where_the_rules_say() {
        let made = [
            PieceFlags::TAGGED,
            PieceFlags::ABORT,
            PieceFlags::ABORT_UNSENT,
            PieceFlags::new(true, false, SendMode::Later, ReceiveMode::Express),
            PieceFlags::new(false, true, SendMode::Safer, ReceiveMode::Cheaper),
        ];
        for flags in made {
            assert_eq!(PieceFlags::from_bits(flags.0), Ok(flags));
        }
        let refused = [
            0x80,                                                             // an unknown bit
            0x0c | PieceFlags::FIRST,                                         // send mode 3
            PieceFlags::TAGGED_BIT | PieceFlags::FIRST,                       // tagged, not last
            PieceFlags::ABORT_BIT,                                            // abort, not last
            PieceFlags::ABORT.0 | PieceFlags::TAGGED_BIT | PieceFlags::FIRST, // abort, tagged
        ];
        for bits in refused {
            assert!(PieceFlags::from_bits(bits).is_err(), "{bits:#x}");
        }
        // The rules as first written, one after the other.
        let by_rules = |bits: u8| {
            let flags = PieceFlags(bits);
            bits & !PieceFlags::KNOWN == 0
                && (bits & PieceFlags::SEND_MASK) >> PieceFlags::SEND_SHIFT != 3
                && !(flags.tagged() && !(flags.first() && flags.last()))
                && !(flags.aborted() && (!flags.last() || flags.tagged()))
        };
        for bits in 0..=u8::MAX {
            assert_eq!(
                PieceFlags::from_bits(bits).is_ok(),
                by_rules(bits),
                "{bits:#x}"
            );
        }
    }

    /// An eager chunk's bytes, possibly spoilt, followed by `extra` bytes.
    fn eager_bytes() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<u8>(),
            any::<u16>(),
            any::<[u32; 2]>(),
            any::<u64>(),
            0u32..64,
            prop::collection::vec(any::<u8>(), 0..80),
            any::<bool>(),
        )
            .prop_map(|(flags, channel, [seq, msg], tag, len, extra, eager)| {
                let mut out = vec![if eager { ChunkKind::EAGER.0 } else { flags % 8 }, flags];
                put_u16(&mut out, channel);
                put_u32(&mut out, seq);
                put_u32(&mut out, msg);
                put_u64(&mut out, tag);
                put_u32(&mut out, len);
                out.extend_from_slice(&extra);
                out
            })
    }

    proptest! {
        /// The fixed-offset path takes exactly what the reporting path
        /// accepts as an eager chunk, and consumes as much.
        #[test]
        fn the_fixed_offset_path_agrees_with_the_reporting_one(
            bytes in eager_bytes(),
            max_eager_len in 0u32..80,
        ) {
            let limits = Limits { max_eager_len, ..Limits::default() };
            let mut r = Reader::new(&bytes);
            let reported = Chunk::decode_reporting(&mut r, &limits);
            match Eager::read_fixed(&bytes, &limits) {
                Some((eager, len)) => {
                    prop_assert_eq!(reported, Ok(Chunk::Eager(eager)));
                    prop_assert_eq!(len, bytes.len() - r.remaining());
                }
                None => prop_assert!(!matches!(reported, Ok(Chunk::Eager(_)))),
            }
        }

        /// The same for rendezvous requests and clear-to-sends: bytes of
        /// either kind (or another), spoilt or cut short.
        #[test]
        fn the_fixed_offset_paths_of_control_chunks_agree_with_the_reporting_one(
            kind in prop::sample::select(vec![
                ChunkKind::RDV_REQUEST.0,
                ChunkKind::CLEAR_TO_SEND.0,
                ChunkKind::EAGER.0,
                ChunkKind::RDV_DATA.0,
            ]),
            flags in prop::sample::select(vec![0u8, 0x01, 0x03, 0x07, 0x0c, 0x30, 0x80, 0x83, 0xff]),
            fields in prop::collection::vec(any::<u8>(), 0..40),
            max_message_len in prop::sample::select(vec![0u64, 1 << 20, u64::MAX]),
        ) {
            let limits = Limits { max_message_len, ..Limits::default() };
            let mut bytes = vec![kind, flags];
            bytes.extend_from_slice(&fields);
            let mut r = Reader::new(&bytes);
            let reported = Chunk::decode_reporting(&mut r, &limits);
            let consumed = bytes.len() - r.remaining();
            match RdvRequest::read_fixed(&bytes, &limits) {
                Some(req) => {
                    prop_assert_eq!(&reported, &Ok(Chunk::RdvRequest(req)));
                    prop_assert_eq!(consumed, RdvRequest::LEN);
                }
                None => prop_assert!(!matches!(reported, Ok(Chunk::RdvRequest(_)))),
            }
            match ClearToSend::read_fixed(&bytes, &limits) {
                Some(cts) => {
                    prop_assert_eq!(&reported, &Ok(Chunk::ClearToSend(cts)));
                    prop_assert_eq!(consumed, ClearToSend::LEN);
                }
                None => prop_assert!(!matches!(reported, Ok(Chunk::ClearToSend(_)))),
            }
        }
    }
}
