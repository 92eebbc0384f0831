//! ipvlan end to end. Where the kernel has the ipvlan driver, ours and the reference
//! (`/usr/lib/cni/ipvlan`) run the same configs and must agree on results and kernel objects.
//! Where it has not (this development machine), the test says so and skips, and what can be
//! proven without the driver is: the link request our binary sends is byte for byte the one
//! iproute2 sends for the same link (both captured with strace), a failed ADD is a spec error
//! that leaves nothing, and DEL works whatever is left. (The ADD flow above the kernel runs in
//! the plugin's unit tests, on netkit's fake kernel.)

mod main_support;

use main_support::*;
use netns_tests::{require_driver, require_root, skip_unless, Netns, TempDir};
use serde_json::{json, Value};

fn host_with_uplink(prefix: &str) -> Netns {
    let host = Netns::new(prefix);
    host.exec_ok(&[
        "ip", "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
    ]);
    host.exec_ok(&["ip", "link", "set", "uplink0", "up"]);
    host.exec_ok(&["ip", "addr", "add", "10.94.0.1/24", "dev", "uplink0"]);
    host.exec_ok(&["ip", "route", "add", "default", "via", "10.94.0.254"]);
    host
}

fn iv_conf(version: &str, ipam: &TempDir, extra: Value) -> Value {
    let mut c = conf(
        version,
        "ipvlan",
        Some(ipam),
        json!([[{"subnet": "10.94.0.0/24", "rangeStart": "10.94.0.20"}]]),
        extra,
    );
    c["ipam"]["routes"] = json!([{"dst": "10.95.0.0/16"}]);
    c
}

#[test]
fn same_result_and_kernel_objects_as_reference() {
    require_root!();
    netns_tests::require_driver!(kernel_has("ipvlan"), "ipvlan driver");
    let reference = skip_unless!(Impl::reference("ipvlan"), "reference ipvlan not installed");
    let ours = Impl::ours("ipvlan");
    for (version, extra) in [
        ("0.3.1", json!({"master": "uplink0", "mode": "l2"})),
        (
            "0.4.0",
            json!({"master": "uplink0", "mode": "l3", "mtu": 1400}),
        ),
        (
            "1.0.0",
            json!({"mode": "l3s", "dns": {"nameservers": ["10.94.0.53"]}}),
        ),
    ] {
        let mut seen = Vec::new();
        for imp in [&ours, &reference] {
            let host = host_with_uplink("iv-host");
            let pod = Netns::new("iv-pod");
            let ipam = TempDir::new("iv-ipam");
            let c = iv_conf(version, &ipam, extra.clone());
            let a = Attachment::new(imp, &host, "ivpod", &pod);
            let r = a.add(&c);
            let d = link_details(&pod, "eth0");
            let state = json!({"kind": d["linkinfo"]["info_kind"], "mode": d["linkinfo"]["info_data"]["mode"],
                "mtu": d["mtu"], "addrs": global_addrs(&pod, "eth0"), "routes": routes(&pod)});
            if version != "0.3.1" {
                Attachment::new(&ours, &host, "ivpod", &pod).check_ok(&c, &r);
            }
            a.del(&c, Some(&r));
            assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());
            seen.push((normalize(r), state));
        }
        assert_eq!(seen[0].0, seen[1].0, "result differs for {extra}");
        assert_eq!(seen[0].1, seen[1].1, "kernel state differs for {extra}");
    }
}

/// Our binary's RTM_NEWLINK for an ipvlan equals iproute2's for the same link.
#[test]
fn request_matches_iproute2() {
    require_root!();
    if !have_strace() {
        eprintln!("skipping ipvlan request comparison: strace is not installed");
        return;
    }
    let host = host_with_uplink("iv-msg-h");
    let pod = Netns::new("iv-msg-p");
    let ipam = TempDir::new("iv-msg-ipam");
    let ours = Impl::ours("ipvlan");
    let driver = kernel_has("ipvlan");
    for (mode, flag, mtu) in [
        ("l2", "", None),
        ("l3", "vepa", Some(1400)),
        ("l3s", "private", Some(1300)),
    ] {
        let mut extra = json!({"master": "uplink0", "mode": mode});
        if !flag.is_empty() {
            extra["flag"] = json!(flag);
        }
        if let Some(m) = mtu {
            extra["mtu"] = json!(m);
        }
        let c = iv_conf("1.0.0", &ipam, extra);
        let mtu_text = mtu.map(|m| m.to_string()).unwrap_or_default();
        let mut ip_args = vec!["link", "uplink0", "name", "veth00000000"];
        if mtu.is_some() {
            ip_args.extend(["mtu", mtu_text.as_str()]);
        }
        ip_args.extend(["netns", pod.name(), "type", "ipvlan", "mode", mode]);
        if !flag.is_empty() {
            ip_args.push(flag);
        }
        let out = assert_request_matches_iproute2(&host, &pod, &ours, "msgpod", &c, &ip_args);
        let a = Attachment::new(&ours, &host, "msgpod", &pod);
        if driver {
            a.del(&c, Some(&out));
        } else {
            // Refused by the kernel: a spec error, and nothing is left behind.
            let e = out;
            assert_eq!(e["code"], 999, "{e}");
            assert!(
                e["msg"]
                    .as_str()
                    .unwrap()
                    .starts_with("failed to create ipvlan"),
                "{e}"
            );
            assert!(leases(&ipam).is_empty());
            assert_eq!(
                pod.exec_ok(&["ip", "-o", "link"]).lines().count(),
                1,
                "only lo"
            );
        }
    }
}

/// DEL releases the lease and succeeds whatever is left: no link, no netns, no CNI_NETNS.
#[test]
fn del_without_the_link_or_the_netns_releases_the_lease() {
    require_root!();
    let host = host_with_uplink("iv-del-h");
    let ipam = TempDir::new("iv-del-ipam");
    let c = iv_conf("1.1.0", &ipam, json!({"master": "uplink0"}));
    let ours = Impl::ours("ipvlan");
    let pod = Netns::new("iv-del-p");
    // A lease held for the attachment, as an ADD would have left it.
    let host_local = Impl {
        label: "host-local",
        bin: ours.cni_path.clone().into(),
        cni_path: ours.cni_path.clone(),
    };
    let host_local = Impl {
        bin: host_local.bin.join("host-local"),
        ..host_local
    };
    Attachment::new(&host_local, &host, "delpod", &pod).add(&c);
    assert_eq!(leases(&ipam).len(), 1);
    let a = Attachment::new(&ours, &host, "delpod", &pod);
    a.del(&c, None);
    assert!(leases(&ipam).is_empty());
    a.del(&c, None);
    drop(pod);
    a.del(&c, None);
    let mut no_netns = Attachment::new(&ours, &host, "delpod", &Netns::new("iv-del-q"));
    no_netns.netns = String::new();
    no_netns.del(&c, None);
    a.ok("STATUS", &c, None);
    a.ok("GC", &c, None);
    // Bad input is refused before anything runs.
    let mut bad = c.clone();
    bad["mode"] = json!("l4");
    assert_eq!(a.fails("ADD", &bad)["code"], 999);
}

#[test]
fn example_is_valid_and_runs_where_the_driver_exists() {
    require_root!();
    netns_tests::require_driver!(kernel_has("ipvlan"), "ipvlan driver");
    let r = run_example("ipvlan-l3s.conflist", |host| {
        host.exec_ok(&[
            "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p",
        ]);
        host.exec_ok(&["ip", "link", "set", "eth1", "up"]);
    });
    assert_eq!(r["interfaces"][0]["name"], "eth0");
}

/// CHECK of an ipvlan made without `master`: ADD took the default route's interface, or,
/// chained, prevResult's single interface; CHECK's prevResult is ipvlan's own result (its
/// interface is the container link) or a whole chain's (several interfaces), so the master
/// is the container link's parent, which must exist. The reference fails these CHECKs
/// (it looks up an empty master name); ours passes them, and still fails when the master is
/// gone.
#[test]
fn check_without_master_uses_the_links_parent() {
    require_root!();
    require_driver!(kernel_has("ipvlan"), "ipvlan driver");
    let ours = Impl::ours("ipvlan");

    // Master from the default route.
    let host = host_with_uplink("iv-ck-h");
    let pod = Netns::new("iv-ck-p");
    let ipam = TempDir::new("iv-ck-ipam");
    let c = iv_conf("1.0.0", &ipam, json!({"mode": "l2"}));
    let a = Attachment::new(&ours, &host, "ckpod", &pod);
    let r = a.add(&c);
    a.check_ok(&c, &r);
    // A chain's prevResult: the host's interface first, then ipvlan's.
    let mut chain = r.clone();
    chain["interfaces"] = json!([{"name": "uplink0"}, r["interfaces"][0].clone()]);
    chain["ips"][0]["interface"] = json!(1);
    a.check_ok(&c, &chain);
    a.del(&c, Some(&r));
    assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());

    // Chained without IPAM: master and addresses from prevResult.
    let mut chained = json!({"cniVersion": "1.0.0", "name": "mainnet", "type": "ipvlan",
        "prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "uplink0"}],
            "ips": [{"interface": 0, "address": "10.94.0.77/24"}]}});
    let r = a.add(&chained);
    assert_eq!(global_addrs(&pod, "eth0"), vec!["10.94.0.77/24"]);
    chained["prevResult"] = r.clone();
    a.ok("CHECK", &chained, None);
    // The master gone (the kernel removes its ipvlans with it): CHECK fails.
    host.exec_ok(&["ip", "link", "del", "uplink0"]);
    let e = a.fails("CHECK", &chained);
    assert!(e["msg"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
    a.ok("DEL", &chained, None);
}

/// Every mode on a dummy master (as upstream's tests use), ours against the reference.
#[test]
fn every_mode_on_a_dummy_master_matches_the_reference() {
    require_root!();
    netns_tests::require_driver!(kernel_has("ipvlan"), "ipvlan driver");
    netns_tests::require_driver!(kernel_has("dummy"), "dummy driver");
    let reference = skip_unless!(Impl::reference("ipvlan"), "reference ipvlan not installed");
    let ours = Impl::ours("ipvlan");
    for mode in ["l2", "l3", "l3s"] {
        let mut seen = Vec::new();
        for imp in [&ours, &reference] {
            let host = Netns::new("ivd-host");
            host.exec_ok(&["ip", "link", "add", "uplink0", "type", "dummy"]);
            host.exec_ok(&["ip", "link", "set", "uplink0", "up"]);
            let pod = Netns::new("ivd-pod");
            let ipam = TempDir::new("ivd-ipam");
            let c = iv_conf("1.0.0", &ipam, json!({"master": "uplink0", "mode": mode}));
            let a = Attachment::new(imp, &host, "ivdpod", &pod);
            let r = a.add(&c);
            let d = link_details(&pod, "eth0");
            let state = json!({"kind": d["linkinfo"]["info_kind"],
                "mode": d["linkinfo"]["info_data"]["mode"], "mtu": d["mtu"],
                "up": pod.link_is_up("eth0"), "addrs": global_addrs(&pod, "eth0"),
                "routes": routes(&pod)});
            Attachment::new(&ours, &host, "ivdpod", &pod).check_ok(&c, &r);
            a.del(&c, Some(&r));
            assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());
            seen.push((normalize(r), state));
        }
        assert_eq!(seen[0], seen[1], "mode {mode} (ours, reference)");
    }
}
