//! Errors of the host-local plugin; `From<IpamError> for CniError` is the only place that
//! picks their CNI codes.

use std::net::IpAddr;
use std::path::PathBuf;

use libcni::CniError;
use serde_json::Value;

use crate::range::RangeSet;

#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    // Configuration (code 999: plain errors upstream, which its skeleton reports so).
    #[error("IPAM config missing 'ipam' key")]
    MissingIpam,
    /// A field of the wrong JSON type; `expected` is "an object", "a list" or "a string".
    #[error("{field}: expected {expected}, got {value}")]
    WrongType {
        field: String,
        expected: &'static str,
        value: Value,
    },
    #[error("invalid IP address: {0}")]
    InvalidIp(String),
    #[error("invalid CIDR address: {0}")]
    InvalidCidr(String),
    #[error("range: missing subnet")]
    MissingSubnet,
    #[error("route: missing dst")]
    MissingDst,
    /// An entry of `args.cni.ips` or `runtimeConfig.ips`.
    #[error("cannot understand ip: invalid IP address: {0}")]
    RequestedIp(String),
    /// CNI_ARGS `IP=`, in the wording of the reference's args parser.
    #[error("ARGS: error parsing value of pair \"IP={0}\": invalid IP address {0}")]
    EnvIp(String),
    #[error("no IP ranges specified")]
    NoRanges,
    /// The range module says why the set is unusable.
    #[error("invalid range set {index}: {reason}")]
    RangeSet { index: usize, reason: String },
    #[error("CNI version {0} does not support more than 1 address per family")]
    TooManyAddresses(String),
    #[error("range set {0} overlaps with {1}")]
    Overlap(usize, usize),
    #[error("invalid network name {0:?}")]
    NetworkName(String),
    // Identifiers from the environment (code 4).
    #[error("invalid container ID {0:?}")]
    ContainerId(String),
    #[error("invalid interface name {0:?}")]
    IfName(String),
    // Allocation (code 999, as the reference reports it).
    #[error("failed to allocate for range {index}: {reason}")]
    Allocate { index: usize, reason: AllocFailure },
    #[error("failed to allocate all requested IPs: {}", join(.0, " "))]
    RequestedLeftOver(Vec<IpAddr>),
    // CHECK (code 999, as the reference).
    #[error("host-local: Failed to find address added by container {0}")]
    NoLease(String),
    #[error(
        "host-local: address {ip} is not reserved for container {container_id} interface {ifname}"
    )]
    NotReserved {
        ip: IpAddr,
        container_id: String,
        ifname: String,
    },
    // The store (code 5).
    /// `op` names the operation ("open resolvConf", "create store directory"...).
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store {} could not be created", .0.display())]
    StoreMissing(PathBuf),
    #[error("refusing store directory {}: it is a symlink or not a directory", .0.display())]
    StoreNotADirectory(PathBuf),
    /// DEL could not release some leases.
    #[error("{}", .0.join(";"))]
    Release(Vec<String>),
    /// GC could not remove some leases.
    #[error("{}", .0.join("; "))]
    Gc(Vec<String>),
    // STATUS (code 50).
    #[error("no IP addresses available in range set: {0}")]
    Exhausted(RangeSet),
}

/// Why one range set could not give an address.
#[derive(Debug, thiserror::Error)]
pub enum AllocFailure {
    #[error("{ip} not in range set {set}")]
    NotInSet { ip: IpAddr, set: RangeSet },
    #[error("requested ip {0} is subnet's gateway")]
    IsGateway(IpAddr),
    #[error("requested IP address {ip} is not available in range set {set}")]
    Taken { ip: IpAddr, set: RangeSet },
    #[error("no IP addresses available in range set: {0}")]
    Exhausted(RangeSet),
    #[error("{ip} has been allocated to {container_id}, duplicate allocation is not allowed")]
    Duplicate { ip: IpAddr, container_id: String },
}

fn join(ips: &[IpAddr], sep: &str) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(sep)
}

impl From<IpamError> for CniError {
    fn from(e: IpamError) -> CniError {
        let msg = e.to_string();
        match e {
            IpamError::ContainerId(_) | IpamError::IfName(_) => CniError::invalid_env(msg),
            IpamError::Io { .. }
            | IpamError::StoreMissing(_)
            | IpamError::StoreNotADirectory(_)
            | IpamError::Release(_)
            | IpamError::Gc(_) => CniError::io(msg),
            IpamError::Exhausted(_) => CniError::not_available(msg),
            IpamError::MissingIpam
            | IpamError::WrongType { .. }
            | IpamError::InvalidIp(_)
            | IpamError::InvalidCidr(_)
            | IpamError::MissingSubnet
            | IpamError::MissingDst
            | IpamError::RequestedIp(_)
            | IpamError::EnvIp(_)
            | IpamError::NoRanges
            | IpamError::RangeSet { .. }
            | IpamError::TooManyAddresses(_)
            | IpamError::Overlap(..)
            | IpamError::NetworkName(_)
            | IpamError::Allocate { .. }
            | IpamError::RequestedLeftOver(_)
            | IpamError::NoLease(_)
            | IpamError::NotReserved { .. } => CniError::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::RangeSpec;

    fn cni(e: IpamError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    fn set() -> RangeSet {
        RangeSet::canonicalize(&[RangeSpec {
            subnet: ("10.0.0.0".parse().unwrap(), 30),
            range_start: None,
            range_end: None,
            gateway: None,
        }])
        .unwrap()
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(IpamError::NoRanges),
            (999, "no IP ranges specified".into())
        );
        assert_eq!(
            cni(IpamError::WrongType {
                field: "ranges".into(),
                expected: "a list",
                value: serde_json::json!(5)
            }),
            (999, "ranges: expected a list, got 5".into())
        );
        assert_eq!(
            cni(IpamError::EnvIp("x".into())),
            (
                999,
                "ARGS: error parsing value of pair \"IP=x\": invalid IP address x".into()
            )
        );
        assert_eq!(cni(IpamError::ContainerId(String::new())).0, 4);
        assert_eq!(cni(IpamError::IfName("a/b".into())).0, 4);
        let (code, msg) = cni(IpamError::Allocate {
            index: 0,
            reason: AllocFailure::Exhausted(set()),
        });
        assert_eq!(code, 999);
        assert!(
            msg.starts_with(
                "failed to allocate for range 0: no IP addresses available in range set: 10.0.0."
            ),
            "{msg}"
        );
        assert_eq!(
            cni(IpamError::RequestedLeftOver(vec![
                "10.0.0.9".parse().unwrap(),
                "10.0.0.10".parse().unwrap()
            ])),
            (
                999,
                "failed to allocate all requested IPs: 10.0.0.9 10.0.0.10".into()
            )
        );
        assert_eq!(
            cni(IpamError::NotReserved {
                ip: "10.0.0.2".parse().unwrap(),
                container_id: "c".into(),
                ifname: "eth0".into()
            }),
            (
                999,
                "host-local: address 10.0.0.2 is not reserved for container c interface eth0"
                    .into()
            )
        );
        let (code, msg) = cni(IpamError::Io {
            op: "open resolvConf",
            path: "/etc/r".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        assert_eq!(code, 5);
        assert!(msg.starts_with("open resolvConf /etc/r: "), "{msg}");
        assert_eq!(
            cni(IpamError::Release(vec!["a".into(), "b".into()])),
            (5, "a;b".into())
        );
        assert_eq!(
            cni(IpamError::Gc(vec!["a".into(), "b".into()])),
            (5, "a; b".into())
        );
        assert_eq!(cni(IpamError::StoreMissing("/d/n".into())).0, 5);
        let (code, msg) = cni(IpamError::Exhausted(set()));
        assert_eq!(code, 50);
        assert!(
            msg.starts_with("no IP addresses available in range set: "),
            "{msg}"
        );
    }
}
