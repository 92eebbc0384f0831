//! The vlan plugin's configuration and errors: a library, so that the binary (`main.rs`) and the
//! fuzz targets (`fuzz/`) compile the same modules.

pub mod config;
pub mod error;
