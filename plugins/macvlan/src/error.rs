//! The plugin's errors and their CNI codes.

use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum MacvlanError {
    #[error("unknown macvlan mode: {0:?}")]
    UnknownMode(String),
    /// CHECK: the container link is not a macvlan.
    #[error("Error: Container interface {0} not of type macvlan")]
    NotMacvlan(String),
    /// CHECK: the container link is in another mode.
    #[error("Container macvlan mode {actual} does not match expected value: {expected}")]
    ModeMismatch { actual: String, expected: String },
    /// The link of an attachment without IPAM cannot be set up.
    #[error("failed to set {ifname:?} UP: {source}")]
    SetUp {
        ifname: String,
        #[source]
        source: netkit::Error,
    },
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// What attach (and through it the delegated IPAM plugin) or libcni returned, code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<MacvlanError> for CniError {
    fn from(e: MacvlanError) -> CniError {
        match e {
            MacvlanError::Delegated(e) => e,
            // Plain Go errors upstream (code 999).
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: MacvlanError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(MacvlanError::UnknownMode("nope".into())),
            (999, "unknown macvlan mode: \"nope\"".into())
        );
        assert_eq!(
            cni(MacvlanError::ModeMismatch {
                actual: "bridge".into(),
                expected: "vepa".into()
            }),
            (
                999,
                "Container macvlan mode bridge does not match expected value: vepa".into()
            )
        );
        assert_eq!(
            cni(MacvlanError::NotMacvlan("net1".into())),
            (
                999,
                "Error: Container interface net1 not of type macvlan".into()
            )
        );
        assert_eq!(
            cni(MacvlanError::SetUp {
                ifname: "net1".into(),
                source: netkit::Error::invalid("failed to set link net1 up", "gone")
            }),
            (
                999,
                "failed to set \"net1\" UP: failed to set link net1 up: gone".into()
            )
        );
        assert_eq!(
            cni(MacvlanError::Kernel(netkit::Error::invalid(
                "failed to find link \"x\"",
                "gone"
            )))
            .0,
            999
        );
        assert_eq!(
            cni(MacvlanError::Delegated(CniError::try_again("ipam busy"))),
            (11, "ipam busy".into())
        );
    }
}
