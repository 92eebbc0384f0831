//! CHECK: the container veth, its addresses and routes as recorded in prevResult (as the
//! reference), plus what the reference leaves out: the host end is its peer, holds the
//! gateway addresses and the host routes, and the masquerade rules exist.

use attach::check;
use attach::errors::kernel;
use ipnetwork::IpNetwork;
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;
use netkit::netfilter::ipmasq;
use netkit::{Family, Link, Socket};

use crate::config::NetConf;

fn fail(msg: impl Into<String>) -> CniError {
    CniError::internal(msg)
}

pub fn check(args: &CmdArgs, conf: &NetConf) -> Result<(), CniError> {
    check::attachment(
        args,
        &conf.ipam_type,
        "ptp: Required prevResult missing",
        |_, cont_link, prev| {
            if !cont_link.is_kind("veth") {
                return Err(fail(format!(
                    "Error: Container interface {} not of type veth/p2p",
                    cont_link.name
                )));
            }
            check_host_end(args, conf, cont_link, prev)
        },
    )
}

/// The host end: a host interface of prevResult that is the container end's peer, with the
/// gateway addresses and host routes; and the masquerade rules.
fn check_host_end(
    args: &CmdArgs,
    conf: &NetConf,
    cont_link: &Link,
    prev: &CniResult,
) -> Result<(), CniError> {
    let peer = cont_link.link.ok_or_else(|| {
        fail(format!(
            "container interface {} has no veth peer",
            cont_link.name
        ))
    })?;
    let mut host = Socket::new().map_err(kernel)?;
    let host_veth = prev
        .interfaces
        .iter()
        .filter(|i| i.sandbox.is_empty())
        .filter_map(|i| host.find_link(&i.name).ok().flatten())
        .find(|l| l.index == peer && l.is_kind("veth"))
        .ok_or_else(|| {
            fail(format!(
                "ptp: host end of {} not found among prevResult's host interfaces",
                args.ifname
            ))
        })?;
    let addrs = host
        .addresses(Some(host_veth.index), Family::Any)
        .map_err(kernel)?;
    let routes = host
        .routes(Family::Any, Some(netkit::route::TABLE_MAIN))
        .map_err(kernel)?;
    for ip in &prev.ips {
        if let Some(gw) = ip.gateway {
            if !addrs.iter().any(|a| a.ip() == gw) {
                return Err(fail(format!(
                    "ptp: gateway {gw} is not on the host end {}",
                    host_veth.name
                )));
            }
        }
        let to_container = IpNetwork::from(ip.address.ip());
        if !routes
            .iter()
            .any(|r| r.dst_network() == to_container && r.oif == Some(host_veth.index))
        {
            return Err(fail(format!(
                "ptp: no host route to {} via {}",
                ip.address.ip(),
                host_veth.name
            )));
        }
    }
    if conf.ip_masq && !prev.ips.is_empty() {
        let addrs: Vec<IpNetwork> = prev.ips.iter().map(|i| i.address).collect();
        // Without a configured backend ADD picked one by what the network had then.
        match conf.ip_masq_backend {
            Some(backend) => ipmasq::verify(
                backend,
                &addrs,
                &conf.network,
                &args.ifname,
                &args.container_id,
            ),
            None => ipmasq::verify_default(&addrs, &conf.network, &args.ifname, &args.container_id),
        }
        .map_err(|e| fail(e.to_string()))?;
    }
    Ok(())
}
