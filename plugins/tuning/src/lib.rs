//! The tuning plugin's configuration, backups of link settings and errors: a library, so that the
//! binary (`main.rs`) and the fuzz targets (`fuzz/`) compile the same modules.

pub mod backup;
pub mod config;
pub mod error;
