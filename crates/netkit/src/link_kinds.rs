//! Link kinds created on a parent (macvlan, ipvlan, vlan) or alone (dummy): request builders,
//! creation, and decoding of an existing link's kind parameters (for CHECK).
//!
//! Each request carries its attributes in the order iproute2 sends them for
//! `ip link add link P name N [address M] [mtu X] [netns NS] type K ...`, so the bytes can be
//! compared with iproute2's (see the tests): the arguments in order, then `IFLA_LINK`,
//! `IFLA_IFNAME` and `IFLA_LINKINFO`.

use std::os::fd::AsRawFd;

use netlink_packet_core::{DefaultNla, ParseableParametrized};
use netlink_packet_route::link::{
    InfoData, InfoIpTunnel, InfoIpVlan, InfoKind, InfoMacVlan, InfoVlan, IpVlanFlags, IpVlanMode,
    LinkAttribute, LinkInfo, LinkMessage, MacVlanMode,
};

use crate::error::Result;
use crate::link::{validate_ifname, Link};
use crate::netlink::Socket;
use crate::netns::Netns;

/// What every kind below shares: the new link's name, where it is born, and its basics.
#[derive(Debug, Clone, Copy, Default)]
pub struct NewLinkBase<'a> {
    pub name: &'a str,
    /// The parent link's ifindex (in the creating socket's netns); `None` for dummy.
    pub parent: Option<u32>,
    /// Create the link directly in this netns (`IFLA_NET_NS_FD`).
    pub netns: Option<&'a Netns>,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
}

/// `ip link add link P name N ... type macvlan mode M [bcqueuelen Q]`
#[derive(Debug, Clone, Copy)]
pub struct MacvlanSpec<'a> {
    pub base: NewLinkBase<'a>,
    pub mode: MacVlanMode,
    /// Broadcast queue length (`IFLA_MACVLAN_BC_QUEUE_LEN`); `None` = kernel default.
    pub bc_queue_len: Option<u32>,
}

/// `ip link add link P name N ... type ipvlan mode M [private|vepa]`
#[derive(Debug, Clone, Copy)]
pub struct IpvlanSpec<'a> {
    pub base: NewLinkBase<'a>,
    pub mode: IpVlanMode,
    /// Empty = bridge (the kernel default); always sent, as iproute2 does.
    pub flags: IpVlanFlags,
}

/// `ip link add link P name N ... type vlan id ID`
#[derive(Debug, Clone, Copy)]
pub struct VlanSpec<'a> {
    pub base: NewLinkBase<'a>,
    pub id: u16,
}

/// `IFLA_INFO_KIND`.
const IFLA_INFO_KIND: u16 = 1;

/// The top-level attributes in iproute2's order, with the kind's info data last. The kind
/// string goes without its NUL, as iproute2 and the Go netlink library send it (the rtnetlink
/// builders add one; the kernel accepts both).
fn new_link_message(base: &NewLinkBase<'_>, kind: &str, data: Option<InfoData>) -> LinkMessage {
    let mut msg = LinkMessage::default();
    let attrs = &mut msg.attributes;
    if let Some(mac) = base.mac {
        attrs.push(LinkAttribute::Address(mac.to_vec()));
    }
    if let Some(mtu) = base.mtu {
        attrs.push(LinkAttribute::Mtu(mtu));
    }
    if let Some(ns) = base.netns {
        attrs.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
    }
    if let Some(parent) = base.parent {
        attrs.push(LinkAttribute::Link(parent));
    }
    attrs.push(LinkAttribute::IfName(base.name.to_string()));
    let mut info = vec![LinkInfo::Other(DefaultNla::new(
        IFLA_INFO_KIND,
        kind.as_bytes().to_vec(),
    ))];
    info.extend(data.map(LinkInfo::Data));
    attrs.push(LinkAttribute::LinkInfo(info));
    msg
}

/// The RTM_NEWLINK body for a macvlan link.
pub fn macvlan_message(spec: &MacvlanSpec<'_>) -> LinkMessage {
    // iproute2 adds the mode after the other options.
    let mut data: Vec<InfoMacVlan> = spec
        .bc_queue_len
        .map(InfoMacVlan::BcQueueLen)
        .into_iter()
        .collect();
    data.push(InfoMacVlan::Mode(spec.mode));
    new_link_message(&spec.base, "macvlan", Some(InfoData::MacVlan(data)))
}

/// The RTM_NEWLINK body for an ipvlan link.
pub fn ipvlan_message(spec: &IpvlanSpec<'_>) -> LinkMessage {
    let data = vec![InfoIpVlan::Mode(spec.mode), InfoIpVlan::Flags(spec.flags)];
    new_link_message(&spec.base, "ipvlan", Some(InfoData::IpVlan(data)))
}

/// The RTM_NEWLINK body for an 802.1Q vlan link.
pub fn vlan_message(spec: &VlanSpec<'_>) -> LinkMessage {
    let data = vec![InfoVlan::Id(spec.id)];
    new_link_message(&spec.base, "vlan", Some(InfoData::Vlan(data)))
}

/// The RTM_NEWLINK body for a dummy link (`ip link add name N [netns NS] type dummy`).
pub fn dummy_message(base: &NewLinkBase<'_>) -> LinkMessage {
    new_link_message(base, "dummy", None)
}

/// `ip link add name N [mtu X] type wireguard`
pub fn wireguard_message(base: &NewLinkBase<'_>) -> LinkMessage {
    new_link_message(base, "wireguard", None)
}

/// `ip link add name N [mtu X] type ipip local L [dev P]`: a tunnel with no fixed remote, its
/// outer destination taken from each route's gateway (flannel's `flannel.ipip`).
pub fn ipip_message(base: &NewLinkBase<'_>, local: std::net::Ipv4Addr) -> LinkMessage {
    let mut data = Vec::new();
    if let Some(parent) = base.parent {
        data.push(InfoIpTunnel::Link(parent));
    }
    data.push(InfoIpTunnel::Local(local.into()));
    let base = NewLinkBase {
        parent: None,
        ..*base
    };
    new_link_message(&base, "ipip", Some(InfoData::IpTunnel(data)))
}

/// The local address of an ipip link, and whether it has a fixed remote.
pub fn ipip_endpoints(link: &Link) -> Option<(Option<std::net::IpAddr>, bool)> {
    if !link.is_kind("ipip") {
        return None;
    }
    let items = link.info_data_with(|nla| InfoIpTunnel::parse_with_param(nla, InfoKind::IpIp));
    let mut local = None;
    let mut remote = false;
    for item in items {
        match item {
            InfoIpTunnel::Local(ip) if !ip.is_unspecified() => local = Some(ip),
            InfoIpTunnel::Remote(ip) if !ip.is_unspecified() => remote = true,
            _ => {}
        }
    }
    Some((local, remote))
}

impl Socket {
    /// Creates a macvlan link (EEXIST when the name is taken where it is born).
    pub fn create_macvlan(&mut self, spec: &MacvlanSpec<'_>) -> Result<()> {
        validate_ifname(spec.base.name)?;
        self.create_link(macvlan_message(spec))
    }

    /// Creates an ipvlan link.
    pub fn create_ipvlan(&mut self, spec: &IpvlanSpec<'_>) -> Result<()> {
        validate_ifname(spec.base.name)?;
        self.create_link(ipvlan_message(spec))
    }

    /// Creates an 802.1Q vlan link.
    pub fn create_vlan(&mut self, spec: &VlanSpec<'_>) -> Result<()> {
        validate_ifname(spec.base.name)?;
        self.create_link(vlan_message(spec))
    }

    /// Creates a dummy link.
    pub fn create_dummy(&mut self, base: &NewLinkBase<'_>) -> Result<()> {
        validate_ifname(base.name)?;
        self.create_link(dummy_message(base))
    }
}

/// The mode of a macvlan link (`None` if it is not one or the kernel did not say).
pub fn macvlan_mode(link: &Link) -> Option<MacVlanMode> {
    if !link.is_kind("macvlan") {
        return None;
    }
    link.info_data().into_iter().find_map(|i| match i {
        InfoMacVlan::Mode(m) => Some(m),
        _ => None,
    })
}

/// The mode and flags of an ipvlan link.
pub fn ipvlan_mode(link: &Link) -> Option<(IpVlanMode, IpVlanFlags)> {
    if !link.is_kind("ipvlan") {
        return None;
    }
    let d: Vec<InfoIpVlan> = link.info_data();
    let mode = d.iter().find_map(|i| match i {
        InfoIpVlan::Mode(m) => Some(*m),
        _ => None,
    })?;
    let flags = d
        .iter()
        .find_map(|i| match i {
            InfoIpVlan::Flags(f) => Some(*f),
            _ => None,
        })
        .unwrap_or_default();
    Some((mode, flags))
}

/// The VLAN ID of a vlan link.
pub fn vlan_id(link: &Link) -> Option<u16> {
    if !link.is_kind("vlan") {
        return None;
    }
    link.info_data().into_iter().find_map(|i| match i {
        InfoVlan::Id(id) => Some(id),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{
        NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
    };
    use netlink_packet_route::RouteNetlinkMessage;

    use crate::netlink::{NLM_F_CREATE, NLM_F_EXCL};

    /// The request as `Socket::create_link` puts it on the wire, normalised.
    fn wire(msg: LinkMessage) -> Vec<u8> {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
        let payload = NetlinkPayload::from(RouteNetlinkMessage::NewLink(msg));
        let mut packet = NetlinkMessage::new(header, payload);
        packet.finalize();
        let mut out = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut out);
        normalize(out)
    }

    /// Zeroes what differs from run to run: the sequence number and the netns fd's number.
    fn normalize(mut b: Vec<u8>) -> Vec<u8> {
        b[8..12].fill(0);
        // nlmsghdr (16) + ifinfomsg (16), then the top-level attributes.
        let mut off = 32;
        while off + 4 <= b.len() {
            let len = u16::from_ne_bytes([b[off], b[off + 1]]) as usize;
            let kind = u16::from_ne_bytes([b[off + 2], b[off + 3]]);
            if len < 4 {
                break;
            }
            if kind == 28 {
                b[off + 4..off + 8].fill(0);
            }
            off += (len + 3) & !3;
        }
        b
    }

    fn hex(h: &str) -> Vec<u8> {
        let bytes = (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect();
        normalize(bytes)
    }

    /// iproute2's requests, captured with `strace -f -e trace=sendmsg -e write=3 ip link add ...`
    /// (iproute2 6.x, Linux 6.18) in a netns where the parent `v0` has ifindex 3 and `netns`
    /// names another namespace. The ipvlan, vlan and dummy e2e tests (`netns-tests/tests/*_netns.rs`)
    /// also compare the plugin binaries' requests with iproute2's, both captured live.
    const MACVLAN_BRIDGE: &str = "5800000010000506238d0e6b0000000000000000000000000000000000000000080005000300000011000300766574683030303061616161000000001c0012000b0001006d6163766c616e000c0002000800010004000000";
    const MACVLAN_FULL: &str = "7c00000010000506238d0e6b00000000000000000000000000000000000000000a0001000211223344550000080004007805000008001c000400000008000500030000001100030076657468303030306161616100000000240012000b0001006d6163766c616e001400020008000700640000000800010001000000";
    const MACVLAN_VEPA: &str = "5800000010000506238d0e6b0000000000000000000000000000000000000000080005000300000011000300766574683030303061616162000000001c0012000b0001006d6163766c616e000c0002000800010002000000";
    const MACVLAN_PASSTHRU: &str = "5800000010000506238d0e6b0000000000000000000000000000000000000000080005000300000011000300766574683030303061616163000000001c0012000b0001006d6163766c616e000c0002000800010008000000";
    const IPVLAN_L2: &str = "6000000010000506238d0e6b000000000000000000000000000000000000000008000500030000001100030076657468303030306161616100000000240012000a0001006970766c616e00001400020006000100000000000600020000000000";
    const IPVLAN_L3S_PRIVATE: &str = "7000000010000506238d0e6b0000000000000000000000000000000000000000080004007805000008001c000400000008000500030000001100030076657468303030306161616100000000240012000a0001006970766c616e00001400020006000100020000000600020001000000";
    const IPVLAN_L3_VEPA: &str = "6000000010000506238d0e6b000000000000000000000000000000000000000008000500030000001100030076657468303030306161616100000000240012000a0001006970766c616e00001400020006000100010000000600020002000000";
    const VLAN_100: &str = "6400000010000506238d0e6b0000000000000000000000000000000000000000080004007805000008001c0004000000080005000300000011000300766574683030303061616161000000001800120008000100766c616e0c0002000600010064000000";
    const VLAN_0: &str = "5400000010000506238d0e6b0000000000000000000000000000000000000000080005000300000011000300766574683030303061616161000000001800120008000100766c616e0c0002000600010000000000";
    const DUMMY_NETNS: &str = "4400000010000506238d0e6b000000000000000000000000000000000000000008001c0004000000090003006574683000000000100012000900010064756d6d79000000";
    const DUMMY: &str = "3c00000010000506238d0e6b00000000000000000000000000000000000000000b00030064756d6d79300000100012000900010064756d6d79000000";

    fn on_v0(name: &str) -> NewLinkBase<'_> {
        NewLinkBase {
            name,
            parent: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn macvlan_requests_match_iproute2() {
        let ns = Netns::current().unwrap();
        let cases = [
            (
                MACVLAN_BRIDGE,
                on_v0("veth0000aaaa"),
                MacVlanMode::Bridge,
                None,
            ),
            (MACVLAN_VEPA, on_v0("veth0000aaab"), MacVlanMode::Vepa, None),
            (
                MACVLAN_PASSTHRU,
                on_v0("veth0000aaac"),
                MacVlanMode::Passthrough,
                None,
            ),
            (
                MACVLAN_FULL,
                NewLinkBase {
                    mac: Some([2, 0x11, 0x22, 0x33, 0x44, 0x55]),
                    mtu: Some(1400),
                    netns: Some(&ns),
                    ..on_v0("veth0000aaaa")
                },
                MacVlanMode::Private,
                Some(100),
            ),
        ];
        for (captured, base, mode, bc_queue_len) in cases {
            let spec = MacvlanSpec {
                base,
                mode,
                bc_queue_len,
            };
            assert_eq!(wire(macvlan_message(&spec)), hex(captured), "{mode:?}");
        }
    }

    #[test]
    fn ipvlan_requests_match_iproute2() {
        let ns = Netns::current().unwrap();
        let cases = [
            (
                IPVLAN_L2,
                on_v0("veth0000aaaa"),
                IpVlanMode::L2,
                IpVlanFlags::empty(),
            ),
            (
                IPVLAN_L3_VEPA,
                on_v0("veth0000aaaa"),
                IpVlanMode::L3,
                IpVlanFlags::Vepa,
            ),
            (
                IPVLAN_L3S_PRIVATE,
                NewLinkBase {
                    mtu: Some(1400),
                    netns: Some(&ns),
                    ..on_v0("veth0000aaaa")
                },
                IpVlanMode::L3S,
                IpVlanFlags::Private,
            ),
        ];
        for (captured, base, mode, flags) in cases {
            let spec = IpvlanSpec { base, mode, flags };
            assert_eq!(wire(ipvlan_message(&spec)), hex(captured), "{mode:?}");
        }
    }

    #[test]
    fn vlan_and_dummy_requests_match_iproute2() {
        let ns = Netns::current().unwrap();
        let vlan = |base, id| wire(vlan_message(&VlanSpec { base, id }));
        assert_eq!(vlan(on_v0("veth0000aaaa"), 0), hex(VLAN_0));
        let base = NewLinkBase {
            mtu: Some(1400),
            netns: Some(&ns),
            ..on_v0("veth0000aaaa")
        };
        assert_eq!(vlan(base, 100), hex(VLAN_100));
        let dummy = NewLinkBase {
            name: "dummy0",
            ..Default::default()
        };
        assert_eq!(wire(dummy_message(&dummy)), hex(DUMMY));
        let dummy = NewLinkBase {
            name: "eth0",
            netns: Some(&ns),
            ..Default::default()
        };
        assert_eq!(wire(dummy_message(&dummy)), hex(DUMMY_NETNS));
    }

    #[test]
    fn decodes_kind_parameters() {
        // What the kernel reports back for each creation request.
        let link = |msg: LinkMessage| Link::as_reported(&msg);
        let mv = link(macvlan_message(&MacvlanSpec {
            base: on_v0("a"),
            mode: MacVlanMode::Vepa,
            bc_queue_len: None,
        }));
        assert_eq!(macvlan_mode(&mv), Some(MacVlanMode::Vepa));
        assert_eq!((ipvlan_mode(&mv), vlan_id(&mv)), (None, None));
        let iv = link(ipvlan_message(&IpvlanSpec {
            base: on_v0("b"),
            mode: IpVlanMode::L3S,
            flags: IpVlanFlags::Private,
        }));
        assert_eq!(
            ipvlan_mode(&iv),
            Some((IpVlanMode::L3S, IpVlanFlags::Private))
        );
        let vl = link(vlan_message(&VlanSpec {
            base: on_v0("c"),
            id: 42,
        }));
        assert_eq!((vlan_id(&vl), macvlan_mode(&vl)), (Some(42), None));
    }
}
