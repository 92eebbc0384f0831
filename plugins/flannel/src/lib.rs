//! The flannel plugin's configuration, subnet.env, the delegate config built from them and its
//! saved copy, and errors: a library, so that the binary (`main.rs`) and the fuzz targets (`fuzz/`)
//! compile the same modules.

pub mod config;
pub mod delegate;
pub mod error;
pub mod scratch;
pub mod subnet_env;
