//! Which congestion control the driver's connections use.

use std::fmt;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::str::FromStr;

use crate::{Error, Result};

/// Environment variable that overrides [`super::TcpConfig::congestion`]:
/// `system`, an algorithm's name (every connection), or
/// `loopback:NAME` (loopback connections only).
pub const CONGESTION_VAR: &str = "NAVETTE_TCP_CONGESTION";

/// The congestion control set on the driver's connections
/// (`TCP_CONGESTION`).
///
/// Loopback connections get Reno, a window-based algorithm, unless told
/// otherwise. Nothing congests on loopback, yet many systems default to
/// BBR (`net.ipv4.tcp_congestion_control`), which paces every connection
/// at its running estimate of the path's bandwidth. On loopback that
/// estimate, not the copies, bounds a large transfer, and it swings with
/// the connection's history: measured on the development machine (two
/// ranks pinned to two cores, Navette and raw TCP alike), a 4 MiB one-way
/// transfer took 450–2600 µs under BBR (median 850–1900 µs from run to
/// run) against 430–620 µs (median 470–550 µs) under Reno. Connections to
/// other addresses keep the system's choice, which its administrator made
/// for that network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Congestion {
    /// Every connection keeps the system's default.
    System,
    /// This algorithm on connections to loopback addresses; the system's
    /// default elsewhere.
    Loopback(String),
    /// This algorithm on every connection.
    All(String),
}

impl Default for Congestion {
    /// Reno on loopback (always available, and allowed to unprivileged
    /// processes by default).
    fn default() -> Self {
        Self::Loopback("reno".to_owned())
    }
}

impl Congestion {
    /// The algorithm a connection to `peer` gets, if not the system's.
    pub fn algorithm_for(&self, peer: IpAddr) -> Option<&str> {
        match self {
            Self::System => None,
            Self::Loopback(name) => peer.to_canonical().is_loopback().then_some(name.as_str()),
            Self::All(name) => Some(name),
        }
    }

    /// Sets the algorithm a connection to `peer` gets on `socket`; returns
    /// the algorithm set, or `None` when the socket keeps the system's.
    /// Fails if the kernel refuses it (unknown algorithm, or not allowed
    /// to this process).
    pub fn apply(&self, socket: impl AsFd, peer: IpAddr) -> std::io::Result<Option<&str>> {
        let Some(name) = self.algorithm_for(peer) else {
            return Ok(None);
        };
        rustix::net::sockopt::set_tcp_congestion(socket, name)?;
        Ok(Some(name))
    }

    /// This setting, or the one `NAVETTE_TCP_CONGESTION` names if set.
    pub fn from_env(self) -> Result<Self> {
        match std::env::var(CONGESTION_VAR) {
            Ok(value) if !value.is_empty() => value.parse(),
            _ => Ok(self),
        }
    }
}

impl FromStr for Congestion {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let valid = |name: &str| {
            // The kernel's names: short, printable, no blanks.
            !name.is_empty()
                && name.len() < 16
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        let parsed = match text.strip_prefix("loopback:") {
            _ if text == "system" => Some(Self::System),
            Some(name) => valid(name).then(|| Self::Loopback(name.to_owned())),
            None => valid(text).then(|| Self::All(text.to_owned())),
        };
        parsed.ok_or_else(|| {
            Error::Config(format!(
                "{CONGESTION_VAR}={text:?}: expected `system`, an algorithm's name \
                 (such as reno or cubic) or `loopback:NAME`"
            ))
        })
    }
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("system"),
            Self::Loopback(name) => write!(f, "loopback:{name}"),
            Self::All(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

    #[test]
    fn settings_parse_and_print_back() {
        for text in ["system", "reno", "loopback:cubic"] {
            let parsed: Congestion = text.parse().unwrap();
            assert_eq!(parsed.to_string(), text);
        }
        for bad in [
            "",
            "loopback:",
            "re no",
            "a-name-far-too-long",
            "loopback:x;y",
        ] {
            let err = bad.parse::<Congestion>().unwrap_err().to_string();
            assert!(err.contains(CONGESTION_VAR), "{bad:?}: {err}");
        }
    }

    #[test]
    fn only_loopback_peers_get_the_loopback_algorithm() {
        let default = Congestion::default();
        assert_eq!(default.algorithm_for(LOOPBACK), Some("reno"));
        assert_eq!(
            default.algorithm_for(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            Some("reno")
        );
        let mapped = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(default.algorithm_for(mapped), Some("reno"));
        assert_eq!(default.algorithm_for(OTHER), None);
        assert_eq!(
            Congestion::All("cubic".into()).algorithm_for(OTHER),
            Some("cubic")
        );
        assert_eq!(Congestion::System.algorithm_for(LOOPBACK), None);
    }

    #[test]
    fn the_kernel_sets_reno_and_refuses_unknown_algorithms() {
        let listener = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
        let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let default = Congestion::default();
        assert_eq!(default.apply(&socket, LOOPBACK).unwrap(), Some("reno"));
        let mut name = rustix::net::sockopt::tcp_congestion(&socket).unwrap();
        name.retain(|c| c != '\0');
        assert_eq!(name, "reno");
        assert!(
            Congestion::All("nosuchcc".into())
                .apply(&socket, LOOPBACK)
                .is_err()
        );
        assert_eq!(Congestion::System.apply(&socket, LOOPBACK).unwrap(), None);
    }
}
