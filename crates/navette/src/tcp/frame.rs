//! Framing on a byte stream: packets in (by their 12-byte header), packets
//! out (gathered from their plan with vectored writes, resumed after a
//! partial write).
//!
//! Hot path: a read takes one `read` system call for as many small packets
//! as the socket holds (and no second one that would find nothing), and
//! allocates nothing once the buffer has grown to the largest packet seen;
//! a write builds its `IoSlice`s on the stack and copies no user byte.

use std::io::{self, IoSlice};
use std::ops::Range;

use navette_core::memory::{self, Memory};
use navette_core::{MissingMemory, PacketPlan, Segment};
use navette_wire::{ChunkKind, DecodeError, Limits, PacketHeader, RdvDataHeader};
use rustix::io::Errno;

/// The headers in front of rendezvous data: a packet header and a
/// rendezvous data header.
pub(super) const RDV_PREFIX: usize = PacketHeader::LEN + RdvDataHeader::LEN;

/// Size of a connection's receive buffer when idle.
const READ_BUF: usize = 64 << 10;
/// A buffer grown above this (for a large packet) shrinks back once empty.
const KEEP_BUF: usize = 4 << 20;
/// Most segments handed to one vectored write.
const MAX_SLICES: usize = 64;
/// Packets up to this length are gathered and written with one `write`.
const GATHER_MAX: usize = 512;

/// Cuts the incoming byte stream into packets.
#[derive(Debug)]
pub(super) struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl FrameReader {
    pub(super) fn new() -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// The next whole packet already buffered, as a range of
    /// [`Self::bytes`]. Makes room for the packet being received if it
    /// does not fit. Fails if the header is invalid.
    pub(super) fn next_frame(
        &mut self,
        limits: &Limits,
    ) -> Result<Option<Range<usize>>, DecodeError> {
        let have = self.end - self.start;
        if have < PacketHeader::LEN {
            self.make_room(PacketHeader::LEN);
            return Ok(None);
        }
        let total = PacketHeader::decode(&self.buf[self.start..self.end], limits)?.total_len();
        if have >= total {
            let frame = self.start..self.start + total;
            self.start += total;
            return Ok(Some(frame));
        }
        self.make_room(total);
        Ok(None)
    }

    /// If the buffered bytes start a packet that is not whole yet and holds
    /// one rendezvous data chunk, consumes its packet and chunk headers and
    /// returns the chunk header: its data can be read straight into its
    /// destination (the bytes of it already buffered come first, through
    /// [`Self::take_buffered`]). Anything else is left for
    /// [`Self::next_frame`], which validates whole packets.
    pub(super) fn start_rdv_data(
        &mut self,
        limits: &Limits,
    ) -> Result<Option<RdvDataHeader>, DecodeError> {
        let have = &self.buf[self.start..self.end];
        if have.len() < RDV_PREFIX || have[PacketHeader::LEN] != ChunkKind::RDV_DATA.0 {
            return Ok(None);
        }
        let packet = PacketHeader::decode(have, limits)?;
        if packet.chunk_count != 1 || have.len() >= packet.total_len() {
            return Ok(None);
        }
        let data = RdvDataHeader::decode(&have[PacketHeader::LEN..], limits)?;
        if packet.body_len as usize != RdvDataHeader::LEN + data.len as usize {
            return Ok(None);
        }
        self.start += RDV_PREFIX;
        Ok(Some(data))
    }

    /// Takes up to `max` buffered bytes.
    pub(super) fn take_buffered(&mut self, max: usize) -> &[u8] {
        let n = max.min(self.end - self.start);
        let taken = self.start..self.start + n;
        self.start += n;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        &self.buf[taken]
    }

    /// The buffer that [`Self::next_frame`]'s ranges index.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The buffer, if `frame` (the range [`Self::next_frame`] just gave)
    /// is the last of its bytes: the caller may then give the buffer away
    /// and leave any other in its place, after which it calls
    /// [`Self::restart`].
    pub(super) fn last_frame_buffer(&mut self, frame: &Range<usize>) -> Option<&mut Vec<u8>> {
        (frame.end == self.end).then_some(&mut self.buf)
    }

    /// Starts afresh in a buffer put in place by
    /// [`Self::last_frame_buffer`]'s caller (its bytes mean nothing).
    pub(super) fn restart(&mut self) {
        (self.start, self.end) = (0, 0);
    }

    /// Reads once from `stream`; a read of 0 bytes is the end of the stream.
    ///
    /// At most `max` bytes (at least one) are read: so that a rendezvous
    /// data chunk's bytes are not read into the buffer together with its
    /// headers.
    pub(super) fn fill_at_most(
        &mut self,
        stream: &mut impl ByteSource,
        max: usize,
    ) -> Result<Filled, Errno> {
        if self.end == self.buf.len() {
            self.make_room(self.end - self.start + 1);
        }
        let space = (self.buf.len() - self.end).min(max.max(1));
        let len = stream.read_into(&mut self.buf[self.end..self.end + space])?;
        self.end += len;
        Ok(Filled {
            len,
            drained: len < space,
        })
    }

    /// [`Self::fill_at_most`] with no limit but the buffer's room.
    #[cfg(test)]
    pub(super) fn fill(&mut self, stream: &mut impl ByteSource) -> Result<Filled, Errno> {
        self.fill_at_most(stream, usize::MAX)
    }

    /// Bytes read and not yet handed out.
    pub(super) fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Ensures that a packet of `total` bytes starting at `start` fits.
    fn make_room(&mut self, total: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            if self.buf.len() > KEEP_BUF && total <= READ_BUF {
                self.buf = Vec::new();
            }
        }
        if self.buf.len() - self.start >= total && self.buf.len() > self.end {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let want = total.max(READ_BUF);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
    }
}

/// A byte stream [`OutPacket`] and [`super::inner::Inner`]'s packets sent
/// at once write to.
pub(super) trait ByteSink {
    /// Writes `slices`, in order, with one system call: how many bytes the
    /// stream took, or the system's error number ([`Errno::AGAIN`] when it
    /// took none, being full).
    fn write_slices(&mut self, slices: &[IoSlice<'_>]) -> Result<usize, Errno>;
}

/// A socket is written with one `send` (one slice) or `sendmsg` system
/// call, through rustix rather than `std::io::Write`: with `MSG_NOSIGNAL`
/// on the vectored write too (`std` uses `writev`), so that a peer gone
/// raises no `SIGPIPE` in a host program that does not ignore it as Rust
/// programs do, and no `io::Error` built when the socket is full.
impl ByteSink for mio::net::TcpStream {
    fn write_slices(&mut self, slices: &[IoSlice<'_>]) -> Result<usize, Errno> {
        use rustix::net::{SendAncillaryBuffer, SendFlags};
        match slices {
            [one] => rustix::net::send(&*self, one, SendFlags::NOSIGNAL),
            _ => rustix::net::sendmsg(
                &*self,
                slices,
                &mut SendAncillaryBuffer::default(),
                SendFlags::NOSIGNAL,
            ),
        }
    }
}

/// A byte stream [`FrameReader`] reads from.
pub(super) trait ByteSource {
    /// Reads into `buf`: how many bytes (0 at the end of the stream), or
    /// the system's error number ([`Errno::AGAIN`] when none are there
    /// yet).
    fn read_into(&mut self, buf: &mut [u8]) -> Result<usize, Errno>;
}

/// A socket is read with one `recv` system call, through rustix rather
/// than `std::io::Read`: most reads of a spinning round find nothing, and
/// rustix reports that as a plain error number where `std` builds, asks
/// the kind of, and drops an `io::Error` (about 50 of an idle round's 650
/// instructions, callgrind).
impl ByteSource for mio::net::TcpStream {
    fn read_into(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        rustix::net::recv(&*self, buf, rustix::net::RecvFlags::empty()).map(|(len, _)| len)
    }
}

/// What one [`FrameReader::fill`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Filled {
    /// Bytes read; 0 is the end of the stream.
    pub(super) len: usize,
    /// The read did not fill the space offered: a stream socket held no
    /// more bytes at that moment, so reading again now would only block.
    pub(super) drained: bool,
}

/// How far a write went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Written {
    /// The whole packet is on the wire.
    Done,
    /// The socket is full; retry when it is writable.
    Blocked,
}

/// Why a packet could not be written.
#[derive(Debug)]
pub(super) enum WriteError {
    /// The socket failed.
    Io(io::Error),
    /// The plan refers to memory that is gone (a cancelled request);
    /// `started` tells whether bytes of the packet already left.
    Missing { err: MissingMemory, started: bool },
}

/// A packet being written: its plan and how many bytes left.
#[derive(Debug)]
pub(super) struct OutPacket {
    plan: PacketPlan,
    total: usize,
    sent: usize,
    /// The rest of a packet whose start was sent at once (and counted).
    rest: bool,
}

impl OutPacket {
    pub(super) fn new(plan: PacketPlan) -> Self {
        let total = plan.len();
        Self {
            plan,
            total,
            sent: 0,
            rest: false,
        }
    }

    /// The bytes of a packet sent at once that the socket did not take.
    pub(super) fn rest_of_sent(plan: PacketPlan) -> Self {
        Self {
            rest: true,
            ..Self::new(plan)
        }
    }

    /// Whether this is the rest of a packet sent at once.
    pub(super) fn is_rest(&self) -> bool {
        self.rest
    }

    /// Bytes of the packet written so far.
    pub(super) fn sent(&self) -> usize {
        self.sent
    }

    /// The plan, to give back to the engine once written.
    pub(super) fn into_plan(self) -> PacketPlan {
        self.plan
    }

    /// Writes as much of the packet as `stream` takes, straight from the
    /// plan's buffer and from user memory. A small packet is first
    /// gathered on the stack and written with one plain `write`: on
    /// loopback a vectored write of a few tiny segments costs measurably
    /// more in the kernel than copying them (a few hundred bytes) here.
    pub(super) fn write(
        &mut self,
        stream: &mut impl ByteSink,
        mem: &dyn Memory,
    ) -> Result<Written, WriteError> {
        while self.sent < self.total {
            let mut slices = [IoSlice::new(&[]); MAX_SLICES];
            let count = self.slices(mem, &mut slices)?;
            let result = if count > 1 && self.total - self.sent <= GATHER_MAX {
                let mut gathered = [0u8; GATHER_MAX];
                let mut len = 0;
                for slice in &slices[..count] {
                    gathered[len..len + slice.len()].copy_from_slice(slice);
                    len += slice.len();
                }
                stream.write_slices(&[IoSlice::new(&gathered[..len])])
            } else {
                stream.write_slices(&slices[..count])
            };
            match result {
                Ok(0) => return Err(WriteError::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.sent += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Ok(Written::Blocked),
                Err(e) => return Err(WriteError::Io(e.into())),
            }
        }
        Ok(Written::Done)
    }

    /// Fills `slices` with the unsent part of the packet; returns how many.
    fn slices<'m>(
        &'m self,
        mem: &'m dyn Memory,
        slices: &mut [IoSlice<'m>],
    ) -> Result<usize, WriteError> {
        let mut skip = self.sent;
        let mut count = 0;
        for segment in &self.plan.segments {
            let bytes = match segment {
                Segment::Local(range) => &self.plan.bytes[range.clone()],
                Segment::User(range) => memory::read(mem, *range).ok_or(WriteError::Missing {
                    err: MissingMemory(*range),
                    started: self.sent > 0,
                })?,
            };
            if skip >= bytes.len() {
                skip -= bytes.len();
                continue;
            }
            slices[count] = IoSlice::new(&bytes[skip..]);
            skip = 0;
            count += 1;
            if count == slices.len() {
                break;
            }
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use navette_core::{MemRef, VecMemory};

    /// A sink that takes at most `step` bytes per call: from the first
    /// slice that is not empty alone (`spans` false), as a socket may, or
    /// across the slices in order.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
        spans: bool,
    }

    /// Tests read from memory.
    impl ByteSource for &[u8] {
        fn read_into(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
            Ok(std::io::Read::read(self, buf).expect("reading memory cannot fail"))
        }
    }

    impl ByteSink for Trickle {
        fn write_slices(&mut self, slices: &[IoSlice<'_>]) -> Result<usize, Errno> {
            let mut left = self.step;
            for slice in slices.iter().filter(|s| !s.is_empty()) {
                let n = slice.len().min(left);
                self.out.extend_from_slice(&slice[..n]);
                left -= n;
                if left == 0 || !self.spans {
                    break;
                }
            }
            Ok(self.step - left)
        }
    }

    fn packet(body: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        PacketHeader {
            chunk_count: 1,
            body_len: body.len() as u32,
        }
        .encode(&mut bytes);
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let mut mem = VecMemory::new();
        let small: MemRef = mem.insert((0..=255).collect());
        // Above `GATHER_MAX`: written as several slices, not gathered.
        let large: MemRef = mem.insert((0..5000u32).map(|i| (i % 251) as u8).collect());
        let other: MemRef = mem.insert(vec![7; 700]);
        // Each user segment between local ones of 4 bytes.
        let plan = |users: &[MemRef]| {
            let bytes: Vec<u8> = (0..4 * (users.len() + 1)).map(|i| i as u8).collect();
            let mut segments = vec![Segment::Local(0..4)];
            for (i, &user) in users.iter().enumerate() {
                segments.push(Segment::User(user));
                segments.push(Segment::Local(4 * i + 4..4 * i + 8));
            }
            PacketPlan {
                bytes,
                segments,
                offers: Vec::new(),
            }
        };
        let plans = [plan(&[small]), plan(&[large, other])];
        for plan in plans {
            let mut want = Vec::new();
            plan.gather(&mem, &mut want).unwrap();
            for step in [1, 3, 7, 300, 4096, 1 << 20] {
                for spans in [false, true] {
                    let mut out = OutPacket::new(plan.clone());
                    let mut sink = Trickle {
                        out: Vec::new(),
                        step,
                        spans,
                    };
                    assert_eq!(out.write(&mut sink, &mem).unwrap(), Written::Done);
                    assert_eq!(sink.out, want, "step {step}, spans {spans}");
                }
            }
        }
    }

    #[test]
    fn frames_are_cut_whatever_the_read_sizes() {
        let packets: Vec<Vec<u8>> = [0usize, 1, 100, 70_000, 5]
            .iter()
            .map(|&n| packet(&vec![n as u8; n]))
            .collect();
        let stream: Vec<u8> = packets.concat();
        for step in [1, 13, 4096, 1 << 20] {
            let mut reader = FrameReader::new();
            let mut src = stream.chunks(step);
            let mut got = Vec::new();
            loop {
                while let Some(range) = reader.next_frame(&Limits::default()).unwrap() {
                    got.push(reader.bytes()[range].to_vec());
                }
                let Some(mut piece) = src.next() else { break };
                while !piece.is_empty() {
                    let n = reader.fill(&mut piece).unwrap().len;
                    assert!(n > 0);
                    while let Some(range) = reader.next_frame(&Limits::default()).unwrap() {
                        got.push(reader.bytes()[range].to_vec());
                    }
                }
            }
            assert_eq!(got, packets, "step {step}");
        }
    }

    #[test]
    fn a_bad_header_is_an_error() {
        let mut reader = FrameReader::new();
        let mut bytes: &[u8] = b"XXXXXXXXXXXXXXXX";
        reader.fill(&mut bytes).unwrap();
        assert!(reader.next_frame(&Limits::default()).is_err());
    }
}
