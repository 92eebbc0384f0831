//! Which nftables port-mapping rules belong to one attachment (network, container ID,
//! interface name), so that ADD, CHECK and DEL of one attachment leave every other attachment
//! of the same container as it was.
//!
//! Our rules carry the attachment's comment (`naming::instance_comment`: a hash of the
//! network, then of `ifname:containerID`, then the names in clear) and are found by the hash
//! of `ifname:containerID`: a container holds one interface of a name, so that pair is the
//! attachment, and a DEL finds its rules even when it names another network than ADD did (the
//! network's hash serves GC, which sweeps one network). The reference's nftables rules, and those of earlier ferrocni versions, carry the
//! container ID alone: such a rule belongs to the attachment whose container address it names
//! (its DNAT target, its masquerade destination). Only when the addresses are unknown (a DEL
//! without prevResult) does a DEL take every such rule of the container, as the reference's
//! DEL would. The reference's own DEL matches comments equal to the container ID only, so it
//! does not find rules written here: after going back to the reference plugins, this
//! network's mappings go with a DEL of ours or with the `cni_hostport` table.

use std::net::IpAddr;

use netkit::netfilter::naming;
use netkit::netfilter::nf_tables::Rule;

/// One attachment's identity, as the rules' comments carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

impl Attachment<'_> {
    /// The comment every rule of this attachment carries.
    pub fn comment(&self) -> String {
        naming::instance_comment(self.network, self.ifname, self.container_id)
    }

    /// What this attachment's comments start with (fixed length, never cut).
    pub fn key(&self) -> String {
        naming::instance_hash(self.network, self.ifname, self.container_id)
    }

    /// Selects this attachment's rules; `addresses` are its container addresses when known.
    pub fn selector(&self, addresses: Option<&[IpAddr]>) -> Selector {
        Selector {
            ifname: self.ifname.to_string(),
            container_id: self.container_id.to_string(),
            addresses: addresses.map(<[IpAddr]>::to_vec),
        }
    }
}

/// Tells one attachment's rules from the rest of a chain.
#[derive(Debug, Clone)]
pub struct Selector {
    ifname: String,
    container_id: String,
    /// `None`: every container-ID-only rule of the container is taken.
    addresses: Option<Vec<IpAddr>>,
}

impl Selector {
    pub fn selects(&self, rule: &Rule) -> bool {
        let Some(comment) = rule.comment() else {
            return false;
        };
        if naming::names_attachment(&comment, &self.ifname, &self.container_id) {
            return true;
        }
        comment == self.container_id
            && self
                .addresses
                .as_ref()
                .is_none_or(|addrs| addrs.iter().any(|a| rule.names_address(*a)))
    }
}

/// The attachment keys of `network`'s rules (for GC): what every comment of the network's
/// attachments starts with.
pub fn network_key_prefix(network: &str) -> String {
    format!("{}-", naming::short_hash(network))
}

#[cfg(test)]
mod tests {
    use super::*;
    use netkit::netfilter::nf_tables::build::{self, Addr};
    use netkit::netfilter::nf_tables::{CmpOp, Family};

    fn dnat_rule(ip: &str, comment: &str) -> Rule {
        Rule::new(
            Family::Ip,
            "t",
            "hostports",
            build::all([
                build::l4proto_dport(6, 8080),
                build::dnat(ip.parse().unwrap(), 80),
            ]),
        )
        .with_comment(comment)
    }

    fn masq_rule(ip: &str, comment: &str) -> Rule {
        Rule::new(
            Family::Ip,
            "t",
            "masquerading",
            build::all([
                build::host(Addr::Saddr, CmpOp::Eq, "127.0.0.1".parse().unwrap()),
                build::host(Addr::Daddr, CmpOp::Eq, ip.parse().unwrap()),
                build::masquerade(),
            ]),
        )
        .with_comment(comment)
    }

    const A: Attachment = Attachment {
        network: "n1",
        container_id: "cid",
        ifname: "eth0",
    };
    const B: Attachment = Attachment {
        network: "n2",
        container_id: "cid",
        ifname: "eth1",
    };

    #[test]
    fn own_rules_by_attachment() {
        let a = dnat_rule("10.1.0.2", &A.comment());
        let b = dnat_rule("10.2.0.2", &B.comment());
        let sel = A.selector(None);
        assert!(sel.selects(&a));
        assert!(!sel.selects(&b));
        assert!(B.selector(Some(&[])).selects(&b));
        // Same network and container, another interface: another attachment.
        let c = Attachment {
            ifname: "eth2",
            ..A.clone()
        };
        assert!(!c.selector(None).selects(&a));
        // Same container and interface, another network (a DEL naming a renamed network):
        // the same attachment.
        let renamed = Attachment {
            network: "n1-renamed",
            ..A.clone()
        };
        assert!(renamed.selector(None).selects(&a));
        assert!(A.comment().starts_with(&network_key_prefix("n1")));
        assert!(!B.comment().starts_with(&network_key_prefix("n1")));
    }

    #[test]
    fn container_id_rules_by_address() {
        let dnat = dnat_rule("10.1.0.2", "cid");
        let masq = masq_rule("10.1.0.2", "cid");
        let other = dnat_rule("10.2.0.2", "cid");
        let a: Vec<IpAddr> = vec!["10.1.0.2".parse().unwrap()];
        let sel = A.selector(Some(&a));
        assert!(sel.selects(&dnat) && sel.selects(&masq));
        assert!(!sel.selects(&other));
        // Unknown addresses: all of the container's, as the reference's DEL.
        assert!(A.selector(None).selects(&other));
        // Another container's rules never.
        assert!(!A.selector(None).selects(&dnat_rule("10.1.0.2", "cid2")));
        assert!(!A.selector(None).selects(&dnat_rule("10.1.0.2", "")));
        let v6: Vec<IpAddr> = vec!["fd00::2".parse().unwrap()];
        assert!(A.selector(Some(&v6)).selects(&dnat_rule("fd00::2", "cid")));
    }
}
