//! The plugin's errors and their CNI codes.

use std::net::IpAddr;

use libcni::error::CniError;

#[derive(Debug, thiserror::Error)]
pub enum LoopbackError {
    #[error("loopback interface found with non-loopback address \"{0}\"")]
    NonLoopbackAddress(IpAddr),
    /// CHECK: lo is down.
    #[error("loopback interface is down")]
    Down,
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// An error libcni's skeleton helpers returned (prevResult parsing), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<LoopbackError> for CniError {
    fn from(e: LoopbackError) -> CniError {
        match e {
            LoopbackError::Delegated(e) => e,
            // Plain Go errors upstream (code 999), kernel failures included.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: LoopbackError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(LoopbackError::NonLoopbackAddress(
                "10.0.0.1".parse().unwrap()
            )),
            (
                999,
                "loopback interface found with non-loopback address \"10.0.0.1\"".into()
            )
        );
        assert_eq!(
            cni(LoopbackError::Down),
            (999, "loopback interface is down".into())
        );
        assert_eq!(
            cni(LoopbackError::Kernel(netkit::Error::invalid(
                "failed to find link \"lo\"",
                "gone"
            ))),
            (999, "failed to find link \"lo\": gone".into())
        );
        assert_eq!(
            cni(LoopbackError::Delegated(CniError::decode("bad prevResult"))),
            (6, "bad prevResult".into())
        );
    }
}
