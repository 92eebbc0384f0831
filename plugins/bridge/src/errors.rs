//! Mapping kernel and netfilter failures onto CNI errors.

use libcni::error::CniError;

/// A netkit (netlink/netns/sysctl) failure. Bad input is a config error, the rest internal.
pub fn kernel(e: netkit::Error) -> CniError {
    match e {
        netkit::Error::Invalid { .. } => CniError::internal(e.to_string()),
        _ => CniError::internal(e.to_string()),
    }
}

/// A netfilter tool failure.
pub fn netfilter(e: netkit::netfilter::Error) -> CniError {
    CniError::internal(e.to_string())
}

/// Adds an outer context to a CNI error message.
pub fn context(e: CniError, outer: impl std::fmt::Display) -> CniError {
    CniError::new(e.code, format!("{outer}: {}", e.msg), e.details)
}
