//! Lease values, in flannel's `lease.LeaseAttrs` JSON shape so flanneld nodes and ours read each
//! other's leases:
//! `{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`

use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAttrs {
    #[serde(rename = "PublicIP")]
    pub public_ip: Ipv4Addr,
    // Go marshals a nil *IP6 as null: always present.
    #[serde(rename = "PublicIPv6", default)]
    pub public_ipv6: Option<Ipv6Addr>,
    #[serde(
        rename = "BackendType",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub backend_type: String,
    #[serde(
        rename = "BackendData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub backend_data: Option<serde_json::Value>,
    #[serde(
        rename = "BackendV6Data",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub backend_v6_data: Option<serde_json::Value>,
}

/// flannel's `vxlanLeaseAttrs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VxlanBackendData {
    #[serde(rename = "VNI", default)]
    pub vni: u32,
    #[serde(rename = "VtepMAC", default, skip_serializing_if = "Option::is_none")]
    pub vtep_mac: Option<String>,
}

impl LeaseAttrs {
    pub fn vxlan(public_ip: Ipv4Addr, vni: u32, vtep_mac: Option<String>) -> LeaseAttrs {
        let data = VxlanBackendData { vni, vtep_mac };
        LeaseAttrs {
            public_ip,
            public_ipv6: None,
            backend_type: "vxlan".into(),
            backend_data: serde_json::to_value(data).ok(),
            backend_v6_data: None,
        }
    }

    /// Decodes a stored value with Go's leniency (flanneld wrote it with encoding/json, and
    /// reads ours the same way).
    /// The same lease with the IPv6 half of a dual-stack node (flannel's `PublicIPv6` and
    /// `BackendV6Data`, the latter for the `flannel-v6.<vni>` device).
    pub fn with_ipv6(mut self, public_ipv6: Ipv6Addr, vni: u32, vtep_mac: Option<String>) -> Self {
        let data = VxlanBackendData { vni, vtep_mac };
        self.public_ipv6 = Some(public_ipv6);
        self.backend_v6_data = serde_json::to_value(data).ok();
        self
    }

    pub fn parse(bytes: &[u8]) -> Result<LeaseAttrs, serde_json::Error> {
        libcni::gojson::from_slice(bytes)
    }

    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings/addresses cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The vxlan backend data, when this is a vxlan lease with well-formed data.
    pub fn vxlan_data(&self) -> Option<VxlanBackendData> {
        if self.backend_type != "vxlan" {
            return None;
        }
        match &self.backend_data {
            Some(v) => libcni::gojson::from_value(v).ok(),
            None => Some(VxlanBackendData {
                vni: 0,
                vtep_mac: None,
            }),
        }
    }
}

impl LeaseAttrs {
    /// The IPv6 vxlan data of a dual-stack vxlan lease: its `PublicIPv6` and well-formed
    /// `BackendV6Data`.
    pub fn vxlan_v6_data(&self) -> Option<(Ipv6Addr, VxlanBackendData)> {
        if self.backend_type != "vxlan" {
            return None;
        }
        let data = libcni::gojson::from_value(self.backend_v6_data.as_ref()?).ok()?;
        Some((self.public_ipv6?, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLANNEL_EXAMPLE: &str = r#"{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}"#;

    #[test]
    fn writes_flannels_exact_shape() {
        let a = LeaseAttrs::vxlan(
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
        let d = a.vxlan_data().unwrap();
        assert_eq!(d.vni, 1);
        assert_eq!(d.vtep_mac.as_deref(), Some("c6:d2:32:6f:8f:44"));
    }

    /// A dual-stack lease as flanneld writes it.
    const FLANNEL_DUAL: &str = r#"{"PublicIP":"192.168.64.3","PublicIPv6":"fd00:64::3","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"},"BackendV6Data":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:46"}}"#;

    #[test]
    fn dual_stack_leases_round_trip() {
        let a = LeaseAttrs::vxlan(
            "192.168.64.3".parse().unwrap(),
            1,
            Some("c6:d2:32:6f:8f:44".into()),
        )
        .with_ipv6(
            "fd00:64::3".parse().unwrap(),
            1,
            Some("c6:d2:32:6f:8f:46".into()),
        );
        assert_eq!(a.to_json(), FLANNEL_DUAL);
        let b = LeaseAttrs::parse(FLANNEL_DUAL.as_bytes()).unwrap();
        let (ip6, d6) = b.vxlan_v6_data().unwrap();
        assert_eq!(ip6, "fd00:64::3".parse::<Ipv6Addr>().unwrap());
        assert_eq!(d6.vtep_mac.as_deref(), Some("c6:d2:32:6f:8f:46"));
        assert!(LeaseAttrs::parse(FLANNEL_EXAMPLE.as_bytes())
            .unwrap()
            .vxlan_v6_data()
            .is_none());
    }

    #[test]
    fn reads_leases_as_go_does() {
        let a = LeaseAttrs::parse(
            br#"{"publicip":"10.0.0.9","backendtype":"vxlan","backenddata":{"vni":1,"vtepmac":"0e:00:00:00:00:01"},"PublicIPv6":null}"#,
        )
        .unwrap();
        assert_eq!(a.public_ip, "10.0.0.9".parse::<Ipv4Addr>().unwrap());
        assert_eq!(a.public_ipv6, None);
        let d = a.vxlan_data().unwrap();
        assert_eq!(
            (d.vni, d.vtep_mac.as_deref()),
            (1, Some("0e:00:00:00:00:01"))
        );
    }

    #[test]
    fn reads_minimal_and_other_backends() {
        let a = LeaseAttrs::parse(br#"{"PublicIP":"10.0.0.1"}"#).unwrap();
        assert_eq!(a.backend_type, "");
        assert!(a.vxlan_data().is_none());
        let hg = LeaseAttrs::parse(br#"{"PublicIP":"10.0.0.1","BackendType":"host-gw"}"#).unwrap();
        assert!(hg.vxlan_data().is_none());
        assert!(LeaseAttrs::parse(br#"{"PublicIP":"nope"}"#).is_err());
        assert!(LeaseAttrs::parse(b"[]").is_err());
    }
}
