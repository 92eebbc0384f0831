//! The bandwidth plugin's configuration (rates and bursts): a library, so that the binary
//! (`main.rs`) and the fuzz targets (`fuzz/`) compile the same modules.

pub mod config;
