//! Errors of the overlay reconciler, each mapped to a CNI error code.

use std::path::PathBuf;

use libcni::CniError;

/// Why a reconcile pass (or loading its inputs) could not run at all. Problems with single
/// peers are not errors: they are listed in the [`crate::Report`] and the pass goes on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config field is missing or malformed.
    #[error("invalid vxlan config: {0}")]
    Config(String),
    /// The peers file cannot be read or is not a JSON list of peers.
    #[error("failed to load peers file {path:?}: {detail}")]
    PeersFile { path: PathBuf, detail: String },
    /// The underlay interface or address cannot be determined (the node is not ready).
    #[error("underlay not ready: {0}")]
    Underlay(String),
    /// The node's own subnet is not (yet) in the peer list: an agent may not have published
    /// its lease yet, so the runtime should try again later.
    #[error("node not ready: {0}")]
    NotListed(String),
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
            cni(Error::Config("vni 16777216 is larger than 16777215".into())),
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
            cni(Error::Underlay("no default route".into())),
            (11, "underlay not ready: no default route".into())
        );
        assert_eq!(cni(Error::NotListed("10.1.2.0/24".into())).0, 11);
        assert_eq!(
            cni(Error::PeersFile {
                path: "/p".into(),
                detail: "gone".into()
            }),
            (11, "failed to load peers file \"/p\": gone".into())
        );
        assert_eq!(
            cni(Error::Unavailable(Box::new(Error::Underlay(
                "no default route".into()
            )))),
            (50, "underlay not ready: no default route".into())
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
