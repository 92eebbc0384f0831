//! vrf end to end. What works without the kernel's vrf driver always runs: bad input, ADD
//! failing cleanly (nothing left behind, the interface untouched), a vrfname taken by
//! another link, DEL with the VRF, the interface or the netns gone. Where the driver exists
//! (the kernel-test VM, where its absence is a failure) the full path runs too, ours and the
//! reference: create, table, a second interface joining, DEL keeping a VRF still in use and
//! deleting the empty one. The routes through the interface move into the VRF's table as the
//! latest upstream release moves them (the 1.1.1 reference leaves them to the kernel, which
//! drops them), so that part is checked on ours alone.

use netns_tests::plugin::{Attachment, Impl};
use netns_tests::{our_binary, reference_plugin_dir, require_root, Netns};
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

/// `bin` for interface `ifname` in `pod`, run in the test's own netns (vrf touches only the
/// container's).
fn on(bin: &Path, pod: &Netns, ifname: &str) -> Attachment<'static> {
    Attachment::at(&Impl::alone("vrf", bin), "vrf-cid", pod.path_str()).ifname(ifname)
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
    let out = on(&vrf, &p, "eth0").run("ADD", &no_name);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    let mut no_prev = conf("blue", None);
    no_prev.as_object_mut().unwrap().remove("prevResult");
    let out = on(&vrf, &p, "eth0").run("ADD", &no_prev);
    assert_eq!(out.json["code"], 999, "{}", out.stdout);
    let mut old = conf("blue", None);
    old["cniVersion"] = json!("0.3.0");
    let out = on(&vrf, &p, "eth0").run("ADD", &old);
    assert_eq!(out.json["code"], 1, "{}", out.stdout);

    // A vrfname that names another kind of link.
    let out = on(&vrf, &p, "eth0").run("ADD", &conf("peer1", None));
    assert!(!out.success);
    assert!(out.stdout.contains("is not a VRF"), "{}", out.stdout);
    assert_eq!(master_of(&p, "eth0"), None);

    // DEL: no such VRF, no prevResult, repeated, netns gone.
    on(&vrf, &p, "eth0").run_ok("DEL", &no_prev);
    on(&vrf, &p, "eth0").run_ok("DEL", &no_prev);
    Attachment::at(
        &Impl::alone("vrf", &vrf),
        "vrf-cid",
        "/run/netns/vrf-gone-for-good",
    )
    .run_ok("DEL", &no_prev);
}

#[test]
fn add_without_the_driver_fails_cleanly() {
    require_root!();
    if netns_tests::kernel_has("vrf") {
        eprintln!("skipping add_without_the_driver_fails_cleanly: this kernel has the vrf driver");
        return;
    }
    let vrf = our_binary("vrf");
    let p = pod("vrf-nodrv");
    let links_before = p.exec_ok(&["ip", "-o", "link", "show"]);
    let routes_before = p.exec_ok(&["ip", "route", "show", "table", "all"]);
    let out = on(&vrf, &p, "eth0").run("ADD", &conf("blue", Some(100)));
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

/// The whole path with the driver, for one implementation: create (table 100), join, a
/// second interface joining, DEL keeping the VRF while an interface is still in it, the last
/// DEL deleting it. Returns what both releases do alike; whether the route through `eth0` was
/// moved into the VRF table is returned apart (the latest upstream release moves it, the
/// 1.1.1 reference leaves it to the kernel, which drops it).
fn full_path(bin: &Path, prefix: &str) -> (Value, bool) {
    let p = pod(prefix);
    on(bin, &p, "eth0").run_ok("ADD", &conf("blue", Some(100)));
    let details = p.exec_json(&["ip", "-j", "-d", "link", "show", "blue"]);
    let t100 = p.exec_ok(&["ip", "route", "show", "table", "100"]);
    let moved = t100.contains("192.0.2.0/24 via 10.70.0.1 dev eth0");
    let mut shared = json!({
        "eth0_master": master_of(&p, "eth0"),
        "table": details[0]["linkinfo"]["info_data"]["table"],
        "vrf_up": p.link_is_up("blue"),
        "eth0_address": p.addresses("eth0").into_iter()
            .filter(|a| !a.starts_with("fe80:")).collect::<Vec<_>>(),
        "main_table_route_gone": !p.exec_ok(&["ip", "route", "show", "table", "main"])
            .contains("192.0.2.0/24"),
    });
    // A second interface joins the same VRF.
    let mut second = conf("blue", None);
    second["prevResult"]["interfaces"][0]["name"] = json!("net1");
    on(bin, &p, "net1").run_ok("ADD", &second);
    shared["net1_master"] = json!(master_of(&p, "net1"));
    on(bin, &p, "eth0").run_ok("DEL", &conf("blue", Some(100)));
    shared["eth0_master_after_del"] = json!(master_of(&p, "eth0"));
    shared["vrf_kept_while_in_use"] = json!(p.link("blue").is_some());
    on(bin, &p, "net1").run_ok("DEL", &second);
    shared["vrf_deleted_when_empty"] = json!(p.link("blue").is_none());
    (shared, moved)
}

#[test]
fn full_path_where_the_driver_exists() {
    require_root!();
    netns_tests::require_driver!(netns_tests::kernel_has("vrf"), "vrf driver");
    let (ours, moved) = full_path(&our_binary("vrf"), "vrf-ours");
    assert_eq!(
        ours,
        json!({"eth0_master": "blue", "table": 100, "vrf_up": true,
            "eth0_address": ["10.70.0.2/24"], "main_table_route_gone": true,
            "net1_master": "blue", "eth0_master_after_del": null,
            "vrf_kept_while_in_use": true, "vrf_deleted_when_empty": true}),
    );
    assert!(
        moved,
        "the route through eth0 must be moved into the VRF's table"
    );
    if let Some(dir) = reference_plugin_dir(&["vrf"]) {
        let (theirs, _) = full_path(&dir.join("vrf"), "vrf-ref");
        assert_eq!(ours, theirs, "ours, reference");
    }
}

/// The routes the latest upstream release moves into the VRF table: every route through the
/// interface through a gateway (IPv4 and IPv6), none of another interface's; the kernel itself
/// re-creates the prefix routes of the addresses there.
#[test]
fn routes_of_the_interface_move_into_the_vrf_table() {
    require_root!();
    netns_tests::require_driver!(netns_tests::kernel_has("vrf"), "vrf driver");
    let p = pod("vrf-routes");
    p.exec_ok(&["ip", "route", "add", "203.0.113.0/24", "via", "10.71.0.1"]);
    p.exec_ok(&["ip", "addr", "add", "fd70::2/64", "dev", "eth0", "nodad"]);
    p.exec_ok(&["ip", "-6", "route", "add", "fd99::/64", "via", "fd70::1"]);
    let vrf = our_binary("vrf");
    on(&vrf, &p, "eth0").run_ok("ADD", &conf("red", Some(200)));
    let t200 = p.exec_ok(&["ip", "route", "show", "table", "200"]);
    assert!(
        t200.contains("192.0.2.0/24 via 10.70.0.1 dev eth0"),
        "{t200}"
    );
    assert!(
        !t200.contains("203.0.113.0/24"),
        "net1's route moved: {t200}"
    );
    let t200v6 = p.exec_ok(&["ip", "-6", "route", "show", "table", "200"]);
    assert!(
        t200v6.contains("fd99::/64 via fd70::1 dev eth0"),
        "{t200v6}"
    );
    assert!(p.addresses("eth0").contains(&"fd70::2/64".to_string()));
    let main = p.exec_ok(&["ip", "route", "show", "table", "main"]);
    assert!(
        main.contains("203.0.113.0/24 via 10.71.0.1 dev net1"),
        "{main}"
    );
    on(&vrf, &p, "eth0").run_ok("DEL", &conf("red", Some(200)));
    assert!(p.link("red").is_none());
    assert_eq!(master_of(&p, "eth0"), None);
}
