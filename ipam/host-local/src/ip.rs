//! IP address arithmetic on a `u128` representation (one code path for IPv4 and IPv6).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Address family of an address or range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) become plain IPv4, as Go's `To4()` does.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

pub fn to_u128(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(*v4)),
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

/// Inverse of [`to_u128`]; IPv4 values are truncated to 32 bits.
pub fn from_u128(value: u128, family: Family) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(value as u32)),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// The all-ones mask of the host part for a prefix length.
pub fn host_mask(family: Family, prefix: u8) -> u128 {
    let bits = u32::from(family.bits());
    let host_bits = bits - u32::from(prefix.min(family.bits()));
    if host_bits == 0 {
        0
    } else if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    }
}

/// Parses `ip` or `ip/prefix` (the prefix is ignored), canonicalising IPv4-mapped addresses.
pub fn parse_ip_maybe_prefix(s: &str) -> Option<IpAddr> {
    let addr = s.split_once('/').map_or(s, |(a, _)| a);
    addr.trim().parse::<IpAddr>().ok().map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_round_trips() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(
            from_u128(to_u128(&v4) + 1, Family::V4).to_string(),
            "10.1.2.4"
        );
        let v6: IpAddr = "fd00::ffff".parse().unwrap();
        assert_eq!(
            from_u128(to_u128(&v6) + 1, Family::V6).to_string(),
            "fd00::1:0"
        );
        assert_eq!(host_mask(Family::V4, 24), 255);
        assert_eq!(host_mask(Family::V6, 0), u128::MAX);
        assert_eq!(host_mask(Family::V4, 32), 0);
    }

    #[test]
    fn canonicalises_mapped_and_prefixed() {
        assert_eq!(
            parse_ip_maybe_prefix("::ffff:10.0.0.1")
                .unwrap()
                .to_string(),
            "10.0.0.1"
        );
        assert_eq!(
            parse_ip_maybe_prefix("10.0.0.1/24").unwrap().to_string(),
            "10.0.0.1"
        );
        assert!(parse_ip_maybe_prefix("10.0.0.300").is_none());
    }

    #[test]
    fn ipv6_text_matches_go() {
        // Go's net.IP.String() and Rust's Display agree on RFC 5952 form for these.
        for s in [
            "fd00::2",
            "2001:db8::1:0:0:1",
            "fe80::1",
            "::1",
            "2001:db8:0:1:1:1:1:1",
        ] {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(ip.to_string(), s);
        }
    }
}
