//! Diff between the desired state and what the kernel holds: the list of operations to
//! apply, in a safe order. Pure: observed state comes in as plain data.
//!
//! Ownership: we only ever touch neighbour and FDB entries on our VXLAN device, and routes
//! that carry our route protocol or sit on our device (kernel-made connected routes
//! excluded). Everything else on the host is left alone, even when it is in the way.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netkit::link::format_mac;
use netkit::packet_route::route::{RouteProtocol, RouteScope, RouteType};
use netkit::route::{Route, TABLE_MAIN};

use crate::desired::{Desired, PeerRoute};
use rustc_hash::{FxHashMap, FxHashSet};

/// The `rtm_protocol` marking routes programmed by this plugin (`proto 90` in `ip route`).
/// Unassigned in iproute2's rt_protos list.
pub const ROUTE_PROTOCOL: u8 = 90;

/// What the kernel holds, as far as the plan cares.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Permanent neighbour entries (of the network's family) on our device: address → lladdr.
    pub neighbours: Vec<(IpAddr, Vec<u8>)>,
    /// FDB entries on our device: MAC → remote.
    pub fdb: Vec<([u8; 6], Option<IpAddr>)>,
    /// Every route of the main table of the network's family.
    pub routes: Vec<Route>,
}

/// One kernel change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    DeleteRoute(Route),
    SetNeighbour { ip: IpAddr, mac: [u8; 6] },
    DeleteNeighbour { ip: IpAddr },
    SetFdb { mac: [u8; 6], dst: IpAddr },
    DeleteFdb { mac: [u8; 6], dst: Option<IpAddr> },
    SetRoute(Route),
}

impl Op {
    /// `ip`-like text for reports and errors.
    pub fn describe(&self) -> String {
        match self {
            Op::DeleteRoute(r) => format!("delete route {r}"),
            Op::SetNeighbour { ip, mac } => {
                format!("set neighbour {ip} lladdr {}", format_mac(mac))
            }
            Op::DeleteNeighbour { ip } => format!("delete neighbour {ip}"),
            Op::SetFdb { mac, dst } => format!("set fdb {} dst {dst}", format_mac(mac)),
            Op::DeleteFdb { mac, dst } => match dst {
                Some(d) => format!("delete fdb {} dst {d}", format_mac(mac)),
                None => format!("delete fdb {}", format_mac(mac)),
            },
            Op::SetRoute(r) => format!("set route {r}"),
        }
    }
}

/// The changes of one pass, grouped in the order they must be applied: stale routes go
/// first (no traffic towards entries about to vanish), then neighbour/FDB changes, then the
/// new routes last (flannel's rule: a route before its neighbour entry makes the kernel ARP
/// for the VTEP address).
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub route_deletes: Vec<Op>,
    pub l2_changes: Vec<Op>,
    pub route_sets: Vec<Op>,
    /// Desired entries already right.
    pub unchanged: usize,
    /// Peers whose route would clobber a route we do not own.
    pub problems: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.route_deletes.is_empty() && self.l2_changes.is_empty() && self.route_sets.is_empty()
    }
}

/// Interface indexes the plan needs.
#[derive(Debug, Clone, Copy)]
pub struct Links {
    /// Our VXLAN device, when it exists.
    pub device: Option<u32>,
    pub underlay: u32,
}

/// The metric of the route to `subnet`: its index inside the cluster `network`, plus one.
///
/// Why not 0 like flannel: the kernel hashes IPv4 routes' shared nexthop info (`fib_info`)
/// by protocol, scope, metric and device but not by gateway, so thousands of routes that
/// differ only in their gateway pile up in one hash chain and each insert walks it
/// (5,000 peers: ~0.6 s instead of ~0.15 s). Distinct metrics spread them; since every
/// peer subnet is a distinct destination, the metric changes nothing else. IPv6 uses the
/// same rule (an index past `u32::MAX - 1` saturates: such networks share the last metric).
pub fn route_metric(network: IpNetwork, subnet: IpNetwork) -> u32 {
    let (offset, bits) = match (network, subnet) {
        (IpNetwork::V4(n), IpNetwork::V4(s)) => (
            u128::from(u32::from(s.network()).wrapping_sub(u32::from(n.network()))),
            32,
        ),
        (IpNetwork::V6(n), IpNetwork::V6(s)) => (
            u128::from(s.network()).wrapping_sub(u128::from(n.network())),
            128,
        ),
        _ => return 1,
    };
    let index = offset
        .checked_shr(bits - u32::from(subnet.prefix()))
        .unwrap_or(0);
    u32::try_from(index).unwrap_or(u32::MAX).saturating_add(1)
}

/// The route we program for one peer.
pub fn peer_route(
    network: IpNetwork,
    subnet: IpNetwork,
    route: &PeerRoute,
    links: Links,
) -> Option<Route> {
    let (gw, oif, onlink) = match route {
        PeerRoute::Vxlan { vtep, .. } => (*vtep, links.device?, true),
        PeerRoute::HostGw { gateway } => (*gateway, links.underlay, false),
    };
    let mut r = Route::new(subnet).via(gw).dev(oif);
    r.onlink = onlink;
    r.protocol = Some(RouteProtocol::Other(ROUTE_PROTOCOL));
    r.scope = Some(RouteScope::Universe);
    r.kind = Some(RouteType::Unicast);
    r.table = Some(TABLE_MAIN);
    r.priority = Some(route_metric(network, subnet));
    Some(r)
}

/// A route this network manages: on our VXLAN device, or tagged with our protocol and inside
/// this network's cluster range (so two overlay networks on one node leave each other alone).
fn is_ours(r: &Route, network: IpNetwork, links: Links) -> bool {
    if r.table_id() != TABLE_MAIN || r.kind.is_some_and(|k| k != RouteType::Unicast) {
        return false;
    }
    let proto = r.protocol.map(u8::from);
    let inside_network = crate::config::inside(r.dst_network(), network);
    (proto == Some(ROUTE_PROTOCOL) && inside_network)
        || (links.device.is_some()
            && r.oif == links.device
            && r.protocol != Some(RouteProtocol::Kernel))
}

/// Whether the kernel route `have` is exactly the route `want` we would program.
fn same_route(have: &Route, want: &Route) -> bool {
    have.gateway == want.gateway
        && have.oif == want.oif
        && have.onlink == want.onlink
        && have.protocol.map(u8::from) == want.protocol.map(u8::from)
        && have.priority.unwrap_or(0) == want.priority.unwrap_or(0)
        && have.mtu.is_none()
        && have.src.is_none()
        && have.scope == want.scope
}

/// Diffs `desired` against `observed`.
pub fn plan(desired: &Desired, observed: &Observed, links: Links) -> Plan {
    let mut p = Plan::default();

    // Desired L2 entries (only with a device).
    let mut want_neigh: BTreeMap<IpAddr, [u8; 6]> = BTreeMap::new();
    let mut want_fdb: FxHashMap<[u8; 6], IpAddr> = FxHashMap::default();
    if links.device.is_some() {
        for (route, _) in desired.peers.values() {
            if let PeerRoute::Vxlan {
                vtep,
                mac,
                underlay,
            } = route
            {
                want_neigh.insert(*vtep, *mac);
                want_fdb.insert(*mac, *underlay);
            }
        }
    }

    // Routes: index ours and foreign ones by destination.
    let mut ours: FxHashMap<IpNetwork, Vec<&Route>> = FxHashMap::default();
    let mut foreign: FxHashMap<IpNetwork, &Route> = FxHashMap::default();
    for r in &observed.routes {
        if is_ours(r, desired.network, links) {
            ours.entry(r.dst_network()).or_default().push(r);
        } else if r.table_id() == TABLE_MAIN {
            foreign.insert(r.dst_network(), r);
        }
    }
    let mut wanted_dsts = FxHashSet::default();
    for (subnet, (route, origin)) in &desired.peers {
        let Some(want) = peer_route(desired.network, *subnet, route, links) else {
            continue;
        };
        let dst = *subnet;
        wanted_dsts.insert(dst);
        let have = ours.get(&dst).map(Vec::as_slice).unwrap_or(&[]);
        if have.len() == 1 && same_route(have[0], &want) {
            p.unchanged += 1;
            continue;
        }
        if have.is_empty() {
            if let Some(other) = foreign.get(&dst) {
                p.problems.push(format!("peer {origin}: not touching existing route {other} (not ours); remove it to let the overlay reach {subnet}"));
                // Its L2 entries are harmless without the route; keep them so a later pass only adds the route.
                continue;
            }
        }
        // Ours with another metric go; replace rewrites the one with the wanted metric.
        for r in have
            .iter()
            .filter(|r| r.priority.unwrap_or(0) != want.priority.unwrap_or(0))
        {
            p.route_deletes.push(Op::DeleteRoute(delete_selector(r)));
        }
        p.route_sets.push(Op::SetRoute(want));
    }
    for (dst, rs) in &ours {
        if !wanted_dsts.contains(dst) {
            for r in rs {
                p.route_deletes.push(Op::DeleteRoute(delete_selector(r)));
            }
        }
    }

    // Neighbours on our device.
    let mut seen_neigh = FxHashSet::default();
    for (ip, lladdr) in &observed.neighbours {
        seen_neigh.insert(*ip);
        match want_neigh.get(ip) {
            Some(mac) if lladdr.as_slice() == mac.as_slice() => p.unchanged += 1,
            Some(mac) => p.l2_changes.push(Op::SetNeighbour { ip: *ip, mac: *mac }),
            None => p.l2_changes.push(Op::DeleteNeighbour { ip: *ip }),
        }
    }
    for (ip, mac) in &want_neigh {
        if !seen_neigh.contains(ip) {
            p.l2_changes.push(Op::SetNeighbour { ip: *ip, mac: *mac });
        }
    }

    // FDB on our device: exactly one remote per wanted MAC.
    let mut fdb_ok = FxHashSet::default();
    for (mac, dst) in &observed.fdb {
        match want_fdb.get(mac) {
            Some(want) if dst.as_ref() == Some(want) && !fdb_ok.contains(mac) => {
                fdb_ok.insert(*mac);
                p.unchanged += 1;
            }
            _ => p.l2_changes.push(Op::DeleteFdb {
                mac: *mac,
                dst: *dst,
            }),
        }
    }
    let mut sets: Vec<_> = want_fdb
        .iter()
        .filter(|(mac, _)| !fdb_ok.contains(*mac))
        .collect();
    sets.sort();
    for (mac, dst) in sets {
        p.l2_changes.push(Op::SetFdb {
            mac: *mac,
            dst: *dst,
        });
    }
    // Deletes before sets within the L2 group, so a MAC moving to a new remote ends up right.
    p.l2_changes
        .sort_by_key(|op| !matches!(op, Op::DeleteFdb { .. } | Op::DeleteNeighbour { .. }));
    p
}

/// The selector deleting exactly `r` (destination, table, metric, protocol, gateway, device).
fn delete_selector(r: &Route) -> Route {
    let mut d = Route::new(r.dst_network());
    d.gateway = r.gateway;
    d.oif = r.oif;
    d.table = Some(r.table_id());
    d.priority = r.priority;
    d.protocol = r.protocol;
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mac::vtep_mac;
    use std::net::Ipv4Addr;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    const DEV: u32 = 10;
    const UNDER: u32 = 2;
    const LINKS: Links = Links {
        device: Some(DEV),
        underlay: UNDER,
    };

    fn desired(peers: &[(&str, PeerRoute)]) -> Desired {
        Desired {
            network: "10.244.0.0/16".parse().unwrap(),
            subnet: "10.244.0.0/24".parse().unwrap(),
            vtep: v4(10, 244, 0, 0),
            vtep_mac: vtep_mac(v4(10, 244, 0, 0)),
            device: true,
            peers: peers
                .iter()
                .map(|(s, r)| (s.parse().unwrap(), (r.clone(), format!("peer {s}"))))
                .collect(),
            problems: vec![],
        }
    }

    fn vx(n: u8, under: &str) -> PeerRoute {
        let vtep = v4(10, 244, n, 0);
        PeerRoute::Vxlan {
            vtep,
            mac: vtep_mac(vtep),
            underlay: under.parse().unwrap(),
        }
    }

    /// What the kernel would hold after applying `plan` to an empty node.
    fn apply_to_empty(d: &Desired) -> Observed {
        let p = plan(d, &Observed::default(), LINKS);
        let mut o = Observed::default();
        for op in p.l2_changes.iter().chain(&p.route_sets) {
            match op {
                Op::SetNeighbour { ip, mac } => o.neighbours.push((*ip, mac.to_vec())),
                Op::SetFdb { mac, dst } => o.fdb.push((*mac, Some(*dst))),
                Op::SetRoute(r) => o.routes.push(r.clone()),
                other => panic!("unexpected {other:?}"),
            }
        }
        o
    }

    #[test]
    fn empty_node_gets_three_entries_per_vxlan_peer_and_one_route_per_host_gw_peer() {
        let d = desired(&[
            ("10.244.1.0/24", vx(1, "192.168.1.11")),
            (
                "10.244.2.0/24",
                PeerRoute::HostGw {
                    gateway: "192.168.1.12".parse().unwrap(),
                },
            ),
        ]);
        let p = plan(&d, &Observed::default(), LINKS);
        assert_eq!(p.l2_changes.len(), 2);
        assert_eq!(p.route_sets.len(), 2);
        assert!(p.route_deletes.is_empty());
        let Op::SetRoute(r) = &p.route_sets[0] else {
            panic!()
        };
        assert!(r.onlink && r.oif == Some(DEV));
        let Op::SetRoute(r) = &p.route_sets[1] else {
            panic!()
        };
        assert!(!r.onlink && r.oif == Some(UNDER));
    }

    #[test]
    fn applied_plan_is_a_fixed_point() {
        let d = desired(&[
            ("10.244.1.0/24", vx(1, "192.168.1.11")),
            ("10.244.2.0/24", vx(2, "192.168.1.12")),
        ]);
        let o = apply_to_empty(&d);
        let p = plan(&d, &o, LINKS);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(p.unchanged, 6);
    }

    #[test]
    fn removed_peer_loses_exactly_its_entries_and_foreign_routes_survive() {
        let full = desired(&[
            ("10.244.1.0/24", vx(1, "192.168.1.11")),
            ("10.244.2.0/24", vx(2, "192.168.1.12")),
        ]);
        let mut o = apply_to_empty(&full);
        let mut foreign = Route::new("172.16.0.0/16".parse().unwrap())
            .via("192.168.1.1".parse().unwrap())
            .dev(UNDER);
        foreign.protocol = Some(RouteProtocol::Boot);
        o.routes.push(foreign);
        let mut connected = Route::new("192.168.1.0/24".parse().unwrap()).dev(UNDER);
        connected.protocol = Some(RouteProtocol::Kernel);
        o.routes.push(connected);
        let shrunk = desired(&[("10.244.1.0/24", vx(1, "192.168.1.11"))]);
        let p = plan(&shrunk, &o, LINKS);
        assert_eq!(p.route_deletes.len(), 1);
        let Op::DeleteRoute(r) = &p.route_deletes[0] else {
            panic!()
        };
        assert_eq!(r.dst.to_string(), "10.244.2.0/24");
        let vtep2 = v4(10, 244, 2, 0);
        assert_eq!(
            p.l2_changes,
            vec![
                Op::DeleteNeighbour { ip: vtep2 },
                Op::DeleteFdb {
                    mac: vtep_mac(vtep2),
                    dst: Some("192.168.1.12".parse().unwrap())
                }
            ]
        );
        assert!(p.route_sets.is_empty());
    }

    #[test]
    fn moved_peer_is_replaced() {
        let before = desired(&[("10.244.1.0/24", vx(1, "192.168.1.11"))]);
        let o = apply_to_empty(&before);
        let after = desired(&[("10.244.1.0/24", vx(1, "192.168.1.99"))]);
        let p = plan(&after, &o, LINKS);
        let mac = vtep_mac(v4(10, 244, 1, 0));
        assert_eq!(
            p.l2_changes,
            vec![
                Op::DeleteFdb {
                    mac,
                    dst: Some("192.168.1.11".parse().unwrap())
                },
                Op::SetFdb {
                    mac,
                    dst: "192.168.1.99".parse().unwrap()
                }
            ]
        );
        assert!(p.route_sets.is_empty() && p.route_deletes.is_empty());
        // Switching the same peer to host-gw rewrites the route and drops its L2 entries.
        let gw = desired(&[(
            "10.244.1.0/24",
            PeerRoute::HostGw {
                gateway: "192.168.1.11".parse().unwrap(),
            },
        )]);
        let p = plan(&gw, &o, LINKS);
        assert_eq!(p.route_sets.len(), 1);
        assert_eq!(p.l2_changes.len(), 2);
    }

    #[test]
    fn foreign_route_for_a_peer_subnet_is_not_clobbered() {
        let d = desired(&[("10.244.1.0/24", vx(1, "192.168.1.11"))]);
        let mut foreign = Route::new("10.244.1.0/24".parse().unwrap())
            .via("192.168.1.1".parse().unwrap())
            .dev(UNDER);
        foreign.protocol = Some(RouteProtocol::Static);
        foreign.table = Some(TABLE_MAIN);
        let o = Observed {
            routes: vec![foreign],
            ..Default::default()
        };
        let p = plan(&d, &o, LINKS);
        assert!(p.route_sets.is_empty() && p.route_deletes.is_empty());
        assert_eq!(p.problems.len(), 1);
    }

    #[test]
    fn metrics_are_distinct_per_subnet() {
        let net: IpNetwork = "10.244.0.0/16".parse().unwrap();
        assert_eq!(route_metric(net, "10.244.0.0/24".parse().unwrap()), 1);
        assert_eq!(route_metric(net, "10.244.7.0/24".parse().unwrap()), 8);
        assert_eq!(route_metric(net, "10.244.255.0/24".parse().unwrap()), 256);
        assert_eq!(
            route_metric("0.0.0.0/0".parse().unwrap(), "10.0.0.0/8".parse().unwrap()),
            11
        );
        assert_eq!(
            route_metric(
                "10.0.0.0/8".parse().unwrap(),
                "10.1.2.3/32".parse().unwrap()
            ),
            66052
        );
    }

    #[test]
    fn ipv6_metrics_follow_the_same_rule() {
        let net: IpNetwork = "fd00:10:244::/56".parse().unwrap();
        assert_eq!(route_metric(net, "fd00:10:244::/64".parse().unwrap()), 1);
        assert_eq!(route_metric(net, "fd00:10:244:7::/64".parse().unwrap()), 8);
        let wide: IpNetwork = "fd00::/8".parse().unwrap();
        assert_eq!(
            route_metric(wide, "fdff:ffff:ffff:ffff::/64".parse().unwrap()),
            u32::MAX
        );
        assert_eq!(route_metric(net, "10.0.0.0/8".parse().unwrap()), 1);
    }

    #[test]
    fn ipv6_peers_get_neighbour_fdb_and_onlink_route() {
        let vtep: IpAddr = "fd00:10:244:1::".parse().unwrap();
        let mut d = desired(&[]);
        d.network = "fd00:10:244::/56".parse().unwrap();
        d.subnet = "fd00:10:244::/64".parse().unwrap();
        d.peers.insert(
            "fd00:10:244:1::/64".parse().unwrap(),
            (
                PeerRoute::Vxlan {
                    vtep,
                    mac: vtep_mac(vtep),
                    underlay: "fd00:1::11".parse().unwrap(),
                },
                "p".into(),
            ),
        );
        let o = apply_to_empty(&d);
        assert_eq!(o.neighbours, vec![(vtep, vtep_mac(vtep).to_vec())]);
        assert_eq!(o.routes.len(), 1);
        assert!(o.routes[0].onlink && o.routes[0].gateway == Some(vtep));
        assert_eq!(o.routes[0].priority, Some(2));
        assert!(plan(&d, &o, LINKS).is_empty());
        // A route of ours for a subnet of this IPv6 network that no peer has is stale.
        let mut stale = o.clone();
        let mut r = o.routes[0].clone();
        r.dst = "fd00:10:244:9::/64".parse().unwrap();
        stale.routes.push(r);
        assert_eq!(plan(&d, &stale, LINKS).route_deletes.len(), 1);
    }

    #[test]
    fn route_with_other_metric_is_swapped() {
        let d = desired(&[("10.244.1.0/24", vx(1, "192.168.1.11"))]);
        let mut o = apply_to_empty(&d);
        o.routes[0].priority = Some(0);
        let p = plan(&d, &o, LINKS);
        assert_eq!(p.route_deletes.len(), 1);
        assert_eq!(p.route_sets.len(), 1);
    }

    #[test]
    fn without_device_vxlan_peers_get_nothing_and_l2_is_cleared() {
        let d = desired(&[("10.244.1.0/24", vx(1, "192.168.1.11"))]);
        let links = Links {
            device: None,
            underlay: UNDER,
        };
        let p = plan(&d, &Observed::default(), links);
        assert!(p.is_empty());
    }
}
