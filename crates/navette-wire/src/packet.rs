//! Packets: a fixed header, then chunks.
//!
//! Header layout (12 bytes): magic `"NV"`, version u8, flags u8 (zero),
//! chunk count u16, reserved u16 (zero), body length u32. A stream driver
//! reads the header first to learn how many body bytes follow.
//!
//! A packet of exactly one eager chunk has a short form, the lone packet
//! (see [`LONE`]).

use crate::codec::{Reader, check_len};
use crate::{Chunk, DecodeError, Eager, EagerHeader, Limits, PieceFlags, RdvRequest};

const MAGIC: [u8; 2] = *b"NV";

/// First byte of a lone packet: `n`, as the full form's magic starts with
/// `N`; a later version of lone packets takes another byte.
///
/// A **lone packet** is the short form of a packet of exactly one eager
/// chunk, for rails whose transport frames each packet (shared memory's
/// ring cells): the eager header's first 20 bytes ([`LONE_HEADER_LEN`]),
/// its kind byte replaced by `LONE`, then the data, whose length is the
/// rest of the frame. It saves 16 bytes (the packet header and the data
/// length) on the commonest packet: a small message then fits one cache
/// line where the full form needs two, and a second line costs the
/// receiver a second transfer between cores. Every decoder of this crate
/// reads both forms; a stream driver, which needs the packet header's
/// length, never sends it.
pub const LONE: u8 = b'n';

/// Bytes of a lone packet before its data.
pub const LONE_HEADER_LEN: usize = EagerHeader::LEN - 4;

/// The fixed header in front of every packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    /// Number of chunks in the body.
    pub chunk_count: u16,
    /// Length of the body in bytes.
    pub body_len: u32,
}

impl PacketHeader {
    /// Encoded size of the header.
    pub const LEN: usize = 12;
    /// Protocol version of packets.
    pub const VERSION: u8 = 1;

    /// Appends the header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// The encoded header, for a caller that writes it in place.
    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = Self::VERSION;
        // b[3], flags, and b[6..8], reserved, stay zero.
        b[4..6].copy_from_slice(&self.chunk_count.to_le_bytes());
        b[8..12].copy_from_slice(&self.body_len.to_le_bytes());
        b
    }

    /// Decodes and checks a header from the first [`Self::LEN`] bytes of `bytes`
    /// (more bytes may follow: the body).
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let magic = r.array::<2>("packet magic")?;
        if magic != MAGIC {
            return Err(DecodeError::BadMagic {
                field: "packet magic",
                found: [magic[0], magic[1], 0, 0],
            });
        }
        let version = r.u8("packet version")?;
        if version != Self::VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version.into(),
                supported: Self::VERSION.into(),
            });
        }
        if r.u8("packet flags")? != 0 {
            return Err(DecodeError::ReservedNotZero("packet flags"));
        }
        let chunk_count = r.u16("packet chunk count")?;
        if r.u16("packet reserved")? != 0 {
            return Err(DecodeError::ReservedNotZero("packet reserved"));
        }
        let body_len = r.u32("packet body length")?;
        check_len(
            "packet chunk count",
            chunk_count.into(),
            limits.max_chunks.into(),
        )?;
        check_len(
            "packet body length",
            body_len.into(),
            limits.max_body_len.into(),
        )?;
        Ok(Self {
            chunk_count,
            body_len,
        })
    }

    /// Header plus body length.
    pub fn total_len(&self) -> usize {
        Self::LEN + self.body_len as usize
    }

    /// The chunk count that the header at the start of `bytes` announces,
    /// read at its fixed offset and not checked (`None` if `bytes` is
    /// shorter than a header): a hint for choosing how to read the packet,
    /// each read of which checks the header itself.
    #[inline]
    pub fn peek_chunk_count(bytes: &[u8]) -> Option<u16> {
        if bytes.first() == Some(&LONE) {
            return Some(1);
        }
        let head = bytes.first_chunk::<{ Self::LEN }>()?;
        Some(u16::from_le_bytes([head[4], head[5]]))
    }
}

/// A validated packet borrowing its bytes.
///
/// [`Packet::decode`] checks every chunk once; [`Packet::chunks`] then walks
/// them again without failing. Neither allocates.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    header: PacketHeader,
    body: &'a [u8],
    limits: Limits,
    /// The chunk of a lone packet (then `body` is empty).
    lone: Option<Eager<'a>>,
}

impl<'a> Packet<'a> {
    /// Decodes exactly one packet: header, `chunk_count` chunks, no trailing byte.
    pub fn decode(bytes: &'a [u8], limits: &Limits) -> Result<Self, DecodeError> {
        if bytes.first() == Some(&LONE) {
            let eager = decode_lone(bytes, limits)?;
            return Ok(Self {
                header: PacketHeader {
                    chunk_count: 1,
                    body_len: EagerHeader::LEN as u32 + eager.header.len,
                },
                body: &[],
                limits: *limits,
                lone: Some(eager),
            });
        }
        let header = PacketHeader::decode(bytes, limits)?;
        let mut r = Reader::new(&bytes[PacketHeader::LEN..]);
        let body = r.take(header.body_len as usize, "packet body")?;
        r.finish("packet")?;
        let mut chunks = Reader::new(body);
        for _ in 0..header.chunk_count {
            Chunk::decode(&mut chunks, limits)?;
        }
        chunks.finish("packet body")?;
        Ok(Self {
            header,
            body,
            limits: *limits,
            lone: None,
        })
    }

    /// Decodes a packet of exactly one chunk and returns that chunk,
    /// checked as [`Self::decode`] checks it but decoded once (`decode`
    /// then [`Self::chunks`] decode it twice): `Ok(None)` if the header is
    /// valid and announces another number of chunks.
    #[inline]
    pub fn decode_single(
        bytes: &'a [u8],
        limits: &Limits,
    ) -> Result<Option<Chunk<'a>>, DecodeError> {
        if bytes.first() == Some(&LONE) {
            return decode_lone(bytes, limits).map(|lone| Some(Chunk::Eager(lone)));
        }
        // The commonest packet, one eager chunk, read at fixed offsets.
        if let Some(lone) = Self::eager_chunks::<1>(bytes, limits) {
            return Ok(Some(Chunk::Eager(lone.chunks[0])));
        }
        let header = PacketHeader::decode(bytes, limits)?;
        if header.chunk_count != 1 {
            return Ok(None);
        }
        let mut r = Reader::new(&bytes[PacketHeader::LEN..]);
        let body = r.take(header.body_len as usize, "packet body")?;
        r.finish("packet")?;
        let mut chunks = Reader::new(body);
        let chunk = Chunk::decode(&mut chunks, limits)?;
        chunks.finish("packet body")?;
        Ok(Some(chunk))
    }

    /// A packet made of 1 to `N` eager chunks and nothing else, read at
    /// fixed offsets with exactly the checks of [`Self::decode`], without
    /// its error reporting, each chunk decoded once. `None` for anything
    /// else, valid or not (the general path then decides).
    pub fn eager_chunks<const N: usize>(
        bytes: &'a [u8],
        limits: &Limits,
    ) -> Option<EagerChunks<'a, N>> {
        Self::with_eager_chunks::<N, _>(bytes, limits, |eager| {
            let mut chunks = [eager[0]; N];
            chunks[..eager.len()].copy_from_slice(eager);
            EagerChunks {
                chunks,
                count: eager.len(),
            }
        })
    }

    /// The chunks of a packet of the full form, read one by one at fixed
    /// offsets as [`Self::with_eager_chunks`] reads them, for a caller that
    /// acts on each as it comes: `None` for a lone packet or a header
    /// [`PacketHeader::decode`] would refuse. The reader stops at the first
    /// chunk that is not eager (or is refused); only
    /// [`FixedEagers::is_complete`] tells that every chunk was read and
    /// nothing follows them, as [`Self::decode`] checks.
    #[inline]
    pub fn fixed_eagers(bytes: &'a [u8], limits: &Limits) -> Option<FixedEagers<'a>> {
        let (left, body) = Self::fixed_header(bytes, limits)?;
        Some(FixedEagers {
            body,
            left,
            limits: *limits,
        })
    }

    /// [`Self::eager_chunks`], handing the 1 to `N` chunks to `f` where
    /// they were decoded, rather than returning them: the hot paths use
    /// it, as a return would copy the chunks (hundreds of bytes). `None`,
    /// without calling `f`, for any other packet.
    #[inline]
    pub fn with_eager_chunks<const N: usize, R>(
        bytes: &'a [u8],
        limits: &Limits,
        f: impl FnOnce(&[Eager<'a>]) -> R,
    ) -> Option<R> {
        if bytes.first() == Some(&LONE) {
            return Eager::read_lone(bytes, limits).map(|lone| f(&[lone]));
        }
        let mut reader = Self::fixed_eagers(bytes, limits)?;
        let count = usize::from(reader.left());
        if !(1..=N).contains(&count) {
            return None;
        }
        // The slots past `count` keep this copy of the first and are never
        // shown.
        let mut chunks = [reader.next()?; N];
        for slot in &mut chunks[1..count] {
            *slot = reader.next()?;
        }
        reader.is_complete().then(|| f(&chunks[..count]))
    }

    /// [`Self::with_eager_chunks`] for a packet of 1 to `N` eager chunks
    /// followed by one rendezvous request, and nothing else (the usual
    /// large message: small pieces, then one whose data stays at the
    /// sender), read at fixed offsets with exactly the checks of
    /// [`Self::decode`]: `f` gets the eager chunks and the request. `None`,
    /// without calling `f`, for any other packet.
    #[inline]
    pub fn with_eager_chunks_then_request<const N: usize, R>(
        bytes: &'a [u8],
        limits: &Limits,
        f: impl FnOnce(&[Eager<'a>], &RdvRequest) -> R,
    ) -> Option<R> {
        let mut reader = Self::fixed_eagers(bytes, limits)?;
        let count = usize::from(reader.left());
        if !(2..=N + 1).contains(&count) {
            return None;
        }
        // As in `with_eager_chunks`: the slots past the eager chunks keep
        // a copy of the first and are never shown.
        let mut chunks = [reader.next()?; N];
        for slot in &mut chunks[1..count - 1] {
            *slot = reader.next()?;
        }
        let request = reader.last_request()?;
        Some(f(&chunks[..count - 1], &request))
    }

    /// The chunk count and body of a packet whose header [`PacketHeader::decode`]
    /// accepts and whose body is exactly the rest of `bytes`, read at fixed
    /// offsets; `None` otherwise.
    fn fixed_header(bytes: &'a [u8], limits: &Limits) -> Option<(u16, &'a [u8])> {
        let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let u32_at =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let (head, body) = bytes.split_first_chunk::<{ PacketHeader::LEN }>()?;
        let count = u16_at(head, 4);
        let body_len = u32_at(head, 8);
        let header_ok = head[0..2] == MAGIC
            && head[2] == PacketHeader::VERSION
            && head[3] == 0
            && count <= limits.max_chunks
            && u16_at(head, 6) == 0
            && body_len <= limits.max_body_len
            && body_len as usize == body.len();
        header_ok.then_some((count, body))
    }

    /// Whether the packet came in the lone form (see [`LONE`]).
    pub fn is_lone(&self) -> bool {
        self.lone.is_some()
    }

    /// The header (of a lone packet: the full form's).
    pub fn header(&self) -> PacketHeader {
        self.header
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> Chunks<'a> {
        Chunks {
            reader: Reader::new(self.body),
            left: self.header.chunk_count,
            limits: self.limits,
            lone: self.lone,
        }
    }
}

/// Decodes a lone packet (its first byte is [`LONE`]) with the checks of
/// the full form's packet of that one chunk.
fn decode_lone<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Eager<'a>, DecodeError> {
    let mut r = Reader::new(bytes);
    r.u8("lone packet marker")?;
    let flags = PieceFlags::from_bits(r.u8("chunk flags")?)?;
    let channel = r.u16("chunk channel")?;
    let seq = r.u32("eager seq")?;
    let msg = r.u32("eager msg")?;
    let tag = r.u64("eager tag")?;
    let data = r.rest();
    check_len("eager len", data.len() as u64, limits.max_eager_len.into())?;
    check_len("packet chunk count", 1, limits.max_chunks.into())?;
    check_len(
        "packet body length",
        (EagerHeader::LEN + data.len()) as u64,
        limits.max_body_len.into(),
    )?;
    if flags.aborted() && !data.is_empty() {
        return Err(DecodeError::InvalidFlags {
            field: "abort piece with data",
            value: flags.bits().into(),
        });
    }
    Ok(Eager {
        header: EagerHeader {
            channel,
            flags,
            seq,
            msg,
            tag,
            // Below `max_eager_len`, a u32.
            len: data.len() as u32,
        },
        data,
    })
}

/// Appends the lone packet of `eager`'s chunk (see [`LONE`]).
pub fn encode_lone(eager: &Eager<'_>, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + LONE_HEADER_LEN, 0);
    encode_lone_header(&eager.header, &mut out[at..]);
    out.extend_from_slice(eager.data);
}

/// Writes the header of a lone packet carrying `eager`'s chunk into `out`
/// (exactly [`LONE_HEADER_LEN`] bytes); its data follows it in the frame.
///
/// # Panics
/// If `out` has another length (a caller bug).
#[inline]
pub fn encode_lone_header(eager: &EagerHeader, out: &mut [u8]) {
    let full = eager.to_bytes();
    out.copy_from_slice(&full[..LONE_HEADER_LEN]);
    out[0] = LONE;
}

/// Iterator over the chunks of a validated [`Packet`].
#[derive(Debug)]
pub struct Chunks<'a> {
    reader: Reader<'a>,
    left: u16,
    limits: Limits,
    /// A lone packet's chunk, not read yet.
    lone: Option<Eager<'a>>,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if let Some(lone) = self.lone.take() {
            return Some(Chunk::Eager(lone));
        }
        let chunk = Chunk::decode(&mut self.reader, &self.limits);
        Some(chunk.expect("Packet::decode validated every chunk"))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left.into(), Some(self.left.into()))
    }
}

/// Appends a whole packet made of `chunks`.
///
/// # Panics
/// If there are more than `u16::MAX` chunks or the body exceeds `u32::MAX`
/// bytes: callers build packets within [`Limits`], far below both.
pub fn encode_packet(chunks: &[Chunk<'_>], out: &mut Vec<u8>) {
    let body_len: usize = chunks.iter().map(Chunk::encoded_len).sum();
    PacketHeader {
        chunk_count: u16::try_from(chunks.len()).expect("at most u16::MAX chunks per packet"),
        body_len: u32::try_from(body_len).expect("packet body below 4 GiB"),
    }
    .encode(out);
    for chunk in chunks {
        chunk.encode(out);
    }
}

/// The eager chunks of a packet, read one by one ([`Packet::fixed_eagers`]).
#[derive(Clone, Debug)]
pub struct FixedEagers<'a> {
    /// The rest of the body.
    body: &'a [u8],
    /// Chunks the header announces that are not read yet.
    left: u16,
    limits: Limits,
}

impl FixedEagers<'_> {
    /// Chunks not read yet (at first, the packet's chunk count).
    pub fn left(&self) -> u16 {
        self.left
    }

    /// Whether every chunk was read, eager and accepted, and nothing
    /// follows the last one.
    pub fn is_complete(&self) -> bool {
        self.left == 0 && self.body.is_empty()
    }

    /// The packet's last chunk, if it is a rendezvous request that
    /// [`Packet::decode`] accepts and nothing follows it.
    pub fn last_request(self) -> Option<RdvRequest> {
        if self.left != 1 || self.body.len() != RdvRequest::LEN {
            return None;
        }
        RdvRequest::read_fixed(self.body, &self.limits)
    }
}

impl<'a> Iterator for FixedEagers<'a> {
    type Item = Eager<'a>;

    #[inline]
    fn next(&mut self) -> Option<Eager<'a>> {
        if self.left == 0 {
            return None;
        }
        let (eager, len) = Eager::read_fixed(self.body, &self.limits)?;
        self.body = &self.body[len..];
        self.left -= 1;
        Some(eager)
    }
}

/// The eager chunks of a packet read by [`Packet::eager_chunks`]: 1 to
/// `N`, in order.
#[derive(Clone, Copy, Debug)]
pub struct EagerChunks<'a, const N: usize> {
    chunks: [Eager<'a>; N],
    count: usize,
}

impl<'a, const N: usize> EagerChunks<'a, N> {
    /// The chunks, in order.
    pub fn as_slice(&self) -> &[Eager<'a>] {
        &self.chunks[..self.count]
    }
}
