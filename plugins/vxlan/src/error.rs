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
}

impl Error {
    /// The CNI error for this failure: bad config is 7, a node that is not ready yet
    /// (missing underlay, unreadable peers file) is 11 "try again later", I/O is 5.
    pub fn to_cni(&self) -> CniError {
        match self {
            Error::Config(_) => CniError::invalid_config(self.to_string()),
            Error::PeersFile { .. } | Error::Underlay(_) | Error::NotListed(_) => {
                CniError::try_again(self.to_string())
            }
            Error::Lock { .. } => CniError::io(self.to_string()),
            Error::Kernel(_) => CniError::internal(self.to_string()),
        }
    }
}

impl From<Error> for CniError {
    fn from(e: Error) -> CniError {
        e.to_cni()
    }
}
