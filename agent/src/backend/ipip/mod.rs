//! flannel's `ipip` backend: pod packets to another node are wrapped in one outer IPv4
//! header (IP protocol 4) by the `flannel.ipip` tunnel (local = this node's address, no
//! fixed remote), routed per peer as `<peer subnet> via <peer PublicIP> dev flannel.ipip
//! onlink`. With `DirectRouting`, a peer on the node's own underlay subnet is reached
//! without the tunnel (`via <PublicIP> dev <underlay>`), as flannel's host-gw does.
//! MTU = underlay − 20. The lease is `{"PublicIP":…,"PublicIPv6":null,"BackendType":"ipip"}`.

mod error;

use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::{IpNetwork, Ipv4Network};
use netkit::link_kinds::NewLinkBase;
use netkit::{Family, Route};
use serde::Deserialize;

use crate::backend::underlay::{ensure_addresses, Underlay};
use crate::backend::{
    Backend, BackendError, BackendObject, DataPlane, Need, Network, Node, Pass, Peer, Refusal,
    Registration,
};
use crate::log;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
pub use error::IpipError;

pub const REGISTRATION: Registration = Registration {
    names: &["ipip"],
    description: "IP-in-IP tunnel (flannel.ipip), IPv4 only",
    needs: &[Need::Kernel("ipip")],
    flags: &[],
    parse: parse_backend,
};

pub const DEVICE: &str = "flannel.ipip";
/// The outer IPv4 header.
pub const OVERHEAD: u32 = 20;

#[derive(Deserialize)]
struct RawIpip {
    #[serde(rename = "DirectRouting", default)]
    direct_routing: bool,
}

/// The `ipip` backend's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipip {
    /// Peers on the underlay's own subnet get a plain route (flannel's host-gw shortcut).
    pub direct_routing: bool,
}

/// The `Backend` object of a `"Type":"ipip"` config.
fn parse_backend(map: &BackendObject, net: &Network) -> Result<Box<dyn Backend>, String> {
    let raw: RawIpip = libcni::gojson::from_map(map).map_err(|e| format!("\"Backend\": {e}"))?;
    if net.dual_stack() {
        return Err(
            "the ipip backend carries IPv4 only; EnableIPv6 needs another backend (vxlan, host-gw, wireguard)"
                .into(),
        );
    }
    Ok(Box::new(Ipip {
        direct_routing: raw.direct_routing,
    }))
}

impl Backend for Ipip {
    fn type_name(&self) -> &'static str {
        "ipip"
    }

    fn describe(&self) -> String {
        format!(
            "ipip{}",
            if self.direct_routing {
                ", DirectRouting"
            } else {
                ""
            }
        )
    }

    fn mtu_overhead(&self) -> u32 {
        OVERHEAD
    }

    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal> {
        if attrs.backend_type == "ipip" {
            Ok(())
        } else {
            Err(Refusal::OtherBackend)
        }
    }

    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError> {
        Ok(Box::new(IpipPlane {
            direct_routing: self.direct_routing,
            network: node.network.v4,
            iface: node.iface(),
            public_ip: node.public_ip,
            last_report: None,
        }))
    }
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

/// The peers among the peer leases: every other ipip lease, `(subnet, PublicIP)` (flannel's
/// route network skips leases of other backends).
pub fn peers(own: &SubnetKey, leases: &[Peer]) -> Vec<(Ipv4Network, Ipv4Addr)> {
    leases
        .iter()
        .filter(|p| p.key != *own && p.attrs.backend_type == "ipip")
        .map(|p| (p.key.v4, p.attrs.public_ip))
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

/// The ipip backend on this node.
struct IpipPlane {
    direct_routing: bool,
    network: Ipv4Network,
    iface: Option<String>,
    public_ip: Ipv4Addr,
    /// The last pass's report, so unchanged passes stay out of the log.
    last_report: Option<String>,
}

impl DataPlane for IpipPlane {
    fn lease_attrs(&self, _key: &SubnetKey) -> LeaseAttrs {
        lease_attrs(self.public_ip)
    }

    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError> {
        let peers = self::peers(own, peers);
        let underlay =
            Underlay::find(self.iface.as_deref(), self.public_ip).map_err(IpipError::Kernel)?;
        let routes = plan(&peers, self.direct_routing, &underlay.networks);
        let (mtu, report) = apply_ipip(self.network, own.v4, self.public_ip, &routes, &underlay)
            .map_err(IpipError::Kernel)?;
        let mut log = Vec::new();
        if self.last_report.as_deref() != Some(&report) {
            log.push(report.clone());
            self.last_report = Some(report);
        }
        Ok(Pass {
            mtu,
            programmed: peers.len(),
            log,
            lease_attrs: None,
        })
    }
}

/// `flannel.ipip` created or corrected, then its peer routes synced.
fn apply_ipip(
    network: Ipv4Network,
    own: Ipv4Network,
    local: Ipv4Addr,
    routes: &[PeerRoute],
    underlay: &Underlay,
) -> Result<(u32, String), String> {
    let want_mtu = underlay.mtu_less(OVERHEAD)?;
    let mut sock = netkit::Socket::new().map_err(|e| e.to_string())?;
    let create = |sock: &mut netkit::Socket| -> Result<netkit::Link, String> {
        let base = NewLinkBase {
            name: DEVICE,
            mtu: Some(want_mtu),
            ..Default::default()
        };
        sock.create_link(netkit::link_kinds::ipip_message(&base, local))
            .map_err(|e| {
                if e.errno() == Some(libc::EOPNOTSUPP) {
                    "this kernel has no ipip module (CONFIG_NET_IPIP)".to_string()
                } else {
                    e.to_string()
                }
            })?;
        sock.link_by_name(DEVICE).map_err(|e| e.to_string())
    };
    let link = match sock.find_link(DEVICE).map_err(|e| e.to_string())? {
        None => create(&mut sock)?,
        Some(l) => match netkit::link_kinds::ipip_endpoints(&l) {
            None => {
                return Err(format!(
                    "{} exists but is not an ipip device; remove it",
                    DEVICE
                ))
            }
            // Another local address (the node's address changed) or a fixed remote: made
            // again, as flanneld does.
            Some((l_ip, remote)) if l_ip != Some(IpAddr::V4(local)) || remote => {
                log!(
                    "{} has local {l_ip:?}{}; recreating it",
                    DEVICE,
                    if remote { " and a fixed remote" } else { "" }
                );
                sock.delete_link(l.index).map_err(|e| e.to_string())?;
                create(&mut sock)?
            }
            Some(_) => l,
        },
    };
    // As flannel: only ever lowered (an operator may have set a smaller one).
    let mtu = if link.mtu == 0 || link.mtu > want_mtu {
        sock.set_link_mtu(link.index, want_mtu)
            .map_err(|e| e.to_string())?;
        want_mtu
    } else {
        link.mtu
    };
    let own_addr = IpNetwork::new(own.network().into(), 32).map_err(|e| e.to_string())?;
    ensure_addresses(&mut sock, link.index, &[own_addr])?;
    if !link.is_up() {
        sock.set_link_up(link.index).map_err(|e| e.to_string())?;
    }
    let want: Vec<Route> = routes
        .iter()
        .map(|r| kernel_route(r, link.index, underlay.index))
        .collect();
    let key = |r: &Route| (r.dst_network(), r.gateway, r.oif);
    // Ours: every route through the tunnel, and gateway routes into the cluster network on
    // the underlay (DirectRouting ones), never the node's own subnet.
    let have: Vec<Route> = sock
        .routes(Family::V4, Some(netkit::route::TABLE_MAIN))
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|r| {
            r.oif == Some(link.index)
                || (r.oif == Some(underlay.index)
                    && r.gateway.is_some()
                    && r.dst.prefix() > network.prefix()
                    && network.contains(match r.dst.network() {
                        IpAddr::V4(v4) => v4,
                        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
                    })
                    && r.dst_network() != IpNetwork::V4(own))
        })
        .collect();
    let (mut added, mut removed) = (0, 0);
    for r in &have {
        if !want.iter().any(|w| key(w) == key(r)) {
            sock.delete_route(r).map_err(|e| e.to_string())?;
            removed += 1;
        }
    }
    for w in &want {
        if !have.iter().any(|r| key(r) == key(w)) {
            sock.replace_route(w).map_err(|e| e.to_string())?;
            added += 1;
        }
    }
    Ok((
        mtu,
        format!(
            "ipip reconciled: {} peer route(s) ({added} added, {removed} removed), {} MTU {mtu}",
            want.len(),
            DEVICE
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::parse_config;
    use crate::manager::StoredLease;
    use std::collections::BTreeMap;

    #[test]
    fn config_and_lease() {
        let (_, b) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"ipip","directRouting":true}}"#,
        )
        .unwrap();
        let ipip = b.as_any().downcast_ref::<Ipip>().unwrap();
        assert!(ipip.direct_routing);
        let err = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56","Backend":{"Type":"ipip"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("IPv4 only"), "{err}");
        let err = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"ipip","DirectRouting":"yes"}}"#,
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
        let stored = StoredLease::from_json;
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
        let leases: Vec<Peer> = leases
            .iter()
            .filter_map(|(key, l)| {
                Some(Peer {
                    key: *key,
                    attrs: l.attrs.clone().ok()?,
                })
            })
            .collect();
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
