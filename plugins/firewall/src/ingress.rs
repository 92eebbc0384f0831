//! `ingressPolicy` same-bridge / isolated: per-bridge isolation chains (filter table, in the
//! families the container has addresses in), shared by every network and never removed:
//!
//! ```text
//! FORWARD (pos 1):        -j CNI-ISOLATION-STAGE-1
//! CNI-ISOLATION-STAGE-1:  [isolated: -i BR -o BR -j DROP]
//!                         -i BR ! -o BR -j CNI-ISOLATION-STAGE-2   (one per bridge)
//!                         -j RETURN                                  (last)
//! CNI-ISOLATION-STAGE-2:  -o BR -j DROP                             (one per bridge)
//!                         -j RETURN                                  (last)
//! ```
//! Every rule carries the comment `CNI firewall plugin rules (ingressPolicy: same-bridge)`;
//! the intra-bridge drop of `isolated` says `isolated` instead.
//!
//! Where the host's iptables is iptables-nft the rules are written over netlink into
//! `ip filter` / `ip6 filter` exactly as iptables-nft writes them (one transaction per
//! family, duplicates from concurrent ADDs removed); elsewhere with the iptables tool
//! (exact-rule `-C`, `-I`, `-A`). One description, [`policy_rules`], feeds both.

use libcni::result::CniResult;
use netkit::netfilter::host;
use netkit::netfilter::iptables::{Family, Iptables};
use netkit::netfilter::nf_tables::{self as nft, xt, Socket, Verdict};
use netkit::netfilter::xt_rules::{self, Place, Wanted};

use crate::config::IngressPolicy;
use crate::error::FirewallError;

const FILTER: &str = "filter";
const FORWARD: &str = "FORWARD";
pub const STAGE1: &str = "CNI-ISOLATION-STAGE-1";
pub const STAGE2: &str = "CNI-ISOLATION-STAGE-2";
const SAME_BRIDGE_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";
const ISOLATED_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: isolated)";

/// What a policy rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Jump(&'static str),
    Drop,
    Return,
}

/// One rule of the policy: `[-i IN] [[!] -o OUT] -m comment --comment C -j TARGET`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    pub chain: &'static str,
    pub place: Place,
    pub input: Option<String>,
    /// The output interface and whether the match is negated (`! -o`).
    pub output: Option<(bool, String)>,
    pub comment: &'static str,
    pub target: Target,
}

impl PolicyRule {
    fn new(chain: &'static str, place: Place, target: Target) -> PolicyRule {
        PolicyRule {
            chain,
            place,
            input: None,
            output: None,
            comment: SAME_BRIDGE_COMMENT,
            target,
        }
    }

    fn input(mut self, name: &str) -> Self {
        self.input = Some(name.to_string());
        self
    }

    fn output(mut self, negated: bool, name: &str) -> Self {
        self.output = Some((negated, name.to_string()));
        self
    }

    /// The rule as `iptables` arguments, in the order `iptables -S` prints them (interfaces
    /// belong to the rule header, then the comment match, then the target), so listed rules
    /// can be compared as text.
    pub fn args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(i) = &self.input {
            v.extend(["-i".to_string(), i.clone()]);
        }
        if let Some((negated, o)) = &self.output {
            if *negated {
                v.push("!".into());
            }
            v.extend(["-o".to_string(), o.clone()]);
        }
        v.extend(["-m", "comment", "--comment", self.comment].map(String::from));
        let target = match self.target {
            Target::Jump(c) => c,
            Target::Drop => "DROP",
            Target::Return => "RETURN",
        };
        v.extend(["-j".to_string(), target.to_string()]);
        v
    }

    /// The rule as iptables-nft writes it in `family`'s filter table.
    pub fn nft_rule(&self, family: nft::Family) -> nft::Rule {
        let mut matches = Vec::new();
        if let Some(i) = &self.input {
            matches.extend(xt::iface(true, false, i));
        }
        if let Some((negated, o)) = &self.output {
            matches.extend(xt::iface(false, *negated, o));
        }
        matches.push(xt::comment_match(self.comment));
        let verdict = match self.target {
            Target::Jump(c) => Verdict::Jump(c.to_string()),
            Target::Drop => Verdict::Drop,
            Target::Return => Verdict::Return,
        };
        xt::rule(family, FILTER, self.chain, matches, verdict)
    }
}

/// The policy's rules for `bridge`, in the order they are ensured: each `First` rule is
/// inserted at the top of its chain unless it exists anywhere there, each `Last` rule
/// appended unless it exists (so RETURN stays last).
pub fn policy_rules(bridge: &str, isolated: bool) -> Vec<PolicyRule> {
    let mut rules = vec![PolicyRule::new(FORWARD, Place::First, Target::Jump(STAGE1))];
    if isolated {
        let mut drop = PolicyRule::new(STAGE1, Place::First, Target::Drop)
            .input(bridge)
            .output(false, bridge);
        drop.comment = ISOLATED_COMMENT;
        rules.push(drop);
    }
    rules.extend([
        PolicyRule::new(STAGE1, Place::First, Target::Jump(STAGE2))
            .input(bridge)
            .output(true, bridge),
        PolicyRule::new(STAGE1, Place::Last, Target::Return),
        PolicyRule::new(STAGE2, Place::First, Target::Drop).output(false, bridge),
        PolicyRule::new(STAGE2, Place::Last, Target::Return),
    ]);
    rules
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The bridge is the first interface of the bridge plugin's result.
fn bridge_name(result: &CniResult, policy: &'static str) -> Result<String, FirewallError> {
    let name = result
        .interfaces
        .first()
        .map(|i| i.name.clone())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(FirewallError::NoBridge { policy });
    }
    netkit::link::validate_ifname(&name).map_err(FirewallError::BridgeName)?;
    Ok(name)
}

/// The bridge and whether intra-bridge traffic is dropped too; `None` for `open`.
fn policy_of(
    policy: IngressPolicy,
    result: &CniResult,
) -> Result<Option<(String, bool)>, FirewallError> {
    let (isolated, name) = match policy {
        IngressPolicy::Open => return Ok(None),
        IngressPolicy::SameBridge => (false, "same-bridge"),
        IngressPolicy::Isolated => (true, "isolated"),
    };
    Ok(Some((bridge_name(result, name)?, isolated)))
}

/// The families of the container's addresses: like the reference, the policy is written
/// only where the container has an address.
fn families(result: &CniResult) -> Vec<Family> {
    let mut out = Vec::new();
    for ip in &result.ips {
        let f = Family::of(&ip.address.ip());
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

fn nft_family(family: Family) -> nft::Family {
    host::nft_family(family)
}

fn wanted(family: Family, rules: &[PolicyRule]) -> Vec<Wanted> {
    rules
        .iter()
        .map(|r| Wanted {
            rule: r.nft_rule(nft_family(family)),
            place: r.place,
        })
        .collect()
}

fn setup_over_netlink(family: Family, rules: &[PolicyRule]) -> Result<(), FirewallError> {
    let fam = nft_family(family);
    let mut sock = Socket::new()?;
    let create_forward = crate::netlink_backend::forward_missing(&mut sock, fam)?;
    let prelude = |b: &mut nft::Batch| {
        if create_forward {
            crate::netlink_backend::ensure_forward(b, fam);
        }
        for chain in [STAGE1, STAGE2] {
            xt::ensure_chain(b, fam, FILTER, chain);
        }
    };
    xt_rules::ensure(&mut sock, prelude, &wanted(family, rules)).map_err(|source| {
        FirewallError::IngressSetup {
            family: fam.name(),
            table: FILTER,
            source: Box::new(source),
        }
    })
}

fn setup_with_tool(ipt: &Iptables, rules: &[PolicyRule]) -> Result<(), FirewallError> {
    for chain in [STAGE1, STAGE2] {
        ipt.ensure_chain(FILTER, chain)?;
    }
    for rule in rules {
        let args = rule.args();
        match rule.place {
            Place::First => ipt.insert_unique(FILTER, rule.chain, 1, &refs(&args)),
            Place::Last => ipt.append_unique(FILTER, rule.chain, &refs(&args)),
        }?;
    }
    Ok(())
}

/// ADD part of the ingress policy (nothing for `open`).
pub fn setup(policy: IngressPolicy, result: &CniResult) -> Result<(), FirewallError> {
    let Some((bridge, isolated)) = policy_of(policy, result)? else {
        return Ok(());
    };
    let rules = policy_rules(&bridge, isolated);
    for family in families(result) {
        if host::iptables_uses_nf_tables(family, FILTER) {
            setup_over_netlink(family, &rules)?;
        } else {
            setup_with_tool(&Iptables::for_table(family, FILTER), &rules)?;
        }
    }
    Ok(())
}

/// CHECK part of the ingress policy (the reference does not check it; we do).
pub fn check(policy: IngressPolicy, result: &CniResult) -> Result<(), FirewallError> {
    let Some((bridge, isolated)) = policy_of(policy, result)? else {
        return Ok(());
    };
    let rules = policy_rules(&bridge, isolated);
    for family in families(result) {
        if host::iptables_uses_nf_tables(family, FILTER) {
            let fam = nft_family(family);
            let mut sock = Socket::new()?;
            if let Some(w) = xt_rules::missing(&mut sock, &wanted(family, &rules))?.first() {
                return Err(FirewallError::IngressRuleMissing {
                    family: fam.name(),
                    table: FILTER,
                    chain: w.rule.chain.clone(),
                });
            }
            continue;
        }
        let ipt = Iptables::for_table(family, FILTER);
        for rule in &rules {
            let args = rule.args();
            if !ipt.exists(FILTER, rule.chain, &refs(&args))? {
                return Err(FirewallError::ToolRuleMissing {
                    tool: ipt.tool(),
                    rule: args,
                    table: FILTER,
                    chain: rule.chain.to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use netkit::netfilter::nf_tables::capture::assert_same_messages;
    use netkit::netfilter::nf_tables::Batch;

    #[test]
    fn isolation_rules() {
        let r = policy_rules("cni-podman1", false);
        assert_eq!(r.len(), 5);
        assert_eq!(
            r[1].args().join(" "),
            "-i cni-podman1 ! -o cni-podman1 -m comment --comment CNI firewall plugin rules (ingressPolicy: same-bridge) -j CNI-ISOLATION-STAGE-2"
        );
        let r = policy_rules("br0", true);
        assert_eq!(r.len(), 6);
        assert!(r[1]
            .args()
            .join(" ")
            .starts_with("-i br0 -o br0 -m comment"));
    }

    #[test]
    fn needs_a_bridge_interface() {
        let e = bridge_name(&CniResult::default(), "same-bridge").unwrap_err();
        assert!(
            e.to_string()
                .contains("chain \"firewall\" plugin with \"bridge\""),
            "{e}"
        );
    }

    fn inserted(rule: &PolicyRule, family: nft::Family) -> Batch {
        let mut b = Batch::new();
        match rule.place {
            Place::First => b.insert_rule(&rule.nft_rule(family)),
            Place::Last => b.add_rule(&rule.nft_rule(family)),
        };
        b
    }

    /// Against iptables-nft 1.8.9's traffic for the reference's commands
    /// (`iptables -t filter -I CNI-ISOLATION-STAGE-1 1 -i br0 ! -o br0 -j CNI-ISOLATION-STAGE-2
    /// -m comment --comment ...` and so on), captured with strace in a scratch netns.
    #[test]
    fn rules_match_iptables_nft() {
        let r = policy_rules("br0", true);
        let ip = nft::Family::Ip;
        let mut forward = Batch::new();
        crate::netlink_backend::ensure_forward(&mut forward, ip);
        forward.insert_rule(&r[0].nft_rule(ip));
        // The table existed when iptables ran: it sent the builtin chain and the rule.
        let ours = netkit::netfilter::nf_tables::capture::batch_messages(&forward);
        let theirs = netkit::netfilter::nf_tables::capture::messages(
            &netkit::netfilter::nf_tables::capture::unhex(include_str!(
                "../testdata/ipt_iso_forward.hex"
            )),
        );
        assert_eq!(ours[1..], theirs[..]);
        for (rule, golden) in [
            (&r[1], include_str!("../testdata/ipt_iso_isolated.hex")),
            (&r[2], include_str!("../testdata/ipt_iso_stage1.hex")),
            (&r[3], include_str!("../testdata/ipt_iso_stage1_return.hex")),
            (&r[4], include_str!("../testdata/ipt_iso_stage2.hex")),
        ] {
            assert_same_messages(&inserted(rule, ip), golden);
        }
        assert_same_messages(
            &inserted(&r[4], nft::Family::Ip6),
            include_str!("../testdata/ip6t_iso_stage2.hex"),
        );
    }
}
