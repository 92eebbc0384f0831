//! The cluster the NetworkPolicy section makes, as the bench keeps it to know what each change
//! should do in the kernel, and its API objects: namespaces, pods bound to nodes with their
//! status, and policies like the compiler's own bench builds.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::{json, Value};

use crate::kube_scale::AGENT_NODE;

pub(super) const NAMESPACES: usize = 20;
pub(super) const APPS: usize = 50;
pub(super) const TEAMS: usize = 5;
pub(super) const TIERS: [&str; 3] = ["frontend", "backend", "db"];
/// The Nodes beside the agent's.
pub(super) const PEERS: usize = 4;
/// The port of every allow policy's numbered ingress rule, before the changes.
pub(super) const FIRST_PORT: u16 = 9_000;

/// A pod as created: where it runs, its labels (by index) and address.
#[derive(Clone, Debug)]
pub(super) struct PodModel {
    pub(super) namespace: usize,
    pub(super) app: usize,
    pub(super) tier: usize,
    /// 0 is the agent's node, 1.. the peers.
    pub(super) node: usize,
    pub(super) ip: Ipv4Addr,
}

/// A policy as created: a default deny (no `app`) or an allow policy for one app.
#[derive(Clone, Debug)]
pub(super) struct PolicyModel {
    pub(super) namespace: usize,
    pub(super) name: String,
    pub(super) app: Option<usize>,
    pub(super) port: u16,
}

/// What the API holds, kept by the bench to know what each change should do in the kernel.
pub(super) struct Model {
    /// By index; `None` once deleted.
    pub(super) pods: Vec<Option<PodModel>>,
    pub(super) policies: Vec<PolicyModel>,
    /// Each node's podCIDR as (first address, size), the agent's first.
    pub(super) cidrs: Vec<(u32, u32)>,
    /// The next free host of each node.
    pub(super) next_host: Vec<u32>,
}

pub(super) fn namespace_name(n: usize) -> String {
    format!("bench-{n}")
}

pub(super) fn node_name(node: usize) -> String {
    if node == 0 {
        AGENT_NODE.to_string()
    } else {
        format!("policy-peer-{node}")
    }
}

pub(super) fn pod_name(i: usize) -> String {
    format!("pod-{i}")
}

/// `10.1.2.0/24` as (first address, number of addresses).
pub(super) fn parse_cidr(cidr: &str) -> Option<(u32, u32)> {
    let (addr, len) = cidr.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((u32::from(addr), 1u32.checked_shl(32 - len).unwrap_or(0)))
}

impl Model {
    pub(super) fn new(cidrs: Vec<(u32, u32)>, policies: usize) -> Model {
        let policies = (0..policies)
            .map(|k| {
                if k < NAMESPACES {
                    PolicyModel {
                        namespace: k,
                        name: "default-deny".into(),
                        app: None,
                        port: FIRST_PORT,
                    }
                } else {
                    PolicyModel {
                        namespace: k % NAMESPACES,
                        name: format!("allow-{k}"),
                        app: Some(k % APPS),
                        port: FIRST_PORT,
                    }
                }
            })
            .collect();
        Model {
            pods: Vec::new(),
            policies,
            next_host: vec![2; cidrs.len()],
            cidrs,
        }
    }

    /// A new pod `i` (its index in `pods`) on `node`, its labels derived from `i`; `None` when
    /// the node's podCIDR is full.
    pub(super) fn add_pod(&mut self, node: usize, tier: Option<usize>) -> Option<usize> {
        let i = self.pods.len();
        let (base, size) = self.cidrs[node];
        let host = self.next_host[node];
        if host + 1 >= size {
            return None;
        }
        self.next_host[node] += 1;
        self.pods.push(Some(PodModel {
            namespace: i % NAMESPACES,
            app: i % APPS,
            tier: tier.unwrap_or((i / 7) % TIERS.len()),
            node,
            ip: Ipv4Addr::from(base + host),
        }));
        Some(i)
    }

    pub(super) fn selects(policy: &PolicyModel, pod: &PodModel) -> bool {
        policy.namespace == pod.namespace && policy.app.is_none_or(|a| a == pod.app)
    }

    /// This node's pods that some policy isolates (the ingress verdict map's keys).
    pub(super) fn isolated_here(&self) -> BTreeSet<Ipv4Addr> {
        self.live()
            .filter(|(_, p)| p.node == 0)
            .filter(|(_, p)| self.policies.iter().any(|k| Model::selects(k, p)))
            .map(|(_, p)| p.ip)
            .collect()
    }

    pub(super) fn live(&self) -> impl Iterator<Item = (usize, &PodModel)> {
        self.pods
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| (i, p)))
    }

    /// A live pod matching `pick`, the first from index `from` on (so successive picks
    /// spread over the cluster).
    pub(super) fn find(&self, from: usize, pick: impl Fn(&PodModel) -> bool) -> Option<usize> {
        let n = self.pods.len();
        (0..n)
            .map(|k| (from + k) % n)
            .find(|&i| self.pods[i].as_ref().is_some_and(&pick))
    }
}

/// The text a policy's sets carry in their names (`<namespace>.<policy>.`), which a target's
/// chain shows when the policy selects the target.
pub(super) fn policy_marker(p: &PolicyModel) -> String {
    format!("{}.{}.", namespace_name(p.namespace), p.name)
}

pub(super) fn namespace_object(n: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace_name(n),
        "labels": {"team": format!("t{}", n % TEAMS)}}})
}

pub(super) fn pod_object(i: usize, p: &PodModel) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(i),
            "namespace": namespace_name(p.namespace),
            "labels": {"app": format!("app{}", p.app), "tier": TIERS[p.tier]},
        },
        "spec": {
            "nodeName": node_name(p.node),
            "automountServiceAccountToken": false,
            // Nothing may evict them: no kubelet ever reports on their nodes.
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "app",
                "image": "registry.invalid/bench/app:1",
                "ports": [
                    {"name": "http", "containerPort": 8000 + (i % 7) as u16, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                ],
            }],
        },
    })
}

/// The status the kubelet would write once the pod runs.
pub(super) fn status_patch(ip: Ipv4Addr) -> Value {
    json!({"status": {"phase": "Running", "podIP": ip.to_string(),
        "podIPs": [{"ip": ip.to_string()}]}})
}

pub(super) fn label_selector(key: &str, value: &str) -> Value {
    json!({"matchLabels": {key: value}})
}

/// A policy's spec, as the compiler's bench builds its cluster.
pub(super) fn policy_spec(k: usize, p: &PolicyModel) -> Value {
    let Some(app) = p.app else {
        return json!({"podSelector": {}});
    };
    json!({
        "podSelector": label_selector("app", &format!("app{app}")),
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "ports": [
                    {"port": "http"},
                    // 1.20 has no endPort: the apiserver drops it, the port stays single.
                    {"protocol": "TCP", "port": p.port, "endPort": p.port + 100},
                ],
                "from": [
                    {"podSelector": label_selector("tier", "frontend")},
                    {
                        "namespaceSelector": label_selector("team", &format!("t{}", k % TEAMS)),
                        "podSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                            "values": [format!("app{app}"), format!("app{}", (app + 1) % APPS)]}]},
                    },
                ],
            },
            {"from": [{"ipBlock": {"cidr": "192.168.0.0/16",
                "except": ["192.168.1.0/24", "192.168.7.0/24"]}}]},
        ],
        "egress": [
            {"ports": [{"protocol": "UDP", "port": 53}]},
            {
                "ports": [{"port": "http"}],
                "to": [{"namespaceSelector": {},
                    "podSelector": label_selector("app", &format!("app{}", (app + 2) % APPS))}],
            },
        ],
    })
}

pub(super) fn policy_object(k: usize, p: &PolicyModel) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": p.name, "namespace": namespace_name(p.namespace)},
        "spec": policy_spec(k, p),
    })
}

pub(super) fn pod_path(i: usize, p: &PodModel) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}",
        namespace_name(p.namespace),
        pod_name(i)
    )
}

pub(super) fn policy_path(p: &PolicyModel) -> String {
    format!(
        "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies/{}",
        namespace_name(p.namespace),
        p.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_get_their_nodes_addresses() {
        let mut m = Model::new(vec![(0x0a80_0000, 2048), (0x0a80_0800, 2048)], 0);
        let a = m.add_pod(0, None).unwrap();
        let b = m.add_pod(1, None).unwrap();
        assert_eq!(m.pods[a].as_ref().unwrap().ip, Ipv4Addr::new(10, 128, 0, 2));
        assert_eq!(m.pods[b].as_ref().unwrap().ip, Ipv4Addr::new(10, 128, 8, 2));
        assert_eq!(parse_cidr("10.128.8.0/21"), Some((0x0a80_0800, 2048)));
    }

    #[test]
    fn each_allow_policy_selects_its_app_in_its_namespace() {
        let mut m = Model::new(vec![(0x0a80_0000, 2048)], NAMESPACES + 1);
        for _ in 0..200 {
            m.add_pod(0, None).unwrap();
        }
        let allow = &m.policies[NAMESPACES];
        let selected: Vec<usize> = m
            .live()
            .filter(|(_, p)| Model::selects(allow, p))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(selected, [20, 120]);
        assert_eq!(m.isolated_here().len(), 200);
    }
}
