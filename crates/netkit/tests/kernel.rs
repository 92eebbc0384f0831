//! Root tests: every test builds its own netns (unique name, removed on drop) and checks
//! outcomes both through netlink and through `ip -j`.

use netkit::addr::{AddressOptions, Family};
use netkit::link::{BridgeOptions, VethSpec};
use netkit::netns::{self, Netns};
use netkit::route::Route;
use netkit::rtnetlink::{LinkIfb, LinkUnspec};
use netkit::skip_unless_root;
use netkit::sysctl;
use netkit::testutil::TestNetns;

fn ip_link(ns: &TestNetns, name: &str) -> serde_json::Value {
    ns.ip_json(&["link", "show", "dev", name])[0].clone()
}

fn add_ifb(ns: &TestNetns, name: &str) -> u32 {
    let mut s = ns.socket().unwrap();
    s.create_link(LinkIfb::new(name).build()).unwrap();
    s.link_by_name(name).unwrap().index
}

#[test]
fn fresh_netns_has_only_lo_and_it_goes_up_and_down() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-lo");
    let mut s = ns.socket().unwrap();
    let links = s.links().unwrap();
    assert_eq!(
        links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["lo"]
    );
    let lo = s.link_by_name("lo").unwrap();
    // `ip netns add` leaves lo down.
    assert!(!lo.is_up());
    s.set_link_up(lo.index).unwrap();
    assert!(s.link_by_index(lo.index).unwrap().is_up());
    let flags = ip_link(&ns, "lo")["flags"].to_string();
    assert!(flags.contains("\"UP\""), "{flags}");
    s.set_link_down(lo.index).unwrap();
    assert!(!s.link_by_name("lo").unwrap().is_up());
}

#[test]
fn missing_link_is_not_found_with_context() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-nf");
    let mut s = ns.socket().unwrap();
    let e = s.link_by_name("nope0").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(e.errno(), Some(libc::ENODEV));
    assert_eq!(
        e.to_string(),
        "failed to find link \"nope0\": No such device (os error 19)"
    );
    assert!(s.find_link("nope0").unwrap().is_none());
    assert!(s.link_by_index(9999).unwrap_err().is_not_found());
    assert!(!s.delete_link_by_name("nope0").unwrap());
    assert!(s.delete_link(9999).unwrap_err().is_not_found());
}

#[test]
fn bridge_creation_is_idempotent_and_rejects_non_bridges() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-br");
    let mut s = ns.socket().unwrap();
    let opts = BridgeOptions {
        mtu: Some(1400),
        mac: Some([0x02, 0, 0, 0, 0xbb, 1]),
        ..Default::default()
    };
    let br = s.ensure_bridge("cni-test0", &opts).unwrap();
    assert!(br.is_kind("bridge"));
    assert_eq!(br.mtu, 1400);
    let again = s
        .ensure_bridge("cni-test0", &BridgeOptions::default())
        .unwrap();
    assert_eq!(again.index, br.index);
    let j = ns.ip_json(&["-d", "link", "show", "cni-test0"]);
    assert_eq!(j[0]["linkinfo"]["info_kind"], "bridge");
    assert_eq!(j[0]["address"], "02:00:00:00:bb:01");
    assert_eq!(j[0]["mtu"], 1400);

    // Kernels built without CONFIG_BRIDGE_VLAN_FILTERING answer EOPNOTSUPP.
    let vf = BridgeOptions {
        vlan_filtering: Some(true),
        ..Default::default()
    };
    match s.ensure_bridge("cni-vf0", &vf) {
        Ok(_) => assert_eq!(
            ns.ip_json(&["-d", "link", "show", "cni-vf0"])[0]["linkinfo"]["info_data"]
                ["vlan_filtering"],
            1
        ),
        Err(e) => assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}"),
    }

    add_ifb(&ns, "notabr");
    let e = s
        .ensure_bridge("notabr", &BridgeOptions::default())
        .unwrap_err();
    assert!(e.is_conflict());
    assert_eq!(
        e.to_string(),
        "failed to create bridge \"notabr\": \"notabr\" already exists but is not a bridge"
    );
}

#[test]
fn veth_peer_is_created_directly_in_the_other_netns() {
    skip_unless_root!();
    let host = TestNetns::new("nk-vh");
    let cont = TestNetns::new("nk-vc");
    let cont_ns = cont.open().unwrap();
    let mut hs = host.socket().unwrap();
    let mut cs = cont.socket().unwrap();
    let br = hs.ensure_bridge("br0", &BridgeOptions::default()).unwrap();
    // A host link named like the container end must not clash.
    add_ifb(&host, "eth0");

    let spec = VethSpec {
        name: "veth1234",
        peer_name: "eth0",
        peer_netns: Some(&cont_ns),
        mtu: Some(1450),
        mac: Some([0x02, 0, 0, 0, 0, 0x01]),
        peer_mac: Some([0x02, 0, 0, 0, 0, 0x02]),
        master: Some(br.index),
        up: true,
        peer_up: false,
    };
    hs.create_veth(&spec).unwrap();

    let hv = hs.link_by_name("veth1234").unwrap();
    let cv = cs.link_by_name("eth0").unwrap();
    assert!(hv.is_kind("veth") && cv.is_kind("veth"));
    assert_eq!((hv.mtu, cv.mtu), (1450, 1450));
    assert_eq!(hv.mac_string(), "02:00:00:00:00:01");
    assert_eq!(cv.mac_string(), "02:00:00:00:00:02");
    assert_eq!(hv.master, Some(br.index));
    assert!(hv.is_up() && !cv.is_up());
    assert_eq!(hs.veth_peer_index(hv.index).unwrap(), cv.index);
    assert_eq!(cs.veth_peer_index(cv.index).unwrap(), hv.index);
    assert_eq!(
        hs.links_with_master(br.index)
            .unwrap()
            .iter()
            .map(|l| l.index)
            .collect::<Vec<_>>(),
        [hv.index]
    );
    let j = ip_link(&cont, "eth0");
    assert_eq!(j["address"], "02:00:00:00:00:02");
    assert_eq!(j["mtu"], 1450);

    // Same names again: EEXIST.
    let e = hs.create_veth(&spec).unwrap_err();
    assert!(e.is_exists(), "{e}");

    hs.set_link_nomaster(hv.index).unwrap();
    assert_eq!(hs.link_by_index(hv.index).unwrap().master, None);
    // Deleting one end removes the other.
    hs.delete_link(hv.index).unwrap();
    assert!(cs.link_by_name("eth0").unwrap_err().is_not_found());
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

#[test]
fn a_new_veth_is_described_by_the_kernel_as_lookups_show_it() {
    skip_unless_root!();
    let host = TestNetns::new("nk-dh");
    let cont = TestNetns::new("nk-dc");
    let cont_ns = cont.open().unwrap();
    let mut hs = host.socket().unwrap();
    let mut cs = cont.socket().unwrap();
    let br = hs.ensure_bridge("br0", &BridgeOptions::default()).unwrap();
    let spec = VethSpec {
        name: "veth5678",
        peer_name: "eth0",
        peer_netns: Some(&cont_ns),
        mtu: Some(1400),
        peer_mac: Some([0x02, 0, 0, 0, 0, 0x07]),
        master: Some(br.index),
        ..Default::default()
    };
    let described = hs.create_veth_described(&spec, &mut cs).unwrap();
    let hv = hs.link_by_name("veth5678").unwrap();
    let cv = cs.link_by_name("eth0").unwrap();
    match described {
        Some((here, peer)) => {
            for (d, l) in [(&here, &hv), (&peer, &cv)] {
                assert_eq!(
                    (&d.name, d.index, d.mtu, d.mac_string(), d.link, d.master),
                    (&l.name, l.index, l.mtu, l.mac_string(), l.link, l.master)
                );
            }
            assert_eq!(peer.mac_string(), "02:00:00:00:00:07");
            assert_eq!(here.master, Some(br.index));
        }
        // Only a kernel before 6.3 leaves a new link undescribed.
        None => assert!(!kernel_at_least(6, 3), "no description on a 6.3+ kernel"),
    }
    // The watch ended with the request: the socket still answers its own requests, and a
    // second pair still fails with EEXIST.
    let e = hs.create_veth_described(&spec, &mut cs).unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert_eq!(cs.link_by_name("eth0").unwrap().index, cv.index);
}

#[test]
fn link_attribute_setters() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-set");
    let mut s = ns.socket().unwrap();
    s.create_veth(&VethSpec {
        name: "d0",
        peer_name: "d0p",
        ..Default::default()
    })
    .unwrap();
    let idx = s.link_by_name("d0").unwrap().index;
    s.set_link_mtu(idx, 1280).unwrap();
    s.set_link_mac(idx, &[0x0a, 0x58, 0, 0, 0, 0x09]).unwrap();
    s.set_link_promisc(idx, true).unwrap();
    s.set_link_txqueuelen(idx, 500).unwrap();
    let l = s.link_by_index(idx).unwrap();
    assert_eq!(
        (l.mtu, l.mac_string().as_str(), l.txqueuelen),
        (1280, "0a:58:00:00:00:09", 500)
    );
    assert!(l.is_promisc() && l.promiscuity >= 1);
    let j = ip_link(&ns, "d0");
    assert!(j["flags"].to_string().contains("PROMISC"));
    assert_eq!(j["txqlen"], 500);
    s.set_link_promisc(idx, false).unwrap();
    assert!(!s.link_by_index(idx).unwrap().is_promisc());
    s.set_link_name(idx, "renamed0").unwrap();
    assert_eq!(s.link_by_index(idx).unwrap().name, "renamed0");
    let e = s.set_link_mtu(idx, 10).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("failed to set MTU 10 on renamed0: Invalid argument"),
        "{e}"
    );
    assert!(s.delete_link_by_name("renamed0").unwrap());
}

#[test]
fn link_moves_to_another_netns() {
    skip_unless_root!();
    let a = TestNetns::new("nk-mva");
    let b = TestNetns::new("nk-mvb");
    let idx = add_ifb(&a, "mv0");
    let mut sa = a.socket().unwrap();
    sa.set_link_netns(idx, &b.open().unwrap()).unwrap();
    assert!(sa.find_link("mv0").unwrap().is_none());
    assert!(b.socket().unwrap().find_link("mv0").unwrap().is_some());
}

#[test]
fn addresses_add_list_delete() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-addr");
    let idx = add_ifb(&ns, "eth0");
    let mut s = ns.socket().unwrap();
    s.set_link_up(idx).unwrap();
    let v4 = "10.1.2.3/24".parse().unwrap();
    let v6 = "fd00:1::5/64".parse().unwrap();
    s.add_address(idx, v4, &AddressOptions::default()).unwrap();
    s.add_address(
        idx,
        v6,
        &AddressOptions {
            nodad: true,
            ..Default::default()
        },
    )
    .unwrap();

    let got4 = s.addresses(Some(idx), Family::V4).unwrap();
    assert_eq!(
        got4.iter()
            .map(|a| a.address.to_string())
            .collect::<Vec<_>>(),
        ["10.1.2.3/24"]
    );
    let got6 = s.addresses(Some(idx), Family::V6).unwrap();
    let global6: Vec<_> = got6
        .iter()
        .filter(|a| !a.ip().to_string().starts_with("fe80"))
        .collect();
    assert_eq!(global6.len(), 1);
    assert_eq!(global6[0].address.to_string(), "fd00:1::5/64");
    assert!(global6[0]
        .flags
        .contains(netkit::packet_route::address::AddressFlags::Nodad));

    let j = ns.ip_json(&["addr", "show", "dev", "eth0"]);
    let infos = j[0]["addr_info"].as_array().unwrap();
    let v4info = infos.iter().find(|a| a["family"] == "inet").unwrap();
    assert_eq!(v4info["local"], "10.1.2.3");
    assert_eq!(v4info["prefixlen"], 24);
    assert_eq!(v4info["broadcast"], "10.1.2.255");
    assert!(infos.iter().any(|a| a["local"] == "fd00:1::5"));

    let any = s.addresses(Some(idx), Family::Any).unwrap();
    assert!(any.iter().any(|a| a.address == v4) && any.iter().any(|a| a.address == v6));
    assert!(any.iter().all(|a| a.index == idx));

    let e = s
        .add_address(idx, v4, &AddressOptions::default())
        .unwrap_err();
    assert!(e.is_exists());
    // The kernel's extended ack, when present, follows in parentheses.
    assert!(
        e.to_string()
            .starts_with("failed to add address 10.1.2.3/24 to eth0: File exists (os error 17)"),
        "{e}"
    );
    s.add_address(
        idx,
        v4,
        &AddressOptions {
            replace: true,
            ..Default::default()
        },
    )
    .unwrap();

    s.delete_address(idx, v4).unwrap();
    let e = s.delete_address(idx, v4).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(s.addresses(Some(idx), Family::V4).unwrap().is_empty());
    // lo's addresses are not mixed in.
    assert!(s
        .addresses(None, Family::V4)
        .unwrap()
        .iter()
        .all(|a| a.index == idx || a.ip().is_loopback()));
}

#[test]
fn routes_add_replace_list_delete() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-rt");
    let idx = add_ifb(&ns, "eth0");
    let mut s = ns.socket().unwrap();
    s.set_link_up(idx).unwrap();
    s.add_address(
        idx,
        "10.1.2.3/24".parse().unwrap(),
        &AddressOptions::default(),
    )
    .unwrap();
    s.add_address(
        idx,
        "fd00:1::5/64".parse().unwrap(),
        &AddressOptions {
            nodad: true,
            ..Default::default()
        },
    )
    .unwrap();

    let r = Route::new("10.9.0.0/16".parse().unwrap())
        .via("10.1.2.1".parse().unwrap())
        .dev(idx);
    s.add_route(&r).unwrap();
    let e = s.add_route(&r).unwrap_err();
    assert!(e.is_exists());
    assert!(
        e.to_string().starts_with(
            "failed to add route 10.9.0.0/16 via 10.1.2.1 dev eth0: File exists (os error 17)"
        ),
        "{e}"
    );
    s.replace_route(&r).unwrap();

    let mut metric = r.clone();
    metric.dst = "10.8.0.0/16".parse().unwrap();
    metric.priority = Some(50);
    metric.mtu = Some(1300);
    s.add_route(&metric).unwrap();

    let mut onlink = Route::new("0.0.0.0/0".parse().unwrap())
        .via("192.168.77.1".parse().unwrap())
        .dev(idx);
    onlink.onlink = true;
    s.add_route(&onlink).unwrap();

    let mut other_table = Route::new("10.7.0.0/16".parse().unwrap()).dev(idx);
    other_table.table = Some(100);
    s.add_route(&other_table).unwrap();

    let v6 = Route::new("fd00:9::/48".parse().unwrap())
        .via("fd00:1::1".parse().unwrap())
        .dev(idx);
    s.add_route(&v6).unwrap();

    let main4 = s
        .routes(Family::V4, Some(netkit::route::TABLE_MAIN))
        .unwrap();
    let find = |dst: &str| main4.iter().find(|x| x.dst.to_string() == dst).cloned();
    let got = find("10.9.0.0/16").unwrap();
    assert_eq!((got.gateway, got.oif), (r.gateway, Some(idx)));
    let got = find("10.8.0.0/16").unwrap();
    assert_eq!((got.priority, got.mtu), (Some(50), Some(1300)));
    let got = find("0.0.0.0/0").unwrap();
    assert!(got.onlink);
    assert!(find("10.7.0.0/16").is_none());
    let t100 = s.routes(Family::V4, Some(100)).unwrap();
    assert_eq!(t100.len(), 1);
    let all = s.routes(Family::Any, None).unwrap();
    assert!(all.iter().any(|x| x.dst.to_string() == "fd00:9::/48"));
    assert!(all.iter().any(|x| x.dst.to_string() == "10.7.0.0/16"));
    let v6s = s.routes(Family::V6, None).unwrap();
    assert!(v6s
        .iter()
        .any(|x| x.dst.to_string() == "fd00:9::/48" && x.gateway == v6.gateway));

    let j = ns.ip_json(&["route", "show"]);
    let text = j.to_string();
    assert!(
        text.contains("\"dst\":\"10.9.0.0/16\"") && text.contains("\"gateway\":\"10.1.2.1\""),
        "{text}"
    );
    assert!(text.contains("\"onlink\""), "{text}");
    let j = ns.ip_json(&["route", "show", "table", "100"]);
    assert_eq!(j[0]["dst"], "10.7.0.0/16");

    s.delete_route(&r).unwrap();
    let e = s.delete_route(&r).unwrap_err();
    assert!(e.is_not_found(), "{e}");
    s.delete_route(&v6).unwrap();
    s.delete_route(&other_table).unwrap();
    assert!(s.routes(Family::V4, Some(100)).unwrap().is_empty());
}

#[test]
fn large_dumps_are_read_to_completion() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-dump");
    let mut s = ns.socket().unwrap();
    for i in 0..300 {
        s.create_link(LinkIfb::new(&format!("dm{i}")).build())
            .unwrap();
    }
    let links = s.links().unwrap();
    assert_eq!(links.len(), 301);
    // The socket stays usable after a multi-datagram dump.
    assert!(s.link_by_name("dm299").is_ok());
    let idx = s.link_by_name("dm0").unwrap().index;
    for i in 0..300u32 {
        let a = format!("10.{}.{}.1/32", i / 250, i % 250);
        s.add_address(idx, a.parse().unwrap(), &AddressOptions::default())
            .unwrap();
    }
    assert_eq!(s.addresses(Some(idx), Family::V4).unwrap().len(), 300);
}

#[test]
fn netns_guard_enters_and_restores() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-guard");
    let target = ns.open().unwrap();
    let me = Netns::current().unwrap();
    assert!(!target.is_current().unwrap());
    {
        let _g = target.enter().unwrap();
        assert!(target.is_current().unwrap());
        assert!(!me.is_current().unwrap());
    }
    assert!(me.is_current().unwrap());
    let inside = netns::run_in(&target, || netns::is_current(&target).unwrap()).unwrap();
    assert!(inside);
    assert!(!target.is_current().unwrap());
    // A socket opened in the netns keeps working there after we left.
    let mut s = netkit::Socket::open_in(&target).unwrap();
    assert!(me.is_current().unwrap());
    assert_eq!(s.links().unwrap().len(), 1);
}

#[test]
fn nested_switches_come_back_to_the_netns_the_thread_was_in() {
    skip_unless_root!();
    let (a, b) = (TestNetns::new("nk-nest-a"), TestNetns::new("nk-nest-b"));
    let (a, b) = (a.open().unwrap(), b.open().unwrap());
    let me = Netns::current().unwrap();
    {
        let _in_a = a.enter().unwrap();
        {
            let _in_b = b.enter().unwrap();
            assert!(b.is_current().unwrap());
        }
        assert!(a.is_current().unwrap(), "back in the netns entered first");
    }
    assert!(me.is_current().unwrap());
}

#[test]
fn sysctl_writes_stay_in_the_target_netns() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-sysctl");
    let target = ns.open().unwrap();
    let outside_before = sysctl::read("net.ipv4.ip_forward").unwrap();
    sysctl::write_in(&target, "net.ipv4.ip_forward", "1").unwrap();
    assert_eq!(
        sysctl::read_in(&target, "net/ipv4/ip_forward").unwrap(),
        "1"
    );
    assert!(!sysctl::write_if_different_in(&target, "net.ipv4.ip_forward", "1").unwrap());
    assert_eq!(sysctl::read("net.ipv4.ip_forward").unwrap(), outside_before);
    let e = sysctl::write_in(&target, "net.ipv4.conf.nope0.forwarding", "1").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(e.to_string().contains("net.ipv4.conf.nope0.forwarding"));
}

#[test]
fn set_link_on_index_uses_builder() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-bld");
    let idx = add_ifb(&ns, "d1");
    let mut s = ns.socket().unwrap();
    s.set_link(
        idx,
        "set up and rename",
        |b: netkit::rtnetlink::LinkMessageBuilder<LinkUnspec>| b.up().name("d2"),
    )
    .unwrap();
    let l = s.link_by_index(idx).unwrap();
    assert!(l.is_up() && l.name == "d2");
}

#[test]
fn a_link_lookup_reports_the_ipv6_accept_ra_the_sysctl_shows() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-ra");
    let netns = ns.open().unwrap();
    let mut s = ns.socket().unwrap();
    let br = s
        .ensure_bridge("cni-ra0", &BridgeOptions::default())
        .unwrap();
    let key = "net/ipv6/conf/cni-ra0/accept_ra";
    let inherited: i32 = sysctl::read_in(&netns, key)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(br.ipv6_accept_ra(), Some(inherited));
    for value in ["2", "0"] {
        sysctl::write_in(&netns, key, value).unwrap();
        let link = s.link_by_name("cni-ra0").unwrap();
        assert_eq!(link.ipv6_accept_ra(), Some(value.parse().unwrap()));
    }
    // IPv6 disabled on the link keeps its configuration, and the value with it.
    sysctl::write_in(&netns, "net/ipv6/conf/cni-ra0/disable_ipv6", "1").unwrap();
    assert_eq!(s.link_by_name("cni-ra0").unwrap().ipv6_accept_ra(), Some(0));
}
