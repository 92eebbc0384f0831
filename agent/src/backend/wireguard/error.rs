//! What the wireguard backend fails on: its key file, and its passes.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum WireguardError {
    #[error("WireGuard key file {path}: {msg}")]
    KeyFile { path: PathBuf, msg: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The underlay interface, the devices, their peers, addresses or routes (the text says
    /// which, and what the kernel answered).
    #[error("{0}")]
    Kernel(String),
}

impl WireguardError {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WireguardError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
