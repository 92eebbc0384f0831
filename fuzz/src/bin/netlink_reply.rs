//! rtnetlink replies as netkit's socket reads them: one datagram read as the reply of a
//! chosen kind of request (framing, sequence matching, ACK/error/DONE, the per-request
//! decoders, netkit's own link decoder), then every message turned into netkit's values as
//! the lookups do (links and their kind data, addresses, routes, rules, neighbours, qdiscs,
//! filters). Invariants: a decoded route, rule or address encodes into a request that decodes
//! back to the same value (a route's or rule's prefixes as networks); a link re-encoded reads
//! back the same.
//!
//! Input: one byte choosing the request kind and whether it is a dump, then the datagram (its
//! first message's sequence number is the request's, so captured replies are seeds as they
//! are).
#![no_main]

use libfuzzer_sys::fuzz_target;
use netkit::fuzzing::{absorb, address_message, decode_ack, qdisc, u32_filter, ReplyKind};
use netkit::ipnetwork::IpNetwork;
use netkit::link_kinds::{ipip_endpoints, ipvlan_mode, macvlan_mode};
use netkit::neigh::Neighbour;
use netkit::packet_core::Emitable;
use netkit::packet_core::Parseable;
use netkit::packet_route::link::{InfoVxlan, LinkMessage};
use netkit::packet_route::route::RouteMessage;
use netkit::packet_route::rule::RuleMessage;
use netkit::packet_route::RouteNetlinkMessage;
use netkit::vxlan_link::VxlanParams;
use netkit::{Address, Link, Route, Rule};

fn reencoded<M: Emitable>(message: &M) -> Vec<u8> {
    let mut bytes = vec![0u8; message.buffer_len()];
    message.emit(&mut bytes);
    bytes
}

fn link(message: LinkMessage) {
    let link = Link::from_message(message.clone());
    let _ = (link.mac_string(), link.is_up(), link.bridge_info());
    let _ = (link.info_data::<InfoVxlan>(), link.ipv6_accept_ra());
    let _ = (
        macvlan_mode(&link),
        ipvlan_mode(&link),
        ipip_endpoints(&link),
    );
    let _ = VxlanParams::from_link(&link);
    // What a lookup kept of the link survives its own encoding.
    let again = Link::as_reported(&link.message);
    assert_eq!(again.index, link.index);
    assert_eq!(again.name, link.name);
    assert_eq!(again.mtu, link.mtu);
    assert_eq!(again.mac, link.mac);
    assert_eq!(again.master, link.master);
}

fn route(message: &RouteMessage) {
    let Some(route) = Route::from_message(message) else {
        return;
    };
    let Ok(request) = route.to_message(false) else {
        return;
    };
    let decoded =
        RouteMessage::parse(&reencoded(&request)[..]).expect("a route request built here decodes");
    let back = Route::from_message(&decoded).expect("a route request reads back as a route");
    // A request names the destination network (the kernel never reports host bits there).
    let sent = Route {
        dst: route.dst_network(),
        ..route
    };
    assert_eq!(back, sent, "route changed on encode -> decode");
}

fn rule(message: &RuleMessage) {
    let Some(rule) = Rule::from_message(message) else {
        return;
    };
    let Ok(request) = rule.to_message() else {
        return;
    };
    let decoded =
        RuleMessage::parse(&reencoded(&request)[..]).expect("a rule request built here decodes");
    let back = Rule::from_message(&decoded).expect("a rule request reads back as a rule");
    // As for routes, a request names networks (`from all` when the prefix is 0).
    let network = |n: Option<IpNetwork>| {
        n.map(|n| IpNetwork::new(n.network(), n.prefix()).expect("a network of its own prefix"))
    };
    let sent = Rule {
        src: network(rule.src),
        dst: network(rule.dst),
        ..rule
    };
    assert_eq!(back, sent, "rule changed on encode -> decode");
}

fn address(message: netkit::packet_route::address::AddressMessage) {
    let Some(address) = Address::from_message(message) else {
        return;
    };
    let request = address_message(address.index, address.address);
    let back = Address::from_message(request).expect("an address request reads back");
    assert_eq!(back.address, address.address);
    assert_eq!(back.index, address.index);
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, datagram)) = data.split_first() else {
        return;
    };
    let kind = ReplyKind::ALL[usize::from(selector & 0x0f) % ReplyKind::ALL.len()];
    let dump = selector & 0x80 != 0;
    let seq = datagram
        .get(8..12)
        .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let _ = decode_ack(seq, datagram);
    let Ok(reply) = absorb(kind, seq, dump, datagram) else {
        return;
    };
    for message in reply.messages {
        match message {
            RouteNetlinkMessage::NewLink(m) => link(m),
            RouteNetlinkMessage::NewAddress(m) => address(m),
            RouteNetlinkMessage::NewRoute(m) => route(&m),
            RouteNetlinkMessage::NewRule(m) => rule(&m),
            RouteNetlinkMessage::NewNeighbour(m) => {
                let n = Neighbour::from_message(&m);
                let _ = n.destination;
            }
            RouteNetlinkMessage::NewQueueDiscipline(m) => {
                let index = m.header.index as u32;
                let _ = qdisc(index, m);
            }
            RouteNetlinkMessage::NewTrafficFilter(m) => {
                let _ = u32_filter(m);
            }
            _ => {}
        }
    }
});
