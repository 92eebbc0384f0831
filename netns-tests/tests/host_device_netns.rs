//! host-device end to end with a veth end standing for the host's device, and the reference
//! Go host-device (`/usr/lib/cni/host-device`) as the oracle: the same result and container
//! state, each implementation's DEL gives back what the other's ADD took. Ours also restores
//! the device's addresses, routes and up state, rolls back, tolerates a vanished netns and
//! recovers in GC a device the kernel returned on its own.

mod main_support;

use main_support::*;
use netns_tests::{require_root, skip_unless, Netns, TempDir};
use serde_json::{json, Value};

/// A host netns with `hd0` (its peer `hd0p` stays): up, 10.99.0.5/24, a route through it.
fn host_with_device(prefix: &str) -> Netns {
    let host = Netns::new(prefix);
    host.exec_ok(&[
        "ip", "link", "add", "hd0", "type", "veth", "peer", "name", "hd0p",
    ]);
    host.exec_ok(&["ip", "link", "set", "hd0", "up"]);
    host.exec_ok(&["ip", "link", "set", "hd0p", "up"]);
    host.exec_ok(&["ip", "addr", "add", "10.99.0.5/24", "dev", "hd0"]);
    host.exec_ok(&[
        "ip",
        "route",
        "add",
        "10.199.0.0/16",
        "via",
        "10.99.0.254",
        "dev",
        "hd0",
    ]);
    host
}

fn hd_conf(version: &str, ipam: Option<&TempDir>, state: &TempDir, extra: Value) -> Value {
    let mut c = conf(
        version,
        "host-device",
        ipam,
        json!([[{"subnet": "10.98.0.0/24"}]]),
        extra,
    );
    c["dataDir"] = json!(state.path());
    c
}

/// The device on the host as DEL must leave it (ours restores everything).
fn device_on_host(host: &Netns) -> Value {
    let l = host.link("hd0");
    json!({
        "present": l.is_some(),
        "up": host.link_is_up("hd0"),
        "addrs": global_addrs(host, "hd0"),
        "route": host.exec_ok(&["ip", "route", "show", "10.199.0.0/16"]).trim().to_string(),
    })
}

#[test]
fn same_result_and_container_state_as_reference() {
    require_root!();
    let reference = skip_unless!(
        Impl::reference("host-device"),
        "reference host-device not installed"
    );
    let ours = Impl::ours("host-device");
    for (version, by) in [
        ("0.4.0", json!({"device": "hd0"})),
        ("1.0.0", json!({"hwaddr": "<mac>"})),
    ] {
        let mut seen = Vec::new();
        for imp in [&ours, &reference] {
            let host = host_with_device("hd-host");
            let pod = Netns::new("hd-pod");
            let (ipam, st) = (TempDir::new("hd-ipam"), TempDir::new("hd-state"));
            let mut by = by.clone();
            if by.get("hwaddr").is_some() {
                by["hwaddr"] = host.link("hd0").unwrap()["address"].clone();
            }
            let c = hd_conf(version, Some(&ipam), &st, by);
            let a = Attachment::new(imp, &host, "hdpod", &pod);
            let r = a.add(&c);
            let d = pod.link("eth0").unwrap();
            let state = json!({"alias": d["ifalias"], "up": pod.link_is_up("eth0"),
                "addrs": global_addrs(&pod, "eth0"), "routes": routes(&pod)});
            assert!(host.link("hd0").is_none());
            Attachment::new(&ours, &host, "hdpod", &pod).check_ok(&c, &r);
            a.del(&c, Some(&r));
            assert!(leases(&ipam).is_empty() && pod.link("eth0").is_none());
            let back = device_on_host(&host);
            assert_eq!(back["present"], true, "{}: device not back", imp.label);
            if imp.label == "ours" {
                assert_eq!(
                    back,
                    json!({"present": true, "up": true, "addrs": ["10.99.0.5/24"],
                        "route": "10.199.0.0/16 via 10.99.0.254 dev hd0"}),
                    "ours restores the device's state"
                );
                assert!(
                    std::fs::read_dir(st.path()).unwrap().next().is_none(),
                    "state file left"
                );
            }
            seen.push((normalize(r), state));
        }
        assert_eq!(seen[0].0, seen[1].0, "result differs in {version}");
        assert_eq!(seen[0].1, seen[1].1, "container state differs in {version}");
    }
}

#[test]
fn each_del_gives_back_what_the_other_add_took() {
    require_root!();
    let reference = skip_unless!(
        Impl::reference("host-device"),
        "reference host-device not installed"
    );
    let ours = Impl::ours("host-device");
    for (first, second) in [(&reference, &ours), (&ours, &reference)] {
        let host = host_with_device("hd-x-host");
        let pod = Netns::new("hd-x-pod");
        let st = TempDir::new("hd-x-state");
        let c = hd_conf("1.0.0", None, &st, json!({"device": "hd0"}));
        let r = Attachment::new(first, &host, "xpod", &pod).add(&c);
        assert_eq!(r["interfaces"][0]["name"], "eth0");
        Attachment::new(second, &host, "xpod", &pod).del(&c, Some(&r));
        assert!(
            host.link("hd0").is_some(),
            "{} DEL after {} ADD",
            second.label,
            first.label
        );
        assert!(pod.link("eth0").is_none());
    }
}

#[test]
fn failed_add_gives_the_device_back() {
    require_root!();
    let host = host_with_device("hd-rb-h");
    let pod = Netns::new("hd-rb-p");
    let (ipam, st) = (TempDir::new("hd-rb-ipam"), TempDir::new("hd-rb-state"));
    let ours = Impl::ours("host-device");
    let a = Attachment::new(&ours, &host, "rbpod", &pod);
    let before = device_on_host(&host);
    // The container already has eth0: the rename fails, the device goes home.
    pod.exec_ok(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "x0",
    ]);
    let e = a.fails(
        "ADD",
        &hd_conf("1.0.0", Some(&ipam), &st, json!({"device": "hd0"})),
    );
    assert!(e["msg"].as_str().unwrap().contains("to \"eth0\""), "{e}");
    assert_eq!(device_on_host(&host), before);
    pod.exec_ok(&["ip", "link", "del", "eth0"]);
    // IPAM fails after the move: the device goes home with its state, no lease, no state file.
    let mut bad = hd_conf("1.0.0", Some(&ipam), &st, json!({"device": "hd0"}));
    bad["ipam"]["ranges"] = json!([[{"subnet": "10.98.0.0/32"}]]);
    a.fails("ADD", &bad);
    assert_eq!(device_on_host(&host), before);
    assert!(leases(&ipam).is_empty());
    assert!(std::fs::read_dir(st.path()).unwrap().next().is_none());
    // Devices that do not exist, bad selectors: spec errors.
    for (sel, want) in [
        (json!({"device": "nosuch0"}), "failed to find host device"),
        (
            json!({"hwaddr": "02:00:00:00:99:99"}),
            "failed to find physical interface",
        ),
        (
            json!({"pciBusID": "0000:ff:1f.7"}),
            "no net directory under pci device",
        ),
        (
            json!({"kernelpath": "/sys/devices/virtual/none"}),
            "failed to find network devices",
        ),
        (
            json!({"runtimeConfig": {"deviceID": "nosuch.dev"}}),
            "not found or unsupported",
        ),
    ] {
        let e = a.fails("ADD", &hd_conf("1.0.0", None, &st, sel));
        assert!(e["msg"].as_str().unwrap().contains(want), "{want}: {e}");
    }
    assert_eq!(device_on_host(&host), before);
}

#[test]
fn del_tolerates_a_vanished_netns_and_gc_recovers_a_returned_device() {
    require_root!();
    let host = host_with_device("hd-gc-h");
    let (ipam, st) = (TempDir::new("hd-gc-ipam"), TempDir::new("hd-gc-state"));
    let ours = Impl::ours("host-device");
    let c = hd_conf("1.1.0", Some(&ipam), &st, json!({"device": "hd0"}));
    let pod = Netns::new("hd-gc-p");
    let a = Attachment::new(&ours, &host, "gcpod", &pod);
    let r = a.add(&c);
    a.check_ok(&c, &r);
    a.ok("STATUS", &c, None);
    // What the kernel does to a physical device when its netns dies: back to the host, renamed
    // when its container name is taken (a veth would be destroyed instead).
    pod.exec_ok(&[
        "ip",
        "link",
        "set",
        "eth0",
        "netns",
        host.name(),
        "name",
        "dev7",
    ]);
    drop(pod);
    let mut gc = c.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    a.ok("GC", &gc, None);
    assert_eq!(device_on_host(&host)["addrs"], json!(["10.99.0.5/24"]));
    assert!(host.link("dev7").is_none());
    assert!(std::fs::read_dir(st.path()).unwrap().next().is_none());
    assert!(leases(&ipam).is_empty(), "GC released the lease");

    // DEL after the netns is gone (a veth is destroyed with it): the lease and state go.
    let pod = Netns::new("hd-gc-q");
    let a = Attachment::new(&ours, &host, "gcpod", &pod);
    a.add(&c);
    drop(pod);
    a.del(&c, None);
    a.del(&c, None);
    assert!(leases(&ipam).is_empty());
    assert!(std::fs::read_dir(st.path()).unwrap().next().is_none());
}

/// The pod's netns dies before its DEL (a crash, a reboot): our DEL still releases the lease,
/// with the dead netns's path as with none (containerd's second DEL). The reference's fails
/// while the path is given and skips IPAM without it: the lease leaks, on every reboot.
#[test]
fn del_with_the_netns_gone_releases_the_lease_unlike_the_reference() {
    require_root!();
    let reference = skip_unless!(
        Impl::reference("host-device"),
        "reference host-device not installed"
    );
    for plugin in [Impl::ours("host-device"), reference] {
        let host = host_with_device("hd-gone-h");
        let (ipam, st) = (TempDir::new("hd-gone-ipam"), TempDir::new("hd-gone-state"));
        let c = hd_conf("1.0.0", Some(&ipam), &st, json!({"device": "hd0"}));
        let pod = Netns::new("hd-gone-p");
        let mut a = Attachment::new(&plugin, &host, "gonepod", &pod);
        let r = a.add(&c);
        drop(pod);
        let with_path = a.call("DEL", &with_prev(&c, Some(&r)));
        a.netns = String::new();
        let without = a.call("DEL", &c);
        let left = leases(&ipam);
        if plugin.label == "ours" {
            assert!(with_path.status.success() && without.status.success());
            assert!(left.is_empty(), "ours leaked {left:?}");
        } else {
            eprintln!(
                "the reference's DEL with the netns gone: {}; without a netns: {}; leases left: {left:?}",
                text(&with_path.stdout).trim(),
                if without.status.success() { "success" } else { "failure" },
            );
            assert!(!left.is_empty(), "the reference released the lease now");
        }
    }
}

/// The container already has a link with the device's host name (a second NIC named like the
/// host's, or a pod that got a device of that name earlier): the device crosses under the
/// temporary name `temp_<ifindex>` and is renamed inside, as the reference does; the pod's own
/// link is untouched. DEL gives it back the same way, and a link of the device's name on the
/// host at DEL time fails the DEL without losing the device: it stays in the pod as `eth0`
/// until the name is free, and the DEL retried then succeeds.
#[test]
fn device_moves_into_a_netns_that_has_a_link_of_its_name() {
    require_root!();
    let host = host_with_device("hd-cl-h");
    let pod = Netns::new("hd-cl-p");
    let st = TempDir::new("hd-cl-state");
    let ours = Impl::ours("host-device");
    pod.exec_ok(&[
        "ip", "link", "add", "hd0", "type", "veth", "peer", "name", "podpeer",
    ]);
    let pods_own = pod.link("hd0").unwrap()["address"].clone();
    let host_mac = host.link("hd0").unwrap()["address"].clone();
    let c = hd_conf("1.1.0", None, &st, json!({"device": "hd0"}));
    let a = Attachment::new(&ours, &host, "clpod", &pod);
    let r = a.add(&c);
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["interfaces"][0]["mac"], host_mac);
    let moved = pod.link("eth0").expect("eth0 in the pod");
    assert_eq!(moved["address"], host_mac);
    assert_eq!(moved["ifalias"], "hd0");
    assert!(pod.link_is_up("eth0"));
    assert_eq!(
        pod.link("hd0").unwrap()["address"],
        pods_own,
        "pod's hd0 kept"
    );
    assert!(host.link("hd0").is_none());
    assert!(
        links_named_like(&pod, "temp_").is_empty() && links_named_like(&host, "temp_").is_empty(),
        "a temporary name was left behind"
    );
    a.check_ok(&c, &r);

    // DEL while the host has a link named hd0: it fails, the device is still the pod's eth0.
    host.exec_ok(&[
        "ip", "link", "add", "hd0", "type", "veth", "peer", "name", "squat",
    ]);
    let e = a.fails("DEL", &with_prev(&c, Some(&r)));
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("to original name \"hd0\""),
        "{e}"
    );
    assert_eq!(pod.link("eth0").expect("eth0 kept")["address"], host_mac);
    assert!(pod.link_is_up("eth0"), "eth0 up again after the failed DEL");
    assert!(links_named_like(&host, "temp_").is_empty());
    host.exec_ok(&["ip", "link", "del", "hd0"]);
    a.del(&c, Some(&r));
    assert_eq!(host.link("hd0").expect("device back")["address"], host_mac);
    assert_eq!(pod.link("hd0").unwrap()["address"], pods_own);
    assert!(pod.link("eth0").is_none());
    assert_eq!(
        device_on_host(&host),
        json!({"present": true, "up": true, "addrs": ["10.99.0.5/24"],
            "route": "10.199.0.0/16 via 10.99.0.254 dev hd0"})
    );
    a.del(&c, Some(&r));
}

fn links_named_like(ns: &Netns, prefix: &str) -> Vec<String> {
    ns.exec_ok(&["ip", "-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// A static IPAM config as Go's json.Marshal writes it from static's own struct (the
/// reference's test does exactly that): each address carries the tagged `address` string and
/// the untagged `Address` IPNet object beside it. ADD and CHECK must read `address`, not its
/// case twin.
#[test]
fn check_with_a_go_marshalled_static_ipam_config() {
    require_root!();
    let mut imps = vec![Impl::ours("host-device")];
    if let Some(dir) = netns_tests::reference_plugin_dir(&["host-device", "static"]) {
        imps.push(Impl {
            label: "reference",
            bin: dir.join("host-device"),
            cni_path: dir.display().to_string(),
        });
    }
    for imp in &imps {
        let host = host_with_device("hd-gm-h");
        let pod = Netns::new("hd-gm-p");
        let st = TempDir::new("hd-gm-state");
        let mut c = hd_conf("1.0.0", None, &st, json!({"device": "hd0"}));
        c["ipam"] = json!({
            "Name": "",
            "type": "static",
            "routes": [{"dst": "10.77.0.0/16", "gw": "10.10.0.254"}],
            "addresses": [{
                "address": "10.10.0.1/24",
                "gateway": "10.10.0.254",
                "Address": {"IP": "10.10.0.1", "Mask": "////AA=="},
                "Version": "4"
            }],
            "dns": {}
        });
        let a = Attachment::new(imp, &host, "gmpod", &pod);
        let r = a.add(&c);
        assert_eq!(r["ips"][0]["address"], "10.10.0.1/24", "{}", imp.label);
        assert_eq!(global_addrs(&pod, "eth0"), vec!["10.10.0.1/24"]);
        a.check_ok(&c, &r);
        a.del(&c, Some(&r));
        assert!(host.link("hd0").is_some(), "{}: device back", imp.label);
    }
}

#[test]
fn example_runs() {
    require_root!();
    let r = run_example("host-device-sriov.conflist", |host| {
        host.exec_ok(&[
            "ip", "link", "add", "ens1f0v3", "type", "veth", "peer", "name", "vfpeer",
        ]);
    });
    assert_eq!(r["interfaces"][0]["name"], "eth0");
}

/// A dummy device (as upstream's tests use) moved in and back, ours against the reference.
#[test]
fn dummy_device_moves_in_and_back_like_the_reference() {
    require_root!();
    netns_tests::require_driver!(kernel_has("dummy"), "dummy driver");
    let reference = skip_unless!(
        Impl::reference("host-device"),
        "reference host-device not installed"
    );
    let ours = Impl::ours("host-device");
    let mut seen = Vec::new();
    for imp in [&ours, &reference] {
        let host = Netns::new("hdd-host");
        host.exec_ok(&["ip", "link", "add", "hd0", "type", "dummy"]);
        host.exec_ok(&["ip", "link", "set", "hd0", "up"]);
        let mac = host.link("hd0").unwrap()["address"].clone();
        let pod = Netns::new("hdd-pod");
        let (ipam, st) = (TempDir::new("hdd-ipam"), TempDir::new("hdd-state"));
        let c = hd_conf("1.0.0", Some(&ipam), &st, json!({"device": "hd0"}));
        let a = Attachment::new(imp, &host, "hddpod", &pod);
        let r = a.add(&c);
        assert!(
            host.link("hd0").is_none(),
            "{}: still on the host",
            imp.label
        );
        let d = link_details(&pod, "eth0");
        assert_eq!(d["address"], mac, "{}: not the same device", imp.label);
        let state = json!({"kind": d["linkinfo"]["info_kind"],
            "up": pod.link_is_up("eth0"), "addrs": global_addrs(&pod, "eth0"),
            "routes": routes(&pod)});
        Attachment::new(&ours, &host, "hddpod", &pod).check_ok(&c, &r);
        a.del(&c, Some(&r));
        assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());
        let back = link_details(&host, "hd0");
        assert_eq!(back["linkinfo"]["info_kind"], "dummy", "{}", imp.label);
        assert_eq!(
            back["address"], mac,
            "{}: another device came back",
            imp.label
        );
        seen.push((normalize(r), state));
    }
    assert_eq!(seen[0], seen[1], "ours, reference");
}

/// A container and an interface name name one attachment: a DEL naming another network than
/// the ADD did (a renamed network) gives the device back, with its state, as the reference's.
#[test]
fn del_naming_another_network_gives_the_device_back() {
    require_root!();
    let mut imps = vec![Impl::ours("host-device")];
    imps.extend(Impl::reference("host-device"));
    for imp in &imps {
        let host = host_with_device("hd-rn-host");
        let pod = Netns::new("hd-rn-pod");
        let (ipam, st) = (TempDir::new("hd-rn-ipam"), TempDir::new("hd-rn-state"));
        let c = hd_conf("1.0.0", Some(&ipam), &st, json!({"device": "hd0"}));
        let a = Attachment::new(imp, &host, "rnpod", &pod);
        let r = a.add(&c);
        let mut renamed = c.clone();
        renamed["name"] = json!("renamed-net");
        a.del(&renamed, Some(&r));
        assert!(
            pod.link("eth0").is_none(),
            "{}: device left in the pod",
            imp.label
        );
        let back = device_on_host(&host);
        assert_eq!(back["present"], true, "{}: device not back", imp.label);
        if imp.label == "ours" {
            assert_eq!(back["addrs"], json!(["10.99.0.5/24"]));
            assert!(std::fs::read_dir(st.path()).unwrap().next().is_none());
        }
    }
}
