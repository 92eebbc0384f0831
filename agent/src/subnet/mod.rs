//! flannel's subnet schema in etcd, apart from any backend: the network config at
//! `<prefix>/config`, lease keys and values under `<prefix>/subnets/`, acquiring and renewing
//! this node's lease, the cluster membership kept from listings and the watch, and the checks
//! every other node's lease passes before any backend programs it (`validate`).

pub mod acquire;
pub mod config;
pub mod config_v6;
pub mod key;
pub mod lease;
pub mod listing;
pub mod membership;
pub mod pick;
pub mod startup;
pub mod store;
pub mod validate;
