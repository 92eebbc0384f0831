//! IPv6 pod subnets on a dual-stack network (`EnableIPv6`, `IPv6Network`): what BIRD's
//! configuration gains, rendered beside the IPv4 parts.
//!
//! Transport: multiprotocol BGP over the existing IPv4 sessions. Each BGP session gets an
//! `ipv6` channel next to its `ipv4` one, announcing the node's IPv6 subnet with the node's
//! `PublicIPv6` as next hop (`next hop address`: an IPv4 session has no IPv6 source address to
//! take it from). One session per peer carries both families, so a node's sessions, their
//! failure detection (BFD, hold time), passwords and graceful restart stay what they are, and
//! a peer or route reflector is configured once; a router only has to activate the IPv6
//! address family on the session it already has.
//!
//! The IPv6 half mirrors the IPv4 one:
//! - the own IPv6 subnet is a static blackhole in BIRD, exported to every peer;
//! - imported: exactly the other leases' IPv6 subnets, from their own node ([`origin`]'s rules
//!   with `PublicIPv6` as the node's next hop and the lease's AS as origin);
//! - a second kernel protocol (the `master6` table): BGP routes only, inside `IPv6Network`,
//!   `persist`, with the kernel's other IPv6 routes learnt to resolve next hops;
//! - the IPv6 entries of `AdvertisePrefixes` and `ExternalPrefixes` ([`super::announce`]'s writers,
//!   with the IPv6 names).

use std::fmt::Write as _;
use std::net::Ipv6Addr;

use ipnetwork::Ipv6Network;

use super::address_family::Family;
use super::announce::NodePrefixes6;
use super::origin::{self, LeaseRoute};
use super::refusal;
use crate::backend::Peer;
use crate::subnet::key::SubnetKey;

/// Another node's IPv6 subnet and `PublicIPv6`, in its node's AS.
pub type LeaseRoute6 = LeaseRoute<Ipv6Network, Ipv6Addr>;

/// What the IPv6 half of the configuration depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Routes {
    /// This node's IPv6 subnet (the lease key's second half).
    pub own_subnet: Ipv6Network,
    /// The network config's `IPv6Network`.
    pub network: Ipv6Network,
    /// This node's `PublicIPv6`: the next hop of its IPv6 subnet.
    pub next_hop: Ipv6Addr,
    /// The other nodes' IPv6 leases: the only IPv6 routes imported.
    pub leases: Vec<LeaseRoute6>,
}

impl Ipv6Routes {
    /// The IPv6 half for this node, when its lease has an IPv6 subnet: the other leases with
    /// an IPv6 subnet and a `PublicIPv6` (never ours, nor one claiming our address), each in
    /// the AS `origin_as` gives it. The leases come through the checks every backend's peers
    /// pass (a `PublicIPv6` that is unspecified, loopback, multicast... refuses the whole
    /// lease), as the IPv4 half's do.
    pub fn new(
        own: &SubnetKey,
        own_ip: Ipv6Addr,
        network: Ipv6Network,
        peers: &[Peer],
        origin_as: impl Fn(&Peer) -> u32,
    ) -> Option<Ipv6Routes> {
        let own_subnet = own.v6?;
        let mut leases: Vec<LeaseRoute6> = peers
            .iter()
            .filter_map(|p| {
                let subnet = p.key.v6?;
                let next_hop = p.attrs.public_ipv6?;
                (next_hop != own_ip && subnet != own_subnet).then(|| LeaseRoute {
                    subnet,
                    next_hop,
                    origin_as: origin_as(p),
                })
            })
            .collect();
        leases.sort_unstable();
        leases.dedup();
        Some(Ipv6Routes {
            own_subnet,
            network,
            next_hop: own_ip,
            leases,
        })
    }
}

/// The IPv6 constants and filters, after the IPv4 ones.
pub fn write_filters(
    o: &mut String,
    v6: &Ipv6Routes,
    prefixes: &NodePrefixes6,
) -> std::fmt::Result {
    let net = v6.network;
    writeln!(o)?;
    writeln!(o, "define OWN_SUBNET6 = {};", v6.own_subnet)?;
    writeln!(
        o,
        "# Other nodes' IPv6 subnets, exactly as leased, from their own node; never ours."
    )?;
    writeln!(o, "filter import_pod_subnets6 {{")?;
    refusal::write_own_subnet(o, &v6.own_subnet)?;
    prefixes.write_import_rules(o)?;
    origin::write_rules(o, &v6.leases)?;
    refusal::write_classification(o, v6.network, &v6.leases)?;
    writeln!(o, "}}")?;
    writeln!(o, "filter export_own_subnet6 {{")?;
    writeln!(o, "  if net = OWN_SUBNET6 then accept;")?;
    writeln!(o, "  reject;")?;
    writeln!(o, "}}")?;
    prefixes.write_peer_export(o)?;
    writeln!(o, "filter kernel_pod_routes6 {{")?;
    writeln!(
        o,
        "  if source = RTS_BGP && net != OWN_SUBNET6 && net ~ [ {}/{}{{{},{}}} ] then accept;",
        net.network(),
        net.prefix(),
        net.prefix(),
        v6.own_subnet.prefix()
    )?;
    prefixes.write_kernel_rules(o)?;
    writeln!(o, "  reject;")?;
    writeln!(o, "}}")?;
    writeln!(o, "filter kernel_next_hops6 {{")?;
    writeln!(
        o,
        "  if net ~ [ {}/{}+ ] then reject;",
        net.network(),
        net.prefix()
    )?;
    prefixes.write_kernel_import_rules(o)?;
    writeln!(o, "  accept;")?;
    writeln!(o, "}}")
}

/// The IPv6 kernel protocol, the static blackhole of the own IPv6 subnet and the IPv6
/// advertised prefixes.
pub fn write_protocols(
    o: &mut String,
    v6: &Ipv6Routes,
    prefixes: &NodePrefixes6,
) -> std::fmt::Result {
    write_kernel_and_own_subnet(o, v6.own_subnet)?;
    prefixes.write_static(o)
}

/// One family's kernel protocol (BGP routes out, the kernel's own routes in for next hops;
/// `persist`, graceful restart) and the static blackhole that announces the own subnet.
pub fn write_kernel_and_own_subnet<Net: Family>(
    o: &mut String,
    own_subnet: Net,
) -> std::fmt::Result {
    let (channel, suffix) = (Net::CHANNEL, Net::SUFFIX);
    let name = if suffix.is_empty() {
        String::new()
    } else {
        format!("kernel{suffix} ")
    };
    writeln!(o, "protocol kernel {name}{{")?;
    writeln!(
        o,
        "  {channel} {{ import filter kernel_next_hops{suffix}; export filter kernel_pod_routes{suffix}; }};"
    )?;
    writeln!(o, "  learn;")?;
    writeln!(
        o,
        "  persist;  # BIRD's exit leaves the routes; the agent removes them"
    )?;
    writeln!(o, "  graceful restart;")?;
    writeln!(o, "  scan time 10;")?;
    writeln!(o, "}}")?;
    writeln!(o, "protocol static own_subnet{suffix} {{")?;
    writeln!(o, "  {channel};")?;
    writeln!(o, "  route {own_subnet} blackhole;")?;
    writeln!(o, "}}")
}

/// The `ipv6` channel of the sessions' template (multiprotocol BGP over the IPv4 session).
pub fn write_channel(o: &mut String, v6: &Ipv6Routes) -> std::fmt::Result {
    writeln!(o, "  ipv6 {{")?;
    writeln!(o, "    import filter import_pod_subnets6;")?;
    writeln!(o, "    export filter export_own_subnet6;")?;
    writeln!(o, "    next hop address {};", v6.next_hop)?;
    writeln!(o, "    gateway recursive;")?;
    writeln!(o, "  }};")
}

#[cfg(test)]
mod tests {
    use super::super::plane::tests::peer;
    use super::*;

    fn sample() -> Ipv6Routes {
        let own = SubnetKey::parse("10.244.1.0-24&fd00:10:244:1::-64").unwrap();
        let peers = [
            peer(
                "10.244.2.0-24&fd00:10:244:2::-64",
                r#"{"PublicIP":"192.168.1.2","PublicIPv6":"fd00:31:250::2","BackendType":"bgp","BackendData":{"ASNumber":65002}}"#,
            ),
            peer(
                "10.244.3.0-24&fd00:10:244:3::-64",
                r#"{"PublicIP":"192.168.1.3","PublicIPv6":"fd00:31:250::3","BackendType":"bgp"}"#,
            ),
            // IPv4 only, no PublicIPv6, one claiming our address, one our subnet: no route.
            peer(
                "10.244.4.0-24",
                r#"{"PublicIP":"192.168.1.4","BackendType":"bgp"}"#,
            ),
            peer(
                "10.244.5.0-24&fd00:10:244:5::-64",
                r#"{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"bgp"}"#,
            ),
            peer(
                "10.244.6.0-24&fd00:10:244:6::-64",
                r#"{"PublicIP":"192.168.1.6","PublicIPv6":"fd00:31:250::1","BackendType":"bgp"}"#,
            ),
            peer(
                "10.244.7.0-24&fd00:10:244:1::-64",
                r#"{"PublicIP":"192.168.1.7","PublicIPv6":"fd00:31:250::7","BackendType":"bgp"}"#,
            ),
        ];
        Ipv6Routes::new(
            &own,
            "fd00:31:250::1".parse().unwrap(),
            "fd00:10:244::/56".parse().unwrap(),
            &peers,
            |p| {
                super::super::node_as::lease_as(p.attrs.backend_data.as_ref())
                    .ok()
                    .flatten()
                    .unwrap_or(64512)
            },
        )
        .unwrap()
    }

    #[test]
    fn leases_with_an_ipv6_subnet_and_address_only() {
        let v6 = sample();
        let got: Vec<(String, String, u32)> = v6
            .leases
            .iter()
            .map(|l| (l.subnet.to_string(), l.next_hop.to_string(), l.origin_as))
            .collect();
        assert_eq!(
            got,
            [
                ("fd00:10:244:2::/64", "fd00:31:250::2", 65002),
                ("fd00:10:244:3::/64", "fd00:31:250::3", 64512),
            ]
            .map(|(s, ip, a)| (s.to_string(), ip.to_string(), a))
        );
        // An IPv4-only key has no IPv6 half.
        let v4_only = SubnetKey::parse("10.244.1.0-24").unwrap();
        assert!(Ipv6Routes::new(&v4_only, v6.next_hop, v6.network, &[], |_| 64512).is_none());
    }

    #[test]
    fn renders_filters_kernel_static_and_channel() {
        let v6 = sample();
        let mut text = String::new();
        write_filters(&mut text, &v6, &NodePrefixes6::default()).unwrap();
        write_protocols(&mut text, &v6, &NodePrefixes6::default()).unwrap();
        write_channel(&mut text, &v6).unwrap();
        for line in [
            "define OWN_SUBNET6 = fd00:10:244:1::/64;",
            "filter import_pod_subnets6 {\n  if net ~ [ fd00:10:244:1::/64+ ] then refuse(\"own-subnet\");\n",
            "    fd00:31:250::2 : if net ~ [ fd00:10:244:2::/64 ] then accept;",
            "      if net ~ [ fd00:10:244:3::/64 ] && bgp_path.last = 64512 then accept;",
            "      if net ~ [ fd00:10:244:2::/64 ] && bgp_path.last = 65002 then accept;",
            "  if source = RTS_BGP && net != OWN_SUBNET6 && net ~ [ fd00:10:244::/56{56,64} ] then accept;",
            "  if net ~ [ fd00:10:244::/56+ ] then reject;",
            "protocol kernel kernel6 {\n  ipv6 { import filter kernel_next_hops6; export filter kernel_pod_routes6; };",
            "protocol static own_subnet6 {\n  ipv6;\n  route fd00:10:244:1::/64 blackhole;\n}",
            "  ipv6 {\n    import filter import_pod_subnets6;\n    export filter export_own_subnet6;\n    next hop address fd00:31:250::1;\n    gateway recursive;\n  };",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
    }
}
