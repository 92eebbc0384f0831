//! Host-side helpers: `route_localnet` on the interface routing to the container (so DNATed
//! 127.0.0.1 traffic may leave lo), and flushing stale UDP conntrack entries.

use std::net::{IpAddr, Ipv4Addr};

use crate::error::PortmapError;
use netkit::netlink::RouteReplies;
use netkit::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netkit::packet_route::{AddressFamily, RouteNetlinkMessage};
use netkit::Socket;

use crate::config::{PortMapping, Protocol};

/// The ifindex the kernel would use to reach `ip` (`ip route get`).
fn route_get_oif(sock: &mut Socket, ip: Ipv4Addr) -> Result<Option<u32>, netkit::Error> {
    let mut msg = RouteMessage::default();
    msg.header.address_family = AddressFamily::Inet;
    msg.header.destination_prefix_length = 32;
    msg.attributes
        .push(RouteAttribute::Destination(RouteAddress::Inet(ip)));
    let replies = sock.request_as::<RouteReplies>(RouteNetlinkMessage::GetRoute(msg), 0)?;
    Ok(replies.iter().find_map(|m| match m {
        RouteNetlinkMessage::NewRoute(r) => r.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        }),
        _ => None,
    }))
}

/// Sets `net.ipv4.conf.<if>.route_localnet=1` on the interface routing to `container`.
/// No route (e.g. the bridge is gone) is not an error: there is nothing to hairpin through.
pub fn enable_route_localnet(container: IpAddr) -> Result<(), PortmapError> {
    let IpAddr::V4(ip) = container else {
        return Ok(());
    };
    let fail = PortmapError::RouteLocalnet;
    let mut sock = Socket::new().map_err(fail)?;
    let oif = match route_get_oif(&mut sock, ip) {
        Ok(Some(i)) => i,
        Ok(None) => return Ok(()),
        Err(e) if matches!(e.errno(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) => {
            return Ok(())
        }
        Err(e) => {
            return Err(fail(
                e.context(format!("failed to look up the route to {ip}")),
            ))
        }
    };
    let link = sock.link_by_index(oif).map_err(fail)?;
    netkit::sysctl::write_if_different(&format!("net/ipv4/conf/{}/route_localnet", link.name), "1")
        .map_err(fail)?;
    Ok(())
}

/// Deletes conntrack entries of UDP flows to the mapped host ports, so a flow that was
/// tracked before the mapping existed does not keep bypassing it. Best effort: uses the
/// `conntrack` tool when installed, and only logs failures.
pub fn flush_udp_conntrack(mappings: &[PortMapping], families: &[bool]) {
    let udp: Vec<&PortMapping> = mappings
        .iter()
        .filter(|m| m.protocol == Protocol::Udp)
        .collect();
    if udp.is_empty() || netkit::netfilter::exec::find_tool("conntrack").is_none() {
        return;
    }
    for v6 in families {
        let fam = if *v6 { "ipv6" } else { "ipv4" };
        for m in &udp {
            let port = m.host_port.to_string();
            let args = ["-D", "-f", fam, "-p", "udp", "--orig-port-dst", &port];
            match netkit::netfilter::exec::run("conntrack", &args, None, "conntrack") {
                // Exit 1 with "0 flow entries have been deleted" just means none matched.
                Ok(o) if o.success || o.stderr.contains("0 flow entries") => {}
                Ok(o) => eprintln!(
                    "portmap: failed to flush UDP conntrack for port {port}: {}",
                    o.stderr
                ),
                Err(e) => eprintln!("portmap: failed to flush UDP conntrack for port {port}: {e}"),
            }
        }
    }
}
