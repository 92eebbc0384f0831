//! The host-device plugin's configuration, device lookup, saved state and errors: a library, so
//! that the binary (`main.rs`) and the fuzz targets (`fuzz/`) compile the same modules.

pub mod config;
pub mod error;
pub mod find;
pub mod state;
