//! The `vlan` CNI plugin: an 802.1Q VLAN link on a host interface (the master), renamed to
//! `CNI_IFNAME` inside the container and addressed by IPAM.

use vlan::{config, error};

use attach::ipam::{ExecIpam, Ipam};
use attach::rollback::{self, Rollback};
use attach::{check, configure, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{vlan_id, vlan_message, NewLinkBase, VlanSpec};
use netkit::packet_route::link::LinkMessage;
use netkit::{Kernel, Link, LiveKernel, Netlink};

use config::NetConf;
use error::VlanError;

struct Vlan;

/// The master, looked up where it lives, with the MTU checked against it.
fn master<S: Netlink>(conf: &NetConf, host: &mut S, cont: &mut S) -> Result<Link, CniError> {
    link::master_checked(
        host,
        cont,
        conf.link_in_container,
        &conf.master,
        conf.requested_mtu,
    )
}

/// The vlan link request for VLAN `id`.
fn vlan_request(id: u16) -> impl Fn(NewLinkBase<'_>) -> LinkMessage {
    move |base| vlan_message(&VlanSpec { base, id })
}

/// ADD with the link request built by `message` (the vlan request; tests on a kernel without
/// the 802.1Q driver pass a stand-in kind to exercise everything else), undone when it fails.
fn add_with<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
) -> Result<CniResult, VlanError> {
    Ok(rollback::guarded("vlan", |rb| {
        let r = add_steps(kernel, ipam, args, conf, message, rb)?;
        r.to_value(&args.cni_version)?;
        Ok(r)
    })?)
}

fn add_steps<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
    rb: &mut Rollback,
) -> Result<CniResult, VlanError> {
    let mut host = kernel.socket()?;
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;
    let parent = master(conf, &mut host, &mut cont)?;
    // IPAM runs while the link is made.
    let (created, mut result) = ipam.add_alongside(args, &conf.ipam_type, 0, rb, |rb| {
        let created = link::create_renamed(&mut cont, &args.ifname, "vlan", |cont, tmp| {
            let request = message(NewLinkBase {
                name: tmp,
                parent: Some(parent.index),
                netns: None,
                mtu: conf.mtu,
                mac: None,
            });
            if conf.link_in_container {
                cont.add_link(request, None)
            } else {
                host.add_link(request, Some(&netns))
            }
        })?;
        link::undo_delete_with(kernel, rb, &args.netns, &args.ifname);
        Ok(created)
    })?;
    result.cni_version = libcni::version::CURRENT.to_string();
    result.interfaces = vec![link::container_interface(&created, &args.netns)];
    configure::announce_addresses_with(kernel, &netns, &args.ifname, true);
    configure::configure_iface_with(kernel, &netns, &mut cont, &args.ifname, &result)?;
    result.dns = conf.dns.clone();
    Ok(result)
}

/// DEL: the container link and the lease, whatever is already gone.
fn del<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), VlanError> {
    Ok(link::del_with_ipam_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "vlan",
    )?)
}

/// CHECK: the attachment, with the master present and the container link a vlan with the
/// configured ID.
fn check<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), VlanError> {
    Ok(check::attachment_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "vlan: Required prevResult missing",
        |cont, l, _| {
            let mut host = kernel.socket()?;
            master(conf, &mut host, cont)?;
            Ok(check_kind(l, conf)?)
        },
    )?)
}

impl Plugin for Vlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        Ok(add_with(
            &LiveKernel,
            &ExecIpam,
            args,
            &conf,
            &vlan_request(conf.vlan_id),
        )?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(del(&LiveKernel, &ExecIpam, args, &config::load(args)?)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(&LiveKernel, &ExecIpam, args, &config::load(args)?)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ExecIpam.call_if_set(args, &conf.ipam_type, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ExecIpam.call_if_set(args, &conf.ipam_type, "STATUS")?;
        link::master_status("vlan", conf.link_in_container, &conf.master)
    }
}

/// The container link is a vlan with the configured VLAN ID (and MTU, when configured).
fn check_kind(l: &Link, conf: &NetConf) -> Result<(), VlanError> {
    let Some(id) = vlan_id(l) else {
        return Err(VlanError::NotVlan(l.name.clone()));
    };
    if id != conf.vlan_id {
        return Err(VlanError::VlanIdMismatch {
            ifname: l.name.clone(),
            actual: id,
            configured: conf.vlan_id,
        });
    }
    if let Some(mtu) = conf.mtu.filter(|m| *m != l.mtu) {
        return Err(VlanError::MtuMismatch {
            ifname: l.name.clone(),
            actual: l.mtu,
            configured: mtu,
        });
    }
    Ok(())
}

fn main() {
    libcni::skel::run(&Vlan, "CNI vlan plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    //! The ADD flow above the kernel on a kernel without the 802.1Q driver: the same code with
    //! a macvlan standing in for the vlan request (whose bytes `netkit::link_kinds` checks
    //! against iproute2's), in throw-away namespaces, with a scripted IPAM.
    use super::*;
    use attach::testing::{cmd_args_in, fake_ipam, ipam_calls};
    use netkit::link_kinds::{macvlan_message, MacvlanSpec};
    use netkit::packet_route::link::MacVlanMode;
    use netns_tests::{require_root, Netns, TempDir};
    use serde_json::json;

    fn stand_in(base: NewLinkBase<'_>) -> LinkMessage {
        macvlan_message(&MacvlanSpec {
            base,
            mode: MacVlanMode::Bridge,
            bc_queue_len: None,
        })
    }

    fn enter(ns: &Netns) -> netkit::NetnsGuard {
        netkit::Netns::open(ns.path()).unwrap().enter().unwrap()
    }

    fn host_with_uplink() -> Netns {
        let host = Netns::new("vl-ut-h");
        host.exec_ok(&[
            "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1",
        ]);
        host.exec_ok(&["ip", "link", "set", "up0", "up"]);
        host
    }

    #[test]
    fn add_configures_the_link_and_rolls_back_on_failure() {
        require_root!();
        let host = host_with_uplink();
        let pod = Netns::new("vl-ut-p");
        let dir = TempDir::new("vl-ut-ipam");
        let result = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.7.1.5/24", "gateway": "10.7.1.1"}],
            "routes": [{"dst": "0.0.0.0/0"}], "dns": {"nameservers": ["10.7.1.53"]}});
        let path = fake_ipam(dir.path(), &result);
        let config = json!({"cniVersion": "0.4.0", "name": "n", "type": "vlan", "master": "up0",
            "vlanId": 100, "mtu": 1400, "ipam": {"type": "fake-ipam"}});
        let args = cmd_args_in(pod.path(), &path, config.clone());
        let conf = config::load(&args).unwrap();
        let guard = enter(&host);
        let r = add_with(&LiveKernel, &ExecIpam, &args, &conf, &stand_in).unwrap();
        drop(guard);
        assert_eq!(
            r.to_value("0.4.0").unwrap(),
            json!({"cniVersion": "0.4.0",
                "interfaces": [{"name": "net1", "mac": r.interfaces[0].mac, "sandbox": args.netns}],
                "ips": [{"version": "4", "interface": 0, "address": "10.7.1.5/24", "gateway": "10.7.1.1"}],
                "routes": [{"dst": "0.0.0.0/0"}]})
        );
        assert_eq!(pod.link("net1").unwrap()["mtu"], 1400);
        assert!(pod
            .exec_ok(&["ip", "route"])
            .contains("default via 10.7.1.1 dev net1"));

        // The same ADD again: the name is taken, the new link and the new lease are undone.
        let guard = enter(&host);
        let e =
            CniError::from(add_with(&LiveKernel, &ExecIpam, &args, &conf, &stand_in).unwrap_err());
        drop(guard);
        assert!(
            e.msg.starts_with("failed to rename vlan to \"net1\""),
            "{}",
            e.msg
        );
        // An IPAM plugin that may need the link (any but host-local and static) runs after
        // the link is made: the failed creation never reached it.
        assert_eq!(ipam_calls(dir.path()), ["ADD ctr1 net1"]);
        assert_eq!(
            pod.exec_ok(&["ip", "-o", "link"]).lines().count(),
            2,
            "lo and net1"
        );
        // An MTU above the master's is refused before anything is created.
        let mut big = config;
        big["mtu"] = json!(9000);
        let args = cmd_args_in(pod.path(), &path, big);
        let conf = config::load(&args).unwrap();
        let guard = enter(&host);
        let e =
            CniError::from(add_with(&LiveKernel, &ExecIpam, &args, &conf, &stand_in).unwrap_err());
        drop(guard);
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "invalid MTU 9000, must be [0, master MTU(1500)]")
        );
    }

    #[test]
    fn check_kind_compares_vlan_id_and_mtu() {
        let link = |id, mtu| {
            let m = vlan_message(&VlanSpec {
                base: NewLinkBase {
                    name: "net1",
                    mtu: Some(mtu),
                    ..Default::default()
                },
                id,
            });
            Link::as_reported(&m)
        };
        let conf = config::load(&attach::testing::cmd_args(
            json!({"master": "e", "vlanId": 7, "mtu": 1400}),
            "",
        ))
        .unwrap();
        assert!(check_kind(&link(7, 1400), &conf).is_ok());
        assert!(check_kind(&link(8, 1400), &conf)
            .unwrap_err()
            .to_string()
            .contains("VLAN ID 8, configured 7"));
        assert!(check_kind(&link(7, 1500), &conf)
            .unwrap_err()
            .to_string()
            .contains("MTU 1500, configured 1400"));
    }
}

#[cfg(test)]
mod fake_kernel_tests {
    //! ADD, DEL and CHECK on netkit's fake kernel (which models the 802.1Q link itself), with
    //! an in-process IPAM: the order of operations, the rollback of a failure at every step,
    //! an idempotent DEL.
    use super::*;
    use attach::testing::{
        args_in, config_with, every_failure_rolls_back, ops, with_prev_result, FakeIpam,
    };
    use netkit::fake::{FakeKernel, FakeNs, HOST};
    use serde_json::{json, Value};

    const POD: &str = "/run/netns/pod";

    fn config(extra: Value) -> Value {
        config_with(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "vlan",
            "master": "eth0", "vlanId": 100, "ipam": {"type": "fake-ipam"}}),
            extra,
        )
    }

    fn setup() -> (FakeKernel, FakeIpam) {
        let kernel = FakeKernel::new();
        kernel.setup_link(HOST, "eth0", None, 1500);
        kernel.add_netns(POD);
        let ipam = FakeIpam::new(
            &kernel,
            json!({"cniVersion": "1.0.0",
                "ips": [{"address": "10.2.0.5/24", "gateway": "10.2.0.1"},
                        {"address": "fd00:2::5/64", "gateway": "fd00:2::1"}],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}),
        );
        (kernel, ipam)
    }

    fn args(config: Value) -> CmdArgs {
        args_in(POD, config)
    }

    fn run_add(kernel: &FakeKernel, ipam: &FakeIpam, config: Value) -> Result<CniResult, CniError> {
        let a = args(config);
        let conf = config::load(&a)?;
        Ok(add_with(
            kernel,
            ipam,
            &a,
            &conf,
            &vlan_request(conf.vlan_id),
        )?)
    }

    #[test]
    fn add_creates_the_vlan_then_addresses_and_routes_it() {
        let (kernel, ipam) = setup();
        // IPv6 must be enabled on lo and the link before an IPv6 address goes on.
        kernel.setup_sysctl(POD, "net/ipv6/conf/lo/disable_ipv6", "1");
        kernel.reset();
        let r = run_add(&kernel, &ipam, config(json!({"mtu": 1400}))).unwrap();
        assert_eq!(
            ops(&kernel),
            [
                "host: socket",
                "open netns /run/netns/pod",
                "/run/netns/pod: socket",
                "host: link get eth0",
                "host: link add veth* link #2 mtu 1400 netns /run/netns/pod type vlan",
                "/run/netns/pod: link get veth*",
                "/run/netns/pod: link set veth* name net1",
                "/run/netns/pod: link get net1",
                "ipam ADD fake-ipam ctr1 net1",
                "/run/netns/pod: sysctl -w net/ipv4/conf/net1/arp_notify=1",
                "/run/netns/pod: sysctl -w net/ipv6/conf/net1/ndisc_notify=1",
                "/run/netns/pod: link get net1",
                "/run/netns/pod: addr add 10.2.0.5/24 dev net1",
                "/run/netns/pod: sysctl net/ipv6/conf/lo/disable_ipv6",
                "/run/netns/pod: sysctl -w net/ipv6/conf/lo/disable_ipv6=0",
                "/run/netns/pod: sysctl net/ipv6/conf/net1/disable_ipv6",
                "/run/netns/pod: sysctl net/ipv6/conf/net1/keep_addr_on_down",
                "/run/netns/pod: sysctl -w net/ipv6/conf/net1/keep_addr_on_down=1",
                "/run/netns/pod: addr add fd00:2::5/64 dev net1",
                "/run/netns/pod: link set net1 up",
                "/run/netns/pod: addr show dev net1",
                "/run/netns/pod: route prepend 0.0.0.0/0 via 10.2.0.1 dev net1 table 254",
                "/run/netns/pod: route prepend ::/0 via fd00:2::1 dev net1 table 254",
            ]
        );
        let net1 = kernel.link(POD, "net1").unwrap();
        assert_eq!(
            (net1.kind.as_deref(), net1.mtu, net1.up),
            (Some("vlan"), 1400, true)
        );
        assert_eq!(r.ips.len(), 2);
        assert_eq!(ipam.leases(), ["ctr1/net1"]);
    }

    #[test]
    fn a_failure_at_any_step_of_add_leaves_nothing() {
        // "fake-ipam" runs after the link is made; "host-local" runs alongside (on another
        // thread), so its steps interleave with the kernel's.
        for ipam_type in ["fake-ipam", "host-local"] {
            let steps = every_failure_rolls_back(
                setup,
                |k, i| run_add(k, i, config(json!({"ipam": {"type": ipam_type}}))),
                // Best effort, as in the reference: the notifications, keep_addr_on_down
                // and reading disable_ipv6 (IPv6 may be compiled out).
                |op| {
                    op.contains("_notify=")
                        || op.contains("keep_addr_on_down")
                        || op.contains(": sysctl net/")
                },
            );
            assert!(steps.len() >= 15, "{steps:#?}");
        }
    }

    #[test]
    fn del_is_idempotent() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let r = run_add(&kernel, &ipam, config(json!({}))).unwrap();
        let a = with_prev_result(args(config(json!({}))), &r);
        let conf = config::load(&a).unwrap();
        del(&kernel, &ipam, &a, &conf).unwrap();
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
        del(&kernel, &ipam, &a, &conf).unwrap();
        kernel.remove_netns(POD);
        del(&kernel, &ipam, &a, &conf).unwrap();
    }

    #[test]
    fn check_compares_the_vlan_and_its_addressing() {
        let (kernel, ipam) = setup();
        let r = run_add(&kernel, &ipam, config(json!({}))).unwrap();
        let checked = |extra: Value| {
            let a = with_prev_result(args(config(extra)), &r);
            check(&kernel, &ipam, &a, &config::load(&a).unwrap()).map_err(CniError::from)
        };
        checked(json!({})).unwrap();
        let e = checked(json!({"vlanId": 101})).unwrap_err();
        assert_eq!(
            e.msg,
            "Error: Container interface net1 has VLAN ID 100, configured 101"
        );
        let net1 = kernel.link(POD, "net1").unwrap();
        let mut pod = kernel.socket_in(&FakeNs(POD.into())).unwrap();
        pod.delete_route(&netkit::Route::new("::/0".parse().unwrap()).dev(net1.index))
            .unwrap();
        let e = checked(json!({})).unwrap_err();
        assert_eq!(
            e.msg,
            "Expected Route {Dst: ::/0 GW: <nil>} not found in the container's routing table"
        );
        // The IPAM plugin's CHECK comes first.
        let a = with_prev_result(args(config(json!({}))), &r);
        del(&kernel, &ipam, &a, &config::load(&a).unwrap()).unwrap();
        assert_eq!(
            checked(json!({})).unwrap_err().msg,
            "no lease for ctr1/net1"
        );
    }
}
