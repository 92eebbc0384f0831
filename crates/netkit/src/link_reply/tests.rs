use netlink_packet_core::{Emitable, NLA_F_NESTED};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoData, LinkFlags,
    LinkProtoInfoBridge, State,
};

use super::*;
use crate::link::Link;

fn wire(message: &LinkMessage) -> Vec<u8> {
    let mut bytes = vec![0u8; message.buffer_len()];
    message.emit(&mut bytes);
    bytes
}

fn summary() -> Vec<LinkAttribute> {
    vec![
        LinkAttribute::IfName("veth0".into()),
        LinkAttribute::Mtu(1400),
        LinkAttribute::Address(vec![2, 0, 0, 0, 0, 1]),
        LinkAttribute::Controller(3),
        LinkAttribute::Link(9),
        LinkAttribute::LinkNetNsId(1),
        LinkAttribute::OperState(State::Up),
        LinkAttribute::TxQueueLen(1000),
        LinkAttribute::Promiscuity(0),
        LinkAttribute::IfAlias("pod".into()),
        LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Veth)]),
    ]
}

#[test]
fn a_summary_keeps_the_attributes_a_link_is_made_of_and_skips_the_rest() {
    let mut full = LinkMessage::default();
    full.header.index = 7;
    full.header.flags = LinkFlags::Up;
    full.attributes = summary();
    full.attributes.insert(2, LinkAttribute::Group(5));
    full.attributes.push(LinkAttribute::NumTxQueues(1));
    full.attributes.push(LinkAttribute::NumRxQueues(1));

    let decoded = decode_link(&wire(&full), LinkView::Summary).unwrap();
    assert_eq!(decoded.header, full.header);
    assert_eq!(decoded.attributes, summary());
}

#[test]
fn a_summary_decodes_what_the_full_parser_decodes() {
    // The same attributes through netlink-packet-route's parser: the same values.
    let mut full = LinkMessage::default();
    full.attributes = summary();
    let bytes = wire(&full);
    let theirs = LinkMessage::parse(bytes.as_slice()).unwrap();
    assert_eq!(decode_link(&bytes, LinkView::Summary).unwrap(), theirs);
}

#[test]
fn the_kinds_data_stays_bytes_until_an_accessor_decodes_it() {
    let mut message = LinkMessage::default();
    message.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Bridge),
        LinkInfo::Data(InfoData::Bridge(vec![
            InfoBridge::VlanFiltering(true),
            InfoBridge::VlanDefaultPvid(7),
        ])),
    ]));
    let decoded = decode_link(&wire(&message), LinkView::Summary).unwrap();
    let LinkAttribute::LinkInfo(infos) = &decoded.attributes[0] else {
        panic!("no link info: {decoded:?}");
    };
    assert_eq!(infos[0], LinkInfo::Kind(InfoKind::Bridge));
    assert!(matches!(&infos[1], LinkInfo::Other(nla) if nla.kind() == IFLA_INFO_DATA));

    let link = Link::from_message(decoded);
    assert_eq!(
        link.bridge_info(),
        vec![
            InfoBridge::VlanFiltering(true),
            InfoBridge::VlanDefaultPvid(7)
        ]
    );
    // No data, nothing decoded.
    assert!(Link::as_reported(&LinkMessage::default())
        .bridge_info()
        .is_empty());
}

#[test]
fn a_malformed_data_attribute_is_left_out() {
    // IFLA_INFO_DATA of a bridge whose IFLA_BR_VLAN_FILTERING (7) is empty, then a good
    // IFLA_BR_VLAN_DEFAULT_PVID (39) of 5.
    let data = [
        4u8, 0, 7, 0, // empty u8
        6, 0, 39, 0, 5, 0, 0, 0, // u16 5, padded
    ];
    let mut info = vec![8u8, 0, 1, 0, b'b', b'r', 0, 0]; // IFLA_INFO_KIND "br"
    let data_len = (4 + data.len()) as u16;
    info.extend(data_len.to_ne_bytes());
    info.extend((IFLA_INFO_DATA | NLA_F_NESTED).to_ne_bytes());
    info.extend(data);
    let mut message = LinkMessage::default();
    message
        .attributes
        .push(LinkAttribute::LinkInfo(link_info(&info).unwrap()));
    let link = Link::from_message(message);
    assert_eq!(link.bridge_info(), vec![InfoBridge::VlanDefaultPvid(5)]);
}

#[test]
fn a_bridge_port_view_reads_flags_and_vlans_of_af_bridge_messages_only() {
    let port = || {
        vec![
            LinkAttribute::ProtoInfoBridge(vec![LinkProtoInfoBridge::Other(DefaultNla::new(
                4,
                vec![1],
            ))]),
            LinkAttribute::AfSpecBridge(vec![AfSpecBridge::VlanInfo(BridgeVlanInfo {
                flags: BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged,
                vid: 10,
            })]),
        ]
    };
    let mut message = LinkMessage::default();
    message.header.interface_family = AddressFamily::Bridge;
    message.header.index = 4;
    message.attributes = port();
    message
        .attributes
        .insert(0, LinkAttribute::IfName("veth0".into()));
    let bytes = wire(&message);
    let decoded = decode_link(&bytes, LinkView::BridgePort).unwrap();
    assert_eq!(decoded.header.index, 4);
    assert_eq!(decoded.attributes, port());

    message.header.interface_family = AddressFamily::Unspec;
    message.attributes = vec![LinkAttribute::IfName("veth0".into())];
    let decoded = decode_link(&wire(&message), LinkView::BridgePort).unwrap();
    assert!(decoded.attributes.is_empty());
}

#[test]
fn truncated_or_malformed_messages_are_errors() {
    let mut message = LinkMessage::default();
    message.attributes = summary();
    let bytes = wire(&message);
    assert!(decode_link(&bytes[..10], LinkView::Summary).is_err());
    // IFLA_MTU (4) two bytes long.
    let mut short_mtu = bytes[..16].to_vec();
    short_mtu.extend([6, 0, 4, 0, 1, 2, 0, 0]);
    let e = decode_link(&short_mtu, LinkView::Summary).unwrap_err();
    assert!(e.to_string().contains("attribute 4"), "{e}");
}

#[test]
fn a_summary_reads_the_ipv6_accept_ra_from_the_per_family_configuration() {
    use netlink_packet_route::link::{
        AfSpecInet, AfSpecInet6, AfSpecUnspec, Inet6DevConf, InetDevConf,
    };
    let with_spec = |families: Vec<AfSpecUnspec>| {
        let mut message = LinkMessage::default();
        message.attributes = summary();
        message
            .attributes
            .push(LinkAttribute::AfSpecUnspec(families));
        Link::from_message(decode_link(&wire(&message), LinkView::Summary).unwrap())
    };
    let mut v6 = Inet6DevConf::default();
    v6.forwarding = 1;
    v6.accept_ra = 2;
    v6.autoconf = 1;
    let mut v4 = InetDevConf::default();
    v4.arp_notify = 1;
    let link = with_spec(vec![
        AfSpecUnspec::Inet(vec![AfSpecInet::DevConf(v4)]),
        AfSpecUnspec::Inet6(vec![AfSpecInet6::DevConf(v6)]),
    ]);
    assert_eq!(link.ipv6_accept_ra(), Some(2));
    assert_eq!(link.name, "veth0");

    // No IPv6 device (IPv6 disabled), or no per-family configuration at all: unknown.
    let v4_only = with_spec(vec![AfSpecUnspec::Inet(vec![AfSpecInet::DevConf(v4)])]);
    assert_eq!(v4_only.ipv6_accept_ra(), None);
    let mut bare = LinkMessage::default();
    bare.attributes = summary();
    let bare = Link::from_message(decode_link(&wire(&bare), LinkView::Summary).unwrap());
    assert_eq!(bare.ipv6_accept_ra(), None);

    // A truncated configuration array is unknown too, not a panic.
    let nla = |kind: u16, payload: &[u8]| {
        let mut bytes = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        bytes.extend(kind.to_ne_bytes());
        bytes.extend(payload);
        bytes
    };
    let conf = nla(IFLA_INET6_CONF, &[0; 4]);
    let spec = nla(libc::IFLA_AF_SPEC, &nla(libc::AF_INET6 as u16, &conf));
    let mut bytes = wire(&bare.message);
    bytes.extend(spec);
    let truncated = Link::from_message(decode_link(&bytes, LinkView::Summary).unwrap());
    assert_eq!(truncated.ipv6_accept_ra(), None);
}
