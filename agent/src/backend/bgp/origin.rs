//! Origin validation of learned routes, with the leases as the authority: the import filter's
//! body, rendered from the leases of the other nodes.
//!
//! A learned route is accepted only when its prefix is exactly a lease's subnet and it comes
//! from that lease's node:
//! - next hop = a lease's `PublicIP` (mesh sessions, route reflectors, routers that keep the
//!   next hop): the prefix must be that lease's subnet (one of them, for an address that holds
//!   several leases);
//! - any other next hop (a router rewrote it, eBGP): the prefix must be exactly some lease's
//!   subnet and the AS path must start at that lease's origin AS (`bgp_path.last`).
//!
//! Everything else is refused, each for its reason (the refusal module's classification,
//! written after these rules): unleased prefixes,
//! more-specifics, aggregates, another node's subnet through a next hop that is not that
//! node's, wrong origins. BIRD 2.0's `case` is a tree lookup on IP values (not on prefixes),
//! so the next hop picks the one arm to test; the arm of an unknown next hop tests exact
//! prefix sets. An arm that accepts nothing falls through to the refusal's classification.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::net::Ipv4Addr;

use ipnetwork::Ipv4Network;

/// One other node's lease, as the import filter needs it: its IPv4 subnet and `PublicIP` by
/// default, its IPv6 subnet and `PublicIPv6` on a dual-stack network (the family module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseRoute<Net = Ipv4Network, Addr = Ipv4Addr> {
    pub subnet: Net,
    /// The lease's `PublicIP` (`PublicIPv6`): the next hop the node announces its subnet with.
    pub next_hop: Addr,
    /// The AS the node's announcements originate in: the one its lease names (`--bgp-as`),
    /// else the cluster's.
    pub origin_as: u32,
}

/// The import filter's statements (indented by two), after the own-subnet check: what is
/// accepted; the rest falls through to the refusal's classification. Deterministic: the same
/// leases in any order give the same text.
pub fn write_rules<Net, Addr>(o: &mut String, leases: &[LeaseRoute<Net, Addr>]) -> std::fmt::Result
where
    Net: Display + Ord + Copy,
    Addr: Display + Ord + Copy,
{
    if leases.is_empty() {
        return writeln!(o, "  # No other node's lease: nothing to learn.");
    }
    let mut by_next_hop: BTreeMap<Addr, Vec<Net>> = BTreeMap::new();
    let mut by_origin: BTreeMap<u32, Vec<Net>> = BTreeMap::new();
    for l in leases {
        by_next_hop.entry(l.next_hop).or_default().push(l.subnet);
        by_origin.entry(l.origin_as).or_default().push(l.subnet);
    }
    writeln!(
        o,
        "  # From a node's address: exactly that node's subnet. Through another next hop:"
    )?;
    writeln!(
        o,
        "  # exactly a leased subnet, originated in its node's AS. Nothing else."
    )?;
    writeln!(o, "  case bgp_next_hop {{")?;
    for (ip, subnets) in &by_next_hop {
        // BIRD's lexer reads an IPv6 literal followed by `:` as one (bad) address.
        let ip = ip.to_string();
        let gap = if ip.contains(':') { " " } else { "" };
        writeln!(o, "    {ip}{gap}: if net ~ {} then accept;", set(subnets))?;
    }
    writeln!(o, "    else:")?;
    for (as_number, subnets) in &by_origin {
        writeln!(
            o,
            "      if net ~ {} && bgp_path.last = {as_number} then accept;",
            set(subnets)
        )?;
    }
    writeln!(o, "  }}")
}

/// A BIRD prefix set matching exactly these prefixes, sorted and without repeats.
fn set<Net: Display + Ord + Copy>(subnets: &[Net]) -> String {
    let mut v: Vec<Net> = subnets.to_vec();
    v.sort_unstable();
    v.dedup();
    let items: Vec<String> = v.iter().map(ToString::to_string).collect();
    format!("[ {} ]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(subnet: &str, ip: &str, origin_as: u32) -> LeaseRoute {
        LeaseRoute {
            subnet: subnet.parse().unwrap(),
            next_hop: ip.parse().unwrap(),
            origin_as,
        }
    }

    fn rules(leases: &[LeaseRoute]) -> String {
        let mut o = String::new();
        write_rules(&mut o, leases).unwrap();
        o
    }

    #[test]
    fn one_arm_per_next_hop_and_one_test_per_origin() {
        let leases = [
            lease("10.244.3.0/24", "172.31.250.3", 64512),
            lease("10.244.1.0/24", "172.31.250.1", 64512),
            // A second lease of node 3 (a stale one), and a node in another AS.
            lease("10.244.9.0/24", "172.31.250.3", 64512),
            lease("10.244.7.0/24", "172.31.250.7", 65007),
        ];
        let text = rules(&leases);
        assert_eq!(
            text,
            "  # From a node's address: exactly that node's subnet. Through another next hop:\n\
             \x20 # exactly a leased subnet, originated in its node's AS. Nothing else.\n\
             \x20 case bgp_next_hop {\n\
             \x20   172.31.250.1: if net ~ [ 10.244.1.0/24 ] then accept;\n\
             \x20   172.31.250.3: if net ~ [ 10.244.3.0/24, 10.244.9.0/24 ] then accept;\n\
             \x20   172.31.250.7: if net ~ [ 10.244.7.0/24 ] then accept;\n\
             \x20   else:\n\
             \x20     if net ~ [ 10.244.1.0/24, 10.244.3.0/24, 10.244.9.0/24 ] && bgp_path.last = 64512 then accept;\n\
             \x20     if net ~ [ 10.244.7.0/24 ] && bgp_path.last = 65007 then accept;\n\
             \x20 }\n"
        );
        // The order of the leases does not matter.
        let mut reversed = leases;
        reversed.reverse();
        assert_eq!(rules(&reversed), text);
    }

    #[test]
    fn no_lease_learns_nothing() {
        assert_eq!(rules(&[]), "  # No other node's lease: nothing to learn.\n");
    }
}
