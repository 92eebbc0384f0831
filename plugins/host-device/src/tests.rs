//! ADD, DEL and CHECK on netkit's fake kernel, with an in-process IPAM: the crossing under
//! `temp_<ifindex>`, the rollback of a failure at every step, DEL back to the host under the
//! original name with the saved state, idempotent DEL, a name clash on the host at DEL.

use attach::testing::{
    args_in, config_with, every_failure_rolls_back, ops, with_prev_result, FakeIpam,
};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;
use netkit::fake::{FakeKernel, FakeNs, HOST};
use netkit::{Kernel, Netlink};
use netns_tests::TempDir;
use serde_json::{json, Value};

use crate::find::Sysfs;
use crate::{add, check, config, del};

const POD: &str = "/run/netns/pod";
/// eth1's ifindex in [`setup`] (eth0 is 2).
const ETH1: u32 = 3;

fn config(data_dir: &TempDir, extra: Value) -> Value {
    config_with(
        json!({"cniVersion": "1.0.0", "name": "n", "type": "host-device",
        "device": "eth1", "dataDir": data_dir.path(), "ipam": {"type": "fake-ipam"}}),
        extra,
    )
}

/// A host with its uplink eth0 and eth1 (the device: up, addressed, a route through it), and a
/// pod netns.
fn setup() -> (FakeKernel, FakeIpam) {
    let kernel = FakeKernel::new();
    let eth0 = kernel.setup_link(HOST, "eth0", None, 1500);
    let eth1 = kernel.setup_link(HOST, "eth1", None, 9000);
    assert_eq!(eth1, ETH1);
    kernel.setup_address(HOST, eth0, "192.168.1.10/24".parse().unwrap());
    kernel.setup_route(
        HOST,
        netkit::Route::new("0.0.0.0/0".parse().unwrap())
            .via("192.168.1.1".parse().unwrap())
            .dev(eth0),
    );
    kernel.setup_address(HOST, eth1, "192.168.2.10/24".parse().unwrap());
    kernel.setup_route(
        HOST,
        netkit::Route::new("10.20.0.0/16".parse().unwrap())
            .via("192.168.2.1".parse().unwrap())
            .dev(eth1),
    );
    kernel.add_netns(POD);
    let ipam = FakeIpam::new(
        &kernel,
        json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
            "routes": [{"dst": "10.8.0.0/16"}]}),
    );
    (kernel, ipam)
}

fn args(config: Value) -> CmdArgs {
    args_in(POD, config)
}

fn sysfs() -> Sysfs {
    Sysfs::at("/nonexistent-sysfs")
}

fn run_add(kernel: &FakeKernel, ipam: &FakeIpam, config: Value) -> Result<CniResult, CniError> {
    let a = args(config);
    let c = config::load(&a, &sysfs())?;
    Ok(add(kernel, ipam, &sysfs(), &a, &c)?)
}

fn run_del(kernel: &FakeKernel, ipam: &FakeIpam, a: &CmdArgs) -> Result<(), CniError> {
    let c = config::load(a, &sysfs())?;
    Ok(del(kernel, ipam, a, &c)?)
}

fn state_files(dir: &TempDir) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

#[test]
fn add_crosses_under_a_temporary_name_and_del_gives_the_device_back() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let before = kernel.state();
    kernel.reset();
    let r = run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    assert_eq!(
        ops(&kernel),
        [
            "open netns /run/netns/pod",
            "/run/netns/pod: socket",
            "open netns host",
            "host: socket",
            "host: link get eth1",
            "host: addr show dev eth1",
            "host: route show",
            "host: link set eth1 down",
            "host: link set eth1 name temp_3",
            "host: link set temp_3 netns /run/netns/pod",
            "/run/netns/pod: link get temp_3",
            "/run/netns/pod: link set temp_3 alias \"eth1\"",
            "/run/netns/pod: link set temp_3 name net1",
            "/run/netns/pod: link set net1 up",
            "/run/netns/pod: link get net1",
            "ipam ADD fake-ipam ctr1 net1",
            "/run/netns/pod: link get net1",
            "/run/netns/pod: addr add 10.1.0.5/24 dev net1",
            "/run/netns/pod: link set net1 up",
            "/run/netns/pod: route prepend 10.8.0.0/16 via 10.1.0.1 dev net1 table 254",
        ]
    );
    let net1 = kernel.link(POD, "net1").unwrap();
    assert_eq!(
        (net1.index, net1.mtu, net1.up, net1.alias.as_deref()),
        (ETH1, 9000, true, Some("eth1"))
    );
    assert!(kernel.link(HOST, "eth1").is_none());
    assert_eq!(r.interfaces[0].name, "net1");
    assert_eq!(state_files(&dir), ["ctr1_net1.json"]);

    let a = with_prev_result(args(config(&dir, json!({}))), &r);
    kernel.reset();
    run_del(&kernel, &ipam, &a).unwrap();
    let log = ops(&kernel);
    for op in [
        "/run/netns/pod: link set net1 name temp_3",
        "/run/netns/pod: link set temp_3 netns host",
        "host: link set temp_3 name eth1",
        "host: link set eth1 alias \"\"",
        "host: addr add 192.168.2.10/24 dev eth1",
        "host: link set eth1 up",
        "host: route add 10.20.0.0/16 via 192.168.2.1 dev eth1 table 254",
    ] {
        assert!(log.iter().any(|l| l == op), "{op} missing from {log:#?}");
    }
    // Back under its name, with its address, route and up state; the saved state is gone.
    assert_eq!(kernel.state(), before);
    assert!(state_files(&dir).is_empty());
    assert!(ipam.leases().is_empty());
}

#[test]
fn a_container_link_with_the_devices_name_does_not_stop_the_move() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    kernel.setup_link(POD, "eth1", Some("dummy"), 1500);
    let before = kernel.state();
    let r = run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    assert_eq!(kernel.link(POD, "net1").unwrap().index, ETH1);
    run_del(
        &kernel,
        &ipam,
        &with_prev_result(args(config(&dir, json!({}))), &r),
    )
    .unwrap();
    assert_eq!(kernel.state(), before);
}

#[test]
fn a_failure_at_any_step_of_add_leaves_nothing() {
    for extra in [json!({}), json!({"ipam": null})] {
        let steps = every_failure_rolls_back(
            setup,
            |k, i| {
                let dir = TempDir::new("hd-ut-rb");
                let outcome = run_add(k, i, config(&dir, extra.clone()));
                if outcome.is_err() {
                    assert!(state_files(&dir).is_empty(), "state left: {:?}", ops(k));
                }
                outcome
            },
            |_| false,
        );
        assert!(steps.len() >= 14, "{steps:#?}");
        for s in &steps {
            let e = s.error.as_ref().unwrap();
            assert!(e.msg.contains("injected"), "{}: {}", s.op, e.msg);
        }
    }
}

#[test]
fn add_of_a_missing_device_says_so() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let before = kernel.state();
    let e = run_add(&kernel, &ipam, config(&dir, json!({"device": "nosuch0"}))).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (999, "failed to find host device: Link not found")
    );
    let e = run_add(
        &kernel,
        &ipam,
        config(&dir, json!({"device": null, "hwaddr": "02:00:00:00:00:99"})),
    )
    .unwrap_err();
    assert_eq!(
        e.msg,
        "failed to find host device: failed to find physical interface"
    );
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty());
}

#[test]
fn del_is_idempotent_even_with_the_netns_gone() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let before = kernel.state();
    let r = run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    let a = with_prev_result(args(config(&dir, json!({}))), &r);
    run_del(&kernel, &ipam, &a).unwrap();
    run_del(&kernel, &ipam, &a).unwrap();
    assert_eq!(kernel.state(), before);

    // The netns dies first: the kernel returns the device to the host as net1; DEL finds it by
    // its alias and gives it its name and state back.
    run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    kernel.remove_netns(POD);
    assert_eq!(kernel.link(HOST, "net1").unwrap().index, ETH1);
    run_del(&kernel, &ipam, &a).unwrap();
    kernel.add_netns(POD);
    assert_eq!(kernel.state(), before);
    assert!(state_files(&dir).is_empty() && ipam.leases().is_empty());
    // Without a netns: nothing to do.
    let mut no_netns = a.clone();
    no_netns.netns.clear();
    run_del(&kernel, &ipam, &no_netns).unwrap();
    assert_eq!(kernel.state(), before);
}

#[test]
fn a_name_clash_on_the_host_at_del_leaves_the_device_in_the_pod() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let before = kernel.state();
    let r = run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    let a = with_prev_result(args(config(&dir, json!({}))), &r);
    let squatter = kernel.setup_link(HOST, "eth1", Some("dummy"), 1500);
    let e = run_del(&kernel, &ipam, &a).unwrap_err();
    assert!(
        e.msg
            .starts_with("failed to restore \"temp_3\" to original name \"eth1\": "),
        "{}",
        e.msg
    );
    let net1 = kernel.link(POD, "net1").unwrap();
    assert_eq!((net1.index, net1.up), (ETH1, true));
    assert_eq!(state_files(&dir), ["ctr1_net1.json"]);
    // Once the name is free, DEL finishes the job.
    kernel.socket().unwrap().delete_link(squatter).unwrap();
    run_del(&kernel, &ipam, &a).unwrap();
    assert_eq!(kernel.state(), before);
    assert!(state_files(&dir).is_empty());
}

#[test]
fn del_gives_the_device_back_when_ipam_fails_and_reports_it() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let before = kernel.state();
    let r = run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    let a = with_prev_result(args(config(&dir, json!({}))), &r);
    kernel.fail_when(|op| op.starts_with("ipam DEL"));
    let e = run_del(&kernel, &ipam, &a).unwrap_err();
    assert!(e.msg.contains("ipam DEL"), "{}", e.msg);
    assert_eq!(kernel.state(), before);

    // Both fail: the move's failure is the error, IPAM was asked all the same.
    run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    kernel.reset();
    kernel.fail_when(|op| op.ends_with("link set temp_3 netns host"));
    kernel.fail_when(|op| op.starts_with("ipam DEL"));
    let e = run_del(&kernel, &ipam, &a).unwrap_err();
    assert!(
        e.msg
            .starts_with("failed to move \"temp_3\" to host netns: "),
        "{}",
        e.msg
    );
    assert_eq!(
        ops(&kernel)
            .iter()
            .filter(|op| op.ends_with("(injected failure)"))
            .count(),
        2
    );
    assert_eq!(kernel.link(POD, "net1").unwrap().index, ETH1);
    run_del(&kernel, &ipam, &a).unwrap();
    assert_eq!(kernel.state(), before);
}

#[test]
fn del_without_saved_state_goes_by_the_alias() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let r = run_add(&kernel, &ipam, config(&dir, json!({"ipam": null}))).unwrap();
    std::fs::remove_file(dir.join("ctr1_net1.json")).unwrap();
    let a = with_prev_result(args(config(&dir, json!({"ipam": null}))), &r);
    run_del(&kernel, &ipam, &a).unwrap();
    let eth1 = kernel.link(HOST, "eth1").unwrap();
    assert_eq!((eth1.index, eth1.alias.as_deref()), (ETH1, Some("eth1")));
    assert!(kernel.link(POD, "net1").is_none());
}

#[test]
fn check_passes_after_add_and_names_what_differs() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let r = run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    let a = CmdArgs {
        command: libcni::skel::Command::Check,
        ..with_prev_result(args(config(&dir, json!({}))), &r)
    };
    let checked = || check(&kernel, &ipam, &a, &config::load(&a, &sysfs()).unwrap());
    checked().unwrap();
    let mut pod = kernel.socket_in(&FakeNs(POD.into())).unwrap();
    pod.delete_route(
        &netkit::Route::new("10.8.0.0/16".parse().unwrap())
            .dev(ETH1)
            .via("10.1.0.1".parse().unwrap()),
    )
    .unwrap();
    assert_eq!(
        CniError::from(checked().unwrap_err()).msg,
        "Expected Route {Dst: 10.8.0.0/16 GW: <nil>} not found in the container's routing table"
    );
    pod.delete_address(ETH1, "10.1.0.5/24".parse().unwrap())
        .unwrap();
    assert_eq!(
        CniError::from(checked().unwrap_err()).msg,
        "Failed to match addr 10.1.0.5/24 on interface net1"
    );
    pod.set_link_name(ETH1, "eth1").unwrap();
    assert_eq!(
        CniError::from(checked().unwrap_err()).msg,
        "Container Interface name in prevResult: net1 not found"
    );
}

/// The state file is named by (container, ifname), which one interface at a time holds: a DEL
/// naming another network than ADD did gives the device back all the same, as the reference's.
#[test]
fn del_naming_another_network_gives_the_device_back() {
    let (kernel, ipam) = setup();
    let dir = TempDir::new("hd-ut");
    let before = kernel.state();
    run_add(&kernel, &ipam, config(&dir, json!({}))).unwrap();
    let renamed = CmdArgs {
        network_name: "renamed".into(),
        ..args(config(&dir, json!({"name": "renamed"})))
    };
    run_del(&kernel, &ipam, &renamed).unwrap();
    assert_eq!(kernel.state(), before);
    assert!(state_files(&dir).is_empty());
    run_del(&kernel, &ipam, &renamed).unwrap();
}
