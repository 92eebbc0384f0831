//! The desired overlay state of one node, computed from the config, the peers and facts
//! about the node (its underlay address and on-link prefixes). Pure: no kernel access.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::config::{inside, overlaps, Mode, OverlayConfig};
use crate::mac::vtep_mac;
use crate::peers::{Peer, PeerSet};
use rustc_hash::FxHashMap;

/// Facts about this node needed to plan.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    /// Underlay source address (VXLAN local, host-gw identity).
    pub local_ip: IpAddr,
    /// Prefixes of the underlay interface's addresses: peers inside are on-link.
    pub on_link: Vec<IpNetwork>,
}

/// How one peer is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerRoute {
    /// Through the VXLAN device: neighbour `vtep` → `mac`, FDB `mac` → `underlay`, route
    /// `subnet via vtep onlink`.
    Vxlan {
        vtep: IpAddr,
        mac: [u8; 6],
        underlay: IpAddr,
    },
    /// Plain route `subnet via gateway dev <underlay>`.
    HostGw { gateway: IpAddr },
}

/// What the kernel should hold for this node.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The cluster network.
    pub network: IpNetwork,
    /// This node's pod subnet.
    pub subnet: IpNetwork,
    /// This node's VTEP address (the subnet's network address) and MAC.
    pub vtep: IpAddr,
    pub vtep_mac: [u8; 6],
    /// Whether the VXLAN device must exist.
    pub device: bool,
    /// Peer subnet → how to reach it, with the origin of the entry for messages.
    pub peers: BTreeMap<IpNetwork, (PeerRoute, String)>,
    /// Entries that were skipped, one line each.
    pub problems: Vec<String>,
}

/// Finds this node's subnet: the configured one, else the peer entry carrying the node's
/// underlay address. Also returns a `vtepMAC` given for the node itself.
pub fn own_subnet(
    cfg: &OverlayConfig,
    peers: &PeerSet,
    local_ip: IpAddr,
) -> Option<(IpNetwork, Option<[u8; 6]>)> {
    let own_entry = peers
        .peers
        .iter()
        .find(|p| p.ip == local_ip && cfg.subnet.is_none_or(|s| s == p.subnet));
    match (cfg.subnet, own_entry) {
        (Some(s), entry) => Some((s, entry.and_then(|p| p.vtep_mac))),
        (None, Some(p)) => Some((p.subnet, p.vtep_mac)),
        (None, None) => None,
    }
}

/// Computes the desired state. `subnet`/`own_mac` come from [`own_subnet`].
pub fn desired_state(
    cfg: &OverlayConfig,
    peers: &PeerSet,
    facts: &NodeFacts,
    subnet: IpNetwork,
    own_mac: Option<[u8; 6]>,
) -> Desired {
    let vtep = subnet.network();
    let mut d = Desired {
        network: cfg.network,
        subnet,
        vtep,
        vtep_mac: own_mac.unwrap_or_else(|| vtep_mac(vtep)),
        device: cfg.mode.uses_device(),
        peers: BTreeMap::new(),
        problems: peers.problems.clone(),
    };
    let mut macs: FxHashMap<[u8; 6], &str> = FxHashMap::default();
    macs.insert(d.vtep_mac, "this node");
    let mut underlays: FxHashMap<IpAddr, &str> = FxHashMap::default();
    let mut ranges = Ranges::default();
    for peer in &peers.peers {
        if is_self(peer, subnet, facts.local_ip) {
            // A half-matching entry means the list and this node disagree: say so.
            if peer.ip != facts.local_ip || peer.subnet != subnet {
                d.problems.push(format!(
                    "ignoring peer {}: it claims this node's {} but has {} {} (this node: {} {})",
                    peer.origin,
                    if peer.ip == facts.local_ip {
                        "address"
                    } else {
                        "subnet"
                    },
                    if peer.ip == facts.local_ip {
                        "subnet"
                    } else {
                        "address"
                    },
                    if peer.ip == facts.local_ip {
                        peer.subnet.to_string()
                    } else {
                        peer.ip.to_string()
                    },
                    facts.local_ip,
                    subnet
                ));
            }
            continue;
        }
        match plan_peer(cfg, facts, subnet, peer) {
            Err(why) => d
                .problems
                .push(format!("ignoring peer {}: {why}", peer.origin)),
            Ok(route) => {
                if let Some((existing, first)) = d.peers.get(&peer.subnet) {
                    // The same node listed twice (inline and in the file) is harmless.
                    if *existing == route {
                        continue;
                    }
                    d.problems.push(format!(
                        "ignoring peer {}: subnet {} is already used by {first}",
                        peer.origin, peer.subnet
                    ));
                    continue;
                }
                if let Some(other) = ranges.overlapping(peer.subnet) {
                    d.problems.push(format!(
                        "ignoring peer {}: subnet {} overlaps {other}",
                        peer.origin, peer.subnet
                    ));
                    continue;
                }
                if let Some(first) = underlays.get(&peer.ip) {
                    d.problems.push(format!(
                        "ignoring peer {}: ip {} is already used by {first}",
                        peer.origin, peer.ip
                    ));
                    continue;
                }
                if let PeerRoute::Vxlan { mac, .. } = &route {
                    if let Some(first) = macs.get(mac) {
                        d.problems.push(format!(
                            "ignoring peer {}: VTEP MAC already used by {first}",
                            peer.origin
                        ));
                        continue;
                    }
                    macs.insert(*mac, &peer.origin);
                }
                underlays.insert(peer.ip, &peer.origin);
                ranges.insert(peer.subnet);
                d.peers.insert(peer.subnet, (route, peer.origin.clone()));
            }
        }
    }
    d
}

/// Accepted peer subnets (all of the network's family) as disjoint address ranges, for
/// O(log n) overlap checks.
#[derive(Default)]
struct Ranges(BTreeMap<u128, (u128, IpNetwork)>);

impl Ranges {
    fn bounds(net: IpNetwork) -> (u128, u128) {
        match net {
            IpNetwork::V4(n) => (
                u128::from(u32::from(n.network())),
                u128::from(u32::from(n.broadcast())),
            ),
            IpNetwork::V6(n) => {
                let start = u128::from(n.network());
                let host_bits = 128 - u32::from(n.prefix());
                let span = 1u128.checked_shl(host_bits).map_or(u128::MAX, |s| s - 1);
                (start, start | span)
            }
        }
    }

    /// An accepted subnet overlapping `net`, if any. Ranges are disjoint, so only the
    /// nearest range starting at or before `net` and the first one starting inside it matter.
    fn overlapping(&self, net: IpNetwork) -> Option<IpNetwork> {
        let (start, end) = Self::bounds(net);
        if let Some((_, (prev_end, other))) = self.0.range(..=start).next_back() {
            if *prev_end >= start {
                return Some(*other);
            }
        }
        self.0
            .range(start..=end)
            .next()
            .map(|(_, (_, other))| *other)
    }

    fn insert(&mut self, net: IpNetwork) {
        let (start, end) = Self::bounds(net);
        self.0.insert(start, (end, net));
    }
}

/// The node's own entry in a shared list: same underlay address, or same subnet.
fn is_self(peer: &Peer, subnet: IpNetwork, local_ip: IpAddr) -> bool {
    peer.ip == local_ip || peer.subnet == subnet
}

fn plan_peer(
    cfg: &OverlayConfig,
    facts: &NodeFacts,
    subnet: IpNetwork,
    peer: &Peer,
) -> Result<PeerRoute, String> {
    if !inside(peer.subnet, cfg.network) {
        return Err(format!(
            "subnet {} is not inside network {}",
            peer.subnet, cfg.network
        ));
    }
    if overlaps(peer.subnet, subnet) {
        return Err(format!(
            "subnet {} overlaps this node's subnet {subnet}",
            peer.subnet
        ));
    }
    let on_link = facts.on_link.iter().any(|n| n.contains(peer.ip));
    let same_family = peer.ip.is_ipv4() == facts.local_ip.is_ipv4();
    // A plain route needs a gateway of the pod subnet's own family.
    let gateway_family = peer.ip.is_ipv4() == peer.subnet.is_ipv4();
    let host_gw = match cfg.mode {
        Mode::HostGw => {
            if !on_link {
                return Err(format!(
                    "host-gw needs {} on a subnet of the underlay interface",
                    peer.ip
                ));
            }
            if !gateway_family {
                return Err(format!(
                    "host-gw needs a gateway of the pod subnet's family for {}, got {}",
                    peer.subnet, peer.ip
                ));
            }
            true
        }
        Mode::Vxlan => false,
        Mode::Auto => on_link && gateway_family,
    };
    if host_gw {
        return Ok(PeerRoute::HostGw { gateway: peer.ip });
    }
    if !same_family {
        return Err(format!(
            "underlay address {} is not of the same family as the local address {}",
            peer.ip, facts.local_ip
        ));
    }
    let vtep = peer.subnet.network();
    Ok(PeerRoute::Vxlan {
        vtep,
        mac: peer.vtep_mac.unwrap_or_else(|| vtep_mac(vtep)),
        underlay: peer.ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(mode: &str) -> OverlayConfig {
        let v = json!({"network": "10.244.0.0/16", "peersFile": "/unused", "mode": mode});
        let serde_json::Value::Object(m) = v else {
            unreachable!()
        };
        OverlayConfig::from_map(&m).unwrap()
    }

    fn peers(list: serde_json::Value) -> PeerSet {
        let mut s = PeerSet::default();
        s.extend_from_values(list.as_array().unwrap(), "peers");
        s
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            local_ip: "192.168.1.10".parse().unwrap(),
            on_link: vec!["192.168.1.0/24".parse().unwrap()],
        }
    }

    fn cluster() -> PeerSet {
        peers(json!([
            {"subnet": "10.244.0.0/24", "ip": "192.168.1.10"},
            {"subnet": "10.244.1.0/24", "ip": "192.168.1.11"},
            {"subnet": "10.244.2.0/24", "ip": "192.168.9.12"},
        ]))
    }

    #[test]
    fn self_is_found_and_skipped() {
        let c = cfg("vxlan");
        let p = cluster();
        let (subnet, mac) = own_subnet(&c, &p, facts().local_ip).unwrap();
        assert_eq!(subnet.to_string(), "10.244.0.0/24");
        assert_eq!(mac, None);
        let d = desired_state(&c, &p, &facts(), subnet, mac);
        assert_eq!(d.peers.len(), 2);
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        assert_eq!(d.vtep, "10.244.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(d.vtep_mac, vtep_mac(d.vtep));
        let (route, _) = &d.peers[&"10.244.1.0/24".parse().unwrap()];
        assert_eq!(
            route,
            &PeerRoute::Vxlan {
                vtep: "10.244.1.0".parse().unwrap(),
                mac: vtep_mac("10.244.1.0".parse().unwrap()),
                underlay: "192.168.1.11".parse().unwrap()
            }
        );
    }

    #[test]
    fn auto_mode_picks_host_gw_on_link_only() {
        let c = cfg("auto");
        let d = desired_state(
            &c,
            &cluster(),
            &facts(),
            "10.244.0.0/24".parse().unwrap(),
            None,
        );
        assert!(matches!(
            d.peers[&"10.244.1.0/24".parse().unwrap()].0,
            PeerRoute::HostGw { .. }
        ));
        assert!(matches!(
            d.peers[&"10.244.2.0/24".parse().unwrap()].0,
            PeerRoute::Vxlan { .. }
        ));
        assert!(d.device);
    }

    #[test]
    fn host_gw_rejects_off_link_peers_only() {
        let c = cfg("host-gw");
        let d = desired_state(
            &c,
            &cluster(),
            &facts(),
            "10.244.0.0/24".parse().unwrap(),
            None,
        );
        assert_eq!(d.peers.len(), 1);
        assert_eq!(d.problems.len(), 1);
        assert!(d.problems[0].contains("192.168.9.12"), "{:?}", d.problems);
        assert!(!d.device);
    }

    #[test]
    fn conflicting_entries_are_reported() {
        let c = cfg("vxlan");
        let p = peers(json!([
            {"subnet": "10.244.1.0/24", "ip": "192.168.1.11"},
            {"subnet": "10.244.1.0/24", "ip": "192.168.1.12"},
            {"subnet": "10.244.1.128/25", "ip": "192.168.1.13"},
            {"subnet": "10.245.1.0/24", "ip": "192.168.1.14"},
            {"subnet": "10.244.5.0/24", "ip": "192.168.1.11"},
            {"subnet": "10.244.6.0/24", "ip": "fd00::6"},
            {"subnet": "10.244.0.0/23", "ip": "192.168.1.15"},
        ]));
        let d = desired_state(&c, &p, &facts(), "10.244.0.0/24".parse().unwrap(), None);
        assert_eq!(d.peers.len(), 1, "{:?}", d.problems);
        assert_eq!(d.problems.len(), 6, "{:?}", d.problems);
    }

    #[test]
    fn half_matching_self_entries_are_reported() {
        let c = cfg("vxlan");
        let p = peers(json!([
            {"subnet": "10.244.9.0/24", "ip": "192.168.1.10"},
            {"subnet": "10.244.0.0/24", "ip": "192.168.1.99"},
        ]));
        let d = desired_state(&c, &p, &facts(), "10.244.0.0/24".parse().unwrap(), None);
        assert!(d.peers.is_empty());
        assert_eq!(d.problems.len(), 2, "{:?}", d.problems);
    }

    #[test]
    fn identical_duplicates_are_merged_silently() {
        let c = cfg("vxlan");
        let p = peers(json!([
            {"subnet": "10.244.1.0/24", "ip": "192.168.1.11"},
            {"subnet": "10.244.1.0/24", "ip": "192.168.1.11"},
        ]));
        let d = desired_state(&c, &p, &facts(), "10.244.0.0/24".parse().unwrap(), None);
        assert_eq!((d.peers.len(), d.problems.len()), (1, 0));
    }

    #[test]
    fn ipv6_overlay_over_an_ipv6_underlay() {
        let v = json!({"network": "fd00:10:244::/56", "peersFile": "/unused", "mode": "auto"});
        let serde_json::Value::Object(m) = v else {
            unreachable!()
        };
        let c = OverlayConfig::from_map(&m).unwrap();
        let facts = NodeFacts {
            local_ip: "fd00:1::10".parse().unwrap(),
            on_link: vec!["fd00:1::/64".parse().unwrap()],
        };
        let p = peers(json!([
            {"subnet": "fd00:10:244:1::/64", "ip": "fd00:1::10"},
            {"subnet": "fd00:10:244:2::/64", "ip": "fd00:1::11"},
            {"subnet": "fd00:10:244:3::/64", "ip": "fd00:9::12"},
            {"subnet": "fd00:10:244:2:8000::/65", "ip": "fd00:9::13"},
            {"subnet": "10.244.4.0/24", "ip": "fd00:9::14"},
            {"subnet": "fd00:10:244:5::/64", "ip": "192.168.1.15"},
        ]));
        let (subnet, _) = own_subnet(&c, &p, facts.local_ip).unwrap();
        assert_eq!(subnet.to_string(), "fd00:10:244:1::/64");
        let d = desired_state(&c, &p, &facts, subnet, None);
        assert_eq!(d.vtep, "fd00:10:244:1::".parse::<IpAddr>().unwrap());
        // On-link peer: a plain IPv6 route; off-link: VXLAN; overlapping, foreign-family
        // subnet and other-family underlay entries are reported.
        assert!(matches!(
            d.peers[&"fd00:10:244:2::/64".parse().unwrap()].0,
            PeerRoute::HostGw { .. }
        ));
        let (route, _) = &d.peers[&"fd00:10:244:3::/64".parse().unwrap()];
        assert_eq!(
            route,
            &PeerRoute::Vxlan {
                vtep: "fd00:10:244:3::".parse().unwrap(),
                mac: vtep_mac("fd00:10:244:3::".parse().unwrap()),
                underlay: "fd00:9::12".parse().unwrap()
            }
        );
        assert_eq!(d.peers.len(), 2);
        assert_eq!(d.problems.len(), 3, "{:?}", d.problems);
    }

    #[test]
    fn own_mac_from_list_wins() {
        let c = cfg("vxlan");
        let p = peers(
            json!([{"subnet": "10.244.0.0/24", "ip": "192.168.1.10", "vtepMAC": "0e:00:00:00:00:01"}]),
        );
        let (subnet, mac) = own_subnet(&c, &p, facts().local_ip).unwrap();
        let d = desired_state(&c, &p, &facts(), subnet, mac);
        assert_eq!(d.vtep_mac, [0x0e, 0, 0, 0, 0, 1]);
        assert!(d.peers.is_empty());
        assert!(own_subnet(&c, &PeerSet::default(), facts().local_ip).is_none());
    }
}
