//! vrf end to end. What works without the kernel's vrf driver always runs: bad input, ADD
//! failing cleanly (nothing left behind, the interface untouched), a vrfname taken by
//! another link, DEL with the VRF, the interface or the netns gone. Where the driver exists
//! (`ip link add ... type vrf` works) the full path runs too — ours and the reference:
//! create, table, routes moved, a second interface joining, DEL deleting the empty VRF.

use netns_tests::{our_binary, reference_plugin_dir, require_root, Netns, PluginCall};
use serde_json::{json, Value};
use std::path::Path;

fn conf(vrf: &str, table: Option<u32>) -> Value {
    let mut c = json!({"cniVersion": "1.0.0", "name": "vrf-net", "type": "vrf", "vrfname": vrf,
        "prevResult": {"cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": "/x"}],
            "ips": [{"interface": 0, "address": "10.70.0.2/24", "gateway": "10.70.0.1"}]}});
    if let Some(t) = table {
        c["table"] = json!(t);
    }
    c
}

/// A pod with `eth0` (a veth whose peer stays in the pod), addressed, with a route via it.
fn pod(prefix: &str) -> Netns {
    let pod = Netns::new(prefix);
    pod.exec_ok(&[
        "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
    ]);
    pod.exec_ok(&[
        "ip", "link", "add", "net1", "type", "veth", "peer", "name", "peer1",
    ]);
    for l in ["eth0", "peer0", "net1", "peer1"] {
        pod.exec_ok(&["ip", "link", "set", l, "up"]);
    }
    pod.exec_ok(&["ip", "addr", "add", "10.70.0.2/24", "dev", "eth0"]);
    pod.exec_ok(&["ip", "addr", "add", "10.71.0.2/24", "dev", "net1"]);
    pod.exec_ok(&["ip", "route", "add", "192.0.2.0/24", "via", "10.70.0.1"]);
    pod
}

fn call<'a>(bin: &'a Path, cmd: &str, pod: &Netns, ifname: &str) -> PluginCall<'a> {
    PluginCall::new(bin, cmd, "vrf-cid", pod.path_str(), ifname)
}

/// Whether this kernel can create VRF devices.
fn vrf_driver_present() -> bool {
    let probe = Netns::new("vrf-probe");
    probe
        .exec(&["ip", "link", "add", "probe", "type", "vrf", "table", "7"])
        .status
        .success()
}

fn master_of(pod: &Netns, ifname: &str) -> Option<String> {
    pod.link(ifname)
        .and_then(|l| l.get("master").and_then(|m| m.as_str()).map(str::to_string))
}

#[test]
fn input_errors_and_dels_that_find_nothing() {
    require_root!();
    let vrf = our_binary("vrf");
    let p = pod("vrf-err");
    let mut no_name = conf("", None);
    no_name.as_object_mut().unwrap().remove("vrfname");
    let out = call(&vrf, "ADD", &p, "eth0").run(&no_name);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    let mut no_prev = conf("blue", None);
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let out = call(&vrf, "ADD", &p, "eth0").run(&no_prev);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    let mut old = conf("blue", None);
    old["cniVersion"] = json!("0.3.0");
    let out = call(&vrf, "ADD", &p, "eth0").run(&old);
    assert_eq!(out.json["code"], 1, "{}", out.stdout);

    // A vrfname that names another kind of link.
    let out = call(&vrf, "ADD", &p, "eth0").run(&conf("peer1", None));
    assert!(!out.success);
    assert!(out.stdout.contains("is not a VRF"), "{}", out.stdout);
    assert_eq!(master_of(&p, "eth0"), None);

    // DEL: no such VRF, no prevResult, repeated, netns gone.
    call(&vrf, "DEL", &p, "eth0").run_ok(&no_prev);
    call(&vrf, "DEL", &p, "eth0").run_ok(&no_prev);
    PluginCall::new(
        &vrf,
        "DEL",
        "vrf-cid",
        "/run/netns/vrf-gone-for-good",
        "eth0",
    )
    .run_ok(&no_prev);
}

#[test]
fn add_without_the_driver_fails_cleanly() {
    require_root!();
    if vrf_driver_present() {
        eprintln!("skipping add_without_the_driver_fails_cleanly: this kernel has the vrf driver");
        return;
    }
    let vrf = our_binary("vrf");
    let p = pod("vrf-nodrv");
    let links_before = p.exec_ok(&["ip", "-o", "link", "show"]);
    let routes_before = p.exec_ok(&["ip", "route", "show", "table", "all"]);
    let out = call(&vrf, "ADD", &p, "eth0").run(&conf("blue", Some(100)));
    assert!(!out.success);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    assert!(
        out.stdout.contains("could not add VRF blue"),
        "{}",
        out.stdout
    );
    assert_eq!(p.exec_ok(&["ip", "-o", "link", "show"]), links_before);
    assert_eq!(
        p.exec_ok(&["ip", "route", "show", "table", "all"]),
        routes_before
    );
}

/// The whole path with the driver, for one implementation.
fn full_path(bin: &Path, prefix: &str) -> Vec<String> {
    let p = pod(prefix);
    call(bin, "ADD", &p, "eth0").run_ok(&conf("blue", Some(100)));
    assert_eq!(master_of(&p, "eth0").as_deref(), Some("blue"));
    let details = p.exec_json(&["ip", "-j", "-d", "link", "show", "blue"]);
    assert_eq!(
        details[0]["linkinfo"]["info_data"]["table"], 100,
        "{details}"
    );
    let t100 = p.exec_ok(&["ip", "route", "show", "table", "100"]);
    assert!(
        t100.contains("192.0.2.0/24 via 10.70.0.1 dev eth0"),
        "{t100}"
    );
    // A second interface joins the same VRF; a table mismatch is refused.
    let mut second = conf("blue", None);
    second["prevResult"]["interfaces"][0]["name"] = json!("net1");
    call(bin, "ADD", &p, "net1").run_ok(&second);
    assert_eq!(master_of(&p, "net1").as_deref(), Some("blue"));
    let state = p.exec_ok(&["ip", "route", "show", "table", "all"]);
    call(bin, "DEL", &p, "eth0").run_ok(&conf("blue", Some(100)));
    assert!(
        p.link("blue").is_some(),
        "VRF deleted while net1 is still in it"
    );
    call(bin, "DEL", &p, "net1").run_ok(&second);
    assert!(p.link("blue").is_none(), "empty VRF left behind");
    state.lines().map(str::to_string).collect()
}

#[test]
fn full_path_where_the_driver_exists() {
    require_root!();
    if !vrf_driver_present() {
        eprintln!(
            "skipping full_path_where_the_driver_exists: the kernel has no vrf driver \
             (ip link add ... type vrf: Unknown device type); checked by message bytes instead"
        );
        return;
    }
    let ours = full_path(&our_binary("vrf"), "vrf-ours");
    if let Some(dir) = reference_plugin_dir(&["vrf"]) {
        let theirs = full_path(&dir.join("vrf"), "vrf-ref");
        assert_eq!(ours, theirs);
    }
}
