//! Short copies written inline.
//!
//! A small message's data is copied once at each end (into an open packet,
//! then into its receive), and the usual one has a few bytes.
//! `copy_from_slice` of a length known only at run time calls the C
//! library's `memcpy`: a dozen instructions of its own for a 4-byte copy,
//! and around the call the caller keeps its registers on the stack, in the
//! middle of the hottest functions (an `isend`, a landing). Up to 64 bytes
//! the copy here is two overlapping loads and stores of a fixed width,
//! inline; longer ones still call `memcpy`.

/// Copies `src` to the start of `dst`.
///
/// # Panics
/// If `dst` is shorter than `src` (as `copy_from_slice` would).
#[inline(always)]
pub fn copy_to_start(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    match src.len() {
        0 => {}
        1..4 => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = *s;
            }
        }
        4..8 => overlapping::<4>(dst, src),
        8..16 => overlapping::<8>(dst, src),
        16..32 => overlapping::<16>(dst, src),
        32..=64 => overlapping::<32>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// Copies `src` (between `N` and `2 N` bytes) to `dst` (as long) as its
/// first `N` bytes, then its last `N`, which overlap the first where it
/// is shorter than `2 N`: two copies of a length known when compiling,
/// which are moves, not calls.
#[inline(always)]
fn overlapping<const N: usize>(dst: &mut [u8], src: &[u8]) {
    let len = src.len();
    dst[..N].copy_from_slice(&src[..N]);
    dst[len - N..].copy_from_slice(&src[len - N..]);
}

#[cfg(test)]
mod tests {
    use super::copy_to_start;

    #[test]
    fn every_length_up_to_past_the_inline_ones_copies_exactly() {
        for len in 0..=80 {
            let src: Vec<u8> = (0..len).map(|i| i as u8 + 1).collect();
            let mut dst = vec![0xEE; len + 3];
            copy_to_start(&mut dst, &src);
            assert_eq!(&dst[..len], &src[..], "length {len}");
            assert_eq!(&dst[len..], &[0xEE; 3], "length {len}: the bytes past it");
        }
    }

    #[test]
    #[should_panic]
    fn a_destination_too_short_panics_as_copy_from_slice_does() {
        copy_to_start(&mut [0; 3], &[1, 2, 3, 4]);
    }
}
