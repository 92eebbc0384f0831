//! The `macvlan` CNI plugin: a macvlan link on a host interface (the master), renamed to
//! `CNI_IFNAME` inside the container, addressed by IPAM or left layer 2.

use macvlan::{config, error};

use attach::ipam::{ExecIpam, Ipam};
use attach::rollback::{self, Rollback};
use attach::{check, configure, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{macvlan_message, macvlan_mode, MacvlanSpec, NewLinkBase};
use netkit::{Kernel, Link, LiveKernel, Netlink};

use config::NetConf;
use error::MacvlanError;

struct Macvlan;

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

/// ADD, undone when it fails.
fn add<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<CniResult, MacvlanError> {
    Ok(rollback::guarded("macvlan", |rb| {
        let r = add_steps(kernel, ipam, args, conf, rb)?;
        r.to_value(&args.cni_version)?;
        Ok(r)
    })?)
}

fn add_steps<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<CniResult, MacvlanError> {
    let mut host = kernel.socket()?;
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;
    let parent = master(conf, &mut host, &mut cont)?;
    let make_link = |rb: &mut Rollback| {
        let created = link::create_renamed(&mut cont, &args.ifname, "macvlan", |cont, tmp| {
            let spec = MacvlanSpec {
                base: NewLinkBase {
                    name: tmp,
                    parent: Some(parent.index),
                    netns: None,
                    mtu: conf.mtu,
                    mac: conf.mac,
                },
                mode: conf.mode,
                bc_queue_len: conf.bc_queue_len,
            };
            if conf.link_in_container {
                cont.add_link(macvlan_message(&spec), None)
            } else {
                host.add_link(macvlan_message(&spec), Some(&netns))
            }
        })?;
        link::undo_delete_with(kernel, rb, &args.netns, &args.ifname);
        Ok(created)
    };
    let (created, ipam_result) =
        ipam.add_alongside_if_set(args, &conf.ipam_type, 0, rb, make_link)?;

    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        interfaces: vec![link::container_interface(&created, &args.netns)],
        ..Default::default()
    };
    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        configure::announce_addresses_with(kernel, &netns, &args.ifname, true);
        configure::configure_iface_with(kernel, &netns, &mut cont, &args.ifname, &result)?;
    } else {
        cont.set_link_up(created.index)
            .map_err(|source| MacvlanError::SetUp {
                ifname: args.ifname.clone(),
                source,
            })?;
    }
    // As the reference: the config's DNS, not IPAM's.
    result.dns = conf.dns.clone();
    Ok(result)
}

/// DEL: the container link and the lease, whatever is already gone.
fn del<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), MacvlanError> {
    Ok(link::del_with_ipam_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "macvlan",
    )?)
}

/// CHECK: the attachment, with the master present and the container link a macvlan in the
/// configured mode.
fn check<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), MacvlanError> {
    Ok(check::attachment_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "Required prevResult missing",
        |cont, l, _| {
            let mut host = kernel.socket()?;
            master(conf, &mut host, cont)?;
            Ok(check_kind(l, conf)?)
        },
    )?)
}

/// The container link is a macvlan in the configured mode.
fn check_kind(l: &Link, conf: &NetConf) -> Result<(), MacvlanError> {
    let Some(mode) = macvlan_mode(l) else {
        return Err(MacvlanError::NotMacvlan(l.name.clone()));
    };
    if mode != conf.mode {
        return Err(MacvlanError::ModeMismatch {
            actual: config::mode_name(mode),
            expected: config::mode_name(conf.mode),
        });
    }
    Ok(())
}

impl Plugin for Macvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(add(&LiveKernel, &ExecIpam, args, &config::load(args)?)?)
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
        link::master_status("macvlan", conf.link_in_container, &conf.master)
    }
}

fn main() {
    libcni::skel::run(&Macvlan, "CNI macvlan plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    //! ADD, DEL and CHECK on netkit's fake kernel, with an in-process IPAM: the order of
    //! operations, the rollback of a failure at every step, an idempotent DEL.
    use super::*;
    use attach::testing::{
        args_in, config_with, every_failure_rolls_back, ops, setup_uplink, with_prev_result,
        FakeIpam,
    };
    use libcni::skel::CmdArgs;
    use netkit::fake::FakeKernel;
    use serde_json::{json, Value};

    const POD: &str = "/run/netns/pod";

    fn config(extra: Value) -> Value {
        config_with(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "macvlan",
            "master": "eth0", "ipam": {"type": "fake-ipam"}}),
            extra,
        )
    }

    /// A host with eth0 (MTU 1500) on 192.168.1.0/24 behind a default route, and a pod netns.
    fn setup() -> (FakeKernel, FakeIpam) {
        let kernel = FakeKernel::new();
        setup_uplink(&kernel);
        kernel.add_netns(POD);
        let ipam = FakeIpam::new(
            &kernel,
            json!({"cniVersion": "1.0.0",
                "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
                "routes": [{"dst": "0.0.0.0/0"}]}),
        );
        (kernel, ipam)
    }

    fn run_add(kernel: &FakeKernel, ipam: &FakeIpam, config: Value) -> Result<CniResult, CniError> {
        let args = args_in(POD, config);
        Ok(add(kernel, ipam, &args, &config::load(&args)?)?)
    }

    fn args(config: Value) -> CmdArgs {
        args_in(POD, config)
    }

    #[test]
    fn add_creates_renames_addresses_then_routes() {
        let (kernel, ipam) = setup();
        kernel.reset();
        let r = run_add(&kernel, &ipam, config(json!({"mtu": 1400}))).unwrap();
        assert_eq!(
            ops(&kernel),
            [
                "host: socket",
                "open netns /run/netns/pod",
                "/run/netns/pod: socket",
                "host: link get eth0",
                "host: link add veth* link #2 mtu 1400 netns /run/netns/pod type macvlan",
                "/run/netns/pod: link get veth*",
                "/run/netns/pod: link set veth* name net1",
                "/run/netns/pod: link get net1",
                "ipam ADD fake-ipam ctr1 net1",
                "/run/netns/pod: sysctl -w net/ipv4/conf/net1/arp_notify=1",
                "/run/netns/pod: sysctl -w net/ipv6/conf/net1/ndisc_notify=1",
                "/run/netns/pod: link get net1",
                "/run/netns/pod: addr add 10.1.0.5/24 dev net1",
                "/run/netns/pod: link set net1 up",
                "/run/netns/pod: route prepend 0.0.0.0/0 via 10.1.0.1 dev net1 table 254",
            ]
        );
        let net1 = kernel.link(POD, "net1").unwrap();
        assert_eq!(
            (net1.kind.as_deref(), net1.mtu, net1.up),
            (Some("macvlan"), 1400, true)
        );
        assert_eq!(r.interfaces[0].mac, netkit::link::format_mac(&net1.mac));
        assert_eq!(
            (r.ips[0].interface, ipam.leases()),
            (Some(0), vec!["ctr1/net1".into()])
        );
    }

    #[test]
    fn a_failure_at_any_step_of_add_leaves_nothing() {
        for extra in [
            json!({}),
            json!({"ipam": null}),
            json!({"mac": "02:00:00:00:00:42"}),
        ] {
            let steps = every_failure_rolls_back(
                setup,
                |k, i| run_add(k, i, config(extra.clone())),
                // Gratuitous ARP and NDISC notifications are best effort, as in the reference.
                |op| op.contains("_notify="),
            );
            assert!(steps.len() >= 8, "{steps:#?}");
            for s in steps.iter().filter(|s| !s.op.contains("_notify=")) {
                let e = s.error.as_ref().unwrap();
                assert!(e.msg.contains("injected"), "{}: {}", s.op, e.msg);
            }
        }
    }

    #[test]
    fn add_refuses_an_mtu_above_the_masters_before_creating_anything() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let e = run_add(&kernel, &ipam, config(json!({"mtu": 9000}))).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "invalid MTU 9000, must be [0, master MTU(1500)]")
        );
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
    }

    #[test]
    fn the_master_in_the_container_is_used_from_there() {
        let (kernel, ipam) = setup();
        let up0 = kernel.setup_link(POD, "up0", Some("veth"), 1500);
        kernel.reset();
        run_add(
            &kernel,
            &ipam,
            config(json!({"master": "up0", "linkInContainer": true})),
        )
        .unwrap();
        let log = ops(&kernel);
        assert_eq!(log[3], "/run/netns/pod: link get up0");
        assert_eq!(
            log[4],
            format!("/run/netns/pod: link add veth* link #{up0} type macvlan")
        );
        assert_eq!(kernel.link(POD, "net1").unwrap().parent, Some(up0));
    }

    #[test]
    fn del_is_idempotent() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let conf = config(json!({}));
        let r = run_add(&kernel, &ipam, conf.clone()).unwrap();
        let a = with_prev_result(args(conf), &r);
        let c = config::load(&a).unwrap();
        kernel.reset();
        del(&kernel, &ipam, &a, &c).unwrap();
        assert_eq!(
            ops(&kernel),
            [
                "ipam DEL fake-ipam ctr1 net1",
                "open netns /run/netns/pod",
                "/run/netns/pod: socket",
                "/run/netns/pod: link del net1",
            ]
        );
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
        // Again, then with the netns gone, then without a netns: nothing to do, no error.
        del(&kernel, &ipam, &a, &c).unwrap();
        kernel.remove_netns(POD);
        del(&kernel, &ipam, &a, &c).unwrap();
        let mut no_netns = a.clone();
        no_netns.netns.clear();
        del(&kernel, &ipam, &no_netns, &c).unwrap();
    }

    #[test]
    fn del_removes_the_link_even_when_ipam_fails_and_reports_it() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let a = args(config(json!({})));
        let c = config::load(&a).unwrap();
        run_add(&kernel, &ipam, config(json!({}))).unwrap();
        kernel.fail_when(|op| op.starts_with("ipam DEL"));
        let e = CniError::from(del(&kernel, &ipam, &a, &c).unwrap_err());
        assert!(e.msg.contains("ipam DEL"), "{}", e.msg);
        assert_eq!(kernel.state(), before);
    }

    #[test]
    fn check_passes_after_add_and_names_what_differs() {
        let (kernel, ipam) = setup();
        let r = run_add(&kernel, &ipam, config(json!({}))).unwrap();
        let checked = |extra: Value| {
            let a = with_prev_result(args(config(extra)), &r);
            check(&kernel, &ipam, &a, &config::load(&a).unwrap()).map_err(CniError::from)
        };
        checked(json!({})).unwrap();
        let e = checked(json!({"mode": "vepa"})).unwrap_err();
        assert_eq!(
            e.msg,
            "Container macvlan mode bridge does not match expected value: vepa"
        );
        let e = checked(json!({"master": "eth9"})).unwrap_err();
        assert!(
            e.msg.starts_with("failed to lookup master \"eth9\""),
            "{}",
            e.msg
        );

        let net1 = kernel.link(POD, "net1").unwrap();
        let mut pod = kernel.socket_in(&netkit::fake::FakeNs(POD.into())).unwrap();
        pod.delete_address(net1.index, "10.1.0.5/24".parse().unwrap())
            .unwrap();
        let e = checked(json!({})).unwrap_err();
        assert_eq!(e.msg, "Failed to match addr 10.1.0.5/24 on interface net1");
        pod.delete_link(net1.index).unwrap();
        let e = checked(json!({})).unwrap_err();
        assert_eq!(
            e.msg,
            "Container Interface name in prevResult: net1 not found"
        );
        // Without prevResult.
        let e = CniError::from(
            check(
                &kernel,
                &ipam,
                &args(config(json!({}))),
                &config::load(&args(config(json!({})))).unwrap(),
            )
            .unwrap_err(),
        );
        assert_eq!(e.msg, "Required prevResult missing");
    }
}
