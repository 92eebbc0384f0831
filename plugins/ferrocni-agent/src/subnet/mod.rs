//! flannel's subnet schema in etcd, apart from any backend: the network config at
//! `<prefix>/config`, lease keys and values under `<prefix>/subnets/`, acquiring and renewing
//! this node's lease, and the cluster membership kept from listings and the watch.

pub mod acquire;
pub mod config;
pub mod config_v6;
pub mod key;
pub mod lease;
pub mod membership;
pub mod pick;
pub mod startup;
pub mod store;
