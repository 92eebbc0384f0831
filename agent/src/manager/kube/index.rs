//! The nodes as leases, kept current by the watch (an informer's cache): a full listing
//! replaces it, each watch event updates it and says what changed for the leases. A periodic
//! re-list is served from here while the watch has delivered everything, so the API sees one
//! watch per node and no polling.
//!
//! Two nodes can be given one podCIDR (an operator's edit, or two clusters' controllers): a
//! key has one lease, held by the older node (creationTimestamp, then name); the other is
//! reported as a record that is not a lease, and takes the key over if the older goes.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use super::annotations::{Annotations, NodeFacts, NodeLease};
use crate::manager::{Change, JunkKey, Snapshot, StoredLease};
use crate::subnet::key::SubnetKey;
use crate::subnet::validate::Class;

/// One managed node as known.
#[derive(Debug, Clone)]
struct Entry {
    created: i64,
    lease: NodeLease,
    /// Changes with the node's podCIDRs or annotations (and nothing else it holds).
    version: i64,
}

/// Who claims a key, oldest first.
type Claimants = BTreeSet<(i64, String)>;

#[derive(Debug)]
pub struct NodeIndex {
    annotations: Annotations,
    dual_stack: bool,
    own_name: String,
    entries: HashMap<String, Entry>,
    claims: BTreeMap<SubnetKey, Claimants>,
    /// This node as last seen (for its annotations and podCIDR).
    pub own: Option<NodeFacts>,
    /// The resourceVersion everything here is current at.
    pub resume: String,
    /// Whether the index holds everything up to `resume` (false until a listing, and after a
    /// watch expired or failed): a re-list must then ask the API.
    pub synced: bool,
}

impl NodeIndex {
    pub fn new(annotations: Annotations, dual_stack: bool, own_name: &str) -> NodeIndex {
        NodeIndex {
            annotations,
            dual_stack,
            own_name: own_name.to_string(),
            entries: HashMap::new(),
            claims: BTreeMap::new(),
            own: None,
            resume: String::new(),
            synced: false,
        }
    }

    /// Replaces everything with a full listing at `resume`.
    pub fn replace(&mut self, nodes: Vec<NodeFacts>, resume: String) {
        self.entries.clear();
        self.claims.clear();
        self.own = None;
        for node in nodes {
            self.upsert(node);
        }
        self.resume = resume;
        self.synced = true;
    }

    /// The leases as a listing: each key's holder, and the nodes that are not usable leases.
    pub fn snapshot(&self) -> Snapshot<String> {
        let mut leases = BTreeMap::new();
        for (key, claimants) in &self.claims {
            if let Some(lease) = self.holder_lease(claimants) {
                leases.insert(*key, lease);
            }
        }
        let junk = self
            .entries
            .iter()
            .filter_map(|(name, e)| self.junk_of(name, e))
            .collect();
        Snapshot {
            resume: self.resume.clone(),
            leases,
            junk,
        }
    }

    /// A node added or changed: what it changes among the leases.
    pub fn node_changed(&mut self, node: NodeFacts) -> Vec<Change> {
        let name = node.name.clone();
        let before = self.entries.get(&name).map(|e| (e.lease.key, e.version));
        let after_key = self.upsert(node);
        let after_version = self.entries.get(&name).map(|e| e.version);
        if before.map(|b| b.1) == after_version && after_version.is_some() {
            return Vec::new();
        }
        let mut keys: Vec<SubnetKey> = before.and_then(|b| b.0).into_iter().collect();
        keys.extend(after_key);
        self.changes_for(&keys, Some(&name))
    }

    /// A node deleted: its key goes (or passes to the next claimant).
    pub fn node_deleted(&mut self, name: &str) -> Vec<Change> {
        if name == self.own_name {
            self.own = None;
        }
        let Some(entry) = self.entries.remove(name) else {
            return Vec::new();
        };
        let Some(key) = entry.lease.key else {
            return Vec::new();
        };
        let was_holder = self.holder_name(&key) == Some(name);
        self.unclaim(&key, entry.created, name);
        if !was_holder {
            return Vec::new();
        }
        match self.claims.get(&key).and_then(|c| self.holder_lease(c)) {
            Some(lease) => vec![Change::Put { key, lease }],
            None => vec![Change::Delete {
                key,
                name: format!("node {name}"),
            }],
        }
    }

    /// The name of the node holding `key`.
    pub fn holder_name(&self, key: &SubnetKey) -> Option<&str> {
        self.claims
            .get(key)
            .and_then(|c| c.first())
            .map(|(_, n)| n.as_str())
    }

    /// Records `node`; returns its key.
    fn upsert(&mut self, node: NodeFacts) -> Option<SubnetKey> {
        let name = node.name.clone();
        let old = self.entries.remove(&name);
        if let Some(key) = old.as_ref().and_then(|o| o.lease.key) {
            self.unclaim(&key, old.as_ref().map_or(0, |o| o.created), &name);
        }
        let mut lease = self.annotations.lease_of(&node, self.dual_stack);
        // Annotations broken on a node that had a good lease for the same podCIDR (an
        // operator's edit its agent will undo): the last good value stands, as flanneld keeps
        // its last lease for a node it cannot read.
        if let (Some(new), Some(old)) = (lease.as_mut(), old.as_ref()) {
            if new.attrs.is_err() && new.key.is_some() && new.key == old.lease.key {
                if let Ok(good) = &old.lease.attrs {
                    new.attrs = Ok(good.clone());
                }
            }
        }
        let version = fingerprint(&self.annotations, &node);
        let created = node.created;
        if name == self.own_name {
            self.own = Some(node);
        }
        let lease = lease?;
        let key = lease.key;
        if let Some(key) = key {
            self.claims
                .entry(key)
                .or_default()
                .insert((created, name.clone()));
        }
        self.entries.insert(
            name,
            Entry {
                created,
                lease,
                version,
            },
        );
        key
    }

    fn unclaim(&mut self, key: &SubnetKey, created: i64, name: &str) {
        if let Some(c) = self.claims.get_mut(key) {
            c.remove(&(created, name.to_string()));
            if c.is_empty() {
                self.claims.remove(key);
            }
        }
    }

    fn holder_lease(&self, claimants: &Claimants) -> Option<StoredLease> {
        let (_, name) = claimants.first()?;
        let e = self.entries.get(name)?;
        Some(StoredLease {
            attrs: e.lease.attrs.clone(),
            reservation: false,
            created: e.created,
            version: e.version,
        })
    }

    /// The leases of `keys` as they now stand, and `changed` reported if it holds none.
    fn changes_for(&self, keys: &[SubnetKey], changed: Option<&str>) -> Vec<Change> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for key in keys {
            if !seen.insert(*key) {
                continue;
            }
            match self.claims.get(key).and_then(|c| self.holder_lease(c)) {
                Some(lease) => out.push(Change::Put { key: *key, lease }),
                None => out.push(Change::Delete {
                    key: *key,
                    name: changed.map_or_else(|| key.to_string(), |n| format!("node {n}")),
                }),
            }
        }
        if let Some(name) = changed {
            if let Some(junk) = self.entries.get(name).and_then(|e| self.junk_of(name, e)) {
                out.push(Change::NotALease(junk));
            }
        }
        out
    }

    /// Why a managed node is not a lease: podCIDRs that name no key, or a key an older node
    /// holds.
    fn junk_of(&self, name: &str, e: &Entry) -> Option<JunkKey> {
        let (class, why) = match e.lease.key {
            None => match &e.lease.attrs {
                Err(why) => (Class::Unreadable, why.to_string()),
                Ok(_) => (Class::Subnet, "no usable podCIDR".to_string()),
            },
            Some(key) => {
                let holder = self.holder_name(&key)?;
                if holder == name {
                    return None;
                }
                (
                    Class::Overlap,
                    format!("its podCIDR {key} is held by node {holder}, registered before it"),
                )
            }
        };
        Some(JunkKey::with_reason(&format!("node {name}"), class, why))
    }
}

/// What changes when a node's podCIDRs or annotations change, and only then (a kubelet's
/// status updates leave it alone).
/// A version of what the agent reads of `node`: its podCIDRs and our annotations. Other
/// annotations (the TTL controller's, an operator's) leave it as it was.
fn fingerprint(names: &Annotations, node: &NodeFacts) -> i64 {
    let mut h = DefaultHasher::new();
    node.pod_cidrs.hash(&mut h);
    for name in names.names() {
        node.annotation(name).hash(&mut h);
    }
    // Positive, as versions are elsewhere.
    (h.finish() >> 1) as i64
}

#[cfg(test)]
mod tests {
    use super::super::annotations::DEFAULT_PREFIX;
    use super::*;

    fn node(name: &str, created: i64, cidr: &str, ip: &str) -> NodeFacts {
        let p = DEFAULT_PREFIX;
        NodeFacts {
            name: name.into(),
            created,
            pod_cidrs: vec![cidr.into()],
            annotations: [
                (format!("{p}/kube-subnet-manager"), "true".to_string()),
                (format!("{p}/backend-type"), "host-gw".to_string()),
                (format!("{p}/public-ip"), ip.to_string()),
            ]
            .into_iter()
            .collect(),
        }
    }

    fn index(nodes: Vec<NodeFacts>) -> NodeIndex {
        let mut i = NodeIndex::new(Annotations::new(DEFAULT_PREFIX).unwrap(), false, "a");
        i.replace(nodes, "100".into());
        i
    }

    fn key(s: &str) -> SubnetKey {
        SubnetKey::parse(s).unwrap()
    }

    #[test]
    fn listing_holds_every_managed_node() {
        let mut unmanaged = node("c", 3, "10.244.3.0/24", "192.168.1.3");
        unmanaged.annotations.clear();
        let i = index(vec![
            node("a", 1, "10.244.1.0/24", "192.168.1.1"),
            node("b", 2, "10.244.2.0/24", "192.168.1.2"),
            unmanaged,
        ]);
        let s = i.snapshot();
        assert_eq!(s.resume, "100");
        assert_eq!(s.leases.len(), 2);
        assert!(s.junk.is_empty());
        assert!(i.own.is_some());
        assert_eq!(i.holder_name(&key("10.244.2.0-24")), Some("b"));
    }

    #[test]
    fn status_only_updates_change_nothing() {
        let mut i = index(vec![node("b", 2, "10.244.2.0/24", "192.168.1.2")]);
        assert!(i
            .node_changed(node("b", 2, "10.244.2.0/24", "192.168.1.2"))
            .is_empty());
        // Annotations the agent does not read (the TTL controller's) change nothing either.
        let mut ttl = node("b", 2, "10.244.2.0/24", "192.168.1.2");
        ttl.annotations
            .insert("node.alpha.kubernetes.io/ttl".into(), "0".into());
        assert!(i.node_changed(ttl).is_empty());
        let changes = i.node_changed(node("b", 2, "10.244.2.0/24", "192.168.1.9"));
        assert!(matches!(&changes[..], [Change::Put { .. }]), "{changes:?}");
    }

    #[test]
    fn a_new_podcidr_moves_the_lease() {
        let mut i = index(vec![node("b", 2, "10.244.2.0/24", "192.168.1.2")]);
        let changes = i.node_changed(node("b", 2, "10.244.5.0/24", "192.168.1.2"));
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(
            matches!(&changes[0], Change::Delete { key: k, name } if *k == key("10.244.2.0-24") && name == "node b")
        );
        assert!(matches!(&changes[1], Change::Put { key: k, .. } if *k == key("10.244.5.0-24")));
    }

    #[test]
    fn the_older_node_keeps_a_shared_podcidr_until_it_goes() {
        let mut i = index(vec![node("b", 2, "10.244.2.0/24", "192.168.1.2")]);
        let changes = i.node_changed(node("c", 3, "10.244.2.0/24", "192.168.1.3"));
        // b still holds it: the same lease, and c reported.
        assert!(matches!(&changes[0], Change::Put { lease, .. } if lease.created == 2));
        let Change::NotALease(junk) = &changes[1] else {
            panic!("{changes:?}")
        };
        assert_eq!(
            (junk.shown.as_str(), junk.class),
            ("node c", Class::Overlap)
        );
        assert_eq!(i.snapshot().junk.len(), 1);
        // Still refused for the same reason after another update: the same record (logged
        // and counted once).
        let mut again = node("c", 3, "10.244.2.0/24", "192.168.1.3");
        again
            .annotations
            .insert(format!("{DEFAULT_PREFIX}/backend-data"), "null".into());
        let changes = i.node_changed(again);
        assert!(
            matches!(changes.last(), Some(Change::NotALease(j)) if j.fingerprint == junk.fingerprint),
            "{changes:?}"
        );
        let changes = i.node_deleted("b");
        assert!(matches!(&changes[..], [Change::Put { lease, .. }] if lease.created == 3));
        let changes = i.node_deleted("c");
        assert!(matches!(&changes[..], [Change::Delete { .. }]));
        assert!(i.snapshot().leases.is_empty());
        assert!(i.node_deleted("c").is_empty());
    }

    #[test]
    fn a_node_losing_its_annotations_loses_its_lease() {
        let mut i = index(vec![node("b", 2, "10.244.2.0/24", "192.168.1.2")]);
        let mut bare = node("b", 2, "10.244.2.0/24", "192.168.1.2");
        bare.annotations.clear();
        let changes = i.node_changed(bare);
        assert!(
            matches!(&changes[..], [Change::Delete { .. }]),
            "{changes:?}"
        );
        assert!(i.snapshot().leases.is_empty());
    }

    #[test]
    fn broken_annotations_keep_the_last_good_value() {
        let mut i = index(vec![node("b", 2, "10.244.2.0/24", "192.168.1.2")]);
        let mut broken = node("b", 2, "10.244.2.0/24", "192.168.1.2");
        broken
            .annotations
            .remove(&format!("{DEFAULT_PREFIX}/public-ip"));
        let changes = i.node_changed(broken);
        assert!(
            matches!(&changes[..], [Change::Put { lease, .. }] if lease.attrs.is_ok()),
            "{changes:?}"
        );
        // A node first seen broken is refused.
        let mut fresh = node("c", 3, "10.244.3.0/24", "192.168.1.3");
        fresh
            .annotations
            .remove(&format!("{DEFAULT_PREFIX}/public-ip"));
        let changes = i.node_changed(fresh);
        assert!(matches!(&changes[..], [Change::Put { lease, .. }] if lease.attrs.is_err()));
    }

    #[test]
    fn bad_podcidrs_are_reported_not_leased() {
        let mut i = index(vec![]);
        let changes = i.node_changed(node("b", 2, "10.244.2.1/24", "192.168.1.2"));
        assert!(
            matches!(&changes[..], [Change::NotALease(j)] if j.why.as_deref().is_some_and(|w| w.contains("podCIDR")))
        );
        assert_eq!(i.snapshot().junk.len(), 1);
    }
}
