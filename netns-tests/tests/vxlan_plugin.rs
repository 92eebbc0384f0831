//! The `vxlan` plugin's CNI verbs on one simulated node, invoked directly (no cnitool):
//! prevResult passthrough, bad peers, STATUS/DEL, device recreation, concurrent passes.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{our_binary, require_root, Netns, TempDir};
use serde_json::{json, Value};

fn net_octet() -> u8 {
    (100 + (std::process::id() + 31) % 100) as u8
}

/// A node namespace whose eth0 (192.168.77.10/24, default route) is one end of a veth pair.
struct Node {
    ns: Netns,
    pod: Netns,
    dir: TempDir,
    net: u8,
}

impl Node {
    fn new() -> Node {
        let ns = Netns::new("vxp-node");
        let sh = |args: &[&str]| {
            let mut argv = vec!["ip"];
            argv.extend_from_slice(args);
            ns.exec_ok(&argv);
        };
        sh(&["link", "set", "lo", "up"]);
        sh(&[
            "link", "add", "name", "eth0", "type", "veth", "peer", "name", "eth0p",
        ]);
        sh(&["link", "set", "eth0p", "up"]);
        sh(&["link", "set", "eth0", "up"]);
        sh(&["addr", "add", "192.168.77.10/24", "dev", "eth0"]);
        sh(&["route", "add", "default", "via", "192.168.77.1"]);
        Node {
            ns,
            pod: Netns::new("vxp-pod"),
            dir: TempDir::new("vxp"),
            net: net_octet(),
        }
    }

    fn config(&self, extra: Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.1.0", "name": "podnet", "type": "vxlan",
            "network": format!("10.{}.0.0/16", self.net),
            "subnet": format!("10.{}.1.0/24", self.net),
            "lockFile": self.dir.join("node.lock"),
            "peers": [
                {"subnet": format!("10.{}.2.0/24", self.net), "ip": "192.168.77.11"},
                {"subnet": format!("10.{}.3.0/24", self.net), "ip": "192.168.77.12"}
            ],
            "prevResult": {
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0", "sandbox": self.pod.path_str()}],
                "ips": [{"address": format!("10.{}.1.5/24", self.net), "gateway": format!("10.{}.1.1", self.net), "interface": 0}]
            }
        });
        if let (Value::Object(c), Value::Object(extra)) = (&mut c, extra) {
            for (k, v) in extra {
                c.insert(k, v);
            }
        }
        c
    }

    /// Runs the plugin with `command` inside the node namespace.
    fn cni(&self, command: &str, config: &Value) -> Output {
        let bin = our_binary("vxlan");
        let ours = Impl {
            label: "ours",
            cni_path: bin.parent().unwrap().display().to_string(),
            bin,
        };
        Attachment::new(&ours, &self.ns, "vxlan-test-container", &self.pod).call(command, config)
    }

    fn sync(&self, config_path: &Path) -> Output {
        let bin = our_binary("vxlan");
        self.ns
            .exec(&[bin.to_str().unwrap(), "sync", config_path.to_str().unwrap()])
    }

    fn count(&self, argv: &[&str]) -> usize {
        self.ns
            .exec_json(argv)
            .as_array()
            .map(Vec::len)
            .unwrap_or(0)
    }

    /// (neighbours, fdb entries, our routes) on flannel.1.
    fn entries(&self) -> (usize, usize, usize) {
        (
            self.count(&[
                "ip",
                "-j",
                "neigh",
                "show",
                "dev",
                "flannel.1",
                "nud",
                "permanent",
            ]),
            self.count(&["bridge", "-j", "fdb", "show", "dev", "flannel.1"]),
            self.count(&["ip", "-j", "route", "show", "proto", "90"]),
        )
    }

    fn vxlan_info(&self) -> Value {
        let v = self
            .ns
            .exec_json(&["ip", "-d", "-j", "link", "show", "dev", "flannel.1"]);
        v[0].clone()
    }
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn add_passes_prev_result_through_and_skips_bad_peers() {
    require_root!();
    let node = Node::new();
    let mut cfg = node.config(json!({}));
    let net = node.net;
    cfg["peers"].as_array_mut().unwrap().extend([
        json!({"subnet": "172.16.9.0/24", "ip": "192.168.77.13"}),
        json!({"subnet": format!("10.{net}.4.0/24")}),
        json!({"subnet": format!("10.{net}.5.0/24"), "ip": "192.168.77.15", "vtepMAC": "zz"}),
        json!({"subnet": format!("10.{net}.1.0/25"), "ip": "192.168.77.16"}),
    ]);
    let out = node.cni("ADD", &cfg);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let result = stdout_json(&out);
    assert_eq!(result["ips"], cfg["prevResult"]["ips"]);
    assert_eq!(result["interfaces"], cfg["prevResult"]["interfaces"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for bad in ["peers[2]", "peers[3]", "peers[4]", "peers[5]"] {
        assert!(
            stderr.contains(&format!("ignoring peer {bad}")),
            "{bad} not reported: {stderr}"
        );
    }
    assert_eq!(node.entries(), (2, 2, 2));

    // CHECK reconciles as well and succeeds; DEL is a no-op that always succeeds.
    assert!(node.cni("CHECK", &cfg).status.success());
    let del = node.cni(
        "DEL",
        &node.config(json!({"underlayInterface": "missing0"})),
    );
    assert!(
        del.status.success(),
        "{}",
        String::from_utf8_lossy(&del.stdout)
    );
    assert_eq!(node.entries(), (2, 2, 2));
}

#[test]
fn add_without_prev_result_or_with_bad_config_fails_cleanly() {
    require_root!();
    let node = Node::new();
    let mut cfg = node.config(json!({}));
    cfg.as_object_mut().unwrap().remove("prevResult");
    let out = node.cni("ADD", &cfg);
    assert!(!out.status.success());
    assert_eq!(stdout_json(&out)["code"], 7);
    let out = node.cni("ADD", &node.config(json!({"mode": "udp"})));
    assert_eq!(stdout_json(&out)["code"], 7);
    // A missing peers file is "try again later", and nothing was created.
    let out = node.cni(
        "ADD",
        &node.config(json!({"peersFile": node.dir.join("nope.json")})),
    );
    assert_eq!(
        stdout_json(&out)["code"],
        11,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(node.ns.link("flannel.1").is_none());
}

#[test]
fn status_is_not_ready_without_the_underlay_interface() {
    require_root!();
    let node = Node::new();
    let out = node.cni(
        "STATUS",
        &node.config(json!({"underlayInterface": "missing0"})),
    );
    assert!(!out.status.success());
    assert_eq!(stdout_json(&out)["code"], 50);
    let out = node.cni("STATUS", &node.config(json!({"underlayInterface": "eth0"})));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Default underlay: the default route's interface.
    assert!(node.cni("STATUS", &node.config(json!({}))).status.success());
    node.ns.exec_ok(&["ip", "route", "del", "default"]);
    assert_eq!(
        stdout_json(&node.cni("STATUS", &node.config(json!({}))))["code"],
        50
    );
}

#[test]
fn incompatible_device_is_recreated_and_drift_is_fixed() {
    require_root!();
    let node = Node::new();
    node.ns.exec_ok(&[
        "ip",
        "link",
        "add",
        "flannel.1",
        "type",
        "vxlan",
        "id",
        "5",
        "dstport",
        "4789",
        "dev",
        "eth0",
    ]);
    let path = node.dir.join("conf.json");
    std::fs::write(&path, node.config(json!({})).to_string()).unwrap();
    let out = node.sync(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("Recreated"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = node.vxlan_info();
    assert_eq!(info["linkinfo"]["info_data"]["id"], 1);
    assert_eq!(info["linkinfo"]["info_data"]["port"], 8472);
    assert_eq!(info["mtu"], 1450);
    assert_eq!(node.entries(), (2, 2, 2));

    // MTU and MAC drift and a stray address are fixed in place, entries untouched.
    node.ns.exec_ok(&[
        "ip",
        "link",
        "set",
        "flannel.1",
        "mtu",
        "1300",
        "address",
        "02:00:00:00:00:99",
    ]);
    node.ns
        .exec_ok(&["ip", "addr", "add", "10.9.9.9/24", "dev", "flannel.1"]);
    let out = node.sync(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Adjusted"), "{text}");
    let fixed = node.vxlan_info();
    assert_eq!(fixed["mtu"], 1450);
    assert_eq!(fixed["address"], info["address"]);
    let v4: Vec<String> = node
        .ns
        .addresses("flannel.1")
        .into_iter()
        .filter(|a| !a.contains(':'))
        .collect();
    assert_eq!(v4, [format!("10.{}.1.0/32", node.net)]);
    assert_eq!(node.entries(), (2, 2, 2));

    // Switching the node to host-gw removes the device (and with it every VXLAN entry).
    std::fs::write(&path, node.config(json!({"mode": "host-gw", "peers": [{"subnet": format!("10.{}.2.0/24", node.net), "ip": "192.168.77.11"}]})).to_string()).unwrap();
    let out = node.sync(&path);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Deleted"));
    assert!(node.ns.link("flannel.1").is_none());
    let routes = node.ns.exec_ok(&["ip", "route", "show", "proto", "90"]);
    assert_eq!(
        routes.trim(),
        format!("10.{}.2.0/24 via 192.168.77.11 dev eth0 metric 3", node.net)
    );
}

#[test]
fn concurrent_passes_serialise_on_the_lock() {
    require_root!();
    let node = Node::new();
    let path = node.dir.join("conf.json");
    std::fs::write(&path, node.config(json!({})).to_string()).unwrap();
    let bin = our_binary("vxlan");
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new("ip")
                .args(["netns", "exec", node.ns.name()])
                .arg(&bin)
                .args(["sync", path.to_str().unwrap()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut created = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if String::from_utf8_lossy(&out.stdout).contains("device Created") {
            created += 1;
        }
    }
    assert_eq!(created, 1, "exactly one pass creates the device");
    assert_eq!(node.entries(), (2, 2, 2));
}

#[test]
fn a_non_vxlan_link_named_like_the_device_is_never_replaced() {
    require_root!();
    let node = Node::new();
    // A typo such as "device": "eth0" must not delete the underlay.
    let out = node.cni("ADD", &node.config(json!({"device": "eth0"})));
    assert!(!out.status.success(), "ADD must fail");
    let err = stdout_json(&out);
    assert!(
        err["msg"]
            .as_str()
            .unwrap_or("")
            .contains("not a vxlan device"),
        "{err}"
    );
    let link = node
        .ns
        .exec_json(&["ip", "-j", "-d", "link", "show", "eth0"]);
    assert_eq!(link[0]["linkinfo"]["info_kind"], "veth", "{link}");
}

#[test]
fn a_node_missing_from_the_peer_list_is_told_to_try_again() {
    require_root!();
    let node = Node::new();
    let mut cfg = node.config(json!({}));
    cfg.as_object_mut().unwrap().remove("subnet");
    let out = node.cni("ADD", &cfg);
    assert!(!out.status.success());
    assert_eq!(
        stdout_json(&out)["code"],
        11,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
