//! The virtio-net header (`struct virtio_net_hdr`, <linux/virtio_net.h>) that precedes every
//! packet read from or written to a TUN device opened with `IFF_VNET_HDR`. Its fields are in
//! the machine's byte order (the legacy virtio layout, which TUN uses unless told otherwise).

/// `sizeof(struct virtio_net_hdr)`, the TUN default (TUNSETVNETHDRSZ).
pub const LEN: usize = 10;

/// The checksum from `csum_start` on is still to be computed (CHECKSUM_PARTIAL); the field at
/// `csum_start + csum_offset` holds the pseudo-header sum.
pub const F_NEEDS_CSUM: u8 = 1;

pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP_L4: u8 = 5;
/// The TCP super-packet carries CWR (ECN), to be kept on its first segment only.
pub const GSO_ECN: u8 = 0x80;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    /// Length of the headers before the payload (a hint; the engine computes its own).
    pub hdr_len: u16,
    /// Payload bytes per segment of a super-packet.
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    /// The header at the start of `buf` (`None` if shorter).
    pub fn parse(buf: &[u8]) -> Option<VnetHdr> {
        let b = buf.get(..LEN)?;
        let word = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: word(2),
            gso_size: word(4),
            csum_start: word(6),
            csum_offset: word(8),
        })
    }

    pub fn to_bytes(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        b
    }

    /// The segmentation kind without the ECN bit.
    pub fn gso_kind(self) -> u8 {
        self.gso_type & !GSO_ECN
    }

    /// A TCP/IPv4 super-packet as the engine writes it after coalescing: `hdr_len` bytes of IP
    /// and TCP headers, `gso_size` payload bytes per segment, the TCP checksum left partial.
    pub fn tcp4_super_packet(ip_hdr_len: u16, hdr_len: u16, gso_size: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len,
            gso_size,
            csum_start: ip_hdr_len,
            // offsetof(struct tcphdr, check)
            csum_offset: 16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_native_order() {
        let h = VnetHdr::tcp4_super_packet(20, 52, 1420);
        let b = h.to_bytes();
        assert_eq!(b[0], F_NEEDS_CSUM);
        assert_eq!(b[1], GSO_TCPV4);
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 1420);
        assert_eq!(VnetHdr::parse(&b), Some(h));
        assert_eq!(VnetHdr::parse(&b[..9]), None);
        let ecn = VnetHdr {
            gso_type: GSO_TCPV4 | GSO_ECN,
            ..h
        };
        assert_eq!(ecn.gso_kind(), GSO_TCPV4);
    }
}
