//! Routes: add, replace, delete, list (IPv4 and IPv6).

use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::addr::Family;
use crate::error::{Error, Result};
use crate::netlink::{RouteReplies, Socket, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};

/// The main routing table.
pub const TABLE_MAIN: u32 = 254;
/// The local routing table.
pub const TABLE_LOCAL: u32 = 255;
const RT_TABLE_COMPAT: u8 = 252;

/// A route. Unset options are left to kernel defaults, except as noted on each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix (0.0.0.0/0 or ::/0 for a default route). Host bits are ignored.
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub oif: Option<u32>,
    /// Preferred source address.
    pub src: Option<IpAddr>,
    /// RTNH_F_ONLINK: the gateway is reachable on `oif` even without a matching prefix.
    pub onlink: bool,
    /// `None` means the main table.
    pub table: Option<u32>,
    /// `None` means RTPROT_BOOT when adding (what `ip route add` and the Go plugins send),
    /// "any" when deleting.
    pub protocol: Option<RouteProtocol>,
    /// `None` means universe when adding, "any" when deleting.
    pub scope: Option<RouteScope>,
    /// Unicast unless set.
    pub kind: Option<RouteType>,
    /// Metric.
    pub priority: Option<u32>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
}

impl Route {
    /// A route to `dst` with everything else unset.
    pub fn new(dst: IpNetwork) -> Route {
        Route {
            dst,
            gateway: None,
            oif: None,
            src: None,
            onlink: false,
            table: None,
            protocol: None,
            scope: None,
            kind: None,
            priority: None,
            mtu: None,
            advmss: None,
        }
    }

    /// Sets the gateway.
    pub fn via(mut self, gw: IpAddr) -> Route {
        self.gateway = Some(gw);
        self
    }

    /// Sets the output interface.
    pub fn dev(mut self, oif: u32) -> Route {
        self.oif = Some(oif);
        self
    }

    /// The destination with host bits cleared (what the kernel stores).
    pub fn dst_network(&self) -> IpNetwork {
        IpNetwork::new(self.dst.network(), self.dst.prefix()).unwrap_or(self.dst)
    }

    /// The family of the destination.
    pub fn family(&self) -> Family {
        Family::of(self.dst.ip())
    }

    /// The table this route lives in (main when unset).
    pub fn table_id(&self) -> u32 {
        self.table.unwrap_or(TABLE_MAIN)
    }

    /// Decodes a kernel RTM_NEWROUTE message; `None` for non-IP families.
    pub fn from_message(msg: &RouteMessage) -> Option<Route> {
        let h = &msg.header;
        let mut dst = None;
        let mut route = Route::new(IpNetwork::new(unspecified(h)?, 0).ok()?);
        route.onlink = h.flags.contains(RouteFlags::Onlink);
        route.table = Some(u32::from(h.table));
        route.protocol = Some(h.protocol);
        route.scope = Some(h.scope);
        route.kind = Some(h.kind);
        for attr in &msg.attributes {
            match attr {
                RouteAttribute::Destination(a) => dst = route_ip(a),
                RouteAttribute::Gateway(a) => route.gateway = route_ip(a),
                RouteAttribute::PrefSource(a) => route.src = route_ip(a),
                RouteAttribute::Oif(i) => route.oif = Some(*i),
                RouteAttribute::Table(t) => route.table = Some(*t),
                RouteAttribute::Priority(p) => route.priority = Some(*p),
                RouteAttribute::Metrics(ms) => {
                    for m in ms {
                        match m {
                            RouteMetric::Mtu(v) => route.mtu = Some(*v),
                            RouteMetric::Advmss(v) => route.advmss = Some(*v),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        let ip = dst.unwrap_or(route.dst.ip());
        route.dst = IpNetwork::new(ip, h.destination_prefix_length).ok()?;
        Some(route)
    }

    /// Builds the RTM_*ROUTE message. `for_delete` leaves unset selectors as wildcards.
    pub fn to_message(&self, for_delete: bool) -> Result<RouteMessage> {
        let dst = self.dst_network();
        if let Some(gw) = self.gateway {
            if Family::of(gw) != self.family() {
                return Err(Error::invalid(
                    format!("invalid route {self}"),
                    "gateway and destination families differ",
                ));
            }
        }
        let mut msg = RouteMessage::default();
        let h = &mut msg.header;
        h.address_family = self.family().to_af();
        h.destination_prefix_length = dst.prefix();
        let table = self.table_id();
        h.table = u8::try_from(table).unwrap_or(RT_TABLE_COMPAT);
        h.protocol = match (self.protocol, for_delete) {
            (Some(p), _) => p,
            (None, false) => RouteProtocol::Boot,
            (None, true) => RouteProtocol::Unspec,
        };
        h.scope = match (self.scope, for_delete) {
            (Some(s), _) => s,
            (None, false) => RouteScope::Universe,
            (None, true) => RouteScope::NoWhere,
        };
        h.kind = match (self.kind, for_delete) {
            (Some(k), _) => k,
            (None, false) => RouteType::Unicast,
            (None, true) => RouteType::Unspec,
        };
        if self.onlink {
            h.flags |= RouteFlags::Onlink;
        }
        let a = &mut msg.attributes;
        a.push(RouteAttribute::Table(table));
        if dst.prefix() > 0 {
            a.push(RouteAttribute::Destination(to_route_address(dst.ip())));
        }
        if let Some(gw) = self.gateway {
            a.push(RouteAttribute::Gateway(to_route_address(gw)));
        }
        if let Some(src) = self.src {
            a.push(RouteAttribute::PrefSource(to_route_address(src)));
        }
        if let Some(oif) = self.oif {
            a.push(RouteAttribute::Oif(oif));
        }
        if let Some(p) = self.priority {
            a.push(RouteAttribute::Priority(p));
        }
        let mut metrics = Vec::new();
        if let Some(m) = self.mtu {
            metrics.push(RouteMetric::Mtu(m));
        }
        if let Some(m) = self.advmss {
            metrics.push(RouteMetric::Advmss(m));
        }
        if !metrics.is_empty() {
            a.push(RouteAttribute::Metrics(metrics));
        }
        Ok(msg)
    }
}

impl fmt::Display for Route {
    /// `ip route`-like text, used in error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dst_network())?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        if let Some(oif) = self.oif {
            write!(f, " dev #{oif}")?;
        }
        if let Some(t) = self.table {
            write!(f, " table {t}")?;
        }
        if let Some(p) = self.priority {
            write!(f, " metric {p}")?;
        }
        if self.onlink {
            write!(f, " onlink")?;
        }
        Ok(())
    }
}

fn unspecified(h: &RouteHeader) -> Option<IpAddr> {
    match u8::from(h.address_family) as i32 {
        libc::AF_INET => Some(IpAddr::from([0u8; 4])),
        libc::AF_INET6 => Some(IpAddr::from([0u8; 16])),
        _ => None,
    }
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn to_route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}

impl Socket {
    /// `ip route add ...` (CREATE|EXCL: EEXIST if an identical route exists).
    pub fn add_route(&mut self, route: &Route) -> Result<()> {
        self.send_route(route, NLM_F_CREATE | NLM_F_EXCL, "add")
    }

    /// `ip route prepend ...` (CREATE alone): a route to a destination that already has one
    /// through another next hop goes beside it, first in line (IPv6: a multipath sibling);
    /// EEXIST only for an identical route. The reference's IPAM routes are added this way
    /// (`RouteAddEcmp`), so each network of a container gets its default route, and the
    /// container keeps one when the first network goes.
    pub fn prepend_route(&mut self, route: &Route) -> Result<()> {
        self.send_route(route, NLM_F_CREATE, "add")
    }

    /// `ip route replace ...` (idempotent).
    pub fn replace_route(&mut self, route: &Route) -> Result<()> {
        self.send_route(route, NLM_F_CREATE | NLM_F_REPLACE, "replace")
    }

    /// `ip route del ...`; ESRCH (`is_not_found()`) when no such route.
    pub fn delete_route(&mut self, route: &Route) -> Result<()> {
        let msg = match route.to_message(true) {
            Ok(m) => m,
            Err(e) => return Err(e.context(self.route_text_for_error("delete", route))),
        };
        let res = self.request_ack(RouteNetlinkMessage::DelRoute(msg), 0);
        res.map_err(|e| e.context(self.route_text_for_error("delete", route)))
    }

    /// Routes of `family` in `table` (every table when `None`). Cached/cloned entries are skipped.
    pub fn routes(&mut self, family: Family, table: Option<u32>) -> Result<Vec<Route>> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family.to_af();
        self.dump_map_as::<RouteReplies, _>(RouteNetlinkMessage::GetRoute(msg), 0, |m| match m {
            RouteNetlinkMessage::NewRoute(r) if !r.header.flags.contains(RouteFlags::Cloned) => {
                Route::from_message(&r).filter(|r| {
                    family.matches(r.dst.ip()) && table.is_none_or(|t| r.table_id() == t)
                })
            }
            _ => None,
        })
        .map_err(|e| e.context("failed to list routes"))
    }

    fn send_route(&mut self, route: &Route, flags: u16, verb: &str) -> Result<()> {
        let msg = match route.to_message(false) {
            Ok(m) => m,
            Err(e) => return Err(e.context(self.route_text_for_error(verb, route))),
        };
        let res = self.request_ack(RouteNetlinkMessage::NewRoute(msg), flags);
        res.map_err(|e| e.context(self.route_text_for_error(verb, route)))
    }

    /// "failed to add route 10.0.0.0/24 via 10.0.0.1 dev eth0" (device name looked up on failure).
    fn route_text_for_error(&mut self, verb: &str, route: &Route) -> String {
        let mut text = format!("failed to {verb} route {}", route.dst_network());
        if let Some(gw) = route.gateway {
            text.push_str(&format!(" via {gw}"));
        }
        if let Some(oif) = route.oif {
            text.push_str(&format!(" dev {}", self.describe_link(oif)));
        }
        if let Some(t) = route.table {
            text.push_str(&format!(" table {t}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_round_trip() {
        let mut r = Route::new("10.1.0.0/16".parse().unwrap())
            .via("10.0.0.1".parse().unwrap())
            .dev(4);
        r.onlink = true;
        r.priority = Some(100);
        r.mtu = Some(1400);
        r.table = Some(1000);
        let msg = r.to_message(false).unwrap();
        assert_eq!(msg.header.table, RT_TABLE_COMPAT);
        assert_eq!(msg.header.protocol, RouteProtocol::Boot);
        let back = Route::from_message(&msg).unwrap();
        assert_eq!(back.dst, r.dst);
        assert_eq!(back.gateway, r.gateway);
        assert_eq!(
            (back.oif, back.priority, back.mtu, back.table, back.onlink),
            (Some(4), Some(100), Some(1400), Some(1000), true)
        );
    }

    #[test]
    fn default_route_has_no_dst_attribute() {
        let r = Route::new("::/0".parse().unwrap()).via("fe80::1".parse().unwrap());
        let msg = r.to_message(false).unwrap();
        assert!(!msg
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::Destination(_))));
        assert_eq!(Route::from_message(&msg).unwrap().dst.to_string(), "::/0");
    }

    #[test]
    fn host_bits_are_cleared_and_families_checked() {
        let r = Route::new("10.1.2.3/24".parse().unwrap());
        assert_eq!(r.dst_network().to_string(), "10.1.2.0/24");
        let bad = Route::new("10.0.0.0/8".parse().unwrap()).via("::1".parse().unwrap());
        assert!(bad.to_message(false).is_err());
    }

    #[test]
    fn delete_uses_wildcards() {
        let msg = Route::new("10.0.0.0/8".parse().unwrap())
            .to_message(true)
            .unwrap();
        assert_eq!(msg.header.scope, RouteScope::NoWhere);
        assert_eq!(msg.header.protocol, RouteProtocol::Unspec);
    }
}
