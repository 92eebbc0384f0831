//! flannel's subnet schema, apart from any store and any backend: the network config
//! (`config`, `config_v6`, with the `Backend` object left raw), lease keys (`key`) and values
//! (`lease`), how a free subnet is picked (`pick`), and the checks every other node's lease
//! passes before any backend programs it (`validate`).

pub mod config;
pub mod config_v6;
pub mod key;
pub mod lease;
pub mod pick;
pub mod validate;
