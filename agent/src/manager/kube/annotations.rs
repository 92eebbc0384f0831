//! flanneld's Node annotations, byte for byte: their names under `--kube-annotation-prefix`
//! (`flannel.alpha.coreos.com/public-ip`, ...), what a node's annotations and `podCIDR(s)` say
//! as a lease, and the annotations this node publishes. A cluster may run flanneld on some
//! nodes and this agent on others: each reads what the other writes.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use serde_json::Value;

use crate::subnet::key::SubnetKey;
use crate::subnet::lease::{LeaseAttrs, Unreadable, MAX_VALUE_BYTES};

/// The default `--kube-annotation-prefix`, flanneld's.
pub const DEFAULT_PREFIX: &str = "flannel.alpha.coreos.com";

/// The annotation names under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotations {
    pub kube_subnet_manager: String,
    pub backend_type: String,
    pub backend_data: String,
    pub backend_v6_data: String,
    pub public_ip: String,
    pub public_ipv6: String,
    pub public_ip_overwrite: String,
    pub public_ipv6_overwrite: String,
    pub node_public_ip: String,
    pub node_public_ipv6: String,
    /// The completed prefix (`flannel.alpha.coreos.com/`), for [`Annotations::named`].
    prefix: String,
}

impl Annotations {
    /// The names under `prefix`, completed as flanneld completes it: `example.com` gives
    /// `example.com/public-ip`, `example.com/net` gives `example.com/net-public-ip`. The
    /// result must be a Kubernetes annotation name (a DNS-like domain, at most one slash).
    pub fn new(prefix: &str) -> Result<Annotations, String> {
        let mut p = prefix.to_string();
        match p.matches('/').count() {
            0 => p.push('/'),
            1 => {}
            _ => {
                return Err(format!(
                    "annotation prefix {prefix:?} has more than one '/'"
                ))
            }
        }
        if !p.ends_with('/') && !p.ends_with('-') {
            p.push('-');
        }
        if !well_formed(&p) {
            return Err(format!(
                "annotation prefix {prefix:?} is not a domain with an optional name after one '/' \
                 (lower-case letters, digits, '-', '_' and '.')"
            ));
        }
        let name = |suffix: &str| format!("{p}{suffix}");
        Ok(Annotations {
            kube_subnet_manager: name("kube-subnet-manager"),
            backend_type: name("backend-type"),
            backend_data: name("backend-data"),
            backend_v6_data: name("backend-v6-data"),
            public_ip: name("public-ip"),
            public_ipv6: name("public-ipv6"),
            public_ip_overwrite: name("public-ip-overwrite"),
            public_ipv6_overwrite: name("public-ipv6-overwrite"),
            node_public_ip: name("node-public-ip"),
            node_public_ipv6: name("node-public-ipv6"),
            prefix: p.clone(),
        })
    }

    /// The annotation `suffix` under the prefix (a backend flag's per-node annotation).
    pub fn named(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// Every name above: all the agent reads of a node's annotations.
    pub fn names(&self) -> [&str; 10] {
        [
            &self.kube_subnet_manager,
            &self.backend_type,
            &self.backend_data,
            &self.backend_v6_data,
            &self.public_ip,
            &self.public_ipv6,
            &self.public_ip_overwrite,
            &self.public_ipv6_overwrite,
            &self.node_public_ip,
            &self.node_public_ipv6,
        ]
    }

    /// What a node managed by a kube subnet manager (flanneld's or ours) says as a lease:
    /// `None` when it is not one yet (no `kube-subnet-manager: "true"`, or no podCIDR).
    pub fn lease_of(&self, node: &NodeFacts, dual_stack: bool) -> Option<NodeLease> {
        if node.annotation(&self.kube_subnet_manager) != Some("true") {
            return None;
        }
        let key = match node.subnet_key(dual_stack) {
            Ok(Some(key)) => key,
            Ok(None) => return None,
            Err(why) => {
                return Some(NodeLease {
                    key: None,
                    attrs: Err(why),
                })
            }
        };
        Some(NodeLease {
            key: Some(key),
            attrs: self.attrs_of(node, dual_stack),
        })
    }

    fn attrs_of(&self, node: &NodeFacts, dual_stack: bool) -> Result<LeaseAttrs, Unreadable> {
        let size: usize = node.annotations.values().map(String::len).sum();
        if size > MAX_VALUE_BYTES {
            return Err(Unreadable::TooLarge { bytes: size });
        }
        let bad = |what: String| Unreadable::BadAnnotation(crate::ops::log::clip(&what, 160));
        let public_ip = match node.annotation(&self.public_ip) {
            None => return Err(bad(format!("{} is missing", self.public_ip))),
            Some(s) => s
                .parse::<Ipv4Addr>()
                .map_err(|_| bad(format!("{} {s:?} is not an IPv4 address", self.public_ip)))?,
        };
        let json = |name: &str| -> Result<Option<Value>, Unreadable> {
            match node.annotation(name) {
                None | Some("") | Some("null") => Ok(None),
                Some(s) => libcni::gojson::from_slice(s.as_bytes())
                    .map(Some)
                    .map_err(|e| bad(format!("{name} is not JSON ({e})"))),
            }
        };
        let public_ipv6 =
            match node.annotation(&self.public_ipv6) {
                Some(s) if dual_stack => Some(s.parse::<Ipv6Addr>().map_err(|_| {
                    bad(format!("{} {s:?} is not an IPv6 address", self.public_ipv6))
                })?),
                _ => None,
            };
        Ok(LeaseAttrs {
            public_ip,
            public_ipv6,
            backend_type: node
                .annotation(&self.backend_type)
                .unwrap_or_default()
                .to_string(),
            backend_data: json(&self.backend_data)?,
            backend_v6_data: if dual_stack {
                json(&self.backend_v6_data)?
            } else {
                None
            },
        })
    }

    /// The annotations that publish `attrs` as flanneld writes them, where an operator's
    /// `public-ip-overwrite` (`public-ipv6-overwrite`) stands for the public address.
    pub fn published(&self, attrs: &LeaseAttrs, node: &NodeFacts) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let data = |v: &Option<Value>| v.as_ref().map_or("null".to_string(), Value::to_string);
        out.insert(self.backend_type.clone(), attrs.backend_type.clone());
        // flanneld leaves vxlan's data out until the backend has some.
        let v4_data = data(&attrs.backend_data);
        if attrs.backend_type != "vxlan" || v4_data != "null" {
            out.insert(self.backend_data.clone(), v4_data);
            let ip = node
                .annotation(&self.public_ip_overwrite)
                .filter(|s| !s.is_empty())
                .map_or_else(|| attrs.public_ip.to_string(), str::to_string);
            out.insert(self.public_ip.clone(), ip);
        }
        if let Some(v6) = attrs.public_ipv6 {
            out.insert(self.backend_v6_data.clone(), data(&attrs.backend_v6_data));
            let ip = node
                .annotation(&self.public_ipv6_overwrite)
                .filter(|s| !s.is_empty())
                .map_or_else(|| v6.to_string(), str::to_string);
            out.insert(self.public_ipv6.clone(), ip);
        }
        out.insert(self.kube_subnet_manager.clone(), "true".to_string());
        out
    }

    /// The address an operator set for this node: `public-ip-overwrite`, else
    /// `node-public-ip` (flanneld reads both), when it holds an IPv4 address.
    pub fn public_ip_overwrite(&self, node: &NodeFacts) -> Option<Ipv4Addr> {
        [&self.public_ip_overwrite, &self.node_public_ip]
            .into_iter()
            .find_map(|name| node.annotation(name)?.parse().ok())
    }

    /// Likewise for IPv6: `public-ipv6-overwrite`, else `node-public-ipv6`.
    pub fn public_ipv6_overwrite(&self, node: &NodeFacts) -> Option<Ipv6Addr> {
        [&self.public_ipv6_overwrite, &self.node_public_ipv6]
            .into_iter()
            .find_map(|name| node.annotation(name)?.parse().ok())
    }
}

/// Whether `prefix` (completed, ending in '/' or '-') is `domain/[name-]`.
fn well_formed(prefix: &str) -> bool {
    let Some((domain, rest)) = prefix.split_once('/') else {
        return false;
    };
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    };
    let labels: Vec<&str> = domain.split('.').collect();
    let name_ok = rest.is_empty() || rest.strip_suffix('-').is_some_and(word);
    labels.len() >= 2 && labels.iter().all(|l| word(l)) && name_ok
}

/// What the agent reads of a Node: its name, when it was created, its pod CIDRs and its
/// annotations (the rest of the object — status, images — is not kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    /// Seconds since the epoch (the API's creationTimestamp).
    pub created: i64,
    pub pod_cidrs: Vec<String>,
    pub annotations: BTreeMap<String, String>,
}

impl NodeFacts {
    pub fn from_node(node: &k8s_openapi::api::core::v1::Node) -> NodeFacts {
        let meta = &node.metadata;
        let spec = node.spec.as_ref();
        // podCIDRs (1.16+) holds podCIDR first; an older API or writer sets podCIDR only.
        let mut pod_cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
        if pod_cidrs.is_empty() {
            if let Some(cidr) = spec.and_then(|s| s.pod_cidr.clone()) {
                pod_cidrs.push(cidr);
            }
        }
        NodeFacts {
            name: meta.name.clone().unwrap_or_default(),
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            pod_cidrs,
            annotations: meta.annotations.clone().unwrap_or_default(),
        }
    }

    pub fn annotation(&self, name: &str) -> Option<&str> {
        self.annotations.get(name).map(String::as_str)
    }

    /// The node's subnets as a lease key: its IPv4 podCIDR, and on a dual-stack network its
    /// IPv6 one. `Ok(None)` while no podCIDR is assigned.
    pub fn subnet_key(&self, dual_stack: bool) -> Result<Option<SubnetKey>, Unreadable> {
        if self.pod_cidrs.is_empty() {
            return Ok(None);
        }
        if self.pod_cidrs.len() > 2 {
            return Err(Unreadable::BadAnnotation(format!(
                "{} podCIDRs: one per address family at most",
                self.pod_cidrs.len()
            )));
        }
        let mut v4: Option<Ipv4Network> = None;
        let mut v6: Option<Ipv6Network> = None;
        for cidr in &self.pod_cidrs {
            match cidr.parse::<IpNetwork>() {
                Ok(IpNetwork::V4(n)) if n.ip() == n.network() => v4 = Some(n),
                Ok(IpNetwork::V6(n)) if n.ip() == n.network() => v6 = Some(n),
                _ => {
                    return Err(Unreadable::BadAnnotation(format!(
                        "podCIDR {:?} is not a network address with a prefix length",
                        crate::ops::log::clip(cidr, 60)
                    )))
                }
            }
        }
        let Some(v4) = v4 else {
            return Err(Unreadable::BadAnnotation(
                "no IPv4 podCIDR (IPv6-only nodes are not supported)".into(),
            ));
        };
        if dual_stack && v6.is_none() {
            return Err(Unreadable::BadAnnotation(
                "no IPv6 podCIDR on a dual-stack network".into(),
            ));
        }
        Ok(Some(SubnetKey {
            v4,
            v6: if dual_stack { v6 } else { None },
        }))
    }
}

/// A managed node as a lease: its key (`None` when its podCIDRs cannot name one) and its
/// value.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLease {
    pub key: Option<SubnetKey>,
    pub attrs: Result<LeaseAttrs, Unreadable>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: &[(&str, &str)], cidrs: &[&str]) -> NodeFacts {
        NodeFacts {
            name: "n1".into(),
            created: 1,
            pod_cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn names_follow_flanneld_prefix_rules() {
        let a = Annotations::new(DEFAULT_PREFIX).unwrap();
        assert_eq!(a.public_ip, "flannel.alpha.coreos.com/public-ip");
        assert_eq!(
            a.kube_subnet_manager,
            "flannel.alpha.coreos.com/kube-subnet-manager"
        );
        let a = Annotations::new("example.com/net").unwrap();
        assert_eq!(a.backend_data, "example.com/net-backend-data");
        let a = Annotations::new("example.com/net-").unwrap();
        assert_eq!(a.backend_data, "example.com/net-backend-data");
        for bad in ["a/b/c", "nodomain", "Example.com", "ex ample.com", "a.b/C"] {
            assert!(Annotations::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_flanneld_node_reads_as_its_lease() {
        let a = Annotations::new(DEFAULT_PREFIX).unwrap();
        let n = node(
            &[
                ("flannel.alpha.coreos.com/kube-subnet-manager", "true"),
                ("flannel.alpha.coreos.com/backend-type", "vxlan"),
                (
                    "flannel.alpha.coreos.com/backend-data",
                    r#"{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}"#,
                ),
                ("flannel.alpha.coreos.com/public-ip", "192.168.64.3"),
            ],
            &["10.244.3.0/24"],
        );
        let lease = a.lease_of(&n, false).unwrap();
        assert_eq!(lease.key.unwrap().to_string(), "10.244.3.0-24");
        let attrs = lease.attrs.unwrap();
        assert_eq!(
            attrs.to_json(),
            r#"{"PublicIP":"192.168.64.3","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}"#
        );
        // What we publish for it is what flanneld wrote.
        let published = a.published(&attrs, &n);
        for (k, v) in &n.annotations {
            assert_eq!(published.get(k), Some(v), "{k}");
        }
        assert_eq!(published.len(), n.annotations.len());
    }

    #[test]
    fn unmanaged_nodes_and_nodes_without_podcidr_are_no_leases() {
        let a = Annotations::new(DEFAULT_PREFIX).unwrap();
        assert!(a.lease_of(&node(&[], &["10.244.3.0/24"]), false).is_none());
        let managed = [("flannel.alpha.coreos.com/kube-subnet-manager", "true")];
        assert!(a.lease_of(&node(&managed, &[]), false).is_none());
        let l = a.lease_of(&node(&managed, &["10.244.3.0/24"]), false);
        assert!(matches!(
            l,
            Some(NodeLease {
                key: Some(_),
                attrs: Err(Unreadable::BadAnnotation(_))
            })
        ));
        for bad in [
            &["10.244.3.1/24"][..],
            &["nope"],
            &["fd00::/64"],
            &["a", "b", "c"],
        ] {
            let l = a.lease_of(&node(&managed, bad), false).unwrap();
            assert!(l.key.is_none(), "{bad:?}");
        }
    }

    #[test]
    fn dual_stack_keys_and_overwrites() {
        let a = Annotations::new(DEFAULT_PREFIX).unwrap();
        let n = node(
            &[
                ("flannel.alpha.coreos.com/kube-subnet-manager", "true"),
                ("flannel.alpha.coreos.com/public-ip", "192.168.64.3"),
                ("flannel.alpha.coreos.com/public-ipv6", "fd00::3"),
                (
                    "flannel.alpha.coreos.com/public-ip-overwrite",
                    "192.168.99.3",
                ),
            ],
            &["10.244.3.0/24", "fd00:10:244:3::/64"],
        );
        let lease = a.lease_of(&n, true).unwrap();
        assert_eq!(
            lease.key.unwrap().to_string(),
            "10.244.3.0-24&fd00:10:244:3::-64"
        );
        let attrs = lease.attrs.unwrap();
        assert_eq!(attrs.public_ipv6, Some("fd00::3".parse().unwrap()));
        let published = a.published(&attrs, &n);
        assert_eq!(
            published["flannel.alpha.coreos.com/public-ip"],
            "192.168.99.3"
        );
        assert_eq!(
            published["flannel.alpha.coreos.com/backend-v6-data"],
            "null"
        );
        assert_eq!(
            a.public_ip_overwrite(&n),
            Some("192.168.99.3".parse().unwrap())
        );
        // Single-stack: the IPv6 podCIDR is not part of the key.
        assert_eq!(
            a.lease_of(&n, false).unwrap().key.unwrap().to_string(),
            "10.244.3.0-24"
        );
        let v4_only = node(
            &[("flannel.alpha.coreos.com/kube-subnet-manager", "true")],
            &["10.244.3.0/24"],
        );
        assert!(a.lease_of(&v4_only, true).unwrap().key.is_none());
    }

    #[test]
    fn vxlan_without_data_publishes_no_data_yet() {
        let a = Annotations::new(DEFAULT_PREFIX).unwrap();
        let attrs = LeaseAttrs {
            public_ip: "192.168.64.3".parse().unwrap(),
            public_ipv6: None,
            backend_type: "vxlan".into(),
            backend_data: None,
            backend_v6_data: None,
        };
        let p = a.published(&attrs, &node(&[], &[]));
        assert!(!p.contains_key("flannel.alpha.coreos.com/backend-data"));
        assert!(!p.contains_key("flannel.alpha.coreos.com/public-ip"));
        assert_eq!(p["flannel.alpha.coreos.com/backend-type"], "vxlan");
    }
}
