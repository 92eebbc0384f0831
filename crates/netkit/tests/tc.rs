//! Root tests of `netkit::tc` in a throw-away netns: what is written over netlink is read back
//! over netlink exactly (TBF incl. the 64-bit rate, ingress qdisc, u32 redirect filter), and
//! iproute2 agrees.

use netkit::packet_route::tc::{TcActionType, TcHandle, TcMirrorActionType};
use netkit::tc::{FilterAction, Tbf, ETH_P_ALL, INGRESS_HANDLE};
use netkit::testutil::TestNetns;
use netkit::VethSpec;

const ROOT_1: TcHandle = TcHandle { major: 1, minor: 0 };

fn tc_json(ns: &TestNetns, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns.name(), "tc", "-j"])
        .args(args)
        .output()
        .expect("run tc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tc json")
}

#[test]
fn tbf_ingress_and_redirect_round_trip() {
    netkit::skip_unless_root!();
    let ns = TestNetns::new("tc");
    let mut sock = ns.socket().unwrap();
    sock.create_veth(&VethSpec {
        name: "tcv0",
        peer_name: "tcv1",
        up: true,
        ..Default::default()
    })
    .unwrap();
    let peer = sock.link_by_name("tcv1").unwrap();
    sock.set_link_up(peer.index).unwrap();
    let veth = sock.link_by_name("tcv0").unwrap();
    let ifb = sock.create_ifb("tcifb0", veth.mtu, 0).unwrap();
    assert!(ifb.is_kind("ifb") && ifb.is_up() && ifb.mtu == veth.mtu);
    assert_eq!(ifb.txqueuelen, 0);

    // 10 Mbit/s on the veth; 50 Gbit/s (needs TCA_TBF_RATE64) on the ifb.
    let slow = Tbf {
        rate: 1_250_000,
        limit: 41_250,
        buffer: 125_000,
    };
    let fast = Tbf {
        rate: 6_250_000_000,
        limit: 156_270_000,
        buffer: 46,
    };
    sock.add_tbf(veth.index, TcHandle::ROOT, ROOT_1, &slow)
        .unwrap();
    sock.add_tbf(ifb.index, TcHandle::ROOT, ROOT_1, &fast)
        .unwrap();
    let err = sock
        .add_tbf(veth.index, TcHandle::ROOT, ROOT_1, &slow)
        .unwrap_err();
    assert!(err.is_exists(), "{err}");
    assert!(err.to_string().contains("tcv0"), "{err}");

    sock.add_ingress_qdisc(veth.index).unwrap();
    sock.add_u32_redirect(
        veth.index,
        INGRESS_HANDLE,
        1,
        TcHandle { major: 1, minor: 1 },
        ifb.index,
    )
    .unwrap();

    let qdiscs = sock.qdiscs(veth.index).unwrap();
    let root = qdiscs.iter().find(|q| q.is_root()).unwrap();
    assert_eq!(
        (root.kind.as_str(), root.handle, root.tbf),
        ("tbf", ROOT_1, Some(slow))
    );
    let ingress = qdiscs.iter().find(|q| q.is_ingress()).unwrap();
    assert_eq!(ingress.handle, INGRESS_HANDLE);
    let ifb_root = sock
        .qdiscs(ifb.index)
        .unwrap()
        .into_iter()
        .find(|q| q.is_root())
        .unwrap();
    assert_eq!(ifb_root.tbf, Some(fast));

    let filters = sock.u32_filters(veth.index, INGRESS_HANDLE).unwrap();
    assert_eq!(filters.len(), 1, "{filters:?}");
    let f = &filters[0];
    assert_eq!(
        (f.priority, f.protocol, f.classid),
        (1, ETH_P_ALL, Some(TcHandle { major: 1, minor: 1 }))
    );
    assert!(f.matches_all());
    assert_eq!(
        f.actions,
        [FilterAction::Mirred {
            mode: TcMirrorActionType::EgressRedir,
            ifindex: ifb.index,
            verdict: TcActionType::Stolen
        }]
    );

    // iproute2 reads the same state.
    let q = tc_json(&ns, &["qdisc", "show", "dev", "tcifb0"]);
    assert_eq!(q[0]["options"]["rate"], 6_250_000_000u64);
    let q = tc_json(&ns, &["qdisc", "show", "dev", "tcv0", "root"]);
    assert_eq!(
        (
            &q[0]["options"]["rate"],
            &q[0]["options"]["burst"],
            &q[0]["options"]["lat"]
        ),
        (&1_250_000.into(), &10_000.into(), &25_000.into())
    );
    let filt = tc_json(&ns, &["filter", "show", "dev", "tcv0", "ingress"]);
    let node = filt
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["options"].get("actions").is_some())
        .unwrap();
    assert_eq!(node["protocol"], "all");
    assert_eq!(node["options"]["actions"][0]["to_dev"], "tcifb0");

    // Deleting the ingress qdisc takes the filter with it; the root TBF goes back to default.
    sock.delete_qdisc(veth.index, TcHandle::INGRESS, INGRESS_HANDLE)
        .unwrap();
    sock.delete_qdisc(veth.index, TcHandle::ROOT, ROOT_1)
        .unwrap();
    let left = sock.qdiscs(veth.index).unwrap();
    assert!(
        left.iter().all(|q| q.kind != "tbf" && q.kind != "ingress"),
        "{left:?}"
    );
    assert!(sock
        .delete_qdisc(veth.index, TcHandle::ROOT, ROOT_1)
        .is_err());
    assert!(sock.create_ifb("tcifb0", 1500, 0).unwrap_err().is_exists());
}
