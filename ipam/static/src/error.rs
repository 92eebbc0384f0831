//! The plugin's errors and their CNI codes.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum StaticError {
    /// The JSON decoder's error, unwrapped as the reference returns it.
    #[error("{0}")]
    Decode(#[source] libcni::gojson::Error),
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    #[error("the 'address' field is expected to be in CIDR notation, got: '{0}'")]
    AddressNotCidr(String),
    /// CNI_ARGS `IP=`.
    #[error("the 'ip' field is expected to be in CIDR notation, got: '{0}'")]
    EnvIpNotCidr(String),
    /// `args.cni.ips` or `runtimeConfig.ips`.
    #[error("an entry in the 'ips' field is NOT in CIDR notation, got: '{0}'")]
    IpsEntryNotCidr(String),
    /// A `gateway` or route `gw`, in the wording of Go's `net.IP` decoder.
    #[error("invalid IP address: {0}")]
    InvalidIp(String),
    /// A route `dst`, in the wording of Go's `types.IPNet` decoder.
    #[error("invalid CIDR address: {0}")]
    InvalidCidr(String),
    #[error("route: missing dst")]
    RouteWithoutDst,
    /// CNI_ARGS `GATEWAY=`.
    #[error("invalid gateway address: {0}")]
    InvalidGateway(String),
    #[error("CNI version {0} does not support more than 1 address per family")]
    TooManyAddresses(String),
    #[error("Required prevResult missing")]
    MissingPrevResult,
    /// CHECK: a configured address is not in prevResult.
    #[error("static: address {address} is not in prevResult for interface {ifname}")]
    NotInPrevResult { address: IpNetwork, ifname: String },
    /// CHECK: a configured address has another gateway in prevResult.
    #[error("static: Failed to match addr {address} on interface {ifname}")]
    GatewayMismatch { address: IpAddr, ifname: String },
    /// An error libcni's skeleton helpers returned (CNI_ARGS, prevResult), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<StaticError> for CniError {
    fn from(e: StaticError) -> CniError {
        match e {
            StaticError::Delegated(e) => e,
            // Every error of static is a plain one upstream (`fmt.Errorf`, or the JSON
            // decoder's), which the plugin skeleton reports with code 999.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: StaticError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(StaticError::EnvIpNotCidr("10.1.0.2".into())),
            (
                999,
                "the 'ip' field is expected to be in CIDR notation, got: '10.1.0.2'".into()
            )
        );
        assert_eq!(
            cni(StaticError::TooManyAddresses("0.2.0".into())),
            (
                999,
                "CNI version 0.2.0 does not support more than 1 address per family".into()
            )
        );
        assert_eq!(
            cni(StaticError::NotInPrevResult {
                address: "10.0.0.3/24".parse().unwrap(),
                ifname: "eth0".into()
            }),
            (
                999,
                "static: address 10.0.0.3/24 is not in prevResult for interface eth0".into()
            )
        );
        assert_eq!(
            cni(StaticError::MissingIpam),
            (999, "IPAM config missing 'ipam' key".into())
        );
        assert_eq!(
            cni(StaticError::Delegated(CniError::invalid_env(
                "bad CNI_ARGS"
            ))),
            (4, "bad CNI_ARGS".into())
        );
    }
}
