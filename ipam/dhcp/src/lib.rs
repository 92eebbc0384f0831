//! The dhcp IPAM plugin's configuration, DHCP messages and client, leases, the plugin-daemon
//! protocol and errors: a library, so that the binary (`main.rs`) and the fuzz targets (`fuzz/`)
//! compile the same modules.

pub mod client;
pub mod config;
pub mod error;
pub mod lease;
pub mod message;
pub mod protocol;
pub mod rawsock;
