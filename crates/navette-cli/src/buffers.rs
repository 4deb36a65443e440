//! Message buffers of sizes the user chose, allocated without aborting
//! the process when memory runs out (each command turns the error into
//! its own, naming the size), and times divided by counts that may be
//! large. Shared by `navette bench` and `navette demo --sim`.

use std::collections::TryReserveError;
use std::time::Duration;

/// An empty vector with room for `len` bytes.
pub(crate) fn with_room(len: usize) -> Result<Vec<u8>, TryReserveError> {
    let mut buf = Vec::new();
    buf.try_reserve_exact(len)?;
    Ok(buf)
}

/// `len` bytes, byte `i` being `fill(i)`.
pub(crate) fn filled(len: usize, fill: impl Fn(usize) -> u8) -> Result<Vec<u8>, TryReserveError> {
    let mut buf = with_room(len)?;
    buf.extend((0..len).map(fill));
    Ok(buf)
}

/// `elapsed` divided by `count`, 0 if `count` is (there is nothing to
/// divide then); in nanoseconds, so that no count overflows.
pub(crate) fn per(elapsed: Duration, count: u64) -> Duration {
    match elapsed.as_nanos().checked_div(u128::from(count)) {
        Some(nanos) => Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        None => Duration::ZERO,
    }
}
