//! The ICMP destination (network) unreachable the engine answers with when no route covers a
//! packet's destination, and the rate limit on those answers.
//!
//! The answer comes from the TUN device's own address (the lease's network address) and is
//! written into the TUN device, so the node's kernel forwards it to the pod like any packet
//! arriving from the overlay. A source that is the node's own address is a martian to the
//! kernel unless the device accepts local sources: the engine sets `accept_local` on it (see
//! the crate documentation). flanneld sends the same message, for non-ICMP packets only, from
//! the same address without that setting, so its answers are dropped before they reach a pod.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::checksum;
use crate::ipv4;

const TYPE_DEST_UNREACHABLE: u8 = 3;
const CODE_NET_UNREACHABLE: u8 = 0;
/// RFC 1812 4.3.2.3: the quoted original stops where the error would pass 576 bytes.
const MAX_ERROR_LEN: usize = 576;
const HEADER: usize = ipv4::MIN_HEADER + 8;
/// The kernel's TOS for ICMP errors (precedence "internetwork control").
const TOS_INTERNETWORK_CONTROL: u8 = 0xc0;
const TTL: u8 = 64;

/// ICMP types that report errors (RFC 792, 1812): never answered with another error.
fn is_error_type(icmp_type: u8) -> bool {
    matches!(icmp_type, 3 | 4 | 5 | 11 | 12)
}

/// Writes into `out` (cleared first) the ICMP network unreachable answering `offender` (an
/// IPv4 packet, its total length exact) from `source`; returns false, with `out` empty, when
/// no answer is due: the offender is itself an ICMP error (or too short to tell), a fragment
/// other than the first, from a source no error may go to (0/8, loopback, multicast,
/// broadcast), or to a multicast or broadcast destination (RFC 1812 4.3.2.7).
pub fn net_unreachable(offender: &[u8], source: Ipv4Addr, out: &mut Vec<u8>) -> bool {
    out.clear();
    let ihl = ipv4::header_len(offender);
    if ipv4::is_later_fragment(offender)
        || !ipv4::is_unicast_source(ipv4::src(offender))
        || !ipv4::is_unicast_source(ipv4::dst(offender))
    {
        return false;
    }
    if ipv4::protocol(offender) == ipv4::PROTO_ICMP {
        match offender.get(ihl) {
            Some(&t) if !is_error_type(t) => {}
            _ => return false,
        }
    }
    let quoted = offender.len().min(MAX_ERROR_LEN - HEADER);
    let total = HEADER + quoted;
    out.resize(total, 0);
    out[0] = 0x45;
    out[1] = TOS_INTERNETWORK_CONTROL;
    ipv4::set_total_len(out, total as u16);
    out[8] = TTL;
    out[9] = ipv4::PROTO_ICMP;
    out[12..16].copy_from_slice(&source.octets());
    out[16..20].copy_from_slice(&ipv4::src_bytes(offender));
    ipv4::fill_header_checksum(out);
    let icmp = &mut out[ipv4::MIN_HEADER..];
    icmp[0] = TYPE_DEST_UNREACHABLE;
    icmp[1] = CODE_NET_UNREACHABLE;
    // Bytes 4..8 stay zero (unused, no next-hop MTU).
    icmp[8..].copy_from_slice(&offender[..quoted]);
    let c = checksum::checksum(icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    true
}

/// A token bucket: `rate` answers per second, bursts of `burst` (the kernel's defaults for
/// ICMP it sends, `icmp_msgs_per_sec` and `icmp_msgs_burst`).
pub struct RateLimit {
    tokens: f64,
    burst: f64,
    per_token: Duration,
    last: Instant,
}

impl RateLimit {
    pub const DEFAULT_RATE: u32 = 1000;
    pub const DEFAULT_BURST: u32 = 50;

    pub fn new(rate: u32, burst: u32, now: Instant) -> RateLimit {
        RateLimit {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_token: Duration::from_secs(1) / rate.max(1),
            last: now,
        }
    }

    /// Takes one token if there is one at `now`.
    pub fn allow(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last);
        self.last = now;
        let refill = elapsed.as_secs_f64() / self.per_token.as_secs_f64();
        self.tokens = (self.tokens + refill).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::tests::reference;
    use crate::ipv4::tests::packet;

    const POD: [u8; 4] = [10, 244, 1, 5];
    const NOWHERE: [u8; 4] = [10, 244, 99, 9];
    const TUN: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 0);

    #[test]
    fn answers_a_tcp_syn_with_its_headers_quoted() {
        let mut syn = vec![0u8; 40];
        syn[0..2].copy_from_slice(&40000u16.to_be_bytes());
        syn[2..4].copy_from_slice(&80u16.to_be_bytes());
        syn[4..8].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        syn[13] = 0x02;
        let offender = packet(ipv4::PROTO_TCP, POD, NOWHERE, 63, &[], &syn);
        let mut out = Vec::new();
        assert!(net_unreachable(&offender, TUN, &mut out));
        assert_eq!(ipv4::validate(&out), Ok(28 + 60));
        assert!(ipv4::header_checksum_ok(&out));
        assert_eq!(ipv4::protocol(&out), ipv4::PROTO_ICMP);
        assert_eq!(ipv4::src(&out), TUN);
        assert_eq!(ipv4::dst(&out), Ipv4Addr::from(POD));
        assert_eq!(ipv4::ttl(&out), 64);
        assert_eq!(&out[20..22], &[3, 0], "destination unreachable, network");
        assert_eq!(reference(&out[20..]), 0, "ICMP checksum");
        assert_eq!(&out[28..], &offender[..], "the whole offender quoted");
    }

    #[test]
    fn answers_icmp_echo_but_never_an_icmp_error() {
        let echo = packet(
            ipv4::PROTO_ICMP,
            POD,
            NOWHERE,
            63,
            &[],
            &[8, 0, 0, 0, 0, 1, 0, 1],
        );
        let mut out = Vec::new();
        assert!(net_unreachable(&echo, TUN, &mut out));
        for error_type in [3u8, 4, 5, 11, 12] {
            let err = packet(
                ipv4::PROTO_ICMP,
                POD,
                NOWHERE,
                63,
                &[],
                &[error_type, 0, 0, 0, 0, 0, 0, 0],
            );
            assert!(!net_unreachable(&err, TUN, &mut out), "type {error_type}");
            assert!(out.is_empty());
        }
        let truncated = packet(ipv4::PROTO_ICMP, POD, NOWHERE, 63, &[], &[]);
        assert!(!net_unreachable(&truncated, TUN, &mut out));
    }

    #[test]
    fn quotes_at_most_what_fits_in_576_bytes() {
        let big = packet(ipv4::PROTO_UDP, POD, NOWHERE, 63, &[1, 1, 1, 0], &[7; 1400]);
        let mut out = Vec::new();
        assert!(net_unreachable(&big, TUN, &mut out));
        assert_eq!(out.len(), 576);
        assert_eq!(&out[28..], &big[..548]);
        assert_eq!(reference(&out[20..]), 0);
    }

    #[test]
    fn no_answer_to_later_fragments_or_odd_addresses() {
        let mut out = Vec::new();
        let mut frag = packet(ipv4::PROTO_UDP, POD, NOWHERE, 63, &[], &[0; 16]);
        frag[6] = 0x00;
        frag[7] = 0x20;
        assert!(!net_unreachable(&frag, TUN, &mut out));
        frag[6] = 0x20;
        frag[7] = 0x00;
        ipv4::fill_header_checksum(&mut frag);
        assert!(net_unreachable(&frag, TUN, &mut out), "the first fragment");
        for (src, dst) in [
            ([0, 0, 0, 0], NOWHERE),
            ([127, 0, 0, 1], NOWHERE),
            ([224, 0, 0, 5], NOWHERE),
            ([255, 255, 255, 255], NOWHERE),
            (POD, [239, 1, 1, 1]),
            (POD, [255, 255, 255, 255]),
        ] {
            let p = packet(ipv4::PROTO_UDP, src, dst, 63, &[], &[0; 8]);
            assert!(!net_unreachable(&p, TUN, &mut out), "{src:?} -> {dst:?}");
        }
    }

    #[test]
    fn rate_limit_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(10, 3, t0);
        let allowed = (0..10).filter(|_| limit.allow(t0)).count();
        assert_eq!(allowed, 3);
        assert!(!limit.allow(t0 + Duration::from_millis(50)));
        assert!(limit.allow(t0 + Duration::from_millis(110)));
        assert!(!limit.allow(t0 + Duration::from_millis(120)));
        let later = t0 + Duration::from_secs(10);
        assert_eq!((0..10).filter(|_| limit.allow(later)).count(), 3);
    }
}
