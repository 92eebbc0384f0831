//! The sending thread: pod packets read from TUN, routed, cut into datagrams of one inner
//! packet each, sent to the peers.
//!
//! Fast path: reads go on while TUN has packets (up to [`READ_BUFFERS`] reads or
//! [`FLUSH_BYTES`] queued), super-packets are cut in place ([`crate::segment`]), and the queue
//! goes out in one `sendmmsg`, where runs of equal-sized datagrams to one peer travel as one
//! message with `UDP_SEGMENT` (the kernel, or the NIC, splits them). Per-packet path: one
//! `read` and one `sendto` per packet.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddrV4;
use std::ops::Range;

use crate::forward::{count_invalid, Outbound};
use crate::ipv4;
use crate::segment::{self, Piece};
use crate::shared::Ctx;
use crate::socket::sockaddr;
use crate::stats::{Counter, Local};
use crate::sys;
use crate::vnet::{self, VnetHdr, F_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, GSO_UDP_L4};

/// TUN reads gathered before a send.
const READ_BUFFERS: usize = 16;
/// A read buffer: the virtio-net header and the largest packet TUN hands over (64 KiB).
const READ_BUFFER_LEN: usize = vnet::LEN + 65536;
/// Queued bytes that trigger a send: one super-packet's worth, so the data is still in cache.
const FLUSH_BYTES: usize = 60 * 1024;
/// `UDP_MAX_SEGMENTS`: datagrams one `UDP_SEGMENT` send may carry (64 up to Linux 6.8).
const GSO_MAX_SEGMENTS: usize = 64;
/// A UDP/IPv4 datagram's largest payload, which a `UDP_SEGMENT` send may not pass either.
const GSO_MAX_BYTES: usize = 65507;
/// `sendmmsg` takes at most UIO_MAXIOV messages per call.
const MAX_MESSAGES: usize = 1024;

/// One datagram queued: its headers (in the arena, for a segment) and its body (in a read
/// buffer).
struct Datagram {
    peer: SocketAddrV4,
    buf: usize,
    head: Option<Range<usize>>,
    body: Range<usize>,
}

impl Datagram {
    fn len(&self) -> usize {
        self.head.as_ref().map_or(0, |h| h.len()) + self.body.len()
    }
}

/// Datagrams queued for the next send, and the read buffers and headers they point into.
struct Queue {
    bufs: Vec<Box<[u8]>>,
    /// Read buffers holding queued datagrams (the next read goes into `bufs[used]`).
    used: usize,
    arena: Vec<u8>,
    pieces: Vec<Piece>,
    datagrams: Vec<Datagram>,
    bytes: usize,
}

impl Queue {
    fn new() -> Queue {
        Queue {
            bufs: (0..READ_BUFFERS)
                .map(|_| vec![0u8; READ_BUFFER_LEN].into_boxed_slice())
                .collect(),
            used: 0,
            arena: Vec::with_capacity(64 * 1024),
            pieces: Vec::with_capacity(256),
            datagrams: Vec::with_capacity(1024),
            bytes: 0,
        }
    }

    /// Queues what the read of `n` bytes into `bufs[used]` gave; keeps the buffer when a
    /// datagram points into it.
    fn take_read(&mut self, n: usize, ctx: &Ctx, out: &mut Outbound, local: &mut Local) {
        let slot = self.used;
        let vnet_hdr = ctx.tun.vnet_hdr;
        let buf = &mut self.bufs[slot][..n];
        let (hdr, offset) = if vnet_hdr {
            match VnetHdr::parse(buf) {
                Some(h) => (h, vnet::LEN),
                None => return local.inc(Counter::Malformed),
            }
        } else {
            (VnetHdr::default(), 0)
        };
        let pkt = &mut buf[offset..];
        let total = match ipv4::validate(pkt) {
            Ok(total) => total,
            Err(why) => return count_invalid(local, why, false),
        };
        let pkt = &mut pkt[..total];
        let Some(peer) = out.route(pkt, ctx.tun.fd(), local) else {
            return;
        };
        let queued = self.datagrams.len();
        match hdr.gso_kind() {
            GSO_NONE => {
                if hdr.flags & F_NEEDS_CSUM != 0
                    && segment::complete_partial(
                        pkt,
                        usize::from(hdr.csum_start),
                        usize::from(hdr.csum_offset),
                    )
                    .is_err()
                {
                    return local.inc(Counter::Malformed);
                }
                if total > ctx.mtu {
                    return local.inc(Counter::Oversize);
                }
                self.datagrams.push(Datagram {
                    peer,
                    buf: slot,
                    head: None,
                    body: offset..offset + total,
                });
            }
            kind @ (GSO_TCPV4 | GSO_UDP_L4) => {
                let arena_at = self.arena.len();
                let size = usize::from(hdr.gso_size);
                let cut = if kind == GSO_TCPV4 {
                    segment::tcp(pkt, size, &mut self.arena, &mut self.pieces)
                } else {
                    segment::udp(pkt, size, &mut self.arena, &mut self.pieces)
                };
                let fits = self.pieces.first().is_some_and(|p| p.size() <= ctx.mtu);
                if cut.is_err() || !fits {
                    self.arena.truncate(arena_at);
                    self.pieces.clear();
                    return local.inc(if cut.is_err() {
                        Counter::Malformed
                    } else {
                        Counter::Oversize
                    });
                }
                local.inc(Counter::SuperPacketsSplit);
                for piece in self.pieces.drain(..) {
                    self.datagrams.push(Datagram {
                        peer,
                        buf: slot,
                        head: Some(piece.head),
                        body: piece.payload.start + offset..piece.payload.end + offset,
                    });
                }
            }
            _ => return local.inc(Counter::UnsupportedOffload),
        }
        self.bytes += self.datagrams[queued..]
            .iter()
            .map(Datagram::len)
            .sum::<usize>();
        self.used += 1;
    }

    fn clear(&mut self) {
        self.used = 0;
        self.arena.clear();
        self.datagrams.clear();
        self.bytes = 0;
    }
}

/// `struct cmsghdr` + a u16 (`CMSG_SPACE(2)`), aligned as the kernel reads it.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct GsoCmsg([u8; 24]);

/// A run of datagrams sent as one message.
struct Group {
    first: usize,
    count: usize,
    bytes: usize,
    segment: usize,
}

/// The arrays one `sendmmsg` reads; rebuilt at each send, their capacity kept.
#[derive(Default)]
struct Sender {
    /// Peers whose route refused a `UDP_SEGMENT` send (its MTU is below the segments'), sent
    /// one datagram per message until the route table changes.
    no_gso_peers: HashSet<SocketAddrV4>,
    groups: Vec<Group>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_in>,
    cmsgs: Vec<GsoCmsg>,
    msgs: Vec<libc::mmsghdr>,
}

impl Sender {
    /// Sends every queued datagram, then empties the queue. A `UDP_SEGMENT` send the kernel
    /// refuses goes again one datagram per message: EMSGSIZE (EINVAL before Linux 6.x) is the
    /// peer's route, its MTU below the segments' (the kernel then fragments each datagram, as
    /// it does flanneld's), and that peer gets no segmentation until the route table changes;
    /// EIO or EOPNOTSUPP is the kernel or the device, and segmentation goes off for good.
    fn flush(&mut self, q: &mut Queue, ctx: &Ctx, local: &mut Local) {
        let mut from = 0;
        while from < q.datagrams.len() {
            let gso = ctx.shared.udp_gso();
            self.build(q, from, q.datagrams.len(), gso);
            match send(ctx, &mut self.msgs, ctx.shared.datapath.mmsg) {
                Ok(sent) => {
                    local.inc(Counter::UdpSends);
                    for g in &self.groups[..sent] {
                        local.add(Counter::SentPackets, g.count as u64);
                        local.add(Counter::SentBytes, g.bytes as u64);
                    }
                    from = self.next_after(sent, q.datagrams.len());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    if !sys::wait(ctx.sock.fd(), libc::POLLOUT, ctx.stop.fd()) {
                        break;
                    }
                }
                Err(e) => {
                    local.inc(Counter::UdpSends);
                    let failed = &self.groups[0];
                    let peer = q.datagrams[failed.first].peer;
                    if gso && failed.count > 1 {
                        match e.raw_os_error() {
                            Some(libc::EMSGSIZE) | Some(libc::EINVAL) => {
                                ctx.shared.note_error(
                                    format_args!("segmented sending to {peer} (sent unsegmented)"),
                                    &e,
                                );
                                self.no_gso_peers.insert(peer);
                                continue;
                            }
                            Some(libc::EIO) | Some(libc::EOPNOTSUPP) => {
                                ctx.shared.disable_udp_gso(&e);
                                continue;
                            }
                            _ => {}
                        }
                    }
                    local.add(Counter::SendFailed, failed.count as u64);
                    ctx.shared.note_error(format_args!("sending to {peer}"), &e);
                    from = self.next_after(1, q.datagrams.len());
                }
            }
        }
        q.clear();
    }

    /// The route table changed: peers whose route refused segmentation get another chance.
    fn routes_changed(&mut self) {
        self.no_gso_peers.clear();
    }

    /// The first datagram after the first `groups` groups built (`until` after them all).
    fn next_after(&self, groups: usize, until: usize) -> usize {
        self.groups.get(groups).map_or(until, |g| g.first)
    }

    /// Groups `q.datagrams[from..until]` into messages (runs to one peer whose datagrams all have
    /// the first one's size but the last, which may be shorter, within the GSO limits; one
    /// datagram per message without GSO) and fills the arrays `sendmmsg` reads.
    fn build(&mut self, q: &Queue, from: usize, until: usize, gso: bool) {
        self.groups.clear();
        for (i, d) in q.datagrams.iter().enumerate().take(until).skip(from) {
            let len = d.len();
            if let Some(g) = self.groups.last_mut() {
                let last = &q.datagrams[g.first + g.count - 1];
                let joins = gso
                    && last.peer == d.peer
                    && !self.no_gso_peers.contains(&d.peer)
                    && last.len() == g.segment
                    && len <= g.segment
                    && g.count < GSO_MAX_SEGMENTS
                    && g.bytes + len <= GSO_MAX_BYTES;
                if joins {
                    g.count += 1;
                    g.bytes += len;
                    continue;
                }
            }
            if self.groups.len() == MAX_MESSAGES {
                break;
            }
            self.groups.push(Group {
                first: i,
                count: 1,
                bytes: len,
                segment: len,
            });
        }
        self.iovs.clear();
        self.addrs.clear();
        self.cmsgs.clear();
        for g in &self.groups {
            for d in &q.datagrams[g.first..g.first + g.count] {
                if let Some(head) = &d.head {
                    self.iovs.push(iovec(&q.arena[head.clone()]));
                }
                self.iovs.push(iovec(&q.bufs[d.buf][d.body.clone()]));
            }
            self.addrs.push(sockaddr(q.datagrams[g.first].peer));
            self.cmsgs.push(gso_cmsg(g.segment as u16));
        }
        // The arrays are complete: pointers into them stay valid until the next build.
        self.msgs.clear();
        let mut iov_at = 0;
        for (k, g) in self.groups.iter().enumerate() {
            let iov_count = q.datagrams[g.first..g.first + g.count]
                .iter()
                .map(|d| 1 + usize::from(d.head.is_some()))
                .sum::<usize>();
            // SAFETY: an all-zero mmsghdr is a valid empty message.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = (&mut self.addrs[k] as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_iov = self.iovs[iov_at..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = iov_count as _;
            if g.count > 1 {
                m.msg_hdr.msg_control = self.cmsgs[k].0.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = std::mem::size_of::<GsoCmsg>() as _;
            }
            iov_at += iov_count;
            self.msgs.push(m);
        }
    }
}

fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }
}

/// The `UDP_SEGMENT` control message: the kernel cuts the message into datagrams of `size`.
fn gso_cmsg(size: u16) -> GsoCmsg {
    let mut c = GsoCmsg([0; 24]);
    // SAFETY: `c` is CMSG_SPACE(2) bytes, aligned for cmsghdr; the header and its u16 of data
    // are written inside it.
    unsafe {
        let hdr = c.0.as_mut_ptr().cast::<libc::cmsghdr>();
        (*hdr).cmsg_len = libc::CMSG_LEN(2) as _;
        (*hdr).cmsg_level = libc::SOL_UDP;
        (*hdr).cmsg_type = libc::UDP_SEGMENT;
        libc::CMSG_DATA(hdr).cast::<u16>().write_unaligned(size);
    }
    c
}

/// `sendmmsg` of `msgs` (or `sendmsg` of the first, without it): how many went.
fn send(ctx: &Ctx, msgs: &mut [libc::mmsghdr], mmsg: bool) -> io::Result<usize> {
    if mmsg {
        // SAFETY: every message points into arrays kept alive by the caller until this returns.
        let n = unsafe {
            libc::sendmmsg(
                ctx.sock.fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        return Ok(n as usize);
    }
    // SAFETY: as above, for the first message alone.
    let n = unsafe { libc::sendmsg(ctx.sock.fd(), &msgs[0].msg_hdr, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(1)
}

/// The fast sending loop (see the module documentation).
pub(crate) fn run_fast(ctx: &Ctx, mut out: Outbound) {
    let mut q = Queue::new();
    let mut sender = Sender::default();
    let mut local = Local::default();
    while !ctx.shared.stopping() {
        match sys::read(ctx.tun.fd(), &mut q.bufs[q.used]) {
            Ok(n) => {
                local.inc(Counter::TunReads);
                q.take_read(n, ctx, &mut out, &mut local);
                if q.used == READ_BUFFERS || q.bytes >= FLUSH_BYTES {
                    sender.flush(&mut q, ctx, &mut local);
                    local.publish(&ctx.shared.tx);
                    if out.routes.refresh() {
                        sender.routes_changed();
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                sender.flush(&mut q, ctx, &mut local);
                local.publish(&ctx.shared.tx);
                if !sys::wait(ctx.tun.fd(), libc::POLLIN, ctx.stop.fd()) {
                    break;
                }
                // Routes replaced while idle apply to the packets that woke us.
                if out.routes.refresh() {
                    sender.routes_changed();
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => {
                if !ctx.read_error_is_transient(&e) {
                    break;
                }
            }
        }
    }
    local.publish(&ctx.shared.tx);
}

/// The per-packet sending loop: flanneld's `tun_to_udp`, one `read` and one `sendto` each.
pub(crate) fn run_per_packet(ctx: &Ctx, mut out: Outbound) {
    let mut buf = vec![0u8; ctx.mtu];
    let mut local = Local::default();
    while !ctx.shared.stopping() {
        let n = match sys::read(ctx.tun.fd(), &mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                local.publish(&ctx.shared.tx);
                if !sys::wait(ctx.tun.fd(), libc::POLLIN, ctx.stop.fd()) {
                    break;
                }
                out.routes.refresh();
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                if !ctx.read_error_is_transient(&e) {
                    break;
                }
                continue;
            }
        };
        local.inc(Counter::TunReads);
        let pkt = &mut buf[..n];
        let total = match ipv4::validate(pkt) {
            Ok(total) => total,
            Err(why) => {
                count_invalid(&mut local, why, n == ctx.mtu);
                continue;
            }
        };
        let pkt = &mut pkt[..total];
        let Some(peer) = out.route(pkt, ctx.tun.fd(), &mut local) else {
            continue;
        };
        let sa = sockaddr(peer);
        // SAFETY: `pkt` and `sa` outlive the call; the kernel only reads them.
        let rc = unsafe {
            libc::sendto(
                ctx.sock.fd(),
                pkt.as_ptr().cast(),
                pkt.len(),
                0,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        local.inc(Counter::UdpSends);
        if rc < 0 {
            local.inc(Counter::SendFailed);
            let e = io::Error::last_os_error();
            ctx.shared.note_error(format_args!("sending to {peer}"), &e);
        } else {
            local.inc(Counter::SentPackets);
            local.add(Counter::SentBytes, pkt.len() as u64);
        }
        // Publishing per packet would make every packet write shared memory; every 64 do.
        if local_due(&local) {
            local.publish(&ctx.shared.tx);
            out.routes.refresh();
        }
    }
    local.publish(&ctx.shared.tx);
}

/// Whether the per-packet loop publishes now (every 64 reads).
fn local_due(local: &Local) -> bool {
    local.get(Counter::TunReads) >= 64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_of(lens: &[(usize, &str)]) -> Queue {
        let mut q = Queue::new();
        for &(len, peer) in lens {
            q.datagrams.push(Datagram {
                peer: peer.parse().unwrap(),
                buf: 0,
                head: None,
                body: 0..len,
            });
        }
        q
    }

    fn shapes(s: &Sender) -> Vec<(usize, usize)> {
        s.groups.iter().map(|g| (g.count, g.segment)).collect()
    }

    const P1: &str = "172.31.0.1:8285";
    const P2: &str = "172.31.0.2:8285";

    #[test]
    fn equal_datagrams_to_one_peer_share_a_message_the_last_may_be_shorter() {
        let q = queue_of(&[
            (1400, P1),
            (1400, P1),
            (900, P1),
            (1400, P1), // after a short one: a new message
            (1400, P2), // another peer
            (52, P2),   // shorter: ends that peer's run
            (52, P2),
            (52, P2),
        ]);
        let mut s = Sender::default();
        s.build(&q, 0, q.datagrams.len(), true);
        assert_eq!(shapes(&s), [(3, 1400), (1, 1400), (2, 1400), (2, 52)]);
        assert_eq!(s.msgs.len(), 4);
        assert_eq!(s.msgs[0].msg_hdr.msg_iovlen, 3);
        assert!(!s.msgs[0].msg_hdr.msg_control.is_null());
        assert!(
            s.msgs[1].msg_hdr.msg_control.is_null(),
            "one datagram: no GSO"
        );
        s.build(&q, 0, q.datagrams.len(), false);
        assert!(shapes(&s).iter().all(|&(count, _)| count == 1));
        s.build(&q, 5, q.datagrams.len(), true);
        assert_eq!(shapes(&s), [(3, 52)]);
        s.build(&q, 1, 3, true);
        assert_eq!(shapes(&s), [(2, 1400)], "only up to `until`");
        // A peer whose route refused segmentation: one datagram per message, to it alone.
        s.no_gso_peers.insert(P1.parse().unwrap());
        s.build(&q, 0, q.datagrams.len(), true);
        assert_eq!(
            shapes(&s),
            [
                (1, 1400),
                (1, 1400),
                (1, 900),
                (1, 1400),
                (2, 1400),
                (2, 52)
            ]
        );
        s.routes_changed();
        s.build(&q, 0, q.datagrams.len(), true);
        assert_eq!(shapes(&s)[0], (3, 1400));
    }

    #[test]
    fn a_message_stays_within_the_gso_limits() {
        let many: Vec<(usize, &str)> = (0..100).map(|_| (100, P1)).collect();
        let q = queue_of(&many);
        let mut s = Sender::default();
        s.build(&q, 0, q.datagrams.len(), true);
        assert_eq!(shapes(&s), [(64, 100), (36, 100)]);
        let big: Vec<(usize, &str)> = (0..50).map(|_| (1472, P1)).collect();
        let q = queue_of(&big);
        s.build(&q, 0, q.datagrams.len(), true);
        assert_eq!(
            shapes(&s),
            [(44, 1472), (6, 1472)],
            "44 × 1472 ≤ 65507 < 45 × 1472"
        );
    }

    #[test]
    fn segments_gather_their_header_and_body() {
        let mut q = queue_of(&[]);
        q.arena.extend_from_slice(&[1; 40]);
        q.arena.extend_from_slice(&[2; 40]);
        for (i, head) in [0..40, 40..80].into_iter().enumerate() {
            q.datagrams.push(Datagram {
                peer: P1.parse().unwrap(),
                buf: 0,
                head: Some(head),
                body: 100 + i * 1000..1100 + i * 1000,
            });
        }
        let mut s = Sender::default();
        s.build(&q, 0, q.datagrams.len(), true);
        assert_eq!(shapes(&s), [(2, 1040)]);
        assert_eq!(s.msgs[0].msg_hdr.msg_iovlen, 4);
        let lens: Vec<usize> = s.iovs.iter().map(|v| v.iov_len).collect();
        assert_eq!(lens, [40, 1000, 40, 1000]);
        let c = &s.cmsgs[0].0;
        assert_eq!(u16::from_ne_bytes([c[16], c[17]]), 1040, "UDP_SEGMENT size");
    }
}
