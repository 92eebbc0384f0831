//! `ingressPolicy` same-bridge / isolated: per-bridge isolation chains (filter table, both
//! families), shared by every network and never removed:
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

use libcni::result::CniResult;
use libcni::CniError;
use netkit::netfilter::iptables::{Family, Iptables};

use crate::config::IngressPolicy;

const FILTER: &str = "filter";
const FORWARD: &str = "FORWARD";
pub const STAGE1: &str = "CNI-ISOLATION-STAGE-1";
pub const STAGE2: &str = "CNI-ISOLATION-STAGE-2";
const SAME_BRIDGE_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: same-bridge)";
const ISOLATED_COMMENT: &str = "CNI firewall plugin rules (ingressPolicy: isolated)";

fn nf(e: netkit::netfilter::Error) -> CniError {
    CniError::internal(e.to_string())
}

/// `iface_args` first, then the comment match, then `target`: the order `iptables -S` prints
/// (interfaces belong to the rule header), so listed rules can be compared as text.
fn with_comment(comment: &str, iface_args: &[&str], target: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = iface_args.iter().map(|s| s.to_string()).collect();
    v.extend(
        ["-m", "comment", "--comment", comment]
            .iter()
            .map(|s| s.to_string()),
    );
    v.extend(target.iter().map(|s| s.to_string()));
    v
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The bridge is the first interface of the bridge plugin's result.
fn bridge_name(result: &CniResult, policy: &str) -> Result<String, CniError> {
    let name = result
        .interfaces
        .first()
        .map(|i| i.name.clone())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(CniError::invalid_config(format!(
            "interface needs to be set for ingress policy {policy:?}, make sure to chain \"firewall\" plugin with \"bridge\""
        )));
    }
    netkit::link::validate_ifname(&name)
        .map_err(|e| CniError::invalid_config(format!("bad bridge name in prevResult: {e}")))?;
    Ok(name)
}

/// (chain, position (None = append), rule) in the order they must be ensured.
pub fn rules_for(bridge: &str, isolated: bool) -> Vec<(&'static str, Option<u32>, Vec<String>)> {
    let mut rules = vec![
        (
            FORWARD,
            Some(1),
            with_comment(SAME_BRIDGE_COMMENT, &[], &["-j", STAGE1]),
        ),
        (
            STAGE1,
            Some(1),
            with_comment(
                SAME_BRIDGE_COMMENT,
                &["-i", bridge, "!", "-o", bridge],
                &["-j", STAGE2],
            ),
        ),
        (
            STAGE1,
            None,
            with_comment(SAME_BRIDGE_COMMENT, &[], &["-j", "RETURN"]),
        ),
        (
            STAGE2,
            Some(1),
            with_comment(SAME_BRIDGE_COMMENT, &["-o", bridge], &["-j", "DROP"]),
        ),
        (
            STAGE2,
            None,
            with_comment(SAME_BRIDGE_COMMENT, &[], &["-j", "RETURN"]),
        ),
    ];
    if isolated {
        rules.insert(
            1,
            (
                STAGE1,
                Some(1),
                with_comment(
                    ISOLATED_COMMENT,
                    &["-i", bridge, "-o", bridge],
                    &["-j", "DROP"],
                ),
            ),
        );
    }
    rules
}

fn setup_family(ipt: &Iptables, bridge: &str, isolated: bool) -> Result<(), CniError> {
    for chain in [STAGE1, STAGE2] {
        ipt.ensure_chain(FILTER, chain).map_err(nf)?;
    }
    for (chain, pos, rule) in rules_for(bridge, isolated) {
        match pos {
            Some(p) => ipt
                .insert_unique(FILTER, chain, p, &refs(&rule))
                .map_err(nf)?,
            None => {
                // RETURN must stay last: append only when missing.
                ipt.append_unique(FILTER, chain, &refs(&rule)).map_err(nf)?
            }
        }
    }
    Ok(())
}

/// ADD part of the ingress policy (nothing for `open`).
pub fn setup(policy: IngressPolicy, result: &CniResult) -> Result<(), CniError> {
    let (isolated, name) = match policy {
        IngressPolicy::Open => return Ok(()),
        IngressPolicy::SameBridge => (false, "same-bridge"),
        IngressPolicy::Isolated => (true, "isolated"),
    };
    let bridge = bridge_name(result, name)?;
    for family in [Family::V4, Family::V6] {
        setup_family(&Iptables::new(family), &bridge, isolated)?;
    }
    Ok(())
}

/// CHECK part of the ingress policy (the reference does not check it; we do).
pub fn check(policy: IngressPolicy, result: &CniResult) -> Result<(), CniError> {
    let (isolated, name) = match policy {
        IngressPolicy::Open => return Ok(()),
        IngressPolicy::SameBridge => (false, "same-bridge"),
        IngressPolicy::Isolated => (true, "isolated"),
    };
    let bridge = bridge_name(result, name)?;
    for family in [Family::V4, Family::V6] {
        let ipt = Iptables::new(family);
        for (chain, _, rule) in rules_for(&bridge, isolated) {
            if !ipt.exists(FILTER, chain, &refs(&rule)).map_err(nf)? {
                return Err(CniError::internal(format!(
                    "{} rule `{}` not found in {FILTER}/{chain}",
                    ipt.tool(),
                    rule.join(" ")
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_rules() {
        let r = rules_for("cni-podman1", false);
        assert_eq!(r.len(), 5);
        assert_eq!(
            r[1].2.join(" "),
            "-i cni-podman1 ! -o cni-podman1 -m comment --comment CNI firewall plugin rules (ingressPolicy: same-bridge) -j CNI-ISOLATION-STAGE-2"
        );
        let r = rules_for("br0", true);
        assert_eq!(r.len(), 6);
        assert!(r[1].2.join(" ").starts_with("-i br0 -o br0 -m comment"));
    }

    #[test]
    fn needs_a_bridge_interface() {
        let e = bridge_name(&CniResult::default(), "same-bridge").unwrap_err();
        assert!(
            e.msg.contains("chain \"firewall\" plugin with \"bridge\""),
            "{e}"
        );
    }
}
