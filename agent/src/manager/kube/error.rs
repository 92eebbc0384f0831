//! What the Kubernetes API fails on, worded for the operator; each comes to the agent as an
//! `AgentError::Store` saying what the failure means (retry, stop, config missing).

use std::path::PathBuf;

use crate::error::{AgentError, StoreFailure};

#[derive(Debug, thiserror::Error)]
pub enum KubeStoreError {
    /// No way to reach the API was configured or found (kubeconfig, in-cluster account).
    #[error("Kubernetes client configuration: {0}")]
    Config(String),
    #[error("Kubernetes API {server}: {what} failed: {detail}")]
    Request {
        server: String,
        what: String,
        detail: String,
    },
    /// The API refused us (401, 403): retrying would not help.
    #[error("Kubernetes API {server} refused {what}: {detail} (check the agent's service account and its ClusterRole)")]
    Refused {
        server: String,
        what: String,
        detail: String,
    },
    #[error("network config {path} cannot be read: {detail}")]
    ConfigMissing { path: PathBuf, detail: String },
    #[error("this node's name is unknown: {0}")]
    NodeName(String),
}

impl KubeStoreError {
    /// A failed request: refused (401/403) or worth another try.
    pub fn request(server: &str, what: impl Into<String>, e: kube::Error) -> KubeStoreError {
        let what = what.into();
        let server = server.to_string();
        match &e {
            kube::Error::Api(status) if status.code == 401 || status.code == 403 => {
                KubeStoreError::Refused {
                    server,
                    what,
                    detail: status.message.clone(),
                }
            }
            _ => KubeStoreError::Request {
                server,
                what,
                detail: e.to_string(),
            },
        }
    }
}

impl From<KubeStoreError> for AgentError {
    fn from(e: KubeStoreError) -> AgentError {
        let failure = match e {
            KubeStoreError::Request { .. } => StoreFailure::Transient,
            KubeStoreError::Config(_)
            | KubeStoreError::Refused { .. }
            | KubeStoreError::NodeName(_) => StoreFailure::Refused,
            KubeStoreError::ConfigMissing { .. } => StoreFailure::ConfigMissing,
        };
        AgentError::Store {
            failure,
            source: Box::new(e),
        }
    }
}
