//! SIGKILL the plugin at random moments during ADD, 100 times; no lease file is ever empty or
//! partial, and after DEL/GC no address is lost or double-booked.

mod common;
use common::*;
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sigkill_during_add_never_loses_or_double_books() {
    let d = TempDir::new("crash");
    let c = conf(
        "1.0.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.60.0.0/24"}], [{"subnet": "fd60::/120"}]]}),
    );
    let store = d.path().join("net");
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = XorShift(seed);
    let survivors: Vec<String> = (0..5).map(|i| format!("keep{i}")).collect();
    for s in &survivors {
        assert!(run(ours(), "ADD", s, &c).ok());
    }
    let before: Vec<(String, String)> = leases(&store);
    let mut killed_mid_way = 0;
    let mut inside_critical_section = 0;
    let crashed: Vec<String> = (0..100).map(|i| format!("crash{i}")).collect();
    for cid in &crashed {
        let mut child = Call::new(ours(), "ADD", cid).spawn(&c);
        std::thread::sleep(Duration::from_micros(rng.next() % 4000));
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        if out.status.code().is_none() {
            killed_mid_way += 1;
        }
        if store.join(".ferrocni-tmp").exists() {
            inside_critical_section += 1;
        }
        for (name, content) in leases(&store) {
            let owner = content.split("\r\n").next().unwrap_or("");
            assert!(
                content.ends_with("\r\neth0") && !owner.is_empty(),
                "lease {name} is partial: {content:?}"
            );
        }
    }
    eprintln!(
        "{killed_mid_way} of 100 ADDs killed before finishing, {inside_critical_section} of them while holding a temp file"
    );
    // survivors keep exactly their addresses
    let now = leases(&store);
    for lease in &before {
        assert!(now.contains(lease), "survivor lease {lease:?} lost");
    }
    // each crashed container holds at most one address per range set
    for cid in &crashed {
        let held: Vec<&String> = now
            .iter()
            .filter(|(_, c)| c.starts_with(&format!("{cid}\r\n")))
            .map(|(n, _)| n)
            .collect();
        assert!(
            held.iter().filter(|n| n.contains('.')).count() <= 1
                && held.iter().filter(|n| n.contains(':')).count() <= 1
        );
    }
    // new ADDs get addresses nobody holds
    let taken: HashSet<String> = now.iter().map(|(n, _)| n.clone()).collect();
    let fresh: Vec<String> = (0..10).map(|i| format!("new{i}")).collect();
    for cid in &fresh {
        let o = run(ours(), "ADD", cid, &c);
        assert!(o.ok(), "{}", o.stdout);
        for a in o.addresses() {
            let ip = a.split('/').next().unwrap().to_string();
            assert!(!taken.contains(&ip), "{ip} double-booked");
        }
    }
    assert!(
        !store.join(".ferrocni-tmp").exists(),
        "temp file not cleaned up"
    );
    // release half the crashed containers by DEL, the rest by GC
    for cid in &crashed[..50] {
        assert!(run(ours(), "DEL", cid, &c).ok());
    }
    let mut gc_conf = c.clone();
    gc_conf["cniVersion"] = "1.1.0".into();
    gc_conf["cni.dev/valid-attachments"] = survivors
        .iter()
        .chain(fresh.iter())
        .map(|cid| json!({"containerID": cid, "ifname": "eth0"}))
        .collect();
    let g = run(ours(), "GC", "", &gc_conf);
    assert!(g.ok(), "{}", g.stdout);
    let owners: HashSet<String> = leases(&store)
        .into_iter()
        .map(|(_, c)| c.split("\r\n").next().unwrap().to_string())
        .collect();
    let expected: HashSet<String> = survivors.iter().chain(fresh.iter()).cloned().collect();
    assert_eq!(owners, expected);
    assert_eq!(
        leases(&store).len(),
        2 * expected.len(),
        "one v4 + one v6 each"
    );
}
