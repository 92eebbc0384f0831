//! The calls containerd's CRI makes, replayed against our chain without containerd (the
//! real containerd runs in `containerd_cri.rs`): capability args with Go's field names and
//! MaxUint32 bursts, containerd's CNI_ARGS, DEL twice — the second with an empty CNI_NETNS and
//! no prevResult, after the netns is gone — and the same after an ADD that failed half-way.
//! After the last DEL the "host" netns holds nothing of the pod: no veth, ifb, rule, lease,
//! firewall record, tuning backup or cache entry.

use netns_tests::chain::{ChainNode, ChainOptions, NETWORK};
use netns_tests::{require_root, Cnitool, Netns};
use serde_json::{json, Value};

const HOST_PORT: u16 = 18080;

fn node(tag: &str, tuning: Value) -> ChainNode {
    ChainNode::new(
        tag,
        ChainOptions {
            subnet_v4: "10.231.40.0/24".into(),
            subnet_v6: None,
            tuning,
            bridge: "cni-k8s0".into(),
        },
        None,
    )
}

/// Asserts that nothing of `cid` is left: it held `ips`; no pod of the node is left either.
fn assert_gone(node: &ChainNode, cid: &str, ips: &[std::net::IpAddr]) {
    node.settle_links(0);
    let inv = node.inventory();
    let traces = inv.traces_of(cid, ips);
    assert!(traces.is_empty(), "left behind: {traces:#?}");
    assert!(inv.links.is_empty(), "links left behind: {:?}", inv.links);
    assert!(
        !inv.rules.iter().any(|r| r.contains(":CNI-DN-")),
        "a portmap chain is left"
    );
}

#[test]
fn stop_then_remove_after_a_successful_add() {
    require_root!();
    let node = node(
        "k8s-ok",
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}}),
    );
    let pod = Netns::new("k8s-ok-pod");
    let cid = Cnitool::container_id(pod.path_str());
    let tool = node.cnitool(&cid, HOST_PORT);
    let result: Value =
        serde_json::from_str(&tool.run_ok(&["add", NETWORK, pod.path_str()])).expect("ADD result");
    let ips = node.inventory().addresses_of(&cid);
    assert_eq!(ips.len(), 1, "one lease");

    // The capitalised capability args took effect: DNAT for the hostPort, shaping both ways.
    let rules = node.inventory().rules.join("\n");
    assert!(
        rules.contains(&HOST_PORT.to_string()),
        "no hostPort rule:\n{rules}"
    );
    let ifb = node
        .inventory()
        .links
        .into_iter()
        .find(|l| l.starts_with("bwp"))
        .expect("an ifb for egress shaping");
    let egress = node.host.exec_ok(&["tc", "qdisc", "show", "dev", &ifb]);
    assert!(egress.contains("rate 20Mbit"), "{egress}");
    let host_veth = result["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| {
            i.get("sandbox").is_none() && i["name"].as_str().unwrap_or("").starts_with("veth")
        })
        .and_then(|i| i["name"].as_str())
        .expect("host veth in the result")
        .to_string();
    let ingress = node
        .host
        .exec_ok(&["tc", "qdisc", "show", "dev", &host_veth]);
    assert!(
        ingress.contains("rate 10Mbit") && ingress.contains("burst 193273526b"),
        "containerd's MaxUint32 burst must give the reference's qdisc: {ingress}"
    );

    // StopPodSandbox: DEL with the netns and the cached result.
    tool.run_ok(&["del", NETWORK, pod.path_str()]);
    drop(pod);
    // RemovePodSandbox: DEL again, empty CNI_NETNS, nothing cached.
    node.del_without_netns(&cid, HOST_PORT).unwrap();
    assert_gone(&node, &cid, &ips);
}

#[test]
fn teardown_after_an_add_that_failed_half_way() {
    require_root!();
    // tuning, last in the chain, fails: bridge, IPAM, portmap, bandwidth and firewall have
    // done their work and nothing is cached.
    let node = node(
        "k8s-fail",
        json!({"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.no_such_sysctl": "1"}}),
    );
    let pod = Netns::new("k8s-fail-pod");
    let cid = Cnitool::container_id(pod.path_str());
    let tool = node.cnitool(&cid, HOST_PORT);
    let out = tool.run(&["add", NETWORK, pod.path_str()]);
    assert!(!out.status.success(), "the tuning step was meant to fail");
    let inv = node.inventory();
    let ips = inv.addresses_of(&cid);
    assert_eq!(ips.len(), 1, "IPAM ran before tuning failed");
    assert!(
        inv.state_files.iter().any(|f| f.contains("firewall")),
        "firewall ran before tuning failed"
    );

    // containerd tears the network down (netns still there, no cached result) ...
    tool.run_ok(&["del", NETWORK, pod.path_str()]);
    drop(pod);
    // ... and RemovePodSandbox of the NOTREADY sandbox deletes it again without a netns.
    node.del_without_netns(&cid, HOST_PORT).unwrap();
    assert_gone(&node, &cid, &ips);
}

#[test]
fn remove_without_netns_is_enough_on_its_own() {
    require_root!();
    // A runtime that never got to StopPodSandbox: the netns is gone (the kernel took the veth
    // with it) and the only DEL has no netns and no prevResult.
    let node = node("k8s-gone", json!({"type": "tuning", "mtu": 1400}));
    let pod = Netns::new("k8s-gone-pod");
    let cid = Cnitool::container_id(pod.path_str());
    node.cnitool(&cid, HOST_PORT)
        .run_ok(&["add", NETWORK, pod.path_str()]);
    let ips = node.inventory().addresses_of(&cid);
    drop(pod);
    node.del_without_netns(&cid, HOST_PORT).unwrap();
    // The cache entry is the runtime's to drop (cnitool never ran a DEL here).
    for f in node.inventory().cache_files {
        std::fs::remove_file(f).unwrap();
    }
    assert_gone(&node, &cid, &ips);
}
