//! Neighbour (ARP/NDP) and bridge FDB entries: build, replace, delete, dump.
//!
//! The message builders are public so callers that batch many requests (the vxlan overlay
//! reconciler) can send them without going through one round trip each.
//!
//! * A neighbour entry is `ip neigh replace IP lladdr MAC dev X nud permanent`.
//! * An FDB entry is `bridge fdb replace MAC dev X [dst IP] self permanent`: family
//!   AF_BRIDGE, flag NTF_SELF (spelled [`NeighbourFlags::Own`] in netlink-packet-route),
//!   NDA_LLADDR = MAC and, for a VXLAN device, NDA_DST = the remote underlay address.

use std::net::IpAddr;

use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::RouteType;
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::Result;
use crate::link::format_mac;
use crate::netlink::{
    NeighbourReplies, Socket, NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE,
};

/// One decoded RTM_NEWNEIGH: a neighbour-table entry (family inet/inet6) or an FDB entry
/// (family bridge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub ifindex: u32,
    pub family: AddressFamily,
    pub state: NeighbourState,
    pub flags: NeighbourFlags,
    /// NDA_DST: the neighbour's IP for inet entries, the remote endpoint for VXLAN FDB entries.
    pub destination: Option<IpAddr>,
    /// NDA_LLADDR; empty when the entry has none (e.g. an incomplete ARP entry).
    pub lladdr: Vec<u8>,
    /// NDA_MASTER: the bridge of a bridge-port FDB entry.
    pub master: Option<u32>,
    /// NDA_VNI of a VXLAN FDB entry, when the kernel reports one.
    pub vni: Option<u32>,
}

impl Neighbour {
    /// Decodes a kernel RTM_NEWNEIGH message.
    pub fn from_message(msg: &NeighbourMessage) -> Neighbour {
        let mut n = Neighbour {
            ifindex: msg.header.ifindex,
            family: msg.header.family,
            state: msg.header.state,
            flags: msg.header.flags,
            destination: None,
            lladdr: Vec::new(),
            master: None,
            vni: None,
        };
        for attr in &msg.attributes {
            match attr {
                NeighbourAttribute::Destination(a) => n.destination = neighbour_ip(a),
                NeighbourAttribute::LinkLayerAddress(l) => n.lladdr = l.clone(),
                NeighbourAttribute::Controller(m) if *m != 0 => n.master = Some(*m),
                NeighbourAttribute::Vni(v) => n.vni = Some(*v),
                _ => {}
            }
        }
        n
    }

    /// NUD_PERMANENT (static entries we or an admin programmed, never learned ones).
    pub fn is_permanent(&self) -> bool {
        self.state == NeighbourState::Permanent
    }

    /// The link-layer address as a 6-byte MAC, when it is one.
    pub fn mac(&self) -> Option<[u8; 6]> {
        self.lladdr.as_slice().try_into().ok()
    }
}

/// NDA_DST decodes as `Other(bytes)` for AF_BRIDGE; read 4 or 16 bytes as an address.
fn neighbour_ip(a: &NeighbourAddress) -> Option<IpAddr> {
    match a {
        NeighbourAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        NeighbourAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        NeighbourAddress::Other(bytes) => match bytes.len() {
            4 => <[u8; 4]>::try_from(bytes.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(bytes.as_slice())
                .ok()
                .map(IpAddr::from),
            _ => None,
        },
        _ => None,
    }
}

fn family_of(ip: &IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn neighbour_address(ip: &IpAddr) -> NeighbourAddress {
    match ip {
        IpAddr::V4(v4) => NeighbourAddress::Inet(*v4),
        IpAddr::V6(v6) => NeighbourAddress::Inet6(*v6),
    }
}

/// NDA_DST of an AF_BRIDGE message: raw address bytes (the family says "bridge", not "inet").
fn fdb_destination(ip: &IpAddr) -> NeighbourAddress {
    match ip {
        IpAddr::V4(v4) => NeighbourAddress::Other(v4.octets().to_vec()),
        IpAddr::V6(v6) => NeighbourAddress::Other(v6.octets().to_vec()),
    }
}

/// A permanent neighbour entry `ip` → `mac` on `ifindex` (for RTM_NEWNEIGH with
/// CREATE|REPLACE, or RTM_DELNEIGH, which only looks at the ifindex and `ip`).
pub fn neighbour_message(ifindex: u32, ip: IpAddr, mac: &[u8]) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = family_of(&ip);
    msg.header.ifindex = ifindex;
    msg.header.state = NeighbourState::Permanent;
    msg.header.kind = RouteType::Unicast;
    msg.attributes
        .push(NeighbourAttribute::Destination(neighbour_address(&ip)));
    if !mac.is_empty() {
        msg.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    }
    msg
}

/// A permanent `self` FDB entry `mac` [→ `dst`] on `ifindex` (AF_BRIDGE + NTF_SELF), for
/// RTM_NEWNEIGH or RTM_DELNEIGH. On a VXLAN device `dst` selects the remote VTEP; a delete
/// without `dst` removes every remote of that MAC.
pub fn fdb_message(ifindex: u32, mac: &[u8; 6], dst: Option<IpAddr>) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = AddressFamily::Bridge;
    msg.header.ifindex = ifindex;
    msg.header.state = NeighbourState::Permanent;
    msg.header.flags = NeighbourFlags::Own;
    msg.attributes
        .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    if let Some(dst) = dst {
        msg.attributes
            .push(NeighbourAttribute::Destination(fdb_destination(&dst)));
    }
    msg
}

/// A dump request for `family` neighbours, filtered to `ifindex` when given.
/// Strict checking wants the inet filter as NDA_IFINDEX and the bridge filter in the header.
pub fn dump_request(family: AddressFamily, ifindex: Option<u32>) -> NeighbourMessage {
    let mut msg = NeighbourMessage::default();
    msg.header.family = family;
    if let Some(index) = ifindex {
        if family == AddressFamily::Bridge {
            msg.header.ifindex = index;
        } else {
            msg.attributes.push(NeighbourAttribute::IfIndex(index));
        }
    }
    msg
}

/// One message of a neighbour dump, kept when it is a neighbour on `ifindex` (any when `None`;
/// old kernels ignore the dump filter, so it is applied here again).
fn decode_dumped(m: RouteNetlinkMessage, ifindex: Option<u32>) -> Option<Neighbour> {
    match m {
        RouteNetlinkMessage::NewNeighbour(n) => {
            Some(Neighbour::from_message(&n)).filter(|n| ifindex.is_none_or(|i| n.ifindex == i))
        }
        _ => None,
    }
}

impl Socket {
    /// `ip neigh replace IP lladdr MAC dev X nud permanent`
    pub fn replace_neighbour(&mut self, ifindex: u32, ip: IpAddr, mac: &[u8]) -> Result<()> {
        let msg = neighbour_message(ifindex, ip, mac);
        self.request_ack(
            RouteNetlinkMessage::NewNeighbour(msg),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(|e| {
            e.context(format!(
                "failed to set neighbour {ip} lladdr {} on link {ifindex}",
                format_mac(mac)
            ))
        })
    }

    /// `ip neigh add IP lladdr MAC dev X nud permanent` (EEXIST when an entry exists: `is_exists()`).
    pub fn add_neighbour(&mut self, ifindex: u32, ip: IpAddr, mac: &[u8]) -> Result<()> {
        let msg = neighbour_message(ifindex, ip, mac);
        self.request_ack(
            RouteNetlinkMessage::NewNeighbour(msg),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| {
            e.context(format!(
                "failed to add neighbour {ip} lladdr {} on link {ifindex}",
                format_mac(mac)
            ))
        })
    }

    /// `ip neigh del IP dev X` (ENOENT when absent: `is_not_found()`).
    pub fn delete_neighbour(&mut self, ifindex: u32, ip: IpAddr) -> Result<()> {
        let msg = neighbour_message(ifindex, ip, &[]);
        self.request_ack(RouteNetlinkMessage::DelNeighbour(msg), 0)
            .map_err(|e| e.context(format!("failed to delete neighbour {ip} on link {ifindex}")))
    }

    /// Every `family` (inet or inet6) neighbour entry, of `ifindex` only when given.
    pub fn neighbours(
        &mut self,
        family: AddressFamily,
        ifindex: Option<u32>,
    ) -> Result<Vec<Neighbour>> {
        self.dump_map_as::<NeighbourReplies, _>(
            RouteNetlinkMessage::GetNeighbour(dump_request(family, ifindex)),
            0,
            |m| decode_dumped(m, ifindex),
        )
        .map_err(|e| e.context(format!("failed to list {family} neighbours")))
    }

    /// `bridge fdb replace MAC dev X [dst IP] self permanent`
    pub fn replace_fdb(&mut self, ifindex: u32, mac: &[u8; 6], dst: Option<IpAddr>) -> Result<()> {
        self.request_ack(
            RouteNetlinkMessage::NewNeighbour(fdb_message(ifindex, mac, dst)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
        .map_err(|e| {
            e.context(format!(
                "failed to set FDB entry {}{} on link {ifindex}",
                format_mac(mac),
                dst_text(dst)
            ))
        })
    }

    /// `bridge fdb add MAC dev X [dst IP] self permanent` (EEXIST when the MAC has an entry).
    pub fn add_fdb(&mut self, ifindex: u32, mac: &[u8; 6], dst: Option<IpAddr>) -> Result<()> {
        self.request_ack(
            RouteNetlinkMessage::NewNeighbour(fdb_message(ifindex, mac, dst)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| {
            e.context(format!(
                "failed to add FDB entry {}{} on link {ifindex}",
                format_mac(mac),
                dst_text(dst)
            ))
        })
    }

    /// `bridge fdb append MAC dev X dst IP self permanent` (adds one more remote to a MAC,
    /// e.g. the all-zeros flood entry of a VXLAN device).
    pub fn append_fdb(&mut self, ifindex: u32, mac: &[u8; 6], dst: IpAddr) -> Result<()> {
        self.request_ack(
            RouteNetlinkMessage::NewNeighbour(fdb_message(ifindex, mac, Some(dst))),
            NLM_F_CREATE | NLM_F_APPEND,
        )
        .map_err(|e| {
            e.context(format!(
                "failed to append FDB entry {} dst {dst} on link {ifindex}",
                format_mac(mac)
            ))
        })
    }

    /// `bridge fdb del MAC dev X [dst IP] self` (ENOENT when absent: `is_not_found()`).
    pub fn delete_fdb(&mut self, ifindex: u32, mac: &[u8; 6], dst: Option<IpAddr>) -> Result<()> {
        self.request_ack(
            RouteNetlinkMessage::DelNeighbour(fdb_message(ifindex, mac, dst)),
            0,
        )
        .map_err(|e| {
            e.context(format!(
                "failed to delete FDB entry {}{} on link {ifindex}",
                format_mac(mac),
                dst_text(dst)
            ))
        })
    }

    /// FDB entries (AF_BRIDGE) of `ifindex` (its `self` entries for a VXLAN device, or a
    /// bridge port's entries), or of every device when `None`.
    pub fn fdb_entries(&mut self, ifindex: Option<u32>) -> Result<Vec<Neighbour>> {
        self.dump_map_as::<NeighbourReplies, _>(
            RouteNetlinkMessage::GetNeighbour(dump_request(AddressFamily::Bridge, ifindex)),
            0,
            |m| decode_dumped(m, ifindex),
        )
        .map_err(|e| e.context("failed to list FDB entries"))
    }
}

fn dst_text(dst: Option<IpAddr>) -> String {
    dst.map(|d| format!(" dst {d}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{Emitable, Parseable};
    use std::net::Ipv4Addr;

    fn round_trip(msg: &NeighbourMessage) -> NeighbourMessage {
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.emit(&mut buf);
        NeighbourMessage::parse(buf.as_slice()).unwrap()
    }

    #[test]
    fn fdb_message_is_self_permanent_with_raw_destination() {
        let mac = [0x02, 1, 2, 3, 4, 5];
        let msg = fdb_message(7, &mac, Some(IpAddr::V4(Ipv4Addr::new(192, 168, 1, 11))));
        let parsed = Neighbour::from_message(&round_trip(&msg));
        assert_eq!(parsed.family, AddressFamily::Bridge);
        assert_eq!(parsed.flags, NeighbourFlags::Own);
        assert!(parsed.is_permanent());
        assert_eq!(parsed.mac(), Some(mac));
        assert_eq!(parsed.destination, Some("192.168.1.11".parse().unwrap()));
        assert_eq!(parsed.ifindex, 7);
    }

    #[test]
    fn neighbour_message_is_permanent_unicast() {
        let msg = neighbour_message(3, "10.244.1.0".parse().unwrap(), &[2, 0, 0, 0, 0, 1]);
        assert_eq!(msg.header.kind, RouteType::Unicast);
        let parsed = Neighbour::from_message(&round_trip(&msg));
        assert_eq!(parsed.family, AddressFamily::Inet);
        assert_eq!(parsed.destination, Some("10.244.1.0".parse().unwrap()));
        assert_eq!(parsed.lladdr, vec![2, 0, 0, 0, 0, 1]);
        assert!(parsed.is_permanent());
    }

    #[test]
    fn dump_filters_follow_strict_check_rules() {
        let inet = dump_request(AddressFamily::Inet, Some(4));
        assert_eq!(inet.header.ifindex, 0);
        assert_eq!(inet.attributes, vec![NeighbourAttribute::IfIndex(4)]);
        let bridge = dump_request(AddressFamily::Bridge, Some(4));
        assert_eq!(bridge.header.ifindex, 4);
        assert!(bridge.attributes.is_empty());
    }

    #[test]
    fn decode_dump_applies_ifindex_filter() {
        let a = neighbour_message(1, "10.0.0.1".parse().unwrap(), &[2, 0, 0, 0, 0, 1]);
        let b = neighbour_message(2, "10.0.0.2".parse().unwrap(), &[2, 0, 0, 0, 0, 2]);
        let replies = vec![
            RouteNetlinkMessage::NewNeighbour(a),
            RouteNetlinkMessage::NewNeighbour(b),
        ];
        let got: Vec<Neighbour> = replies
            .into_iter()
            .filter_map(|m| decode_dumped(m, Some(2)))
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].destination, Some("10.0.0.2".parse().unwrap()));
    }
}
