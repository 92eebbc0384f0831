//! VXLAN links: build from a spec, decode an existing one, compare, ensure (create or
//! recreate on incompatible parameters, adjust MTU/MAC/up in place).
//!
//! The incompatibility rule follows flannel and Calico (`vxlanLinksIncompat`): VNI, UDP port,
//! local address, underlay link, learning, GBP, group and metadata mode cannot be changed on a
//! live device, so a mismatch means delete + create. MTU, MAC and up are changed in place.

use std::net::IpAddr;

use netlink_packet_route::link::InfoVxlan;
use netlink_packet_route::RouteNetlinkMessage;
use rtnetlink::{LinkMessageBuilder, LinkVxlan};

use crate::error::{Error, Result};
use crate::link::{format_mac, validate_ifname, Link};
use crate::netlink::{Socket, NLM_F_CREATE, NLM_F_EXCL};

/// The kernel's default VXLAN UDP port when IFLA_VXLAN_PORT is absent (also flannel's).
pub const KERNEL_DEFAULT_VXLAN_PORT: u16 = 8472;
/// Largest VNI: the VXLAN header's identifier is 24 bits (RFC 7348), and the kernel refuses
/// a larger IFLA_VXLAN_ID.
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// What a VXLAN device should look like. `learning` is always sent: without the attribute
/// the kernel turns learning on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    pub name: String,
    pub vni: u32,
    pub port: u16,
    /// Source address of the encapsulated packets (IFLA_VXLAN_LOCAL/LOCAL6).
    pub local: Option<IpAddr>,
    /// Underlay ifindex (IFLA_VXLAN_LINK).
    pub underlay: Option<u32>,
    pub learning: bool,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    /// Bring the device up.
    pub up: bool,
}

/// The VXLAN parameters of an existing link (IFLA_INFO_DATA), `None` fields when the kernel
/// did not report them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VxlanParams {
    pub vni: Option<u32>,
    pub port: Option<u16>,
    pub local: Option<IpAddr>,
    pub underlay: Option<u32>,
    pub learning: Option<bool>,
    pub group: Option<IpAddr>,
    pub gbp: bool,
    pub collect_metadata: bool,
}

impl VxlanParams {
    /// Decodes the VXLAN info data of `link`; `None` if it is not a VXLAN link.
    pub fn from_link(link: &Link) -> Option<VxlanParams> {
        if !link.is_kind("vxlan") {
            return None;
        }
        let mut p = VxlanParams::default();
        for info in link.info_data::<InfoVxlan>() {
            match info {
                InfoVxlan::Id(v) => p.vni = Some(v),
                InfoVxlan::Port(v) => p.port = Some(v),
                InfoVxlan::Local(a) => p.local = Some(IpAddr::V4(a)),
                InfoVxlan::Local6(a) => p.local = Some(IpAddr::V6(a)),
                InfoVxlan::Link(i) if i != 0 => p.underlay = Some(i),
                InfoVxlan::Learning(b) => p.learning = Some(b),
                InfoVxlan::Group(a) if !a.is_unspecified() => p.group = Some(IpAddr::V4(a)),
                InfoVxlan::Group6(a) if !a.is_unspecified() => p.group = Some(IpAddr::V6(a)),
                InfoVxlan::Gbp => p.gbp = true,
                InfoVxlan::CollectMetadata(b) => p.collect_metadata = b,
                _ => {}
            }
        }
        Some(p)
    }
}

/// The RTM_NEWLINK message creating `spec`.
pub fn vxlan_message(spec: &VxlanSpec) -> rtnetlink::packet_route::link::LinkMessage {
    let mut b: LinkMessageBuilder<LinkVxlan> = LinkVxlan::new(&spec.name, spec.vni)
        .port(spec.port)
        .learning(spec.learning);
    match spec.local {
        Some(IpAddr::V4(a)) => b = b.local(a),
        Some(IpAddr::V6(a)) => b = b.local6(a),
        None => {}
    }
    if let Some(index) = spec.underlay {
        b = b.dev(index);
    }
    if let Some(mtu) = spec.mtu {
        b = b.mtu(mtu);
    }
    if let Some(mac) = spec.mac {
        b = b.address(mac.to_vec());
    }
    if spec.up {
        b = b.up();
    }
    b.build()
}

/// Why `link` cannot serve as `spec` without being recreated; empty when it can.
pub fn incompatibilities(spec: &VxlanSpec, link: &Link) -> Vec<String> {
    let Some(p) = VxlanParams::from_link(link) else {
        return vec![format!(
            "{:?} exists but is a {} link, not vxlan",
            link.name,
            link.kind.as_deref().unwrap_or("non-virtual")
        )];
    };
    let mut why = Vec::new();
    if p.vni != Some(spec.vni) {
        why.push(format!("VNI {:?} != {}", p.vni, spec.vni));
    }
    if p.port.unwrap_or(KERNEL_DEFAULT_VXLAN_PORT) != spec.port {
        why.push(format!("port {:?} != {}", p.port, spec.port));
    }
    if p.local != spec.local {
        why.push(format!("local {:?} != {:?}", p.local, spec.local));
    }
    if p.underlay != spec.underlay {
        why.push(format!(
            "underlay link {:?} != {:?}",
            p.underlay, spec.underlay
        ));
    }
    if p.learning.unwrap_or(true) != spec.learning {
        why.push(format!("learning {:?} != {}", p.learning, spec.learning));
    }
    if let Some(g) = p.group {
        why.push(format!("has multicast group {g}"));
    }
    if p.gbp {
        why.push("has GBP enabled".to_string());
    }
    if p.collect_metadata {
        why.push("is in external (metadata) mode".to_string());
    }
    why
}

/// What [`Socket::ensure_vxlan`] did.
#[derive(Debug, Clone)]
pub struct VxlanOutcome {
    /// The device as it is now.
    pub link: Link,
    /// It did not exist and was created.
    pub created: bool,
    /// It existed with incompatible parameters and was deleted and created again.
    pub recreated: Option<Vec<String>>,
    /// MTU, MAC or up state were changed in place.
    pub adjusted: Vec<String>,
}

impl VxlanOutcome {
    /// Anything at all was changed.
    pub fn changed(&self) -> bool {
        self.created || self.recreated.is_some() || !self.adjusted.is_empty()
    }
}

impl Socket {
    /// Makes the VXLAN device `spec.name` match `spec`: creates it when missing, recreates it
    /// when an existing link (of any kind) is incompatible, otherwise fixes MTU, MAC and up in place.
    pub fn ensure_vxlan(&mut self, spec: &VxlanSpec) -> Result<VxlanOutcome> {
        let ctx = || format!("failed to ensure vxlan device {:?}", spec.name);
        validate_ifname(&spec.name).map_err(|e| e.context(ctx()))?;
        let mut recreated = None;
        if let Some(existing) = self.find_link(&spec.name).map_err(|e| e.context(ctx()))? {
            // Only a VXLAN device may be replaced: a mistyped `device` naming the underlay or
            // a bridge must never delete it.
            if existing.kind.as_deref() != Some("vxlan") {
                return Err(Error::conflict(
                    ctx(),
                    format!(
                        "a {} link of that name exists and is not a vxlan device; refusing to replace it",
                        existing.kind.as_deref().unwrap_or("non-vxlan")
                    ),
                ));
            }
            let why = incompatibilities(spec, &existing);
            if why.is_empty() {
                let adjusted = self
                    .adjust_vxlan(spec, &existing)
                    .map_err(|e| e.context(ctx()))?;
                let link = if adjusted.is_empty() {
                    existing
                } else {
                    self.link_by_index(existing.index)
                        .map_err(|e| e.context(ctx()))?
                };
                return Ok(VxlanOutcome {
                    link,
                    created: false,
                    recreated: None,
                    adjusted,
                });
            }
            match self.delete_link(existing.index) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.context(ctx())),
            }
            recreated = Some(why);
        }
        match self.request_ack(
            RouteNetlinkMessage::NewLink(vxlan_message(spec)),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(()) => {}
            // Created concurrently by someone else: accept it if it is compatible.
            Err(e) if e.is_exists() => {
                let link = self
                    .link_by_name(&spec.name)
                    .map_err(|e| e.context(ctx()))?;
                let why = incompatibilities(spec, &link);
                if !why.is_empty() {
                    return Err(Error::conflict(
                        ctx(),
                        format!(
                            "created concurrently with other parameters: {}",
                            why.join(", ")
                        ),
                    ));
                }
                let adjusted = self
                    .adjust_vxlan(spec, &link)
                    .map_err(|e| e.context(ctx()))?;
                let link = self
                    .link_by_index(link.index)
                    .map_err(|e| e.context(ctx()))?;
                return Ok(VxlanOutcome {
                    link,
                    created: false,
                    recreated: None,
                    adjusted,
                });
            }
            Err(e) => return Err(e.context(ctx())),
        }
        let link = self
            .link_by_name(&spec.name)
            .map_err(|e| e.context(ctx()))?;
        Ok(VxlanOutcome {
            link,
            created: recreated.is_none(),
            recreated,
            adjusted: Vec::new(),
        })
    }

    /// Changes MTU, MAC and up state of a compatible device; returns what it changed.
    fn adjust_vxlan(&mut self, spec: &VxlanSpec, link: &Link) -> Result<Vec<String>> {
        let mut changed = Vec::new();
        if let Some(mtu) = spec.mtu {
            if link.mtu != mtu {
                self.set_link_mtu(link.index, mtu)?;
                changed.push(format!("MTU {} -> {mtu}", link.mtu));
            }
        }
        if let Some(mac) = spec.mac {
            if link.mac != mac {
                self.set_link_mac(link.index, &mac)?;
                changed.push(format!("MAC {} -> {}", link.mac_string(), format_mac(&mac)));
            }
        }
        if spec.up && !link.is_up() {
            self.set_link_up(link.index)?;
            changed.push("set up".to_string());
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> VxlanSpec {
        VxlanSpec {
            name: "flannel.1".into(),
            vni: 1,
            port: 8472,
            local: Some("192.168.1.10".parse().unwrap()),
            underlay: Some(2),
            learning: false,
            mtu: Some(1450),
            mac: Some([2, 0, 0, 0, 0, 1]),
            up: true,
        }
    }

    #[test]
    fn message_decodes_back_to_same_params() {
        let s = spec();
        let link = Link::as_reported(&vxlan_message(&s));
        let p = VxlanParams::from_link(&link).unwrap();
        assert_eq!(p.vni, Some(1));
        assert_eq!(p.port, Some(8472));
        assert_eq!(p.local, s.local);
        assert_eq!(p.underlay, Some(2));
        assert_eq!(p.learning, Some(false));
        assert_eq!(link.mtu, 1450);
        assert!(incompatibilities(&s, &link).is_empty());
    }

    #[test]
    fn incompatible_fields_are_named() {
        let link = Link::as_reported(&vxlan_message(&spec()));
        let mut other = spec();
        other.vni = 2;
        other.port = 4789;
        other.local = Some("192.168.1.99".parse().unwrap());
        let why = incompatibilities(&other, &link);
        assert_eq!(why.len(), 3, "{why:?}");
        // MTU and MAC are adjustable, not incompatible.
        let mut adjustable = spec();
        adjustable.mtu = Some(1400);
        adjustable.mac = Some([2, 9, 9, 9, 9, 9]);
        assert!(incompatibilities(&adjustable, &link).is_empty());
    }

    #[test]
    fn non_vxlan_link_is_incompatible() {
        let msg = rtnetlink::LinkBridge::new("flannel.1").build();
        let why = incompatibilities(&spec(), &Link::as_reported(&msg));
        assert_eq!(why.len(), 1);
        assert!(why[0].contains("bridge"), "{why:?}");
    }

    /// Root only: the device lifecycle and its neighbour/FDB entries in a throw-away netns.
    #[test]
    fn ensure_vxlan_and_entries_in_a_netns() {
        crate::skip_unless_root!();
        use netlink_packet_route::AddressFamily;
        let ns = crate::testutil::TestNetns::new("nk-vxlan");
        let mut s = ns.socket().unwrap();
        let veth = crate::link::VethSpec {
            name: "under0",
            peer_name: "under1",
            ..Default::default()
        };
        s.create_veth(&veth).unwrap();
        let under = s.link_by_name("under0").unwrap();
        s.set_link_up(under.index).unwrap();
        let mut want = spec();
        want.underlay = Some(under.index);

        let first = s.ensure_vxlan(&want).unwrap();
        assert!(first.created && first.link.is_up() && first.link.mtu == 1450);
        assert_eq!(first.link.mac, [2, 0, 0, 0, 0, 1]);
        let again = s.ensure_vxlan(&want).unwrap();
        assert!(!again.changed(), "{again:?}");
        assert_eq!(again.link.index, first.link.index);

        want.mtu = Some(1400);
        let adjusted = s.ensure_vxlan(&want).unwrap();
        assert_eq!(adjusted.adjusted.len(), 1);
        assert_eq!(adjusted.link.mtu, 1400);
        assert_eq!(adjusted.link.index, first.link.index);

        let dev = adjusted.link.index;
        let vtep: IpAddr = "10.244.1.0".parse().unwrap();
        let remote: IpAddr = "192.168.1.11".parse().unwrap();
        let mac = [2, 0, 0, 0, 0, 2];
        s.add_neighbour(dev, vtep, &mac).unwrap();
        assert!(s.add_neighbour(dev, vtep, &mac).unwrap_err().is_exists());
        s.replace_neighbour(dev, vtep, &[2, 0, 0, 0, 0, 3]).unwrap();
        s.replace_fdb(dev, &mac, Some(remote)).unwrap();
        let neigh = s.neighbours(AddressFamily::Inet, Some(dev)).unwrap();
        assert_eq!(neigh.len(), 1);
        assert_eq!(
            (neigh[0].destination, neigh[0].lladdr.clone()),
            (Some(vtep), vec![2, 0, 0, 0, 0, 3])
        );
        assert!(neigh[0].is_permanent());
        let fdb = s.fdb_entries(Some(dev)).unwrap();
        assert_eq!(fdb.len(), 1);
        assert_eq!(
            (fdb[0].mac(), fdb[0].destination),
            (Some(mac), Some(remote))
        );
        s.delete_fdb(dev, &mac, Some(remote)).unwrap();
        s.delete_neighbour(dev, vtep).unwrap();
        assert!(s.delete_neighbour(dev, vtep).unwrap_err().is_not_found());
        assert!(s.fdb_entries(Some(dev)).unwrap().is_empty());

        want.vni = 7;
        let recreated = s.ensure_vxlan(&want).unwrap();
        assert!(recreated.recreated.is_some());
        assert_eq!(
            VxlanParams::from_link(&recreated.link).unwrap().vni,
            Some(7)
        );
    }
}
