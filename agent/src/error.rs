//! Everything the agent can fail on, each message naming the object involved.

use ipnetwork::{Ipv4Network, Ipv6Network};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("usage: {0}")]
    Usage(String),
    #[error("etcd at {endpoints} is unreachable: {detail}")]
    Unreachable { endpoints: String, detail: String },
    #[error("etcd request {what} failed: {detail}")]
    Etcd { what: String, detail: String },
    /// etcd or its TLS refused us (wrong CA, client certificate, user or password): retrying
    /// would not help.
    #[error("{0}")]
    EtcdRefused(String),
    #[error(
        "network config key {key} is missing in etcd (write flannel's JSON config there first)"
    )]
    ConfigMissing { key: String },
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
    #[error("this node's lease {key} was removed from etcd")]
    LeaseRevoked { key: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("conflist template {path}: {msg}")]
    Template { path: PathBuf, msg: String },
    #[error("WireGuard key file {path}: {msg}")]
    KeyFile { path: PathBuf, msg: String },
    #[error("overlay reconcile failed: {0}")]
    Reconcile(String),
    #[error("masquerade rules (--ip-masq): {0}")]
    Masquerade(String),
    /// The bgp backend: its node flags, BIRD, its files or its control socket.
    #[error("bgp backend: {0}")]
    Bgp(#[from] crate::backend::bgp::BgpError),
}

impl AgentError {
    pub fn etcd(what: impl Into<String>, e: impl std::fmt::Display) -> AgentError {
        AgentError::Etcd {
            what: what.into(),
            detail: e.to_string(),
        }
    }

    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> AgentError {
        AgentError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
