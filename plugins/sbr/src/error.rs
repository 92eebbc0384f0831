//! The plugin's errors and their CNI codes.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum SbrError {
    /// The network configuration is not JSON of the expected shape.
    #[error("failed to parse network configuration: {0}")]
    Decode(#[source] libcni::gojson::Error),
    #[error("invalid table {0}: must be 1-4294967295")]
    Table(i64),
    #[error("gateways list cannot contain more than 2 entries (one IPv4, one IPv6)")]
    TooManyGateways,
    #[error("invalid static gateway IP address: {0}")]
    Gateway(String),
    #[error("gateways list contains multiple {family} addresses: {previous} and {gateway}")]
    RepeatedGatewayFamily {
        family: &'static str,
        previous: IpAddr,
        gateway: String,
    },
    #[error("This plugin must be called as chained plugin")]
    NotChained,
    #[error("No IP addresses supplied on interface: {0}")]
    NoAddresses(String),
    #[error("Cannot find network interface {ifname}: {source}")]
    FindLink {
        ifname: String,
        #[source]
        source: netkit::Error,
    },
    /// CHECK: an address has no source rule (into the configured table).
    #[error("sbr: no rule from {source_network}{}", .table.map(|t| format!(" to table {t}")).unwrap_or_default())]
    RuleMissing {
        source_network: IpNetwork,
        table: Option<u32>,
    },
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// An error libcni's skeleton helpers returned (prevResult parsing), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<SbrError> for CniError {
    fn from(e: SbrError) -> CniError {
        match e {
            SbrError::Delegated(e) => e,
            // Plain Go errors upstream (code 999), configuration errors included.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: SbrError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(SbrError::RepeatedGatewayFamily {
                family: "IPv4",
                previous: "10.0.0.1".parse().unwrap(),
                gateway: "10.0.0.2".into()
            }),
            (
                999,
                "gateways list contains multiple IPv4 addresses: 10.0.0.1 and 10.0.0.2".into()
            )
        );
        assert_eq!(
            cni(SbrError::RuleMissing {
                source_network: "10.0.0.5/32".parse().unwrap(),
                table: Some(100)
            }),
            (999, "sbr: no rule from 10.0.0.5/32 to table 100".into())
        );
        assert_eq!(
            cni(SbrError::RuleMissing {
                source_network: "10.0.0.5/32".parse().unwrap(),
                table: None
            })
            .1,
            "sbr: no rule from 10.0.0.5/32"
        );
        assert_eq!(
            cni(SbrError::FindLink {
                ifname: "eth0".into(),
                source: netkit::Error::invalid("failed to find link \"eth0\"", "gone")
            }),
            (
                999,
                "Cannot find network interface eth0: failed to find link \"eth0\": gone".into()
            )
        );
        assert_eq!(
            cni(SbrError::Delegated(CniError::decode("bad prevResult"))),
            (6, "bad prevResult".into())
        );
    }
}
