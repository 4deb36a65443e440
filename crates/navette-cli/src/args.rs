//! Counts given on the command line (`--iterations`, `--window`), checked
//! as the arguments are parsed so that a count nothing could run with is
//! refused with its range before anything starts.

/// Why a count was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CountError {
    /// Not a whole number.
    #[error("{0:?} is not a whole number")]
    NotANumber(String),
    /// Outside the range the option takes.
    #[error("{value} is out of range: {what} takes {min} to {max}")]
    OutOfRange {
        /// The value as written.
        value: String,
        /// What the count counts.
        what: &'static str,
        /// The smallest allowed.
        min: u64,
        /// The largest allowed.
        max: u64,
    },
}

/// The largest `--window` of `navette bench stream`.
pub const MAX_WINDOW: usize = 4096;

fn parse_count(text: &str, what: &'static str, min: u64, max: u64) -> Result<u64, CountError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CountError::NotANumber(text.into()));
    }
    let out_of_range = || CountError::OutOfRange {
        value: trimmed.into(),
        what,
        min,
        max,
    };
    // Digits only: the parse fails on overflow alone.
    let value: u64 = trimmed.parse().map_err(|_| out_of_range())?;
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(out_of_range())
    }
}

/// `--iterations`: 1 to `u32::MAX` timed iterations (0 would time
/// nothing, and every figure is a time divided by the count).
pub fn parse_iterations(text: &str) -> Result<u32, CountError> {
    let n = parse_count(text, "--iterations", 1, u32::MAX.into())?;
    u32::try_from(n).map_err(|_| CountError::NotANumber(text.into()))
}

/// `--window`: 1 to [`MAX_WINDOW`] messages in flight.
pub fn parse_window(text: &str) -> Result<usize, CountError> {
    let max = MAX_WINDOW as u64;
    let n = parse_count(text, "--window", 1, max)?;
    usize::try_from(n).map_err(|_| CountError::NotANumber(text.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_checked() {
        assert_eq!(parse_iterations("1"), Ok(1));
        assert_eq!(parse_iterations("4294967295"), Ok(u32::MAX));
        for bad in ["0", "4294967296", "99999999999999999999999"] {
            let err = parse_iterations(bad).unwrap_err();
            assert!(
                matches!(err, CountError::OutOfRange { min: 1, .. }),
                "{bad}: {err}"
            );
        }
        for bad in ["", "-1", "1.5", "ten"] {
            assert!(matches!(
                parse_iterations(bad),
                Err(CountError::NotANumber(_))
            ));
        }
        assert_eq!(parse_window("64"), Ok(64));
        assert!(parse_window("0").is_err());
        let err = parse_window("100000000000").unwrap_err();
        assert_eq!(
            err.to_string(),
            "100000000000 is out of range: --window takes 1 to 4096"
        );
    }
}
