//! The kernel's blackhole route for this node's own subnet, at a high metric.
//!
//! Peers route the whole subnet to this node; before its first pod (before `cni0` and its
//! connected route exist) a packet to an unused pod address would otherwise follow the node's
//! default route back to the router, which sends it here again: a loop until the TTL runs out.
//! The blackhole drops it. A pod bridge's connected route for the subnet (metric 0) and pod
//! routes (longer prefixes) win over it, so it never carries pod traffic. It is the agent's
//! (not BIRD's: the kernel protocol writes only learned routes), and it goes when the backend
//! is shut down or the node's subnet changes. On a dual-stack network the node's IPv6 subnet
//! has one too, for the same reason.

use netkit::ipnetwork::IpNetwork;
use netkit::packet_route::route::{RouteProtocol, RouteType};
use netkit::Route;

use super::error::BgpError;

/// The blackhole's metric: above any route a bridge, DHCP or an operator adds.
pub const METRIC: u32 = 1_000_000;
/// `proto static`: a route no routing daemon owns (BIRD's are `proto bird`).
const PROTOCOL: RouteProtocol = RouteProtocol::Static;

/// The route, as added and as matched.
pub fn route(subnet: IpNetwork) -> Route {
    let mut r = Route::new(subnet);
    r.kind = Some(RouteType::BlackHole);
    r.protocol = Some(PROTOCOL);
    r.priority = Some(METRIC);
    r.table = Some(netkit::route::TABLE_MAIN);
    r
}

/// Whether `r` is one of ours: a blackhole at [`METRIC`] inside `network`.
fn is_ours(r: &Route, network: IpNetwork) -> bool {
    r.kind == Some(RouteType::BlackHole)
        && r.protocol == Some(PROTOCOL)
        && r.priority == Some(METRIC)
        && network.contains(r.dst.network())
        && r.dst.prefix() >= network.prefix()
}

fn family(network: IpNetwork) -> netkit::Family {
    match network {
        IpNetwork::V4(_) => netkit::Family::V4,
        IpNetwork::V6(_) => netkit::Family::V6,
    }
}

/// Puts the blackhole for `subnet` in the main table (idempotent).
pub fn install(subnet: IpNetwork) -> Result<(), BgpError> {
    let mut sock = netkit::Socket::new()?;
    sock.replace_route(&route(subnet))?;
    Ok(())
}

/// Removes our blackholes inside `network` other than `keep` (a subnet this node held
/// before); how many.
pub fn remove(network: IpNetwork, keep: Option<IpNetwork>) -> Result<usize, BgpError> {
    let mut sock = netkit::Socket::new()?;
    let routes = sock.routes(family(network), Some(netkit::route::TABLE_MAIN))?;
    let mut removed = 0;
    for r in routes.iter().filter(|r| is_ours(r, network)) {
        if keep.is_some_and(|k| r.dst == k) {
            continue;
        }
        match sock.delete_route(r) {
            Ok(()) => removed += 1,
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_blackholes_inside_the_network() {
        let net: IpNetwork = "10.244.0.0/16".parse().unwrap();
        let ours = route("10.244.2.0/24".parse().unwrap());
        assert!(is_ours(&ours, net));
        assert_eq!(ours.to_string(), "10.244.2.0/24 table 254 metric 1000000");
        let mut other_metric = ours.clone();
        other_metric.priority = Some(0);
        let mut unicast = ours.clone();
        unicast.kind = Some(RouteType::Unicast);
        let mut bird = ours.clone();
        bird.protocol = Some(RouteProtocol::Bird);
        let outside = route("10.245.2.0/24".parse().unwrap());
        let wider = route("10.0.0.0/8".parse().unwrap());
        for r in [other_metric, unicast, bird, outside, wider] {
            assert!(!is_ours(&r, net), "{r}");
        }
        // The IPv6 subnet's, inside the IPv6 network only.
        let net6: IpNetwork = "fd00:10:244::/56".parse().unwrap();
        let ours6 = route("fd00:10:244:2::/64".parse().unwrap());
        assert!(is_ours(&ours6, net6));
        assert!(!is_ours(&ours6, net) && !is_ours(&ours, net6));
        assert!(!is_ours(&route("fd00:10:245::/64".parse().unwrap()), net6));
    }
}
