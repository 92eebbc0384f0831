//! Segmentation of the super-packets a TUN device with offloads hands over (TSO, USO), into
//! the packets flanneld's wire format carries: one complete IPv4 packet per datagram, as the
//! kernel's own GSO would have cut them (`tcp_gso_segment`, `inet_gso_segment`).
//!
//! Each segment is a [`Piece`]: its headers, built in an arena, then a range of the
//! super-packet's payload, so the payload is never copied here (the datagram is gathered
//! from both by `sendmmsg`).

use std::ops::Range;

use crate::checksum::Sum;
use crate::ipv4;

pub const TCP_MIN_HEADER: usize = 20;
pub const UDP_HEADER: usize = 8;
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;
pub const TCP_URG: u8 = 0x20;
pub const TCP_CWR: u8 = 0x80;
/// offsetof(struct tcphdr, check), offsetof(struct udphdr, check).
pub const TCP_CHECK: usize = 16;
pub const UDP_CHECK: usize = 6;
/// More segments than this in one super-packet is not something a kernel sends (64 KiB at the
/// smallest MSS Linux allows is under 800): refused rather than walked.
const MAX_SEGMENTS: usize = 2048;

/// One segment: `head` (IP and transport headers) in the arena, then `payload` of the
/// super-packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub head: Range<usize>,
    pub payload: Range<usize>,
}

impl Piece {
    /// The segment's length: headers and payload.
    pub fn size(&self) -> usize {
        self.head.len() + self.payload.len()
    }
}

/// The super-packet is not what its virtio-net header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Length of the TCP header of `pkt` (an IPv4 packet whose header is `ihl` bytes), checked
/// against the packet.
pub fn tcp_header_len(pkt: &[u8], ihl: usize) -> Result<usize, Malformed> {
    let doff = pkt.get(ihl + 12).ok_or(Malformed)? >> 4;
    let len = usize::from(doff) * 4;
    if len < TCP_MIN_HEADER || ihl + len > pkt.len() {
        return Err(Malformed);
    }
    Ok(len)
}

/// Splits the TCP/IPv4 super-packet `pkt` (its total length exact, TTL already handled) into
/// segments of `mss` payload bytes, appended to `out`. Per segment: the IPv4 ID counts up from
/// the super-packet's, the total length and header checksum are its own, the sequence number
/// advances by the payload before it, FIN and PSH stay on the last segment only and CWR on the
/// first only, and the TCP checksum is computed in full (the receiving node may be flanneld's,
/// whose kernel checks it).
pub fn tcp(
    pkt: &[u8],
    mss: usize,
    arena: &mut Vec<u8>,
    out: &mut Vec<Piece>,
) -> Result<(), Malformed> {
    let ihl = ipv4::header_len(pkt);
    if ipv4::protocol(pkt) != ipv4::PROTO_TCP || ipv4::is_fragment(pkt) {
        return Err(Malformed);
    }
    let thl = tcp_header_len(pkt, ihl)?;
    let (src, dst) = (ipv4::src_bytes(pkt), ipv4::dst_bytes(pkt));
    let th = &pkt[ihl..];
    let seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
    let flags = th[13];
    cut(pkt, ihl + thl, mss, arena, out, |i, count, th, payload| {
        th[4..8].copy_from_slice(&seq.wrapping_add((i * mss) as u32).to_be_bytes());
        let mut f = flags;
        if i + 1 < count {
            f &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            f &= !TCP_CWR;
        }
        th[13] = f;
        th[TCP_CHECK..TCP_CHECK + 2].copy_from_slice(&[0, 0]);
        let check = Sum::pseudo_header(src, dst, ipv4::PROTO_TCP, (thl + payload.len()) as u16)
            .add_bytes(th)
            .add_bytes(payload)
            .checksum();
        th[TCP_CHECK..TCP_CHECK + 2].copy_from_slice(&check.to_be_bytes());
    })
}

/// Splits the UDP/IPv4 super-packet `pkt` (UDP segmentation offload: one UDP header for
/// datagrams of `size` payload bytes) into complete datagrams: per segment its IPv4 ID, total
/// length and header checksum, its UDP length and its UDP checksum.
pub fn udp(
    pkt: &[u8],
    size: usize,
    arena: &mut Vec<u8>,
    out: &mut Vec<Piece>,
) -> Result<(), Malformed> {
    let ihl = ipv4::header_len(pkt);
    if ipv4::protocol(pkt) != ipv4::PROTO_UDP
        || ipv4::is_fragment(pkt)
        || pkt.len() < ihl + UDP_HEADER
    {
        return Err(Malformed);
    }
    let (src, dst) = (ipv4::src_bytes(pkt), ipv4::dst_bytes(pkt));
    cut(
        pkt,
        ihl + UDP_HEADER,
        size,
        arena,
        out,
        |_, _, uh, payload| {
            let udp_len = (UDP_HEADER + payload.len()) as u16;
            uh[4..6].copy_from_slice(&udp_len.to_be_bytes());
            uh[UDP_CHECK..UDP_CHECK + 2].copy_from_slice(&[0, 0]);
            let check = Sum::pseudo_header(src, dst, ipv4::PROTO_UDP, udp_len)
                .add_bytes(uh)
                .add_bytes(payload)
                .checksum();
            // A computed 0 goes out as all ones: 0 means "no checksum" in UDP.
            let check = if check == 0 { 0xffff } else { check };
            uh[UDP_CHECK..UDP_CHECK + 2].copy_from_slice(&check.to_be_bytes());
        },
    )
}

/// Cuts the payload of `pkt` (after `hdr_len` bytes of IPv4 and transport headers) into
/// segments of `size` bytes. Each segment's headers are a copy in the arena with its own IPv4
/// total length, ID (counting up from the super-packet's) and header checksum; then
/// `finish(i, count, transport header, payload)` makes segment `i`'s transport header its own.
fn cut(
    pkt: &[u8],
    hdr_len: usize,
    size: usize,
    arena: &mut Vec<u8>,
    out: &mut Vec<Piece>,
    mut finish: impl FnMut(usize, usize, &mut [u8], &[u8]),
) -> Result<(), Malformed> {
    let ihl = ipv4::header_len(pkt);
    let count = segment_count(pkt.len() - hdr_len, size)?;
    let id = ipv4::id(pkt);
    for i in 0..count {
        let start = hdr_len + i * size;
        let end = (start + size).min(pkt.len());
        let head_at = arena.len();
        arena.extend_from_slice(&pkt[..hdr_len]);
        let head = &mut arena[head_at..];
        ipv4::set_total_len(head, (hdr_len + end - start) as u16);
        ipv4::set_id(head, id.wrapping_add(i as u16));
        ipv4::fill_header_checksum(head);
        finish(i, count, &mut head[ihl..hdr_len], &pkt[start..end]);
        out.push(Piece {
            head: head_at..arena.len(),
            payload: start..end,
        });
    }
    Ok(())
}

fn segment_count(payload: usize, size: usize) -> Result<usize, Malformed> {
    if size == 0 || payload == 0 {
        return Err(Malformed);
    }
    let count = payload.div_ceil(size);
    if count > MAX_SEGMENTS {
        return Err(Malformed);
    }
    Ok(count)
}

/// Completes a partial checksum (CHECKSUM_PARTIAL, `VIRTIO_NET_HDR_F_NEEDS_CSUM`) in place:
/// the sum from `start` to the end of `pkt`, the pseudo-header's sum already in the field at
/// `start + offset`, inverted into that field (all ones for a zero, as the kernel's
/// `skb_checksum_help` writes it, so a UDP datagram never claims "no checksum").
pub fn complete_partial(pkt: &mut [u8], start: usize, offset: usize) -> Result<(), Malformed> {
    let field = start.checked_add(offset).ok_or(Malformed)?;
    if start < ipv4::MIN_HEADER || field + 2 > pkt.len() {
        return Err(Malformed);
    }
    let check = Sum::default().add_bytes(&pkt[start..]).checksum();
    let check = if check == 0 { 0xffff } else { check };
    pkt[field..field + 2].copy_from_slice(&check.to_be_bytes());
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::checksum::{self, verifies};
    use crate::ipv4::tests::packet;

    pub(crate) const A: [u8; 4] = [10, 244, 1, 2];
    pub(crate) const B: [u8; 4] = [10, 244, 2, 3];

    /// A TCP segment: ports 40000 → 5201, `seq`, ACK 7, `flags`, TCP `options`, its checksum
    /// filled in (or left partial: the pseudo-header's sum, as TSO hands it over).
    pub(crate) fn tcp_packet(
        seq: u32,
        flags: u8,
        ip_options: &[u8],
        tcp_options: &[u8],
        payload: &[u8],
        partial: bool,
    ) -> Vec<u8> {
        let thl = TCP_MIN_HEADER + tcp_options.len();
        let mut tcp = vec![0u8; thl];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&7u32.to_be_bytes());
        tcp[12] = ((thl / 4) as u8) << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&502u16.to_be_bytes());
        tcp[20..].copy_from_slice(tcp_options);
        tcp.extend_from_slice(payload);
        transport_packet(ipv4::PROTO_TCP, tcp, TCP_CHECK, ip_options, partial)
    }

    /// `l4` (a TCP or UDP header and its payload) in an IPv4 packet from A to B, TTL 63, its
    /// checksum at `check_at` filled in (or left partial, as offloads hand it over).
    fn transport_packet(
        proto: u8,
        mut l4: Vec<u8>,
        check_at: usize,
        ip_options: &[u8],
        partial: bool,
    ) -> Vec<u8> {
        let pseudo = Sum::pseudo_header(A, B, proto, l4.len() as u16);
        let check = if partial {
            pseudo.fold()
        } else {
            pseudo.add_bytes(&l4).checksum()
        };
        l4[check_at..check_at + 2].copy_from_slice(&check.to_be_bytes());
        packet(proto, A, B, 63, ip_options, &l4)
    }

    pub(crate) fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 131 % 256) as u8).collect()
    }

    fn assemble(arena: &[u8], pkt: &[u8], p: &Piece) -> Vec<u8> {
        let mut v = arena[p.head.clone()].to_vec();
        v.extend_from_slice(&pkt[p.payload.clone()]);
        v
    }

    fn transport_ok(seg: &[u8]) -> bool {
        let ihl = ipv4::header_len(seg);
        let sum = Sum::pseudo_header(
            ipv4::src_bytes(seg),
            ipv4::dst_bytes(seg),
            ipv4::protocol(seg),
            (seg.len() - ihl) as u16,
        )
        .add_bytes(&seg[ihl..]);
        verifies(sum)
    }

    const TIMESTAMPS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3];

    #[test]
    fn tcp_segments_are_complete_packets() {
        let data = payload(4000);
        let sup = tcp_packet(
            1_000,
            TCP_ACK | TCP_PSH | TCP_CWR | TCP_FIN,
            &[],
            &TIMESTAMPS,
            &data,
            true,
        );
        let (mut arena, mut out) = (Vec::new(), Vec::new());
        tcp(&sup, 1400, &mut arena, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        let mut joined = Vec::new();
        for (i, piece) in out.iter().enumerate() {
            let seg = assemble(&arena, &sup, piece);
            let want_len = [1400, 1400, 1200][i];
            assert_eq!(ipv4::validate(&seg), Ok(20 + 32 + want_len));
            assert!(ipv4::header_checksum_ok(&seg), "segment {i} IP checksum");
            assert!(transport_ok(&seg), "segment {i} TCP checksum");
            assert_eq!(ipv4::id(&seg), 0x1234 + i as u16);
            assert_eq!(ipv4::ttl(&seg), 63);
            let th = &seg[20..];
            let seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
            assert_eq!(seq, 1_000 + 1400 * i as u32);
            let flags = th[13];
            assert_eq!(flags & TCP_ACK, TCP_ACK);
            assert_eq!(flags & TCP_CWR != 0, i == 0, "CWR on the first only");
            assert_eq!(flags & TCP_PSH != 0, i == 2, "PSH on the last only");
            assert_eq!(flags & TCP_FIN != 0, i == 2, "FIN on the last only");
            assert_eq!(&th[20..32], &TIMESTAMPS, "options copied");
            joined.extend_from_slice(&seg[52..]);
        }
        assert_eq!(joined, data);
    }

    #[test]
    fn tcp_with_ip_options_and_a_wrapping_sequence() {
        let data = payload(3001);
        let sup = tcp_packet(u32::MAX - 100, TCP_ACK, &[1, 1, 1, 0], &[], &data, true);
        let (mut arena, mut out) = (Vec::new(), Vec::new());
        tcp(&sup, 1000, &mut arena, &mut out).unwrap();
        assert_eq!(out.len(), 4, "three full segments and a one-byte tail");
        for (i, piece) in out.iter().enumerate() {
            let seg = assemble(&arena, &sup, piece);
            assert_eq!(ipv4::header_len(&seg), 24);
            assert_eq!(&seg[20..24], &[1, 1, 1, 0], "IP options on every segment");
            assert!(ipv4::header_checksum_ok(&seg));
            assert!(transport_ok(&seg), "segment {i}");
            let th = &seg[24..];
            let seq = u32::from_be_bytes([th[4], th[5], th[6], th[7]]);
            assert_eq!(seq, (u32::MAX - 100).wrapping_add(1000 * i as u32));
        }
        assert_eq!(out[3].payload.len(), 1);
    }

    #[test]
    fn one_segment_super_packet_and_exact_multiples() {
        let sup = tcp_packet(5, TCP_ACK | TCP_PSH, &[], &[], &payload(800), true);
        let (mut arena, mut out) = (Vec::new(), Vec::new());
        tcp(&sup, 1400, &mut arena, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let seg = assemble(&arena, &sup, &out[0]);
        assert_eq!(seg[33] & TCP_PSH, TCP_PSH);
        assert!(transport_ok(&seg));
        // Without the checksum field, the single segment is the super-packet.
        assert_eq!(seg[..36], sup[..36]);

        let sup = tcp_packet(5, TCP_ACK, &[], &[], &payload(2800), true);
        out.clear();
        tcp(&sup, 1400, &mut arena, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|p| p.payload.len() == 1400));
    }

    #[test]
    fn tcp_refuses_what_is_not_a_tcp_super_packet() {
        let (mut arena, mut out) = (Vec::new(), Vec::new());
        let sup = tcp_packet(5, TCP_ACK, &[], &[], &payload(100), true);
        assert_eq!(tcp(&sup, 0, &mut arena, &mut out), Err(Malformed));
        let empty = tcp_packet(5, TCP_ACK, &[], &[], &[], true);
        assert_eq!(tcp(&empty, 1400, &mut arena, &mut out), Err(Malformed));
        let mut bad_doff = sup.clone();
        bad_doff[32] = 0x40; // a 16-byte TCP header
        assert_eq!(tcp(&bad_doff, 1400, &mut arena, &mut out), Err(Malformed));
        bad_doff[32] = 0xf0; // 60 bytes, past the end of a 40-byte packet
        bad_doff.truncate(40);
        ipv4::set_total_len(&mut bad_doff, 40);
        assert_eq!(tcp(&bad_doff, 1400, &mut arena, &mut out), Err(Malformed));
        let udp_pkt = packet(ipv4::PROTO_UDP, A, B, 64, &[], &payload(100));
        assert_eq!(tcp(&udp_pkt, 10, &mut arena, &mut out), Err(Malformed));
        assert!(out.is_empty());
        assert_eq!(
            tcp(&sup, 1, &mut arena, &mut out),
            Ok(()),
            "100 segments is fine"
        );
        assert_eq!(out.len(), 100);
    }

    fn udp_packet(data: &[u8], partial: bool) -> Vec<u8> {
        let mut udp = vec![0u8; UDP_HEADER];
        udp[0..2].copy_from_slice(&4433u16.to_be_bytes());
        udp[2..4].copy_from_slice(&443u16.to_be_bytes());
        udp[4..6].copy_from_slice(&((UDP_HEADER + data.len()) as u16).to_be_bytes());
        udp.extend_from_slice(data);
        transport_packet(ipv4::PROTO_UDP, udp, UDP_CHECK, &[], partial)
    }

    #[test]
    fn udp_segments_are_datagrams_of_their_own() {
        let data = payload(2500);
        let sup = udp_packet(&data, true);
        let (mut arena, mut out) = (Vec::new(), Vec::new());
        udp(&sup, 1200, &mut arena, &mut out).unwrap();
        assert_eq!(out.len(), 3);
        let mut joined = Vec::new();
        for (i, piece) in out.iter().enumerate() {
            let seg = assemble(&arena, &sup, piece);
            let len = [1200, 1200, 100][i];
            assert_eq!(ipv4::validate(&seg), Ok(28 + len));
            assert!(ipv4::header_checksum_ok(&seg));
            assert_eq!(u16::from_be_bytes([seg[24], seg[25]]) as usize, 8 + len);
            assert_ne!(&seg[26..28], &[0, 0]);
            assert!(transport_ok(&seg), "segment {i}");
            assert_eq!(ipv4::id(&seg), 0x1234 + i as u16);
            joined.extend_from_slice(&seg[28..]);
        }
        assert_eq!(joined, data);
    }

    #[test]
    fn partial_checksums_are_completed() {
        let data = payload(333);
        let mut p = tcp_packet(9, TCP_ACK | TCP_PSH, &[], &[], &data, true);
        complete_partial(&mut p, 20, TCP_CHECK).unwrap();
        assert_eq!(p, tcp_packet(9, TCP_ACK | TCP_PSH, &[], &[], &data, false));
        let mut u = udp_packet(&data, true);
        complete_partial(&mut u, 20, UDP_CHECK).unwrap();
        assert!(transport_ok(&u));
        assert_eq!(u, udp_packet(&data, false));
        assert_eq!(complete_partial(&mut u, 20, 400), Err(Malformed));
        assert_eq!(complete_partial(&mut u, 4, 6), Err(Malformed));
        assert_eq!(checksum::checksum(&[]), 0xffff);
    }

    #[test]
    fn a_udp_checksum_of_zero_is_sent_as_all_ones() {
        // Find a payload whose UDP checksum computes to 0: adjust two bytes until it does.
        let mut data = payload(64);
        for v in 0..=u16::MAX {
            data[0..2].copy_from_slice(&v.to_be_bytes());
            let mut u = udp_packet(&data, true);
            complete_partial(&mut u, 20, UDP_CHECK).unwrap();
            if u[26..28] == [0xff, 0xff] {
                assert!(transport_ok(&u));
                return;
            }
        }
        panic!("no payload gave a zero checksum");
    }
}
