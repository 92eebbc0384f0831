//! GC releases what the runtime no longer knows; STATUS reports exhaustion with code 50.

mod common;
use common::*;
use serde_json::json;

fn gc_conf(c: &serde_json::Value, valid: &[(&str, &str)]) -> serde_json::Value {
    let mut g = c.clone();
    g["cni.dev/valid-attachments"] = valid
        .iter()
        .map(|(cid, ifn)| json!({"containerID": cid, "ifname": ifn}))
        .collect();
    g
}

#[test]
fn gc_releases_only_invalid_attachments() {
    let d = TempDir::new("gc");
    let c = conf(
        "1.1.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.80.0.0/24"}], [{"subnet": "fd80::/120"}]]}),
    );
    let store = d.path().join("net");
    for (cid, ifn) in [
        ("c1", "eth0"),
        ("c1", "net1"),
        ("c2", "eth0"),
        ("c3", "eth0"),
    ] {
        let mut call = Call::new(ours(), "ADD", cid);
        call.ifname = ifn;
        assert!(call.run(&c).ok());
    }
    if let Some(reference) = reference() {
        let mut old = c.clone();
        old["cniVersion"] = "1.0.0".into();
        assert!(run(reference, "ADD", "r1", &old).ok());
    }
    std::fs::write(store.join("10.80.0.200"), "legacy-kept").unwrap();
    std::fs::write(store.join("10.80.0.201"), "legacy-gone").unwrap();
    std::fs::write(store.join("10.80.0.202"), "").unwrap();
    let g = run(
        ours(),
        "GC",
        "",
        &gc_conf(
            &c,
            &[("c1", "eth0"), ("c3", "eth0"), ("legacy-kept", "eth0")],
        ),
    );
    assert!(g.ok(), "{}", g.stdout);
    let mut owners: Vec<String> = leases(&store).into_iter().map(|(_, c)| c).collect();
    owners.sort();
    owners.dedup();
    assert_eq!(owners, ["c1\r\neth0", "c3\r\neth0", "legacy-kept"]);
    let mut rest = entries(&store);
    rest.retain(|e| e.parse::<std::net::IpAddr>().is_err());
    assert_eq!(
        rest,
        [
            ".ferrocni-boot",
            ".ferrocni-index",
            "last_reserved_ip.0",
            "last_reserved_ip.1",
            "lock"
        ]
    );
    // an empty list releases everything
    assert!(run(ours(), "GC", "", &gc_conf(&c, &[])).ok());
    assert!(leases(&store).is_empty());
    // released addresses are reusable and DEL after GC still succeeds
    assert!(run(ours(), "DEL", "c1", &c).ok());
    assert!(run(ours(), "ADD", "c9", &c).ok());
}

#[test]
fn gc_without_a_store_creates_nothing() {
    let d = TempDir::new("gc-none");
    let c = conf(
        "1.1.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.82.0.0/24"}]]}),
    );
    assert!(run(ours(), "GC", "", &gc_conf(&c, &[])).ok());
    assert!(!d.path().join("net").exists());
}

#[test]
fn gc_needs_1_1_0() {
    let d = TempDir::new("gc-ver");
    let c = conf(
        "1.0.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.81.0.0/24"}]]}),
    );
    assert!(run(ours(), "ADD", "c1", &c).ok());
    assert!(!run(ours(), "GC", "", &gc_conf(&c, &[])).ok());
    assert_eq!(leases(&d.path().join("net")).len(), 1);
}

#[test]
fn status_reports_exhaustion() {
    let d = TempDir::new("status");
    let c = conf(
        "1.1.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "fd90::/64"}], [{"subnet": "10.90.0.0/24", "rangeStart": "10.90.0.10", "rangeEnd": "10.90.0.12"}]]}),
    );
    assert!(run(ours(), "STATUS", "", &c).ok(), "no store yet: ready");
    assert!(
        !d.path().join("net").exists(),
        "STATUS must not create the store"
    );
    for cid in ["c1", "c2", "c3"] {
        assert!(run(ours(), "ADD", cid, &c).ok());
    }
    let s = run(ours(), "STATUS", "", &c);
    assert!(!s.ok());
    assert_eq!(s.json["code"], 50, "{}", s.stdout);
    assert!(s.json["msg"]
        .as_str()
        .unwrap()
        .contains("10.90.0.10-10.90.0.12"));
    let a = run(ours(), "ADD", "c4", &c);
    assert!(
        a.stdout
            .contains("no IP addresses available in range set: 10.90.0.10-10.90.0.12"),
        "{}",
        a.stdout
    );
    assert!(run(ours(), "DEL", "c2", &c).ok());
    assert!(run(ours(), "STATUS", "", &c).ok());
}
