//! The agent's view of cluster membership: every lease known (from a listing, then kept
//! current by the watch's changes, both from the subnet manager), and the peer leases the data
//! plane is reconciled to — those that pass the checks of [`validate`] and the backend's own. A
//! refused lease is logged once per value and counted by reason; so are records among the
//! leases that are not leases.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::backend::{Backend, Peer, Refusal};
use crate::error::AgentError;
use crate::manager::{Change, JunkKey, StoredLease};
use crate::ops::log::clip;
use crate::ops::metrics;
use crate::subnet::key::SubnetKey;
use crate::subnet::validate::{self, Claim, Class, Reason, Rules};
use crate::{debug, log, warn};

/// Refusals named in WARN lines per [`LOG_WINDOW`] (leases and other keys each); beyond, they
/// are counted, named at `-v 1`, and summed up in one WARN line at the next pass or listing,
/// so a flood of keys cannot flood the log.
const NAMED_PER_WINDOW: usize = 20;
const LOG_WINDOW: Duration = Duration::from_secs(60);
/// How much of a lease value an INFO line shows.
const VALUE_SHOWN_CHARS: usize = 300;

#[derive(Debug, Clone)]
pub struct Membership {
    /// Our own lease key (our renewals are not membership changes).
    pub own: SubnetKey,
    /// What the store is (`etcd`), for the revocation error.
    store: &'static str,
    /// Every lease known, ours included; kept as is while the store is unreachable.
    pub known: BTreeMap<SubnetKey, StoredLease>,
    /// Refusals logged, by key, value version and kind (each logged once).
    refused: BTreeSet<(SubnetKey, i64, Class)>,
    /// Each lease's own checks, kept while its value and the rules stay the same.
    verdicts: Verdicts,
    /// Records that are not leases, logged (fingerprints of name and version).
    junk: HashSet<u64>,
    /// Apart, so a flood of junk keys never silences a lease refusal.
    lease_log: LogBudget,
    junk_log: LogBudget,
}

/// What [`Membership::peers`] found of each lease on its own (the shared rules, then the
/// backend's check), by key, for the value version it was found for. A pass of a large
/// cluster changes a few leases: the others' checks (a JSON decode of the backend data among
/// them) are not run again. What depends on the other leases (who holds a subnet or an
/// address) is settled in every pass.
#[derive(Debug, Clone, Default)]
struct Verdicts {
    /// The rules and backend the verdicts were reached under; others start afresh.
    under: Option<(Rules, Box<dyn Backend>)>,
    by_key: HashMap<SubnetKey, Verdict>,
}

#[derive(Debug, Clone)]
struct Verdict {
    version: i64,
    rules: Result<(), Reason>,
    /// Asked only of leases that passed the rules and hold their subnet and address.
    backend: Option<Result<(), Refusal>>,
}

impl Verdicts {
    /// Forgets every verdict unless they were reached under `rules` and `backend`.
    fn keep_if_under(&mut self, rules: &Rules, backend: &dyn Backend) {
        let same = self.under.as_ref().is_some_and(|(r, b)| {
            r == rules && b.type_name() == backend.type_name() && b.same_options(backend)
        });
        if !same {
            self.under = Some((*rules, backend.clone_box()));
            self.by_key.clear();
        }
    }

    /// The verdict for `key` at `version`, with the rules' check run when there is none.
    fn of(
        &mut self,
        key: SubnetKey,
        version: i64,
        rules: impl FnOnce() -> Result<(), Reason>,
    ) -> &mut Verdict {
        let fresh = |rules: Result<(), Reason>| Verdict {
            version,
            rules,
            backend: None,
        };
        match self.by_key.entry(key) {
            Entry::Occupied(mut held) => {
                if held.get().version != version {
                    held.insert(fresh(rules()));
                }
                held.into_mut()
            }
            Entry::Vacant(empty) => empty.insert(fresh(rules())),
        }
    }

    /// Drops the verdicts of keys no longer known.
    fn retain_known(&mut self, known: &BTreeMap<SubnetKey, StoredLease>) {
        self.by_key.retain(|key, _| known.contains_key(key));
    }
}

/// How many refusals were named lately, and those left unnamed since the last summary.
#[derive(Debug, Clone, Default)]
struct LogBudget {
    window_start: Option<Instant>,
    named: usize,
    unnamed: BTreeMap<Class, usize>,
}

impl LogBudget {
    /// Counts one refusal and names it at WARN while the window's budget lasts.
    fn report(&mut self, class: Class, line: impl FnOnce() -> String) {
        metrics::refused(class.label());
        let now = Instant::now();
        if self
            .window_start
            .is_none_or(|start| now.duration_since(start) >= LOG_WINDOW)
        {
            self.window_start = Some(now);
            self.named = 0;
        }
        if self.named < NAMED_PER_WINDOW {
            self.named += 1;
            warn!("{}", line());
        } else {
            *self.unnamed.entry(class).or_insert(0) += 1;
            debug!(1, "{}", line());
        }
    }

    /// Sums up the refusals left unnamed, in one line.
    fn flush(&mut self) {
        if self.unnamed.is_empty() {
            return;
        }
        let unnamed = std::mem::take(&mut self.unnamed);
        let total: usize = unnamed.values().sum();
        let kinds: Vec<String> = unnamed
            .iter()
            .map(|(c, n)| format!("{} {n}", c.label()))
            .collect();
        warn!(
            "{total} more refused lease(s) or key(s) not named (over {NAMED_PER_WINDOW} a minute: {}); -v 1 names each",
            kinds.join(", ")
        );
    }
}

impl Membership {
    /// `store` is what the store is called (`etcd`), for the revocation error.
    pub fn new(own: SubnetKey, store: &'static str) -> Membership {
        metrics::register_refusals(&Class::ALL.map(Class::label));
        Membership {
            own,
            store,
            known: BTreeMap::new(),
            refused: BTreeSet::new(),
            verdicts: Verdicts::default(),
            junk: HashSet::new(),
            lease_log: LogBudget::default(),
            junk_log: LogBudget::default(),
        }
    }

    /// Replaces everything with a full listing. `own_name` is the store's name for our lease,
    /// for the error when the listing lacks it.
    pub fn replace(
        &mut self,
        leases: BTreeMap<SubnetKey, StoredLease>,
        junk: &[JunkKey],
        own_name: &str,
    ) -> Result<(), AgentError> {
        if !leases.contains_key(&self.own) {
            return Err(AgentError::LeaseRevoked {
                key: own_name.to_string(),
                store: self.store,
            });
        }
        let mut listed = HashSet::with_capacity(junk.len());
        for junk in junk {
            if !self.junk.contains(&junk.fingerprint) {
                report_junk(&mut self.junk_log, junk);
            }
            listed.insert(junk.fingerprint);
        }
        self.junk_log.flush();
        // Forget keys gone since.
        self.junk = listed;
        self.known = leases;
        Ok(())
    }

    /// Applies one change. Returns whether the peer set may have changed; our own lease
    /// disappearing is an error.
    pub fn apply(&mut self, change: Change) -> Result<bool, AgentError> {
        match change {
            Change::NotALease(junk) => {
                if self.junk.insert(junk.fingerprint) {
                    report_junk(&mut self.junk_log, &junk);
                }
                Ok(false)
            }
            Change::Put { key, lease } => {
                // Renewals change the lease's binding only; our own updates are not membership.
                let changed =
                    key != self.own && self.known.get(&key).map(|l| &l.attrs) != Some(&lease.attrs);
                if changed {
                    let shown = match &lease.attrs {
                        Ok(attrs) => clip(&attrs.to_json(), VALUE_SHOWN_CHARS),
                        Err(why) => format!("({why})"),
                    };
                    log!("lease {key} added/changed: {shown}");
                }
                self.known.insert(key, lease);
                Ok(changed)
            }
            Change::Delete { key, name } => {
                if key == self.own {
                    return Err(AgentError::LeaseRevoked {
                        key: name,
                        store: self.store,
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

    /// Applies a watch's changes, in order. Returns whether the peer set may have changed.
    pub fn apply_all(&mut self, changes: Vec<Change>) -> Result<bool, AgentError> {
        let mut changed = false;
        for change in changes {
            changed |= self.apply(change)?;
        }
        Ok(changed)
    }

    /// The peer leases a data plane programs: every lease but ours that passes `rules`
    /// (subnets and underlay addresses; of two leases claiming one, the older) and
    /// `backend`'s own check, in key order; and how many known leases (ours aside) are refused.
    /// Each refusal is logged once per lease value and kind, and counted.
    pub fn peers(&mut self, rules: &Rules, backend: &dyn Backend) -> (Vec<Peer>, usize) {
        self.verdicts.keep_if_under(rules, backend);
        self.verdicts.retain_known(&self.known);
        let mut refusals: Vec<(SubnetKey, Reason)> = Vec::new();
        let mut claims = Vec::new();
        for (key, lease) in &self.known {
            if *key == self.own {
                continue;
            }
            let checked = match &lease.attrs {
                Ok(attrs) => self
                    .verdicts
                    .of(*key, lease.version, || rules.check_lease(key, attrs))
                    .rules
                    .clone()
                    .map(|()| Claim::new(rules, *key, lease.created, attrs)),
                Err(why) => Err(Reason::Unreadable(why.clone())),
            };
            match checked {
                Ok(claim) => claims.push(claim),
                Err(reason) => refusals.push((*key, reason)),
            }
        }
        let lost = validate::settle_overlaps(&claims);
        let losers: BTreeSet<SubnetKey> = lost.iter().map(|(k, _)| *k).collect();
        refusals.extend(lost);
        let mut peers = Vec::new();
        for claim in claims.iter().filter(|c| !losers.contains(&c.key)) {
            let Some(lease) = self.known.get(&claim.key) else {
                continue;
            };
            let Ok(attrs) = &lease.attrs else {
                continue;
            };
            // The loop above found this one's verdict (it passed the rules).
            let verdict = self.verdicts.of(claim.key, lease.version, || Ok(()));
            let checked = verdict
                .backend
                .get_or_insert_with(|| backend.check_peer(attrs))
                .clone();
            match checked {
                Ok(()) => peers.push(Peer {
                    key: claim.key,
                    attrs: attrs.clone(),
                }),
                Err(Refusal::OtherBackend) => refusals.push((
                    claim.key,
                    Reason::OtherBackend(clip(&attrs.backend_type, 40)),
                )),
                Err(Refusal::Invalid(why)) => refusals.push((claim.key, Reason::BackendData(why))),
            }
        }
        let unusable = refusals.len();
        let mut current = BTreeSet::new();
        for (key, reason) in &refusals {
            let version = self.known.get(key).map_or(0, |l| l.version);
            let id = (*key, version, reason.class());
            if !self.refused.contains(&id) {
                self.lease_log.report(reason.class(), || {
                    format!("lease {key} is not programmed: {reason}")
                });
            }
            current.insert(id);
        }
        self.lease_log.flush();
        self.junk_log.flush();
        // Refusals of leases gone, rewritten or now accepted are forgotten.
        self.refused = current;
        (peers, unusable)
    }
}

fn report_junk(budget: &mut LogBudget, junk: &JunkKey) {
    budget.report(junk.class, || match &junk.why {
        Some(why) => format!("ignoring {}: {why}", junk.shown),
        None => format!(
            "ignoring key {}: not a flannel subnet lease key",
            junk.shown
        ),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::overlay::{IpFamily, PeerEntry};
    use crate::backend::registry;
    use crate::backend::vxlan::{lease_data, lease_v6_data};
    use crate::ops::log::{take_lines, Level};
    use crate::subnet::config::NetConfig;
    use std::sync::Mutex;

    /// The refusal counters are process-wide: tests reading them run one at a time.
    static COUNTERS: Mutex<()> = Mutex::new(());

    const SUBNETS: &str = "/coreos.com/network/subnets/";
    const A: &str = "/coreos.com/network/subnets/10.244.1.0-24";
    const B: &str = "/coreos.com/network/subnets/10.244.2.0-24";
    const OWN: &str = "/coreos.com/network/subnets/10.244.9.0-24";
    const OWN_IP: &str = "192.168.0.9";
    const V4_NET: &str = r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#;
    const DUAL_NET: &str = r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}"#;

    fn net(json: &str) -> NetConfig {
        NetConfig::parse("/coreos.com/network/config", json.as_bytes()).unwrap()
    }

    fn backend(json: &str) -> Box<dyn Backend> {
        registry::backend_of("/coreos.com/network/config", &net(json))
            .unwrap()
            .1
    }

    fn rules(m: &Membership, json: &str) -> Rules {
        let ip6 = net(json).ipv6.map(|_| "fd00:9::9".parse().unwrap());
        net(json).rules(m.own, OWN_IP.parse().unwrap(), ip6)
    }

    /// The peers the vxlan backend gets on `json`'s network.
    fn vxlan_peers_on(m: &mut Membership, json: &str) -> (Vec<Peer>, usize) {
        let b = backend(json);
        let r = rules(m, json);
        m.peers(&r, b.as_ref())
    }

    /// The vxlan peers of one family, as the vxlan backend reads them from the peer leases.
    fn vxlan_peers(m: &mut Membership, family: IpFamily) -> Vec<PeerEntry> {
        let (peers, _) = vxlan_peers_on(m, DUAL_NET);
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

    fn lease(ip: &str, mac: &str) -> String {
        format!(
            r#"{{"PublicIP":"{ip}","PublicIPv6":null,"BackendType":"vxlan","BackendData":{{"VNI":1,"VtepMAC":"{mac}"}}}}"#
        )
    }

    /// `value` written at `name`, created at `created`, at version `version`, as a watch
    /// hands it over: a lease when `name` is a lease key right under `SUBNETS` (flannel's
    /// layout), else a record that is no lease.
    fn put(m: &mut Membership, name: &str, value: &str, created: i64, version: i64) -> bool {
        let key = name
            .strip_prefix(SUBNETS)
            .filter(|rest| !rest.contains('/'))
            .and_then(SubnetKey::parse);
        let change = match key {
            Some(key) => Change::Put {
                key,
                lease: StoredLease::decode(value.as_bytes(), false, created, version),
            },
            None => Change::NotALease(JunkKey::new(name.as_bytes(), version)),
        };
        m.apply(change).unwrap()
    }

    /// The lease at `key` deleted.
    fn delete(m: &mut Membership, key: &str) -> Result<bool, AgentError> {
        m.apply(Change::Delete {
            key: SubnetKey::parse(key).unwrap(),
            name: key.to_string(),
        })
    }

    fn members() -> Membership {
        let mut m = Membership::new(SubnetKey::parse(OWN).unwrap(), "etcd");
        let own = lease(OWN_IP, "02:00:00:00:00:09");
        put(&mut m, OWN, &own, 1, 1);
        take_lines(Level::Warn);
        m
    }

    /// Verdicts are kept per lease value: a rewritten lease, other rules or another backend
    /// are checked afresh, and a deleted key's verdict goes with it.
    #[test]
    fn verdicts_follow_values_rules_and_backend() {
        let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = members();
        let peer_keys = |m: &mut Membership, json: &str| -> Vec<String> {
            let b = backend(json);
            let r = rules(m, json);
            let (peers, _) = m.peers(&r, b.as_ref());
            peers.iter().map(|p| p.key.to_string()).collect()
        };
        put(&mut m, A, &lease("192.168.0.1", "02:00:00:00:00:01"), 2, 2);
        assert_eq!(peer_keys(&mut m, V4_NET), ["10.244.1.0-24"]);
        assert_eq!(m.verdicts.by_key.len(), 1);
        // Rewritten with a multicast VTEP MAC: the backend's check runs again and refuses it.
        put(&mut m, A, &lease("192.168.0.1", "01:00:5e:00:00:01"), 2, 3);
        assert!(peer_keys(&mut m, V4_NET).is_empty());
        put(&mut m, A, &lease("192.168.0.1", "02:00:00:00:00:01"), 2, 4);
        assert_eq!(peer_keys(&mut m, V4_NET), ["10.244.1.0-24"]);
        // Another backend: the same value is another backend's lease.
        let host_gw = r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#;
        assert!(peer_keys(&mut m, host_gw).is_empty());
        // Other rules: the subnet is outside this network.
        let elsewhere = r#"{"Network":"10.245.0.0/16","Backend":{"Type":"vxlan"}}"#;
        assert!(peer_keys(&mut m, elsewhere).is_empty());
        assert_eq!(peer_keys(&mut m, V4_NET), ["10.244.1.0-24"]);
        delete(&mut m, A).unwrap();
        assert!(peer_keys(&mut m, V4_NET).is_empty());
        assert!(m.verdicts.by_key.is_empty());
        take_lines(Level::Warn);
    }

    #[test]
    fn puts_and_deletes_drive_the_peer_set() {
        let mut m = members();
        assert!(
            vxlan_peers(&mut m, IpFamily::V4).is_empty(),
            "our own lease is never a peer"
        );
        let a = lease("192.168.0.1", "02:00:00:00:00:01");
        assert!(put(&mut m, A, &a, 2, 2));
        // Renewal: same value, rewritten: not a change.
        assert!(!put(&mut m, A, &a, 2, 3));
        let b = lease("192.168.0.2", "02:00:00:00:00:02");
        assert!(put(&mut m, B, &b, 4, 4));
        let peers = vxlan_peers(&mut m, IpFamily::V4);
        assert_eq!(peers.len(), 2);
        assert!(vxlan_peers(&mut m, IpFamily::V6).is_empty());
        assert_eq!(peers[0].subnet.to_string(), "10.244.1.0/24");
        assert_eq!(peers[0].ip.to_string(), "192.168.0.1");
        assert_eq!(peers[0].vtep_mac.as_deref(), Some("02:00:00:00:00:01"));
        assert!(delete(&mut m, A).unwrap());
        assert!(
            !delete(&mut m, A).unwrap(),
            "deleting twice changes nothing"
        );
        assert_eq!(vxlan_peers(&mut m, IpFamily::V4).len(), 1);
        assert!(take_lines(Level::Warn).is_empty());
    }

    #[test]
    fn own_renewals_are_quiet_and_own_deletion_is_revocation() {
        let mut m = members();
        let own = lease(OWN_IP, "02:00:00:00:00:09");
        assert!(!put(&mut m, OWN, &own, 1, 2));
        assert!(matches!(
            delete(&mut m, OWN),
            Err(AgentError::LeaseRevoked { .. })
        ));
    }

    #[test]
    fn dual_stack_leases_are_peers_of_both_overlays() {
        let mut m = members();
        let key = "/coreos.com/network/subnets/10.244.1.0-24&fd00:10:244:1::-64";
        let dual = r#"{"PublicIP":"192.168.0.1","PublicIPv6":"fd00:9::1","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:01"},"BackendV6Data":{"VNI":1,"VtepMAC":"02:00:00:00:00:61"}}"#;
        put(&mut m, key, dual, 2, 2);
        let v4only = lease("192.168.0.2", "02:00:00:00:00:02");
        put(&mut m, B, &v4only, 3, 3);
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
        let err = m.replace(BTreeMap::new(), &[], OWN).unwrap_err();
        assert!(matches!(err, AgentError::LeaseRevoked { .. }));
        assert_eq!(
            err.to_string(),
            format!("this node's lease {OWN} was removed from etcd")
        );
    }

    /// Every kind of refusal: the lease alone is refused, named once in a WARN line with its
    /// reason (never its value), counted once under its class, and the gauge's count is right.
    #[test]
    fn every_refusal_is_named_once_and_counted() {
        let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
        let good = |ip: &str| lease(ip, "02:00:00:00:00:42");
        let mac = |m: &str| lease("192.168.0.50", m);
        let dual_v6 = |ip6: &str| {
            format!(
                r#"{{"PublicIP":"192.168.0.60","PublicIPv6":"{ip6}","BackendType":"vxlan","BackendData":{{"VNI":1,"VtepMAC":"02:00:00:00:00:60"}},"BackendV6Data":{{"VNI":1,"VtepMAC":"02:00:00:00:00:61"}}}}"#
            )
        };
        let big = format!(
            r#"{{"PublicIP":"192.168.0.1","x":"{}"}}"#,
            "y".repeat(70_000)
        );
        // (network config, key, value, class, words of the reason)
        let cases: Vec<(&str, &str, String, Class, &str)> = vec![
            (
                V4_NET,
                "10.244.20.0-25",
                good("192.168.0.20"),
                Class::Subnet,
                "10.244.20.0/25 is not a /24",
            ),
            (
                V4_NET,
                "10.99.0.0-24",
                good("192.168.0.21"),
                Class::Subnet,
                "outside the network 10.244.0.0/16",
            ),
            (
                V4_NET,
                "10.244.22.0-24&fd00:10:244:22::-64",
                good("192.168.0.22"),
                Class::Subnet,
                "on an IPv4-only network",
            ),
            (
                DUAL_NET,
                "10.244.23.0-24&fd00:99::-64",
                good("192.168.0.23"),
                Class::Subnet,
                "outside the network fd00:10:244::/56",
            ),
            (
                DUAL_NET,
                "10.244.24.0-24&fd00:10:244:24::-72",
                good("192.168.0.24"),
                Class::Subnet,
                "is not a /64",
            ),
            (
                V4_NET,
                "10.244.25.0-24",
                good("169.254.1.1"),
                Class::PublicIp,
                "PublicIP 169.254.1.1 is link-local",
            ),
            (
                V4_NET,
                "10.244.26.0-24",
                good("10.244.3.5"),
                Class::PublicIp,
                "inside the pod network",
            ),
            (
                V4_NET,
                "10.244.27.0-24",
                good("127.0.0.1"),
                Class::PublicIp,
                "loopback",
            ),
            (
                V4_NET,
                "10.244.28.0-24",
                good("224.0.0.5"),
                Class::PublicIp,
                "multicast",
            ),
            (
                V4_NET,
                "10.244.29.0-24",
                good("255.255.255.255"),
                Class::PublicIp,
                "broadcast",
            ),
            (
                V4_NET,
                "10.244.30.0-24",
                good("0.0.0.0"),
                Class::PublicIp,
                "unspecified",
            ),
            (
                V4_NET,
                "10.244.31.0-24",
                good(OWN_IP),
                Class::PublicIp,
                "this node's own",
            ),
            (
                V4_NET,
                "10.244.42.0-24",
                good("192.168.0.1"),
                Class::PublicIp,
                "PublicIP 192.168.0.1 is already the address of the older lease 10.244.1.0-24",
            ),
            (
                DUAL_NET,
                "10.244.32.0-24&fd00:10:244:32::-64",
                dual_v6("fe80::1"),
                Class::PublicIp,
                "PublicIPv6 fe80::1 is link-local",
            ),
            (
                DUAL_NET,
                "10.244.33.0-24&fd00:10:244:33::-64",
                dual_v6("fd00:10:244:1::1"),
                Class::PublicIp,
                "inside the pod network fd00:10:244::/56",
            ),
            (
                V4_NET,
                "10.244.9.0-24&fd00:10:244:9::-64",
                good("192.168.0.34"),
                Class::Overlap,
                "10.244.9.0/24 is this node's own",
            ),
            (
                DUAL_NET,
                "10.244.9.0-24&fd00:10:244:35::-64",
                dual_v6("fd00:9::35"),
                Class::Overlap,
                "10.244.9.0/24 is this node's own",
            ),
            (
                V4_NET,
                "10.244.36.0-24",
                mac("01:00:5e:00:00:01"),
                Class::BackendData,
                "multicast",
            ),
            (
                V4_NET,
                "10.244.37.0-24",
                mac("not-a-mac"),
                Class::BackendData,
                "VtepMAC",
            ),
            (
                V4_NET,
                "10.244.38.0-24",
                mac("00:00:00:00:00:00"),
                Class::BackendData,
                "VtepMAC",
            ),
            (
                V4_NET,
                "10.244.39.0-24",
                r#"{"PublicIP":"192.168.0.39","BackendType":"host-gw"}"#.into(),
                Class::OtherBackend,
                "\"host-gw\"",
            ),
            (
                V4_NET,
                "10.244.40.0-24",
                "not json".into(),
                Class::Unreadable,
                "not flannel lease JSON",
            ),
            (
                V4_NET,
                "10.244.41.0-24",
                big.clone(),
                Class::TooLarge,
                "over the 65536 bytes",
            ),
        ];
        for (network, key, value, class, words) in &cases {
            let mut m = members();
            let peer = lease("192.168.0.1", "02:00:00:00:00:01");
            put(&mut m, A, &peer, 2, 2);
            let full = format!("{SUBNETS}{key}");
            put(&mut m, &full, value, 3, 3);
            take_lines(Level::Warn);
            let before = metrics::refusals(class.label());
            for pass in 0..3 {
                let (peers, unusable) = vxlan_peers_on(&mut m, network);
                let keys: Vec<String> = peers.iter().map(|p| p.key.to_string()).collect();
                assert_eq!(
                    keys,
                    ["10.244.1.0-24"],
                    "{key}: only the sound peer is programmed"
                );
                assert_eq!(unusable, 1, "{key}");
                let warned = take_lines(Level::Warn);
                if pass > 0 {
                    assert!(warned.is_empty(), "{key} logged again: {warned:?}");
                    continue;
                }
                assert_eq!(warned.len(), 1, "{key}: {warned:?}");
                let line = &warned[0];
                let shown = SubnetKey::parse(key).unwrap().to_string();
                assert!(
                    line.starts_with(&format!("lease {shown} is not programmed: ")),
                    "{line}"
                );
                assert!(line.contains(words), "{key}: {line}");
                assert!(line.len() < 300, "the value is not dumped: {line}");
            }
            assert_eq!(
                metrics::refusals(class.label()),
                before + 1,
                "{key}: counted once as {}",
                class.label()
            );
            // A new value is judged (and logged) anew.
            put(&mut m, &full, value, 3, 9);
            vxlan_peers_on(&mut m, network);
            assert_eq!(take_lines(Level::Warn).len(), 1, "{key} rewritten");
        }
    }

    #[test]
    fn the_older_lease_keeps_a_subnet_whatever_the_key_form() {
        let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = members();
        let peer = lease("192.168.0.1", "02:00:00:00:00:01");
        put(&mut m, A, &peer, 10, 10);
        // An attacker's newer dual-stack key for the peer's IPv4 subnet, pointing elsewhere.
        let thief = "/coreos.com/network/subnets/10.244.1.0-24&fd00:10:244:7::-64";
        let evil = r#"{"PublicIP":"192.168.0.66","PublicIPv6":"fd00:9::66","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:66"},"BackendV6Data":{"VNI":1,"VtepMAC":"02:00:00:00:00:67"}}"#;
        put(&mut m, thief, evil, 20, 20);
        take_lines(Level::Warn);
        let before = metrics::refusals("overlap");
        let (peers, unusable) = vxlan_peers_on(&mut m, DUAL_NET);
        assert_eq!(peers.len(), 1);
        assert_eq!(peers[0].attrs.public_ip.to_string(), "192.168.0.1");
        assert_eq!(unusable, 1);
        let warned = take_lines(Level::Warn);
        assert_eq!(
            warned,
            ["lease 10.244.1.0-24&fd00:10:244:7::-64 is not programmed: subnet 10.244.1.0/24 is already held by the older lease 10.244.1.0-24"]
        );
        assert_eq!(metrics::refusals("overlap"), before + 1);
        // The peer leaves: the other claim is the only one now, and is programmed.
        delete(&mut m, A).unwrap();
        let (peers, unusable) = vxlan_peers_on(&mut m, DUAL_NET);
        assert_eq!((peers.len(), unusable), (1, 0));
        assert_eq!(peers[0].key.to_string(), "10.244.1.0-24&fd00:10:244:7::-64");
        // An older dual-stack key beats a newer IPv4 one too.
        put(&mut m, A, &peer, 40, 40);
        let (peers, _) = vxlan_peers_on(&mut m, DUAL_NET);
        assert_eq!(peers.len(), 1);
        assert_eq!(peers[0].attrs.public_ip.to_string(), "192.168.0.66");
    }

    #[test]
    fn junk_keys_are_named_once_and_shadow_keys_are_junk() {
        let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = members();
        let peer = lease("192.168.0.1", "02:00:00:00:00:01");
        put(&mut m, A, &peer, 2, 2);
        let before = metrics::refusals("not_a_lease_key");
        // A key in a directory below subnets/ would otherwise shadow the real 10.244.1.0-24.
        let shadow = "/coreos.com/network/subnets/x/10.244.1.0-24";
        let evil = lease("192.168.0.66", "02:00:00:00:00:66");
        assert!(!put(&mut m, shadow, &evil, 3, 3));
        assert!(
            !put(&mut m, shadow, &evil, 3, 3),
            "the same key and value: said once"
        );
        let warned = take_lines(Level::Warn);
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(warned[0].contains("ignoring key /coreos.com/network/subnets/x/10.244.1.0-24: not a flannel subnet lease key"));
        let (peers, _) = vxlan_peers_on(&mut m, V4_NET);
        assert_eq!(peers[0].attrs.public_ip.to_string(), "192.168.0.1");
        // A newline in a key cannot end the log line and forge another.
        let forged = format!("{SUBNETS}a\n2026-01-01T00:00:00.000Z ERROR ferrocni-agent: fake");
        assert!(!put(&mut m, &forged, "x", 4, 4));
        let warned = take_lines(Level::Warn);
        assert_eq!(warned.len(), 1);
        assert!(
            !warned[0].contains('\n') && warned[0].contains("a\\n2026"),
            "{warned:?}"
        );
        // A listing with the same key logs nothing new; a flood is named up to the budget and
        // summed up in one line; a long name is clipped.
        let leases = m.known.clone();
        let mut junk = vec![JunkKey::new(shadow.as_bytes(), 3)];
        let long = format!("{SUBNETS}{}", "z".repeat(100_000));
        junk.push(JunkKey::new(long.as_bytes(), 4));
        for i in 0..100 {
            junk.push(JunkKey::new(format!("{SUBNETS}junk{i}").as_bytes(), 5));
        }
        m.replace(leases.clone(), &junk, OWN).unwrap();
        let warned = take_lines(Level::Warn);
        // Two keys were named already this minute: 18 more names, then the sum.
        assert_eq!(warned.len(), NAMED_PER_WINDOW - 1, "{warned:?}");
        assert!(warned.iter().all(|l| l.len() < 400), "{warned:?}");
        assert!(
            warned.last().unwrap().starts_with("83 more refused lease(s) or key(s) not named (over 20 a minute: not_a_lease_key 83)"),
            "{warned:?}"
        );
        assert_eq!(metrics::refusals("not_a_lease_key"), before + 103);
        m.replace(leases, &junk, OWN).unwrap();
        assert!(
            take_lines(Level::Warn).is_empty(),
            "listed again: nothing new"
        );
    }

    #[test]
    fn every_registered_backend_gets_the_same_checks() {
        let _serial = COUNTERS.lock().unwrap_or_else(|p| p.into_inner());
        // A lease that only the shared rules refuse reaches no backend's data plane.
        for reg in registry::REGISTRY {
            let name = reg.names[0];
            let json = format!(r#"{{"Network":"10.244.0.0/16","Backend":{{"Type":"{name}"}}}}"#);
            let b = backend(&json);
            let mut m = members();
            let value = format!(r#"{{"PublicIP":"127.0.0.1","BackendType":"{name}"}}"#);
            put(&mut m, A, &value, 2, 2);
            let r = rules(&m, &json);
            let (peers, unusable) = m.peers(&r, b.as_ref());
            assert!(peers.is_empty(), "{name} got a loopback peer");
            assert_eq!(unusable, 1);
        }
    }
}
