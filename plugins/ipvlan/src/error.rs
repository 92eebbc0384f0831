//! The plugin's errors and their CNI codes.

use libcni::error::CniError;
use netkit::packet_route::link::IpVlanMode;

#[derive(Debug, thiserror::Error)]
pub enum IpvlanError {
    /// `mode` is not l2, l3 or l3s (code 999, a plain error upstream).
    #[error("unknown ipvlan mode: {mode:?}")]
    UnknownMode { mode: String },
    #[error("unknown ipvlan flag: {flag:?} (bridge, private or vepa)")]
    UnknownFlag { flag: String },
    /// Chained without `master`, and prevResult has not exactly one named interface.
    #[error("chained master failure. PrevResult lacks a single named interface")]
    ChainedMaster,
    /// A kernel operation failed; the netkit error says what and on which object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    // CHECK: what differs from the configuration.
    #[error("Container interface {name} is not on master {master:?}")]
    NotOnMaster { name: String, master: String },
    #[error("Container interface {name} has no master")]
    NoMaster { name: String },
    #[error("failed to lookup master of {name} (ifindex {index}): {source}")]
    MasterLookup {
        name: String,
        index: u32,
        source: netkit::Error,
    },
    #[error("Error: Container interface {name} not of type ipvlan")]
    NotIpvlan { name: String },
    #[error("Container IPVlan mode {found} does not match expected value: {expected}")]
    ModeMismatch {
        found: IpVlanMode,
        expected: IpVlanMode,
    },
    #[error("Container IPVlan flag {found} does not match expected value: {expected}")]
    FlagMismatch {
        found: &'static str,
        expected: &'static str,
    },
    /// What attach, libcni or the IPAM plugin returned, passed on with its code.
    #[error("{}", .0.msg)]
    Delegated(#[from] CniError),
}

impl From<IpvlanError> for CniError {
    fn from(e: IpvlanError) -> CniError {
        match e {
            IpvlanError::Delegated(e) => e,
            // Plain errors upstream, which its skeleton reports with code 999.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_texts() {
        let cases: Vec<(IpvlanError, u32, &str)> = vec![
            (
                IpvlanError::UnknownMode {
                    mode: "bogus".into(),
                },
                999,
                "unknown ipvlan mode: \"bogus\"",
            ),
            (
                IpvlanError::UnknownFlag { flag: "l2".into() },
                999,
                "unknown ipvlan flag: \"l2\" (bridge, private or vepa)",
            ),
            (
                IpvlanError::ChainedMaster,
                999,
                "chained master failure. PrevResult lacks a single named interface",
            ),
            (
                IpvlanError::NotOnMaster {
                    name: "net1".into(),
                    master: "eth0".into(),
                },
                999,
                "Container interface net1 is not on master \"eth0\"",
            ),
            (
                IpvlanError::MasterLookup {
                    name: "net1".into(),
                    index: 7,
                    source: netkit::Error::kernel("failed to find link with index 7", 19),
                },
                999,
                "failed to lookup master of net1 (ifindex 7): failed to find link with index 7: No such device (os error 19)",
            ),
            (
                IpvlanError::ModeMismatch {
                    found: IpVlanMode::L2,
                    expected: IpVlanMode::L3S,
                },
                999,
                "Container IPVlan mode l2 does not match expected value: l3s",
            ),
            (
                IpvlanError::Delegated(CniError::invalid_config("bad")),
                7,
                "bad",
            ),
        ];
        for (e, code, text) in cases {
            let c = CniError::from(e);
            assert_eq!((c.code, c.msg.as_str()), (code, text));
        }
    }
}
