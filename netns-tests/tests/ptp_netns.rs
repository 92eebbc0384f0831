//! ptp end to end, with the reference Go ptp (`/usr/lib/cni/ptp`) as the oracle: the same
//! config through both gives the same result and the same kernel objects (container
//! addresses and routes, gateway address and host routes on the host end, masquerade rules);
//! DEL, rollback, CHECK, GC and STATUS on ours.

mod main_support;

use main_support::*;
use netns_tests::{require_root, skip_unless, Netns, TempDir};
use serde_json::{json, Value};

fn ptp_conf(version: &str, ipam: &TempDir, dual_stack: bool, extra: Value) -> Value {
    let mut ranges = vec![json!([{"subnet": "10.91.0.0/24"}])];
    if dual_stack {
        ranges.push(json!([{"subnet": "fd91::/64"}]));
    }
    let mut c = conf(
        version,
        "ptp",
        Some(ipam),
        Value::Array(ranges),
        json!({"ipMasq": true, "mtu": 1400}),
    );
    c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}, {"dst": "192.168.91.0/24"}]);
    if let Value::Object(m) = extra {
        for (k, v) in m {
            c[k] = v;
        }
    }
    c
}

/// What both implementations must leave in the kernel after ADD.
fn kernel_state(host: &Netns, pod: &Netns, host_veth: &str) -> Value {
    json!({
        "pod_addrs": global_addrs(pod, "eth0"),
        "pod_routes": routes(pod),
        "pod_mtu": pod.link("eth0").unwrap()["mtu"],
        "pod_up": pod.link_is_up("eth0"),
        "host_veth_addrs": global_addrs(host, host_veth),
        "host_veth_mtu": host.link(host_veth).unwrap()["mtu"],
        "host_routes": routes(host),
        "nat": nat_rules(host),
        "forwarding": host.exec_ok(&["sysctl", "-n", "net.ipv4.ip_forward"]).trim().to_string(),
    })
}

#[test]
fn same_result_and_kernel_objects_as_reference() {
    require_root!();
    let reference = skip_unless!(Impl::reference("ptp"), "reference ptp not installed");
    let ours = Impl::ours("ptp");
    for (version, dual) in [("0.3.1", false), ("0.4.0", false), ("1.0.0", true)] {
        let mut seen = Vec::new();
        for imp in [&ours, &reference] {
            let host = Netns::new("ptp-host");
            let pod = Netns::new("ptp-pod");
            let ipam = TempDir::new("ptp-ipam");
            // The reference v1.1.1 always uses iptables (and ignores ipMasqBackend).
            let extra =
                json!({"dns": {"nameservers": ["10.91.0.53"]}, "ipMasqBackend": "iptables"});
            let c = ptp_conf(version, &ipam, dual, extra);
            let a = Attachment::new(imp, &host, "ptppod", &pod);
            let r = a.add(&c);
            let host_veth = r["interfaces"][0]["name"].as_str().unwrap().to_string();
            let state = kernel_state(&host, &pod, &host_veth);
            ping_ok(&pod, "10.91.0.1");
            ping_ok(&host, "10.91.0.2");
            if version != "0.3.1" {
                // Our CHECK accepts what either ADD made. (The reference v1.1.1 CHECK fails
                // on any route without a gateway, so it is not run.)
                Attachment::new(&ours, &host, "ptppod", &pod).check_ok(&c, &r);
            }
            a.del(&c, Some(&r));
            assert!(
                masquerade_rules(&host).is_empty(),
                "{:?}",
                masquerade_rules(&host)
            );
            assert!(leases(&ipam).is_empty());
            assert!(links_of_kind(&host, "veth").is_empty());
            seen.push((normalize(r), state));
        }
        assert_eq!(
            seen[0].0, seen[1].0,
            "result differs in {version} (ours, reference)"
        );
        assert_eq!(
            seen[0].1, seen[1].1,
            "kernel state differs in {version} (ours, reference)"
        );
    }
}

/// nftables masquerade (reference v1.1.1 predates `ipMasqBackend`: ours only).
#[test]
fn nftables_masquerade() {
    require_root!();
    let host = Netns::new("ptp-nft-h");
    let pod = Netns::new("ptp-nft-p");
    let ipam = TempDir::new("ptp-nft-ipam");
    let c = ptp_conf("1.0.0", &ipam, false, json!({"ipMasqBackend": "nftables"}));
    let a = Attachment::new(&Impl::ours("ptp"), &host, "nftpod", &pod);
    let r = a.add(&c);
    let ruleset = host.exec_ok(&["nft", "list", "table", "inet", "cni_plugins_masquerade"]);
    assert!(
        ruleset.contains("ip saddr 10.91.0.2 ip daddr != 10.91.0.0/24 masquerade"),
        "{ruleset}"
    );
    assert!(nat_rules(&host).is_empty());
    a.check_ok(&c, &r);
    drop(pod);
    a.del(&c, None);
    let ruleset = host.exec_ok(&["nft", "list", "table", "inet", "cni_plugins_masquerade"]);
    assert!(!ruleset.contains("10.91.0.2"), "{ruleset}");
    assert!(leases(&ipam).is_empty());
}

#[test]
fn del_is_idempotent_and_needs_neither_netns_nor_prev_result() {
    require_root!();
    let host = Netns::new("ptp-del-h");
    let ipam = TempDir::new("ptp-del-ipam");
    let c = ptp_conf("1.0.0", &ipam, false, json!({}));
    let ours = Impl::ours("ptp");
    let pod = Netns::new("ptp-del-p");
    let a = Attachment::new(&ours, &host, "delpod", &pod);
    a.add(&c);
    assert!(!masquerade_rules(&host).is_empty());
    // The runtime removed the netns first: DEL still releases the lease and the rules.
    drop(pod);
    a.del(&c, None);
    assert!(
        masquerade_rules(&host).is_empty(),
        "{:?}",
        masquerade_rules(&host)
    );
    assert!(leases(&ipam).is_empty());
    // The kernel destroys a deleted netns (and the host end with its pair) asynchronously.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !links_of_kind(&host, "veth").is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(links_of_kind(&host, "veth").is_empty());
    a.del(&c, None);
    let mut no_netns = Attachment::new(&ours, &host, "delpod", &Netns::new("ptp-del-q"));
    no_netns.netns = String::new();
    no_netns.del(&c, None);
}

#[test]
fn failed_add_leaves_nothing() {
    require_root!();
    let host = Netns::new("ptp-rb-h");
    let pod = Netns::new("ptp-rb-p");
    let ipam = TempDir::new("ptp-rb-ipam");
    let c = ptp_conf("1.0.0", &ipam, false, json!({}));
    let ours = Impl::ours("ptp");
    let first = Attachment::new(&ours, &host, "rb1", &pod);
    let r = first.add(&c);
    let rules = masquerade_rules(&host);
    // Another container into the same netns and ifname: IPAM succeeds, the veth cannot be made.
    let e = Attachment::new(&ours, &host, "rb2", &pod).fails("ADD", &c);
    assert!(e["msg"].as_str().unwrap().contains("already exists"), "{e}");
    assert_eq!(leases(&ipam).len(), 1, "the second lease was not released");
    assert_eq!(links_of_kind(&host, "veth").len(), 1);
    assert_eq!(masquerade_rules(&host), rules);
    // A netns that does not exist fails before any IPAM call.
    let mut gone = Attachment::new(&ours, &host, "rb3", &pod);
    gone.netns = "/run/netns/ferrocni-no-such-netns".into();
    gone.fails("ADD", &c);
    assert_eq!(leases(&ipam).len(), 1);
    // Bad input is a spec error, and touches nothing.
    let mut bad = c.clone();
    bad["mtu"] = json!("big");
    assert_eq!(first.fails("ADD", &bad)["code"], 999);
    bad["mtu"] = json!(-5);
    assert_eq!(first.fails("ADD", &bad)["code"], 999);
    first.del(&c, Some(&r));
    assert!(leases(&ipam).is_empty());
}

#[test]
fn check_notices_damage_gc_and_status() {
    require_root!();
    let host = Netns::new("ptp-chk-h");
    let pod = Netns::new("ptp-chk-p");
    let ipam = TempDir::new("ptp-chk-ipam");
    let c = ptp_conf("1.1.0", &ipam, false, json!({}));
    let a = Attachment::new(&Impl::ours("ptp"), &host, "chkpod", &pod);
    let r = a.add(&c);
    a.check_ok(&c, &r);
    host.exec_ok(&["ip", "route", "del", "10.91.0.2/32"]);
    let e = a.fails("CHECK", &with_prev(&c, Some(&r)));
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("no host route to 10.91.0.2"),
        "{e}"
    );
    let host_veth = r["interfaces"][0]["name"].as_str().unwrap();
    host.exec_ok(&[
        "ip",
        "route",
        "add",
        "10.91.0.2/32",
        "dev",
        host_veth,
        "scope",
        "host",
    ]);
    a.check_ok(&c, &r);
    pod.exec_ok(&["ip", "route", "del", "192.168.91.0/24"]);
    let e = a.fails("CHECK", &with_prev(&c, Some(&r)));
    assert!(
        e["msg"].as_str().unwrap().contains("192.168.91.0/24"),
        "{e}"
    );
    assert_eq!(
        a.fails("CHECK", &c)["msg"],
        "ptp: Required prevResult missing"
    );
    a.ok("STATUS", &c, None);

    // The pod vanished without DEL: GC with no valid attachment removes its rules and lease.
    drop(pod);
    assert!(!masquerade_rules(&host).is_empty());
    let mut gc = c.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "other", "ifname": "eth0"}]);
    a.ok("GC", &gc, None);
    assert!(
        masquerade_rules(&host).is_empty(),
        "{:?}",
        masquerade_rules(&host)
    );
    assert!(leases(&ipam).is_empty());
}

#[test]
fn kindnet_example_runs() {
    require_root!();
    let r = run_example("ptp-kindnet.conflist", |_| {});
    assert_eq!(r["ips"][0]["address"], "10.244.0.2/24");
    assert_eq!(r["interfaces"][1]["name"], "eth0");
}

/// CNI_NETNS naming the plugin's own netns is refused before anything is done (code 8, the
/// reference's text): no veth, no lease. The reference refuses only after its ADD did the
/// work. `CNI_NETNS_OVERRIDE` lifts the refusal for the values the reference accepts (`1`,
/// `true` in any case) and Go's ParseBool adds (`t`); others do not.
#[test]
fn own_netns_is_refused_before_any_work() {
    require_root!();
    let host = Netns::new("ptp-own-h");
    let ipam = TempDir::new("ptp-own-ipam");
    let ours = Impl::ours("ptp");
    let c = ptp_conf("1.0.0", &ipam, false, json!({}));
    let run = |imp: &Impl, command: &str, over: Option<&str>| {
        Attachment::new(imp, &host, "own-ns", &host)
            .env("CNI_NETNS_OVERRIDE", over)
            .call(command, &c)
    };
    let links_before = links_of_kind(&host, "veth");
    for over in [None, Some(""), Some("0"), Some("false"), Some("yes")] {
        let out = run(&ours, "ADD", over);
        assert!(!out.status.success(), "{over:?}");
        let e: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(e["code"], 8, "{over:?}: {e}");
        assert_eq!(
            e["msg"], "plugin's netns and netns from CNI_NETNS should not be the same",
            "{e}"
        );
    }
    assert_eq!(
        links_of_kind(&host, "veth"),
        links_before,
        "a veth was made"
    );
    assert!(leases(&ipam).is_empty(), "a lease was taken");
    // The override: host-local (which only writes its store) runs for each accepted value.
    let host_local = ours.host_local();
    for over in ["1", "true", "TRUE", "True", "t"] {
        let out = run(&host_local, "ADD", Some(over));
        assert!(
            out.status.success(),
            "CNI_NETNS_OVERRIDE={over}: {}",
            text(&out.stdout)
        );
        assert_eq!(leases(&ipam).len(), 1, "{over}");
        let out = run(&host_local, "DEL", Some(over));
        assert!(out.status.success(), "{over}: {}", text(&out.stdout));
        assert!(leases(&ipam).is_empty());
    }
}
