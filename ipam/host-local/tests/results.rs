//! Result JSON in several versions, compared field by field with the reference plugin.

mod common;
use common::*;
use serde_json::{json, Value};

fn strip_empty_dns(mut v: Value) -> Value {
    // The reference (cni v1.1.x) prints "dns": {}; cni >= v1.2 omits an empty one.
    if v.get("dns") == Some(&json!({})) {
        v.as_object_mut().unwrap().remove("dns");
    }
    v
}

fn compare_with_reference(version: &str, ipam: Value) {
    let ours_dir = TempDir::new("res-ours");
    let ref_dir = TempDir::new("res-ref");
    let resolv = ours_dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 10.0.0.53\nsearch a.example b.example\noptions ndots:2\ndomain a.example\n",
    )
    .unwrap();
    let mut ipam = ipam;
    ipam["resolvConf"] = resolv.to_str().unwrap().into();
    let a = run(
        ours(),
        "ADD",
        "c1",
        &conf(version, "net", ours_dir.path(), ipam.clone()),
    );
    assert!(a.ok(), "{}", a.stdout);
    let Some(reference) = reference() else { return };
    let b = run(
        reference,
        "ADD",
        "c1",
        &conf(version, "net", ref_dir.path(), ipam),
    );
    assert!(b.ok(), "{}", b.stdout);
    assert_eq!(
        strip_empty_dns(a.json),
        strip_empty_dns(b.json),
        "version {version}"
    );
}

fn dual_stack() -> Value {
    json!({"ranges": [[{"subnet": "10.10.0.0/24", "rangeStart": "10.10.0.100"}], [{"subnet": "fd10::/64"}]],
           "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.20.0.0/16", "gw": "10.10.0.254"}, {"dst": "::/0"}]})
}

#[test]
fn result_1_0_0_matches_reference() {
    compare_with_reference("1.0.0", dual_stack());
}

#[test]
fn result_0_4_0_matches_reference() {
    compare_with_reference("0.4.0", dual_stack());
}

#[test]
fn result_0_2_0_matches_reference() {
    compare_with_reference("0.2.0", dual_stack());
}

#[test]
fn legacy_single_range_matches_reference() {
    compare_with_reference(
        "0.3.1",
        json!({"subnet": "10.30.0.0/16", "rangeStart": "10.30.5.0", "rangeEnd": "10.30.5.20", "gateway": "10.30.0.1"}),
    );
}

#[test]
fn shape_of_1_1_0_result() {
    let d = TempDir::new("res-110");
    let o = run(
        ours(),
        "ADD",
        "c1",
        &conf("1.1.0", "net", d.path(), dual_stack()),
    );
    assert!(o.ok(), "{}", o.stdout);
    assert_eq!(o.json["cniVersion"], "1.1.0");
    assert_eq!(o.addresses(), ["10.10.0.100/24", "fd10::2/64"]);
    assert_eq!(o.json["ips"][0]["gateway"], "10.10.0.1");
    assert!(o.json.get("interfaces").is_none() && o.json["ips"][0].get("interface").is_none());
}

#[test]
fn config_errors_match_reference_messages() {
    let cases = [
        json!({"ranges": [[{"subnet": "10.1.0.5/24"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/31"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/25"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.128/25"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.2.0.1"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24", "rangeEnd": "10.1.1.1"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]}),
        json!({"ranges": []}),
    ];
    for ipam in cases {
        let d = TempDir::new("res-err");
        let a = run(
            ours(),
            "ADD",
            "c1",
            &conf("1.0.0", "net", d.path(), ipam.clone()),
        );
        assert!(!a.ok());
        assert_eq!(a.json["code"], 999, "{}", a.stdout);
        if let Some(reference) = reference() {
            let b = run(
                reference,
                "ADD",
                "c1",
                &conf("1.0.0", "net", d.path(), ipam),
            );
            assert_eq!(a.json["msg"], b.json["msg"]);
        }
    }
}

#[test]
fn requested_ip_from_cni_args() {
    let d = TempDir::new("res-args");
    let c = conf(
        "1.0.0",
        "net",
        d.path(),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}]]}),
    );
    let mut call = Call::new(ours(), "ADD", "c1");
    call.args = "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.1.0.77";
    let o = call.run(&c);
    assert_eq!(o.addresses(), ["10.1.0.77/24"], "{}", o.stdout);
    let mut call = Call::new(ours(), "ADD", "c2");
    call.args = "FOO=bar";
    assert!(!call.run(&c).ok());
}
