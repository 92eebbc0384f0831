//! flannel's `ipip` backend: pod packets to another node are wrapped in one outer IPv4
//! header (IP protocol 4) by the `flannel.ipip` tunnel (local = this node's address, no
//! fixed remote), routed per peer as `<peer subnet> via <peer PublicIP> dev flannel.ipip
//! onlink`. With `DirectRouting`, a peer on the node's own underlay subnet is reached
//! without the tunnel (`via <PublicIP> dev <underlay>`), as flannel's host-gw does.
//! MTU = underlay − 20. The lease is `{"PublicIP":…,"PublicIPv6":null,"BackendType":"ipip"}`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::{IpNetwork, Ipv4Network};
use serde::Deserialize;

use crate::error::AgentError;
use crate::key::SubnetKey;
use crate::lease::LeaseAttrs;
use crate::netconfig::{bad, Backend, BackendKind};
use crate::store::StoredLease;

pub const DEVICE: &str = "flannel.ipip";
/// The outer IPv4 header.
pub const OVERHEAD: u32 = 20;

#[derive(Deserialize)]
struct RawIpip {
    #[serde(rename = "DirectRouting", default)]
    direct_routing: bool,
}

/// The `Backend` object of a `"Type":"ipip"` config.
pub fn parse_backend(
    key: &str,
    map: &serde_json::Map<String, serde_json::Value>,
) -> Result<Backend, AgentError> {
    let raw: RawIpip =
        libcni::gojson::from_map(map).map_err(|e| bad(key, format!("\"Backend\": {e}")))?;
    Ok(Backend {
        vni: 0,
        port: 0,
        direct_routing: raw.direct_routing,
        mtu: None,
        kind: BackendKind::Ipip,
    })
}

/// This node's lease value (no backend data, as flanneld writes it).
pub fn lease_attrs(public_ip: Ipv4Addr) -> LeaseAttrs {
    LeaseAttrs {
        public_ip,
        public_ipv6: None,
        backend_type: "ipip".into(),
        backend_data: None,
        backend_v6_data: None,
    }
}

/// One peer route: through the tunnel, or (DirectRouting) straight over the underlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PeerRoute {
    pub subnet: Ipv4Network,
    pub gateway: Ipv4Addr,
    pub direct: bool,
}

/// The peers among the leases known: every other ipip lease, `(subnet, PublicIP)` (flannel's
/// route network skips leases of other backends).
pub fn peers(
    own: &SubnetKey,
    leases: &BTreeMap<SubnetKey, StoredLease>,
) -> Vec<(Ipv4Network, Ipv4Addr)> {
    leases
        .iter()
        .filter(|(k, _)| *k != own)
        .filter_map(|(k, l)| {
            let a = l.attrs.as_ref()?;
            (a.backend_type == "ipip").then_some((k.v4, a.public_ip))
        })
        .collect()
}

/// The routes to `peers`. `underlay_nets` are the underlay interface's IPv4 networks, for
/// DirectRouting.
pub fn plan(
    peers: &[(Ipv4Network, Ipv4Addr)],
    direct_routing: bool,
    underlay_nets: &[Ipv4Network],
) -> Vec<PeerRoute> {
    let mut routes: Vec<PeerRoute> = peers
        .iter()
        .map(|&(subnet, gateway)| PeerRoute {
            subnet,
            gateway,
            direct: direct_routing && underlay_nets.iter().any(|n| n.contains(gateway)),
        })
        .collect();
    routes.sort();
    routes
}

/// The kernel route for `r`, given the tunnel's and the underlay's ifindex.
pub fn kernel_route(r: &PeerRoute, tunnel: u32, underlay: u32) -> netkit::Route {
    let mut route = netkit::Route::new(IpNetwork::V4(r.subnet))
        .via(IpAddr::V4(r.gateway))
        .dev(if r.direct { underlay } else { tunnel });
    route.onlink = true;
    route
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netconfig::NetConfig;

    #[test]
    fn config_and_lease() {
        let n = NetConfig::parse(
            "/k",
            br#"{"Network":"10.244.0.0/16","Backend":{"Type":"ipip","directRouting":true}}"#,
        )
        .unwrap();
        assert_eq!(n.backend.kind, BackendKind::Ipip);
        assert!(n.backend.direct_routing);
        let err = NetConfig::parse(
            "/k",
            br#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56","Backend":{"Type":"ipip"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("IPv4 only"), "{err}");
        let err = NetConfig::parse(
            "/k",
            br#"{"Network":"10.244.0.0/16","Backend":{"Type":"ipip","DirectRouting":"yes"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("Backend"), "{err}");
        assert_eq!(
            lease_attrs("192.168.1.5".parse().unwrap()).to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"ipip"}"#
        );
    }

    #[test]
    fn routes_follow_the_leases() {
        let stored = |json: &str| StoredLease {
            attrs: LeaseAttrs::parse(json.as_bytes()).ok(),
            etcd_lease: 1,
            mod_revision: 1,
        };
        let own = SubnetKey::parse("10.244.9.0-24").unwrap();
        let mut leases = BTreeMap::new();
        leases.insert(
            own,
            stored(r#"{"PublicIP":"192.168.1.9","BackendType":"ipip"}"#),
        );
        leases.insert(
            SubnetKey::parse("10.244.1.0-24").unwrap(),
            stored(r#"{"PublicIP":"192.168.1.1","PublicIPv6":null,"BackendType":"ipip"}"#),
        );
        leases.insert(
            SubnetKey::parse("10.244.2.0-24").unwrap(),
            stored(r#"{"PublicIP":"172.16.0.2","BackendType":"ipip"}"#),
        );
        leases.insert(
            SubnetKey::parse("10.244.3.0-24").unwrap(),
            stored(r#"{"PublicIP":"192.168.1.3","BackendType":"vxlan"}"#),
        );
        leases.insert(SubnetKey::parse("10.244.4.0-24").unwrap(), stored("junk"));
        let underlay = ["192.168.1.0/24".parse().unwrap()];
        let peers = peers(&own, &leases);
        let r = plan(&peers, false, &underlay);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|p| !p.direct));
        let r = plan(&peers, true, &underlay);
        assert_eq!(
            r.iter().map(|p| p.direct).collect::<Vec<_>>(),
            [true, false]
        );
        let k = kernel_route(&r[1], 7, 2);
        assert_eq!(k.to_string(), "10.244.2.0/24 via 172.16.0.2 dev #7 onlink");
        assert_eq!(kernel_route(&r[0], 7, 2).oif, Some(2));
    }
}
