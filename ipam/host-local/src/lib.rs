//! host-local IPAM: configuration, range arithmetic, the reference-compatible disk store and the
//! allocator, and the verbs on the CNI skeleton (`plugin`), which the binary (`main.rs`) runs.

pub mod allocator;
pub mod config;
pub mod dns;
pub mod error;
pub mod ip;
pub mod plugin;
pub mod range;
pub mod store;
pub mod validate;

pub use error::IpamError;
