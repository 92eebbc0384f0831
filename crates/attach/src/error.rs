//! attach's own failures and their CNI codes. attach's public functions return `CniError`
//! (they also pass on the delegated IPAM plugin's errors untouched); everything attach
//! itself reports is one of these, converted by the `From` below, the only place in attach
//! that picks a code.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The network configuration is not JSON of the expected shape.
    #[error("failed to load netconf: {0}")]
    Decode(#[source] libcni::gojson::Error),
    /// A malformed MAC address, in Go's `net.ParseMAC` wording.
    #[error("invalid args {text} for MAC addr: address {text}: invalid MAC address")]
    Mac { text: String },
    #[error("invalid MTU {0}")]
    Mtu(i64),
    #[error("invalid MTU {mtu}, must be [0, master MTU({master_mtu})]")]
    MtuOverMaster { mtu: i64, master_mtu: u32 },
    /// An interface name given in the config (master, bridge, device...) is unusable.
    #[error("invalid {field}: {source}")]
    IfName {
        field: String,
        #[source]
        source: netkit::Error,
    },
    #[error("failed to generate a random link name: {0}")]
    RandomName(#[source] std::io::Error),
    /// A kernel operation failed; `context` words it as the reference does
    /// ("failed to create macvlan").
    #[error("{context}: {source}")]
    KernelContext {
        context: String,
        #[source]
        source: netkit::Error,
    },
    #[error("no default route interface found")]
    NoDefaultRoute,
    /// Go's netlink words a missing link "Link not found"; operators match on it.
    #[error("failed to lookup master {name:?}: Link not found")]
    MasterNotFound { name: String },
    /// STATUS: the master of a child-link plugin is missing on the host (code 50).
    #[error("{plugin}: {}", .cause.msg)]
    MasterUnavailable { plugin: String, cause: CniError },
    #[error("no interfaces to configure")]
    NoInterfaces,
    #[error("failed to add IP addr {address} to {ifname:?}: invalid interface index")]
    BadInterfaceIndex { address: IpNetwork, ifname: String },
    #[error("IPv6 duplicate address detection failed for {address} on {ifname}")]
    DadFailed { address: IpNetwork, ifname: String },
    #[error("timed out waiting for IPv6 DAD on {ifname}")]
    DadTimeout { ifname: String },
    #[error("IPAM plugin returned missing IP config")]
    IpamNoIps,
    /// CHECK without a prevResult, in the calling plugin's words.
    #[error("{0}")]
    PrevResultMissing(String),
    #[error("Sandbox in prevResult  doesn't match configured netns: {netns}")]
    SandboxMismatch { netns: String },
    #[error("Container interface name missing in prevResult: ")]
    InterfaceNameMissing,
    #[error("Container Interface name in prevResult: {name} not found")]
    InterfaceNotFound { name: String },
    #[error("Error: Container interface {name} should not be in host namespace")]
    InHostNamespace { name: String },
    #[error("Interface {name} Mac {recorded} doesn't match container Mac: {actual}")]
    MacMismatch {
        name: String,
        recorded: String,
        actual: String,
    },
    #[error("Failed to match addr {address} on interface {ifname}")]
    AddressMissing { address: IpNetwork, ifname: String },
    /// Go prints a missing gateway as the empty string here.
    #[error("Failed to find Gateway {} for interface {ifname}", or_text(.gateway, ""))]
    GatewayRouteMissing {
        gateway: Option<IpAddr>,
        ifname: String,
    },
    /// Go prints a missing gateway as `<nil>` here.
    #[error(
        "Expected Route {{Dst: {dst} GW: {}}} not found in the container's routing table",
        or_text(.gateway, "<nil>")
    )]
    RouteMissing {
        dst: IpNetwork,
        gateway: Option<IpAddr>,
    },
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
}

fn or_text(ip: &Option<IpAddr>, none: &str) -> String {
    ip.map_or_else(|| none.to_string(), |ip| ip.to_string())
}

impl From<AttachError> for CniError {
    fn from(e: AttachError) -> CniError {
        match e {
            AttachError::MasterUnavailable { .. } => CniError::not_available(e.to_string()),
            // Plain Go errors upstream (code 999), configuration errors included.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: AttachError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(AttachError::Mac { text: "zz".into() }),
            (
                999,
                "invalid args zz for MAC addr: address zz: invalid MAC address".into()
            )
        );
        assert_eq!(
            cni(AttachError::MtuOverMaster {
                mtu: 9000,
                master_mtu: 1500
            }),
            (
                999,
                "invalid MTU 9000, must be [0, master MTU(1500)]".into()
            )
        );
        assert_eq!(
            cni(AttachError::KernelContext {
                context: "failed to create macvlan".into(),
                source: netkit::Error::invalid("failed to add link veth1", "File exists"),
            }),
            (
                999,
                "failed to create macvlan: failed to add link veth1: File exists".into()
            )
        );
        assert_eq!(
            cni(AttachError::MasterUnavailable {
                plugin: "macvlan".into(),
                cause: CniError::from(AttachError::MasterNotFound {
                    name: "eth9".into()
                }),
            }),
            (
                50,
                "macvlan: failed to lookup master \"eth9\": Link not found".into()
            )
        );
        assert_eq!(
            cni(AttachError::GatewayRouteMissing {
                gateway: None,
                ifname: "eth0".into()
            }),
            (999, "Failed to find Gateway  for interface eth0".into())
        );
        assert_eq!(
            cni(AttachError::RouteMissing {
                dst: "0.0.0.0/0".parse().unwrap(),
                gateway: None
            }),
            (
                999,
                "Expected Route {Dst: 0.0.0.0/0 GW: <nil>} not found in the container's routing table"
                    .into()
            )
        );
        assert_eq!(
            cni(AttachError::PrevResultMissing(
                "Required prevResult missing".into()
            )),
            (999, "Required prevResult missing".into())
        );
        assert_eq!(
            cni(AttachError::Kernel(netkit::Error::invalid(
                "failed to find link \"a/b\"",
                "invalid name"
            ))),
            (999, "failed to find link \"a/b\": invalid name".into())
        );
    }
}
