//! Delegation to the configured IPAM plugin.

use libcni::error::CniError;
use libcni::result::CniResult;

/// IPAM ADD: the delegate's result converted to the current shape.
pub fn add(ipam_type: &str, stdin: &[u8]) -> Result<CniResult, CniError> {
    let value = libcni::invoke::delegate(ipam_type, "ADD", stdin)?.ok_or_else(|| {
        CniError::internal(format!("IPAM plugin {ipam_type:?} returned no result"))
    })?;
    CniResult::from_value(&value)
}

/// IPAM DEL/CHECK/STATUS/GC (no result).
pub fn call(ipam_type: &str, command: &str, stdin: &[u8]) -> Result<(), CniError> {
    libcni::invoke::delegate(ipam_type, command, stdin).map(|_| ())
}
