//! Bridge port settings: VLAN access/trunk state as `bridge vlan` shows it, hairpin and port
//! isolation flags and behaviour.

mod bridge_support;

use bridge_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::{json, Value};

/// (vid, is_pvid, is_untagged)
type VlanEntry = (u64, bool, bool);

/// `bridge -j vlan show dev <port>` → entries sorted by vid.
fn port_vlans(host: &Netns, port: &str) -> Vec<VlanEntry> {
    let v = host.exec_json(&["bridge", "-j", "vlan", "show", "dev", port]);
    let mut out = Vec::new();
    for entry in v.as_array().into_iter().flatten() {
        for vl in entry["vlans"].as_array().into_iter().flatten() {
            let flags: Vec<&str> = vl["flags"]
                .as_array()
                .map(|f| f.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let first = vl["vlan"].as_u64().unwrap();
            let last = vl["vlanEnd"].as_u64().unwrap_or(first);
            for vid in first..=last {
                out.push((
                    vid,
                    flags.contains(&"PVID"),
                    flags.contains(&"Egress Untagged"),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Skips (fails under FERROCNI_REQUIRE_DRIVERS=1) without CONFIG_BRIDGE_VLAN_FILTERING.
macro_rules! require_vlan_filtering {
    () => {
        netns_tests::require_driver!(
            netns_tests::kernel_has("bridge_vlan_filtering"),
            "bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)"
        )
    };
}

fn vlan_filtering(host: &Netns, br: &str) -> bool {
    let v = host.exec_json(&["ip", "-j", "-d", "link", "show", br]);
    v[0]["linkinfo"]["info_data"]["vlan_filtering"].as_u64() == Some(1)
}

#[test]
fn vlan_access_and_trunk_state() {
    require_root!();
    require_vlan_filtering!();
    let imp = ours();
    let host = Netns::new("brvl-host");
    // The bridge's default VLAN (1) stays on the port unless `preserveDefaultVlan` is false;
    // a trunk without `vlan` has VLAN 1 as its native (untagged PVID) VLAN.
    let cases: Vec<(Value, Vec<VlanEntry>)> = vec![
        (
            json!({"vlan": 100}),
            vec![(1, false, true), (100, true, true)],
        ),
        (
            json!({"vlan": 100, "preserveDefaultVlan": false}),
            vec![(100, true, true)],
        ),
        (
            json!({"vlanTrunk": [{"minID": 10, "maxID": 12}, {"id": 20}]}),
            vec![
                (1, true, true),
                (10, false, false),
                (11, false, false),
                (12, false, false),
                (20, false, false),
            ],
        ),
        (
            json!({"vlan": 30, "vlanTrunk": [{"id": 31}]}),
            vec![(1, false, true), (30, true, true), (31, false, false)],
        ),
        (
            json!({"vlan": 32, "vlanTrunk": [{"id": 33}], "preserveDefaultVlan": false}),
            vec![(32, true, true), (33, false, false)],
        ),
        (
            json!({"vlanTrunk": [{"id": 50}], "preserveDefaultVlan": false}),
            vec![(1, true, true), (50, false, false)],
        ),
        (
            json!({"vlan": 40, "preserveDefaultVlan": true}),
            vec![(1, false, true), (40, true, true)],
        ),
    ];
    for (i, (extra, want)) in cases.into_iter().enumerate() {
        let pod = Netns::new("brvl-pod");
        let c = conf("1.0.0", "vlnet", None, json!(null), extra.clone());
        let a = Attachment::new(&imp, &host, &format!("vl{i}"), &pod);
        let r = a.add(&c);
        let port = r["interfaces"][1]["name"].as_str().unwrap().to_string();
        assert!(vlan_filtering(&host, "cni0"));
        assert_eq!(port_vlans(&host, &port), want, "config {extra}");
        assert!(a.check(&c, &r).status.success());
        a.del(&c, Some(&r));
    }
    assert!(veths(&host).is_empty());
}

#[test]
fn vlan_isolates_pods_and_gateway_per_vlan() {
    require_root!();
    require_vlan_filtering!();
    let imp = ours();
    let host = Netns::new("brvg-host");
    let ipam = TempDir::new("brvg-ipam");
    let pods: Vec<Netns> = (0..3).map(|_| Netns::new("brvg-pod")).collect();
    // pod0, pod1 in VLAN 10; pod2 in VLAN 20 (same subnet, so only L2 separates them).
    let mut results = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let vlan = if i < 2 { 10 } else { 20 };
        let c = conf(
            "1.0.0",
            "vgnet",
            Some(&ipam),
            json!([[{"subnet": "10.84.0.0/24"}]]),
            json!({"vlan": vlan, "isGateway": true}),
        );
        let a = Attachment::new(&imp, &host, &format!("vg{i}"), p);
        results.push((a.add(&c), c));
    }
    // The VLAN gateway interface is reported and holds the gateway.
    let r0 = &results[0].0;
    assert_eq!(r0["interfaces"].as_array().unwrap().len(), 4, "{r0}");
    assert_eq!(r0["interfaces"][3]["name"], "cni0.10");
    assert!(host
        .addresses("cni0.10")
        .contains(&"10.84.0.1/24".to_string()));
    ping_ok(&pods[0], "10.84.0.1");
    ping_ok(&pods[0], &ip_of(&pods[1], "eth0", false));
    assert!(
        !ping(&pods[0], &ip_of(&pods[2], "eth0", false)),
        "VLANs 10 and 20 must not talk at L2"
    );
    for (i, p) in pods.iter().enumerate() {
        let a = Attachment::new(&imp, &host, &format!("vg{i}"), p);
        a.del(&results[i].1, Some(&results[i].0));
    }
    assert!(leases(&ipam, "vgnet").is_empty());
}

/// `bridge -j -d link show dev <port>` flag.
fn port_flag(host: &Netns, port: &str, flag: &str) -> bool {
    let v = host.exec_json(&["bridge", "-j", "-d", "link", "show", "dev", port]);
    v[0][flag].as_bool().unwrap_or(false)
}

#[test]
fn hairpin_and_isolation_flags() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brhp-host");
    for (extra, hairpin, isolated) in [
        (json!({}), false, false),
        (json!({"hairpinMode": true}), true, false),
        (json!({"portIsolation": true}), false, true),
    ] {
        let pod = Netns::new("brhp-pod");
        let c = conf("1.0.0", "hpnet", None, json!(null), extra);
        let a = Attachment::new(&imp, &host, "hp", &pod);
        let r = a.add(&c);
        let port = r["interfaces"][1]["name"].as_str().unwrap().to_string();
        assert_eq!(port_flag(&host, &port, "hairpin"), hairpin);
        assert_eq!(port_flag(&host, &port, "isolated"), isolated);
        a.del(&c, Some(&r));
    }
}

#[test]
fn isolated_ports_reach_gateway_but_not_each_other() {
    require_root!();
    let imp = ours();
    let host = Netns::new("bris-host");
    let ipam = TempDir::new("bris-ipam");
    let c = conf(
        "1.0.0",
        "isnet",
        Some(&ipam),
        json!([[{"subnet": "10.85.0.0/24"}]]),
        json!({"isGateway": true, "portIsolation": true}),
    );
    let pods: Vec<Netns> = (0..2).map(|_| Netns::new("bris-pod")).collect();
    let atts: Vec<Attachment> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| Attachment::new(&imp, &host, &format!("is{i}"), p))
        .collect();
    for a in &atts {
        a.add(&c);
    }
    ping_ok(&pods[0], "10.85.0.1");
    ping_ok(&pods[1], "10.85.0.1");
    assert!(
        !ping(&pods[0], &ip_of(&pods[1], "eth0", false)),
        "isolated ports must not talk"
    );
    for a in &atts {
        a.del(&c, None);
    }
}

/// Whether a pod reaches itself through a host DNAT (the classic service hairpin), which needs
/// the bridge to send the frame back out of the port it came from.
fn hairpin_roundtrip(hairpin: bool) -> bool {
    let imp = ours();
    let host = Netns::new("brhr-host");
    let ipam = TempDir::new("brhr-ipam");
    let pod = Netns::new("brhr-pod");
    let c = conf(
        "1.0.0",
        "hrnet",
        Some(&ipam),
        json!([[{"subnet": "10.86.0.0/24"}]]),
        json!({"isGateway": true, "hairpinMode": hairpin}),
    );
    let a = Attachment::new(&imp, &host, "hr", &pod);
    let r = a.add(&c);
    let own_ip = ip_of(&pod, "eth0", false);
    host.exec_ok(&[
        "iptables",
        "-w",
        "5",
        "-t",
        "nat",
        "-A",
        "PREROUTING",
        "-d",
        "10.86.0.200",
        "-j",
        "DNAT",
        "--to-destination",
        &own_ip,
    ]);
    host.exec_ok(&[
        "iptables",
        "-w",
        "5",
        "-t",
        "nat",
        "-A",
        "POSTROUTING",
        "-s",
        &own_ip,
        "-d",
        &own_ip,
        "-j",
        "MASQUERADE",
    ]);
    // Per-netns since Linux 5.3: only the test's host namespace is affected.
    host.exec_ok(&["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"]);
    pod.exec_ok(&[
        "ip",
        "route",
        "replace",
        "10.86.0.200/32",
        "via",
        "10.86.0.1",
    ]);
    let ok = ping(&pod, "10.86.0.200");
    a.del(&c, Some(&r));
    ok
}

#[test]
fn hairpin_reflects_frames_back_to_the_port() {
    require_root!();
    if !std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
        eprintln!("skipping: br_netfilter not available");
        return;
    }
    assert!(
        hairpin_roundtrip(true),
        "hairpin on: the pod must reach itself through the host DNAT"
    );
    assert!(
        !hairpin_roundtrip(false),
        "hairpin off: the frame must not come back"
    );
}

/// The MAC address of `ifname` in `ns`.
fn mac_of(ns: &Netns, ifname: &str) -> String {
    ns.link(ifname).expect("link exists")["address"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn vlan_access_port_and_gateway_match_the_reference() {
    require_root!();
    require_vlan_filtering!();
    let reference = netns_tests::skip_unless!(reference(), "reference bridge not installed");
    let mut seen = Vec::new();
    for imp in [ours(), reference] {
        let host = Netns::new("brvr-host");
        let ipam = TempDir::new("brvr-ipam");
        let pod = Netns::new("brvr-pod");
        let c = conf(
            "1.0.0",
            "vrnet",
            Some(&ipam),
            json!([[{"subnet": "10.87.0.0/24"}]]),
            json!({"vlan": 100, "isGateway": true}),
        );
        let a = Attachment::new(&imp, &host, "vr", &pod);
        let r = a.add(&c);
        let port = r["interfaces"][1]["name"].as_str().unwrap().to_string();
        let gateway_port = veths(&host)
            .into_iter()
            .find(|v| v != &port && v != "cni0.100")
            .expect("the VLAN gateway's bridge port");
        let state = json!({
            "filtering": vlan_filtering(&host, "cni0"),
            "port": port_vlans(&host, &port),
            "gateway_port": port_vlans(&host, &gateway_port),
            "gateway": host.addresses("cni0.100").into_iter()
                .filter(|a| !a.starts_with("fe80:")).collect::<Vec<_>>(),
            "gateway_up": host.link_is_up("cni0.100"),
            "interfaces": r["interfaces"].as_array().unwrap().iter()
                .map(|i| {
                    // Host veth names are random.
                    let name = i["name"].as_str().unwrap_or_default();
                    if name.starts_with("veth") { "veth" } else { name }.to_string()
                })
                .collect::<Vec<_>>(),
        });
        ping_ok(&pod, "10.87.0.1");
        a.del(&c, Some(&r));
        assert!(leases(&ipam, "vrnet").is_empty());
        seen.push(state);
    }
    assert_eq!(seen[0], seen[1], "ours, reference");
    assert_eq!(
        seen[0]["port"],
        json!([[1, false, true], [100, true, true]])
    );
}

#[test]
fn isolated_ports_of_a_vlan_reach_only_its_gateway() {
    require_root!();
    require_vlan_filtering!();
    let imp = ours();
    let host = Netns::new("brvi-host");
    let ipam = TempDir::new("brvi-ipam");
    let c = conf(
        "1.0.0",
        "vinet",
        Some(&ipam),
        json!([[{"subnet": "10.88.0.0/24"}]]),
        json!({"vlan": 30, "isGateway": true, "portIsolation": true}),
    );
    let pods: Vec<Netns> = (0..2).map(|_| Netns::new("brvi-pod")).collect();
    let atts: Vec<Attachment> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| Attachment::new(&imp, &host, &format!("vi{i}"), p))
        .collect();
    let results: Vec<Value> = atts.iter().map(|a| a.add(&c)).collect();
    for r in &results {
        let port = r["interfaces"][1]["name"].as_str().unwrap();
        assert!(port_flag(&host, port, "isolated"), "{port} not isolated");
        assert_eq!(
            port_vlans(&host, port),
            vec![(1, false, true), (30, true, true)]
        );
    }
    ping_ok(&pods[0], "10.88.0.1");
    ping_ok(&pods[1], "10.88.0.1");
    assert!(
        !ping(&pods[0], &ip_of(&pods[1], "eth0", false)),
        "isolated ports of one VLAN must not talk"
    );
    for (a, r) in atts.iter().zip(&results) {
        a.del(&c, Some(r));
    }
    assert!(leases(&ipam, "vinet").is_empty());
}

/// Pods come and go on a bridge the plugin creates: the bridge keeps one MAC of its own, never
/// one of its ports' (which an unpinned bridge takes), and reports it in every result.
fn bridge_mac_through_churn(imp: &Impl, extra: Value, l3: bool) {
    let host = Netns::new("brmac-host");
    let ipam = TempDir::new("brmac-ipam");
    let c = conf(
        "1.0.0",
        "macnet",
        l3.then_some(&ipam),
        json!([[{"subnet": "10.89.0.0/24"}]]),
        extra.clone(),
    );
    let pods: Vec<Netns> = (0..3).map(|_| Netns::new("brmac-pod")).collect();
    let mut first_mac = None;
    let mut attached = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let a = Attachment::new(imp, &host, &format!("mac{i}"), p);
        let r = a.add(&c);
        let mac = mac_of(&host, "cni0");
        let first = first_mac.get_or_insert_with(|| mac.clone());
        assert_eq!(&mac, first, "bridge MAC changed after ADD {i} ({extra})");
        assert_eq!(r["interfaces"][0]["mac"], mac.as_str(), "result of ADD {i}");
        for port in veths(&host) {
            assert_ne!(
                mac_of(&host, &port),
                mac,
                "bridge has port {port}'s MAC ({extra})"
            );
        }
        attached.push((a, r));
    }
    // Leaving in ADD order removes the lowest-indexed ports first.
    for (a, r) in attached {
        a.del(&c, Some(&r));
        assert_eq!(
            mac_of(&host, "cni0"),
            first_mac.clone().unwrap(),
            "after a DEL ({extra})"
        );
    }
}

#[test]
fn bridge_mac_is_its_own_and_survives_pods_coming_and_going() {
    require_root!();
    let imp = ours();
    bridge_mac_through_churn(&imp, json!({"isGateway": true}), true);
    bridge_mac_through_churn(&imp, json!({}), true);
    bridge_mac_through_churn(&imp, json!({}), false);
    // The reference pins the MAC only when it sets a gateway address.
    if let Some(reference) = reference() {
        bridge_mac_through_churn(&reference, json!({"isGateway": true}), true);
    }
}

#[test]
fn existing_bridge_keeps_its_mac_through_add_and_del() {
    require_root!();
    let imp = ours();
    for (extra, l3) in [(json!({"isGateway": true}), true), (json!({}), false)] {
        let host = Netns::new("brown-host");
        let ipam = TempDir::new("brown-ipam");
        host.exec_ok(&["ip", "link", "add", "cni0", "type", "bridge"]);
        let own = mac_of(&host, "cni0");
        let pod = Netns::new("brown-pod");
        let c = conf(
            "1.0.0",
            "ownnet",
            l3.then_some(&ipam),
            json!([[{"subnet": "10.90.0.0/24"}]]),
            extra.clone(),
        );
        let a = Attachment::new(&imp, &host, "own", &pod);
        let r = a.add(&c);
        assert_eq!(mac_of(&host, "cni0"), own, "after ADD ({extra})");
        assert_eq!(r["interfaces"][0]["mac"], own.as_str());
        assert_ne!(r["interfaces"][1]["mac"], own.as_str());
        assert!(a.check(&c, &r).status.success());
        a.del(&c, Some(&r));
        assert_eq!(mac_of(&host, "cni0"), own, "after DEL ({extra})");
    }
}

/// The bridge's neighbour entries (the gateway's ARP cache of its pods) survive the ADDs of
/// other pods: the MAC is pinned once, and setting a MAC (even the same one) would flush them.
#[test]
fn neighbour_entries_of_the_bridge_survive_the_next_pods_add() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brnb-host");
    let ipam = TempDir::new("brnb-ipam");
    let c = conf(
        "1.0.0",
        "nbnet",
        Some(&ipam),
        json!([[{"subnet": "10.91.0.0/24"}]]),
        json!({"isGateway": true}),
    );
    let pods: Vec<Netns> = (0..3).map(|_| Netns::new("brnb-pod")).collect();
    let first = Attachment::new(&imp, &host, "nb0", &pods[0]);
    let r0 = first.add(&c);
    let pinned = mac_of(&host, "cni0");
    host.exec_ok(&[
        "ip",
        "neigh",
        "replace",
        "10.91.0.200",
        "lladdr",
        "02:00:00:00:00:c8",
        "dev",
        "cni0",
        "nud",
        "stale",
    ]);
    let entries =
        |host: &Netns| host.exec_ok(&["ip", "neigh", "show", "dev", "cni0", "10.91.0.200"]);
    let mut rest = Vec::new();
    for (i, p) in pods.iter().enumerate().skip(1) {
        let a = Attachment::new(&imp, &host, &format!("nb{i}"), p);
        let r = a.add(&c);
        assert!(
            entries(&host).contains("02:00:00:00:00:c8"),
            "ADD {i} flushed the bridge's neighbours: {:?}",
            entries(&host)
        );
        assert_eq!(mac_of(&host, "cni0"), pinned, "after ADD {i}");
        rest.push((a, r));
    }
    for (a, r) in rest {
        a.del(&c, Some(&r));
    }
    first.del(&c, Some(&r0));
}

/// Both ends of a pod's veth have one TX and one RX queue (asked for at creation, which spares
/// the kernel a queue cut and its RCU grace period under the RTNL lock), the port is up in the
/// bridge, and the result names its real MAC (read once the port is up).
#[test]
fn pod_veth_has_one_queue_per_end_and_the_result_has_the_port_mac() {
    require_root!();
    let imp = ours();
    let host = Netns::new("brq-host");
    let pod = Netns::new("brq-pod");
    let c = conf("1.0.0", "qnet", None, json!(null), json!({}));
    let a = Attachment::new(&imp, &host, "q", &pod);
    let r = a.add(&c);
    let port = r["interfaces"][1]["name"].as_str().unwrap().to_string();
    let queues = |ns: &Netns, dev: &str| {
        let v = ns.exec_json(&["ip", "-j", "-d", "link", "show", "dev", dev]);
        (
            v[0]["num_tx_queues"].as_u64(),
            v[0]["num_rx_queues"].as_u64(),
            v[0]["operstate"].as_str().map(str::to_string),
        )
    };
    assert_eq!(queues(&host, &port), (Some(1), Some(1), Some("UP".into())));
    assert_eq!(queues(&pod, "eth0"), (Some(1), Some(1), Some("UP".into())));
    assert_eq!(
        r["interfaces"][1]["mac"].as_str().unwrap(),
        mac_of(&host, &port)
    );
    a.del(&c, Some(&r));
}
