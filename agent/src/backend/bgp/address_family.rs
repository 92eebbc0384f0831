//! The two address families as BIRD's configuration names them: the IPv4 half has the plain
//! names (`kernel`, `export_to_peers`, channel `ipv4`), the IPv6 half the same ones ending in
//! `6` (channel `ipv6`).

use std::fmt::Display;

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};

/// What tells one family's parts of BIRD's configuration from the other's: the IPv4 half has
/// the plain names (`kernel`, `export_to_peers`), the IPv6 half the same ones ending in `6`.
pub trait Family: Copy + Display + Ord {
    /// BIRD's channel of the family.
    const CHANNEL: &'static str;
    /// The end of the family's protocol, filter and constant names.
    const SUFFIX: &'static str;
    /// `net`, when it is of this family.
    fn of(net: IpNetwork) -> Option<Self>;
}

impl Family for Ipv4Network {
    const CHANNEL: &'static str = "ipv4";
    const SUFFIX: &'static str = "";
    fn of(net: IpNetwork) -> Option<Self> {
        match net {
            IpNetwork::V4(n) => Some(n),
            IpNetwork::V6(_) => None,
        }
    }
}

impl Family for Ipv6Network {
    const CHANNEL: &'static str = "ipv6";
    const SUFFIX: &'static str = "6";
    fn of(net: IpNetwork) -> Option<Self> {
        match net {
            IpNetwork::V6(n) => Some(n),
            IpNetwork::V4(_) => None,
        }
    }
}
