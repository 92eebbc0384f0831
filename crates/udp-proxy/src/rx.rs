//! The receiving thread: datagrams from the peers, checked, TTL decremented, written to TUN.
//!
//! Fast path: one `recvmmsg` takes a batch of messages; with `UDP_GRO` each message may hold
//! many equal-sized datagrams of one peer (their size in a control message). With virtio-net
//! headers on the TUN device, the batch's TCP segments are coalesced into super-packets
//! ([`crate::coalesce`]) and each TUN write carries one of them. Per-packet path: one `recv`
//! and one `write` per datagram, as flanneld's `udp_to_tun`.

use std::io::{self, IoSlice};

use crate::coalesce::{Coalescer, PacketRef};
use crate::forward::Inbound;
use crate::shared::Ctx;
use crate::stats::{Counter, Local};
use crate::sys;
use crate::vnet;

/// Messages per `recvmmsg` when each may hold a coalesced 64 KiB (UDP GRO).
const GRO_MESSAGES: usize = 8;
const GRO_BUFFER_LEN: usize = 65536;
/// Messages per `recvmmsg` of single datagrams.
const MESSAGES: usize = 64;
/// Control message room: one `UDP_GRO` int (`CMSG_SPACE(4)` = 24) and slack.
const CMSG_LEN: usize = 64;

#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; CMSG_LEN]);

/// The receive buffers and the arrays `recvmmsg` fills, built once (the pointers stay valid:
/// the vectors are never resized and the boxes never move).
struct Receiver {
    bufs: Vec<Box<[u8]>>,
    msgs: Vec<libc::mmsghdr>,
    /// What the messages point to (owned here, never read directly).
    _cmsgs: Vec<CmsgBuf>,
    _iovs: Vec<libc::iovec>,
}

impl Receiver {
    fn new(count: usize, len: usize) -> Receiver {
        let mut bufs: Vec<Box<[u8]>> = (0..count)
            .map(|_| vec![0u8; len].into_boxed_slice())
            .collect();
        let mut cmsgs = vec![CmsgBuf([0; CMSG_LEN]); count];
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let msgs = (0..count)
            .map(|i| {
                // SAFETY: an all-zero mmsghdr is a valid empty message.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = &mut iovs[i];
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
                m
            })
            .collect();
        Receiver {
            bufs,
            msgs,
            _cmsgs: cmsgs,
            _iovs: iovs,
        }
    }

    /// `recvmmsg` without waiting (or one `recvmsg` without it): how many messages came.
    fn receive(&mut self, fd: libc::c_int, mmsg: bool) -> io::Result<usize> {
        for m in &mut self.msgs {
            m.msg_hdr.msg_controllen = CMSG_LEN as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        if mmsg {
            // SAFETY: every message points into buffers this Receiver owns.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    self.msgs.as_mut_ptr(),
                    self.msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(n as usize);
        }
        // SAFETY: as above, for the first message.
        let n = unsafe { libc::recvmsg(fd, &mut self.msgs[0].msg_hdr, libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.msgs[0].msg_len = n as libc::c_uint;
        Ok(1)
    }

    /// The segment size of message `i` when the kernel coalesced it (`UDP_GRO`).
    fn gro_size(&self, i: usize) -> Option<usize> {
        let hdr = &self.msgs[i].msg_hdr;
        // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG_* walk stays
        // inside it and reads the int it finds unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                    let size = libc::CMSG_DATA(c).cast::<libc::c_int>().read_unaligned();
                    return usize::try_from(size).ok().filter(|&s| s > 0);
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
        None
    }
}

/// The fast receiving loop (see the module documentation).
pub(crate) fn run_fast(ctx: &Ctx, inbound: Inbound) {
    let gro = ctx.shared.datapath.udp_gro;
    let (count, len) = if gro {
        (GRO_MESSAGES, GRO_BUFFER_LEN)
    } else {
        // Room past the MTU, to tell a longer datagram (cut) from one of exactly the MTU.
        (MESSAGES, ctx.mtu + 1)
    };
    let mut rx = Receiver::new(count, len);
    let mut coalescer = Coalescer::default();
    let vnet_hdr = ctx.tun.vnet_hdr;
    let mut local = Local::default();
    while !ctx.shared.stopping() {
        let n = match rx.receive(ctx.sock.fd(), ctx.shared.datapath.mmsg) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                local.publish(&ctx.shared.rx);
                if !sys::wait(ctx.sock.fd(), libc::POLLIN, ctx.stop.fd()) {
                    break;
                }
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                ctx.shared.note_error(format_args!("receiving"), &e);
                continue;
            }
        };
        local.inc(Counter::UdpRecvs);
        for i in 0..n {
            let got = rx.msgs[i].msg_len as usize;
            let truncated = rx.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            let size = rx.gro_size(i);
            let buf = &mut rx.bufs[i][..got];
            accept_message(
                buf,
                size,
                truncated,
                &inbound,
                &mut local,
                |start, pkt, local| {
                    if vnet_hdr {
                        let at = PacketRef {
                            buf: i as u32,
                            start: start as u32,
                            len: pkt.len() as u32,
                        };
                        coalescer.push(at, pkt);
                    } else {
                        write_plain(ctx, pkt, local);
                    }
                },
            );
        }
        if vnet_hdr {
            local.add(Counter::SegmentsCoalesced, coalescer.take_merged());
            coalescer.drain(&rx.bufs, |slices, count| {
                write_vnet(ctx, slices, count, &mut local)
            });
        }
        local.publish(&ctx.shared.rx);
    }
    local.publish(&ctx.shared.rx);
}

/// One received message through `inbound`'s checks: its datagrams (`gro_size` bytes each, the
/// last shorter, when UDP GRO joined several; else the whole message) each accepted or
/// dropped, and every accepted packet handed to `deliver` with its offset in `buf`.
/// `truncated`: the message ran past the buffer, so its last datagram was longer.
pub(crate) fn accept_message(
    buf: &mut [u8],
    gro_size: Option<usize>,
    truncated: bool,
    inbound: &Inbound,
    local: &mut Local,
    mut deliver: impl FnMut(usize, &[u8], &mut Local),
) {
    let got = buf.len();
    let size = gro_size.filter(|s| *s > 0).unwrap_or(got.max(1));
    let mut start = 0;
    while start < got {
        let end = (start + size).min(got);
        let wire = if truncated && end == got {
            usize::MAX
        } else {
            end - start
        };
        if let Some(pkt) = inbound.accept(&mut buf[start..end], wire, local) {
            deliver(start, pkt, local);
        }
        start = end;
    }
}

fn write_plain(ctx: &Ctx, pkt: &[u8], local: &mut Local) {
    local.inc(Counter::TunWrites);
    match sys::write(ctx.tun.fd(), pkt) {
        Ok(_) => {
            local.inc(Counter::ReceivedPackets);
            local.add(Counter::ReceivedBytes, pkt.len() as u64);
        }
        Err(e) => {
            local.inc(Counter::TunWriteFailed);
            ctx.tun_write_failed(&e);
        }
    }
}

fn write_vnet(ctx: &Ctx, slices: &[IoSlice<'_>], count: u32, local: &mut Local) -> bool {
    local.inc(Counter::TunWrites);
    match sys::writev(ctx.tun.fd(), slices) {
        Ok(n) => {
            local.add(Counter::ReceivedPackets, u64::from(count));
            // The bytes of the packets as they came, headers of every segment included.
            let headers = slices.get(1).map_or(0, |h| h.len());
            let merged_headers = headers * (count as usize - 1);
            local.add(
                Counter::ReceivedBytes,
                (n.saturating_sub(vnet::LEN) + merged_headers) as u64,
            );
            true
        }
        Err(e) => {
            local.add(Counter::TunWriteFailed, u64::from(count));
            ctx.tun_write_failed(&e);
            false
        }
    }
}

/// The per-packet receiving loop: flanneld's `udp_to_tun`, one `recv` (at most the MTU: a
/// longer datagram is cut) and one `write` per datagram.
pub(crate) fn run_per_packet(ctx: &Ctx, inbound: Inbound) {
    let mut buf = vec![0u8; ctx.mtu];
    let mut local = Local::default();
    while !ctx.shared.stopping() {
        // SAFETY: the kernel writes at most `buf.len()` bytes; MSG_TRUNC makes it return the
        // datagram's real length.
        let n = unsafe {
            libc::recv(
                ctx.sock.fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => {
                    local.publish(&ctx.shared.rx);
                    if !sys::wait(ctx.sock.fd(), libc::POLLIN, ctx.stop.fd()) {
                        break;
                    }
                }
                Some(libc::EINTR) => {}
                _ => ctx.shared.note_error(format_args!("receiving"), &e),
            }
            continue;
        }
        local.inc(Counter::UdpRecvs);
        let wire = n as usize;
        let got = wire.min(buf.len());
        if let Some(pkt) = inbound.accept(&mut buf[..got], wire, &mut local) {
            write_plain(ctx, pkt, &mut local);
        }
        if local.get(Counter::UdpRecvs) >= 64 {
            local.publish(&ctx.shared.rx);
        }
    }
    local.publish(&ctx.shared.rx);
}
