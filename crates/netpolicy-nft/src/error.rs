//! What can fail while writing a plan into the kernel. (The netkit error is boxed: it is
//! large, and these are returned on every sync.)

use netkit::netfilter::exec;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel refused the transaction, or the socket failed; nothing of it was applied.
    #[error("failed to write the network policy table `inet {table}` ({what}): {source}")]
    Commit {
        table: &'static str,
        /// Full write or update.
        what: &'static str,
        #[source]
        source: Box<exec::Error>,
    },
    /// Deleting the table failed.
    #[error("failed to delete the network policy table `inet {table}`: {source}")]
    Remove {
        table: &'static str,
        #[source]
        source: Box<exec::Error>,
    },
}
