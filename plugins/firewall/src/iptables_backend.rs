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

use libcni::CniError;
use netkit::netfilter::iptables::{Family, Iptables};
use netkit::netfilter::restore;

const FILTER: &str = "filter";
const FORWARD: &str = "FORWARD";
pub const PRIV_CHAIN: &str = "CNI-FORWARD";

fn nf(e: netkit::netfilter::Error) -> CniError {
    CniError::internal(e.to_string())
}

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
        "CNI firewall plugin rules",
        "-j",
        PRIV_CHAIN,
    ])
}

pub fn admin_jump(admin_chain: &str) -> Vec<String> {
    strs(&[
        "-m",
        "comment",
        "--comment",
        "CNI firewall plugin admin overrides",
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

/// The reference needs both tools before doing anything; so do we, with a clear message.
pub fn require_tools() -> Result<(), CniError> {
    for tool in ["iptables", "ip6tables"] {
        if netkit::netfilter::exec::find_tool(tool).is_none() {
            return Err(CniError::internal(format!(
                "could not initialize the firewall iptables backend: the {tool:?} tool is not installed"
            )));
        }
    }
    Ok(())
}

fn setup_chains(ipt: &Iptables, admin_chain: &str) -> Result<(), CniError> {
    ipt.ensure_chain(FILTER, PRIV_CHAIN).map_err(nf)?;
    ipt.ensure_chain(FILTER, admin_chain).map_err(nf)?;
    ipt.insert_unique(FILTER, FORWARD, 1, &refs(&forward_jump()))
        .map_err(nf)?;
    ipt.insert_unique(FILTER, PRIV_CHAIN, 1, &refs(&admin_jump(admin_chain)))
        .map_err(nf)?;
    Ok(())
}

/// How `iptables -S` prints a rule of `chain` (fast-path presence test only).
fn listed(chain: &str, rule: &[String]) -> String {
    let args: Vec<String> = rule.iter().map(|a| restore::quote(a)).collect();
    format!("-A {chain} {}", args.join(" "))
}

/// ADD: per family with addresses, ensure the chains and append the address rules. Usually
/// two execs per family: one listing of the filter table and one `iptables-restore
/// --noflush` appending the missing address rules atomically. On failure the rules added by
/// this call are removed again.
pub fn add(ips: &[IpAddr], admin_chain: &str) -> Result<(), CniError> {
    require_tools()?;
    let mut added: Vec<(Iptables, Vec<Vec<String>>)> = Vec::new();
    let result = (|| {
        for v6 in [false, true] {
            let addrs = of_family(ips, v6);
            if addrs.is_empty() {
                continue;
            }
            let ipt = Iptables::new(family_of(v6));
            let listing = restore::list_table(ipt.family(), FILTER).map_err(nf)?;
            let present: std::collections::HashSet<&str> = listing.lines().collect();
            let shared = [
                format!("-N {PRIV_CHAIN}"),
                format!("-N {admin_chain}"),
                listed(FORWARD, &forward_jump()),
                listed(PRIV_CHAIN, &admin_jump(admin_chain)),
            ];
            if !shared.iter().all(|l| present.contains(l.as_str())) {
                setup_chains(&ipt, admin_chain)?;
            }
            let missing: Vec<Vec<String>> = addrs
                .into_iter()
                .flat_map(address_rules)
                .filter(|r| !present.contains(listed(PRIV_CHAIN, r).as_str()))
                .collect();
            let mut script = restore::Script::new(FILTER);
            for rule in &missing {
                script.append(PRIV_CHAIN, &refs(rule));
            }
            script
                .apply(ipt.family(), "failed to add the container's firewall rules")
                .map_err(nf)?;
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

/// DEL: remove the address rules; missing rules, chains or tools are fine.
pub fn del(ips: &[IpAddr]) {
    for v6 in [false, true] {
        let addrs = of_family(ips, v6);
        if addrs.is_empty() {
            continue;
        }
        let ipt = Iptables::new(family_of(v6));
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
pub fn check(ips: &[IpAddr], admin_chain: &str) -> Result<(), CniError> {
    require_tools()?;
    for v6 in [false, true] {
        let addrs = of_family(ips, v6);
        if addrs.is_empty() {
            continue;
        }
        let ipt = Iptables::new(family_of(v6));
        for chain in [PRIV_CHAIN, admin_chain] {
            if !ipt.chain_exists(FILTER, chain).map_err(nf)? {
                return Err(CniError::internal(format!(
                    "{} chain {FILTER}/{chain} does not exist",
                    ipt.tool()
                )));
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
    fn listed_forms() {
        assert_eq!(
            listed(PRIV_CHAIN, &address_rules("10.0.0.5".parse().unwrap())[0]),
            "-A CNI-FORWARD -d 10.0.0.5/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
        );
        assert_eq!(
            listed(FORWARD, &forward_jump()),
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD"
        );
    }

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
