//! Message sizes as written on the command line (`8,64,4K,1M`), the same
//! notation as `navette bench --sizes`: a decimal count of bytes with an
//! optional suffix K, M or G, each a power of 1024.

use std::fmt;
use std::str::FromStr;

/// A checked, non-empty list of sizes, each at least one byte (the plots
/// are log-log), in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeList(pub Vec<usize>);

impl FromStr for SizeList {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, String> {
        let sizes = list
            .split(',')
            .map(parse_size)
            .collect::<Result<Vec<_>, _>>()?;
        if sizes.is_empty() {
            return Err("the size list is empty".into());
        }
        Ok(Self(sizes))
    }
}

/// Parses one size such as `64`, `16K` or `1M`.
pub fn parse_size(item: &str) -> Result<usize, String> {
    let item = item.trim();
    let split = item
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(item.len());
    let (digits, suffix) = item.split_at(split);
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("{item:?}: unknown suffix, use K, M or G")),
    };
    let count: usize = digits
        .parse()
        .map_err(|_| format!("{item:?} is not a size (digits, then K, M or G)"))?;
    match count.checked_mul(1 << shift) {
        Some(0) => Err(format!("{item:?}: sizes start at 1 byte")),
        Some(size) => Ok(size),
        None => Err(format!("{item:?} is too large")),
    }
}

/// A size written short: `8`, `4K`, `16M`.
#[derive(Clone, Copy, Debug)]
pub struct ShortSize(pub usize);

impl fmt::Display for ShortSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let (value, suffix) = [(30, "G"), (20, "M"), (10, "K")]
            .into_iter()
            .find(|&(shift, _)| n != 0 && n % (1usize << shift) == 0)
            .map_or((n, ""), |(shift, suffix)| (n >> shift, suffix));
        f.pad(&format!("{value}{suffix}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        let list: SizeList = "8, 64,4K,1m,2G".parse().unwrap();
        assert_eq!(list.0, vec![8, 64, 4096, 1 << 20, 2 << 30]);
        assert!("".parse::<SizeList>().is_err());
        assert!("8,,64".parse::<SizeList>().is_err());
        assert!("0".parse::<SizeList>().is_err());
        assert!("4T".parse::<SizeList>().is_err());
        assert!("99999999999999999999G".parse::<SizeList>().is_err());
    }

    #[test]
    fn short_sizes_round_trip() {
        for n in [8, 1000, 1024, 1536, 16 << 20, 3 << 30] {
            assert_eq!(parse_size(&ShortSize(n).to_string()), Ok(n));
        }
        assert_eq!(ShortSize(32 << 10).to_string(), "32K");
        assert_eq!(format!("{:>5}", ShortSize(1 << 20)), "   1M");
    }
}
