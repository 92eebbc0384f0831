//! The firewall plugin's configuration, errors and per-attachment records: a library, so that the
//! binary (`main.rs`) and the fuzz targets (`fuzz/`) compile the same modules.

pub mod config;
pub mod error;
pub mod record;
