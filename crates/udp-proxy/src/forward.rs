//! What happens to one pod packet, whichever data path carries it: the same checks, TTL
//! handling and drops as flanneld's proxy, on both the batched and the per-packet path.

use std::io::IoSlice;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use ipnetwork::Ipv4Network;

use crate::icmp::{self, RateLimit};
use crate::ipv4::{self, Invalid};
use crate::routes::RouteView;
use crate::stats::{Counter, Local};
use crate::sys;
use crate::vnet::{self, VnetHdr};

/// Counts an invalid packet under its reason.
pub fn count_invalid(local: &mut Local, why: Invalid, cut: bool) {
    local.inc(match why {
        Invalid::NotIpv4 => Counter::NotIpv4,
        Invalid::Truncated if cut => Counter::Oversize,
        Invalid::Truncated | Invalid::Malformed => Counter::Malformed,
    });
}

/// The sending side's view: routes and the ICMP answer.
pub struct Outbound {
    pub routes: RouteView,
    unreachable: Unreachable,
}

impl Outbound {
    pub fn new(routes: RouteView, source: Ipv4Addr, vnet_hdr: bool) -> Outbound {
        Outbound {
            routes,
            unreachable: Unreachable {
                source,
                vnet_hdr,
                limit: RateLimit::new(
                    RateLimit::DEFAULT_RATE,
                    RateLimit::DEFAULT_BURST,
                    Instant::now(),
                ),
                buf: Vec::with_capacity(576),
            },
        }
    }

    /// For `pkt` read from TUN (its total length exact): the peer to send it to, its TTL
    /// decremented; `None` when it is dropped (counted; a destination without route answered
    /// with ICMP through `tun`).
    #[inline]
    pub fn route(
        &mut self,
        pkt: &mut [u8],
        tun: libc::c_int,
        local: &mut Local,
    ) -> Option<SocketAddrV4> {
        let Some(peer) = self.routes.lookup(ipv4::dst(pkt)) else {
            local.inc(Counter::NoRoute);
            self.unreachable.answer(pkt, tun, local);
            return None;
        };
        if !ipv4::decrement_ttl(pkt) {
            local.inc(Counter::TtlExpired);
            return None;
        }
        Some(peer)
    }
}

struct Unreachable {
    source: Ipv4Addr,
    vnet_hdr: bool,
    limit: RateLimit,
    buf: Vec<u8>,
}

impl Unreachable {
    fn answer(&mut self, offender: &[u8], tun: libc::c_int, local: &mut Local) {
        if !icmp::net_unreachable(offender, self.source, &mut self.buf) {
            return;
        }
        if !self.limit.allow(Instant::now()) {
            local.inc(Counter::IcmpRateLimited);
            return;
        }
        let plain = VnetHdr::default().to_bytes();
        let written = if self.vnet_hdr {
            sys::writev(tun, &[IoSlice::new(&plain), IoSlice::new(&self.buf)])
                .map(|n| n.saturating_sub(vnet::LEN))
        } else {
            sys::write(tun, &self.buf)
        };
        local.inc(Counter::TunWrites);
        match written {
            Ok(_) => local.inc(Counter::IcmpUnreachable),
            Err(_) => local.inc(Counter::TunWriteFailed),
        }
    }
}

/// The receiving side's checks.
pub struct Inbound {
    pub mtu: usize,
    pub local_subnet: Ipv4Network,
}

impl Inbound {
    /// For a datagram from a peer: the inner packet to write to TUN (cut at the MTU as
    /// flanneld reads it, trimmed to its total length, TTL decremented), or `None` when it is
    /// dropped (counted). `wire_len` is the datagram's length on the wire (it may exceed
    /// `datagram`, which holds at most the MTU).
    #[inline]
    pub fn accept<'a>(
        &self,
        datagram: &'a mut [u8],
        wire_len: usize,
        local: &mut Local,
    ) -> Option<&'a mut [u8]> {
        let cut = wire_len > self.mtu;
        let datagram = if datagram.len() > self.mtu {
            &mut datagram[..self.mtu]
        } else {
            datagram
        };
        let total = match ipv4::validate(datagram) {
            Ok(total) => total,
            Err(why) => {
                count_invalid(local, why, cut);
                return None;
            }
        };
        let pkt = &mut datagram[..total];
        if !self.local_subnet.contains(ipv4::dst(pkt)) {
            local.inc(Counter::NotForThisNode);
            return None;
        }
        if !ipv4::decrement_ttl(pkt) {
            local.inc(Counter::TtlExpired);
            return None;
        }
        Some(pkt)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ipv4::tests::packet;
    use crate::routes::{RouteTable, SharedRoutes};
    use crate::stats::{snapshot, Cells, DataPath};

    fn counted(local: &mut Local) -> crate::stats::Stats {
        let cells = Cells::default();
        local.publish(&cells);
        snapshot(DataPath::per_packet(), &[&cells])
    }

    #[test]
    fn inbound_cuts_at_the_mtu_checks_the_destination_and_the_ttl() {
        let inbound = Inbound {
            mtu: 100,
            local_subnet: "10.244.2.0/24".parse().unwrap(),
        };
        let mut local = Local::default();
        let mut ok = packet(17, [10, 244, 1, 2], [10, 244, 2, 3], 62, &[], &[5; 30]);
        ok.extend_from_slice(&[0; 4]); // padding after the packet
        let wire = ok.len();
        let pkt = inbound.accept(&mut ok, wire, &mut local).unwrap();
        assert_eq!(pkt.len(), 50);
        assert_eq!(ipv4::ttl(pkt), 61);
        assert!(ipv4::header_checksum_ok(pkt));

        // Longer than the MTU: cut, and the cut packet is incomplete.
        let mut long = packet(17, [10, 244, 1, 2], [10, 244, 2, 3], 62, &[], &[5; 200]);
        assert!(inbound.accept(&mut long, 220, &mut local).is_none());
        // Longer than the MTU but the IP packet ends before it: flanneld's cut keeps it whole.
        let mut trailing = packet(17, [10, 244, 1, 2], [10, 244, 2, 3], 62, &[], &[5; 10]);
        trailing.resize(150, 0);
        assert_eq!(
            inbound
                .accept(&mut trailing, 150, &mut local)
                .map(|p| p.len()),
            Some(30)
        );

        let mut elsewhere = packet(17, [10, 244, 1, 2], [10, 244, 3, 3], 62, &[], &[]);
        assert!(inbound.accept(&mut elsewhere, 20, &mut local).is_none());
        let mut expiring = packet(17, [10, 244, 1, 2], [10, 244, 2, 3], 1, &[], &[]);
        assert!(inbound.accept(&mut expiring, 20, &mut local).is_none());
        let mut v6 = vec![0x60u8; 60];
        assert!(inbound.accept(&mut v6, 60, &mut local).is_none());
        let mut short = packet(17, [10, 244, 1, 2], [10, 244, 2, 3], 9, &[], &[1; 10]);
        short.truncate(25);
        assert!(inbound.accept(&mut short, 25, &mut local).is_none());

        let s = counted(&mut local);
        assert_eq!(s.drops.oversize, 1);
        assert_eq!(s.drops.not_for_this_node, 1);
        assert_eq!(s.drops.ttl_expired, 1);
        assert_eq!(s.drops.not_ipv4, 1);
        assert_eq!(s.drops.malformed, 1);
    }

    #[test]
    fn outbound_routes_decrements_and_answers_the_unroutable() {
        let shared = Arc::new(SharedRoutes::default());
        shared.replace(RouteTable::new([(
            "10.244.2.0/24".parse().unwrap(),
            "172.31.0.2:8285".parse().unwrap(),
        )]));
        let mut out = Outbound::new(RouteView::new(shared), "10.244.1.0".parse().unwrap(), false);
        let mut local = Local::default();
        let mut p = packet(6, [10, 244, 1, 2], [10, 244, 2, 3], 63, &[], &[0; 20]);
        assert_eq!(
            out.route(&mut p, -1, &mut local),
            Some("172.31.0.2:8285".parse().unwrap())
        );
        assert_eq!(ipv4::ttl(&p), 62, "the wire carries TTL 62 for a pod's 64");
        let mut last = packet(6, [10, 244, 1, 2], [10, 244, 2, 3], 1, &[], &[0; 20]);
        assert_eq!(out.route(&mut last, -1, &mut local), None);
        // No route: an answer is due, written to a descriptor that is not there (counted).
        let mut lost = packet(6, [10, 244, 1, 2], [10, 244, 9, 3], 63, &[], &[0; 20]);
        assert_eq!(out.route(&mut lost, -1, &mut local), None);
        let s = counted(&mut local);
        assert_eq!(s.drops.ttl_expired, 1);
        assert_eq!(s.drops.no_route, 1);
        assert_eq!(s.drops.tun_write_failed, 1);
        assert_eq!(s.icmp_unreachable, 0);
    }
}
