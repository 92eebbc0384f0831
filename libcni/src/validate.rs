//! Validation of identifiers that end up in paths and kernel names (pkg/utils rules).

use crate::error::{codes, CniError};

fn is_id_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-'
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`
fn matches_id_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b[0].is_ascii_alphanumeric() && b.iter().all(|&c| is_id_char(c))
}

/// Container ID: non-empty (code 3) and matching the reference's pattern (code 4).
pub fn container_id(id: &str) -> Result<(), CniError> {
    if id.is_empty() {
        return Err(CniError::new(
            codes::UNKNOWN_CONTAINER,
            "missing containerID",
            "",
        ));
    }
    if !matches_id_pattern(id) {
        return Err(CniError::new(
            codes::INVALID_ENV,
            "error validating containerID",
            id,
        ));
    }
    Ok(())
}

/// Network name: non-empty and matching the reference's pattern (code 7).
pub fn network_name(name: &str) -> Result<(), CniError> {
    if name.is_empty() {
        return Err(CniError::new(
            codes::INVALID_CONFIG,
            "missing network name",
            "",
        ));
    }
    if !matches_id_pattern(name) {
        return Err(CniError::new(
            codes::INVALID_CONFIG,
            "invalid characters found in network name",
            name,
        ));
    }
    Ok(())
}

/// Interface name: 1..15 bytes, not `.`/`..`, no `/`, `:` or whitespace (code 4).
pub fn interface_name(name: &str) -> Result<(), CniError> {
    let err = |msg: &str, details: &str| Err(CniError::new(codes::INVALID_ENV, msg, details));
    if name.is_empty() {
        return err("interface name is empty", "");
    }
    if name.len() > 15 {
        return err(
            "interface name is too long",
            "interface name should be less than 16 characters",
        );
    }
    if name == "." || name == ".." {
        return err("interface name is . or ..", "");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return err(
            "interface name contains / or : or whitespace characters",
            "",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids() {
        assert!(container_id("abc-1.2_3").is_ok());
        assert_eq!(container_id("").unwrap_err().code, 3);
        assert_eq!(container_id("-abc").unwrap_err().code, 4);
        assert_eq!(container_id("../../x").unwrap_err().code, 4);
        assert_eq!(container_id("a/b").unwrap_err().code, 4);
    }

    #[test]
    fn network_names() {
        assert!(network_name("mynet").is_ok());
        assert_eq!(network_name("").unwrap_err().code, 7);
        assert_eq!(network_name("../etc").unwrap_err().code, 7);
        assert_eq!(network_name("a b").unwrap_err().code, 7);
    }

    #[test]
    fn interface_names() {
        assert!(interface_name("eth0").is_ok());
        assert!(interface_name("eth0.100").is_ok());
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "0123456789abcdef"] {
            assert_eq!(interface_name(bad).unwrap_err().code, 4, "{bad:?}");
        }
        assert!(interface_name("0123456789abcde").is_ok());
    }
}
