//! `explain` on the compiled plan against a naive evaluator of the API's semantics written
//! directly on the input model, for random small clusters (a seeded generator: the same
//! clusters on every run).

mod common;

use std::net::IpAddr;

use common::*;
use ipnetwork::IpNetwork;
use netpolicy::{
    compile, explain, Cluster, LabelSelector, Labels, Peer, Pod, Policy, PolicyPort, PortSpec,
    Protocol, Requirement, Rule,
};

// ---- the naive evaluator ----

fn selector_matches(s: &LabelSelector, labels: &Labels) -> bool {
    for (k, v) in &s.match_labels {
        if labels.get(k) != Some(v) {
            return false;
        }
    }
    for r in &s.match_expressions {
        let have = labels.get(&r.key);
        let ok = match r.operator.as_str() {
            "In" => have.is_some_and(|v| r.values.contains(v)),
            "NotIn" => !have.is_some_and(|v| r.values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => panic!("generator made operator {other}"),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// The pod (outside the host network) that has `addr`.
fn pod_of(c: &Cluster, addr: IpAddr) -> Option<&Pod> {
    c.pods
        .iter()
        .find(|p| !p.host_network && p.ips.contains(&addr))
}

fn ns_labels(c: &Cluster, name: &str) -> Labels {
    c.namespaces
        .iter()
        .find(|n| n.name == name)
        .map(|n| n.labels.clone())
        .unwrap_or_default()
}

fn has_type(p: &Policy, t: &str) -> bool {
    match &p.policy_types {
        Some(types) if !types.is_empty() => types.iter().any(|x| x == t),
        _ => t == "Ingress" || !p.egress.is_empty(),
    }
}

fn peer_matches(c: &Cluster, policy: &Policy, peer: &Peer, addr: IpAddr) -> bool {
    if let Some(b) = &peer.ip_block {
        let cidr: IpNetwork = b.cidr.parse().expect("generated cidr");
        return cidr.contains(addr)
            && !b.except.iter().any(|e| {
                let e: IpNetwork = e.parse().expect("generated except");
                e.contains(addr)
            });
    }
    let Some(pod) = pod_of(c, addr) else {
        return false;
    };
    let ns_ok = match &peer.namespace_selector {
        Some(s) => selector_matches(s, &ns_labels(c, &pod.namespace)),
        None => pod.namespace == policy.namespace,
    };
    let pod_ok = match &peer.pod_selector {
        Some(s) => selector_matches(s, &pod.labels),
        None => true,
    };
    ns_ok && pod_ok
}

fn port_matches(p: &PolicyPort, named_on: Option<&Pod>, protocol: Protocol, port: u16) -> bool {
    let proto = p.protocol.as_deref().unwrap_or("TCP");
    if proto != protocol.as_str() {
        return false;
    }
    match &p.port {
        None => true,
        Some(PortSpec::Number(n)) => {
            let last = p.end_port.unwrap_or(*n);
            i32::from(port) >= *n && i32::from(port) <= last
        }
        Some(PortSpec::Name(name)) => named_on.is_some_and(|pod| {
            pod.ports
                .iter()
                .any(|np| &np.name == name && np.protocol == protocol && np.port == port)
        }),
    }
}

fn rule_allows(
    c: &Cluster,
    policy: &Policy,
    rule: &Rule,
    peer: IpAddr,
    named_on: Option<&Pod>,
    protocol: Protocol,
    port: u16,
) -> bool {
    (rule.peers.is_empty() || rule.peers.iter().any(|p| peer_matches(c, policy, p, peer)))
        && (rule.ports.is_empty()
            || rule
                .ports
                .iter()
                .any(|p| port_matches(p, named_on, protocol, port)))
}

/// Whether `target`'s policies of direction `t` let the packet through (`peer` at the other
/// end; named ports resolved on the destination).
fn side_allows(
    c: &Cluster,
    t: &str,
    target: IpAddr,
    peer: IpAddr,
    protocol: Protocol,
    port: u16,
) -> bool {
    let Some(pod) = pod_of(c, target) else {
        return true;
    };
    let selecting: Vec<&Policy> = c
        .policies
        .iter()
        .filter(|p| p.namespace == pod.namespace && selector_matches(&p.pod_selector, &pod.labels))
        .filter(|p| has_type(p, t))
        .collect();
    if selecting.is_empty() {
        return true;
    }
    let destination = if t == "Ingress" {
        Some(pod)
    } else {
        pod_of(c, peer)
    };
    selecting.iter().any(|p| {
        let rules = if t == "Ingress" {
            &p.ingress
        } else {
            &p.egress
        };
        rules
            .iter()
            .any(|r| rule_allows(c, p, r, peer, destination, protocol, port))
    })
}

fn naive(c: &Cluster, from: IpAddr, to: IpAddr, protocol: Protocol, port: u16) -> (bool, bool) {
    if let (Some(a), Some(b)) = (pod_of(c, from), pod_of(c, to)) {
        if a.namespace == b.namespace && a.name == b.name {
            return (true, true);
        }
    }
    (
        side_allows(c, "Egress", from, to, protocol, port),
        side_allows(c, "Ingress", to, from, protocol, port),
    )
}

// ---- the generator ----

const NAMESPACES: [&str; 3] = ["a", "b", "c"];
const PORTS: [u16; 7] = [53, 80, 443, 3868, 8005, 8080, 9090];

fn random_labels(rng: &mut Rng, keys: &[(&str, &[&str])]) -> Labels {
    let mut l = Labels::new();
    for (k, values) in keys {
        if rng.chance(60) {
            l.insert(k.to_string(), rng.pick(values).to_string());
        }
    }
    l
}

fn random_selector(rng: &mut Rng, keys: &[(&str, &[&str])]) -> LabelSelector {
    let mut s = LabelSelector::default();
    if rng.chance(30) {
        return s;
    }
    let (k, values) = rng.pick(keys);
    if rng.chance(50) {
        s.match_labels
            .insert(k.to_string(), rng.pick(values).to_string());
    }
    if rng.chance(50) {
        let (k, values) = rng.pick(keys);
        let operator = *rng.pick(&["In", "NotIn", "Exists", "DoesNotExist"]);
        let values = match operator {
            "In" | "NotIn" => vec![rng.pick(values).to_string()],
            _ => vec![],
        };
        s.match_expressions.push(Requirement {
            key: k.to_string(),
            operator: operator.into(),
            values,
        });
    }
    s
}

const POD_KEYS: &[(&str, &[&str])] = &[("app", &["web", "db", "api"]), ("tier", &["1", "2"])];
const NS_KEYS: &[(&str, &[&str])] = &[("team", &["x", "y"]), ("env", &["prod"])];

fn random_port(rng: &mut Rng) -> PolicyPort {
    let protocol = match rng.below(5) {
        0 => None,
        1 => Some("TCP".to_string()),
        2 => Some("UDP".to_string()),
        3 => Some("SCTP".to_string()),
        _ => None,
    };
    match rng.below(4) {
        0 => PolicyPort {
            protocol,
            port: None,
            end_port: None,
        },
        1 => PolicyPort {
            protocol,
            port: Some(PortSpec::Number(i32::from(*rng.pick(&PORTS)))),
            end_port: None,
        },
        2 => PolicyPort {
            protocol,
            port: Some(PortSpec::Number(8000)),
            end_port: Some(*rng.pick(&[8000, 8005, 8010])),
        },
        _ => {
            // Mostly the protocol the pods' port of that name has, so names resolve.
            let (name, own) =
                *rng.pick(&[("http", None), ("dns", Some("UDP")), ("diam", Some("SCTP"))]);
            PolicyPort {
                protocol: if rng.chance(80) {
                    own.map(Into::into)
                } else {
                    protocol
                },
                port: Some(PortSpec::Name(name.into())),
                end_port: None,
            }
        }
    }
}

fn random_peer(rng: &mut Rng) -> Peer {
    match rng.below(5) {
        0 => pods_peer(random_selector(rng, POD_KEYS)),
        1 => ns_peer(random_selector(rng, NS_KEYS)),
        2 => both_peer(
            random_selector(rng, POD_KEYS),
            random_selector(rng, NS_KEYS),
        ),
        _ => match rng.below(4) {
            0 => block("10.0.0.0/16", &["10.0.1.0/24"]),
            1 => block("10.0.2.0/24", &[]),
            2 => block("0.0.0.0/0", &["10.0.0.0/8", "172.16.0.0/28"]),
            _ => block("fd00::/48", &["fd00:0:0:1::/64"]),
        },
    }
}

fn random_rules(rng: &mut Rng) -> Vec<Rule> {
    (0..rng.below(3))
        .map(|_| Rule {
            ports: (0..rng.below(3)).map(|_| random_port(rng)).collect(),
            peers: (0..rng.below(3)).map(|_| random_peer(rng)).collect(),
        })
        .collect()
}

fn random_cluster(rng: &mut Rng) -> Cluster {
    let mut namespaces = Vec::new();
    for n in NAMESPACES {
        // Sometimes a namespace has no object: it has no labels then.
        if rng.chance(90) {
            namespaces.push(netpolicy::Namespace {
                name: n.to_string(),
                labels: random_labels(rng, NS_KEYS),
            });
        }
    }
    let mut pods = Vec::new();
    for i in 0..(3 + rng.below(6)) {
        let n = rng.below(3) as usize;
        let host_network = rng.chance(10);
        let ips: Vec<IpAddr> = if host_network {
            vec![ip(&format!("172.16.0.{}", i + 1))]
        } else {
            let mut v = vec![ip(&format!("10.0.{n}.{}", i + 1))];
            if rng.chance(40) {
                v.push(ip(&format!("fd00:0:0:{n}::{}", i + 1)));
            }
            v
        };
        let mut p = Pod {
            namespace: NAMESPACES[n].into(),
            name: format!("p{i}"),
            labels: random_labels(rng, POD_KEYS),
            ips,
            host_network,
            ports: vec![],
        };
        for (name, protocol) in [
            ("http", Protocol::Tcp),
            ("dns", Protocol::Udp),
            ("diam", Protocol::Sctp),
        ] {
            if rng.chance(60) {
                p = with_port(p, name, protocol, *rng.pick(&PORTS));
            }
        }
        pods.push(p);
    }
    let policies = (0..(1 + rng.below(4)))
        .map(|i| {
            let namespace = *rng.pick(&NAMESPACES);
            let mut p = policy(namespace, &format!("np{i}"), random_selector(rng, POD_KEYS));
            p.ingress = random_rules(rng);
            p.egress = random_rules(rng);
            p.policy_types = match rng.below(5) {
                0 => Some(vec!["Ingress".into()]),
                1 => Some(vec!["Egress".into()]),
                2 => Some(vec!["Ingress".into(), "Egress".into()]),
                3 => Some(vec![]),
                _ => None,
            };
            p
        })
        .collect();
    Cluster {
        namespaces,
        pods,
        policies,
    }
}

#[test]
fn explain_agrees_with_the_naive_evaluator() {
    let mut checked = 0u64;
    let mut allowed = 0u64;
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let c = random_cluster(&mut rng);
        let compiled = compile(&c);
        assert!(
            compiled.refused.is_empty(),
            "seed {seed}: {:?}",
            compiled.refused
        );
        let mut addrs: Vec<IpAddr> = c.pods.iter().flat_map(|p| p.ips.clone()).collect();
        addrs.extend(["192.0.2.1", "10.0.1.200", "fd00:0:0:2::99", "2001:db8::1"].map(ip));
        for &from in &addrs {
            for &to in &addrs {
                if from.is_ipv4() != to.is_ipv4() {
                    continue;
                }
                for protocol in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
                    for port in PORTS {
                        let verdict = explain(&compiled.plan, from, to, protocol, port);
                        let (egress, ingress) = naive(&c, from, to, protocol, port);
                        assert_eq!(
                            (verdict.egress.allowed(), verdict.ingress.allowed()),
                            (egress, ingress),
                            "seed {seed}: {verdict}\ncluster: {c:#?}"
                        );
                        checked += 1;
                        allowed += u64::from(egress && ingress);
                    }
                }
            }
        }
    }
    // The generator must exercise both outcomes.
    assert!(
        allowed > checked / 10 && allowed < checked * 9 / 10,
        "{allowed} of {checked}"
    );
}
