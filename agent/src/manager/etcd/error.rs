//! What the etcd store fails on, worded for the operator; each comes to the agent as an
//! `AgentError::Store` saying what the failure means (retry, stop, config missing).

use super::client::EtcdError;
use crate::error::{AgentError, StoreFailure};

#[derive(Debug, thiserror::Error)]
pub enum EtcdStoreError {
    #[error("etcd at {endpoints} is unreachable: {detail}")]
    Unreachable { endpoints: String, detail: String },
    #[error("etcd request {what} failed: {detail}")]
    Request { what: String, detail: String },
    /// etcd or its TLS refused us (wrong CA, client certificate, user or password): retrying
    /// would not help.
    #[error("{0}")]
    Refused(String),
    #[error(
        "network config key {key} is missing in etcd (write flannel's JSON config there first)"
    )]
    ConfigMissing { key: String },
    /// The watch stream failed.
    #[error(transparent)]
    Watch(EtcdError),
}

impl EtcdStoreError {
    pub fn request(what: impl Into<String>, e: impl std::fmt::Display) -> EtcdStoreError {
        EtcdStoreError::Request {
            what: what.into(),
            detail: e.to_string(),
        }
    }
}

impl From<EtcdStoreError> for AgentError {
    fn from(e: EtcdStoreError) -> AgentError {
        let failure = match e {
            EtcdStoreError::Unreachable { .. }
            | EtcdStoreError::Request { .. }
            | EtcdStoreError::Watch(_) => StoreFailure::Transient,
            EtcdStoreError::Refused(_) => StoreFailure::Refused,
            EtcdStoreError::ConfigMissing { .. } => StoreFailure::ConfigMissing,
        };
        AgentError::Store {
            failure,
            source: Box::new(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_and_what_they_mean() {
        let e: AgentError = EtcdStoreError::ConfigMissing {
            key: "/coreos.com/network/config".into(),
        }
        .into();
        assert_eq!(e.store_failure(), Some(StoreFailure::ConfigMissing));
        assert_eq!(
            e.to_string(),
            "network config key /coreos.com/network/config is missing in etcd (write flannel's JSON config there first)"
        );
        let e: AgentError = EtcdStoreError::request("GET config", "no answer in time").into();
        assert_eq!(e.store_failure(), Some(StoreFailure::Transient));
        assert_eq!(
            e.to_string(),
            "etcd request GET config failed: no answer in time"
        );
        let e: AgentError = EtcdStoreError::Refused("wrong password".into()).into();
        assert_eq!(e.store_failure(), Some(StoreFailure::Refused));
    }
}
