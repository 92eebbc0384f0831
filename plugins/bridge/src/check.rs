//! CHECK: bridge, container veth, host veth and addressing as recorded in
//! prevResult. Unlike the reference, an L2-only config (no IPAM) passes.

use attach::ipam::Ipam;
use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::{CniResult, IpConfig};
use libcni::skel::CmdArgs;
use netkit::netfilter::spoofcheck::SpoofChecker;
use netkit::{Kernel, Link, Netlink};

use crate::config::NetConf;
use crate::netfilter::Netfilter;

fn fail(msg: impl Into<String>) -> CniError {
    CniError::internal(msg)
}

pub fn check<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), CniError> {
    ipam.call_if_set(args, &conf.ipam_type, "CHECK")?;
    let prev = args
        .prev_result()?
        .ok_or_else(|| fail("Required prevResult missing"))?;

    let mut host = kernel.socket().map_err(attach::errors::kernel)?;
    let br = host
        .link_by_name(&conf.bridge)
        .map_err(attach::errors::kernel)?;
    if !br.is_kind("bridge") {
        return Err(fail(format!(
            "Error: Bridge interface {} is not a bridge",
            conf.bridge
        )));
    }
    if let Some(recorded) = prev.interfaces.iter().find(|i| i.name == conf.bridge) {
        if !recorded.mac.is_empty() && !recorded.mac.eq_ignore_ascii_case(&br.mac_string()) {
            return Err(fail(format!(
                "Bridge interface {} Mac doesn't match: {} found {}",
                conf.bridge,
                recorded.mac,
                br.mac_string()
            )));
        }
    }
    if br.is_promisc() != conf.promisc {
        return Err(fail(format!(
            "Error: Bridge interface {} promisc set to {}, expected {}",
            conf.bridge,
            br.is_promisc(),
            conf.promisc
        )));
    }

    let cont_pos = prev
        .interfaces
        .iter()
        .position(|i| i.name == args.ifname && !i.sandbox.is_empty())
        .ok_or_else(|| fail(format!("Interface {} not found in prevResult", args.ifname)))?;
    let recorded = &prev.interfaces[cont_pos];
    if recorded.sandbox != args.netns {
        return Err(fail(format!(
            "Sandbox in prevResult {} doesn't match configured netns: {}",
            recorded.sandbox, args.netns
        )));
    }
    let netns = kernel
        .open_netns(&args.netns)
        .map_err(attach::errors::kernel)?;
    let mut cont = kernel.socket_in(&netns).map_err(attach::errors::kernel)?;
    let cont_link = cont
        .link_by_name(&args.ifname)
        .map_err(attach::errors::kernel)?;
    if !cont_link.is_kind("veth") {
        return Err(fail(format!(
            "Error: Container interface {} not of type veth",
            args.ifname
        )));
    }
    if !recorded.mac.is_empty() && !recorded.mac.eq_ignore_ascii_case(&cont_link.mac_string()) {
        return Err(fail(format!(
            "Interface {} Mac {} doesn't match container Mac: {}",
            args.ifname,
            recorded.mac,
            cont_link.mac_string()
        )));
    }
    let peer = cont_link.link.ok_or_else(|| {
        fail(format!(
            "Error: container interface {} has no veth peer",
            args.ifname
        ))
    })?;

    // The host end: a veth of prevResult, outside the sandbox, peered with the container end.
    let mut host_found = false;
    for i in prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.is_empty() && i.name != conf.bridge)
    {
        let Some(link) = host.find_link(&i.name).map_err(attach::errors::kernel)? else {
            continue;
        };
        if link.index != peer || !link.is_kind("veth") {
            continue;
        }
        if link.master != Some(br.index) {
            return Err(fail(format!(
                "Interface {} is not attached to bridge {}",
                i.name, conf.bridge
            )));
        }
        if !i.mac.is_empty() && !i.mac.eq_ignore_ascii_case(&link.mac_string()) {
            return Err(fail(format!(
                "Interface {} Mac {} doesn't match: {}",
                i.name,
                i.mac,
                link.mac_string()
            )));
        }
        host_found = true;
    }
    if !host_found {
        return Err(fail(format!(
            "Error: host side of veth {} not found in prevResult or not attached",
            args.ifname
        )));
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
        )
        .map_err(CniError::from)?;
    }
    if conf.macspoofchk {
        let sc = SpoofChecker::new(
            "",
            "",
            &SpoofChecker::ref_id_for(&args.container_id, &args.ifname),
        );
        if !nf.spoof_check_installed(&sc).map_err(CniError::from)? {
            return Err(fail(format!(
                "spoof-check rules {} are missing",
                sc.comment()
            )));
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
) -> Result<(), CniError> {
    let ips: Vec<IpConfig> = prev
        .ips
        .iter()
        .filter(|i| i.interface.is_none_or(|n| n == cont_pos))
        .cloned()
        .collect();
    attach::check::interface_ips(cont, link, &ips)?;
    attach::check::routes(cont, &prev.routes, &ips)
}
