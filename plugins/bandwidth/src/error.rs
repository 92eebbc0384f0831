//! The plugin's errors and their CNI codes.

use libcni::error::CniError;

use crate::config::ConfigError;
use crate::shaping::ShapeError;

#[derive(Debug, thiserror::Error)]
pub enum BandwidthError {
    /// Bad limits or latency (code 999, as upstream).
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Limits the kernel cannot represent (code 999).
    #[error("invalid {direction} limit: {source}")]
    Shape {
        direction: &'static str,
        source: ShapeError,
    },
    /// Called outside a chain, or the chain is not veth-based (code 999, as upstream).
    #[error("{0}")]
    Chain(String),
    /// The CNI version is older than chaining (code 1).
    #[error("incompatible CNI versions")]
    Version { config: String },
    /// A kernel operation failed; the netkit error says what and on which object (code 999).
    #[error("{0}")]
    Kernel(#[from] netkit::Error),
    /// CHECK found state that differs from the configuration (code 999).
    #[error("bandwidth check failed: {}", .0.join("; "))]
    Mismatch(Vec<String>),
    /// GC could not remove some stale IFBs (code 999).
    #[error("bandwidth GC failed: {}", .0.join("; "))]
    Gc(Vec<String>),
}

impl From<BandwidthError> for CniError {
    fn from(e: BandwidthError) -> CniError {
        let msg = e.to_string();
        match e {
            // Plain errors upstream, which its skeleton reports with code 999.
            BandwidthError::Config(_) | BandwidthError::Shape { .. } | BandwidthError::Chain(_) => {
                CniError::internal(msg)
            }
            BandwidthError::Version { config } => {
                CniError::incompatible_version(msg).with_details(format!(
                    "config is {config:?}, plugin supports {}",
                    libcni::error::go_quoted_list(crate::SUPPORTED_VERSIONS)
                ))
            }
            BandwidthError::Kernel(_) | BandwidthError::Mismatch(_) | BandwidthError::Gc(_) => {
                CniError::internal(msg)
            }
        }
    }
}
