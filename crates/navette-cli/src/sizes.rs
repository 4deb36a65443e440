//! Message sizes as the user writes them: `0,8,64,1K,16K,64K,1M,16M`.
//!
//! A size is a decimal count of bytes, optionally followed by one suffix
//! `K`, `M` or `G` (either case, optionally followed by `B` or `iB`), each a
//! power of 1024. Every list is checked whole: an empty item, an unknown
//! suffix or an overflow is an error naming the item.
//!
//! [`SizeList`], what the commands' `--sizes` parse into, also refuses a
//! size over [`MAX_SIZE`] (1 GiB): a benchmark holds several buffers of
//! each size, so larger would only end in a failed allocation.

use std::fmt;

/// Why a size list was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// The list has no item at all.
    #[error("the size list is empty")]
    Empty,
    /// An item between two commas is empty.
    #[error("empty item at position {position} of the size list")]
    EmptyItem {
        /// 1-based position in the list.
        position: usize,
    },
    /// An item does not start with a decimal number.
    #[error("{item:?} is not a size: expected digits, optionally followed by K, M or G")]
    NotANumber {
        /// The item as written.
        item: String,
    },
    /// An item ends with something other than K, M or G.
    #[error("{item:?} has an unknown suffix {suffix:?}: use K, M or G (powers of 1024)")]
    BadSuffix {
        /// The item as written.
        item: String,
        /// The part after the digits.
        suffix: String,
    },
    /// An item does not fit in this machine's `usize`.
    #[error("{item:?} is too large")]
    Overflow {
        /// The item as written.
        item: String,
    },
    /// An item is over the largest size allowed.
    #[error("{item:?} is too large: a message size is at most {} ({max} bytes)", ShortSize(*.max))]
    TooLarge {
        /// The item as written.
        item: String,
        /// The largest size allowed, in bytes.
        max: usize,
    },
}

/// The largest size a [`SizeList`] takes: 1 GiB.
pub const MAX_SIZE: usize = 1 << 30;

/// Parses one size such as `64`, `16K` or `1M`.
pub fn parse_size(item: &str) -> Result<usize, SizeError> {
    let item = item.trim();
    let split = item
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(item.len());
    let (digits, suffix) = item.split_at(split);
    if digits.is_empty() {
        return Err(SizeError::NotANumber { item: item.into() });
    }
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => {
            return Err(SizeError::BadSuffix {
                item: item.into(),
                suffix: suffix.into(),
            });
        }
    };
    let overflow = || SizeError::Overflow { item: item.into() };
    let count: usize = digits.parse().map_err(|_| overflow())?;
    count.checked_mul(1usize << shift).ok_or_else(overflow)
}

/// Parses a comma-separated list of sizes, keeping the order given.
pub fn parse_sizes(list: &str) -> Result<Vec<usize>, SizeError> {
    parse_sizes_up_to(list, usize::MAX)
}

/// [`parse_sizes`], refusing any size over `max` bytes.
pub fn parse_sizes_up_to(list: &str, max: usize) -> Result<Vec<usize>, SizeError> {
    if list.trim().is_empty() {
        return Err(SizeError::Empty);
    }
    list.split(',')
        .enumerate()
        .map(|(i, item)| {
            if item.trim().is_empty() {
                return Err(SizeError::EmptyItem { position: i + 1 });
            }
            let size = parse_size(item)?;
            if size > max {
                return Err(SizeError::TooLarge {
                    item: item.trim().into(),
                    max,
                });
            }
            Ok(size)
        })
        .collect()
}

/// A parsed size list, for argument parsers (`"0,8,1K".parse()`): every
/// size at most [`MAX_SIZE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeList(pub Vec<usize>);

impl std::str::FromStr for SizeList {
    type Err = SizeError;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        parse_sizes_up_to(list, MAX_SIZE).map(Self)
    }
}

/// A byte count written the short way: `16M` for 16 MiB, `1000` for 1000.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortSize(pub usize);

impl fmt::Display for ShortSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let (value, suffix) = [(30, "G"), (20, "M"), (10, "K")]
            .into_iter()
            .find(|&(shift, _)| n != 0 && n.is_multiple_of(1usize << shift))
            .map_or((n, ""), |(shift, suffix)| (n >> shift, suffix));
        let text = format!("{value}{suffix}");
        f.pad(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_sizes_round_trip() {
        for n in [0, 8, 1000, 1024, 1536, 16 << 20, 3 << 30] {
            assert_eq!(parse_size(&ShortSize(n).to_string()), Ok(n));
        }
        assert_eq!(ShortSize(16 << 20).to_string(), "16M");
        assert_eq!(ShortSize(1536).to_string(), "1536");
    }

    #[test]
    fn suffix_forms() {
        assert_eq!(parse_size("4kib"), Ok(4096));
        assert_eq!(parse_size(" 2MB "), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(matches!(parse_size("1T"), Err(SizeError::BadSuffix { .. })));
        assert!(matches!(
            parse_size("99999999999999999999999"),
            Err(SizeError::Overflow { .. })
        ));
    }

    #[test]
    fn size_lists_stop_at_one_gib() {
        assert_eq!("8,1G".parse(), Ok(SizeList(vec![8, MAX_SIZE])));
        let err = "8, 1025M".parse::<SizeList>().unwrap_err();
        assert_eq!(
            err,
            SizeError::TooLarge {
                item: "1025M".into(),
                max: MAX_SIZE
            }
        );
        assert!(err.to_string().contains("at most 1G"), "{err}");
        assert_eq!(parse_sizes("2G"), Ok(vec![2 << 30]), "unbounded");
    }
}
