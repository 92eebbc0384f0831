//! The agent's view of cluster membership: every lease known (from a listing, then kept
//! current by watch events), and the peer list the overlay is reconciled to.

use std::collections::BTreeMap;

use crate::error::AgentError;
use crate::key::SubnetKey;
use crate::log;
use crate::overlay::{IpFamily, PeerEntry};
use crate::store::{self, Snapshot, StoredLease};

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
}

impl Membership {
    pub fn new(own: SubnetKey) -> Membership {
        Membership {
            own,
            known: BTreeMap::new(),
            revision: 0,
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

    /// The desired peers of one overlay: every readable vxlan lease but ours, in a stable
    /// order. The IPv6 overlay takes the leases with an IPv6 subnet, `PublicIPv6` and
    /// `BackendV6Data` (an IPv4-only flanneld node is an IPv4 peer only).
    pub fn peers(&self, family: IpFamily) -> Vec<PeerEntry> {
        let mut peers: Vec<PeerEntry> = self
            .known
            .iter()
            .filter(|(key, _)| **key != self.own)
            .filter_map(|(key, lease)| {
                let attrs = lease.attrs.as_ref()?;
                // A host-gw or udp flanneld node: nothing a VXLAN overlay can program for it.
                match family {
                    IpFamily::V4 => Some(PeerEntry {
                        subnet: key.v4.into(),
                        ip: attrs.public_ip.into(),
                        vtep_mac: attrs.vxlan_data()?.vtep_mac,
                    }),
                    IpFamily::V6 => {
                        let (ip, data) = attrs.vxlan_v6_data()?;
                        Some(PeerEntry {
                            subnet: key.v6?.into(),
                            ip: ip.into(),
                            vtep_mac: data.vtep_mac,
                        })
                    }
                }
            })
            .collect();
        peers.sort();
        peers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            m.peers(IpFamily::V4).is_empty(),
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
        let peers = m.peers(IpFamily::V4);
        assert_eq!(peers.len(), 2);
        assert!(m.peers(IpFamily::V6).is_empty());
        assert_eq!(peers[0].subnet.to_string(), "10.244.1.0/24");
        assert_eq!(peers[0].ip.to_string(), "192.168.0.1");
        assert_eq!(peers[0].vtep_mac.as_deref(), Some("02:00:00:00:00:01"));
        assert!(m.apply(A, Event::Delete, 5).unwrap());
        assert!(
            !m.apply(A, Event::Delete, 6).unwrap(),
            "deleting twice changes nothing"
        );
        assert_eq!(m.peers(IpFamily::V4).len(), 1);
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
        assert!(m.peers(IpFamily::V4).is_empty());
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
        assert_eq!(m.peers(IpFamily::V4).len(), 2);
        let v6 = m.peers(IpFamily::V6);
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
