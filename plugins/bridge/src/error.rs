//! The plugin's errors and their CNI codes.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::error::CniError;
use netkit::packet_route::link::State;

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    // Configuration (code 999: plain errors upstream).
    /// The network configuration does not parse.
    #[error("failed to load netconf: {0}")]
    LoadConf(#[source] libcni::gojson::Error),
    #[error("invalid bridge name: {0}")]
    BridgeName(#[source] netkit::Error),
    #[error("invalid VLAN ID {0} (must be between 0 and 4094)")]
    VlanId(i64),
    #[error("invalid MTU {0}")]
    Mtu(i64),
    #[error("unknown ipmasq backend {0:?}")]
    MasqBackend(String),
    #[error("cannot use IPAM when DisableContainerInterface flag is set")]
    IpamWithoutInterface,
    #[error("cannot set hairpin mode and promiscuous mode at the same time.")]
    HairpinAndPromisc,
    /// Refused before anything is made; worded as the reference's veth setup reports it.
    #[error("failed to make veth pair: address {0}: invalid MAC address")]
    Mac(String),
    #[error("incorrect trunk minID parameter")]
    TrunkMinId,
    #[error("incorrect trunk maxID parameter")]
    TrunkMaxId,
    #[error("minID is greater than maxID in trunk parameter")]
    TrunkMinAboveMax,
    #[error("minID and maxID should be configured simultaneously, minID is missing")]
    TrunkMinMissing,
    #[error("minID and maxID should be configured simultaneously, maxID is missing")]
    TrunkMaxMissing,
    #[error("incorrect trunk id parameter")]
    TrunkId,

    // STATUS (code 50: not available).
    #[error("bridge: ipMasq needs {tool}, which is not available")]
    MasqUnavailable { tool: &'static str },
    #[error("bridge: macspoofchk needs the kernel's nf_tables, which is not available")]
    SpoofCheckUnavailable,

    // ADD (code 999).
    /// A kernel operation failed; the netkit error says what and on which object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// A netfilter operation (masquerade, spoof check) failed.
    #[error(transparent)]
    Netfilter(#[from] netkit::netfilter::Error),
    #[error("could not set bridge's mac: {0}")]
    PinMac(#[source] netkit::Error),
    #[error("{0} (vlan/vlanTrunk need a kernel with bridge VLAN filtering)")]
    NoVlanFiltering(#[source] netkit::Error),
    #[error("container veth name provided ({0}) already exists")]
    VethNameTaken(String),
    #[error("failed to add route '{dst} via {gateway:?} dev {ifname}': {source}")]
    AddRoute {
        dst: IpNetwork,
        gateway: Option<IpAddr>,
        ifname: String,
        source: netkit::Error,
    },
    #[error("IPv6 duplicate address detection failed for {address} on {ifname}")]
    DadFailed { address: IpNetwork, ifname: String },
    #[error("timed out waiting for IPv6 DAD on {ifname}")]
    DadTimeout { ifname: String },
    #[error("invalid gateway {gateway}: {source}")]
    Gateway {
        gateway: IpAddr,
        source: ipnetwork::IpNetworkError,
    },
    #[error("{link:?} already has an IP address different from {gateway} (it has {existing}; set \"forceAddress\": true to replace it)")]
    AddressTaken {
        link: String,
        gateway: IpNetwork,
        existing: IpNetwork,
    },
    #[error("could not add IP address to {link:?}: {source}")]
    GatewayAddress { link: String, source: netkit::Error },
    #[error("failed to enable forwarding: {0}")]
    Forwarding(#[source] netkit::Error),
    #[error("failed to create vlan gateway {name:?}: {source}")]
    VlanGateway { name: String, source: netkit::Error },
    #[error("failed to set vlan gateway {name:?} up: {source}")]
    VlanGatewayUp { name: String, source: netkit::Error },
    #[error("bridge port in error state: {0:?}")]
    PortNotUp(State),

    // CHECK (code 999).
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("Error: Bridge interface {0} is not a bridge")]
    NotABridge(String),
    #[error("Bridge interface {bridge} Mac doesn't match: {recorded} found {found}")]
    BridgeMac {
        bridge: String,
        recorded: String,
        found: String,
    },
    #[error("Error: Bridge interface {bridge} promisc set to {found}, expected {expected}")]
    Promisc {
        bridge: String,
        found: bool,
        expected: bool,
    },
    #[error("Interface {0} not found in prevResult")]
    NotInPrevResult(String),
    #[error("Sandbox in prevResult {recorded} doesn't match configured netns: {netns}")]
    Sandbox { recorded: String, netns: String },
    #[error("Error: Container interface {0} not of type veth")]
    NotVeth(String),
    #[error("Interface {ifname} Mac {recorded} doesn't match container Mac: {found}")]
    ContainerMac {
        ifname: String,
        recorded: String,
        found: String,
    },
    #[error("Error: container interface {0} has no veth peer")]
    NoPeer(String),
    #[error("Interface {ifname} is not attached to bridge {bridge}")]
    NotAttached { ifname: String, bridge: String },
    #[error("Interface {ifname} Mac {recorded} doesn't match: {found}")]
    HostMac {
        ifname: String,
        recorded: String,
        found: String,
    },
    #[error("Error: host side of veth {0} not found in prevResult or not attached")]
    HostSideMissing(String),
    #[error("spoof-check rules {0} are missing")]
    SpoofCheckMissing(String),

    /// An error that arrived as a CNI error (the IPAM plugin's, attach's, libcni's): passed
    /// through with its code.
    #[error("{}", .0.msg)]
    Delegated(CniError),
}

impl From<CniError> for BridgeError {
    fn from(e: CniError) -> BridgeError {
        BridgeError::Delegated(e)
    }
}

impl From<BridgeError> for CniError {
    fn from(e: BridgeError) -> CniError {
        match e {
            BridgeError::Delegated(e) => e,
            BridgeError::MasqUnavailable { .. } | BridgeError::SpoofCheckUnavailable => {
                CniError::not_available(e.to_string())
            }
            // Everything else is a plain Go error upstream, which its skeleton reports as 999.
            _ => CniError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_error() -> netkit::Error {
        netkit::Error::kernel("failed to set address on br0", libc::EBUSY)
    }

    /// One of every variant.
    fn every_variant() -> Vec<BridgeError> {
        let k = kernel_error;
        let s = |v: &str| v.to_string();
        let json = serde_json::from_str::<u8>("x").unwrap_err();
        let bad_prefix = IpNetwork::new("10.0.0.1".parse().unwrap(), 40).unwrap_err();
        vec![
            BridgeError::LoadConf(json),
            BridgeError::BridgeName(k()),
            BridgeError::VlanId(5000),
            BridgeError::Mtu(-1),
            BridgeError::MasqBackend(s("x")),
            BridgeError::IpamWithoutInterface,
            BridgeError::HairpinAndPromisc,
            BridgeError::Mac(s("zz")),
            BridgeError::TrunkMinId,
            BridgeError::TrunkMaxId,
            BridgeError::TrunkMinAboveMax,
            BridgeError::TrunkMinMissing,
            BridgeError::TrunkMaxMissing,
            BridgeError::TrunkId,
            BridgeError::MasqUnavailable { tool: "iptables" },
            BridgeError::SpoofCheckUnavailable,
            BridgeError::Kernel(k()),
            BridgeError::Netfilter(netkit::netfilter::Error::Invalid {
                context: s("masquerade"),
                detail: s("bad"),
            }),
            BridgeError::PinMac(k()),
            BridgeError::NoVlanFiltering(k()),
            BridgeError::VethNameTaken(s("eth0")),
            BridgeError::AddRoute {
                dst: "0.0.0.0/0".parse().unwrap(),
                gateway: None,
                ifname: s("eth0"),
                source: k(),
            },
            BridgeError::DadFailed {
                address: "fd00::5/64".parse().unwrap(),
                ifname: s("eth0"),
            },
            BridgeError::DadTimeout { ifname: s("eth0") },
            BridgeError::Gateway {
                gateway: "10.0.0.1".parse().unwrap(),
                source: bad_prefix,
            },
            BridgeError::AddressTaken {
                link: s("br0"),
                gateway: "10.1.0.1/24".parse().unwrap(),
                existing: "10.9.0.1/24".parse().unwrap(),
            },
            BridgeError::GatewayAddress {
                link: s("br0"),
                source: k(),
            },
            BridgeError::Forwarding(k()),
            BridgeError::VlanGateway {
                name: s("br0.5"),
                source: k(),
            },
            BridgeError::VlanGatewayUp {
                name: s("br0.5"),
                source: k(),
            },
            BridgeError::PortNotUp(State::Down),
            BridgeError::PrevResultMissing,
            BridgeError::NotABridge(s("br0")),
            BridgeError::BridgeMac {
                bridge: s("br0"),
                recorded: s("a"),
                found: s("b"),
            },
            BridgeError::Promisc {
                bridge: s("br0"),
                found: true,
                expected: false,
            },
            BridgeError::NotInPrevResult(s("eth0")),
            BridgeError::Sandbox {
                recorded: s("/a"),
                netns: s("/b"),
            },
            BridgeError::NotVeth(s("eth0")),
            BridgeError::ContainerMac {
                ifname: s("eth0"),
                recorded: s("a"),
                found: s("b"),
            },
            BridgeError::NoPeer(s("eth0")),
            BridgeError::NotAttached {
                ifname: s("veth0"),
                bridge: s("br0"),
            },
            BridgeError::HostMac {
                ifname: s("veth0"),
                recorded: s("a"),
                found: s("b"),
            },
            BridgeError::HostSideMissing(s("eth0")),
            BridgeError::SpoofCheckMissing(s("macspoofchk-c-eth0")),
            BridgeError::Delegated(CniError::new(7, "bad config", "details")),
        ]
    }

    #[test]
    fn every_variant_maps_to_its_code() {
        for e in every_variant() {
            let text = e.to_string();
            let expected = match &e {
                BridgeError::MasqUnavailable { .. } | BridgeError::SpoofCheckUnavailable => 50,
                BridgeError::Delegated(inner) => inner.code,
                _ => 999,
            };
            let c = CniError::from(e);
            assert_eq!((c.code, c.msg), (expected, text));
        }
    }

    #[test]
    fn codes_and_texts() {
        let busy = "failed to set address on br0: Device or resource busy (os error 16)";
        let cases: Vec<(BridgeError, u32, String)> = vec![
            (BridgeError::VlanId(5000), 999, "invalid VLAN ID 5000 (must be between 0 and 4094)".into()),
            (BridgeError::TrunkMinMissing, 999, "minID and maxID should be configured simultaneously, minID is missing".into()),
            (BridgeError::Mac("zz".into()), 999, "failed to make veth pair: address zz: invalid MAC address".into()),
            (BridgeError::MasqUnavailable { tool: "iptables" }, 50, "bridge: ipMasq needs iptables, which is not available".into()),
            (BridgeError::SpoofCheckUnavailable, 50, "bridge: macspoofchk needs the kernel's nf_tables, which is not available".into()),
            (BridgeError::Kernel(kernel_error()), 999, busy.into()),
            (BridgeError::PinMac(kernel_error()), 999, format!("could not set bridge's mac: {busy}")),
            (BridgeError::NoVlanFiltering(kernel_error()), 999, format!("{busy} (vlan/vlanTrunk need a kernel with bridge VLAN filtering)")),
            (
                BridgeError::AddRoute {
                    dst: "0.0.0.0/0".parse().unwrap(),
                    gateway: Some("10.1.0.1".parse().unwrap()),
                    ifname: "eth0".into(),
                    source: kernel_error(),
                },
                999,
                format!("failed to add route '0.0.0.0/0 via Some(10.1.0.1) dev eth0': {busy}"),
            ),
            (
                BridgeError::AddressTaken {
                    link: "br0".into(),
                    gateway: "10.1.0.1/24".parse().unwrap(),
                    existing: "10.9.0.1/24".parse().unwrap(),
                },
                999,
                "\"br0\" already has an IP address different from 10.1.0.1/24 (it has 10.9.0.1/24; set \"forceAddress\": true to replace it)".into(),
            ),
            (BridgeError::PortNotUp(State::LowerLayerDown), 999, "bridge port in error state: LowerLayerDown".into()),
            (
                BridgeError::Promisc { bridge: "br0".into(), found: false, expected: true },
                999,
                "Error: Bridge interface br0 promisc set to false, expected true".into(),
            ),
            (BridgeError::PrevResultMissing, 999, "Required prevResult missing".into()),
            (BridgeError::Delegated(CniError::new(11, "try again", "")), 11, "try again".into()),
        ];
        for (e, code, text) in cases {
            assert_eq!(e.to_string(), text);
            let c = CniError::from(e);
            assert_eq!((c.code, c.msg), (code, text));
        }
    }
}
