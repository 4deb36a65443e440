//! A table of pieces: a whole message carried as the data of one piece
//! (see [`PieceTable`]).

use crate::{DecodeError, PieceFlags};

/// A checked table of pieces ([`Self::parse`]).
///
/// A small RPC call or reply leaves as one tagged piece (the tagged
/// path's send and landing cost about half a message's of several
/// pieces) whose data is a table of the message's pieces followed by
/// their data back to back; the receiver's RPC layer unfolds it into the
/// pieces it unpacks:
///
/// | field | bytes |
/// |---|---|
/// | piece count `n` (at least 1) | 1 |
/// | per piece: data length (13 bits) and modes (3 bits), a u16 | 2 × `n` |
/// | the pieces' data, in order | the sum of the lengths |
///
/// An entry's top three bits are its piece's send mode (two bits) and
/// receive mode (one), as in the piece's [`PieceFlags`] when it travels
/// as a chunk of its own; first and last follow from the piece's place,
/// and a table's pieces are never tagged or abort. The lengths add up to
/// exactly the bytes after the table. Every byte counts: such a message is
/// small (at most [`TABLE_MOST_PIECE_LEN`] bytes a piece), and a call or
/// reply that fits one cache line crosses between cores in one transfer
/// where two lines take two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceTable<'a> {
    /// The entries (2 bytes each).
    entries: &'a [u8],
}

/// Bytes of one piece's entry: flags and length.
const ENTRY_LEN: usize = 2;

/// Bits of an entry that hold the length.
const LEN_BITS: u32 = 13;

/// The longest piece a table describes.
pub const TABLE_MOST_PIECE_LEN: usize = (1 << LEN_BITS) - 1;

/// The most pieces a table holds (its count is one byte).
pub const TABLE_MOST_PIECES: usize = u8::MAX as usize;

impl<'a> PieceTable<'a> {
    /// Bytes of the table of `count` pieces.
    #[inline]
    pub const fn len_for(count: usize) -> usize {
        1 + ENTRY_LEN * count
    }

    /// Reads and checks the table at the start of `bytes`: at least one
    /// piece, each one's flags as the [type's docs](Self) say, and
    /// lengths that add up to exactly the rest of `bytes`.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let (&count, rest) = bytes.split_first().ok_or(DecodeError::Truncated {
            field: "piece table count",
            needed: 1,
            available: 0,
        })?;
        let count = usize::from(count);
        if count == 0 {
            return Err(DecodeError::InvalidFlags {
                field: "piece table count",
                value: 0,
            });
        }
        let table = ENTRY_LEN * count;
        if rest.len() < table {
            return Err(DecodeError::Truncated {
                field: "piece table",
                needed: table,
                available: rest.len(),
            });
        }
        let (entries, data) = rest.split_at(table);
        let mut total = 0u64;
        for (i, entry) in entries.chunks_exact(ENTRY_LEN).enumerate() {
            let flags = PieceFlags::table_entry(entry_modes(entry), i, count);
            if !flags.has_defined_send_mode() {
                return Err(DecodeError::InvalidFlags {
                    field: "piece table flags",
                    value: flags.bits().into(),
                });
            }
            total += u64::from(entry_len(entry));
        }
        if total != data.len() as u64 {
            return Err(DecodeError::Truncated {
                field: "piece table data",
                needed: usize::try_from(total).unwrap_or(usize::MAX),
                available: data.len(),
            });
        }
        Ok(Self { entries })
    }

    /// How many pieces.
    pub fn count(&self) -> usize {
        self.entries.len() / ENTRY_LEN
    }

    /// Bytes of the table itself: the pieces' data starts there.
    pub fn table_len(&self) -> usize {
        1 + self.entries.len()
    }

    /// Each piece's flags and data length, in order.
    #[inline]
    pub fn pieces(&self) -> impl ExactSizeIterator<Item = (PieceFlags, u32)> + 'a {
        // Checked by `parse`: every entry's send mode is defined.
        let count = self.count();
        self.entries
            .chunks_exact(ENTRY_LEN)
            .enumerate()
            .map(move |(i, entry)| {
                let flags = PieceFlags::table_entry(entry_modes(entry), i, count);
                (flags, entry_len(entry))
            })
    }

    /// Writes the table of `pieces` (each one's flags and data length, at
    /// least one and at most [`TABLE_MOST_PIECES`], each at most
    /// [`TABLE_MOST_PIECE_LEN`] bytes) into `out`, exactly
    /// [`Self::len_for`] bytes; the pieces' data goes right after it.
    ///
    /// # Panics
    /// If `out` has another length, the count is out of range or a piece
    /// too long (caller bugs).
    #[inline]
    pub fn write(out: &mut [u8], pieces: impl ExactSizeIterator<Item = (PieceFlags, u16)>) {
        let count = pieces.len();
        assert!(
            (1..=TABLE_MOST_PIECES).contains(&count),
            "piece table count"
        );
        assert_eq!(out.len(), Self::len_for(count), "piece table length");
        out[0] = count as u8;
        for ((flags, len), entry) in pieces.zip(out[1..].chunks_exact_mut(ENTRY_LEN)) {
            assert!(usize::from(len) <= TABLE_MOST_PIECE_LEN, "piece too long");
            let modes = u16::from(flags.table_modes());
            entry.copy_from_slice(&(len | modes << LEN_BITS).to_le_bytes());
        }
    }
}

/// The length field of an entry.
#[inline]
fn entry_len(entry: &[u8]) -> u32 {
    u32::from(u16::from_le_bytes([entry[0], entry[1]])) & ((1 << LEN_BITS) - 1)
}

/// The modes field of an entry (its top three bits).
#[inline]
fn entry_modes(entry: &[u8]) -> u8 {
    entry[1] >> (LEN_BITS - 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReceiveMode, SendMode};
    use proptest::prelude::*;

    fn encode(pieces: &[(SendMode, ReceiveMode, Vec<u8>)]) -> Vec<u8> {
        let n = pieces.len();
        let mut out = vec![0; PieceTable::len_for(n)];
        let entries = pieces
            .iter()
            .enumerate()
            .map(|(i, (s, r, d))| (PieceFlags::new(i == 0, i + 1 == n, *s, *r), d.len() as u16));
        PieceTable::write(&mut out, entries);
        for (_, _, data) in pieces {
            out.extend_from_slice(data);
        }
        out
    }

    fn modes() -> impl Strategy<Value = (SendMode, ReceiveMode)> {
        let send = prop_oneof![
            Just(SendMode::Safer),
            Just(SendMode::Later),
            Just(SendMode::Cheaper)
        ];
        let recv = prop_oneof![Just(ReceiveMode::Express), Just(ReceiveMode::Cheaper)];
        (send, recv)
    }

    proptest! {
        #[test]
        fn pieces_come_back_as_written(
            pieces in proptest::collection::vec(
                (modes(), proptest::collection::vec(any::<u8>(), 0..40)), 1..8)
        ) {
            let pieces: Vec<_> = pieces.into_iter().map(|((s, r), d)| (s, r, d)).collect();
            let bytes = encode(&pieces);
            let table = PieceTable::parse(&bytes).unwrap();
            prop_assert_eq!(table.count(), pieces.len());
            let mut at = table.table_len();
            for (i, ((flags, len), (send, recv, data))) in table.pieces().zip(&pieces).enumerate() {
                prop_assert_eq!(flags.first(), i == 0);
                prop_assert_eq!(flags.last(), i + 1 == pieces.len());
                prop_assert_eq!((flags.send_mode(), flags.receive_mode()), (*send, *recv));
                prop_assert_eq!(&bytes[at..at + len as usize], &data[..]);
                at += len as usize;
            }
            prop_assert_eq!(at, bytes.len());
        }

        #[test]
        fn any_bytes_parse_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(table) = PieceTable::parse(&bytes) {
                let total: u64 = table.pieces().map(|(_, len)| u64::from(len)).sum();
                prop_assert_eq!(total as usize + table.table_len(), bytes.len());
            }
        }
    }

    #[test]
    fn bad_tables_are_refused() {
        let good = encode(&[
            (SendMode::Safer, ReceiveMode::Express, vec![1; 8]),
            (SendMode::Cheaper, ReceiveMode::Cheaper, vec![2; 3]),
        ]);
        assert!(PieceTable::parse(&good).is_ok());
        // No piece.
        assert!(PieceTable::parse(&[0]).is_err());
        assert!(PieceTable::parse(&[]).is_err());
        // Data missing, or left over.
        assert!(PieceTable::parse(&good[..good.len() - 1]).is_err());
        let mut longer = good.clone();
        longer.push(0);
        assert!(PieceTable::parse(&longer).is_err());
        // A table cut short.
        assert!(PieceTable::parse(&good[..4]).is_err());
        // The undefined send mode (3), in either entry's top bits.
        for at in [2, 4] {
            let mut bad = good.clone();
            bad[at] |= 0b11 << 5;
            assert!(PieceTable::parse(&bad).is_err(), "send mode 3 at {at}");
        }
        // An entry's length is its low 13 bits: the modes never add to it.
        let mut cheaper = good.clone();
        cheaper[2] |= 1 << 7;
        let table = PieceTable::parse(&cheaper).unwrap();
        let (flags, len) = table.pieces().next().unwrap();
        assert_eq!((flags.receive_mode(), len), (ReceiveMode::Cheaper, 8));
    }

    #[test]
    #[should_panic(expected = "piece too long")]
    fn a_piece_too_long_for_a_table_is_a_caller_bug() {
        let flags = PieceFlags::new(true, true, SendMode::Safer, ReceiveMode::Express);
        let mut out = [0; 3];
        PieceTable::write(
            &mut out,
            [(flags, TABLE_MOST_PIECE_LEN as u16 + 1)].into_iter(),
        );
    }
}
