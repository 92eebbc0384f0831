//! Masquerade (both backends), GC of masquerade rules, and MAC spoof checking.

mod bridge_support;

use bridge_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::json;

/// Connects `host` to a new "outside" namespace over a veth (192.168.231.1 <-> .2, both /30).
/// The outside has no route to the pod subnet: replies only come back when the pod is
/// masqueraded behind the host address.
fn outside_world(host: &Netns) -> Netns {
    let out = Netns::new("brn-out");
    host.exec_ok(&[
        "ip",
        "link",
        "add",
        "uplink",
        "type",
        "veth",
        "peer",
        "name",
        "wan",
        "netns",
        out.name(),
    ]);
    host.exec_ok(&["ip", "addr", "add", "192.168.231.1/30", "dev", "uplink"]);
    host.exec_ok(&["ip", "link", "set", "uplink", "up"]);
    out.exec_ok(&["ip", "addr", "add", "192.168.231.2/30", "dev", "wan"]);
    out.exec_ok(&["ip", "link", "set", "wan", "up"]);
    out
}

fn masquerade_reaches_outside(backend: &str) {
    let imp = ours();
    let host = Netns::new("brn-host");
    let _outside = outside_world(&host);
    let pod = Netns::new("brn-pod");
    let ipam = TempDir::new("brn-ipam");
    let mut extra = json!({"isDefaultGateway": true, "ipMasq": true});
    if !backend.is_empty() {
        extra["ipMasqBackend"] = json!(backend);
    }
    let conf = conf(
        "1.0.0",
        "masqnet",
        Some(&ipam),
        json!([[{"subnet": "10.81.0.0/24"}]]),
        extra,
    );
    let a = Attachment::new(&imp, &host, "masqpod", &pod);
    let r = a.add(&conf);
    ping_ok(&pod, "192.168.231.2");
    assert!(a.check(&conf, &r).status.success());
    // Unset, the backend is nftables (the host netns has no iptables masquerade state).
    if backend != "iptables" {
        let rs = nft_ruleset(&host);
        assert!(rs.contains("table inet cni_plugins_masquerade"), "{rs}");
        assert!(
            rs.contains("ip saddr 10.81.0.2 ip daddr != 10.81.0.0/24 masquerade"),
            "{rs}"
        );
        assert!(cni_nat_rules(&host).is_empty());
    } else {
        assert_eq!(cni_nat_rules(&host).len(), 4, "{:?}", cni_nat_rules(&host));
    }
    // A pod of the same network without masquerade gets no answer from the outside.
    let plain_pod = Netns::new("brn-plain");
    let mut plain_conf = conf.clone();
    plain_conf["ipMasq"] = json!(false);
    let plain = Attachment::new(&imp, &host, "plainpod", &plain_pod);
    plain.add(&plain_conf);
    ping_ok(&plain_pod, "10.81.0.1");
    assert!(
        !ping(&plain_pod, "192.168.231.2"),
        "reply without masquerade: the outside must have no route back"
    );
    plain.del(&plain_conf, None);
    // DEL with an empty CNI_NETNS still removes the rules (the reference leaks them).
    let mut gone = Attachment::new(&imp, &host, "masqpod", &pod);
    gone.netns = String::new();
    gone.del(&conf, None);
    assert!(
        cni_nat_rules(&host).is_empty(),
        "{:?}",
        cni_nat_rules(&host)
    );
    assert!(
        !nft_ruleset(&host).contains("masquerade comment"),
        "{}",
        nft_ruleset(&host)
    );
    assert!(leases(&ipam, "masqnet").is_empty());
}

#[test]
fn masquerade_iptables() {
    require_root!();
    masquerade_reaches_outside("iptables");
}

#[test]
fn masquerade_nftables() {
    require_root!();
    masquerade_reaches_outside("nftables");
}

#[test]
fn masquerade_default_backend_is_nftables() {
    require_root!();
    masquerade_reaches_outside("");
}

#[test]
fn gc_removes_rules_of_unlisted_attachments() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brgc-host");
    let ipam = TempDir::new("brgc-ipam");
    for backend in ["iptables", "nftables"] {
        let conf = conf(
            "1.1.0",
            "gcnet",
            Some(&ipam),
            json!([[{"subnet": "10.82.0.0/24"}]]),
            json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": backend}),
        );
        let pods: Vec<Netns> = (0..2).map(|_| Netns::new("brgc-pod")).collect();
        let atts: Vec<Attachment> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| Attachment::new(&imp, &host, &format!("gc{i}"), p))
            .collect();
        for a in &atts {
            a.add(&conf);
        }
        let mut gc_conf = conf.clone();
        gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": "gc0", "ifname": "eth0"}]);
        let out = atts[0].call("GC", &gc_conf);
        assert!(out.status.success(), "GC failed: {}", text(&out.stdout));
        // gc1 lost its lease and its rules; gc0 kept both.
        assert_eq!(leases(&ipam, "gcnet").len(), 1, "{backend}");
        if backend == "iptables" {
            let rules = cni_nat_rules(&host);
            assert_eq!(rules.len(), 4, "{rules:?}");
            assert!(
                rules
                    .iter()
                    .all(|r| r.contains("id: \\\"gc0\\\"") || r.starts_with("iptables -N")),
                "{rules:?}"
            );
        } else {
            let rs = nft_ruleset(&host);
            assert!(rs.contains("id: gc0") && !rs.contains("id: gc1"), "{rs}");
        }
        for a in &atts {
            a.del(&conf, None);
        }
        assert!(cni_nat_rules(&host).is_empty());
        assert!(!nft_ruleset(&host).contains("masquerade comment"));
    }
}

#[test]
fn macspoofchk_drops_spoofed_source_mac() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brms-host");
    let pod = Netns::new("brms-pod");
    let ipam = TempDir::new("brms-ipam");
    let conf = conf(
        "1.0.0",
        "msnet",
        Some(&ipam),
        json!([[{"subnet": "10.83.0.0/24"}]]),
        json!({"isGateway": true, "macspoofchk": true}),
    );
    let mut a = Attachment::new(&imp, &host, "mspod", &pod);
    a.cni_args = "IgnoreUnknown=1;MAC=02:42:0a:53:00:02".into();
    let r = a.add(&conf);
    assert_eq!(r["interfaces"][2]["mac"], "02:42:0a:53:00:02");
    let rs = nft_ruleset(&host);
    assert!(rs.contains("table bridge nat"), "{rs}");
    assert!(rs.contains("chain cni-br-iface-mspod-eth0-mac"), "{rs}");
    assert!(rs.contains("ether saddr 02:42:0a:53:00:02 return"), "{rs}");
    assert!(rs.contains("comment \"macspoofchk-mspod-eth0\""), "{rs}");
    ping_ok(&pod, "10.83.0.1");
    assert!(a.check(&conf, &r).status.success());

    // A spoofed source MAC is dropped on the bridge.
    pod.exec_ok(&["ip", "neigh", "flush", "all"]);
    pod.exec_ok(&["ip", "link", "set", "eth0", "address", "02:42:0a:53:00:99"]);
    assert!(!ping(&pod, "10.83.0.1"), "spoofed MAC got through");
    pod.exec_ok(&["ip", "link", "set", "eth0", "address", "02:42:0a:53:00:02"]);
    ping_ok(&pod, "10.83.0.1");

    a.del(&conf, Some(&r));
    let rs = nft_ruleset(&host);
    assert!(!rs.contains("cni-br-iface-mspod-eth0"), "{rs}");
    a.del(&conf, Some(&r));
}

#[test]
fn gc_removes_spoof_checks_whose_pod_vanished() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brmsgc-host");
    let ipam = TempDir::new("brmsgc-ipam");
    let conf = conf(
        "1.1.0",
        "msgcnet",
        Some(&ipam),
        json!([[{"subnet": "10.84.0.0/24"}]]),
        json!({"isGateway": true, "macspoofchk": true}),
    );
    let mut pods: Vec<Option<Netns>> = (0..3).map(|_| Some(Netns::new("brmsgc-pod"))).collect();
    let cids = ["keep", "vanished", "unlisted"];
    for (cid, pod) in cids.iter().zip(&pods) {
        Attachment::new(&imp, &host, cid, pod.as_ref().unwrap()).add(&conf);
    }
    // A chain pair without its jump rule, as a half-finished cleanup leaves it.
    for chain in ["cni-br-iface-orphan-eth0", "cni-br-iface-orphan-eth0-mac"] {
        host.exec_ok(&["nft", "add", "chain", "bridge", "nat", chain]);
    }
    // The runtime lost a pod: its netns, and with it the bridge port, are gone (the kernel
    // tears a deleted netns down asynchronously: wait for the port to go).
    pods[1] = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while veths(&host).len() > 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let mut gc_conf = conf.clone();
    gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": "keep", "ifname": "eth0"}]);
    let keeper = Attachment::new(&imp, &host, "keep", pods[0].as_ref().unwrap());
    for _ in 0..2 {
        let out = keeper.call("GC", &gc_conf);
        assert!(out.status.success(), "GC failed: {}", text(&out.stdout));
        let rs = nft_ruleset(&host);
        assert!(rs.contains("cni-br-iface-keep-eth0"), "{rs}");
        assert!(!rs.contains("cni-br-iface-vanished-eth0"), "{rs}");
        assert!(!rs.contains("cni-br-iface-orphan-eth0"), "{rs}");
        // Its port still exists: it may belong to another network sharing the bridge, so GC
        // leaves its spoof check to DEL (its lease is collected by host-local's GC).
        assert!(rs.contains("cni-br-iface-unlisted-eth0"), "{rs}");
    }
    for (cid, pod) in cids.iter().zip(&pods) {
        if let Some(pod) = pod {
            Attachment::new(&imp, &host, cid, pod).del(&conf, None);
        }
    }
    assert!(!nft_ruleset(&host).contains("cni-br-iface-"));
}
