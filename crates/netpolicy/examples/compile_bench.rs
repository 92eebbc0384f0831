//! How long a compile takes at 1,000 pods and 200 policies, and a diff after one pod comes.
//! `cargo run --release -p netpolicy --example compile_bench [pods] [policies]`

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use netpolicy::{
    compile, Cluster, IpBlock, LabelSelector, NamedPort, Namespace, Peer, Plan, Pod, Policy,
    PolicyPort, PortSpec, Protocol, Requirement, Rule,
};

const NAMESPACES: usize = 20;
const APPS: usize = 50;

fn labels(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn selector(pairs: &[(&str, String)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        match_expressions: vec![],
    }
}

fn cluster(pods: usize, policies: usize) -> Cluster {
    let namespaces = (0..NAMESPACES)
        .map(|n| Namespace {
            name: format!("ns{n}"),
            labels: labels(&[
                ("team", format!("t{}", n % 5)),
                ("kubernetes.io/metadata.name", format!("ns{n}")),
            ]),
        })
        .collect();
    let pods = (0..pods)
        .map(|i| Pod {
            namespace: format!("ns{}", i % NAMESPACES),
            name: format!("pod{i}"),
            labels: labels(&[
                ("app", format!("app{}", i % APPS)),
                (
                    "role",
                    if i % 3 == 0 {
                        "client".into()
                    } else {
                        "server".into()
                    },
                ),
            ]),
            ips: vec![
                IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i as u32)),
                IpAddr::V6(Ipv6Addr::from(
                    0xfd00_0000_0000_0000_0000_0000_0000_0000u128 + i as u128,
                )),
            ],
            host_network: false,
            ports: vec![NamedPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8000 + (i % 7) as u16,
            }],
        })
        .collect();
    let policies = (0..policies)
        .map(|k| {
            let namespace = format!("ns{}", k % NAMESPACES);
            if k < NAMESPACES {
                // A default deny per namespace.
                return Policy {
                    namespace,
                    name: "default-deny".into(),
                    ..Policy::default()
                };
            }
            let app = format!("app{}", k % APPS);
            Policy {
                namespace,
                name: format!("allow-{k}"),
                pod_selector: selector(&[("app", app.clone())]),
                policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
                ingress: vec![
                    Rule {
                        ports: vec![
                            PolicyPort {
                                protocol: None,
                                port: Some(PortSpec::Name("http".into())),
                                end_port: None,
                            },
                            PolicyPort {
                                protocol: Some("TCP".into()),
                                port: Some(PortSpec::Number(9000)),
                                end_port: Some(9100),
                            },
                        ],
                        peers: vec![
                            Peer {
                                pod_selector: Some(selector(&[("role", "client".into())])),
                                ..Peer::default()
                            },
                            Peer {
                                namespace_selector: Some(selector(&[(
                                    "team",
                                    format!("t{}", k % 5),
                                )])),
                                pod_selector: Some(LabelSelector {
                                    match_labels: BTreeMap::new(),
                                    match_expressions: vec![Requirement {
                                        key: "app".into(),
                                        operator: "In".into(),
                                        values: vec![app.clone(), format!("app{}", (k + 1) % APPS)],
                                    }],
                                }),
                                ip_block: None,
                            },
                        ],
                    },
                    Rule {
                        ports: vec![],
                        peers: vec![Peer {
                            ip_block: Some(IpBlock {
                                cidr: "192.168.0.0/16".into(),
                                except: vec!["192.168.1.0/24".into(), "192.168.7.0/24".into()],
                            }),
                            ..Peer::default()
                        }],
                    },
                ],
                egress: vec![
                    Rule {
                        ports: vec![PolicyPort {
                            protocol: Some("UDP".into()),
                            port: Some(PortSpec::Number(53)),
                            end_port: None,
                        }],
                        peers: vec![],
                    },
                    Rule {
                        ports: vec![PolicyPort {
                            protocol: None,
                            port: Some(PortSpec::Name("http".into())),
                            end_port: None,
                        }],
                        peers: vec![Peer {
                            namespace_selector: Some(LabelSelector::default()),
                            pod_selector: Some(selector(&[(
                                "app",
                                format!("app{}", (k + 2) % APPS),
                            )])),
                            ip_block: None,
                        }],
                    },
                ],
            }
        })
        .collect();
    Cluster {
        namespaces,
        pods,
        policies,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let policies: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let c = cluster(pods, policies);
    let mut times = Vec::new();
    let mut compiled = compile(&c);
    for _ in 0..15 {
        let start = Instant::now();
        compiled = compile(&c);
        times.push(start.elapsed());
    }
    assert!(compiled.refused.is_empty(), "{:?}", compiled.refused);
    let plan = compiled.plan;
    let elements: usize = plan.sets.values().map(|s| s.elements.len()).sum();
    let clauses: usize = plan
        .targets
        .values()
        .map(|t| t.ingress.clauses.len() + t.egress.clauses.len())
        .sum();
    println!(
        "{pods} pods, {policies} policies: compile {:.1} ms (median of {}, min {:.1} ms)",
        median(times.clone()).as_secs_f64() * 1e3,
        times.len(),
        times.iter().min().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
    println!(
        "plan: {} sets, {elements} set elements, {} target addresses, {clauses} clauses",
        plan.sets.len(),
        plan.targets.len()
    );

    // One client pod more: a compile and a diff.
    let mut more = c.clone();
    let mut extra = more.pods[3].clone();
    extra.name = "extra".into();
    extra.ips = vec![IpAddr::V4(Ipv4Addr::new(10, 250, 0, 1))];
    more.pods.push(extra);
    let after = compile(&more).plan;
    let start = Instant::now();
    let changes = Plan::diff(&plan, &after);
    let diff_time = start.elapsed();
    println!(
        "one pod more: diff {:.2} ms: {} sets with element changes, {} targets changed, {} sets created",
        diff_time.as_secs_f64() * 1e3,
        changes.elements.len(),
        changes.targets.len(),
        changes.sets_created.len()
    );
}
