//! The plugin's errors and their CNI codes.

use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum DummyError {
    /// The network configuration is not JSON of the expected shape.
    #[error("failed to parse network config: {0}")]
    Decode(#[source] libcni::gojson::Error),
    #[error("dummy interface requires an IPAM configuration")]
    IpamRequired,
    #[error("failed to create dummy: {0}")]
    Create(#[source] netkit::Error),
    #[error("failed to fetch dummy {ifname:?}: {source}")]
    Fetch {
        ifname: String,
        #[source]
        source: netkit::Error,
    },
    /// CHECK: the container link is not a dummy.
    #[error("Error: Container interface {0} not of type dummy")]
    NotDummy(String),
    /// CHECK: the container link is down.
    #[error("Interface {0} is down")]
    Down(String),
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// What attach (and through it the delegated IPAM plugin) or libcni returned, code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<DummyError> for CniError {
    fn from(e: DummyError) -> CniError {
        match e {
            DummyError::Delegated(e) => e,
            // Plain Go errors upstream (code 999).
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: DummyError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(DummyError::IpamRequired),
            (999, "dummy interface requires an IPAM configuration".into())
        );
        assert_eq!(
            cni(DummyError::Create(netkit::Error::invalid(
                "host: link add net1",
                "File exists"
            ))),
            (
                999,
                "failed to create dummy: host: link add net1: File exists".into()
            )
        );
        assert_eq!(
            cni(DummyError::Fetch {
                ifname: "net1".into(),
                source: netkit::Error::invalid("failed to find link \"net1\"", "gone")
            })
            .0,
            999
        );
        assert_eq!(
            cni(DummyError::Down("net1".into())),
            (999, "Interface net1 is down".into())
        );
        assert_eq!(
            cni(DummyError::NotDummy("net1".into())),
            (
                999,
                "Error: Container interface net1 not of type dummy".into()
            )
        );
        assert_eq!(
            cni(DummyError::Delegated(CniError::try_again("ipam busy"))),
            (11, "ipam busy".into())
        );
    }
}
