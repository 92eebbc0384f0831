//! Everything the agent can fail on, each message naming the object involved. The backends and
//! the subnet manager word their own failures (their own error types); here they are wrapped
//! with what they mean to the agent: which backend failed and when, or whether retrying the
//! store can help.

use ipnetwork::{Ipv4Network, Ipv6Network};
use std::error::Error;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// A failure worded by the part that failed (a backend's or a subnet manager's error type).
pub type Cause = Box<dyn Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("usage: {0}")]
    Usage(String),
    /// The store holding the leases (etcd) failed; its own error says how.
    #[error("{source}")]
    Store {
        failure: StoreFailure,
        source: Cause,
    },
    #[error("bad network config at {key}: {msg}")]
    BadConfig { key: String, msg: String },
    #[error("subnet space exhausted: no free /{len} left in {min}..{max} of {network}")]
    SubnetsExhausted {
        network: Ipv4Network,
        min: Ipv4Addr,
        max: Ipv4Addr,
        len: u8,
    },
    #[error("IPv6 subnet space exhausted: no free /{len} left in {min}..{max} of {network}")]
    Ipv6SubnetsExhausted {
        network: Ipv6Network,
        min: Ipv6Addr,
        max: Ipv6Addr,
        len: u8,
    },
    #[error("could not acquire a subnet lease after {attempts} attempts (other nodes kept taking the chosen subnets)")]
    LeaseContention { attempts: u32 },
    /// `store` names where leases live (`etcd`).
    #[error("this node's lease {key} was removed from {store}")]
    LeaseRevoked { key: String, store: &'static str },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("conflist template {path}: {msg}")]
    Template { path: PathBuf, msg: String },
    /// A backend failed: `backend` is its `Backend.Type`, `stage` when it failed.
    #[error("{backend} {stage}: {source}")]
    Backend {
        backend: &'static str,
        stage: Stage,
        source: Cause,
    },
    #[error("masquerade rules (--ip-masq): {0}")]
    Masquerade(String),
}

/// What a failure of the store means to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFailure {
    /// The store did not answer, or failed this request: worth another try.
    Transient,
    /// The store refused us (its CA, our certificate, user or password): retrying would not
    /// help.
    Refused,
    /// The network config is not in the store.
    ConfigMissing,
}

/// When a backend failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Starting on this node (its flags, keys, helper programs).
    Start,
    /// A reconcile pass.
    Reconcile,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Start => "backend",
            Stage::Reconcile => "reconcile failed",
        })
    }
}

impl AgentError {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> AgentError {
        AgentError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    /// `backend` failed at `stage`, as its own error `source` says.
    pub fn backend(backend: &'static str, stage: Stage, source: impl Into<Cause>) -> AgentError {
        AgentError::Backend {
            backend,
            stage,
            source: source.into(),
        }
    }

    /// What a store failure means, or `None` for any other error.
    pub fn store_failure(&self) -> Option<StoreFailure> {
        match self {
            AgentError::Store { failure, .. } => Some(*failure),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_failures_name_the_backend() {
        let e = AgentError::backend("vxlan", Stage::Reconcile, "no such device".to_string());
        assert_eq!(e.to_string(), "vxlan reconcile failed: no such device");
        let e = AgentError::backend("bgp", Stage::Start, "BIRD binary \"bird\" not found");
        assert_eq!(e.to_string(), "bgp backend: BIRD binary \"bird\" not found");
    }
}
