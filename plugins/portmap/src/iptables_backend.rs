//! The iptables backend with the reference's chains (nat table):
//!
//! ```text
//! PREROUTING, OUTPUT:  -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
//! CNI-HOSTPORT-DNAT:   -p P -m comment --comment 'dnat name: "<net>" id: "<cid>"'
//!                      -m multiport --destination-ports a,b,... [conditions] -j CNI-DN-<hash>
//! CNI-DN-<hash>:       per mapping: hairpin mark (-s <subnet>), localhost mark (-s 127.0.0.1, v4),
//!                      -j DNAT --to-destination <ip>:<port>
//! CNI-HOSTPORT-SETMARK: -j MARK --set-xmark <bit>/<bit>
//! POSTROUTING (top):   -j CNI-HOSTPORT-MASQ;  CNI-HOSTPORT-MASQ: -m mark --mark <bit>/<bit> -j MASQUERADE
//! ```
//! Shared chains are never removed; a container's DEL removes its `CNI-DN-*` chain and the
//! jumps to it (plus the legacy `CNI-SN-*` chain of very old versions).

use ipnetwork::IpNetwork;
use netkit::netfilter::iptables::{Family, Iptables};
use netkit::netfilter::nf_tables::{xt, Socket};
use netkit::netfilter::{host, naming, restore, xt_cleanup};

use crate::config::{PortMapConf, Protocol};
use crate::error::PortmapError;

const NAT: &str = "nat";
pub const TOP_LEVEL_DNAT_CHAIN: &str = "CNI-HOSTPORT-DNAT";
pub const SET_MARK_CHAIN: &str = "CNI-HOSTPORT-SETMARK";
pub const MARK_MASQ_CHAIN: &str = "CNI-HOSTPORT-MASQ";
const OLD_TOP_LEVEL_SNAT_CHAIN: &str = "CNI-HOSTPORT-SNAT";
/// multiport accepts at most 15 ports per rule.
const MULTIPORT_MAX: usize = 15;

/// A chain, the rules it holds, and the rules in other chains that jump to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub entry_chains: Vec<String>,
    /// Match part of each jump rule (`-j <name>` is appended).
    pub entry_rules: Vec<Vec<String>>,
    pub rules: Vec<Vec<String>>,
    /// Jumps go to the top of the entry chains (else appended).
    pub prepend_entry: bool,
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn as_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

impl Chain {
    fn jump(&self, entry: &[String]) -> Vec<String> {
        let mut r = entry.to_vec();
        r.extend(strs(&["-j", &self.name]));
        r
    }

    /// Creates the chain and its rules and jumps; existing identical rules are kept.
    pub fn setup(&self, ipt: &Iptables) -> Result<(), PortmapError> {
        ipt.ensure_chain(NAT, &self.name)?;
        for rule in &self.rules {
            ipt.append_unique(NAT, &self.name, &as_refs(rule))?;
        }
        for entry_chain in &self.entry_chains {
            for entry in &self.entry_rules {
                let r = self.jump(entry);
                if self.prepend_entry {
                    ipt.insert_unique(NAT, entry_chain, 1, &as_refs(&r))?;
                } else {
                    ipt.append_unique(NAT, entry_chain, &as_refs(&r))?;
                }
            }
        }
        Ok(())
    }

    /// Removes the jumps to the chain, then the chain. Nothing there is success.
    /// Returns whether the chain existed.
    pub fn teardown(&self, ipt: &Iptables) -> Result<bool, PortmapError> {
        // A chain that does not exist cannot be jumped to: one call settles the common case.
        if !ipt.clear_chain(NAT, &self.name)? {
            return Ok(false);
        }
        let from: Vec<&str> = self.entry_chains.iter().map(String::as_str).collect();
        ipt.remove_chain_and_jumps(NAT, &self.name, &from)?;
        Ok(true)
    }

    /// CHECK: the chain, each rule and each jump exist.
    pub fn check(&self, ipt: &Iptables) -> Result<(), PortmapError> {
        if !ipt.chain_exists(NAT, &self.name)? {
            return Err(PortmapError::ChainMissing {
                chain: self.name.clone(),
                tool: ipt.tool(),
                table: NAT,
            });
        }
        for rule in &self.rules {
            if !ipt.exists(NAT, &self.name, &as_refs(rule))? {
                return Err(PortmapError::RuleMissing {
                    rule: rule.clone(),
                    tool: ipt.tool(),
                    table: NAT,
                    chain: self.name.clone(),
                });
            }
        }
        for entry_chain in &self.entry_chains {
            for entry in &self.entry_rules {
                let r = self.jump(entry);
                if !ipt.exists(NAT, entry_chain, &as_refs(&r))? {
                    return Err(PortmapError::RuleMissing {
                        rule: r,
                        tool: ipt.tool(),
                        table: NAT,
                        chain: entry_chain.clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// `0x2000/0x2000` for bit 13.
fn mark_def(bit: u32) -> String {
    let v = 1u32 << bit;
    format!("{v:#x}/{v:#x}")
}

pub fn top_level_dnat_chain() -> Chain {
    Chain {
        name: TOP_LEVEL_DNAT_CHAIN.into(),
        entry_chains: strs(&["PREROUTING", "OUTPUT"]),
        entry_rules: vec![strs(&["-m", "addrtype", "--dst-type", "LOCAL"])],
        rules: Vec::new(),
        prepend_entry: false,
    }
}

pub fn set_mark_chain(bit: u32) -> Chain {
    Chain {
        name: SET_MARK_CHAIN.into(),
        entry_chains: Vec::new(),
        entry_rules: Vec::new(),
        rules: vec![strs(&[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd masquerade mark",
            "-j",
            "MARK",
            "--set-xmark",
            &mark_def(bit),
        ])],
        prepend_entry: false,
    }
}

pub fn mark_masq_chain(bit: u32) -> Chain {
    Chain {
        name: MARK_MASQ_CHAIN.into(),
        entry_chains: strs(&["POSTROUTING"]),
        entry_rules: vec![strs(&[
            "-m",
            "comment",
            "--comment",
            "CNI portfwd requiring masquerade",
        ])],
        rules: vec![strs(&[
            "-m",
            "mark",
            "--mark",
            &mark_def(bit),
            "-j",
            "MASQUERADE",
        ])],
        prepend_entry: true,
    }
}

/// The container's chain with no rules (enough for teardown).
pub fn dnat_chain(network: &str, container_id: &str) -> Chain {
    Chain {
        name: naming::chain_name_with_prefix(network, container_id, "DN-"),
        entry_chains: strs(&[TOP_LEVEL_DNAT_CHAIN]),
        entry_rules: Vec::new(),
        rules: Vec::new(),
        prepend_entry: false,
    }
}

fn old_snat_chain(network: &str, container_id: &str) -> Chain {
    Chain {
        name: naming::chain_name_with_prefix(network, container_id, "SN-"),
        entry_chains: strs(&[OLD_TOP_LEVEL_SNAT_CHAIN]),
        entry_rules: Vec::new(),
        rules: Vec::new(),
        prepend_entry: false,
    }
}

/// `10.0.0.5:80` or `[fd00::5]:80`.
fn ip_port(ip: std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => format!("{v4}:{port}"),
        std::net::IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

/// The container's DNAT chain with its jump rules and per-mapping rules (reference order:
/// mark rules before the DNAT rule of each mapping).
pub fn dnat_chain_for(
    conf: &PortMapConf,
    network: &str,
    container_id: &str,
    container: IpNetwork,
) -> Chain {
    let v6 = container.is_ipv6();
    let mut chain = dnat_chain(network, container_id);
    let comment = truncate_comment(format!("dnat name: \"{network}\" id: \"{container_id}\""));
    let set_mark = conf
        .external_set_mark_chain
        .clone()
        .unwrap_or_else(|| SET_MARK_CHAIN.to_string());

    let mut protos: Vec<Protocol> = conf.mappings.iter().map(|m| m.protocol).collect();
    protos.sort();
    protos.dedup();
    for proto in protos {
        let ports: Vec<String> = conf
            .mappings
            .iter()
            .filter(|m| m.protocol == proto)
            .map(|m| m.host_port.to_string())
            .collect();
        for group in ports.chunks(MULTIPORT_MAX) {
            let mut r = strs(&[
                "-p",
                proto.as_str(),
                "-m",
                "comment",
                "--comment",
                &comment,
                "-m",
                "multiport",
            ]);
            r.extend(strs(&["--destination-ports", &group.join(",")]));
            r.extend(conf.conditions(v6).iter().cloned());
            chain.entry_rules.push(r);
        }
    }

    let subnet = IpNetwork::new(container.network(), container.prefix()).unwrap_or(container);
    let any = if v6 { "::/0" } else { "0.0.0.0/0" };
    for m in &conf.mappings {
        let Some(host_ip) = m.host_ip_for(v6) else {
            continue;
        };
        let mut base = strs(&[
            "-p",
            m.protocol.as_str(),
            "--dport",
            &m.host_port.to_string(),
        ]);
        if let Some(ip) = host_ip {
            base.extend(strs(&["-d", &ip.to_string()]));
        }
        if conf.snat {
            let mut hairpin = base.clone();
            let src = if conf.masq_all {
                any.to_string()
            } else {
                subnet.to_string()
            };
            hairpin.extend(strs(&["-s", &src, "-j", &set_mark]));
            chain.rules.push(hairpin);
            if !v6 && !conf.masq_all {
                let mut local = base.clone();
                local.extend(strs(&["-s", "127.0.0.1", "-j", &set_mark]));
                chain.rules.push(local);
            }
        }
        let mut dnat = base;
        dnat.extend(strs(&[
            "-j",
            "DNAT",
            "--to-destination",
            &ip_port(container.ip(), m.container_port),
        ]));
        chain.rules.push(dnat);
    }
    chain
}

/// iptables comments are limited to 256 bytes.
fn truncate_comment(mut c: String) -> String {
    const MAX: usize = 255;
    if c.len() > MAX {
        let mut cut = MAX;
        while !c.is_char_boundary(cut) {
            cut -= 1;
        }
        c.truncate(cut);
    }
    c
}

fn iptables_for(container: &IpNetwork) -> Iptables {
    let family = if container.is_ipv6() {
        Family::V6
    } else {
        Family::V4
    };
    Iptables::for_table(family, NAT)
}

/// The shared chains this configuration needs.
fn shared_chains(conf: &PortMapConf) -> Vec<Chain> {
    let mut chains = Vec::new();
    if conf.snat && conf.external_set_mark_chain.is_none() {
        chains.push(set_mark_chain(conf.mark_masq_bit));
        chains.push(mark_masq_chain(conf.mark_masq_bit));
    }
    chains.push(top_level_dnat_chain());
    chains
}

/// ADD for one family (the iptables tool, exact-rule operations only): the shared chains
/// are ensured rule by rule (`-C` before `-A`/`-I`), a leftover container chain of an earlier
/// ADD is removed, then one `iptables-restore --noflush` creates the container's chain and
/// its jumps atomically. No table is ever listed as a whole.
pub fn forward_ports(
    conf: &PortMapConf,
    network: &str,
    container_id: &str,
    container: IpNetwork,
) -> Result<(), PortmapError> {
    let ipt = iptables_for(&container);
    for shared in shared_chains(conf) {
        shared.setup(&ipt)?;
    }
    let chain = dnat_chain_for(conf, network, container_id, container);
    chain.teardown(&ipt)?;
    let mut script = restore::Script::new(NAT);
    script.declare_chain(&chain.name);
    for rule in &chain.rules {
        script.append(&chain.name, &as_refs(rule));
    }
    for entry_chain in &chain.entry_chains {
        for entry in &chain.entry_rules {
            script.append(entry_chain, &as_refs(&chain.jump(entry)));
        }
    }
    script
        .apply(
            &ipt,
            &format!("failed to set up port forwarding chain {}", chain.name),
        )
        .map_err(PortmapError::from)
}

/// DEL for one family: the container's `CNI-DN-*` chain (and the legacy `CNI-SN-*` one) with
/// the jumps to it. Over netlink where iptables-nft keeps the nat table in nf_tables (only
/// the chain and `CNI-HOSTPORT-DNAT` are read), with the tool where a legacy nat table is in
/// use. Returns false when neither is possible.
fn unforward_family(
    family: Family,
    network: &str,
    container_id: &str,
) -> Result<bool, PortmapError> {
    let chains = [
        dnat_chain(network, container_id),
        old_snat_chain(network, container_id),
    ];
    let mut usable = false;
    if let Ok(mut sock) = Socket::new() {
        usable = true;
        for chain in &chains {
            let from: Vec<&str> = chain.entry_chains.iter().map(String::as_str).collect();
            xt_cleanup::remove_chain_and_jumps(
                &mut sock,
                host::nft_family(family),
                NAT,
                &chain.name,
                &from,
            )?;
        }
    }
    if host::legacy_table_in_use(family, NAT) {
        let ipt = Iptables::legacy(family);
        if ipt.is_usable() {
            usable = true;
            for chain in &chains {
                chain.teardown(&ipt)?;
            }
        }
    }
    Ok(usable)
}

/// Whether `network` has port mappings in the iptables backend (ours or the reference's):
/// a `CNI-HOSTPORT-DNAT` jump commented `dnat name: "<net>" ...`. Reads that chain only.
pub fn has_state(network: &str) -> bool {
    let ours = |c: Option<String>| {
        c.and_then(|c| parse_dnat_comment(&c))
            .is_some_and(|(net, _)| net == network)
    };
    if let Ok(mut sock) = Socket::new() {
        for family in [Family::V4, Family::V6] {
            let rules = sock
                .rules(host::nft_family(family), NAT, TOP_LEVEL_DNAT_CHAIN)
                .unwrap_or_default();
            if rules.iter().any(|r| ours(xt::rule_comment(r))) {
                return true;
            }
        }
    }
    [Family::V4, Family::V6].into_iter().any(|family| {
        host::legacy_table_in_use(family, NAT)
            && Iptables::legacy(family)
                .list_rules(NAT, TOP_LEVEL_DNAT_CHAIN)
                .unwrap_or_default()
                .iter()
                .any(|r| ours(r.comment().map(str::to_string)))
    })
}

/// CHECK for one family.
pub fn check_ports(
    conf: &PortMapConf,
    network: &str,
    container_id: &str,
    container: IpNetwork,
) -> Result<(), PortmapError> {
    let ipt = iptables_for(&container);
    top_level_dnat_chain().check(&ipt)?;
    if conf.snat && conf.external_set_mark_chain.is_none() {
        set_mark_chain(conf.mark_masq_bit).check(&ipt)?;
        mark_masq_chain(conf.mark_masq_bit).check(&ipt)?;
    }
    dnat_chain_for(conf, network, container_id, container).check(&ipt)
}

/// DEL: both families, whichever tools are usable (also the legacy `CNI-SN-*` chain of very
/// old versions). Errors only when neither tool is usable.
pub fn unforward_ports(network: &str, container_id: &str) -> Result<(), PortmapError> {
    let mut usable = 0;
    for family in [Family::V4, Family::V6] {
        if unforward_family(family, network, container_id)? {
            usable += 1;
        }
    }
    if usable == 0 {
        return Err(PortmapError::NoIptables);
    }
    Ok(())
}

/// The (network, container ID) named by a DNAT jump comment `dnat name: "<net>" id: "<cid>"`.
fn parse_dnat_comment(comment: &str) -> Option<(String, String)> {
    let rest = comment.strip_prefix("dnat name: \"")?;
    let (network, rest) = rest.split_once("\" id: \"")?;
    let cid = rest.strip_suffix('"')?;
    Some((network.to_string(), cid.to_string()))
}

/// GC: removes the DNAT chains of `network` whose container is not in `valid` (both
/// families). The jump comments name the network and container, so nothing else is touched.
pub fn gc(network: &str, valid: &[String]) -> Result<(), PortmapError> {
    let mut errors = Vec::new();
    let stale_of = |comments: Vec<Option<String>>| -> Vec<String> {
        let mut stale: Vec<String> = comments
            .into_iter()
            .filter_map(|c| parse_dnat_comment(&c?))
            .filter(|(net, cid)| net == network && !valid.contains(cid))
            .map(|(_, cid)| cid)
            .collect();
        stale.sort();
        stale.dedup();
        stale
    };
    let mut sock = Socket::new().ok();
    for family in [Family::V4, Family::V6] {
        if let Some(sock) = sock.as_mut() {
            let nf_family = host::nft_family(family);
            match sock.rules(nf_family, NAT, TOP_LEVEL_DNAT_CHAIN) {
                Ok(rules) => {
                    for cid in stale_of(rules.iter().map(xt::rule_comment).collect()) {
                        let chain = dnat_chain(network, &cid).name;
                        if let Err(e) = xt_cleanup::remove_chain_and_jumps(
                            sock,
                            nf_family,
                            NAT,
                            &chain,
                            &[TOP_LEVEL_DNAT_CHAIN],
                        ) {
                            errors.push(e.to_string());
                        }
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !host::legacy_table_in_use(family, NAT) {
            continue;
        }
        let ipt = Iptables::legacy(family);
        let rules = match ipt.list_rules(NAT, TOP_LEVEL_DNAT_CHAIN) {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        for cid in stale_of(
            rules
                .iter()
                .map(|r| r.comment().map(str::to_string))
                .collect(),
        ) {
            if let Err(e) = dnat_chain(network, &cid).teardown(&ipt) {
                errors.push(e.to_string());
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(PortmapError::Gc(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PortMapping;

    fn conf(mappings: Vec<PortMapping>) -> PortMapConf {
        PortMapConf {
            mappings,
            snat: true,
            masq_all: false,
            mark_masq_bit: 13,
            external_set_mark_chain: None,
            conditions_v4: vec![],
            conditions_v6: vec![],
            backend: None,
        }
    }

    fn m(hp: u16, cp: u16, p: Protocol, ip: Option<&str>) -> PortMapping {
        PortMapping {
            host_port: hp,
            container_port: cp,
            protocol: p,
            host_ip: ip.map(|s| s.parse().unwrap()),
        }
    }

    #[test]
    fn reference_rules_v4() {
        let c = conf(vec![
            m(8080, 80, Protocol::Tcp, None),
            m(53, 53, Protocol::Udp, Some("10.9.9.9")),
        ]);
        let ch = dnat_chain_for(&c, "net", "cid", "10.88.0.5/16".parse().unwrap());
        assert!(ch.name.starts_with("CNI-DN-") && ch.name.len() == 28);
        assert_eq!(ch.entry_rules.len(), 2);
        assert_eq!(
            ch.entry_rules[0].join(" "),
            r#"-p tcp -m comment --comment dnat name: "net" id: "cid" -m multiport --destination-ports 8080"#
        );
        assert_eq!(ch.entry_rules[1][1], "udp");
        let rules: Vec<String> = ch.rules.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            rules,
            vec![
                "-p tcp --dport 8080 -s 10.88.0.0/16 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -j DNAT --to-destination 10.88.0.5:80",
                "-p udp --dport 53 -d 10.9.9.9 -s 10.88.0.0/16 -j CNI-HOSTPORT-SETMARK",
                "-p udp --dport 53 -d 10.9.9.9 -s 127.0.0.1 -j CNI-HOSTPORT-SETMARK",
                "-p udp --dport 53 -d 10.9.9.9 -j DNAT --to-destination 10.88.0.5:53",
            ]
        );
    }

    #[test]
    fn v6_skips_v4_host_ips_and_localhost() {
        let mut c = conf(vec![
            m(8080, 80, Protocol::Tcp, None),
            m(81, 81, Protocol::Tcp, Some("10.0.0.1")),
        ]);
        c.conditions_v6 = vec!["!".into(), "-s".into(), "fd00::1".into()];
        let ch = dnat_chain_for(&c, "net", "cid", "fd00::5/64".parse().unwrap());
        let rules: Vec<String> = ch.rules.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            rules,
            vec![
                "-p tcp --dport 8080 -s fd00::/64 -j CNI-HOSTPORT-SETMARK",
                "-p tcp --dport 8080 -j DNAT --to-destination [fd00::5]:80",
            ]
        );
        assert!(ch.entry_rules[0]
            .join(" ")
            .ends_with("--destination-ports 8080,81 ! -s fd00::1"));
    }

    #[test]
    fn masq_all_and_external_chain_and_no_snat() {
        let mut c = conf(vec![m(1, 2, Protocol::Sctp, None)]);
        c.masq_all = true;
        c.external_set_mark_chain = Some("KUBE-MARK-MASQ".into());
        let ch = dnat_chain_for(&c, "n", "c", "10.0.0.2/24".parse().unwrap());
        assert_eq!(
            ch.rules[0].join(" "),
            "-p sctp --dport 1 -s 0.0.0.0/0 -j KUBE-MARK-MASQ"
        );
        assert_eq!(ch.rules.len(), 2);
        c.snat = false;
        let ch = dnat_chain_for(&c, "n", "c", "10.0.0.2/24".parse().unwrap());
        assert_eq!(ch.rules.len(), 1);
    }

    #[test]
    fn multiport_groups_of_15() {
        let c = conf((1..=20).map(|p| m(p, p, Protocol::Tcp, None)).collect());
        let ch = dnat_chain_for(&c, "n", "c", "10.0.0.2/24".parse().unwrap());
        assert_eq!(ch.entry_rules.len(), 2);
        assert!(ch.entry_rules[1].join(" ").ends_with("16,17,18,19,20"));
    }

    #[test]
    fn dnat_comments() {
        assert_eq!(
            parse_dnat_comment(r#"dnat name: "net" id: "c1""#),
            Some(("net".into(), "c1".into()))
        );
        assert_eq!(parse_dnat_comment("CNI portfwd masquerade mark"), None);
    }

    #[test]
    fn shared_chains() {
        assert_eq!(set_mark_chain(13).rules[0].last().unwrap(), "0x2000/0x2000");
        assert_eq!(mark_masq_chain(0).rules[0][3], "0x1/0x1");
        assert!(mark_masq_chain(13).prepend_entry);
    }
}
