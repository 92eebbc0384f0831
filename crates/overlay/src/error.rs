//! Errors of the overlay reconciler, each mapped to a CNI error code.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use libcni::CniError;
use netkit::vxlan_link::MAX_VNI;

/// Why a reconcile pass (or loading its inputs) could not run at all. Problems with single
/// peers are not errors: they are listed in the [`crate::Report`] and the pass goes on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config field is missing or malformed.
    #[error("invalid vxlan config: {0}")]
    Config(#[from] ConfigError),
    /// The peers file cannot be read or is not a JSON list of peers.
    #[error("failed to load peers file {path:?}: {detail}")]
    PeersFile { path: PathBuf, detail: String },
    /// The underlay interface or address cannot be determined (the node is not ready).
    #[error("underlay not ready: {0}")]
    Underlay(#[from] UnderlayError),
    /// No `subnet` is configured and the node's own entry is not (yet) in the peer list
    /// (found by its underlay address): an agent may not have published its lease yet, so
    /// the runtime should try again later.
    #[error("node not ready: no \"subnet\" given and no peer entry has this node's address {0}")]
    NotListed(IpAddr),
    /// Taking the reconcile lock failed.
    #[error("failed to lock {path:?}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A kernel operation failed.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// ADD without a prevResult: vxlan only runs chained.
    #[error("vxlan must be chained after a plugin that returns a result (prevResult is missing)")]
    NotChained,
    /// CHECK without a prevResult.
    #[error("vxlan CHECK needs prevResult")]
    CheckNeedsPrevResult,
    /// STATUS: the peers file or the underlay is not there yet (code 50).
    #[error(transparent)]
    Unavailable(Box<Error>),
    /// An error libcni's skeleton helpers returned (prevResult parsing), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl Error {}

/// What is wrong with the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The JSON decoder's words (a wrong type, an unknown mode value...).
    #[error("{0}")]
    Decode(#[source] libcni::gojson::Error),
    #[error("not JSON: {0}")]
    NotJson(#[source] libcni::gojson::Error),
    #[error("config is not a JSON object")]
    NotAnObject,
    #[error("the conflist has no plugin of type \"vxlan\"")]
    NoVxlanPlugin,
    #[error("\"network\" (the cluster pod network) is required")]
    NetworkRequired,
    #[error(transparent)]
    Subnet(#[from] SubnetError),
    #[error("subnet {subnet} is not inside network {network}")]
    SubnetOutside {
        subnet: IpNetwork,
        network: IpNetwork,
    },
    #[error("give \"subnet\", \"peers\" or \"peersFile\"")]
    NoSubnetSource,
    #[error("mode {0:?} is not one of \"vxlan\", \"host-gw\", \"auto\"")]
    Mode(String),
    #[error("vni {0} is larger than {MAX_VNI}")]
    VniTooLarge(u32),
    #[error("port 0 is not a valid UDP port")]
    PortZero,
    #[error("device: {0}")]
    Device(#[source] netkit::Error),
    #[error("underlayInterface: {0}")]
    UnderlayInterface(#[source] netkit::Error),
    #[error("localIP {text:?}: {source}")]
    LocalIp {
        text: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("mtu {0} is outside 68..65535")]
    Mtu(u32),
    /// The VTEP address cannot be made a host network (never for a valid address).
    #[error("{0}")]
    Vtep(#[source] ipnetwork::IpNetworkError),
    /// A planned step that needs the VXLAN device found none (`step` describes it).
    #[error("{step} needs the VXLAN device")]
    NeedsDevice { step: String },
}

/// A subnet field that is not a network address.
#[derive(Debug, thiserror::Error)]
pub enum SubnetError {
    #[error("{field} {text:?} is not a CIDR: {source}")]
    NotCidr {
        field: &'static str,
        text: String,
        #[source]
        source: ipnetwork::IpNetworkError,
    },
    #[error("{field} {text:?} has host bits set (did you mean {}/{}?)", .network.network(), .network.prefix())]
    HostBits {
        field: &'static str,
        text: String,
        network: IpNetwork,
    },
}

/// Why the underlay (interface and local address) cannot be determined.
#[derive(Debug, thiserror::Error)]
pub enum UnderlayError {
    #[error("underlay interface {0:?} does not exist")]
    NoSuchInterface(String),
    #[error("no interface has localIP {0}")]
    NoInterfaceWithIp(IpAddr),
    #[error("no default route; set \"underlayInterface\" or \"localIP\"")]
    NoDefaultRoute,
    #[error("underlay interface {0:?} has no global address; set \"localIP\"")]
    NoGlobalAddress(String),
    #[error("underlay {ifname:?} MTU {mtu} is too small for VXLAN")]
    MtuTooSmall { ifname: String, mtu: u32 },
}

/// The CNI error for a failure: bad config (and a call outside a chain) is 7, a node that
/// is not ready yet (missing underlay, unreadable peers file) is 11 "try again later" (50
/// "not available" for STATUS), I/O is 5.
impl From<Error> for CniError {
    fn from(e: Error) -> CniError {
        let msg = e.to_string();
        match e {
            Error::Config(_) | Error::NotChained | Error::CheckNeedsPrevResult => {
                CniError::invalid_config(msg)
            }
            Error::PeersFile { .. } | Error::Underlay(_) | Error::NotListed(_) => {
                CniError::try_again(msg)
            }
            Error::Unavailable(_) => CniError::not_available(msg),
            Error::Lock { .. } => CniError::io(msg),
            Error::Kernel(_) => CniError::internal(msg),
            Error::Delegated(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: Error) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(Error::Config(ConfigError::VniTooLarge(16777216))),
            (
                7,
                "invalid vxlan config: vni 16777216 is larger than 16777215".into()
            )
        );
        assert_eq!(cni(Error::NotChained).0, 7);
        assert_eq!(
            cni(Error::CheckNeedsPrevResult),
            (7, "vxlan CHECK needs prevResult".into())
        );
        assert_eq!(
            cni(Error::Underlay(UnderlayError::NoDefaultRoute)),
            (
                11,
                "underlay not ready: no default route; set \"underlayInterface\" or \"localIP\""
                    .into()
            )
        );
        assert_eq!(
            cni(Error::NotListed("192.168.1.5".parse().unwrap())),
            (11, "node not ready: no \"subnet\" given and no peer entry has this node's address 192.168.1.5".into())
        );
        assert_eq!(
            cni(Error::Config(ConfigError::Subnet(SubnetError::HostBits {
                field: "subnet",
                text: "10.1.2.3/24".into(),
                network: "10.1.2.3/24".parse().unwrap()
            }))),
            (7, "invalid vxlan config: subnet \"10.1.2.3/24\" has host bits set (did you mean 10.1.2.0/24?)".into())
        );
        assert_eq!(
            cni(Error::PeersFile {
                path: "/p".into(),
                detail: "gone".into()
            }),
            (11, "failed to load peers file \"/p\": gone".into())
        );
        assert_eq!(
            cni(Error::Unavailable(Box::new(Error::Underlay(
                UnderlayError::NoSuchInterface("eth9".into())
            )))),
            (
                50,
                "underlay not ready: underlay interface \"eth9\" does not exist".into()
            )
        );
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(
            cni(Error::Lock {
                path: "/l".into(),
                source: io
            })
            .0,
            5
        );
        assert_eq!(
            cni(Error::Kernel(netkit::Error::invalid(
                "failed to find link \"x\"",
                "gone"
            ))),
            (999, "failed to find link \"x\": gone".into())
        );
        assert_eq!(
            cni(Error::Delegated(CniError::decode("bad prevResult"))),
            (6, "bad prevResult".into())
        );
    }
}
