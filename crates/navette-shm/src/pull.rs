//! Single-copy reads from a peer's memory (`process_vm_readv`).
//!
//! rustix 1.x does not wrap `process_vm_readv`; libc's binding is used, as
//! the one system call of this crate without a safe wrapper in a crate we
//! already depend on.

use std::io;

/// Reads `dest.len()` bytes at `remote_addr` in process `pid` straight into
/// `dest` (one copy, by the kernel), looping on partial reads.
///
/// Errors keep their errno: `EPERM` when the kernel refuses (ptrace access
/// policy: Yama's `ptrace_scope`, a different user, a non-dumpable
/// process), `ESRCH` for no such process, `EFAULT` for an address not
/// mapped in the peer. `dest` may be partly written on error.
pub fn pull(pid: u32, remote_addr: u64, dest: &mut [u8]) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    let fault = || io::Error::from_raw_os_error(libc::EFAULT);
    let mut done = 0usize;
    while done < dest.len() {
        let rest = &mut dest[done..];
        let remote = remote_addr
            .checked_add(done as u64)
            .and_then(|a| usize::try_from(a).ok())
            .ok_or_else(fault)?;
        let local_iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let remote_iov = libc::iovec {
            iov_base: remote as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local_iov` describes `rest`, memory we borrow mutably, so
        // the kernel writes only there; the remote iovec is only read by the
        // kernel, which checks it against the peer's mappings (EFAULT);
        // both iovec arrays have length 1 and live across the call.
        let n = unsafe { libc::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0) };
        match n {
            -1 => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
            // Nothing read with bytes left: the next byte is unreadable.
            0 => return Err(fault()),
            // 0 < n <= rest.len(), so the cast is lossless.
            n => done += n as usize,
        }
    }
    Ok(())
}

/// Whether this process can pull from process `pid`: reads the 8 bytes at
/// `probe_addr` there and compares them with `probe_value` (native byte
/// order, as the peer stored its `u64`).
pub fn can_pull_from(pid: u32, probe_addr: u64, probe_value: u64) -> bool {
    let mut buf = [0u8; 8];
    pull(pid, probe_addr, &mut buf).is_ok() && u64::from_ne_bytes(buf) == probe_value
}
