//! `ferrocni-agent`: the node agent keeping this node's subnet lease in etcd (flannel's layout)
//! and the data plane between nodes in step with cluster membership.
//!
//! The parts, each using only those above it:
//! - [`error`]: the agent's error enum;
//! - [`ops`]: logs, metrics, HTTP, key files' modes, atomic file writes;
//! - [`subnet`]: flannel's subnet schema (network config, lease keys and values, the rules
//!   every lease follows), apart from any store;
//! - [`backend`]: the data planes, one folder per `Backend.Type`, behind two traits, found
//!   through one registry (which also brings their flags);
//! - [`options`]: the command line and `FLANNELD_*` variables;
//! - [`manager`]: where leases live: the `SubnetManager` seam and its etcd implementation;
//! - [`node`]: the node's outputs (subnet.env, conflist, install-cni, masquerade);
//! - [`policy`]: NetworkPolicy enforcement on the Kubernetes API's objects;
//! - [`membership`], [`reconcile`], [`agent`]: the orchestration on top (the cluster as the
//!   agent knows it, one pass, start-up and the serve loop).

pub mod agent;
pub mod backend;
pub mod error;
pub mod manager;
pub mod membership;
pub mod node;
pub mod ops;
pub mod options;
pub mod policy;
pub mod reconcile;
pub mod subnet;
