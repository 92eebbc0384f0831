//! The IPv4 header fields the engine reads and rewrites, on raw packet bytes.

use std::net::Ipv4Addr;

use crate::checksum::{self, Sum};

pub const MIN_HEADER: usize = 20;
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
/// Don't Fragment, in the flags/fragment-offset word.
pub const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// Why bytes are not an IPv4 packet the engine forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Not version 4 (IPv6 and anything else is ignored, as flanneld's proxy only routes IPv4).
    NotIpv4,
    /// Shorter than its header, a header length below 20 bytes, or a total length outside
    /// the header and the bytes at hand.
    Malformed,
    /// The total length runs past the bytes at hand (the datagram was cut at the MTU).
    Truncated,
}

/// Checks the version and lengths of `pkt`; returns the packet's total length (bytes after it
/// are padding, as the kernel trims them).
pub fn validate(pkt: &[u8]) -> Result<usize, Invalid> {
    let Some(&first) = pkt.first() else {
        return Err(Invalid::Malformed);
    };
    if first >> 4 != 4 {
        return Err(Invalid::NotIpv4);
    }
    if pkt.len() < MIN_HEADER {
        return Err(Invalid::Malformed);
    }
    let ihl = header_len(pkt);
    let total = total_len(pkt);
    if ihl < MIN_HEADER || ihl > pkt.len() || total < ihl {
        return Err(Invalid::Malformed);
    }
    if total > pkt.len() {
        return Err(Invalid::Truncated);
    }
    Ok(total)
}

/// Header length in bytes (IHL × 4). The caller has checked `pkt` holds 20 bytes.
#[inline]
pub fn header_len(pkt: &[u8]) -> usize {
    usize::from(pkt[0] & 0x0f) * 4
}

#[inline]
pub fn total_len(pkt: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([pkt[2], pkt[3]]))
}

#[inline]
pub fn set_total_len(pkt: &mut [u8], len: u16) {
    pkt[2..4].copy_from_slice(&len.to_be_bytes());
}

#[inline]
pub fn id(pkt: &[u8]) -> u16 {
    u16::from_be_bytes([pkt[4], pkt[5]])
}

#[inline]
pub fn set_id(pkt: &mut [u8], id: u16) {
    pkt[4..6].copy_from_slice(&id.to_be_bytes());
}

#[inline]
pub fn flags_fragment(pkt: &[u8]) -> u16 {
    u16::from_be_bytes([pkt[6], pkt[7]])
}

#[inline]
pub fn dont_fragment(pkt: &[u8]) -> bool {
    flags_fragment(pkt) & DF != 0
}

/// More-fragments set or a non-zero offset: a piece of a fragmented datagram.
#[inline]
pub fn is_fragment(pkt: &[u8]) -> bool {
    flags_fragment(pkt) & (MF | OFFSET_MASK) != 0
}

/// A fragment other than the first (its transport header is elsewhere).
#[inline]
pub fn is_later_fragment(pkt: &[u8]) -> bool {
    flags_fragment(pkt) & OFFSET_MASK != 0
}

#[cfg(test)]
pub fn ttl(pkt: &[u8]) -> u8 {
    pkt[8]
}

#[inline]
pub fn protocol(pkt: &[u8]) -> u8 {
    pkt[9]
}

#[inline]
pub fn src(pkt: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15])
}

#[inline]
pub fn dst(pkt: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19])
}

#[inline]
pub fn src_bytes(pkt: &[u8]) -> [u8; 4] {
    [pkt[12], pkt[13], pkt[14], pkt[15]]
}

#[inline]
pub fn dst_bytes(pkt: &[u8]) -> [u8; 4] {
    [pkt[16], pkt[17], pkt[18], pkt[19]]
}

/// Decrements the TTL as flanneld's proxy does on each side, patching the header checksum
/// incrementally (RFC 1624). Returns false, leaving the packet as it was, when the TTL runs
/// out: the packet is to be dropped. (flanneld drops at 1 → 0; a TTL of 0, which no sender
/// emits, wraps to 255 there and is dropped here.)
#[inline]
pub fn decrement_ttl(pkt: &mut [u8]) -> bool {
    let ttl = pkt[8];
    if ttl <= 1 {
        return false;
    }
    let old = u16::from_be_bytes([ttl, pkt[9]]);
    let new = u16::from_be_bytes([ttl - 1, pkt[9]]);
    let check = u16::from_be_bytes([pkt[10], pkt[11]]);
    pkt[8] = ttl - 1;
    pkt[10..12].copy_from_slice(&checksum::update(check, old, new).to_be_bytes());
    true
}

/// Recomputes the header checksum of `pkt`'s header in place.
#[inline]
pub fn fill_header_checksum(pkt: &mut [u8]) {
    let ihl = header_len(pkt);
    pkt[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&pkt[..ihl]);
    pkt[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Whether the header checksum of `pkt` is right.
#[inline]
pub fn header_checksum_ok(pkt: &[u8]) -> bool {
    checksum::verifies(Sum::default().add_bytes(&pkt[..header_len(pkt)]))
}

/// An address a packet can come from and an error be sent back to: not 0/8, loopback,
/// multicast, the limited broadcast or class E.
pub fn is_unicast_source(ip: Ipv4Addr) -> bool {
    let first = ip.octets()[0];
    first != 0 && first != 127 && first < 224
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 header (with `options`) and payload, lengths and checksum filled in.
    pub(crate) fn packet(
        proto: u8,
        src: [u8; 4],
        dst: [u8; 4],
        ttl: u8,
        options: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let ihl = MIN_HEADER + options.len();
        let mut p = vec![0u8; ihl];
        p[0] = 0x40 | (ihl / 4) as u8;
        set_total_len(&mut p, (ihl + payload.len()) as u16);
        set_id(&mut p, 0x1234);
        p[6] = 0x40;
        p[8] = ttl;
        p[9] = proto;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..ihl].copy_from_slice(options);
        fill_header_checksum(&mut p);
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn validate_lengths() {
        let p = packet(17, [10, 0, 0, 1], [10, 0, 0, 2], 64, &[], &[1, 2, 3]);
        assert_eq!(validate(&p), Ok(23));
        let mut padded = p.clone();
        padded.extend_from_slice(&[0; 5]);
        assert_eq!(validate(&padded), Ok(23));
        assert_eq!(validate(&p[..22]), Err(Invalid::Truncated));
        assert_eq!(validate(&p[..19]), Err(Invalid::Malformed));
        assert_eq!(validate(&[]), Err(Invalid::Malformed));
        assert_eq!(validate(&[0x60; 40]), Err(Invalid::NotIpv4));
        let mut short_ihl = p.clone();
        short_ihl[0] = 0x44;
        assert_eq!(validate(&short_ihl), Err(Invalid::Malformed));
        let mut long_ihl = p.clone();
        long_ihl[0] = 0x4f;
        assert_eq!(validate(&long_ihl), Err(Invalid::Malformed));
        let mut small_total = p.clone();
        set_total_len(&mut small_total, 12);
        assert_eq!(validate(&small_total), Err(Invalid::Malformed));
    }

    #[test]
    fn ttl_decrement_keeps_the_checksum_right_and_drops_at_one() {
        let mut p = packet(6, [10, 244, 1, 2], [10, 244, 2, 3], 63, &[], &[0; 20]);
        assert!(decrement_ttl(&mut p));
        assert_eq!(ttl(&p), 62);
        assert!(header_checksum_ok(&p));
        let mut copy = p.clone();
        fill_header_checksum(&mut copy);
        assert_eq!(copy, p, "incremental and full checksums agree");
        for t in [1u8, 0] {
            let mut last = packet(6, [10, 244, 1, 2], [10, 244, 2, 3], t, &[], &[]);
            let before = last.clone();
            assert!(!decrement_ttl(&mut last));
            assert_eq!(last, before);
        }
        let mut two = packet(1, [10, 244, 1, 2], [10, 244, 2, 3], 2, &[], &[]);
        assert!(decrement_ttl(&mut two));
        assert_eq!(ttl(&two), 1);
        assert!(header_checksum_ok(&two));
    }

    #[test]
    fn options_are_part_of_the_header() {
        let p = packet(6, [1, 2, 3, 4], [5, 6, 7, 8], 9, &[1, 1, 1, 0], &[7; 3]);
        assert_eq!(header_len(&p), 24);
        assert!(header_checksum_ok(&p));
        assert_eq!(validate(&p), Ok(27));
    }

    #[test]
    fn fragments_and_sources() {
        let mut p = packet(17, [10, 0, 0, 1], [10, 0, 0, 2], 64, &[], &[0; 8]);
        assert!(!is_fragment(&p) && dont_fragment(&p));
        p[6] = 0x20; // MF, offset 0: the first fragment
        assert!(is_fragment(&p) && !is_later_fragment(&p));
        p[6] = 0x00;
        p[7] = 0x10;
        assert!(is_fragment(&p) && is_later_fragment(&p));
        assert!(is_unicast_source(Ipv4Addr::new(10, 244, 1, 2)));
        for bad in [
            "0.0.0.0",
            "127.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
        ] {
            assert!(!is_unicast_source(bad.parse().unwrap()), "{bad}");
        }
    }
}
