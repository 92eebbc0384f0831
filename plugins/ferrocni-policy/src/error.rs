//! The plugin's errors and their CNI codes.

use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum PolicyPluginError {
    #[error("failed to parse network configuration: {0}")]
    Decode(#[source] libcni::gojson::Error),
    #[error("timeout {0} must be 1-300 seconds")]
    Timeout(i64),
    #[error("ferrocni-policy must be called as a chained plugin (no prevResult)")]
    NotChained,
    /// The agent could not be reached: fail the ADD (the runtime retries) rather than start a
    /// pod that policies may have to isolate.
    #[error("cannot reach ferrocni-agent's policy socket {socket}: {detail}")]
    Unreachable { socket: String, detail: String },
    #[error("ferrocni-agent did not cover pod {pod}: {detail}")]
    Refused { pod: String, detail: String },
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<PolicyPluginError> for CniError {
    fn from(e: PolicyPluginError) -> CniError {
        match e {
            PolicyPluginError::Delegated(e) => e,
            e @ PolicyPluginError::Decode(_) => CniError::decode(e.to_string()),
            e @ (PolicyPluginError::Timeout(_) | PolicyPluginError::NotChained) => {
                CniError::invalid_config(e.to_string())
            }
            // "Try again later": the runtime retries the ADD.
            e @ (PolicyPluginError::Unreachable { .. } | PolicyPluginError::Refused { .. }) => {
                CniError::try_again(e.to_string())
            }
        }
    }
}
