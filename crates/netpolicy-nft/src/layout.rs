//! Names and shapes of the table's objects: the table, the verdict maps, the chains of the
//! isolated addresses, the plan's sets as nf_tables sets, and their elements' keys.

use std::net::IpAddr;

use netkit::netfilter::nf_tables::named_set::{concat_key, MapElement, NamedSet, SetKey};
use netkit::netfilter::nf_tables::{Family as NftFamily, Verdict};
use netpolicy::{AddrSet, Direction, Element, Family, Protocol, SetKind};

/// The table (family `inet`: IPv4 and IPv6 in one table).
pub const TABLE: &str = "ferrocni_policy";
/// The base chain, at the forward hook.
pub const FORWARD_CHAIN: &str = "forward";
/// Verdict map ids: fixed, the plan's sets number from [`FIRST_SET_ID`].
const MAP_IDS: [u32; 4] = [1, 2, 3, 4];
pub const FIRST_SET_ID: u32 = 5;

/// The verdict map of a direction and family: target address -> `jump <its chain>`.
pub fn map(direction: Direction, family: Family) -> NamedSet {
    let (name, id) = match (direction, family) {
        (Direction::Ingress, Family::V4) => ("ingress4", MAP_IDS[0]),
        (Direction::Ingress, Family::V6) => ("ingress6", MAP_IDS[1]),
        (Direction::Egress, Family::V4) => ("egress4", MAP_IDS[2]),
        (Direction::Egress, Family::V6) => ("egress6", MAP_IDS[3]),
    };
    NamedSet {
        family: NftFamily::Inet,
        table: TABLE.to_string(),
        name: name.to_string(),
        key: addr_key_type(family),
        interval: false,
        verdict_map: true,
        id,
    }
}

/// Every verdict map.
pub fn maps() -> [NamedSet; 4] {
    [
        map(Direction::Ingress, Family::V4),
        map(Direction::Ingress, Family::V6),
        map(Direction::Egress, Family::V4),
        map(Direction::Egress, Family::V6),
    ]
}

/// The chain of an isolated address in one direction, e.g. `ingress-10.1.2.3`.
pub fn chain_name(direction: Direction, addr: IpAddr) -> String {
    format!("{direction}-{addr}")
}

/// The map element sending `addr`'s traffic of `direction` to its chain.
pub fn map_element(direction: Direction, addr: IpAddr) -> MapElement {
    MapElement {
        key: addr_bytes(addr),
        verdict: Verdict::Jump(chain_name(direction, addr)),
    }
}

fn addr_key_type(family: Family) -> SetKey {
    match family {
        Family::V4 => SetKey::IPV4_ADDR,
        Family::V6 => SetKey::IPV6_ADDR,
    }
}

/// A plan's set as an nf_tables set.
pub fn set(name: &str, s: &AddrSet, id: u32) -> NamedSet {
    let v6 = s.family == Family::V6;
    NamedSet {
        family: NftFamily::Inet,
        table: TABLE.to_string(),
        name: name.to_string(),
        key: match s.kind {
            SetKind::Addresses | SetKind::Intervals => addr_key_type(s.family),
            SetKind::AddrPorts => SetKey::addr_proto_port(v6),
        },
        interval: s.kind == SetKind::Intervals,
        verdict_map: false,
        id,
    }
}

pub fn addr_bytes(addr: IpAddr) -> Vec<u8> {
    match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The IP protocol number.
pub fn protocol_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

/// The key of an element of an `Addresses` or `AddrPorts` set (`None` for an interval).
pub fn element_key(e: &Element) -> Option<Vec<u8>> {
    match e {
        Element::Addr(a) => Some(addr_bytes(*a)),
        Element::AddrPort(a, p, port) => Some(concat_key(&[
            &addr_bytes(*a),
            &[protocol_number(*p)],
            &port.to_be_bytes(),
        ])),
        Element::Interval(..) => None,
    }
}

/// The inclusive ranges of an `Intervals` set's elements.
pub fn interval_ranges<'a>(
    elements: impl IntoIterator<Item = &'a Element>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    elements
        .into_iter()
        .filter_map(|e| match e {
            Element::Interval(first, last) => Some((addr_bytes(*first), addr_bytes(*last))),
            _ => None,
        })
        .collect()
}
