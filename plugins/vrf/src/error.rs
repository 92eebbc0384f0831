//! The plugin's errors and their CNI codes.

use libcni::CniError;
use netkit::ipnetwork::IpNetwork;
use netkit::Route;

#[derive(Debug, thiserror::Error)]
pub enum VrfError {
    /// The network configuration is not valid JSON of the expected shape.
    #[error("failed to load netconf: {0}")]
    Load(#[source] libcni::gojson::Error),
    /// `vrfname` is missing or empty.
    #[error("configuration is expected to have a valid vrf name")]
    MissingName,
    /// `vrfname` is not a usable interface name.
    #[error("invalid vrfname: {0}")]
    InvalidName(#[source] netkit::Error),
    /// ADD and CHECK need the previous plugin's result.
    #[error("missing prevResult from earlier plugin")]
    MissingPrevResult,
    /// A link named like the VRF exists but is another kind of link.
    #[error("Netlink {0} is not a VRF")]
    NotVrf(String),
    /// Every routing table id is used by a VRF already.
    #[error("findFreeRoutingTableID: Failed to find an available routing id")]
    NoFreeTable,
    #[error("could not add VRF {name}: {source}")]
    CreateVrf {
        name: String,
        #[source]
        source: netkit::Error,
    },
    #[error("could not set link up for VRF {name}: {source}")]
    VrfUp {
        name: String,
        #[source]
        source: netkit::Error,
    },
    /// The VRF exists with another table than the configured one (ADD).
    #[error("VRF {name} already exist with different routing table {table}")]
    TableConflict { name: String, table: u32 },
    #[error("could not get link by name {ifname}: {source}")]
    FindLink {
        ifname: String,
        #[source]
        source: netkit::Error,
    },
    /// The interface is enslaved to another master already.
    #[error("interface {ifname} has already a master set: {master}")]
    HasMaster { ifname: String, master: String },
    #[error("could not set vrf {vrf} as master of {ifname}: {source}")]
    SetMaster {
        vrf: String,
        ifname: String,
        #[source]
        source: netkit::Error,
    },
    #[error("could not restore address {address} to {ifname} @ {vrf}: {source}")]
    RestoreAddress {
        address: IpNetwork,
        ifname: String,
        vrf: String,
        #[source]
        source: netkit::Error,
    },
    #[error("could not add route '{route}': {source}")]
    AddRoute {
        route: Box<Route>,
        #[source]
        source: netkit::Error,
    },
    /// The kernel did not add the restored address's host route to the VRF table in time.
    #[error(
        "failed getting local/host addresses for {ifname} in table {table} with dst {address}"
    )]
    LocalRouteMissing {
        ifname: String,
        table: u32,
        address: IpNetwork,
    },
    #[error("resetMaster: could not reset master to {ifname}: {source}")]
    ResetMaster {
        ifname: String,
        #[source]
        source: netkit::Error,
    },
    /// CHECK: the VRF does not exist.
    #[error("VRF {0} not found")]
    VrfNotFound(String),
    /// CHECK: the VRF has another table than the configured one.
    #[error("VRF {name} has routing table {table}, expected {expected}")]
    TableMismatch {
        name: String,
        table: u32,
        expected: u32,
    },
    /// CHECK: the interface is not in the VRF.
    #[error("Failed to find {ifname} associated to vrf {vrf}")]
    NotMember { ifname: String, vrf: String },
    /// ADD's failure, worded as upstream's cmdAdd.
    #[error("cmdAdd failed: {0}")]
    Add(#[source] Box<VrfError>),
    /// DEL's failure, worded as upstream's cmdDel.
    #[error("cmdDel failed: {0}")]
    Del(#[source] Box<VrfError>),
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// An error libcni's skeleton helpers returned (prevResult parsing...), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<VrfError> for CniError {
    fn from(e: VrfError) -> CniError {
        match e {
            VrfError::Delegated(e) => e,
            // Every failure of the plugin itself is a plain Go error upstream (code 999).
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: VrfError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(VrfError::MissingName),
            (
                999,
                "configuration is expected to have a valid vrf name".into()
            )
        );
        assert_eq!(
            cni(VrfError::TableConflict {
                name: "blue".into(),
                table: 7
            }),
            (
                999,
                "VRF blue already exist with different routing table 7".into()
            )
        );
        let kernel = || netkit::Error::invalid("failed to add link blue", "File exists");
        assert_eq!(
            cni(VrfError::Add(Box::new(VrfError::CreateVrf {
                name: "blue".into(),
                source: kernel()
            }))),
            (
                999,
                "cmdAdd failed: could not add VRF blue: failed to add link blue: File exists"
                    .into()
            )
        );
        assert_eq!(
            cni(VrfError::Kernel(kernel())),
            (999, "failed to add link blue: File exists".into())
        );
        assert_eq!(
            cni(VrfError::NotMember {
                ifname: "eth0".into(),
                vrf: "blue".into()
            }),
            (999, "Failed to find eth0 associated to vrf blue".into())
        );
        let delegated = CniError::decode("bad prevResult");
        assert_eq!(
            cni(VrfError::Delegated(delegated)),
            (6, "bad prevResult".into())
        );
    }
}
