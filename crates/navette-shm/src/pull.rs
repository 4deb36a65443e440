//! Single-copy reads from a peer's memory (`process_vm_readv`), and writes
//! into it (`process_vm_writev`) for shared pulls.
//!
//! rustix 1.x wraps neither; libc's bindings are used, as the system calls
//! of this crate without a safe wrapper in a crate we already depend on.

use std::io;

/// Reads `dest.len()` bytes at `remote_addr` in process `pid` straight into
/// `dest` (one copy, by the kernel), looping on partial reads.
///
/// Errors keep their errno: `EPERM` when the kernel refuses (ptrace access
/// policy: Yama's `ptrace_scope`, a different user, a non-dumpable
/// process), `ESRCH` for no such process, `EFAULT` for an address not
/// mapped in the peer. `dest` may be partly written on error.
pub fn pull(pid: u32, remote_addr: u64, dest: &mut [u8]) -> io::Result<()> {
    let local = dest.as_mut_ptr();
    transfer(pid, remote_addr, dest.len(), |pid, done, remote| {
        let local_iov = libc::iovec {
            // SAFETY: `done < dest.len()` (see `transfer`): inside `dest`.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: remote.iov_len,
        };
        // SAFETY: `local_iov` describes the rest of `dest`, memory we
        // borrow mutably, so the kernel writes only there; the remote iovec
        // is only read from, by the kernel, which checks it against the
        // peer's mappings (EFAULT); both iovec arrays have length 1 and
        // live across the call.
        unsafe { libc::process_vm_readv(pid, &local_iov, 1, remote, 1, 0) }
    })
}

/// Writes `src` at `remote_addr` in process `pid` (one copy, by the
/// kernel), looping on partial writes: the other way of [`pull`], for a
/// part of a pull that its puller offered (see [`crate::Offer`]). Errors
/// as [`pull`]'s; the remote memory may be partly written on error.
pub fn push(pid: u32, remote_addr: u64, src: &[u8]) -> io::Result<()> {
    let local = src.as_ptr();
    transfer(pid, remote_addr, src.len(), |pid, done, remote| {
        let local_iov = libc::iovec {
            // SAFETY: `done < src.len()` (see `transfer`): inside `src`.
            iov_base: unsafe { local.add(done) }.cast_mut().cast(),
            iov_len: remote.iov_len,
        };
        // SAFETY: `local_iov` describes the rest of `src`, which the
        // kernel only reads; the remote iovec is written by the kernel
        // after checking it against the peer's mappings (EFAULT): what it
        // overwrites there is the peer's to offer, not our memory; both
        // iovec arrays have length 1 and live across the call.
        unsafe { libc::process_vm_writev(pid, &local_iov, 1, remote, 1, 0) }
    })
}

/// Moves `len` bytes between this process and `remote_addr` in another, by
/// calls of `call(pid, done, remote_iov)` (the bytes done so far, the
/// remote rest; `done < len` and the iovec's length is `len - done`), until
/// all are moved; retries on `EINTR`.
fn transfer(
    pid: u32,
    remote_addr: u64,
    len: usize,
    mut call: impl FnMut(libc::pid_t, usize, &libc::iovec) -> isize,
) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let fault = || io::Error::from_raw_os_error(libc::EFAULT);
    let mut done = 0usize;
    while done < len {
        let remote = remote_addr
            .checked_add(done as u64)
            .and_then(|a| usize::try_from(a).ok())
            .ok_or_else(fault)?;
        let remote_iov = libc::iovec {
            iov_base: remote as *mut libc::c_void,
            iov_len: len - done,
        };
        match call(pid, done, &remote_iov) {
            -1 => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
            // Nothing moved with bytes left: the next byte is unreachable.
            0 => return Err(fault()),
            // 0 < n <= len - done, so the cast is lossless.
            n => done += n as usize,
        }
    }
    Ok(())
}

/// Whether process `pid` still runs: it exists (`kill(pid, 0)` does not
/// fail with `ESRCH`) and has not exited waiting to be reaped (a zombie, whose
/// `/proc/PID/stat` state is `Z` or `X`, counts as gone: it will never act
/// again, and a parent that does not reap it must not keep us waiting).
pub fn is_alive(pid: u32) -> bool {
    let Some(id) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    if rustix::process::test_kill_process(id) == Err(rustix::io::Errno::SRCH) {
        return false;
    }
    // The state follows the command name's closing parenthesis (a name may
    // hold parentheses itself). Without /proc, existing is all we know.
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X"))
}

/// Whether this process can pull from process `pid`: reads the 8 bytes at
/// `probe_addr` there and compares them with `probe_value` (native byte
/// order, as the peer stored its `u64`).
pub fn can_pull_from(pid: u32, probe_addr: u64, probe_value: u64) -> bool {
    let mut buf = [0u8; 8];
    pull(pid, probe_addr, &mut buf).is_ok() && u64::from_ne_bytes(buf) == probe_value
}
