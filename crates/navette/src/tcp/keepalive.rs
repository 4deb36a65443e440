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

/// Unanswered probes after which the kernel closes the connection.
const PROBES: u32 = 3;

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
}
