//! ADD, DEL and CHECK on netkit's fake kernel, with an in-process IPAM and netfilter: the
//! order of operations, the rollback of a failure at every step, an idempotent DEL that
//! reports every failure, CHECK, VLAN planning and the gateway.

use attach::netfilter::Netfilter;
use attach::testing::{
    args_in, config_with, every_failure_rolls_back, ops, ops_after, with_prev_result, FakeIpam,
    FakeNetfilter,
};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;
use netkit::fake::{FakeKernel, FakeNs, FakePort, FakeState, FakeVlan, HOST};
use netkit::{Kernel, Netlink};
use serde_json::{json, Value};

use crate::{add, check, config, del};

const POD: &str = "/run/netns/pod";

fn config(extra: Value) -> Value {
    config_with(
        json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge",
        "bridge": "br0", "isGateway": true, "ipam": {"type": "fake-ipam"}}),
        extra,
    )
}

/// A host with eth0 and forwarding on, and a pod netns; IPAM hands out 10.1.0.5/24.
fn setup() -> (FakeKernel, FakeIpam) {
    let kernel = FakeKernel::new();
    kernel.setup_link(HOST, "eth0", None, 1500);
    kernel.setup_sysctl(HOST, "net/ipv4/ip_forward", "1");
    kernel.setup_sysctl(HOST, "net/ipv6/conf/all/forwarding", "1");
    kernel.add_netns(POD);
    let ipam = FakeIpam::new(
        &kernel,
        json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.1.0.5/24"}],
            "routes": [{"dst": "192.168.0.0/16"}]}),
    );
    (kernel, ipam)
}

/// [`setup`] with br0 already there, as an earlier ADD leaves it: up, its MAC pinned, the
/// gateway address on it, VLAN filtering as given.
fn setup_with_bridge(vlan_filtering: bool) -> (FakeKernel, FakeIpam) {
    let (kernel, ipam) = setup();
    let mut host = kernel.socket().unwrap();
    let br = host
        .ensure_bridge("br0", &netkit::BridgeOptions::default())
        .unwrap();
    host.set_link_mac(br.index, &[0x02, 0, 0, 0, 0, 0xb0])
        .unwrap();
    host.set_link_up(br.index).unwrap();
    if vlan_filtering {
        host.set_bridge_vlan_filtering("br0", true).unwrap();
    }
    kernel.setup_address(HOST, br.index, "10.1.0.1/24".parse().unwrap());
    kernel.reset();
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
    Ok(add::add(kernel, ipam, nf, &a, &config::load(&a)?)?)
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

/// The host end of the pod's veth (the only veth of the host).
fn host_veth(kernel: &FakeKernel) -> netkit::fake::FakeLink {
    let host = kernel.namespace(HOST);
    let mut veths = host
        .links
        .values()
        .filter(|l| l.kind.as_deref() == Some("veth") && l.name.starts_with("veth"));
    let v = veths.next().expect("a host veth").clone();
    assert!(veths.next().is_none());
    v
}

fn port(kernel: &FakeKernel, name: &str) -> FakePort {
    let host = kernel.namespace(HOST);
    let l = host.links.values().find(|l| l.name == name).unwrap();
    host.ports.get(&l.index).cloned().expect("a bridge port")
}

fn vlan(pvid: bool, untagged: bool) -> FakeVlan {
    FakeVlan { pvid, untagged }
}

#[test]
fn add_creates_the_bridge_pins_its_mac_then_plugs_and_addresses_the_pod() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    kernel.reset();
    let r = run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap();
    let log = ops(&kernel);
    assert_eq!(
        log,
        [
            "host: socket",
            "open netns /run/netns/pod",
            "/run/netns/pod: socket",
            "host: link get br0",
            "host: link add br0 type bridge",
            "host: link get br0",
            // Its accept_ra (0) came with the lookup: no /proc/sys access for it.
            "host: link set br0 up",
            "host: link get #3",
            // A new bridge's MAC is the kernel's random one: pinned before the port joins.
            "host: cat /sys/class/net/br0/addr_assign_type",
            "host: link set br0 address 02:fa:00:00:00:03",
            // The kernel described both ends as it made them: no lookup of either.
            "host: link add veth* master br0 type veth peer name net1 netns /run/netns/pod",
            "host: sysctl -w net/ipv6/conf/veth*/accept_ra=0",
            // IPAM that may need the link (any but host-local and static) once it exists.
            "ipam ADD fake-ipam ctr1 net1",
            "/run/netns/pod: sysctl -w net/ipv6/conf/net1/accept_dad=0",
            "/run/netns/pod: sysctl -w net/ipv4/conf/net1/arp_notify=1",
            "/run/netns/pod: addr add 10.1.0.5/24 dev net1",
            "host: link set veth* up",
            "/run/netns/pod: link set net1 up",
            "/run/netns/pod: route prepend 192.168.0.0/16 via 10.1.0.1 dev net1 table 254",
            "host: addr show dev br0",
            "host: addr add 10.1.0.1/24 dev br0",
            "host: sysctl net/ipv4/ip_forward",
            "host: link get #4",
        ]
    );
    let host = kernel.namespace(HOST);
    let br = kernel.link(HOST, "br0").unwrap();
    let veth = host_veth(&kernel);
    let net1 = kernel.link(POD, "net1").unwrap();
    // Pinned before the port joined: the bridge kept its own MAC, not the port's.
    assert_eq!(br.mac, [0x02, 0xfa, 0, 0, 0, 3]);
    assert!(host.mac_set.contains(&br.index));
    assert_eq!(
        (veth.master, veth.parent),
        (Some(br.index), Some(net1.index))
    );
    assert_eq!(net1.parent, Some(veth.index));
    assert!(net1.up && br.up && veth.up);
    assert!(host
        .addresses
        .contains(&(br.index, "10.1.0.1/24".parse().unwrap())));
    let pod = kernel.namespace(POD);
    assert_eq!(
        pod.addresses,
        [(net1.index, "10.1.0.5/24".parse().unwrap())]
    );
    assert_eq!(
        port(&kernel, &veth.name),
        FakePort {
            hairpin: false,
            isolated: false,
            learning: true,
            vlans: [(1, vlan(true, true))].into(),
        }
    );
    let names: Vec<&str> = r.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["br0", veth.name.as_str(), "net1"]);
    assert_eq!(r.interfaces[0].mac, netkit::link::format_mac(&br.mac));
    assert_eq!(r.interfaces[2].sandbox, POD);
    assert_eq!(
        (r.ips[0].interface, r.ips[0].gateway),
        (Some(2), Some("10.1.0.1".parse().unwrap()))
    );
    assert_eq!(ipam.leases(), ["ctr1/net1"]);
}

#[test]
fn an_existing_bridge_is_reused_with_its_mac_and_new_ports_get_their_settings() {
    let (kernel, ipam) = setup_with_bridge(false);
    let nf = FakeNetfilter::new(&kernel);
    let br_before = kernel.link(HOST, "br0").unwrap();
    let r = run_add(
        &kernel,
        &ipam,
        &nf,
        config(
            json!({"hairpinMode": true, "portIsolation": true, "mtu": 1400,
            "args": {"cni": {"mac": "02:00:00:00:00:42"}}}),
        ),
    )
    .unwrap();
    let log = ops(&kernel);
    assert!(!log.iter().any(|o| o.contains("link add br0")), "{log:#?}");
    assert!(log.contains(&"host: bridge link set dev veth* hairpin on isolated on".to_string()));
    let br = kernel.link(HOST, "br0").unwrap();
    assert_eq!((br.index, br.mac), (br_before.index, br_before.mac));
    let veth = host_veth(&kernel);
    let p = port(&kernel, &veth.name);
    assert!(p.hairpin && p.isolated && p.learning);
    let net1 = kernel.link(POD, "net1").unwrap();
    assert_eq!(
        (net1.mac, net1.mtu, veth.mtu),
        ([2, 0, 0, 0, 0, 0x42], 1400, 1400)
    );
    assert_eq!(r.interfaces[2].mac, "02:00:00:00:00:42");
}

#[test]
fn a_bridge_whose_mac_is_pinned_is_not_pinned_again() {
    // Setting a MAC, even the same, flushes the bridge's neighbour entries: only a bridge
    // whose MAC is not set yet (one made outside CNI here) gets the request, once.
    let (kernel, ipam) = setup();
    let mut host = kernel.socket().unwrap();
    let br = host
        .ensure_bridge("br0", &netkit::BridgeOptions::default())
        .unwrap();
    host.set_link_up(br.index).unwrap();
    let nf = FakeNetfilter::new(&kernel);
    let pins = |kernel: &FakeKernel| {
        ops(kernel)
            .iter()
            .filter(|o| o.starts_with("host: link set br0 address"))
            .count()
    };
    kernel.reset();
    run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap();
    assert_eq!(pins(&kernel), 1, "{:#?}", ops(&kernel));
    assert!(kernel.namespace(HOST).mac_set.contains(&br.index));
    let first = kernel.link(HOST, "br0").unwrap().mac;

    let mut second = args(config(json!({})));
    second.container_id = "ctr2".into();
    second.netns = "/run/netns/pod2".into();
    kernel.add_netns("/run/netns/pod2");
    kernel.reset();
    add::add(
        &kernel,
        &ipam,
        &nf,
        &second,
        &config::load(&second).unwrap(),
    )
    .unwrap();
    let log = ops(&kernel);
    assert!(log.contains(&"host: cat /sys/class/net/br0/addr_assign_type".to_string()));
    assert_eq!(pins(&kernel), 0, "{log:#?}");
    assert_eq!(kernel.link(HOST, "br0").unwrap().mac, first);
}

#[test]
fn a_bridge_accepting_router_advertisements_is_set_to_refuse_them() {
    // The value comes with the bridge's lookup; only a bridge not at 0 gets a write (the
    // first test shows one at 0 getting no sysctl access at all).
    let (kernel, ipam) = setup_with_bridge(false);
    kernel.setup_sysctl(HOST, "net/ipv6/conf/br0/accept_ra", "2");
    let nf = FakeNetfilter::new(&kernel);
    run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap();
    let log = ops(&kernel);
    let br_sysctls: Vec<_> = log.iter().filter(|o| o.contains("conf/br0/")).collect();
    assert_eq!(
        br_sysctls,
        ["host: sysctl -w net/ipv6/conf/br0/accept_ra=0"],
        "{log:#?}"
    );
    let host = kernel.namespace(HOST);
    assert_eq!(host.sysctls["net/ipv6/conf/br0/accept_ra"], "0");
}

#[test]
fn an_unpinned_bridge_would_take_its_lowest_ports_mac() {
    // The kernel rule the pinning guards against, as the fake models it.
    let (kernel, _) = setup();
    let mut host = kernel.socket().unwrap();
    let br = host
        .ensure_bridge("br9", &netkit::BridgeOptions::default())
        .unwrap();
    let spec = netkit::VethSpec {
        name: "v0",
        peer_name: "v1",
        mac: Some([0x02, 0, 0, 0, 0, 1]),
        master: Some(br.index),
        ..Default::default()
    };
    host.create_veth(&spec, None).unwrap();
    assert_eq!(
        host.link_by_name("br9").unwrap().mac,
        vec![2, 0, 0, 0, 0, 1]
    );
    // Deleting one end takes the peer and the port with it.
    assert!(host.delete_link_by_name("v1").unwrap());
    assert!(host.find_link("v0").unwrap().is_none());
    assert!(kernel.namespace(HOST).ports.is_empty());
}

/// ADD with a failure injected at each of its steps, on a host whose bridge already exists:
/// the kernel, IPAM and netfilter are left exactly as they were.
#[test]
fn a_failure_at_any_step_of_add_leaves_nothing_behind() {
    for (filtering, extra) in [
        (false, json!({})),
        (false, json!({"ipam": null})),
        (
            false,
            json!({"isDefaultGateway": true, "ipMasq": true, "macspoofchk": true}),
        ),
        (
            false,
            json!({"hairpinMode": true, "promiscMode": false, "portIsolation": true}),
        ),
        (
            true,
            json!({"vlan": 100, "preserveDefaultVlan": false, "isGateway": false}),
        ),
        (
            true,
            json!({"vlanTrunk": [{"minID": 200, "maxID": 202}], "isGateway": false}),
        ),
    ] {
        let steps = every_failure_rolls_back(
            || setup_with_bridge(filtering),
            |k, i| {
                let nf = FakeNetfilter::new(k);
                let r = run_add(k, i, &nf, config(extra.clone()));
                if r.is_err() {
                    assert!(nf.rules().is_empty(), "{extra}: {:?}", nf.rules());
                }
                r
            },
            best_effort,
        );
        assert!(steps.len() >= 10, "{extra}: {steps:#?}");
        for s in steps.iter().filter(|s| !best_effort(&s.op)) {
            let e = s.error.as_ref().unwrap();
            assert!(e.msg.contains("injected"), "{extra}: {}: {}", s.op, e.msg);
        }
    }
}

#[test]
fn a_kernel_that_does_not_describe_a_new_veth_has_the_container_end_looked_up() {
    let (kernel, ipam) = setup();
    kernel.without_new_link_echo();
    let nf = FakeNetfilter::new(&kernel);
    kernel.reset();
    let r = run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap();
    // The container end gives its index and, as IFLA_LINK, the host end's: one lookup.
    let after = ops_after(&kernel, "host: link add veth");
    assert_eq!(after[0], "/run/netns/pod: link get net1");
    let log = ops(&kernel);
    assert!(!log.iter().any(|op| op.starts_with("host: link get veth")));
    let net1 = kernel.link(POD, "net1").unwrap();
    let veth = host_veth(&kernel);
    assert_eq!(net1.parent, Some(veth.index));
    assert_eq!(r.interfaces[2].mac, netkit::link::format_mac(&net1.mac));
    assert_eq!(r.interfaces[1].mac, netkit::link::format_mac(&veth.mac));
}

/// Sysctls ADD sets only where they exist, as the reference (IPv6 may be disabled), and the
/// sysfs read of whether the bridge's MAC is pinned (without an answer, it is pinned again).
fn best_effort(op: &str) -> bool {
    (op.contains(": sysctl") && !op.contains("forward")) || op.contains(": cat /sys/")
}

/// The bridge a failed ADD created stays (it is shared, and never deleted, as in the
/// reference), without ports, at most with the gateway address (shared by the pods of the
/// subnet, kept like the bridge); everything else is as before.
#[test]
fn a_failed_add_leaves_only_the_bare_bridge_it_created() {
    let extra = json!({"ipMasq": true});
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    kernel.reset();
    run_add(&kernel, &ipam, &nf, config(extra.clone())).unwrap();
    let count = kernel.ops().len();
    for n in 0..count {
        let (kernel, ipam) = setup();
        let nf = FakeNetfilter::new(&kernel);
        let before = kernel.state();
        kernel.fail_at(n);
        let Err(e) = run_add(&kernel, &ipam, &nf, config(extra.clone())) else {
            continue;
        };
        let op = &ops(&kernel)[n];
        assert!(ipam.leases().is_empty() && nf.rules().is_empty(), "{op}");
        assert_eq!(without_bridge(kernel.state(), "br0"), before, "{op}: {e}");
        let host = kernel.namespace(HOST);
        assert!(host.ports.is_empty(), "{op}");
        if let Some(br) = kernel.link(HOST, "br0") {
            let gateway = (br.index, "10.1.0.1/24".parse().unwrap());
            assert!(host.addresses.iter().all(|a| *a == gateway), "{op}");
        }
    }
}

fn without_bridge(mut state: FakeState, name: &str) -> FakeState {
    if let Some(host) = state.namespaces.get_mut(HOST) {
        if let Some(index) = host
            .links
            .values()
            .find(|l| l.name == name)
            .map(|l| l.index)
        {
            host.links.remove(&index);
            host.addresses.retain(|(i, _)| *i != index);
            host.mac_set.remove(&index);
            host.promisc.remove(&index);
        }
    }
    state
}

#[test]
fn del_is_idempotent_and_leaves_the_host_as_before_add() {
    let (kernel, ipam) = setup_with_bridge(false);
    let nf = FakeNetfilter::new(&kernel);
    let before = kernel.state();
    let conf = config(json!({"ipMasq": true, "macspoofchk": true}));
    let r = run_add(&kernel, &ipam, &nf, conf.clone()).unwrap();
    assert_eq!(nf.rules().len(), 2, "{:?}", nf.rules());
    let a = with_prev_result(args(conf), &r);
    kernel.reset();
    run_del(&kernel, &ipam, &nf, &a).unwrap();
    assert_eq!(
        ops(&kernel),
        [
            "ipam DEL fake-ipam ctr1 net1",
            "open netns /run/netns/pod",
            "/run/netns/pod: socket",
            "/run/netns/pod: link get net1",
            "/run/netns/pod: addr show dev net1",
            "/run/netns/pod: link del net1",
            "spoof check remove macspoofchk-ctr1-net1",
            "masquerade teardown n/ctr1/net1 [V4]",
        ]
    );
    // The veth went with its container end; the bridge and its gateway address stay.
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
fn del_carries_on_after_each_failure_and_reports_it() {
    let conf = config(json!({"ipMasq": true, "macspoofchk": true}));
    for failing in [
        "ipam DEL",
        "link del net1",
        "masquerade teardown",
        "open netns",
    ] {
        let (kernel, ipam) = setup_with_bridge(false);
        let nf = FakeNetfilter::new(&kernel);
        let r = run_add(&kernel, &ipam, &nf, conf.clone()).unwrap();
        let a = with_prev_result(args(conf.clone()), &r);
        kernel.reset();
        kernel.fail_when(move |op| op.contains(failing));
        let e = run_del(&kernel, &ipam, &nf, &a).unwrap_err();
        assert!(e.msg.contains(failing), "{failing}: {}", e.msg);
        // Every other step ran.
        let link_kept = matches!(failing, "link del net1" | "open netns");
        assert_eq!(kernel.link(POD, "net1").is_some(), link_kept, "{failing}");
        assert_eq!(ipam.leases().is_empty(), failing != "ipam DEL", "{failing}");
        let masq_left = nf.rules().iter().any(|r| r.starts_with("masquerade"));
        assert_eq!(masq_left, failing == "masquerade teardown", "{failing}");
        assert!(!nf.rules().iter().any(|r| r.starts_with("spoofcheck")));
        // A second DEL finishes the job.
        run_del(&kernel, &ipam, &nf, &a).unwrap();
        assert!(kernel.link(POD, "net1").is_none() && ipam.leases().is_empty());
        assert!(nf.rules().is_empty());
    }
}

#[test]
fn check_passes_after_add_and_names_what_differs() {
    let (kernel, ipam) = setup_with_bridge(false);
    let nf = FakeNetfilter::new(&kernel);
    let conf = config(json!({"ipMasq": true, "macspoofchk": true}));
    let r = run_add(&kernel, &ipam, &nf, conf.clone()).unwrap();
    let checked = |extra: Value| {
        let mut c = conf.clone();
        for (k, v) in extra.as_object().into_iter().flatten() {
            c[k] = v.clone();
        }
        run_check(&kernel, &ipam, &nf, &with_prev_result(args(c), &r))
    };
    checked(json!({})).unwrap();
    let e = checked(json!({"promiscMode": true})).unwrap_err();
    assert_eq!(
        e.msg,
        "Error: Bridge interface br0 promisc set to false, expected true"
    );
    let e = checked(json!({"bridge": "eth0"})).unwrap_err();
    assert_eq!(e.msg, "Error: Bridge interface eth0 is not a bridge");

    // A rule gone.
    let sc = netkit::netfilter::spoofcheck::SpoofChecker::new("", "", "ctr1-net1");
    nf.remove_spoof_check(&sc).unwrap();
    let e = checked(json!({})).unwrap_err();
    assert_eq!(e.msg, "spoof-check rules macspoofchk-ctr1-net1 are missing");
    nf.install_spoof_check(&sc).unwrap();
    checked(json!({})).unwrap();

    // The container's address gone.
    let net1 = kernel.link(POD, "net1").unwrap();
    let mut pod = kernel.socket_in(&FakeNs(POD.into())).unwrap();
    pod.delete_address(net1.index, "10.1.0.5/24".parse().unwrap())
        .unwrap();
    let e = checked(json!({})).unwrap_err();
    assert_eq!(e.msg, "Failed to match addr 10.1.0.5/24 on interface net1");

    // The host end moved to another bridge.
    let mut host = kernel.socket().unwrap();
    let other = host
        .ensure_bridge("br1", &netkit::BridgeOptions::default())
        .unwrap();
    let veth = host_veth(&kernel);
    host.set_link_master(veth.index, other.index).unwrap();
    let e = checked(json!({})).unwrap_err();
    assert_eq!(
        e.msg,
        format!("Interface {} is not attached to bridge br0", veth.name)
    );

    // The bridge's MAC changed.
    let br = kernel.link(HOST, "br0").unwrap();
    host.set_link_mac(br.index, &[2, 0, 0, 0, 0, 0xee]).unwrap();
    let e = checked(json!({})).unwrap_err();
    assert_eq!(
        e.msg,
        "Bridge interface br0 Mac doesn't match: 02:00:00:00:00:b0 found 02:00:00:00:00:ee"
    );

    host.set_link_mac(br.index, &br.mac).unwrap();
    host.set_link_master(veth.index, br.index).unwrap();

    // The container end gone.
    pod.delete_link(net1.index).unwrap();
    let e = checked(json!({})).unwrap_err();
    assert!(e.msg.contains("net1"), "{}", e.msg);

    // Without prevResult.
    let e = run_check(&kernel, &ipam, &nf, &args(conf.clone())).unwrap_err();
    assert_eq!(e.msg, "Required prevResult missing");
}

#[test]
fn vlan_ports_take_the_vlan_as_untagged_pvid() {
    let cases = [
        // The default VLAN is kept (not as PVID) unless told otherwise.
        (
            json!({"vlan": 100}),
            vec![(1, vlan(false, true)), (100, vlan(true, true))],
        ),
        (
            json!({"vlan": 100, "preserveDefaultVlan": false}),
            vec![(100, vlan(true, true))],
        ),
        // A trunk without a VLAN: tagged IDs, and the default VLAN as native.
        (
            json!({"vlanTrunk": [{"minID": 200, "maxID": 202}, {"id": 300}]}),
            vec![
                (1, vlan(true, true)),
                (200, vlan(false, false)),
                (201, vlan(false, false)),
                (202, vlan(false, false)),
                (300, vlan(false, false)),
            ],
        ),
        // The native VLAN within the trunk stays untagged.
        (
            json!({"vlan": 201, "vlanTrunk": [{"minID": 200, "maxID": 202}],
                "preserveDefaultVlan": false}),
            vec![
                (200, vlan(false, false)),
                (201, vlan(true, true)),
                (202, vlan(false, false)),
            ],
        ),
    ];
    for (extra, expected) in cases {
        let (kernel, ipam) = setup();
        let nf = FakeNetfilter::new(&kernel);
        let mut c = config(extra.clone());
        c["isGateway"] = json!(false);
        run_add(&kernel, &ipam, &nf, c).unwrap();
        let br = kernel.link(HOST, "br0").unwrap();
        assert!(
            matches!(&br.data, Some(netkit::packet_route::link::InfoData::Bridge(i))
                if i.contains(&netkit::packet_route::link::InfoBridge::VlanFiltering(true))),
            "{extra}"
        );
        let p = port(&kernel, &host_veth(&kernel).name);
        assert_eq!(p.vlans, expected.into_iter().collect(), "{extra}");
    }
}

#[test]
fn an_existing_bridge_gets_vlan_filtering_turned_on() {
    let (kernel, ipam) = setup_with_bridge(false);
    let nf = FakeNetfilter::new(&kernel);
    run_add(
        &kernel,
        &ipam,
        &nf,
        config(json!({"vlan": 7, "isGateway": false})),
    )
    .unwrap();
    assert!(ops(&kernel).contains(&"host: link set br0 type bridge vlan_filtering 1".into()));
    // Without VLAN filtering in the kernel the error says what is needed.
    let (kernel, ipam) = setup();
    kernel.fail_when_with(libc::EOPNOTSUPP, |op| op.contains("link add br0"));
    let e = run_add(
        &kernel,
        &ipam,
        &FakeNetfilter::new(&kernel),
        config(json!({"vlan": 7})),
    )
    .unwrap_err();
    assert!(
        e.msg
            .ends_with("(vlan/vlanTrunk need a kernel with bridge VLAN filtering)"),
        "{}",
        e.msg
    );
}

#[test]
fn the_vlan_gateway_holds_the_gateway_address_and_is_shared() {
    let (kernel, ipam) = setup();
    let nf = FakeNetfilter::new(&kernel);
    let r = run_add(&kernel, &ipam, &nf, config(json!({"vlan": 100}))).unwrap();
    let gw = kernel.link(HOST, "br0.100").expect("the VLAN gateway");
    let host = kernel.namespace(HOST);
    assert!(gw.up);
    assert_eq!(host.addresses, [(gw.index, "10.1.0.1/24".parse().unwrap())]);
    let gw_port = host.links.get(&gw.parent.unwrap()).unwrap();
    assert_eq!(gw_port.master, kernel.link(HOST, "br0").map(|b| b.index));
    assert_eq!(
        host.ports.get(&gw_port.index).unwrap().vlans.get(&100),
        Some(&vlan(true, true))
    );
    assert!(r.interfaces.iter().any(|i| i.name == "br0.100"));
    // A second pod adopts it.
    let mut a = args(config(json!({"vlan": 100})));
    a.container_id = "ctr2".into();
    kernel.add_netns("/run/netns/pod2");
    a.netns = "/run/netns/pod2".into();
    add::add(&kernel, &ipam, &nf, &a, &config::load(&a).unwrap()).unwrap();
    let gws = kernel
        .namespace(HOST)
        .links
        .values()
        .filter(|l| l.name.starts_with("br0."))
        .count();
    assert_eq!(gws, 1);
}

#[test]
fn default_gateway_routes_and_forwarding() {
    let (kernel, ipam) = setup();
    kernel.setup_sysctl(HOST, "net/ipv4/ip_forward", "0");
    let nf = FakeNetfilter::new(&kernel);
    let r = run_add(
        &kernel,
        &ipam,
        &nf,
        config(json!({"isDefaultGateway": true})),
    )
    .unwrap();
    let pod = kernel.namespace(POD);
    let default = pod
        .routes
        .iter()
        .find(|r| r.dst.prefix() == 0)
        .expect("a default route");
    assert_eq!(default.gateway, Some("10.1.0.1".parse().unwrap()));
    assert_eq!(r.routes.len(), 2);
    assert_eq!(
        kernel
            .namespace(HOST)
            .sysctls
            .get("net/ipv4/ip_forward")
            .map(String::as_str),
        Some("1")
    );

    // Without isGateway: no address on the bridge, no gateway in the result or the routes.
    let (kernel, ipam) = setup();
    let r = run_add(
        &kernel,
        &ipam,
        &FakeNetfilter::new(&kernel),
        config(json!({"isGateway": false})),
    )
    .unwrap();
    assert!(kernel.namespace(HOST).addresses.is_empty());
    assert_eq!(r.ips[0].gateway, None);
    assert!(kernel
        .namespace(POD)
        .routes
        .iter()
        .all(|r| r.gateway.is_none()));
}

#[test]
fn another_address_on_the_bridge_is_refused_unless_forced() {
    let (kernel, ipam) = setup_with_bridge(false);
    let br = kernel.link(HOST, "br0").unwrap();
    let mut host = kernel.socket().unwrap();
    host.delete_address(br.index, "10.1.0.1/24".parse().unwrap())
        .unwrap();
    kernel.setup_address(HOST, br.index, "10.9.0.1/24".parse().unwrap());
    let before = kernel.state();
    let nf = FakeNetfilter::new(&kernel);
    let e = run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap_err();
    assert_eq!(
        e.msg,
        "\"br0\" already has an IP address different from 10.1.0.1/24 (it has 10.9.0.1/24; set \"forceAddress\": true to replace it)"
    );
    assert_eq!(kernel.state(), before);
    run_add(&kernel, &ipam, &nf, config(json!({"forceAddress": true}))).unwrap();
    assert_eq!(
        kernel.namespace(HOST).addresses,
        [(br.index, "10.1.0.1/24".parse().unwrap())]
    );
}

#[test]
fn a_taken_container_ifname_fails_without_side_effects() {
    let (kernel, ipam) = setup_with_bridge(false);
    kernel.setup_link(POD, "net1", Some("dummy"), 1500);
    let before = kernel.state();
    let nf = FakeNetfilter::new(&kernel);
    let e = run_add(&kernel, &ipam, &nf, config(json!({}))).unwrap_err();
    assert_eq!(e.msg, "container veth name provided (net1) already exists");
    assert_eq!(kernel.state(), before);
    assert!(ipam.leases().is_empty());
}

#[test]
fn dual_stack_gateways_and_ipv6_sysctls() {
    let (kernel, _) = setup();
    kernel.setup_sysctl(HOST, "net/ipv6/conf/all/forwarding", "0");
    let ipam = FakeIpam::new(
        &kernel,
        json!({"cniVersion": "1.0.0",
            "ips": [{"address": "10.1.0.5/24"}, {"address": "fd00:1::5/64"}]}),
    );
    let nf = FakeNetfilter::new(&kernel);
    let r = run_add(
        &kernel,
        &ipam,
        &nf,
        config(json!({"isDefaultGateway": true})),
    )
    .unwrap();
    let log = ops(&kernel);
    for op in [
        "/run/netns/pod: sysctl net/ipv6/conf/net1/disable_ipv6",
        "/run/netns/pod: sysctl net/ipv6/conf/net1/keep_addr_on_down",
        "/run/netns/pod: sysctl -w net/ipv6/conf/net1/keep_addr_on_down=1",
        "host: addr add fd00:1::1/64 dev br0",
        "host: sysctl -w net/ipv6/conf/all/forwarding=1",
    ] {
        assert!(log.iter().any(|o| o == op), "{op}: {log:#?}");
    }
    let br = kernel.link(HOST, "br0").unwrap();
    assert_eq!(
        kernel.namespace(HOST).addresses,
        [
            (br.index, "10.1.0.1/24".parse().unwrap()),
            (br.index, "fd00:1::1/64".parse().unwrap()),
        ]
    );
    let defaults: Vec<String> = r
        .routes
        .iter()
        .map(|r| format!("{} via {:?}", r.dst, r.gw))
        .collect();
    assert_eq!(
        defaults,
        ["0.0.0.0/0 via Some(10.1.0.1)", "::/0 via Some(fd00:1::1)"]
    );
}
