//! Subnet lease keys, byte-compatible with flannel's `MakeSubnetKey` / `ParseSubnetKey`:
//! `10.5.52.0-24`, or `10.5.52.0-24&fd00::100-120` for dual-stack leases.

use ipnetwork::{Ipv4Network, Ipv6Network};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The subnet(s) named by one lease key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubnetKey {
    pub v4: Ipv4Network,
    pub v6: Option<Ipv6Network>,
}

impl SubnetKey {
    /// An IPv4-only key.
    #[cfg(test)]
    pub fn v4(v4: Ipv4Network) -> SubnetKey {
        SubnetKey { v4, v6: None }
    }

    /// Parses the last path component of an etcd key. Like flannel's regex
    /// `(\d+\.\d+.\d+.\d+)-(\d+)(?:&([a-f\d:]+)-(\d+))?$` the match is anchored at the end only,
    /// so a full key (`/coreos.com/network/subnets/10.5.52.0-24`) parses too.
    pub fn parse(key: &str) -> Option<SubnetKey> {
        let name = key.rsplit('/').next()?;
        let (v4_part, v6_part) = match name.split_once('&') {
            Some((a, b)) => (a, Some(b)),
            None => (name, None),
        };
        let v4 = parse_v4(v4_part)?;
        let v6 = match v6_part {
            Some(p) => Some(parse_v6(p)?),
            None => None,
        };
        Some(SubnetKey { v4, v6 })
    }
}

impl fmt::Display for SubnetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.v4.ip(), self.v4.prefix())?;
        if let Some(v6) = self.v6 {
            write!(f, "&{}-{}", v6.ip(), v6.prefix())?;
        }
        Ok(())
    }
}

fn split_len(s: &str) -> Option<(&str, u8)> {
    let (addr, len) = s.rsplit_once('-')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) || len.len() > 3 {
        return None;
    }
    Some((addr, len.parse().ok()?))
}

fn parse_v4(s: &str) -> Option<Ipv4Network> {
    let (addr, len) = split_len(s)?;
    let ip: Ipv4Addr = addr.parse().ok()?;
    let net = Ipv4Network::new(ip, len).ok()?;
    // A key always names a network address; anything else is not a lease we understand.
    (net.network() == ip).then_some(net)
}

fn parse_v6(s: &str) -> Option<Ipv6Network> {
    let (addr, len) = split_len(s)?;
    if !addr
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase() || b == b':')
    {
        return None;
    }
    let ip: Ipv6Addr = addr.parse().ok()?;
    Ipv6Network::new(ip, len).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_flannel() {
        let k = SubnetKey::v4("10.5.52.0/24".parse().unwrap());
        assert_eq!(k.to_string(), "10.5.52.0-24");
        let k = SubnetKey {
            v4: "10.5.52.0/24".parse().unwrap(),
            v6: Some("fd00::100/120".parse().unwrap()),
        };
        assert_eq!(k.to_string(), "10.5.52.0-24&fd00::100-120");
    }

    #[test]
    fn parses_bare_and_full_keys() {
        let want = SubnetKey::v4("10.5.52.0/24".parse().unwrap());
        assert_eq!(SubnetKey::parse("10.5.52.0-24"), Some(want));
        assert_eq!(
            SubnetKey::parse("/coreos.com/network/subnets/10.5.52.0-24"),
            Some(want)
        );
        let dual = SubnetKey::parse("10.5.52.0-24&fd00::100-120").unwrap();
        assert_eq!(dual.v6, Some("fd00::100/120".parse().unwrap()));
        assert_eq!(SubnetKey::parse(&dual.to_string()), Some(dual));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "10.5.52.0",
            "10.5.52.0-",
            "10.5.52.0-33",
            "10.5.52.0-x",
            "10.5.52.1-24",
            "10.5.52.0/24",
            "10.5.52.0-24&",
            "10.5.52.0-24&FD00::-64",
            "999.1.1.0-24",
            "config",
        ] {
            assert_eq!(SubnetKey::parse(bad), None, "{bad:?}");
        }
    }
}
