//! The plugin's errors and their CNI codes.

use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("failed to get bridge {bridge}: {source}")]
    FindBridge {
        bridge: String,
        #[source]
        source: netkit::Error,
    },
    #[error("failed to set tap {ifname} as a port of bridge {bridge}: {source}")]
    JoinBridge {
        ifname: String,
        bridge: String,
        #[source]
        source: netkit::Error,
    },
    #[error("failed to set tap interface up: {0}")]
    SetUp(#[source] netkit::Error),
    /// CHECK: the container link is not a tap.
    #[error("Error: Container interface {0} not of type tap")]
    NotTap(String),
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// What attach (and through it the delegated IPAM plugin) or libcni returned, code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<TapError> for CniError {
    fn from(e: TapError) -> CniError {
        match e {
            TapError::Delegated(e) => e,
            // Plain Go errors upstream (code 999).
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: TapError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        let gone = || netkit::Error::invalid("failed to find link \"br9\"", "gone");
        assert_eq!(
            cni(TapError::FindBridge {
                bridge: "br9".into(),
                source: gone()
            }),
            (
                999,
                "failed to get bridge br9: failed to find link \"br9\": gone".into()
            )
        );
        assert_eq!(
            cni(TapError::JoinBridge {
                ifname: "net1".into(),
                bridge: "br0".into(),
                source: gone()
            })
            .0,
            999
        );
        assert_eq!(cni(TapError::SetUp(gone())).0, 999);
        assert_eq!(
            cni(TapError::NotTap("br0".into())),
            (999, "Error: Container interface br0 not of type tap".into())
        );
        assert_eq!(cni(TapError::Kernel(gone())).0, 999);
        assert_eq!(
            cni(TapError::Delegated(CniError::try_again("ipam busy"))),
            (11, "ipam busy".into())
        );
    }
}
