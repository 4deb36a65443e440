//! A shrinking reader for decoding and little-endian writers for encoding.

use crate::DecodeError;

/// A cursor over untrusted bytes that can only move forward.
///
/// Every read names its field so that an error says what was missing.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The bytes not read yet, without reading them.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Moves past `n` bytes of [`Self::rest`] (at most its length).
    pub(crate) fn skip(&mut self, n: usize) {
        self.rest = &self.rest[n.min(self.rest.len())..];
    }

    /// Takes exactly `n` bytes.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.rest.len() {
            return Err(DecodeError::Truncated {
                field,
                needed: n,
                available: self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// Takes a fixed-size array.
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads one byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// Reads a little-endian u16.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.array(field).map(u16::from_le_bytes)
    }

    /// Reads a little-endian u32.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.array(field).map(u32::from_le_bytes)
    }

    /// Reads a little-endian u64.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// Fails unless every byte has been read.
    pub fn finish(self, field: &'static str) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                field,
                count: self.rest.len(),
            })
        }
    }
}

/// Fails with [`DecodeError::TooLarge`] when `len > max`.
pub(crate) fn check_len(field: &'static str, len: u64, max: u64) -> Result<(), DecodeError> {
    if len > max {
        Err(DecodeError::TooLarge { field, len, max })
    } else {
        Ok(())
    }
}

pub(crate) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
