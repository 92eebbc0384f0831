//! The compiler's input: small types in the shape of the Kubernetes API objects, which the agent
//! fills from Pods, Namespaces and NetworkPolicies. Fields the apiserver types as free strings
//! (protocols, operators, CIDRs, policy types) stay strings here, so what the apiserver would
//! refuse is refused by `validate`, naming the field, instead of being lost in a
//! conversion. Field names follow the API's JSON (camelCase) for serde.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Labels of a pod or a namespace.
pub type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Namespace {
    pub name: String,
    pub labels: Labels,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// `status.podIPs`: one per family at most, as the API has it.
    pub ips: Vec<IpAddr>,
    /// `spec.hostNetwork`: such a pod has the node's addresses and is outside policy.
    pub host_network: bool,
    /// The containers' ports that have a name (only those can be named in a policy).
    pub ports: Vec<NamedPort>,
}

/// A container port with a name, as `containers[].ports[]` has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// The three protocols a NetworkPolicy port can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The API's spelling (`TCP`, `UDP`, `SCTP`), case-sensitive as the apiserver is.
    pub fn parse(text: &str) -> Option<Protocol> {
        match text {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A NetworkPolicy: its identity and its `spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    /// `spec.podSelector`: required by the API; empty selects every pod of the namespace.
    pub pod_selector: LabelSelector,
    /// `spec.policyTypes` as written (`Ingress`, `Egress`); `None` or empty takes the API's
    /// default (see `validate`).
    pub policy_types: Option<Vec<String>>,
    pub ingress: Vec<Rule>,
    pub egress: Vec<Rule>,
}

/// One ingress rule (`from`, `ports`) or egress rule (`to`, `ports`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Rule {
    /// Empty: every port.
    pub ports: Vec<PolicyPort>,
    /// `from` or `to`. Empty: every peer.
    #[serde(alias = "from", alias = "to")]
    pub peers: Vec<Peer>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyPort {
    /// `TCP`, `UDP` or `SCTP`; `None` is TCP.
    pub protocol: Option<String>,
    /// `None`: every port of the protocol.
    pub port: Option<PortSpec>,
    /// With a numeric `port`: the last port of the range.
    pub end_port: Option<i32>,
}

/// The API's `IntOrString` port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PortSpec {
    Number(i32),
    Name(String),
}

/// A `NetworkPolicyPeer`: exactly one of a pod selector, a namespace selector, both, or an
/// ipBlock. A selector that is `None` is absent (null in the API), which differs from an
/// empty selector (`{}`, every pod or namespace).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Peer {
    pub pod_selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
    pub ip_block: Option<IpBlock>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct IpBlock {
    pub cidr: String,
    pub except: Vec<String>,
}

/// A `metav1.LabelSelector`. Empty selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    pub match_labels: Labels,
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry: `operator` is `In`, `NotIn`, `Exists` or `DoesNotExist`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// Everything the compiler reads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Cluster {
    pub namespaces: Vec<Namespace>,
    pub pods: Vec<Pod>,
    pub policies: Vec<Policy>,
}

/// A policy's identity, `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PolicyKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod's identity, `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Policy {
    pub fn key(&self) -> PolicyKey {
        PolicyKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl Pod {
    pub fn key(&self) -> PodKey {
        PodKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}
