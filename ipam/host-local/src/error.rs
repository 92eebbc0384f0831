//! Errors of the host-local plugin, each mapped to a CNI error code by [`IpamError::code`].

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
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

impl IpamError {
    pub fn code(&self) -> u32 {
        match self {
            IpamError::InvalidArgs(_) => 4,
            IpamError::InvalidConfig(_) | IpamError::Allocation(_) | IpamError::CheckFailed(_) => {
                999
            }
            IpamError::Io(_) => 5,
            IpamError::NotAvailable(_) => 50,
        }
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
