//! Every conversion against fixed JSON fixtures.

use super::*;
use serde_json::json;

fn full_100() -> Value {
    json!({
        "cniVersion": "1.0.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "veth1234", "mac": "00:11:22:33:44:66", "mtu": 1450},
            {"name": "eth0", "mac": "00:11:22:33:44:77", "sandbox": "/run/netns/p1", "socketPath": "/s", "pciID": "0000:00:01.0"}
        ],
        "ips": [
            {"interface": 2, "address": "10.1.0.5/24", "gateway": "10.1.0.1"},
            {"interface": 2, "address": "fd00::5/64", "gateway": "fd00::1"},
            {"interface": 2, "address": "10.2.0.5/24"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "priority": 10, "table": 100, "scope": 0},
            {"dst": "::/0"},
            {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}
        ],
        "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a.example.org"], "options": ["ndots:2"]}
    })
}

#[test]
fn v100_round_trip_is_exact() {
    let r = CniResult::from_value(&full_100()).unwrap();
    assert_eq!(r.to_value("1.0.0").unwrap(), full_100());
    let mut v11 = full_100();
    v11["cniVersion"] = "1.1.0".into();
    assert_eq!(r.to_value("1.1.0").unwrap(), v11);
    assert_eq!(convert(&v11, "1.0.0").unwrap(), full_100());
}

#[test]
fn v100_to_040_and_03x() {
    let expected = json!({
        "cniVersion": "0.4.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "veth1234", "mac": "00:11:22:33:44:66"},
            {"name": "eth0", "mac": "00:11:22:33:44:77", "sandbox": "/run/netns/p1"}
        ],
        "ips": [
            {"version": "4", "interface": 2, "address": "10.1.0.5/24", "gateway": "10.1.0.1"},
            {"version": "6", "interface": 2, "address": "fd00::5/64", "gateway": "fd00::1"},
            {"version": "4", "interface": 2, "address": "10.2.0.5/24"}
        ],
        // 0.3.x/0.4.0 share Go's `types.Route`: the latest release prints its mtu, advmss,
        // priority, table and scope there too (1.1.1's Route had only dst and gw).
        "routes": [
            {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "priority": 10, "table": 100, "scope": 0},
            {"dst": "::/0"},
            {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}
        ],
        "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a.example.org"], "options": ["ndots:2"]}
    });
    assert_eq!(convert(&full_100(), "0.4.0").unwrap(), expected);
    for v in ["0.3.0", "0.3.1"] {
        let mut e = expected.clone();
        e["cniVersion"] = v.into();
        assert_eq!(convert(&full_100(), v).unwrap(), e);
    }
}

#[test]
fn v100_to_020_keeps_first_of_each_family() {
    let expected = json!({
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1",
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}]},
        "ip6": {"ip": "fd00::5/64", "gateway": "fd00::1", "routes": [{"dst": "::/0"}]},
        "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a.example.org"], "options": ["ndots:2"]}
    });
    assert_eq!(convert(&full_100(), "0.2.0").unwrap(), expected);
    let mut e1 = expected.clone();
    e1["cniVersion"] = "0.1.0".into();
    assert_eq!(convert(&full_100(), "0.1.0").unwrap(), e1);
    assert_eq!(convert(&full_100(), "").unwrap(), e1);
}

#[test]
fn v040_up_to_100_drops_version() {
    let v040 = json!({
        "cniVersion": "0.4.0",
        "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/run/netns/x"}],
        "ips": [{"version": "4", "interface": 0, "address": "10.0.0.2/8"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
        "dns": {}
    });
    let expected = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "mac": "aa:bb:cc:dd:ee:ff", "sandbox": "/run/netns/x"}],
        "ips": [{"interface": 0, "address": "10.0.0.2/8"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}]
    });
    assert_eq!(convert(&v040, "1.0.0").unwrap(), expected);
    // 0.4.0 -> 0.3.1 copy
    let mut e031 = v040.clone();
    e031["cniVersion"] = "0.3.1".into();
    e031.as_object_mut().unwrap().remove("dns");
    assert_eq!(convert(&v040, "0.3.1").unwrap(), e031);
}

#[test]
fn v020_up_to_040_and_100() {
    let v020 = json!({
        "cniVersion": "0.2.0",
        "ip4": {"ip": "10.1.2.3/24", "gateway": "10.1.2.1", "routes": [{"dst": "0.0.0.0/0"}]},
        "ip6": {"ip": "2001:db8::3/64", "routes": [{"dst": "::/0", "gw": "2001:db8::1"}]},
        "dns": {"nameservers": ["8.8.8.8"]}
    });
    assert_eq!(
        convert(&v020, "0.4.0").unwrap(),
        json!({
            "cniVersion": "0.4.0",
            "ips": [
                {"version": "4", "address": "10.1.2.3/24", "gateway": "10.1.2.1"},
                {"version": "6", "address": "2001:db8::3/64"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8::1"}],
            "dns": {"nameservers": ["8.8.8.8"]}
        })
    );
    assert_eq!(
        convert(&v020, "1.1.0").unwrap(),
        json!({
            "cniVersion": "1.1.0",
            "ips": [
                {"address": "10.1.2.3/24", "gateway": "10.1.2.1"},
                {"address": "2001:db8::3/64"}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8::1"}],
            "dns": {"nameservers": ["8.8.8.8"]}
        })
    );
    // 0.2.0 <-> 0.1.0 identity apart from the label
    let mut v010 = v020.clone();
    v010["cniVersion"] = "0.1.0".into();
    assert_eq!(convert(&v020, "0.1.0").unwrap(), v010);
}

#[test]
fn missing_version_reads_as_010_when_ip4() {
    let v = json!({"ip4": {"ip": "10.0.0.9/16"}});
    let r = CniResult::from_value(&v).unwrap();
    assert_eq!(r.cni_version, "0.1.0");
    assert_eq!(r.ips.len(), 1);
}

#[test]
fn l2_only_to_020_fails() {
    let v = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0"}]});
    let e = convert(&v, "0.2.0").unwrap_err();
    assert!(e.msg.contains("no valid IP addresses"), "{e}");
}

#[test]
fn unknown_versions_are_code_1() {
    let v = json!({"cniVersion": "9.9.9"});
    assert_eq!(CniResult::from_value(&v).unwrap_err().code, 1);
    assert_eq!(
        CniResult::from_value(&full_100())
            .unwrap()
            .to_value("2.0.0")
            .unwrap_err()
            .code,
        1
    );
}

#[test]
fn garbage_is_decode_error() {
    assert_eq!(CniResult::from_value(&json!([1, 2])).unwrap_err().code, 6);
    assert_eq!(
        CniResult::from_value(&json!({"cniVersion": "1.0.0", "ips": [{"address": "nope"}]}))
            .unwrap_err()
            .code,
        6
    );
    assert_eq!(CniResult::from_slice(b"{").unwrap_err().code, 6);
}

#[test]
fn nulls_are_tolerated() {
    let v = json!({"cniVersion": "1.0.0", "interfaces": null, "ips": null, "routes": null, "dns": null});
    let r = CniResult::from_value(&v).unwrap();
    assert!(r.ips.is_empty());
    assert_eq!(r.to_value("1.0.0").unwrap(), json!({"cniVersion": "1.0.0"}));
}

/// What the latest reference prints for each cniVersion, field by field: 0.1.0/0.2.0 always
/// carry `"dns": {}` (a plain Go struct, which `omitempty` never drops) and routes with only
/// dst and gw; 0.3.x/0.4.0 and 1.x drop an empty DNS; 0.x interfaces have no mtu, socketPath
/// or pciID; 0.3.x/0.4.0 IPs carry `version`; 1.x is printed through a map, so its keys are
/// sorted at every level; empty lists, a missing gateway and zero route fields are left out.
#[test]
fn every_version_prints_go_fields_in_go_order() {
    let r = CniResult {
        cni_version: "1.1.0".into(),
        interfaces: vec![Interface {
            name: "eth0".into(),
            mac: "02:00:00:00:00:01".into(),
            mtu: Some(1500),
            sandbox: "/run/netns/p".into(),
            ..Default::default()
        }],
        ips: vec![IpConfig {
            interface: Some(0),
            address: "10.9.0.2/24".parse().unwrap(),
            gateway: Some("10.9.0.1".parse().unwrap()),
        }],
        routes: vec![Route {
            mtu: Some(1400),
            ..Route::new("0.0.0.0/0".parse().unwrap(), None)
        }],
        dns: Dns::default(),
    };
    let text = |v: &str| serde_json::to_string(&r.to_value(v).unwrap()).unwrap();
    for v in ["0.1.0", "0.2.0"] {
        assert_eq!(
            text(v),
            format!(
                r#"{{"cniVersion":"{v}","ip4":{{"ip":"10.9.0.2/24","gateway":"10.9.0.1","routes":[{{"dst":"0.0.0.0/0"}}]}},"dns":{{}}}}"#
            )
        );
    }
    for v in ["0.3.0", "0.3.1", "0.4.0"] {
        assert_eq!(
            text(v),
            format!(
                r#"{{"cniVersion":"{v}","interfaces":[{{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/p"}}],"ips":[{{"version":"4","interface":0,"address":"10.9.0.2/24","gateway":"10.9.0.1"}}],"routes":[{{"dst":"0.0.0.0/0","mtu":1400}}]}}"#
            )
        );
    }
    for v in ["1.0.0", "1.1.0"] {
        assert_eq!(
            text(v),
            format!(
                r#"{{"cniVersion":"{v}","interfaces":[{{"mac":"02:00:00:00:00:01","mtu":1500,"name":"eth0","sandbox":"/run/netns/p"}}],"ips":[{{"address":"10.9.0.2/24","gateway":"10.9.0.1","interface":0}}],"routes":[{{"dst":"0.0.0.0/0","mtu":1400}}]}}"#
            )
        );
    }
    // A DNS with content: printed in every version (sorted in 1.x).
    let mut with_dns = r.clone();
    with_dns.dns.nameservers = vec!["10.9.0.53".into()];
    with_dns.dns.domain = "example.test".into();
    assert!(serde_json::to_string(&with_dns.to_value("1.0.0").unwrap())
        .unwrap()
        .contains(r#""dns":{"domain":"example.test","nameservers":["10.9.0.53"]}"#));
    assert!(serde_json::to_string(&with_dns.to_value("0.4.0").unwrap())
        .unwrap()
        .ends_with(r#""dns":{"nameservers":["10.9.0.53"],"domain":"example.test"}}"#));
    // An IPAM-only result: no interfaces, no `interface` index.
    let ipam_only = CniResult {
        interfaces: vec![],
        ips: vec![IpConfig {
            interface: None,
            ..r.ips[0].clone()
        }],
        routes: vec![],
        ..r.clone()
    };
    assert_eq!(
        serde_json::to_string(&ipam_only.to_value("1.0.0").unwrap()).unwrap(),
        r#"{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.2/24","gateway":"10.9.0.1"}]}"#
    );
}

#[test]
fn empty_gateway_string_is_none() {
    let v = json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/8", "gateway": ""}]});
    let r = CniResult::from_value(&v).unwrap();
    assert_eq!(r.ips[0].gateway, None);
}
