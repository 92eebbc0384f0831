//! A packet socket on one interface that sends and receives DHCP over UDP/IPv4 without the
//! interface having an address (RFC 2131 §4.1): the IP and UDP headers are ours. Opened in
//! the container netns and bound to the container interface, as the reference's client is.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

pub const CLIENT_PORT: u16 = 68;
pub const SERVER_PORT: u16 = 67;
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];
const ETH_P_IP: u16 = 0x0800;
const PACKET_OUTGOING: u8 = 4;

pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

/// A UDP datagram to port 68 received on the interface.
pub struct Received {
    pub payload: Vec<u8>,
    pub src_mac: [u8; 6],
}

fn sockaddr(ifindex: i32, mac: [u8; 6]) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = ETH_P_IP.to_be();
    sa.sll_ifindex = ifindex;
    sa.sll_halen = 6;
    sa.sll_addr[..6].copy_from_slice(&mac);
    sa
}

impl PacketSocket {
    /// Opens the socket in the calling thread's netns, bound to `ifindex`.
    pub fn open(ifindex: u32) -> io::Result<PacketSocket> {
        let ifindex =
            i32::try_from(ifindex).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_IP.to_be()),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let sa = sockaddr(ifindex, [0; 6]);
        // SAFETY: sa is a valid sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd, ifindex })
    }

    /// Sends `payload` from `src:68` to `dst:67`, to link-layer address `dst_mac`.
    pub fn send(
        &self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        dst_mac: [u8; 6],
        payload: &[u8],
    ) -> io::Result<()> {
        let packet = ip_udp(src, dst, payload);
        let sa = sockaddr(self.ifindex, dst_mac);
        // SAFETY: the buffer and address are valid for the lengths passed.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The next UDP datagram to port 68 before `deadline`; `Ok(None)` on timeout.
    pub fn recv(&self, deadline: Instant) -> io::Result<Option<Received>> {
        let mut buf = vec![0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                continue;
            }
            // SAFETY: zeroed sockaddr_ll is valid; lengths match the buffers.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut salen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut sa as *mut libc::sockaddr_ll).cast(),
                    &mut salen,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) {
                    continue;
                }
                return Err(e);
            }
            if sa.sll_pkttype == PACKET_OUTGOING {
                continue;
            }
            if let Some((_, payload)) = udp_to_client(&buf[..n as usize]) {
                let mut src_mac = [0u8; 6];
                src_mac.copy_from_slice(&sa.sll_addr[..6]);
                return Ok(Some(Received {
                    payload: payload.to_vec(),
                    src_mac,
                }));
            }
        }
    }
}

fn checksum(data: &[u8], mut sum: u32) -> u16 {
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// IPv4 + UDP headers around `payload` (client port to server port).
pub fn ip_udp(src: Ipv4Addr, dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let udp_len = (8 + payload.len()) as u16;
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(usize::from(total));
    p.extend([0x45, 0x10]);
    p.extend(total.to_be_bytes());
    p.extend([0, 0, 0, 0, 64, 17, 0, 0]);
    p.extend(src.octets());
    p.extend(dst.octets());
    let ip_sum = checksum(&p[..20], 0);
    p[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    p.extend(CLIENT_PORT.to_be_bytes());
    p.extend(SERVER_PORT.to_be_bytes());
    p.extend(udp_len.to_be_bytes());
    p.extend([0, 0]);
    p.extend(payload);
    // Pseudo-header: src, dst, zero, protocol, UDP length.
    let mut pseudo = 0u32;
    for w in src.octets().chunks(2).chain(dst.octets().chunks(2)) {
        pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    pseudo += 17 + u32::from(udp_len);
    let mut udp_sum = checksum(&p[20..], pseudo);
    if udp_sum == 0 {
        udp_sum = 0xffff;
    }
    p[26..28].copy_from_slice(&udp_sum.to_be_bytes());
    p
}

/// The source address and UDP payload of an IPv4 packet to port 68, if it is one.
pub fn udp_to_client(packet: &[u8]) -> Option<(Ipv4Addr, &[u8])> {
    if packet.len() < 28 || packet[0] >> 4 != 4 || packet[9] != 17 {
        return None;
    }
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]])).min(packet.len());
    // Fragments are not reassembled (DHCP replies fit one frame).
    if u16::from_be_bytes([packet[6], packet[7]]) & 0x3fff != 0 || total < ihl + 8 {
        return None;
    }
    let udp = &packet[ihl..total];
    if u16::from_be_bytes([udp[2], udp[3]]) != CLIENT_PORT {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([udp[4], udp[5]])).min(udp.len());
    if len < 8 {
        return None;
    }
    let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    Some((src, &udp[8..len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_checksum_and_parse_back() {
        let src = Ipv4Addr::new(10, 0, 0, 2);
        let p = ip_udp(src, Ipv4Addr::BROADCAST, b"hello");
        assert_eq!(checksum(&p[..20], 0), 0, "IP checksum must verify");
        // A reply to port 68 parses; ours (to 67) does not.
        assert!(udp_to_client(&p).is_none());
        let mut reply = p.clone();
        reply[20..24].copy_from_slice(&[0, 67, 0, 68]);
        let (from, payload) = udp_to_client(&reply).unwrap();
        assert_eq!((from, payload), (src, &b"hello"[..]));
        assert!(udp_to_client(&reply[..20]).is_none());
    }
}
