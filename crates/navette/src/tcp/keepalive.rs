//! Finding a peer host that vanished without a reset (a crash, a cable):
//! TCP keepalive probes on idle connections, and a bound on how long sent
//! data may stay unacknowledged (see [`super::TcpConfig::keepalive`]).

use std::os::fd::AsFd;
use std::time::Duration;

use rustix::net::sockopt;

/// Unanswered probes after which the kernel closes the connection.
const PROBES: u32 = 3;

/// Gives `socket` keepalive probes after `after` idle, then every third of
/// it ([`PROBES`] of them), and closes it when sent data stays
/// unacknowledged for `after`: a vanished peer is found within about twice
/// `after`.
pub(super) fn apply(socket: impl AsFd, after: Duration) -> std::io::Result<()> {
    let fd = socket.as_fd();
    let after = after.max(Duration::from_secs(1));
    sockopt::set_socket_keepalive(fd, true)?;
    sockopt::set_tcp_keepidle(fd, after)?;
    sockopt::set_tcp_keepintvl(fd, (after / PROBES).max(Duration::from_secs(1)))?;
    sockopt::set_tcp_keepcnt(fd, PROBES)?;
    let millis = u32::try_from(after.as_millis()).unwrap_or(u32::MAX);
    sockopt::set_tcp_user_timeout(fd, millis)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_gets_the_probes_and_the_timeout() {
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
        assert_eq!(sockopt::tcp_user_timeout(&stream).unwrap(), 30_000);
    }
}
