//! What one cell of a receive ring carries.
//!
//! Every rank's ring is shared by all its senders, so a cell starts with a
//! 4-byte header naming its kind and its sender, then a body:
//!
//! | kind | body |
//! |---|---|
//! | [`Cell::Packet`] | an engine packet (packet header and chunks), copied in by the sender |
//! | [`Cell::Pull`] | address and length of rendezvous data in the sender's memory, the sender's release epoch (u64), then the packet's headers (packet header and rendezvous data header): the receiver reads the data itself, single-copy, while the epoch holds |
//! | [`Cell::Pulled`] | what became of the sender's last pull ([`Pulled`], one byte): read, failed, or declined (the epoch moved) |
//! | [`Cell::Offering`] | a count (u32), that many read offers (send id u32, zero u32, address u64, length u64, the sender's release epoch u64), then an engine packet whose readable rendezvous requests they belong to: the receiver reads each one's data as soon as its destination is known, while the epoch holds |
//!
//! Header: kind (u8), then the sender's rank on 3 bytes (little endian;
//! the shm driver serves at most 2^24 ranks per host). Four bytes, so that
//! a small message, its cell's stamp and length and its headers share one
//! cache line: 12 + 4 + 20 (a lone packet's header) leave 28 bytes of data
//! in the first line.
//! Cells come from other processes of the job: parsing checks every length
//! and rejects unknown kinds; the engine then decodes packets strictly.

use thiserror::Error;

use navette_core::Rank;

/// Bytes of the cell header.
pub(super) const HEADER_LEN: usize = 4;
/// Ranks a cell header can name.
pub(super) const MAX_RANKS: u32 = 1 << 24;

const PACKET: u8 = 1;
const PULL: u8 = 2;
const PULLED: u8 = 3;
const OFFERING: u8 = 4;

/// Bytes of an offering cell's count, and of each of its offers.
const COUNT_LEN: usize = 4;
const OFFER_LEN: usize = 32;

/// Bytes of a pull descriptor ([`PullSource`]) before the packet's
/// headers; an offer is a send id, a zero word, then the same.
const PULL_FIXED: usize = 24;

/// A parsed cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cell<'a> {
    /// An engine packet.
    Packet { from: Rank, packet: &'a [u8] },
    /// Rendezvous data to read from the sender's memory.
    Pull {
        from: Rank,
        source: PullSource,
        /// The packet header and rendezvous data header of the data.
        headers: &'a [u8],
    },
    /// The outcome of the receiver's read of our last pull.
    Pulled { from: Rank, outcome: Pulled },
    /// An engine packet, with the addresses of the data of its readable
    /// rendezvous requests (see [`offers`]).
    Offering {
        from: Rank,
        offers: &'a [u8],
        packet: &'a [u8],
    },
}

/// Where the data of one of our readable rendezvous requests lies in our
/// memory, for the receiver to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReadOffer {
    /// The request's transfer id.
    pub(super) send_id: u32,
    /// Where its data is, as a pull cell says it.
    pub(super) source: PullSource,
}

/// The offers of an offering cell (its `offers` bytes, whose length
/// parsing checked to be a whole number of offers).
pub(super) fn offers(bytes: &[u8]) -> impl Iterator<Item = ReadOffer> + '_ {
    bytes.chunks_exact(OFFER_LEN).map(|o| ReadOffer {
        send_id: u32::from_le_bytes(o[..4].try_into().expect("4 bytes")),
        source: PullSource::read(&o[8..]),
    })
}

/// What became of a pull, as its receiver tells the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pulled {
    /// The data was read (or its destination is gone, and nobody waits
    /// for it): the send is done.
    Read,
    /// The read failed: the rail closes.
    Failed,
    /// Not read, the sender's release epoch having moved since the pull:
    /// the address may hold something else now. The sender sends the
    /// data through the ring instead, if it still has it.
    Declined,
}

impl Pulled {
    fn byte(self) -> u8 {
        match self {
            Self::Read => 0,
            Self::Failed => 1,
            Self::Declined => 2,
        }
    }

    /// Any byte but those of `Read` and `Declined` (a later or broken
    /// peer's) is a failure, as every byte but 0 was before `Declined`:
    /// the sender's rail closes rather than wait for ever.
    fn from_byte(byte: u8) -> Self {
        match byte {
            0 => Self::Read,
            2 => Self::Declined,
            _ => Self::Failed,
        }
    }
}

/// A cell that does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub(super) enum CellError {
    /// Shorter than its kind requires.
    #[error("shm cell of {0} bytes is too short")]
    Short(usize),
    /// Unknown kind byte.
    #[error("shm cell of unknown kind {0}")]
    Kind(u8),
}

impl<'a> Cell<'a> {
    /// Parses a cell's bytes.
    pub(super) fn parse(bytes: &'a [u8]) -> Result<Self, CellError> {
        let short = || CellError::Short(bytes.len());
        let header = bytes.get(..HEADER_LEN).ok_or_else(short)?;
        let from = u32::from_le_bytes([header[1], header[2], header[3], 0]);
        let body = &bytes[HEADER_LEN..];
        match header[0] {
            PACKET => Ok(Self::Packet { from, packet: body }),
            PULL => {
                let fixed = body.get(..PULL_FIXED).ok_or_else(short)?;
                Ok(Self::Pull {
                    from,
                    source: PullSource::read(fixed),
                    headers: &body[PULL_FIXED..],
                })
            }
            OFFERING => {
                let count = body.get(..COUNT_LEN).ok_or_else(short)?;
                let count = u32::from_le_bytes(count.try_into().expect("4 bytes")) as usize;
                let end = count
                    .checked_mul(OFFER_LEN)
                    .and_then(|len| len.checked_add(COUNT_LEN))
                    .filter(|&end| end <= body.len())
                    .ok_or_else(short)?;
                Ok(Self::Offering {
                    from,
                    offers: &body[COUNT_LEN..end],
                    packet: &body[end..],
                })
            }
            PULLED => {
                let byte = *body.first().ok_or_else(short)?;
                Ok(Self::Pulled {
                    from,
                    outcome: Pulled::from_byte(byte),
                })
            }
            kind => Err(CellError::Kind(kind)),
        }
    }
}

/// Writes a cell header into the start of `out` (`from` < [`MAX_RANKS`],
/// checked when the driver starts).
fn header(out: &mut [u8], kind: u8, from: Rank) {
    out[0] = kind;
    out[1..4].copy_from_slice(&from.to_le_bytes()[..3]);
}

/// Length of a packet cell carrying `packet_len` bytes.
pub(super) const fn packet_len(packet_len: usize) -> usize {
    HEADER_LEN + packet_len
}

/// Writes a packet cell's header; the caller writes the packet after
/// [`HEADER_LEN`] bytes.
pub(super) fn write_packet_header(out: &mut [u8], from: Rank) {
    header(out, PACKET, from);
}

/// Length of a pull cell whose packet headers take `headers_len` bytes.
pub(super) const fn pull_len(headers_len: usize) -> usize {
    HEADER_LEN + PULL_FIXED + headers_len
}

/// Where a pull cell's data lies in its sender's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PullSource {
    pub(super) addr: u64,
    pub(super) len: u64,
    /// The sender's release epoch when it gave the address: the data may
    /// be read only while it has not moved (as for a [`ReadOffer`]).
    pub(super) epoch: u64,
}

impl PullSource {
    /// Reads the [`PULL_FIXED`] bytes at the start of `bytes` (the caller
    /// checked there are as many): address, length, epoch.
    fn read(bytes: &[u8]) -> Self {
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Self {
            addr: word(0),
            len: word(8),
            epoch: word(16),
        }
    }

    /// Writes it into the first [`PULL_FIXED`] bytes of `out`.
    fn write(self, out: &mut [u8]) {
        let words = [self.addr, self.len, self.epoch];
        for (at, word) in (0..).step_by(8).zip(words) {
            out[at..at + 8].copy_from_slice(&word.to_le_bytes());
        }
    }
}

/// Writes a pull cell (`out` is [`pull_len`] long).
pub(super) fn write_pull(out: &mut [u8], from: Rank, source: PullSource, headers: &[u8]) {
    header(out, PULL, from);
    source.write(&mut out[HEADER_LEN..]);
    out[HEADER_LEN + PULL_FIXED..].copy_from_slice(headers);
}

/// Length of an offering cell of `offers` offers and a packet of
/// `packet_len` bytes.
pub(super) const fn offering_len(offers: usize, packet_len: usize) -> usize {
    HEADER_LEN + COUNT_LEN + offers * OFFER_LEN + packet_len
}

/// Writes an offering cell's header and offers; the caller writes the
/// packet from the returned offset on.
pub(super) fn write_offering(out: &mut [u8], from: Rank, offers: &[ReadOffer]) -> usize {
    header(out, OFFERING, from);
    let count = u32::try_from(offers.len()).expect("a cell holds far fewer offers");
    out[HEADER_LEN..HEADER_LEN + COUNT_LEN].copy_from_slice(&count.to_le_bytes());
    let mut at = HEADER_LEN + COUNT_LEN;
    for offer in offers {
        let o = &mut out[at..at + OFFER_LEN];
        o[..4].copy_from_slice(&offer.send_id.to_le_bytes());
        o[4..8].fill(0);
        offer.source.write(&mut o[8..]);
        at += OFFER_LEN;
    }
    at
}

/// Length of a pulled cell.
pub(super) const PULLED_LEN: usize = HEADER_LEN + 1;

/// Writes a pulled cell (`out` is [`PULLED_LEN`] long).
pub(super) fn write_pulled(out: &mut [u8], from: Rank, outcome: Pulled) {
    header(out, PULLED, from);
    out[HEADER_LEN] = outcome.byte();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_round_trip() {
        let mut buf = vec![0u8; packet_len(5)];
        write_packet_header(&mut buf, MAX_RANKS - 1);
        buf[HEADER_LEN..].copy_from_slice(b"hello");
        assert_eq!(
            Cell::parse(&buf),
            Ok(Cell::Packet {
                from: MAX_RANKS - 1,
                packet: b"hello"
            })
        );

        let mut buf = vec![0u8; pull_len(3)];
        let source = PullSource {
            addr: 0xdead_beef,
            len: 1 << 33,
            epoch: u64::MAX - 1,
        };
        write_pull(&mut buf, 2, source, b"abc");
        assert_eq!(
            Cell::parse(&buf),
            Ok(Cell::Pull {
                from: 2,
                source,
                headers: b"abc"
            })
        );

        for outcome in [Pulled::Read, Pulled::Failed, Pulled::Declined] {
            let mut buf = [0u8; PULLED_LEN];
            write_pulled(&mut buf, 9, outcome);
            assert_eq!(Cell::parse(&buf), Ok(Cell::Pulled { from: 9, outcome }));
        }

        let sent = [
            ReadOffer {
                send_id: 7,
                source: PullSource {
                    addr: 0x7fff_0000_1000,
                    len: 256 << 10,
                    epoch: 3,
                },
            },
            ReadOffer {
                send_id: u32::MAX,
                source: PullSource {
                    addr: 1,
                    len: u64::MAX,
                    epoch: u64::MAX,
                },
            },
        ];
        for count in 0..=sent.len() {
            let mut buf = vec![0u8; offering_len(count, 3)];
            let at = write_offering(&mut buf, 5, &sent[..count]);
            buf[at..].copy_from_slice(b"pkt");
            let Ok(Cell::Offering {
                from,
                offers: got,
                packet,
            }) = Cell::parse(&buf)
            else {
                panic!("not an offering cell");
            };
            assert_eq!((from, packet), (5, &b"pkt"[..]));
            assert_eq!(offers(got).collect::<Vec<_>>(), sent[..count]);
        }
    }

    #[test]
    fn every_truncation_and_unknown_kind_is_refused() {
        let mut pull = vec![0u8; pull_len(0)];
        let source = PullSource {
            addr: 2,
            len: 3,
            epoch: 4,
        };
        write_pull(&mut pull, 1, source, &[]);
        for cut in 0..pull.len() {
            assert!(Cell::parse(&pull[..cut]).is_err(), "cut at {cut}");
        }
        let mut offering = vec![0u8; offering_len(2, 0)];
        write_offering(&mut offering, 1, &[ReadOffer { send_id: 1, source }; 2]);
        for cut in 0..offering.len() {
            assert!(Cell::parse(&offering[..cut]).is_err(), "cut at {cut}");
        }
        // A count past the cell's end, however large, is refused.
        for count in [3u32, u32::MAX] {
            offering[HEADER_LEN..HEADER_LEN + COUNT_LEN].copy_from_slice(&count.to_le_bytes());
            assert_eq!(
                Cell::parse(&offering),
                Err(CellError::Short(offering.len()))
            );
        }
        let mut pulled = [0u8; PULLED_LEN];
        write_pulled(&mut pulled, 1, Pulled::Read);
        assert!(Cell::parse(&pulled[..HEADER_LEN]).is_err());
        for byte in [3, u8::MAX] {
            pulled[HEADER_LEN] = byte;
            let failed = Cell::Pulled {
                from: 1,
                outcome: Pulled::Failed,
            };
            assert_eq!(Cell::parse(&pulled), Ok(failed), "outcome byte {byte}");
        }
        for cut in 0..HEADER_LEN {
            assert!(Cell::parse(&[PACKET; HEADER_LEN][..cut]).is_err());
        }
        assert_eq!(Cell::parse(&[0u8; 16]), Err(CellError::Kind(0)));
        assert_eq!(Cell::parse(&[200u8; 16]), Err(CellError::Kind(200)));
    }
}
