//! The plugin's errors and their CNI codes.

use std::path::PathBuf;

use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum TuningError {
    /// A `sysctl` object names the same key twice (upstream's text).
    #[error("duplicated sysctl keys are not allowed")]
    DuplicateSysctl,
    /// The network configuration is not JSON of the expected shape.
    #[error("failed to load netconf: {0}")]
    Load(#[source] libcni::gojson::Error),
    #[error("invalid args {mac} for MAC addr: address {mac}: invalid MAC address")]
    BadMac { mac: String },
    #[error("invalid mtu {0}: must be a positive number")]
    BadMtu(i64),
    #[error("invalid txQLen {0}: must be between 0 and 4294967295")]
    BadTxQlen(i64),
    /// A key outside `/proc/sys/net`, named as upstream rewrites it.
    #[error("invalid net sysctl key: {rewritten:?}")]
    SysctlKey { rewritten: String },
    #[error("invalid pattern {pattern:?} in sysctl allowlist {path}: {source}")]
    AllowlistPattern {
        pattern: String,
        path: &'static str,
        #[source]
        source: regex_lite::Error,
    },
    /// The allowlist cannot be read (code 5).
    #[error("failed to read sysctl allowlist {path}: {source}")]
    ReadAllowlist {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "Sysctl {key} is not allowed. Only the following sysctls are allowed: [{}]",
        .patterns.join(" ")
    )]
    NotAllowed { key: String, patterns: Vec<String> },
    #[error("failed to read sysctl {key} ({}): {source}", .path.display())]
    ReadSysctl {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to set sysctl {key}={value} ({}): {source}", .path.display())]
    WriteSysctl {
        key: String,
        value: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// CHECK: a sysctl has another value than configured.
    #[error("sysctl {key} ({}) is {have:?}, expected {want:?}", .path.display())]
    SysctlMismatch {
        key: String,
        path: PathBuf,
        have: String,
        want: String,
    },
    /// CHECK: a link attribute has another value than configured.
    #[error("{what} of {ifname} is {have}, expected {want}")]
    LinkMismatch {
        what: &'static str,
        ifname: String,
        have: String,
        want: String,
    },
    #[error("Required prevResult missing")]
    MissingPrevResult,
    #[error("failed to open netns {path:?}: {source}")]
    OpenNetns {
        path: String,
        #[source]
        source: netkit::Error,
    },
    /// The backup's MAC cannot be parsed (code 6).
    #[error("bad MAC in tuning backup: {0}")]
    BackupMac(#[source] netkit::Error),
    /// Code 5.
    #[error("failed to list tuning backups in {dir}: {source}")]
    ListBackups {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("failed to read tuning backup {}: {source}", .path.display())]
    ReadBackup {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 6.
    #[error("failed to parse tuning backup {}: {source}", .path.display())]
    ParseBackup {
        path: PathBuf,
        #[source]
        source: libcni::gojson::Error,
    },
    #[error("failed to encode tuning backup: {0}")]
    EncodeBackup(#[source] serde_json::Error),
    /// Code 5.
    #[error("failed to write tuning backup {}: {source}", .path.display())]
    WriteBackup {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("failed to remove tuning backup {}: {source}", .path.display())]
    RemoveBackup {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A kernel operation failed; the netkit error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// An error libcni's skeleton helpers returned (prevResult, CNI_ARGS...), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<TuningError> for CniError {
    fn from(e: TuningError) -> CniError {
        let msg = e.to_string();
        match e {
            TuningError::Delegated(e) => e,
            // Files of ours that cannot be read or written: an I/O error.
            TuningError::ReadAllowlist { .. }
            | TuningError::ListBackups { .. }
            | TuningError::ReadBackup { .. }
            | TuningError::WriteBackup { .. }
            | TuningError::RemoveBackup { .. } => CniError::io(msg),
            // A backup file that is not what we wrote.
            TuningError::ParseBackup { .. } | TuningError::BackupMac(_) => CniError::decode(msg),
            // Plain Go errors upstream (code 999), configuration errors included.
            TuningError::DuplicateSysctl
            | TuningError::Load(_)
            | TuningError::BadMac { .. }
            | TuningError::BadMtu(_)
            | TuningError::BadTxQlen(_)
            | TuningError::SysctlKey { .. }
            | TuningError::AllowlistPattern { .. }
            | TuningError::NotAllowed { .. }
            | TuningError::ReadSysctl { .. }
            | TuningError::WriteSysctl { .. }
            | TuningError::SysctlMismatch { .. }
            | TuningError::LinkMismatch { .. }
            | TuningError::MissingPrevResult
            | TuningError::OpenNetns { .. }
            | TuningError::EncodeBackup(_)
            | TuningError::Kernel(_) => CniError::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: TuningError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    fn io() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::PermissionDenied)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(TuningError::BadMac { mac: "zz".into() }),
            (
                999,
                "invalid args zz for MAC addr: address zz: invalid MAC address".into()
            )
        );
        assert_eq!(
            cni(TuningError::SysctlMismatch {
                key: "net.ipv4.ip_forward".into(),
                path: "/proc/sys/net/ipv4/ip_forward".into(),
                have: "0".into(),
                want: "1".into()
            }),
            (
                999,
                r#"sysctl net.ipv4.ip_forward (/proc/sys/net/ipv4/ip_forward) is "0", expected "1""#
                    .into()
            )
        );
        assert_eq!(
            cni(TuningError::LinkMismatch {
                what: "MTU",
                ifname: "eth0".into(),
                have: "1500".into(),
                want: "9000".into()
            }),
            (999, "MTU of eth0 is 1500, expected 9000".into())
        );
        assert_eq!(
            cni(TuningError::NotAllowed {
                key: "net.core.somaxconn".into(),
                patterns: vec!["^a$".into(), "^b$".into()]
            }),
            (999, "Sysctl net.core.somaxconn is not allowed. Only the following sysctls are allowed: [^a$ ^b$]".into())
        );
        let (code, msg) = cni(TuningError::WriteBackup {
            path: "/d/c_eth0.json".into(),
            source: io(),
        });
        assert_eq!(code, 5);
        assert!(
            msg.starts_with("failed to write tuning backup /d/c_eth0.json: "),
            "{msg}"
        );
        assert_eq!(
            cni(TuningError::ReadAllowlist {
                path: "/x",
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(TuningError::ListBackups {
                dir: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(TuningError::ReadBackup {
                path: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(TuningError::RemoveBackup {
                path: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        let bad_json = libcni::gojson::from_slice::<u32>(b"x").unwrap_err();
        assert_eq!(
            cni(TuningError::ParseBackup {
                path: "/d".into(),
                source: bad_json
            })
            .0,
            6
        );
        assert_eq!(
            cni(TuningError::BackupMac(netkit::Error::invalid(
                "invalid MAC address \"x\"",
                "bad"
            )))
            .0,
            6
        );
        assert_eq!(
            cni(TuningError::DuplicateSysctl),
            (999, "duplicated sysctl keys are not allowed".into())
        );
        assert_eq!(
            cni(TuningError::Delegated(CniError::invalid_env(
                "bad CNI_ARGS"
            ))),
            (4, "bad CNI_ARGS".into())
        );
    }
}
