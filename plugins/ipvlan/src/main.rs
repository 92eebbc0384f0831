//! The `ipvlan` CNI plugin: an ipvlan link (l2, l3 or l3s; bridge, private or vepa) on a host
//! interface (the master), renamed to `CNI_IFNAME` inside the container, addressed by IPAM or,
//! when chained without IPAM, with prevResult's IPs.
//!
//! ADD, DEL and CHECK are generic over netkit's kernel seam and attach's IPAM; the binary runs
//! them on the live kernel and the executed IPAM plugin.

use ipvlan::{config, error};

use attach::ipam::{ExecIpam, Ipam};
use attach::rollback::Rollback;
use attach::{check, configure, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{ipvlan_message, ipvlan_mode, IpvlanSpec, NewLinkBase};
use netkit::{Kernel, Link, LiveKernel, Netlink};

use config::NetConf;
use error::IpvlanError;

struct Ipvlan;

/// The master, looked up where it lives, with the MTU checked against it.
fn master<S: Netlink>(conf: &NetConf, host: &mut S, cont: &mut S) -> Result<Link, IpvlanError> {
    Ok(link::master_checked(
        host,
        cont,
        conf.link_in_container,
        &conf.master,
        conf.requested_mtu,
    )?)
}

/// ADD, undone when it fails.
fn add<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<CniResult, IpvlanError> {
    let mut rb = Rollback::default();
    let outcome = add_steps(kernel, ipam, args, conf, &mut rb).and_then(|r| {
        // An ADD whose result cannot be printed in the request's version must not stay.
        r.to_value(&args.cni_version)?;
        Ok(r)
    });
    match outcome {
        Ok(r) => {
            rb.disarm();
            Ok(r)
        }
        Err(e) => {
            rb.run("ipvlan");
            Err(e)
        }
    }
}

fn add_steps<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<CniResult, IpvlanError> {
    let mut host = kernel.socket()?;
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;
    let parent = master(conf, &mut host, &mut cont)?;
    let mut make_link = |rb: &mut Rollback| {
        let created = link::create_renamed(&mut cont, &args.ifname, "ipvlan", |cont, tmp| {
            let spec = IpvlanSpec {
                base: NewLinkBase {
                    name: tmp,
                    parent: Some(parent.index),
                    netns: None,
                    mtu: conf.mtu,
                    mac: None,
                },
                mode: conf.mode,
                flags: conf.flags,
            };
            if conf.link_in_container {
                cont.add_link(ipvlan_message(&spec), None)
            } else {
                host.add_link(ipvlan_message(&spec), Some(&netns))
            }
        })?;
        link::undo_delete_with(kernel, rb, &args.netns, &args.ifname);
        Ok(created)
    };

    // Chained without IPAM: the IPs of prevResult go on the link. Otherwise IPAM runs while
    // the link is made.
    let chained = conf
        .prev
        .as_ref()
        .filter(|p| conf.ipam_type.is_empty() && !p.ips.is_empty());
    let (created, mut result) = match chained {
        Some(prev) => (make_link(rb)?, prev.clone()),
        None => ipam.add_alongside(args, &conf.ipam_type, 0, rb, make_link)?,
    };
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
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
) -> Result<(), IpvlanError> {
    Ok(link::del_with_ipam_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "ipvlan",
    )?)
}

/// CHECK: the attachment, with the container link an ipvlan in the configured mode on its
/// master. CHECK's prevResult holds this plugin's own result (or a chain's), whose interface
/// is the ipvlan itself, not a master: without a configured master, `load` leaves it empty
/// and CHECK goes by the link's parent.
fn check<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), IpvlanError> {
    check::attachment_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "Required prevResult missing",
        |cont, l, _| {
            check_master(kernel, conf, cont, l)?;
            Ok(check_kind(l, conf)?)
        },
    )?;
    Ok(())
}

impl Plugin for Ipvlan {
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
        link::master_status("ipvlan", conf.link_in_container, &conf.master)
    }
}

/// The master of the container link `l`. A configured one must exist (MTU checked as in ADD)
/// and be `l`'s parent. Without `master`, ADD took the previous plugin's interface or the
/// default route's, neither of which CHECK can know (its prevResult is ipvlan's own): the
/// parent the kernel records for `l` must still exist.
fn check_master<K: Kernel>(
    kernel: &K,
    conf: &NetConf,
    cont: &mut K::Socket,
    l: &Link,
) -> Result<(), CniError> {
    let mut host = kernel.socket()?;
    if !conf.master.is_empty() {
        let m = master(conf, &mut host, cont)?;
        if l.link.is_some_and(|parent| parent != m.index) {
            return Err(IpvlanError::NotOnMaster {
                name: l.name.clone(),
                master: conf.master.clone(),
            }
            .into());
        }
        return Ok(());
    }
    let parent = l.link.ok_or_else(|| IpvlanError::NoMaster {
        name: l.name.clone(),
    })?;
    let sock = if conf.link_in_container {
        cont
    } else {
        &mut host
    };
    sock.link_by_index(parent).map(|_| ()).map_err(|source| {
        IpvlanError::MasterLookup {
            name: l.name.clone(),
            index: parent,
            source,
        }
        .into()
    })
}

/// The container link is an ipvlan in the configured mode and flag.
fn check_kind(l: &Link, conf: &NetConf) -> Result<(), IpvlanError> {
    let Some((mode, flags)) = ipvlan_mode(l) else {
        return Err(IpvlanError::NotIpvlan {
            name: l.name.clone(),
        });
    };
    if mode != conf.mode {
        return Err(IpvlanError::ModeMismatch {
            found: mode,
            expected: conf.mode,
        });
    }
    if flags != conf.flags {
        return Err(IpvlanError::FlagMismatch {
            found: config::flag_name(flags),
            expected: config::flag_name(conf.flags),
        });
    }
    Ok(())
}

fn main() {
    libcni::skel::run(&Ipvlan, "CNI ipvlan plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    //! ADD, DEL and CHECK on netkit's fake kernel, with an in-process IPAM: the order of
    //! operations, the rollback of a failure at every step, an idempotent DEL, CHECK with and
    //! without `master`, the master inside the container.
    use super::*;
    use attach::testing::{
        args_in, config_with, every_failure_rolls_back, ops, setup_uplink, with_prev_result,
        FakeIpam,
    };
    use netkit::fake::{FakeKernel, HOST};
    use netkit::packet_route::link::{IpVlanFlags, IpVlanMode};
    use serde_json::{json, Value};

    const POD: &str = "/run/netns/pod";

    fn config(extra: Value) -> Value {
        config_with(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "ipvlan",
            "master": "eth0", "ipam": {"type": "fake-ipam"}}),
            extra,
        )
    }

    /// A host with eth0 (MTU 1500) behind a default route and eth1, a pod netns.
    fn setup() -> (FakeKernel, FakeIpam) {
        let kernel = FakeKernel::new();
        setup_uplink(&kernel);
        kernel.setup_link(HOST, "eth1", None, 1500);
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

    fn run_add(kernel: &FakeKernel, ipam: &FakeIpam, config: Value) -> Result<CniResult, CniError> {
        let a = args(config);
        Ok(add(kernel, ipam, &a, &config::load(&a)?)?)
    }

    fn run_del(kernel: &FakeKernel, ipam: &FakeIpam, a: &CmdArgs) -> Result<(), CniError> {
        Ok(del(kernel, ipam, a, &config::load(a)?)?)
    }

    fn run_check(kernel: &FakeKernel, ipam: &FakeIpam, a: &CmdArgs) -> Result<(), CniError> {
        let a = CmdArgs {
            command: libcni::skel::Command::Check,
            ..a.clone()
        };
        Ok(check(kernel, ipam, &a, &config::load(&a)?)?)
    }

    /// An earlier plugin's net0 in the pod, and a config chained after it without IPAM.
    fn chained(kernel: &FakeKernel) -> Value {
        kernel.setup_link(POD, "net0", Some("veth"), 1500);
        chained_config()
    }

    fn chained_config() -> Value {
        let prev = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "net0", "sandbox": POD}],
            "ips": [{"address": "10.9.0.4/24", "interface": 0}]});
        json!({"cniVersion": "1.0.0", "name": "n", "type": "ipvlan",
            "linkInContainer": true, "prevResult": prev})
    }

    #[test]
    fn add_creates_renames_addresses_then_routes() {
        let (kernel, ipam) = setup();
        kernel.reset();
        let r = run_add(
            &kernel,
            &ipam,
            config(json!({"mode": "l3", "mtu": 1400, "dns": {"search": ["x.test"]}})),
        )
        .unwrap();
        assert_eq!(
            ops(&kernel),
            [
                "host: socket",
                "open netns /run/netns/pod",
                "/run/netns/pod: socket",
                "host: link get eth0",
                "host: link add veth* link #2 mtu 1400 netns /run/netns/pod type ipvlan",
                "/run/netns/pod: link get veth*",
                "/run/netns/pod: link set veth* name net1",
                "/run/netns/pod: link get net1",
                "ipam ADD fake-ipam ctr1 net1",
                "/run/netns/pod: sysctl -w net/ipv4/conf/net1/arp_notify=1",
                "/run/netns/pod: sysctl -w net/ipv6/conf/net1/ndisc_notify=1",
                "/run/netns/pod: link get net1",
                "/run/netns/pod: addr add 10.1.0.5/24 dev net1",
                "/run/netns/pod: link set net1 up",
                "/run/netns/pod: route prepend 10.8.0.0/16 via 10.1.0.1 dev net1 table 254",
            ]
        );
        let net1 = kernel.link(POD, "net1").unwrap();
        assert_eq!(
            (net1.kind.as_deref(), net1.mtu, net1.up, net1.parent),
            (Some("ipvlan"), 1400, true, Some(2))
        );
        assert_eq!(
            r.to_value("1.0.0").unwrap(),
            json!({"cniVersion": "1.0.0",
                "interfaces": [{"name": "net1", "mac": r.interfaces[0].mac, "sandbox": POD}],
                "ips": [{"interface": 0, "address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
                "routes": [{"dst": "10.8.0.0/16"}],
                "dns": {"search": ["x.test"]}})
        );
        assert_eq!(ipam.leases(), ["ctr1/net1"]);
    }

    #[test]
    fn a_failure_at_any_step_of_add_leaves_nothing() {
        for chain in [false, true] {
            let setup = move || {
                let (kernel, ipam) = setup();
                if chain {
                    chained(&kernel);
                }
                (kernel, ipam)
            };
            let steps = every_failure_rolls_back(
                setup,
                |k, i| {
                    let c = if chain {
                        chained_config()
                    } else {
                        config(json!({"mode": "l2", "flag": "private"}))
                    };
                    run_add(k, i, c)
                },
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
    fn chained_without_ipam_uses_prev_result_ips_on_the_master_in_the_container() {
        let (kernel, ipam) = setup();
        let c = chained(&kernel);
        let net0 = kernel.link(POD, "net0").unwrap();
        kernel.reset();
        let r = run_add(&kernel, &ipam, c).unwrap();
        let log = ops(&kernel);
        assert_eq!(log[3], "/run/netns/pod: link get net0");
        assert_eq!(
            log[4],
            format!(
                "/run/netns/pod: link add veth* link #{} type ipvlan",
                net0.index
            )
        );
        assert!(!log.iter().any(|op| op.starts_with("ipam")), "{log:#?}");
        let net1 = kernel.link(POD, "net1").unwrap();
        assert_eq!(net1.parent, Some(net0.index));
        assert_eq!(
            (
                r.interfaces.len(),
                r.interfaces[0].name.as_str(),
                r.ips[0].interface
            ),
            (1, "net1", Some(0))
        );
        let pod = kernel.namespace(POD);
        assert!(pod
            .addresses
            .contains(&(net1.index, "10.9.0.4/24".parse().unwrap())));
    }

    #[test]
    fn add_refuses_an_mtu_above_the_masters_and_a_missing_master() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let e = run_add(&kernel, &ipam, config(json!({"mtu": 9000}))).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "invalid MTU 9000, must be [0, master MTU(1500)]")
        );
        let e = run_add(&kernel, &ipam, config(json!({"master": "nosuch0"}))).unwrap_err();
        assert_eq!(e.msg, "failed to lookup master \"nosuch0\": Link not found");
        assert_eq!(kernel.state(), before);
        assert!(ipam.leases().is_empty());
    }

    #[test]
    fn del_is_idempotent_and_reports_an_ipam_failure() {
        let (kernel, ipam) = setup();
        let before = kernel.state();
        let conf = config(json!({}));
        let r = run_add(&kernel, &ipam, conf.clone()).unwrap();
        let a = with_prev_result(args(conf), &r);
        kernel.reset();
        run_del(&kernel, &ipam, &a).unwrap();
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
        run_del(&kernel, &ipam, &a).unwrap();
        kernel.remove_netns(POD);
        run_del(&kernel, &ipam, &a).unwrap();
        let mut no_netns = a.clone();
        no_netns.netns.clear();
        run_del(&kernel, &ipam, &no_netns).unwrap();

        // IPAM fails: the link goes all the same, and the failure is the error.
        kernel.add_netns(POD);
        run_add(&kernel, &ipam, config(json!({}))).unwrap();
        kernel.fail_when(|op| op.starts_with("ipam DEL"));
        let e = run_del(&kernel, &ipam, &a).unwrap_err();
        assert!(e.msg.contains("ipam DEL"), "{}", e.msg);
        assert!(kernel.link(POD, "net1").is_none());
    }

    #[test]
    fn check_passes_after_add_with_or_without_master_and_names_what_differs() {
        let (kernel, ipam) = setup();
        let r = run_add(&kernel, &ipam, config(json!({"mode": "l3s"}))).unwrap();
        let checked =
            |extra: Value| run_check(&kernel, &ipam, &with_prev_result(args(config(extra)), &r));
        checked(json!({"mode": "l3s"})).unwrap();
        // Without `master`: the link's parent must exist.
        let mut no_master = config(json!({"mode": "l3s"}));
        no_master.as_object_mut().unwrap().remove("master");
        run_check(&kernel, &ipam, &with_prev_result(args(no_master), &r)).unwrap();

        let e = checked(json!({"mode": "l2"})).unwrap_err();
        assert_eq!(
            e.msg,
            "Container IPVlan mode l3s does not match expected value: l2"
        );
        let e = checked(json!({"mode": "l3s", "flag": "vepa"})).unwrap_err();
        assert_eq!(
            e.msg,
            "Container IPVlan flag bridge does not match expected value: vepa"
        );
        let e = checked(json!({"mode": "l3s", "master": "eth1"})).unwrap_err();
        assert_eq!(e.msg, "Container interface net1 is not on master \"eth1\"");
        let e = checked(json!({"mode": "l3s", "master": "eth9"})).unwrap_err();
        assert_eq!(e.msg, "failed to lookup master \"eth9\": Link not found");
        // Without prevResult.
        let e = run_check(&kernel, &ipam, &args(config(json!({"mode": "l3s"})))).unwrap_err();
        assert_eq!(e.msg, "Required prevResult missing");
    }

    #[test]
    fn check_of_a_chained_attachment_finds_the_master_in_the_container() {
        let (kernel, ipam) = setup();
        let c = chained(&kernel);
        let r = run_add(&kernel, &ipam, c.clone()).unwrap();
        let mut c = c;
        c.as_object_mut().unwrap().remove("prevResult");
        run_check(&kernel, &ipam, &with_prev_result(args(c), &r)).unwrap();
    }

    #[test]
    fn check_kind_compares_mode_and_flag() {
        let msg = |mode, flags| {
            let m = ipvlan_message(&IpvlanSpec {
                base: NewLinkBase {
                    name: "net1",
                    ..Default::default()
                },
                mode,
                flags,
            });
            Link::as_reported(&m)
        };
        let conf = config::load(&attach::testing::cmd_args(
            json!({"mode": "l3s", "flag": "vepa"}),
            "",
        ))
        .unwrap();
        assert!(check_kind(&msg(IpVlanMode::L3S, IpVlanFlags::Vepa), &conf).is_ok());
        let e = check_kind(&msg(IpVlanMode::L2, IpVlanFlags::Vepa), &conf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Container IPVlan mode l2 does not match expected value: l3s"
        );
        let e = check_kind(&msg(IpVlanMode::L3S, IpVlanFlags::empty()), &conf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Container IPVlan flag bridge does not match expected value: vepa"
        );
        let not_ipvlan = Link::from_message(netkit::packet_route::link::LinkMessage::default());
        assert!(check_kind(&not_ipvlan, &conf)
            .unwrap_err()
            .to_string()
            .contains("not of type ipvlan"));
    }
}
