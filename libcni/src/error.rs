//! CNI errors: the spec's codes and its JSON shape (`{cniVersion, code, msg, details}`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Numeric CNI error code (spec table plus the reference's 8 and 999).
pub type ErrorCode = u32;

/// The error codes of the spec (0–99 reserved) and the reference's generic 999.
pub mod codes {
    use super::ErrorCode;
    pub const INCOMPATIBLE_VERSION: ErrorCode = 1;
    pub const UNSUPPORTED_FIELD: ErrorCode = 2;
    pub const UNKNOWN_CONTAINER: ErrorCode = 3;
    pub const INVALID_ENV: ErrorCode = 4;
    pub const IO: ErrorCode = 5;
    pub const DECODE: ErrorCode = 6;
    pub const INVALID_CONFIG: ErrorCode = 7;
    pub const INVALID_NETNS: ErrorCode = 8;
    pub const TRY_AGAIN: ErrorCode = 11;
    pub const NOT_AVAILABLE: ErrorCode = 50;
    pub const LIMITED_CONNECTIVITY: ErrorCode = 51;
    pub const INTERNAL: ErrorCode = 999;
}

/// A CNI error as printed on a plugin's stdout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct CniError {
    pub code: ErrorCode,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "{}; {}", self.msg, self.details)
        }
    }
}

impl CniError {
    pub fn new(code: ErrorCode, msg: impl Into<String>, details: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }
    pub fn incompatible_version(msg: impl Into<String>) -> Self {
        Self::new(codes::INCOMPATIBLE_VERSION, msg, "")
    }
    pub fn unsupported_field(msg: impl Into<String>) -> Self {
        Self::new(codes::UNSUPPORTED_FIELD, msg, "")
    }
    pub fn unknown_container(msg: impl Into<String>) -> Self {
        Self::new(codes::UNKNOWN_CONTAINER, msg, "")
    }
    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_ENV, msg, "")
    }
    pub fn io(msg: impl Into<String>) -> Self {
        Self::new(codes::IO, msg, "")
    }
    pub fn decode(msg: impl Into<String>) -> Self {
        Self::new(codes::DECODE, msg, "")
    }
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_CONFIG, msg, "")
    }
    pub fn invalid_netns(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_NETNS, msg, "")
    }
    pub fn try_again(msg: impl Into<String>) -> Self {
        Self::new(codes::TRY_AGAIN, msg, "")
    }
    pub fn not_available(msg: impl Into<String>) -> Self {
        Self::new(codes::NOT_AVAILABLE, msg, "")
    }
    pub fn limited_connectivity(msg: impl Into<String>) -> Self {
        Self::new(codes::LIMITED_CONNECTIVITY, msg, "")
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL, msg, "")
    }

    /// The spec's error object, with `cniVersion` when one is known.
    pub fn to_value(&self, cni_version: &str) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        if !cni_version.is_empty() {
            m.insert("cniVersion".into(), cni_version.into());
        }
        m.insert("code".into(), self.code.into());
        m.insert("msg".into(), self.msg.clone().into());
        if !self.details.is_empty() {
            m.insert("details".into(), self.details.clone().into());
        }
        serde_json::Value::Object(m)
    }

    /// Parses an error object printed by a plugin (extra keys such as cniVersion ignored).
    pub fn from_json(bytes: &[u8]) -> Option<CniError> {
        let e: CniError = crate::gojson::from_slice(bytes).ok()?;
        Some(e)
    }
}

/// A list as Go's `%q` prints a `[]string` (`["a" "b"]`), for messages worded like the
/// reference's.
pub fn go_quoted_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{:?}", s.as_ref())).collect();
    format!("[{}]", quoted.join(" "))
}

/// Pretty-prints JSON with the 4-space indent the reference uses.
pub fn to_indented_json(v: &serde_json::Value) -> String {
    use serde::Serialize as _;
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    // Serializing a Value into a Vec cannot fail.
    if v.serialize(&mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8(buf).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_shape() {
        let e = CniError::invalid_config("bad").with_details("why");
        let v = e.to_value("1.0.0");
        assert_eq!(
            v,
            serde_json::json!({"cniVersion":"1.0.0","code":7,"msg":"bad","details":"why"})
        );
        let v = CniError::internal("x").to_value("");
        assert_eq!(v, serde_json::json!({"code":999,"msg":"x"}));
    }

    #[test]
    fn go_quoted_lists() {
        assert_eq!(go_quoted_list(&["0.1.0", "1.0.0"]), r#"["0.1.0" "1.0.0"]"#);
        assert_eq!(go_quoted_list::<&str>(&[]), "[]");
    }

    #[test]
    fn parses_reference_error() {
        let e = CniError::from_json(
            br#"{"code": 1, "msg": "incompatible CNI versions", "details": "config is \"9.9.9\""}"#,
        )
        .unwrap();
        assert_eq!(e.code, 1);
        assert_eq!(e.details, "config is \"9.9.9\"");
        assert!(CniError::from_json(b"garbage").is_none());
    }
}
