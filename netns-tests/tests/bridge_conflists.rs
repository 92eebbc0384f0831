//! The `conflist-examples/bridge-*.conflist` files work end to end through our cnitool
//! (ADD, CHECK, DEL), with the host side in a namespace and IPAM state in a temp dir.

mod bridge_support;

use bridge_support::*;
use netns_tests::{require_root, Cnitool, ConfDir, Netns, TempDir};
use serde_json::Value;

fn run_example(file: &str) {
    let path = netns_tests::workspace_root()
        .join("conflist-examples")
        .join(file);
    let mut list: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let name = list["name"].as_str().unwrap().to_string();
    let uses_vlans =
        list["plugins"][0].get("vlan").is_some() || list["plugins"][0].get("vlanTrunk").is_some();
    if uses_vlans {
        netns_tests::require_driver!(
            netns_tests::kernel_has("bridge_vlan_filtering"),
            "bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)"
        );
    }
    let ipam = TempDir::new("brcf-ipam");
    if list["plugins"][0].get("ipam").is_some() {
        list["plugins"][0]["ipam"]["dataDir"] = Value::String(ipam.path().display().to_string());
    }
    let host = Netns::new("brcf-host");
    let pod = Netns::new("brcf-pod");
    let conf = ConfDir::new();
    conf.write_json("10-example.conflist", &list);
    let cache = TempDir::new("brcf-cache");
    let imp = ours();
    let cni_path = vec![imp.bin.parent().unwrap().to_path_buf()];
    let tool = Cnitool::new(&conf, cni_path, cache.path()).in_netns(&host);
    let out = tool.run_ok(&["add", &name, pod.path_str()]);
    let result: Value = serde_json::from_str(&out).unwrap();
    assert!(
        result["interfaces"].as_array().unwrap().len() >= 3,
        "{result}"
    );
    assert!(pod.link_is_up("eth0"));
    tool.run_ok(&["check", &name, pod.path_str()]);
    tool.run_ok(&["del", &name, pod.path_str()]);
    assert!(pod.link("eth0").is_none());
    assert!(leases(&ipam, &name).is_empty());
    assert!(cni_nat_rules(&host).is_empty());
}

#[test]
fn example_gateway_dualstack() {
    require_root!();
    run_example("bridge-gateway-dualstack.conflist");
}

#[test]
fn example_nftables_macspoofchk() {
    require_root!();
    run_example("bridge-nftables-macspoofchk.conflist");
}

#[test]
fn example_l2_only() {
    require_root!();
    run_example("bridge-l2-only.conflist");
}

#[test]
fn example_vlan_trunk() {
    require_root!();
    run_example("bridge-vlan-trunk.conflist");
}
