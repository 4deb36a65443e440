//! Who is at the other end of a Unix socket: `SO_PEERCRED`, and the
//! process's ancestry from `/proc` (Linux).

use std::io;
use std::os::unix::net::UnixStream;

/// How far up the process tree a connecting process is followed.
const MAX_ANCESTRY: usize = 32;

/// The kernel-checked credentials of a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) pid: u32,
    pub(crate) uid: u32,
}

pub(crate) fn peer(stream: &UnixStream) -> io::Result<Peer> {
    let cred = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(Peer {
        pid: cred.pid.as_raw_nonzero().get().unsigned_abs(),
        uid: cred.uid.as_raw(),
    })
}

/// The effective user id of this process.
pub(crate) fn own_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `pid`, then its parent, grandparent, … up to init or [`MAX_ANCESTRY`]
/// steps; stops early where `/proc` cannot tell.
pub(crate) fn lineage(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut current = pid;
    while out.len() < MAX_ANCESTRY {
        match parent(current) {
            Some(parent) if parent > 1 && !out.contains(&parent) => {
                out.push(parent);
                current = parent;
            }
            _ => break,
        }
    }
    out
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_parent(&stat)
}

/// The parent pid in a `/proc/PID/stat` line: `pid (comm) state ppid …`,
/// where `comm` may itself contain spaces and parentheses.
fn parse_parent(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_the_parent() {
        assert_eq!(parse_parent("42 (sh) S 7 42 42 0"), Some(7));
        assert_eq!(parse_parent("42 (a) b) (c) R 9 1"), Some(9));
        assert_eq!(parse_parent("garbage"), None);
        assert_eq!(parse_parent("1 (x)"), None);
    }

    #[test]
    fn our_lineage_starts_with_us_and_goes_to_our_parent() {
        let me = std::process::id();
        let line = lineage(me);
        assert_eq!(line[0], me);
        let parent = std::os::unix::process::parent_id();
        if parent > 1 {
            assert_eq!(line.get(1), Some(&parent));
        }
    }
}
