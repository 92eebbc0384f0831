//! flanneld's `--ip-masq`, kept by the agent like the overlay: the desired rule set is computed
//! from the network config and the lease, compared with what the kernel holds, and rewritten
//! in one atomic nf_tables transaction when they differ (so a restart never duplicates it and
//! hand-made drift is repaired at the next pass). A family the config no longer calls for
//! (no `--ip-masq`, no IPv6, the config gone from etcd) loses its table.
//!
//! The rules, per family (cluster = the Network, pods = this node's subnet), are flanneld's:
//!
//! ```text
//! meta mark & 0x4000 == 0x4000          return   kube-proxy marked it: kube-proxy masquerades
//! saddr <pods>     daddr <cluster>      return   pod to pod: no NAT
//! saddr <cluster>  daddr <pods>         return
//! saddr != <cluster> daddr <pods>       return   from outside into our pods: no NAT
//! saddr <cluster>  daddr != <multicast> masquerade fully-random   pods leaving the cluster
//! saddr != <cluster> daddr <cluster>    masquerade fully-random   the host into the overlay
//! ```
//!
//! in flanneld's own nftables objects: table `ip flannel-ipv4` / `ip6 flannel-ipv6`, chain
//! `postrtg` (type nat, hook postrouting, priority srcnat). Taking flanneld's names means a
//! node moved off flanneld (nftables mode) ends up with one rule set, ours replacing its in
//! place, rather than two that disagree once the subnet changes. The kube-proxy mark is tested
//! as iptables-mode flanneld tests it (`--mark 0x4000/0x4000`: the bit set), not as its
//! nftables mode does (the whole mark equal to 0x4000), since kube-proxy ORs the bit in.
//!
//! Over netlink (netkit's nf_tables layer): no `nft` or `iptables` process is run.

use ipnetwork::IpNetwork;
use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::{self as nft, Batch, Chain, CmpOp, Hook, Rule, Table, Verdict};

use crate::error::AgentError;

pub const TABLE_V4: &str = "flannel-ipv4";
pub const TABLE_V6: &str = "flannel-ipv6";
pub const CHAIN: &str = "postrtg";
const TABLE_COMMENT: &str = "ferrocni-agent: flannel --ip-masq";
const CHAIN_COMMENT: &str = "pod traffic leaving the cluster network is masqueraded";
/// `srcnat`.
const PRIORITY: i32 = 100;
/// kube-proxy's masquerade mark bit.
const KUBE_PROXY_MARK: u32 = 0x4000;

/// The masquerade of one family: the cluster network and this node's pod subnet in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MasqFamily {
    pub network: IpNetwork,
    pub pods: IpNetwork,
}

/// What one pass did to a family's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Written,
    Removed,
    /// Not wanted and not there.
    Absent,
}

fn table_of(v6: bool) -> (nft::Family, &'static str) {
    if v6 {
        (nft::Family::Ip6, TABLE_V6)
    } else {
        (nft::Family::Ip, TABLE_V4)
    }
}

fn multicast(v6: bool) -> IpNetwork {
    let text = if v6 { "ff00::/8" } else { "224.0.0.0/4" };
    text.parse()
        .unwrap_or_else(|_| unreachable!("{text} is a CIDR"))
}

fn chain(v6: bool) -> Chain {
    let (family, table) = table_of(v6);
    Chain::base(
        family,
        table,
        CHAIN,
        "nat",
        Hook::Postrouting,
        PRIORITY,
        None,
    )
    .with_comment(CHAIN_COMMENT)
}

/// flanneld's rules for one family, in order.
pub fn rules(m: &MasqFamily) -> Vec<Rule> {
    let v6 = m.network.is_ipv6();
    let (family, table) = table_of(v6);
    let (cluster, pods) = (m.network, m.pods);
    let src = |op, net| build::addr(Addr::Saddr, op, net);
    let dst = |op, net| build::addr(Addr::Daddr, op, net);
    let ret = || build::verdict(Verdict::Return);
    let masq = build::masquerade_fully_random;
    [
        (
            build::all([build::mark_has(KUBE_PROXY_MARK), ret()]),
            "masq: kube-proxy marked, it masquerades",
        ),
        (
            build::all([src(CmpOp::Eq, pods), dst(CmpOp::Eq, cluster), ret()]),
            "masq: pod to cluster, no NAT",
        ),
        (
            build::all([src(CmpOp::Eq, cluster), dst(CmpOp::Eq, pods), ret()]),
            "masq: cluster to pod, no NAT",
        ),
        (
            build::all([src(CmpOp::Neq, cluster), dst(CmpOp::Eq, pods), ret()]),
            "masq: outside to pod, no NAT",
        ),
        (
            build::all([
                src(CmpOp::Eq, cluster),
                dst(CmpOp::Neq, multicast(v6)),
                masq(),
            ]),
            "masq: cluster to outside (not multicast)",
        ),
        (
            build::all([src(CmpOp::Neq, cluster), dst(CmpOp::Eq, cluster), masq()]),
            "masq: host to cluster",
        ),
    ]
    .into_iter()
    .map(|(exprs, comment)| Rule::new(family, table, CHAIN, exprs).with_comment(comment))
    .collect()
}

/// Whether the kernel's chain and rules are exactly the wanted ones.
fn matches(have: Option<(Chain, Vec<Rule>)>, want_chain: &Chain, want: &[Rule]) -> bool {
    let Some((chain, rules)) = have else {
        return false;
    };
    let base = |c: &Chain| {
        c.base
            .as_ref()
            .map(|b| (b.kind.clone(), b.hook, b.priority))
    };
    base(&chain) == base(want_chain)
        && rules.len() == want.len()
        && rules
            .iter()
            .zip(want)
            .all(|(h, w)| h.exprs == w.exprs && h.userdata == w.userdata)
}

fn nft_error(e: netkit::netfilter::Error) -> AgentError {
    AgentError::Masquerade(e.to_string())
}

/// Makes the kernel hold exactly `want` (at most one entry per family), in one transaction.
/// Returns what happened to the IPv4 and the IPv6 table.
pub fn reconcile(want: &[MasqFamily]) -> Result<[Change; 2], AgentError> {
    // Without --ip-masq a kernel without nf_tables is no error: there is nothing to remove.
    if want.is_empty() && !netkit::netfilter::host::has_nf_tables() {
        return Ok([Change::Absent; 2]);
    }
    let mut sock = nft::Socket::new().map_err(nft_error)?;
    let mut batch = Batch::new();
    let mut changes = [Change::Absent; 2];
    for (slot, v6) in [false, true].into_iter().enumerate() {
        let (family, table) = table_of(v6);
        let wanted = want.iter().find(|m| m.network.is_ipv6() == v6);
        let Some(m) = wanted else {
            if sock.table_exists(family, table).map_err(nft_error)? {
                batch.delete_table(family, table);
                changes[slot] = Change::Removed;
            }
            continue;
        };
        let want_chain = chain(v6);
        let want_rules = rules(m);
        let have = match sock.chain(family, table, CHAIN).map_err(nft_error)? {
            Some(c) => Some((c, sock.rules(family, table, CHAIN).map_err(nft_error)?)),
            None => None,
        };
        if matches(have, &want_chain, &want_rules) {
            changes[slot] = Change::Unchanged;
            continue;
        }
        // The table is ours: replace it whole (adding it first so the delete cannot fail).
        let t = Table::new(family, table).with_comment(TABLE_COMMENT);
        batch
            .add_table(&t)
            .delete_table(family, table)
            .add_table(&t);
        batch.add_chain(&want_chain);
        for r in &want_rules {
            batch.add_rule(r);
        }
        changes[slot] = Change::Written;
    }
    sock.commit(&batch).map_err(nft_error)?;
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fam(net: &str, pods: &str) -> MasqFamily {
        MasqFamily {
            network: net.parse().unwrap(),
            pods: pods.parse().unwrap(),
        }
    }

    #[test]
    fn six_rules_per_family_in_flannels_order() {
        let r = rules(&fam("10.244.0.0/16", "10.244.3.0/24"));
        assert_eq!(r.len(), 6);
        assert!(r.iter().all(|r| r.table == TABLE_V4 && r.chain == CHAIN));
        let verdicts: Vec<bool> = r
            .iter()
            .map(|r| r.verdict() == Some(&Verdict::Return))
            .collect();
        assert_eq!(verdicts, [true, true, true, true, false, false]);
        assert_eq!(
            r[4].exprs.last(),
            Some(&nft::Expr::MasqFlags(
                nft::expr::NAT_RANGE_PROTO_RANDOM_FULLY
            ))
        );
        let r6 = rules(&fam("fd00:10:244::/56", "fd00:10:244:3::/64"));
        assert!(r6
            .iter()
            .all(|r| r.family == nft::Family::Ip6 && r.table == TABLE_V6));
        assert_ne!(r6[4].exprs, r[4].exprs);
    }

    #[test]
    fn comparison_sees_every_difference() {
        let m = fam("10.244.0.0/16", "10.244.3.0/24");
        let c = chain(false);
        let want = rules(&m);
        assert!(matches(Some((c.clone(), want.clone())), &c, &want));
        assert!(!matches(None, &c, &want));
        let mut short = want.clone();
        short.pop();
        assert!(!matches(Some((c.clone(), short)), &c, &want));
        let other = rules(&fam("10.244.0.0/16", "10.244.4.0/24"));
        assert!(!matches(Some((c.clone(), other)), &c, &want));
        let mut wrong_hook = c.clone();
        wrong_hook.base.as_mut().unwrap().priority = 0;
        assert!(!matches(Some((wrong_hook, want.clone())), &c, &want));
    }
}
