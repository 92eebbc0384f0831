//! macvlan end to end on a veth "uplink" in a host netns, with the reference Go macvlan
//! (`/usr/lib/cni/macvlan`) as the oracle for results and kernel objects; traffic between two
//! pods; linkInContainer, bcqueuelen, rollback, DEL, CHECK and STATUS on ours.

mod main_support;

use main_support::*;
use netns_tests::{require_root, skip_unless, Netns, TempDir};
use serde_json::{json, Value};

/// A host netns with `uplink0` (up, 10.92.0.1/24, the default route's device).
fn host_with_uplink(prefix: &str) -> Netns {
    let host = Netns::new(prefix);
    host.exec_ok(&[
        "ip", "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
    ]);
    for l in ["uplink0", "uplink1"] {
        host.exec_ok(&["ip", "link", "set", l, "up"]);
    }
    host.exec_ok(&["ip", "addr", "add", "10.92.0.1/24", "dev", "uplink0"]);
    host.exec_ok(&[
        "ip",
        "route",
        "add",
        "default",
        "via",
        "10.92.0.254",
        "dev",
        "uplink0",
    ]);
    host
}

fn mv_conf(version: &str, ipam: Option<&TempDir>, extra: Value) -> Value {
    let mut c = conf(
        version,
        "macvlan",
        ipam,
        json!([[{"subnet": "10.92.0.0/24", "rangeStart": "10.92.0.10"}]]),
        extra,
    );
    if ipam.is_some() {
        c["ipam"]["routes"] = json!([{"dst": "10.93.0.0/16"}]);
    }
    c
}

/// What both implementations must leave in the container.
fn kernel_state(pod: &Netns) -> Value {
    let d = link_details(pod, "eth0");
    json!({
        "kind": d["linkinfo"]["info_kind"],
        "mode": d["linkinfo"]["info_data"]["mode"],
        "mtu": d["mtu"],
        "up": pod.link_is_up("eth0"),
        "addrs": global_addrs(pod, "eth0"),
        "routes": routes(pod),
    })
}

#[test]
fn same_result_and_kernel_objects_as_reference() {
    require_root!();
    let reference = skip_unless!(
        Impl::reference("macvlan"),
        "reference macvlan not installed"
    );
    let ours = Impl::ours("macvlan");
    let cases = [
        (
            "0.3.1",
            true,
            json!({"master": "uplink0", "mode": "bridge"}),
        ),
        (
            "0.4.0",
            true,
            json!({"master": "uplink0", "mode": "private", "mtu": 1400,
            "runtimeConfig": {"mac": "02:92:00:00:00:07"}, "dns": {"nameservers": ["10.92.0.53"]}}),
        ),
        ("1.0.0", false, json!({"master": "uplink0", "mode": "vepa"})),
        ("1.0.0", true, json!({"mode": "passthru"})),
    ];
    for (version, l3, extra) in cases {
        let mut seen = Vec::new();
        for imp in [&ours, &reference] {
            let host = host_with_uplink("mv-host");
            let pod = Netns::new("mv-pod");
            let ipam = TempDir::new("mv-ipam");
            let c = mv_conf(version, l3.then_some(&ipam), extra.clone());
            let a = Attachment::new(imp, &host, "mvpod", &pod);
            let r = a.add(&c);
            let mut state = kernel_state(&pod);
            if extra.get("runtimeConfig").is_some() {
                state["mac"] = pod.link("eth0").unwrap()["address"].clone();
            }
            if version != "0.3.1" {
                // Our CHECK accepts what either ADD made.
                Attachment::new(&ours, &host, "mvpod", &pod).check_ok(&c, &r);
            }
            a.del(&c, Some(&r));
            assert!(pod.link("eth0").is_none());
            assert!(leases(&ipam).is_empty());
            seen.push((normalize(r), state));
        }
        assert_eq!(
            seen[0].0, seen[1].0,
            "result differs for {extra} (ours, reference)"
        );
        assert_eq!(
            seen[0].1, seen[1].1,
            "kernel state differs for {extra} (ours, reference)"
        );
    }
}

#[test]
fn two_pods_in_bridge_mode_reach_each_other() {
    require_root!();
    let host = host_with_uplink("mv-ping-h");
    let ipam = TempDir::new("mv-ping-ipam");
    let c = mv_conf(
        "1.0.0",
        Some(&ipam),
        json!({"master": "uplink0", "bcqueuelen": 256}),
    );
    let ours = Impl::ours("macvlan");
    let (p1, p2) = (Netns::new("mv-ping-1"), Netns::new("mv-ping-2"));
    let (a1, a2) = (
        Attachment::new(&ours, &host, "pod1", &p1),
        Attachment::new(&ours, &host, "pod2", &p2),
    );
    let (r1, r2) = (a1.add(&c), a2.add(&c));
    let ip2 = r2["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    ping_ok(&p1, &ip2);
    let detail = p1.exec_ok(&["ip", "-d", "link", "show", "eth0"]);
    assert!(detail.contains("bcqueuelen 256"), "{detail}");
    assert_eq!(
        p1.exec_ok(&["sysctl", "-n", "net.ipv4.conf.eth0.arp_notify"])
            .trim(),
        "1"
    );
    a1.del(&c, Some(&r1));
    a2.del(&c, Some(&r2));
    assert!(leases(&ipam).is_empty());
}

#[test]
fn link_in_container_uses_a_master_inside_the_pod() {
    require_root!();
    let host = Netns::new("mv-lic-h");
    let pod = Netns::new("mv-lic-p");
    host.exec_ok(&[
        "ip", "link", "add", "inner0", "type", "veth", "peer", "name", "outer0",
    ]);
    host.exec_ok(&["ip", "link", "set", "inner0", "netns", pod.name()]);
    pod.exec_ok(&["ip", "link", "set", "inner0", "up"]);
    let ipam = TempDir::new("mv-lic-ipam");
    let c = mv_conf(
        "1.1.0",
        Some(&ipam),
        json!({"master": "inner0", "linkInContainer": true, "mtu": 1300}),
    );
    let a = Attachment::new(&Impl::ours("macvlan"), &host, "licpod", &pod);
    let r = a.add(&c);
    let d = link_details(&pod, "eth0");
    assert_eq!(
        (d["linkinfo"]["info_kind"].as_str(), d["mtu"].as_u64()),
        (Some("macvlan"), Some(1300))
    );
    assert!(links_of_kind(&host, "macvlan").is_empty());
    a.check_ok(&c, &r);
    a.ok("STATUS", &c, None);
    a.del(&c, Some(&r));
    assert!(pod.link("eth0").is_none() && pod.link("inner0").is_some());
    // The master must exist where it is looked for.
    let mut elsewhere = c.clone();
    elsewhere["linkInContainer"] = json!(false);
    let e = a.fails("ADD", &elsewhere);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("failed to lookup master \"inner0\""),
        "{e}"
    );
    assert!(leases(&ipam).is_empty());
}

#[test]
fn failures_roll_back_and_del_is_tolerant() {
    require_root!();
    let host = host_with_uplink("mv-rb-h");
    let pod = Netns::new("mv-rb-p");
    let ipam = TempDir::new("mv-rb-ipam");
    let ours = Impl::ours("macvlan");
    let a = Attachment::new(&ours, &host, "rbpod", &pod);
    // An MTU above the master's, an unknown mode: config errors, nothing created.
    let e = a.fails(
        "ADD",
        &mv_conf(
            "1.0.0",
            Some(&ipam),
            json!({"master": "uplink0", "mtu": 9000}),
        ),
    );
    assert_eq!(e["msg"], "invalid MTU 9000, must be [0, master MTU(1500)]");
    assert_eq!(
        a.fails("ADD", &mv_conf("1.0.0", None, json!({"mode": "l3"})))["code"],
        999
    );
    // IPAM fails after the link exists: the link goes.
    let mut bad_ipam = mv_conf("1.0.0", Some(&ipam), json!({"master": "uplink0"}));
    bad_ipam["ipam"]["ranges"] = json!([[{"subnet": "10.92.0.0/31"}]]);
    a.fails("ADD", &bad_ipam);
    assert!(pod.link("eth0").is_none());
    // A layer-2 result cannot be printed as 0.2.0: ADD fails and is rolled back.
    a.fails("ADD", &mv_conf("0.2.0", None, json!({"master": "uplink0"})));
    assert!(pod.link("eth0").is_none());
    // The container interface name is taken: nothing is left, the lease is released.
    pod.exec_ok(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "x0",
    ]);
    let c = mv_conf("1.0.0", Some(&ipam), json!({"master": "uplink0"}));
    let e = a.fails("ADD", &c);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .starts_with("failed to rename macvlan to \"eth0\""),
        "{e}"
    );
    assert!(links_of_kind(&pod, "macvlan").is_empty() && leases(&ipam).is_empty());
    pod.exec_ok(&["ip", "link", "del", "eth0"]);

    let r = a.add(&c);
    pod.exec_ok(&["ip", "link", "del", "eth0"]);
    a.del(&c, Some(&r));
    a.del(&c, None);
    assert!(leases(&ipam).is_empty());
    let r = a.add(&c);
    drop(pod);
    a.del(&c, Some(&r));
    assert!(leases(&ipam).is_empty());
    let mut no_netns = Attachment::new(&ours, &host, "rbpod", &Netns::new("mv-rb-q"));
    no_netns.netns = String::new();
    no_netns.del(&c, None);
}

#[test]
fn check_and_status_notice_problems() {
    require_root!();
    let host = host_with_uplink("mv-chk-h");
    let pod = Netns::new("mv-chk-p");
    let ipam = TempDir::new("mv-chk-ipam");
    let c = mv_conf(
        "1.1.0",
        Some(&ipam),
        json!({"master": "uplink0", "mode": "bridge"}),
    );
    let a = Attachment::new(&Impl::ours("macvlan"), &host, "chkpod", &pod);
    let r = a.add(&c);
    a.check_ok(&c, &r);
    let mut other_mode = c.clone();
    other_mode["mode"] = json!("vepa");
    let e = a.fails("CHECK", &with_prev(&other_mode, Some(&r)));
    assert_eq!(
        e["msg"],
        "Container macvlan mode bridge does not match expected value: vepa"
    );
    assert_eq!(a.fails("CHECK", &c)["msg"], "Required prevResult missing");
    a.ok("STATUS", &c, None);
    let mut missing = c.clone();
    missing["master"] = json!("nosuch0");
    assert_eq!(a.fails("STATUS", &missing)["code"], 50);
    a.ok("GC", &c, None);
    a.del(&c, Some(&r));
}

#[test]
fn example_runs() {
    require_root!();
    let r = run_example("macvlan-multus.conflist", |host| {
        host.exec_ok(&[
            "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p",
        ]);
        host.exec_ok(&["ip", "link", "set", "eth1", "up"]);
    });
    assert_eq!(r["ips"][0]["address"], "192.168.100.100/24");
}

/// Every mode on a dummy master (as upstream's tests use), ours against the reference.
#[test]
fn every_mode_on_a_dummy_master_matches_the_reference() {
    require_root!();
    netns_tests::require_driver!(kernel_has("dummy"), "dummy driver");
    let reference = skip_unless!(
        Impl::reference("macvlan"),
        "reference macvlan not installed"
    );
    let ours = Impl::ours("macvlan");
    for mode in ["bridge", "private", "vepa", "passthru"] {
        let mut seen = Vec::new();
        for imp in [&ours, &reference] {
            let host = Netns::new("mvd-host");
            host.exec_ok(&["ip", "link", "add", "uplink0", "type", "dummy"]);
            host.exec_ok(&["ip", "link", "set", "uplink0", "up"]);
            let pod = Netns::new("mvd-pod");
            let ipam = TempDir::new("mvd-ipam");
            let c = mv_conf(
                "1.0.0",
                Some(&ipam),
                json!({"master": "uplink0", "mode": mode}),
            );
            let a = Attachment::new(imp, &host, "mvdpod", &pod);
            let r = a.add(&c);
            let state = kernel_state(&pod);
            Attachment::new(&ours, &host, "mvdpod", &pod).check_ok(&c, &r);
            a.del(&c, Some(&r));
            assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());
            assert!(host.link("uplink0").is_some(), "the master must stay");
            seen.push((normalize(r), state));
        }
        assert_eq!(seen[0], seen[1], "mode {mode} (ours, reference)");
    }
}
