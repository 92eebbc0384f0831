//! The NFLOG listener: a NETLINK_NETFILTER socket bound to one nfnetlink_log group, in the
//! netns it was opened in, reading the packets log rules send to that group.
//!
//! The socket is non-blocking once bound: [`Receiver::receive`] returns what is queued and
//! `WouldBlock` when nothing is, so an async runtime can wait on its fd (tokio's `AsyncFd`)
//! and a plain thread on [`Receiver::wait`]. The kernel batches a group's packets (up to 100,
//! or one second) into datagrams; a listener too slow for them loses datagrams (ENOBUFS),
//! which [`Receiver::lost`] counts. Closing the socket unbinds the group.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, SocketAddr};

use super::message::{bind_request, LoggedPacket, MSG_PACKET};
use crate::netfilter::exec::{Error, Result};
use crate::netfilter::nf_tables::socket::messages;

const NLMSG_ERROR: u16 = 2;
/// Large enough for any datagram nfnetlink_log sends with its default buffer size.
const RECV_BUF_LEN: usize = 64 * 1024;
/// The socket's receive buffer: room for bursts from many rate-limited rules.
const RCVBUF: usize = 1 << 20;

/// A socket receiving one nfnetlink_log group's packets.
pub struct Receiver {
    sock: netlink_sys::Socket,
    group: u16,
    buf: Vec<u8>,
    lost: u64,
}

impl Receiver {
    /// Binds `group` in the calling thread's current netns, packets copied up to
    /// `copy_range` bytes. Fails when another socket holds the group (EPERM).
    pub fn open(group: u16, copy_range: u32) -> Result<Receiver> {
        let context = format!("failed to listen to nfnetlink_log group {group}");
        let io = |source| Error::Io {
            context: context.clone(),
            source,
        };
        let mut sock = netlink_sys::Socket::new(NETLINK_NETFILTER).map_err(io)?;
        sock.bind_auto().map_err(io)?;
        sock.connect(&SocketAddr::new(0, 0)).map_err(io)?;
        // A smaller buffer than asked (net.core.rmem_max) only loses more under bursts.
        let _ = sock.set_rx_buf_sz(RCVBUF);
        let mut receiver = Receiver {
            sock,
            group,
            buf: Vec::with_capacity(RECV_BUF_LEN),
            lost: 0,
        };
        receiver.bind(copy_range).map_err(|e| e.context(&context))?;
        receiver.sock.set_non_blocking(true).map_err(io)?;
        Ok(receiver)
    }

    /// [`Receiver::open`] in `ns` (entered on this thread only while opening).
    pub fn open_in(ns: &crate::Netns, group: u16, copy_range: u32) -> Result<Receiver> {
        let enter_err = |e: crate::Error| Error::Invalid {
            context: format!("failed to enter netns {}", ns.path().display()),
            detail: e.to_string(),
        };
        let guard = ns.enter().map_err(enter_err)?;
        let receiver = Receiver::open(group, copy_range);
        guard.restore().map_err(enter_err)?;
        receiver
    }

    /// Sends the bind and waits for its acknowledgement (the socket still blocking).
    fn bind(&mut self, copy_range: u32) -> Result<()> {
        let seq = std::process::id();
        let request = bind_request(self.group, copy_range, seq);
        self.sock.send(&request, 0).map_err(|source| Error::Io {
            context: "sending the bind request".into(),
            source,
        })?;
        loop {
            self.recv_datagram().map_err(|source| Error::Io {
                context: "reading the bind acknowledgement".into(),
                source,
            })?;
            for m in messages(&self.buf)? {
                if m.seq != seq || m.kind != NLMSG_ERROR {
                    continue;
                }
                let errno = m
                    .payload
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]).saturating_abs())
                    .unwrap_or(libc::EPROTO);
                if errno == 0 {
                    return Ok(());
                }
                // The kernel answers EPERM when another socket holds the group (EBUSY when
                // this one does already), and without CAP_NET_ADMIN.
                let context = match errno {
                    libc::EPERM => {
                        "refused: another socket listens to that group, or this \
                                    process lacks CAP_NET_ADMIN"
                    }
                    libc::EBUSY => "refused: this socket listens to that group already",
                    _ => "the kernel refused the bind",
                }
                .to_string();
                return Err(Error::Kernel {
                    context,
                    errno,
                    ext_ack: None,
                });
            }
        }
    }

    fn recv_datagram(&mut self) -> std::io::Result<usize> {
        loop {
            self.buf.clear();
            match self.sock.recv(&mut self.buf, 0) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Appends the packets of one queued datagram to `out` and returns how many;
    /// `WouldBlock` when nothing is queued. A datagram lost to a full receive buffer
    /// (ENOBUFS) is counted in [`Receiver::lost`] and reads as zero packets.
    pub fn receive(&mut self, out: &mut Vec<LoggedPacket>) -> std::io::Result<usize> {
        match self.recv_datagram() {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.lost += 1;
                return Ok(0);
            }
            Err(e) => return Err(e),
        }
        let before = out.len();
        // Malformed framing ends the datagram; what came before it is kept.
        let group = self.group;
        let parsed = match messages(&self.buf) {
            Ok(ms) => ms,
            Err(_) => return Ok(0),
        };
        out.extend(
            parsed
                .iter()
                .filter(|m| m.kind == MSG_PACKET)
                .filter_map(|m| LoggedPacket::parse(m.payload))
                .filter(|p| p.group == group),
        );
        Ok(out.len() - before)
    }

    /// Waits up to `timeout` for a datagram; whether one is queued.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut fd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: poll reads and writes the one pollfd given, for the duration of the call.
        let rc = unsafe { libc::poll(&mut fd, 1, millis) };
        rc > 0 && fd.revents & libc::POLLIN != 0
    }

    /// The group this socket listens to.
    pub fn group(&self) -> u16 {
        self.group
    }

    /// Datagrams lost because the receive buffer was full.
    pub fn lost(&self) -> u64 {
        self.lost
    }
}

impl AsRawFd for Receiver {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsFd for Receiver {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd stays open as long as `self` (the socket closes on drop).
        unsafe { BorrowedFd::borrow_raw(self.sock.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::netfilter::nflog::Transport;
    use crate::testutil::TestNetns;

    /// A log rule on the output hook of a scratch netns: a UDP datagram to 127.0.0.1 comes
    /// back as an NFLOG message with the rule's prefix and the datagram's flow; a second
    /// listener for the same group is refused.
    #[test]
    fn a_logged_packet_arrives_with_prefix_and_flow() {
        crate::skip_unless_root!();
        let tn = TestNetns::new("nflog");
        let ns = tn.with_udp_log_rule("nflog_test", 9999, "i 127.0.0.1", 7361, 128);
        let mut receiver = Receiver::open_in(&ns, 7361, 128).unwrap();
        let busy = Receiver::open_in(&ns, 7361, 128).err().unwrap();
        assert_eq!(busy.errno(), Some(libc::EPERM), "{busy}");
        assert!(busy.to_string().contains("another socket"), "{busy}");

        let sent = Instant::now();
        std::thread::spawn(move || {
            let _guard = ns.enter().unwrap();
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.send_to(b"ping", "127.0.0.1:9999").unwrap();
        })
        .join()
        .unwrap();
        let mut got = Vec::new();
        while got.is_empty() && sent.elapsed() < Duration::from_secs(5) {
            receiver.wait(Duration::from_millis(100));
            match receiver.receive(&mut got) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("receive: {e}"),
            }
        }
        let latency = sent.elapsed();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].prefix, "i 127.0.0.1");
        let flow = got[0].flow.unwrap();
        assert_eq!(flow.dst, "127.0.0.1".parse::<std::net::IpAddr>().unwrap());
        assert!(matches!(flow.transport, Transport::Ports { dst: 9999, .. }));
        eprintln!("NFLOG message after {latency:?}");
    }
}
