//! Root tests of the shared ADD/CHECK/DEL steps, driven in-process in throw-away namespaces,
//! with a scripted IPAM plugin that records every call.

use std::path::Path;

use attach::{check, configure, ipam, link, rollback};
use libcni::result::CniResult;
use libcni::skel::CmdArgs;
use netkit::link::VethSpec;
use netkit::link_kinds::{MacvlanSpec, NewLinkBase};
use netkit::packet_route::link::MacVlanMode;
use netns_tests::{require_root, Netns, TempDir};
use serde_json::{json, Value};

fn fake_ipam(dir: &TempDir, result: &Value) -> String {
    attach::testing::fake_ipam(dir.path(), result)
}

fn calls(dir: &TempDir) -> Vec<String> {
    attach::testing::ipam_calls(dir.path())
}

fn cmd_args(netns: &Path, path: String, config: Value) -> CmdArgs {
    attach::testing::cmd_args_in(netns, &path, config)
}

const IPAM_RESULT: &str = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.5.0.7/24","gateway":"10.5.0.1"},{"address":"fd05::7/64"}],"routes":[{"dst":"0.0.0.0/0"},{"dst":"10.6.0.0/16","gw":"10.5.0.9"}]}"#;

/// A host netns with a veth parent and a pod netns; a macvlan on the parent, renamed into
/// the pod, addressed from a scripted IPAM result, checked, and deleted (twice).
#[test]
fn macvlan_from_ipam_result_checks_and_deletes() {
    require_root!();
    let host = Netns::new("at-host");
    let pod = Netns::new("at-pod");
    let dir = TempDir::new("at-ipam");
    let path = fake_ipam(&dir, &serde_json::from_str(IPAM_RESULT).unwrap());
    let args = cmd_args(
        pod.path(),
        path,
        json!({"cniVersion":"1.0.0","name":"n","ipam":{"type":"fake-ipam"}}),
    );

    let host_ns = netkit::Netns::open(host.path()).unwrap();
    let mut h = netkit::Socket::open_in(&host_ns).unwrap();
    h.create_veth(&VethSpec {
        name: "up0",
        peer_name: "up1",
        ..Default::default()
    })
    .unwrap();
    let parent = h.link_by_name("up0").unwrap().index;
    let (pod_ns, mut cont) = link::open_netns(&args.netns).unwrap();

    let result: CniResult = rollback::guarded("test", |rb| {
        let l = link::create_renamed(&mut cont, &args.ifname, "macvlan", |_, tmp| {
            h.create_macvlan(&MacvlanSpec {
                base: NewLinkBase {
                    name: tmp,
                    parent: Some(parent),
                    netns: Some(&pod_ns),
                    ..Default::default()
                },
                mode: MacVlanMode::Bridge,
                bc_queue_len: None,
            })
        })?;
        link::undo_delete(rb, &pod_ns, &args.ifname);
        let mut r = ipam::add_for_interface(&args, "fake-ipam", 0, rb)?;
        r.interfaces = vec![link::container_interface(&l, &args.netns)];
        configure::configure_iface(&pod_ns, &mut cont, &args.ifname, &r)?;
        Ok(r)
    })
    .unwrap();
    assert_eq!(calls(&dir), ["ADD ctr1 net1"]);
    let addrs = pod.addresses("net1");
    assert!(
        addrs.contains(&"10.5.0.7/24".to_string()) && addrs.contains(&"fd05::7/64".to_string()),
        "{addrs:?}"
    );
    let routes = pod.exec_ok(&["ip", "route", "show"]);
    assert!(routes.contains("default via 10.5.0.1 dev net1"), "{routes}");
    assert!(
        routes.contains("10.6.0.0/16 via 10.5.0.9 dev net1"),
        "{routes}"
    );
    assert!(pod.link_is_up("net1"));

    // CHECK passes, and notices a missing address and a missing route.
    let intf = check::container_interface(&result, &args).unwrap();
    let l = check::container_link(&mut cont, &intf).unwrap();
    check::interface_ips(&mut cont, &l, &result.ips).unwrap();
    check::routes(&mut cont, &result.routes, &result.ips).unwrap();
    // Moved to another table: found there only through a source rule of the address (sbr's).
    pod.exec_ok(&["ip", "route", "del", "10.6.0.0/16"]);
    pod.exec_ok(&[
        "ip",
        "route",
        "add",
        "10.6.0.0/16",
        "via",
        "10.5.0.9",
        "dev",
        "net1",
        "table",
        "100",
    ]);
    assert!(check::routes(&mut cont, &result.routes, &result.ips).is_err());
    pod.exec_ok(&["ip", "rule", "add", "from", "10.5.0.7/32", "table", "100"]);
    check::routes(&mut cont, &result.routes, &result.ips).unwrap();
    pod.exec_ok(&["ip", "rule", "del", "from", "10.5.0.7/32", "table", "100"]);
    pod.exec_ok(&["ip", "route", "del", "10.6.0.0/16", "table", "100"]);
    let e = check::routes(&mut cont, &result.routes, &result.ips).unwrap_err();
    assert!(e.msg.contains("10.6.0.0/16"), "{}", e.msg);
    pod.exec_ok(&["ip", "addr", "del", "10.5.0.7/24", "dev", "net1"]);
    assert!(check::interface_ips(&mut cont, &l, &result.ips)
        .unwrap_err()
        .msg
        .contains("Failed to match addr 10.5.0.7/24"));
    let mut other = result.clone();
    other.interfaces[0].mac = "02:00:00:00:00:99".into();
    assert!(check::container_link(&mut cont, &other.interfaces[0])
        .unwrap_err()
        .msg
        .contains("doesn't match container Mac"));

    link::delete_in_netns(&args.netns, "net1").unwrap();
    assert!(pod.link("net1").is_none());
    link::delete_in_netns(&args.netns, "net1").unwrap();
    link::delete_in_netns("", "net1").unwrap();
    link::delete_in_netns("/run/netns/does-not-exist-ferrocni", "net1").unwrap();
}

/// A failure after IPAM ADD runs IPAM DEL and deletes the link; a result without IPs fails.
#[test]
fn failed_add_rolls_back_link_and_lease() {
    require_root!();
    let pod = Netns::new("at-rb");
    let dir = TempDir::new("at-rb-ipam");
    let path = fake_ipam(
        &dir,
        &json!({"cniVersion":"1.0.0","ips":[{"address":"10.5.0.7/24","interface":3}]}),
    );
    let args = cmd_args(pod.path(), path, json!({"cniVersion":"1.0.0","name":"n"}));
    let (pod_ns, mut cont) = link::open_netns(&args.netns).unwrap();
    let e = rollback::guarded("test", |rb| {
        let l = link::create_renamed(&mut cont, &args.ifname, "veth", |_, tmp| {
            cont_veth(&pod_ns, tmp)
        })?;
        link::undo_delete(rb, &pod_ns, &args.ifname);
        let mut r = ipam::add_for_interface(&args, "fake-ipam", 0, rb)?;
        r.interfaces = vec![link::container_interface(&l, &args.netns)];
        // Interface 0 is fine, but a result pointing elsewhere is refused by configure.
        r.ips[0].interface = Some(3);
        configure::configure_iface(&pod_ns, &mut cont, &args.ifname, &r)
    })
    .unwrap_err();
    assert!(e.msg.contains("invalid interface index"), "{}", e.msg);
    assert_eq!(calls(&dir), ["ADD ctr1 net1", "DEL ctr1 net1"]);
    assert!(pod.link("net1").is_none());

    let empty = TempDir::new("at-rb-empty");
    let path = fake_ipam(&empty, &json!({"cniVersion":"1.0.0"}));
    let args = cmd_args(pod.path(), path, json!({"cniVersion":"1.0.0","name":"n"}));
    let e = rollback::guarded("test", |rb| {
        ipam::add_for_interface(&args, "fake-ipam", 0, rb)
    })
    .unwrap_err();
    assert_eq!(e.msg, "IPAM plugin returned missing IP config");
    assert_eq!(calls(&empty), ["ADD ctr1 net1", "DEL ctr1 net1"]);
}

/// A rename onto a taken name deletes the new link and says so.
#[test]
fn rename_clash_deletes_the_new_link() {
    require_root!();
    let pod = Netns::new("at-clash");
    let (pod_ns, mut cont) = link::open_netns(pod.path().to_str().unwrap()).unwrap();
    cont_veth(&pod_ns, "net1").unwrap();
    let before = cont.links().unwrap().len();
    let e = link::create_renamed(&mut cont, "net1", "veth", |_, tmp| cont_veth(&pod_ns, tmp))
        .unwrap_err();
    assert!(
        e.msg.starts_with("failed to rename veth to \"net1\""),
        "{}",
        e.msg
    );
    assert_eq!(cont.links().unwrap().len(), before);
}

/// A veth pair `<name>`/`<name>p` inside `ns` (stands in for a kind with a driver).
fn cont_veth(ns: &netkit::Netns, name: &str) -> netkit::Result<()> {
    let mut s = netkit::Socket::open_in(ns)?;
    let peer = format!("{}p", &name[..name.len().min(14)]);
    s.create_veth(&VethSpec {
        name,
        peer_name: &peer,
        ..Default::default()
    })
}
