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

/// Why the kernel would not give the driver's connections a congestion
/// control (see [`Congestion::check`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CongestionError {
    /// The kernel has no algorithm of that name (`ENOENT`): none built in
    /// or loaded, and no module of that name it would load for this
    /// process.
    #[error(
        "unknown TCP congestion control {name:?} ({}; another one needs its kernel \
         module, tcp_{name}, loaded)",
        listed("available", available.as_deref())
    )]
    Unknown {
        /// The algorithm.
        name: String,
        /// What the kernel lists in
        /// `/proc/sys/net/ipv4/tcp_available_congestion_control`, if
        /// readable.
        available: Option<Vec<String>>,
    },
    /// The kernel has it, but does not allow it to processes without
    /// `CAP_NET_ADMIN` (`EPERM`): only those of
    /// `net.ipv4.tcp_allowed_congestion_control` are.
    #[error(
        "TCP congestion control {name:?} is not allowed to this process ({}: \
         see net.ipv4.tcp_allowed_congestion_control, or run with CAP_NET_ADMIN)",
        listed("allowed", allowed.as_deref())
    )]
    NotAllowed {
        /// The algorithm.
        name: String,
        /// What the kernel lists in
        /// `/proc/sys/net/ipv4/tcp_allowed_congestion_control`, if
        /// readable.
        allowed: Option<Vec<String>>,
    },
    /// The kernel refused it for another reason, or no socket could be
    /// opened to ask it.
    #[error("cannot set TCP congestion control {name:?}: {error}")]
    Refused {
        /// The algorithm.
        name: String,
        /// What the system said (in the message, hence not a `source`).
        error: std::io::Error,
    },
}

/// `what: a b c` from a list the kernel gave, or that it gave none.
fn listed(what: &str, names: Option<&[String]>) -> String {
    match names {
        Some(names) if !names.is_empty() => format!("{what}: {}", names.join(" ")),
        _ => format!("the kernel's list of {what} ones is not readable"),
    }
}

/// The names listed in `/proc/sys/net/ipv4/{file}`, if readable.
fn kernel_list(file: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/sys/net/ipv4/{file}")).ok()?;
    Some(text.split_whitespace().map(str::to_owned).collect())
}

/// Asks the kernel to set `name` on a throw-away TCP socket, as it would
/// on a connection of the driver's (which loads the algorithm's module
/// on demand when this process may).
fn try_set(name: &str) -> rustix::io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, ipproto, socket_with};
    let open = |family| {
        socket_with(
            family,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            Some(ipproto::TCP),
        )
    };
    // A system without IPv4 sockets may still have IPv6 ones; the
    // algorithms are the same for both.
    let socket =
        open(AddressFamily::INET).or_else(|e| open(AddressFamily::INET6).map_err(|_| e))?;
    rustix::net::sockopt::set_tcp_congestion(&socket, name)
}

/// What a refusal of `name` by the kernel means.
fn refusal(name: &str, errno: rustix::io::Errno) -> CongestionError {
    let name = name.to_owned();
    match errno {
        rustix::io::Errno::NOENT => CongestionError::Unknown {
            name,
            available: kernel_list("tcp_available_congestion_control"),
        },
        rustix::io::Errno::PERM => CongestionError::NotAllowed {
            name,
            allowed: kernel_list("tcp_allowed_congestion_control"),
        },
        errno => CongestionError::Refused {
            name,
            error: errno.into(),
        },
    }
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

    /// Whether the kernel gives this process the algorithm this setting
    /// names: asks it to set it on a throw-away socket (nothing is
    /// connected), as the driver does on each connection. [`Self::System`]
    /// always passes.
    pub fn check(&self) -> Result<(), CongestionError> {
        match self {
            Self::System => Ok(()),
            Self::Loopback(name) | Self::All(name) => {
                try_set(name).map_err(|errno| refusal(name, errno))
            }
        }
    }

    /// This setting, or the one `NAVETTE_TCP_CONGESTION` names if set. The
    /// one it names must be well formed and one the kernel gives this
    /// process ([`Self::check`]): else this fails with an
    /// [`Error::Config`] naming the variable, its value and why.
    pub fn from_env(self) -> Result<Self> {
        match crate::runtime::env_setting(CONGESTION_VAR)? {
            Some(value) if !value.is_empty() => Self::from_env_value(&value),
            _ => Ok(self),
        }
    }

    /// The setting `NAVETTE_TCP_CONGESTION=value` names, once checked
    /// with the kernel.
    fn from_env_value(value: &str) -> Result<Self> {
        let congestion: Self = value.parse()?;
        congestion
            .check()
            .map_err(|e| Error::Config(format!("{CONGESTION_VAR}={value:?}: {e}")))?;
        Ok(congestion)
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

    #[test]
    fn the_variable_may_name_only_algorithms_the_kernel_has() {
        // Reno is built into every Linux kernel, and allowed to every
        // process.
        for good in ["reno", "loopback:reno", "system"] {
            let congestion = Congestion::from_env_value(good).unwrap();
            assert_eq!(congestion.to_string(), good);
        }
        for (value, name) in [("garbage", "garbage"), ("loopback:garbage", "garbage")] {
            let err = Congestion::from_env_value(value).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{value}: {err:?}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("{CONGESTION_VAR}={value:?}"))
                    && text.contains(&format!("unknown TCP congestion control {name:?}")),
                "{value}: {text}"
            );
        }
        // Malformed names are still refused before the kernel is asked.
        let err = Congestion::from_env_value("re no").unwrap_err().to_string();
        assert!(err.contains("expected `system`"), "{err}");
    }

    #[test]
    fn an_unknown_algorithm_is_reported_with_those_the_kernel_lists() {
        let err = Congestion::All("nosuchcc".into()).check().unwrap_err();
        let CongestionError::Unknown { name, available } = &err else {
            panic!("expected Unknown, got {err:?}");
        };
        assert_eq!(name, "nosuchcc");
        let text = err.to_string();
        match available {
            // Wherever /proc is mounted, reno is listed, and the message
            // gives the list.
            Some(available) => {
                assert!(available.iter().any(|a| a == "reno"), "{available:?}");
                assert!(
                    text.contains("available: ") && text.contains("reno"),
                    "{text}"
                );
            }
            None => assert!(text.contains("not readable"), "{text}"),
        }
        Congestion::default().check().unwrap();
        Congestion::System.check().unwrap();
    }

    #[test]
    fn refusals_say_what_the_kernel_meant() {
        let not_allowed = refusal("bbr", rustix::io::Errno::PERM).to_string();
        assert!(
            not_allowed.contains("\"bbr\" is not allowed")
                && not_allowed.contains("tcp_allowed_congestion_control"),
            "{not_allowed}"
        );
        let other = refusal("bbr", rustix::io::Errno::NOPROTOOPT);
        assert!(
            matches!(&other, CongestionError::Refused { name, .. } if name == "bbr"),
            "{other:?}"
        );
    }
}
