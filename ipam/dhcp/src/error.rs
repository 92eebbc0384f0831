//! The plugin's and the daemon's errors and their CNI codes. The daemon sends its errors to
//! the plugin as CNI errors (code and message); the plugin passes them on with their code.

use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum DhcpError {
    /// The network configuration is not JSON of the expected shape (the reference's plugin
    /// reads it first to find the socket).
    #[error("error obtaining socketPath: error parsing socket path conf: {0}")]
    Decode(#[source] libcni::gojson::Error),
    /// An option name that is neither known nor a number, in Go's `strconv` wording.
    #[error("Can not parse option {0:?}: Can not parse option: strconv.ParseUint: parsing {0:?}: invalid syntax")]
    OptionName(String),
    /// A provided option value longer than 255 bytes.
    #[error("value too long for option {option:?}{}", .from_arg.as_ref().map(|a| format!(" from CNI_ARGS {a:?}")).unwrap_or_default())]
    ValueTooLong {
        option: String,
        from_arg: Option<String>,
    },
    #[error("invalid priority {0}")]
    Priority(i64),
    /// Nothing listens on the daemon's socket (no file, or refused): 999 for ADD and CHECK,
    /// nothing to do for DEL and GC, not available for STATUS.
    #[error("error dialing DHCP daemon: dial unix {socket}: connect: {reason}")]
    NoDaemon { socket: String, reason: String },
    /// The socket cannot be connected to for another reason.
    #[error("error dialing DHCP daemon: dial unix {socket}: connect: {reason}")]
    Dial { socket: String, reason: String },
    /// The call broke off (code 5).
    #[error("error calling DHCP.{method}: {source}")]
    Call {
        method: String,
        #[source]
        source: std::io::Error,
    },
    /// The daemon answered with an error, passed on with its code as the reference's plugin
    /// reports it.
    #[error("error calling DHCP.{method}: {}", .error.msg)]
    Daemon { method: String, error: CniError },
    #[error("the DHCP daemon returned no result")]
    NoResult,
    #[error("Required prevResult missing")]
    MissingPrevResult,
    /// CHECK: the daemon's lease is not in prevResult.
    #[error("dhcp: the lease holds {0}, which is not in prevResult")]
    NotInPrevResult(String),
    /// STATUS: no daemon (code 50).
    #[error(transparent)]
    Unavailable(Box<DhcpError>),
    /// Daemon: no lease could be acquired.
    #[error(transparent)]
    Acquire(std::io::Error),
    /// Daemon: the lease's answer is unusable (the lease module words why).
    #[error("{0}")]
    Lease(String),
    /// Daemon: CHECK of an attachment it holds no lease for.
    #[error("no DHCP lease held for {0}")]
    NoLease(String),
    /// Daemon: a request for a method it does not know (code 4).
    #[error("unknown method {0:?}")]
    UnknownMethod(String),
    /// Daemon: the request could not be read (code 5).
    #[error("error reading the request: {0}")]
    ReadRequest(#[source] std::io::Error),
    /// Daemon: the request is not JSON of the expected shape (code 6).
    #[error("error parsing the request: {0}")]
    ParseRequest(#[source] serde_json::Error),
    /// An error libcni returned (prevResult, result encoding), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<DhcpError> for CniError {
    fn from(e: DhcpError) -> CniError {
        let msg = e.to_string();
        match e {
            DhcpError::Delegated(e) => e,
            DhcpError::Daemon { error, .. } => CniError { msg, ..error },
            DhcpError::Unavailable(_) => CniError::not_available(msg),
            DhcpError::Call { .. } | DhcpError::ReadRequest(_) => CniError::io(msg),
            DhcpError::ParseRequest(_) => CniError::decode(msg),
            DhcpError::UnknownMethod(_) => CniError::invalid_env(msg),
            // Plain Go errors upstream (code 999).
            DhcpError::Decode(_)
            | DhcpError::OptionName(_)
            | DhcpError::ValueTooLong { .. }
            | DhcpError::Priority(_)
            | DhcpError::NoDaemon { .. }
            | DhcpError::Dial { .. }
            | DhcpError::NoResult
            | DhcpError::MissingPrevResult
            | DhcpError::NotInPrevResult(_)
            | DhcpError::Acquire(_)
            | DhcpError::Lease(_)
            | DhcpError::NoLease(_) => CniError::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: DhcpError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        let no_daemon = || DhcpError::NoDaemon {
            socket: "/run/cni/dhcp.sock".into(),
            reason: "no such file or directory".into(),
        };
        assert_eq!(
            cni(no_daemon()),
            (999, "error dialing DHCP daemon: dial unix /run/cni/dhcp.sock: connect: no such file or directory".into())
        );
        assert_eq!(cni(DhcpError::Unavailable(Box::new(no_daemon()))).0, 50);
        let e = CniError::from(DhcpError::Daemon {
            method: "Allocate".into(),
            error: CniError::try_again("no offer").with_details("why"),
        });
        assert_eq!(
            (e.code, e.msg.as_str(), e.details.as_str()),
            (11, "error calling DHCP.Allocate: no offer", "why")
        );
        assert_eq!(
            cni(DhcpError::ValueTooLong {
                option: "host-name".into(),
                from_arg: Some("K8S_POD_NAME".into())
            }),
            (
                999,
                "value too long for option \"host-name\" from CNI_ARGS \"K8S_POD_NAME\"".into()
            )
        );
        assert_eq!(
            cni(DhcpError::ValueTooLong {
                option: "60".into(),
                from_arg: None
            })
            .1,
            "value too long for option \"60\""
        );
        let io = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert_eq!(
            cni(DhcpError::Call {
                method: "Check".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(cni(DhcpError::ReadRequest(io())).0, 5);
        let bad = serde_json::from_slice::<u32>(b"x").unwrap_err();
        assert_eq!(cni(DhcpError::ParseRequest(bad)).0, 6);
        assert_eq!(
            cni(DhcpError::UnknownMethod("frob".into())),
            (4, "unknown method \"frob\"".into())
        );
        assert_eq!(
            cni(DhcpError::NoLease("c/n/eth0".into())),
            (999, "no DHCP lease held for c/n/eth0".into())
        );
        assert_eq!(
            cni(DhcpError::Delegated(CniError::decode("bad prevResult"))),
            (6, "bad prevResult".into())
        );
    }
}
