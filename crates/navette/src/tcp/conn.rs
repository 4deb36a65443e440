//! One TCP connection and its states.
//!
//! ```text
//!  dial ──► Connecting ──(writable, no socket error)──► Handshake
//!  accept ─────────────────────────────────────────────► Handshake
//!  Handshake: send Hello │ read Hello, check_peer, send Proof │ read Proof, verify
//!            ──(both proofs exchanged)──► Established { peer }
//!  any state ──(I/O error, EOF, bad handshake, bad frame)──► dropped
//! ```
//!
//! A connection reads the handshake messages byte-exactly, so packets that
//! follow the peer's proof in the same segment stay in the socket for the
//! frame reader.
//!
//! With several links ([`super::links`]) the hello is followed by a
//! [`LinkHello`] and the proofs are computed under the link's key; a peer
//! whose link does not fit this connection is refused before any proof.

use std::fmt;
use std::io::{self, Read, Write};

use mio::net::TcpStream;
use navette_core::Rank;
use navette_session::JOB_KEY_LEN;
use navette_wire::handshake::{HandshakeError, Hello, PROTOCOL_VERSION, Proof};

use super::frame::FrameReader;
use super::links::{LINK_MAGIC, LinkHello, PROOF_KEY_LEN, proof_key};

/// Why a connection ended.
#[derive(Debug)]
pub(super) enum ConnError {
    /// The socket failed or the peer closed it.
    Io(io::Error),
    /// The peer closed the connection.
    Eof,
    /// The peer closed the connection in the middle of a packet, this
    /// many bytes of it received.
    Truncated(usize),
    /// The peer failed the handshake.
    Handshake(HandshakeError),
    /// The peer's identity is not acceptable.
    Refused(String),
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Eof => f.write_str("connection closed by peer"),
            Self::Truncated(n) => write!(
                f,
                "connection closed by peer in the middle of a packet ({n} bytes of it received)"
            ),
            Self::Handshake(e) => write!(f, "handshake: {e}"),
            Self::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// What the handshake needs to know about this rank.
#[derive(Clone, Copy, Debug)]
pub(super) struct Identity<'a> {
    pub(super) rank: Rank,
    pub(super) size: u32,
    pub(super) job_id: u64,
    pub(super) job_key: &'a [u8; JOB_KEY_LEN],
    /// How many links this rank has (1: the single-link handshake).
    pub(super) links: usize,
}

/// Where a connection is in its life.
#[derive(Debug)]
pub(super) enum Phase {
    /// Our outgoing connect has not completed yet.
    Connecting,
    /// Exchanging hellos and proofs.
    Handshake(Box<Handshake>),
    /// Authenticated: packets of `peer`'s rail flow.
    Established {
        /// The authenticated peer.
        peer: Rank,
    },
}

/// A connection.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) phase: Phase,
    /// The peer we dialed, for outgoing connections.
    pub(super) dialed: Option<Rank>,
    /// The link this connection belongs to: the one we dialed on, or the
    /// one whose listener accepted it (the peer must agree).
    pub(super) link: usize,
    /// Whether the socket is in the driver's epoll set (see
    /// [`super::inner`] for when established connections leave it).
    pub(super) registered: bool,
    /// Readiness seen by the poller and not yet consumed (edge-triggered:
    /// cleared by a `WouldBlock`, or by a short read unless `read_closed`).
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// The poller reported the peer's end of stream (or an error): final,
    /// never cleared, so reads go on until they see it.
    pub(super) read_closed: bool,
    pub(super) frames: FrameReader,
    /// When the connection was opened (handshakes have a deadline).
    pub(super) opened: std::time::Instant,
    /// Rendezvous data being read straight into its destination.
    pub(super) landing: Option<Landing>,
}

/// A rendezvous data chunk whose bytes are being read into user memory.
#[derive(Debug)]
pub(super) struct Landing {
    /// Its chunk header (destination, offset, length).
    pub(super) header: navette_wire::RdvDataHeader,
    /// Bytes of it already written.
    pub(super) written: usize,
}

impl Conn {
    /// A connection we are dialing to `peer` over `link`.
    pub(super) fn dialing(stream: TcpStream, peer: Rank, link: usize) -> Self {
        Self::new(stream, Phase::Connecting, Some(peer), link)
    }

    /// A connection we accepted on the listener of `link`; the handshake
    /// starts at once.
    pub(super) fn accepted(
        stream: TcpStream,
        me: &Identity<'_>,
        link: usize,
    ) -> Result<Self, ConnError> {
        let hs = Handshake::new(me, link)?;
        Ok(Self::new(
            stream,
            Phase::Handshake(Box::new(hs)),
            None,
            link,
        ))
    }

    fn new(stream: TcpStream, phase: Phase, dialed: Option<Rank>, link: usize) -> Self {
        Self {
            stream,
            phase,
            dialed,
            link,
            registered: false,
            readable: true,
            writable: true,
            read_closed: false,
            frames: FrameReader::new(),
            opened: std::time::Instant::now(),
            landing: None,
        }
    }

    /// The authenticated peer, once established.
    pub(super) fn peer(&self) -> Option<Rank> {
        match self.phase {
            Phase::Established { peer } => Some(peer),
            _ => None,
        }
    }

    /// Puts the socket in the driver's epoll set (readable and writable,
    /// edge-triggered), unless it is in already; returns whether it was
    /// out.
    pub(super) fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
    ) -> io::Result<bool> {
        if self.registered {
            return Ok(false);
        }
        let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
        registry.register(&mut self.stream, token, interest)?;
        self.registered = true;
        Ok(true)
    }

    /// Takes the socket out of the driver's epoll set, if it is in.
    pub(super) fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        if self.registered {
            registry.deregister(&mut self.stream)?;
            self.registered = false;
        }
        Ok(())
    }

    /// Whether a write is worth trying: epoll said the socket is writable,
    /// or the connection is outside epoll (where no write has found the
    /// socket full since it left).
    pub(super) fn may_write(&self) -> bool {
        self.writable || !self.registered
    }

    /// Whether the connection is before `Established` and has readiness
    /// to act on.
    pub(super) fn setup_ready(&self) -> bool {
        match &self.phase {
            Phase::Connecting => self.writable,
            Phase::Handshake(hs) => self.readable || (self.writable && hs.has_output()),
            Phase::Established { .. } => false,
        }
    }

    /// Moves a connection that is not established yet as far as it goes;
    /// returns the peer when the handshake completes.
    pub(super) fn advance_setup(&mut self, me: &Identity<'_>) -> Result<Option<Rank>, ConnError> {
        if matches!(self.phase, Phase::Connecting) {
            if let Some(err) = self.stream.take_error()? {
                return Err(err.into());
            }
            match self.stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    self.writable = false;
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            }
            self.stream.set_nodelay(true)?;
            self.phase = Phase::Handshake(Box::new(Handshake::new(me, self.link)?));
        }
        let Phase::Handshake(hs) = &mut self.phase else {
            return Ok(None);
        };
        let done = hs.advance(
            &mut self.stream,
            &mut self.readable,
            &mut self.writable,
            me,
            self.dialed,
        )?;
        if let Some(peer) = done {
            self.phase = Phase::Established { peer };
        }
        Ok(done)
    }
}

/// Room for the longest handshake message: a hello and a link hello.
const INPUT_LEN: usize = 64;
const _: () = assert!(Hello::LEN + LinkHello::LEN <= INPUT_LEN && Proof::LEN <= INPUT_LEN);

/// The handshake of one connection.
#[derive(Debug)]
pub(super) struct Handshake {
    mine: Hello,
    theirs: Option<Hello>,
    out: Vec<u8>,
    sent: usize,
    input: [u8; INPUT_LEN],
    have: usize,
    verified: bool,
    /// The connection's link, and this rank's number of links.
    link: usize,
    links: usize,
    /// What the proofs are computed under: the job key alone with one
    /// link, the link's key with several.
    key: ProofKey,
}

/// The key of a connection's proofs.
#[derive(Clone, Copy)]
enum ProofKey {
    Job([u8; JOB_KEY_LEN]),
    Link([u8; PROOF_KEY_LEN]),
}

impl ProofKey {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Job(key) => key,
            Self::Link(key) => key,
        }
    }
}

impl fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A secret: never printed.
        f.write_str("ProofKey(..)")
    }
}

impl Handshake {
    fn new(me: &Identity<'_>, link: usize) -> Result<Self, ConnError> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| ConnError::Io(io::Error::other(format!("no randomness: {e}"))))?;
        let mine = Hello {
            version: PROTOCOL_VERSION,
            job_id: me.job_id,
            rank: me.rank,
            nonce,
        };
        let mut out = Vec::with_capacity(Hello::LEN + LinkHello::LEN + Proof::LEN);
        mine.encode(&mut out);
        let key = if me.links > 1 {
            // Both fit: at most MAX_LINKS links (checked at start-up).
            let to_u16 = |n: usize| {
                u16::try_from(n).map_err(|_| ConnError::Refused(format!("tcp link {n}")))
            };
            let (wire_link, wire_links) = (to_u16(link)?, to_u16(me.links)?);
            LinkHello {
                link: wire_link,
                links: wire_links,
            }
            .encode(&mut out);
            ProofKey::Link(proof_key(me.job_key, wire_link, wire_links))
        } else {
            ProofKey::Job(*me.job_key)
        };
        Ok(Self {
            mine,
            theirs: None,
            out,
            sent: 0,
            input: [0; INPUT_LEN],
            have: 0,
            verified: false,
            link,
            links: me.links,
            key,
        })
    }

    /// Length of the peer's first message: its hello, and its link hello
    /// when ranks have several links.
    fn hello_len(&self) -> usize {
        if self.links > 1 {
            Hello::LEN + LinkHello::LEN
        } else {
            Hello::LEN
        }
    }

    fn has_output(&self) -> bool {
        self.sent < self.out.len()
    }

    /// Sends what is queued and reads what is expected, until the socket
    /// would block or the handshake is over.
    fn advance(
        &mut self,
        stream: &mut TcpStream,
        readable: &mut bool,
        writable: &mut bool,
        me: &Identity<'_>,
        dialed: Option<Rank>,
    ) -> Result<Option<Rank>, ConnError> {
        loop {
            let mut moved = false;
            while *writable && self.has_output() {
                match stream.write(&self.out[self.sent..]) {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                    Ok(n) => {
                        self.sent += n;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => *writable = false,
                    Err(e) => return Err(e.into()),
                }
            }
            if self.verified {
                if self.has_output() {
                    return Ok(None);
                }
                let peer = self.theirs.expect("verified after the hello").rank;
                return Ok(Some(peer));
            }
            let need = if self.theirs.is_none() {
                self.hello_len()
            } else {
                Proof::LEN
            };
            if *readable && self.have < need {
                match stream.read(&mut self.input[self.have..need]) {
                    Ok(0) => return Err(ConnError::Eof),
                    Ok(n) => {
                        self.have += n;
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => moved = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => *readable = false,
                    Err(e) => return Err(e.into()),
                }
            }
            if self.have == need {
                self.have = 0;
                self.on_message(need, me, dialed)?;
                moved = true;
            }
            if !moved {
                return Ok(None);
            }
        }
    }

    /// Handles a whole hello or proof in `input[..len]`.
    fn on_message(
        &mut self,
        len: usize,
        me: &Identity<'_>,
        dialed: Option<Rank>,
    ) -> Result<(), ConnError> {
        let bytes = &self.input[..len];
        match self.theirs {
            None => {
                let (hello, link) = bytes.split_at(Hello::LEN.min(bytes.len()));
                let theirs = Hello::decode(hello).map_err(HandshakeError::from);
                let theirs = theirs.map_err(ConnError::Handshake)?;
                self.mine
                    .check_peer(&theirs)
                    .map_err(ConnError::Handshake)?;
                if theirs.rank >= me.size {
                    return Err(ConnError::Refused(format!(
                        "peer claims rank {} in a job of {}",
                        theirs.rank, me.size
                    )));
                }
                if dialed.is_some_and(|want| want != theirs.rank) {
                    return Err(ConnError::Refused(format!(
                        "dialed rank {} but rank {} answered",
                        dialed.unwrap_or_default(),
                        theirs.rank
                    )));
                }
                if self.links > 1 {
                    let claim = LinkHello::decode(link).map_err(|e| {
                        ConnError::Refused(if link.starts_with(b"NAVP") {
                            format!(
                                "peer sent no tcp link hello (it has one link, this rank has {})",
                                self.links
                            )
                        } else {
                            format!("malformed tcp link hello: {e}")
                        })
                    })?;
                    claim
                        .check(self.link, self.links)
                        .map_err(ConnError::Refused)?;
                }
                Proof::compute(self.key.bytes(), &self.mine, &theirs).encode(&mut self.out);
                self.theirs = Some(theirs);
            }
            Some(theirs) => {
                if self.links == 1 && bytes.starts_with(&LINK_MAGIC) {
                    return Err(ConnError::Refused(
                        "peer sent a tcp link hello: it has several links, this rank has one"
                            .to_owned(),
                    ));
                }
                let proof = Proof::decode(bytes).map_err(HandshakeError::from);
                proof
                    .and_then(|p| p.verify(self.key.bytes(), &theirs, &self.mine))
                    .map_err(ConnError::Handshake)?;
                self.verified = true;
            }
        }
        Ok(())
    }
}
