//! The ferrocni-policy plugin's configuration, request and errors: a library, so that the binary
//! (`main.rs`) and its tests compile the same modules.

pub mod ask;
pub mod config;
pub mod error;
