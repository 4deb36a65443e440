//! Payload patterns that tell every message of a run apart.
//!
//! A payload repeats a block of [`PERIOD`] bytes (a prime, so that a shift
//! by any amount under it shows) derived from the size, the iteration and
//! the direction: a message from another iteration or the other way fails
//! the check, and so does a shifted, truncated or zeroed one. Filling and
//! checking work block by block (`copy_from_slice`, slice comparison), which
//! stays fast even in a debug build.

/// Length of the repeated block.
const PERIOD: usize = 251;

/// Which way a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Rank 0 to rank 1.
    Request,
    /// Rank 1 back to rank 0.
    Reply,
}

fn block(size: usize, iteration: u64, dir: Direction) -> [u8; PERIOD] {
    let mut state = (size as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ iteration
            .wrapping_add(1)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ u64::from(dir == Direction::Reply);
    let mut out = [0u8; PERIOD];
    for byte in &mut out {
        // splitmix64 step: cheap and well mixed.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        *byte = (z ^ (z >> 31)) as u8;
    }
    out
}

/// Fills `buf` with the pattern of (`size`, `iteration`, `dir`).
pub(crate) fn fill(buf: &mut [u8], size: usize, iteration: u64, dir: Direction) {
    let block = block(size, iteration, dir);
    for chunk in buf.chunks_mut(PERIOD) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// The offset of the first byte of `buf` that differs from the pattern.
pub(crate) fn first_mismatch(
    buf: &[u8],
    size: usize,
    iteration: u64,
    dir: Direction,
) -> Option<usize> {
    let block = block(size, iteration, dir);
    buf.chunks(PERIOD)
        .enumerate()
        .find(|(_, chunk)| *chunk != &block[..chunk.len()])
        .map(|(i, chunk)| {
            let within = chunk
                .iter()
                .zip(&block)
                .position(|(a, b)| a != b)
                .expect("the chunk differs from the block");
            i * PERIOD + within
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_checks() {
        let mut buf = vec![0u8; 1000];
        fill(&mut buf, 1000, 3, Direction::Request);
        assert_eq!(first_mismatch(&buf, 1000, 3, Direction::Request), None);
        assert!(first_mismatch(&buf, 1000, 4, Direction::Request).is_some());
        assert!(first_mismatch(&buf, 1000, 3, Direction::Reply).is_some());
        buf[777] ^= 1;
        assert_eq!(first_mismatch(&buf, 1000, 3, Direction::Request), Some(777));
        let shifted = &buf[1..];
        assert_eq!(
            first_mismatch(shifted, 1000, 3, Direction::Request),
            Some(0)
        );
    }
}
