//! The iptables backend (filter table), with the reference's objects:
//!
//! ```text
//! FORWARD (pos 1):    -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
//! CNI-FORWARD (pos 1): -m comment --comment "CNI firewall plugin admin overrides" -j CNI-ADMIN
//! CNI-FORWARD:        -d IP/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//!                     -s IP/32 -j ACCEPT            (per container address)
//! ```
//! The chains are shared and never removed; DEL removes the container's address rules.

use std::net::IpAddr;

use netkit::netfilter::host;
use netkit::netfilter::iptables::{Family, Iptables};
use netkit::netfilter::restore;

use crate::chains::{ADMIN_JUMP_COMMENT, FORWARD_JUMP_COMMENT, PRIV_CHAIN};
use crate::error::FirewallError;
use crate::netlink_backend;

/// Whether this family's rules go over netlink (iptables-nft host) rather than the tool.
fn over_netlink(v6: bool) -> bool {
    host::iptables_uses_nf_tables(family_of(v6), FILTER)
}

const FILTER: &str = "filter";
const FORWARD: &str = "FORWARD";

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `IP/32` or `IP/128`.
fn host_cidr(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}/32"),
        IpAddr::V6(v6) => format!("{v6}/128"),
    }
}

/// The two rules of one container address.
pub fn address_rules(ip: IpAddr) -> Vec<Vec<String>> {
    let cidr = host_cidr(ip);
    vec![
        strs(&[
            "-d",
            &cidr,
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT",
        ]),
        strs(&["-s", &cidr, "-j", "ACCEPT"]),
    ]
}

pub fn forward_jump() -> Vec<String> {
    strs(&[
        "-m",
        "comment",
        "--comment",
        FORWARD_JUMP_COMMENT,
        "-j",
        PRIV_CHAIN,
    ])
}

pub fn admin_jump(admin_chain: &str) -> Vec<String> {
    strs(&[
        "-m",
        "comment",
        "--comment",
        ADMIN_JUMP_COMMENT,
        "-j",
        admin_chain,
    ])
}

fn family_of(v6: bool) -> Family {
    if v6 {
        Family::V6
    } else {
        Family::V4
    }
}

fn of_family(ips: &[IpAddr], v6: bool) -> Vec<IpAddr> {
    ips.iter()
        .copied()
        .filter(|ip| ip.is_ipv6() == v6)
        .collect()
}

/// The tools of the families whose rules are not written over netlink (all of them on an
/// iptables-legacy host, none on an iptables-nft one) must be installed: the reference needs
/// both tools before doing anything; so do we there, with a clear message.
pub fn require_tools() -> Result<(), FirewallError> {
    for v6 in [false, true] {
        if over_netlink(v6) {
            continue;
        }
        let ipt = Iptables::for_table(family_of(v6), FILTER);
        for tool in [ipt.tool(), ipt.restore_tool()] {
            if netkit::netfilter::exec::find_tool(tool).is_none() {
                return Err(FirewallError::ToolMissing { tool });
            }
        }
    }
    Ok(())
}

fn setup_chains(ipt: &Iptables, admin_chain: &str) -> Result<(), FirewallError> {
    ipt.ensure_chain(FILTER, PRIV_CHAIN)?;
    ipt.ensure_chain(FILTER, admin_chain)?;
    ipt.insert_unique(FILTER, FORWARD, 1, &refs(&forward_jump()))?;
    ipt.insert_unique(FILTER, PRIV_CHAIN, 1, &refs(&admin_jump(admin_chain)))?;
    Ok(())
}

/// ADD: per family with addresses, ensure the chains and jumps and append the address rules:
/// over netlink on iptables-nft hosts (one transaction per family), with the tool elsewhere.
/// On failure the rules added by this call are removed again.
pub fn add(ips: &[IpAddr], admin_chain: &str) -> Result<(), FirewallError> {
    let mut done = Vec::new();
    for v6 in [false, true] {
        let addrs = of_family(ips, v6);
        if addrs.is_empty() || !over_netlink(v6) {
            continue;
        }
        if let Err(e) = netlink_backend::add(&addrs, v6, admin_chain) {
            for v6 in done {
                let _ = netlink_backend::del(&of_family(ips, v6), v6);
            }
            return Err(e);
        }
        done.push(v6);
    }
    let rest: Vec<IpAddr> = ips
        .iter()
        .copied()
        .filter(|ip| !done.contains(&ip.is_ipv6()))
        .collect();
    if rest.is_empty() {
        return Ok(());
    }
    add_with_tool(&rest, admin_chain).inspect_err(|_| {
        for v6 in &done {
            let _ = netlink_backend::del(&of_family(ips, *v6), *v6);
        }
    })
}

/// ADD with the iptables tool (legacy hosts), exact-rule operations only.
fn add_with_tool(ips: &[IpAddr], admin_chain: &str) -> Result<(), FirewallError> {
    require_tools()?;
    let mut added: Vec<(Iptables, Vec<Vec<String>>)> = Vec::new();
    let result = (|| {
        for v6 in [false, true] {
            let addrs = of_family(ips, v6);
            if addrs.is_empty() {
                continue;
            }
            let ipt = Iptables::for_table(family_of(v6), FILTER);
            setup_chains(&ipt, admin_chain)?;
            let mut missing = Vec::new();
            for rule in addrs.into_iter().flat_map(address_rules) {
                if !ipt.exists(FILTER, PRIV_CHAIN, &refs(&rule))? {
                    missing.push(rule);
                }
            }
            let mut script = restore::Script::new(FILTER);
            for rule in &missing {
                script.append(PRIV_CHAIN, &refs(rule));
            }
            script.apply(&ipt, "failed to add the container's firewall rules")?;
            added.push((ipt, missing));
        }
        Ok(())
    })();
    if result.is_err() {
        for (ipt, rules) in added.iter().rev() {
            for rule in rules {
                let _ = ipt.delete_rule(FILTER, PRIV_CHAIN, &refs(rule));
            }
        }
    }
    result
}

/// DEL: remove the address rules; missing rules, chains or tools are fine. iptables-nft's
/// tables are always cleaned over netlink (the ADD may have gone there before a legacy
/// table appeared), legacy ones with the tool where rules belong there now.
pub fn del(ips: &[IpAddr]) {
    for v6 in [false, true] {
        let addrs = of_family(ips, v6);
        if addrs.is_empty() {
            continue;
        }
        if let Err(e) = netlink_backend::del(&addrs, v6) {
            eprintln!("firewall: {e}");
        }
        if over_netlink(v6) {
            continue;
        }
        let ipt = Iptables::for_table(family_of(v6), FILTER);
        for rule in addrs.into_iter().flat_map(address_rules) {
            match ipt.delete_rule(FILTER, PRIV_CHAIN, &refs(&rule)) {
                Ok(_) => {}
                Err(e) if e.is_tool_missing() => break,
                Err(e) => eprintln!("firewall: {e}"),
            }
        }
    }
}

/// CHECK: chains, jumps and address rules exist for every family the container has.
pub fn check(ips: &[IpAddr], admin_chain: &str) -> Result<(), FirewallError> {
    for v6 in [false, true] {
        let addrs = of_family(ips, v6);
        if addrs.is_empty() {
            continue;
        }
        if over_netlink(v6) {
            netlink_backend::check(&addrs, v6, admin_chain)?;
            continue;
        }
        require_tools()?;
        let ipt = Iptables::for_table(family_of(v6), FILTER);
        for chain in [PRIV_CHAIN, admin_chain] {
            if !ipt.chain_exists(FILTER, chain)? {
                return Err(FirewallError::ToolChainMissing {
                    tool: ipt.tool(),
                    table: FILTER,
                    chain: chain.to_string(),
                });
            }
        }
        let mut wanted = vec![
            (FORWARD, forward_jump()),
            (PRIV_CHAIN, admin_jump(admin_chain)),
        ];
        wanted.extend(
            addrs
                .into_iter()
                .flat_map(address_rules)
                .map(|r| (PRIV_CHAIN, r)),
        );
        for (chain, rule) in wanted {
            if !ipt.exists(FILTER, chain, &refs(&rule))? {
                return Err(FirewallError::ToolRuleMissing {
                    tool: ipt.tool(),
                    rule,
                    table: FILTER,
                    chain: chain.to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_rules() {
        let r = address_rules("10.88.0.5".parse().unwrap());
        assert_eq!(
            r[0].join(" "),
            "-d 10.88.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
        );
        assert_eq!(r[1].join(" "), "-s 10.88.0.5/32 -j ACCEPT");
        assert_eq!(
            address_rules("fd00::5".parse().unwrap())[1].join(" "),
            "-s fd00::5/128 -j ACCEPT"
        );
        assert_eq!(forward_jump().last().unwrap(), "CNI-FORWARD");
        assert_eq!(
            admin_jump("CNI-ADMIN")[3],
            "CNI firewall plugin admin overrides"
        );
    }
}
