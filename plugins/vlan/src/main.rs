//! The `vlan` CNI plugin: an 802.1Q VLAN link on a host interface (the master), renamed to
//! `CNI_IFNAME` inside the container and addressed by IPAM.

mod config;

use attach::errors::kernel;
use attach::rollback::{self, Rollback};
use attach::{check, configure, ipam, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{vlan_id, vlan_message, NewLinkBase, VlanSpec};
use netkit::packet_route::link::LinkMessage;
use netkit::{Link, Socket};

use config::NetConf;

struct Vlan;

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

/// ADD with the link request built by `message` (the vlan request; tests on a kernel without
/// the 802.1Q driver pass a stand-in kind to exercise everything else).
fn add_with(
    args: &CmdArgs,
    conf: &NetConf,
    message: &dyn Fn(NewLinkBase<'_>) -> LinkMessage,
) -> Result<CniResult, CniError> {
    rollback::guarded("vlan", |rb| {
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
    // IPAM runs while the link is made.
    let (created, mut result) = ipam::add_alongside(args, &conf.ipam_type, 0, rb, |rb| {
        let created = link::create_renamed(&mut cont, &args.ifname, "vlan", |cont, tmp| {
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
    })?;
    result.cni_version = libcni::version::CURRENT.to_string();
    result.interfaces = vec![link::container_interface(&created, &args.netns)];
    configure::announce_addresses(&netns, &args.ifname, true);
    configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
    result.dns = conf.dns.clone();
    Ok(result)
}

impl Plugin for Vlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        let id = conf.vlan_id;
        add_with(args, &conf, &|base| vlan_message(&VlanSpec { base, id }))
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        link::del_with_ipam(args, &config::load(args)?.ipam_type, "vlan")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        check::attachment(
            args,
            &conf.ipam_type,
            "vlan: Required prevResult missing",
            |cont, l, _| {
                let mut host = Socket::new().map_err(kernel)?;
                master(&conf, &mut host, cont)?;
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
        link::master_status("vlan", conf.link_in_container, &conf.master)
    }
}

/// The container link is a vlan with the configured VLAN ID (and MTU, when configured).
fn check_kind(l: &Link, conf: &NetConf) -> Result<(), CniError> {
    let Some(id) = vlan_id(l) else {
        return Err(CniError::internal(format!(
            "Error: Container interface {} not of type vlan",
            l.name
        )));
    };
    if id != conf.vlan_id {
        return Err(CniError::internal(format!(
            "Error: Container interface {} has VLAN ID {id}, configured {}",
            l.name, conf.vlan_id
        )));
    }
    if let Some(mtu) = conf.mtu.filter(|m| *m != l.mtu) {
        return Err(CniError::internal(format!(
            "Error: Container interface {} has MTU {}, configured {mtu}",
            l.name, l.mtu
        )));
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
    use netkit::packet_route::link::{InfoKind, LinkAttribute, LinkInfo, MacVlanMode};
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
        let r = add_with(&args, &conf, &stand_in).unwrap();
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
        let e = add_with(&args, &conf, &stand_in).unwrap_err();
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
        let e = add_with(&args, &conf, &stand_in).unwrap_err();
        drop(guard);
        assert_eq!(
            (e.code, e.msg.as_str()),
            (999, "invalid MTU 9000, must be [0, master MTU(1500)]")
        );
    }

    #[test]
    fn check_kind_compares_vlan_id_and_mtu() {
        let link = |id, mtu| {
            let mut m = vlan_message(&VlanSpec {
                base: NewLinkBase {
                    name: "net1",
                    mtu: Some(mtu),
                    ..Default::default()
                },
                id,
            });
            for a in &mut m.attributes {
                if let LinkAttribute::LinkInfo(i) = a {
                    i[0] = LinkInfo::Kind(InfoKind::Vlan);
                }
            }
            Link::from_message(m)
        };
        let conf = config::load(&attach::testing::cmd_args(
            json!({"master": "e", "vlanId": 7, "mtu": 1400}),
            "",
        ))
        .unwrap();
        assert!(check_kind(&link(7, 1400), &conf).is_ok());
        assert!(check_kind(&link(8, 1400), &conf)
            .unwrap_err()
            .msg
            .contains("VLAN ID 8, configured 7"));
        assert!(check_kind(&link(7, 1500), &conf)
            .unwrap_err()
            .msg
            .contains("MTU 1500, configured 1400"));
    }
}
