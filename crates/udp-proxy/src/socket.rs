//! The UDP socket towards the peers: bound to the node's address and the backend's port (as
//! flanneld binds it, so datagrams go from `Port` to `Port`), with large buffers, and the
//! probes of what the kernel offers for batching (`sendmmsg`/`recvmmsg`, `UDP_SEGMENT`,
//! `UDP_GRO`).

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::UdpProxyError;

/// Socket buffer size asked for each way: a few milliseconds of a 10 Gbit/s stream, so a
/// burst of super-packets is not dropped while a thread is busy.
const BUFFER_BYTES: libc::c_int = 8 << 20;

#[derive(Debug)]
pub struct UdpSocket {
    fd: OwnedFd,
}

impl UdpSocket {
    /// A UDP socket bound to `addr`, with large send and receive buffers (beyond the
    /// `net.core.*mem_max` limits where the caller has CAP_NET_ADMIN).
    pub fn bind(addr: SocketAddrV4) -> Result<UdpSocket, UdpProxyError> {
        let fail = |what, source| UdpProxyError::Socket { addr, what, source };
        // SAFETY: plain constants; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::IPPROTO_UDP,
            )
        };
        if raw < 0 {
            return Err(fail("create", io::Error::last_os_error()));
        }
        // SAFETY: `raw` was just returned by socket and is owned by nobody else.
        let sock = UdpSocket {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        };
        for (forced, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if sock
                .set_int(libc::SOL_SOCKET, forced, BUFFER_BYTES)
                .is_err()
            {
                // Without CAP_NET_ADMIN: as much as net.core.*mem_max allows.
                let _ = sock.set_int(libc::SOL_SOCKET, plain, BUFFER_BYTES);
            }
        }
        let sa = sockaddr(addr);
        // SAFETY: `sa` is a sockaddr_in of the size passed.
        let rc = unsafe {
            libc::bind(
                sock.fd(),
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(fail("bind", io::Error::last_os_error()));
        }
        Ok(sock)
    }

    pub fn fd(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// Turns on `UDP_GRO` (Linux 5.0): datagrams of one sender may then arrive as one buffer
    /// of equal-sized segments, their size in a control message. Whether it took.
    pub fn enable_gro(&self) -> bool {
        self.set_int(libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
    }

    /// Whether the kernel knows `UDP_SEGMENT` (Linux 4.18): asking for its value succeeds.
    pub fn has_gso(&self) -> bool {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `value`.
        unsafe {
            libc::getsockopt(
                self.fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            ) == 0
        }
    }

    /// Whether `sendmmsg` and `recvmmsg` exist: called with no message, they return 0 (or
    /// ENOSYS where they do not, as under a seccomp filter denying them).
    pub fn has_mmsg(&self) -> bool {
        // SAFETY: zero messages: the kernel reads no array.
        let send = unsafe { libc::sendmmsg(self.fd(), std::ptr::null_mut(), 0, 0) };
        // SAFETY: as above, no message and no timeout.
        let recv = unsafe {
            libc::recvmmsg(
                self.fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        send == 0 && recv == 0
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: an int option of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// `addr` as the kernel takes it.
pub fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_is_in_network_order() {
        let sa = sockaddr("172.31.0.1:8285".parse().unwrap());
        assert_eq!(u16::from_be(sa.sin_port), 8285);
        assert_eq!(u32::from_be(sa.sin_addr.s_addr), 0xac1f_0001);
    }

    #[test]
    fn loopback_socket_offers_the_batching_features() {
        // Any user may bind an ephemeral loopback port; every supported kernel has these.
        let sock = UdpSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(sock.has_mmsg());
        assert!(sock.has_gso());
        assert!(sock.enable_gro());
    }
}
