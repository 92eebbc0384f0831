//! Validation of the identifiers that reach the store. The network name becomes a path
//! component; the container ID and ifname become lease-file content whose `\r\n` framing must
//! stay unambiguous. Checked here again even though the skeleton validates them, so the store
//! never depends on a caller having done so.

use crate::error::IpamError;

fn matches_id_pattern(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`, so never `.`, `..`, empty or containing `/`.
pub fn network_name(name: &str) -> Result<(), IpamError> {
    if matches_id_pattern(name) {
        Ok(())
    } else {
        Err(IpamError::NetworkName(name.to_string()))
    }
}

pub fn container_id(id: &str) -> Result<(), IpamError> {
    if matches_id_pattern(id) {
        Ok(())
    } else {
        Err(IpamError::ContainerId(id.to_string()))
    }
}

/// 1..15 bytes, not `.`/`..`, no `/`, `:` or whitespace (the kernel's rules, as pkg/utils).
pub fn ifname(name: &str) -> Result<(), IpamError> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|c| c == b'/' || c == b':' || c.is_ascii_whitespace() || c == 0);
    if ok {
        Ok(())
    } else {
        Err(IpamError::IfName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_traversal_and_separators() {
        for bad in [
            "", ".", "..", "../../x", "a/b", "-a", ".hidden", "a b", "a\r\nb",
        ] {
            assert!(network_name(bad).is_err(), "{bad:?}");
            assert!(container_id(bad).is_err(), "{bad:?}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "0123456789abcdef"] {
            assert!(ifname(bad).is_err(), "{bad:?}");
        }
        network_name("cbr0.net-1_x").unwrap();
        container_id("0123abc").unwrap();
        ifname("eth0").unwrap();
    }
}
