//! Finding a peer host that vanished without a reset (a crash, a cable):
//! TCP keepalive probes on idle connections (see
//! [`super::TcpConfig::keepalive`]).
//!
//! No `TCP_USER_TIMEOUT`: recent Linux kernels also end a connection whose
//! peer advertises a zero window for that long, which is what a rank
//! computing for a while without reading looks like. Probes are answered
//! by the peer's kernel, whatever its process does.

use std::os::fd::AsFd;
use std::time::Duration;

use rustix::net::sockopt;

use super::KEEPALIVE_VAR;
use crate::{Error, Result};

/// Unanswered probes after which the kernel closes the connection.
const PROBES: u32 = 3;

/// Longest keepalive Linux accepts, in seconds: its limit on
/// `TCP_KEEPIDLE` and `TCP_KEEPINTVL` (`MAX_TCP_KEEPIDLE`); the kernel
/// refuses a longer one with `EINVAL`.
pub(super) const MAX_SECS: u64 = 32767;

/// The keepalive `NAVETTE_TCP_KEEPALIVE_S=value` sets: `None` for `off`,
/// else whole seconds from 1 to [`MAX_SECS`]. Anything else is refused
/// here, at configuration time: the kernel would refuse it on every
/// connection, leaving vanished peers undetected.
pub(super) fn parse(value: &str) -> Result<Option<Duration>> {
    let value = value.trim();
    if value == "off" {
        return Ok(None);
    }
    match value.parse::<u64>() {
        Ok(secs @ 1..=MAX_SECS) => Ok(Some(Duration::from_secs(secs))),
        _ => Err(Error::Config(format!(
            "{KEEPALIVE_VAR}={value}: expected off or a whole number of seconds \
             from 1 to {MAX_SECS} (Linux's longest keepalive)"
        ))),
    }
}

/// Refuses a configured keepalive (see [`super::TcpConfig::keepalive`])
/// that the kernel would not apply as given: longer than [`MAX_SECS`]
/// (refused on every connection), or shorter than a second (its shortest:
/// it counts whole seconds, and this was raised to one without a word).
pub(super) fn check(after: Duration) -> Result<()> {
    if (Duration::from_secs(1)..=Duration::from_secs(MAX_SECS)).contains(&after) {
        return Ok(());
    }
    Err(Error::Config(format!(
        "tcp keepalive of {after:?}: from 1 s (the kernel counts whole seconds) to \
         {MAX_SECS} s (Linux's longest keepalive)"
    )))
}

/// Gives `socket` keepalive probes after `after` idle, then every third of
/// it: after [`PROBES`] unanswered ones the kernel closes it, so a vanished
/// peer is found within about twice `after` of silence.
pub(super) fn apply(socket: impl AsFd, after: Duration) -> std::io::Result<()> {
    let fd = socket.as_fd();
    let after = after.max(Duration::from_secs(1));
    sockopt::set_socket_keepalive(fd, true)?;
    sockopt::set_tcp_keepidle(fd, after)?;
    sockopt::set_tcp_keepintvl(fd, (after / PROBES).max(Duration::from_secs(1)))?;
    sockopt::set_tcp_keepcnt(fd, PROBES)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_gets_the_probes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        apply(&stream, Duration::from_secs(30)).unwrap();
        assert!(sockopt::socket_keepalive(&stream).unwrap());
        assert_eq!(
            sockopt::tcp_keepidle(&stream).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            sockopt::tcp_keepintvl(&stream).unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(sockopt::tcp_keepcnt(&stream).unwrap(), PROBES);
    }

    #[test]
    fn settings_up_to_the_kernel_limit_parse() {
        assert_eq!(parse("off").unwrap(), None);
        assert_eq!(parse(" 30 ").unwrap(), Some(Duration::from_secs(30)));
        assert_eq!(parse("1").unwrap(), Some(Duration::from_secs(1)));
        assert_eq!(parse("32767").unwrap(), Some(Duration::from_secs(MAX_SECS)));
    }

    #[test]
    fn settings_the_kernel_would_refuse_are_refused_with_the_range() {
        for bad in [
            "32768",
            "4294967296",
            "99999999999999999999999",
            "0",
            "-1",
            "1.5",
            "30s",
            "on",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{bad:?}: {err:?}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("{KEEPALIVE_VAR}={bad}")) && text.contains("1 to 32767"),
                "{bad:?}: {text}"
            );
        }
    }

    #[test]
    fn the_longest_accepted_keepalive_is_the_kernel_limit() {
        let longest = Duration::from_secs(MAX_SECS);
        check(longest).unwrap();
        for refused in [
            longest + Duration::from_millis(1),
            Duration::from_secs(MAX_SECS + 1),
            Duration::from_secs(u64::from(u32::MAX) + 1),
        ] {
            let err = check(refused).unwrap_err();
            assert!(err.to_string().contains("32767"), "{err}");
        }
        // What `check` lets through, the kernel takes; one second more, it
        // refuses (the limit is the kernel's, not a guess).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        apply(&stream, longest).unwrap();
        assert_eq!(sockopt::tcp_keepidle(&stream).unwrap(), longest);
        assert!(apply(&stream, longest + Duration::from_secs(1)).is_err());
    }
}
