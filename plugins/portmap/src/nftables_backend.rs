//! The nftables backend with the reference's objects: table `ip cni_hostport` (and `ip6`),
//! chains `hostports`, `hostip_hostports`, `hostports_all`, base chains `prerouting`/`output`
//! (nat, dstnat; `[conditions] fib daddr type local jump hostports_all`) and `masquerading`
//! (nat, srcnat). Every per-container rule carries its attachment's comment; ADD, DEL and
//! CHECK find an attachment's rules by it (see [`crate::attachment`]) in those three chains
//! only, so another attachment of the same container keeps its rules.
//!
//! Everything is written over netlink (netkit's nf_tables layer) in one atomic transaction
//! per family: no `nft` process runs, except for `conditionsV4/V6` in nft syntax this plugin
//! does not encode itself (see [`entry_conditions`]): then `nft -f` writes the two entry
//! rules, and nothing else.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::set::AnonSet;
use netkit::netfilter::nf_tables::shared::Shared;
use netkit::netfilter::nf_tables::syntax::{Matches, SyntaxError};
use netkit::netfilter::nf_tables::{
    Batch, Chain, CmpOp, Expr, Family, Hook, Rule, Socket, Table, Verdict,
};

use crate::attachment::{self, Attachment, Selector};
use crate::config::{PortMapConf, Protocol};
use crate::error::PortmapError;

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

/// How the entry rules get their `conditionsV4/V6`: encoded here, or, for nft syntax this
/// plugin does not encode, written by `nft -f` (the one case where the nftables backend
/// runs a process).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryConditions {
    Native(Matches),
    ByNft(String),
}

/// Parses one family's conditions (tokens joined by spaces, as the reference hands them to
/// nft). Text nft would refuse is a config error; text it may accept but we do not encode
/// goes to nft.
pub fn entry_conditions(tokens: &[String], v6: bool) -> Result<EntryConditions, PortmapError> {
    let text = tokens.join(" ");
    match Matches::parse(&text, v6) {
        Ok(m) => Ok(EntryConditions::Native(m)),
        Err(SyntaxError::Unsupported(_)) => Ok(EntryConditions::ByNft(text)),
        Err(SyntaxError::Invalid(detail)) => Err(PortmapError::Conditions {
            field: if v6 { "conditionsV6" } else { "conditionsV4" },
            detail,
        }),
    }
}

/// Whether some family's conditions are nft syntax that needs the `nft` tool (for STATUS).
pub fn needs_nft_tool(conf: &PortMapConf) -> bool {
    [false, true].into_iter().any(|v6| {
        let c = conf.conditions(v6);
        !crate::config::is_iptables_syntax(c)
            && matches!(entry_conditions(c, v6), Ok(EntryConditions::ByNft(_)))
    })
}

const ENTRY_CHAINS: [(&str, Hook); 2] =
    [("prerouting", Hook::Prerouting), ("output", Hook::Output)];

/// The entry rule of `chain`: `[conditions] fib daddr type local jump hostports_all`, with
/// the anonymous sets its conditions look up.
fn entry_rule(
    fam: Family,
    chain: &str,
    conditions: &Matches,
    next_id: &mut u32,
) -> (Vec<AnonSet>, Rule) {
    let (sets, exprs) = conditions.instantiate(fam, TABLE, next_id);
    let rule = Rule::new(
        fam,
        TABLE,
        chain,
        build::all([
            exprs,
            build::fib_daddr_local(),
            build::verdict(Verdict::Jump(HOSTPORTS_ALL.into())),
        ]),
    );
    (sets, rule)
}

/// The shared objects of one family: the table, its chains, `hostports_all` holding its two
/// jumps and the entry chains their entry rule (unless nft writes it: then they stay as they
/// are until it does). The reference re-adds them and rebuilds the owned chains on every ADD;
/// [`Shared`] writes only what is missing or differs, so an ADD finding them right commits
/// creations only, which leave nothing for the kernel's deferred destroy work.
fn shared_objects(fam: Family, conditions: &EntryConditions) -> Shared {
    let mut s = Shared::new(Table::new(fam, TABLE).with_comment(TABLE_COMMENT));
    let jumps = [HOSTIP_HOSTPORTS, HOSTPORTS]
        .into_iter()
        .map(|target| {
            Rule::new(
                fam,
                TABLE,
                HOSTPORTS_ALL,
                build::verdict(Verdict::Jump(target.into())),
            )
        })
        .collect();
    s.chain(Chain::new(fam, TABLE, HOSTPORTS))
        .chain(Chain::new(fam, TABLE, HOSTIP_HOSTPORTS))
        .owned_chain(Chain::new(fam, TABLE, HOSTPORTS_ALL), Vec::new(), jumps);
    let mut next_id = 1;
    for (chain, hook) in ENTRY_CHAINS {
        let base = Chain::base(fam, TABLE, chain, "nat", hook, DSTNAT, None);
        match conditions {
            EntryConditions::Native(m) => {
                let (sets, rule) = entry_rule(fam, chain, m, &mut next_id);
                s.owned_chain(base, sets, vec![rule]);
            }
            EntryConditions::ByNft(_) => {
                s.chain(base);
            }
        }
    }
    s.chain(Chain::base(
        fam,
        TABLE,
        MASQUERADING,
        "nat",
        Hook::Postrouting,
        SRCNAT,
        None,
    ));
    s
}

/// Rewrites both entry rules with `nft -f` in one nft transaction, for conditions only nft
/// understands.
fn entry_rules_by_nft(fam: Family, conditions: &str) -> Result<(), PortmapError> {
    let mut script = String::new();
    for (chain, _) in ENTRY_CHAINS {
        let name = fam.name();
        script.push_str(&format!(
            "flush chain {name} {TABLE} {chain}\nadd rule {name} {TABLE} {chain} {conditions} fib daddr type local jump {HOSTPORTS_ALL}\n"
        ));
    }
    netkit::netfilter::exec::run_ok(
        "nft",
        &["-f", "-"],
        Some(script.as_bytes()),
        &format!(
            "failed to write the {} portmap entry rules with conditions {conditions:?} (nft syntax this plugin does not encode itself)",
            fam.name()
        ),
    )
    .map(|_| ())
    .map_err(PortmapError::from)
}

/// The per-container rules of one family (each with the attachment's comment).
pub fn container_rules(conf: &PortMapConf, comment: &str, container: IpNetwork) -> Vec<Rule> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let cip = container.ip();
    let rule =
        |chain: &str, exprs: Vec<Expr>| Rule::new(fam, TABLE, chain, exprs).with_comment(comment);
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

/// Handles of the selected rules, per chain, in one family (three small dumps).
fn existing(
    sock: &mut Socket,
    fam: Family,
    selects: &dyn Fn(&Rule) -> bool,
) -> Result<Vec<(&'static str, u64)>, PortmapError> {
    let mut out = Vec::new();
    for chain in CONTAINER_CHAINS {
        for r in sock.rules(fam, TABLE, chain)? {
            if selects(&r) {
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

/// Applies "delete the selected rules, then `extra`" atomically, relisting on races.
fn replace_rules(
    sock: &mut Socket,
    fam: Family,
    selects: &dyn Fn(&Rule) -> bool,
    extra: impl Fn(&mut Socket, &mut Batch) -> Result<(), PortmapError>,
    what: &str,
) -> Result<(), PortmapError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut b = Batch::new();
        for (chain, h) in existing(sock, fam, selects)? {
            b.delete_rule(fam, TABLE, chain, h);
        }
        extra(sock, &mut b)?;
        match sock.commit(&b) {
            Ok(_) => return Ok(()),
            // A race (a rule or chain changed under us): list again, a few times.
            Err(e) if is_race(&e) && attempt < ATTEMPTS => {}
            Err(source) => {
                return Err(PortmapError::Commit {
                    what: what.to_string(),
                    source,
                })
            }
        }
    }
}

/// ADD for one family: one transaction that removes a leftover of an earlier ADD of the same
/// attachment (ours, or one commented with the container ID alone that names one of
/// `addresses`), (re)builds the shared chains and appends the attachment's rules. Another
/// attachment's rules stay where they are: with the same host port on two networks, the
/// one added first keeps answering, as with the reference's iptables chains.
pub fn forward_ports(
    conf: &PortMapConf,
    owner: &Attachment,
    addresses: &[IpAddr],
    container: IpNetwork,
) -> Result<(), PortmapError> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let conditions = entry_conditions(conf.conditions(v6), v6)?;
    let rules = container_rules(conf, &owner.comment(), container);
    let mut sock = Socket::new()?;
    let shared = shared_objects(fam, &conditions);
    let selector = owner.selector(Some(addresses));
    replace_rules(
        &mut sock,
        fam,
        &|r| selector.selects(r),
        |sock, b| {
            shared.plan(sock, b)?;
            for r in &rules {
                b.add_rule(r);
            }
            Ok(())
        },
        "failed to add nftables port mappings",
    )?;
    match &conditions {
        EntryConditions::ByNft(text) => entry_rules_by_nft(fam, text),
        EntryConditions::Native(_) => Ok(()),
    }
}

/// Deletes the selected rules in both families.
fn delete_selected(selector: &dyn Fn(&Rule) -> bool, what: &str) -> Result<(), PortmapError> {
    // A host without nf_tables, or without our tables, has nothing to remove.
    let Ok(mut sock) = Socket::new() else {
        return Ok(());
    };
    for v6 in [false, true] {
        replace_rules(&mut sock, family(v6), selector, |_, _| Ok(()), what)?;
    }
    Ok(())
}

/// DEL: the attachment's rules in both families; `addresses` (prevResult's, when there is
/// one) attribute rules commented with the container ID alone (see [`crate::attachment`]).
pub fn unforward_ports(
    owner: &Attachment,
    addresses: Option<&[IpAddr]>,
) -> Result<(), PortmapError> {
    let selector = owner.selector(addresses);
    delete_selected(
        &|r| selector.selects(r),
        &format!(
            "failed to delete the nftables port mappings of container {} on network {} ({})",
            owner.container_id, owner.network, owner.ifname
        ),
    )
}

/// GC: removes the rules of `network`'s attachments that are not in `valid` ((containerID,
/// ifname) pairs). Rules commented with the container ID alone name no network and are
/// left to DEL.
pub fn gc(network: &str, valid: &[(String, String)]) -> Result<(), PortmapError> {
    let prefix = attachment::network_key_prefix(network);
    let keep: Vec<String> = valid
        .iter()
        .map(|(cid, ifname)| {
            Attachment {
                network,
                container_id: cid,
                ifname,
            }
            .key()
        })
        .collect();
    let stale = |r: &Rule| {
        r.comment().is_some_and(|c| {
            c.starts_with(&prefix) && !keep.iter().any(|k| c.starts_with(k.as_str()))
        })
    };
    delete_selected(
        &stale,
        &format!("failed to delete stale nftables port mappings of network {network}"),
    )
}

/// How many per-container rules an ADD creates for one family (for CHECK).
pub fn expected_rules(conf: &PortMapConf, container: IpNetwork) -> usize {
    container_rules(conf, "", container).len()
}

/// CHECK for one family: the base chains hold their jump and the attachment's rules are there.
pub fn check_ports(
    conf: &PortMapConf,
    owner: &Attachment,
    container: IpNetwork,
) -> Result<(), PortmapError> {
    let v6 = container.is_ipv6();
    let fam = family(v6);
    let mut sock = Socket::new()?;
    for chain in ["prerouting", "output", HOSTPORTS_ALL] {
        if sock.rules(fam, TABLE, chain)?.is_empty() {
            return Err(PortmapError::NftChainMissing {
                family: fam.name(),
                table: TABLE,
                chain,
            });
        }
    }
    let selector: Selector = owner.selector(Some(&[container.ip()]));
    let have = existing(&mut sock, fam, &|r| selector.selects(r))?.len();
    let want = expected_rules(conf, container);
    if have != want {
        return Err(PortmapError::NftRuleCount {
            have,
            want,
            container_id: owner.container_id.to_string(),
            network: owner.network.to_string(),
            ifname: owner.ifname.to_string(),
            family: fam.name(),
            table: TABLE,
        });
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
        let r = container_rules(&conf(), "c", "10.88.0.5/16".parse().unwrap());
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].chain, HOSTPORTS);
        assert_eq!(r[1].chain, HOSTIP_HOSTPORTS);
        assert!(r.iter().all(|r| r.comment().as_deref() == Some("c")));
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

    fn native(text: &str, v6: bool) -> Matches {
        match entry_conditions(&toks(text), v6).unwrap() {
            EntryConditions::Native(m) => m,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn conditions() {
        let m = native("iifname != eth9", false);
        let (sets, exprs) = m.instantiate(Family::Ip, TABLE, &mut 1);
        assert!(sets.is_empty());
        assert_eq!(exprs, build::ifname(true, CmpOp::Neq, "eth9"));
        native("ip saddr 10.0.0.0/8 meta oifname br0", false);
        native("ip6 daddr != fd00::/64", true);
        // Valid nft we do not encode: nft writes the entry rules.
        for other in [
            "tcp dport http",
            "ip ttl 3",
            "ip saddr localhost",
            "th dport 80",
        ] {
            assert_eq!(
                entry_conditions(&toks(other), false).unwrap(),
                EntryConditions::ByNft(other.to_string()),
                "{other}"
            );
        }
        // What nft refuses too.
        for bad in [
            "ip6 saddr fd00::1",
            "ip saddr fd00::1",
            "iif no-such-if0",
            "meta l4proto udp tcp dport 80",
            "ip saddr 10.0.0.9-10.0.0.1",
        ] {
            assert!(entry_conditions(&toks(bad), false).is_err(), "{bad}");
        }
    }

    /// Against nft 1.0.6's traffic for `add rule ip[6] cni_hostport prerouting CONDITIONS fib
    /// daddr type local jump hostports_all` (testdata/*.txt), captured with strace in a
    /// scratch netns where `lo` is ifindex 1, as it is in every netns. The set ids are nft's.
    #[test]
    fn only_unencoded_nft_conditions_need_the_tool() {
        let mut c = conf();
        assert!(!needs_nft_tool(&c));
        c.conditions_v6 = toks("ip6 hoplimit 1");
        assert!(needs_nft_tool(&c));
        c.conditions_v6 = toks("-s fd00::1");
        assert!(!needs_nft_tool(&c));
    }

    #[test]
    fn entry_rules_match_nft() {
        for (text, v6, first_id, golden) in [
            (
                r#"ip saddr != { 192.168.50.2, 10.0.0.0/8 } iifname "eth*" ct state established,related tcp dport { 80, 443 } meta mark and 0xff00 != 0x100"#,
                false,
                3,
                include_str!("../testdata/nft_cond_v4.hex"),
            ),
            (
                r#"ip6 saddr { fd00::/64, fd01::1-fd01::9 } oifname != { "veth0", "veth1" } udp dport 5000-6000 fib saddr type != local meta l4proto { tcp, udp }"#,
                true,
                8,
                include_str!("../testdata/nft_cond_v6.hex"),
            ),
            (
                "iif lo mark 0x10 ct state { new, established } ip daddr 10.1.2.0/23 ip saddr 10.0.0.1-10.0.0.7 tcp sport 1024 tcp dport 8080 ip protocol tcp",
                false,
                0x16,
                include_str!("../testdata/nft_cond_v4b.hex"),
            ),
            (
                "ip daddr != 10.0.0.1-10.0.0.7 meta iifname != eth0 oif lo ct state != invalid fib daddr type { local, broadcast } ip protocol != icmp udp sport != 53 udp dport != 5353",
                false,
                0x18,
                include_str!("../testdata/nft_cond_v4c.hex"),
            ),
        ] {
            let m = native(text, v6);
            let mut id = first_id;
            let (sets, rule) = entry_rule(family(v6), "prerouting", &m, &mut id);
            let mut b = Batch::new();
            for set in &sets {
                b.add_anon_set(set);
            }
            b.add_rule(&rule);
            netkit::netfilter::nf_tables::capture::assert_same_messages(&b, golden);
        }
    }
}
