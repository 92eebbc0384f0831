//! The log rule before each chain's drop: what is about to be dropped goes, rate-limited, to
//! an nfnetlink_log group, with a prefix naming the chain (direction and target address), so
//! a listener maps each packet back to the target and the policies that isolate it.

use std::net::IpAddr;

use netkit::netfilter::nf_tables::build;
use netkit::netfilter::nf_tables::Expr;
use netpolicy::Direction;

/// The nfnetlink_log group the log rules send to.
pub const LOG_GROUP: u16 = 7361;
/// Bytes of each packet copied: the IP header and the transport ports with room to spare.
pub const LOG_SNAPLEN: u32 = 128;
/// Packets logged per second and chain, and the burst allowed above it: a flood of denied
/// packets costs the listener at most this, whatever its size.
pub const LOG_RATE_PER_SECOND: u64 = 50;
pub const LOG_BURST: u32 = 20;

/// `i <address>` or `e <address>` (at most 41 bytes, under the kernel's 127).
pub fn log_prefix(direction: Direction, addr: IpAddr) -> String {
    let d = match direction {
        Direction::Ingress => 'i',
        Direction::Egress => 'e',
    };
    format!("{d} {addr}")
}

/// The chain a prefix names; `None` for a prefix not made by [`log_prefix`].
pub fn parse_log_prefix(prefix: &str) -> Option<(Direction, IpAddr)> {
    let (d, addr) = prefix.split_once(' ')?;
    let direction = match d {
        "i" => Direction::Ingress,
        "e" => Direction::Egress,
        _ => return None,
    };
    Some((direction, addr.parse().ok()?))
}

/// `limit rate 50/second burst 20 packets log prefix "<prefix>" group 7361 snaplen 128`.
pub fn log_exprs(direction: Direction, addr: IpAddr) -> Vec<Expr> {
    build::all([
        build::limit_packets_per_second(LOG_RATE_PER_SECOND, LOG_BURST),
        build::log_to_group(&log_prefix(direction, addr), LOG_GROUP, LOG_SNAPLEN),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_name_the_chain_both_ways() {
        for (d, a) in [
            (Direction::Ingress, "10.1.2.3"),
            (Direction::Egress, "fd00:1234:5678:9abc:def0:1234:5678:9abc"),
        ] {
            let addr: IpAddr = a.parse().unwrap();
            let p = log_prefix(d, addr);
            assert!(p.len() <= 127);
            assert_eq!(parse_log_prefix(&p), Some((d, addr)));
        }
        assert_eq!(
            log_prefix(Direction::Ingress, "10.0.0.1".parse().unwrap()),
            "i 10.0.0.1"
        );
        for bad in ["", "i", "x 10.0.0.1", "i 10.0.0", "i10.0.0.1"] {
            assert_eq!(parse_log_prefix(bad), None, "{bad:?}");
        }
    }
}
