//! tap end to end (Debian's reference v1.1.1 has no tap plugin, so ours alone): the device's
//! flags, owner and group as the reference makes them on each of its two creation paths, MAC,
//! MTU, multi-queue, a bridge port inside the pod, IPAM; rollback, DEL, CHECK.

mod main_support;

use main_support::*;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::{json, Value};

fn tap_conf(version: &str, ipam: Option<&TempDir>, extra: Value) -> Value {
    conf(
        version,
        "tap",
        ipam,
        json!([[{"subnet": "10.98.0.0/24"}]]),
        extra,
    )
}

fn detail(pod: &Netns) -> String {
    pod.exec_ok(&["ip", "-d", "link", "show", "eth0"])
}

#[test]
fn layer3_tap_with_mac_mtu_and_queues() {
    require_root!();
    let host = Netns::new("tap-h");
    let pod = Netns::new("tap-p");
    let ipam = TempDir::new("tap-ipam");
    let c = tap_conf(
        "1.0.0",
        Some(&ipam),
        json!({"multiQueue": true, "mtu": 1400,
        "mac": "02:98:00:00:00:01", "selinuxContext": "system_u:system_r:svirt_t:s0",
        "dns": {"nameservers": ["10.98.0.53"]}}),
    );
    let a = Attachment::new(&Impl::ours("tap"), &host, "tappod", &pod);
    let r = a.add(&c);
    assert_eq!(
        normalize(r.clone()),
        json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "mac": "<mac>", "sandbox": "<netns>"}],
            "ips": [{"interface": 0, "address": "10.98.0.2/24", "gateway": "10.98.0.1"}],
            "dns": {"nameservers": ["10.98.0.53"]}})
    );
    assert_eq!(r["interfaces"][0]["mac"], "02:98:00:00:00:01");
    let d = detail(&pod);
    // `ip tuntap add mode tap multi_queue`, as the reference without owner and group.
    for want in [
        "tun type tap pi off vnet_hdr off multi_queue",
        "persist on",
        "mtu 1400",
        "02:98:00:00:00:01",
    ] {
        assert!(d.contains(want), "{want}: {d}");
    }
    assert!(pod.link_is_up("eth0"));
    assert_eq!(global_addrs(&pod, "eth0"), ["10.98.0.2/24"]);
    assert!(
        links_of_kind(&host, "tun").is_empty(),
        "nothing on the host"
    );
    a.check_ok(&c, &r);
    a.del(&c, Some(&r));
    assert!(pod.link("eth0").is_none() && leases(&ipam).is_empty());
}

#[test]
fn owner_group_and_a_bridge_port_in_the_pod() {
    require_root!();
    let host = Netns::new("tap-og-h");
    let pod = Netns::new("tap-og-p");
    pod.exec_ok(&["ip", "link", "add", "br0", "type", "bridge"]);
    let ours = Impl::ours("tap");
    for (extra, flags, ids) in [
        // Both given: the reference's netlink path, IFF_VNET_HDR without IFF_NO_PI.
        // (IDs without names, so `ip` prints them as numbers.)
        (
            json!({"owner": 64123, "group": 64124}),
            "pi on vnet_hdr on",
            vec!["user 64123", "group 64124"],
        ),
        (
            json!({"owner": 64123, "group": 64124, "multiQueue": true}),
            "pi off vnet_hdr on multi_queue",
            vec!["user 64123"],
        ),
        // One of them: `ip tuntap add ... user N`.
        (
            json!({"owner": 64125}),
            "pi off vnet_hdr off",
            vec!["user 64125"],
        ),
    ] {
        let mut extra = extra;
        extra["bridge"] = json!("br0");
        let c = tap_conf("1.1.0", None, extra.clone());
        let a = Attachment::new(&ours, &host, "ogpod", &pod);
        let r = a.add(&c);
        let d = detail(&pod);
        assert!(d.contains(flags), "{extra}: {d}");
        for id in ids {
            assert!(d.contains(id), "{extra}: {id}: {d}");
        }
        assert!(d.contains("master br0"), "{d}");
        a.check_ok(&c, &r);
        a.ok("STATUS", &c, None);
        a.del(&c, Some(&r));
        assert!(pod.link("eth0").is_none());
    }
}

#[test]
fn failures_roll_back_and_del_is_tolerant() {
    require_root!();
    let host = Netns::new("tap-rb-h");
    let pod = Netns::new("tap-rb-p");
    let ipam = TempDir::new("tap-rb-ipam");
    let ours = Impl::ours("tap");
    let a = Attachment::new(&ours, &host, "rbpod", &pod);
    // The bridge is not in the pod: the new tap goes, no lease is taken.
    let e = a.fails(
        "ADD",
        &tap_conf("1.0.0", Some(&ipam), json!({"bridge": "nobr0"})),
    );
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .starts_with("failed to get bridge nobr0"),
        "{e}"
    );
    assert!(links_of_kind(&pod, "tun").is_empty() && leases(&ipam).is_empty());
    // IPAM fails after the tap exists: the tap goes.
    let mut bad = tap_conf("1.0.0", Some(&ipam), json!({}));
    bad["ipam"]["ranges"] = json!([[{"subnet": "10.98.0.0/32"}]]);
    a.fails("ADD", &bad);
    assert!(links_of_kind(&pod, "tun").is_empty());
    // A layer-2 result cannot be printed as 0.2.0.
    a.fails("ADD", &tap_conf("0.2.0", None, json!({})));
    assert!(links_of_kind(&pod, "tun").is_empty());
    assert_eq!(
        a.fails("ADD", &tap_conf("1.0.0", None, json!({"owner": "root"})))["msg"],
        "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.owner of type uint32"
    );

    let c = tap_conf("1.0.0", Some(&ipam), json!({}));
    let r = a.add(&c);
    let mut wrong = r.clone();
    wrong["interfaces"][0]["mac"] = json!("02:00:00:00:00:99");
    assert!(a.fails("CHECK", &with_prev(&c, Some(&wrong)))["msg"]
        .as_str()
        .unwrap()
        .contains("doesn't match container Mac"));
    pod.exec_ok(&["ip", "link", "del", "eth0"]);
    a.del(&c, Some(&r));
    assert!(leases(&ipam).is_empty());
    a.add(&c);
    drop(pod);
    a.del(&c, None);
    assert!(leases(&ipam).is_empty());
}

#[test]
fn example_runs() {
    require_root!();
    let r = run_example("tap-vm.conflist", |_| {});
    assert_eq!(r["interfaces"][0]["name"], "eth0");
}
