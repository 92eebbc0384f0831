//! `ferrocni-agent`: the node agent keeping this node's subnet lease in etcd (flannel's layout)
//! and the data plane between nodes in step with cluster membership.
//!
//! The parts, each knowing only those below it:
//! - [`etcd`]: the etcd v3 client (gRPC, TLS, auth);
//! - [`subnet`]: flannel's subnet schema on it (config, keys, leases, acquire/renew, watch);
//! - [`backend`]: the data planes, one module per `Backend.Type`, behind one trait;
//! - [`node`]: the node's outputs (subnet.env, conflist, install-cni, masquerade);
//! - [`ops`]: logs, metrics, HTTP;
//! - [`agent`]: the orchestration on top (start-up, serve loop, reconcile).

pub mod agent;
pub mod backend;
pub mod error;
pub mod etcd;
pub mod node;
pub mod ops;
pub mod options;
pub mod reconcile;
pub mod subnet;
