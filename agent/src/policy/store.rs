//! The cluster as the policy informers last saw it: namespaces, pods and policies by key, each
//! kind replaced whole by a listing and changed one object at a time by its watch. It says
//! when all three kinds have been listed (before that, nothing is enforced: a plan from half
//! a cluster would open or close the wrong flows) and builds the compiler's input.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use netpolicy::{Cluster, Namespace, Pod, PodKey, Policy};

use super::objects::PodRecord;

/// One object as an informer hands it over; `None` is "gone or not for policy".
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Namespace(Option<Namespace>),
    Pod(Option<PodRecord>),
    /// A policy the compiler's types could not hold is `Err` with why (it is reported, and
    /// enforced as nothing).
    Policy(Option<Result<Policy, String>>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Namespaces,
    Pods,
    Policies,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Namespaces => "namespaces",
            Kind::Pods => "pods",
            Kind::Policies => "networkpolicies",
        }
    }
}

/// What an informer reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A full listing of one kind: every object of it, by key.
    Listed(Kind, Vec<(String, Object)>),
    /// One object changed (added, modified or deleted: a deleted one is `None` inside).
    Changed(String, Object),
}

#[derive(Debug, Default)]
pub struct Store {
    namespaces: BTreeMap<String, Namespace>,
    pods: BTreeMap<String, PodRecord>,
    policies: BTreeMap<String, Policy>,
    /// Policies that could not be read, with why.
    unreadable: BTreeMap<String, String>,
    /// Addresses the CNI chain gave for pods whose status has none yet, by pod key (the
    /// API's status wins once it has addresses).
    admitted: BTreeMap<String, Vec<IpAddr>>,
    listed: BTreeSet<Kind>,
}

impl Store {
    /// Applies `update`; whether anything changed.
    pub fn apply(&mut self, update: Update) -> bool {
        match update {
            Update::Listed(kind, objects) => {
                // The kind is replaced whole; it changed if its objects differ from before.
                let changed = match kind {
                    Kind::Namespaces => {
                        let before = std::mem::take(&mut self.namespaces);
                        self.put_all(objects);
                        before != self.namespaces
                    }
                    Kind::Pods => {
                        let before = std::mem::take(&mut self.pods);
                        self.put_all(objects);
                        let pods = &self.pods;
                        self.admitted.retain(|k, _| pods.contains_key(k));
                        before != self.pods
                    }
                    Kind::Policies => {
                        let before = (
                            std::mem::take(&mut self.policies),
                            std::mem::take(&mut self.unreadable),
                        );
                        self.put_all(objects);
                        before.0 != self.policies || before.1 != self.unreadable
                    }
                };
                self.listed.insert(kind) || changed
            }
            Update::Changed(key, object) => self.put(key, object),
        }
    }

    /// Stores one object; whether it changed anything.
    fn put(&mut self, key: String, object: Object) -> bool {
        match object {
            Object::Namespace(Some(ns)) => self.namespaces.insert(key, ns.clone()) != Some(ns),
            Object::Namespace(None) => self.namespaces.remove(&key).is_some(),
            Object::Pod(Some(p)) => {
                if !p.pod.ips.is_empty() {
                    self.admitted.remove(&key);
                }
                let addressed = !p.pod.ips.is_empty() || self.admitted.contains_key(&key);
                let before = self.pods.insert(key, p.clone());
                // A pod without an address is in no set and no target: until it has one,
                // its changes change no plan (but its labels are kept for its admission).
                let was_addressed = before.as_ref().is_some_and(|b| !b.pod.ips.is_empty());
                (addressed || was_addressed) && before != Some(p)
            }
            Object::Pod(None) => {
                self.admitted.remove(&key);
                self.pods.remove(&key).is_some()
            }
            Object::Policy(Some(Ok(p))) => {
                self.unreadable.remove(&key);
                self.policies.insert(key, p.clone()) != Some(p)
            }
            Object::Policy(Some(Err(why))) => {
                let was = self.policies.remove(&key).is_some();
                self.unreadable.insert(key, why.clone()) != Some(why) || was
            }
            Object::Policy(None) => {
                let a = self.policies.remove(&key).is_some();
                self.unreadable.remove(&key).is_some() || a
            }
        }
    }

    fn put_all(&mut self, objects: Vec<(String, Object)>) {
        for (key, object) in objects {
            self.put(key, object);
        }
    }

    /// Whether every kind has been listed once.
    pub fn complete(&self) -> bool {
        self.listed.len() == 3
    }

    /// The addresses the CNI chain gives for pod `key` at ADD, before the pod's status has
    /// them: `None` when the pod is not known (yet), else whether anything changed.
    pub fn admit(&mut self, key: &str, ips: Vec<IpAddr>) -> Option<bool> {
        let record = self.pods.get(key)?;
        if !record.pod.ips.is_empty() {
            // The API's addresses are the truth; a different claim changes nothing.
            return Some(false);
        }
        Some(self.admitted.insert(key.to_string(), ips.clone()) != Some(ips))
    }

    pub fn cluster(&self) -> Cluster {
        let pods = self
            .pods
            .iter()
            .map(|(key, r)| {
                let mut pod = r.pod.clone();
                if pod.ips.is_empty() {
                    pod.ips = self.admitted.get(key).cloned().unwrap_or_default();
                }
                pod
            })
            .collect();
        Cluster {
            namespaces: self.namespaces.values().cloned().collect(),
            pods,
            policies: self.policies.values().cloned().collect(),
        }
    }

    /// The pods running on `node`.
    pub fn pods_on(&self, node: &str) -> BTreeSet<PodKey> {
        self.pods
            .values()
            .filter(|r| r.node == node)
            .map(|r| r.pod.key())
            .collect()
    }

    /// Pods with an address (from their status or admitted).
    pub fn pod_count(&self) -> usize {
        self.pods
            .iter()
            .filter(|(k, r)| !r.pod.ips.is_empty() || self.admitted.contains_key(*k))
            .count()
    }

    pub fn policy_count(&self) -> usize {
        self.policies.len()
    }

    /// Policies that could not be read, with why.
    pub fn unreadable(&self) -> &BTreeMap<String, String> {
        &self.unreadable
    }

    /// The pod named `key` (`namespace/name`), with its addresses (admitted ones if its
    /// status has none).
    pub fn pod(&self, key: &str) -> Option<Pod> {
        let mut pod = self.pods.get(key)?.pod.clone();
        if pod.ips.is_empty() {
            pod.ips = self.admitted.get(key).cloned().unwrap_or_default();
        }
        Some(pod)
    }
}

/// An object's key: `namespace/name`, or the name of a cluster-scoped one.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, node: &str, ip: &str) -> Object {
        Object::Pod(Some(PodRecord {
            pod: Pod {
                namespace: ns.into(),
                name: name.into(),
                ips: vec![ip.parse().unwrap()],
                ..Pod::default()
            },
            node: node.into(),
        }))
    }

    #[test]
    fn complete_after_every_kind_is_listed() {
        let mut s = Store::default();
        assert!(s.apply(Update::Listed(Kind::Pods, vec![])));
        assert!(s.apply(Update::Listed(Kind::Namespaces, vec![])));
        assert!(!s.complete());
        assert!(s.apply(Update::Listed(Kind::Policies, vec![])));
        assert!(s.complete());
        // The same empty listing again changes nothing.
        assert!(!s.apply(Update::Listed(Kind::Policies, vec![])));
    }

    #[test]
    fn changes_are_told_and_pods_are_found_by_node() {
        let mut s = Store::default();
        assert!(s.apply(Update::Changed(
            "a/p".into(),
            pod("a", "p", "n1", "10.0.0.2")
        )));
        assert!(!s.apply(Update::Changed(
            "a/p".into(),
            pod("a", "p", "n1", "10.0.0.2")
        )));
        assert!(s.apply(Update::Changed(
            "a/q".into(),
            pod("a", "q", "n2", "10.0.1.2")
        )));
        assert_eq!(s.pods_on("n1").len(), 1);
        assert_eq!(s.cluster().pods.len(), 2);
        assert!(s.apply(Update::Changed("a/q".into(), Object::Pod(None))));
        assert!(!s.apply(Update::Changed("a/q".into(), Object::Pod(None))));
        assert!(s.apply(Update::Changed(
            "a/x".into(),
            Object::Policy(Some(Err("spec: bad".into())))
        )));
        assert_eq!(s.unreadable().len(), 1);
        assert!(s.apply(Update::Changed("a/x".into(), Object::Policy(None))));
        assert!(s.unreadable().is_empty());
    }

    #[test]
    fn admitted_addresses_until_the_status_has_them() {
        let mut s = Store::default();
        let pending = Object::Pod(Some(PodRecord {
            pod: Pod {
                namespace: "a".into(),
                name: "p".into(),
                ..Pod::default()
            },
            node: "n1".into(),
        }));
        assert_eq!(s.admit("a/p", vec!["10.0.0.2".parse().unwrap()]), None);
        s.apply(Update::Changed("a/p".into(), pending.clone()));
        assert_eq!(s.pod_count(), 0);
        assert_eq!(
            s.admit("a/p", vec!["10.0.0.2".parse().unwrap()]),
            Some(true)
        );
        assert_eq!(
            s.admit("a/p", vec!["10.0.0.2".parse().unwrap()]),
            Some(false)
        );
        assert_eq!(s.cluster().pods[0].ips.len(), 1);
        assert_eq!(s.pod_count(), 1);
        // A status update without addresses keeps the admitted ones.
        s.apply(Update::Changed("a/p".into(), pending));
        assert_eq!(s.cluster().pods[0].ips.len(), 1);
        // The status's own addresses win, and the admission is forgotten.
        s.apply(Update::Changed(
            "a/p".into(),
            pod("a", "p", "n1", "10.0.0.3"),
        ));
        assert_eq!(
            s.cluster().pods[0].ips,
            ["10.0.0.3".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            s.admit("a/p", vec!["10.0.0.2".parse().unwrap()]),
            Some(false)
        );
        s.apply(Update::Changed("a/p".into(), Object::Pod(None)));
        assert!(s.admitted.is_empty());
    }
}
