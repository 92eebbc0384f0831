//! Acquiring and renewing this node's subnet lease, the way flanneld does it: reuse the lease
//! whose PublicIP is ours, else the subnet from the previous subnet.env if still free, else a
//! free subnet in `[SubnetMin, SubnetMax]`, created atomically with a TTL. A dual-stack
//! network leases an IPv6 subnet with it, in the same key (`10.5.52.0-24&fd00::100-120`).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::store::{Binding, EtcdSnapshot, Store};
use super::STORE_NAME;
use crate::backend::LeaseValue;
use crate::error::AgentError;
use crate::manager::{LeaseRequest, OwnLease, StoredLease};
use crate::ops::metrics;
use crate::subnet::config::{overlaps, NetConfig};
use crate::subnet::config_v6;
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::{log, warn};

const MAX_ATTEMPTS: u32 = 10;

/// What to do next with the store's current leases.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A lease with our PublicIP exists and fits the config: take it over.
    Reuse(SubnetKey, Box<StoredLease>),
    /// Our old lease no longer fits the config (network changed): delete it, then plan again.
    DropStale(SubnetKey, i64),
    /// Create this key.
    Create(SubnetKey),
}

pub fn plan(
    net: &NetConfig,
    snap: &EtcdSnapshot,
    public_ip: Ipv4Addr,
    previous: Option<SubnetKey>,
    seed: u64,
) -> Result<Plan, AgentError> {
    // The leases with our address: the one subnet.env names first (anyone can write another
    // lease with our address, and it must not move this node's pods to another subnet),
    // then in key order.
    let mut ours: Vec<(&SubnetKey, &StoredLease)> = snap
        .leases
        .iter()
        .filter(|(_, l)| l.attrs.as_ref().is_ok_and(|a| a.public_ip == public_ip))
        .collect();
    ours.sort_by_key(|(k, _)| previous.is_none_or(|p| p.v4 != k.v4));
    for (key, lease) in ours {
        let reservation = lease.reservation;
        if fits(net, key, reservation) {
            return Ok(Plan::Reuse(*key, Box::new(lease.clone())));
        }
        if !reservation {
            return Ok(Plan::DropStale(*key, lease.version));
        }
        log!(
            "reservation {key} for {public_ip} does not fit the network config ({}{}): ignored",
            net.network,
            net.ipv6
                .as_ref()
                .map(|v6| format!(", IPv6 {}", v6.network))
                .unwrap_or_default()
        );
    }
    let taken: Vec<_> = snap.leases.keys().map(|k| k.v4).collect();
    let taken_v6: Vec<_> = snap.leases.keys().filter_map(|k| k.v6).collect();
    // The IPv6 subnet to go with a chosen IPv4 one: the previous one while it is still
    // allocatable and free, else a free one.
    let pick_v6 = |prev: Option<ipnetwork::Ipv6Network>| match &net.ipv6 {
        None => Ok(None),
        Some(c) => match prev {
            Some(p)
                if c.is_allocatable(p) && !taken_v6.iter().any(|t| config_v6::overlaps(*t, p)) =>
            {
                Ok(Some(p))
            }
            _ => c.pick_free_subnet(&taken_v6, seed).map(Some),
        },
    };
    if let Some(prev) = previous {
        if net.is_allocatable(prev.v4) && !taken.iter().any(|t| overlaps(*t, prev.v4)) {
            return Ok(Plan::Create(SubnetKey {
                v4: prev.v4,
                v6: pick_v6(prev.v6)?,
            }));
        }
    }
    Ok(Plan::Create(SubnetKey {
        v4: net.pick_free_subnet(&taken, seed)?,
        v6: pick_v6(None)?,
    }))
}

/// Whether a lease key suits the config. A reservation is the operator's choice: any subnet
/// of the configured length inside the network is fine, in `SubnetMin..SubnetMax` or not
/// (other nodes program only subnets of that length). Without IPv6 in the config a key must
/// have no IPv6 subnet, with it a key must have one (flanneld's `isIPv6SubnetConfigCompat`).
fn fits(net: &NetConfig, key: &SubnetKey, reservation: bool) -> bool {
    let v4 = if reservation {
        net.network.contains(key.v4.network()) && key.v4.prefix() == net.subnet_len
    } else {
        net.is_allocatable(key.v4)
    };
    let v6 = match (&net.ipv6, key.v6) {
        (None, None) => true,
        (Some(c), Some(sn)) if reservation => {
            c.network.contains(sn.network()) && sn.prefix() == c.subnet_len
        }
        (Some(c), Some(sn)) => c.is_allocatable(sn),
        _ => false,
    };
    v4 && v6
}

/// The seed spreading nodes over the free list: stable per node, different per attempt.
pub fn seed_for(public_ip: Ipv4Addr, attempt: u32) -> u64 {
    let digest = Sha256::new()
        .chain_update(public_ip.octets())
        .chain_update(attempt.to_be_bytes())
        .finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(b)
}

/// This node's lease as held in etcd: the etcd lease its key is attached to (0 for a TTL-less
/// reservation).
#[derive(Debug, Clone)]
pub struct Held {
    pub own: OwnLease,
    pub etcd_lease: i64,
}

/// TTL and renewal margin, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    pub ttl: i64,
    pub renew_margin: i64,
}

impl LeaseTiming {
    /// When to renew a lease granted now: `margin` before expiry, or half-way for TTLs shorter
    /// than the margin (test clusters).
    pub fn renew_at(&self, granted: Instant) -> Instant {
        let after = if self.ttl > self.renew_margin {
            self.ttl - self.renew_margin
        } else {
            self.ttl / 2
        };
        granted + Duration::from_secs(after.max(1) as u64)
    }
}

/// Acquires a lease for `request.public_ip`.
pub async fn acquire(
    store: &mut Store,
    request: &LeaseRequest<'_>,
    timing: LeaseTiming,
) -> Result<Held, AgentError> {
    let LeaseRequest {
        net,
        public_ip,
        attrs_for,
        previous,
    } = *request;
    for attempt in 0..MAX_ATTEMPTS {
        let snap = store.list().await?;
        let plan = plan(
            net,
            &snap,
            public_ip,
            previous,
            seed_for(public_ip, attempt),
        )?;
        let attrs = &match &plan {
            Plan::Reuse(key, _) | Plan::DropStale(key, _) | Plan::Create(key) => attrs_for(key)?,
        };
        match plan {
            Plan::Reuse(key, lease) if lease.reservation => {
                if lease.attrs.as_ref().ok() != Some(attrs) {
                    let (ok, _) = store
                        .update(&key, attrs, Binding::Reservation, lease.version)
                        .await?;
                    if !ok {
                        continue;
                    }
                }
                log!("using reserved subnet {key} (no TTL)");
                return Ok(held(key, 0, attrs, None));
            }
            Plan::Reuse(key, lease) => {
                let now = Instant::now();
                let (ok, id) = store
                    .update(&key, attrs, Binding::Fresh(timing.ttl), lease.version)
                    .await?;
                if !ok {
                    continue;
                }
                log!(
                    "reusing lease {key} (PublicIP {} matches), renewed for {}s",
                    attrs.public_ip,
                    timing.ttl
                );
                return Ok(held(key, id, attrs, Some(timing.renew_at(now))));
            }
            Plan::DropStale(key, rev) => {
                log!(
                    "lease {key} no longer fits the network config ({} /{}): deleting it",
                    net.network,
                    net.subnet_len
                );
                store.delete_if_unchanged(&key, rev).await?;
            }
            Plan::Create(key) => {
                let now = Instant::now();
                if let Some(id) = store.create(&key, attrs, timing.ttl).await? {
                    log!("acquired new lease {key} for {}s", timing.ttl);
                    return Ok(held(key, id, attrs, Some(timing.renew_at(now))));
                }
                log!("subnet {key} was taken by another node meanwhile; retrying");
            }
        }
    }
    Err(AgentError::LeaseContention {
        attempts: MAX_ATTEMPTS,
    })
}

fn held(key: SubnetKey, etcd_lease: i64, attrs: &LeaseAttrs, renew_at: Option<Instant>) -> Held {
    Held {
        own: OwnLease {
            key,
            attrs: attrs.clone(),
            renew_at,
        },
        etcd_lease,
    }
}

/// Renews our lease with a fresh TTL (flannel's renewal). A missing key means it was revoked.
/// `etcd_lease` is the etcd lease the key is attached to, then the fresh one.
pub async fn renew(
    store: &mut Store,
    own: &mut OwnLease,
    etcd_lease: &mut i64,
    timing: LeaseTiming,
) -> Result<(), AgentError> {
    let now = Instant::now();
    *etcd_lease = rewrite(store, own, Binding::Fresh(timing.ttl)).await?;
    own.renew_at = Some(timing.renew_at(now));
    metrics::LEASE_RENEWALS.inc();
    log!("renewed lease {} for {}s", own.key, timing.ttl);
    Ok(())
}

/// Rewrites our lease with the value the data plane now wants (vxlan: its devices' real
/// MACs), keeping its binding to `etcd_lease`. A failure is logged and left for the next
/// pass to retry.
pub async fn publish(store: &mut Store, own: &mut OwnLease, etcd_lease: i64, value: LeaseValue) {
    if value.attrs == own.attrs {
        return;
    }
    let previous = std::mem::replace(&mut own.attrs, value.attrs);
    let binding = if etcd_lease == 0 {
        Binding::Reservation
    } else {
        Binding::Existing(etcd_lease)
    };
    match rewrite(store, own, binding).await {
        Ok(_) => log!("published {} in lease {}", value.what, own.key),
        Err(e) => {
            warn!("could not publish {}: {e}; will retry", value.what);
            own.attrs = previous;
        }
    }
}

/// Renews (fresh TTL) or re-publishes (`binding`) our lease. A missing key means it was revoked.
pub async fn rewrite(
    store: &mut Store,
    own: &OwnLease,
    binding: Binding,
) -> Result<i64, AgentError> {
    let (ok, id) = store.update(&own.key, &own.attrs, binding, 0).await?;
    if !ok {
        return Err(AgentError::LeaseRevoked {
            key: store.lease_key(&own.key),
            store: STORE_NAME,
        });
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnetwork::Ipv4Network;

    fn net() -> NetConfig {
        NetConfig::parse(
            "k",
            br#"{"Network":"10.10.0.0/16","SubnetMin":"10.10.1.0","SubnetMax":"10.10.4.0","Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap()
    }

    fn lease(ip: &str, etcd_lease: i64) -> StoredLease {
        StoredLease {
            attrs: Ok(crate::backend::vxlan::lease_attrs(
                ip.parse().unwrap(),
                1,
                None,
            )),
            reservation: etcd_lease == 0,
            created: 3,
            version: 7,
        }
    }

    fn snap(entries: &[(&str, StoredLease)]) -> EtcdSnapshot {
        EtcdSnapshot {
            resume: 9,
            leases: entries
                .iter()
                .map(|(k, l)| (SubnetKey::parse(k).unwrap(), l.clone()))
                .collect(),
            junk: Vec::new(),
        }
    }

    const ME: Ipv4Addr = Ipv4Addr::new(192, 168, 5, 1);

    #[test]
    fn reuses_own_lease() {
        let s = snap(&[
            ("10.10.2.0-24", lease("192.168.5.9", 5)),
            ("10.10.3.0-24", lease("192.168.5.1", 5)),
        ]);
        assert!(
            matches!(plan(&net(), &s, ME, None, 0).unwrap(), Plan::Reuse(k, _) if k.to_string() == "10.10.3.0-24")
        );
    }

    #[test]
    fn reservation_outside_range_is_still_ours() {
        let s = snap(&[("10.10.200.0-24", lease("192.168.5.1", 0))]);
        assert!(matches!(
            plan(&net(), &s, ME, None, 0).unwrap(),
            Plan::Reuse(..)
        ));
    }

    #[test]
    fn a_reservation_of_another_length_is_not_ours() {
        // Other nodes would not program it: a subnet of the configured length is taken instead.
        let s = snap(&[("10.10.4.0-23", lease("192.168.5.1", 0))]);
        assert!(matches!(
            plan(&net(), &s, ME, None, 0).unwrap(),
            Plan::Create(k) if k.v4.prefix() == 24
        ));
    }

    #[test]
    fn the_lease_subnet_env_names_is_ours_before_others_with_our_address() {
        let mine = "10.10.3.0-24";
        let s = snap(&[
            ("10.10.2.0-24", lease("192.168.5.1", 0)),
            (mine, lease("192.168.5.1", 5)),
        ]);
        let previous = SubnetKey::parse(mine);
        assert!(matches!(
            plan(&net(), &s, ME, previous, 0).unwrap(),
            Plan::Reuse(k, _) if k.to_string() == mine
        ));
        // Without subnet.env: the first in key order, as flanneld does.
        assert!(matches!(
            plan(&net(), &s, ME, None, 0).unwrap(),
            Plan::Reuse(k, _) if k.to_string() == "10.10.2.0-24"
        ));
    }

    #[test]
    fn stale_own_lease_is_dropped() {
        let s = snap(&[("10.10.200.0-24", lease("192.168.5.1", 5))]);
        assert_eq!(
            plan(&net(), &s, ME, None, 0).unwrap(),
            Plan::DropStale(SubnetKey::parse("10.10.200.0-24").unwrap(), 7)
        );
    }

    #[test]
    fn prefers_previous_subnet_when_free() {
        let s = snap(&[("10.10.2.0-24", lease("192.168.5.9", 5))]);
        let prev: Ipv4Network = "10.10.4.0/24".parse().unwrap();
        assert_eq!(
            plan(&net(), &s, ME, Some(SubnetKey::v4(prev)), 0).unwrap(),
            Plan::Create(SubnetKey::v4(prev))
        );
        // Taken by someone else: fall back to a free one.
        let taken: Ipv4Network = "10.10.2.0/24".parse().unwrap();
        match plan(&net(), &s, ME, Some(SubnetKey::v4(taken)), 0).unwrap() {
            Plan::Create(k) => assert!(k.v4 != taken && net().is_allocatable(k.v4)),
            other => panic!("{other:?}"),
        }
    }

    fn dual() -> NetConfig {
        NetConfig::parse(
            "k",
            br#"{"Network":"10.10.0.0/16","SubnetMin":"10.10.1.0","SubnetMax":"10.10.4.0",
                 "EnableIPv6":true,"IPv6Network":"fd00:10::/56","IPv6SubnetMin":"fd00:10:0:1::","IPv6SubnetMax":"fd00:10:0:3::",
                 "Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap()
    }

    #[test]
    fn dual_stack_leases_carry_both_subnets() {
        // A fresh node gets a free subnet of each family.
        let s = snap(&[("10.10.1.0-24&fd00:10:0:1::-64", lease("192.168.5.9", 5))]);
        let Plan::Create(k) = plan(&dual(), &s, ME, None, 3).unwrap() else {
            panic!()
        };
        assert!(k.v4.to_string() != "10.10.1.0/24" && dual().is_allocatable(k.v4));
        let v6 = k.v6.expect("an IPv6 subnet");
        assert_ne!(v6.to_string(), "fd00:10:0:1::/64");
        // Our dual-stack lease is reused; a v4-only one (IPv6 just enabled) is dropped, as
        // flanneld does, and the previous IPv4 subnet then comes back with a new IPv6 one.
        let ours = snap(&[("10.10.3.0-24&fd00:10:0:2::-64", lease("192.168.5.1", 5))]);
        assert!(matches!(
            plan(&dual(), &ours, ME, None, 0).unwrap(),
            Plan::Reuse(..)
        ));
        let old = snap(&[("10.10.3.0-24", lease("192.168.5.1", 5))]);
        assert!(matches!(
            plan(&dual(), &old, ME, None, 0).unwrap(),
            Plan::DropStale(..)
        ));
        let prev = SubnetKey::parse("10.10.3.0-24").unwrap();
        let Plan::Create(k) = plan(&dual(), &EtcdSnapshot::default(), ME, Some(prev), 0).unwrap()
        else {
            panic!()
        };
        assert_eq!(k.v4, prev.v4);
        assert!(k.v6.is_some());
        // And a dual-stack lease no longer fits once IPv6 is off again.
        assert!(matches!(
            plan(&net(), &ours, ME, None, 0).unwrap(),
            Plan::DropStale(..)
        ));
        // No IPv6 subnet left.
        let full = snap(&[
            ("10.10.1.0-24&fd00:10:0:1::-64", lease("192.168.5.7", 5)),
            ("10.10.2.0-24&fd00:10:0:2::-64", lease("192.168.5.8", 5)),
            ("10.10.3.0-24&fd00:10:0:3::-64", lease("192.168.5.9", 5)),
        ]);
        assert!(matches!(
            plan(&dual(), &full, ME, None, 0),
            Err(AgentError::Ipv6SubnetsExhausted { .. })
        ));
    }

    #[test]
    fn unreadable_values_still_occupy_their_subnet() {
        let mut junk = lease("192.168.5.9", 5);
        junk.attrs = Err(crate::subnet::lease::Unreadable::NotLeaseJson(
            "junk".into(),
        ));
        let s = snap(&[
            ("10.10.1.0-24", junk),
            ("10.10.2.0-24", lease("192.168.5.8", 5)),
            ("10.10.3.0-24", lease("192.168.5.7", 5)),
        ]);
        for seed in 0..20 {
            assert_eq!(
                plan(&net(), &s, ME, None, seed).unwrap(),
                Plan::Create(SubnetKey::parse("10.10.4.0-24").unwrap())
            );
        }
        let full = snap(&[("10.10.0.0-21", lease("192.168.5.9", 0))]);
        assert!(matches!(
            plan(&net(), &full, ME, None, 0),
            Err(AgentError::SubnetsExhausted { .. })
        ));
    }

    #[test]
    fn renewal_time() {
        let t0 = Instant::now();
        assert_eq!(
            LeaseTiming {
                ttl: 86400,
                renew_margin: 3600
            }
            .renew_at(t0),
            t0 + Duration::from_secs(82800)
        );
        assert_eq!(
            LeaseTiming {
                ttl: 10,
                renew_margin: 3600
            }
            .renew_at(t0),
            t0 + Duration::from_secs(5)
        );
    }
}
