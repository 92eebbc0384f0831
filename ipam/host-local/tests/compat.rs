//! Two-way store compatibility with the reference plugin: either binary can release what the
//! other reserved, and neither double-books an address the other holds.

mod common;
use common::*;
use serde_json::json;

fn ipam() -> serde_json::Value {
    json!({"ranges": [[{"subnet": "10.40.0.0/24"}], [{"subnet": "fd40::/120"}]]})
}

#[test]
fn ours_reserves_reference_releases() {
    let Some(reference) = reference() else { return };
    let d = TempDir::new("compat1");
    let c = conf("1.0.0", "net", d.path(), ipam());
    let store = d.path().join("net");
    assert!(run(ours(), "ADD", "c1", &c).ok());
    assert!(run(ours(), "ADD", "c2", &c).ok());
    assert_eq!(leases(&store).len(), 4);
    // the reference sees our reservation: CHECK passes, a duplicate ADD is refused
    assert!(run(reference, "CHECK", "c1", &c).ok());
    let dup = run(reference, "ADD", "c1", &c);
    assert!(
        !dup.ok() && dup.stdout.contains("duplicate allocation"),
        "{}",
        dup.stdout
    );
    let r = run(reference, "DEL", "c1", &c);
    assert!(r.ok(), "{}", r.stdout);
    let left: Vec<String> = leases(&store).into_iter().map(|(n, _)| n).collect();
    assert_eq!(left, ["10.40.0.3", "fd40::3"]);
    // and its next ADD continues round-robin after ours without touching c2's addresses
    let r = run(reference, "ADD", "c3", &c);
    assert_eq!(r.addresses(), ["10.40.0.4/24", "fd40::4/120"]);
    // our index notices the reference's changes
    assert!(run(ours(), "DEL", "c3", &c).ok());
    assert!(run(ours(), "DEL", "c2", &c).ok());
    assert!(leases(&store).is_empty());
}

#[test]
fn reference_reserves_ours_releases_and_does_not_double_book() {
    let Some(reference) = reference() else { return };
    let d = TempDir::new("compat2");
    let c = conf("1.0.0", "net", d.path(), ipam());
    let store = d.path().join("net");
    // prime our index first so that it has to notice the reference's later writes
    assert!(run(ours(), "ADD", "c0", &c).ok());
    for cid in ["r1", "r2", "r3"] {
        assert!(run(reference, "ADD", cid, &c).ok());
    }
    // the reference's last_reserved_ip is .5: we continue at .6, never on a held address
    let o = run(ours(), "ADD", "c1", &c);
    assert_eq!(
        o.addresses(),
        ["10.40.0.6/24", "fd40::6/120"],
        "{}",
        o.stdout
    );
    // a requested address the reference holds is refused
    let taken = conf("1.0.0", "net", d.path(), {
        let mut i = ipam();
        i["ranges"] = json!([[{"subnet": "10.40.0.0/24"}]]);
        i
    });
    let mut call = Call::new(ours(), "ADD", "c9");
    call.args = "IP=10.40.0.4";
    let o = call.run(&taken);
    assert!(
        !o.ok() && o.stdout.contains("10.40.0.4 is not available"),
        "{}",
        o.stdout
    );
    // duplicate of an attachment the reference made is refused by us
    assert!(!run(ours(), "ADD", "r2", &c).ok());
    // our CHECK accepts the reference's reservation (with its prevResult)
    let mut check_conf = c.clone();
    check_conf["prevResult"] = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.40.0.4/24"}, {"address": "fd40::4/120"}]});
    assert!(run(ours(), "CHECK", "r2", &check_conf).ok());
    assert!(!run(ours(), "CHECK", "r1", &check_conf).ok());
    for cid in ["r1", "r2", "r3"] {
        assert!(run(ours(), "DEL", cid, &c).ok());
    }
    let left: Vec<String> = leases(&store).into_iter().map(|(n, _)| n).collect();
    assert_eq!(left, ["10.40.0.2", "10.40.0.6", "fd40::2", "fd40::6"]);
    // the reference still walks the store happily with our dot-files present
    assert!(run(reference, "DEL", "c0", &c).ok());
    assert!(run(reference, "DEL", "c1", &c).ok());
    assert!(leases(&store).is_empty());
    let rest = entries(&store);
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
}

#[test]
fn legacy_id_only_leases_are_honoured() {
    let d = TempDir::new("compat-legacy");
    let c = conf(
        "1.0.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.41.0.0/24"}]]}),
    );
    let store = d.path().join("net");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("10.41.0.2"), "old1").unwrap();
    // a legacy lease counts as this container's: duplicate ADD refused, CHECK passes, DEL frees
    assert!(!run(ours(), "ADD", "old1", &c).ok());
    assert!(run(ours(), "CHECK", "old1", &c).ok());
    assert_eq!(run(ours(), "ADD", "new1", &c).addresses(), ["10.41.0.3/24"]);
    assert!(run(ours(), "DEL", "old1", &c).ok());
    assert_eq!(
        leases(&store),
        [("10.41.0.3".to_string(), "new1\r\neth0".to_string())]
    );
}
