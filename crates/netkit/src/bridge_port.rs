//! Bridge port settings over AF_BRIDGE rtnetlink: VLAN membership (`bridge vlan add/del/show`)
//! and port flags (`bridge link set ... hairpin/isolated/learning`).
//!
//! Port flags travel as a nested IFLA_PROTINFO in an AF_BRIDGE RTM_SETLINK; VLANs as
//! IFLA_BRIDGE_VLAN_INFO inside IFLA_AF_SPEC, added with RTM_SETLINK and removed with
//! RTM_DELLINK (the kernel routes both to the port's bridge).

use netlink_packet_core::{DefaultNla, Nla, NLM_F_DUMP};
use netlink_packet_route::link::{
    AfSpecBridge, BridgeVlanInfo, BridgeVlanInfoFlags, LinkAttribute, LinkExtentMask, LinkMessage,
    LinkProtoInfoBridge,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::Result;
use crate::netlink::{BridgePortReplies, Socket};

/// IFLA_BRPORT_* attribute numbers (include/uapi/linux/if_link.h).
const IFLA_BRPORT_MODE: u16 = 4; // hairpin
const IFLA_BRPORT_LEARNING: u16 = 8;
const IFLA_BRPORT_ISOLATED: u16 = 33;

/// Port flags to change; `None` leaves a flag as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortFlags {
    pub hairpin: Option<bool>,
    pub isolated: Option<bool>,
    pub learning: Option<bool>,
}

/// The port flags as the kernel reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortState {
    pub hairpin: bool,
    pub isolated: bool,
    pub learning: bool,
}

/// One VLAN of a port (`bridge vlan show` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortVlan {
    pub vid: u16,
    /// Untagged frames entering the port are assigned this VLAN.
    pub pvid: bool,
    /// Frames of this VLAN leave the port untagged.
    pub untagged: bool,
}

fn bridge_msg(index: u32) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.header.index = index;
    msg
}

fn flag_nla(kind: u16, on: bool) -> LinkProtoInfoBridge {
    LinkProtoInfoBridge::Other(DefaultNla::new(kind, vec![u8::from(on)]))
}

fn vlan_attr(vid: u16, pvid: bool, untagged: bool) -> LinkAttribute {
    let mut flags = BridgeVlanInfoFlags::empty();
    if pvid {
        flags |= BridgeVlanInfoFlags::Pvid;
    }
    if untagged {
        flags |= BridgeVlanInfoFlags::Untagged;
    }
    LinkAttribute::AfSpecBridge(vec![AfSpecBridge::VlanInfo(BridgeVlanInfo { flags, vid })])
}

impl Socket {
    /// `bridge link set dev X hairpin on|off isolated on|off learning on|off` in one request.
    pub fn set_bridge_port_flags(&mut self, index: u32, flags: &PortFlags) -> Result<()> {
        let mut nlas = Vec::new();
        if let Some(on) = flags.hairpin {
            nlas.push(flag_nla(IFLA_BRPORT_MODE, on));
        }
        if let Some(on) = flags.isolated {
            nlas.push(flag_nla(IFLA_BRPORT_ISOLATED, on));
        }
        if let Some(on) = flags.learning {
            nlas.push(flag_nla(IFLA_BRPORT_LEARNING, on));
        }
        if nlas.is_empty() {
            return Ok(());
        }
        let mut msg = bridge_msg(index);
        msg.attributes.push(LinkAttribute::ProtoInfoBridge(nlas));
        match self.request_ack(RouteNetlinkMessage::SetLink(msg), 0) {
            Ok(()) => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!(
                    "failed to set bridge port flags {flags:?} on {name}"
                )))
            }
        }
    }

    /// The hairpin/isolated/learning flags of bridge port `index`.
    pub fn bridge_port_state(&mut self, index: u32) -> Result<PortState> {
        let ctx = || format!("failed to read bridge port flags of link {index}");
        let replies = self
            .request_as::<BridgePortReplies>(
                RouteNetlinkMessage::GetLink(bridge_msg(0)),
                NLM_F_DUMP,
            )
            .map_err(|e| e.context(ctx()))?;
        let mut state = PortState::default();
        for reply in replies {
            let RouteNetlinkMessage::NewLink(m) = reply else {
                continue;
            };
            if m.header.index != index {
                continue;
            }
            for attr in &m.attributes {
                let LinkAttribute::ProtoInfoBridge(nlas) = attr else {
                    continue;
                };
                for nla in nlas {
                    let LinkProtoInfoBridge::Other(n) = nla else {
                        continue;
                    };
                    let mut v = vec![0u8; n.value_len()];
                    n.emit_value(&mut v);
                    let on = v.first().copied().unwrap_or(0) != 0;
                    match n.kind() {
                        IFLA_BRPORT_MODE => state.hairpin = on,
                        IFLA_BRPORT_ISOLATED => state.isolated = on,
                        IFLA_BRPORT_LEARNING => state.learning = on,
                        _ => {}
                    }
                }
            }
            return Ok(state);
        }
        Err(crate::error::Error::kernel(ctx(), libc::ENODEV))
    }

    /// `bridge vlan add vid V dev X [pvid] [untagged]` (on the port, as `master`).
    pub fn bridge_vlan_add(
        &mut self,
        index: u32,
        vid: u16,
        pvid: bool,
        untagged: bool,
    ) -> Result<()> {
        let mut msg = bridge_msg(index);
        msg.attributes.push(vlan_attr(vid, pvid, untagged));
        match self.request_ack(RouteNetlinkMessage::SetLink(msg), 0) {
            Ok(()) => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!("failed to add VLAN {vid} to bridge port {name}")))
            }
        }
    }

    /// `bridge vlan del vid V dev X`; a VLAN that is not there is not an error.
    pub fn bridge_vlan_del(&mut self, index: u32, vid: u16) -> Result<()> {
        let mut msg = bridge_msg(index);
        msg.attributes.push(vlan_attr(vid, false, false));
        match self.request_ack(RouteNetlinkMessage::DelLink(msg), 0) {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!(
                    "failed to delete VLAN {vid} from bridge port {name}"
                )))
            }
        }
    }

    /// `bridge vlan show`: the VLANs of every bridge port (and bridge) in the netns, by ifindex.
    pub fn bridge_vlans_all(&mut self) -> Result<Vec<(u32, Vec<PortVlan>)>> {
        let mut msg = bridge_msg(0);
        msg.attributes
            .push(LinkAttribute::ExtMask(vec![LinkExtentMask::Brvlan]));
        let replies = self
            .request_as::<BridgePortReplies>(RouteNetlinkMessage::GetLink(msg), NLM_F_DUMP)
            .map_err(|e| e.context("failed to list bridge VLANs"))?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewLink(m) = reply else {
                continue;
            };
            let mut vlans = Vec::new();
            for attr in &m.attributes {
                let LinkAttribute::AfSpecBridge(specs) = attr else {
                    continue;
                };
                for spec in specs {
                    if let AfSpecBridge::VlanInfo(info) = spec {
                        vlans.push(PortVlan {
                            vid: info.vid,
                            pvid: info.flags.contains(BridgeVlanInfoFlags::Pvid),
                            untagged: info.flags.contains(BridgeVlanInfoFlags::Untagged),
                        });
                    }
                }
            }
            out.push((m.header.index, vlans));
        }
        Ok(out)
    }

    /// The VLANs of one port (empty when it has none or is not a bridge port).
    pub fn bridge_vlans(&mut self, index: u32) -> Result<Vec<PortVlan>> {
        Ok(self
            .bridge_vlans_all()?
            .into_iter()
            .find(|(i, _)| *i == index)
            .map(|(_, v)| v)
            .unwrap_or_default())
    }

    /// Removes every VLAN of the port (e.g. the default PVID 1 before assigning others).
    pub fn bridge_vlans_clear(&mut self, index: u32) -> Result<()> {
        for v in self.bridge_vlans(index)? {
            self.bridge_vlan_del(index, v.vid)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_attr_flags() {
        let LinkAttribute::AfSpecBridge(v) = vlan_attr(10, true, true) else {
            panic!()
        };
        let AfSpecBridge::VlanInfo(info) = v[0] else {
            panic!()
        };
        assert_eq!(info.vid, 10);
        assert!(info
            .flags
            .contains(BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged));
    }

    #[test]
    fn vlan_message_matches_iproute2_bytes() {
        use netlink_packet_core::Emitable;
        // `bridge vlan add vid 100 dev <4> pvid untagged` sends (after the ifinfomsg header)
        // IFLA_AF_SPEC(len 12) { IFLA_BRIDGE_VLAN_INFO(len 8) { flags 0x6, vid 100 } }.
        let mut msg = bridge_msg(4);
        msg.attributes.push(vlan_attr(100, true, true));
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.emit(&mut buf);
        assert_eq!(buf[0], libc::AF_BRIDGE as u8);
        assert_eq!(u32::from_ne_bytes(buf[4..8].try_into().unwrap()), 4);
        let attrs = &buf[16..];
        assert_eq!(u16::from_ne_bytes([attrs[0], attrs[1]]), 12);
        assert_eq!(u16::from_ne_bytes([attrs[2], attrs[3]]) & 0x3fff, 26);
        assert_eq!(u16::from_ne_bytes([attrs[4], attrs[5]]), 8);
        assert_eq!(u16::from_ne_bytes([attrs[6], attrs[7]]), 2);
        assert_eq!(u16::from_ne_bytes([attrs[8], attrs[9]]), 0x6);
        assert_eq!(u16::from_ne_bytes([attrs[10], attrs[11]]), 100);
    }

    #[test]
    fn flag_nla_encodes_u8() {
        let LinkProtoInfoBridge::Other(n) = flag_nla(IFLA_BRPORT_ISOLATED, true) else {
            panic!()
        };
        assert_eq!(n.kind(), 33);
        assert_eq!(n.value_len(), 1);
    }

    #[test]
    fn port_flags_round_trip_as_root() {
        crate::skip_unless_root!();
        let ns = crate::testutil::TestNetns::new("nk-brport");
        ns.ip(&["link", "add", "br0", "type", "bridge"]);
        ns.ip(&["link", "add", "p0", "type", "veth", "peer", "name", "p1"]);
        ns.ip(&["link", "set", "p0", "master", "br0"]);
        let mut sock = ns.socket().unwrap();
        let port = sock.link_by_name("p0").unwrap().index;
        let fresh = sock.bridge_port_state(port).unwrap();
        assert!(
            !fresh.hairpin && !fresh.isolated && fresh.learning,
            "{fresh:?}"
        );
        let flags = PortFlags {
            hairpin: Some(true),
            isolated: Some(true),
            learning: Some(false),
        };
        sock.set_bridge_port_flags(port, &flags).unwrap();
        let now = sock.bridge_port_state(port).unwrap();
        assert_eq!(
            now,
            PortState {
                hairpin: true,
                isolated: true,
                learning: false
            }
        );
        // Only the given flags change.
        sock.set_bridge_port_flags(
            port,
            &PortFlags {
                hairpin: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            sock.bridge_port_state(port).unwrap(),
            PortState {
                hairpin: false,
                isolated: true,
                learning: false
            }
        );
        // A link that is not a bridge port is refused by the kernel.
        let other = sock.link_by_name("p1").unwrap().index;
        assert!(sock.set_bridge_port_flags(other, &flags).is_err());
    }
}
