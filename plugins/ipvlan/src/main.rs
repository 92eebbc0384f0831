//! The `ipvlan` CNI plugin: an ipvlan link (l2, l3 or l3s; bridge, private or vepa) on a host
//! interface (the master), renamed to `CNI_IFNAME` inside the container, addressed by IPAM or,
//! when chained without IPAM, with prevResult's IPs.

mod config;

use attach::errors::kernel;
use attach::rollback::{self, Rollback};
use attach::{check, configure, ipam, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{ipvlan_message, ipvlan_mode, IpvlanSpec, NewLinkBase};
use netkit::packet_route::link::LinkMessage;
use netkit::{Link, Socket};

use config::NetConf;

struct Ipvlan;

/// The master, looked up where it lives, with the MTU checked against it.
fn master(conf: &NetConf, host: &mut Socket, cont: &mut Socket) -> Result<Link, CniError> {
    link::master_checked(
        host,
        cont,
        conf.link_in_container,
        &conf.master,
        conf.requested_mtu,
    )
}

/// ADD with the link request built by `message` (the ipvlan request; tests on a kernel without
/// the ipvlan driver pass a stand-in kind to exercise everything else).
fn add_with(
    args: &CmdArgs,
    conf: &NetConf,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
) -> Result<CniResult, CniError> {
    rollback::guarded("ipvlan", |rb| {
        let r = add_steps(args, conf, message, rb)?;
        r.to_value(&args.cni_version)?;
        Ok(r)
    })
}

fn add_steps(
    args: &CmdArgs,
    conf: &NetConf,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
    rb: &mut Rollback,
) -> Result<CniResult, CniError> {
    let mut host = Socket::new().map_err(kernel)?;
    let (netns, mut cont) = link::open_netns(&args.netns)?;
    let parent = master(conf, &mut host, &mut cont)?;
    let mut make_link = |rb: &mut Rollback| {
        let created = link::create_renamed(&mut cont, &args.ifname, "ipvlan", |cont, tmp| {
            let base = NewLinkBase {
                name: tmp,
                parent: Some(parent.index),
                netns: (!conf.link_in_container).then_some(&netns),
                mtu: conf.mtu,
                mac: None,
            };
            let sock = if conf.link_in_container {
                cont
            } else {
                &mut host
            };
            sock.create_link(message(base))
        })?;
        link::undo_delete(rb, &netns, &args.ifname);
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
        None => ipam::add_alongside(args, &conf.ipam_type, 0, rb, make_link)?,
    };
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    result.cni_version = libcni::version::CURRENT.to_string();
    result.interfaces = vec![link::container_interface(&created, &args.netns)];
    configure::announce_addresses(&netns, &args.ifname, true);
    configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
    result.dns = conf.dns.clone();
    Ok(result)
}

impl Plugin for Ipvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        let (mode, flags) = (conf.mode, conf.flags);
        add_with(args, &conf, &|base| {
            ipvlan_message(&IpvlanSpec { base, mode, flags })
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        link::del_with_ipam(args, &config::load(args)?.ipam_type, "ipvlan")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        // CHECK's prevResult holds this plugin's own result (or a chain's), whose interface is
        // the ipvlan itself, not a master: without a configured master, `load` leaves it
        // empty and CHECK goes by the link's parent.
        let conf = config::load(args)?;
        check::attachment(
            args,
            &conf.ipam_type,
            "Required prevResult missing",
            |cont, l, _| {
                check_master(&conf, cont, l)?;
                check_kind(l, &conf)
            },
        )
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "STATUS")?;
        link::master_status("ipvlan", conf.link_in_container, &conf.master)
    }
}

/// The master of the container link `l`. A configured one must exist (MTU checked as in ADD)
/// and be `l`'s parent. Without `master`, ADD took the previous plugin's interface or the
/// default route's, neither of which CHECK can know (its prevResult is ipvlan's own): the
/// parent the kernel records for `l` must still exist.
fn check_master(conf: &NetConf, cont: &mut Socket, l: &Link) -> Result<(), CniError> {
    let mut host = Socket::new().map_err(kernel)?;
    if !conf.master.is_empty() {
        let m = master(conf, &mut host, cont)?;
        if l.link.is_some_and(|parent| parent != m.index) {
            return Err(CniError::internal(format!(
                "Container interface {} is not on master {:?}",
                l.name, conf.master
            )));
        }
        return Ok(());
    }
    let parent = l.link.ok_or_else(|| {
        CniError::internal(format!("Container interface {} has no master", l.name))
    })?;
    let sock = if conf.link_in_container {
        cont
    } else {
        &mut host
    };
    sock.link_by_index(parent).map(|_| ()).map_err(|e| {
        CniError::internal(format!(
            "failed to lookup master of {} (ifindex {parent}): {e}",
            l.name
        ))
    })
}

/// The container link is an ipvlan in the configured mode and flag.
fn check_kind(l: &Link, conf: &NetConf) -> Result<(), CniError> {
    let Some((mode, flags)) = ipvlan_mode(l) else {
        return Err(CniError::internal(format!(
            "Error: Container interface {} not of type ipvlan",
            l.name
        )));
    };
    if mode != conf.mode {
        return Err(CniError::internal(format!(
            "Container IPVlan mode {mode} does not match expected value: {}",
            conf.mode
        )));
    }
    if flags != conf.flags {
        return Err(CniError::internal(format!(
            "Container IPVlan flag {} does not match expected value: {}",
            config::flag_name(flags),
            config::flag_name(conf.flags)
        )));
    }
    Ok(())
}

fn main() {
    libcni::skel::run(&Ipvlan, "CNI ipvlan plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    //! The ADD flow above the kernel on a kernel without the ipvlan driver: the same code with
    //! a macvlan standing in for the ipvlan request (whose bytes `netkit::link_kinds` checks
    //! against iproute2's), in throw-away namespaces, with a scripted IPAM.
    use super::*;
    use attach::testing::{cmd_args_in, fake_ipam, ipam_calls};
    use netkit::link_kinds::{macvlan_message, MacvlanSpec};
    use netkit::packet_route::link::{IpVlanFlags, IpVlanMode, MacVlanMode};
    use netns_tests::{require_root, Netns, TempDir};
    use serde_json::json;

    fn stand_in(base: NewLinkBase<'_>) -> LinkMessage {
        macvlan_message(&MacvlanSpec {
            base,
            mode: MacVlanMode::Bridge,
            bc_queue_len: None,
        })
    }

    fn host_with_uplink() -> Netns {
        let host = Netns::new("iv-ut-h");
        host.exec_ok(&[
            "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1",
        ]);
        host.exec_ok(&["ip", "link", "set", "up0", "up"]);
        host
    }

    fn enter(ns: &Netns) -> netkit::NetnsGuard {
        netkit::Netns::open(ns.path()).unwrap().enter().unwrap()
    }

    const IPAM_RESULT: &str = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.7.0.5/24","gateway":"10.7.0.1"}],"routes":[{"dst":"10.8.0.0/16"}],"dns":{"nameservers":["10.7.0.53"]}}"#;

    #[test]
    fn add_with_ipam_configures_the_link_and_returns_the_reference_shape() {
        require_root!();
        let host = host_with_uplink();
        let pod = Netns::new("iv-ut-p");
        let dir = TempDir::new("iv-ut-ipam");
        let path = fake_ipam(dir.path(), &serde_json::from_str(IPAM_RESULT).unwrap());
        let config = json!({"cniVersion": "1.0.0", "name": "n", "type": "ipvlan", "master": "up0",
            "mode": "l3", "dns": {"search": ["x.test"]}, "ipam": {"type": "fake-ipam"}});
        let args = cmd_args_in(pod.path(), &path, config);
        let conf = config::load(&args).unwrap();
        assert_eq!(
            (conf.mode, conf.flags),
            (IpVlanMode::L3, IpVlanFlags::empty())
        );
        let guard = enter(&host);
        let r = add_with(&args, &conf, &stand_in).unwrap();
        drop(guard);
        let v = r.to_value("1.0.0").unwrap();
        assert_eq!(
            v,
            json!({"cniVersion": "1.0.0",
                "interfaces": [{"name": "net1", "mac": r.interfaces[0].mac, "sandbox": args.netns}],
                "ips": [{"interface": 0, "address": "10.7.0.5/24", "gateway": "10.7.0.1"}],
                "routes": [{"dst": "10.8.0.0/16"}],
                "dns": {"search": ["x.test"]}})
        );
        assert_eq!(pod.addresses("net1"), ["10.7.0.5/24"]);
        assert!(pod
            .exec_ok(&["ip", "route"])
            .contains("10.8.0.0/16 via 10.7.0.1 dev net1"));
        assert_eq!(
            pod.exec_ok(&["sysctl", "-n", "net.ipv4.conf.net1.arp_notify"])
                .trim(),
            "1"
        );
        assert_eq!(ipam_calls(dir.path()), ["ADD ctr1 net1"]);
    }

    #[test]
    fn chained_without_ipam_uses_prev_result_ips_on_the_prev_result_master() {
        require_root!();
        let host = Netns::new("iv-ut-ch");
        let pod = Netns::new("iv-ut-cp");
        // An earlier plugin left net0 in the pod; ipvlan goes on top of it (linkInContainer).
        host.exec_ok(&[
            "ip", "link", "add", "net0", "type", "veth", "peer", "name", "peer0",
        ]);
        host.exec_ok(&["ip", "link", "set", "net0", "netns", pod.name()]);
        pod.exec_ok(&["ip", "link", "set", "net0", "up"]);
        let prev = json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "net0", "sandbox": pod.path_str()}],
            "ips": [{"address": "10.9.0.4/24", "interface": 0}]});
        let config = json!({"cniVersion": "1.0.0", "name": "n", "type": "ipvlan",
            "linkInContainer": true, "prevResult": prev});
        let args = cmd_args_in(pod.path(), "/nonexistent", config);
        let conf = config::load(&args).unwrap();
        assert_eq!(conf.master, "net0");
        let guard = enter(&host);
        let r = add_with(&args, &conf, &stand_in).unwrap();
        drop(guard);
        assert_eq!(r.interfaces.len(), 1);
        assert_eq!(
            (r.interfaces[0].name.as_str(), r.ips[0].interface),
            ("net1", Some(0))
        );
        assert_eq!(pod.addresses("net1"), ["10.9.0.4/24"]);
    }

    #[test]
    fn failed_add_deletes_the_link_and_releases_the_lease() {
        require_root!();
        let host = host_with_uplink();
        let pod = Netns::new("iv-ut-rb");
        let dir = TempDir::new("iv-ut-rb-ipam");
        // A route IPAM returns that the kernel refuses (its gateway is unreachable).
        let result = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.7.0.5/24"}],
            "routes": [{"dst": "10.8.0.0/16", "gw": "192.0.2.1"}]});
        let path = fake_ipam(dir.path(), &result);
        let config = json!({"cniVersion": "1.0.0", "name": "n", "type": "ipvlan", "master": "up0",
            "ipam": {"type": "fake-ipam"}});
        let args = cmd_args_in(pod.path(), &path, config);
        let conf = config::load(&args).unwrap();
        let guard = enter(&host);
        let e = add_with(&args, &conf, &stand_in).unwrap_err();
        drop(guard);
        assert!(
            e.msg
                .contains("failed to add route '10.8.0.0/16 via 192.0.2.1 dev net1'"),
            "{}",
            e.msg
        );
        assert_eq!(ipam_calls(dir.path()), ["ADD ctr1 net1", "DEL ctr1 net1"]);
        assert!(pod.link("net1").is_none());
        assert_eq!(
            pod.exec_ok(&["ip", "-o", "link"]).lines().count(),
            1,
            "only lo is left"
        );
    }

    #[test]
    fn check_kind_compares_mode_and_flag() {
        let msg = |mode, flags| {
            let mut m = ipvlan_message(&IpvlanSpec {
                base: NewLinkBase {
                    name: "net1",
                    ..Default::default()
                },
                mode,
                flags,
            });
            for a in &mut m.attributes {
                if let netkit::packet_route::link::LinkAttribute::LinkInfo(i) = a {
                    i[0] = netkit::packet_route::link::LinkInfo::Kind(
                        netkit::packet_route::link::InfoKind::IpVlan,
                    );
                }
            }
            Link::from_message(m)
        };
        let conf = config::load(&attach::testing::cmd_args(
            json!({"mode": "l3s", "flag": "vepa"}),
            "",
        ))
        .unwrap();
        assert!(check_kind(&msg(IpVlanMode::L3S, IpVlanFlags::Vepa), &conf).is_ok());
        let e = check_kind(&msg(IpVlanMode::L2, IpVlanFlags::Vepa), &conf).unwrap_err();
        assert_eq!(
            e.msg,
            "Container IPVlan mode l2 does not match expected value: l3s"
        );
        let e = check_kind(&msg(IpVlanMode::L3S, IpVlanFlags::empty()), &conf).unwrap_err();
        assert_eq!(
            e.msg,
            "Container IPVlan flag bridge does not match expected value: vepa"
        );
        let not_ipvlan = Link::from_message(netkit::packet_route::link::LinkMessage::default());
        assert!(check_kind(&not_ipvlan, &conf)
            .unwrap_err()
            .msg
            .contains("not of type ipvlan"));
    }
}
