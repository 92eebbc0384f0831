//! Spec versions: the list we support and their ordering.

use crate::error::CniError;
use std::cmp::Ordering;

/// Every spec version this library speaks, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];

/// The newest spec version.
pub const CURRENT: &str = "1.1.0";

/// A parsed `major.minor.patch` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u64, pub u64, pub u64);

impl Version {
    /// Parses `X.Y.Z` (a missing patch or minor counts as 0, as semver-lenient parsers do).
    pub fn parse(s: &str) -> Result<Version, CniError> {
        let bad = || {
            CniError::decode(format!(
                "invalid version {s:?}: the version must be of the form X.Y.Z"
            ))
        };
        let mut parts = s.split('.');
        let mut next = |required: bool| -> Result<u64, CniError> {
            match parts.next() {
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                    p.parse().map_err(|_| bad())
                }
                None if !required => Ok(0),
                _ => Err(bad()),
            }
        };
        let v = Version(next(true)?, next(false)?, next(false)?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(v)
    }
}

/// Compares two version strings; an unparsable version sorts lowest.
pub fn compare(a: &str, b: &str) -> Ordering {
    match (Version::parse(a), Version::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        (Ok(_), Err(_)) => Ordering::Greater,
        (Err(_), Ok(_)) => Ordering::Less,
        (Err(_), Err(_)) => Ordering::Equal,
    }
}

/// `a >= b`, both as versions.
pub fn at_least(a: &str, b: &str) -> bool {
    compare(a, b) != Ordering::Less
}

/// True when `v` is one of [`SUPPORTED_VERSIONS`].
pub fn is_supported(v: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&v)
}

/// The VERSION verb's answer.
pub fn version_info() -> serde_json::Value {
    serde_json::json!({"cniVersion": CURRENT, "supportedVersions": SUPPORTED_VERSIONS})
}

/// The newest version in `candidates` that we support, if any.
pub fn highest_supported<'a>(candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter(|v| is_supported(v))
        .max_by(|a, b| compare(a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering() {
        assert!(at_least("1.0.0", "0.4.0"));
        assert!(at_least("0.4.0", "0.4.0"));
        assert!(!at_least("0.3.1", "0.4.0"));
        assert!(at_least("0.10.0", "0.4.0"));
        assert_eq!(Version::parse("1.1").unwrap(), Version(1, 1, 0));
        assert!(Version::parse("1.x.0").is_err());
        assert!(Version::parse("").is_err());
        assert_eq!(
            highest_supported(["0.3.1", "9.9.9", "1.0.0"]),
            Some("1.0.0")
        );
    }
}
