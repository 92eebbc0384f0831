//! CHECK: bridge, container veth, host veth and addressing as recorded in
//! prevResult. Unlike the reference, an L2-only config (no IPAM) passes.

use attach::ipam::Ipam;
use ipnetwork::IpNetwork;
use libcni::result::{CniResult, IpConfig};
use libcni::skel::CmdArgs;
use netkit::netfilter::spoofcheck::SpoofChecker;
use netkit::{Kernel, Link, Netlink};

use crate::config::NetConf;
use crate::error::BridgeError;
use attach::netfilter::Netfilter;

pub fn check<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), BridgeError> {
    ipam.call_if_set(args, &conf.ipam_type, "CHECK")?;
    let prev = args.prev_result()?.ok_or(BridgeError::PrevResultMissing)?;

    let mut host = kernel.socket()?;
    let br = host.link_by_name(&conf.bridge)?;
    if !br.is_kind("bridge") {
        return Err(BridgeError::NotABridge(conf.bridge.clone()));
    }
    if let Some(recorded) = prev.interfaces.iter().find(|i| i.name == conf.bridge) {
        if !recorded.mac.is_empty() && !recorded.mac.eq_ignore_ascii_case(&br.mac_string()) {
            return Err(BridgeError::BridgeMac {
                bridge: conf.bridge.clone(),
                recorded: recorded.mac.clone(),
                found: br.mac_string(),
            });
        }
    }
    if br.is_promisc() != conf.promisc {
        return Err(BridgeError::Promisc {
            bridge: conf.bridge.clone(),
            found: br.is_promisc(),
            expected: conf.promisc,
        });
    }

    let cont_pos = prev
        .interfaces
        .iter()
        .position(|i| i.name == args.ifname && !i.sandbox.is_empty())
        .ok_or_else(|| BridgeError::NotInPrevResult(args.ifname.clone()))?;
    let recorded = &prev.interfaces[cont_pos];
    if recorded.sandbox != args.netns {
        return Err(BridgeError::Sandbox {
            recorded: recorded.sandbox.clone(),
            netns: args.netns.clone(),
        });
    }
    let netns = kernel.open_netns(&args.netns)?;
    let mut cont = kernel.socket_in(&netns)?;
    let cont_link = cont.link_by_name(&args.ifname)?;
    if !cont_link.is_kind("veth") {
        return Err(BridgeError::NotVeth(args.ifname.clone()));
    }
    if !recorded.mac.is_empty() && !recorded.mac.eq_ignore_ascii_case(&cont_link.mac_string()) {
        return Err(BridgeError::ContainerMac {
            ifname: args.ifname.clone(),
            recorded: recorded.mac.clone(),
            found: cont_link.mac_string(),
        });
    }
    let peer = cont_link
        .link
        .ok_or_else(|| BridgeError::NoPeer(args.ifname.clone()))?;

    // The host end: a veth of prevResult, outside the sandbox, peered with the container end.
    let mut host_found = false;
    for i in prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.is_empty() && i.name != conf.bridge)
    {
        let Some(link) = host.find_link(&i.name)? else {
            continue;
        };
        if link.index != peer || !link.is_kind("veth") {
            continue;
        }
        if link.master != Some(br.index) {
            return Err(BridgeError::NotAttached {
                ifname: i.name.clone(),
                bridge: conf.bridge.clone(),
            });
        }
        if !i.mac.is_empty() && !i.mac.eq_ignore_ascii_case(&link.mac_string()) {
            return Err(BridgeError::HostMac {
                ifname: i.name.clone(),
                recorded: i.mac.clone(),
                found: link.mac_string(),
            });
        }
        host_found = true;
    }
    if !host_found {
        return Err(BridgeError::HostSideMissing(args.ifname.clone()));
    }

    check_addressing(&mut cont, &cont_link, &prev, cont_pos)?;

    if conf.ip_masq && !prev.ips.is_empty() {
        let addrs: Vec<IpNetwork> = prev.ips.iter().map(|i| i.address).collect();
        // Without a configured backend ADD picked one by what the network had then.
        nf.verify_masquerade(
            conf.ip_masq_backend,
            &addrs,
            &conf.network,
            &args.ifname,
            &args.container_id,
        )?;
    }
    if conf.macspoofchk {
        let sc = SpoofChecker::new(
            "",
            "",
            &SpoofChecker::ref_id_for(&args.container_id, &args.ifname),
        );
        if !nf.spoof_check_installed(&sc)? {
            return Err(BridgeError::SpoofCheckMissing(sc.comment()));
        }
    }
    Ok(())
}

/// prevResult's addresses of the container interface and its routes, as every main plugin
/// checks them (attach): in the main table, or where sbr moved them, so a chain with sbr after
/// bridge passes CHECK.
fn check_addressing<S: Netlink>(
    cont: &mut S,
    link: &Link,
    prev: &CniResult,
    cont_pos: usize,
) -> Result<(), BridgeError> {
    let ips: Vec<IpConfig> = prev
        .ips
        .iter()
        .filter(|i| i.interface.is_none_or(|n| n == cont_pos))
        .cloned()
        .collect();
    attach::check::interface_ips(cont, link, &ips)?;
    Ok(attach::check::routes(cont, &prev.routes, &ips)?)
}
