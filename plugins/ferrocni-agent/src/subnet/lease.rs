//! Lease values, in flannel's `lease.LeaseAttrs` JSON shape so flanneld nodes and ours read each
//! other's leases. `BackendType` and `BackendData` belong to the backends (`crate::backend`);
//! here they stay raw JSON. A vxlan lease:
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

impl LeaseAttrs {
    pub fn parse(bytes: &[u8]) -> Result<LeaseAttrs, serde_json::Error> {
        libcni::gojson::from_slice(bytes)
    }

    pub fn to_json(&self) -> String {
        // Serialising plain structs of strings/addresses cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_minimal_leases_and_refuses_junk() {
        let a = LeaseAttrs::parse(br#"{"PublicIP":"10.0.0.1"}"#).unwrap();
        assert_eq!(a.backend_type, "");
        assert_eq!(a.public_ip, "10.0.0.1".parse::<Ipv4Addr>().unwrap());
        assert_eq!(a.to_json(), r#"{"PublicIP":"10.0.0.1","PublicIPv6":null}"#);
        assert!(LeaseAttrs::parse(br#"{"PublicIP":"nope"}"#).is_err());
        assert!(LeaseAttrs::parse(b"[]").is_err());
    }
}
