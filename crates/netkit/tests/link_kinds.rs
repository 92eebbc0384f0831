//! Root tests of the link kinds, taps, moves and the uplink lookup, each in its own netns.
//! Kinds this kernel lacks (ipvlan, vlan, dummy here) are skipped with a printed reason; their
//! requests are checked byte for byte against iproute2's in `src/link_kinds.rs`.

use netkit::link::VethSpec;
use netkit::link_kinds::{
    ipvlan_mode, macvlan_mode, vlan_id, IpvlanSpec, MacvlanSpec, NewLinkBase, VlanSpec,
};
use netkit::packet_route::link::{IpVlanFlags, IpVlanMode, MacVlanMode};
use netkit::route::Route;
use netkit::skip_unless_root;
use netkit::tap::{create_tap, TapSpec};
use netkit::testutil::TestNetns;
use netkit::Socket;

/// A netns holding a veth pair `p0`/`p1`; returns it and p0's index.
fn with_parent(prefix: &str) -> (TestNetns, Socket, u32) {
    let ns = TestNetns::new(prefix);
    let mut s = ns.socket().unwrap();
    s.create_veth(&VethSpec {
        name: "p0",
        peer_name: "p1",
        ..Default::default()
    })
    .unwrap();
    let index = s.link_by_name("p0").unwrap().index;
    (ns, s, index)
}

/// Whether the kernel knows `kind` ("Unknown device type" is EOPNOTSUPP).
fn unsupported(e: &netkit::Error) -> bool {
    e.errno() == Some(libc::EOPNOTSUPP)
}

#[test]
fn macvlan_is_born_in_the_target_netns_with_its_mode() {
    skip_unless_root!();
    let (host, mut s, parent) = with_parent("nk-mv-h");
    let pod = TestNetns::new("nk-mv-p");
    let pod_ns = pod.open().unwrap();
    let spec = MacvlanSpec {
        base: NewLinkBase {
            name: "veth0000abcd",
            parent: Some(parent),
            netns: Some(&pod_ns),
            mtu: Some(1400),
            mac: Some([2, 0, 0, 0, 0, 7]),
        },
        mode: MacVlanMode::Vepa,
        bc_queue_len: Some(123),
    };
    s.create_macvlan(&spec).unwrap();
    assert!(s.find_link("veth0000abcd").unwrap().is_none());
    let mut p = pod.socket().unwrap();
    let link = p.link_by_name("veth0000abcd").unwrap();
    assert_eq!(macvlan_mode(&link), Some(MacVlanMode::Vepa));
    assert_eq!(
        (link.mtu, link.mac_string().as_str()),
        (1400, "02:00:00:00:00:07")
    );
    let detail = pod.ip(&["-d", "link", "show", "veth0000abcd"]);
    assert!(detail.contains("bcqueuelen 123"), "{detail}");
    drop(host);
}

#[test]
fn ipvlan_vlan_and_dummy_work_where_the_kernel_has_them() {
    skip_unless_root!();
    let (ns, mut s, parent) = with_parent("nk-kinds");
    let on_parent = |name| NewLinkBase {
        name,
        parent: Some(parent),
        ..Default::default()
    };
    match s.create_ipvlan(&IpvlanSpec {
        base: on_parent("iv0"),
        mode: IpVlanMode::L3S,
        flags: IpVlanFlags::Private,
    }) {
        Ok(()) => {
            let link = s.link_by_name("iv0").unwrap();
            assert_eq!(
                ipvlan_mode(&link),
                Some((IpVlanMode::L3S, IpVlanFlags::Private))
            );
        }
        Err(e) if unsupported(&e) => {
            eprintln!("skipping ipvlan: kernel has no ipvlan driver ({e})")
        }
        Err(e) => panic!("{e}"),
    }
    match s.create_vlan(&VlanSpec {
        base: on_parent("vl0"),
        id: 42,
    }) {
        Ok(()) => assert_eq!(vlan_id(&s.link_by_name("vl0").unwrap()), Some(42)),
        Err(e) if unsupported(&e) => eprintln!("skipping vlan: kernel has no 802.1q driver ({e})"),
        Err(e) => panic!("{e}"),
    }
    match s.create_dummy(&NewLinkBase {
        name: "dm0",
        ..Default::default()
    }) {
        Ok(()) => assert!(s.link_by_name("dm0").unwrap().is_kind("dummy")),
        Err(e) if unsupported(&e) => eprintln!("skipping dummy: kernel has no dummy driver ({e})"),
        Err(e) => panic!("{e}"),
    }
    drop(ns);
}

#[test]
fn tap_is_persistent_with_owner_group_and_queues() {
    skip_unless_root!();
    let ns = TestNetns::new("nk-tap");
    let netns = ns.open().unwrap();
    create_tap(
        &netns,
        &TapSpec {
            name: "tap7",
            multi_queue: true,
            owner: Some(1234),
            group: Some(5678),
            ..Default::default()
        },
    )
    .unwrap();
    let detail = ns.ip(&["-d", "link", "show", "tap7"]);
    for want in [
        "tun type tap",
        "pi off",
        "vnet_hdr off",
        "persist on",
        "multi_queue",
        "user 1234",
        "group 5678",
    ] {
        assert!(detail.contains(want), "{want}: {detail}");
    }
    // A name taken in the netns fails cleanly.
    assert!(create_tap(
        &netns,
        &TapSpec {
            name: "tap7",
            ..Default::default()
        }
    )
    .is_err());
    create_tap(
        &netns,
        &TapSpec {
            name: "tap8",
            vnet_hdr: true,
            packet_info: true,
            ..Default::default()
        },
    )
    .unwrap();
    let detail = ns.ip(&["-d", "link", "show", "tap8"]);
    assert!(
        detail.contains("pi on") && detail.contains("vnet_hdr on"),
        "{detail}"
    );
    assert!(!detail.contains("user "), "{detail}");
}

#[test]
fn move_link_keeps_the_name_and_refuses_a_clash() {
    skip_unless_root!();
    let (host, mut s, p0) = with_parent("nk-mvl-h");
    let pod = TestNetns::new("nk-mvl-p");
    let pod_ns = pod.open().unwrap();
    let mut p = pod.socket().unwrap();
    // The pod already has a "p0": the move must fail and leave ours in place.
    p.create_veth(&VethSpec {
        name: "p0",
        peer_name: "q0",
        ..Default::default()
    })
    .unwrap();
    let e = s.move_link(p0, &pod_ns).unwrap_err();
    assert!(e.is_exists(), "{e}");
    assert!(s.find_link("p0").unwrap().is_some());
    p.delete_link_by_name("p0").unwrap();
    s.move_link(p0, &pod_ns).unwrap();
    assert!(s.find_link("p0").unwrap().is_none());
    let moved = p.link_by_name("p0").unwrap();
    p.set_link_name(moved.index, "net1").unwrap();
    let host_ns = host.open().unwrap();
    p.move_link(moved.index, &host_ns).unwrap();
    assert!(s.find_link("net1").unwrap().is_some());
}

#[test]
fn default_route_link_is_the_first_default_routes_device() {
    skip_unless_root!();
    let (ns, mut s, p0) = with_parent("nk-uplink");
    assert!(s.default_route_link().unwrap().is_none());
    s.set_link_up(p0).unwrap();
    let p1 = s.link_by_name("p1").unwrap().index;
    s.set_link_up(p1).unwrap();
    s.add_address(p1, "10.9.0.1/24".parse().unwrap(), &Default::default())
        .unwrap();
    s.add_route(&Route::new("0.0.0.0/0".parse().unwrap()).via("10.9.0.254".parse().unwrap()))
        .unwrap();
    assert_eq!(s.default_route_link().unwrap().unwrap().name, "p1");
    drop(ns);
}
