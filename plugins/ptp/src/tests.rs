//! ADD, DEL and CHECK on netkit's fake kernel, with an in-process IPAM and masquerade: the
//! order of operations, the rollback of a failure at every step, an idempotent DEL that
//! reports its failures, CHECK naming what differs.

use attach::netfilter::Netfilter;
use attach::testing::{
    args_in, config_with, every_failure_rolls_back, ops, ops_after, setup_uplink, with_prev_result,
    FakeIpam, FakeNetfilter,
};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;
use netkit::fake::{FakeKernel, FakeNs, HOST};
use netkit::netfilter::ipmasq::Backend;
use netkit::netfilter::iptables::Family;
use netkit::{Kernel, Netlink};
use serde_json::{json, Value};

use crate::{add, check, config, del};

const POD: &str = "/run/netns/pod";

fn config(extra: Value) -> Value {
    config_with(
        json!({"cniVersion": "1.0.0", "name": "n", "type": "ptp",
        "ipam": {"type": "fake-ipam"}}),
        extra,
    )
}

/// A host with eth0 behind a default route and forwarding on, a pod netns.
fn setup() -> (FakeKernel, FakeIpam) {
    let kernel = FakeKernel::new();
    setup_uplink(&kernel);
    kernel.setup_sysctl(HOST, "net/ipv4/ip_forward", "1");
    kernel.add_netns(POD);
    let ipam = FakeIpam::new(
        &kernel,
        json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}]}),
    );
    (kernel, ipam)
}

fn args(config: Value) -> CmdArgs {
    args_in(POD, config)
}

fn run_add(
    kernel: &FakeKernel,
    ipam: &FakeIpam,
    nf: &FakeNetfilter,
    config: Value,
) -> Result<CniResult, CniError> {
    let a = args(config);
    let c = config::load(&a)?;
    Ok(add::add(kernel, ipam, nf, &a, &c)?)
}

fn run_del(
    kernel: &FakeKernel,
    ipam: &FakeIpam,
    nf: &FakeNetfilter,
    a: &CmdArgs,
) -> Result<(), CniError> {
    Ok(del::del(kernel, ipam, nf, a, &config::load(a)?)?)
}

fn run_check(
    kernel: &FakeKernel,
    ipam: &FakeIpam,
    nf: &FakeNetfilter,
    a: &CmdArgs,
) -> Result<(), CniError> {
    Ok(check::check(kernel, ipam, nf, a, &config::load(a)?)?)
}

#[test]
fn add_makes_the_pair_addresses_routes_through_the_gateway_then_masquerades() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    kernel.reset();
    let r = run_add(
        &kernel,
        &ipam,
        &nf,
        config(json!({"mtu": 1400, "ipMasq": true})),
    )
    .unwrap();
    assert_eq!(
        ops(&kernel),
        [
            "host: socket",
            "open netns /run/netns/pod",
            "/run/netns/pod: socket",
            "host: link add veth* mtu 1400 up type veth peer name net1 netns /run/netns/pod",
            "host: sysctl -w net/ipv6/conf/veth*/accept_ra=0",
            "ipam ADD fake-ipam ctr1 net1",
            "host: sysctl net/ipv4/ip_forward",
            "/run/netns/pod: link get net1",
            "/run/netns/pod: addr add 10.1.0.5/24 dev net1",
            "/run/netns/pod: link set net1 up",
            "/run/netns/pod: route prepend 0.0.0.0/0 via 10.1.0.1 dev net1 table 254",
            "/run/netns/pod: route del 10.1.0.0/24 dev net1 table 254",
            "/run/netns/pod: route add 10.1.0.1/32 dev net1 table 254",
            "/run/netns/pod: route add 10.1.0.0/24 via 10.1.0.1 dev net1 table 254",
            "host: addr add 10.1.0.1/32 dev veth*",
            "host: route add 10.1.0.5/32 dev veth* table 254",
            "masquerade setup Nftables n/ctr1/net1 10.1.0.5/24",
        ]
    );
    let net1 = kernel.link(POD, "net1").unwrap();
    let host_end = kernel.link(HOST, &r.interfaces[0].name).unwrap();
    assert_eq!(
        (net1.kind.as_deref(), net1.mtu, net1.up, net1.parent),
        (Some("veth"), 1400, true, Some(host_end.index))
    );
    assert_eq!(r.interfaces[1].mac, netkit::link::format_mac(&net1.mac));
    assert_eq!(r.ips[0].interface, Some(1));
    assert_eq!(ipam.leases(), ["ctr1/net1"]);
    assert_eq!(nf.rules(), ["masquerade n/ctr1/net1 10.1.0.5/24"]);
}

#[test]
fn a_kernel_that_does_not_describe_a_new_veth_has_both_ends_looked_up() {
    let (kernel, ipam) = setup();
    kernel.without_new_link_echo();
    let nf = FakeNetfilter::new(&kernel);
    kernel.reset();
    let r = run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap();
    assert_eq!(
        ops_after(&kernel, "host: link add veth")[..3],
        [
            "host: sysctl -w net/ipv6/conf/veth*/accept_ra=0",
            "host: link get veth*",
            "/run/netns/pod: link get net1",
        ]
    );
    let net1 = kernel.link(POD, "net1").unwrap();
    let host_end = kernel.link(HOST, &r.interfaces[0].name).unwrap();
    assert_eq!(r.interfaces[0].mac, netkit::link::format_mac(&host_end.mac));
    assert_eq!(r.interfaces[1].mac, netkit::link::format_mac(&net1.mac));
}

#[test]
fn add_turns_forwarding_on_when_it_is_off() {
    let (kernel, ipam) = setup();
    kernel.setup_sysctl(HOST, "net/ipv4/ip_forward", "0");
    run_add(
        &kernel,
        &ipam,
        &FakeNetfilter::new(&kernel),
        config(json!({})),
    )
    .unwrap();
    assert_eq!(kernel.namespace(HOST).sysctls["net/ipv4/ip_forward"], "1");
}

#[test]
fn a_failure_at_any_step_of_add_leaves_nothing() {
    for extra in [json!({}), json!({"ipMasq": true, "mtu": 1400})] {
        let steps = every_failure_rolls_back(
            setup,
            |k, i| {
                let nf = FakeNetfilter::new(k);
                let outcome = run_add(k, i, &nf, config(extra.clone()));
                if outcome.is_err() {
                    assert!(nf.rules().is_empty(), "masquerade left: {:?}", ops(k));
                }
                outcome
            },
            // As in the reference, the host end's accept_ra is best effort.
            |op| op.contains("accept_ra"),
        );
        assert!(steps.len() >= 15, "{steps:#?}");
        for s in steps.iter().filter(|s| !s.op.contains("accept_ra")) {
            let e = s.error.as_ref().unwrap();
            assert!(e.msg.contains("injected"), "{}: {}", s.op, e.msg);
        }
    }
}

#[test]
fn add_refuses_a_taken_container_name_and_an_ipam_result_without_gateway() {
    let (kernel, ipam) = setup();
    kernel.setup_link(POD, "net1", Some("dummy"), 1500);
    let before = kernel.state();
    let e = run_add(
        &kernel,
        &ipam,
        &FakeNetfilter::new(&kernel),
        config(json!({})),
    )
    .unwrap_err();
    assert_eq!(e.msg, "container veth name provided (net1) already exists");
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty());

    let (kernel, _) = setup();
    let ipam = FakeIpam::new(
        &kernel,
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/24"}]}),
    );
    let before = kernel.state();
    let e = run_add(
        &kernel,
        &ipam,
        &FakeNetfilter::new(&kernel),
        config(json!({})),
    )
    .unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (
            999,
            "IPAM returned 10.1.0.5/24 without a gateway; ptp routes the container through it"
        )
    );
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty());
}

#[test]
fn del_is_idempotent() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    let before = kernel.state();
    let conf = config(json!({"ipMasq": true}));
    let r = run_add(&kernel, &ipam, &nf, conf.clone()).unwrap();
    let a = with_prev_result(args(conf), &r);
    kernel.reset();
    run_del(&kernel, &ipam, &nf, &a).unwrap();
    // The masquerade teardown runs on its own thread, alongside the link's deletion.
    let mut log = ops(&kernel);
    log[1..].sort();
    assert_eq!(
        log,
        [
            "ipam DEL fake-ipam ctr1 net1",
            "/run/netns/pod: link del net1",
            "/run/netns/pod: socket",
            "masquerade teardown n/ctr1/net1 [V4]",
            "open netns /run/netns/pod",
        ]
    );
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty() && nf.rules().is_empty());
    // Again, then with the netns gone, then without a netns: nothing to do, no error.
    run_del(&kernel, &ipam, &nf, &a).unwrap();
    kernel.remove_netns(POD);
    run_del(&kernel, &ipam, &nf, &a).unwrap();
    let mut no_netns = a.clone();
    no_netns.netns.clear();
    run_del(&kernel, &ipam, &nf, &no_netns).unwrap();
}

#[test]
fn a_netns_gone_before_del_takes_the_host_end_with_it() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    let before = kernel.state();
    let r = run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap();
    kernel.remove_netns(POD);
    assert!(kernel.link(HOST, &r.interfaces[0].name).is_none());
    run_del(&kernel, &ipam, &nf, &args(config(json!({})))).unwrap();
    kernel.add_netns(POD);
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty());
}

#[test]
fn del_does_every_step_and_reports_the_failures() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    let before = kernel.state();
    let a = args(config(json!({"ipMasq": true})));
    run_add(&kernel, &ipam, &nf, config(json!({"ipMasq": true}))).unwrap();

    // IPAM fails: the link and the rules go all the same, IPAM's failure is the error.
    kernel.fail_when(|op| op.starts_with("ipam DEL"));
    let e = run_del(&kernel, &ipam, &nf, &a).unwrap_err();
    assert!(e.msg.contains("ipam DEL"), "{}", e.msg);
    assert_eq!(kernel.state(), before);
    assert!(nf.rules().is_empty());

    // The link, IPAM and the masquerade all fail: the link's failure is the error, and
    // every step was tried.
    run_add(&kernel, &ipam, &nf, config(json!({"ipMasq": true}))).unwrap();
    kernel.reset();
    kernel.fail_when(|op| op.contains("link del net1"));
    kernel.fail_when(|op| op.starts_with("ipam DEL"));
    kernel.fail_when(|op| op.starts_with("masquerade teardown"));
    let e = run_del(&kernel, &ipam, &nf, &a).unwrap_err();
    assert!(e.msg.contains("link del net1 (injected)"), "{}", e.msg);
    let failed: Vec<String> = ops(&kernel)
        .into_iter()
        .filter(|op| op.ends_with("(injected failure)"))
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    // Retried, DEL finishes the job.
    run_del(&kernel, &ipam, &nf, &a).unwrap();
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty() && nf.rules().is_empty());
}

#[test]
fn check_passes_after_add_and_names_what_differs() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    let conf = config(json!({"ipMasq": true}));
    let r = run_add(&kernel, &ipam, &nf, conf.clone()).unwrap();
    let a = with_prev_result(args(conf), &r);
    run_check(&kernel, &ipam, &nf, &a).unwrap();

    let host_end = kernel.link(HOST, &r.interfaces[0].name).unwrap();
    let mut host = kernel.socket().unwrap();
    // The masquerade rules.
    nf.teardown_masquerade("n", "net1", "ctr1", &[Family::V4], &[])
        .unwrap();
    let e = run_check(&kernel, &ipam, &nf, &a).unwrap_err();
    assert_eq!(e.msg, "masquerade of n/ctr1/net1: no rule");
    nf.setup_masquerade(
        Backend::Nftables,
        &["10.1.0.5/24".parse().unwrap()],
        "n",
        "net1",
        "ctr1",
    )
    .unwrap();
    // The host route to the container.
    host.delete_route(&netkit::Route::new("10.1.0.5/32".parse().unwrap()).dev(host_end.index))
        .unwrap();
    let e = run_check(&kernel, &ipam, &nf, &a).unwrap_err();
    assert_eq!(
        e.msg,
        format!("ptp: no host route to 10.1.0.5 via {}", host_end.name)
    );
    // The gateway address on the host end.
    host.delete_address(host_end.index, "10.1.0.1/32".parse().unwrap())
        .unwrap();
    let e = run_check(&kernel, &ipam, &nf, &a).unwrap_err();
    assert_eq!(
        e.msg,
        format!(
            "ptp: gateway 10.1.0.1 is not on the host end {}",
            host_end.name
        )
    );
    // The container's address, then the container end itself.
    let net1 = kernel.link(POD, "net1").unwrap();
    let mut pod = kernel.socket_in(&FakeNs(POD.into())).unwrap();
    pod.delete_address(net1.index, "10.1.0.5/24".parse().unwrap())
        .unwrap();
    pod.delete_link(net1.index).unwrap();
    let e = run_check(&kernel, &ipam, &nf, &a).unwrap_err();
    assert_eq!(
        e.msg,
        "Container Interface name in prevResult: net1 not found"
    );
    // Not a veth.
    kernel.setup_link(POD, "net1", Some("dummy"), 1500);
    let mut not_veth = r.clone();
    not_veth.interfaces[1].mac.clear();
    let a2 = with_prev_result(args(config(json!({}))), &not_veth);
    let e = run_check(&kernel, &ipam, &nf, &a2).unwrap_err();
    assert_eq!(
        e.msg,
        "Error: Container interface net1 not of type veth/p2p"
    );
    // Without prevResult.
    let e = run_check(&kernel, &ipam, &nf, &args(config(json!({})))).unwrap_err();
    assert_eq!(e.msg, "ptp: Required prevResult missing");
}
