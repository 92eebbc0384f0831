//! The API's objects as the policy compiler's input: a Namespace's name and labels, a Pod's
//! labels, addresses, node and named ports, a NetworkPolicy's spec. Only what policy reads is
//! kept, so the agent's memory grows with the cluster's pods, not with their specs.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace as KubeNamespace, Pod as KubePod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use netpolicy::{NamedPort, Namespace, Pod, Policy, Protocol};

/// A pod as policy sees it, with the node it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRecord {
    pub pod: Pod,
    /// `spec.nodeName` (empty until scheduled).
    pub node: String,
}

pub fn namespace(ns: &KubeNamespace) -> Option<Namespace> {
    Some(Namespace {
        name: ns.metadata.name.clone()?,
        labels: ns.metadata.labels.clone().unwrap_or_default(),
    })
}

/// `None` for a pod policy has nothing to do with: one that finished (its address may be
/// given to another pod already). A pod without an address yet is kept (its labels are known
/// before its network is up: the CNI chain's admission gives its addresses early).
pub fn pod(p: &KubePod) -> Option<PodRecord> {
    let namespace = p.metadata.namespace.clone()?;
    let name = p.metadata.name.clone()?;
    let status = p.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return None;
    }
    let mut ips: Vec<IpAddr> = status
        .and_then(|s| s.pod_ips.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|a| a.ip.parse().ok())
        .collect();
    if ips.is_empty() {
        // An apiserver (or a kubelet) that fills only the singular field.
        ips.extend(
            status
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|a| a.parse::<IpAddr>().ok()),
        );
    }
    let spec = p.spec.as_ref();
    let ports = spec
        .map(|s| {
            s.containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .filter_map(|port| {
                    let name = port.name.clone()?;
                    let protocol = Protocol::parse(port.protocol.as_deref().unwrap_or("TCP"))?;
                    let number = u16::try_from(port.container_port).ok()?;
                    Some(NamedPort {
                        name,
                        protocol,
                        port: number,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Some(PodRecord {
        pod: Pod {
            namespace,
            name,
            labels: p.metadata.labels.clone().unwrap_or_default(),
            ips,
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
            ports,
        },
        node: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
    })
}

/// The policy's spec read through its JSON, which has the compiler's field names (so a field
/// the API adds in a later release is simply not read, never misread). `None` when it has no
/// namespace or name, or a spec the compiler's types cannot hold (such a policy is reported by
/// the caller).
pub fn policy(np: &NetworkPolicy) -> Result<Policy, String> {
    let namespace = np.metadata.namespace.clone().ok_or("no namespace")?;
    let name = np.metadata.name.clone().ok_or("no name")?;
    let spec = serde_json::to_value(np.spec.as_ref().ok_or("no spec")?)
        .map_err(|e| format!("spec: {e}"))?;
    let mut policy: Policy = serde_json::from_value(spec).map_err(|e| format!("spec: {e}"))?;
    policy.namespace = namespace;
    policy.name = name;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).expect("test object")
    }

    #[test]
    fn a_running_pod_with_named_ports() {
        let p: KubePod = from_json(serde_json::json!({
            "metadata": {"namespace": "prod", "name": "db", "labels": {"app": "db"}},
            "spec": {"nodeName": "node1", "containers": [
                {"name": "c", "ports": [
                    {"name": "pg", "containerPort": 5432},
                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                    {"containerPort": 8080}
                ]}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.1.5",
                       "podIPs": [{"ip": "10.0.1.5"}, {"ip": "fd00::5"}]}
        }));
        let r = pod(&p).expect("a pod policy sees");
        assert_eq!(r.node, "node1");
        assert_eq!(r.pod.ips.len(), 2);
        assert_eq!(r.pod.labels["app"], "db");
        assert_eq!(r.pod.ports.len(), 2);
        assert_eq!(r.pod.ports[1].protocol, Protocol::Udp);
        assert!(!r.pod.host_network);
    }

    #[test]
    fn finished_pods_are_left_out_pending_ones_kept() {
        let pending: KubePod = from_json(serde_json::json!({
            "metadata": {"namespace": "a", "name": "b", "labels": {"app": "x"}},
            "spec": {"containers": [], "nodeName": "n1"}, "status": {"phase": "Pending"}
        }));
        let r = pod(&pending).expect("a pending pod is kept");
        assert!(r.pod.ips.is_empty());
        assert_eq!(r.pod.labels["app"], "x");
        let done: KubePod = from_json(serde_json::json!({
            "metadata": {"namespace": "a", "name": "b"},
            "spec": {"containers": []},
            "status": {"phase": "Succeeded", "podIP": "10.0.0.9"}
        }));
        assert_eq!(pod(&done), None);
        let only_pod_ip: KubePod = from_json(serde_json::json!({
            "metadata": {"namespace": "a", "name": "b"},
            "spec": {"containers": [], "hostNetwork": true},
            "status": {"phase": "Running", "podIP": "10.0.0.9"}
        }));
        let r = pod(&only_pod_ip).expect("podIP alone");
        assert!(r.pod.host_network);
        assert_eq!(r.pod.ips, ["10.0.0.9".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn a_policy_spec_reads_into_the_model() {
        let np: NetworkPolicy = from_json(serde_json::json!({
            "metadata": {"namespace": "prod", "name": "allow"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "db"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [
                        {"podSelector": {"matchLabels": {"app": "web"}},
                         "namespaceSelector": {"matchExpressions":
                            [{"key": "team", "operator": "In", "values": ["a"]}]}},
                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}
                    ],
                    "ports": [{"port": "pg"}, {"protocol": "UDP", "port": 5000, "endPort": 5010}]
                }],
                "egress": [{"to": [{"namespaceSelector": {}}]}]
            }
        }));
        let p = policy(&np).expect("policy");
        assert_eq!((p.namespace.as_str(), p.name.as_str()), ("prod", "allow"));
        assert_eq!(p.ingress[0].peers.len(), 2);
        assert_eq!(p.ingress[0].ports[1].end_port, Some(5010));
        assert_eq!(
            p.ingress[0].ports[0].port,
            Some(netpolicy::PortSpec::Name("pg".into()))
        );
        assert_eq!(
            p.egress[0].peers[0].namespace_selector,
            Some(Default::default())
        );
        assert_eq!(p.policy_types.as_deref().map(<[String]>::len), Some(2));
    }
}
