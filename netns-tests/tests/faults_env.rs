//! A vanished or odd environment: the netns deleted before DEL; the bridge or the ifb deleted
//! by hand (CHECK reports it, DEL cleans up); the netfilter tools missing (the netlink paths
//! need none; a config that asks for iptables gets STATUS "not available" and a clean ADD
//! failure); a kernel without nf_tables (STATUS not available, ADD fails cleanly). After the
//! runtime's DEL, nothing of the pod is left.

use std::net::IpAddr;
use std::path::Path;
use std::process::Output;

use netns_tests::chain::{ChainNode, ChainOptions, NETWORK};
use netns_tests::{require_root, Cnitool, Netns};
use serde_json::{json, Value};

fn node(tag: &str, subnet: u8) -> ChainNode {
    ChainNode::new(
        tag,
        ChainOptions {
            subnet_v4: format!("10.231.{subnet}.0/24"),
            subnet_v6: Some(format!("fd31:{subnet}::/64")),
            tuning: json!({"type": "tuning", "mtu": 1400}),
            bridge: format!("cni-env{subnet}"),
        },
        None,
    )
}

struct Pod {
    ns: Netns,
    cid: String,
}

fn pod() -> Pod {
    let ns = Netns::new("env-pod");
    let cid = Cnitool::container_id(ns.path_str());
    Pod { ns, cid }
}

fn run(node: &ChainNode, p: &Pod, verb: &str) -> Output {
    node.cnitool(&p.cid, 23000)
        .run(&[verb, NETWORK, p.ns.path_str()])
}

fn ok(node: &ChainNode, p: &Pod, verb: &str) -> String {
    let out = run(node, p, verb);
    assert!(
        out.status.success(),
        "{verb} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failure(node: &ChainNode, p: &Pod, verb: &str) -> String {
    let out = run(node, p, verb);
    assert!(!out.status.success(), "{verb} was expected to fail");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!text.contains("panicked"), "{text}");
    text
}

fn assert_gone(node: &ChainNode, p: &Pod, ips: &[IpAddr]) {
    let inv = node.inventory();
    let traces = inv.traces_of(&p.cid, ips);
    assert!(traces.is_empty(), "left behind: {traces:#?}");
    assert!(inv.links.is_empty(), "links left: {:?}", inv.links);
    assert!(inv.leases.is_empty(), "leases left: {:?}", inv.leases);
    assert!(
        inv.state_files.is_empty(),
        "state left: {:?}",
        inv.state_files
    );
}

#[test]
fn netns_deleted_before_del() {
    require_root!();
    let node = node("env-ns", 80);
    let p = pod();
    ok(&node, &p, "add");
    let ips = node.inventory().addresses_of(&p.cid);
    let path = p.ns.path_str().to_string();
    node.host.exec_ok(&["ip", "netns", "del", p.ns.name()]);
    assert!(!Path::new(&path).exists());
    ok(&node, &p, "del");
    ok(&node, &p, "del");
    node.settle_links(0);
    assert_gone(&node, &p, &ips);
}

#[test]
fn bridge_deleted_by_hand() {
    require_root!();
    let node = node("env-br", 81);
    let p = pod();
    ok(&node, &p, "add");
    let ips = node.inventory().addresses_of(&p.cid);
    node.host.exec_ok(&["ip", "link", "del", "cni-env81"]);
    let why = failure(&node, &p, "check");
    assert!(
        why.contains("cni-env81"),
        "CHECK must name the bridge: {why}"
    );
    ok(&node, &p, "del");
    assert_gone(&node, &p, &ips);
}

#[test]
fn ifb_deleted_by_hand() {
    require_root!();
    let node = node("env-ifb", 82);
    let p = pod();
    ok(&node, &p, "add");
    let ips = node.inventory().addresses_of(&p.cid);
    let ifb = node
        .inventory()
        .links
        .into_iter()
        .find(|l| l.starts_with("bwp"))
        .expect("an ifb");
    node.host.exec_ok(&["ip", "link", "del", &ifb]);
    let why = failure(&node, &p, "check");
    assert!(why.contains(&ifb), "CHECK must name the ifb: {why}");
    ok(&node, &p, "del");
    assert_gone(&node, &p, &ips);
}

/// A private mount namespace per call where the netfilter tools are hidden.
fn without_tools() -> Vec<String> {
    let hide = "for t in iptables ip6tables nft iptables-legacy ip6tables-legacy; do \
                p=$(command -v $t) && mount --bind /dev/null \"$p\"; done; exec \"$@\"";
    [
        "unshare",
        "--mount",
        "--propagation",
        "slave",
        "sh",
        "-c",
        hide,
        "sh",
    ]
    .map(String::from)
    .to_vec()
}

fn status(node: &ChainNode) -> (bool, Value) {
    let out = node
        .cnitool("status-probe", 23000)
        .run(&["status", NETWORK, "/nonexistent"]);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), Value::String(text))
}

#[test]
fn netfilter_tools_missing() {
    require_root!();
    let mut node = node("env-tools", 83);
    node.prefix = without_tools();
    // The default backends speak netlink: no tool is needed at all.
    let (ready, why) = status(&node);
    assert!(ready, "STATUS without tools, netlink backends: {why}");
    let p = pod();
    ok(&node, &p, "add");
    ok(&node, &p, "check");
    let ips = node.inventory().addresses_of(&p.cid);
    ok(&node, &p, "del");
    assert_gone(&node, &p, &ips);

    // A config that asks for the iptables tool: not available, and ADD fails cleanly.
    node.edit_conflist(|v| v["plugins"][0]["ipMasqBackend"] = json!("iptables"));
    let (ready, why) = status(&node);
    assert!(!ready, "STATUS must say not available without iptables");
    assert!(
        why.to_string().contains("50") || why.to_string().contains("iptables"),
        "{why}"
    );
    let q = pod();
    failure(&node, &q, "add");
    ok(&node, &q, "del");
    assert_gone(&node, &q, &[]);
}

/// A kernel without nf_tables but with x_tables: everything goes to the legacy tables with
/// iptables-legacy (iptables-nft cannot work there), STATUS is ready, and the whole chain
/// works and cleans up.
#[test]
fn kernel_without_nf_tables_uses_legacy_iptables() {
    require_root!();
    let mut node = node("env-nonft", 84);
    node.prefix = vec![env!("CARGO_BIN_EXE_no-nftables").to_string()];
    let (ready, why) = status(&node);
    assert!(
        ready,
        "iptables-legacy still works without nf_tables: {why}"
    );
    let p = pod();
    ok(&node, &p, "add");
    ok(&node, &p, "check");
    let ips = node.inventory().addresses_of(&p.cid);
    let legacy = node.host.exec_ok(&["iptables-legacy-save"]);
    for needle in ["-j MASQUERADE", "CNI-HOSTPORT-DNAT", "CNI-FORWARD"] {
        assert!(
            legacy.contains(needle),
            "no {needle} in the legacy tables:\n{legacy}"
        );
    }
    ok(&node, &p, "del");
    assert_gone(&node, &p, &ips);
    let legacy = node.host.exec_ok(&["iptables-legacy-save"]);
    assert!(
        !ips.iter().any(|ip| legacy.contains(&ip.to_string())),
        "{legacy}"
    );
}

/// No nf_tables and no iptables tool either: nothing can program netfilter. STATUS says not
/// available, ADD fails cleanly, and DEL still works.
#[test]
fn no_netfilter_at_all() {
    require_root!();
    let mut node = node("env-nonf", 85);
    let mut prefix = without_tools();
    prefix.push(env!("CARGO_BIN_EXE_no-nftables").to_string());
    node.prefix = prefix;
    let (ready, why) = status(&node);
    assert!(!ready, "STATUS must say not available: {why}");
    let p = pod();
    failure(&node, &p, "add");
    ok(&node, &p, "del");
    assert_gone(&node, &p, &[]);
}
