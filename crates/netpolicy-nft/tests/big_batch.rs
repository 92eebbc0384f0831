//! One transaction of 20,000 set elements and 5,000 rules (several MB in one datagram), and
//! the plan of 1,000 pods and 200 policies written whole and changed by one pod (timed; run
//! with `--ignored --nocapture`). Root only; `--test-threads=1`.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use common::*;
use netkit::netfilter::nf_tables::build::{self, Addr};
use netkit::netfilter::nf_tables::named_set::{NamedSet, SetKey};
use netkit::netfilter::nf_tables::{Batch, Chain, Family, Rule, Table, Verdict};
use netpolicy::{
    Cluster, IpBlock, LabelSelector, Namespace, Peer, Pod, Policy, PolicyPort, PortSpec, Protocol,
    Requirement, Rule as PolicyRule,
};
use netpolicy_nft::PolicyTable;

#[test]
fn twenty_thousand_elements_and_five_thousand_rules_in_one_transaction() {
    require_root!();
    let ns = Ns::new("big");
    let mut sock = ns.socket();
    let set = NamedSet {
        family: Family::Inet,
        table: "big".into(),
        name: "addrs".into(),
        key: SetKey::IPV4_ADDR,
        interval: false,
        verdict_map: false,
        id: 1,
    };
    let keys: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| (0x0a00_0000 + i).to_be_bytes().to_vec())
        .collect();
    let mut batch = Batch::new();
    batch
        .add_table(&Table::new(Family::Inet, "big"))
        .add_set(&set)
        .add_elements(&set, &keys)
        .add_chain(&Chain::new(Family::Inet, "big", "c"));
    for i in 0..5_000u16 {
        batch.add_rule(
            &Rule::new(
                Family::Inet,
                "big",
                "c",
                build::all([
                    build::addr_in_set(Addr::Saddr, false, "addrs"),
                    build::l4proto(6),
                    build::th_dport(i + 1, i + 1),
                    build::verdict(Verdict::Accept),
                ]),
            )
            .with_comment("a rule"),
        );
    }
    let bytes = batch.encoded_len();
    assert!(bytes > 1_000_000, "{bytes} bytes");
    let start = Instant::now();
    sock.commit(&batch).unwrap();
    println!(
        "{} messages, {bytes} bytes committed in {:.0} ms",
        batch.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    let set_listing = ns.exec(&["nft", "list", "set", "inet", "big", "addrs"]);
    assert_eq!(set_listing.matches("10.0.").count(), 20_000);
    assert_eq!(sock.rules(Family::Inet, "big", "c").unwrap().len(), 5_000);

    // Flush, delete elements, delete the set once no rule uses it.
    let mut batch = Batch::new();
    batch
        .delete_elements(&set, &keys[..10])
        .flush_chain(Family::Inet, "big", "c")
        .flush_set(&set)
        .delete_set(Family::Inet, "big", "addrs");
    sock.commit(&batch).unwrap();
    let listing = ns.exec(&["nft", "list", "table", "inet", "big"]);
    assert!(!listing.contains("addrs"), "{listing}");
}

fn selector(pairs: &[(&str, String)]) -> LabelSelector {
    LabelSelector {
        match_labels: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        match_expressions: vec![],
    }
}

/// 1,000 pods in 20 namespaces, 200 policies: a default deny per namespace, the others with
/// pod, namespace and ipBlock peers, named and ranged ports, ingress and egress.
fn big_cluster(pods: usize, policies: usize) -> Cluster {
    const NAMESPACES: usize = 20;
    const APPS: usize = 50;
    let namespaces = (0..NAMESPACES)
        .map(|n| Namespace {
            name: format!("ns{n}"),
            labels: [
                ("team".to_string(), format!("t{}", n % 5)),
                ("kubernetes.io/metadata.name".to_string(), format!("ns{n}")),
            ]
            .into(),
        })
        .collect();
    let pods = (0..pods)
        .map(|i| Pod {
            namespace: format!("ns{}", i % NAMESPACES),
            name: format!("pod{i}"),
            labels: [
                ("app".to_string(), format!("app{}", i % APPS)),
                (
                    "role".to_string(),
                    if i % 3 == 0 { "client" } else { "server" }.to_string(),
                ),
            ]
            .into(),
            ips: vec![
                IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i as u32)),
                IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112) + i as u128)),
            ],
            host_network: false,
            ports: vec![named_port("http", Protocol::Tcp, 8000 + (i % 7) as u16)],
        })
        .collect();
    let policies = (0..policies)
        .map(|k| {
            let namespace = format!("ns{}", k % NAMESPACES);
            if k < NAMESPACES {
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
                    PolicyRule {
                        ports: vec![
                            named("TCP", "http"),
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
                                    match_labels: Default::default(),
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
                    PolicyRule {
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
                    PolicyRule {
                        ports: vec![port("UDP", 53, None)],
                        peers: vec![],
                    },
                    PolicyRule {
                        ports: vec![named("TCP", "http")],
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

/// Timing: `cargo test -p netpolicy-nft --release --test big_batch -- --ignored --nocapture`.
#[test]
#[ignore]
fn scale_thousand_pods_two_hundred_policies() {
    require_root!();
    let ns = Ns::new("scale");
    let mut sock = ns.socket();
    let cluster = big_cluster(1000, 200);
    let plan = compile(&cluster);
    let rules_before = plan
        .targets
        .values()
        .map(|t| t.ingress.clauses.len() + t.egress.clauses.len())
        .sum::<usize>();
    let mut table = PolicyTable::new();
    let start = Instant::now();
    let stats = table.sync(&mut sock, &plan).unwrap();
    let full = start.elapsed();
    println!(
        "full sync: {:.0} ms, {} sets, {} targets, {rules_before} clauses: {stats:?}",
        full.as_secs_f64() * 1e3,
        plan.sets.len(),
        plan.targets.len()
    );

    // One client pod more.
    let mut more = cluster.clone();
    let mut extra = more.pods[3].clone();
    extra.name = "extra".into();
    extra.ips = vec![IpAddr::V4(Ipv4Addr::new(10, 250, 0, 1))];
    more.pods.push(extra);
    let after = compile(&more);
    let start = Instant::now();
    let stats = table.sync(&mut sock, &after).unwrap();
    println!(
        "one pod more: {:.1} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert!(!stats.full);

    // The same plan again: the cost of the diff alone (nothing is sent).
    let start = Instant::now();
    let stats = table.sync(&mut sock, &after).unwrap();
    println!(
        "no change: {:.1} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(stats.messages, 0);

    // A pod's labels change: set elements only.
    let mut relabeled = more.clone();
    relabeled.pods[5]
        .labels
        .insert("role".into(), "client".into());
    let start = Instant::now();
    let stats = table.sync(&mut sock, &compile(&relabeled)).unwrap();
    println!(
        "one pod relabeled (compile included): {:.1} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );

    // A restart: the whole table written again over the existing one.
    let start = Instant::now();
    let stats = PolicyTable::new().sync(&mut sock, &after).unwrap();
    println!(
        "full rewrite over the table: {:.0} ms: {stats:?}",
        start.elapsed().as_secs_f64() * 1e3
    );
}
