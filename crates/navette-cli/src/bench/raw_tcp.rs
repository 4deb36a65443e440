//! The raw TCP baseline: the fastest plain TCP exchange we can write without
//! Navette — non-blocking sockets, TCP_NODELAY, busy polling — run between
//! the same two ranks as the Navette figures it is compared with.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use navette::tcp::Congestion;
use navette_session::Bootstrap;

use super::{BenchError, Role};

/// A connected pair of sockets' one end.
#[derive(Debug)]
pub struct RawTcp {
    stream: TcpStream,
}

impl RawTcp {
    /// Connects rank 0 to rank 1 through the bootstrap: rank 1 listens and
    /// publishes its address, rank 0 dials it. The connection gets the
    /// congestion control Navette's would (`congestion`), so that both
    /// measure the same kernel path.
    pub fn connect(
        bootstrap: &dyn Bootstrap,
        role: Role,
        congestion: &Congestion,
    ) -> Result<Self, BenchError> {
        const KEY: &str = "bench-raw-tcp-addr";
        let stream = match role {
            Role::Server => {
                let listener = TcpListener::bind("127.0.0.1:0").map_err(BenchError::RawTcp)?;
                let addr = listener.local_addr().map_err(BenchError::RawTcp)?;
                bootstrap.put(KEY, addr.to_string().as_bytes())?;
                bootstrap.fence()?;
                listener.accept().map_err(BenchError::RawTcp)?.0
            }
            Role::Client => {
                bootstrap.fence()?;
                let published = bootstrap.get(1, KEY)?;
                let address = String::from_utf8_lossy(&published);
                let addr = address.parse::<SocketAddr>().map_err(|source| {
                    BenchError::BaselineAddress {
                        address: address.into_owned(),
                        source,
                    }
                })?;
                TcpStream::connect(addr).map_err(BenchError::RawTcp)?
            }
        };
        let setup = |stream: &TcpStream| {
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)?;
            stream.peer_addr()
        };
        let peer = setup(&stream).map_err(BenchError::RawTcp)?;
        congestion
            .apply(&stream, peer.ip())
            .map_err(|source| BenchError::CongestionRefused {
                congestion: congestion.clone(),
                source,
            })?;
        Ok(Self { stream })
    }

    /// Sends all of `buf`, spinning on `WouldBlock`.
    pub fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.stream.write(&buf[done..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Fills `buf`, spinning on `WouldBlock`.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.stream.read(&mut buf[done..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
