//! host-local IPAM: configuration, range arithmetic, the reference-compatible disk store and the
//! allocator. The binary (`main.rs`) only wires these to the CNI skeleton.

pub mod allocator;
pub mod config;
pub mod dns;
pub mod error;
pub mod ip;
pub mod range;
pub mod store;
pub mod validate;

pub use error::IpamError;
