//! Errors of the host-local plugin; `From<IpamError> for CniError` maps each to its CNI code.

use libcni::CniError;
use thiserror::Error;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum IpamError {
    /// The network configuration is invalid (code 999: plain errors upstream, which its
    /// skeleton reports so).
    #[error("{0}")]
    InvalidConfig(String),
    /// CNI_ARGS or an identifier from the environment is invalid (code 4).
    #[error("{0}")]
    InvalidArgs(String),
    /// Allocation failed: exhausted range, duplicate allocation, requested IP taken (code 999,
    /// as the reference reports it).
    #[error("{0}")]
    Allocation(String),
    /// CHECK found that a reservation is missing (code 999, as the reference).
    #[error("{0}")]
    CheckFailed(String),
    /// The store could not be read or written (code 5).
    #[error("{0}")]
    Io(String),
    /// STATUS: the plugin cannot currently serve ADD (code 50).
    #[error("{0}")]
    NotAvailable(String),
}

impl From<IpamError> for CniError {
    fn from(e: IpamError) -> CniError {
        let msg = e.to_string();
        match e {
            IpamError::InvalidArgs(_) => CniError::invalid_env(msg),
            IpamError::InvalidConfig(_) | IpamError::Allocation(_) | IpamError::CheckFailed(_) => {
                CniError::internal(msg)
            }
            IpamError::Io(_) => CniError::io(msg),
            IpamError::NotAvailable(_) => CniError::not_available(msg),
        }
    }
}

impl IpamError {
    /// The CNI code this error is reported with.
    pub fn code(&self) -> u32 {
        CniError::from(self.clone()).code
    }

    /// Builds an I/O error naming the operation and the object it failed on.
    pub fn io(
        what: impl std::fmt::Display,
        object: impl std::fmt::Display,
        err: impl std::fmt::Display,
    ) -> Self {
        IpamError::Io(format!("{what} {object}: {err}"))
    }

    /// Prefixes the message, keeping the variant (and so the code).
    pub fn context(self, prefix: impl std::fmt::Display) -> Self {
        let wrap = |m: String| format!("{prefix}: {m}");
        match self {
            IpamError::InvalidConfig(m) => IpamError::InvalidConfig(wrap(m)),
            IpamError::InvalidArgs(m) => IpamError::InvalidArgs(wrap(m)),
            IpamError::Allocation(m) => IpamError::Allocation(wrap(m)),
            IpamError::CheckFailed(m) => IpamError::CheckFailed(wrap(m)),
            IpamError::Io(m) => IpamError::Io(wrap(m)),
            IpamError::NotAvailable(m) => IpamError::NotAvailable(wrap(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_texts() {
        let cases = [
            (
                IpamError::InvalidConfig("no IP ranges specified".into()),
                999,
            ),
            (
                IpamError::InvalidArgs("invalid container ID \"\"".into()),
                4,
            ),
            (
                IpamError::Allocation("failed to allocate for range 0: exhausted".into()),
                999,
            ),
            (
                IpamError::CheckFailed(
                    "host-local: Failed to find address added by container c".into(),
                ),
                999,
            ),
            (IpamError::Io("open resolvConf /x: gone".into()), 5),
            (
                IpamError::NotAvailable(
                    "no IP addresses available in range set: 10.0.0.0/30".into(),
                ),
                50,
            ),
        ];
        for (e, code) in cases {
            let text = e.to_string();
            let cni = CniError::from(e);
            assert_eq!((cni.code, cni.msg), (code, text));
        }
        assert_eq!(
            IpamError::io("open resolvConf", "/etc/r", "gone")
                .context("loading")
                .to_string(),
            "loading: open resolvConf /etc/r: gone"
        );
    }
}
