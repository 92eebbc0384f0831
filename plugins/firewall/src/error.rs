//! The plugin's errors and their CNI codes.

use std::net::IpAddr;
use std::path::PathBuf;

use libcni::CniError;

#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    /// The network configuration is not JSON of the expected shape.
    #[error("failed to load netconf: {0}")]
    Load(#[source] libcni::gojson::Error),
    #[error("unknown firewall backend {0:?}: expected \"iptables\" or \"firewalld\"")]
    UnknownBackend(String),
    #[error("invalid iptablesAdminChainName {0:?}")]
    AdminChain(String),
    #[error("invalid firewalldZone {0:?}")]
    Zone(String),
    #[error("unknown ingress policy: {0:?}")]
    IngressPolicy(String),
    /// ADD without a prevResult.
    #[error("missing prevResult from earlier plugin")]
    NotChained,
    /// CHECK without a prevResult.
    #[error("Required prevResult missing")]
    PrevResultMissing,
    /// firewall-cmd refused to bind an address to the zone.
    #[error("failed to add source {ip} to firewalld zone {zone}: {stderr}")]
    FirewalldAdd {
        ip: IpAddr,
        zone: String,
        stderr: String,
    },
    /// CHECK: an address is not a source of the zone.
    #[error("source {ip} is not bound to firewalld zone {zone}")]
    FirewalldNotBound { ip: IpAddr, zone: String },
    /// The ingress policy needs the bridge, which prevResult does not name.
    #[error(
        "interface needs to be set for ingress policy {policy:?}, make sure to chain \"firewall\" plugin with \"bridge\""
    )]
    NoBridge { policy: &'static str },
    #[error("bad bridge name in prevResult: {0}")]
    BridgeName(#[source] netkit::Error),
    #[error("failed to set up the ingress policy chains in {family} {table}: {source}")]
    IngressSetup {
        family: &'static str,
        table: &'static str,
        #[source]
        source: Box<netkit::netfilter::Error>,
    },
    /// CHECK: an ingress policy rule is missing (nf_tables).
    #[error("an ingress policy rule is missing from {family} {table}/{chain}")]
    IngressRuleMissing {
        family: &'static str,
        table: &'static str,
        chain: String,
    },
    /// An iptables tool the backend needs is not installed.
    #[error(
        "could not initialize the firewall iptables backend: the {tool:?} tool is not installed"
    )]
    ToolMissing { tool: &'static str },
    /// CHECK: a chain is missing (iptables tool).
    #[error("{tool} chain {table}/{chain} does not exist")]
    ToolChainMissing {
        tool: &'static str,
        table: &'static str,
        chain: String,
    },
    /// CHECK: a rule is missing (iptables tool).
    #[error("{tool} rule `{}` not found in {table}/{chain}", .rule.join(" "))]
    ToolRuleMissing {
        tool: &'static str,
        rule: Vec<String>,
        table: &'static str,
        chain: String,
    },
    #[error("failed to add the container's firewall rules: {0}")]
    AddRules(#[source] Box<netkit::netfilter::Error>),
    #[error(
        "failed to delete the container's firewall rules: kept racing with concurrent changes"
    )]
    DeleteRace,
    /// CHECK: a chain is missing (nf_tables).
    #[error("iptables chain {family} {table}/{chain} does not exist")]
    NftChainMissing {
        family: &'static str,
        table: &'static str,
        chain: String,
    },
    /// CHECK: an address rule or jump is missing (nf_tables).
    #[error("a firewall rule is missing from {family} {table}/{chain}")]
    NftRuleMissing {
        family: &'static str,
        table: &'static str,
        chain: String,
    },
    #[error("firewall-cmd is not installed")]
    FirewalldMissing,
    /// STATUS: what the backend needs is missing (code 50).
    #[error(transparent)]
    Unavailable(Box<FirewallError>),
    #[error("failed to encode firewall record: {0}")]
    EncodeRecord(#[source] serde_json::Error),
    /// Code 5.
    #[error("failed to write firewall record {}: {source}", .path.display())]
    WriteRecord {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("failed to remove firewall record {}: {source}", .path.display())]
    RemoveRecord {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Code 5.
    #[error("failed to list firewall records in {}: {source}", .dir.display())]
    ListRecords {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// GC could not remove some records (code 5).
    #[error("{}", .0.join("; "))]
    Gc(Vec<String>),
    /// A netfilter operation failed; the error names the operation and the object (boxed:
    /// it is much larger than the other variants).
    #[error(transparent)]
    Netfilter(Box<netkit::netfilter::Error>),
    /// A kernel operation failed; the error names the operation and the object.
    #[error(transparent)]
    Kernel(#[from] netkit::Error),
    /// An error libcni's skeleton helpers returned (prevResult, valid attachments), code kept.
    #[error(transparent)]
    Delegated(#[from] CniError),
}

impl From<netkit::netfilter::Error> for FirewallError {
    fn from(e: netkit::netfilter::Error) -> FirewallError {
        FirewallError::Netfilter(Box::new(e))
    }
}

impl From<FirewallError> for CniError {
    fn from(e: FirewallError) -> CniError {
        let msg = e.to_string();
        match e {
            FirewallError::Delegated(e) => e,
            FirewallError::Unavailable(_) => CniError::not_available(msg),
            // Our own state files.
            FirewallError::WriteRecord { .. }
            | FirewallError::RemoveRecord { .. }
            | FirewallError::ListRecords { .. }
            | FirewallError::Gc(_) => CniError::io(msg),
            // Plain Go errors upstream (code 999), configuration errors included.
            FirewallError::Load(_)
            | FirewallError::UnknownBackend(_)
            | FirewallError::AdminChain(_)
            | FirewallError::Zone(_)
            | FirewallError::IngressPolicy(_)
            | FirewallError::NotChained
            | FirewallError::PrevResultMissing
            | FirewallError::FirewalldAdd { .. }
            | FirewallError::FirewalldNotBound { .. }
            | FirewallError::NoBridge { .. }
            | FirewallError::BridgeName(_)
            | FirewallError::IngressSetup { .. }
            | FirewallError::IngressRuleMissing { .. }
            | FirewallError::ToolMissing { .. }
            | FirewallError::ToolChainMissing { .. }
            | FirewallError::ToolRuleMissing { .. }
            | FirewallError::AddRules(_)
            | FirewallError::DeleteRace
            | FirewallError::NftChainMissing { .. }
            | FirewallError::NftRuleMissing { .. }
            | FirewallError::FirewalldMissing
            | FirewallError::EncodeRecord(_)
            | FirewallError::Netfilter(_)
            | FirewallError::Kernel(_) => CniError::internal(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cni(e: FirewallError) -> (u32, String) {
        let e = CniError::from(e);
        (e.code, e.msg)
    }

    #[test]
    fn codes_and_texts() {
        assert_eq!(
            cni(FirewallError::UnknownBackend("nft".into())),
            (
                999,
                r#"unknown firewall backend "nft": expected "iptables" or "firewalld""#.into()
            )
        );
        assert_eq!(
            cni(FirewallError::ToolRuleMissing {
                tool: "iptables",
                rule: vec!["-j".into(), "CNI-ADMIN".into()],
                table: "filter",
                chain: "CNI-FORWARD".into()
            }),
            (
                999,
                "iptables rule `-j CNI-ADMIN` not found in filter/CNI-FORWARD".into()
            )
        );
        assert_eq!(
            cni(FirewallError::NoBridge {
                policy: "isolated"
            }),
            (999, r#"interface needs to be set for ingress policy "isolated", make sure to chain "firewall" plugin with "bridge""#.into())
        );
        assert_eq!(
            cni(FirewallError::Unavailable(Box::new(
                FirewallError::ToolMissing { tool: "iptables" }
            ))),
            (50, r#"could not initialize the firewall iptables backend: the "iptables" tool is not installed"#.into())
        );
        assert_eq!(
            cni(FirewallError::Unavailable(Box::new(
                FirewallError::FirewalldMissing
            )))
            .0,
            50
        );
        let io = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let (code, msg) = cni(FirewallError::RemoveRecord {
            path: "/d/n/c:eth0".into(),
            source: io(),
        });
        assert_eq!(code, 5);
        assert!(
            msg.starts_with("failed to remove firewall record /d/n/c:eth0: "),
            "{msg}"
        );
        assert_eq!(
            cni(FirewallError::Gc(vec!["a".into(), "b".into()])),
            (5, "a; b".into())
        );
        assert_eq!(
            cni(FirewallError::ListRecords {
                dir: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(FirewallError::WriteRecord {
                path: "/d".into(),
                source: io()
            })
            .0,
            5
        );
        assert_eq!(
            cni(FirewallError::Delegated(CniError::decode("bad prevResult"))),
            (6, "bad prevResult".into())
        );
    }
}
