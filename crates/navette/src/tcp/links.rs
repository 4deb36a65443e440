//! Several tcp links between the same ranks: their settings, how ranks
//! publish them, and what a connection says about the link it belongs to.
//!
//! A *link* is one network between the ranks of a job (two networks →
//! two links). Every rank lists its own address on each network, in the
//! same order ([`LINKS_VAR`], [`super::TcpConfig::links`]); link `k` of a
//! rank listens on its `k`-th address, and connects to a peer's `k`-th
//! address from its own `k`-th address. The engine sees one rail per link
//! and peer.
//!
//! Bootstrap: every rank publishes under [`LINKS_KEY`] the listening
//! addresses of all its links, in link order, separated by commas
//! (`10.231.1.1:41000,10.231.2.1:41001`); [`super::ADDR_KEY`] keeps the
//! address of link 0 alone, as before. A rank reads a peer's list before
//! dialing it, and refuses a list that is malformed or does not have as
//! many links as its own ([`parse_peer_links`]).
//!
//! Handshake: with several links, the job's hello ([`navette_wire::handshake`])
//! is followed on the wire by a [`LinkHello`] (the link this connection
//! belongs to, and how many links the sender has), and both proofs are
//! computed under a key made of the job key, the string `navette tcp
//! link`, the link and the number of links, so the link a connection
//! claims is authenticated like the rank. A peer that claims a link this rank does not have, another
//! link than the listener it reached, or another number of links is
//! refused. With one link (the default) nothing is added: the handshake is
//! byte for byte the single-link one.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use navette_session::JOB_KEY_LEN;
use navette_wire::{DecodeError, Reader};

/// Environment variable that sets [`super::TcpConfig::links`]: this rank's
/// address on each network, comma-separated, in the same order on every
/// rank, each optionally followed by `@RATE` (the link's bandwidth for the
/// engine's strategies: an integer and `gbit`, `mbit` or `kbit`, in bits
/// per second as `tc` writes it). Example:
/// `NAVETTE_TCP_LINKS=10.231.1.1@2gbit,10.231.2.1@1gbit`.
pub const LINKS_VAR: &str = "NAVETTE_TCP_LINKS";

/// The bootstrap key under which each rank publishes the listening
/// addresses of all its links, comma-separated, in link order.
pub const LINKS_KEY: &str = "tcp-links";

/// Most links a rank may have.
pub const MAX_LINKS: usize = 8;

/// One network this rank is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpLink {
    /// This rank's address on that network: it listens there, and its
    /// connections to peers over this link leave from there.
    pub addr: IpAddr,
    /// The link's bandwidth in bytes per second, given to the engine as
    /// the rail's [`navette_core::RailCaps::bandwidth`]; `None` keeps
    /// [`super::TcpConfig::caps`]'s.
    pub bandwidth: Option<u64>,
}

impl TcpLink {
    /// A link at `addr` with the default bandwidth.
    pub fn new(addr: IpAddr) -> Self {
        Self {
            addr,
            bandwidth: None,
        }
    }
}

/// Why a link setting or a peer's published links are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// An entry of the list is empty (`a,,b`, or a trailing comma).
    #[error("{LINKS_VAR}: empty entry in {list:?}")]
    EmptyEntry {
        /// The whole list.
        list: String,
    },
    /// An entry is not an IP address.
    #[error("{LINKS_VAR}: {text:?} is not an IP address (expected ADDR or ADDR@RATE)")]
    BadAddress {
        /// The entry.
        text: String,
    },
    /// A rate is not an integer followed by `gbit`, `mbit` or `kbit`.
    #[error(
        "{LINKS_VAR}: rate {text:?} is not an integer followed by gbit, mbit or kbit \
         (bits per second, such as 2gbit)"
    )]
    BadRate {
        /// The rate as written.
        text: String,
    },
    /// More links than [`MAX_LINKS`].
    #[error("{count} tcp links; at most {MAX_LINKS} are supported")]
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// An address that names no network (`0.0.0.0`, `::`).
    #[error("tcp link address {addr} names no network: give this rank's address on it")]
    Unspecified {
        /// The address.
        addr: IpAddr,
    },
    /// A multicast or broadcast address, or an IPv6 link-local one (which
    /// needs an interface this list cannot name): not one host's address
    /// on a network.
    #[error(
        "tcp link address {addr} is not one host's address on a network \
         (multicast, broadcast or IPv6 link-local): give this rank's unicast address"
    )]
    NotUnicast {
        /// The address.
        addr: IpAddr,
    },
    /// The same address twice.
    #[error("tcp link address {addr} is listed twice")]
    Duplicate {
        /// The address.
        addr: IpAddr,
    },
    /// A peer's published list is not UTF-8.
    #[error("rank {rank}'s {LINKS_KEY} is not UTF-8")]
    NotUtf8 {
        /// The peer.
        rank: u32,
    },
    /// A peer's published list is malformed.
    #[error("rank {rank}'s {LINKS_KEY} {text:?}: {problem}")]
    BadPublished {
        /// The peer.
        rank: u32,
        /// The value (cut to a reasonable length).
        text: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A peer has another number of links than this rank.
    #[error(
        "rank {rank} has {theirs} tcp link(s), this rank has {ours}: {LINKS_VAR} must list \
         one address per network, in the same order, on every rank"
    )]
    CountMismatch {
        /// The peer.
        rank: u32,
        /// Its number of links.
        theirs: usize,
        /// Ours.
        ours: usize,
    },
    /// A peer's address on a link is not of the family of ours.
    #[error(
        "tcp link {link}: this rank's address {ours} and rank {rank}'s {theirs} differ in family"
    )]
    FamilyMismatch {
        /// The link.
        link: usize,
        /// The peer.
        rank: u32,
        /// Ours.
        ours: IpAddr,
        /// The peer's.
        theirs: SocketAddr,
    },
}

impl FromStr for TcpLink {
    type Err = LinkError;

    fn from_str(text: &str) -> Result<Self, LinkError> {
        let (addr, rate) = match text.split_once('@') {
            Some((addr, rate)) => (addr, Some(rate)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| LinkError::BadAddress {
            text: text.to_owned(),
        })?;
        let bandwidth = rate.map(|r| parse_rate(r.trim())).transpose()?;
        Ok(Self { addr, bandwidth })
    }
}

impl fmt::Display for TcpLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.addr)?;
        if let Some(bytes_per_s) = self.bandwidth {
            // Back to the unit it was most likely given in.
            let bits = u128::from(bytes_per_s) * 8;
            match [
                (1_000_000_000, "gbit"),
                (1_000_000, "mbit"),
                (1_000, "kbit"),
            ]
            .into_iter()
            .find(|&(unit, _)| bits % unit == 0)
            {
                Some((unit, name)) => write!(f, "@{}{name}", bits / unit)?,
                None => write!(f, "@{}kbit", bits / 1000)?,
            }
        }
        Ok(())
    }
}

/// `2gbit` → bytes per second.
fn parse_rate(text: &str) -> Result<u64, LinkError> {
    let bad = || LinkError::BadRate {
        text: text.to_owned(),
    };
    let lower = text.to_ascii_lowercase();
    let (digits, bits_per_unit) = [
        ("gbit", 1_000_000_000u64),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ]
    .into_iter()
    .find_map(|(unit, scale)| lower.strip_suffix(unit).map(|d| (d.to_owned(), scale)))
    .ok_or_else(bad)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let count: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = count.checked_mul(bits_per_unit).ok_or_else(bad)? / 8;
    if bytes == 0 {
        return Err(bad());
    }
    Ok(bytes)
}

/// Parses a [`LINKS_VAR`] value: `ADDR[@RATE]` entries separated by
/// commas. The list is checked as [`validate`] does.
pub fn parse_links(list: &str) -> Result<Vec<TcpLink>, LinkError> {
    let links = list
        .split(',')
        .map(|entry| {
            let entry = entry.trim();
            if entry.is_empty() {
                return Err(LinkError::EmptyEntry {
                    list: list.to_owned(),
                });
            }
            entry.parse()
        })
        .collect::<Result<Vec<TcpLink>, _>>()?;
    validate(&links)?;
    Ok(links)
}

/// Checks a list of links: at most [`MAX_LINKS`], each a real address,
/// no address twice. (An empty list is the default single link.)
pub fn validate(links: &[TcpLink]) -> Result<(), LinkError> {
    if links.len() > MAX_LINKS {
        return Err(LinkError::TooMany { count: links.len() });
    }
    for (i, link) in links.iter().enumerate() {
        if link.addr.is_unspecified() {
            return Err(LinkError::Unspecified { addr: link.addr });
        }
        if !is_unicast(link.addr) {
            return Err(LinkError::NotUnicast { addr: link.addr });
        }
        if links[..i].iter().any(|l| l.addr == link.addr) {
            return Err(LinkError::Duplicate { addr: link.addr });
        }
    }
    Ok(())
}

/// Whether `addr` can be one host's address on a network that a link
/// binds to and a peer dials: not multicast, not IPv4 broadcast, not an
/// IPv6 link-local address (dialing one needs an interface, which a link
/// list cannot name).
fn is_unicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => !v4.is_multicast() && !v4.is_broadcast(),
        // fe80::/10.
        IpAddr::V6(v6) => !v6.is_multicast() && (v6.segments()[0] & 0xffc0) != 0xfe80,
    }
}

/// The [`LINKS_KEY`] value for these listening addresses.
pub fn publish_value(addrs: &[SocketAddr]) -> String {
    let text: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
    text.join(",")
}

/// Parses the [`LINKS_KEY`] value `rank` published, and checks that it has
/// `ours` links, each a dialable address.
pub fn parse_peer_links(rank: u32, raw: &[u8], ours: usize) -> Result<Vec<SocketAddr>, LinkError> {
    let text = std::str::from_utf8(raw).map_err(|_| LinkError::NotUtf8 { rank })?;
    let bad = |problem: String| {
        let mut shown: String = text.chars().take(200).collect();
        if shown.len() < text.len() {
            shown.push('…');
        }
        LinkError::BadPublished {
            rank,
            text: shown,
            problem,
        }
    };
    let mut addrs = Vec::new();
    for entry in text.split(',') {
        if addrs.len() == MAX_LINKS {
            return Err(bad(format!("more than {MAX_LINKS} links")));
        }
        let addr: SocketAddr = entry
            .parse()
            .map_err(|_| bad(format!("{entry:?} is not an address and port")))?;
        if addr.ip().is_unspecified() || !is_unicast(addr.ip()) || addr.port() == 0 {
            return Err(bad(format!("{addr} cannot be dialed")));
        }
        addrs.push(addr);
    }
    if addrs.len() != ours {
        return Err(LinkError::CountMismatch {
            rank,
            theirs: addrs.len(),
            ours,
        });
    }
    Ok(addrs)
}

/// What a connection says about its link, after the job's hello, when
/// ranks have several links. Layout: magic `"NAVL"`, link u16, links u16
/// (little-endian, as the rest of the wire format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkHello {
    /// The link this connection belongs to (`0..links`).
    pub link: u16,
    /// How many links the sender has.
    pub links: u16,
}

/// Magic of a [`LinkHello`].
pub(super) const LINK_MAGIC: [u8; 4] = *b"NAVL";

impl LinkHello {
    /// Encoded size.
    pub const LEN: usize = 4 + 2 + 2;

    /// Appends the message.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&LINK_MAGIC);
        out.extend_from_slice(&self.link.to_le_bytes());
        out.extend_from_slice(&self.links.to_le_bytes());
    }

    /// Decodes exactly one message.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let found = r.array::<4>("link magic")?;
        if found != LINK_MAGIC {
            return Err(DecodeError::BadMagic {
                field: "link magic",
                found,
            });
        }
        let hello = Self {
            link: r.u16("link index")?,
            links: r.u16("link count")?,
        };
        r.finish("link hello")?;
        Ok(hello)
    }

    /// Checks the peer's message against this connection's link and this
    /// rank's number of links; the reason, for a refusal, if it does not
    /// fit.
    pub fn check(&self, link: usize, links: usize) -> Result<(), String> {
        if usize::from(self.links) != links {
            return Err(format!(
                "peer has {} tcp link(s), this rank has {links}: {LINKS_VAR} must list one \
                 address per network, in the same order, on every rank",
                self.links
            ));
        }
        if usize::from(self.link) >= links {
            return Err(format!(
                "peer claims unknown tcp link {} (this rank has links 0..{links})",
                self.link
            ));
        }
        if usize::from(self.link) != link {
            return Err(format!(
                "peer says this connection is tcp link {}, it reached link {link}",
                self.link
            ));
        }
        Ok(())
    }
}

/// Length of a [`proof_key`].
pub(super) const PROOF_KEY_LEN: usize = JOB_KEY_LEN + LINK_CONTEXT.len() + 4;
const LINK_CONTEXT: &[u8; 16] = b"navette tcp link";

/// The key under which both proofs of a connection on `link` (of `links`)
/// are computed: the job key, a context string, the link and the count.
/// HMAC takes it as its key, so a proof made for one link does not verify
/// for another; every such key has the same length and none is the bare
/// job key, so no two of them are the same HMAC key. Used only when ranks
/// have several links.
pub(super) fn proof_key(job_key: &[u8; JOB_KEY_LEN], link: u16, links: u16) -> [u8; PROOF_KEY_LEN] {
    let mut key = [0u8; PROOF_KEY_LEN];
    key[..JOB_KEY_LEN].copy_from_slice(job_key);
    let rest = &mut key[JOB_KEY_LEN..];
    rest[..LINK_CONTEXT.len()].copy_from_slice(LINK_CONTEXT);
    rest[LINK_CONTEXT.len()..LINK_CONTEXT.len() + 2].copy_from_slice(&link.to_le_bytes());
    rest[LINK_CONTEXT.len() + 2..].copy_from_slice(&links.to_le_bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn link_lists_parse_with_and_without_rates() {
        let links = parse_links("10.231.1.1@2gbit, 10.231.2.1@1000mbit,::1,127.0.0.2").unwrap();
        assert_eq!(links.len(), 4);
        assert_eq!(links[0].addr, IpAddr::V4(Ipv4Addr::new(10, 231, 1, 1)));
        assert_eq!(links[0].bandwidth, Some(250_000_000));
        assert_eq!(links[1].bandwidth, Some(125_000_000));
        assert_eq!(links[2], TcpLink::new(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert_eq!(links[3].bandwidth, None);
        let printed: Vec<String> = links.iter().map(ToString::to_string).collect();
        assert_eq!(
            printed,
            ["10.231.1.1@2gbit", "10.231.2.1@1gbit", "::1", "127.0.0.2"]
        );
        assert_eq!(
            "10.0.0.1@3kbit".parse::<TcpLink>().unwrap().to_string(),
            "10.0.0.1@3kbit"
        );
    }

    #[test]
    fn bad_link_lists_are_refused_with_a_reason() {
        type Expected = fn(&LinkError) -> bool;
        let cases: [(&str, Expected); 15] = [
            ("", |e| matches!(e, LinkError::EmptyEntry { .. })),
            ("10.0.0.1,", |e| matches!(e, LinkError::EmptyEntry { .. })),
            ("10.0.0.1,,10.0.0.2", |e| {
                matches!(e, LinkError::EmptyEntry { .. })
            }),
            ("eth0", |e| matches!(e, LinkError::BadAddress { .. })),
            ("10.0.0.1:80", |e| matches!(e, LinkError::BadAddress { .. })),
            ("10.0.0.1@2", |e| matches!(e, LinkError::BadRate { .. })),
            ("10.0.0.1@gbit", |e| matches!(e, LinkError::BadRate { .. })),
            ("10.0.0.1@-1gbit", |e| {
                matches!(e, LinkError::BadRate { .. })
            }),
            ("10.0.0.1@99999999999999999999gbit", |e| {
                matches!(e, LinkError::BadRate { .. })
            }),
            ("0.0.0.0", |e| matches!(e, LinkError::Unspecified { .. })),
            ("224.0.0.1", |e| matches!(e, LinkError::NotUnicast { .. })),
            ("255.255.255.255", |e| {
                matches!(e, LinkError::NotUnicast { .. })
            }),
            ("ff02::1", |e| matches!(e, LinkError::NotUnicast { .. })),
            ("fe80::1", |e| matches!(e, LinkError::NotUnicast { .. })),
            ("10.0.0.1,10.0.0.1", |e| {
                matches!(e, LinkError::Duplicate { .. })
            }),
        ];
        for (text, expected) in cases {
            let err = parse_links(text).unwrap_err();
            assert!(expected(&err), "{text:?}: {err:?}");
            let message = err.to_string();
            assert!(!message.is_empty(), "{text:?}");
        }
        let nine: Vec<String> = (1..=9).map(|i| format!("10.0.0.{i}")).collect();
        assert_eq!(
            parse_links(&nine.join(",")).unwrap_err(),
            LinkError::TooMany { count: 9 }
        );
    }

    #[test]
    fn published_lists_round_trip_and_bad_ones_are_refused() {
        let addrs: Vec<SocketAddr> = vec![
            "127.0.0.1:4000".parse().unwrap(),
            "[::1]:4001".parse().unwrap(),
        ];
        let value = publish_value(&addrs);
        assert_eq!(value, "127.0.0.1:4000,[::1]:4001");
        assert_eq!(parse_peer_links(3, value.as_bytes(), 2).unwrap(), addrs);
        let err = parse_peer_links(3, value.as_bytes(), 1).unwrap_err();
        assert_eq!(
            err,
            LinkError::CountMismatch {
                rank: 3,
                theirs: 2,
                ours: 1
            }
        );
        assert!(err.to_string().contains(LINKS_VAR), "{err}");
        for bad in [
            &b""[..],
            b"127.0.0.1",
            b"127.0.0.1:0",
            b"0.0.0.0:80",
            b"127.0.0.1:80,",
            b"127.0.0.1:80;127.0.0.2:80",
            b"\xff\xfe",
            b"127.0.0.1:99999",
            b"239.1.2.3:80",
            b"[fe80::1]:80",
        ] {
            let err = parse_peer_links(1, bad, 1).unwrap_err();
            assert!(
                matches!(
                    err,
                    LinkError::BadPublished { rank: 1, .. } | LinkError::NotUtf8 { rank: 1 }
                ),
                "{bad:?}: {err:?}"
            );
            assert!(err.to_string().contains("rank 1"), "{err}");
        }
        let many = ["127.0.0.1:80"; MAX_LINKS + 1].join(",");
        let err = parse_peer_links(1, many.as_bytes(), 2).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
    }

    #[test]
    fn link_hellos_are_strict_and_checked() {
        let hello = LinkHello { link: 1, links: 2 };
        let mut bytes = Vec::new();
        hello.encode(&mut bytes);
        assert_eq!(bytes.len(), LinkHello::LEN);
        assert_eq!(LinkHello::decode(&bytes).unwrap(), hello);
        assert!(LinkHello::decode(&bytes[..7]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(LinkHello::decode(&longer).is_err());
        let mut wrong = bytes.clone();
        wrong[0] = b'X';
        assert!(LinkHello::decode(&wrong).is_err());
        assert!(hello.check(1, 2).is_ok());
        assert!(hello.check(0, 2).unwrap_err().contains("reached link 0"));
        assert!(hello.check(1, 3).unwrap_err().contains("2 tcp link(s)"));
        let unknown = LinkHello { link: 5, links: 2 };
        assert!(
            unknown
                .check(0, 2)
                .unwrap_err()
                .contains("unknown tcp link 5")
        );
    }

    #[test]
    fn proof_keys_differ_by_link_and_count() {
        let job = [7u8; JOB_KEY_LEN];
        let keys = [
            proof_key(&job, 0, 2),
            proof_key(&job, 1, 2),
            proof_key(&job, 0, 3),
            proof_key(&[8u8; JOB_KEY_LEN], 0, 2),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(&keys[0][..JOB_KEY_LEN], &job);
    }
}
