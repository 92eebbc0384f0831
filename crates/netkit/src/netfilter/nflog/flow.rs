//! The flow of a logged packet: addresses, protocol and ports (or ICMP type and code) read
//! from the first bytes of its IPv4 or IPv6 header, as far as the copy reaches.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol numbers the flow reads further than the IP header.
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
}

/// What the transport header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    /// TCP, UDP, SCTP.
    Ports { src: u16, dst: u16 },
    /// ICMP, ICMPv6.
    Icmp { kind: u8, code: u8 },
    /// Another protocol, a fragment after the first, or a header the copy cut short.
    Unknown,
}

/// One packet's flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Flow {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The IP protocol number (for IPv6, the header after any extension headers).
    pub protocol: u8,
    pub transport: Transport,
}

impl Flow {
    /// The flow of a packet starting at its IP header; `None` when it is neither a whole
    /// IPv4 nor a whole IPv6 header.
    pub fn parse(packet: &[u8]) -> Option<Flow> {
        match packet.first()? >> 4 {
            4 => ipv4(packet),
            6 => ipv6(packet),
            _ => None,
        }
    }

    /// The destination port, for TCP, UDP and SCTP.
    pub fn dst_port(&self) -> Option<u16> {
        match self.transport {
            Transport::Ports { dst, .. } => Some(dst),
            _ => None,
        }
    }

    /// The protocol's usual name (`TCP`, `ICMPv6`), or its number.
    pub fn protocol_name(&self) -> String {
        match self.protocol {
            ip_proto::TCP => "TCP".into(),
            ip_proto::UDP => "UDP".into(),
            ip_proto::SCTP => "SCTP".into(),
            ip_proto::ICMP => "ICMP".into(),
            ip_proto::ICMPV6 => "ICMPv6".into(),
            n => format!("protocol {n}"),
        }
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn ipv4(b: &[u8]) -> Option<Flow> {
    let header_len = usize::from(b.first()? & 0x0f) * 4;
    if header_len < 20 || b.len() < header_len {
        return None;
    }
    let protocol = b[9];
    let src = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
    let dst = Ipv4Addr::new(b[16], b[17], b[18], b[19]);
    // Only the first fragment carries the transport header.
    let first_fragment = be16(b, 6)? & 0x1fff == 0;
    let transport = if first_fragment {
        transport(protocol, &b[header_len..])
    } else {
        Transport::Unknown
    };
    Some(Flow {
        src: src.into(),
        dst: dst.into(),
        protocol,
        transport,
    })
}

/// Extension headers walked past to reach the transport header, at most.
const MAX_EXTENSION_HEADERS: usize = 8;

fn ipv6(b: &[u8]) -> Option<Flow> {
    if b.len() < 40 {
        return None;
    }
    let addr = |at: usize| -> Option<IpAddr> {
        let octets: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
        Some(Ipv6Addr::from(octets).into())
    };
    let (src, dst) = (addr(8)?, addr(24)?);
    let mut next = b[6];
    let mut rest = &b[40..];
    let mut transport_reached = false;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let len = match next {
            // Hop-by-hop, routing, destination options: 8-byte units after the first 8.
            0 | 43 | 60 => rest.get(1).map(|l| (usize::from(*l) + 1) * 8),
            // Fragment: 8 bytes; a fragment after the first has no transport header.
            44 => match be16(rest, 2) {
                Some(offset) if offset & 0xfff8 != 0 => {
                    next = rest[0];
                    break;
                }
                Some(_) => Some(8),
                None => None,
            },
            // Authentication header: 4-byte units, plus 2.
            51 => rest.get(1).map(|l| (usize::from(*l) + 2) * 4),
            _ => {
                transport_reached = true;
                break;
            }
        };
        let Some(len) = len.filter(|l| *l <= rest.len()) else {
            break;
        };
        next = rest[0];
        rest = &rest[len..];
    }
    Some(Flow {
        src,
        dst,
        protocol: next,
        transport: if transport_reached {
            transport(next, rest)
        } else {
            Transport::Unknown
        },
    })
}

fn transport(protocol: u8, l4: &[u8]) -> Transport {
    match protocol {
        ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP => match (be16(l4, 0), be16(l4, 2)) {
            (Some(src), Some(dst)) => Transport::Ports { src, dst },
            _ => Transport::Unknown,
        },
        ip_proto::ICMP | ip_proto::ICMPV6 => match l4 {
            [kind, code, ..] => Transport::Icmp {
                kind: *kind,
                code: *code,
            },
            _ => Transport::Unknown,
        },
        _ => Transport::Unknown,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 header (20 bytes) from `src` to `dst` followed by `l4`.
    pub(crate) fn ipv4_packet(src: [u8; 4], dst: [u8; 4], protocol: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        p.extend(src);
        p.extend(dst);
        p.extend(l4);
        p
    }

    fn ipv6_packet(next: u8, rest: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, next, 64];
        p.extend("fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        p.extend("fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        p.extend(rest);
        p
    }

    #[test]
    fn ipv4_tcp_ports_and_icmp() {
        let tcp = ipv4_packet([10, 0, 0, 1], [10, 0, 0, 2], 6, &[0x9c, 0x40, 0x15, 0x38]);
        let f = Flow::parse(&tcp).unwrap();
        assert_eq!(f.src, "10.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(f.dst_port(), Some(5432));
        assert_eq!(f.protocol_name(), "TCP");
        let ping = ipv4_packet([10, 0, 0, 1], [10, 0, 0, 2], 1, &[8, 0]);
        assert_eq!(
            Flow::parse(&ping).unwrap().transport,
            Transport::Icmp { kind: 8, code: 0 }
        );
    }

    #[test]
    fn ipv4_options_later_fragments_and_short_copies() {
        // A 24-byte header (one option word): the ports come after it.
        let mut p = ipv4_packet([10, 0, 0, 1], [10, 0, 0, 2], 17, &[1, 1, 1, 1]);
        p[0] = 0x46;
        p.extend([0, 53, 0, 54]);
        assert_eq!(
            Flow::parse(&p).unwrap().transport,
            Transport::Ports { src: 53, dst: 54 }
        );
        let mut frag = ipv4_packet([10, 0, 0, 1], [10, 0, 0, 2], 6, &[0, 80, 0, 81]);
        frag[7] = 0x10;
        assert_eq!(Flow::parse(&frag).unwrap().transport, Transport::Unknown);
        let short = ipv4_packet([10, 0, 0, 1], [10, 0, 0, 2], 6, &[0, 80]);
        assert_eq!(Flow::parse(&short).unwrap().transport, Transport::Unknown);
        assert_eq!(Flow::parse(&short[..19]), None);
        assert_eq!(Flow::parse(&[]), None);
        assert_eq!(Flow::parse(&[0x50; 40]), None);
    }

    #[test]
    fn ipv6_through_extension_headers() {
        let udp = ipv6_packet(17, &[0, 53, 0x14, 0xe9]);
        let f = Flow::parse(&udp).unwrap();
        assert_eq!(f.dst, "fd00::2".parse::<IpAddr>().unwrap());
        assert_eq!(f.dst_port(), Some(5353));
        // Hop-by-hop (8 bytes), then a first fragment, then SCTP.
        let mut rest = vec![44, 0, 0, 0, 0, 0, 0, 0];
        rest.extend([132, 0, 0, 1, 0, 0, 0, 0]);
        rest.extend([0, 1, 0, 2]);
        let f = Flow::parse(&ipv6_packet(0, &rest)).unwrap();
        assert_eq!((f.protocol, f.dst_port()), (132, Some(2)));
        // A later fragment: the protocol is unknown.
        let f = Flow::parse(&ipv6_packet(44, &[6, 0, 0, 8, 0, 0, 0, 0])).unwrap();
        assert_eq!((f.protocol, f.transport), (6, Transport::Unknown));
        let ping = Flow::parse(&ipv6_packet(58, &[128, 0])).unwrap();
        assert_eq!(ping.protocol_name(), "ICMPv6");
        assert_eq!(ping.transport, Transport::Icmp { kind: 128, code: 0 });
        assert_eq!(Flow::parse(&ipv6_packet(6, &[])[..39]), None);
    }
}
