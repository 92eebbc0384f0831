//! A synthetic cluster of the benches' shape: pods spread over 20 namespaces and 50 apps,
//! a default deny per namespace, and policies with pod, namespace and ipBlock peers, named
//! and ranged ports, ingress and egress. The compile bench and the data plane's scale test
//! measure the same input through it (1,000 pods and 200 policies by default there).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::model::{
    Cluster, IpBlock, LabelSelector, NamedPort, Namespace, Peer, Pod, Policy, PolicyPort, PortSpec,
    Protocol, Requirement, Rule,
};

/// How many namespaces the pods and policies are spread over.
pub const NAMESPACES: usize = 20;
/// How many distinct `app` labels the pods carry.
pub const APPS: usize = 50;

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

/// `pods` pods (`pod<i>` in namespace `ns<i % 20>`, label `app=app<i % 50>`, every third a
/// `role=client`, addresses 10.244.0.0 + i and fd00:: + i, a named port `http`) and
/// `policies` policies, the first 20 a default deny per namespace.
pub fn cluster(pods: usize, policies: usize) -> Cluster {
    let namespaces = (0..NAMESPACES)
        .map(|n| Namespace {
            name: format!("ns{n}"),
            labels: labels(&[
                ("team", format!("t{}", n % 5)),
                ("kubernetes.io/metadata.name", format!("ns{n}")),
            ]),
        })
        .collect();
    let pods = (0..pods).map(pod).collect();
    let policies = (0..policies).map(policy).collect();
    Cluster {
        namespaces,
        pods,
        policies,
    }
}

/// `cluster` with one client pod more (a copy of `pod3` named `extra` at 10.250.0.1): the
/// change the benches time a diff and a sync of. A cluster of fewer than 4 pods is returned
/// unchanged.
pub fn with_one_client_more(cluster: &Cluster) -> Cluster {
    let mut more = cluster.clone();
    if let Some(client) = more.pods.get(3) {
        let mut extra = client.clone();
        extra.name = "extra".into();
        extra.ips = vec![IpAddr::V4(Ipv4Addr::new(10, 250, 0, 1))];
        more.pods.push(extra);
    }
    more
}

fn pod(i: usize) -> Pod {
    Pod {
        namespace: format!("ns{}", i % NAMESPACES),
        name: format!("pod{i}"),
        labels: labels(&[
            ("app", format!("app{}", i % APPS)),
            (
                "role",
                if i.is_multiple_of(3) {
                    "client"
                } else {
                    "server"
                }
                .into(),
            ),
        ]),
        // Wrapping: only a cluster of billions of pods would reuse an address.
        ips: vec![
            IpAddr::V4(Ipv4Addr::from(0x0af4_0000u32.wrapping_add(i as u32))),
            IpAddr::V6(Ipv6Addr::from((0xfd00u128 << 112).wrapping_add(i as u128))),
        ],
        host_network: false,
        ports: vec![NamedPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8000 + (i % 7) as u16,
        }],
    }
}

/// Policy `k`: a default deny for `k` below the namespace count, else an allow in both
/// directions for the pods of one app.
fn policy(k: usize) -> Policy {
    let namespace = format!("ns{}", k % NAMESPACES);
    if k < NAMESPACES {
        return Policy {
            namespace,
            name: "default-deny".into(),
            ..Policy::default()
        };
    }
    let app = format!("app{}", k % APPS);
    let http = PolicyPort {
        protocol: None,
        port: Some(PortSpec::Name("http".into())),
        end_port: None,
    };
    Policy {
        namespace,
        name: format!("allow-{k}"),
        pod_selector: selector(&[("app", app.clone())]),
        policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
        ingress: vec![
            Rule {
                ports: vec![
                    http.clone(),
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
                        namespace_selector: Some(selector(&[("team", format!("t{}", k % 5))])),
                        pod_selector: Some(LabelSelector {
                            match_labels: BTreeMap::new(),
                            match_expressions: vec![Requirement {
                                key: "app".into(),
                                operator: "In".into(),
                                values: vec![app, format!("app{}", (k + 1) % APPS)],
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
                ports: vec![http],
                peers: vec![Peer {
                    namespace_selector: Some(LabelSelector::default()),
                    pod_selector: Some(selector(&[("app", format!("app{}", (k + 2) % APPS))])),
                    ip_block: None,
                }],
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape the benches rely on: every policy valid, one pod of a namespace isolated and
    /// allowed through its app's policy.
    #[test]
    fn the_sample_compiles_whole() {
        let c = cluster(100, 60);
        assert_eq!(c.pods.len(), 100);
        assert_eq!(c.policies.len(), 60);
        let compiled = crate::compile(&c);
        assert!(compiled.refused.is_empty(), "{:?}", compiled.refused);
        assert!(!compiled.plan.targets.is_empty());
    }
}
