//! flannel's `vxlan` backend: pod packets to another node are wrapped in VXLAN by
//! `flannel.<vni>` (and `flannel-v6.<vni>` on a dual-stack network), one neighbour, FDB entry
//! and route per peer. The data plane is the `overlay` crate's reconcile, shared with the CNI
//! plugin, through the [`overlay`](crate::backend::overlay) seam.
//!
//! Options (flannel's names and defaults): `VNI` (1), `Port` (0: the kernel's 8472),
//! `DirectRouting` (peers on the underlay's own subnet get a plain route, our `auto` mode),
//! `MTU` (the underlay MTU to assume). `GBP` and `Learning` are refused.
//!
//! Lease: `{"PublicIP", "PublicIPv6", "BackendType": "vxlan", "BackendData": {"VNI",
//! "VtepMAC"}, "BackendV6Data": {"VNI", "VtepMAC"}}`, the MACs being the devices' own (derived
//! from the VTEP addresses, so they are right from the first write, and corrected from the
//! kernel after each pass).

mod error;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::backend::overlay::{self, IpFamily, OverlayParams, Overlays};
use crate::backend::{
    Backend, BackendError, BackendObject, DataPlane, LeaseValue, Need, Network, Node, Pass, Peer,
    Refusal, Registration, TemplateValues,
};
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
pub use error::VxlanError;

pub const REGISTRATION: Registration = Registration {
    names: &["vxlan"],
    description: "VXLAN overlay (flannel.<VNI>), the vxlan CNI plugin's own reconcile",
    needs: &[Need::Kernel("vxlan")],
    flags: overlay::FLAGS,
    parse,
};

/// flannel's kernel-default VXLAN port (the `vxlan` module's `udp_port`).
pub const DEFAULT_PORT: u16 = 8472;
/// Encapsulation overhead of VXLAN over IPv4 (outer IP 20 + UDP 8 + VXLAN 8 + inner Ethernet 14).
pub const OVERHEAD: u32 = 50;
/// Extra outer-header bytes of an IPv6 underlay (40 instead of 20).
const IPV6_UNDERLAY_EXTRA: u32 = 20;
/// MTU written to subnet.env when the device cannot be read back (flannel's 1500 − 50).
const FALLBACK_MTU: u32 = 1450;

/// The `vxlan` backend's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vxlan {
    pub vni: u32,
    /// 0 = leave it to the kernel default (8472), as flannel does.
    pub port: u16,
    pub direct_routing: bool,
    /// flannel's `Backend.MTU`: the underlay MTU to assume.
    pub mtu: Option<u32>,
}

#[derive(Deserialize)]
struct RawVxlan {
    #[serde(rename = "VNI", default)]
    vni: Option<u32>,
    #[serde(rename = "Port", default)]
    port: Option<u16>,
    #[serde(rename = "DirectRouting", default)]
    direct_routing: bool,
    #[serde(rename = "MTU", default)]
    mtu: Option<u32>,
    #[serde(rename = "GBP", default)]
    gbp: bool,
    #[serde(rename = "Learning", default)]
    learning: bool,
}

fn parse(map: &BackendObject, _net: &Network) -> Result<Box<dyn Backend>, String> {
    let raw: RawVxlan = libcni::gojson::from_map(map).map_err(|e| format!("\"Backend\": {e}"))?;
    if raw.gbp || raw.learning {
        return Err("\"Backend\": GBP and Learning are not supported".into());
    }
    let vni = raw.vni.unwrap_or(1);
    if vni == 0 || vni >= 1 << 24 {
        return Err(format!("\"Backend.VNI\" {vni} is outside 1..16777215"));
    }
    if let Some(mtu) = raw.mtu {
        if !(576..=65535).contains(&mtu) {
            return Err(format!("\"Backend.MTU\" {mtu} is outside 576..65535"));
        }
    }
    Ok(Box::new(Vxlan {
        vni,
        port: raw.port.unwrap_or(0),
        direct_routing: raw.direct_routing,
        mtu: raw.mtu,
    }))
}

impl Vxlan {
    pub fn effective_port(&self) -> u16 {
        if self.port == 0 {
            DEFAULT_PORT
        } else {
            self.port
        }
    }

    /// The vxlan `mode`: flannel's DirectRouting is our `auto`.
    pub fn mode(&self) -> &'static str {
        if self.direct_routing {
            "auto"
        } else {
            "vxlan"
        }
    }

    /// The overlay settings of one family's device.
    pub fn overlay_params(&self, ipv6_underlay: bool) -> OverlayParams {
        // flannel's Backend.MTU is the underlay MTU to assume; the device gets 50 bytes less
        // (70 over an IPv6 underlay, where flannel's 50 would make the outer packets too big).
        let extra = if ipv6_underlay {
            IPV6_UNDERLAY_EXTRA
        } else {
            0
        };
        OverlayParams {
            mode: self.mode(),
            vni: self.vni,
            port: self.effective_port(),
            device_mtu: self.mtu.map(|m| m.saturating_sub(OVERHEAD + extra)),
        }
    }
}

impl Backend for Vxlan {
    fn type_name(&self) -> &'static str {
        "vxlan"
    }

    fn describe(&self) -> String {
        format!(
            "vxlan VNI {} port {}{}",
            self.vni,
            self.effective_port(),
            if self.direct_routing {
                ", DirectRouting"
            } else {
                ""
            }
        )
    }

    fn mtu_overhead(&self) -> u32 {
        OVERHEAD
    }

    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal> {
        if attrs.backend_type != "vxlan" {
            return Err(Refusal::OtherBackend);
        }
        let Some(data) = lease_data(attrs) else {
            return Err(Refusal::Invalid(
                "BackendData is not vxlan's {\"VNI\", \"VtepMAC\"}".into(),
            ));
        };
        check_vtep_mac("BackendData", data.vtep_mac.as_deref()).map_err(Refusal::Invalid)?;
        // The IPv6 half, when the lease has one (a peer without it is an IPv4 peer only).
        if let Some(v6) = &attrs.backend_v6_data {
            let data: LeaseData = libcni::gojson::from_value(v6).map_err(|_| {
                Refusal::Invalid("BackendV6Data is not vxlan's {\"VNI\", \"VtepMAC\"}".into())
            })?;
            check_vtep_mac("BackendV6Data", data.vtep_mac.as_deref()).map_err(Refusal::Invalid)?;
        }
        Ok(())
    }

    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError> {
        Ok(Box::new(VxlanPlane {
            opts: self.clone(),
            public_ip: node.public_ip,
            public_ipv6: node.public_ipv6,
            overlays: Overlays::new(node, self.overlay_params(false), self.overlay_params(true)),
        }))
    }
}

/// flannel's `vxlanLeaseAttrs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseData {
    #[serde(rename = "VNI", default)]
    pub vni: u32,
    #[serde(rename = "VtepMAC", default, skip_serializing_if = "Option::is_none")]
    pub vtep_mac: Option<String>,
}

/// A vxlan lease value, IPv4 part.
pub fn lease_attrs(public_ip: Ipv4Addr, vni: u32, vtep_mac: Option<String>) -> LeaseAttrs {
    LeaseAttrs {
        public_ip,
        public_ipv6: None,
        backend_type: "vxlan".into(),
        backend_data: serde_json::to_value(LeaseData { vni, vtep_mac }).ok(),
        backend_v6_data: None,
    }
}

/// `attrs` with the IPv6 part of a dual-stack vxlan lease.
pub fn with_ipv6(
    mut attrs: LeaseAttrs,
    public_ipv6: Ipv6Addr,
    vni: u32,
    vtep_mac: Option<String>,
) -> LeaseAttrs {
    attrs.public_ipv6 = Some(public_ipv6);
    attrs.backend_v6_data = serde_json::to_value(LeaseData { vni, vtep_mac }).ok();
    attrs
}

/// The IPv4 backend data of a vxlan lease (a lease without any is read as flanneld reads it:
/// no MAC known, the derived one is used).
pub fn lease_data(attrs: &LeaseAttrs) -> Option<LeaseData> {
    if attrs.backend_type != "vxlan" {
        return None;
    }
    match &attrs.backend_data {
        Some(v) => libcni::gojson::from_value(v).ok(),
        None => Some(LeaseData {
            vni: 0,
            vtep_mac: None,
        }),
    }
}

/// The IPv6 underlay address and backend data of a dual-stack vxlan lease.
pub fn lease_v6_data(attrs: &LeaseAttrs) -> Option<(Ipv6Addr, LeaseData)> {
    if attrs.backend_type != "vxlan" {
        return None;
    }
    let data = libcni::gojson::from_value(attrs.backend_v6_data.as_ref()?).ok()?;
    Some((attrs.public_ipv6?, data))
}

/// A peer's VTEP MAC must be one a device can have: it becomes the destination of every frame
/// to that peer (its neighbour entry) and the key of its FDB entry. None: the derived one.
fn check_vtep_mac(field: &str, mac: Option<&str>) -> Result<(), String> {
    let Some(text) = mac else { return Ok(()) };
    let shown = || crate::ops::log::clip(text, 40);
    let mac = netkit::link::parse_mac(text)
        .map_err(|_| format!("{field}.VtepMAC {:?} is not a MAC address", shown()))?;
    if mac[0] & 1 != 0 {
        return Err(format!(
            "{field}.VtepMAC {} is a multicast address",
            shown()
        ));
    }
    if mac == [0; 6] {
        return Err(format!("{field}.VtepMAC {} is all zeros", shown()));
    }
    Ok(())
}

/// The VTEP MAC the vxlan reconcile gives a device whose VTEP is `subnet`'s network address.
fn derived_mac(subnet: IpNetwork) -> String {
    netkit::link::format_mac(&::overlay::mac::vtep_mac(subnet.network()))
}

/// The vxlan backend on this node.
struct VxlanPlane {
    opts: Vxlan,
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
    overlays: Overlays,
}

impl VxlanPlane {
    /// Our lease value with the given VTEP MACs per family.
    fn attrs_with(&self, key: &SubnetKey, mac: impl Fn(IpFamily) -> String) -> LeaseAttrs {
        let vni = self.opts.vni;
        let attrs = lease_attrs(self.public_ip, vni, Some(mac(IpFamily::V4)));
        match (key.v6, self.public_ipv6) {
            (Some(_), Some(ip6)) => with_ipv6(attrs, ip6, vni, Some(mac(IpFamily::V6))),
            _ => attrs,
        }
    }
}

impl DataPlane for VxlanPlane {
    /// The VTEP MACs are the ones the vxlan reconcile gives the devices (derived from the VTEP
    /// addresses), so flanneld peers can program us from the first moment.
    fn lease_attrs(&self, key: &SubnetKey) -> LeaseAttrs {
        self.attrs_with(key, |family| {
            family.own_subnet(key).map(derived_mac).unwrap_or_default()
        })
    }

    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError> {
        let mut log = Vec::new();
        // An IPv4-only flanneld node is an IPv4 peer only.
        let devices = self
            .overlays
            .sync(
                own,
                peers,
                |family, p| match family {
                    IpFamily::V4 => {
                        let data = lease_data(&p.attrs)?;
                        Some((IpAddr::V4(p.attrs.public_ip), data.vtep_mac))
                    }
                    IpFamily::V6 => {
                        let (ip6, data) = lease_v6_data(&p.attrs)?;
                        Some((IpAddr::V6(ip6), data.vtep_mac))
                    }
                },
                &mut log,
            )
            .map_err(VxlanError::from)?;
        let mut mtu: Option<u32> = None;
        let mut macs = Vec::new();
        for (family, info) in &devices {
            match info {
                Some((mac, dev_mtu)) => {
                    macs.push((*family, mac.clone()));
                    // Pods have one MTU for both families: the smaller device's.
                    mtu = Some(mtu.map_or(*dev_mtu, |m| m.min(*dev_mtu)));
                }
                None => log.push(format!(
                    "a {family:?} VXLAN device was not found after reconcile; assuming MTU {FALLBACK_MTU}"
                )),
            }
        }
        // The lease advertises the devices' real MACs (derived ones until a device says
        // otherwise).
        let wanted = self.attrs_with(own, |family| {
            macs.iter()
                .find(|(f, _)| *f == family)
                .map(|(_, m)| m.clone())
                .or_else(|| family.own_subnet(own).map(derived_mac))
                .unwrap_or_default()
        });
        Ok(Pass {
            mtu: mtu.unwrap_or(FALLBACK_MTU),
            programmed: self.overlays.programmed(),
            log,
            lease_attrs: Some(LeaseValue {
                attrs: wanted,
                what: format!(
                    "VtepMAC {}",
                    macs.iter()
                        .map(|(_, m)| m.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        })
    }

    fn template_values(&self) -> TemplateValues {
        TemplateValues {
            vni: self.opts.vni,
            port: self.opts.effective_port(),
            mode: self.opts.mode().into(),
            peers_file: self.overlays.peers_file(IpFamily::V4),
            ipv6_peers_file: self.overlays.peers_file(IpFamily::V6),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::parse_config;

    fn options(json: &str) -> Vxlan {
        let (_, b) = parse_config("/coreos.com/network/config", json).unwrap();
        b.as_any().downcast_ref::<Vxlan>().unwrap().clone()
    }

    #[test]
    fn options_as_flannel_reads_them() {
        let defaults = options(r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#);
        assert_eq!(
            defaults,
            Vxlan {
                vni: 1,
                port: 0,
                direct_routing: false,
                mtu: None,
            }
        );
        assert_eq!(defaults.effective_port(), 8472);
        assert_eq!(
            options(
                r#"{"Network":"10.5.0.0/16","Backend":{"Type":"vxlan","VNI":42,"Port":4789,"DirectRouting":true}}"#
            ),
            Vxlan {
                vni: 42,
                port: 4789,
                direct_routing: true,
                mtu: None,
            }
        );
        // Go's encoding/json: keys match case-insensitively.
        let v = options(
            r#"{"network":"10.9.0.0/16","backend":{"type":"vxlan","vni":7,"directRouting":true}}"#,
        );
        assert_eq!((v.vni, v.direct_routing), (7, true));
    }

    const FLANNEL_EXAMPLE: &str = r#"{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}"#;

    #[test]
    fn writes_flannels_exact_shape() {
        let a = lease_attrs(
            "192.168.64.3".parse().unwrap(),
            1,
            Some("c6:d2:32:6f:8f:44".into()),
        );
        assert_eq!(a.to_json(), FLANNEL_EXAMPLE);
    }

    #[test]
    fn reads_flanneld_lease() {
        let a = LeaseAttrs::parse(FLANNEL_EXAMPLE.as_bytes()).unwrap();
        assert_eq!(a.public_ip, "192.168.64.3".parse::<Ipv4Addr>().unwrap());
        let d = lease_data(&a).unwrap();
        assert_eq!(d.vni, 1);
        assert_eq!(d.vtep_mac.as_deref(), Some("c6:d2:32:6f:8f:44"));
    }

    const FLANNEL_DUAL: &str = r#"{"PublicIP":"192.168.64.3","PublicIPv6":"fd00:64::3","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"},"BackendV6Data":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:46"}}"#;

    #[test]
    fn dual_stack_leases_round_trip() {
        let a = with_ipv6(
            lease_attrs(
                "192.168.64.3".parse().unwrap(),
                1,
                Some("c6:d2:32:6f:8f:44".into()),
            ),
            "fd00:64::3".parse().unwrap(),
            1,
            Some("c6:d2:32:6f:8f:46".into()),
        );
        assert_eq!(a.to_json(), FLANNEL_DUAL);
        let b = LeaseAttrs::parse(FLANNEL_DUAL.as_bytes()).unwrap();
        let (ip6, d6) = lease_v6_data(&b).unwrap();
        assert_eq!(ip6, "fd00:64::3".parse::<Ipv6Addr>().unwrap());
        assert_eq!(d6.vtep_mac.as_deref(), Some("c6:d2:32:6f:8f:46"));
        assert!(lease_v6_data(&LeaseAttrs::parse(FLANNEL_EXAMPLE.as_bytes()).unwrap()).is_none());
    }

    #[test]
    fn reads_leases_as_go_does() {
        let a = LeaseAttrs::parse(
            br#"{"publicip":"10.0.0.9","backendtype":"vxlan","backenddata":{"vni":1,"vtepmac":"0e:00:00:00:00:01"},"PublicIPv6":null}"#,
        )
        .unwrap();
        assert_eq!(a.public_ip, "10.0.0.9".parse::<Ipv4Addr>().unwrap());
        assert_eq!(a.public_ipv6, None);
        let d = lease_data(&a).unwrap();
        assert_eq!(
            (d.vni, d.vtep_mac.as_deref()),
            (1, Some("0e:00:00:00:00:01"))
        );
    }

    #[test]
    fn peers_need_unicast_vtep_macs() {
        let v = Vxlan {
            vni: 1,
            port: 0,
            direct_routing: false,
            mtu: None,
        };
        let check = |json: &str| v.check_peer(&LeaseAttrs::parse(json.as_bytes()).unwrap());
        assert_eq!(check(FLANNEL_EXAMPLE), Ok(()));
        assert_eq!(check(FLANNEL_DUAL), Ok(()));
        // No MAC (the derived one is used) is fine, as is no BackendData at all.
        assert_eq!(
            check(r#"{"PublicIP":"10.0.0.1","BackendType":"vxlan","BackendData":{"VNI":1}}"#),
            Ok(())
        );
        for (mac, why) in [
            (
                "01:00:5e:00:00:01",
                "BackendData.VtepMAC 01:00:5e:00:00:01 is a multicast address",
            ),
            ("ff:ff:ff:ff:ff:ff", "is a multicast address"),
            ("00:00:00:00:00:00", "is all zeros"),
            (
                "not-a-mac",
                "BackendData.VtepMAC \"not-a-mac\" is not a MAC address",
            ),
            ("c6:d2:32:6f:8f", "is not a MAC address"),
        ] {
            let lease = FLANNEL_EXAMPLE.replace("c6:d2:32:6f:8f:44", mac);
            match check(&lease) {
                Err(Refusal::Invalid(text)) => assert!(text.contains(why), "{mac}: {text}"),
                other => panic!("{mac}: {other:?}"),
            }
        }
        let bad_v6 = FLANNEL_DUAL.replace("c6:d2:32:6f:8f:46", "33:33:00:00:00:01");
        assert_eq!(
            check(&bad_v6),
            Err(Refusal::Invalid(
                "BackendV6Data.VtepMAC 33:33:00:00:00:01 is a multicast address".into()
            ))
        );
        let junk_v6 = FLANNEL_DUAL.replace(
            r#""BackendV6Data":{"VNI":1,"#,
            r#""BackendV6Data":{"VNI":"x","#,
        );
        assert!(
            matches!(check(&junk_v6), Err(Refusal::Invalid(w)) if w.starts_with("BackendV6Data"))
        );
        assert_eq!(
            check(r#"{"PublicIP":"10.0.0.1","BackendType":"vxlan","BackendData":{"VtepMAC":5}}"#),
            Err(Refusal::Invalid(
                "BackendData is not vxlan's {\"VNI\", \"VtepMAC\"}".into()
            ))
        );
    }

    #[test]
    fn other_backends_carry_no_vxlan_data() {
        let a = LeaseAttrs::parse(br#"{"PublicIP":"10.0.0.1"}"#).unwrap();
        assert!(lease_data(&a).is_none());
        let hg = LeaseAttrs::parse(br#"{"PublicIP":"10.0.0.1","BackendType":"host-gw"}"#).unwrap();
        assert!(lease_data(&hg).is_none());
    }
}
