//! An in-memory [`SubnetManager`] for unit tests: leases in a map, every write a new version,
//! watches replaying the writes after their resume point, and compaction (a watch from before
//! it asks for a re-list), so what the agent builds on the seam is tested without etcd.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::backend::LeaseValue;
use crate::error::{AgentError, StoreFailure};
use crate::manager::{
    Change, JunkKey, LeaseRequest, LeaseWatch, OwnLease, Snapshot, StoredLease, SubnetManager,
    WatchEvent,
};
use crate::subnet::config::NetConfig;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;

#[derive(Default)]
struct Store {
    config: Option<NetConfig>,
    leases: BTreeMap<SubnetKey, StoredLease>,
    /// The version of the last write.
    version: i64,
    /// Every write, with its version.
    history: Vec<(i64, Change)>,
    /// Writes up to this version are forgotten: a watch from before them must re-list.
    compacted: i64,
}

/// The store, shared by the manager and the test driving it.
#[derive(Clone, Default)]
pub struct FakeManager {
    store: Rc<RefCell<Store>>,
}

impl FakeManager {
    pub fn new(config: NetConfig) -> FakeManager {
        let fake = FakeManager::default();
        fake.store.borrow_mut().config = Some(config);
        fake
    }

    /// Another node writes its lease.
    pub fn put(&self, key: SubnetKey, attrs: LeaseAttrs) {
        let mut s = self.store.borrow_mut();
        s.version += 1;
        let created = s.leases.get(&key).map_or(s.version, |l| l.created);
        let lease = StoredLease {
            attrs: Ok(attrs),
            reservation: false,
            created,
            version: s.version,
        };
        s.leases.insert(key, lease.clone());
        let v = s.version;
        s.history.push((v, Change::Put { key, lease }));
    }

    /// A lease goes (its node left, or it expired).
    pub fn delete(&self, key: SubnetKey) {
        let mut s = self.store.borrow_mut();
        s.version += 1;
        s.leases.remove(&key);
        let v = s.version;
        s.history.push((
            v,
            Change::Delete {
                key,
                name: fake_name(&key),
            },
        ));
    }

    /// Someone writes a record that is no lease.
    pub fn put_junk(&self, name: &str) {
        let mut s = self.store.borrow_mut();
        s.version += 1;
        let v = s.version;
        s.history
            .push((v, Change::NotALease(JunkKey::new(name.as_bytes(), v))));
    }

    /// The store forgets its history so far.
    pub fn compact(&self) {
        let mut s = self.store.borrow_mut();
        s.compacted = s.version;
        s.history.clear();
    }

    /// The network config goes.
    pub fn remove_config(&self) {
        self.store.borrow_mut().config = None;
    }
}

fn fake_name(key: &SubnetKey) -> String {
    format!("fake/{key}")
}

/// A watch from a version on.
pub struct FakeWatch {
    store: Rc<RefCell<Store>>,
    after: i64,
}

impl LeaseWatch for FakeWatch {
    type Resume = i64;

    /// What was written since the last call, or `None` when nothing was (the fake "server"
    /// closes the watch rather than wait).
    async fn next(&mut self) -> Result<Option<WatchEvent<i64>>, AgentError> {
        let s = self.store.borrow();
        if self.after < s.compacted {
            return Ok(Some(WatchEvent::Relist));
        }
        let changes: Vec<Change> = s
            .history
            .iter()
            .filter(|(v, _)| *v > self.after)
            .map(|(_, c)| c.clone())
            .collect();
        if changes.is_empty() {
            return Ok(None);
        }
        self.after = s.version;
        Ok(Some(WatchEvent::Changes {
            changes,
            resume: Some(s.version),
            partial: false,
        }))
    }
}

impl SubnetManager for FakeManager {
    type Resume = i64;
    type Watch = FakeWatch;

    fn store_name(&self) -> &'static str {
        "fake"
    }

    fn server(&self) -> &str {
        "memory"
    }

    fn config_name(&self) -> String {
        "fake/config".into()
    }

    fn lease_name(&self, key: &SubnetKey) -> String {
        fake_name(key)
    }

    async fn network_config(&mut self) -> Result<NetConfig, AgentError> {
        self.store
            .borrow()
            .config
            .clone()
            .ok_or_else(|| AgentError::Store {
                failure: StoreFailure::ConfigMissing,
                source: "no config".into(),
            })
    }

    /// The lease with our address, else the first free subnet.
    async fn acquire(&mut self, request: &LeaseRequest<'_>) -> Result<OwnLease, AgentError> {
        let (ours, taken) = {
            let s = self.store.borrow();
            let ours = s
                .leases
                .iter()
                .find(|(_, l)| {
                    l.attrs
                        .as_ref()
                        .is_ok_and(|a| a.public_ip == request.public_ip)
                })
                .map(|(k, _)| *k);
            (ours, s.leases.keys().map(|k| k.v4).collect::<Vec<_>>())
        };
        let key = match ours {
            Some(key) => key,
            None => SubnetKey {
                v4: request.net.pick_free_subnet(&taken, 0)?,
                v6: None,
            },
        };
        let attrs = (request.attrs_for)(&key)?;
        self.put(key, attrs.clone());
        Ok(OwnLease {
            key,
            attrs,
            renew_at: None,
        })
    }

    async fn renew(&mut self, own: &mut OwnLease) -> Result<(), AgentError> {
        if !self.store.borrow().leases.contains_key(&own.key) {
            return Err(AgentError::LeaseRevoked {
                key: fake_name(&own.key),
                store: "fake",
            });
        }
        Ok(())
    }

    async fn publish(&mut self, own: &mut OwnLease, value: LeaseValue) {
        if value.attrs != own.attrs {
            own.attrs = value.attrs;
            self.put(own.key, own.attrs.clone());
        }
    }

    async fn list(&mut self) -> Result<Snapshot<i64>, AgentError> {
        let s = self.store.borrow();
        Ok(Snapshot {
            resume: s.version,
            leases: s.leases.clone(),
            junk: Vec::new(),
        })
    }

    async fn watch(&mut self, resume: &i64) -> Result<FakeWatch, AgentError> {
        Ok(FakeWatch {
            store: self.store.clone(),
            after: *resume,
        })
    }

    async fn watch_lost(&mut self) {}
}

/// The seam's users on the fake: the membership the agent keeps from a listing and a watch.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::parse_config;
    use crate::backend::Backend;
    use crate::membership::Membership;

    const CONFIG: &str = r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#;
    const OWN_IP: &str = "192.168.0.9";

    fn attrs(ip: &str) -> LeaseAttrs {
        LeaseAttrs::parse(format!(r#"{{"PublicIP":"{ip}","BackendType":"host-gw"}}"#).as_bytes())
            .unwrap()
    }

    fn key(k: &str) -> SubnetKey {
        SubnetKey::parse(k).unwrap()
    }

    /// An agent's view on the fake: its lease acquired, the leases listed, a watch open.
    struct Node {
        manager: FakeManager,
        net: NetConfig,
        backend: Box<dyn Backend>,
        own: OwnLease,
        members: Membership,
        resume: i64,
    }

    impl Node {
        async fn start(manager: &FakeManager) -> Node {
            let mut manager = manager.clone();
            let net = manager.network_config().await.unwrap();
            let (_, backend) = parse_config("fake/config", CONFIG).unwrap();
            let own = manager
                .acquire(&LeaseRequest {
                    net: &net,
                    public_ip: OWN_IP.parse().unwrap(),
                    attrs_for: &|_| Ok(attrs(OWN_IP)),
                    previous: None,
                })
                .await
                .unwrap();
            let mut members = Membership::new(own.key, manager.store_name());
            let snap = manager.list().await.unwrap();
            members
                .replace(snap.leases, &snap.junk, &manager.lease_name(&own.key))
                .unwrap();
            Node {
                resume: snap.resume,
                manager,
                net,
                backend,
                own,
                members,
            }
        }

        fn peers(&mut self) -> Vec<String> {
            let rules = self.net.rules(self.own.key, OWN_IP.parse().unwrap(), None);
            let (peers, _) = self.members.peers(&rules, self.backend.as_ref());
            peers.iter().map(|p| p.key.to_string()).collect()
        }

        /// One watch pass: every event until the watch closes; whether the peers may have
        /// changed, or the error (a revocation).
        async fn follow(&mut self) -> Result<bool, AgentError> {
            let mut watch = self.manager.watch(&self.resume).await?;
            let mut changed = false;
            while let Some(event) = watch.next().await? {
                match event {
                    WatchEvent::Changes {
                        changes, resume, ..
                    } => {
                        if let Some(r) = resume {
                            self.resume = r;
                        }
                        changed |= self.members.apply_all(changes)?;
                    }
                    WatchEvent::Relist => {
                        let snap = self.manager.list().await?;
                        let own = self.manager.lease_name(&self.own.key);
                        self.members.replace(snap.leases, &snap.junk, &own)?;
                        self.resume = snap.resume;
                        return Ok(true);
                    }
                }
            }
            Ok(changed)
        }
    }

    fn store() -> FakeManager {
        FakeManager::new(NetConfig::parse("fake/config", CONFIG.as_bytes()).unwrap())
    }

    #[tokio::test]
    async fn peers_follow_the_listing_and_the_watch() {
        let store = store();
        store.put(key("10.244.1.0-24"), attrs("192.168.0.1"));
        let mut node = Node::start(&store).await;
        assert_eq!(
            node.own.key.to_string(),
            "10.244.2.0-24",
            "the first free subnet"
        );
        assert_eq!(node.peers(), ["10.244.1.0-24"]);
        store.put(key("10.244.3.0-24"), attrs("192.168.0.3"));
        store.delete(key("10.244.1.0-24"));
        store.put_junk("fake/not-a-lease");
        assert!(node.follow().await.unwrap());
        assert_eq!(node.peers(), ["10.244.3.0-24"]);
        // A renewal of a peer (same value) changes nothing; nothing new, nothing changed.
        store.put(key("10.244.3.0-24"), attrs("192.168.0.3"));
        assert!(!node.follow().await.unwrap());
        assert!(!node.follow().await.unwrap());
        // A lease claiming our own address is refused whoever writes it.
        store.put(key("10.244.4.0-24"), attrs(OWN_IP));
        assert!(node.follow().await.unwrap());
        assert_eq!(node.peers(), ["10.244.3.0-24"]);
    }

    #[tokio::test]
    async fn a_compacted_store_is_listed_again() {
        let store = store();
        let mut node = Node::start(&store).await;
        store.put(key("10.244.5.0-24"), attrs("192.168.0.5"));
        store.compact();
        assert!(node.follow().await.unwrap(), "re-listed");
        assert_eq!(node.peers(), ["10.244.5.0-24"]);
        assert_eq!(node.resume, 2);
    }

    #[tokio::test]
    async fn our_lease_gone_is_a_revocation_naming_the_store() {
        let store = store();
        let mut node = Node::start(&store).await;
        store.delete(node.own.key);
        let err = node.follow().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "this node's lease fake/10.244.1.0-24 was removed from fake"
        );
        assert!(matches!(
            node.manager.renew(&mut node.own).await,
            Err(AgentError::LeaseRevoked { .. })
        ));
        store.remove_config();
        let gone = node.manager.network_config().await.unwrap_err();
        assert_eq!(gone.store_failure(), Some(StoreFailure::ConfigMissing));
    }
}
