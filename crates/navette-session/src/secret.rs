//! Job identity helpers: random job ids and keys, their hexadecimal form,
//! and a constant-time comparison of keys.

use crate::{BootstrapError, JOB_KEY_LEN};

/// A fresh random job id and job key from the operating system.
pub(crate) fn random_job() -> Result<(u64, [u8; JOB_KEY_LEN]), BootstrapError> {
    let mut id = [0u8; 8];
    let mut key = [0u8; JOB_KEY_LEN];
    getrandom::fill(&mut id)
        .and_then(|()| getrandom::fill(&mut key))
        .map_err(|e| BootstrapError::Random(e.to_string()))?;
    Ok((u64::from_le_bytes(id), key))
}

/// Lower-case hexadecimal.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Decodes exactly `N` bytes from `2 * N` hexadecimal digits (either case).
pub(crate) fn from_hex<const N: usize>(text: &str) -> Result<[u8; N], String> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return Err(format!(
            "expected {} hexadecimal digits, found {} characters",
            2 * N,
            text.chars().count()
        ));
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let hi = nibble(pair[0]);
        let lo = nibble(pair[1]);
        match (hi, lo) {
            (Some(hi), Some(lo)) => *byte = hi << 4 | lo,
            _ => return Err("not hexadecimal".into()),
        }
    }
    Ok(out)
}

fn nibble(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|d| d as u8)
}

/// Compares two keys in time independent of where they differ.
pub(crate) fn keys_equal(a: &[u8; JOB_KEY_LEN], b: &[u8; JOB_KEY_LEN]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_bad_digits() {
        let key = [0x01, 0xab, 0xff, 0x00];
        assert_eq!(to_hex(&key), "01abff00");
        assert_eq!(from_hex::<4>("01ABff00"), Ok(key));
        assert!(from_hex::<4>("01abff0").is_err());
        assert!(from_hex::<4>("01abff0g").is_err());
        assert!(from_hex::<2>("éé").is_err());
    }

    #[test]
    fn random_jobs_differ_and_keys_compare() {
        let (id1, key1) = random_job().unwrap();
        let (id2, key2) = random_job().unwrap();
        assert!(id1 != id2 || key1 != key2);
        assert!(keys_equal(&key1, &key1));
        let mut other = key1;
        other[JOB_KEY_LEN - 1] ^= 1;
        assert!(!keys_equal(&key1, &other));
    }
}
