//! The plugin's errors and their CNI codes.

use std::net::IpAddr;

use ipnetwork::{IpNetwork, IpNetworkError};
use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum PtpError {
    /// `ipMasqBackend` names no backend (code 999, a plain error).
    #[error("unknown ipmasq backend {name:?}")]
    UnknownBackend { name: String },
    /// An IP of the IPAM result without a gateway: ptp routes everything through it.
    #[error("IPAM returned {address} without a gateway; ptp routes the container through it")]
    NoGateway { address: IpNetwork },
    /// `CNI_IFNAME` is already taken in the container.
    #[error("container veth name provided ({ifname}) already exists")]
    ContainerNameTaken { ifname: String },
    /// Every random host-side name was taken.
    #[error("failed to find a free veth name")]
    NoFreeVethName,
    #[error("Could not enable IP forwarding: {source}")]
    Forwarding { source: netkit::Error },
    #[error("invalid address {address}: {source}")]
    InvalidAddress {
        address: IpNetwork,
        source: IpNetworkError,
    },
    #[error("failed to delete route {subnet} dev {ifname}: {source}")]
    DeleteSubnetRoute {
        subnet: IpNetwork,
        ifname: String,
        source: netkit::Error,
    },
    #[error("failed to add IP addr {gateway} to {veth}: {source}")]
    GatewayAddress {
        gateway: IpAddr,
        veth: String,
        source: netkit::Error,
    },
    #[error("failed to add route on host: {source}")]
    HostRoute { source: netkit::Error },
    /// A kernel operation failed; the netkit error says what and on which object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// Masquerade setup, check, teardown or GC failed.
    #[error(transparent)]
    Masquerade(#[from] netkit::netfilter::Error),
    /// The masquerade teardown thread died.
    #[error("masquerade teardown failed")]
    MasqueradePanicked,
    // CHECK: what differs from prevResult.
    #[error("Error: Container interface {name} not of type veth/p2p")]
    NotVeth { name: String },
    #[error("container interface {name} has no veth peer")]
    NoPeer { name: String },
    #[error("ptp: host end of {ifname} not found among prevResult's host interfaces")]
    HostEndNotFound { ifname: String },
    #[error("ptp: gateway {gateway} is not on the host end {veth}")]
    GatewayNotOnHostEnd { gateway: IpAddr, veth: String },
    #[error("ptp: no host route to {ip} via {veth}")]
    NoHostRoute { ip: IpAddr, veth: String },
    /// STATUS: the masquerade backend's tool is missing (code 50).
    #[error("ptp: ipMasq needs {tool}, which is not available")]
    MasqueradeUnavailable { tool: &'static str },
    /// What attach, libcni or the IPAM plugin returned, passed on with its code.
    #[error("{}", .0.msg)]
    Delegated(#[from] CniError),
}

impl From<PtpError> for CniError {
    fn from(e: PtpError) -> CniError {
        match e {
            PtpError::Delegated(e) => e,
            PtpError::MasqueradeUnavailable { .. } => CniError::not_available(e.to_string()),
            // Plain errors upstream, which its skeleton reports with code 999.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_texts() {
        let cases: Vec<(PtpError, u32, &str)> = vec![
            (
                PtpError::UnknownBackend { name: "x".into() },
                999,
                "unknown ipmasq backend \"x\"",
            ),
            (
                PtpError::NoGateway {
                    address: "10.1.0.5/24".parse().unwrap(),
                },
                999,
                "IPAM returned 10.1.0.5/24 without a gateway; ptp routes the container through it",
            ),
            (
                PtpError::ContainerNameTaken {
                    ifname: "eth0".into(),
                },
                999,
                "container veth name provided (eth0) already exists",
            ),
            (PtpError::NoFreeVethName, 999, "failed to find a free veth name"),
            (
                PtpError::Forwarding {
                    source: netkit::Error::kernel("failed to set sysctl", 5) /* EIO */,
                },
                999,
                "Could not enable IP forwarding: failed to set sysctl: Input/output error (os error 5)",
            ),
            (PtpError::MasqueradePanicked, 999, "masquerade teardown failed"),
            (
                PtpError::NotVeth { name: "net1".into() },
                999,
                "Error: Container interface net1 not of type veth/p2p",
            ),
            (
                PtpError::NoHostRoute {
                    ip: "10.1.0.5".parse().unwrap(),
                    veth: "veth1".into(),
                },
                999,
                "ptp: no host route to 10.1.0.5 via veth1",
            ),
            (
                PtpError::MasqueradeUnavailable { tool: "nft" },
                50,
                "ptp: ipMasq needs nft, which is not available",
            ),
            (
                PtpError::Delegated(CniError::invalid_config("bad")),
                7,
                "bad",
            ),
        ];
        for (e, code, text) in cases {
            let c = CniError::from(e);
            assert_eq!((c.code, c.msg.as_str()), (code, text));
        }
    }
}
