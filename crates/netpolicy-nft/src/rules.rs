//! The rules: the base chain's, and those of an isolated address's chain (one `return` per
//! clause and port range, then the rate-limited log, then `counter drop`).

use std::net::IpAddr;

use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::expr::ct_state;
use netkit::netfilter::nf_tables::{msg::COMMENT_MAX, POLICY_ACCEPT};
use netkit::netfilter::nf_tables::{Chain, Expr, Family as NftFamily, Hook, Rule, Verdict};
use netpolicy::{ClausePeer, ClausePorts, Direction, Family, Isolation};

use crate::denied_log::log_exprs;
use crate::layout::protocol_number;
use crate::layout::{self, FORWARD_CHAIN, TABLE};

/// The base chain: `type filter hook forward priority 0; policy accept`.
pub fn forward_chain() -> Chain {
    Chain::base(
        NftFamily::Inet,
        TABLE,
        FORWARD_CHAIN,
        "filter",
        Hook::Forward,
        0,
        Some(POLICY_ACCEPT),
    )
}

/// The base chain's rules: replies and related traffic first, then the sender's egress
/// chain, then the receiver's ingress chain (a chain that returns continues with the next).
pub fn forward_rules() -> Vec<Rule> {
    let rule = |exprs| Rule::new(NftFamily::Inet, TABLE, FORWARD_CHAIN, exprs);
    let mut rules = vec![rule(build::all([
        build::ct_state_any(ct_state::ESTABLISHED | ct_state::RELATED),
        build::verdict(Verdict::Accept),
    ]))];
    for (direction, field) in [
        (Direction::Egress, Addr::Saddr),
        (Direction::Ingress, Addr::Daddr),
    ] {
        for family in [Family::V4, Family::V6] {
            let map = layout::map(direction, family);
            rules.push(rule(build::addr_vmap(
                field,
                family == Family::V6,
                &map.name,
            )));
        }
    }
    rules
}

/// An isolated address's chain in one direction.
pub fn target_chain(direction: Direction, addr: IpAddr) -> Chain {
    Chain::new(NftFamily::Inet, TABLE, &layout::chain_name(direction, addr))
}

/// The rules of `addr`'s chain for `direction`: what its clauses allow returns (to the
/// base chain, which goes on with the next check), everything else is logged (rate-limited,
/// a rule of its own so the limit never spares a packet the drop) and counted and dropped.
pub fn target_rules(direction: Direction, addr: IpAddr, isolation: &Isolation) -> Vec<Rule> {
    let chain = layout::chain_name(direction, addr);
    let v6 = addr.is_ipv6();
    // The peer is the source of what comes in, the destination of what goes out.
    let peer_field = match direction {
        Direction::Ingress => Addr::Saddr,
        Direction::Egress => Addr::Daddr,
    };
    let mut rules = Vec::new();
    for clause in &isolation.clauses {
        let peer: Vec<Expr> = match &clause.peer {
            ClausePeer::Any => Vec::new(),
            ClausePeer::InSet(set) => build::addr_in_set(peer_field, v6, set),
            ClausePeer::InAddrPortSet(set) => build::addr_proto_port_in_set(peer_field, v6, set),
        };
        let comment = format!("{} rule {}", clause.policy, clause.rule);
        let mut push = |ports: Vec<Expr>| {
            let exprs = build::all([peer.clone(), ports, build::verdict(Verdict::Return)]);
            rules.push(Rule::new(NftFamily::Inet, TABLE, &chain, exprs).with_comment(&comment));
        };
        match &clause.ports {
            ClausePorts::Any => push(Vec::new()),
            ClausePorts::Ranges(ranges) => {
                for r in ranges {
                    let mut ports = build::l4proto(protocol_number(r.protocol));
                    if (r.first, r.last) != (0, u16::MAX) {
                        ports.extend(build::th_dport(r.first, r.last));
                    }
                    push(ports);
                }
            }
        }
    }
    let policies: Vec<String> = isolation.policies.iter().map(|p| p.to_string()).collect();
    rules.push(Rule::new(
        NftFamily::Inet,
        TABLE,
        &chain,
        log_exprs(direction, addr),
    ));
    rules.push(
        Rule::new(
            NftFamily::Inet,
            TABLE,
            &chain,
            build::all([build::counter(), build::verdict(Verdict::Drop)]),
        )
        .with_comment(&truncate(&policies.join(" "))),
    );
    rules
}

/// At most `COMMENT_MAX` bytes, cut on a character boundary.
fn truncate(text: &str) -> String {
    let mut cut = text.len().min(COMMENT_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use netkit::netfilter::nf_tables::expr::Expr;
    use netpolicy::{Clause, PolicyKey, PortRange, Protocol};

    use super::*;

    fn clause(peer: ClausePeer, ports: ClausePorts) -> Clause {
        Clause {
            policy: Arc::new(PolicyKey {
                namespace: "prod".into(),
                name: "web".into(),
            }),
            rule: 0,
            peer,
            ports,
        }
    }

    #[test]
    fn one_rule_per_port_range_then_the_log_and_the_drop() {
        let range = |protocol, first, last| PortRange {
            protocol,
            first,
            last,
        };
        let iso = Isolation {
            policies: vec![Arc::new(PolicyKey {
                namespace: "prod".into(),
                name: "x".repeat(200),
            })],
            clauses: vec![
                clause(ClausePeer::Any, ClausePorts::Any),
                clause(
                    ClausePeer::InSet("s".into()),
                    ClausePorts::Ranges(vec![
                        range(Protocol::Tcp, 80, 80),
                        range(Protocol::Tcp, 90, 99),
                        range(Protocol::Udp, 0, u16::MAX),
                    ]),
                ),
            ],
        };
        let addr: IpAddr = "10.1.2.3".parse().unwrap();
        let rules = target_rules(Direction::Ingress, addr, &iso);
        assert_eq!(rules.len(), 6);
        assert!(rules.iter().all(|r| r.chain == "ingress-10.1.2.3"));
        assert_eq!(rules[0].exprs, vec![Expr::Verdict(Verdict::Return)]);
        let has_range = |r: &Rule| r.exprs.iter().any(|e| matches!(e, Expr::Range { .. }));
        assert!(!has_range(&rules[1]) && has_range(&rules[2]));
        // The whole of UDP: the set lookup (nfproto, load, lookup), the protocol alone.
        assert_eq!(rules[3].exprs.len(), 4 + 2 + 1);
        assert!(rules[4].verdict().is_none());
        assert!(matches!(
            &rules[4].exprs[1],
            Expr::Log { prefix: Some(p), group: Some(7361), snaplen: Some(128) } if p == "i 10.1.2.3"
        ));
        assert_eq!(rules[5].verdict(), Some(&Verdict::Drop));
        let comment = rules[5].comment().unwrap();
        assert_eq!(comment.len(), COMMENT_MAX);
        assert_eq!(rules[1].comment().as_deref(), Some("prod/web rule 0"));
    }
}
