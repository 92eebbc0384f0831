//! The plugin's errors and their CNI codes.

use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    /// The configuration is not JSON of the expected shape.
    #[error("failed to parse network configuration: {0}")]
    Decode(#[source] libcni::gojson::Error),
    #[error("Cannot specify externalSetMarkChain and markMasqBit")]
    MarkChainAndBit,
    #[error("MasqMarkBit must be between 0 and 31")]
    MarkBitRange,
    #[error("invalid externalSetMarkChain {0:?}")]
    MarkChainName(String),
    /// A condition token that could end an nft statement or start a comment.
    #[error("invalid token {token:?} in {field}: contains ; # NUL or a line break")]
    ConditionToken { token: String, field: &'static str },
    /// Conditions nft would refuse.
    #[error("{field}: {detail}")]
    Conditions { field: &'static str, detail: String },
    #[error("unrecognized backend {0:?}")]
    UnknownBackend(String),
    #[error("markMasqBit is supported only for iptables backend")]
    MarkBitWithNftables,
    /// Options of the other backend while a backend is configured.
    #[error(
        "{backend} backend was requested but configuration contains {other}-specific options [{}]",
        .options.join(" ")
    )]
    OtherBackendOptions {
        backend: &'static str,
        other: &'static str,
        options: Vec<&'static str>,
    },
    #[error("Invalid {which} port number: {value}")]
    PortNumber { which: &'static str, value: i64 },
    #[error(
        "invalid protocol {protocol:?} in port mapping {host_port}: expected tcp, udp or sctp"
    )]
    Protocol { protocol: String, host_port: u16 },
    #[error("invalid hostIP {host_ip:?} in port mapping {host_port}")]
    HostIp { host_ip: String, host_port: u16 },
    /// ADD's and DEL's wording of a configuration error.
    #[error("failed to parse config: {0}")]
    ParseConfig(#[source] Box<PortmapError>),
    /// ADD without a prevResult.
    #[error("must be called as chained plugin")]
    NotChained,
    /// CHECK without a prevResult.
    #[error("Required prevResult missing")]
    PrevResultMissing,
    #[error("neither iptables nor nftables is usable: install the iptables or nftables package")]
    NoBackend,
    #[error("neither iptables nor ip6tables usable")]
    NoIptables,
    /// CHECK: an iptables chain is missing.
    #[error("chain {chain} not found in {tool} table {table}")]
    ChainMissing {
        chain: String,
        tool: &'static str,
        table: &'static str,
    },
    /// CHECK: an iptables rule is missing.
    #[error("rule `{}` not found in {tool} chain {table}/{chain}", .rule.join(" "))]
    RuleMissing {
        rule: Vec<String>,
        tool: &'static str,
        table: &'static str,
        chain: String,
    },
    /// An nftables transaction failed (`what` names the operation and the container).
    #[error("{what}: {source}")]
    Commit {
        what: String,
        #[source]
        source: netkit::netfilter::Error,
    },
    /// CHECK: a base chain of the nftables backend has no rule.
    #[error("nftables chain {family} {table} {chain} is missing or empty")]
    NftChainMissing {
        family: &'static str,
        table: &'static str,
        chain: &'static str,
    },
    /// CHECK: the attachment has another number of nftables rules than ADD makes.
    #[error(
        "found {have} nftables port mapping rules for container {container_id} on network {network} ({ifname}) in {family} {table}, expected {want}"
    )]
    NftRuleCount {
        have: usize,
        want: usize,
        container_id: String,
        network: String,
        ifname: String,
        family: &'static str,
        table: &'static str,
    },
    #[error("unable to enable route_localnet: {0}")]
    RouteLocalnet(#[source] netkit::Error),
    /// GC could not remove some stale chains.
    #[error("portmap GC: {}", .0.join("; "))]
    Gc(Vec<String>),
    /// STATUS: no backend the configuration allows is available (code 50).
    #[error("portmap: neither the kernel's nf_tables nor the iptables tool (as the backend needs) is available")]
    BackendUnavailable,
    /// STATUS: conditions need the nft tool, which is missing (code 50).
    #[error("portmap: the nft tool is needed for conditions in nft syntax this plugin does not encode itself, and it is not installed")]
    NftToolMissing,
    /// A netfilter operation failed; the error names the operation and the object.
    #[error(transparent)]
    Netfilter(#[from] netkit::netfilter::Error),
    /// A kernel operation failed; the error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// An error libcni's skeleton helpers returned (prevResult, valid attachments), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<PortmapError> for CniError {
    fn from(e: PortmapError) -> CniError {
        match e {
            PortmapError::Delegated(e) => e,
            PortmapError::BackendUnavailable | PortmapError::NftToolMissing => {
                CniError::not_available(e.to_string())
            }
            // Plain Go errors upstream (code 999), configuration errors included.
            other => CniError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: PortmapError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(PortmapError::ParseConfig(Box::new(
                PortmapError::PortNumber {
                    which: "container",
                    value: 0
                }
            ))),
            (
                999,
                "failed to parse config: Invalid container port number: 0".into()
            )
        );
        assert_eq!(
            cni(PortmapError::OtherBackendOptions {
                backend: "nftables",
                other: "iptables",
                options: vec!["externalSetMarkChain", "conditionsV4"],
            }),
            (999, "nftables backend was requested but configuration contains iptables-specific options [externalSetMarkChain conditionsV4]".into())
        );
        assert_eq!(
            cni(PortmapError::RuleMissing {
                rule: vec!["-j".into(), "CNI-DN-1".into()],
                tool: "iptables",
                table: "nat",
                chain: "CNI-HOSTPORT-DNAT".into()
            }),
            (
                999,
                "rule `-j CNI-DN-1` not found in iptables chain nat/CNI-HOSTPORT-DNAT".into()
            )
        );
        assert_eq!(
            cni(PortmapError::Gc(vec!["a".into(), "b".into()])),
            (999, "portmap GC: a; b".into())
        );
        assert_eq!(cni(PortmapError::BackendUnavailable).0, 50);
        assert_eq!(cni(PortmapError::NftToolMissing).0, 50);
        assert_eq!(
            cni(PortmapError::RouteLocalnet(netkit::Error::invalid(
                "failed to find link 7",
                "gone"
            ))),
            (
                999,
                "unable to enable route_localnet: failed to find link 7: gone".into()
            )
        );
        assert_eq!(
            cni(PortmapError::Delegated(CniError::decode("bad prevResult"))),
            (6, "bad prevResult".into())
        );
    }
}
