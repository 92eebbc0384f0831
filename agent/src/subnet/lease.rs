//! Lease values, in flannel's `lease.LeaseAttrs` JSON shape so flanneld nodes and ours read each
//! other's leases. `BackendType` and `BackendData` belong to the backends; here they stay raw
//! JSON. A vxlan lease:
//! `{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}`

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The largest lease value the agent reads. A real one is about 200 bytes (a wireguard
/// dual-stack one under 400); anything near this is not a lease, and is dropped before
/// parsing so a flood of large values costs no memory beyond the listing page it came in.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Why a stored value is not a lease the agent can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// Larger than [`MAX_VALUE_BYTES`]; not parsed.
    TooLarge { bytes: usize },
    /// Not flannel's lease JSON (the decoder's message).
    NotLeaseJson(String),
    /// Listed without its value (larger than a whole response of the store): the store's
    /// words, after "its value is".
    NotListed(String),
    /// A Kubernetes node whose podCIDRs or annotations name no usable lease (what is wrong).
    BadAnnotation(String),
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::TooLarge { bytes } => write!(
                f,
                "its value is {bytes} bytes, over the {MAX_VALUE_BYTES} bytes a lease may have (not read)"
            ),
            Unreadable::NotLeaseJson(e) => write!(f, "its value is not flannel lease JSON ({e})"),
            Unreadable::NotListed(why) => write!(f, "its value is {why}"),
            Unreadable::BadAnnotation(why) => write!(f, "its node is not a usable lease: {why}"),
        }
    }
}

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

    /// A stored value, refused unread when it is larger than any lease.
    pub fn decode(bytes: &[u8]) -> Result<LeaseAttrs, Unreadable> {
        if bytes.len() > MAX_VALUE_BYTES {
            return Err(Unreadable::TooLarge { bytes: bytes.len() });
        }
        // The decoder's message can quote the value: clipped.
        LeaseAttrs::parse(bytes)
            .map_err(|e| Unreadable::NotLeaseJson(crate::ops::log::clip(&e.to_string(), 160)))
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

    #[test]
    fn values_larger_than_any_lease_are_not_parsed() {
        // Valid JSON, padded past the cap: refused by size, whatever it holds.
        let pad = " ".repeat(MAX_VALUE_BYTES);
        let big = format!(r#"{{"PublicIP":"10.0.0.1"{pad}}}"#);
        assert_eq!(
            LeaseAttrs::decode(big.as_bytes()),
            Err(Unreadable::TooLarge { bytes: big.len() })
        );
        let text = LeaseAttrs::decode(big.as_bytes()).unwrap_err().to_string();
        assert!(text.contains(&big.len().to_string()), "{text}");
        assert!(LeaseAttrs::decode(br#"{"PublicIP":"10.0.0.1"}"#).is_ok());
        assert!(matches!(
            LeaseAttrs::decode(b"garbage"),
            Err(Unreadable::NotLeaseJson(_))
        ));
    }
}
