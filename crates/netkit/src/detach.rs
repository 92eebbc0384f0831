//! What a forked child that outlives its plugin needs: a plugin hands the kernel work it
//! must not wait for (an nf_tables socket's release, a link's freeing) to a child holding
//! nothing else, so that the runtime, which waits for the plugin's exit and for EOF on its
//! stdout and stderr, is not kept waiting by it.

use std::os::fd::RawFd;

/// Closes every descriptor except `keep` (sorted). Async-signal-safe.
///
/// # Safety
/// Closes descriptors other code may own: only for a freshly forked child that makes no
/// further use of them.
pub(crate) unsafe fn close_all_but(keep: &[RawFd]) {
    let mut from: u32 = 0;
    for &fd in keep {
        let fd = fd as u32;
        if fd > from {
            close_range(from, fd - 1);
        }
        from = fd + 1;
    }
    close_range(from, u32::MAX);
}

unsafe fn close_range(first: u32, last: u32) {
    if libc::syscall(libc::SYS_close_range, first, last, 0) == 0 {
        return;
    }
    // Kernels before 5.9: close what a plugin can have open.
    for fd in first..=last.min(4095) {
        libc::close(fd as RawFd);
    }
}
