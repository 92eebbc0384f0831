//! One error type for every kernel operation, always carrying what failed and on which object.

use std::fmt;
use std::io;

/// Shorthand used across netkit.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed kernel operation. The `context` says what was attempted on which object
/// ("failed to add address 10.1.2.3/24 to eth0"); the rest says why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel answered a netlink request with a negative errno.
    #[error("{}", Prefixed(context, &KernelCause { errno: *errno, ext_ack: ext_ack.as_deref() }))]
    Kernel {
        context: String,
        /// Positive errno (e.g. `libc::EEXIST`).
        errno: i32,
        /// The kernel's extended-ack text, when it sent one.
        ext_ack: Option<String>,
    },
    /// A syscall outside netlink failed (open, setns, socket, /proc/sys I/O...).
    #[error("{}", Prefixed(context, source))]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// The network namespace path does not exist (DEL treats this as "already gone").
    #[error("{}", Prefixed(context, &format_args!("network namespace {path:?} does not exist")))]
    NetnsNotFound { context: String, path: String },
    /// The path exists but is not a network namespace.
    #[error("{}", Prefixed(context, &format_args!("{path:?} is not a network namespace")))]
    NotNetns { context: String, path: String },
    /// An object exists but is not what was asked for (e.g. a non-bridge link named like the bridge).
    #[error("{}", Prefixed(context, detail))]
    Conflict { context: String, detail: String },
    /// The caller passed something unusable (bad name, bad sysctl key...).
    #[error("{}", Prefixed(context, detail))]
    Invalid { context: String, detail: String },
    /// The kernel's reply could not be understood.
    #[error("{}", Prefixed(context, &format_args!("unexpected netlink reply: {detail}")))]
    Protocol { context: String, detail: String },
}

/// Renders "context: cause", or just "cause" when no context was attached yet.
struct Prefixed<'a, T: fmt::Display + ?Sized>(&'a str, &'a T);

impl<T: fmt::Display + ?Sized> fmt::Display for Prefixed<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            write!(f, "{}", self.1)
        } else {
            write!(f, "{}: {}", self.0, self.1)
        }
    }
}

struct KernelCause<'a> {
    errno: i32,
    ext_ack: Option<&'a str>,
}

impl fmt::Display for KernelCause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", io::Error::from_raw_os_error(self.errno))?;
        if let Some(msg) = self.ext_ack {
            write!(f, " ({msg})")?;
        }
        Ok(())
    }
}

impl Error {
    /// A kernel errno with a context.
    pub fn kernel(context: impl Into<String>, errno: i32) -> Self {
        Error::Kernel {
            context: context.into(),
            errno: errno.saturating_abs(),
            ext_ack: None,
        }
    }

    /// An I/O error with a context.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The last OS error (errno) with a context.
    pub fn last_os_error(context: impl Into<String>) -> Self {
        Error::io(context, io::Error::last_os_error())
    }

    /// Bad caller input.
    pub fn invalid(context: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Invalid {
            context: context.into(),
            detail: detail.into(),
        }
    }

    /// An object exists but has the wrong type or settings.
    pub fn conflict(context: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Conflict {
            context: context.into(),
            detail: detail.into(),
        }
    }

    /// A malformed or unexpected netlink reply.
    pub fn protocol(context: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Protocol {
            context: context.into(),
            detail: detail.into(),
        }
    }

    /// Prepends an outer context: `"outer: inner context: cause"`.
    pub fn context(mut self, outer: impl fmt::Display) -> Self {
        let slot = self.context_mut();
        *slot = if slot.is_empty() {
            outer.to_string()
        } else {
            format!("{outer}: {slot}")
        };
        self
    }

    /// The context text alone (what failed on which object).
    pub fn context_str(&self) -> &str {
        match self {
            Error::Kernel { context, .. }
            | Error::Io { context, .. }
            | Error::NetnsNotFound { context, .. }
            | Error::NotNetns { context, .. }
            | Error::Conflict { context, .. }
            | Error::Invalid { context, .. }
            | Error::Protocol { context, .. } => context,
        }
    }

    fn context_mut(&mut self) -> &mut String {
        match self {
            Error::Kernel { context, .. }
            | Error::Io { context, .. }
            | Error::NetnsNotFound { context, .. }
            | Error::NotNetns { context, .. }
            | Error::Conflict { context, .. }
            | Error::Invalid { context, .. }
            | Error::Protocol { context, .. } => context,
        }
    }

    /// The positive errno behind this error, when there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Kernel { errno, .. } => Some(*errno),
            Error::Io { source, .. } => source.raw_os_error(),
            Error::NetnsNotFound { .. } => Some(libc::ENOENT),
            _ => None,
        }
    }

    /// "The thing is not there": missing link (ENODEV), address (EADDRNOTAVAIL), route or
    /// neighbour (ESRCH, ENOENT), missing netns. DEL paths treat these as success.
    pub fn is_not_found(&self) -> bool {
        if matches!(self, Error::NetnsNotFound { .. }) {
            return true;
        }
        matches!(
            self.errno(),
            Some(libc::ENODEV | libc::ENOENT | libc::ESRCH | libc::EADDRNOTAVAIL)
        )
    }

    /// The object already exists (EEXIST).
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }

    /// The netns path does not exist.
    pub fn is_netns_not_found(&self) -> bool {
        matches!(self, Error::NetnsNotFound { .. })
    }

    /// An object exists with the wrong kind or settings.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// The kernel's extended-ack message, if any.
    pub fn ext_ack(&self) -> Option<&str> {
        match self {
            Error::Kernel { ext_ack, .. } => ext_ack.as_deref(),
            _ => None,
        }
    }
}

/// `.ctx(|| format!(...))` on results: attach context lazily (only on the error path).
pub trait ResultExt<T> {
    fn ctx<C: fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn ctx<C: fmt::Display>(self, f: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.context(f()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_error_message_names_object_and_cause() {
        let e =
            Error::kernel("", -libc::EEXIST).context("failed to add address 10.1.2.3/24 to eth0");
        assert_eq!(
            e.to_string(),
            "failed to add address 10.1.2.3/24 to eth0: File exists (os error 17)"
        );
        assert!(e.is_exists());
        assert!(!e.is_not_found());
        assert_eq!(e.errno(), Some(libc::EEXIST));
    }

    #[test]
    fn contexts_nest_outer_first() {
        let e = Error::kernel("failed to find link \"lo\"", libc::ENODEV)
            .context("in netns /run/netns/x");
        assert_eq!(
            e.to_string(),
            "in netns /run/netns/x: failed to find link \"lo\": No such device (os error 19)"
        );
        assert!(e.is_not_found());
    }

    #[test]
    fn ext_ack_is_shown() {
        let e = Error::Kernel {
            context: "failed to create link x".into(),
            errno: libc::EINVAL,
            ext_ack: Some("bad mtu".into()),
        };
        assert_eq!(
            e.to_string(),
            "failed to create link x: Invalid argument (os error 22) (bad mtu)"
        );
        assert_eq!(e.ext_ack(), Some("bad mtu"));
    }

    #[test]
    fn conflict_message_matches_reference_wording() {
        let e = Error::conflict(
            "failed to create bridge \"cni0\"",
            "\"cni0\" already exists but is not a bridge",
        );
        assert_eq!(
            e.to_string(),
            "failed to create bridge \"cni0\": \"cni0\" already exists but is not a bridge"
        );
        assert!(e.is_conflict() && !e.is_exists());
    }

    #[test]
    fn netns_not_found_is_not_found() {
        let e = Error::NetnsNotFound {
            context: "failed to open netns".into(),
            path: "/run/netns/gone".into(),
        };
        assert!(e.is_not_found() && e.is_netns_not_found());
        assert_eq!(
            e.to_string(),
            "failed to open netns: network namespace \"/run/netns/gone\" does not exist"
        );
    }
}
