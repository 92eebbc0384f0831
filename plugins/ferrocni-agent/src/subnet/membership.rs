//! The agent's view of cluster membership: every lease known (from a listing, then kept
//! current by watch events), and the peer leases the data plane is reconciled to.

use std::collections::{BTreeMap, BTreeSet};

use crate::backend::{Peer, Refusal};
use crate::error::AgentError;
use crate::etcd::proto::{EventType, WatchResponse};
use crate::ops::metrics;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::subnet::store::{self, Snapshot, StoredLease};
use crate::{debug, log, warn};

/// One watch event, decoded from etcd's.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    Put { value: &'a [u8], etcd_lease: i64 },
    Delete,
}

#[derive(Debug, Clone)]
pub struct Membership {
    /// Our own lease key (our renewals are not membership changes).
    pub own: SubnetKey,
    /// Every lease known, ours included; kept as is while etcd is unreachable.
    pub known: BTreeMap<SubnetKey, StoredLease>,
    /// The store revision `known` reflects; a new watch starts right after it.
    pub revision: i64,
    /// Leases refused and already logged, by key and revision (logged once each).
    refused: BTreeSet<(SubnetKey, i64)>,
}

impl Membership {
    pub fn new(own: SubnetKey) -> Membership {
        Membership {
            own,
            known: BTreeMap::new(),
            revision: 0,
            refused: BTreeSet::new(),
        }
    }

    /// Replaces everything with a full listing. `own_key` names our lease for the error when
    /// the listing lacks it.
    pub fn replace(&mut self, snap: Snapshot, own_key: &str) -> Result<(), AgentError> {
        if !snap.leases.contains_key(&self.own) {
            return Err(AgentError::LeaseRevoked {
                key: own_key.to_string(),
            });
        }
        self.known = snap.leases;
        self.revision = snap.revision;
        Ok(())
    }

    /// Applies one event on key `name` at `mod_revision`. Returns whether the peer set may have
    /// changed; our own lease disappearing is an error.
    pub fn apply(
        &mut self,
        name: &str,
        event: Event<'_>,
        mod_revision: i64,
    ) -> Result<bool, AgentError> {
        self.revision = self.revision.max(mod_revision);
        let Some(key) = SubnetKey::parse(name) else {
            return Ok(false);
        };
        match event {
            Event::Put { value, etcd_lease } => {
                let lease = store::stored(name, value, etcd_lease, mod_revision);
                // Renewals change the etcd lease only; our own updates are not membership.
                let changed =
                    key != self.own && self.known.get(&key).map(|l| &l.attrs) != Some(&lease.attrs);
                if changed {
                    log!(
                        "lease {key} added/changed: {}",
                        String::from_utf8_lossy(value)
                    );
                }
                self.known.insert(key, lease);
                Ok(changed)
            }
            Event::Delete => {
                if key == self.own {
                    return Err(AgentError::LeaseRevoked {
                        key: name.to_string(),
                    });
                }
                let removed = self.known.remove(&key).is_some();
                if removed {
                    log!("lease {key} removed");
                }
                Ok(removed)
            }
        }
    }

    /// Applies one watch response. Returns whether the peer set may have changed.
    pub fn apply_watch(&mut self, resp: &WatchResponse) -> Result<bool, AgentError> {
        let mut changed = false;
        for ev in &resp.events {
            let Some(kv) = &ev.kv else { continue };
            let name = String::from_utf8_lossy(&kv.key);
            metrics::WATCH_EVENTS.inc();
            let event = if ev.r#type == EventType::Delete as i32 {
                Event::Delete
            } else {
                Event::Put {
                    value: &kv.value,
                    etcd_lease: kv.lease,
                }
            };
            debug!(
                1,
                "watch: {} {name} at revision {}",
                match event {
                    Event::Delete => "DELETE",
                    Event::Put { .. } => "PUT",
                },
                kv.mod_revision
            );
            changed |= self.apply(&name, event, kv.mod_revision)?;
        }
        // Only event revisions advance ours: a response header may be ahead of events still
        // to come on this stream (a re-list always precedes a new watch anyway).
        Ok(changed)
    }

    /// The peer leases a data plane programs: every readable lease but ours that `check`
    /// accepts, in key order, and how many known leases (ours aside) are not among them.
    /// A lease of the backend's type that it refuses is logged once per value.
    pub fn peers(
        &mut self,
        check: impl Fn(&LeaseAttrs) -> Result<(), Refusal>,
    ) -> (Vec<Peer>, usize) {
        let mut peers = Vec::new();
        let mut unusable = 0;
        for (key, lease) in &self.known {
            if *key == self.own {
                continue;
            }
            let Some(attrs) = &lease.attrs else {
                unusable += 1;
                continue;
            };
            match check(attrs) {
                Ok(()) => peers.push(Peer {
                    key: *key,
                    attrs: attrs.clone(),
                }),
                Err(refusal) => {
                    unusable += 1;
                    if let Refusal::Invalid(reason) = refusal {
                        if self.refused.insert((*key, lease.mod_revision)) {
                            warn!("lease {key} is not programmed: {reason}");
                        }
                    }
                }
            }
        }
        // Forget refusals of leases gone or rewritten.
        let known = &self.known;
        self.refused
            .retain(|(k, rev)| known.get(k).is_some_and(|l| l.mod_revision == *rev));
        (peers, unusable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::overlay::{IpFamily, PeerEntry};
    use crate::backend::vxlan::{lease_data, lease_v6_data};

    /// The vxlan peers of one family, as the vxlan backend reads them from the peer leases.
    fn vxlan_peers(m: &mut Membership, family: IpFamily) -> Vec<PeerEntry> {
        let (peers, _) = m.peers(|a| match lease_data(a) {
            Some(_) => Ok(()),
            None => Err(Refusal::OtherBackend),
        });
        peers
            .iter()
            .filter_map(|p| {
                Some(match family {
                    IpFamily::V4 => PeerEntry {
                        subnet: p.key.v4.into(),
                        ip: p.attrs.public_ip.into(),
                        vtep_mac: lease_data(&p.attrs)?.vtep_mac,
                    },
                    IpFamily::V6 => {
                        let (ip, data) = lease_v6_data(&p.attrs)?;
                        PeerEntry {
                            subnet: p.key.v6?.into(),
                            ip: ip.into(),
                            vtep_mac: data.vtep_mac,
                        }
                    }
                })
            })
            .collect()
    }

    const A: &str = "/coreos.com/network/subnets/10.244.1.0-24";
    const B: &str = "/coreos.com/network/subnets/10.244.2.0-24";
    const OWN: &str = "/coreos.com/network/subnets/10.244.9.0-24";

    fn lease(ip: &str, mac: &str) -> String {
        format!(
            r#"{{"PublicIP":"{ip}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{{"VNI":1,"VtepMAC":"{mac}"}}}}"#
        )
    }

    fn members() -> Membership {
        let mut m = Membership::new(SubnetKey::parse(OWN).unwrap());
        let own = lease("192.168.0.9", "02:00:00:00:00:09");
        m.apply(
            OWN,
            Event::Put {
                value: own.as_bytes(),
                etcd_lease: 1,
            },
            1,
        )
        .unwrap();
        m
    }

    #[test]
    fn puts_and_deletes_drive_the_peer_set() {
        let mut m = members();
        assert!(
            vxlan_peers(&mut m, IpFamily::V4).is_empty(),
            "our own lease is never a peer"
        );
        let a = lease("192.168.0.1", "02:00:00:00:00:01");
        assert!(m
            .apply(
                A,
                Event::Put {
                    value: a.as_bytes(),
                    etcd_lease: 5
                },
                2
            )
            .unwrap());
        // Renewal: same value, new etcd lease: not a change.
        assert!(!m
            .apply(
                A,
                Event::Put {
                    value: a.as_bytes(),
                    etcd_lease: 6
                },
                3
            )
            .unwrap());
        let b = lease("192.168.0.2", "02:00:00:00:00:02");
        assert!(m
            .apply(
                B,
                Event::Put {
                    value: b.as_bytes(),
                    etcd_lease: 7
                },
                4
            )
            .unwrap());
        let peers = vxlan_peers(&mut m, IpFamily::V4);
        assert_eq!(peers.len(), 2);
        assert!(vxlan_peers(&mut m, IpFamily::V6).is_empty());
        assert_eq!(peers[0].subnet.to_string(), "10.244.1.0/24");
        assert_eq!(peers[0].ip.to_string(), "192.168.0.1");
        assert_eq!(peers[0].vtep_mac.as_deref(), Some("02:00:00:00:00:01"));
        assert!(m.apply(A, Event::Delete, 5).unwrap());
        assert!(
            !m.apply(A, Event::Delete, 6).unwrap(),
            "deleting twice changes nothing"
        );
        assert_eq!(vxlan_peers(&mut m, IpFamily::V4).len(), 1);
        assert_eq!(m.revision, 6);
    }

    #[test]
    fn own_renewals_are_quiet_and_own_deletion_is_revocation() {
        let mut m = members();
        let own = lease("192.168.0.9", "02:00:00:00:00:09");
        assert!(!m
            .apply(
                OWN,
                Event::Put {
                    value: own.as_bytes(),
                    etcd_lease: 2
                },
                2
            )
            .unwrap());
        assert!(matches!(
            m.apply(OWN, Event::Delete, 3),
            Err(AgentError::LeaseRevoked { .. })
        ));
    }

    #[test]
    fn foreign_and_broken_leases_are_not_programmed() {
        let mut m = members();
        let hostgw = r#"{"PublicIP":"192.168.0.3","BackendType":"host-gw"}"#;
        assert!(m
            .apply(
                A,
                Event::Put {
                    value: hostgw.as_bytes(),
                    etcd_lease: 0
                },
                2
            )
            .unwrap());
        assert!(m
            .apply(
                B,
                Event::Put {
                    value: b"garbage",
                    etcd_lease: 0
                },
                3
            )
            .unwrap());
        assert!(!m
            .apply("/coreos.com/network/subnets/bogus", Event::Delete, 4)
            .unwrap());
        assert!(vxlan_peers(&mut m, IpFamily::V4).is_empty());
        assert_eq!(m.known.len(), 3, "they still occupy their subnets");
    }

    #[test]
    fn dual_stack_leases_are_peers_of_both_overlays() {
        let mut m = members();
        let key = "/coreos.com/network/subnets/10.244.1.0-24&fd00:10:244:1::-64";
        let dual = r#"{"PublicIP":"192.168.0.1","PublicIPv6":"fd00:9::1","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:01"},"BackendV6Data":{"VNI":1,"VtepMAC":"02:00:00:00:00:61"}}"#;
        m.apply(
            key,
            Event::Put {
                value: dual.as_bytes(),
                etcd_lease: 5,
            },
            2,
        )
        .unwrap();
        let v4only = lease("192.168.0.2", "02:00:00:00:00:02");
        m.apply(
            B,
            Event::Put {
                value: v4only.as_bytes(),
                etcd_lease: 5,
            },
            3,
        )
        .unwrap();
        assert_eq!(vxlan_peers(&mut m, IpFamily::V4).len(), 2);
        let v6 = vxlan_peers(&mut m, IpFamily::V6);
        assert_eq!(v6.len(), 1);
        assert_eq!(v6[0].subnet.to_string(), "fd00:10:244:1::/64");
        assert_eq!(v6[0].ip.to_string(), "fd00:9::1");
        assert_eq!(v6[0].vtep_mac.as_deref(), Some("02:00:00:00:00:61"));
    }

    #[test]
    fn a_listing_without_our_lease_is_revocation() {
        let mut m = members();
        let err = m.replace(Snapshot::default(), OWN).unwrap_err();
        assert!(matches!(err, AgentError::LeaseRevoked { .. }));
    }
}
