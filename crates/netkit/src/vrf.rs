//! VRF devices (`ip link add NAME type vrf table N`): creation and the table of an existing
//! one. Joining a VRF is [`Socket::set_link_master`]; leaving it [`Socket::set_link_nomaster`].
//!
//! The create request is byte for byte what iproute2 sends (the kind "vrf" without a NUL, as
//! iproute2 writes it), so it can be checked without a kernel that has the vrf driver.

use netlink_packet_core::DefaultNla;
use netlink_packet_route::link::{InfoData, InfoVrf, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::Result;
use crate::link::{validate_ifname, Link};
use crate::netlink::{Socket, NLM_F_CREATE, NLM_F_EXCL};

const IFLA_INFO_KIND: u16 = 1;

/// The RTM_NEWLINK body that creates VRF `name` bound to routing table `table`.
pub fn create_message(name: &str, table: u32) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.attributes.push(LinkAttribute::IfName(name.to_string()));
    msg.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Other(DefaultNla::new(IFLA_INFO_KIND, b"vrf".to_vec())),
        LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(table)])),
    ]));
    msg
}

/// The routing table of a VRF link (`IFLA_VRF_TABLE`); `None` for other links.
pub fn table_of(link: &Link) -> Option<u32> {
    if !link.is_kind("vrf") {
        return None;
    }
    link.info_data().into_iter().find_map(|v| match v {
        InfoVrf::TableId(t) => Some(t),
        _ => None,
    })
}

impl Socket {
    /// Creates VRF `name` for `table`, down (EEXIST if the name is taken; EOPNOTSUPP
    /// "Unknown device type" on a kernel without the vrf driver).
    pub fn create_vrf(&mut self, name: &str, table: u32) -> Result<()> {
        let ctx = || format!("failed to create VRF {name:?} with table {table}");
        validate_ifname(name).map_err(|e| e.context(ctx()))?;
        self.request_ack(
            RouteNetlinkMessage::NewLink(create_message(name, table)),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| e.context(ctx()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{
        NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
    };

    /// `strace -e write=3 ip link add vrfx type vrf table 10` (iproute2 6.x): 68 bytes.
    const IPROUTE2_CREATE: [u8; 68] = [
        0x44, 0, 0, 0, 0x10, 0, 0x05, 0x06, 0xe6, 0x8b, 0x0e, 0x6b, 0, 0, 0, 0, // nlmsghdr
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // ifinfomsg
        0x09, 0, 0x03, 0, b'v', b'r', b'f', b'x', 0, 0, 0, 0, // IFLA_IFNAME
        0x18, 0, 0x12, 0, // IFLA_LINKINFO
        0x07, 0, 0x01, 0, b'v', b'r', b'f', 0, // IFLA_INFO_KIND "vrf"
        0x0c, 0, 0x02, 0, 0x08, 0, 0x01, 0, 0x0a, 0, 0,
        0, // IFLA_INFO_DATA { IFLA_VRF_TABLE 10 }
    ];

    #[test]
    fn create_request_matches_iproute2_bytes() {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
        header.sequence_number = 0x6b0e8be6;
        let msg = RouteNetlinkMessage::NewLink(create_message("vrfx", 10));
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        assert_eq!(out, IPROUTE2_CREATE);
    }

    #[test]
    fn table_is_read_back_from_a_vrf_link_message() {
        // What the kernel reports for a VRF: kind "vrf" (NUL-terminated) and its table.
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName("vrf-a".into()));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(netlink_packet_route::link::InfoKind::Vrf),
            LinkInfo::Data(InfoData::Vrf(vec![InfoVrf::TableId(1001)])),
        ]));
        assert_eq!(table_of(&Link::as_reported(&msg)), Some(1001));
        let mut veth = LinkMessage::default();
        veth.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                netlink_packet_route::link::InfoKind::Veth,
            )]));
        assert_eq!(table_of(&Link::as_reported(&veth)), None);
    }
}
