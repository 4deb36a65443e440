//! Signalling the ranks' process groups.
//!
//! Each rank is started as the leader of a process group of its own, so
//! that a signal reaches whatever the rank started too (`sh -c` runs its
//! commands in child processes that would otherwise survive the shell and
//! keep its output pipes open).

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};

/// The process group led by rank process `pid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group(Pid);

impl Group {
    pub(crate) fn of(pid: u32) -> Option<Self> {
        i32::try_from(pid).ok().and_then(Pid::from_raw).map(Self)
    }

    /// Whether a process of the group still runs. Zombies do not count:
    /// the orphans of a rank wait for init to reap them, which some
    /// container inits do only now and then.
    pub(crate) fn exists(self) -> bool {
        test_kill_process_group(self.0).is_ok() && has_live_member(self.0.as_raw_nonzero().get())
    }

    /// Sends SIGTERM to the group; no error if it is already gone.
    pub(crate) fn terminate(self) {
        let _ = kill_process_group(self.0, Signal::TERM);
    }

    /// Sends SIGKILL to the group; no error if it is already gone.
    pub(crate) fn kill(self) {
        let _ = kill_process_group(self.0, Signal::KILL);
    }
}

/// Whether `/proc` lists a process of group `pgid` that is not a zombie;
/// `true` when `/proc` cannot be read.
fn has_live_member(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    dir.flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .any(|stat| live_in_group(&stat, pgid))
}

/// Whether a `/proc/PID/stat` line (`pid (comm) state ppid pgrp …`) is a
/// process of group `pgid` that is not a zombie.
fn live_in_group(stat: &str, pgid: i32) -> bool {
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 1..].split_whitespace();
    let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    pgrp.parse() == Ok(pgid) && state != "Z" && state != "X"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_tell_live_members() {
        assert!(live_in_group("12 (sleep) S 1 10 10 0", 10));
        assert!(!live_in_group("12 (sleep) Z 1 10 10 0", 10));
        assert!(!live_in_group("12 (sleep) S 1 11 11 0", 10));
        assert!(live_in_group("12 (a (b) c) R 1 10 10", 10));
        assert!(!live_in_group("garbage", 10));
    }
}
