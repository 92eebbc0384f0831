//! netkit's errors as CNI errors (feature `cni`).
//!
//! The conversion lives here because of the orphan rule: `From<netkit::Error> for CniError`
//! may only be written in the crate of one of the two types, and libcni (the protocol) must
//! not know about the kernel. An optional dependency of netkit on libcni keeps netkit usable
//! without it, and gives every plugin the same mapping through `?` or `map_err(CniError::from)`.
//! The message is the netkit error's, which already names the operation and the object.

use libcni::error::CniError;

/// Every kernel failure is internal (code 999), bad input included (an invalid interface
/// name, a malformed sysctl key...): the reference plugins return these as plain Go errors,
/// which their skeleton reports as 999, and tools match on the code.
impl From<crate::Error> for CniError {
    fn from(e: crate::Error) -> CniError {
        CniError::internal(e.to_string())
    }
}

/// Every netfilter failure is internal (code 999), as in the reference plugins: its
/// `Invalid` also covers failures that are not the configuration's fault (a netns that
/// cannot be entered, a chain that cannot be named), so it is not an invalid-config error.
impl From<crate::netfilter::Error> for CniError {
    fn from(e: crate::netfilter::Error) -> CniError {
        CniError::internal(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_failure_is_internal() {
        let bad = crate::Error::invalid("failed to find link \"a/b\"", "invalid name");
        let e = CniError::from(bad);
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "failed to find link \"a/b\": invalid name")
        );
        let gone = crate::Error::kernel("failed to delete link eth0", libc::EBUSY);
        let e = CniError::from(gone);
        assert_eq!(
            (e.code, e.msg.as_str()),
            (
                999,
                "failed to delete link eth0: Device or resource busy (os error 16)"
            )
        );
        let nf = crate::netfilter::Error::Invalid {
            context: "failed to add chain X".into(),
            detail: "bad name".into(),
        };
        let e = CniError::from(nf);
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "failed to add chain X: bad name")
        );
    }
}
