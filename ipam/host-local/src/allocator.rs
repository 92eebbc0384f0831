//! The five verbs on top of the store: ADD allocates one address per range set, DEL releases
//! every address of an attachment, CHECK verifies prevResult's addresses, GC releases what
//! the runtime no longer knows, STATUS reports exhaustion.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::config::IpamConfig;
use crate::error::{AllocFailure, IpamError};
use crate::ip::canonical;
use crate::range::RangeSet;
use crate::store::index::Index;
use crate::store::{Held, Owner, Store};
use crate::validate;

/// One allocated address with its range's prefix and gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub address: IpNetwork,
    pub gateway: IpAddr,
}

fn validate_attachment(cid: &str, ifname: &str) -> Result<(), IpamError> {
    validate::container_id(cid)?;
    validate::ifname(ifname)
}

fn open(cfg: &IpamConfig) -> Result<Store, IpamError> {
    open_existing(cfg, true)?.ok_or_else(|| IpamError::StoreMissing(cfg.data_dir.join(&cfg.name)))
}

/// Opens the store (`None` when it does not exist and `create` is false); the first call of a
/// boot of the node frees the leases of earlier boots first, unless the network keeps them.
fn open_existing(cfg: &IpamConfig, create: bool) -> Result<Option<Store>, IpamError> {
    let mut store = Store::open(&cfg.data_dir, &cfg.name, create, cfg.ranges.len())?;
    if let (Some(store), false) = (store.as_mut(), cfg.keep_leases_across_reboots) {
        if let Some(boot) = libcni::boot::Boot::current() {
            store.forget_earlier_boots(boot);
        }
    }
    Ok(store)
}

fn alloc_err(index: usize, reason: AllocFailure) -> IpamError {
    IpamError::Allocate { index, reason }
}

/// Takes one address from `set` for (cid, ifname): `requested` if given, else round-robin
/// after `last_reserved_ip.<idx>`.
fn allocate_in_set(
    store: &mut Store,
    idx: usize,
    set: &RangeSet,
    requested: Option<IpAddr>,
    cid: &str,
    ifname: &str,
) -> Result<Allocation, IpamError> {
    if let Some(ip) = requested {
        let range = set.range_for(&ip).ok_or_else(|| {
            alloc_err(
                idx,
                AllocFailure::NotInSet {
                    ip,
                    set: set.clone(),
                },
            )
        })?;
        if range.gateway == ip {
            return Err(alloc_err(idx, AllocFailure::IsGateway(ip)));
        }
        if !store.try_reserve(ip, cid, ifname)? {
            return Err(alloc_err(
                idx,
                AllocFailure::Taken {
                    ip,
                    set: set.clone(),
                },
            ));
        }
        store.set_last_reserved(idx, ip);
        return Ok(Allocation {
            address: range.address_of(ip),
            gateway: range.gateway,
        });
    }
    let last = store.last_reserved(idx);
    for (ip, range) in set.iter_from(last) {
        if store.try_reserve(ip, cid, ifname)? {
            store.set_last_reserved(idx, ip);
            return Ok(Allocation {
                address: range.address_of(ip),
                gateway: range.gateway,
            });
        }
    }
    Err(alloc_err(idx, AllocFailure::Exhausted(set.clone())))
}

/// ADD: one address per range set; on any failure releases what this call took.
pub fn add(cfg: &IpamConfig, cid: &str, ifname: &str) -> Result<Vec<Allocation>, IpamError> {
    validate_attachment(cid, ifname)?;
    let mut store = open(cfg)?;
    let candidates = store.candidates(cid, ifname, Held::Either);
    let held: Vec<IpAddr> = store
        .verify_held(candidates, cid, ifname)?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    let mut requested: Vec<IpAddr> = cfg.requested_ips.clone();
    let mut taken: Vec<Allocation> = Vec::new();
    let mut outcome = Ok(());
    for (idx, set) in cfg.ranges.iter().enumerate() {
        if let Some(ip) = held.iter().find(|ip| set.contains(ip)) {
            outcome = Err(alloc_err(
                idx,
                AllocFailure::Duplicate {
                    ip: *ip,
                    container_id: cid.to_string(),
                },
            ));
            break;
        }
        let wanted = requested
            .iter()
            .position(|ip| set.contains(ip))
            .map(|pos| requested.remove(pos));
        match allocate_in_set(&mut store, idx, set, wanted, cid, ifname) {
            Ok(a) => taken.push(a),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    if outcome.is_ok() && !requested.is_empty() {
        outcome = Err(IpamError::RequestedLeftOver(requested.clone()));
    }
    if let Err(e) = outcome {
        for a in &taken {
            if let Err(release_err) = store.release(&a.address.ip().to_string(), cid, ifname) {
                eprintln!("host-local: rollback: {release_err}");
            }
        }
        store.commit();
        return Err(e);
    }
    store.commit();
    Ok(taken)
}

/// DEL: releases every lease of (cid, ifname); legacy id-only leases when there are none.
/// Succeeds when nothing is held.
pub fn del(cfg: &IpamConfig, cid: &str, ifname: &str) -> Result<(), IpamError> {
    validate_attachment(cid, ifname)?;
    let mut store = open(cfg)?;
    let mut errors = Vec::new();
    let mut released = false;
    for held in [Held::Exact, Held::Legacy] {
        if released {
            break;
        }
        for name in store.candidates(cid, ifname, held) {
            match store.release(&name, cid, ifname) {
                Ok(r) => released |= r,
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    store.commit();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(IpamError::Release(errors))
    }
}

/// CHECK: each prevResult address inside our range sets must be reserved for (cid, ifname)
/// (read from its lease file). Without such addresses, at least one lease must exist, as the
/// reference checks.
pub fn check(
    cfg: &IpamConfig,
    cid: &str,
    ifname: &str,
    prev_ips: &[IpAddr],
) -> Result<(), IpamError> {
    validate_attachment(cid, ifname)?;
    let store = open(cfg)?;
    let ours: Vec<IpAddr> = prev_ips
        .iter()
        .map(|ip| canonical(*ip))
        .filter(|ip| cfg.ranges.iter().any(|s| s.contains(ip)))
        .collect();
    let result = if ours.is_empty() {
        let candidates = store.candidates(cid, ifname, Held::Either);
        if !store.verify_held(candidates, cid, ifname)?.is_empty() {
            Ok(())
        } else {
            Err(IpamError::NoLease(cid.to_string()))
        }
    } else {
        ours.iter()
            .try_for_each(|ip| match store.read_owner(&ip.to_string())? {
                Some(o) if o.belongs_to(cid, ifname) => Ok(()),
                _ => Err(IpamError::NotReserved {
                    ip: *ip,
                    container_id: cid.to_string(),
                    ifname: ifname.to_string(),
                }),
            })
    };
    store.commit();
    result
}

/// GC selection: lease names whose holder is not a valid attachment. Legacy id-only leases
/// survive when any valid attachment has their container ID; junk and unattributable
/// content is released; non-files are never touched.
pub fn gc_victims(index: &Index, valid: &[(String, String)]) -> Vec<String> {
    let pairs: HashSet<(&str, &str)> = valid
        .iter()
        .map(|(c, i)| (c.as_str(), i.as_str()))
        .collect();
    let cids: HashSet<&str> = valid.iter().map(|(c, _)| c.as_str()).collect();
    let mut victims: Vec<String> = index
        .leases
        .iter()
        .filter(|(_, owner)| match owner {
            Owner::Attachment { cid, ifname } => !pairs.contains(&(cid.as_str(), ifname.as_str())),
            Owner::Legacy { cid } => !cids.contains(cid.as_str()),
            Owner::Foreign | Owner::Junk => true,
            Owner::NotAFile => false,
        })
        .map(|(n, _)| n.clone())
        .collect();
    victims.sort();
    victims
}

/// GC: rescans the store (never trusting the cache) and releases every victim, continuing
/// past errors and reporting them all. `lock` and `last_reserved_ip.*` are never touched.
pub fn gc(cfg: &IpamConfig, valid: &[(String, String)]) -> Result<(), IpamError> {
    let Some(mut store) = open_existing(cfg, false)? else {
        return Ok(()); // no store: nothing was ever reserved
    };
    store.rescan()?;
    let mut errors = Vec::new();
    for name in gc_victims(store.leases(), valid) {
        if let Err(e) = store.remove_lease(&name) {
            errors.push(e.to_string());
        }
    }
    store.commit();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(IpamError::Gc(errors))
    }
}

/// Range sets with no free address left. ADD needs one address from every set, so any
/// exhausted set makes the plugin unable to serve ADD.
pub fn exhausted_sets<'a>(ranges: &'a [RangeSet], index: Option<&Index>) -> Vec<&'a RangeSet> {
    let held: Vec<IpAddr> = index
        .map(|i| {
            i.leases
                .iter()
                .filter(|(_, o)| o.blocks_address())
                .filter_map(|(n, _)| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ranges
        .iter()
        .filter(|set| {
            let used = held.iter().filter(|ip| set.contains(ip)).count() as u128;
            used >= set.capacity()
        })
        .collect()
}

/// STATUS: not available (code 50) when a range set is exhausted. The index can only
/// over-count (an entry whose file is gone), so exhaustion is confirmed by a rescan.
pub fn status(cfg: &IpamConfig) -> Result<(), IpamError> {
    let mut store = open_existing(cfg, false)?;
    let mut exhausted: Option<RangeSet> = None;
    if let Some(s) = store.as_mut() {
        if !exhausted_sets(&cfg.ranges, Some(s.leases())).is_empty() {
            s.rescan()?;
            exhausted = exhausted_sets(&cfg.ranges, Some(s.leases()))
                .first()
                .map(|r| (*r).clone());
        }
    } else {
        exhausted = exhausted_sets(&cfg.ranges, None)
            .first()
            .map(|r| (*r).clone());
    }
    if let Some(s) = store {
        s.commit();
    }
    match exhausted {
        None => Ok(()),
        Some(set) => Err(IpamError::Exhausted(set)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use libcni::boot::Boot;
    use serde_json::json;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "hl-unit-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn cfg(dir: &TempDir, ipam: serde_json::Value, extra: serde_json::Value) -> IpamConfig {
        let mut ipam = ipam;
        ipam["dataDir"] = json!(dir.0.to_str().unwrap());
        let mut conf = json!({"cniVersion":"1.0.0","name":"net1","ipam":ipam});
        if let Some(obj) = extra.as_object() {
            for (k, v) in obj {
                conf[k] = v.clone();
            }
        }
        config::load(conf.as_object().unwrap(), None).unwrap()
    }

    fn addrs(v: &[Allocation]) -> Vec<String> {
        v.iter().map(|a| a.address.to_string()).collect()
    }

    #[test]
    fn allocates_round_robin_and_releases() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/29"}],[{"subnet":"fd00::/120"}]]}),
            json!({}),
        );
        assert_eq!(
            addrs(&add(&c, "c1", "eth0").unwrap()),
            ["10.0.0.2/29", "fd00::2/120"]
        );
        assert_eq!(
            addrs(&add(&c, "c2", "eth0").unwrap()),
            ["10.0.0.3/29", "fd00::3/120"]
        );
        let dup = add(&c, "c1", "eth0").unwrap_err();
        assert_eq!(dup.to_string(), "failed to allocate for range 0: 10.0.0.2 has been allocated to c1, duplicate allocation is not allowed");
        del(&c, "c1", "eth0").unwrap();
        del(&c, "c1", "eth0").unwrap();
        // round robin continues after .3 rather than reusing .2
        assert_eq!(
            addrs(&add(&c, "c3", "eth0").unwrap()),
            ["10.0.0.4/29", "fd00::4/120"]
        );
        let store = d.0.join("net1");
        assert_eq!(
            std::fs::read_to_string(store.join("10.0.0.4")).unwrap(),
            "c3\r\neth0"
        );
        assert_eq!(
            std::fs::read_to_string(store.join("last_reserved_ip.0")).unwrap(),
            "10.0.0.4"
        );
        assert!(!store.join(".ferrocni-tmp").exists());
    }

    #[test]
    fn exhaustion_rolls_back_and_status_reports_it() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"fd00::/64"}],[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.11"}]]}),
            json!({}),
        );
        status(&c).unwrap();
        add(&c, "c1", "eth0").unwrap();
        add(&c, "c2", "eth0").unwrap();
        let err = add(&c, "c3", "eth0").unwrap_err();
        assert_eq!(err.to_string(), "failed to allocate for range 1: no IP addresses available in range set: 10.0.0.10-10.0.0.11");
        // the v6 address taken for c3 was released
        let files = std::fs::read_dir(d.0.join("net1")).unwrap().count();
        assert_eq!(files, 4 + 3 + 2); // 4 leases, lock, last_reserved x2, index, boot marker
        let st = status(&c).unwrap_err();
        assert_eq!(libcni::CniError::from(st).code, 50);
        del(&c, "c1", "eth0").unwrap();
        status(&c).unwrap();
    }

    #[test]
    fn requested_ips() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({"runtimeConfig":{"ips":["10.0.0.50/24"]}}),
        );
        assert_eq!(addrs(&add(&c, "c1", "eth0").unwrap()), ["10.0.0.50/24"]);
        let e = add(&c, "c2", "eth0").unwrap_err().to_string();
        assert_eq!(e, "failed to allocate for range 0: requested IP address 10.0.0.50 is not available in range set 10.0.0.1-10.0.0.254");
        let gw = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({"args":{"cni":{"ips":["10.0.0.1"]}}}),
        );
        assert!(add(&gw, "c3", "eth0")
            .unwrap_err()
            .to_string()
            .contains("requested ip 10.0.0.1 is subnet's gateway"));
        let outside = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({"args":{"cni":{"ips":["10.9.0.1"]}}}),
        );
        assert_eq!(
            add(&outside, "c4", "eth0").unwrap_err().to_string(),
            "failed to allocate all requested IPs: 10.9.0.1"
        );
        // nothing leaked by the failures
        assert!(std::fs::read_dir(d.0.join("net1"))
            .unwrap()
            .filter_map(|e| e.ok())
            .all(|e| {
                let n = e.file_name().into_string().unwrap();
                !crate::store::is_lease_name(&n) || n == "10.0.0.50"
            }));
    }

    #[test]
    fn check_compares_prev_result() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({}),
        );
        let a = add(&c, "c1", "eth0").unwrap();
        add(&c, "c2", "eth0").unwrap();
        check(&c, "c1", "eth0", &[a[0].address.ip()]).unwrap();
        check(&c, "c1", "eth0", &[]).unwrap();
        assert!(check(&c, "c1", "eth0", &["10.0.0.3".parse().unwrap()]).is_err());
        assert!(check(&c, "c1", "eth1", &[a[0].address.ip()]).is_err());
        assert!(check(&c, "c9", "eth0", &[]).is_err());
    }

    #[test]
    fn gc_selection() {
        let mut idx = Index::default();
        let att = |c: &str, i: &str| Owner::Attachment {
            cid: c.into(),
            ifname: i.into(),
        };
        idx.leases.insert("10.0.0.2".into(), att("c1", "eth0"));
        idx.leases.insert("10.0.0.3".into(), att("c1", "eth1"));
        idx.leases.insert("10.0.0.4".into(), att("c2", "eth0"));
        idx.leases
            .insert("10.0.0.5".into(), Owner::Legacy { cid: "c1".into() });
        idx.leases
            .insert("10.0.0.6".into(), Owner::Legacy { cid: "c3".into() });
        idx.leases.insert("10.0.0.7".into(), Owner::Junk);
        idx.leases.insert("10.0.0.8".into(), Owner::NotAFile);
        let valid = vec![("c1".to_string(), "eth0".to_string())];
        assert_eq!(
            gc_victims(&idx, &valid),
            ["10.0.0.3", "10.0.0.4", "10.0.0.6", "10.0.0.7"]
        );
        assert_eq!(gc_victims(&idx, &[]).len(), 6);
    }

    #[test]
    fn gc_releases_unknown_attachments_only() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({}),
        );
        add(&c, "c1", "eth0").unwrap();
        add(&c, "c2", "eth0").unwrap();
        std::fs::write(d.0.join("net1/10.0.0.77"), "").unwrap();
        gc(&c, &[("c2".into(), "eth0".into())]).unwrap();
        let store = d.0.join("net1");
        assert!(!store.join("10.0.0.2").exists());
        assert!(store.join("10.0.0.3").exists());
        assert!(!store.join("10.0.0.77").exists());
        assert!(store.join("lock").exists() && store.join("last_reserved_ip.0").exists());
    }

    #[test]
    fn stale_index_is_rebuilt_after_foreign_changes() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({}),
        );
        add(&c, "c1", "eth0").unwrap();
        // a foreign writer (the reference) reserves .3 and releases c1's .2 behind our back
        std::fs::write(d.0.join("net1/10.0.0.3"), "x1\r\neth0").unwrap();
        std::fs::write(d.0.join("net1/last_reserved_ip.0"), "10.0.0.3").unwrap();
        std::fs::remove_file(d.0.join("net1/10.0.0.2")).unwrap();
        // x1 is seen as holding .3 (duplicate refused) and c1 may allocate again
        assert!(add(&c, "x1", "eth0").is_err());
        assert_eq!(addrs(&add(&c, "c1", "eth0").unwrap()), ["10.0.0.4/24"]);
        del(&c, "x1", "eth0").unwrap();
        assert!(!d.0.join("net1/10.0.0.3").exists());
    }

    #[test]
    fn the_round_robin_hints_read_once_still_fingerprint_the_store() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/120"}]]}),
            json!({}),
        );
        let open = || Store::open(&d.0, "net1", false, 2).unwrap().unwrap();
        add(&c, "c1", "eth0").unwrap();
        add(&c, "c2", "eth0").unwrap();
        // The journal's last marker holds the hints as this call wrote them.
        let mut store = open();
        assert!(store.index_was_valid());
        assert_eq!(store.last_reserved(0), Some("10.0.0.3".parse().unwrap()));
        assert_eq!(store.last_reserved(1), Some("fd00::3".parse().unwrap()));
        drop(store);
        // A hint that cannot be written (a directory in its place) is read again for the
        // marker, so the journal still matches the store afterwards.
        std::fs::remove_file(d.0.join("net1/last_reserved_ip.1")).unwrap();
        std::fs::create_dir(d.0.join("net1/last_reserved_ip.1")).unwrap();
        assert_eq!(
            addrs(&add(&c, "c3", "eth0").unwrap()),
            ["10.0.0.4/24", "fd00::4/120"]
        );
        let mut store = open();
        assert!(store.index_was_valid());
        assert_eq!(store.last_reserved(0), Some("10.0.0.4".parse().unwrap()));
        assert_eq!(store.last_reserved(1), None);
    }

    #[test]
    fn skips_a_long_taken_run_after_wrap_around() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/22"}]]}),
            json!({}),
        );
        add(&c, "first", "eth0").unwrap(); // creates the store and a valid index
        let store = d.0.join("net1");
        // a foreign writer fills .0.3 .. .3.200 and leaves last_reserved at the end of the range
        for v in 3u32..(3 * 256 + 201) {
            std::fs::write(
                store.join(format!("10.0.{}.{}", v >> 8, v & 255)),
                format!("f{v}\r\neth0"),
            )
            .unwrap();
        }
        std::fs::write(store.join("last_reserved_ip.0"), "10.0.3.254").unwrap();
        assert_eq!(addrs(&add(&c, "c1", "eth0").unwrap()), ["10.0.3.201/22"]);
        // the same again with the foreign leases now in our index
        std::fs::write(store.join("last_reserved_ip.0"), "10.0.3.254").unwrap();
        assert_eq!(addrs(&add(&c, "c2", "eth0").unwrap()), ["10.0.3.202/22"]);
        del(&c, "f300", "eth0").unwrap();
        assert!(!store.join("10.0.1.44").exists());
    }

    #[test]
    fn journal_compacts_and_stays_consistent() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"fd00::/120"}]]}),
            json!({}),
        );
        let keep = "k".repeat(200);
        add(&c, &keep, "eth0").unwrap();
        let index = d.0.join("net1/.ferrocni-index");
        let mut max_len = 0;
        for i in 0..150 {
            let cid = format!("{i}{}", "x".repeat(200));
            add(&c, &cid, "eth0").unwrap();
            del(&c, &cid, "eth0").unwrap();
            max_len = max_len.max(std::fs::metadata(&index).unwrap().len());
        }
        let final_len = std::fs::metadata(&index).unwrap().len();
        let floor = crate::store::index::MIN_COMPACT_BYTES as u64;
        assert!(
            max_len > floor - 1_000 && final_len < max_len,
            "compaction happened ({max_len} -> {final_len})"
        );
        assert!(
            add(&c, &keep, "eth0").is_err(),
            "still known as held after compaction"
        );
        del(&c, &keep, "eth0").unwrap();
        assert!(crate::store::is_lease_name("10.0.0.2"));
        let leases = std::fs::read_dir(d.0.join("net1"))
            .unwrap()
            .filter(|e| {
                crate::store::is_lease_name(e.as_ref().unwrap().file_name().to_str().unwrap())
            })
            .count();
        assert_eq!(leases, 0);
    }

    #[test]
    fn the_first_call_of_a_boot_frees_the_leases_of_earlier_boots() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/24"}]]}),
            json!({}),
        );
        add(&c, "c1", "eth0").unwrap();
        add(&c, "c2", "eth0").unwrap();
        let store_dir = d.0.join("net1");
        // The reference's leases (no recorded boot), a directory under an address name.
        std::fs::write(store_dir.join("10.0.0.50"), "ref1\r\neth0").unwrap();
        std::fs::create_dir(store_dir.join("10.0.0.60")).unwrap();
        let lease = |ip: &str| store_dir.join(ip).exists();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let open = || Store::open(&d.0, "net1", false, 1).unwrap().unwrap();
        let probe = std::fs::File::open(store_dir.join("10.0.0.50")).unwrap();
        if !Boot::known("x", Some(i64::MAX)).predates(&probe) {
            eprintln!("{} dies with the boot: nothing to free", d.0.display());
            return;
        }
        let stamped = std::fs::File::open(store_dir.join("10.0.0.2"))
            .is_ok_and(|f| Boot::known("x", Some(0)).predates(&f));

        // This boot began an hour ago: its first call (the ADDs above) freed nothing, and
        // nothing is freed again.
        if let Some(this) = Boot::current() {
            assert_eq!(open().forget_earlier_boots(this), 0);
        }
        // A boot that began an hour ago under another id: the reference's lease, written since,
        // is of it; ours are of the boot they record (where files keep a record).
        let mut store = open();
        let freed = store.forget_earlier_boots(&Boot::known("boot-b", Some(now - 3600)));
        store.commit();
        assert!(lease("10.0.0.50") && lease("10.0.0.60"));
        assert_eq!(freed, if stamped { 2 } else { 0 });
        assert_eq!(lease("10.0.0.2"), !stamped);
        // The marker names that boot: the next call reads it and goes on.
        assert_eq!(
            std::fs::read_to_string(store_dir.join(".ferrocni-boot")).unwrap(),
            "ferrocni-boot boot-b\n"
        );
        assert_eq!(
            open().forget_earlier_boots(&Boot::known("boot-b", Some(now + 60))),
            0
        );

        // A reboot: everything written before it goes, the directory stays.
        let mut store = open();
        let freed = store.forget_earlier_boots(&Boot::known("boot-c", Some(now + 60)));
        store.commit();
        assert_eq!(freed, if stamped { 1 } else { 3 });
        assert!(!lease("10.0.0.2") && !lease("10.0.0.3") && !lease("10.0.0.50"));
        assert!(store_dir.join("10.0.0.60").is_dir());
        // The index agrees: the freed containers may allocate again.
        let mut store = open();
        assert!(store.index_was_valid());
        assert!(store.leases().leases.keys().all(|n| n == "10.0.0.60"));
        drop(store);
        add(&c, "c1", "eth0").unwrap();
        add(&c, "ref1", "eth0").unwrap();
    }

    #[test]
    fn empty_lease_is_reclaimed() {
        let d = TempDir::new();
        let c = cfg(
            &d,
            json!({"ranges":[[{"subnet":"10.0.0.0/29"}]]}),
            json!({}),
        );
        std::fs::create_dir_all(d.0.join("net1")).unwrap();
        for i in 2..=6 {
            std::fs::write(
                d.0.join(format!("net1/10.0.0.{i}")),
                if i == 5 { "" } else { "other\r\neth0" },
            )
            .unwrap();
        }
        assert_eq!(addrs(&add(&c, "c1", "eth0").unwrap()), ["10.0.0.5/29"]);
    }
}
