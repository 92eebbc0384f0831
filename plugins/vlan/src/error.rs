//! The plugin's errors and their CNI codes.

use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum VlanError {
    #[error(
        "\"master\" field is required. It specifies the host interface name to create the VLAN for"
    )]
    MasterRequired,
    /// The reference's wording (its bound is 4094 all the same).
    #[error("invalid VLAN ID {0} (must be between 0 and 4095 inclusive)")]
    VlanId(i64),
    /// CHECK: the container link is not a vlan.
    #[error("Error: Container interface {0} not of type vlan")]
    NotVlan(String),
    /// CHECK: the container link has another VLAN ID.
    #[error("Error: Container interface {ifname} has VLAN ID {actual}, configured {configured}")]
    VlanIdMismatch {
        ifname: String,
        actual: u16,
        configured: u16,
    },
    /// CHECK: the container link has another MTU.
    #[error("Error: Container interface {ifname} has MTU {actual}, configured {configured}")]
    MtuMismatch {
        ifname: String,
        actual: u32,
        configured: u32,
    },
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// What attach (and through it the delegated IPAM plugin) or libcni returned, code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<VlanError> for CniError {
    fn from(e: VlanError) -> CniError {
        match e {
            VlanError::Delegated(e) => e,
            // Plain Go errors upstream (code 999).
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: VlanError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(VlanError::VlanId(4095)),
            (
                999,
                "invalid VLAN ID 4095 (must be between 0 and 4095 inclusive)".into()
            )
        );
        assert_eq!(
            cni(VlanError::VlanIdMismatch {
                ifname: "net1".into(),
                actual: 100,
                configured: 101
            }),
            (
                999,
                "Error: Container interface net1 has VLAN ID 100, configured 101".into()
            )
        );
        assert_eq!(
            cni(VlanError::NotVlan("net1".into())),
            (
                999,
                "Error: Container interface net1 not of type vlan".into()
            )
        );
        assert_eq!(
            cni(VlanError::Kernel(netkit::Error::invalid(
                "failed to find link \"x\"",
                "gone"
            ))),
            (999, "failed to find link \"x\": gone".into())
        );
        assert_eq!(
            cni(VlanError::Delegated(CniError::try_again("ipam busy"))),
            (11, "ipam busy".into())
        );
    }
}
