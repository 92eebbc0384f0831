//! The nftables backend with the reference's objects: table `ip cni_hostport` (and `ip6`),
//! chains `hostports`, `hostip_hostports`, `hostports_all`, base chains `prerouting`/`output`
//! (nat, dstnat; `[conditions] fib daddr type local jump hostports_all`) and `masquerading`
//! (nat, srcnat). Every per-container rule carries the container ID as its comment; DEL and
//! CHECK find them by that comment in those three chains only.
//!
//! Everything is written over netlink (netkit's nf_tables layer) in one atomic transaction
//! per family: no `nft` process runs. `conditionsV4/V6` are nft syntax; the subset they can
//! use here is parsed by [`parse_conditions`].

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::CniError;
use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::{
    Batch, Chain, CmpOp, Expr, Family, Hook, Rule, Socket, Table, Verdict,
};

use crate::config::{PortMapConf, Protocol};

pub const TABLE: &str = "cni_hostport";
const TABLE_COMMENT: &str = "CNI portmap plugin";
const HOSTPORTS: &str = "hostports";
const HOSTIP_HOSTPORTS: &str = "hostip_hostports";
const HOSTPORTS_ALL: &str = "hostports_all";
const MASQUERADING: &str = "masquerading";
/// Chains holding per-container rules.
const CONTAINER_CHAINS: &[&str] = &[HOSTIP_HOSTPORTS, HOSTPORTS, MASQUERADING];
const DSTNAT: i32 = -100;
const SRCNAT: i32 = 100;
/// How often a transaction is rebuilt when a rule it deletes vanished meanwhile.
const ATTEMPTS: usize = 5;

fn nf(e: netkit::netfilter::Error) -> CniError {
    CniError::internal(e.to_string())
}

fn family(v6: bool) -> Family {
    if v6 {
        Family::Ip6
    } else {
        Family::Ip
    }
}

fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

/// Parses `conditionsV4/V6` (nft syntax) into expressions. Supported: sequences of
/// `ip|ip6 saddr|daddr [==|!=] ADDR[/LEN]` and `[meta] iifname|oifname [==|!=] NAME`.
pub fn parse_conditions(tokens: &[String], v6: bool) -> Result<Vec<Expr>, CniError> {
    let field = if v6 { "conditionsV6" } else { "conditionsV4" };
    let bad = |detail: String| CniError::invalid_config(format!("{field}: {detail}"));
    let mut out = Vec::new();
    let mut i = 0;
    let take_op = |i: &mut usize| -> CmpOp {
        match tokens.get(*i).map(String::as_str) {
            Some("!=") => {
                *i += 1;
                CmpOp::Neq
            }
            Some("==") => {
                *i += 1;
                CmpOp::Eq
            }
            _ => CmpOp::Eq,
        }
    };
    while i < tokens.len() {
        let word = tokens[i].as_str();
        match word {
            "ip" | "ip6" => {
                if (word == "ip6") != v6 {
                    return Err(bad(format!("{word} match in the wrong family")));
                }
                let addr = match tokens.get(i + 1).map(String::as_str) {
                    Some("saddr") => Addr::Saddr,
                    Some("daddr") => Addr::Daddr,
                    other => return Err(bad(format!("unsupported {word} field {other:?}"))),
                };
                i += 2;
                let op = take_op(&mut i);
                let value = tokens
                    .get(i)
                    .ok_or_else(|| bad(format!("{word} match without an address")))?;
                let net: IpNetwork = match value.parse::<IpNetwork>() {
                    Ok(n) => IpNetwork::new(n.network(), n.prefix()).unwrap_or(n),
                    Err(_) => return Err(bad(format!("invalid address {value:?}"))),
                };
                if net.is_ipv6() != v6 {
                    return Err(bad(format!("address {value} of the wrong family")));
                }
                out.extend(build::addr(addr, op, net));
                i += 1;
            }
            "meta" | "iifname" | "oifname" => {
                if word == "meta" {
                    i += 1;
                }
                let input = match tokens.get(i).map(String::as_str) {
                    Some("iifname") => true,
                    Some("oifname") => false,
                    other => return Err(bad(format!("unsupported meta key {other:?}"))),
                };
                i += 1;
                let op = take_op(&mut i);
                let name = tokens
                    .get(i)
                    .ok_or_else(|| bad("interface match without a name".into()))?;
                netkit::link::validate_ifname(name)
                    .map_err(|e| bad(format!("invalid interface name: {e}")))?;
                out.extend(build::ifname(input, op, name));
                i += 1;
            }
            other => {
                return Err(bad(format!(
                "unsupported condition {other:?} (supported: ip/ip6 saddr/daddr, iifname, oifname)"
            )))
            }
        }
    }
    Ok(out)
}

/// The shared objects of one family, as the reference (re)creates them on every ADD.
fn shared_objects(b: &mut Batch, fam: Family, conditions: &[Expr]) {
    b.add_table(&Table::new(fam, TABLE).with_comment(TABLE_COMMENT))
        .add_chain(&Chain::new(fam, TABLE, HOSTPORTS))
        .add_chain(&Chain::new(fam, TABLE, HOSTIP_HOSTPORTS))
        .add_chain(&Chain::new(fam, TABLE, HOSTPORTS_ALL))
        .flush_chain(fam, TABLE, HOSTPORTS_ALL);
    for target in [HOSTIP_HOSTPORTS, HOSTPORTS] {
        b.add_rule(&Rule::new(
            fam,
            TABLE,
            HOSTPORTS_ALL,
            build::verdict(Verdict::Jump(target.into())),
        ));
    }
    for (chain, hook) in [("prerouting", Hook::Prerouting), ("output", Hook::Output)] {
        b.add_chain(&Chain::base(fam, TABLE, chain, "nat", hook, DSTNAT, None))
            .flush_chain(fam, TABLE, chain)
            .add_rule(&Rule::new(
                fam,
                TABLE,
                chain,
                build::all([
                    conditions.to_vec(),
                    build::fib_daddr_local(),
                    build::verdict(Verdict::Jump(HOSTPORTS_ALL.into())),
                ]),
            ));
    }
    b.add_chain(&Chain::base(
        fam,
        TABLE,
        MASQUERADING,
        "nat",
        Hook::Postrouting,
        SRCNAT,
        None,
    ));
}

/// The per-container rules of one family (each commented with the container ID).
pub fn container_rules(conf: &PortMapConf, container_id: &str, container: IpNetwork) -> Vec<Rule> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let cip = container.ip();
    let rule = |chain: &str, exprs: Vec<Expr>| {
        Rule::new(fam, TABLE, chain, exprs).with_comment(container_id)
    };
    let mut rules = Vec::new();
    for m in &conf.mappings {
        let Some(host_ip) = m.host_ip_for(v6) else {
            continue;
        };
        let (chain, daddr) = match host_ip {
            Some(ip) => (HOSTIP_HOSTPORTS, build::host(Addr::Daddr, CmpOp::Eq, ip)),
            None => (HOSTPORTS, Vec::new()),
        };
        rules.push(rule(
            chain,
            build::all([
                daddr,
                build::l4proto_dport(proto_number(m.protocol), m.host_port),
                build::dnat(cip, m.container_port),
            ]),
        ));
    }
    if conf.snat {
        let to_container = build::host(Addr::Daddr, CmpOp::Eq, cip);
        if conf.masq_all {
            rules.push(rule(
                MASQUERADING,
                build::all([to_container, build::ct_status_dnat(), build::masquerade()]),
            ));
        } else {
            // The whole subnet, as the iptables backend does: a neighbour container reaching
            // the host port must see replies come back through the host. `ct status dnat`
            // limits it to port-forwarded connections (the iptables backend's mark), so plain
            // pod-to-pod traffic seen here through br_netfilter keeps its source address.
            let subnet =
                IpNetwork::new(container.network(), container.prefix()).unwrap_or(container);
            rules.push(rule(
                MASQUERADING,
                build::all([
                    build::addr(Addr::Saddr, CmpOp::Eq, subnet),
                    to_container.clone(),
                    build::ct_status_dnat(),
                    build::masquerade(),
                ]),
            ));
            if !v6 {
                rules.push(rule(
                    MASQUERADING,
                    build::all([
                        build::host(Addr::Saddr, CmpOp::Eq, IpAddr::from([127, 0, 0, 1])),
                        to_container,
                        build::masquerade(),
                    ]),
                ));
            }
        }
    }
    rules
}

/// Handles of this container's rules, per chain, in one family (three small dumps).
fn existing(
    sock: &mut Socket,
    fam: Family,
    container_id: &str,
) -> Result<Vec<(&'static str, u64)>, CniError> {
    let mut out = Vec::new();
    for chain in CONTAINER_CHAINS {
        for r in sock.rules(fam, TABLE, chain).map_err(nf)? {
            if r.comment().as_deref() == Some(container_id) {
                if let Some(h) = r.handle {
                    out.push((*chain, h));
                }
            }
        }
    }
    Ok(out)
}

fn is_race(e: &netkit::netfilter::Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT | libc::EBUSY))
}

/// Applies "delete this container's rules, then `extra`" atomically, relisting on races.
fn replace_rules(
    sock: &mut Socket,
    fam: Family,
    container_id: &str,
    extra: impl Fn(&mut Batch),
    what: &str,
) -> Result<(), CniError> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let mut b = Batch::new();
        for (chain, h) in existing(sock, fam, container_id)? {
            b.delete_rule(fam, TABLE, chain, h);
        }
        extra(&mut b);
        match sock.commit(&b) {
            Ok(_) => return Ok(()),
            Err(e) if is_race(&e) => last = Some(e),
            Err(e) => return Err(CniError::internal(format!("{what}: {e}"))),
        }
    }
    Err(CniError::internal(format!(
        "{what}: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

/// ADD for one family: one transaction that removes a leftover of an earlier ADD of the same
/// container, (re)builds the shared chains and adds the container's rules.
pub fn forward_ports(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
) -> Result<(), CniError> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let conditions = parse_conditions(conf.conditions(v6), v6)?;
    let rules = container_rules(conf, container_id, container);
    let mut sock = Socket::new().map_err(nf)?;
    replace_rules(
        &mut sock,
        fam,
        container_id,
        |b| {
            shared_objects(b, fam, &conditions);
            for r in &rules {
                b.add_rule(r);
            }
        },
        "failed to add nftables port mappings",
    )
}

/// DEL: both families. A host without nf_tables, or without our tables, has nothing to remove.
pub fn unforward_ports(container_id: &str) -> Result<(), CniError> {
    let Ok(mut sock) = Socket::new() else {
        return Ok(());
    };
    for v6 in [false, true] {
        replace_rules(
            &mut sock,
            family(v6),
            container_id,
            |_| {},
            &format!("failed to delete the nftables port mappings of {container_id}"),
        )?;
    }
    Ok(())
}

/// How many per-container rules an ADD creates for one family (for CHECK).
pub fn expected_rules(conf: &PortMapConf, container: IpNetwork) -> usize {
    container_rules(conf, "", container).len()
}

/// CHECK for one family: the base chains hold their jump and the container's rules are there.
pub fn check_ports(
    conf: &PortMapConf,
    container_id: &str,
    container: IpNetwork,
) -> Result<(), CniError> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let mut sock = Socket::new().map_err(nf)?;
    for chain in ["prerouting", "output", HOSTPORTS_ALL] {
        if sock.rules(fam, TABLE, chain).map_err(nf)?.is_empty() {
            return Err(CniError::internal(format!(
                "nftables chain {} {TABLE} {chain} is missing or empty",
                fam.name()
            )));
        }
    }
    let have = existing(&mut sock, fam, container_id)?.len();
    let want = expected_rules(conf, container);
    if have != want {
        return Err(CniError::internal(format!(
            "found {have} nftables port mapping rules for {container_id} in {} {TABLE}, expected {want}",
            fam.name()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PortMapping;

    fn conf() -> PortMapConf {
        PortMapConf {
            mappings: vec![
                PortMapping {
                    host_port: 8080,
                    container_port: 80,
                    protocol: Protocol::Tcp,
                    host_ip: None,
                },
                PortMapping {
                    host_port: 53,
                    container_port: 53,
                    protocol: Protocol::Udp,
                    host_ip: Some("192.168.1.1".parse().unwrap()),
                },
            ],
            snat: true,
            masq_all: false,
            mark_masq_bit: 13,
            external_set_mark_chain: None,
            conditions_v4: vec!["iifname".into(), "!=".into(), "eth9".into()],
            conditions_v6: vec![],
            backend: None,
        }
    }

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn v4_rules() {
        let r = container_rules(&conf(), "cid", "10.88.0.5/16".parse().unwrap());
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].chain, HOSTPORTS);
        assert_eq!(r[1].chain, HOSTIP_HOSTPORTS);
        assert!(r.iter().all(|r| r.comment().as_deref() == Some("cid")));
        assert_eq!(
            r[2].exprs[..2],
            build::addr(Addr::Saddr, CmpOp::Eq, "10.88.0.0/16".parse().unwrap())[..]
        );
        assert_eq!(expected_rules(&conf(), "10.88.0.5/16".parse().unwrap()), 4);
    }

    #[test]
    fn v6_rules_skip_v4_host_ips_and_localhost() {
        let r = container_rules(&conf(), "cid", "fd00::5/64".parse().unwrap());
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.family == Family::Ip6));
    }

    #[test]
    fn conditions() {
        assert_eq!(
            parse_conditions(&toks("iifname != eth9"), false).unwrap(),
            build::ifname(true, CmpOp::Neq, "eth9")
        );
        let both = parse_conditions(&toks("ip saddr 10.0.0.0/8 meta oifname br0"), false).unwrap();
        assert_eq!(both.len(), 4);
        for bad in [
            "ip saddr",
            "ip6 saddr fd00::1",
            "ip saddr fd00::1",
            "tcp dport 80",
            "iifname",
            "ip ttl 3",
        ] {
            assert!(parse_conditions(&toks(bad), false).is_err(), "{bad}");
        }
        assert!(parse_conditions(&toks("ip6 daddr != fd00::/64"), true).is_ok());
    }
}
