//! Thin wrappers over the system calls of the packet loops, returning `io::Result`.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `read(2)` into `buf`.
#[inline]
pub fn read(fd: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `writev(2)` of `slices` (one TUN packet).
#[inline]
pub fn writev(fd: libc::c_int, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: IoSlice is ABI-compatible with struct iovec; the kernel only reads them.
    let n = unsafe {
        libc::writev(
            fd,
            slices.as_ptr().cast::<libc::iovec>(),
            slices.len() as libc::c_int,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `write(2)` of one buffer.
#[inline]
pub fn write(fd: libc::c_int, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads at most `buf.len()` bytes of `buf`.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The engine's stop signal: an eventfd every thread polls beside its own descriptor.
#[derive(Debug)]
pub struct StopSignal(OwnedFd);

impl StopSignal {
    pub fn new() -> io::Result<StopSignal> {
        // SAFETY: plain flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        Ok(StopSignal(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the signal readable for good (it is never read).
    pub fn fire(&self) {
        let one: u64 = 1;
        // SAFETY: an eventfd write takes exactly 8 bytes.
        unsafe {
            libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    pub fn fd(&self) -> libc::c_int {
        self.0.as_raw_fd()
    }
}

/// Waits until `fd` is ready for `events` or `stop` fires; false when stopping.
pub fn wait(fd: libc::c_int, events: libc::c_short, stop: libc::c_int) -> bool {
    let mut fds = [
        libc::pollfd {
            fd,
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: two pollfd structures we own.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // poll itself failing leaves nothing to wait on: let the loop retry its call.
            return true;
        }
        return fds[1].revents == 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fired_stop_signal_ends_the_wait() {
        let stop = StopSignal::new().unwrap();
        let other = StopSignal::new().unwrap();
        stop.fire();
        assert!(!wait(other.fd(), libc::POLLIN, stop.fd()));
        other.fire();
        let idle = StopSignal::new().unwrap();
        assert!(wait(other.fd(), libc::POLLIN, idle.fd()));
    }
}
