//! Our bridge + our host-local: pods on one bridge (dual stack) reach each other and the
//! gateway; CHECK passes (also for L2-only configs); DEL leaves nothing behind, also when the
//! netns is gone first or CNI_NETNS is empty.

mod bridge_support;

use bridge_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::json;

fn dual_stack() -> serde_json::Value {
    json!([[{"subnet": "10.77.0.0/24"}], [{"subnet": "fd77::/64"}]])
}

#[test]
fn three_pods_dual_stack_ping_and_clean_del() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brp-host");
    let ipam = TempDir::new("brp-ipam");
    let conf = conf(
        "1.1.0",
        "podnet",
        Some(&ipam),
        dual_stack(),
        json!({"isDefaultGateway": true, "ipMasq": true}),
    );
    let pods: Vec<Netns> = (0..3).map(|_| Netns::new("brp-pod")).collect();
    let atts: Vec<Attachment> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| Attachment::new(&imp, &host, &format!("pod{i}"), p))
        .collect();
    let results: Vec<_> = atts.iter().map(|a| a.add(&conf)).collect();

    for r in &results {
        let ifs = r["interfaces"].as_array().unwrap();
        assert_eq!(ifs.len(), 3);
        assert_eq!(ifs[0]["name"], "cni0");
        assert!(ifs[1]["name"].as_str().unwrap().starts_with("veth"));
        assert_eq!(ifs[2]["name"], "eth0");
        assert!(ifs[2]["sandbox"]
            .as_str()
            .unwrap()
            .starts_with("/run/netns/"));
        assert_eq!(r["ips"].as_array().unwrap().len(), 2);
        assert!(r["ips"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["interface"] == 2));
        assert_eq!(r["routes"].as_array().unwrap().len(), 2, "{r}");
    }
    // The bridge holds both gateways; every pod reaches the gateways and every other pod.
    let br_addrs = host.addresses("cni0");
    assert!(
        br_addrs.contains(&"10.77.0.1/24".to_string())
            && br_addrs.contains(&"fd77::1/64".to_string()),
        "{br_addrs:?}"
    );
    for (i, p) in pods.iter().enumerate() {
        ping_ok(p, "10.77.0.1");
        ping_ok(p, "fd77::1");
        for (j, q) in pods.iter().enumerate() {
            if i != j {
                ping_ok(p, &ip_of(q, "eth0", false));
                ping_ok(p, &ip_of(q, "eth0", true));
            }
        }
    }
    for (a, r) in atts.iter().zip(&results) {
        let out = a.check(&conf, r);
        assert!(out.status.success(), "CHECK failed: {}", text(&out.stdout));
    }
    assert_eq!(leases(&ipam, "podnet").len(), 6);
    assert_eq!(
        masquerade_entries(&host).len(),
        2 * 3,
        "{:?}",
        masquerade_entries(&host)
    );

    // pod0: normal DEL. pod1: netns deleted first, DEL with its path. pod2: CNI_NETNS empty.
    atts[0].del(&conf, Some(&results[0]));
    pods[1].exec_ok(&["true"]);
    let gone = Netns::new("brp-gone");
    let mut a1 = Attachment::new(&imp, &host, "pod1", &gone);
    a1.netns = pods[1].path_str().to_string();
    drop(gone);
    host.exec_ok(&["ip", "netns", "del", pods[1].name()]);
    a1.del(&conf, Some(&results[1]));
    let mut a2 = Attachment::new(&imp, &host, "pod2", &pods[2]);
    a2.netns = String::new();
    a2.del(&conf, Some(&results[2]));
    // The pod2 veth survives (its netns still exists, nobody deleted eth0): remove the netns.
    host.exec_ok(&["ip", "netns", "del", pods[2].name()]);

    assert!(
        leases(&ipam, "podnet").is_empty(),
        "{:?}",
        leases(&ipam, "podnet")
    );
    assert!(
        cni_nat_rules(&host).is_empty() && masquerade_entries(&host).is_empty(),
        "{:?}",
        masquerade_entries(&host)
    );
    assert!(eventually(|| veths(&host).is_empty()), "{:?}", veths(&host));
    // DEL again: idempotent.
    atts[0].del(&conf, None);
    a2.del(&conf, None);
}

#[test]
fn l2_only_add_check_del() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brl2-host");
    let pod = Netns::new("brl2-pod");
    let conf = conf(
        "1.0.0",
        "l2net",
        None,
        json!(null),
        json!({"bridge": "l2br"}),
    );
    let a = Attachment::new(&imp, &host, "l2pod", &pod);
    let r = a.add(&conf);
    assert!(
        r.get("ips")
            .is_none_or(|i| i.as_array().is_none_or(|a| a.is_empty())),
        "{r}"
    );
    assert!(pod.link_is_up("eth0"));
    let out = a.check(&conf, &r);
    assert!(
        out.status.success(),
        "L2 CHECK failed: {}",
        text(&out.stdout)
    );
    a.del(&conf, Some(&r));
    assert!(pod.link("eth0").is_none());
    assert!(veths(&host).is_empty());
    a.del(&conf, Some(&r));
}

#[test]
fn check_detects_missing_address() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brck-host");
    let pod = Netns::new("brck-pod");
    let ipam = TempDir::new("brck-ipam");
    let conf = conf(
        "1.0.0",
        "cknet",
        Some(&ipam),
        json!([[{"subnet": "10.78.0.0/24"}]]),
        json!({"isGateway": true}),
    );
    let a = Attachment::new(&imp, &host, "ckpod", &pod);
    let r = a.add(&conf);
    assert!(a.check(&conf, &r).status.success());
    pod.exec_ok(&["ip", "addr", "flush", "dev", "eth0"]);
    let out = a.check(&conf, &r);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("10.78.0."),
        "{}",
        text(&out.stdout)
    );
    a.del(&conf, Some(&r));
    assert!(leases(&ipam, "cknet").is_empty());
}

#[test]
fn results_in_every_version() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brv-host");
    let ipam = TempDir::new("brv-ipam");
    for version in ["0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let pod = Netns::new("brv-pod");
        let conf = conf(
            version,
            "vnet",
            Some(&ipam),
            json!([[{"subnet": "10.79.0.0/24"}]]),
            json!({"isGateway": true}),
        );
        let a = Attachment::new(&imp, &host, "vpod", &pod);
        let r = a.add(&conf);
        assert_eq!(r["cniVersion"], version);
        if version == "0.2.0" {
            assert!(
                r["ip4"]["ip"].as_str().unwrap().starts_with("10.79.0."),
                "{r}"
            );
        } else {
            assert_eq!(r["interfaces"].as_array().unwrap().len(), 3);
            assert_eq!(r["ips"][0]["interface"], 2);
            assert_eq!(
                r["ips"][0].get("version").is_some(),
                version.starts_with("0."),
                "{r}"
            );
        }
        a.del(&conf, None);
    }
    assert!(leases(&ipam, "vnet").is_empty());
}

#[test]
fn status_delegates_and_l2_v020_add_rolls_back() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brst-host");
    let pod = Netns::new("brst-pod");
    let ipam = TempDir::new("brst-ipam");
    let c = conf(
        "1.1.0",
        "stnet",
        Some(&ipam),
        json!([[{"subnet": "10.91.0.0/30"}]]),
        json!({}),
    );
    let a = Attachment::new(&imp, &host, "stpod", &pod);
    let out = a.call("STATUS", &c);
    assert!(out.status.success(), "STATUS: {}", text(&out.stdout));
    // An L2-only result cannot be expressed in 0.2.0: the ADD fails and leaves nothing.
    let l2 = conf("0.2.0", "stnet", None, json!(null), json!({}));
    let e = a.error("ADD", &l2);
    assert!(e["msg"].as_str().unwrap().contains("no valid IP"), "{e}");
    assert!(veths(&host).is_empty());
    assert!(pod.link("eth0").is_none());
}

#[test]
fn enabledad_waits_until_ipv6_is_usable() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brdad-host");
    let pod = Netns::new("brdad-pod");
    let ipam = TempDir::new("brdad-ipam");
    let c = conf(
        "1.0.0",
        "dadnet",
        Some(&ipam),
        json!([[{"subnet": "fd92::/64"}]]),
        json!({"isGateway": true, "enabledad": true}),
    );
    let a = Attachment::new(&imp, &host, "dadpod", &pod);
    let r = a.add(&c);
    let addrs = pod.exec_ok(&["ip", "-6", "addr", "show", "dev", "eth0"]);
    assert!(!addrs.contains("tentative"), "{addrs}");
    assert_eq!(
        pod.exec_ok(&["sysctl", "-n", "net.ipv6.conf.eth0.accept_dad"])
            .trim(),
        "1"
    );
    ping_ok(&pod, "fd92::1");
    a.del(&c, Some(&r));
}

#[test]
fn concurrent_adds_and_dels_on_one_bridge() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brcc-host");
    let ipam = TempDir::new("brcc-ipam");
    let conf = conf(
        "1.0.0",
        "ccnet",
        Some(&ipam),
        dual_stack(),
        json!({"isGateway": true, "ipMasq": true}),
    );
    let pods: Vec<Netns> = (0..8).map(|_| Netns::new("brcc-pod")).collect();
    let atts: Vec<Attachment> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| Attachment::new(&imp, &host, &format!("cc{i}"), p))
        .collect();
    let results: Vec<serde_json::Value> = std::thread::scope(|s| {
        atts.iter()
            .map(|a| s.spawn(|| a.add(&conf)))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    let mut ips: Vec<String> = results
        .iter()
        .map(|r| r["ips"][0]["address"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 8, "{ips:?}");
    for p in &pods {
        ping_ok(p, "10.77.0.1");
    }
    assert_eq!(masquerade_entries(&host).len(), 8 * 2);
    std::thread::scope(|s| {
        for h in atts
            .iter()
            .map(|a| s.spawn(|| a.del(&conf, None)))
            .collect::<Vec<_>>()
        {
            h.join().unwrap();
        }
    });
    assert!(
        cni_nat_rules(&host).is_empty() && masquerade_entries(&host).is_empty(),
        "{:?}",
        masquerade_entries(&host)
    );
    assert!(leases(&ipam, "ccnet").is_empty());
    assert!(veths(&host).is_empty());
}

#[test]
fn disable_container_interface_and_runtime_mac() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brdc-host");
    let pod = Netns::new("brdc-pod");
    let c = conf(
        "1.0.0",
        "dcnet",
        None,
        json!(null),
        json!({"disableContainerInterface": true, "runtimeConfig": {"mac": "02:11:22:33:44:55"}}),
    );
    let a = Attachment::new(&imp, &host, "dcpod", &pod);
    let r = a.add(&c);
    assert_eq!(r["interfaces"][2]["mac"], "02:11:22:33:44:55");
    let link = pod.link("eth0").unwrap();
    assert_eq!(link["address"], "02:11:22:33:44:55");
    assert!(
        !pod.link_is_up("eth0"),
        "disableContainerInterface leaves the container end down"
    );
    a.del(&c, Some(&r));
    assert!(veths(&host).is_empty());
}

#[test]
fn the_bridge_and_its_ports_never_accept_router_advertisements() {
    // A bridge made earlier with accept_ra on (as a new link inherits it) is set to 0 by the
    // next ADD, which learns the value from its lookup of the bridge; the port too.
    require_root!();
    let imp = ours();
    let host = Netns::new("brra-host");
    let pod = Netns::new("brra-pod");
    let ipam = TempDir::new("brra-ipam");
    host.exec_ok(&["ip", "link", "add", "cni0", "type", "bridge"]);
    host.exec_ok(&["sysctl", "-qw", "net.ipv6.conf.cni0.accept_ra=2"]);
    let c = conf(
        "1.0.0",
        "ranet",
        Some(&ipam),
        json!([[{"subnet": "10.94.0.0/24"}]]),
        json!({"isGateway": true}),
    );
    let a = Attachment::new(&imp, &host, "rapod", &pod);
    let r = a.add(&c);
    let accept_ra = |dev: &str| {
        host.exec_ok(&["sysctl", "-n", &format!("net.ipv6.conf.{dev}.accept_ra")])
            .trim()
            .to_string()
    };
    assert_eq!(accept_ra("cni0"), "0");
    let ports = veths(&host);
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(accept_ra(&ports[0]), "0");
    ping_ok(&pod, "10.94.0.1");
    a.del(&c, Some(&r));
    assert!(veths(&host).is_empty());
}
