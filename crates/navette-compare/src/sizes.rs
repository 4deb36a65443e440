//! Message sizes as written on the command line (`0,8,64,4K,1M`): the
//! notation of `navette bench --sizes` (parsed by `navette_cli::sizes`).
//! 0 is a size here; the patterns that plot against size on a log scale
//! refuse it ([`crate::args::Cli::check`]).

use std::str::FromStr;

pub use navette_cli::sizes::ShortSize;

/// A checked, non-empty list of sizes, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeList(pub Vec<usize>);

impl FromStr for SizeList {
    type Err = String;

    fn from_str(list: &str) -> Result<Self, String> {
        navette_cli::sizes::parse_sizes(list)
            .map(Self)
            .map_err(|e| e.to_string())
    }
}

/// Parses one size such as `64`, `16K` or `1M`.
pub fn parse_size(item: &str) -> Result<usize, String> {
    navette_cli::sizes::parse_size(item).map_err(|e| e.to_string())
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
        assert_eq!("0,1K".parse::<SizeList>().unwrap().0, vec![0, 1024]);
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
