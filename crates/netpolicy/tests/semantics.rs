//! The API's semantics, scenario by scenario: compile a small cluster, then ask `explain`
//! and look at the plan's sets and clauses.

mod common;

use common::*;
use netpolicy::{
    compile, compile_for, explain, ClausePeer, ClausePorts, Cluster, Element, Plan, PortRange,
    Protocol, SetKind, Side, TargetChange,
};

fn allowed(plan: &Plan, from: &str, to: &str, protocol: Protocol, port: u16) -> bool {
    explain(plan, ip(from), ip(to), protocol, port).allowed()
}

fn plan(cluster: &Cluster) -> Plan {
    let c = compile(cluster);
    assert!(c.refused.is_empty(), "{:?}", c.refused);
    c.plan
}

/// Namespaces `prod` (team a) and `dev` (team b); pods web, db in prod and tool in dev.
fn base() -> Cluster {
    Cluster {
        namespaces: vec![ns("prod", &[("team", "a")]), ns("dev", &[("team", "b")])],
        pods: vec![
            pod("prod", "web", &[("app", "web")], &["10.0.0.1"]),
            pod("prod", "db", &[("app", "db")], &["10.0.0.2"]),
            pod("dev", "tool", &[("app", "tool")], &["10.0.1.1"]),
        ],
        policies: vec![],
    }
}

const WEB: &str = "10.0.0.1";
const DB: &str = "10.0.0.2";
const TOOL: &str = "10.0.1.1";
const OUTSIDE: &str = "192.0.2.9";

#[test]
fn no_policy_everything_allowed() {
    let p = plan(&base());
    assert!(p.targets.is_empty());
    let v = explain(&p, ip(WEB), ip(DB), Protocol::Tcp, 5432);
    assert!(v.allowed());
    assert!(matches!(v.egress, Side::NotIsolated(_)));
    assert!(matches!(v.ingress, Side::NotIsolated(_)));
}

#[test]
fn default_deny_ingress() {
    let mut c = base();
    c.policies.push(policy("prod", "deny", sel(&[])));
    let p = plan(&c);
    assert!(!allowed(&p, TOOL, DB, Protocol::Tcp, 5432));
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 5432));
    assert!(!allowed(&p, OUTSIDE, WEB, Protocol::Udp, 53));
    // Egress is not isolated; dev is not touched.
    assert!(allowed(&p, WEB, TOOL, Protocol::Tcp, 22));
    assert!(allowed(&p, DB, OUTSIDE, Protocol::Tcp, 443));
    let t = &p.targets[&ip(DB)];
    assert!(t.ingress.isolated() && t.ingress.clauses.is_empty());
    assert!(!t.egress.isolated());
    let v = explain(&p, ip(TOOL), ip(DB), Protocol::Tcp, 5432);
    assert_eq!(
        v.to_string(),
        "10.0.1.1 -> 10.0.0.2:5432 TCP: denied\n  \
         egress from dev/tool (10.0.1.1): allowed: not isolated, no policy selects it\n  \
         ingress to prod/db (10.0.0.2): denied: isolated by prod/deny; none allows it"
    );
}

#[test]
fn default_deny_egress() {
    let mut c = base();
    c.policies
        .push(types(policy("prod", "deny-out", sel(&[])), &["Egress"]));
    let p = plan(&c);
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 5432));
    assert!(!allowed(&p, WEB, OUTSIDE, Protocol::Tcp, 443));
    assert!(allowed(&p, TOOL, DB, Protocol::Tcp, 5432));
    let v = explain(&p, ip(WEB), ip(OUTSIDE), Protocol::Tcp, 443);
    assert!(matches!(v.ingress, Side::NotAPod));
    assert!(matches!(v.egress, Side::Denied { .. }));
}

#[test]
fn allow_all_rule() {
    let mut c = base();
    let mut p = policy("prod", "all", sel(&[]));
    p.ingress.push(rule(vec![], vec![]));
    c.policies.push(p);
    let p = plan(&c);
    assert!(allowed(&p, OUTSIDE, DB, Protocol::Sctp, 1));
    assert_eq!(p.targets[&ip(DB)].ingress.clauses[0].peer, ClausePeer::Any);
    assert_eq!(
        p.targets[&ip(DB)].ingress.clauses[0].ports,
        ClausePorts::Any
    );
    // No peer given, no set made.
    assert!(p.sets.is_empty());
}

#[test]
fn several_policies_union() {
    let mut c = base();
    let mut a = policy("prod", "from-web", sel(&[("app", "db")]));
    a.ingress.push(rule(
        vec![tcp(5432)],
        vec![pods_peer(sel(&[("app", "web")]))],
    ));
    let mut b = policy("prod", "from-dev", sel(&[("app", "db")]));
    b.ingress
        .push(rule(vec![tcp(9187)], vec![ns_peer(sel(&[("team", "b")]))]));
    c.policies.extend([a, b]);
    let p = plan(&c);
    assert!(allowed(&p, WEB, DB, Protocol::Tcp, 5432));
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 9187));
    assert!(allowed(&p, TOOL, DB, Protocol::Tcp, 9187));
    assert!(!allowed(&p, TOOL, DB, Protocol::Tcp, 5432));
    let t = &p.targets[&ip(DB)];
    assert_eq!(t.ingress.policies.len(), 2);
    let v = explain(&p, ip(TOOL), ip(DB), Protocol::Tcp, 9187);
    assert_eq!(
        v.ingress,
        Side::Allowed {
            pod: t.pod.clone(),
            policy: t.ingress.policies[0].clone(),
            rule: 0
        }
    );
    assert!(v
        .to_string()
        .contains("ingress to prod/db (10.0.0.2): allowed by prod/from-dev ingress rule 0"));
    let v = explain(&p, ip(TOOL), ip(DB), Protocol::Tcp, 1);
    assert!(v
        .to_string()
        .ends_with("denied: isolated by prod/from-dev, prod/from-web; none allows it"));
    // web is selected by neither.
    assert!(!p.targets.contains_key(&ip(WEB)));
}

#[test]
fn peer_selectors() {
    let mut c = base();
    c.pods
        .push(pod("dev", "web", &[("app", "web")], &["10.0.1.2"]));
    c.pods
        .push(pod("other", "web", &[("app", "web")], &["10.0.2.2"]));
    // Pod selector alone: prod's web only.
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress
        .push(rule(vec![tcp(1)], vec![pods_peer(sel(&[("app", "web")]))]));
    // Namespace selector alone: every pod of dev.
    a.ingress
        .push(rule(vec![tcp(2)], vec![ns_peer(sel(&[("team", "b")]))]));
    // Both: web pods of any namespace with a team label (not `other`, which has no object).
    a.ingress.push(rule(
        vec![tcp(3)],
        vec![both_peer(
            sel(&[("app", "web")]),
            expr("team", "Exists", &[]),
        )],
    ));
    // An empty namespace selector: every namespace, `other` too.
    a.ingress.push(rule(
        vec![tcp(4)],
        vec![both_peer(sel(&[("app", "web")]), sel(&[]))],
    ));
    c.policies.push(a);
    let p = plan(&c);
    let t = |from: &str, port| allowed(&p, from, DB, Protocol::Tcp, port);
    assert!(t(WEB, 1) && !t("10.0.1.2", 1) && !t("10.0.2.2", 1));
    assert!(!t(WEB, 2) && t("10.0.1.2", 2) && t(TOOL, 2) && !t("10.0.2.2", 2));
    assert!(t(WEB, 3) && t("10.0.1.2", 3) && !t(TOOL, 3) && !t("10.0.2.2", 3));
    assert!(t(WEB, 4) && t("10.0.1.2", 4) && t("10.0.2.2", 4) && !t(TOOL, 4));
}

#[test]
fn match_expressions() {
    let mut c = base();
    let mut a = policy("prod", "a", expr("app", "NotIn", &["web"]));
    a.ingress.push(rule(
        vec![],
        vec![pods_peer(expr("app", "In", &["web", "x"]))],
    ));
    c.policies.push(a);
    let p = plan(&c);
    // NotIn web selects db (and would select a pod without the label).
    assert!(p.targets.contains_key(&ip(DB)) && !p.targets.contains_key(&ip(WEB)));
    assert!(allowed(&p, WEB, DB, Protocol::Udp, 53));
}

#[test]
fn ip_block_except() {
    let mut c = base();
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress.push(rule(
        vec![],
        vec![
            block("192.0.2.0/24", &["192.0.2.0/28", "192.0.2.128/25"]),
            block("198.51.100.7/32", &[]),
        ],
    ));
    c.policies.push(a);
    let p = plan(&c);
    assert!(allowed(&p, "192.0.2.16", DB, Protocol::Tcp, 1));
    assert!(allowed(&p, "192.0.2.127", DB, Protocol::Tcp, 1));
    assert!(!allowed(&p, "192.0.2.15", DB, Protocol::Tcp, 1));
    assert!(!allowed(&p, "192.0.2.128", DB, Protocol::Tcp, 1));
    assert!(allowed(&p, "198.51.100.7", DB, Protocol::Tcp, 1));
    assert!(!allowed(&p, "198.51.100.8", DB, Protocol::Tcp, 1));
    // One interval set (IPv4 only: the blocks are IPv4), its intervals carved and sorted.
    assert_eq!(p.sets.len(), 1);
    let set = p.sets.values().next().expect("one set");
    assert_eq!(set.kind, SetKind::Intervals);
    let got: Vec<String> = set.elements.iter().map(|e| e.to_string()).collect();
    assert_eq!(got, ["192.0.2.16-192.0.2.127", "198.51.100.7-198.51.100.7"]);
}

#[test]
fn ip_block_matches_pod_addresses_too() {
    let mut c = base();
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress
        .push(rule(vec![], vec![block("10.0.1.0/24", &[])]));
    c.policies.push(a);
    let p = plan(&c);
    assert!(allowed(&p, TOOL, DB, Protocol::Tcp, 1));
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 1));
}

#[test]
fn end_port() {
    let mut c = base();
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress.push(rule(
        vec![port("TCP", 8000, Some(8010)), tcp(8011), tcp(9000)],
        vec![],
    ));
    c.policies.push(a);
    let p = plan(&c);
    for (port, ok) in [
        (7999, false),
        (8000, true),
        (8005, true),
        (8011, true),
        (8012, false),
        (9000, true),
    ] {
        assert_eq!(allowed(&p, WEB, DB, Protocol::Tcp, port), ok, "{port}");
    }
    assert!(!allowed(&p, WEB, DB, Protocol::Udp, 8005));
    // 8000-8010 and 8011 touch: merged.
    assert_eq!(
        p.targets[&ip(DB)].ingress.clauses[0].ports,
        ClausePorts::Ranges(vec![
            PortRange {
                protocol: Protocol::Tcp,
                first: 8000,
                last: 8011
            },
            PortRange {
                protocol: Protocol::Tcp,
                first: 9000,
                last: 9000
            },
        ])
    );
}

#[test]
fn sctp_and_udp_and_protocol_only() {
    let mut c = base();
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress.push(rule(
        vec![
            port("SCTP", 3868, None),
            netpolicy::PolicyPort {
                protocol: Some("UDP".into()),
                port: None,
                end_port: None,
            },
        ],
        vec![],
    ));
    c.policies.push(a);
    let p = plan(&c);
    assert!(allowed(&p, WEB, DB, Protocol::Sctp, 3868));
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 3868));
    assert!(!allowed(&p, WEB, DB, Protocol::Sctp, 3869));
    assert!(allowed(&p, WEB, DB, Protocol::Udp, 1));
    assert!(allowed(&p, WEB, DB, Protocol::Udp, 65535));
}

#[test]
fn named_ports_ingress_resolved_per_target() {
    let mut c = base();
    c.pods = vec![
        with_port(
            pod("prod", "a", &[("app", "api")], &["10.0.0.10"]),
            "http",
            Protocol::Tcp,
            8080,
        ),
        with_port(
            pod("prod", "b", &[("app", "api")], &["10.0.0.11"]),
            "http",
            Protocol::Tcp,
            9090,
        ),
        // Named http but UDP: a TCP named port does not resolve on it.
        with_port(
            pod("prod", "c", &[("app", "api")], &["10.0.0.12"]),
            "http",
            Protocol::Udp,
            8080,
        ),
        pod("prod", "client", &[], &["10.0.0.20"]),
    ];
    let mut a = policy("prod", "a", sel(&[("app", "api")]));
    a.ingress.push(rule(vec![named(None, "http")], vec![]));
    c.policies.push(a);
    let p = plan(&c);
    let client = "10.0.0.20";
    assert!(allowed(&p, client, "10.0.0.10", Protocol::Tcp, 8080));
    assert!(!allowed(&p, client, "10.0.0.10", Protocol::Tcp, 9090));
    assert!(allowed(&p, client, "10.0.0.11", Protocol::Tcp, 9090));
    assert!(!allowed(&p, client, "10.0.0.11", Protocol::Tcp, 8080));
    assert!(!allowed(&p, client, "10.0.0.12", Protocol::Udp, 8080));
    assert!(!allowed(&p, client, "10.0.0.12", Protocol::Tcp, 8080));
    // c is isolated but has no clause: its port of that name is not TCP.
    let t = &p.targets[&ip("10.0.0.12")];
    assert!(t.ingress.isolated() && t.ingress.clauses.is_empty());
}

#[test]
fn named_ports_egress_resolved_per_destination() {
    let mut c = base();
    c.pods = vec![
        with_port(
            pod("prod", "a", &[("app", "api")], &["10.0.0.10", "fd00::10"]),
            "http",
            Protocol::Tcp,
            8080,
        ),
        with_port(
            pod("prod", "b", &[("app", "api")], &["10.0.0.11"]),
            "http",
            Protocol::Tcp,
            9090,
        ),
        with_port(
            pod("dev", "x", &[("app", "api")], &["10.0.1.10"]),
            "http",
            Protocol::Tcp,
            7070,
        ),
        pod("prod", "client", &[("role", "client")], &["10.0.0.20"]),
    ];
    let mut a = policy("prod", "out", sel(&[("role", "client")]));
    a.egress.push(rule(
        vec![named(None, "http"), tcp(53)],
        vec![pods_peer(sel(&[("app", "api")])), block("10.0.1.0/24", &[])],
    ));
    c.policies.push(a);
    let p = plan(&c);
    let client = "10.0.0.20";
    assert!(allowed(&p, client, "10.0.0.10", Protocol::Tcp, 8080));
    assert!(!allowed(&p, client, "10.0.0.10", Protocol::Tcp, 9090));
    assert!(allowed(&p, client, "10.0.0.11", Protocol::Tcp, 9090));
    assert!(!allowed(&p, client, "10.0.0.11", Protocol::Tcp, 8080));
    // Through the block: a pod inside it, its own port of that name.
    assert!(allowed(&p, client, "10.0.1.10", Protocol::Tcp, 7070));
    assert!(!allowed(&p, client, "10.0.1.10", Protocol::Tcp, 8080));
    // The numeric port goes to every peer, pods and block alike, not elsewhere.
    assert!(allowed(&p, client, "10.0.0.11", Protocol::Tcp, 53));
    assert!(allowed(&p, client, "10.0.1.99", Protocol::Tcp, 53));
    assert!(!allowed(&p, client, OUTSIDE, Protocol::Tcp, 53));
    // The (address, protocol, port) set of the rule, per family.
    let np4: Vec<_> = p
        .sets
        .values()
        .filter(|s| s.kind == SetKind::AddrPorts && s.family == netpolicy::Family::V4)
        .flat_map(|s| s.elements.iter().copied())
        .collect();
    assert_eq!(
        np4,
        [
            Element::AddrPort(ip("10.0.0.10"), Protocol::Tcp, 8080),
            Element::AddrPort(ip("10.0.0.11"), Protocol::Tcp, 9090),
            Element::AddrPort(ip("10.0.1.10"), Protocol::Tcp, 7070),
        ]
    );
    let np6 = p
        .sets
        .values()
        .find(|s| s.kind == SetKind::AddrPorts && s.family == netpolicy::Family::V6)
        .expect("an IPv6 named-port set");
    assert_eq!(
        np6.elements.iter().copied().collect::<Vec<_>>(),
        [Element::AddrPort(ip("fd00::10"), Protocol::Tcp, 8080)]
    );
}

#[test]
fn named_port_egress_without_to_reaches_any_pod_with_that_port() {
    let mut c = base();
    c.pods.push(with_port(
        pod("dev", "svc", &[], &["10.0.1.5"]),
        "metrics",
        Protocol::Tcp,
        9100,
    ));
    let mut a = policy("prod", "out", sel(&[("app", "web")]));
    a.egress
        .push(rule(vec![named(Some("TCP"), "metrics")], vec![]));
    c.policies.push(a);
    let p = plan(&c);
    assert!(allowed(&p, WEB, "10.0.1.5", Protocol::Tcp, 9100));
    assert!(!allowed(&p, WEB, "10.0.1.5", Protocol::Tcp, 9101));
    // No pod's address, no named port.
    assert!(!allowed(&p, WEB, OUTSIDE, Protocol::Tcp, 9100));
}

#[test]
fn policy_types_defaults_and_explicit() {
    let mut c = base();
    // Egress rules, no policyTypes: both directions isolated.
    let mut a = policy("prod", "a", sel(&[("app", "web")]));
    a.egress.push(rule(
        vec![tcp(5432)],
        vec![pods_peer(sel(&[("app", "db")]))],
    ));
    // Explicit Ingress only: its egress rules are ignored.
    let mut b = types(policy("prod", "b", sel(&[("app", "db")])), &["Ingress"]);
    b.egress.push(rule(vec![], vec![]));
    b.ingress
        .push(rule(vec![], vec![pods_peer(sel(&[("app", "web")]))]));
    c.policies.extend([a, b]);
    let p = plan(&c);
    let web = &p.targets[&ip(WEB)];
    assert!(web.ingress.isolated() && web.egress.isolated());
    assert!(allowed(&p, WEB, DB, Protocol::Tcp, 5432));
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 80));
    assert!(!allowed(&p, TOOL, WEB, Protocol::Tcp, 80));
    let db = &p.targets[&ip(DB)];
    assert!(db.ingress.isolated() && !db.egress.isolated());
    assert!(allowed(&p, DB, OUTSIDE, Protocol::Tcp, 443));
}

#[test]
fn host_network_pods() {
    let mut c = base();
    let mut node_agent = pod("prod", "agent", &[("app", "db")], &["172.16.0.1"]);
    node_agent.host_network = true;
    c.pods.push(node_agent);
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress.push(rule(vec![], vec![pods_peer(sel(&[]))]));
    a.egress.push(rule(vec![], vec![pods_peer(sel(&[]))]));
    let mut b = policy("prod", "b", sel(&[("app", "web")]));
    b.ingress
        .push(rule(vec![], vec![block("172.16.0.0/24", &[])]));
    c.policies.extend([a, b]);
    let p = plan(&c);
    // Never a target.
    assert!(!p.targets.contains_key(&ip("172.16.0.1")));
    assert!(!p.pods.contains_key(&ip("172.16.0.1")));
    // As a peer, no selector matches it: db (selecting every pod of prod) refuses it...
    assert!(!allowed(&p, "172.16.0.1", DB, Protocol::Tcp, 1));
    assert!(!allowed(&p, DB, "172.16.0.1", Protocol::Tcp, 1));
    assert!(allowed(&p, WEB, DB, Protocol::Tcp, 1));
    // ...an ipBlock does.
    assert!(allowed(&p, "172.16.0.1", WEB, Protocol::Tcp, 1));
    let v = explain(&p, ip("172.16.0.1"), ip(WEB), Protocol::Tcp, 1);
    assert!(matches!(v.egress, Side::NotAPod));
    assert!(!p
        .sets
        .values()
        .any(|s| s.elements.contains(&Element::Addr(ip("172.16.0.1")))));
}

#[test]
fn ipv6_and_dual_stack() {
    let c = Cluster {
        namespaces: vec![ns("prod", &[])],
        pods: vec![
            pod("prod", "web", &[("app", "web")], &["10.0.0.1", "fd00::1"]),
            pod("prod", "db", &[("app", "db")], &["10.0.0.2", "fd00::2"]),
            pod("prod", "v6only", &[("app", "web")], &["fd00::3"]),
        ],
        policies: vec![{
            let mut a = policy("prod", "db", sel(&[("app", "db")]));
            a.ingress.push(rule(
                vec![tcp(5432)],
                vec![pods_peer(sel(&[("app", "web")]))],
            ));
            a.ingress.push(rule(
                vec![tcp(9187)],
                vec![block("2001:db8::/32", &["2001:db8:1::/48"])],
            ));
            a
        }],
    };
    let p = plan(&c);
    assert!(allowed(&p, "fd00::1", "fd00::2", Protocol::Tcp, 5432));
    assert!(allowed(&p, "fd00::3", "fd00::2", Protocol::Tcp, 5432));
    assert!(allowed(&p, "10.0.0.1", "10.0.0.2", Protocol::Tcp, 5432));
    assert!(!allowed(&p, "fd00::1", "fd00::2", Protocol::Tcp, 9187));
    assert!(allowed(&p, "2001:db8::1", "fd00::2", Protocol::Tcp, 9187));
    assert!(!allowed(
        &p,
        "2001:db8:1::1",
        "fd00::2",
        Protocol::Tcp,
        9187
    ));
    // The IPv4 address of db has no clause of the IPv6 block.
    assert_eq!(p.targets[&ip("10.0.0.2")].ingress.clauses.len(), 1);
    assert_eq!(p.targets[&ip("fd00::2")].ingress.clauses.len(), 2);
    // Families in separate sets.
    let v6 = p
        .sets
        .values()
        .find(|s| s.kind == SetKind::Addresses && s.family == netpolicy::Family::V6)
        .expect("an IPv6 pod set");
    assert_eq!(
        v6.elements.iter().copied().collect::<Vec<_>>(),
        [Element::Addr(ip("fd00::1")), Element::Addr(ip("fd00::3"))]
    );
    let v = explain(&p, ip("2001:db8:1::1"), ip("fd00::2"), Protocol::Tcp, 9187);
    assert!(v
        .to_string()
        .starts_with("2001:db8:1::1 -> [fd00::2]:9187 TCP: denied"));
}

#[test]
fn traffic_within_one_pod_is_allowed() {
    let mut c = base();
    c.pods
        .push(pod("prod", "dual", &[], &["10.0.0.9", "fd00::9"]));
    c.policies.push(policy("prod", "deny", sel(&[])));
    c.policies
        .push(types(policy("prod", "deny-out", sel(&[])), &["Egress"]));
    let p = plan(&c);
    let v = explain(&p, ip("10.0.0.9"), ip("10.0.0.9"), Protocol::Tcp, 1);
    assert!(v.allowed() && matches!(v.egress, Side::SamePod(_)));
    assert!(!allowed(&p, WEB, DB, Protocol::Tcp, 1));
}

/// A cluster where `dev`'s pods reach db through a namespace selector and `other`'s do not.
fn namespace_cluster() -> Cluster {
    let mut c = base();
    c.namespaces.push(ns("other", &[("team", "c")]));
    c.pods
        .push(pod("other", "x", &[], &["10.0.2.1", "fd00:2::1"]));
    let mut a = policy("prod", "from-team-b", sel(&[("app", "db")]));
    a.ingress
        .push(rule(vec![tcp(5432)], vec![ns_peer(sel(&[("team", "b")]))]));
    c.policies.push(a);
    c
}

#[test]
fn namespace_label_change_is_only_element_changes() {
    let before = namespace_cluster();
    let old = plan(&before);
    assert!(!allowed(&old, "10.0.2.1", DB, Protocol::Tcp, 5432));
    let mut after = before.clone();
    after.namespaces[2].labels = labels(&[("team", "b")]);
    let new = plan(&after);
    assert!(allowed(&new, "10.0.2.1", DB, Protocol::Tcp, 5432));
    let changes = Plan::diff(&old, &new);
    assert!(changes.only_elements(), "{changes:?}");
    let added: Vec<Element> = changes
        .elements
        .values()
        .flat_map(|e| e.added.clone())
        .collect();
    assert_eq!(
        added,
        [
            Element::Addr(ip("10.0.2.1")),
            Element::Addr(ip("fd00:2::1"))
        ]
    );
    assert!(changes.elements.values().all(|e| e.removed.is_empty()));
    // And back: the same elements removed.
    let back = Plan::diff(&new, &old);
    assert!(back.only_elements());
    let removed: Vec<Element> = back
        .elements
        .values()
        .flat_map(|e| e.removed.clone())
        .collect();
    assert_eq!(removed, added);
    // Nothing changed, nothing to do.
    assert!(Plan::diff(&old, &plan(&before)).is_empty());
}

#[test]
fn peer_pod_coming_and_going_is_only_element_changes() {
    let before = namespace_cluster();
    let old = plan(&before);
    let mut after = before.clone();
    // A new dev pod, with a named port (named-port sets too), and dev's tool gone.
    after.pods.push(with_port(
        pod("dev", "new", &[], &["10.0.1.7"]),
        "http",
        Protocol::Tcp,
        80,
    ));
    after.pods.retain(|p| p.name != "tool");
    let mut out = policy("prod", "out", sel(&[("app", "db")]));
    out.egress.push(rule(
        vec![named(None, "http")],
        vec![ns_peer(sel(&[("team", "b")]))],
    ));
    let mut before_np = before.clone();
    before_np.policies.push(out.clone());
    after.policies.push(out);
    let old = Plan::diff(&old, &plan(&before_np)); // the policy itself adds sets and clauses
    assert!(!old.sets_created.is_empty() && !old.targets.is_empty());
    let changes = Plan::diff(&plan(&before_np), &plan(&after));
    assert!(changes.only_elements(), "{changes:?}");
    let mut all: Vec<String> = changes
        .elements
        .values()
        .flat_map(|e| {
            e.added
                .iter()
                .map(|x| format!("+{x}"))
                .chain(e.removed.iter().map(|x| format!("-{x}")))
        })
        .collect();
    all.sort();
    assert_eq!(all, ["+10.0.1.7", "+10.0.1.7 . tcp . 80", "-10.0.1.1"]);
}

#[test]
fn target_coming_and_policy_change_show_as_target_changes() {
    let before = namespace_cluster();
    let mut after = before.clone();
    after
        .pods
        .push(pod("prod", "db2", &[("app", "db")], &["10.0.0.3"]));
    let changes = Plan::diff(&plan(&before), &plan(&after));
    assert!(changes.sets_created.is_empty() && changes.sets_deleted.is_empty());
    assert!(matches!(
        changes.targets.get(&ip("10.0.0.3")),
        Some(TargetChange::Added(_))
    ));
    // A policy's port changed: its targets' clauses change, no set does.
    let mut ported = before.clone();
    ported.policies[0].ingress[0].ports = vec![tcp(5433)];
    let changes = Plan::diff(&plan(&before), &plan(&ported));
    assert!(changes.sets_created.is_empty() && changes.elements.is_empty());
    assert!(matches!(
        changes.targets.get(&ip(DB)),
        Some(TargetChange::Changed(_))
    ));
    // The policy deleted: its sets deleted, its target gone.
    let mut gone = before.clone();
    gone.policies.clear();
    let changes = Plan::diff(&plan(&before), &plan(&gone));
    assert_eq!(changes.sets_deleted.len(), 2);
    assert!(matches!(
        changes.targets.get(&ip(DB)),
        Some(TargetChange::Removed)
    ));
}

#[test]
fn deterministic_whatever_the_input_order() {
    let mut c = namespace_cluster();
    let mut a = policy("dev", "z", sel(&[]));
    a.egress.push(rule(
        vec![named(None, "http"), tcp(1)],
        vec![block("0.0.0.0/0", &["10.0.0.0/8"])],
    ));
    c.policies.push(a);
    let p1 = plan(&c);
    let mut r = c.clone();
    r.pods.reverse();
    r.policies.reverse();
    r.namespaces.reverse();
    assert_eq!(p1, plan(&r));
    assert!(Plan::diff(&p1, &plan(&r)).is_empty());
}

#[test]
fn refused_policy_leaves_the_others() {
    let mut c = base();
    let mut bad = policy("prod", "bad", sel(&[]));
    bad.ingress
        .push(rule(vec![port("TCP", 90, Some(80))], vec![]));
    c.policies.push(bad);
    let mut good = policy("prod", "good", sel(&[("app", "db")]));
    good.ingress.push(rule(vec![tcp(5432)], vec![]));
    c.policies.push(good);
    let compiled = compile(&c);
    assert_eq!(compiled.refused.len(), 1);
    assert_eq!(
        compiled.refused[0].to_string(),
        "policy prod/bad: spec.ingress[0].ports[0].endPort: endPort 80 is below port 90"
    );
    // The refused policy isolates nothing.
    assert!(!compiled.plan.targets.contains_key(&ip(WEB)));
    assert!(allowed(&compiled.plan, WEB, DB, Protocol::Tcp, 5432));
}

#[test]
fn duplicate_policy_refused_by_set_name() {
    let mut c = namespace_cluster();
    let dup = c.policies[0].clone();
    c.policies.push(dup);
    let compiled = compile(&c);
    assert_eq!(compiled.refused.len(), 1);
    assert!(compiled.refused[0]
        .to_string()
        .contains("is already another set's"));
}

#[test]
fn compile_for_local_pods_keeps_all_sets() {
    let c = namespace_cluster();
    let all = plan(&c);
    let local = compile_for(&c, |p| p.name != "db").plan;
    assert_eq!(all.sets, local.sets);
    assert!(local.targets.is_empty());
    assert!(!all.targets.is_empty());
}

#[test]
fn an_address_claimed_twice_belongs_to_the_first_pod() {
    let mut c = base();
    c.pods
        .push(pod("prod", "aaa-stale", &[("app", "web")], &[DB]));
    let mut a = policy("prod", "a", sel(&[("app", "db")]));
    a.ingress.push(rule(vec![tcp(1)], vec![]));
    c.policies.push(a);
    let p = plan(&c);
    // prod/aaa-stale sorts first: it owns 10.0.0.2, and it is not selected.
    assert_eq!(p.pods[&ip(DB)].name, "aaa-stale");
    assert!(p.targets.is_empty());
}

#[test]
fn model_reads_api_json() {
    let json = r#"{
        "namespace": "prod", "name": "db",
        "podSelector": {"matchLabels": {"app": "db"}},
        "policyTypes": ["Ingress"],
        "ingress": [{
            "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                     {"namespaceSelector": {}, "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}],
            "ports": [{"protocol": "SCTP", "port": 3868}, {"port": "http"}, {"port": 8000, "endPort": 8080}]
        }]
    }"#;
    let p: netpolicy::Policy = serde_json::from_str(json).expect("policy JSON");
    assert_eq!(p.ingress[0].peers.len(), 2);
    assert!(p.ingress[0].peers[1].namespace_selector.is_some());
    assert_eq!(
        p.ingress[0].ports[1].port,
        Some(netpolicy::PortSpec::Name("http".into()))
    );
    assert_eq!(p.ingress[0].ports[2].end_port, Some(8080));
    assert_eq!(netpolicy::validate::validate(&p), Ok(()));
}
